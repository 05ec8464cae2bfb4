/* device/selftest/st_prim_split.cl: the st_prim hand-off (selftest.h) built with HO_SKIP =
 * HO_SKIP_PAIR: the weak model must fail it
 * (tests/sim/test_weak.c). */
#define HO_SKIP HO_SKIP_PAIR
#define ST_PRIM_NAME st_prim_split
#include "st_prim.h"
