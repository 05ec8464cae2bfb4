/* device/attn/k2.h: K2's attention back (spec/mono.md §2.2): sparse attention split over key chunks,
 * the combine with the sink and inverse RoPE, wo_a by o group, wo_b pushed to every rank.
 *
 * Hand-offs (§3.3): a split unit (token t, chunk ch) stores its bf16 partial and (m, l) plain at
 * device scope and raises SRDY[t][ch]; the combine of (t, group g) waits for t's live chunks,
 * publishes XO and raises CRDY[t][g]; a wo_a task waits for its group's CRDY of every token,
 * publishes X8B and raises ARDY[task]; a wo_b task waits for every ARDY and pushes its rows into
 * every rank's attention all-reduce inbox, which the FFN seam's slices reduce (device/ffn/seam.h).
 * K1's outputs (q, the key table, the records) are ordered by the kernel boundary. */
#ifndef HM_ATTN_K2_H
#define HM_ATTN_K2_H

#include "../dev.h"
#include "../ffn/ffn.h"
#include "../ffn/shared.h"
#include "../formats.h"
#include "../gemv.h"
#include "../handoff.h"
#include "../kernels/k2_args.h"

/* K2 runs in the FFN launch's context (device/ffn/ffn.h: the arguments, the tag 2e + 2, the
 * deadline), whose arguments are the first member of struct k2_args; the back's follow them. */
DEV_INLINE DEV_ARGSPACE const struct k2_back_args *k2_back(const struct ffn_ctx *c) {
  return &((DEV_ARGSPACE const struct k2_args *)c->a)->back;
}
DEV_INLINE __global u8 *k2_scr(const struct ffn_ctx *c, u64 off) { return (__global u8 *)(c->a->scratch + off); }
DEV_INLINE __global u32 *k2_flags(const struct ffn_ctx *c, u64 off) { return (__global u32 *)(c->a->scratch + off); }

/* Task counts (spec/mono.md §3.1). */
DEV_INLINE u32 k2_nch(const struct ffn_ctx *c) { return K2_KEYS / k2_back(c)->ck; }
DEV_INLINE u32 k2_groups(const struct ffn_ctx *c) { return k2_back(c)->H / K2_GROUP_HEADS; }
DEV_INLINE u32 k2_split_units(const struct ffn_ctx *c) { return c->a->S * k2_nch(c); }
DEV_INLINE u32 k2_comb_units(const struct ffn_ctx *c) { return c->a->S * k2_groups(c); }
DEV_INLINE u32 k2_o_rows(const struct ffn_ctx *c) { return k2_groups(c) * k2_back(c)->o_lora; }
DEV_INLINE u32 k2_woa_tasks(const struct ffn_ctx *c) { return k2_o_rows(c) / 32u; }
DEV_INLINE u32 k2_wob_tasks(const struct ffn_ctx *c) { return c->a->D / 16u; }

/* ---------------------------------------------------------------- LDS */

/* A split unit: the token's q (bf16 pairs, rows padded against bank conflicts), the chunk's raw
 * records (576 data bytes, then the 7 block codes and a pad byte), each key's validity, a key
 * tile's max and p sum for each head, and bf16(p) for the PV product. Sized for the arch's widest
 * unit (K2_LDS_*: gfx942's 16 heads and 64 keys keep it within 64 KB). */
#define K2_QROW (K2_HEAD / 2u + 4u)
#define K2_REC (K2_RECORD_DATA + 8u)
#define K2_PROW (K2_LDS_CK + 8u)
#define K2_KEY_LIVE 1u /* valid[]: the key is read (in the row's kv_len, not -1) */
#define K2_KEY_COMP 2u /* valid[]: its record is the compressed cache's */
struct k2_lds_split {
  u32 q[K2_LDS_HEADS][K2_QROW];
  u8 rec[K2_LDS_CK][K2_REC];
  u32 valid[K2_LDS_CK];
  f32 mx[K2_LDS_CK / 16u][K2_LDS_HEADS];
  f32 ts[K2_LDS_CK / 16u][K2_LDS_HEADS];
  u16 p[K2_LDS_HEADS][K2_PROW];
};
struct k2_lds_gemv { gemv_red red[2]; };

/* The back's stages overlay the FFN launch's LDS after its broadcasts (device/ffn/ffn.h puts them
 * first), which the FFN stages then find intact. */
