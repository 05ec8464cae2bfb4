/* device/seam.h: the mHC seam both launches run (spec/mono.md §2.1 K1.1-K1.3, §2.3): per slice the
 * fold, collapse and mix partials; per token the gate (Sinkhorn) and the norm with its quantisations.
 *
 * One implementation for K1 (attention weights, x read from the previous layer's output) and the
 * FFN launch (ffn weights, x reduced from the ranks' wo_b parts): a seam stage takes the launch's
 * struct seam_args, the step's tag, and for the slice the x source (a reduce view, or none for a
 * plain read of seam_args.x). Hand-offs: LIN and PMIX as tagged pairs, the norm's outputs as data
 * then the token's XRDY flag. The order of every sum is the reference's (layer/ref/ref_seam.c). */
#ifndef HM_SEAM_H
#define HM_SEAM_H

#include "ar.h"
#include "dev.h"
#include "formats.h"
#include "handoff.h"
#include "kernels/seam_args.h"
#include "layouts.h"

#define SEAM_LOG2E 1.44269502f /* f32(log2 e), as the reference's HM_LOG2E */
#define SEAM_MAX_NS (SEAM_MAX_D / 32u)

/* The seam's members of a launch's LDS union (one live at a time). */
struct seam_lds_slice {
  f32 fn[SEAM_MIX][128];        /* fn_eff of the slice's 128 positions (4 streams x 32 columns) */
  f32 R[SEAM_MAX_ROWS][4][32];  /* the folded streams */
};
struct seam_lds_gate { f32 part[SEAM_MAX_NS][SEAM_PMIX]; f32 mix[SEAM_PMIX]; };
struct seam_lds_norm { f32 x[SEAM_MAX_D]; f32 wsum[4]; };
/* norm weight words (bf16 pairs) a work-item of seam_norm holds */
#define SEAM_NORM_W (SEAM_MAX_D / 2u / SEAM_CTA)

/* IEEE division where the reference divides (the GPU's `/` is not correctly rounded). */
DEV_INLINE f32 seam_div(f32 a, f32 b) { return fmt_div_rn(a, b); }
/* 1 / (1 + exp2(z * -LOG2E)) with IEEE division (hm_ref_sigmoid). */
DEV_INLINE f32 seam_sigmoid(f32 z) { return seam_div(1.0f, 1.0f + dev_exp2(z * -SEAM_LOG2E)); }
DEV_INLINE f32 seam_max(f32 a, f32 b) { return __builtin_fmaxf(a, b); }

/* Slices of a step: 32 hidden columns each. */
DEV_INLINE u32 seam_slices(DEV_ARGSPACE const struct seam_args *a) { return a->D / 32u; }

/* ---------------------------------------------------------------- slice (fold, collapse, mix) */

/* Slice j: x of columns 32j..32j+31 (reduced in rank order through `reduce`, or read from a->x when
 * reduce is NULL), the fold of x into the residual streams (res_out), the collapse with the delayed
 * pre (LIN pairs), and the slice's 24 mix partials and sum of squares of every token (PMIX pairs).
 * *ok drops to 0 when the reduce gave up on a peer (the slice then folds zeros; the launch fails). */
