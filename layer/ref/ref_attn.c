/* layer/ref/ref_attn.c: the reference attention (spec/mono.md §2.1 K1.4-K1.7, §2.2): wqkv, q/kv norms,
 * the 584-byte KV record, wq_b with RoPE, the key table, sparse attention with the sink, wo_a, wo_b. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "ref_internal.h"

#define MAX_STEPS HM_REF_MAX_STEPS

/* ---------------------------------------------------------------- records */

void hm_ref_kv_record(const float *kv, uint8_t data[HM_RECORD_DATA], uint8_t scale[8]) {
  /* nope dims: rule R per 64 (§2.0), no clamp of the code */
  for (int b = 0; b < HM_NOPE_DIM / 64; b++) fmt_mxfp8_quant(kv + 64 * b, 64, FMT_RULE_R, data + 64 * b, &scale[b]);
  scale[7] = 0;
  /* rope dims: bf16, little endian */
  for (int j = 0; j < HM_ROPE_DIM; j++) {
    uint16_t v = fmt_bf16_from_f32(kv[HM_NOPE_DIM + j]);
    data[HM_NOPE_DIM + 2 * j] = (uint8_t)v;
    data[HM_NOPE_DIM + 2 * j + 1] = (uint8_t)(v >> 8);
  }
}

void hm_ref_kv_record_fnuz(const float *kv, uint8_t data[HM_RECORD_DATA], uint8_t scale[8]) {
  hm_ref_kv_record(kv, data, scale); /* the rope dims and the pad byte */
  /* nope dims: rule R per 64 against 224 (its 1e-4 floor keeps the quotient normal: the OCP
   * record's codes + 1 over the same bytes, -0 as 0x00) */
  for (int b = 0; b < HM_NOPE_DIM / 64; b++) ref_fnuz_group(kv + 64 * b, 64, FMT_RULE_R, data + 64 * b, &scale[b]);
}

void hm_ref_kv_cache_to_fnuz(const hm_kv_cache *c) {
  for (uint64_t b = 0; c && c->base && b < c->blocks; b++)
    for (uint32_t o = 0; o < c->block_size; o++) {
      uint8_t *d = c->base + b * c->block_stride + (uint64_t)o * HM_RECORD_DATA;
      uint8_t *s = c->base + b * c->block_stride + (uint64_t)c->block_size * HM_RECORD_DATA + (uint64_t)o * 8;
      for (int i = 0; i < HM_NOPE_DIM; i++) d[i] = fmt_e4m3_ocp_to_fnuz(d[i]);
      for (int i = 0; i < HM_NOPE_DIM / 64; i++) s[i] = (uint8_t)(s[i] + 1);
    }
}

hm_status hm_ref_kv_offsets(const hm_kv_cache *c, int64_t slot, uint64_t *data, uint64_t *scale) {
  if (!c || c->block_size == 0 || slot < 0 || (uint64_t)slot >= (uint64_t)c->blocks * c->block_size ||
      c->block_stride < (uint64_t)c->block_size * HM_RECORD)
    return hm_fail(HM_ERR_INVALID_ARG, "KV slot %lld outside the cache", (long long)slot);
  uint64_t b = (uint64_t)slot / c->block_size, o = (uint64_t)slot % c->block_size;
  *data = b * c->block_stride + o * HM_RECORD_DATA;
  *scale = b * c->block_stride + (uint64_t)c->block_size * HM_RECORD_DATA + o * 8;
  return HM_OK;
}

static hm_status locate(const hm_kv_cache *c, int64_t slot, uint8_t **data, uint8_t **scale) {
  uint64_t d, s;
  if (!c || !c->base) return hm_fail(HM_ERR_INVALID_ARG, "KV slot %lld: no cache", (long long)slot);
  hm_status st = hm_ref_kv_offsets(c, slot, &d, &s);
  if (st != HM_OK) return st;
  *data = c->base + d, *scale = c->base + s;
  return HM_OK;
}

hm_status hm_ref_kv_insert(const hm_kv_cache *c, int64_t slot, const uint8_t *data, const uint8_t *scale) {
  uint8_t *d = NULL, *s = NULL;
  hm_status st = locate(c, slot, &d, &s);
  if (st != HM_OK) return st;
  memcpy(d, data, HM_RECORD_DATA);
  memcpy(s, scale, 8);
  return HM_OK;
}

