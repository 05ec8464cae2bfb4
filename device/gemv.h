/* device/gemv.h: the GEMV building blocks of the layer kernels: operands of the matrix instructions
 * in AMD's register layouts (gfx950's scaled MFMA; gfx942's unscaled fp8 MFMA a 32-wide K block,
 * spec/mono.md §2.6), the §2.0 K order, wave-ordered partial sums. */
#ifndef HM_GEMV_H
#define HM_GEMV_H

#include "dev.h"
#include "layouts.h"

/* E8M0 1.0: the scale of a zero (ragged) K step (spec/mono.md §2.0). */
#define GEMV_UNIT_SCALE 127u

#if DEV_HAS_SCALED_MFMA || DEV_ARCH_GFX942

/* 16 bytes of buffer b at off with cache policy cp (a builtin's policy must be a constant: a
 * variable one picks among them). */
DEV_INLINE u32x4 gemv_ld16(dev_buf_t b, u32 off, int cp) {
  if (cp == DEV_CP_DEV) return dev_buf_ld_u32x4(b, off, DEV_CP_DEV);
  if (cp == DEV_CP_NT) return dev_buf_ld_u32x4(b, off, DEV_CP_NT);
  return dev_buf_ld_u32x4(b, off, DEV_CP_PLAIN);
}

/* ---------------------------------------------------------------- dense MXFP8 tiles */

/* A dense MXFP8 matrix [N][K] (e4m3 bytes) with E8M0 codes [N/32][K/32] (32x32 blocks); on gfx942
 * its tile-major copy [N][Kp] with FNUZ bytes and codes [N/32][Kp/32] (spec/mono.md §4.4). */
typedef struct {
  dev_buf_t w, s;
  u32 K;
#if DEV_ARCH_GFX942
  u32 Kp; /* K padded to whole 128-wide steps (gfx942's tile-major copies, device/layouts.h) */
#endif
} gemv_mx8;

/* Buffer sizes round up to whole dwords: the range check is per dword, and a table of codes
 * whose length is not a multiple of 4 must still yield its last codes (the runner's allocations
 * are page-granular, so the bytes past the end exist). */
DEV_INLINE u32 gemv_dwords(u32 bytes) { return (bytes + 3u) & ~3u; }

DEV_INLINE gemv_mx8 gemv_mx8_of(__global const u8 *w, __global const u8 *s, u32 N, u32 K) {
  gemv_mx8 m;
#if DEV_ARCH_GFX942
  m.Kp = hm_dense942_kpad(K);
  m.w = dev_buf(w, N * m.Kp);
  m.s = dev_buf(s, gemv_dwords((N / 32u) * (m.Kp / 32u)));
#else
  m.w = dev_buf(w, N * K);
  m.s = dev_buf(s, gemv_dwords((N / 32u) * ((K + 31u) / 32u)));
#endif
  m.K = K;
  return m;
}

/* Activations [S][K] (e4m3) with codes [S][K/32], written by an earlier stage (device scope). */
typedef struct {
  dev_buf_t x, s;
  u32 K, S;
  u32 words; /* codes a u32 each (written by different CTAs, so never sharing a word) */
} gemv_act;

DEV_INLINE gemv_act gemv_act_of(__global const u8 *x, __global const u8 *s, u32 S, u32 K) {
  gemv_act a;
  a.x = dev_buf(x, S * K);
  a.s = dev_buf(s, gemv_dwords(S * (K / 32u)));
  a.K = K, a.S = S, a.words = 0;
  return a;
}
DEV_INLINE gemv_act gemv_act_of_words(__global const u8 *x, __global const u32 *s, u32 S, u32 K) {
  gemv_act a;
  a.x = dev_buf(x, S * K);
  a.s = dev_buf(s, 4u * S * (K / 32u));
  a.K = K, a.S = S, a.words = 1;
  return a;
}

