/* layer/ref/ref_select.c: the reference select step between K1 and K2 on index-source layers (spec/mono.md
 * §3.9, model.md §7.2): the V4.1 compressor (ratio 1 / 2) into the compressed cache, the indexer
 * keys, the lightning indexer with layer 20's candidate blocks, and the top-512 selection. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "ref_internal.h"

#define IDX_MAX_HEAD 128

typedef struct sel_req {
  int32_t layer, req;
  float *keys; /* [cap][head_dim], QDQ'd values */
  uint8_t *have; /* [cap]: key j made or seeded */
  uint32_t nkeys, cap, dim;
  bool pend;   /* a ratio-2 group's first token seen, the second not yet */
  int64_t pend_pos;
  float pend_kv[HM_HEAD_DIM], pend_sc[HM_HEAD_DIM];
} sel_req;

typedef struct sel_mask {
  int32_t req;
  int64_t pos;
  uint32_t n;
  uint8_t *keep; /* [n] */
} sel_mask;

struct hm_select_state {
  sel_req *r;
  uint32_t nr, cr;
  sel_mask *m;
  uint32_t nm, cm;
};

hm_status hm_select_state_new(hm_select_state **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_select_state_new: null argument");
  *out = calloc(1, sizeof **out);
  return *out ? HM_OK : hm_fail(HM_ERR_NO_MEMORY, "select state");
}

static void clear_masks(hm_select_state *s) {
  for (uint32_t i = 0; i < s->nm; i++) free(s->m[i].keep);
  s->nm = 0;
}

void hm_select_state_free(hm_select_state *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->nr; i++) free(s->r[i].keys), free(s->r[i].have);
  free(s->r);
  clear_masks(s);
  free(s->m);
  free(s);
}

static sel_req *find_req(const hm_select_state *s, int32_t layer, int32_t req) {
  for (uint32_t i = 0; i < s->nr; i++)
    if (s->r[i].layer == layer && s->r[i].req == req) return &s->r[i];
  return NULL;
}

static sel_req *get_req(hm_select_state *s, int32_t layer, int32_t req, uint32_t dim) {
  sel_req *f = find_req(s, layer, req);
  if (f) return f;
  if (s->nr == s->cr) {
    uint32_t c = s->cr ? 2 * s->cr : 8;
    sel_req *r = realloc(s->r, c * sizeof *r);
    if (!r) return NULL;
    s->r = r, s->cr = c;
  }
  sel_req *r = &s->r[s->nr++];
  memset(r, 0, sizeof *r);
  r->layer = layer, r->req = req, r->dim = dim;
  return r;
}

static hm_status put_key(sel_req *r, uint32_t j, const float *k) {
  if (j >= r->cap) {
    uint32_t c = r->cap ? r->cap : 64;
    while (c <= j) c *= 2;
    float *nk = realloc(r->keys, (size_t)c * r->dim * sizeof(float));
    if (!nk) return hm_fail(HM_ERR_NO_MEMORY, "indexer keys");
    r->keys = nk;
    uint8_t *nh = realloc(r->have, c);
    if (!nh) return hm_fail(HM_ERR_NO_MEMORY, "indexer keys");
    memset(nh + r->cap, 0, c - r->cap);
    r->have = nh, r->cap = c;
  }
  memcpy(r->keys + (size_t)j * r->dim, k, r->dim * sizeof(float));
  r->have[j] = 1;
  if (j + 1 > r->nkeys) r->nkeys = j + 1;
  return HM_OK;
}

/* REF's Q4e8 QDQ per 32 (model.md §2): code = ceilexp(max(amax, 6*2^-126) * RN(1/6)), elements
 * e2m1(clamp(x / s, +-6)), values back q * s; built from formats.h's primitives */
