/* device/kernels/ffn_args.h: the FFN launch's kernel arguments and the layout of its per-width
 * scratch (the launch's mailboxes), declared once for the kernel and the host runner. */
#ifndef HM_FFN_ARGS_H
#define HM_FFN_ARGS_H

#include "../dev_types.h"
#include "ar_args.h"
#include "seam_args.h"

/* The scratch's regions, byte offsets from its base (each 128-byte aligned so no two share a
 * cache line). Tagged pairs are u64 (value, tag); flags are u32 tags; the rest is plain data
 * published by a flag (spec/mono.md §3.3). */
struct hm_ffn_scratch_layout {
  u64 lin;     /* pairs [S][D/2]: the collapsed stream, two bf16 a pair */
  u64 pmix;    /* pairs [D/32][S][25]: f32 mix partials and sums of squares of each slice */
  u64 normed;  /* u16 [S][D] bf16: the FFN seam's normed rows (router input) */
  u64 x8r;     /* u8 [S][D] e4m3, rule A (routed experts' input; gfx942: FNUZ bytes, codes + 1, each
                * 8-byte chunk even K first) */
  u64 x8rs;    /* u8 [S][D/32] */
  u64 x8;      /* u8 [S][D] e4m3, rule V (shared expert's input) */
  u64 x8s;     /* u8 [S][D/32] */
  u64 xrdy;    /* u32 [S]: the token's normed row and quantisations are ready */
  u64 logit;   /* pairs [S][E][4]: f32 router logits by K quarter */
  u64 ids;     /* pairs [S][K]: the chosen experts, pick order */
  u64 wts;     /* pairs [S][K]: their f32 routing weights */
  u64 smq;     /* u8 [S][Sh] e4m3 rule V of the shared activation */
  u64 smc;     /* u32 [S][Sh/32] its codes, a word each (written by different CTAs) */
  u64 shv;     /* pairs [S][Sh/32][16]: the even half-task's f32 activations of a group, for the odd
                * half to quantise with its own (device/ffn/shared.h) */
  u64 srdy;    /* u32 [Sh/32][tiles]: a shared group's 32 columns for a token tile are ready */
  u64 mid;     /* u8 [S*K][I] e4m3 rule A of the routed activation, row = pick position (gfx942:
                * FNUZ, I = Ir, each 8-byte chunk even K first, layouts.h hm_chunk942_k) */
  u64 mids;    /* u32 [S*K][I/32] its codes, a word each */
  u64 ugv;     /* pairs [S*K][ug groups][16]: a gate/up unit's even half's f32 activations of a
                * pick, for the odd half to quantise with its own (device/ffn/routed.h) */
  u64 ugf;     /* u32 [slot tiles][parts]: a routed gate/up unit is done */
  u64 bytes;   /* total */
};

/* Every address is a device address (u64). Shapes: S rows, D hidden, E experts, K top-k, I the
 * rank's padded routed intermediate (Ir real), Sh the rank's shared intermediate. bf16 values are
 * u16 bit patterns. */
struct ffn_args {
  /* the step's input: this rank's unreduced wo_b output, bf16 [S][D] */
  u64 part;
  /* the FFN seam (device/seam.h): res_in = the attention seam's streams (res_mid), post/comb/pre
   * in = its mixes, hc_ffn_* and ffn_norm, the layer's res/post/comb/pre outputs; its mailboxes
   * and quantised rows in this launch's scratch (x unused: x is reduced from the ranks' parts) */
  struct seam_args seam;
  /* the layer's weights (layer/weights/hm_weights.h names) */
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
  /* the layer's output */
  u64 out;      /* bf16 [S][D]: x, the reduced MoE output */
  /* the launch's state */
  u64 scratch;  /* this width's mailboxes, zero at first use */
  struct hm_ffn_scratch_layout L; /* their layout (ffn_scratch_layout, computed by the host) */
  u64 epoch;    /* this runner's epoch buffer (device/epoch.h) */
  u64 persist;  /* struct hm_dev_persist: the persistent launch's arrival line */
  u64 timeline; /* struct hm_tl_stamp [grid][DEV_TL_SLOTS] (dev_timeline.h), or 0: no stamps */
  /* the peers (device/ar.h) */
  struct hm_ar_link link; /* the arena table, the status word, the bound of a wait on a peer */
  u64 region_attn;     /* byte offset in a half of the attention output's all-reduce inboxes */
  u64 region_ffn;      /* byte offset in a half of the MoE output's all-reduce inboxes */
  /* dims */
  u32 S, D, E, topk;
  u32 I, Ir, Sh, w2_cols;
  u32 ug_groups, rank, tp;
  f32 route_scale, swiglu_limit;
  u32 pad[1];
};
DEV_ARGS_CHECK(ffn_args, 600);