/* Byte i of a buffer, read as part of its dword. */
DEV_INLINE u32 gemv_byte(dev_buf_t b, u32 i, int cp) {
  u32 w = cp == DEV_CP_DEV ? dev_buf_ld_u32(b, i & ~3u, DEV_CP_DEV) : dev_buf_ld_u32(b, i & ~3u, DEV_CP_NT);
  return (w >> (8u * (i & 3u))) & 0xffu;
}

#endif /* DEV_HAS_SCALED_MFMA || DEV_ARCH_GFX942 */

#if DEV_HAS_SCALED_MFMA

/* ---------------------------------------------------------------- operands of the scaled MFMA */

/* v_mfma_scale_f32_16x16x128_f8f6f4, 8-bit operand of lane l (hsa/sim/isa/hm_isa.h): row or
 * column l%16; K bytes 16(l/16)..+15 then 64+16(l/16)..+15 of the 128-wide step. Loaded from a
 * row-major [rows][K] byte matrix through buffer b (row's first byte at `row_off`), zero past K. */
DEV_INLINE i32x8 gemv_ld_fp8(dev_buf_t b, u32 row_off, u32 K, u32 step, u32 lane, int cp) {
  u32 k0 = 128u * step + 16u * (lane / 16u);
  u32x4 lo = 0, hi = 0;
  if (k0 < K) lo = gemv_ld16(b, row_off + k0, cp);
  if (k0 + 64u < K) hi = gemv_ld16(b, row_off + k0 + 64u, cp);
  i32x8 r;
  r[0] = (i32)lo[0], r[1] = (i32)lo[1], r[2] = (i32)lo[2], r[3] = (i32)lo[3];
  r[4] = (i32)hi[0], r[5] = (i32)hi[1], r[6] = (i32)hi[2], r[7] = (i32)hi[3];
  return r;
}

/* fp4 operand of lane l: 32 K (16 bytes) of row l%16, K block l/16 of the step; in aiter's
 * (16,16) shuffle those 16 bytes sit at step*1024 + 16*l of the row group (device/layouts.h). */
DEV_INLINE i32x8 gemv_ld_fp4(dev_buf_t b, u32 group_off, u32 step, u32 lane) {
  u32x4 v = dev_buf_ld_u32x4(b, group_off + 1024u * step + 16u * lane, DEV_CP_NT);
  i32x8 r = 0;
  r[0] = (i32)v[0], r[1] = (i32)v[1], r[2] = (i32)v[2], r[3] = (i32)v[3];
  return r;
}

DEV_INLINE f32x4 gemv_mfma_fp8(i32x8 a, i32x8 b, f32x4 c, u32 sa, u32 sb) {
  return dev_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, DEV_FMT_FP8, DEV_FMT_FP8, 0, sa, 0, sb);
}
DEV_INLINE f32x4 gemv_mfma_fp4(i32x8 a, i32x8 b, f32x4 c, u32 sa, u32 sb) {
  return dev_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, DEV_FMT_FP4, DEV_FMT_FP8, 0, sa, 0, sb);
}

/* This lane's scale byte for (row, K block) of a dense weight; unit scale past K. */
DEV_INLINE u32 gemv_mx8_scale(const gemv_mx8 *m, u32 row, u32 block) {
  u32 cols = (m->K + 31u) / 32u;
  if (block >= cols) return GEMV_UNIT_SCALE;
  return gemv_byte(m->s, (row / 32u) * cols + block, DEV_CP_NT);
}

/* The B operand (activation tokens t0..t0+15, lane's column l%16) and its scale for one step;
 * columns past S are zero. */
