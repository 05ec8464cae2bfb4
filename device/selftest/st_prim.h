/* device/selftest/st_prim.h: the body of the st_prim kernels (selftest.h): one producer CTA and one
 * consumer CTA through device/handoff.h's primitives, compiled once per HO_SKIP variant. */
#include "../dev.h"
#include "../handoff.h"
#include "selftest.h"
#include "st_wait.h"

#ifndef ST_PRIM_NAME
#error "define ST_PRIM_NAME (the kernel's name) before including st_prim.h"
#endif

/* one level more, so ST_PRIM_NAME expands before DEV_KERNEL pastes it into its symbols */
#define ST_PRIM_KERNEL(name) DEV_KERNEL(name, struct st_prim_args, ST_PRIM_CTA)
ST_PRIM_KERNEL(ST_PRIM_NAME) {
  __global u32 *data = (__global u32 *)args.data;
  __global u64 *pairs = (__global u64 *)args.data;
  __global u32 *flag = (__global u32 *)args.flag;
  __global u32 *out = (__global u32 *)args.out;
  __global u32 *ack = (__global u32 *)args.ack;
  DEV_LDS(u32, word);
  const u32 lid = dev_lid(), n = args.n, tag = args.tag;
  if (dev_cta() == 0) {
    /* produce only once the consumer has its stale copy (flag mode) or is polling (pair mode) */
    st_await(ack, tag + 1u, DEV_SCOPE_AGENT, args.ticks);
    if (args.mode == ST_PRIM_AFTER) {
      /* the data after its flag, then idle (polling) until the consumer is done: an idle CTA's
       * pending stores land at once, but for the late ones (hsa/sim/memmodel.c) */
      ho_flag_raise(flag, tag);
      for (u32 i = lid; i < n; i += dev_cta_size()) dev_st_u32(&data[i], i * 3u + tag, DEV_CP_DEV);
      st_await(ack, tag, DEV_SCOPE_AGENT, args.ticks);
      return;
    }
    if (args.mode == ST_PRIM_FLAG) {
      for (u32 i = lid; i < n; i += dev_cta_size()) dev_st_u32(&data[i], i * 3u + tag, DEV_CP_DEV);
      ho_flag_raise(flag, tag);
    } else {
      for (u32 i = lid; i < n; i += dev_cta_size()) ho_pair_put(&pairs[i], i * 3u + tag, tag);
    }
    /* the producer stays until the consumer is done (bounded by ticks), running: an idle CTA's
     * pending stores all land at once, in program order. Flag mode: lane 0 spins with no
     * scheduling point, so the other waves' stores stay pending. Pair mode: barrier rounds, at
     * whose scheduling points pending stores land one at a time, newest or oldest first. */
    if (args.mode == ST_PRIM_FLAG) {
      if (lid == 0) {
        dev_poll_t p;
        dev_poll_init(&p);
        while (dev_atomic_load_u32(ack, DEV_RELAXED, DEV_SCOPE_AGENT) != tag && dev_poll_elapsed(&p) < args.ticks) {
        }
        dev_poll_done(&p);
      }
    } else {
      st_linger(ack, tag, DEV_SCOPE_AGENT, args.ticks, word);
    }
  } else if (dev_cta() == 1) {
    if (args.mode != ST_PRIM_PAIR) {
      u32 warm = 0;
      for (u32 i = lid; i < n; i += dev_cta_size()) warm += dev_ld_u32(&data[i], DEV_CP_PLAIN);
      out[n] = warm;
      dev_barrier();
      if (lid == 0) dev_atomic_store_u32(ack, tag + 1u, DEV_RELEASE, DEV_SCOPE_AGENT);
      /* ST_PRIM_AFTER: the consumer busy (barrier rounds, as a stage with other work) while the
       * flag goes up, so it is not idle when the producer is: an idle producer's stores land at
       * once, but for the late ones (hsa/sim/memmodel.c) */
      if (args.mode == ST_PRIM_AFTER) st_linger(flag, tag, DEV_SCOPE_AGENT, args.ticks, word);
      ho_flags_wait(flag, 1u, 1u, tag);
      for (u32 i = lid; i < n; i += dev_cta_size()) out[i] = dev_ld_u32(&data[i], DEV_CP_PLAIN);
    } else {
      dev_barrier();
      if (lid == 0) dev_atomic_store_u32(ack, tag + 1u, DEV_RELEASE, DEV_SCOPE_AGENT);
      for (u32 i = lid; i < n; i += dev_cta_size()) out[i] = ho_pair_get(&pairs[i], tag);
    }
    dev_barrier();
    if (lid == 0) dev_atomic_store_u32(ack, tag, DEV_RELEASE, DEV_SCOPE_AGENT);
  }
}
