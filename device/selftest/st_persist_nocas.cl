/* device/selftest/st_persist_nocas.cl: the st_persist kernel (selftest.h) built with DEV_PERSIST_SKIP =
 * DEV_PERSIST_SKIP_CAS: its verdict must go wrong (tests/sim/test_weak_persist.c). */
#define DEV_PERSIST_SKIP DEV_PERSIST_SKIP_CAS
#define ST_PERSIST_NAME st_persist_nocas
#include "st_persist.h"
