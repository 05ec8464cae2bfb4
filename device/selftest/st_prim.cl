/* device/selftest/st_prim.cl: the st_prim hand-off (selftest.h) with the primitives whole: the control
 * (tests/sim/test_weak.c). */
#define HO_SKIP 0u /* (the default, stated: the control) */
#define ST_PRIM_NAME st_prim
#include "st_prim.h"
