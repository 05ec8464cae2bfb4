/* layer/ref/ref_layer.c: one whole decode step of a layer for the TP group (spec/mono.md §2.7): the first
 * layer's entry, the Engram hand-off (model.md §8), K1, the select step, K2's attention and FFN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "ref_internal.h"

/* ---------------------------------------------------------------- mHC post and Engram */

void hm_ref_mhc_post(uint32_t S, uint32_t D, const float *x, const float *res, const float *post, const float *comb,
                     float *out) {
  for (uint32_t t = 0; t < S; t++) {
    const float *r = res + (size_t)t * HM_HC * D, *cb = comb + t * 16;
    for (uint32_t k = 0; k < HM_HC; k++)
      for (uint32_t c = 0; c < D; c++) {
        float a = post[t * HM_HC + k] * x[(size_t)t * D + c];
        for (uint32_t j = 0; j < HM_HC; j++) a = a + cb[j * 4 + k] * r[(size_t)j * D + c];
        out[((size_t)t * HM_HC + k) * D + c] = fmt_round_bf16(a);
      }
  }
}

hm_status hm_ref_engram(const hm_layer_weights *w, uint32_t S, const hm_source *table, const int64_t *hashes,
                        const uint8_t *mask, float *res, float *e_out, float *gates) {
  const hm_layer_config *c = &w->cfg;
  const uint32_t D = c->hidden, hd = c->engram_head_dim, nrow = c->engram_heads * c->engram_ngram, K = nrow * hd;
  const uint32_t N = (HM_HC + 1) * D;
  if (!table || !hashes || !res) return hm_fail(HM_ERR_INVALID_ARG, "Engram: needs the table, hashes and residual");
  /* vLLM's op on either GPU: a gfx942 copy of wkv gives the same values */
  ref_dense wk;
  const uint16_t *qw = NULL, *kw = NULL;
  if (ref_dense_get(w, "engram_wkv", N, K, &wk) == HM_OK && (qw = hm_wdata(w, "engram_q", HM_DT_BF16, (uint64_t)HM_HC * D)))
    kw = hm_wdata(w, "engram_k", HM_DT_BF16, (uint64_t)HM_HC * D);
  if (!kw) return hm_fail_prefix(HM_ERR_INVALID_ARG, "Engram");
  char wname[HM_TENSOR_NAME], sname[HM_TENSOR_NAME], prefix[32];
  hm_config_prefix(c, prefix, sizeof prefix);
  snprintf(wname, sizeof wname, "%sengram.embed.weight", prefix);
  snprintf(sname, sizeof sname, "%sengram.embed.scale", prefix);
  float *E = hm_ref_alloc((size_t)K * sizeof(float)), *kv = hm_ref_alloc((size_t)N * sizeof(float));
  uint8_t *rb = hm_ref_alloc(hd), *rs = hm_ref_alloc(hd / 32);
  hm_status st = HM_ERR_NO_MEMORY;
  if (!E || !kv || !rb || !rs) goto out;
  const float *tab = hm_e4m3_table();
  for (uint32_t t = 0; t < S; t++) {
    /* the 24 rows (n-gram major, head minor) of fp8 x E8M0-per-32, exact in bf16 */
    for (uint32_t i = 0; i < nrow; i++) {
      int64_t id = hashes[(size_t)t * nrow + i];
      if (id < 0) {
        st = hm_fail(HM_ERR_INVALID_ARG, "Engram: row id %lld", (long long)id);
        goto out;
      }
      if ((st = table->read(table->ctx, wname, (uint64_t)id, 1, 0, hd, rb)) != HM_OK) goto out;
      if ((st = table->read(table->ctx, sname, (uint64_t)id, 1, 0, hd / 32, rs)) != HM_OK) goto out;
      for (uint32_t j = 0; j < hd; j++) E[i * hd + j] = tab[rb[j]] * fmt_e8m0_decode(rs[j / 32]);
    }
    if (e_out) memcpy(e_out + (size_t)t * K, E, (size_t)K * sizeof(float));
    if ((st = ref_linear_fp8(&wk, E, kv)) != HM_OK) goto out;
    float *X = res + (size_t)t * HM_HC * D;
    const float *val = kv + (size_t)HM_HC * D;
    bool text = !mask || mask[t];
    for (uint32_t k = 0; k < HM_HC; k++) {
      float *h = X + (size_t)k * D;
      const float *key = kv + (size_t)k * D;
      float hh = 0.0f, kk = 0.0f, dot = 0.0f;
      for (uint32_t d = 0; d < D; d++) {
        hh = hh + h[d] * h[d];
        kk = kk + key[d] * key[d];
      }
      float r = hm_ref_rsq(hh / (float)D + c->eps) * hm_ref_rsq(kk / (float)D + c->eps);
      for (uint32_t d = 0; d < D; d++) {
        float wqk = fmt_bf16_to_f32(qw[k * D + d]) * fmt_bf16_to_f32(kw[k * D + d]);
        dot = dot + (h[d] * wqk) * key[d];
      }
      dot = dot * r / sqrtf((float)D);
      float sg = dot > 0.0f ? 1.0f : dot < 0.0f ? -1.0f : 0.0f;
      float gate = text ? 1.0f / (1.0f + expf(-(sg * sqrtf(fmaxf(fabsf(dot), 1e-6f))))) : 0.0f;
      if (gates) gates[t * HM_HC + k] = gate;
      for (uint32_t d = 0; d < D; d++) h[d] = fmt_round_bf16(h[d] + gate * val[d]);
    }
  }
  st = HM_OK;
out:
  free(E), free(kv), free(rb), free(rs);
  return st;
}

