/* device/selftest/st_trace.cl: a kernel whose trace (hsa/sim/trace.c) is known in advance: CTA 2's work-
 * items load weight lines between their waits on CTAs 0, 1 and 3 (and waits on them again, which start
 * no level), so a test can check each line's level;
 * CTA 3 loads after its flag, so a test can check what a wait on it leaves its writer to load. */
#include "../dev.h"
#include "selftest.h"

/* line i of the weights: 32 words, one 128-byte line */
DEV_INLINE u32 st_line(__global const u32 *w, u32 i) { return dev_ld_u32(&w[i * 32u], DEV_CP_NT); }

DEV_INLINE void st_wait_flag(__global u32 *f, u32 tag) {
  DEV_POLL_UNTIL(dev_atomic_load_u32(f, DEV_ACQUIRE, DEV_SCOPE_AGENT) == tag);
}

DEV_KERNEL(st_trace, struct st_trace_args, 64) {
  __global const u32 *w = (__global const u32 *)args.weights;
  __global u32 *flags = (__global u32 *)args.flags; /* CTA c's flag at flags[32 c] (a line each) */
  __global u32 *out = (__global u32 *)args.out;
  const u32 lid = dev_lid(), cta = dev_cta(), tag = args.tag;
  if (cta != 2u) {
    if (lid == 0u) dev_atomic_store_u32(&flags[32u * cta], tag, DEV_RELEASE, DEV_SCOPE_AGENT);
    /* CTA 3 goes on loading after its flag: line 11 (work-item 1) in the flag's barrier interval,
     * line 10 (every work-item) after the barrier, so a wait on the flag has 128 bytes of CTA 3's
     * weights still to come (hm_trace_wait.w_rest), whichever work-item ran first */
    if (cta == 3u) {
      u32 acc = lid == 1u ? st_line(w, 11u) : 0u;
      dev_barrier();
      acc += st_line(w, 10u);
      out[64u + lid] = acc;
    }
    return;
  }
  /* level 0: lines 0..3, every work-item before any wait */
  u32 acc = st_line(w, lid % 4u);
  /* work-item 0: two waits with no load between them (one run, both at level 0), then lines 4, 5 at 1 */
  if (lid == 0u) {
    st_wait_flag(&flags[0], tag);
    st_wait_flag(&flags[32], tag);
    acc += st_line(w, 4u) + st_line(w, 5u);
  }
  /* the barrier passes work-item 0's waits on: lines 4..7 at level 1 for every work-item */
  dev_barrier();
  acc += st_line(w, 4u + lid % 4u);
  /* work-item 1 waits at level 1, then loads lines 8 and 9 at level 2; work-item 3 loads line 8 at
   * level 1 without waiting, so line 8 is at 1 (the lowest reader's) whoever comes first */
  if (lid == 1u) {
    st_wait_flag(&flags[96], tag);
    acc += st_line(w, 9u) + st_line(w, 8u);
  }
  if (lid == 3u) acc += st_line(w, 8u);
  /* a wait that is not new starts no level: work-item 1 waits on CTA 3 again (at the same interval)
   * and loads line 12 at level 2, where it is; after a barrier work-item 2 waits on CTA 0, which
   * work-item 0 waited on before an earlier barrier, and loads line 13 at level 2 (the barrier's top),
   * not 3 */
  if (lid == 1u) {
    st_wait_flag(&flags[96], tag);
    acc += st_line(w, 12u);
  }
  dev_barrier();
  if (lid == 2u) {
    st_wait_flag(&flags[0], tag);
    acc += st_line(w, 13u);
  }
  out[lid] = acc;
}
