/* device/selftest/st_ar_devscope.cl: the st_ar hand-off (selftest.h) built with AR_SKIP = AR_SKIP_SYSTEM: the
 * weak model must fail it (tests/sim/test_weak_ar.c). */
#define AR_SKIP AR_SKIP_SYSTEM
#define ST_AR_NAME st_ar_devscope
#include "st_ar.h"
