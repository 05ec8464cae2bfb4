/* device/layouts.h: where the kernels find each weight element (spec/mono.md §4): aiter's (16,16)
 * FP4 shuffle, its shuffle_scale order and the gate/up row interleave; shared with layer/. */
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

#endif /* HM_LAYOUTS_H */
