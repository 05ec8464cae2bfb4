/* device/epoch.h: the epoch buffer a rank's launches share (spec/mono.md §3.4): the step number e,
 * read by every CTA, advanced by CTA 0 once all have read it; tags and parity derive from e.
 *
 * Why epochs: every hand-off (inside a launch and between ranks) carries a tag unique to the step,
 * so nothing is ever cleared between steps, every kernel argument stays a fixed address (a recorded
 * chain replays unchanged), and zeroed memory never satisfies a poll (tags start at 1).
 *
 * Layout, u32 words (DEV_EPOCH_WORDS, zero before the first launch, never cleared by the host):
 *   [0]                          e, alone in its 128-byte line
 *   [DEV_EPOCH_MARKS + b]        CTA b's mark: e + 1 once it has read e (b < DEV_EPOCH_MAX_CTAS)
 *   [DEV_EPOCH_QUEUES + s]       work-queue counters a launch may use, slot s = e & 255
 *   [DEV_EPOCH_ARRIVALS + s]     arrival counters, slot s = e & 255
 * A counter slot is zeroed by dev_epoch_end 128 epochs before its next use, so a launch finds its
 * slot zero without any clearing by the host (mono's ug / down queues).
 *
 * Tags: the launches that share one buffer give each launch kind k (1 .. kinds) the tag
 * kinds * e + k: with kinds 2, K1 tags 2e + 1 and K2 / the FFN launch 2e + 2 (mono); a standalone
 * all-reduce with its own buffer uses the K2 form. Tags never repeat until the 32-bit wrap (2^31
 * steps). Exactly one launch kind of a step advances e (the last one: K2 or the FFN launch); the
 * others only read it. Parity e & 1 selects the peer arena's half (device/ar.h).
 *
 * Host code may include this file for the constants (it has neither OpenCL nor DEV_ARCH_*). */
#ifndef HM_EPOCH_H
#define HM_EPOCH_H

#include "dev_types.h"

#define DEV_EPOCH_MARKS 32u
#define DEV_EPOCH_MAX_CTAS 1024u
#define DEV_EPOCH_QUEUES (DEV_EPOCH_MARKS + DEV_EPOCH_MAX_CTAS)
#define DEV_EPOCH_ARRIVALS (DEV_EPOCH_QUEUES + 256u)
#define DEV_EPOCH_WORDS (DEV_EPOCH_ARRIVALS + 256u)
#define DEV_EPOCH_BYTES (DEV_EPOCH_WORDS * 4u)

#if defined(__OPENCL_C_VERSION__) || defined(DEV_ARCH_GFX950) || defined(DEV_ARCH_GFX942)
#include "dev.h"

/* Test seam: EP_SKIP, a mask of EP_SKIP_* bits, removes one step of the epoch's hand-offs. It is 0
 * in every real kernel (the branches fold away); only device/selftest/st_epoch_*.cl set it, so the
 * software agent's tests can prove its model fails an epoch missing that step
 * (tests/sim/test_weak_epoch.c). The acquire of e and the release of e + 1 have no knob: every
 * launch's packet carries system-scope acquire and release fences, which already order one
 * launch's epoch after the last (docs/memory-model.md). */
#ifndef EP_SKIP
#define EP_SKIP 0u
#endif
#define EP_SKIP_HAND_BARRIER 1u /* dev_epoch_begin: e read from LDS with no barrier after lane 0 wrote it */
#define EP_SKIP_FREE_BARRIER 2u /* dev_epoch_begin: returns with no barrier after the read (word reused) */
#define EP_SKIP_MARKS 4u        /* dev_epoch_end: e + 1 published without waiting for the marks */
#define EP_SKIP_END_BARRIER 8u  /* dev_epoch_end: lane 0 publishes without the barrier after the polls */

DEV_INLINE u32 dev_epoch_tag(u32 e, u32 kind, u32 kinds) { return kinds * e + kind; }
DEV_INLINE u32 dev_epoch_tag_k1(u32 e) { return dev_epoch_tag(e, 1u, 2u); }
DEV_INLINE u32 dev_epoch_tag_k2(u32 e) { return dev_epoch_tag(e, 2u, 2u); }
DEV_INLINE u32 dev_epoch_parity(u32 e) { return e & 1u; }

/* Every work-item of every CTA, first thing (uniform control flow: it holds CTA barriers): the
 * epoch e, read once by the CTA's first work-item and handed out through `word` (a u32 of the
 * kernel's LDS struct, free again on return). With mark != 0 the CTA records that it has read e,
 * which dev_epoch_end waits for: every CTA of a launch that advances the epoch must mark; a launch
 * that only reads it (K1) passes 0. Acquire: what the launch before published is visible after. */
DEV_INLINE u32 dev_epoch_begin(__global u32 *ep, __local u32 *word, u32 mark) {
  if (dev_lid() == 0) {
    u32 e = dev_atomic_load_u32(&ep[0], DEV_ACQUIRE, DEV_SCOPE_AGENT);
    if (mark) dev_atomic_store_u32(&ep[DEV_EPOCH_MARKS + dev_cta()], e + 1u, DEV_RELAXED, DEV_SCOPE_AGENT);
    *word = e;
  }
  if (!(EP_SKIP & EP_SKIP_HAND_BARRIER)) dev_barrier();
  u32 e = *word;
  if (!(EP_SKIP & EP_SKIP_FREE_BARRIER)) dev_barrier();
  return e;
}

/* Every work-item of every CTA, last thing (uniform control flow; only CTA 0 does anything): once
 * every CTA of the launch has read e (its mark says e + 1), zero the counter slots the launch 128
 * epochs ahead will use and publish e + 1. CTA 0's work-items poll the marks in parallel: one
 * round trip for the whole grid, not one per CTA. It cannot hang: every CTA marks first thing,
 * and a persistent grid is resident by construction. The other CTAs may still be working: the
 * next launch of the queue starts only once this one has ended. */
/* The same, for a caller that knows whether it is CTA 0 (cta0, wave-uniform): a kernel too large
 * to keep its CTA id in a register to its end reads it back from LDS. */
DEV_INLINE void dev_epoch_end_as(__global u32 *ep, u32 e, u32 cta0) {
  if (!cta0) return;
  u32 n = dev_ncta();
  for (u32 b = dev_lid(); b < n && !(EP_SKIP & EP_SKIP_MARKS); b += dev_cta_size())
    DEV_POLL_UNTIL(dev_atomic_load_u32(&ep[DEV_EPOCH_MARKS + b], DEV_RELAXED, DEV_SCOPE_AGENT) == e + 1u);
  if (!(EP_SKIP & EP_SKIP_END_BARRIER)) dev_barrier();
  if (dev_lid() == 0) {
    u32 s = (e + 128u) & 255u;
    dev_atomic_store_u32(&ep[DEV_EPOCH_QUEUES + s], 0u, DEV_RELAXED, DEV_SCOPE_AGENT);
    dev_atomic_store_u32(&ep[DEV_EPOCH_ARRIVALS + s], 0u, DEV_RELAXED, DEV_SCOPE_AGENT);
    dev_atomic_store_u32(&ep[0], e + 1u, DEV_RELEASE, DEV_SCOPE_AGENT);
  }
}
DEV_INLINE void dev_epoch_end(__global u32 *ep, u32 e) { dev_epoch_end_as(ep, e, dev_cta() == 0); }

#endif /* device build */
#endif /* HM_EPOCH_H */