static hm_status kv_read(const hm_kv_cache *c, int64_t slot, bool fnuz, float *out) {
  uint8_t *d = NULL, *s = NULL;
  hm_status st = locate(c, slot, &d, &s);
  if (st != HM_OK) return st;
  const float *t = hm_e4m3_table();
  for (int i = 0; i < HM_NOPE_DIM; i++)
    out[i] = (fnuz ? fmt_e4m3fnuz_decode(d[i]) : t[d[i]]) * fmt_e8m0_decode(s[i / 64]);
  for (int j = 0; j < HM_ROPE_DIM; j++)
    out[HM_NOPE_DIM + j] = fmt_bf16_to_f32((uint16_t)(d[HM_NOPE_DIM + 2 * j] | d[HM_NOPE_DIM + 2 * j + 1] << 8));
  return HM_OK;
}

hm_status hm_ref_kv_read(const hm_kv_cache *c, int64_t slot, float *out) { return kv_read(c, slot, false, out); }
hm_status hm_ref_kv_read_fnuz(const hm_kv_cache *c, int64_t slot, float *out) { return kv_read(c, slot, true, out); }

/* ---------------------------------------------------------------- K1 front */

hm_status hm_ref_qkv(const hm_layer_weights *w, uint32_t S, const uint8_t *x8, const uint8_t *x8s, float *qkv) {
  const uint32_t D = w->cfg.hidden, N = w->cfg.q_lora + w->cfg.kv_dim, half = D / 2;
  ref_dense wq;
  if (ref_dense_get(w, "wqkv", N, D, &wq) != HM_OK) return hm_fail_prefix(HM_ERR_INVALID_ARG, "wqkv");
  uint8_t chain[MAX_STEPS];
  hm_wave_chains(chain, (half + 127) / 128);
  float *X = hm_ref_alloc((size_t)S * D * sizeof(float)), *h0 = hm_ref_alloc((size_t)N * S * sizeof(float));
  float *h1 = hm_ref_alloc((size_t)N * S * sizeof(float));
  hm_status st = HM_ERR_NO_MEMORY;
  if (X && h0 && h1) {
    hm_ref_act_dequant(w->arch, false, x8, x8s, S, D, 32, X);
    /* K1.5: each K half a unit of its own (20 steps at D 5120: wave w steps w, w+8, w+16) */
    st = hm_mx8_gemv(&wq, 0, half, 0, N, chain, 8, X, D, S, h0);
    if (st == HM_OK) st = hm_mx8_gemv(&wq, half, half, 0, N, chain, 8, X + half, D, S, h1);
    /* K1.6: v = bf16(p_half0 + p_half1) */
    if (st == HM_OK)
      for (uint32_t r = 0; r < N; r++)
        for (uint32_t t = 0; t < S; t++)
          qkv[(size_t)t * N + r] = fmt_round_bf16(h0[(size_t)r * S + t] + h1[(size_t)r * S + t]);
  }
  free(X), free(h0), free(h1);
  return st;
}

/* K1.6 sums of squares: thread u holds `per` consecutive values, summed in order; butterfly
 * 32..1 in each wave; waves combined (w0 + w1) + (w2 + w3) */
static float front_ss(const float *x, uint32_t n, uint32_t per) {
  float lanes[4][64];
  memset(lanes, 0, sizeof lanes);
  for (uint32_t u = 0; u < 256 && u * per < n; u++) {
    float s = 0.0f;
    for (uint32_t i = 0; i < per && u * per + i < n; i++) s = s + x[u * per + i] * x[u * per + i];
    lanes[u / 64][u % 64] = s;
  }
  static const uint32_t offs[6] = {32, 16, 8, 4, 2, 1};
  float wv[4];
  for (int i = 0; i < 4; i++) wv[i] = hm_butterfly(lanes[i], offs, 6);
  return (wv[0] + wv[1]) + (wv[2] + wv[3]);
}

