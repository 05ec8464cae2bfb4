/* device/ffn/router.h: the router (spec/mono.md §2.4): the bf16 GEMV of the normed rows against
 * gate_w by K quarters (f32 logits), and the route: sqrtsoftplus + bias, top-k, weights x 1.5. */
#ifndef HM_FFN_ROUTER_H
#define HM_FFN_ROUTER_H

#include "ffn.h"

/* Router tasks: expert tiles of 16 x 4 K quarters x token tiles. */
DEV_INLINE u32 ffn_router_tasks(const struct ffn_ctx *c) { return (c->a->E / 16u) * 4u * ffn_ntiles(c); }

/* This lane's 8 bf16 of the 32-wide K step at k0 of row `row` of a [rows][K] bf16 matrix: gfx950's
 * 16x16x32 operand, K k0 + 8(l/16)..+7; gfx942's two 16x16x16 operands (§2.6: the step's first 16
 * K, then its second 16), K k0 + 4(l/16)..+3 in .lo and k0 + 16 + 4(l/16)..+3 in .hi. */
DEV_INLINE u16x8 ffn_ld_bf16_step(dev_buf_t b, u32 row, u32 K, u32 k0, u32 lane, int cp) {
#if DEV_ARCH_GFX942
  u32 off = 2u * (row * K + k0 + 4u * (lane / 16u));
  u32x2 lo, hi;
  if (cp == DEV_CP_DEV) lo = dev_buf_ld_u32x2(b, off, DEV_CP_DEV), hi = dev_buf_ld_u32x2(b, off + 32u, DEV_CP_DEV);
  else lo = dev_buf_ld_u32x2(b, off, DEV_CP_NT), hi = dev_buf_ld_u32x2(b, off + 32u, DEV_CP_NT);
  u32x4 v = {lo[0], lo[1], hi[0], hi[1]};
#else
  u32x4 v = gemv_ld16(b, 2u * (row * K + k0 + 8u * (lane / 16u)), cp);
#endif
  return __builtin_bit_cast(u16x8, v);
}

/* Weight steps a wave of a router task loads before its wait on the activations: every step of a
 * quarter of K up to 5,120 wide (40 steps of 32, 5 a wave; 20 VGPRs), so at one row the task's
 * whole 40 KB stream runs under the norm it waits for, not after it. */
#define FFN_ROUTER_PRE 5u

/* One 32-wide K step at k of a router task: weights a (16 experts) times the tile's activations. */
DEV_INLINE f32x4 ffn_router_step(dev_buf_t X, u16x8 a, u32 t0, u32 S, u32 D, u32 k, u32 lane, f32x4 acc) {
  u32 t = t0 + lane % 16u;
  u16x8 b = 0;
  if (t < S && lane % 16u < FFN_TILE) b = ffn_ld_bf16_step(X, t, D, k, lane, DEV_CP_DEV);
#if DEV_ARCH_GFX942
  /* no 16x16x32 bf16 MFMA: two 16x16x16, the step's K 0..15 then 16..31 (spec/mono.md §2.6) */
  acc = dev_mfma_f32_16x16x16_bf16(a.lo, b.lo, acc);
  return dev_mfma_f32_16x16x16_bf16(a.hi, b.hi, acc);
#else
  return dev_mfma_f32_16x16x32_bf16(a, b, acc);
#endif
}

/* One task: experts e0..e0+15 x a token tile (FFN_TILE from t0) over K quarter q. In the quarter,
 * wave w takes the 32-wide steps w, w + 8, ... in one accumulator (bf16 MFMA 16x16x32; gfx942 two
 * 16x16x16, ffn_ld_bf16_step); the waves are added 0..7; the partial goes out as a tagged pair. */
DEV_INLINE void ffn_router_task(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 task) {
  __local struct ffn_lds_gemv *L = &lds->u.gemv;
  const u32 S = c->a->S, D = c->a->D, E = c->a->E, ET = E / 16u;
  const u32 et = task % ET, q = (task / ET) % 4u, tt = task / (ET * 4u);
  const u32 e0 = 16u * et, t0 = FFN_TILE * tt, lane = dev_lane(), wave = dev_wave();
  const u32 qk = D / 4u, qsteps = qk / 32u;
  dev_buf_t W = dev_buf((__global const void *)c->a->gate_w, E * D * 2u);
  dev_buf_t X = dev_buf(ffn_scr(c, c->a->L.normed), S * D * 2u);
  const u32 row = e0 + lane % 16u, kq = q * qk; /* this lane's expert row, the quarter's first K */
  /* the wave's first FFN_ROUTER_PRE weight steps are in flight before the wait on the activations */
  u16x8 pre[FFN_ROUTER_PRE];
#pragma unroll
  for (u32 i = 0; i < FFN_ROUTER_PRE; i++) {
    const u32 s = wave + 8u * i;
    pre[i] = 0;
    if (s < qsteps) pre[i] = ffn_ld_bf16_step(W, row, D, kq + 32u * s, lane, DEV_CP_NT);
  }
  u32 nt = S - t0 < FFN_TILE ? S - t0 : FFN_TILE;
  ho_flags_wait(ffn_words(c, c->a->L.xrdy) + t0, 1u, nt, c->tag);
  /* the steps in the same order as without the preload (w, w + 8, ...): the same sum */
  f32x4 acc = 0;
#pragma unroll
  for (u32 i = 0; i < FFN_ROUTER_PRE; i++) {
    const u32 s = wave + 8u * i;
    if (s < qsteps) acc = ffn_router_step(X, pre[i], t0, S, D, kq + 32u * s, lane, acc);
  }
  for (u32 s = wave + 8u * FFN_ROUTER_PRE; s < qsteps; s += 8u) {
    const u32 k = kq + 32u * s;
    acc = ffn_router_step(X, ffn_ld_bf16_step(W, row, D, k, lane, DEV_CP_NT), t0, S, D, k, lane, acc);
  }
  gemv_red_put(&L->red[0], wave, acc);
  dev_barrier();
  __global u64 *logit = ffn_pairs(c, c->a->L.logit);
  for (u32 i = dev_lid(); i < 256u; i += FFN_CTA) {
    u32 r = i / 16u, j = i % 16u, t = t0 + j;
    if (t < S && j < FFN_TILE)
      ffn_put(c, &logit[((u64)t * E + e0 + r) * 4u + q], dev_bits_f32(gemv_red_sum(&L->red[0], r, j)));
  }
  dev_barrier();
}