DEV_INLINE void seam_slice(DEV_ARGSPACE const struct seam_args *a, u32 tag, __local struct seam_lds_slice *L, u32 j,
                           const struct ar_view *reduce, u32 *ok) {
  const u32 S = a->S, D = a->D, P = D / 2u, lid = dev_lid();
  __global const u32 *res_in = (__global const u32 *)a->res_in;
  __global u32 *res_out = (__global u32 *)a->res_out;
  __global const f32 *post = (__global const f32 *)a->post_in;
  __global const f32 *comb = (__global const f32 *)a->comb_in;
  __global const f32 *pre = (__global const f32 *)a->pre_in;
  __global const u32 *fn = (__global const u32 *)a->hc_fn;
  __global u64 *lin = (__global u64 *)a->lin;
  __global u64 *pmix = (__global u64 *)a->pmix;

  /* fn_eff of the slice (aiter's two bf16 MFMAs as one weight: hi + lo, exact in f32). hc_fn is a
   * weight (12 KB a slice): streamed (DEV_CP_NT, so the trace counts it) before the reduce's wait */
  for (u32 i = lid; i < SEAM_MIX * 128u; i += SEAM_CTA) {
    u32 m = i / 128u, pos = i % 128u, h = pos / 32u;
    f32 w = dev_f32_bits(dev_ld_u32(fn + (u64)m * 4u * D + (u64)h * D + 32u * j + pos % 32u, DEV_CP_NT));
    f32 hi = fmt_round_bf16(w);
    L->fn[m][pos] = hi + fmt_round_bf16(w - hi);
  }

  /* (t, q): token t, columns 32j + 2q, +1 of every stream; a work-item at most two of them */
  u32 n = lid < S * 16u ? (lid + SEAM_CTA < S * 16u ? 2u : 1u) : 0u;
  u32 xs[2] = {0, 0};
  if (n) {
    u32 f = (lid / 16u) * P + 16u * j + lid % 16u;
    if (reduce) {
      if (*ok && ar_reduce(reduce, f, (SEAM_CTA / 16u) * P, n, xs) != AR_OK) {
        *ok = 0;
        xs[0] = xs[1] = 0;
      }
    } else {
      /* the previous launch's output: ordered by the kernel boundary, a plain load */
      __global const u32 *x = (__global const u32 *)a->x;
      xs[0] = x[f];
      if (n > 1u) xs[1] = x[f + (SEAM_CTA / 16u) * P];
    }
  }
#pragma unroll
  for (u32 k = 0; k < 2u; k++) {
    if (k >= n) break;
    u32 i = lid + k * SEAM_CTA, t = i / 16u, q = i % 16u, col = 32u * j + 2u * q;
    f32 x[2] = {fmt_bf16_to_f32((u16)xs[k]), fmt_bf16_to_f32((u16)(xs[k] >> 16))};
    f32 r[4][2];
#pragma unroll
    for (u32 h = 0; h < 4u; h++) {
      u32 w = res_in[((u64)t * 4u + h) * P + col / 2u];
      r[h][0] = fmt_bf16_to_f32((u16)w), r[h][1] = fmt_bf16_to_f32((u16)(w >> 16));
    }
    /* K1.1 fold: every product but the stream-3 one rounded on its own, the stream-3 term fused */
    f32 R[4][2];
#pragma unroll
    for (u32 o = 0; o < 4u; o++) {
      __global const f32 *cb = comb + t * 16u;
#pragma unroll
      for (u32 e = 0; e < 2u; e++) {
        f32 s = post[t * 4u + o] * x[e] + cb[0 * 4 + o] * r[0][e];
        s = s + cb[1 * 4 + o] * r[1][e];
        s = s + cb[2 * 4 + o] * r[2][e];
        R[o][e] = fmt_round_bf16(dev_fma(cb[3 * 4 + o], r[3][e], s));
      }
      res_out[((u64)t * 4u + o) * P + col / 2u] =
          (u32)fmt_bf16_from_f32(R[o][0]) | (u32)fmt_bf16_from_f32(R[o][1]) << 16;
      L->R[t][o][2u * q] = R[o][0];
      L->R[t][o][2u * q + 1u] = R[o][1];
    }
    /* K1.1 collapse with the delayed pre: (((0 + p0 R0) + p1 R1) + p2 R2) + p3 R3, no fma */
    u32 v = 0;
#pragma unroll
    for (u32 e = 0; e < 2u; e++) {
      f32 s = 0.0f + pre[t * 4u] * R[0][e];
      s = s + pre[t * 4u + 1u] * R[1][e];
      s = s + pre[t * 4u + 2u] * R[2][e];
      s = s + pre[t * 4u + 3u] * R[3][e];
      v |= (u32)fmt_bf16_from_f32(s) << (16u * e);
    }
    ho_pair_put(&lin[(u64)t * P + 16u * j + q], v, tag);
  }
  dev_barrier();

  /* K1.1 mix partials: f32 MFMA 16x16x4 order; wave w covers positions 16w..16w+15 in 4 steps
   * of 4 (each step's products summed from the first), waves added 0..7 */
  for (u32 i = lid; i < S * SEAM_MIX; i += SEAM_CTA) {
    u32 t = i / SEAM_MIX, m = i % SEAM_MIX;
    f32 total = 0.0f;
    for (u32 w = 0; w < 8u; w++) {
      f32 acc = 0.0f;
      for (u32 qq = 0; qq < 4u; qq++) {
        u32 i0 = 16u * w + 4u * qq;
        f32 s = L->fn[m][i0] * L->R[t][i0 / 32u][i0 % 32u];
        for (u32 k = 1; k < 4u; k++) s = s + L->fn[m][i0 + k] * L->R[t][(i0 + k) / 32u][(i0 + k) % 32u];
        acc = acc + s;
      }
      total = w == 0 ? acc : total + acc;
    }
    ho_pair_put(&pmix[((u64)j * S + t) * SEAM_PMIX + m], dev_bits_f32(total), tag);
  }
  /* sum of squares: two positions a lane (x0^2 + x1^2), butterfly 32..1 */
  for (u32 t = dev_wave(); t < S; t += 8u) {
    u32 l = dev_lane(), p0 = 2u * l;
    f32 x0 = L->R[t][p0 / 32u][p0 % 32u], x1 = L->R[t][p0 / 32u][p0 % 32u + 1u];
    f32 s = dev_wave_sum_f32_32to1(x0 * x0 + x1 * x1);
    if (l == 0) ho_pair_put(&pmix[((u64)j * S + t) * SEAM_PMIX + SEAM_MIX], dev_bits_f32(s), tag);
  }
  dev_barrier(); /* the LDS union's next member */
}