/* ---------------------------------------------------------------- K1 */

#define TRY(x)           \
  do {                   \
    if (!(x)) goto fail; \
  } while (0)

static hm_status k1_rank(const hm_layer_weights *w, uint32_t r, uint32_t tp, hm_arch arch) {
  if (w->rank != r || w->dims.tp != tp || !(w->parts & HM_WPART_ATTN) || w->arch != arch)
    return hm_fail(HM_ERR_INVALID_ARG, "K1: weights %u are not rank %u of %u with attention for rank 0's GPU", r, r,
                   tp);
  return HM_OK;
}

/* ranks: every rank's attention weights, held or built a rank at a time (rank 0's for the seam,
 * wqkv and the record, each rank's own for its q) */
static hm_status k1(ref_ranks *ranks, const hm_ref_k1_in *k, bool index_build, hm_tensor_set *tr) {
  const uint32_t tp = ranks->tp;
  const hm_layer_weights *w0, *wr;
  hm_status st = ref_ranks_get(ranks, 0, &w0);
  if (st != HM_OK) return st;
  const hm_arch arch = w0->arch;
  if (ranks->held)
    for (uint32_t r = 0; r < tp; r++)
      if ((st = k1_rank(&ranks->held[r], r, tp, arch)) != HM_OK) return st;
  if ((st = k1_rank(w0, 0, tp, arch)) != HM_OK) return st;
  const hm_layer_config cfg0 = w0->cfg, *c = &cfg0; /* a copy: w0 goes when rank 1 is built */
  const hm_step_inputs *in = k->meta;
  const uint32_t S = k->S, D = c->hidden, Q = c->q_lora;
  const hm_dtype adt = ref_act_dtype(arch);
  if (S < 1 || S > HM_MAX_ROWS) return hm_fail(HM_ERR_INVALID_ARG, "K1: %u rows (1..%d)", S, HM_MAX_ROWS);
  if (!k->res || !k->pre || (k->x && (!k->post || !k->comb)) || !in || !in->positions || !in->slot_mapping ||
      !in->swa_indices || !in->swa_lens || !in->token_to_req)
    return hm_fail(HM_ERR_INVALID_ARG, "K1: missing step inputs");
  if (c->compress_ratio > 0 && !index_build && (!in->topk || !in->block_table))
    return hm_fail(HM_ERR_INVALID_ARG, "K1: ratio %u layer %d reads a top-k and a block table", c->compress_ratio,
                   c->layer);
  const float *fn = hm_wdata(w0, "hc_attn_fn", HM_DT_F32, (uint64_t)HM_MIX * HM_HC * D);
  const float *scale = hm_wdata(w0, "hc_attn_scale", HM_DT_F32, 3);
  const float *base = hm_wdata(w0, "hc_attn_base", HM_DT_F32, HM_MIX);
  const uint16_t *anorm = hm_wdata(w0, "attn_norm", HM_DT_BF16, D);
  const uint16_t *qnw = hm_wdata(w0, "q_norm", HM_DT_BF16, Q);
  const uint16_t *kvw = hm_wdata(w0, "kv_norm", HM_DT_BF16, HM_HEAD_DIM);
  const hm_tensor *cs = hm_weights_get(w0, "cos_sin");
  if (!fn || !scale || !base || !anorm || !qnw || !kvw || !cs) return hm_fail_prefix(HM_ERR_INVALID_ARG, "K1");
  for (uint32_t t = 0; t < S; t++)
    if (in->positions[t] < 0 || (uint64_t)in->positions[t] >= cs->shape[0])
      return hm_fail(HM_ERR_INVALID_ARG, "position %lld outside the RoPE table (%llu rows)", (long long)in->positions[t],
                     (unsigned long long)cs->shape[0]);
  hm_ref_seam_out so;
  TRY(so.res = hm_trace_f32(tr, "k1.seam.res", S, HM_HC, D));
  TRY(so.post = hm_trace_f32(tr, "k1.seam.post", S, HM_HC, 0));
  TRY(so.comb = hm_trace_f32(tr, "k1.seam.comb", S, HM_HC, HM_HC));
  TRY(so.pre = hm_trace_f32(tr, "k1.seam.pre", S, HM_HC, 0));
  TRY(so.lin = hm_trace_f32(tr, "k1.seam.lin", S, D, 0));
  TRY(so.mix = hm_trace_f32(tr, "k1.seam.mix", S, HM_MIX, 0));
  TRY(so.sq = hm_trace_f32(tr, "k1.seam.sq", S, 0, 0));
  TRY(so.normed = hm_trace_f32(tr, "k1.seam.normed", S, D, 0));
  if ((st = hm_ref_seam(c, S, k->x, k->res, k->post, k->comb, k->pre, fn, scale, base, anorm, &so)) != HM_OK) return st;
  uint8_t *x8, *x8s, *qx8, *qx8s, *rec;
  float *qkv, *qn, *kn;
  TRY(x8 = hm_trace_u8(tr, "k1.x8", adt, S, D, 0));
  TRY(x8s = hm_trace_u8(tr, "k1.x8_s", HM_DT_E8M0, S, D / 32, 0));
  hm_ref_act_quant(arch, false, so.normed, S, D, 32, FMT_RULE_V, x8, x8s);
  TRY(qkv = hm_trace_f32(tr, "k1.qkv", S, Q + HM_HEAD_DIM, 0));
  if ((st = hm_ref_qkv(w0, S, x8, x8s, qkv)) != HM_OK) return st;
  TRY(qn = hm_trace_f32(tr, "k1.qn", S, Q, 0));
  hm_ref_q_norm(S, Q, qkv, qnw, c->eps, qn);
  TRY(qx8 = hm_trace_u8(tr, "k1.qx8", adt, S, Q, 0));
  TRY(qx8s = hm_trace_u8(tr, "k1.qx8_s", HM_DT_E8M0, S, Q / 32, 0));
  hm_ref_act_quant(arch, false, qn, S, Q, 32, FMT_RULE_V, qx8, qx8s);
  TRY(kn = hm_trace_f32(tr, "k1.kv", S, HM_HEAD_DIM, 0));
  hm_ref_kv_norm_rope(S, Q, qkv, kvw, c->eps, cs->data, in->positions, kn);
  TRY(rec = hm_trace_u8(tr, "k1.record", HM_DT_U8, S, HM_RECORD, 0));
  for (uint32_t t = 0; t < S; t++) {
    /* the SWA cache follows the GPU's fp8: FNUZ on gfx942 (§2.6) */
    if (arch == HM_ARCH_GFX942)
      hm_ref_kv_record_fnuz(kn + (size_t)t * HM_HEAD_DIM, rec + (size_t)t * HM_RECORD,
                            rec + (size_t)t * HM_RECORD + HM_RECORD_DATA);
    else
      hm_ref_kv_record(kn + (size_t)t * HM_HEAD_DIM, rec + (size_t)t * HM_RECORD,
                       rec + (size_t)t * HM_RECORD + HM_RECORD_DATA);
    if (in->slot_mapping[t] >= 0 &&
        (st = hm_ref_kv_insert(&in->swa, in->slot_mapping[t], rec + (size_t)t * HM_RECORD,
                               rec + (size_t)t * HM_RECORD + HM_RECORD_DATA)) != HM_OK)
      return hm_fail_prefix(st, "row %u record", t);
  }
  if (!index_build) {
    int32_t *kt, *klen;
    TRY(kt = hm_trace_i32(tr, "k1.kt", S, HM_KEYS));
    TRY(klen = hm_trace_i32(tr, "k1.klen", 2 * S, 0));
    hm_key_args ka = {S, c->compress_ratio, in->positions, in->slot_mapping, in->swa_indices, in->swa_lens,
                      in->token_to_req, in->topk, in->block_table, in->bt_stride, in->comp.block_size};
    if ((st = hm_ref_key_table(&ka, kt, klen)) != HM_OK) return st;
  }
  char n[64];
  for (uint32_t r = 0; r < tp; r++) {
    float *q;
    snprintf(n, sizeof n, "rank%u.q", r);
    if ((st = ref_ranks_get(ranks, r, &wr)) != HM_OK || (st = k1_rank(wr, r, tp, arch)) != HM_OK) return st;
    TRY(q = hm_trace_f32(tr, n, S, wr->dims.heads, HM_HEAD_DIM));
    if ((st = hm_ref_wq_b(wr, S, qx8, qx8s, in->positions, q)) != HM_OK) return st;
  }
  return HM_OK;
fail:
  return hm_fail_prefix(HM_ERR_INVALID_ARG, "K1 trace");
}