union k2_lds {
  struct ffn_lds f;
  struct {
    u32 word[4];
    u64 deadline;
    union {
      struct k2_lds_split split;
      struct k2_lds_gemv gemv;
    } u;
  } b;
};

/* What a CTA carries from one task of a GEMV stage to the next (as K1's k1_gemv_state): whether it
 * has waited for the stage's inputs, and how many tiles it has reduced (the parity picks the
 * reduction buffer: one barrier a tile). */
struct k2_gemv_state { u32 waited, tiles; };

/* A masked key's score: -FLT_MAX, as the reference's (exp2 of it less the max is 0). */
#define K2_MASKED (-3.40282347e+38f)

/* ---------------------------------------------------------------- record values */

/* An e4m3 byte of a record times its block's scale, as bf16 bits: exact (3 mantissa bits times a
 * power of two fit bf16's 7), so the low half of the f32 is zero and is dropped, not rounded.
 * comp: the record is the compressed cache's. The SWA cache follows the GPU's fp8 and the
 * compressed one is OCP on both (spec/mono.md §2.6), so on gfx942, whose conversion reads FNUZ,
 * a compressed byte read as FNUZ is worth half its OCP value (bias 8 against 7: also for the
 * subnormals) and is doubled, exactly; OCP's -0 (0x80, FNUZ's NaN) is -0. OCP's NaN bytes are
 * never written (the quantiser clamps), so they are not told apart. */
DEV_INLINE u16 k2_nope_bf16(u32 byte, f32 scale, u32 comp) {
#if DEV_ARCH_GFX942
  if (comp) return byte == 0x80u ? (u16)0x8000u : (u16)(dev_bits_f32(dev_cvt_f32_fp8(byte, 0) * 2.0f * scale) >> 16);
#else
  (void)comp;
#endif
  return (u16)(dev_bits_f32(dev_cvt_f32_fp8(byte, 0) * scale) >> 16);
}

/* ---------------------------------------------------------------- split (§2.2) */

/* Unit u = t * nch + ch: the chunk's ck keys against the token's H heads. Waves take the (key
 * tile, head tile) pairs of QK (16 keys x 16 heads, K = 512 in 16 bf16 MFMAs of 32, dims
 * ascending); the chunk's max and p = exp2(s - m) per head; then the (head tile, 16 dims) pairs
 * of PV, each one chain over the key tiles in order (bf16 MFMA 16x16x16 of bf16(p) and the
 * record's values). Out: the bf16 partial, (m_c, l_c), SRDY. Skipped when ch * ck >= kv_len. */
