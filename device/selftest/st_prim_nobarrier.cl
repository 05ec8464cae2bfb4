/* device/selftest/st_prim_nobarrier.cl: the st_prim hand-off (selftest.h) built with HO_SKIP =
 * HO_SKIP_BARRIER: the weak model must fail it
 * (tests/sim/test_weak.c). */
#define HO_SKIP HO_SKIP_BARRIER
#define ST_PRIM_NAME st_prim_nobarrier
#include "st_prim.h"