/* ---------------------------------------------------------------- gate (per token) */

/* K1.2 Sinkhorn on one token's comb logits z[4][4] (hm_ref_sinkhorn). */
DEV_INLINE void seam_sinkhorn(f32 e[16], u32 iters, f32 hc_eps) {
  for (u32 r = 0; r < 4u; r++) {
    f32 m = seam_max(seam_max(e[4 * r], e[4 * r + 1]), seam_max(e[4 * r + 2], e[4 * r + 3]));
    for (u32 k = 0; k < 4u; k++) e[4 * r + k] = dev_exp2((e[4 * r + k] - m) * SEAM_LOG2E);
    f32 inv = dev_rcp((e[4 * r] + e[4 * r + 1]) + (e[4 * r + 2] + e[4 * r + 3]));
    for (u32 k = 0; k < 4u; k++) e[4 * r + k] = dev_fma(e[4 * r + k], inv, hc_eps);
  }
  for (u32 it = 0; it < iters; it++) {
    if (it > 0)
      for (u32 r = 0; r < 4u; r++) {
        f32 inv = dev_rcp(((e[4 * r] + e[4 * r + 1]) + (e[4 * r + 2] + e[4 * r + 3])) + hc_eps);
        for (u32 k = 0; k < 4u; k++) e[4 * r + k] = e[4 * r + k] * inv;
      }
    for (u32 k = 0; k < 4u; k++) {
      f32 inv = dev_rcp(((e[k] + e[4 + k]) + (e[8 + k] + e[12 + k])) + hc_eps);
      for (u32 r = 0; r < 4u; r++) e[4 * r + k] = e[4 * r + k] * inv;
    }
  }
}

/* Token t: the slices' partials summed in groups of 8 (slice order, groups in order), then
 * pre / post / comb (rsq, sigmoid, Sinkhorn) into the seam's outputs. */