DEV_INLINE void k2_split(const struct ffn_ctx *c, __local union k2_lds *lds, u32 u) {
  __local struct k2_lds_split *L = &lds->b.u.split;
  DEV_ARGSPACE const struct k2_back_args *b = k2_back(c);
  const u32 ck = b->ck, nch = K2_KEYS / ck, H = b->H, t = u / nch, ch = u % nch;
  const u32 lid = dev_lid(), lane = dev_lane(), wave = dev_wave();
  const i32 kv_len = (i32)dev_readfirstlane_u32((u32)((__global const i32 *)b->klen)[t]);
  if ((i32)(ch * ck) >= kv_len) return;
  /* the token's q, then the chunk's records (-1 or past kv_len: the zero record, masked) */
  __global const u32 *q = (__global const u32 *)b->q + (u64)t * H * (K2_HEAD / 2u);
  for (u32 i = lid; i < H * (K2_HEAD / 2u); i += FFN_CTA) L->q[i / (K2_HEAD / 2u)][i % (K2_HEAD / 2u)] = q[i];
  __global const i32 *kt = (__global const i32 *)b->kt + (u64)t * K2_KEYS + ch * ck;
  for (u32 j = lid; j < ck; j += FFN_CTA) {
    i32 v = kt[j];
    L->valid[j] = (i32)(ch * ck + j) < kv_len && v != -1 ? K2_KEY_LIVE | ((u32)v >> 31) * K2_KEY_COMP : 0u;
  }
  dev_barrier();
  for (u32 i = lid; i < ck * (K2_REC / 4u); i += FFN_CTA) {
    u32 j = i / (K2_REC / 4u), w = i % (K2_REC / 4u), word = 0;
    if (L->valid[j]) {
      u32 v = (u32)kt[j], comp = v >> 31, slot = v & 0x7fffffffu;
      u64 bs = comp ? b->comp_block : b->swa_block, blk = slot / bs, row = slot % bs;
      __global const u8 *page = (__global const u8 *)((comp ? b->comp : b->swa) + blk * (comp ? b->comp_stride : b->swa_stride));
      word = w < K2_RECORD_DATA / 4u ? ((__global const u32 *)(page + row * K2_RECORD_DATA))[w]
                                     : ((__global const u32 *)(page + bs * K2_RECORD_DATA + row * 8u))[w - K2_RECORD_DATA / 4u];
    }
    ((__local u32 *)L->rec[j])[w] = word;
  }
  dev_barrier();

  /* QK: this wave's tiles (at most 2: ck / 16 * H / 16 <= 16), scores kept in registers */
  const u32 ktiles = ck / 16u, pairs = ktiles * (H / 16u);
  const f32 qk_scale = dev_f32_bits(b->qk_scale);
  f32x4 s[2];
  for (u32 i = 0; i < 2u; i++) {
    u32 pi = wave + 8u * i;
    s[i] = 0;
    if (pi >= pairs) continue;
    u32 kti = pi % ktiles, ht = pi / ktiles, key = 16u * kti + lane % 16u, h = 16u * ht + lane % 16u;
    __local const u8 *rec = L->rec[key];
    const u32 comp = L->valid[key] & K2_KEY_COMP;
    f32x4 acc = 0;
#if DEV_ARCH_GFX942
    /* no 16x16x32 bf16 MFMA: steps of 16 dims, one 16x16x16 each (lane K 4(l/16)..+3), in one
     * chain (spec/mono.md §2.6; the reference's gfx942 mode sums them so) */
    for (u32 st = 0; st < K2_HEAD / 16u; st++) {
      u32 d = 16u * st + 4u * (lane / 16u);
      u16x4 a, qv;
      if (d < K2_NOPE) {
        f32 sc = fmt_e8m0_decode(rec[K2_RECORD_DATA + d / 64u]);
        u32 w = ((__local const u32 *)rec)[d / 4u];
        for (u32 e = 0; e < 4u; e++) a[e] = k2_nope_bf16((w >> (8u * e)) & 0xffu, sc, comp);
      } else {
        __local const u32 *r = (__local const u32 *)(rec + K2_NOPE + 2u * (d - K2_NOPE));
        for (u32 e = 0; e < 2u; e++) a[2u * e] = (u16)r[e], a[2u * e + 1u] = (u16)(r[e] >> 16);
      }
      for (u32 e = 0; e < 2u; e++) {
        u32 w = L->q[h][d / 2u + e];
        qv[2u * e] = (u16)w, qv[2u * e + 1u] = (u16)(w >> 16);
      }
      acc = dev_mfma_f32_16x16x16_bf16(a, qv, acc);
    }
#else
    for (u32 st = 0; st < K2_HEAD / 32u; st++) {
      u32 d = 32u * st + 8u * (lane / 16u);
      u16x8 a, qv;
      if (d < K2_NOPE) {
        f32 sc = fmt_e8m0_decode(rec[K2_RECORD_DATA + d / 64u]);
        u32 lo = ((__local const u32 *)rec)[d / 4u], hi = ((__local const u32 *)rec)[d / 4u + 1u];
        for (u32 e = 0; e < 4u; e++) a[e] = k2_nope_bf16((lo >> (8u * e)) & 0xffu, sc, comp);
        for (u32 e = 0; e < 4u; e++) a[4u + e] = k2_nope_bf16((hi >> (8u * e)) & 0xffu, sc, comp);
      } else {
        __local const u32 *r = (__local const u32 *)(rec + K2_NOPE + 2u * (d - K2_NOPE));
        for (u32 e = 0; e < 4u; e++) a[2u * e] = (u16)r[e], a[2u * e + 1u] = (u16)(r[e] >> 16);
      }
      for (u32 e = 0; e < 4u; e++) {
        u32 w = L->q[h][d / 2u + e];
        qv[2u * e] = (u16)w, qv[2u * e + 1u] = (u16)(w >> 16);
      }
      acc = dev_mfma_f32_16x16x32_bf16(a, qv, acc);
    }
#endif
    /* D[key][head]: lane holds head l%16, keys 4(l/16)..+3; scores in the log2 domain */
    f32 m = K2_MASKED;
    for (u32 r = 0; r < 4u; r++) {
      u32 k = 16u * kti + 4u * (lane / 16u) + r;
      acc[r] = L->valid[k] ? acc[r] * qk_scale : K2_MASKED;
      m = acc[r] > m ? acc[r] : m;
    }
    s[i] = acc;
    f32 o = dev_shfl_xor_f32(m, 16u);
    m = o > m ? o : m;
    o = dev_shfl_xor_f32(m, 32u);
    m = o > m ? o : m;
    if (lane < 16u) L->mx[kti][h] = m;
  }
  dev_barrier();
  /* p = exp2(s - m_c) (0 for a masked key); a tile's sum as §2.2 orders it: lane sums
   * (p0 + p2) + (p1 + p3), then + xor-32, + xor-16; bf16(p) for PV */
  for (u32 i = 0; i < 2u; i++) {
    u32 pi = wave + 8u * i;
    if (pi >= pairs) continue;
    u32 kti = pi % ktiles, ht = pi / ktiles, h = 16u * ht + lane % 16u;
    f32 m = L->mx[0][h];
    for (u32 k = 1; k < ktiles; k++) m = L->mx[k][h] > m ? L->mx[k][h] : m;
    f32 p[4];
    for (u32 r = 0; r < 4u; r++) {
      u32 k = 16u * kti + 4u * (lane / 16u) + r;
      p[r] = L->valid[k] ? dev_exp2(s[i][r] - m) : 0.0f;
      L->p[h][k] = fmt_bf16_from_f32(p[r]);
    }
    f32 g = (p[0] + p[2]) + (p[1] + p[3]);
    g = g + dev_shfl_xor_f32(g, 32u);
    g = g + dev_shfl_xor_f32(g, 16u);
    if (lane < 16u) L->ts[kti][h] = g;
  }
  dev_barrier();
  /* PV: (head tile, 16 dims) pairs; D[head][dim]: lane holds dim l%16, heads 4(l/16)..+3 */
  __global u32 *oc = (__global u32 *)k2_scr(c, b->L.oc) + ((u64)t * nch + ch) * H * (K2_HEAD / 2u);
  const u32 vpairs = (H / 16u) * (K2_HEAD / 16u);
  for (u32 pi = wave; pi < vpairs; pi += 8u) {
    u32 ht = pi / (K2_HEAD / 16u), d = 16u * (pi % (K2_HEAD / 16u)) + lane % 16u;
    f32x4 acc = 0;
    for (u32 kti = 0; kti < ktiles; kti++) {
      u32 k0 = 16u * kti + 4u * (lane / 16u);
      u16x4 pa, v;
      for (u32 e = 0; e < 4u; e++) {
        pa[e] = L->p[16u * ht + lane % 16u][k0 + e];
        __local const u8 *rec = L->rec[k0 + e];
        if (d < K2_NOPE)
          v[e] = k2_nope_bf16(rec[d], fmt_e8m0_decode(rec[K2_RECORD_DATA + d / 64u]), L->valid[k0 + e] & K2_KEY_COMP);
        else v[e] = (u16)(rec[K2_NOPE + 2u * (d - K2_NOPE)] | (u32)rec[K2_NOPE + 2u * (d - K2_NOPE) + 1u] << 8);
      }
      acc = dev_mfma_f32_16x16x16_bf16(pa, v, acc);
    }
    /* the partial as bf16, two dims a word: the even lane stores its dim and its neighbour's */
    for (u32 r = 0; r < 4u; r++) {
      u32 mine = fmt_bf16_from_f32(acc[r]), next = dev_shfl_xor_u32(mine, 1u);
      u32 h = 16u * ht + 4u * (lane / 16u) + r;
      if ((lane & 1u) == 0) dev_st_u32(&oc[(u64)h * (K2_HEAD / 2u) + d / 2u], mine | next << 16, DEV_CP_DEV);
    }
  }
  /* the chunk's statistics: m_c and l_c (tiles added in order) for each head */
  if (lid < H) {
    f32 m = L->mx[0][lid], l = 0.0f;
    for (u32 k = 1; k < ktiles; k++) m = L->mx[k][lid] > m ? L->mx[k][lid] : m;
    for (u32 k = 0; k < ktiles; k++) l = l + L->ts[k][lid];
    __global u64 *ml = (__global u64 *)k2_scr(c, b->L.ml) + ((u64)t * nch + ch) * H;
    dev_st_u64(&ml[lid], (u64)dev_bits_f32(m) | (u64)dev_bits_f32(l) << 32, DEV_CP_DEV);
  }
  ho_flag_raise(k2_flags(c, b->L.srdy) + (u64)t * nch + ch, c->tag);
}