void hm_ref_q_norm(uint32_t S, uint32_t Q, const float *qkv, const uint16_t *q_norm, float eps, float *qn) {
  const uint32_t N = Q + HM_HEAD_DIM;
  for (uint32_t t = 0; t < S; t++) {
    const float *q = qkv + (size_t)t * N;
    /* rq = rsq(div_rn(ssq, Q) + eps): an IEEE division and a separate add */
    float rq = hm_ref_rsq(front_ss(q, Q, 8) / (float)Q + eps);
    for (uint32_t i = 0; i < Q; i++) qn[(size_t)t * Q + i] = fmt_round_bf16((q[i] * rq) * fmt_bf16_to_f32(q_norm[i]));
  }
}

/* GPT-J pairs (448 + 2j, 449 + 2j) rotated by position p: unfused products, one rounding of
 * each output to bf16 (§2.1 K1.6 / K1.7) */
static void rope_pairs(float *v, const float *cos_sin, int64_t p) {
  const float *cs = cos_sin + (size_t)p * HM_ROPE_DIM;
  for (int j = 0; j < HM_ROPE_DIM / 2; j++) {
    float a = v[HM_NOPE_DIM + 2 * j], b = v[HM_NOPE_DIM + 2 * j + 1], c = cs[j], s = cs[32 + j];
    v[HM_NOPE_DIM + 2 * j] = fmt_round_bf16(a * c - b * s);
    v[HM_NOPE_DIM + 2 * j + 1] = fmt_round_bf16(a * s + b * c);
  }
}

void hm_ref_kv_norm_rope(uint32_t S, uint32_t Q, const float *qkv, const uint16_t *kv_norm, float eps,
                         const float *cos_sin, const int64_t *positions, float *kn) {
  const uint32_t N = Q + HM_HEAD_DIM;
  for (uint32_t t = 0; t < S; t++) {
    const float *kv = qkv + (size_t)t * N + Q;
    float *o = kn + (size_t)t * HM_HEAD_DIM;
    /* thread u: kv columns 2u, 2u + 1 */
    float rk = hm_ref_rsq(front_ss(kv, HM_HEAD_DIM, 2) / (float)HM_HEAD_DIM + eps);
    for (uint32_t i = 0; i < HM_HEAD_DIM; i++) o[i] = fmt_round_bf16((kv[i] * rk) * fmt_bf16_to_f32(kv_norm[i]));
    rope_pairs(o, cos_sin, positions[t]);
  }
}

hm_status hm_ref_wq_b(const hm_layer_weights *w, uint32_t S, const uint8_t *qx8, const uint8_t *qx8s,
                      const int64_t *positions, float *q) {
  const uint32_t Q = w->cfg.q_lora, N = w->dims.q_rows;
  ref_dense wb;
  const hm_tensor *cs = ref_dense_get(w, "wq_b", N, Q, &wb) == HM_OK ? hm_weights_get(w, "cos_sin") : NULL;
  if (!cs) return hm_fail_prefix(HM_ERR_INVALID_ARG, "wq_b");
  for (uint32_t t = 0; t < S; t++)
    if (positions[t] < 0 || (uint64_t)positions[t] >= cs->shape[0])
      return hm_fail(HM_ERR_INVALID_ARG, "position %lld outside the RoPE table (%llu rows)", (long long)positions[t],
                     (unsigned long long)cs->shape[0]);
  uint8_t chain[MAX_STEPS];
  hm_wave_chains(chain, (Q + 127) / 128);
  float *X = hm_ref_alloc((size_t)S * Q * sizeof(float)), *y = hm_ref_alloc((size_t)N * S * sizeof(float));
  hm_status st = HM_ERR_NO_MEMORY;
  if (X && y) {
    hm_ref_act_dequant(w->arch, false, qx8, qx8s, S, Q, 32, X);
    st = hm_mx8_gemv(&wb, 0, Q, 0, N, chain, 8, X, Q, S, y);
    if (st == HM_OK)
      for (uint32_t t = 0; t < S; t++) {
        for (uint32_t r = 0; r < N; r++) q[(size_t)t * N + r] = fmt_round_bf16(y[(size_t)r * S + t]);
        /* no per-head q RMSNorm in V4.1 (§2.1 K1.7) */
        for (uint32_t h = 0; h < w->dims.heads; h++) rope_pairs(q + (size_t)t * N + (size_t)h * HM_HEAD_DIM, cs->data, positions[t]);
      }
  }
  free(X), free(y);
  return st;
}

