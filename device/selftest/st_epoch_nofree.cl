/* device/selftest/st_epoch_nofree.cl: the st_epoch kernel (selftest.h) built with EP_SKIP =
 * EP_SKIP_FREE_BARRIER: the weak model must fail it (tests/sim/test_weak_epoch.c). */
#define EP_SKIP EP_SKIP_FREE_BARRIER
#define ST_EPOCH_NAME st_epoch_nofree
#include "st_epoch.h"
