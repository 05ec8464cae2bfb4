/* device/selftest/st_pair.cl: an aligned 8-byte system-scope store is single-copy atomic (a value
 * and its tag travel in one store, spec/mono.md §3.3): a reader never sees the tag without its value. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_pair, struct st_pair_args, 64) {
  __global u64 *slot = (__global u64 *)args.slot;
  __global u32 *ready = (__global u32 *)args.ready;
  __global u32 *out = (__global u32 *)args.out;
  u32 lid = dev_lid();
  if (dev_cta() == 0) {
    if (lid == 0) {
      /* store only once the reader is reading, so it cannot miss the window below */
      dev_poll_t p;
      dev_poll_init(&p);
      while (dev_atomic_load_u32(ready, DEV_RELAXED, DEV_SCOPE_SYSTEM) == 0u && dev_poll_elapsed(&p) < 50u * args.ticks)
        dev_poll_wait(&p);
      dev_poll_done(&p);
      dev_st_u64(slot, ((u64)1u << 32) | 1u, DEV_CP_SYS);
    }
    /* lane 1 then runs for `ticks` with no scheduling point: on the software agent the CTA's
     * pending stores land one entry per scheduling point, so a pair stored as two separate
     * words would stay half-landed for that long */
    dev_barrier();
    if (lid == 1) {
      u64 t0 = dev_realtime();
      while (dev_realtime() - t0 < args.ticks) {
      }
    }
  } else if (dev_cta() == 1 && lid == 0) {
    dev_atomic_store_u32(ready, 1u, DEV_RELAXED, DEV_SCOPE_SYSTEM);
    dev_poll_t p;
    dev_poll_init(&p);
    u64 v = dev_ld_u64(slot, DEV_CP_SYS);
    while ((u32)(v >> 32) != 1u && dev_poll_elapsed(&p) < 50u * args.ticks) {
      dev_poll_wait(&p);
      v = dev_ld_u64(slot, DEV_CP_SYS);
    }
    dev_poll_done(&p);
    out[0] = (u32)(v >> 32);
    out[1] = (u32)v;
  }
}
