/* device/kernels/ffn_args.h: the FFN launch's kernel arguments and the layout of its per-width
 * scratch (the launch's mailboxes), declared once for the kernel and the host runner. */
#ifndef HM_FFN_ARGS_H
#define HM_FFN_ARGS_H

#include "../dev_types.h"
#include "ar_args.h"

/* The scratch's regions, byte offsets from its base (each 128-byte aligned so no two share a
 * cache line). Tagged pairs are u64 (value, tag); flags are u32 tags; the rest is plain data
 * published by a flag (spec/mono.md §3.3). */
struct ffn_scratch {
  u64 lin;     /* pairs [S][D/2]: the collapsed stream, two bf16 a pair */
  u64 pmix;    /* pairs [D/32][S][25]: f32 mix partials and sums of squares of each slice */
  u64 normed;  /* u16 [S][D] bf16: the FFN seam's normed rows (router input) */
  u64 x8r;     /* u8 [S][D] e4m3, rule A (routed experts' input) */
  u64 x8rs;    /* u8 [S][D/32] */
  u64 x8;      /* u8 [S][D] e4m3, rule V (shared expert's input) */
  u64 x8s;     /* u8 [S][D/32] */
  u64 xrdy;    /* u32 [S]: the token's normed row and quantisations are ready */
  u64 logit;   /* pairs [S][E][4]: f32 router logits by K quarter */
  u64 ids;     /* pairs [S][K]: the chosen experts, pick order */
  u64 wts;     /* pairs [S][K]: their f32 routing weights */
  u64 smq;     /* u8 [S][Sh] e4m3 rule V of the shared activation */
  u64 smc;     /* u32 [S][Sh/32] its codes, a word each (written by different CTAs) */
  u64 srdy;    /* u32 [Sh/32][tiles]: a shared task's 32 columns for a token tile are ready */
  u64 mid;     /* u8 [S*K][I] e4m3 rule A of the routed activation, row = pick position */
  u64 mids;    /* u32 [S*K][I/32] its codes, a word each */
  u64 ugf;     /* u32 [slot tiles][parts]: a routed gate/up unit is done */
  u64 bytes;   /* total */
};

/* Every address is a device address (u64). Shapes: S rows, D hidden, E experts, K top-k, I the
 * rank's padded routed intermediate (Ir real), Sh the rank's shared intermediate. bf16 values are
 * u16 bit patterns. */
struct ffn_args {
  /* the step's inputs */
  u64 part;     /* bf16 [S][D]: this rank's unreduced wo_b output */
  u64 res_in;   /* bf16 [S][4][D]: the attention seam's residual streams (res_mid) */
  u64 post_in;  /* f32 [S][4] */
  u64 comb_in;  /* f32 [S][4 src][4 dst] */
  u64 pre_in;   /* f32 [S][4]: the attention seam's pre (the collapse's "delayed pre") */
  /* the layer's weights (layer/hm_weights.h names) */
  u64 hc_fn;    /* f32 [24][4D] */
  u64 hc_scale; /* f32 [3] */
  u64 hc_base;  /* f32 [24] */
  u64 norm_w;   /* bf16 [D] (ffn_norm) */
  u64 gate_w;   /* bf16 [E][D] */
  u64 bias;     /* f32 [E] */
  u64 w13;      /* fp4x2 [E][2I][D/2], aiter (16,16) shuffle, gate/up 16-row interleave */
  u64 w13_s;    /* e8m0 [E][2I*D/32], shuffle_scale order, D/32 columns */
  u64 w2;       /* fp4x2 [E][D][I/2], shuffled */
  u64 w2_s;     /* e8m0 [E][D*w2_cols], shuffle_scale order */
  u64 sgu;      /* e4m3 [2Sh][D]: gate rows then up rows */
  u64 sgu_s;    /* e8m0 [2Sh/32][D/32] */
  u64 sw2;      /* e4m3 [D][Sh] */
  u64 sw2_s;    /* e8m0 [D/32][Sh/32] */
  /* the layer's outputs */
  u64 out;      /* bf16 [S][D]: x, the reduced MoE output */
  u64 res_out;  /* bf16 [S][4][D] */
  u64 post_out; /* f32 [S][4] */
  u64 comb_out; /* f32 [S][4][4] */
  u64 pre_out;  /* f32 [S][4] */
  /* the launch's state */
  u64 scratch;  /* this width's mailboxes, zero at first use */
  struct ffn_scratch L; /* their layout (ffn_scratch_layout, computed by the host) */
  u64 epoch;    /* this runner's epoch buffer (device/epoch.h) */
  u64 persist;  /* struct dev_persist: the persistent launch's arrival line */
  /* the peers (device/ar.h) */
  struct ar_link link; /* the arena table, the status word, the bound of a wait on a peer */
  u64 region_attn;     /* byte offset in a half of the attention output's all-reduce inboxes */
  u64 region_ffn;      /* byte offset in a half of the MoE output's all-reduce inboxes */
  /* dims */
  u32 S, D, E, topk;
  u32 I, Ir, Sh, w2_cols;
  u32 ug_groups, rank, tp, sinkhorn_iters;
  f32 route_scale, swiglu_limit, eps, hc_eps;
  f32 post_mult;
  u32 pad[3];
};
DEV_ARGS_CHECK(ffn_args, 504);

