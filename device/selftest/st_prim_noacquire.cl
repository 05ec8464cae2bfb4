/* device/selftest/st_prim_noacquire.cl: the st_prim hand-off (selftest.h) built with HO_SKIP =
 * HO_SKIP_ACQUIRE: the weak model must fail it
 * (tests/sim/test_weak.c). */
#define HO_SKIP HO_SKIP_ACQUIRE
#define ST_PRIM_NAME st_prim_noacquire
#include "st_prim.h"
