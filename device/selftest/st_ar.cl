/* device/selftest/st_ar.cl: the st_ar hand-off (selftest.h) with device/ar.h whole: the control
 * (tests/sim/test_weak_ar.c). */
#define AR_SKIP 0u /* (the default, stated: the control) */
#define ST_AR_NAME st_ar
#include "st_ar.h"