static void qdq_fp4(float *x, uint32_t n) {
  for (uint32_t b = 0; b < n; b += 32) {
    float amax = 6.0f * 0x1p-126f;
    for (uint32_t i = b; i < b + 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    uint32_t c = fmt_ceilexp(amax * (1.0f / 6.0f));
    if (c > 254) c = 254;
    for (uint32_t i = b; i < b + 32; i++)
      x[i] = fmt_e2m1_decode(fmt_e2m1_encode(x[i] * fmt_e8m0_mul((uint8_t)c))) * fmt_e8m0_decode((uint8_t)c);
  }
}

hm_status hm_select_state_seed(hm_select_state *s, const hm_layer_config *cfg, int32_t kv_layer, int32_t req,
                               uint32_t n, uint64_t seed) {
  if (!s || !cfg) return hm_fail(HM_ERR_INVALID_ARG, "hm_select_state_seed: null argument");
  sel_req *r = get_req(s, kv_layer, req, cfg->index_head_dim);
  if (!r) return hm_fail(HM_ERR_NO_MEMORY, "select state");
  float k[IDX_MAX_HEAD];
  char name[64];
  for (uint32_t j = 0; j < n; j++) {
    snprintf(name, sizeof name, "index.key.%d.%d.%u", kv_layer, req, j);
    hm_gen_normal(seed, name, cfg->index_head_dim, 0.0f, 1.0f, true, k);
    qdq_fp4(k, cfg->index_head_dim);
    hm_status st = put_key(r, j, k);
    if (st != HM_OK) return st;
  }
  return HM_OK;
}

hm_status hm_select_state_pend(hm_select_state *s, const hm_layer_config *cfg, int32_t req, int64_t pos,
                               const float *kv, const float *gate) {
  if (!s || !cfg || !kv || !gate) return hm_fail(HM_ERR_INVALID_ARG, "hm_select_state_pend: null argument");
  if (!hm_config_has(cfg, HM_ROLE_KV_SOURCE) || cfg->compress_ratio != 2)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_select_state_pend: layer %d has no ratio-2 compressor", cfg->layer);
  if (req < 0 || pos < 0 || pos % 2)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_select_state_pend: request %d position %lld (a group's first token: even)",
                   req,
                   (long long)pos);
  sel_req *r = get_req(s, cfg->layer, req, cfg->index_head_dim);
  if (!r) return hm_fail(HM_ERR_NO_MEMORY, "select state");
  r->pend = true, r->pend_pos = pos;
  memcpy(r->pend_kv, kv, sizeof r->pend_kv);
  memcpy(r->pend_sc, gate, sizeof r->pend_sc);
  return HM_OK;
}

/* bf16 GEMV y = bf16(W . x) with f32 sums in K order (torch bf16 linear; order not modelled) */
static void linear_bf16(const uint16_t *W, uint32_t N, uint32_t K, const float *x, float *y, bool round) {
  for (uint32_t n = 0; n < N; n++) {
    float a = 0.0f;
    for (uint32_t k = 0; k < K; k++) a = a + fmt_bf16_to_f32(W[(size_t)n * K + k]) * x[k];
    y[n] = round ? fmt_round_bf16(a) : a;
  }
}

/* y = x * rsqrt(mean(x^2) + eps) * w in f32 */
static void rms_f32(const float *x, uint32_t n, const uint16_t *w, float eps, float *y) {
  float ss = 0.0f;
  for (uint32_t i = 0; i < n; i++) ss = ss + x[i] * x[i];
  float r = hm_ref_rsq(ss / (float)n + eps);
  for (uint32_t i = 0; i < n; i++) y[i] = (x[i] * r) * fmt_bf16_to_f32(w[i]);
}

/* GPT-J pairs on the last 64 dims of a head of `dim`, f32, rounded to bf16 when asked */
static void rope_tail(float *v, uint32_t dim, const float *cos_sin, int64_t p, bool round) {
  const float *cs = cos_sin + (size_t)p * HM_ROPE_DIM;
  float *t = v + dim - HM_ROPE_DIM;
  for (int j = 0; j < HM_ROPE_DIM / 2; j++) {
    float a = t[2 * j], b = t[2 * j + 1];
    float e0 = a * cs[j] - b * cs[32 + j], e1 = a * cs[32 + j] + b * cs[j];
    t[2 * j] = round ? fmt_round_bf16(e0) : e0;
    t[2 * j + 1] = round ? fmt_round_bf16(e1) : e1;
  }
}

static const sel_mask *find_mask(const hm_select_state *s, int32_t req, int64_t pos) {
  for (uint32_t i = 0; i < s->nm; i++)
    if (s->m[i].req == req && s->m[i].pos == pos) return &s->m[i];
  return NULL;
}

/* A ratio-2 group's pooled value per dim, as vLLM's ROCm build rounds it: a group whose two tokens
 * are both in the step (the pair program) takes the softmax weights, then sums kv * weight; one
 * whose first token is from an earlier step (the request program, reading the state ring) divides
 * after the weighted sum. vllm-project/vllm vllm/models/deepseek_v41/common/ops/
 * fused_compress_quant_cache.py: _fused_save_compress_norm_kernel (tl.softmax; _JOIN_ROW_PTRS off). */
static float pool_pair(float kv0, float s0, float kv1, float s1, bool in_step) {
  float m = fmaxf(s0, s1), e0 = expf(s0 - m), e1 = expf(s1 - m);
  if (in_step) {
    float den = e0 + e1;
    return kv0 * (e0 / den) + kv1 * (e1 / den);
  }
  return (kv0 * e0 + kv1 * e1) / (e0 + e1);
}

static hm_status group_missing(int32_t q, int64_t p) {
  return hm_fail(HM_ERR_INVALID_ARG,
                 "select: request %d position %lld ends a ratio-2 group whose first token (position %lld) is neither "
                 "in the step nor in the select state (hm_select_state_pend)",
                 q, (long long)p, (long long)(p - 1));
}

/* Before any write: every ratio-2 group a live row ends has its first token, an earlier live row
 * of the request in the step or else the state's pending token (as compress_row will find it).
 * first[t] (if non-NULL): the row holding that token, -1 the state, -2 no group ends at t. */
static hm_status check_groups(const hm_select_state *s, const hm_select_args *a, int32_t *first) {
  const hm_layer_config *c = a->cfg;
  for (uint32_t t = 0; t < a->S; t++) {
    if (first) first[t] = -2;
    const int64_t p = a->positions[t];
    if (a->slot_mapping[t] < 0 || c->compress_ratio != 2 || p % 2 == 0) continue;
    const int32_t q = a->token_to_req[t];
    int64_t pend = -1;
    int32_t from = -1;
    for (uint32_t u = t; u-- > 0 && from < 0;)
      if (a->slot_mapping[u] >= 0 && a->token_to_req[u] == q && a->positions[u] % 2 == 0)
        pend = a->positions[u], from = (int32_t)u;
    if (from < 0) {
      const sel_req *r = find_req(s, c->layer, q);
      if (r && r->pend) pend = r->pend_pos;
    }
    if (pend != p - 1) return group_missing(q, p);
    if (first) first[t] = from;
  }
  return HM_OK;
}

/* Before any write: every live row's entries 0..n-1 have indexer keys, held by the state or made
 * by this step's compressor (a live row of the request that ends entry j), so a refused call
 * leaves the state, the cache and the caller's top-k as they were. */
static hm_status check_keys(const hm_select_state *s, const hm_select_args *a) {
  const hm_layer_config *c = a->cfg;
  const uint32_t r = c->compress_ratio;
  const bool kvsrc = hm_config_has(c, HM_ROLE_KV_SOURCE);
  for (uint32_t t = 0; t < a->S; t++) {
    if (a->slot_mapping[t] < 0) continue;
    const int32_t q = a->token_to_req[t];
    const uint32_t n = (uint32_t)((a->positions[t] + 1) / r);
    const sel_req *kr = find_req(s, c->kv_source, q);
    uint32_t have = 0;
    while (kr && have < n && have < kr->nkeys && kr->have[have]) have++;
    for (uint32_t j = have; j < n; j++) {
      bool made = false;
      for (uint32_t u = 0; kvsrc && u < a->S && !made; u++)
        made = a->slot_mapping[u] >= 0 && a->token_to_req[u] == q && (a->positions[u] + 1) % r == 0 &&
               (uint64_t)(a->positions[u] / r) == j;
      if (!made && !(kr && j < kr->nkeys && kr->have[j]))
        return hm_fail(HM_ERR_INVALID_ARG,
                       "select: request %d has no indexer key %u of layer %d (hm_select_state_seed), row %u needs "
                       "indexer keys 0..%u",
                       q, j, c->kv_source, t, n - 1);
    }
  }
  return HM_OK;
}

/* the compressor of a kv source: row t's contribution (model.md §7.2, vLLM V4.1's kernels) */
static hm_status compress_row(hm_select_state *s, const hm_select_args *a, uint32_t t, const float *cos_sin) {
  const hm_layer_config *c = a->cfg;
  const hm_layer_weights *w = a->w;
  const uint32_t D = c->hidden, KV = c->kv_dim, r = c->compress_ratio, H = c->index_head_dim;
  const uint16_t *wkv = hm_wdata(w, "cmp_wkv", HM_DT_BF16, (uint64_t)KV * D);
  const uint16_t *nw = hm_wdata(w, "cmp_norm", HM_DT_BF16, KV);
  const uint16_t *wk = hm_wdata(w, "idx_wk", HM_DT_BF16, (uint64_t)H * KV);
  const uint16_t *kn = hm_wdata(w, "idx_k_norm", HM_DT_BF16, H);
  const uint16_t *wg = r == 2 ? hm_wdata(w, "cmp_wgate", HM_DT_BF16, (uint64_t)KV * D) : NULL;
  if (!wkv || !nw || !wk || !kn || (r == 2 && !wg)) return hm_fail_prefix(HM_ERR_INVALID_ARG, "compressor");
  const int64_t p = a->positions[t];
  const int32_t q = a->token_to_req[t];
  sel_req *st = get_req(s, c->layer, q, H);
  if (!st) return hm_fail(HM_ERR_NO_MEMORY, "select state");
  /* f32 projections of the bf16 normed row (torch.mm out_dtype f32) */
  float kvp[HM_HEAD_DIM], sc[HM_HEAD_DIM], pooled[HM_HEAD_DIM] = {0};
  const float *x = a->normed + (size_t)t * D;
  linear_bf16(wkv, KV, D, x, kvp, false);
  if (r == 2) {
    linear_bf16(wg, KV, D, x, sc, false);
    if (p % 2 == 0) { /* the group's first token: held until its second */
      st->pend = true, st->pend_pos = p;
      memcpy(st->pend_kv, kvp, sizeof kvp);
      memcpy(st->pend_sc, sc, sizeof sc);
      return HM_OK;
    }
    /* the first token stays held (a repeated call finds it again); check_groups saw it is there */
    if (!st->pend || st->pend_pos != p - 1) return group_missing(q, p);
    /* the first token is the step's previous (live) row of this request, else the state's */
    bool in_step = t > 0 && a->slot_mapping[t - 1] >= 0 && a->token_to_req[t - 1] == q && a->positions[t - 1] == p - 1;
    for (uint32_t d = 0; d < KV; d++) pooled[d] = pool_pair(st->pend_kv[d], st->pend_sc[d], kvp[d], sc[d], in_step);
  } else {
    memcpy(pooled, kvp, sizeof pooled);
  }
  const uint32_t j = (uint32_t)(p / r); /* the entry, rotated at its group's first position j*r */
  /* The latent: RMSNorm of the f32 pooled value, the whole of it stored as bf16; the record's nope
   * blocks quantised from it (rule R), its rope dims rotated from the bf16 values, then bf16.
   * vllm-project/vllm vllm/models/deepseek_v41/common/ops/fused_compress_quant_cache.py:
   * _store_latent, _rope_quant_insert_kernel (the 584-B record). */
  float latent[HM_HEAD_DIM], rec[HM_HEAD_DIM];
  rms_f32(pooled, KV, nw, c->eps, latent);
  for (uint32_t d = 0; d < KV; d++) latent[d] = fmt_round_bf16(latent[d]);
  memcpy(rec, latent, sizeof rec);
  rope_tail(rec, KV, cos_sin, (int64_t)j * r, true);
  uint8_t data[HM_RECORD_DATA], scale[8];
  hm_ref_kv_record(rec, data, scale);
  int64_t slot = (int64_t)a->block_table[(size_t)q * a->bt_stride + j / a->rows_per_block] * a->rows_per_block +
                 j % a->rows_per_block;
  hm_status e = hm_ref_kv_insert(&a->comp, slot, data, scale);
  if (e != HM_OK) return hm_fail_prefix(e, "compressed entry %u", j);
  /* The indexer key from the same pre-RoPE bf16 latent: bf16(wk . latent) (a bf16 linear),
   * bf16(RMSNorm in f32), RoPE at j*r on those bf16 values, bf16, MXFP4 QDQ per 32 (RNE, the
   * scale 2^ceil(log2(amax / 6))). vllm-project/vllm deepseek_v41/attention.py
   * DeepseekV4Indexer._produce_k; common/ops/indexer_k_store.py _indexer_k_norm_rope_quant_store_kernel. */
  float k0[IDX_MAX_HEAD], k[IDX_MAX_HEAD];
  linear_bf16(wk, H, KV, latent, k0, true);
  rms_f32(k0, H, kn, c->eps, k);
  for (uint32_t d = 0; d < H; d++) k[d] = fmt_round_bf16(k[d]);
  rope_tail(k, H, cos_sin, (int64_t)j * r, true);
  qdq_fp4(k, H);
  return put_key(st, j, k);
}

/* ---------------------------------------------------------------- the select step's trace */

typedef struct select_trace {
  uint32_t n; /* N: the most entries a row of the step scores (at least 1) */
  int32_t *first;
  float *scores;
  uint8_t *cand;
} select_trace;

/* the most entries a live row scores */
static uint32_t step_entries(const hm_select_args *a) {
  uint32_t n = 1;
  for (uint32_t t = 0; t < a->S; t++)
    if (a->slot_mapping[t] >= 0 && (uint64_t)(a->positions[t] + 1) / a->cfg->compress_ratio > n)
      n = (uint32_t)((a->positions[t] + 1) / a->cfg->compress_ratio);
  return n;
}

/* Before the compressor: where each group's first token is, the state's pending tokens it will
 * use; the arrays the indexer fills (scores -inf until scored). */
static hm_status trace_begin(const hm_select_state *s, const hm_select_args *a, select_trace *tr) {
  const hm_layer_config *c = a->cfg;
  const uint32_t S = a->S;
  tr->n = step_entries(a);
  if (hm_config_has(c, HM_ROLE_KV_SOURCE)) {
    float *pk, *pg;
    if (!(tr->first = hm_trace_i32(a->trace, "select.first", S, 0)) ||
        !(pk = hm_trace_f32(a->trace, "select.pending_kv", S, HM_HEAD_DIM, 0)) ||
        !(pg = hm_trace_f32(a->trace, "select.pending_gate", S, HM_HEAD_DIM, 0)))
      return hm_fail_prefix(HM_ERR_INVALID_ARG, "select trace");
    check_groups(s, a, tr->first);
    for (uint32_t t = 0; t < S; t++) {
      if (tr->first[t] != -1) continue;
      const sel_req *r = find_req(s, c->layer, a->token_to_req[t]);
      memcpy(pk + (size_t)t * HM_HEAD_DIM, r->pend_kv, sizeof r->pend_kv);
      memcpy(pg + (size_t)t * HM_HEAD_DIM, r->pend_sc, sizeof r->pend_sc);
    }
  }
  if (!(tr->scores = hm_trace_f32(a->trace, "select.scores", S, tr->n, 0)))
    return hm_fail_prefix(HM_ERR_INVALID_ARG, "select trace");
  for (uint64_t i = 0; i < (uint64_t)S * tr->n; i++) tr->scores[i] = -INFINITY;
  if ((hm_config_has(c, HM_ROLE_CANDIDATE) || c->layer > c->candidate_source) &&
      !(tr->cand = hm_trace_u8(a->trace, "select.candidates", HM_DT_U8, S, tr->n, 0)))
    return hm_fail_prefix(HM_ERR_INVALID_ARG, "select trace");
  return HM_OK;
}

/* After the compressor: the entries the step's rows wrote (read back from the cache and the
 * state), and the indexer keys every row's scores will read. */
static hm_status trace_made(const hm_select_state *s, const hm_select_args *a, select_trace *tr) {
  const hm_layer_config *c = a->cfg;
  const uint32_t S = a->S, H = c->index_head_dim, r = c->compress_ratio;
  if (hm_config_has(c, HM_ROLE_KV_SOURCE)) {
    int32_t *ent;
    uint8_t *rec;
    float *keys;
    if (!(ent = hm_trace_i32(a->trace, "select.entry", S, 0)) ||
        !(rec = hm_trace_u8(a->trace, "select.records", HM_DT_U8, S, HM_RECORD, 0)) ||
        !(keys = hm_trace_f32(a->trace, "select.keys", S, H, 0)))
      return hm_fail_prefix(HM_ERR_INVALID_ARG, "select trace");
    for (uint32_t t = 0; t < S; t++) {
      const int64_t p = a->positions[t];
      const int32_t q = a->token_to_req[t];
      ent[t] = -1;
      if (a->slot_mapping[t] < 0 || (p + 1) % r) continue;
      const uint32_t j = (uint32_t)(p / r);
      const int64_t slot = (int64_t)a->block_table[(size_t)q * a->bt_stride + j / a->rows_per_block] *
                               a->rows_per_block + j % a->rows_per_block;
      uint64_t dof, sof;
      if (hm_ref_kv_offsets(&a->comp, slot, &dof, &sof) != HM_OK)
        return hm_fail_prefix(HM_ERR_INVALID_ARG, "select trace");
      ent[t] = (int32_t)j;
      memcpy(rec + (size_t)t * HM_RECORD, a->comp.base + dof, HM_RECORD_DATA);
      memcpy(rec + (size_t)t * HM_RECORD + HM_RECORD_DATA, a->comp.base + sof, 8);
      const sel_req *k = find_req(s, c->layer, q);
      memcpy(keys + (size_t)t * H, k->keys + (size_t)j * H, H * sizeof(float));
    }
  }
  int32_t R = 0;
  for (uint32_t t = 0; t < S; t++)
    if (a->slot_mapping[t] >= 0 && a->token_to_req[t] + 1 > R) R = a->token_to_req[t] + 1;
  float *ik = hm_trace_f32(a->trace, "select.index_keys", R ? (uint64_t)R : 1, tr->n, H);
  if (!ik) return hm_fail_prefix(HM_ERR_INVALID_ARG, "select trace");
  for (int32_t q = 0; q < R; q++) {
    const sel_req *k = find_req(s, c->kv_source, q);
    for (uint32_t j = 0; k && j < tr->n && j < k->nkeys; j++)
      if (k->have[j]) memcpy(ik + ((size_t)q * tr->n + j) * H, k->keys + (size_t)j * H, H * sizeof(float));
  }
  return HM_OK;
}

hm_status hm_ref_select(void *state, const hm_select_args *a, int32_t *topk) {
  hm_select_state *s = state;
  if (!s || !a || !a->cfg || !a->w || !topk || !a->normed || !a->qr || !a->positions || !a->token_to_req ||
      !a->slot_mapping)
    return hm_fail(HM_ERR_INVALID_ARG, "select: null argument");
  const hm_layer_config *c = a->cfg;
  const uint32_t D = c->hidden, Q = c->q_lora, NH = c->index_heads, H = c->index_head_dim, r = c->compress_ratio;
  if (!hm_config_has(c, HM_ROLE_INDEX_SOURCE) || r == 0 || H > IDX_MAX_HEAD)
    return hm_fail(HM_ERR_INVALID_ARG, "select: layer %d is not an index source", c->layer);
  if (hm_config_has(c, HM_ROLE_KV_SOURCE) && (!a->block_table || !a->rows_per_block || !a->comp.base))
    return hm_fail(HM_ERR_INVALID_ARG, "select: kv source %d needs its compressed cache", c->layer);
  /* the indexer's wq_b in either arch's copy (gfx942: FNUZ tile-major, the same values) */
  ref_dense wq;
  bool have_wq = ref_dense_get(a->w, "idx_wq_b", NH * H, Q, &wq) == HM_OK;
  const uint16_t *wp = hm_wdata(a->w, "idx_weights_proj", HM_DT_BF16, (uint64_t)NH * D);
  const hm_tensor *cs = hm_weights_get(a->w, "cos_sin");
  if (!have_wq || !wp || !cs) return hm_fail_prefix(HM_ERR_INVALID_ARG, "indexer");
  for (uint32_t t = 0; t < a->S; t++)
    if (a->positions[t] < 0 || (uint64_t)a->positions[t] >= cs->shape[0])
      return hm_fail(HM_ERR_INVALID_ARG, "select: position %lld outside the RoPE table", (long long)a->positions[t]);
  hm_status st = HM_OK;
  const bool kvsrc = hm_config_has(c, HM_ROLE_KV_SOURCE);
  select_trace tr = {0};
  const uint32_t tr0 = a->trace ? a->trace->count : 0;
  if ((kvsrc && (st = check_groups(s, a, NULL)) != HM_OK) || (st = check_keys(s, a)) != HM_OK) return st;
  if (a->trace && (st = trace_begin(s, a, &tr)) != HM_OK) return st;
  /* 1. the kv source's compressor, rows in order (a group may span two rows of the step) */
  if (kvsrc)
    for (uint32_t t = 0; t < a->S && st == HM_OK; t++)
      if (a->slot_mapping[t] >= 0) st = compress_row(s, a, t, cs->data);
  if (st == HM_OK && a->trace) st = trace_made(s, a, &tr);
  if (st != HM_OK) {
    if (a->trace) hm_tset_truncate(a->trace, tr0);
    return st;
  }
  bool candidate = hm_config_has(c, HM_ROLE_CANDIDATE);
  if (candidate) clear_masks(s); /* a new step's masks */
  float *qi = hm_ref_alloc((size_t)NH * H * sizeof(float)), *wts = hm_ref_alloc((size_t)NH * sizeof(float));
  float *I = NULL;
  if (!qi || !wts) {
    st = HM_ERR_NO_MEMORY;
    goto out;
  }
  const float wscale = (float)(1.0 / sqrt((double)H) / sqrt((double)NH));
  for (uint32_t t = 0; t < a->S; t++) {
    int32_t *row = topk + (size_t)t * HM_TOPK_ATTN;
    for (int k = 0; k < HM_TOPK_ATTN; k++) row[k] = -1;
    if (a->slot_mapping[t] < 0) continue;
    const int64_t p = a->positions[t];
    const int32_t q = a->token_to_req[t];
    const uint32_t n = (uint32_t)((p + 1) / r);
    if (n == 0) continue;
    sel_req *kr = get_req(s, c->kv_source, q, H);
    if (!kr) {
      st = hm_fail(HM_ERR_NO_MEMORY, "select state");
      goto out;
    }
    uint32_t have = 0;
    while (have < n && have < kr->nkeys && kr->have[have]) have++;
    if (have < n) {
      st = hm_fail(HM_ERR_INVALID_ARG, "select: request %d has indexer keys 0..%u of layer %d, row %u needs %u", q, have,
                   c->kv_source, t, n);
      goto out;
    }
    /* query: REF Linear_fp8 on qr, RoPE on each head's last 64 dims at p, bf16, MXFP4 QDQ */
    if ((st = ref_linear_fp8(&wq, a->qr + (size_t)t * Q, qi)) != HM_OK) goto out;
    for (uint32_t h = 0; h < NH; h++) {
      rope_tail(qi + (size_t)h * H, H, cs->data, p, true);
      qdq_fp4(qi + (size_t)h * H, H);
    }
    linear_bf16(wp, NH, D, a->normed + (size_t)t * D, wts, true);
    for (uint32_t h = 0; h < NH; h++) wts[h] = wts[h] * wscale;
    free(I);
    I = hm_ref_alloc((size_t)n * sizeof(float));
    if (!I) {
      st = HM_ERR_NO_MEMORY;
      goto out;
    }
    /* I[j] = sum_h w_h relu(q_h . k_j), f32, heads in order */
    for (uint32_t j = 0; j < n; j++) {
      const float *kj = kr->keys + (size_t)j * H;
      float acc = 0.0f;
      for (uint32_t h = 0; h < NH; h++) {
        float d = 0.0f;
        for (uint32_t i = 0; i < H; i++) d = d + qi[(size_t)h * H + i] * kj[i];
        acc = acc + wts[h] * fmaxf(d, 0.0f);
      }
      I[j] = acc;
    }
    const uint32_t bs = c->candidate_block_size;
    if (candidate) {
      if (s->nm == s->cm) {
        uint32_t cm = s->cm ? 2 * s->cm : 16;
        sel_mask *nm = realloc(s->m, cm * sizeof *nm);
        if (!nm) {
          st = hm_fail(HM_ERR_NO_MEMORY, "candidate masks");
          goto out;
        }
        s->m = nm, s->cm = cm;
      }
      uint8_t *mk = hm_ref_alloc(n);
      if (!mk || (st = hm_ref_candidate_blocks(I, n, bs, c->candidate_topk_blocks, mk)) != HM_OK) {
        free(mk);
        st = st == HM_OK ? HM_ERR_NO_MEMORY : st;
        goto out;
      }
      s->m[s->nm++] = (sel_mask){q, p, n, mk};
      if (tr.cand) memcpy(tr.cand + (size_t)t * tr.n, mk, n);
    } else if (c->layer > c->candidate_source) {
      /* later index sources: ids outside layer 20's kept blocks are -inf */
      const sel_mask *m = find_mask(s, q, p);
      for (uint32_t j = 0; j < n; j++) {
        bool keep = !m || (j < m->n && m->keep[j]);
        if (!keep) I[j] = -INFINITY;
        if (tr.cand) tr.cand[(size_t)t * tr.n + j] = keep;
      }
    }
    if (tr.scores) memcpy(tr.scores + (size_t)t * tr.n, I, (size_t)n * sizeof(float));
    hm_ref_index_topk(I, n, HM_TOPK_ATTN, HM_TOPK_ATTN, row);
  }
out:
  free(qi), free(wts), free(I);
  if (st != HM_OK && a->trace) hm_tset_truncate(a->trace, tr0);
  return st;
}

hm_status hm_ref_candidate_blocks(const float *I, uint32_t n, uint32_t block, uint32_t keep, uint8_t *keep_id) {
  if (!I || !keep_id || n == 0 || block == 0) return hm_fail(HM_ERR_INVALID_ARG, "candidate blocks: bad argument");
  uint32_t nb = (n + block - 1) / block;
  float *B = hm_ref_alloc((size_t)nb * sizeof(float));
  uint8_t *kb = hm_ref_alloc(nb);
  if (!B || !kb) {
    free(B), free(kb);
    return HM_ERR_NO_MEMORY;
  }
  for (uint32_t b = 0; b < nb; b++) {
    B[b] = -INFINITY; /* a partial last block is padded with -inf */
    for (uint32_t j = b * block; j < (b + 1) * block && j < n; j++) B[b] = fmaxf(B[b], I[j]);
  }
  B[(n - 1) / block] = INFINITY; /* the newest id's block */
  for (uint32_t i = 0; i < keep && i < nb; i++) {
    uint32_t best = nb;
    for (uint32_t b = 0; b < nb; b++)
      if (!kb[b] && B[b] > -INFINITY && (best == nb || B[b] > B[best])) best = b;
    if (best == nb) break;
    kb[best] = 1;
  }
  for (uint32_t j = 0; j < n; j++) keep_id[j] = kb[j / block];
  free(B), free(kb);
  return HM_OK;
}

uint32_t hm_ref_index_topk(const float *I, uint32_t n, uint32_t k, uint32_t width, int32_t *out) {
  uint8_t *picked = calloc(n ? n : 1, 1);
  uint32_t got = 0;
  if (picked) {
    for (uint32_t i = 0; i < k && i < n; i++) {
      uint32_t best = n;
      for (uint32_t j = 0; j < n; j++)
        if (!picked[j] && I[j] > -INFINITY && (best == n || I[j] > I[best])) best = j;
      if (best == n) break;
      picked[best] = 1;
      got++;
    }
  }
  uint32_t m = 0;
  for (uint32_t j = 0; picked && j < n && m < width; j++)
    if (picked[j]) out[m++] = (int32_t)j;
  for (; m < width; m++) out[m] = -1;
  free(picked);
  return got;
}
