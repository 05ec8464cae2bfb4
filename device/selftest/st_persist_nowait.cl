/* device/selftest/st_persist_nowait.cl: the st_persist kernel (selftest.h) built with DEV_PERSIST_SKIP =
 * DEV_PERSIST_SKIP_WAIT: its verdict must go wrong (tests/sim/test_weak_persist.c). */
#define DEV_PERSIST_SKIP DEV_PERSIST_SKIP_WAIT
#define ST_PERSIST_NAME st_persist_nowait
#include "st_persist.h"
