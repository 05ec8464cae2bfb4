/* device/selftest/st_prim_nodrain.cl: the st_prim hand-off (selftest.h) built with HO_SKIP =
 * HO_SKIP_DRAIN: the weak model must fail it
 * (tests/sim/test_weak.c). */
#define HO_SKIP HO_SKIP_DRAIN
#define ST_PRIM_NAME st_prim_nodrain
#include "st_prim.h"