hm_status hm_ref_k1(const hm_layer_weights *w, uint32_t tp, const hm_ref_k1_in *in, bool index_build,
                    hm_tensor_set *trace) {
  if (!w || !in || !trace || tp < 1 || tp > HM_LAYER_MAX_TP) return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_k1: bad argument");
  uint32_t n0 = trace->count;
  ref_ranks k = {.held = w, .tp = tp, .cur_rank = -1};
  hm_status st = k1(&k, in, index_build, trace);
  if (st != HM_OK) hm_tset_truncate(trace, n0);
  return st;
}

hm_status hm_ref_k1_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src, const hm_build_opts *opts,
                           const hm_ref_k1_in *in, bool index_build, hm_tensor_set *trace) {
  if (!cfg || !src || !in || !trace || tp < 1 || tp > HM_LAYER_MAX_TP)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_k1_source: bad argument");
  uint32_t n0 = trace->count;
  ref_ranks k = {.cfg = cfg, .src = src, .tp = tp, .cur_rank = -1};
  if (opts) k.opts = *opts;
  k.opts.parts = HM_WPART_ATTN;
  hm_status st = k1(&k, in, index_build, trace);
  ref_ranks_release(&k);
  if (st != HM_OK) hm_tset_truncate(trace, n0);
  return st;
}

