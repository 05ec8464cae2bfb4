/* device/selftest/st_persist.cl: the st_persist kernel (selftest.h) with dev_persist_arrive whole: the
 * control (tests/sim/test_weak_persist.c). */
#define DEV_PERSIST_SKIP 0u /* (the default, stated: the control) */
#define ST_PERSIST_NAME st_persist
#include "st_persist.h"
