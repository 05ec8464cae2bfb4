/* device/attn/k1.h: K1's attention front (spec/mono.md §2.1 K1.5-K1.7): wqkv by K halves, the q and
 * kv norms with RoPE and the KV record insert, wq_b with RoPE into q; K1's context and LDS.
 *
 * Hand-offs (§3.3): the seam's norm publishes X8 and raises XRDY[t]; a wqkv unit waits for every
 * token's XRDY and sends its f32 row partials as tagged pairs (QKVP); the qkv task of token t waits
 * for the pairs of both K halves, publishes QX8 and raises QRDY[t]; a wq_b task waits for every
 * QRDY. K1's outputs for the next launch (q, records, key table, seam outputs) are plain stores,
 * ordered by the kernel boundary. */
#ifndef HM_ATTN_K1_H
#define HM_ATTN_K1_H

#include "../dev.h"
#include "../formats.h"
#include "../gemv.h"
#include "../handoff.h"
#include "../kernels/k1_args.h"
#include "../seam.h"
#include "kt.h"

struct k1_ctx {
  DEV_ARGSPACE const struct k1_args *a; /* the arguments, read where used */
  u32 tag;                              /* 2e + 1 */
};

/* Between stages: the arguments' address hidden from the optimiser, so argument loads stay in the
 * stage that makes them (device/ffn/ffn.h's ffn_next_stage says why). */
DEV_INLINE void k1_next_stage(struct k1_ctx *c) {
#if defined(DEV_GPU)
  __asm__ volatile("" : "+s"(c->a));
#else
  __asm__ volatile("" : "+r"(c->a));
#endif
}

DEV_INLINE __global u8 *k1_scr(const struct k1_ctx *c, u64 off) { return (__global u8 *)(c->a->scratch + off); }
DEV_INLINE u32 k1_rows(const struct k1_ctx *c) { return c->a->Q + K1_HEAD; } /* wqkv rows N */
DEV_INLINE u32 k1_wqkv_units(const struct k1_ctx *c) { return 2u * (k1_rows(c) / 16u); }
DEV_INLINE u32 k1_wq_b_tasks(const struct k1_ctx *c) { return c->a->H * (K1_HEAD / 16u); }

/* ---------------------------------------------------------------- LDS */

/* Two reduction buffers a GEMV stage alternates between, so a tile's partials can be written
 * while the work-items of the tile before may still read theirs: one barrier a tile, not two. */
struct k1_lds_gemv { gemv_red red[2]; };

/* What a CTA carries from one task of a GEMV stage to the next (wave-uniform): whether it has
 * already waited for the stage's inputs (every token's flag: once a stage is enough), and how
 * many tiles it has reduced (the parity picks the buffer). The stage ends with a barrier. */
struct k1_gemv_state { u32 waited, tiles; };
struct k1_lds_qkv {
  f32 v[K1_MAX_Q + K1_HEAD]; /* the token's qkv row, then its normed q and kv */
  f32 wsum[2][4];            /* wave sums of squares: q (waves 0..3), kv (waves 4..7) */
  u32 code[8];               /* the record's 7 nope block codes */
};

struct k1_lds {
  union {
    struct seam_lds_slice slice;
    struct seam_lds_gate gate;
    struct seam_lds_norm norm;
    struct k1_lds_gemv gemv;
    struct k1_lds_qkv qkv;
  } u;
  u32 word[4]; /* broadcasts (the persistent verdict, the epoch, the CTA id) */
};

/* An fp8 byte of rules V and R under its code: OCP e4m3 on gfx950; on gfx942 FNUZ with max 224
 * (spec/mono.md §2.6: QX8 and the SWA record, whose cache follows the GPU's fp8). */
DEV_INLINE u8 k1_act_byte(f32 x, u8 code) {
#if DEV_ARCH_GFX942
  return fmt_mx_fnuz(x, code);
#else
  return fmt_mx_e4m3(x, code);
#endif
}

/* ---------------------------------------------------------------- K1.5 wqkv */

/* Unit u: rows 16 * (u % tiles) of wqkv over K half u / tiles (D/256 steps of 128: wave w takes
 * steps w, w + 8, ... of the half), every token tile; the f32 row partials (waves added 0..7) out as
 * QKVP pairs [half][t][row]. */