DEV_INLINE i32x8 gemv_ld_act(const gemv_act *a, u32 t0, u32 step, u32 lane) {
  u32 t = t0 + lane % 16u;
  if (t >= a->S) return (i32x8)0;
  return gemv_ld_fp8(a->x, t * a->K, a->K, step, lane, DEV_CP_DEV);
}
DEV_INLINE u32 gemv_act_scale(const gemv_act *a, u32 t0, u32 step, u32 lane) {
  u32 t = t0 + lane % 16u, block = 4u * step + lane / 16u, cols = a->K / 32u;
  if (t >= a->S || block >= cols) return GEMV_UNIT_SCALE;
  if (a->words) return dev_buf_ld_u32(a->s, 4u * (t * cols + block), DEV_CP_DEV) & 0xffu;
  return gemv_byte(a->s, t * cols + block, DEV_CP_DEV);
}

/* One wave's part of rows row0..row0+15 of m times tokens t0..t0+15 of x: the K steps
 * wave, wave+8, ... chained in one accumulator (spec/mono.md §2.0 GEMV K order). */
DEV_INLINE f32x4 gemv_mx8_wave(const gemv_mx8 *m, const gemv_act *x, u32 row0, u32 t0, u32 wave) {
  u32 lane = dev_lane(), steps = (m->K + 127u) / 128u, row = row0 + lane % 16u;
  f32x4 acc = 0;
  for (u32 st = wave; st < steps; st += 8u) {
    i32x8 a = gemv_ld_fp8(m->w, row * m->K, m->K, st, lane, DEV_CP_NT);
    i32x8 b = gemv_ld_act(x, t0, st, lane);
    u32 sa = gemv_mx8_scale(m, row0 + lane % 16u, 4u * st + lane / 16u);
    u32 sb = gemv_act_scale(x, t0, st, lane);
    acc = gemv_mfma_fp8(a, b, acc, sa, sb);
  }
  return acc;
}

/* ---------------------------------------------------------------- a GEMV task's weights, held in registers */

/* One wave's share of a 16-row tile of a dense MXFP8 matrix over K steps [s0, s0 + n): the steps
 * s0 + wave, s0 + wave + 8, ... (spec/mono.md §2.0), loaded before the task waits for its
 * activations, kept in registers across token tiles. */
#define GEMV_MAX_WSTEPS 4u /* 128-wide K steps a wave holds of one row tile (K <= 4096) */

typedef struct {
  i32x8 w[GEMV_MAX_WSTEPS];
  u32 s[GEMV_MAX_WSTEPS];
} gemv_wtile;

DEV_INLINE void gemv_wtile_load(gemv_wtile *t, const gemv_mx8 *m, u32 row0, u32 s0, u32 n, u32 wave, u32 lane) {
  u32 row = row0 + lane % 16u;
#pragma unroll
  for (u32 i = 0; i < GEMV_MAX_WSTEPS; i++) {
    u32 st = wave + 8u * i;
    t->w[i] = 0, t->s[i] = GEMV_UNIT_SCALE;
    if (st < n) {
      t->w[i] = gemv_ld_fp8(m->w, row * m->K, m->K, s0 + st, lane, DEV_CP_NT);
      t->s[i] = gemv_mx8_scale(m, row, 4u * (s0 + st) + lane / 16u);
    }
  }
}

/* The wave's chain for tokens t0..t0+15: its steps in ascending order in one accumulator. */
DEV_INLINE f32x4 gemv_wtile_run(const gemv_wtile *t, const gemv_act *x, u32 t0, u32 s0, u32 n, u32 wave, u32 lane) {
  f32x4 acc = 0;
#pragma unroll
  for (u32 i = 0; i < GEMV_MAX_WSTEPS; i++) {
    u32 st = wave + 8u * i;
    if (st < n) {
      i32x8 b = gemv_ld_act(x, t0, s0 + st, lane);
      acc = gemv_mfma_fp8(t->w[i], b, acc, t->s[i], gemv_act_scale(x, t0, s0 + st, lane));
    }
  }
  return acc;
}

#endif /* DEV_HAS_SCALED_MFMA */

/* ---------------------------------------------------------------- gfx942: an unscaled MFMA a K block */

#if DEV_ARCH_GFX942