/* ---------------------------------------------------------------- the step */

/* w: every rank's attention weights (rank 0's with the layer's Engram and select parts); ffn: the
 * ranks' FFN weights, held or built a rank at a time */
static hm_status step(const hm_layer_weights *w, uint32_t tp, ref_ranks *ffn, const hm_step_inputs *in,
                      hm_select_fn select, void *select_ctx, hm_tensor_set *tr) {
  const hm_layer_config *c = &w[0].cfg;
  const uint32_t S = in->S, D = c->hidden;
  hm_status st = HM_OK;
  for (uint32_t r = 0; r < tp; r++)
    if (w[r].rank != r || w[r].dims.tp != tp || !(w[r].parts & HM_WPART_ATTN) ||
        (ffn->held && !(w[r].parts & HM_WPART_FFN)))
      return hm_fail(HM_ERR_INVALID_ARG, "layer step: weights %u are not rank %u of %u with attention and FFN", r, r, tp);
  if (S < 1 || S > HM_MAX_ROWS) return hm_fail(HM_ERR_INVALID_ARG, "layer step: %u rows (1..%d)", S, HM_MAX_ROWS);
  bool first = hm_config_has(c, HM_ROLE_FIRST) || !in->res, engram = hm_config_has(c, HM_ROLE_ENGRAM);
  if (!in->x || !in->positions || !in->slot_mapping || !in->swa_indices || !in->swa_lens || !in->token_to_req)
    return hm_fail(HM_ERR_INVALID_ARG, "layer step: missing step inputs");
  if (!first && (!in->post || !in->comb || !in->pre))
    return hm_fail(HM_ERR_INVALID_ARG, "layer step: a later layer needs the residual and the mixes");
  bool index = hm_config_has(c, HM_ROLE_INDEX_SOURCE);
  if (c->compress_ratio > 0 && !index && !in->topk)
    return hm_fail(HM_ERR_INVALID_ARG, "layer step: ratio %u layer %d reads its index source's top-k", c->compress_ratio,
                   c->layer);
  if (index && !select) {
    /* the library's own: the reference compressor + indexer on the caller's state */
    if (!select_ctx) return hm_fail(HM_ERR_INVALID_ARG, "layer step: index source %d needs a select state", c->layer);
    select = hm_ref_select;
  }

  /* ---- the residual K1's seam starts from (§2.7, §1.3) */
  float *res_in, *pre_in;
  bool settled = in->settled;
  TRY(res_in = hm_trace_f32(tr, "k1.res_in", S, HM_HC, D));
  TRY(pre_in = hm_trace_f32(tr, "k1.pre_in", S, HM_HC, 0));
  if (first) {
    /* layer 0: the embedding broadcast to the 4 streams, pre = e0, nothing to fold */
    for (uint32_t t = 0; t < S; t++) {
      for (uint32_t h = 0; h < HM_HC; h++)
        memcpy(res_in + ((size_t)t * HM_HC + h) * D, in->x + (size_t)t * D, D * sizeof(float));
      pre_in[t * HM_HC] = 1.0f;
    }
    settled = true;
  } else {
    memcpy(pre_in, in->pre, (size_t)S * HM_HC * sizeof(float));
    if (engram) {
      /* vLLM runs its mHC post and the Engram block first, then the settled seam */
      hm_ref_mhc_post(S, D, in->x, in->res, in->post, in->comb, res_in);
      float *e, *gates;
      TRY(e = hm_trace_f32(tr, "engram.rows", S, (uint64_t)c->engram_heads * c->engram_ngram * c->engram_head_dim, 0));
      TRY(gates = hm_trace_f32(tr, "engram.gate", S, HM_HC, 0));
      if ((st = hm_ref_engram(&w[0], S, in->engram_table, in->engram_hashes, in->engram_mask, res_in, e, gates)) != HM_OK)
        return st;
      settled = true;
    } else {
      memcpy(res_in, in->res, (size_t)S * HM_HC * D * sizeof(float));
    }
  }

  /* ---- K1: seam, wqkv, norms, record insert, key table (unless the index build), every rank's q */
  hm_ref_k1_in k1 = {S, settled ? NULL : in->x, res_in, in->post, in->comb, pre_in, in};
  if ((st = hm_ref_k1(w, tp, &k1, index, tr)) != HM_OK) return st;
  const float *normed = hm_tset_find(tr, "k1.seam.normed")->data, *qn = hm_tset_find(tr, "k1.qn")->data;

  /* ---- select (index sources), then the key table from its top-k (the keylist launch) */
  if (index) {
    int32_t *tk;
    TRY(tk = hm_trace_i32(tr, "k1.topk", S, HM_TOPK_ATTN));
    hm_select_args a = {c, &w[0], S, normed, qn, in->positions, in->slot_mapping, in->token_to_req, in->comp,
                        in->block_table, in->bt_stride, in->comp.block_size, tr};
    if ((st = select(select_ctx, &a, tk)) != HM_OK) return hm_fail_prefix(st, "select");
    int32_t *kt, *klen;
    TRY(kt = hm_trace_i32(tr, "k1.kt", S, HM_KEYS));
    TRY(klen = hm_trace_i32(tr, "k1.klen", 2 * S, 0));
    hm_key_args ka = {S, c->compress_ratio, in->positions, in->slot_mapping, in->swa_indices, in->swa_lens,
                      in->token_to_req, tk, in->block_table, in->bt_stride, in->comp.block_size};
    if ((st = hm_ref_key_table(&ka, kt, klen)) != HM_OK) return st;
  }
  const int32_t *kt = hm_tset_find(tr, "k1.kt")->data, *klen = hm_tset_find(tr, "k1.klen")->data;

  /* ---- per rank: wq_b, attention, wo_a, wo_b */
  const hm_arch arch = w[0].arch;
  const uint32_t ck = hm_attn_chunk_keys(tp, S, arch == HM_ARCH_GFX942), nch = HM_KEYS / ck;
  float *parts[HM_LAYER_MAX_TP];
  char n[64];
  for (uint32_t r = 0; r < tp; r++) {
    const hm_rank_dims *d = &w[r].dims;
    float *q;
    hm_attn_out ao;
    uint8_t *xo, *xos, *x8b, *x8bs;
    float *z;
#define NAME(s) (snprintf(n, sizeof n, "rank%u.%s", r, s), n)
    q = hm_tset_find(tr, NAME("q"))->data;
    TRY(ao.o = hm_trace_f32(tr, NAME("attn.o"), S, d->heads, HM_HEAD_DIM));
    TRY(ao.y = hm_trace_f32(tr, NAME("attn.y"), S, d->heads, HM_HEAD_DIM));
    TRY(ao.m = hm_trace_f32(tr, NAME("attn.m"), S, nch, d->heads));
    TRY(ao.l = hm_trace_f32(tr, NAME("attn.l"), S, nch, d->heads));
    TRY(ao.oc = hm_tset_new(tr, NAME("attn.oc"), HM_DT_F32, S, nch, d->heads, HM_HEAD_DIM));
    if ((st = hm_ref_attention(&w[r], S, q, kt, klen, &in->swa, &in->comp, in->positions, ck, &ao)) != HM_OK) return st;
    TRY(xo = hm_trace_u8(tr, NAME("attn.xo"), ref_act_dtype(arch), S, (uint64_t)d->heads * HM_HEAD_DIM, 0));
    TRY(xos = hm_trace_u8(tr, NAME("attn.xo_s"), HM_DT_E8M0, S, (uint64_t)d->heads * HM_HEAD_DIM / 32, 0));
    hm_ref_act_quant(arch, false, ao.y, S, d->heads * HM_HEAD_DIM, 32, FMT_RULE_V, xo, xos);
    TRY(z = hm_trace_f32(tr, NAME("wo_a.z"), S, d->o_rows, 0));
    TRY(x8b = hm_trace_u8(tr, NAME("wo_a.x8b"), ref_act_dtype(arch), S, d->o_rows, 0));
    TRY(x8bs = hm_trace_u8(tr, NAME("wo_a.x8b_s"), HM_DT_E8M0, S, d->o_rows / 32, 0));
    if ((st = hm_ref_wo_a(&w[r], S, xo, xos, z, x8b, x8bs)) != HM_OK) return st;
    TRY(parts[r] = hm_trace_f32(tr, NAME("wo_b.part"), S, D, 0));
    if ((st = hm_ref_wo_b(&w[r], S, x8b, x8bs, parts[r])) != HM_OK) return st;
#undef NAME
  }

  /* ---- K2's FFN half: the reduce of the parts, the FFN seam on K1's outputs, the MoE */
  return hm_ref_ffn_launch_ranks(ffn, S, (const float *const *)parts, hm_tset_find(tr, "k1.seam.res")->data,
                                 hm_tset_find(tr, "k1.seam.post")->data, hm_tset_find(tr, "k1.seam.comb")->data,
                                 hm_tset_find(tr, "k1.seam.pre")->data, tr);
fail:
  return hm_fail_prefix(HM_ERR_INVALID_ARG, "layer step trace");
}

