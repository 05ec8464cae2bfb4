/* device/selftest/st_ar_noclear.cl: the st_ar hand-off (selftest.h) built with AR_SKIP = AR_SKIP_CLEAR: on a
 * word-protocol heap the next step reads this step's pairs as arrived (tests/sim/test_weak_ar.c). */
#define AR_SKIP AR_SKIP_CLEAR
#define ST_AR_NAME st_ar_noclear
#include "st_ar.h"
