/* device/kernels/seam_args.h: the mHC seam's arguments (spec/mono.md §2.1 K1.1-K1.3, §2.3), one
 * struct both seams embed: K1's (attention weights, x from the previous layer) and the FFN's. */
#ifndef HM_SEAM_ARGS_H
#define HM_SEAM_ARGS_H

#include "../dev_types.h"

#define SEAM_MAX_ROWS 48u
#define SEAM_MAX_D 8192u
#define SEAM_MIX 24u  /* mix projections a token */
#define SEAM_PMIX 25u /* 24 mix partials and the sum of squares a (slice, token) */
#define SEAM_CTA 512u /* work-items a CTA: 8 waves */

/* Every address a device address (u64), bf16 values u16 bit patterns; S rows, D hidden. The
 * mailboxes (lin, pmix, xrdy) and the norm's outputs lie in the launch's scratch; an optional
 * output is 0 when the launch does not want it. */
struct seam_args {
  /* the step's inputs */
  u64 x;        /* bf16 [S][D]: the x folded into the streams; K1 only (the FFN seam reduces it from
                 * the ranks' wo_b parts) */
  u64 res_in;   /* bf16 [S][4][D] */
  u64 post_in;  /* f32 [S][4] */
  u64 comb_in;  /* f32 [S][4 src][4 dst] */
  u64 pre_in;   /* f32 [S][4]: the previous seam's pre (the collapse's "delayed pre") */
  /* the seam's weights (hc_attn_* and attn_norm in K1, hc_ffn_* and ffn_norm in the FFN seam) */
  u64 hc_fn;    /* f32 [24][4D] */
  u64 hc_scale; /* f32 [3] */
  u64 hc_base;  /* f32 [24] */
  u64 norm_w;   /* bf16 [D] */
  /* the seam's outputs */
  u64 res_out;  /* bf16 [S][4][D] */
  u64 post_out; /* f32 [S][4] */
  u64 comb_out; /* f32 [S][4][4] */
  u64 pre_out;  /* f32 [S][4] */
  u64 lin;      /* mailbox: pairs [S][D/2], the collapsed stream, two bf16 a pair */
  u64 pmix;     /* mailbox: pairs [D/32][S][25], f32 mix partials and sums of squares a slice */
  u64 normed;   /* bf16 [S][D]: the normed rows (0: not stored) */
  u64 x8a;      /* e4m3 [S][D], rule A (0: not made) */
  u64 x8as;     /* e8m0 [S][D/32] */
  u64 x8;       /* e4m3 [S][D], rule V */
  u64 x8s;      /* e8m0 [S][D/32] */
  u64 xrdy;     /* flags u32 [S]: the token's normed row and quantisations are ready */
  u32 S, D, sinkhorn_iters;
  f32 eps, hc_eps, post_mult;
};
DEV_ARGS_CHECK(seam_args, 192);

#endif /* HM_SEAM_ARGS_H */