/* Token columns of a gfx942 GEMV pass (spec/mono.md §1.1 TILE = 6: 64 KB of LDS); the MFMA's
 * other columns are zero. */
#define GEMV_TOKENS_942 6u

/* 2^n, also where n leaves f32's normal range (v_ldexp_f32; the host's ldexpf) */
DEV_INLINE f32 gemv_pow2(i32 n) { return __builtin_ldexpf(1.0f, n); }

/* acc += d x 2^(ca + cb - 254), an fma an element: the product of two FNUZ blocks scaled by their
 * codes, rounded once into the chain (spec/mono.md §2.6). */
DEV_INLINE f32x4 gemv942_fma(f32x4 d, f32 f, f32x4 acc) {
  for (u32 q = 0; q < 4u; q++) acc[q] = dev_fma(d[q], f, acc[q]);
  return acc;
}

/* One 32-wide K block: v_mfma_f32_16x16x32_fp8_fp8 with a zero accumulator. */
DEV_INLINE f32x4 gemv942_block(u64 a, u64 b) { return dev_mfma_f32_16x16x32_fp8(a, b, (f32x4)0); }

/* The A operand of lane 16j + r for the four K blocks of 128-wide step st of the 16-row tile at
 * row0 of a dense copy: row r, K 32b + 8j..+7 of each block b (hm_dense942_offset: 16 B at
 * 16 lane of each KB of the step). */
DEV_INLINE void gemv942_ld_w(const gemv_mx8 *m, u32 row0, u32 st, u32 lane, u64 a[4]) {
  u32 off = (row0 / 16u) * 16u * m->Kp + 2048u * st + 16u * lane;
  u32x4 lo = dev_buf_ld_u32x4(m->w, off, DEV_CP_NT), hi = dev_buf_ld_u32x4(m->w, off + 1024u, DEV_CP_NT);
  a[0] = lo[0] | (u64)lo[1] << 32, a[1] = lo[2] | (u64)lo[3] << 32;
  a[2] = hi[0] | (u64)hi[1] << 32, a[3] = hi[2] | (u64)hi[3] << 32;
}

/* The B operand of lane 16j + c for K block `block`: token t's K 32 block + 8j..+7 (zero for a
 * token past S or a block past K), and its code. */
DEV_INLINE u64 gemv942_ld_act(const gemv_act *x, u32 t, u32 block, u32 lane) {
  if (t >= x->S || 32u * block >= x->K) return 0;
  u32x2 v = dev_buf_ld_u32x2(x->x, t * x->K + 32u * block + 8u * (lane / 16u), DEV_CP_DEV);
  return v[0] | (u64)v[1] << 32;
}
DEV_INLINE u32 gemv942_act_code(const gemv_act *x, u32 t, u32 block) {
  u32 cols = x->K / 32u;
  if (t >= x->S || block >= cols) return GEMV_UNIT_SCALE;
  if (x->words) return dev_buf_ld_u32(x->s, 4u * (t * cols + block), DEV_CP_DEV) & 0xffu;
  return gemv_byte(x->s, t * cols + block, DEV_CP_DEV);
}

/* The token of this lane's column in a pass from t0 (S, i.e. none, past the pass's 6). */
DEV_INLINE u32 gemv942_token(const gemv_act *x, u32 t0, u32 lane) {
  return lane % 16u < GEMV_TOKENS_942 ? t0 + lane % 16u : x->S;
}

/* The codes of the four K blocks of step st of the 16-row tile at row0 (block b in byte b): one
 * dword, as a row block's codes are Kp / 32 (a multiple of 4) a row of the table. */
DEV_INLINE u32 gemv942_ld_codes(const gemv_mx8 *m, u32 row0, u32 st) {
  return dev_buf_ld_u32(m->s, (row0 / 32u) * (m->Kp / 32u) + 4u * st, DEV_CP_NT);
}

