/* device/handoff.h: hand-offs between the CTAs of one launch (spec/mono.md §3.3): tagged pairs
 * (value and tag in one 8-byte device-scope store) and data-then-flag, with the epoch's tag. */
#ifndef HM_HANDOFF_H
#define HM_HANDOFF_H

#include "dev.h"

/* Test seams: HO_SKIP, a mask of HO_SKIP_* bits, removes one step of a primitive. It is 0 in every
 * real kernel (the branches fold away); only device/selftest/st_prim_*.cl set it, so the software
 * agent's tests can prove its weak model fails a hand-off missing that step (tests/sim/test_weak.c).
 * The release of a flag and the acquire of its polls are proven by the instruction-level test
 * instead (tests/device/test_memseq.c): over device-scope data drained before the barrier they are
 * what the formal model needs, not what the agent's hardware-level model can observe. */
#ifndef HO_SKIP
#define HO_SKIP 0u
#endif
#define HO_SKIP_DRAIN 1u   /* ho_flag_raise: no dev_wait_stores before the barrier */
#define HO_SKIP_BARRIER 2u /* ho_flag_raise: the flag before the barrier; ho_flags_wait: no barrier */
#define HO_SKIP_PAIR 4u    /* ho_pair_put: value and tag as two 4-byte stores */
#define HO_SKIP_ACQUIRE 8u /* ho_flags_wait: relaxed polls */

/* ---------------------------------------------------------------- tagged pairs */

/* One 8-byte device-scope store of (value, tag): a consumer that sees the tag sees the value,
 * with no flag and no store drain. Integer payloads travel as raw words (an f32 path could
 * change a NaN's bits). */
DEV_INLINE void ho_pair_put(__global u64 *slot, u32 value, u32 tag) {
  if (HO_SKIP & HO_SKIP_PAIR) {
    dev_st_u32((__global u32 *)slot, value, DEV_CP_DEV);
    dev_st_u32((__global u32 *)slot + 1, tag, DEV_CP_DEV);
    return;
  }
  dev_st_u64(slot, (u64)value | (u64)tag << 32, DEV_CP_DEV);
}

/* Wait until the pair carries `tag`; its value. */
DEV_INLINE u32 ho_pair_get(__global const u64 *slot, u32 tag) {
  u64 v;
  DEV_POLL_UNTIL(((v = dev_ld_u64(slot, DEV_CP_DEV)) >> 32) == tag);
  return (u32)v;
}

/* n pairs at slot[0], slot[stride], ...: polled together (all loads of a round issued before any
 * is checked, as mono's batches of up to 12), values into out[0..n). */
#define HO_BATCH 12u
DEV_INLINE void ho_pairs_get(__global const u64 *slot, u32 stride, u32 n, u32 tag, u32 *out) {
  for (u32 i0 = 0; i0 < n; i0 += HO_BATCH) {
    u32 m = n - i0 < HO_BATCH ? n - i0 : HO_BATCH;
    dev_poll_t p;
    dev_poll_init(&p);
    for (;;) {
      u64 v[HO_BATCH];
      for (u32 i = 0; i < m; i++) v[i] = dev_ld_u64(&slot[(u64)(i0 + i) * stride], DEV_CP_DEV);
      u32 ok = 1;
      for (u32 i = 0; i < m; i++) ok &= (u32)(v[i] >> 32) == tag;
      if (ok) {
        for (u32 i = 0; i < m; i++) out[i0 + i] = (u32)v[i];
        break;
      }
      dev_poll_wait(&p);
    }
    dev_poll_done(&p);
  }
}

/* Up to HO_GET_BATCH pairs carrying `tag` at slots[i0 + i * stride] (i < n), waited for together: all
 * loads of a round in flight at once, one round trip for the batch (spec/mono.md §3.3). `out` is
 * indexed by constants after unrolling, so it stays in registers. */
#define HO_GET_BATCH 8u
DEV_INLINE void ho_get_batch(u32 tag, __global const u64 *slots, u64 i0, u64 stride, u32 n, u32 out[HO_GET_BATCH]) {
  u32 have = 0, want = n >= HO_GET_BATCH ? 0xffu : (1u << n) - 1u;
  dev_poll_t p;
  dev_poll_init(&p);
  for (;;) {
#pragma unroll
    for (u32 i = 0; i < HO_GET_BATCH; i++)
      if ((want & ~have) >> i & 1u) {
        u64 v = dev_ld_u64(&slots[i0 + i * stride], DEV_CP_DEV);
        if ((u32)(v >> 32) == tag) out[i] = (u32)v, have |= 1u << i;
      }
    if (have == want) break;
    dev_poll_wait(&p);
  }
  dev_poll_done(&p);
}