/* Token tiles of the GEMVs (the router's and the shared expert's passes): 16 tokens a 16x16 tile on
 * gfx950, 6 on gfx942 (spec/mono.md §1.1 TILE: its 64 KB of LDS). The host, built for both, sizes
 * the scratch for the smaller. A slot tile of the routed experts is 16 picks on both. */
#define FFN_TILE_GFX950 16u
#define FFN_TILE_GFX942 6u
#if defined(DEV_ARCH_GFX942) && DEV_ARCH_GFX942
#define FFN_TILE FFN_TILE_GFX942
#else
#define FFN_TILE FFN_TILE_GFX950
#endif
#define FFN_PICK_TILE 16u
#define FFN_MAX_ROWS SEAM_MAX_ROWS
/* gfx942's cap (spec/mono.md §1.1 MAX_ROWS_GFX942, §5.3.1: 7 tiles of 6) */
#define FFN_MAX_ROWS_GFX942 42u
#define FFN_MAX_TOPK 8u
#define FFN_MAX_E 384u
#define FFN_MAX_D SEAM_MAX_D
#define FFN_PMIX SEAM_PMIX
#define FFN_CTA SEAM_CTA

/* status "site" numbers of the launch's two all-reduces (kernels/ar_args.h AR_WHERE_*) */
#define FFN_SITE_ATTN AR_WHERE_ATTN
#define FFN_SITE_MOE AR_WHERE_MOE

/* Routed gate/up units a slot tile: groups of 32 intermediate columns (only those holding real
 * columns run), whatever ug_groups (which sets the K slices: docs/decisions.md, "A gate/up unit is
 * one group"). Slot tiles: a slot's picks in tiles of 16; at most picks + picks/16 tiles (every
 * slot one partial tile, plus the whole ones). */
static inline u32 ffn_ug_groups_of(u32 Ir) { return (Ir + 31u) / 32u; }
static inline u32 ffn_tiles_of(u32 n, u32 tile) { return (n + tile - 1u) / tile; }
static inline u32 ffn_tiles(u32 n) { return ffn_tiles_of(n, FFN_TILE); }
static inline u32 ffn_max_slot_tiles(u32 picks) { return picks + picks / FFN_PICK_TILE; }

static inline u64 ffn_align128(u64 v) { return (v + 127u) & ~(u64)127u; }

static inline void ffn_scratch_layout(u32 S, u32 D, u32 E, u32 K, u32 I, u32 Ir, u32 Sh,
                                      struct hm_ffn_scratch_layout *l) {
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
  l->shv = o, o = ffn_align128(o + (u64)S * (Sh / 2) * 8);
  l->srdy = o, o = ffn_align128(o + (u64)(Sh / 32) * ffn_tiles_of(S, FFN_TILE_GFX942) * 4);
  l->mid = o, o = ffn_align128(o + P * I);
  l->mids = o, o = ffn_align128(o + P * (I / 32) * 4);
  l->ugv = o, o = ffn_align128(o + P * ffn_ug_groups_of(Ir) * 16 * 8);
  l->ugf = o, o = ffn_align128(o + (u64)ffn_max_slot_tiles((u32)P) * ffn_ug_groups_of(Ir) * 4);
  l->bytes = o;
}

#endif /* HM_FFN_ARGS_H */