hm_status hm_ref_key_table(const hm_key_args *a, int32_t *kt, int32_t *klen) {
  if (!a || !kt || !klen || !a->positions || !a->slot_mapping || !a->swa_indices || !a->swa_lens)
    return hm_fail(HM_ERR_INVALID_ARG, "key table: null argument");
  if (a->ratio > 0 && (!a->topk || !a->block_table || !a->token_to_req || !a->rows_per_block))
    return hm_fail(HM_ERR_INVALID_ARG, "key table: ratio %u needs top-k, block table and rows a block", a->ratio);
  for (uint32_t t = 0; t < a->S; t++) {
    int32_t *row = kt + (size_t)t * HM_KEYS;
    bool live = a->slot_mapping[t] >= 0;
    int32_t nswa = live ? a->swa_lens[t] : 0;
    int64_t nt = live && a->ratio ? (a->positions[t] + 1) / a->ratio : 0;
    int32_t ntopk = (int32_t)(nt < HM_TOPK_ATTN ? nt : HM_TOPK_ATTN);
    if (nswa < 0 || nswa > HM_WINDOW) return hm_fail(HM_ERR_INVALID_ARG, "row %u: %d window keys", t, nswa);
    int32_t kv_len = ntopk + nswa;
    for (int32_t k = 0; k < HM_KEYS; k++) {
      int32_t v = -1;
      if (k < ntopk) {
        int32_t local = a->topk[(size_t)t * HM_TOPK_ATTN + k];
        if (local >= 0) {
          int32_t req = a->token_to_req[t];
          int64_t slot = (int64_t)a->block_table[(size_t)req * a->bt_stride + (uint32_t)local / a->rows_per_block] *
                             a->rows_per_block + (uint32_t)local % a->rows_per_block;
          v = (int32_t)((uint32_t)slot | 0x80000000u); /* bit 31: the compressed cache */
        }
      } else if (k < kv_len) {
        v = a->swa_indices[(size_t)t * HM_WINDOW + (k - ntopk)];
      }
      row[k] = v;
    }
    klen[t] = kv_len;
    klen[a->S + t] = ntopk;
  }
  return HM_OK;
}

/* ---------------------------------------------------------------- K2 attention back */

/* The combine of one token (§2.2): the sink in the log2 domain, the live chunks in order, o =
 * bf16(T * (1 / L)); then the inverse RoPE on dims >= 448 (f32, not re-rounded) into y. m, l
 * [nch][H], oc [nch][H][512]; o, y [H][512]. */
static void attn_combine(uint32_t H, uint32_t nch, uint32_t live, const float *sink, const float *cst, const float *m,
                         const float *l, const float *oc, float *o_t, float *y_t) {
  const uint32_t HD = HM_HEAD_DIM;
  (void)nch;
  for (uint32_t h = 0; h < H; h++) {
    float sk = sink[h] * HM_LOG2E, M = sk;
    for (uint32_t ch = 0; ch < live; ch++) M = fmaxf(M, m[(size_t)ch * H + h]);
    float L = exp2f(sk - M), e[16];
    for (uint32_t ch = 0; ch < live; ch++) {
      e[ch] = exp2f(m[(size_t)ch * H + h] - M);
      L = L + l[(size_t)ch * H + h] * e[ch];
    }
    float inv = 1.0f / L;
    float *oo = o_t + (size_t)h * HD, *yy = y_t + (size_t)h * HD;
    for (uint32_t d = 0; d < HD; d++) {
      float T = 0.0f;
      for (uint32_t ch = 0; ch < live; ch++) {
        float term = oc[((size_t)ch * H + h) * HD + d] * e[ch];
        T = ch == 0 ? term : T + term;
      }
      oo[d] = fmt_round_bf16(T * inv);
      yy[d] = oo[d];
    }
    for (int j = 0; j < HM_ROPE_DIM / 2; j++) {
      float a = oo[HM_NOPE_DIM + 2 * j], b = oo[HM_NOPE_DIM + 2 * j + 1], c = cst[j], sn = cst[32 + j];
      yy[HM_NOPE_DIM + 2 * j] = a * c + b * sn;
      yy[HM_NOPE_DIM + 2 * j + 1] = b * c - a * sn;
    }
  }
}