/* Step st of a 16-row tile (A operands a[b], block codes ca in byte b) times token t's activation,
 * into acc: its K blocks in order, each one unscaled MFMA added by fma with 2^(ca + cb - 254) (cb
 * the lane's token's code); blocks wholly past x's K (the copy's zero padding) are skipped. */
DEV_INLINE f32x4 gemv942_blocks(const u64 a[4], u32 codes, const gemv_act *x, u32 t, u32 st, u32 lane, f32x4 acc) {
  for (u32 b = 0; b < 4u; b++) {
    u32 blk = 4u * st + b;
    if (32u * blk >= x->K) break;
    f32x4 d = gemv942_block(a[b], gemv942_ld_act(x, t, blk, lane));
    u32 ca = (codes >> (8u * b)) & 0xffu, cb = gemv942_act_code(x, t, blk);
    acc = gemv942_fma(d, gemv_pow2((i32)(ca + cb) - 254), acc);
  }
  return acc;
}

/* Step st of rows row0..row0+15 of m times the pass from t0, into acc (gemv942_blocks). */
DEV_INLINE f32x4 gemv942_mx8_step(const gemv_mx8 *m, const gemv_act *x, u32 row0, u32 t0, u32 st, u32 lane,
                                  f32x4 acc) {
  u64 a[4];
  gemv942_ld_w(m, row0, st, lane, a);
  return gemv942_blocks(a, gemv942_ld_codes(m, row0, st), x, gemv942_token(x, t0, lane), st, lane, acc);
}

/* One wave's part of rows row0..row0+15 times the pass from t0: steps wave, wave + 8, ... in one
 * chain (the §2.0 order, a step's blocks in order). */
DEV_INLINE f32x4 gemv_mx8_wave(const gemv_mx8 *m, const gemv_act *x, u32 row0, u32 t0, u32 wave) {
  u32 lane = dev_lane(), steps = m->Kp / 128u;
  f32x4 acc = 0;
  for (u32 st = wave; st < steps; st += 8u) acc = gemv942_mx8_step(m, x, row0, t0, st, lane, acc);
  return acc;
}

/* ---------------------------------------------------------------- a GEMV task's weights, held in registers (gfx942) */

/* As gfx950's gemv_wtile (above): one wave's steps s0 + wave, s0 + wave + 8, ... of a 16-row tile,
 * loaded before the task waits for its activations and kept across token passes; a step is the
 * A operands of its four K blocks and their codes. */
#define GEMV_MAX_WSTEPS 4u /* 128-wide K steps a wave holds of one row tile (K <= 4096) */

typedef struct {
  u64 w[GEMV_MAX_WSTEPS][4];
  u32 s[GEMV_MAX_WSTEPS]; /* block b's code in byte b */
} gemv_wtile;

DEV_INLINE void gemv_wtile_load(gemv_wtile *t, const gemv_mx8 *m, u32 row0, u32 s0, u32 n, u32 wave, u32 lane) {
#pragma unroll
  for (u32 i = 0; i < GEMV_MAX_WSTEPS; i++) {
    u32 st = wave + 8u * i;
    for (u32 b = 0; b < 4u; b++) t->w[i][b] = 0;
    t->s[i] = 0;
    if (st < n) {
      u64 a[4];
      gemv942_ld_w(m, row0, s0 + st, lane, a);
      for (u32 b = 0; b < 4u; b++) t->w[i][b] = a[b];
      t->s[i] = gemv942_ld_codes(m, row0, s0 + st);
    }
#if defined(DEV_GPU)
    /* held in a VGPR: the factor's sum with the lane's token code is per lane anyway, and K1's
     * SGPRs (argument pointers, buffer descriptors) have no room for the tile's codes */
    __asm__ volatile("" : "+v"(t->s[i]));
#endif
  }
}

/* The wave's chain for the pass from t0 (its 6 tokens): its steps in ascending order, each step's
 * blocks in order, in one accumulator (spec/mono.md §2.0, §2.6). */