/* ---------------------------------------------------------------- combine (§2.2) */

/* Unit u = t * G + g: a wave a head of group g, 8 dims a lane. M = max(sink', m_c...), L =
 * exp2(sink' - M) + sum l_c exp2(m_c - M) (sink first, chunks in order), o = bf16(T * (1 / L)),
 * inverse RoPE on dims >= 448 (f32), rule V per 32 dims into XO (group-major), CRDY[t][g]. */
DEV_INLINE void k2_combine(const struct ffn_ctx *c, u32 u) {
  DEV_ARGSPACE const struct k2_back_args *b = k2_back(c);
  const u32 S = c->a->S, H = b->H, G = H / K2_GROUP_HEADS, ck = b->ck, nch = K2_KEYS / ck;
  const u32 t = u / G, g = u % G, lane = dev_lane(), wave = dev_wave(), h = K2_GROUP_HEADS * g + wave;
  const i32 kv_len = (i32)dev_readfirstlane_u32((u32)((__global const i32 *)b->klen)[t]);
  const u32 live = kv_len > 0 ? ((u32)kv_len + ck - 1u) / ck : 0u;
  ho_flags_wait(k2_flags(c, b->L.srdy) + (u64)t * nch, 1u, live, c->tag);
  __global const u64 *ml = (__global const u64 *)k2_scr(c, b->L.ml) + (u64)t * nch * H + h;
  __global const u32 *oc = (__global const u32 *)k2_scr(c, b->L.oc) + ((u64)t * nch * H + h) * (K2_HEAD / 2u) + 4u * lane;
  const f32 sk = ((__global const f32 *)b->sink)[h] * FFN_LOG2E;
  f32 M = sk;
  for (u32 ch = 0; ch < live; ch++) {
    f32 m = dev_f32_bits((u32)dev_ld_u64(&ml[(u64)ch * H], DEV_CP_DEV));
    M = __builtin_fmaxf(M, m);
  }
  f32 Lsum = dev_exp2(sk - M), T[8];
  for (u32 ch = 0; ch < live; ch++) {
    u64 v = dev_ld_u64(&ml[(u64)ch * H], DEV_CP_DEV);
    f32 e = dev_exp2(dev_f32_bits((u32)v) - M);
    Lsum = Lsum + dev_f32_bits((u32)(v >> 32)) * e;
    for (u32 k = 0; k < 4u; k++) {
      u32 w = dev_ld_u32(&oc[(u64)ch * H * (K2_HEAD / 2u) + k], DEV_CP_DEV);
      f32 lo = fmt_bf16_to_f32((u16)w) * e, hi = fmt_bf16_to_f32((u16)(w >> 16)) * e;
      T[2u * k] = ch == 0 ? lo : T[2u * k] + lo;
      T[2u * k + 1u] = ch == 0 ? hi : T[2u * k + 1u] + hi;
    }
  }
  const f32 inv = seam_div(1.0f, Lsum);
  f32 y[8];
  for (u32 k = 0; k < 8u; k++) y[k] = fmt_round_bf16((live ? T[k] : 0.0f) * inv);
  const u32 d0 = 8u * lane;
  if (d0 >= K2_NOPE) {
    const i64 pos = ((__global const i64 *)b->positions)[t];
    __global const f32 *cs = (__global const f32 *)b->cos_sin + (u64)pos * 64u;
    for (u32 k = 0; k < 8u; k += 2u) {
      u32 j = (d0 + k - K2_NOPE) / 2u;
      f32 a = y[k], o = y[k + 1u], co = cs[j], si = cs[32u + j];
      y[k] = a * co + o * si;
      y[k + 1u] = o * co - a * si;
    }
  }
  /* rule V over the 32 dims of 4 lanes (gfx942: FNUZ against 224, spec/mono.md §2.6) */
  f32 amax = 0.0f;
  for (u32 k = 0; k < 8u; k++) {
    f32 v = fmt_absf(y[k]);
    amax = v > amax ? v : amax;
  }
  f32 o = dev_shfl_xor_f32(amax, 1u);
  amax = o > amax ? o : amax;
  o = dev_shfl_xor_f32(amax, 2u);
  amax = o > amax ? o : amax;
  const u32 code = ffn_act_code(FMT_RULE_V, amax);
  u32 w0 = 0, w1 = 0;
  for (u32 k = 0; k < 4u; k++) w0 |= ffn_act_byte(y[k], code) << (8u * k);
  for (u32 k = 0; k < 4u; k++) w1 |= ffn_act_byte(y[4u + k], code) << (8u * k);
  __global u32 *xo = (__global u32 *)k2_scr(c, b->L.xo) + (((u64)g * S + t) * K2_GROUP_K + wave * K2_HEAD + d0) / 4u;
  dev_st_u32(&xo[0], w0, DEV_CP_DEV);
  dev_st_u32(&xo[1], w1, DEV_CP_DEV);
  /* the head's 16 codes, 4 a word: lane 16k gathers blocks 4k..4k+3 (lanes 16k, +4, +8, +12) */
  u32 cw = 0;
  for (u32 k = 0; k < 4u; k++) cw |= (dev_shfl_u32(code, (lane & ~15u) + 4u * k) & 0xffu) << (8u * k);
  __global u32 *xos = (__global u32 *)k2_scr(c, b->L.xos) + (((u64)g * S + t) * (K2_GROUP_K / 32u) + wave * 16u) / 4u;
  if (lane % 16u == 0) dev_st_u32(&xos[lane / 16u], cw, DEV_CP_DEV);
  ho_flag_raise(k2_flags(c, b->L.crdy) + (u64)t * G + g, c->tag);
}

