/* device/selftest/st_epoch_nomarks.cl: the st_epoch kernel (selftest.h) built with EP_SKIP =
 * EP_SKIP_MARKS: the weak model must fail it (tests/sim/test_weak_epoch.c). */
#define EP_SKIP EP_SKIP_MARKS
#define ST_EPOCH_NAME st_epoch_nomarks
#include "st_epoch.h"