DEV_INLINE void seam_gate(DEV_ARGSPACE const struct seam_args *a, u32 tag, __local struct seam_lds_gate *L, u32 t) {
  const u32 S = a->S, NS = seam_slices(a), lid = dev_lid();
  __global const u64 *pmix = (__global const u64 *)a->pmix;
  /* work-item lid < 500 fetches partial m = lid % 25 of slices lid / 25, + 20, + 40, ...: its
   * slots are evenly spaced, so a batch of 8 is one round trip */
  if (lid < 20u * SEAM_PMIX) {
    const u32 m = lid % SEAM_PMIX;
    for (u32 j0 = lid / SEAM_PMIX; j0 < NS; j0 += 20u * HO_GET_BATCH) {
      u32 cnt = (NS - j0 + 19u) / 20u;
      cnt = cnt > HO_GET_BATCH ? HO_GET_BATCH : cnt;
      u32 v[HO_GET_BATCH];
      ho_get_batch(tag, pmix, ((u64)j0 * S + t) * SEAM_PMIX + m, 20u * S * SEAM_PMIX, cnt, v);
#pragma unroll
      for (u32 k = 0; k < HO_GET_BATCH; k++)
        if (k < cnt) L->part[j0 + 20u * k][m] = dev_f32_bits(v[k]);
    }
  }
  dev_barrier();
  if (lid < SEAM_PMIX) {
    f32 total = 0.0f;
    for (u32 g = 0; g * 8u < NS; g++) {
      f32 gs = 0.0f;
      for (u32 k = 0; k < 8u && g * 8u + k < NS; k++) gs = gs + L->part[g * 8u + k][lid];
      total = total + gs;
    }
    L->mix[lid] = total;
  }
  dev_barrier();
  if (lid == 0) {
    __local const f32 *mix = L->mix;
    __global const f32 *scale = (__global const f32 *)a->hc_scale;
    __global const f32 *base = (__global const f32 *)a->hc_base;
    f32 inv_n = seam_div(1.0f, (f32)(4u * a->D)); /* RN(1/(4D)) */
    f32 rstd = dev_rsq(dev_fma(mix[SEAM_MIX], inv_n, a->eps));
    __global f32 *pre = (__global f32 *)a->pre_out + t * 4u;
    __global f32 *post = (__global f32 *)a->post_out + t * 4u;
    for (u32 k = 0; k < 4u; k++) {
      pre[k] = seam_sigmoid(dev_fma(mix[k] * rstd, scale[0], base[k])) + a->hc_eps;
      post[k] = seam_sigmoid(dev_fma(mix[4 + k] * rstd, scale[1], base[4 + k])) * a->post_mult;
    }
    f32 z[16];
    for (u32 k = 0; k < 16u; k++) z[k] = dev_fma(mix[8 + k] * rstd, scale[2], base[8 + k]);
    seam_sinkhorn(z, a->sinkhorn_iters, a->hc_eps);
    __global f32 *comb = (__global f32 *)a->comb_out + t * 16u;
    for (u32 k = 0; k < 16u; k++) comb[k] = z[k];
  }
  dev_barrier();
}

/* ---------------------------------------------------------------- norm + quantisation (per token) */

/* Token t: RMSNorm of the collapsed row (K1.3 order) -> the bf16 normed row (if a->normed), rule A
 * (if a->x8a) and rule V quantisations with their codes, then the token's XRDY flag. */