/* ---------------------------------------------------------------- wo_a (§2.2) */

/* Task k: rows 32k..32k+31 of wo_a (group g = k / (o_lora / 32)) over the group's XO (K = 4096,
 * 32 steps). Split-K: waves 0-3 take rows 0-15, waves 4-7 rows 16-31, wave w the 8 contiguous
 * steps 8(w % 4)..; the 4 partials added in order, bf16, rule V over the task's 32 rows into X8B,
 * ARDY[k]. The first half of the wave's weights is loaded before the wait. */
#define K2_WOA_PRE 4u

/* The wave's first K2_WOA_PRE steps of its 16 rows, loaded before the task waits: gfx950's scaled
 * MFMA operands (the codes are read with the activations'), gfx942's four K blocks a step and
 * their codes (device/gemv.h). */
typedef struct {
#if DEV_ARCH_GFX942
  u64 a[K2_WOA_PRE][4];
  u32 codes[K2_WOA_PRE];
#else
  i32x8 a[K2_WOA_PRE];
#endif
} k2_woa_pre;

/* row0: the wave's 16-row tile; row: the lane's row in it; s0: the wave's first step */
DEV_INLINE void k2_woa_pre_load(k2_woa_pre *p, const gemv_mx8 *m, u32 row0, u32 row, u32 s0, u32 lane) {
#pragma unroll
  for (u32 i = 0; i < K2_WOA_PRE; i++) {
#if DEV_ARCH_GFX942
    (void)row;
    u64 a[4];
    gemv942_ld_w(m, row0, s0 + i, lane, a);
    for (u32 b = 0; b < 4u; b++) p->a[i][b] = a[b];
    p->codes[i] = gemv942_ld_codes(m, row0, s0 + i);
#if defined(DEV_GPU)
    __asm__ volatile("" : "+v"(p->codes[i])); /* in a VGPR, as gemv_wtile_load's (SGPRs are short) */
#endif
#else
    (void)row0;
    p->a[i] = gemv_ld_fp8(m->w, row * K2_GROUP_K, K2_GROUP_K, s0 + i, lane, DEV_CP_NT);
#endif
  }
}