hm_status hm_ref_layer_step(const hm_layer_weights *w, uint32_t tp, const hm_step_inputs *in, hm_select_fn select,
                            void *select_ctx, hm_tensor_set *trace) {
  if (!w || !in || !trace || tp < 1 || tp > HM_LAYER_MAX_TP) return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_layer_step: bad argument");
  uint32_t n0 = trace->count;
  ref_ranks k = {.held = w, .tp = tp, .cur_rank = -1};
  hm_status st = step(w, tp, &k, in, select, select_ctx, trace);
  if (st != HM_OK) hm_tset_truncate(trace, n0);
  return st;
}

hm_status hm_ref_layer_step_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src,
                                   const hm_build_opts *opts, const hm_step_inputs *in, hm_select_fn select,
                                   void *select_ctx, hm_tensor_set *trace) {
  if (!cfg || !src || !in || !trace || tp < 1 || tp > HM_LAYER_MAX_TP)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_layer_step_source: bad argument");
  /* the attention half's weights, every rank's (rank 0's with the Engram and select parts); the
   * FFN's a rank at a time */
  hm_layer_weights w[HM_LAYER_MAX_TP];
  hm_build_opts o = opts ? *opts : (hm_build_opts){0};
  ref_ranks k = {.cfg = cfg, .src = src, .opts = o, .tp = tp, .cur_rank = -1};
  k.opts.parts = HM_WPART_FFN;
  uint32_t built = 0, n0 = trace->count;
  hm_status st = HM_OK;
  for (; built < tp && st == HM_OK; built++) {
    o.parts = HM_WPART_ATTN;
    if (built == 0 && (hm_config_has(cfg, HM_ROLE_KV_SOURCE) || hm_config_has(cfg, HM_ROLE_INDEX_SOURCE)))
      o.parts |= HM_WPART_SELECT;
    if (built == 0 && hm_config_has(cfg, HM_ROLE_ENGRAM)) o.parts |= HM_WPART_ENGRAM;
    if ((st = hm_weights_build(cfg, tp, built, src, &o, &w[built])) != HM_OK) break;
  }
  if (st == HM_OK) st = step(w, tp, &k, in, select, select_ctx, trace);
  if (st != HM_OK) hm_tset_truncate(trace, n0);
  ref_ranks_release(&k);
  for (uint32_t r = 0; r < built; r++) hm_weights_free(&w[r]);
  return st;
}