DEV_INLINE void k1_wqkv_unit(const struct k1_ctx *c, __local struct k1_lds *lds, u32 u, struct k1_gemv_state *g) {
  __local struct k1_lds_gemv *L = &lds->u.gemv;
  const u32 S = c->a->seam.S, D = c->a->seam.D, N = k1_rows(c), tiles = N / 16u;
  const u32 tile = u % tiles, kh = u / tiles, n = D / 256u, s0 = kh * n;
  const u32 lane = dev_lane(), wave = dev_wave(), lid = dev_lid();
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)c->a->wqkv, (__global const u8 *)c->a->wqkv_s, N, D);
  gemv_wtile w;
  gemv_wtile_load(&w, &m, 16u * tile, s0, n, wave, lane);
  gemv_act x = gemv_act_of(k1_scr(c, c->a->L.x8), k1_scr(c, c->a->L.x8s), S, D);
  if (!g->waited) ho_flags_wait((__global const u32 *)c->a->seam.xrdy, 1u, S, c->tag), g->waited = 1;
  __global u64 *qkvp = (__global u64 *)k1_scr(c, c->a->L.qkvp);
  for (u32 t0 = 0; t0 < S; t0 += K1_TILE) {
    __local gemv_red *red = &L->red[g->tiles++ & 1u];
    gemv_red_put(red, wave, gemv_wtile_run(&w, &x, t0, s0, n, wave, lane));
    dev_barrier();
    if (lid < 256u) {
      u32 r = lid / 16u, j = lid % 16u, t = t0 + j;
      /* j < K1_TILE: on gfx942 a pass is 6 of the tile's 16 columns, the others the next pass's */
      if (j < K1_TILE && t < S) ho_pair_put(&qkvp[((u64)kh * S + t) * N + 16u * tile + r], dev_bits_f32(gemv_red_sum(red, r, j)), c->tag);
    }
  }
}

/* ---------------------------------------------------------------- K1.6 qkv */

/* Token t: v = bf16(half0 + half1) of its 1792 rows; the q latent's RMSNorm (thread u: columns
 * 8u..8u+7), rule V into QX8 (and bf16 to qr_out in the index build), QRDY[t]; the kv latent's
 * RMSNorm (thread u: columns 2u, 2u+1), RoPE on dims 448..511, the record by rule R at the token's
 * slot (none for slot -1). */
