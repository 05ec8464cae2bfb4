/* device/kernels/k1_args.h: K1's kernel arguments (the attention seam and front, spec/mono.md §2.1,
 * §5.4) and the keylist launch's, with K1's per-width scratch layout; shared by kernels and runner. */
#ifndef HM_K1_ARGS_H
#define HM_K1_ARGS_H

#include "../dev_types.h"
#include "seam_args.h"

#define K1_MAX_ROWS SEAM_MAX_ROWS
/* gfx942's cap (spec/mono.md §1.1 MAX_ROWS_GFX942, §5.3.1: 7 token tiles of 6) */
#define K1_MAX_ROWS_GFX942 42u
/* Tokens a GEMV pass: one 16x16 MFMA tile on gfx950; 6 of its 16 columns on gfx942 (§1.1 TILE:
 * its 64 KB of LDS), as the FFN launch's (ffn_args.h FFN_TILE). K1's scratch does not depend on it. */
#if defined(DEV_ARCH_GFX942) && DEV_ARCH_GFX942
#define K1_TILE 6u
#else
#define K1_TILE 16u
#endif
#define K1_CTA SEAM_CTA
#define K1_HEAD 512u       /* head dim: 448 nope (e4m3 in the record) + 64 rope (bf16) */
#define K1_NOPE 448u
#define K1_RECORD_DATA 576u
#define K1_RECORD 584u
#define K1_WINDOW 128u     /* window slots a token */
#define K1_TOPK 512u       /* compressed keys a token at most */
#define K1_KEYS 640u       /* key-table row width */
#define K1_MAX_Q 2048u     /* q latent: at most 8 columns for each of 256 work-items (K1.6) */

/* The key table's inputs and outputs (K1.4): K1's kt stage and the keylist launch read the same
 * struct and write the same format. Every index in it was checked by the host before the launch. */
struct kt_args {
  u64 positions;    /* i64 [S] */
  u64 slot_mapping; /* i64 [S]: the token's SWA slot, -1: a padding token (no keys, no record) */
  u64 swa_idx;      /* i32 [S][128]: the window's SWA slots, oldest first */
  u64 swa_lens;     /* i32 [S]: live window slots (0..128) */
  u64 t2r;          /* i32 [S]: the token's request */
  u64 topk;         /* i32 [S][512]: local compressed row ids, -1 none (ratio > 0) */
  u64 comp_bt;      /* i32 [requests][bt_stride]: the compressed cache's block table (ratio > 0) */
  u64 kt;           /* out i32 [S][640]: compressed slots | bit 31, then window slots, then -1 */
  u64 klen;         /* out i32 [2S]: kv_len, then ntopk */
  u32 S, ratio, comp_block, bt_stride; /* comp_block: compressed rows a block */
};
DEV_ARGS_CHECK(kt_args, 88);

/* K1's mailboxes, byte offsets from the width's scratch (128-byte aligned regions). */
struct hm_k1_scratch_layout {
  u64 lin, pmix;   /* the seam's (seam_args) */
  u64 x8, x8s;     /* rule V of the normed rows: e4m3 [S][D], codes [S][D/32] */
  u64 xrdy;        /* u32 [S] */
  u64 qkvp;        /* pairs [2][S][N]: f32 partial of wqkv row n over K half h for token t */
  u64 qx8, qx8s;   /* rule V of the normed q latent: e4m3 [S][Q], codes [S][Q/32] */
  u64 qrdy;        /* u32 [S] */
  u64 bytes;
};

struct k1_args {
  /* the attention seam: x = the previous layer's output, res/post/comb/pre in = the previous
   * seam's, hc_attn_* and attn_norm; outputs res_mid, post_a, comb_a, pre_a; normed = x_out (the
   * index build's bf16 normed row) or 0; x8a = 0 */
  struct seam_args seam;
  /* the key table (skipped by the index build) */
  struct kt_args kt;
  /* weights */
  u64 wqkv, wqkv_s;   /* e4m3 [Q+512][D] (wq_a rows, then wkv), e8m0 [(Q+512)/32][D/32]; gfx942: its
                       * tile-major FNUZ copy [Q+512][Dp], codes [(Q+512)/32][Dp/32] (Dp = D to x128) */
  u64 q_norm;         /* bf16 [Q] */
  u64 kv_norm;        /* bf16 [512] */
  u64 wq_b, wq_b_s;   /* e4m3 [H*512][Q] (this rank's heads), e8m0 [H*16][Q/32]; gfx942: the copy, Q to x128 */
  u64 cos_sin;        /* f32 [positions][64]: 32 cos, 32 sin */
  /* the paged SWA cache the step's records go to (gfx942: FNUZ records, spec/mono.md §2.6) */
  u64 swa;            /* u8: block b at swa + b * swa_stride */
  u64 swa_stride;     /* bytes a block (>= swa_block * 584) */
  /* outputs */
  u64 q;              /* bf16 [S][H][512]: roped q of this rank's heads */
  u64 qr_out;         /* bf16 [S][Q]: the normed q latent (index build), else 0 */
  /* state */
  u64 scratch;        /* this width's mailboxes */
  struct hm_k1_scratch_layout L;
  u64 epoch;          /* the epoch buffer (device/epoch.h) K1 shares with the launch after it */
  u64 persist;        /* struct hm_dev_persist */
  /* dims */
  u32 Q, H, swa_block;
  u32 index_build;    /* 1: x_out / qr_out, no key table */
  u32 advance;        /* 1: K1 ends the epoch itself (no K2 on this epoch buffer) */
  u32 pad[1];
  u64 timeline;       /* struct hm_tl_stamp [grid][DEV_TL_SLOTS] (dev_timeline.h), or 0: no stamps */
};
DEV_ARGS_CHECK(k1_args, 504);

/* The keylist launch: the key table from a top-k produced between the launches (§3.9). */
struct keylist_args {
  struct kt_args kt;
};
DEV_ARGS_CHECK(keylist_args, 88);

static inline u64 k1_align128(u64 v) { return (v + 127u) & ~(u64)127u; }

/* K1's scratch for S rows, D hidden, Q q latent. */
static inline void k1_scratch_layout(u32 S, u32 D, u32 Q, struct hm_k1_scratch_layout *l) {
  u64 o = 0, N = (u64)Q + K1_HEAD;
  l->lin = o, o = k1_align128(o + (u64)S * (D / 2) * 8);
  l->pmix = o, o = k1_align128(o + (u64)(D / 32) * S * SEAM_PMIX * 8);
  l->x8 = o, o = k1_align128(o + (u64)S * D);
  l->x8s = o, o = k1_align128(o + (u64)S * (D / 32));
  l->xrdy = o, o = k1_align128(o + (u64)S * 4);
  l->qkvp = o, o = k1_align128(o + 2u * (u64)S * N * 8);
  l->qx8 = o, o = k1_align128(o + (u64)S * Q);
  l->qx8s = o, o = k1_align128(o + (u64)S * (Q / 32));
  l->qrdy = o, o = k1_align128(o + (u64)S * 4);
  l->bytes = o;
}

#endif /* HM_K1_ARGS_H */
