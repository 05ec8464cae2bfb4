/* device/selftest/st_count.cl: the smallest useful kernel: one atomic add a CTA, so a test can
 * count how many dispatches (and CTAs) really ran. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_count, struct st_count_args, 64) {
  if (dev_lid() != 0) return;
  u32 t = dev_atomic_add_u32((__global u32 *)args.counter, 1u, DEV_RELAXED, DEV_SCOPE_AGENT);
  if (args.ticket) ((__global u32 *)args.ticket)[dev_cta()] = t;
}