DEV_INLINE void k1_qkv(const struct k1_ctx *c, __local struct k1_lds *lds, u32 t) {
  __local struct k1_lds_qkv *L = &lds->u.qkv;
  const u32 S = c->a->seam.S, Q = c->a->Q, N = Q + K1_HEAD, lid = dev_lid(), wave = dev_wave(), lane = dev_lane();
  const f32 eps = c->a->seam.eps;
  __global const u64 *qkvp = (__global const u64 *)k1_scr(c, c->a->L.qkvp);
  for (u32 r0 = lid; r0 < N; r0 += K1_CTA * HO_GET_BATCH) {
    u32 cnt = (N - r0 + K1_CTA - 1u) / K1_CTA;
    cnt = cnt > HO_GET_BATCH ? HO_GET_BATCH : cnt;
    u32 h0[HO_GET_BATCH], h1[HO_GET_BATCH];
    ho_get_batch(c->tag, qkvp, (u64)t * N + r0, K1_CTA, cnt, h0);
    ho_get_batch(c->tag, qkvp, ((u64)S + t) * N + r0, K1_CTA, cnt, h1);
#pragma unroll
    for (u32 k = 0; k < HO_GET_BATCH; k++)
      if (k < cnt) L->v[r0 + k * K1_CTA] = fmt_round_bf16(dev_f32_bits(h0[k]) + dev_f32_bits(h1[k]));
  }
  dev_barrier();
  /* sums of squares: each thread's values in order, butterfly 32..1, waves (w0 + w1) + (w2 + w3) */
  f32 s = 0.0f;
  if (wave < 4u) {
    for (u32 k = 0; k < 8u && 8u * lid + k < Q; k++) s = s + L->v[8u * lid + k] * L->v[8u * lid + k];
  } else {
    u32 i = Q + 2u * (lid - 256u);
    s = s + L->v[i] * L->v[i];
    s = s + L->v[i + 1u] * L->v[i + 1u];
  }
  s = dev_wave_sum_f32_32to1(s);
  if (lane == 0) L->wsum[wave / 4u][wave % 4u] = s;
  dev_barrier();
  const f32 ssq = (L->wsum[0][0] + L->wsum[0][1]) + (L->wsum[0][2] + L->wsum[0][3]);
  const f32 ssk = (L->wsum[1][0] + L->wsum[1][1]) + (L->wsum[1][2] + L->wsum[1][3]);
  /* rsq(div_rn(ss, n) + eps): an IEEE division and a separate add */
  const f32 rq = dev_rsq(seam_div(ssq, (f32)Q) + eps), rk = dev_rsq(seam_div(ssk, (f32)K1_HEAD) + eps);
  __global const u16 *qw = (__global const u16 *)c->a->q_norm;
  __global const u16 *kw = (__global const u16 *)c->a->kv_norm;
  dev_barrier();
  for (u32 i = lid; i < N; i += K1_CTA)
    L->v[i] = i < Q ? fmt_round_bf16((L->v[i] * rq) * fmt_bf16_to_f32(qw[i]))
                    : fmt_round_bf16((L->v[i] * rk) * fmt_bf16_to_f32(kw[i - Q]));
  dev_barrier();
  /* RoPE of the kv's dims 448..511 (GPT-J pairs, unfused products, bf16) */
  const i64 pos = ((__global const i64 *)c->a->kt.positions)[t];
  if (lid < (K1_HEAD - K1_NOPE) / 2u) {
    __global const f32 *cs = (__global const f32 *)c->a->cos_sin + (u64)pos * 64u;
    __local f32 *p = &L->v[Q + K1_NOPE + 2u * lid];
    f32 x0 = p[0], x1 = p[1], co = cs[lid], si = cs[32u + lid];
    p[0] = fmt_round_bf16(x0 * co - x1 * si);
    p[1] = fmt_round_bf16(x0 * si + x1 * co);
  }
  /* the q latent: bf16 out (index build), rule V per 32 columns into QX8 / QX8S */
  if (c->a->index_build)
    for (u32 p = lid; p < Q / 2u; p += K1_CTA)
      ((__global u32 *)c->a->qr_out)[(u64)t * (Q / 2u) + p] =
          (u32)fmt_bf16_from_f32(L->v[2u * p]) | (u32)fmt_bf16_from_f32(L->v[2u * p + 1u]) << 16;
  const u32 G = Q / 32u;
  __global u32 *qx8 = (__global u32 *)k1_scr(c, c->a->L.qx8) + (u64)t * (Q / 4u);
  __global u32 *qx8s = (__global u32 *)k1_scr(c, c->a->L.qx8s) + (u64)t * (G / 4u);
  u32 cv = 0;
  if (lid < G) {
    f32 amax = 0.0f;
    for (u32 k = 0; k < 32u; k++) {
      f32 v = fmt_absf(L->v[32u * lid + k]);
      amax = v > amax ? v : amax;
    }
#if DEV_ARCH_GFX942
    cv = fmt_mx_code_fnuz(FMT_RULE_V, amax); /* FNUZ against 224 (spec/mono.md §2.6) */
#else
    cv = fmt_mx_code_v(amax);
#endif
    for (u32 k = 0; k < 32u; k += 4u) {
      u32 wv = 0;
      for (u32 b = 0; b < 4u; b++) wv |= (u32)k1_act_byte(L->v[32u * lid + k + b], (u8)cv) << (8u * b);
      dev_st_u32(&qx8[8u * lid + k / 4u], wv, DEV_CP_DEV);
    }
  }
  u32 gv = 0;
  for (u32 b = 0; b < 4u; b++) gv |= (dev_shfl_u32(cv, (lane & ~3u) + b) & 0xffu) << (8u * b);
  if (lid < G && lid % 4u == 0) dev_st_u32(&qx8s[lid / 4u], gv, DEV_CP_DEV);
  ho_flag_raise((__global u32 *)k1_scr(c, c->a->L.qrdy) + t, c->tag);
  /* the record (rule R per 64 nope dims, rope dims bf16) at the token's slot */
  const i64 slot = ((__global const i64 *)c->a->kt.slot_mapping)[t];
  __local const f32 *kv = &L->v[Q];
  if (lid < K1_NOPE / 64u) {
    f32 amax = 0.0f;
    for (u32 k = 0; k < 64u; k++) {
      f32 v = fmt_absf(kv[64u * lid + k]);
      amax = v > amax ? v : amax;
    }
#if DEV_ARCH_GFX942
    L->code[lid] = fmt_mx_code_fnuz(FMT_RULE_R, amax); /* the SWA record FNUZ (spec/mono.md §2.6) */
#else
    L->code[lid] = fmt_mx_code_r(amax);
#endif
  }
  dev_barrier();
  if (slot >= 0) {
    const u64 bs = c->a->swa_block, b = (u64)slot / bs, o = (u64)slot % bs;
    __global u8 *page = (__global u8 *)(c->a->swa + b * c->a->swa_stride);
    __global u32 *data = (__global u32 *)(page + o * K1_RECORD_DATA);
    if (lid < K1_NOPE / 4u) {
      u32 code = L->code[lid / 16u], w = 0;
      for (u32 k = 0; k < 4u; k++) w |= (u32)k1_act_byte(kv[4u * lid + k], (u8)code) << (8u * k);
      data[lid] = w;
    } else if (lid < K1_NOPE / 4u + (K1_HEAD - K1_NOPE) / 2u) {
      u32 j = lid - K1_NOPE / 4u; /* rope dims 2j, 2j + 1 as bf16, little endian */
      data[lid] = (u32)fmt_bf16_from_f32(kv[K1_NOPE + 2u * j]) | (u32)fmt_bf16_from_f32(kv[K1_NOPE + 2u * j + 1u]) << 16;
    } else if (lid < K1_NOPE / 4u + (K1_HEAD - K1_NOPE) / 2u + 2u) {
      u32 h = lid - (K1_NOPE / 4u + (K1_HEAD - K1_NOPE) / 2u), w = 0;
      for (u32 k = 0; k < 4u; k++)
        if (4u * h + k < K1_NOPE / 64u) w |= L->code[4u * h + k] << (8u * k); /* byte 7: zero */
      ((__global u32 *)(page + bs * K1_RECORD_DATA + o * 8u))[h] = w;
    }
  }
  dev_barrier();
}