/* One token tile of a wo_a task, everything derived from the arguments here (made once for the
 * task and held through its tiles, the descriptors and addresses cost the kernel more scalar
 * registers than it has). wv: the wave's first K2_WOA_PRE steps of weights. */
DEV_INLINE void k2_wo_a_tile(const struct ffn_ctx *c0, __local gemv_red *red, u32 task, u32 t0, const k2_woa_pre *wv) {
  struct ffn_ctx cc = *c0;
  ffn_next_stage(&cc);
  const struct ffn_ctx *c = &cc;
  DEV_ARGSPACE const struct k2_back_args *b = k2_back(c);
  const u32 S = c->a->S, orows = (b->H / K2_GROUP_HEADS) * b->o_lora, g = task / (b->o_lora / 32u);
  const u32 lane = dev_lane(), wave = dev_wave(), lid = dev_lid();
  const u32 row0 = 32u * task + 16u * (wave / 4u), row = row0 + lane % 16u, s0 = 8u * (wave % 4u);
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)b->wo_a, (__global const u8 *)b->wo_a_s, orows, K2_GROUP_K);
  gemv_act x = gemv_act_of(k2_scr(c, b->L.xo) + (u64)g * S * K2_GROUP_K, k2_scr(c, b->L.xos) + (u64)g * S * (K2_GROUP_K / 32u),
                           S, K2_GROUP_K);
  f32x4 acc = 0;
