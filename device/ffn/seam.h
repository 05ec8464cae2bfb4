/* device/ffn/seam.h: the FFN launch's seam (spec/mono.md §2.3): the push of this rank's wo_b part,
 * then device/seam.h's slice (x reduced in rank order from the ranks' parts), gate and norm. */
#ifndef HM_FFN_SEAM_H
#define HM_FFN_SEAM_H

#include "ffn.h"

/* ---------------------------------------------------------------- push (before any slice) */

/* This rank's wo_b part of the slices this CTA reduces, pushed to every rank first, so no slice
 * waits on a push its own rank has not issued (the pairs of slice j are columns 32j..32j+31). */
DEV_INLINE void ffn_push_parts(const struct ffn_ctx *c) {
  const u32 S = c->a->S, P = c->a->D / 2u;
  __global const u32 *part = (__global const u32 *)c->a->part;
  struct ar_view attn;
  ffn_view(c, &attn, FFN_SITE_ATTN);
  FFN_FOR_TASKS(j, ffn_ns(c), 0u) {
    for (u32 i = dev_lid(); i < S * 16u; i += FFN_CTA) {
      u32 f = (i / 16u) * P + 16u * j + i % 16u;
      ar_push(&attn, f, part[f]);
    }
  }
  /* the burst out before any wait (device/ar.h's advice; on the GPU about the round trip the
   * peers need anyway) */
  dev_wait_stores();
}

/* ---------------------------------------------------------------- the seam's stages */

/* Slice j with x the rank-order reduce of the ranks' parts (the attention output's all-reduce). */
DEV_INLINE void ffn_slice(struct ffn_ctx *c, __local struct ffn_lds *lds, u32 j) {
  struct ar_view attn;
  ffn_view(c, &attn, FFN_SITE_ATTN);
#if defined(DEV_GPU) && DEV_ARCH_GFX942
  /* the slice's index in a VGPR: gfx942 leaves a kernel fewer SGPRs (XNACK), and K2's slice, its
   * view of the four ranks' inboxes held in SGPRs, spilled one there */
  __asm__ volatile("" : "+v"(j));
#endif
  seam_slice(&c->a->seam, c->tag, &lds->u.slice, j, &attn, &c->ok);
}
DEV_INLINE void ffn_gate(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 t) {
  seam_gate(&c->a->seam, c->tag, &lds->u.gate, t);
}
/* The normed row (router input), rule A (routed experts) and rule V (shared expert). */
DEV_INLINE void ffn_norm(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 t) {
  seam_norm(&c->a->seam, c->tag, &lds->u.norm, t);
}

#endif /* HM_FFN_SEAM_H */
