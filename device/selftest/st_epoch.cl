/* device/selftest/st_epoch.cl: the st_epoch kernel (selftest.h) with device/epoch.h whole: the control
 * (tests/sim/test_weak_epoch.c). */
#define EP_SKIP 0u /* (the default, stated: the control) */
#define ST_EPOCH_NAME st_epoch
#include "st_epoch.h"
