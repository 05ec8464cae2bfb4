/* device/kernels/k2_args.h: K2's kernel arguments (the attention back, spec/mono.md §2.2, then the FFN
 * launch's stages, §2.3-§2.4) and the layout of the back's mailboxes; shared by kernel and runner. */
#ifndef HM_K2_ARGS_H
#define HM_K2_ARGS_H

#include "../dev_types.h"
#include "ffn_args.h"

#define K2_HEAD 512u       /* head dim: 448 nope + 64 rope */
#define K2_NOPE 448u
#define K2_RECORD_DATA 576u
#define K2_KEYS 640u       /* key-table row width */
#define K2_GROUP_HEADS 8u  /* heads an o group (wo_a's K = 8 * 512) */
#define K2_GROUP_K (K2_GROUP_HEADS * K2_HEAD)
#define K2_MAX_HEADS 32u   /* heads a rank (TP 2) */
#define K2_MAX_CK 128u     /* keys a split unit */
/* gfx942 (64 KB of LDS, TP 4 only): 16 heads a rank, split units of 64 keys (spec/mono.md §1.2) */
#define K2_MAX_HEADS_GFX942 16u
#define K2_MAX_CK_GFX942 64u
#if defined(DEV_ARCH_GFX942) && DEV_ARCH_GFX942
#define K2_LDS_HEADS K2_MAX_HEADS_GFX942
#define K2_LDS_CK K2_MAX_CK_GFX942
#else
#define K2_LDS_HEADS K2_MAX_HEADS
#define K2_LDS_CK K2_MAX_CK
#endif

/* The back's mailboxes, byte offsets from the width's scratch base (ffn_args.scratch), placed after
 * the FFN stages' regions (k2_scratch_layout), each 128-byte aligned. */
struct hm_k2_scratch_layout {
  u64 oc;    /* bf16 [S][nch][H][512]: a chunk's unnormalised output, one split unit each */
  u64 ml;    /* f32 [S][nch][H][2]: the chunk's max m_c (log2 domain) and sum l_c */
  u64 srdy;  /* u32 [S][nch]: the split unit is done */
  u64 xo;    /* e4m3 [G][S][4096]: rule V of the combined, inverse-roped heads, o group major (a
              * wo_a group's activation rows contiguous) */
  u64 xos;   /* e8m0 [G][S][128] */
  u64 crdy;  /* u32 [S][G]: the combine of token t's group g is done */
  u64 x8b;   /* e4m3 [S][o_rows]: rule V of wo_a's output */
  u64 x8bs;  /* u32 [S][o_rows/32]: its codes, a word each (a wo_a task writes one a token) */
  u64 ardy;  /* u32 [o_rows/32]: wo_a task done */
  u64 bytes; /* end of the width's scratch */
};

/* The attention back (§2.2). Every address a device address; bf16 values u16 bit patterns. The
 * cache addressing is K1's: record r of a cache at block r / block, row r % block; data rows of
 * 576 B, then the block's scale rows of 8 B. */
struct k2_back_args {
  u64 q;           /* bf16 [S][H][512]: K1's roped q of this rank's heads */
  u64 kt;          /* i32 [S][640]: K1's (or keylist's) key table: bit 31 compressed, -1 none */
  u64 klen;        /* i32 [2S]: kv_len, then ntopk */
  u64 positions;   /* i64 [S]: rows of the RoPE table (inverse RoPE) */
  u64 swa;         /* the SWA cache's base */
  u64 swa_stride;  /* bytes a block */
  u64 comp;        /* the compressed cache's base (0 on ratio-0 layers: no key has bit 31) */
  u64 comp_stride;
  u64 sink;        /* f32 [H]: attn_sink of this rank's heads */
  u64 cos_sin;     /* f32 [positions][64]: 32 cos, 32 sin */
  u64 wo_a, wo_a_s; /* e4m3 [o_rows][4096], e8m0 [o_rows/32][128] */
  u64 wo_b, wo_b_s; /* e4m3 [D][o_rows], e8m0 [D/32][o_rows/32] */
  struct hm_k2_scratch_layout L;
  u32 H;           /* heads of this rank (16 or 32; tiny configs alike) */
  u32 o_lora;      /* wo_a rows a group (1024; 256 tiny) */
  u32 ck;          /* keys a split unit: 64 or 128 (hm_attn_chunk_keys) */
  u32 swa_block, comp_block; /* records a block */
  u32 qk_scale;    /* f32 bits of 512^-0.5 * log2 e */
  u32 pad[2];
};
DEV_ARGS_CHECK(k2_back_args, 224);

/* K2: the FFN launch's arguments first (its stages read them through the same struct: ffn.part is
 * unused, wo_b pushes its rows itself), then the back's. */
struct k2_args {
  struct ffn_args ffn;
  struct k2_back_args back;
};
DEV_ARGS_CHECK(k2_args, 824);

static inline u32 k2_nchunks(u32 ck) { return K2_KEYS / ck; }

/* The back's regions after the FFN stages' `base` bytes: S rows, H heads, o_rows = H / 8 * o_lora. */
static inline void k2_scratch_layout(u64 base, u32 S, u32 H, u32 o_lora, u32 ck, struct hm_k2_scratch_layout *l) {
  u64 o = ffn_align128(base), nch = k2_nchunks(ck), G = H / K2_GROUP_HEADS, orows = (u64)G * o_lora;
  l->oc = o, o = ffn_align128(o + (u64)S * nch * H * K2_HEAD * 2);
  l->ml = o, o = ffn_align128(o + (u64)S * nch * H * 8);
  l->srdy = o, o = ffn_align128(o + (u64)S * nch * 4);
  l->xo = o, o = ffn_align128(o + (u64)S * H * K2_HEAD);
  l->xos = o, o = ffn_align128(o + (u64)S * H * (K2_HEAD / 32));
  l->crdy = o, o = ffn_align128(o + (u64)S * G * 4);
  l->x8b = o, o = ffn_align128(o + (u64)S * orows);
  l->x8bs = o, o = ffn_align128(o + (u64)S * (orows / 32) * 4);
  l->ardy = o, o = ffn_align128(o + (orows / 32) * 4);
  l->bytes = o;
}

#endif /* HM_K2_ARGS_H */