DEV_INLINE void seam_norm(DEV_ARGSPACE const struct seam_args *a, u32 tag, __local struct seam_lds_norm *L, u32 t) {
  const u32 D = a->D, P = D / 2u, lid = dev_lid();
  __global const u64 *lin = (__global const u64 *)a->lin;
  /* The norm weights (a word of two bf16 a pair; at most SEAM_NORM_W a work-item) are in flight
   * before the wait on the row, and streamed as weights (DEV_CP_NT: the trace counts them) */
  __global const u32 *w = (__global const u32 *)a->norm_w;
  u32 wn[SEAM_NORM_W];
#pragma unroll
  for (u32 i = 0; i < SEAM_NORM_W; i++) {
    const u32 p = lid + i * SEAM_CTA;
    wn[i] = 0;
    if (p < P) wn[i] = dev_ld_u32(w + p, DEV_CP_NT);
  }
  for (u32 p0 = lid; p0 < P; p0 += SEAM_CTA * HO_GET_BATCH) {
    u32 cnt = (P - p0 + SEAM_CTA - 1u) / SEAM_CTA;
    cnt = cnt > HO_GET_BATCH ? HO_GET_BATCH : cnt;
    u32 v[HO_GET_BATCH];
    ho_get_batch(tag, lin, (u64)t * P + p0, SEAM_CTA, cnt, v);
#pragma unroll
    for (u32 k = 0; k < HO_GET_BATCH; k++) {
      if (k >= cnt) break;
      u32 p = p0 + k * SEAM_CTA;
      L->x[2u * p] = fmt_bf16_to_f32((u16)v[k]);
      L->x[2u * p + 1u] = fmt_bf16_to_f32((u16)(v[k] >> 16));
    }
  }
  dev_barrier();
  /* 256 work-items: u holds columns 8u + 2048c .. +7, its squares in order; butterfly 1..32 in
   * each wave; the waves as (w0 + w1) + (w2 + w3) */
  if (dev_wave() < 4u) {
    f32 s = 0.0f;
    for (u32 c0 = 8u * lid; c0 < D; c0 += 2048u)
      for (u32 k = 0; k < 8u && c0 + k < D; k++) s = s + L->x[c0 + k] * L->x[c0 + k];
    s = dev_wave_sum_f32_1to32(s);
    if (dev_lane() == 0) L->wsum[dev_wave()] = s;
  }
  dev_barrier();
  f32 ss = (L->wsum[0] + L->wsum[1]) + (L->wsum[2] + L->wsum[3]);
  f32 r = dev_rsq(dev_fma(ss, seam_div(1.0f, (f32)D), a->eps));
  /* normed = bf16((x * r) * w), kept in LDS (in place: each work-item rewrites its own pair) */
#pragma unroll
  for (u32 i = 0; i < SEAM_NORM_W; i++) {
    const u32 p = lid + i * SEAM_CTA;
    if (p >= P) break;
    u32 wp = wn[i];
    f32 x0 = fmt_round_bf16((L->x[2u * p] * r) * fmt_bf16_to_f32((u16)wp));
    f32 x1 = fmt_round_bf16((L->x[2u * p + 1u] * r) * fmt_bf16_to_f32((u16)(wp >> 16)));
    L->x[2u * p] = x0, L->x[2u * p + 1u] = x1;
    if (a->normed)
      dev_st_u32((__global u32 *)a->normed + (u64)t * P + p,
                 (u32)fmt_bf16_from_f32(x0) | (u32)fmt_bf16_from_f32(x1) << 16, DEV_CP_DEV);
  }
  dev_barrier();
  /* quantisation: a work-item a 32-column group, both rules; codes gathered 4 a word */
  const u32 G = D / 32u, want_a = a->x8a != 0;
  __global u32 *x8a = (__global u32 *)a->x8a + (u64)t * (D / 4u);
  __global u32 *x8 = (__global u32 *)a->x8 + (u64)t * (D / 4u);
  __global u32 *x8as = (__global u32 *)a->x8as + (u64)t * (G / 4u);
  __global u32 *x8s = (__global u32 *)a->x8s + (u64)t * (G / 4u);
  u32 ca = 0, cv = 0;
  if (lid < G) {
    f32 amax = 0.0f;
    for (u32 k = 0; k < 32u; k++) {
      f32 v = fmt_absf(L->x[32u * lid + k]);
      amax = v > amax ? v : amax;
    }
#if DEV_ARCH_GFX942
    ca = fmt_mx_code_fnuz(FMT_RULE_A, amax), cv = fmt_mx_code_fnuz(FMT_RULE_V, amax);
#else
    ca = fmt_mx_code_a(amax), cv = fmt_mx_code_v(amax);
#endif
    for (u32 k = 0; k < 32u; k += 4u) {
      u32 wa = 0, wv = 0;
      for (u32 b = 0; b < 4u; b++) {
#if DEV_ARCH_GFX942
        /* FNUZ with max 224 (spec/mono.md §2.6); rule A's bytes even K first in each 8-byte chunk,
         * as the routed experts' FP4 expands */
        f32 xa = L->x[32u * lid + hm_chunk942_k(k + b)], x = L->x[32u * lid + k + b];
        wa |= (u32)fmt_mx_fnuz(xa, (u8)ca) << (8u * b);
        wv |= (u32)fmt_mx_fnuz(x, (u8)cv) << (8u * b);
#else
        f32 x = L->x[32u * lid + k + b];
        wa |= (u32)fmt_mx_e4m3(x, (u8)ca) << (8u * b);
        wv |= (u32)fmt_mx_e4m3(x, (u8)cv) << (8u * b);
#endif
      }
      if (want_a) dev_st_u32(&x8a[8u * lid + k / 4u], wa, DEV_CP_DEV);
      dev_st_u32(&x8[8u * lid + k / 4u], wv, DEV_CP_DEV);
    }
  }
  /* lanes 4g..4g+3 hold groups 4g..4g+3 of a word (G is a multiple of 8: whole words) */
  u32 l = dev_lane(), ga = 0, gv = 0;
  for (u32 b = 0; b < 4u; b++) {
    u32 src = (l & ~3u) + b;
    ga |= (dev_shfl_u32(ca, src) & 0xffu) << (8u * b);
    gv |= (dev_shfl_u32(cv, src) & 0xffu) << (8u * b);
  }
  if (lid < G && lid % 4u == 0) {
    if (want_a) dev_st_u32(&x8as[lid / 4u], ga, DEV_CP_DEV);
    dev_st_u32(&x8s[lid / 4u], gv, DEV_CP_DEV);
  }
  ho_flag_raise((__global u32 *)a->xrdy + t, tag);
  dev_barrier();
}

#endif /* HM_SEAM_H */
