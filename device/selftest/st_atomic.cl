/* device/selftest/st_atomic.cl: every scoped atomic of the dialect hit by every work-item,
 * so the totals are known in closed form. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_atomic, struct st_atomic_args, 256) {
  __global u32 *c = (__global u32 *)args.counters;
  u32 gid = dev_cta() * dev_cta_size() + dev_lid();
  dev_atomic_add_u32(&c[0], 1u, DEV_RELAXED, DEV_SCOPE_AGENT);     /* count */
  dev_atomic_add_u32(&c[1], gid, DEV_ACQ_REL, DEV_SCOPE_SYSTEM);   /* sum of ids */
  dev_atomic_max_u32(&c[2], gid, DEV_RELAXED, DEV_SCOPE_AGENT);    /* max id */
  dev_atomic_min_u32(&c[3], gid + 5u, DEV_RELAXED, DEV_SCOPE_AGENT); /* min id + 5 */
  dev_atomic_or_u32(&c[4], 1u << (gid & 31u), DEV_RELAXED, DEV_SCOPE_AGENT);
  /* increment by compare-and-swap */
  u32 old = dev_atomic_load_u32(&c[5], DEV_RELAXED, DEV_SCOPE_AGENT);
  for (;;) {
    u32 seen = dev_atomic_cas_u32(&c[5], old, old + 2u, DEV_ACQ_REL, DEV_SCOPE_AGENT);
    if (seen == old) break;
    old = seen;
  }
  /* exchange: the final value is some work-item's id + 1, never 0 */
  dev_atomic_xchg_u32(&c[6], gid + 1u, DEV_RELAXED, DEV_SCOPE_AGENT);
  dev_atomic_add_u64((__global u64 *)&c[8], (u64)gid << 20, DEV_RELAXED, DEV_SCOPE_AGENT);
  dev_atomic_and_u32(&c[7], ~(1u << (gid & 31u)), DEV_RELAXED, DEV_SCOPE_WG);
}
