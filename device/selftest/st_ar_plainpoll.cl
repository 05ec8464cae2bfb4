/* device/selftest/st_ar_plainpoll.cl: the st_ar hand-off (selftest.h) built with AR_SKIP = AR_SKIP_POLL: the
 * weak model must fail it (tests/sim/test_weak_ar.c). */
#define AR_SKIP AR_SKIP_POLL
#define ST_AR_NAME st_ar_plainpoll
#include "st_ar.h"