static const float *cst_row(const hm_tensor *cs, int64_t pos) { return (const float *)cs->data + (size_t)pos * HM_ROPE_DIM; }

hm_status hm_ref_attn_combine(const hm_layer_weights *w, uint32_t S, const int32_t *klen, const int64_t *positions,
                              uint32_t ck, const float *m, const float *l, const float *oc, float *o, float *y) {
  const uint32_t H = w->dims.heads, nch = HM_KEYS / (ck ? ck : 1);
  if (ck != 64 && ck != 128) return hm_fail(HM_ERR_INVALID_ARG, "attention chunk of %u keys (64 or 128)", ck);
  const float *sink = hm_wdata(w, "attn_sink", HM_DT_F32, H);
  const hm_tensor *cs = hm_weights_get(w, "cos_sin");
  if (!sink || !cs || !klen || !positions || !m || !l || !oc || !o || !y) return hm_fail_prefix(HM_ERR_INVALID_ARG, "combine");
  for (uint32_t t = 0; t < S; t++) {
    if (klen[t] < 0 || klen[t] > HM_KEYS || positions[t] < 0 || (uint64_t)positions[t] >= cs->shape[0])
      return hm_fail(HM_ERR_INVALID_ARG, "combine: row %u (kv_len %d, position %lld)", t, klen[t], (long long)positions[t]);
    uint32_t live = ((uint32_t)klen[t] + ck - 1) / ck;
    const size_t so = (size_t)t * nch * H;
    attn_combine(H, nch, live, sink, cst_row(cs, positions[t]), m + so, l + so, oc + so * HM_HEAD_DIM,
                 o + (size_t)t * H * HM_HEAD_DIM, y + (size_t)t * H * HM_HEAD_DIM);
  }
  return HM_OK;
}

