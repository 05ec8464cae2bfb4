/* device/ffn/shared.h: the shared expert's gate/up (spec/mono.md §2.4): MXFP8 GEMVs of the rule-V
 * input, clamped SiLU, and the rule-V quantisation of the activation (SMQ) for the down stage. */
#ifndef HM_FFN_SHARED_H
#define HM_FFN_SHARED_H

#include "ffn.h"

/* Shared groups: 32 intermediate columns (one rule-V code) x token tiles, each with its SRDY flag.
 * Shared tasks: half a group each, 16 columns (spec/mono.md §2.4's split): the even half hands its
 * activations to the odd one, which quantises the group. Half the bytes a task, so the shared
 * expert's stream spreads over twice the CUs (36 tasks at TP 4 and one token tile). */
DEV_INLINE u32 ffn_shared_groups(const struct ffn_ctx *c) { return (c->a->Sh / 32u) * ffn_ntiles(c); }
DEV_INLINE u32 ffn_shared_tasks(const struct ffn_ctx *c) { return 2u * ffn_shared_groups(c); }

/* bf16(min(g,L) / (1 + expf(-min(g,L)))) then bf16(act * clamp(u, +-L)) (hm_ref_shared_act). */
DEV_INLINE f32 ffn_shared_act(f32 g, f32 u, f32 limit) {
  f32 gc = ffn_min(g, limit);
  f32 act = fmt_round_bf16(ffn_div(gc, 1.0f + dev_expf(-gc)));
  f32 uc = ffn_min(ffn_max(u, -limit), limit);
  return fmt_round_bf16(act * uc);
}

/* Max of |v| over aligned groups of 32 lanes (every lane of the wave calls it). */
DEV_INLINE f32 ffn_amax32(f32 v) {
  f32 a = fmt_absf(v);
  for (u32 off = 1; off < 32u; off <<= 1) {
    f32 o = dev_shfl_xor_f32(a, off);
    a = o > a ? o : a; /* a NaN is ignored, as fmt_mxfp8_quant's comparison does */
  }
  return a;
}

/* The 4 bytes of lanes 4k..4k+3 as one word, in lane 4k (every lane of the wave calls it). chunked
 * (gfx942's routed activations): the word at position 4k of a 32-lane group holds the lanes
 * hm_chunk942_k(4k..4k+3) instead, the even K of an 8-byte chunk first. */
DEV_INLINE u32 ffn_gather4(u32 byte, u32 chunked) {
  u32 l = dev_lane() & ~3u, w = 0;
  for (u32 b = 0; b < 4u; b++) {
    u32 src = chunked ? (l & ~31u) + hm_chunk942_k((l & 31u) + b) : l + b;
    w |= (dev_shfl_u32(byte, src) & 0xffu) << (8u * b);
  }
  return w;
}

/* An activation's code (rule V or A over its group's amax) and bytes as the step's GEMVs read them:
 * gfx942's FNUZ with max 224 (spec/mono.md §2.6), gfx950's OCP. */
DEV_INLINE u32 ffn_act_code(int rule, f32 amax) {
#if DEV_ARCH_GFX942
  return fmt_mx_code_fnuz(rule, amax);
#else
  return rule == FMT_RULE_A ? fmt_mx_code_a(amax) : fmt_mx_code_v(amax);
#endif
}
DEV_INLINE u32 ffn_act_byte(f32 v, u32 code) {
#if DEV_ARCH_GFX942
  return fmt_mx_fnuz(v, (u8)code);
#else
  return fmt_mx_e4m3(v, (u8)code);
#endif
}

/* One 128-wide K step of a shared task's two row tiles (16 gate rows, 16 up rows), the wave's A
 * operands and their scales:
 * loaded (ffn_shared_ld) apart from their use (ffn_shared_run), so that a task's first step is in
 * flight before it waits for its activations (spec/mono.md §3.1). gfx942: each step's four K blocks
 * and their codes (device/gemv.h's gemv942_mx8_step, split). */
typedef struct {
#if DEV_ARCH_GFX942
  u64 a[2][4];
  u32 codes[2];
#else
  i32x8 a[2];
  u32 sa[2];
#endif
} ffn_shared_step;

DEV_INLINE void ffn_shared_ld(ffn_shared_step *w, const gemv_mx8 *m, const u32 row0[2], u32 st, u32 lane) {
#pragma unroll
  for (u32 r = 0; r < 2u; r++) {
#if DEV_ARCH_GFX942
    u64 a[4];
    gemv942_ld_w(m, row0[r], st, lane, a);
    for (u32 b = 0; b < 4u; b++) w->a[r][b] = a[b];
    w->codes[r] = gemv942_ld_codes(m, row0[r], st);
#else
    u32 row = row0[r] + lane % 16u;
    w->a[r] = gemv_ld_fp8(m->w, row * m->K, m->K, st, lane, DEV_CP_NT);
    w->sa[r] = gemv_mx8_scale(m, row, 4u * st + lane / 16u);
#endif
  }
}

/* Step st of the two row tiles times the token tile from t0, into acc[r] (the step's K blocks in
 * order on gfx942; one scaled MFMA a tile on gfx950). */
DEV_INLINE void ffn_shared_run(const ffn_shared_step *w, const gemv_act *x, u32 t0, u32 st, u32 lane, f32x4 acc[2]) {
#if DEV_ARCH_GFX942
  const u32 tok = gemv942_token(x, t0, lane);
#pragma unroll
  for (u32 r = 0; r < 2u; r++) {
    const u64 a[4] = {w->a[r][0], w->a[r][1], w->a[r][2], w->a[r][3]};
    acc[r] = gemv942_blocks(a, w->codes[r], x, tok, st, lane, acc[r]);
  }
#else
  i32x8 b = gemv_ld_act(x, t0, st, lane);
  u32 sb = gemv_act_scale(x, t0, st, lane);
#pragma unroll
  for (u32 r = 0; r < 2u; r++) acc[r] = gemv_mfma_fp8(w->a[r], b, acc[r], w->sa[r], sb);
#endif
}