#if DEV_ARCH_GFX942
  /* a pass of 6 tokens; each step's four K blocks one unscaled MFMA each, added by fma (§2.6) */
  (void)row;
  const u32 tok = gemv942_token(&x, t0, lane);
#pragma unroll
  for (u32 i = 0; i < K2_WOA_PRE; i++) {
    const u64 a[4] = {wv->a[i][0], wv->a[i][1], wv->a[i][2], wv->a[i][3]};
    acc = gemv942_blocks(a, wv->codes[i], &x, tok, s0 + i, lane, acc);
  }
#pragma nounroll
  for (u32 st = s0 + K2_WOA_PRE; st < s0 + 8u; st++) acc = gemv942_mx8_step(&m, &x, row0, t0, st, lane, acc);
#else
#pragma unroll
  for (u32 i = 0; i < K2_WOA_PRE; i++)
    acc = gemv_mfma_fp8(wv->a[i], gemv_ld_act(&x, t0, s0 + i, lane), acc, gemv_mx8_scale(&m, row, 4u * (s0 + i) + lane / 16u),
                        gemv_act_scale(&x, t0, s0 + i, lane));
  /* the second half streamed (kept rolled for the same reason) */
#pragma nounroll
  for (u32 st = s0 + K2_WOA_PRE; st < s0 + 8u; st++) {
    i32x8 a = gemv_ld_fp8(m.w, row * K2_GROUP_K, K2_GROUP_K, st, lane, DEV_CP_NT);
    acc = gemv_mfma_fp8(a, gemv_ld_act(&x, t0, st, lane), acc, gemv_mx8_scale(&m, row, 4u * st + lane / 16u),
                        gemv_act_scale(&x, t0, st, lane));
  }
#endif
  gemv_red_put(red, wave, acc);
  dev_barrier();
  /* work-item (token j, row r): the row's 4 K quarters in order, bf16; rule V over the 32 rows of
   * the token, which are the 32 lanes of one half wave (gfx942: FNUZ against 224, and a pass is
   * the tile's first 6 columns) */
  const u32 j = lid / 32u, r = lid % 32u, tt = t0 + j, w0 = 4u * (r / 16u);
  f32 v = gemv_red_at(red, w0, r % 16u, j);
  for (u32 i = 1; i < 4u; i++) v = v + gemv_red_at(red, w0 + i, r % 16u, j);
  v = fmt_round_bf16(v);
  f32 amax = fmt_absf(v);
  for (u32 sh = 1; sh < 32u; sh <<= 1) {
    f32 o = dev_shfl_xor_f32(amax, sh);
    amax = o > amax ? o : amax;
  }
  const u32 code = ffn_act_code(FMT_RULE_V, amax), byte = ffn_act_byte(v, code);
  u32 word = 0;
  for (u32 k = 0; k < 4u; k++) word |= (dev_shfl_u32(byte, (lane & ~3u) + k) & 0xffu) << (8u * k);
  __global u32 *x8b = (__global u32 *)k2_scr(c, b->L.x8b), *x8bs = (__global u32 *)k2_scr(c, b->L.x8bs);
  const u32 mine = tt < S && j < FFN_TILE;
  if (mine && r % 4u == 0) dev_st_u32(&x8b[((u64)tt * orows + 32u * task + r) / 4u], word, DEV_CP_DEV);
  if (mine && r == 0) dev_st_u32(&x8bs[(u64)tt * (orows / 32u) + task], code, DEV_CP_DEV);
}