hm_status hm_ref_attention(const hm_layer_weights *w, uint32_t S, const float *q, const int32_t *kt,
                           const int32_t *klen, const hm_kv_cache *swa, const hm_kv_cache *comp,
                           const int64_t *positions, uint32_t ck, const hm_attn_out *out) {
  const uint32_t H = w->dims.heads, nch = HM_KEYS / (ck ? ck : 1), HD = HM_HEAD_DIM;
  if (ck != 64 && ck != 128) return hm_fail(HM_ERR_INVALID_ARG, "attention chunk of %u keys (64 or 128)", ck);
  const float *sink = hm_wdata(w, "attn_sink", HM_DT_F32, H);
  const hm_tensor *cs = hm_weights_get(w, "cos_sin");
  if (!sink || !cs || !out || !out->o || !out->y) return hm_fail_prefix(HM_ERR_INVALID_ARG, "attention");
  /* QK's bf16 MFMA steps: 16x16x32, or on gfx942 two 16x16x16 (§2.6); the SWA records FNUZ on
   * gfx942, the compressed ones OCP on both */
  const uint32_t qk_step = w->arch == HM_ARCH_GFX942 ? 16 : 32;
  const bool swa_fnuz = w->arch == HM_ARCH_GFX942;
  /* f32(512^-0.5 * log2 e), the bits the kernel takes */
  const float qk_scale = (float)(1.0 / sqrt((double)HD) * 1.4426950408889634);
  float *K = hm_ref_alloc((size_t)ck * HD * sizeof(float)), *s = hm_ref_alloc((size_t)ck * sizeof(float));
  float *m = hm_ref_alloc((size_t)nch * H * sizeof(float)), *l = hm_ref_alloc((size_t)nch * H * sizeof(float));
  float *oc = hm_ref_alloc((size_t)nch * H * HD * sizeof(float));
  uint8_t *valid = hm_ref_alloc(ck);
  hm_status st = HM_ERR_NO_MEMORY;
  if (!K || !s || !m || !l || !oc || !valid) goto done;
  for (uint32_t t = 0; t < S; t++) {
    int32_t kv_len = klen[t];
    if (positions[t] < 0 || (uint64_t)positions[t] >= cs->shape[0]) {
      st = hm_fail(HM_ERR_INVALID_ARG, "position %lld outside the RoPE table", (long long)positions[t]);
      goto done;
    }
    if (kv_len < 0 || kv_len > HM_KEYS) {
      st = hm_fail(HM_ERR_INVALID_ARG, "row %u: kv_len %d", t, kv_len);
      goto done;
    }
    uint32_t live = ((uint32_t)kv_len + ck - 1) / ck;
    memset(oc, 0, (size_t)nch * H * HD * sizeof(float));
    memset(m, 0, (size_t)nch * H * sizeof(float));
    memset(l, 0, (size_t)nch * H * sizeof(float));
    for (uint32_t ch = 0; ch < live; ch++) {
      /* split: the chunk's records; -1 (or past kv_len) is the zero record, masked */
      for (uint32_t j = 0; j < ck; j++) {
        uint32_t k = ch * ck + j;
        int32_t v = kt[(size_t)t * HM_KEYS + k];
        valid[j] = (int32_t)k < kv_len && v != -1;
        if (!valid[j]) {
          memset(K + (size_t)j * HD, 0, HD * sizeof(float));
          continue;
        }
        const bool compressed = ((uint32_t)v & 0x80000000u) != 0;
        if ((st = kv_read(compressed ? comp : swa, (int64_t)((uint32_t)v & 0x7fffffffu), swa_fnuz && !compressed,
                          K + (size_t)j * HD)) != HM_OK) {
          hm_fail_prefix(st, "row %u key %u", t, k);
          goto done;
        }
      }
      for (uint32_t h = 0; h < H; h++) {
        const float *qh = q + ((size_t)t * H + h) * HD;
        /* QK: bf16 MFMA steps of 32 (gfx942: 16) dims in ascending order, one chain; log2 domain */
        float mx = -FLT_MAX;
        for (uint32_t j = 0; j < ck; j++) {
          if (!valid[j]) {
            s[j] = -FLT_MAX;
            continue;
          }
          const float *kj = K + (size_t)j * HD;
          float acc = 0.0f;
          for (uint32_t d0 = 0; d0 < HD; d0 += qk_step) {
            float stp = qh[d0] * kj[d0];
            for (uint32_t d = d0 + 1; d < d0 + qk_step; d++) stp = stp + qh[d] * kj[d];
            acc = acc + stp;
          }
          s[j] = acc * qk_scale;
          mx = fmaxf(mx, s[j]);
        }
        /* p = exp2(s - m_c); l_c per 16-key tile: lane sums (p0+p2)+(p1+p3) over its 4 keys,
         * then + xor-32, + xor-16 (lane groups (g0+g2)+(g1+g3)); tiles added in order */
        float lsum = 0.0f;
        float *o = oc + ((size_t)ch * H + h) * HD;
        float acc[HM_HEAD_DIM];
        memset(acc, 0, sizeof acc);
        for (uint32_t tile = 0; tile < ck / 16; tile++) {
          float p[16], g[4];
          for (int j = 0; j < 16; j++) {
            uint32_t key = tile * 16 + (uint32_t)j;
            p[j] = valid[key] ? exp2f(s[key] - mx) : 0.0f;
          }
          for (int gi = 0; gi < 4; gi++) g[gi] = (p[4 * gi] + p[4 * gi + 2]) + (p[4 * gi + 1] + p[4 * gi + 3]);
          lsum = lsum + ((g[0] + g[2]) + (g[1] + g[3]));
          /* PV: bf16(p) x V (the same record), bf16 MFMA 16x16x16 over key tiles in order */
          float pb[16];
          for (int j = 0; j < 16; j++) pb[j] = fmt_round_bf16(p[j]);
          for (uint32_t d = 0; d < HD; d++) {
            float st16 = pb[0] * K[((size_t)tile * 16) * HD + d];
            for (int j = 1; j < 16; j++) st16 = st16 + pb[j] * K[((size_t)tile * 16 + j) * HD + d];
            acc[d] = acc[d] + st16;
          }
        }
        for (uint32_t d = 0; d < HD; d++) o[d] = fmt_round_bf16(acc[d]); /* partials stored bf16 */
        m[(size_t)ch * H + h] = mx;
        l[(size_t)ch * H + h] = lsum;
      }
    }
    attn_combine(H, nch, live, sink, cst_row(cs, positions[t]), m, l, oc, out->o + (size_t)t * H * HD,
                 out->y + (size_t)t * H * HD);
    if (out->m) memcpy(out->m + (size_t)t * nch * H, m, (size_t)nch * H * sizeof(float));
    if (out->l) memcpy(out->l + (size_t)t * nch * H, l, (size_t)nch * H * sizeof(float));
    if (out->oc) memcpy(out->oc + (size_t)t * nch * H * HD, oc, (size_t)nch * H * HD * sizeof(float));
  }
  st = HM_OK;
done:
  free(K), free(s), free(m), free(l), free(oc), free(valid);
  return st;
}