/* ---------------------------------------------------------------- K1.7 wq_b */

/* Task k: rows 16k of wq_b over K = Q (wave w steps w, w + 8, ...), every token tile; v =
 * bf16(row sum), RoPE on head dims 448..511 (f32 from bf16, unfused, bf16), into q[t][row]. */
DEV_INLINE void k1_wq_b_task(const struct k1_ctx *c, __local struct k1_lds *lds, u32 task, struct k1_gemv_state *g) {
  __local struct k1_lds_gemv *L = &lds->u.gemv;
  const u32 S = c->a->seam.S, Q = c->a->Q, H = c->a->H, n = Q / 128u;
  const u32 lane = dev_lane(), wave = dev_wave(), lid = dev_lid();
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)c->a->wq_b, (__global const u8 *)c->a->wq_b_s, H * K1_HEAD, Q);
  gemv_wtile w;
  gemv_wtile_load(&w, &m, 16u * task, 0u, n, wave, lane);
  gemv_act x = gemv_act_of(k1_scr(c, c->a->L.qx8), k1_scr(c, c->a->L.qx8s), S, Q);
  if (!g->waited) ho_flags_wait((__global const u32 *)k1_scr(c, c->a->L.qrdy), 1u, S, c->tag), g->waited = 1;
  __global const i64 *pos = (__global const i64 *)c->a->kt.positions;
  __global u32 *q = (__global u32 *)c->a->q;
  for (u32 t0 = 0; t0 < S; t0 += K1_TILE) {
    __local gemv_red *red = &L->red[g->tiles++ & 1u];
    gemv_red_put(red, wave, gemv_wtile_run(&w, &x, t0, 0u, n, wave, lane));
    dev_barrier();
    if (lid < 128u) {
      /* work-item (row pair rp, token j): rows 2rp, 2rp + 1 of the tile */
      u32 rp = lid / 16u, j = lid % 16u, t = t0 + j, row = 16u * task + 2u * rp, d = row % K1_HEAD;
      if (j < K1_TILE && t < S) {
        f32 e = fmt_round_bf16(gemv_red_sum(red, 2u * rp, j));
        f32 o = fmt_round_bf16(gemv_red_sum(red, 2u * rp + 1u, j));
        if (d >= K1_NOPE) {
          __global const f32 *cs = (__global const f32 *)c->a->cos_sin + (u64)pos[t] * 64u;
          u32 p = (d - K1_NOPE) / 2u;
          f32 co = cs[p], si = cs[32u + p];
          f32 re = fmt_round_bf16(e * co - o * si), ro = fmt_round_bf16(e * si + o * co);
          e = re, o = ro;
        }
        q[((u64)t * H * K1_HEAD + row) / 2u] = (u32)fmt_bf16_from_f32(e) | (u32)fmt_bf16_from_f32(o) << 16;
      }
    }
  }
}

#endif /* HM_ATTN_K1_H */