DEV_INLINE void k2_wo_a(const struct ffn_ctx *c, __local union k2_lds *lds, u32 task, struct k2_gemv_state *gs) {
  __local struct k2_lds_gemv *L = &lds->b.u.gemv;
  DEV_ARGSPACE const struct k2_back_args *b = k2_back(c);
  const u32 S = c->a->S, G = b->H / K2_GROUP_HEADS, orows = G * b->o_lora, g = task / (b->o_lora / 32u);
  const u32 lane = dev_lane(), wave = dev_wave();
  const u32 row0 = 32u * task + 16u * (wave / 4u), s0 = 8u * (wave % 4u);
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)b->wo_a, (__global const u8 *)b->wo_a_s, orows, K2_GROUP_K);
  k2_woa_pre wv;
  k2_woa_pre_load(&wv, &m, row0, row0 + lane % 16u, s0, lane);
  ho_flags_wait(k2_flags(c, b->L.crdy) + g, G, S, c->tag);
  for (u32 t0 = 0; t0 < S; t0 += FFN_TILE) k2_wo_a_tile(c, &L->red[gs->tiles++ & 1u], task, t0, &wv);
  ho_flag_raise(k2_flags(c, b->L.ardy) + task, c->tag);
}

/* ---------------------------------------------------------------- wo_b (§2.2) */

/* Task k: rows 16k..16k+15 of wo_b over K = o_rows (wave w steps w, w + 8, ..., loaded before the
 * wait), every token tile; the f32 row sums (waves in order) as bf16 pairs pushed to every rank's
 * attention all-reduce inbox (spec/mono.md §3.7), which the FFN seam's slices reduce. */
DEV_INLINE void k2_wo_b(const struct ffn_ctx *c, __local union k2_lds *lds, u32 task, struct k2_gemv_state *gs) {
  __local struct k2_lds_gemv *L = &lds->b.u.gemv;
  DEV_ARGSPACE const struct k2_back_args *b = k2_back(c);
  const u32 S = c->a->S, D = c->a->D, orows = (b->H / K2_GROUP_HEADS) * b->o_lora, n = orows / 128u;
  const u32 lane = dev_lane(), wave = dev_wave(), lid = dev_lid();
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)b->wo_b, (__global const u8 *)b->wo_b_s, D, orows);
  gemv_wtile w;
  gemv_wtile_load(&w, &m, 16u * task, 0u, n, wave, lane);
  gemv_act x = gemv_act_of_words(k2_scr(c, b->L.x8b), (__global const u32 *)k2_scr(c, b->L.x8bs), S, orows);
  if (!gs->waited) ho_flags_wait(k2_flags(c, b->L.ardy), 1u, orows / 32u, c->tag), gs->waited = 1;
  struct ar_view attn;
  ffn_view(c, &attn, FFN_SITE_ATTN);
  for (u32 t0 = 0; t0 < S; t0 += FFN_TILE) {
    __local gemv_red *red = &L->red[gs->tiles++ & 1u];
    gemv_red_put(red, wave, gemv_wtile_run(&w, &x, t0, 0u, n, wave, lane));
    dev_barrier();
    if (lid < 128u) {
      /* work-item (row pair rp, token j): rows 2rp, 2rp + 1 of the tile, one pair */
      u32 rp = lid / 16u, j = lid % 16u, t = t0 + j;
      if (t < S && j < FFN_TILE) { /* gfx942: a pass is the tile's first 6 columns */
        u32 e = fmt_bf16_from_f32(gemv_red_sum(red, 2u * rp, j)), o = fmt_bf16_from_f32(gemv_red_sum(red, 2u * rp + 1u, j));
        ar_push(&attn, t * (D / 2u) + 8u * task + rp, e | o << 16);
      }
    }
  }
}

#endif /* HM_ATTN_K2_H */
