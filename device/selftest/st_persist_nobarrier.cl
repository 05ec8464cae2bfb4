/* device/selftest/st_persist_nobarrier.cl: the st_persist kernel (selftest.h) built with DEV_PERSIST_SKIP =
 * DEV_PERSIST_SKIP_BARRIER: its verdict must go wrong (tests/sim/test_weak_persist.c). */
#define DEV_PERSIST_SKIP DEV_PERSIST_SKIP_BARRIER
#define ST_PERSIST_NAME st_persist_nobarrier
#include "st_persist.h"