/* K steps a wave loads before its wait on the activations: all five of V4.1-Flash's (D 5120: 40
 * steps, 5 a wave), so a half-task streams its 160 KiB while the norm runs, not after it (at six rows
 * on MI300X the half-task was on the path: 12.4 µs from the norm's flag). 18 VGPRs a step. */
#define FFN_SHARED_PRE 5u

/* One task: half h of group cg (columns 32cg + 16h .. +15) of a token tile (FFN_TILE tokens from t0).
 * Gate rows 32cg + 16h.. and up rows Sh + 32cg + 16h.. of sgu (2 row tiles); wave w takes the K steps
 * w, w + 8, ... (§2.0 order; gfx942: each step's blocks by fma, device/gemv.h), its first
 * FFN_SHARED_PRE steps' weights loaded before the wait on the activations; the waves are added
 * 0..7, g and u rounded to bf16, the clamped SiLU. The even half puts its 16 activations a token in
 * tagged pairs (SHV); the odd half, its own stream done, takes them (waiting for each pair's tag),
 * and quantises the group:
 * rule-V codes over the 32 columns and their bytes, then the group's SRDY flag. The numbers are the
 * 32-column task's: each column's sums are its own, whichever task makes them. */
DEV_INLINE void ffn_shared_task(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 task) {
  __local struct ffn_lds_gemv *L = &lds->u.gemv;
  const u32 S = c->a->S, D = c->a->D, Sh = c->a->Sh, CG = Sh / 32u;
  const u32 h = task % 2u, cg = task / 2u % CG, tt = task / (2u * CG), t0 = FFN_TILE * tt;
  const u32 lane = dev_lane(), wave = dev_wave(), steps = D / 128u;
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)c->a->sgu, (__global const u8 *)c->a->sgu_s, 2u * Sh, D);
  gemv_act x = gemv_act_of(ffn_scr(c, c->a->L.x8), ffn_scr(c, c->a->L.x8s), S, D);
  const u32 row0[2] = {32u * cg + 16u * h, Sh + 32u * cg + 16u * h};
  ffn_shared_step w0[FFN_SHARED_PRE];
#pragma unroll
  for (u32 k = 0; k < FFN_SHARED_PRE; k++)
    if (wave + 8u * k < steps) ffn_shared_ld(&w0[k], &m, row0, wave + 8u * k, lane);
  u32 nt = S - t0 < FFN_TILE ? S - t0 : FFN_TILE;
  ho_flags_wait(ffn_words(c, c->a->L.xrdy) + t0, 1u, nt, c->tag);
  f32x4 acc[2] = {0, 0};
#pragma unroll
  for (u32 k = 0; k < FFN_SHARED_PRE; k++)
    if (wave + 8u * k < steps) ffn_shared_run(&w0[k], &x, t0, wave + 8u * k, lane, acc);
  /* the rest (D > 5120), the matrix made again from arguments read again (ffn_next_stage): held
   * through the wait, gfx942 spilled an SGPR */
  struct ffn_ctx cr = *c;
  ffn_next_stage(&cr);
  gemv_mx8 mr = gemv_mx8_of((__global const u8 *)cr.a->sgu, (__global const u8 *)cr.a->sgu_s, 2u * Sh, D);
  for (u32 st = wave + 8u * FFN_SHARED_PRE; st < steps; st += 8u) {
    ffn_shared_step w;
    ffn_shared_ld(&w, &mr, row0, st, lane);
    ffn_shared_run(&w, &x, t0, st, lane, acc);
  }
#pragma unroll
  for (u32 r = 0; r < 2u; r++) gemv_red_put(&L->red[r], wave, acc[r]);
  dev_barrier();
  /* work-item (token j = lid / 32, group column i = lid % 32): this half's columns are those with
   * i / 16 == h, its row tiles' column i % 16 */
  const u32 lid = dev_lid(), j = lid / 32u, i = lid % 32u, t = t0 + j;
  const u32 tok = t < S && j < FFN_TILE;
  f32 g = fmt_round_bf16(gemv_red_sum(&L->red[0], i % 16u, j));
  f32 u = fmt_round_bf16(gemv_red_sum(&L->red[1], i % 16u, j));
  f32 v = ffn_shared_act(g, u, c->a->swiglu_limit);
  __global u64 *shv = (__global u64 *)ffn_scr(c, c->a->L.shv) + ((u64)t * CG + cg) * 16u + i % 16u;
  if (h == 0u) {
    if (tok && i < 16u) ho_pair_put(shv, dev_bits_f32(v), c->tag);
  } else {
    if (tok && i < 16u) v = dev_f32_bits(ho_pair_get(shv, c->tag));
    u32 code = ffn_act_code(FMT_RULE_V, ffn_amax32(v));
    u32 word = ffn_gather4(ffn_act_byte(v, code), 0);
    if (tok) {
      if (i % 4u == 0) dev_st_u32((__global u32 *)ffn_scr(c, c->a->L.smq) + ((u64)t * Sh + 32u * cg + i) / 4u, word, DEV_CP_DEV);
      if (i == 0) dev_st_u32(ffn_words(c, c->a->L.smc) + (u64)t * CG + cg, code, DEV_CP_DEV);
    }
    ho_flag_raise(ffn_words(c, c->a->L.srdy) + (u64)cg * ffn_ntiles(c) + tt, c->tag);
  }
  dev_barrier();
}

#endif /* HM_FFN_SHARED_H */
