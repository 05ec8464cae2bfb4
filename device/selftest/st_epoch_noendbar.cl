/* device/selftest/st_epoch_noendbar.cl: the st_epoch kernel (selftest.h) built with EP_SKIP =
 * EP_SKIP_END_BARRIER: the weak model must fail it (tests/sim/test_weak_epoch.c). */
#define EP_SKIP EP_SKIP_END_BARRIER
#define ST_EPOCH_NAME st_epoch_noendbar
#include "st_epoch.h"