DEV_INLINE f32x4 gemv_wtile_run(const gemv_wtile *t, const gemv_act *x, u32 t0, u32 s0, u32 n, u32 wave, u32 lane) {
  f32x4 acc = 0;
  u32 tok = gemv942_token(x, t0, lane);
#pragma unroll
  for (u32 i = 0; i < GEMV_MAX_WSTEPS; i++) {
    u32 st = wave + 8u * i;
    if (st < n) {
      const u64 a[4] = {t->w[i][0], t->w[i][1], t->w[i][2], t->w[i][3]};
      acc = gemv942_blocks(a, t->s[i], x, tok, s0 + st, lane, acc);
    }
  }
  return acc;
}

/* 8 e2m1 values (one dword: K 8c..8c+7, even K in low nibbles) as 8 FNUZ bytes worth e2m1 x 2^-7
 * (fmt_e2m1_to_e4m3fnuz: magnitude code m -> m << 2, sign -> 0x80), the even K first, then the odd
 * (spec/mono.md §2.6); -0 nibbles were rewritten to +0 by the copy. */
DEV_INLINE u64 gemv942_fp4_expand(u32 w) {
  u32 ev = w & 0x0f0f0f0fu, od = (w >> 4) & 0x0f0f0f0fu;
  u32 lo = ((ev & 0x07070707u) << 2) | ((ev & 0x08080808u) << 4);
  u32 hi = ((od & 0x07070707u) << 2) | ((od & 0x08080808u) << 4);
  return lo | (u64)hi << 32;
}

/* Lane 16j + r's dwords of 128-wide step st of the 16-row tile at tile_off of a gfx942 FP4 copy
 * with kb bytes a row (hm_fp4_942_offset): dword b = K block 4st + b's K 8j..8j+7 of row r; a last
 * 32-B step holds blocks 0 and 1 only (the others zero). */
DEV_INLINE u32x4 gemv942_ld_fp4(dev_buf_t w, u32 tile_off, u32 kb, u32 st, u32 lane) {
  u32 full = kb / 64u * 64u;
  if (64u * st < full) return dev_buf_ld_u32x4(w, tile_off + 1024u * st + 16u * lane, DEV_CP_NT);
  u32x2 v = dev_buf_ld_u32x2(w, tile_off + 16u * full + 8u * lane, DEV_CP_NT);
  u32x4 r = 0;
  r[0] = v[0], r[1] = v[1];
  return r;
}

#endif /* DEV_ARCH_GFX942 */

#if DEV_HAS_SCALED_MFMA || DEV_ARCH_GFX942

/* ---------------------------------------------------------------- wave partials */

/* The 16x16 D tile of a wave lives as lane l: rows 4(l/16)..+3 of column l%16. Every wave stores
 * its tile at red[wave]; after the barrier, (row i, column j) is summed over waves 0..7 in order. */
typedef struct { f32 v[8][64][4]; } gemv_red;

DEV_INLINE void gemv_red_put(__local gemv_red *r, u32 wave, f32x4 acc) {
  u32 lane = dev_lane();
  for (u32 k = 0; k < 4u; k++) r->v[wave][lane][k] = acc[k];
}

/* D[i][j] summed over the 8 waves in wave order 0..7. */
DEV_INLINE f32 gemv_red_sum(__local const gemv_red *r, u32 i, u32 j) {
  u32 lane = 16u * (i / 4u) + j, k = i % 4u;
  f32 a = r->v[0][lane][k];
  for (u32 w = 1; w < 8u; w++) a = a + r->v[w][lane][k];
  return a;
}
/* D[i][j] of one wave's tile */
DEV_INLINE f32 gemv_red_at(__local const gemv_red *r, u32 wave, u32 i, u32 j) {
  return r->v[wave][16u * (i / 4u) + j][i % 4u];
}

#endif /* DEV_HAS_SCALED_MFMA || DEV_ARCH_GFX942 */
#endif /* HM_GEMV_H */
