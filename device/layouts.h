/* device/layouts.h: where the kernels find each weight element (spec/mono.md §4): aiter's (16,16)
 * FP4 shuffle, its shuffle_scale order and the gate/up row interleave (gfx950), and the gfx942
 * copies' tile-major orders (§4.4); shared with layer/. */
#ifndef HM_LAYOUTS_H
#define HM_LAYOUTS_H

#include "dev_types.h"

/* Row of the gate/up-interleaved w13 ("GUGU", 16-row groups) for intermediate column i. */
static inline u32 hm_w13_row(u32 i, int up) { return 32u * (i / 16u) + (up ? 16u : 0u) + i % 16u; }

/* Byte offset, inside one expert's matrix of K columns, of the packed pair holding (row r,
 * k & ~1) under aiter's (16,16) shuffle: per 16-row group and 128-K step 1 KB; lane l's 16 B =
 * row l%16, K 32*(l/16)..+31 of the step (exactly the scaled MFMA's fp4 operand of lane l). */
static inline u64 hm_fp4_shuffle_offset(u32 K, u32 r, u32 k) {
  u32 step = k / 128u, kk = k % 128u, lane = (kk / 32u) * 16u + r % 16u;
  return (u64)(r / 16u) * (8u * (u64)K) + step * 1024u + lane * 16u + (kk % 32u) / 2u;
}

/* Index of the E8M0 code of (row R, K-block C) in aiter's shuffle_scale order for a matrix with
 * `cols` scale columns (a multiple of 8; rows a multiple of 32). */
static inline u64 hm_scale_shuffle_index(u32 R, u32 C, u32 cols) {
  return (((((u64)(R / 32u) * (cols / 8u) + C / 8u) * 4u + C % 4u) * 16u + R % 16u) * 2u + (C / 4u) % 2u) * 2u +
         (R / 16u) % 2u;
}

/* ---------------------------------------------------------------- gfx942 copies (§4.4)
 *
 * gfx942 has no scaled MFMA: its GEMVs run v_mfma_f32_16x16x32_fp8_fp8, whose A operand gives lane
 * 16j + r row r, K 8j..8j+7 of a 32-wide K block (tests/data/mfma/cdna3). The copies store each
 * 16-row tile so that a wave's 16-byte load a lane reads 1 KB that is contiguous across the wave. */

/* K of a gfx942 dense copy: padded with zero bytes (code 128) to whole 128-wide steps. */
static inline u32 hm_dense942_kpad(u32 K) { return (K + 127u) / 128u * 128u; }

/* Byte offset of (row r, k) in a gfx942 dense MXFP8 copy of Kp (padded) columns: per 16-row tile
 * 16*Kp bytes, per 128-K step 2 KB: the 64 lanes' first 16 B (K blocks 0, 1 of the step) in lane
 * order, then their second 16 B (blocks 2, 3); lane 16j + r's 8 B of block b are K 32b + 8j..+7. */
static inline u64 hm_dense942_offset(u32 Kp, u32 r, u32 k) {
  u32 kk = k % 128u, b = kk / 32u, lane = 16u * ((kk % 32u) / 8u) + r % 16u;
  return (u64)(r / 16u) * (16u * (u64)Kp) + (u64)(k / 128u) * 2048u + (b / 2u) * 1024u + lane * 16u +
         (b % 2u) * 8u + k % 8u;
}

/* Row of the gfx942 w13 for intermediate column i: gate row i at 2i, up row i at 2i + 1. */
static inline u32 hm_w13_942_row(u32 i, int up) { return 2u * i + (up ? 1u : 0u); }

/* Byte offset of the packed pair holding (row r, k & ~1) in a gfx942 FP4 copy of K columns (K/2
 * bytes a row: whole 64-B steps, then at most one 32-B step): per 16-row tile 8*K bytes; per 64-B
 * step (four K blocks) 1 KB, lane 16j + r's 16 B = dword j of row r's blocks 0..3 of the step;
 * a last 32-B step (two blocks) the same with 8 B a lane. */
static inline u64 hm_fp4_942_offset(u32 K, u32 r, u32 k) {
  u32 kb = K / 2u, full = kb / 64u * 64u, byte = k / 2u, lane16 = r % 16u;
  u64 tile = (u64)(r / 16u) * (16u * (u64)kb);
  if (byte < full) {
    u32 in = byte % 64u, lane = 16u * ((in % 16u) / 4u) + lane16;
    return tile + (u64)(byte / 64u) * 1024u + lane * 16u + (in / 16u) * 4u + in % 4u;
  }
  u32 in = byte - full, lane = 16u * ((in % 16u) / 4u) + lane16;
  return tile + 16u * (u64)full + lane * 8u + (in / 16u) * 4u + in % 4u;
}

/* K blocks a round of the gfx942 routed gate/up GEMV (its w13 codes' order) */
#define HM_UG_ROUND_942 8u

/* Index of the code of (row r, K block c) in a gfx942 w13 code matrix of `cols` (a multiple of 8)
 * columns: per 16-row tile and round of 8 blocks, the 16 rows' 8 codes row after row (128 B). */
static inline u64 hm_codes942_index(u32 r, u32 c, u32 cols) {
  return (u64)(r / 16u) * (16u * (u64)cols) + (u64)(c / HM_UG_ROUND_942) * (16u * HM_UG_ROUND_942) +
         (r % 16u) * HM_UG_ROUND_942 + c % HM_UG_ROUND_942;
}

/* gfx942 routed activations (X8R, MID) match the in-kernel FP4 expansion (spec/mono.md §2.6): byte
 * p of each 8-byte chunk holds the chunk's K 2p (p < 4) or 2(p - 4) + 1, the even K first. The K,
 * within its 32-wide group, of the byte stored at position p of the group. */
static inline u32 hm_chunk942_k(u32 p) { return (p & ~7u) + ((p & 7u) < 4u ? 2u * (p & 7u) : 2u * (p & 7u) - 7u); }

#endif /* HM_LAYOUTS_H */