/* ---------------------------------------------------------------- data, then a flag */

/* Raise a flag over data every work-item of the CTA stored (device-scope stores): each waits for
 * its own stores (a workgroup-scope release does not drain them outside tgsplit mode, §3.3),
 * the barrier makes that CTA-wide, and one release store publishes the flag. Called by the whole
 * CTA. */
DEV_INLINE void ho_flag_raise(__global u32 *flag, u32 tag) {
  if (!(HO_SKIP & HO_SKIP_DRAIN)) dev_wait_stores();
  if (HO_SKIP & HO_SKIP_BARRIER) {
    if (dev_lid() == 0) dev_atomic_store_u32(flag, tag, DEV_RELEASE, DEV_SCOPE_AGENT);
    dev_barrier();
    return;
  }
  dev_barrier();
  if (dev_lid() == 0) dev_atomic_store_u32(flag, tag, DEV_RELEASE, DEV_SCOPE_AGENT);
}

/* Wait (the whole CTA) until flags[0], flags[stride], ... (n of them) all carry `tag`; then the
 * data they publish may be read with device-scope loads. Lanes poll one flag each with acquire
 * loads; the barrier holds the other work-items until all have arrived. */
DEV_INLINE void ho_flags_wait(__global const u32 *flags, u32 stride, u32 n, u32 tag) {
  for (u32 i = dev_lid(); i < n; i += dev_cta_size())
    DEV_POLL_UNTIL(dev_atomic_load_u32(&flags[(u64)i * stride], HO_SKIP & HO_SKIP_ACQUIRE ? DEV_RELAXED : DEV_ACQUIRE,
                                       DEV_SCOPE_AGENT) == tag);
  if (!(HO_SKIP & HO_SKIP_BARRIER)) dev_barrier();
}

/* ---------------------------------------------------------------- task tables */

/* Task i of a stage placed from CTA `base` runs on CTA (base + i) % grid (spec/mono.md §3.1):
 * this CTA's first task, then every grid-th. */
DEV_INLINE u32 ho_first_task(u32 base) {
  u32 g = dev_ncta();
  /* uniform: a scalar, so a stage's loop guard is a scalar compare, not a lane mask */
  return dev_readfirstlane_u32((dev_cta() + g - base % g) % g);
}
#define HO_FOR_TASKS(task, n, base) for (u32 task = ho_first_task(base); task < (n); task += dev_ncta())
/* The same tasks on the same CTAs, two at a time: task and task + grid (if below n) together. */
#define HO_FOR_TASK_PAIRS(task, n, base) for (u32 task = ho_first_task(base); task < (n); task += 2u * dev_ncta())

/* A placement that keeps some CTAs lighter: tasks 0 .. full - 1 go round the whole grid from CTA
 * `base` (full a multiple of the grid), the rest round its first `width` CTAs only (CTAs base ..
 * base + width - 1), so the grid's last grid - width CTAs (from base) run full / grid tasks and
 * the others more. {base, 0, grid} is HO_FOR_TASKS's. A CTA's tasks still ascend, so a stage whose
 * tasks wait only on lower ones finishes on a resident grid whatever the placement. */
struct ho_place {
  u32 base, full, width;
};
DEV_INLINE struct ho_place ho_plain(u32 base) { return (struct ho_place){base, 0u, dev_ncta()}; }
/* This CTA's tasks end below n, or below full on a CTA past `width` (it runs no task of the rest);
 * pos: its first task, ho_first_task(p.base), made once (a wave operation on the software agent). */
DEV_INLINE u32 ho_place_end(struct ho_place p, u32 n, u32 pos) { return pos < p.width ? n : (p.full < n ? p.full : n); }
#define HO_FOR_PLACED(task, n, place)                                                              \
  for (u32 task = ho_first_task((place).base), end_##task = ho_place_end((place), (n), task); task < end_##task; \
       task += task < (place).full ? dev_ncta() : (place).width)
#endif /* HM_HANDOFF_H */