/* Token tiles of the MFMA GEMVs (16 tokens a 16x16 tile on gfx950). */
#define FFN_TILE 16u
#define FFN_MAX_ROWS 48u
#define FFN_MAX_TOPK 8u
#define FFN_MAX_E 384u
#define FFN_MAX_D 8192u
#define FFN_MIX 24u
#define FFN_PMIX 25u /* 24 mix partials and the sum of squares a (slice, token) */
#define FFN_CTA 512u /* work-items a CTA: 8 waves */

/* status "site" numbers of the launch's two all-reduces (kernels/ar_args.h AR_ST_SITE) */
#define FFN_SITE_ATTN 1u
#define FFN_SITE_MOE 2u

/* Routed gate/up units a slot tile: parts of 32 * ug_groups intermediate columns (only those
 * holding real columns run). Slot tiles: a slot's picks in tiles of 16; at most picks + picks/16
 * tiles (every slot one partial tile, plus the whole ones). */
static inline u32 ffn_ug_parts(u32 Ir, u32 ug_groups) { return (Ir + 32u * ug_groups - 1u) / (32u * ug_groups); }
static inline u32 ffn_tiles(u32 n) { return (n + FFN_TILE - 1u) / FFN_TILE; }
static inline u32 ffn_max_slot_tiles(u32 picks) { return picks + picks / FFN_TILE; }

static inline u64 ffn_align128(u64 v) { return (v + 127u) & ~(u64)127u; }

static inline void ffn_scratch_layout(u32 S, u32 D, u32 E, u32 K, u32 I, u32 Ir, u32 Sh, u32 ug_groups,
                                      struct ffn_scratch *l) {
  u64 o = 0, P = (u64)S * K;
  l->lin = o, o = ffn_align128(o + (u64)S * (D / 2) * 8);
  l->pmix = o, o = ffn_align128(o + (u64)(D / 32) * S * FFN_PMIX * 8);
  l->normed = o, o = ffn_align128(o + (u64)S * D * 2);
  l->x8r = o, o = ffn_align128(o + (u64)S * D);
  l->x8rs = o, o = ffn_align128(o + (u64)S * (D / 32));
  l->x8 = o, o = ffn_align128(o + (u64)S * D);
  l->x8s = o, o = ffn_align128(o + (u64)S * (D / 32));
  l->xrdy = o, o = ffn_align128(o + (u64)S * 4);
  l->logit = o, o = ffn_align128(o + (u64)S * E * 4 * 8);
  l->ids = o, o = ffn_align128(o + P * 8);
  l->wts = o, o = ffn_align128(o + P * 8);
  l->smq = o, o = ffn_align128(o + (u64)S * Sh);
  l->smc = o, o = ffn_align128(o + (u64)S * (Sh / 32) * 4);
  l->srdy = o, o = ffn_align128(o + (u64)(Sh / 32) * ffn_tiles(S) * 4);
  l->mid = o, o = ffn_align128(o + P * I);
  l->mids = o, o = ffn_align128(o + P * (I / 32) * 4);
  l->ugf = o, o = ffn_align128(o + (u64)ffn_max_slot_tiles((u32)P) * ffn_ug_parts(Ir, ug_groups) * 4);
  l->bytes = o;
}

#endif /* HM_FFN_ARGS_H */