/* sqrt(softplus(x)) through exp2 / log2 (hm_ref_sqrtsoftplus). */
DEV_INLINE f32 ffn_sqrtsoftplus(f32 x) {
  f32 sp = x > 20.0f ? x : dev_log2(1.0f + dev_exp2(x * FFN_LOG2E)) * FFN_LN2;
  return dev_sqrt(sp);
}

/* Token t's route: logit = ((p0 + p1) + p2) + p3 (f32), score = sqrtsoftplus(logit), val =
 * max(score + bias, -inf); top-k by val in the wave network's order (larger val first; equal vals
 * by lane = expert % 64, then by expert / 64); weights = score x route_scale / max(sum, 1e-20),
 * the scores of the picks in pick order. Out as tagged pairs (ids raw, weights f32 bits). */
DEV_INLINE void ffn_route(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 t) {
  __local struct ffn_lds_route *L = &lds->u.route;
  const u32 E = c->a->E, K = c->a->topk, lid = dev_lid();
  __global const u64 *logit = ffn_pairs(c, c->a->L.logit);
  __global const u32 *bias = (__global const u32 *)c->a->bias;
  if (lid < E) {
    /* the expert's bias, a weight, in flight before the wait on its logits */
    const f32 b = dev_f32_bits(dev_ld_u32(bias + lid, DEV_CP_NT));
    u32 v[FFN_BATCH];
    ffn_get_batch(c, logit, ((u64)t * E + lid) * 4u, 1u, 4u, v);
    f32 lg = ((dev_f32_bits(v[0]) + dev_f32_bits(v[1])) + dev_f32_bits(v[2])) + dev_f32_bits(v[3]);
    f32 sc = ffn_sqrtsoftplus(lg);
    L->score[lid] = sc;
    L->val[lid] = ffn_max(sc + b, -INFINITY); /* a NaN becomes -inf (v_max_f32) */
  }
  dev_barrier();
  if (dev_wave() == 0) {
    const u32 l = dev_lane();
    u32 taken = 0; /* bit i: expert l + 64 i taken */
    f32 w_total = 0.0f;
    u32 my_pick = 0; /* this lane's pick j (lane j < K) */
    f32 my_w = 0.0f;
    __global u64 *ids = ffn_pairs(c, c->a->L.ids) + (u64)t * K;
    __global u64 *wts = ffn_pairs(c, c->a->L.wts) + (u64)t * K;
    for (u32 j = 0; j < K; j++) {
      /* this lane's best untaken expert: larger val, then smaller i */
      u32 has = 0, bi = 0;
      f32 bv = -INFINITY;
      for (u32 i = 0; l + 64u * i < E; i++) {
        if (taken >> i & 1u) continue;
        f32 v = L->val[l + 64u * i];
        if (!has || v > bv) has = 1, bi = i, bv = v;
      }
      f32 m = dev_wave_max_f32(has ? bv : -INFINITY);
      u64 who = dev_ballot(has && bv == m);
      u32 win = (u32)__builtin_ctzll(who);
      u32 e = dev_shfl_u32(l + 64u * bi, win);
      if (l == win) taken |= 1u << bi;
      f32 sc = L->score[e];
      f32 w = fmt_isnan(sc) ? 0.0f : sc; /* the unbiased score */
      w_total = j == 0 ? w : w_total + w;
      if (l == j) my_pick = e, my_w = w;
    }
    if (l < K) {
      f32 scale = ffn_div(c->a->route_scale, ffn_max(w_total, 1e-20f));
      ffn_put(c, &ids[l], my_pick);
      ffn_put(c, &wts[l], dev_bits_f32(my_w * scale));
    }
  }
  dev_barrier();
}

#endif /* HM_FFN_ROUTER_H */