hm_status hm_ref_wo_a(const hm_layer_weights *w, uint32_t S, const uint8_t *xo, const uint8_t *xos, float *z,
                      uint8_t *x8b, uint8_t *x8bs) {
  const uint32_t HK = HM_HEADS_PER_GROUP * HM_HEAD_DIM, XO = w->dims.heads * HM_HEAD_DIM, OR = w->dims.o_rows;
  const uint32_t ol = w->cfg.o_lora;
  ref_dense wa;
  if (ref_dense_get(w, "wo_a", OR, HK, &wa) != HM_OK) return hm_fail_prefix(HM_ERR_INVALID_ARG, "wo_a");
  /* split-K: 4 waves a 16-row tile, each a contiguous quarter of the 32 steps, added in order */
  const uint32_t steps = HK / 128;
  uint8_t chain[MAX_STEPS];
  for (uint32_t s = 0; s < steps; s++) chain[s] = (uint8_t)(s / (steps / 4));
  float *X = hm_ref_alloc((size_t)S * XO * sizeof(float)), *y = hm_ref_alloc((size_t)ol * S * sizeof(float));
  hm_status st = HM_ERR_NO_MEMORY;
  if (X && y) {
    hm_ref_act_dequant(w->arch, false, xo, xos, S, XO, 32, X);
    st = HM_OK;
    for (uint32_t g = 0; g < w->dims.groups; g++) {
      st = hm_mx8_gemv(&wa, 0, HK, g * ol, ol, chain, 4, X + (size_t)g * HK, XO, S, y);
      if (st != HM_OK) break;
      for (uint32_t r = 0; r < ol; r++)
        for (uint32_t t = 0; t < S; t++) z[(size_t)t * OR + g * ol + r] = fmt_round_bf16(y[(size_t)r * S + t]);
    }
    /* X8B: rule V over each task's 32 rows */
    if (st == HM_OK) hm_ref_act_quant(w->arch, false, z, S, OR, 32, FMT_RULE_V, x8b, x8bs);
  }
  free(X), free(y);
  return st;
}

hm_status hm_ref_wo_b(const hm_layer_weights *w, uint32_t S, const uint8_t *x8b, const uint8_t *x8bs, float *part) {
  const uint32_t D = w->cfg.hidden, OR = w->dims.o_rows;
  ref_dense wb;
  if (ref_dense_get(w, "wo_b", D, OR, &wb) != HM_OK) return hm_fail_prefix(HM_ERR_INVALID_ARG, "wo_b");
  uint8_t chain[MAX_STEPS];
  hm_wave_chains(chain, (OR + 127) / 128);
  float *X = hm_ref_alloc((size_t)S * OR * sizeof(float)), *y = hm_ref_alloc((size_t)D * S * sizeof(float));
  hm_status st = HM_ERR_NO_MEMORY;
  if (X && y) {
    hm_ref_act_dequant(w->arch, false, x8b, x8bs, S, OR, 32, X);
    st = hm_mx8_gemv(&wb, 0, OR, 0, D, chain, 8, X, OR, S, y);
    if (st == HM_OK)
      for (uint32_t r = 0; r < D; r++)
        for (uint32_t t = 0; t < S; t++) part[(size_t)t * D + r] = fmt_round_bf16(y[(size_t)r * S + t]);
  }
  free(X), free(y);
  return st;
}
