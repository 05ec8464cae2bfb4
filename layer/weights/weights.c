/* layer/weights/weights.c: builds one TP rank's weights in the gfx950 kernels' layouts (spec/mono.md §4)
 * from checkpoint-format tensors (gfx942's copies in weights942.c), and decodes them back to values. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "hm_weights.h"
#include "layouts.h"
#include "weights_internal.h"

/* ---------------------------------------------------------------- reading the source */

typedef hm_wbuild builder;

const hm_ckpt_entry *hm_wb_entry(builder *b, const char *suffix, char *full) {
  snprintf(full, HM_TENSOR_NAME, "%s%s", b->prefix, suffix);
  for (uint32_t i = 0; i < b->count; i++)
    if (!strcmp(b->schema[i].name, full)) return &b->schema[i];
  hm_fail(HM_ERR_INVALID_ARG, "'%s' is not a tensor of this layer", full);
  return NULL;
}

/* "[a]" or "[a,b]" */
static const char *shape_str(char *buf, size_t size, uint32_t nd, const uint64_t shape[2]) {
  if (nd == 2) snprintf(buf, size, "[%llu,%llu]", (unsigned long long)shape[0], (unsigned long long)shape[1]);
  else snprintf(buf, size, "[%llu]", (unsigned long long)shape[0]);
  return buf;
}

/* the schema entry of `suffix`, after checking the source stores it with that dtype and shape */
hm_status hm_wb_expect(builder *b, const char *suffix, char *full, const hm_ckpt_entry **out) {
  const hm_ckpt_entry *e = hm_wb_entry(b, suffix, full);
  if (!e) return HM_ERR_INVALID_ARG;
  hm_dtype dt;
  uint32_t nd;
  uint64_t shape[2] = {0, 0};
  hm_status st = b->src->info(b->src->ctx, full, &dt, &nd, shape);
  if (st != HM_OK) return st;
  /* packed FP4 is stored as I8 or U8 by different writers */
  bool dt_ok = dt == e->dtype || (e->dtype == HM_DT_I8 && dt == HM_DT_U8);
  if (!dt_ok || nd != e->ndim || shape[0] != e->shape[0] || (nd == 2 && shape[1] != e->shape[1])) {
    char have[48], need[48];
    return hm_fail(HM_ERR_FORMAT, "'%s': %s %s, the layer needs %s %s", full, hm_dtype_st_name(dt),
                   shape_str(have, sizeof have, nd, shape), hm_dtype_st_name(e->dtype),
                   shape_str(need, sizeof need, e->ndim, e->shape));
  }
  *out = e;
  return HM_OK;
}

hm_status hm_wb_read(builder *b, const char *suffix, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc,
                     void *out) {
  char full[HM_TENSOR_NAME];
  const hm_ckpt_entry *e;
  hm_status st = hm_wb_expect(b, suffix, full, &e);
  if (st != HM_OK) return st;
  return b->src->read(b->src->ctx, full, r0, nr, c0, nc, out);
}

/* the first n rows (a 1-D tensor: elements) of a tensor, as stored, under a kernel-side name */
static hm_status copy_head(builder *b, const char *suffix, const char *kname, uint64_t n) {
  char full[HM_TENSOR_NAME];
  const hm_ckpt_entry *e;
  hm_status st = hm_wb_expect(b, suffix, full, &e);
  if (st != HM_OK) return st;
  uint64_t shape[2] = {n, e->shape[1]};
  hm_tensor *t;
  st = hm_tset_add(b->set, kname, e->dtype, e->ndim, shape, &t);
  if (st != HM_OK) return st;
  uint64_t rows = e->ndim == 2 ? n : 1, cols = e->ndim == 2 ? e->shape[1] : n;
  return b->src->read(b->src->ctx, full, 0, rows, 0, cols, t->data);
}

/* a whole tensor copied as stored under a kernel-side name */
static hm_status copy_whole(builder *b, const char *suffix, const char *kname) {
  char full[HM_TENSOR_NAME];
  const hm_ckpt_entry *e = hm_wb_entry(b, suffix, full);
  return e ? copy_head(b, suffix, kname, e->shape[0]) : HM_ERR_INVALID_ARG;
}

/* rows [r0, r0+nr) x cols [c0, c0+nc) of an MXFP8 linear (elements; multiples of 32) into a new
 * kernel tensor `kname` [nr, nc] + `kname`_s [nr/32, nc/32]; `at` row offset lets two sources
 * stack into one tensor (dst made by the first call, of `total` rows). */
static hm_status mx8_slice(builder *b, const char *base, const char *kname, uint64_t r0, uint64_t nr,
                           uint64_t c0, uint64_t nc, uint64_t at, uint64_t total) {
  char wn[HM_TENSOR_NAME], sn[HM_TENSOR_NAME], ks[HM_TENSOR_NAME];
  if (b->arch == HM_ARCH_GFX942) return hm_w942_dense(b, base, kname, r0, nr, c0, nc, at, total);
  snprintf(wn, sizeof wn, "%s.weight", base);
  snprintf(sn, sizeof sn, "%s.scale", base);
  snprintf(ks, sizeof ks, "%s_s", kname);
  hm_tensor *w = hm_tset_find(b->set, kname), *s = hm_tset_find(b->set, ks);
  hm_status st;
  if (!w) {
    uint64_t ws[2] = {total, nc}, ss[2] = {total / 32, nc / 32};
    if ((st = hm_tset_add(b->set, kname, HM_DT_E4M3, 2, ws, NULL)) != HM_OK) return st;
    if ((st = hm_tset_add(b->set, ks, HM_DT_E8M0, 2, ss, NULL)) != HM_OK) return st;
    w = hm_tset_find(b->set, kname);
    s = hm_tset_find(b->set, ks);
  }
  if ((st = hm_wb_read(b, wn, r0, nr, c0, nc, (uint8_t *)w->data + at * nc)) != HM_OK) return st;
  return hm_wb_read(b, sn, r0 / 32, nr / 32, c0 / 32, nc / 32, (uint8_t *)s->data + (at / 32) * (nc / 32));
}

/* Every tensor the build reads (the parts', but Engram's table) is in the source: else how many are
 * not, the first few by name and the source's own words for the first (a checkpoint given as one
 * of its shards says so), before anything is read. */
static hm_status check_present(builder *b, uint32_t parts) {
  uint32_t reads = 0, missing = 0;
  char names[400] = "", first[512] = "";
  size_t at = 0;
  for (uint32_t i = 0; i < b->count; i++) {
    const hm_ckpt_entry *e = &b->schema[i];
    if (e->huge || !(e->part & parts)) continue;
    reads++;
    hm_dtype dt;
    uint32_t nd;
    uint64_t shape[2];
    if (b->src->info(b->src->ctx, e->name, &dt, &nd, shape) != HM_ERR_NOT_FOUND) continue;
    if (!missing++) snprintf(first, sizeof first, "%s", hm_errmsg());
    if (missing <= 3 && at < sizeof names)
      at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s'", missing > 1 ? ", " : "", e->name);
  }
  if (!missing) return HM_OK;
  return hm_fail(HM_ERR_NOT_FOUND, "%u of the %u tensors it reads are missing: %s%s (%s)", missing, reads, names,
                 missing > 3 ? " ..." : "", first);
}

/* ---------------------------------------------------------------- the parts */

static hm_status build_experts(builder *b, const hm_rank_dims *d, uint32_t rank);

static hm_status build_ffn(builder *b, const hm_rank_dims *d, uint32_t rank) {
  const uint64_t D = b->cfg->hidden, Sh = d->shared_inter;
  hm_status st;
  if ((st = copy_whole(b, "hc_ffn_fn", "hc_ffn_fn")) != HM_OK) return st;
  if ((st = copy_whole(b, "hc_ffn_scale", "hc_ffn_scale")) != HM_OK) return st;
  if ((st = copy_whole(b, "hc_ffn_base", "hc_ffn_base")) != HM_OK) return st;
  if ((st = copy_whole(b, "ffn_norm.weight", "ffn_norm")) != HM_OK) return st;
  /* a reduced layer of a full checkpoint routes over the gate's first E rows */
  if ((st = copy_head(b, "ffn.gate.weight", "gate_w", b->cfg->experts)) != HM_OK) return st;
  if ((st = copy_head(b, "ffn.gate.bias", "bias", b->cfg->experts)) != HM_OK) return st;
  st = b->arch == HM_ARCH_GFX942 ? hm_w942_experts(b, d, rank) : build_experts(b, d, rank);
  if (st != HM_OK) return st;

  /* shared expert, MXFP8 row-major (§4.1): gate rows then up rows of this rank's shard */
  if ((st = mx8_slice(b, "ffn.shared_experts.w1", "sgu", rank * Sh, Sh, 0, D, 0, 2 * Sh)) != HM_OK) return st;
  if ((st = mx8_slice(b, "ffn.shared_experts.w3", "sgu", rank * Sh, Sh, 0, D, Sh, 2 * Sh)) != HM_OK) return st;
  return mx8_slice(b, "ffn.shared_experts.w2", "sw2", 0, D, rank * Sh, Sh, 0, D);
}

hm_status hm_wb_experts(builder *b, uint64_t Ir, uint32_t rank, hm_expert_put put, void *ctx) {
  const uint64_t D = b->cfg->hidden, E = b->cfg->experts;
  uint64_t tmp_bytes = Ir * (D / 2) > D * (Ir / 2) ? Ir * (D / 2) : D * (Ir / 2);
  uint8_t *tw = malloc(tmp_bytes), *ts = malloc(Ir * (D / 32) > D * (Ir / 32) ? Ir * (D / 32) : D * (Ir / 32));
  hm_status st = HM_OK;
  if (!tw || !ts) st = hm_fail(HM_ERR_NO_MEMORY, "expert staging buffers");
  for (uint32_t e = 0; e < E && st == HM_OK; e++) {
    char n[64];
    for (int up = 0; up < 2 && st == HM_OK; up++) {
      snprintf(n, sizeof n, "ffn.experts.%u.%s.weight", e, up ? "w3" : "w1");
      if ((st = hm_wb_read(b, n, rank * Ir, Ir, 0, D / 2, tw)) != HM_OK) break;
      snprintf(n, sizeof n, "ffn.experts.%u.%s.scale", e, up ? "w3" : "w1");
      if ((st = hm_wb_read(b, n, rank * Ir, Ir, 0, D / 32, ts)) != HM_OK) break;
      put(ctx, e, up ? HM_EXPERT_UP : HM_EXPERT_GATE, tw, ts);
    }
    if (st != HM_OK) break;
    snprintf(n, sizeof n, "ffn.experts.%u.w2.weight", e);
    if ((st = hm_wb_read(b, n, 0, D, rank * Ir / 2, Ir / 2, tw)) != HM_OK) break;
    snprintf(n, sizeof n, "ffn.experts.%u.w2.scale", e);
    if ((st = hm_wb_read(b, n, 0, D, rank * Ir / 32, Ir / 32, ts)) != HM_OK) break;
    put(ctx, e, HM_EXPERT_DOWN, tw, ts);
  }
  free(tw);
  free(ts);
  return st;
}

/* routed experts, MXFP4 in aiter's layouts (§4.2): this rank's intermediate columns
 * [rank*Ir, rank*Ir + Ir), padded with zeros (codes 0) to I */
struct experts950 {
  uint64_t D, I, Ir, w2_cols;
  uint8_t *w13, *w13s, *w2, *w2s;
};

static void put950(void *ctx, uint32_t e, int which, const uint8_t *tw, const uint8_t *ts) {
  const struct experts950 *x = ctx;
  const uint64_t D = x->D, I = x->I, Ir = x->Ir;
  if (which != HM_EXPERT_DOWN) {
    uint8_t *ew = x->w13 + e * (2 * I * D / 2), *es = x->w13s + e * (2 * I * (D / 32));
    for (uint32_t i = 0; i < Ir; i++) {
      uint32_t R = hm_w13_row(i, which == HM_EXPERT_UP);
      /* a 32-value block is 16 contiguous bytes of one lane in the shuffle */
      for (uint32_t k = 0; k < D; k += 32)
        memcpy(ew + hm_fp4_shuffle_offset((uint32_t)D, R, k), tw + (uint64_t)i * (D / 2) + k / 2, 16);
      for (uint32_t cb = 0; cb < D / 32; cb++)
        es[hm_scale_shuffle_index(R, cb, (uint32_t)(D / 32))] = ts[i * (D / 32) + cb];
    }
    return;
  }
  uint8_t *fw = x->w2 + e * (D * I / 2), *fs = x->w2s + e * (D * x->w2_cols);
  for (uint32_t r = 0; r < D; r++) {
    for (uint32_t k = 0; k < Ir; k += 32)
      memcpy(fw + hm_fp4_shuffle_offset((uint32_t)I, r, k), tw + (uint64_t)r * (Ir / 2) + k / 2, 16);
    for (uint32_t cb = 0; cb < Ir / 32; cb++)
      fs[hm_scale_shuffle_index(r, cb, (uint32_t)x->w2_cols)] = ts[r * (Ir / 32) + cb];
  }
}

static hm_status build_experts(builder *b, const hm_rank_dims *d, uint32_t rank) {
  const uint64_t D = b->cfg->hidden, E = b->cfg->experts, I = d->inter_pad;
  struct experts950 x = {D, I, d->inter, d->w2_scale_cols, NULL, NULL, NULL, NULL};
  x.w13 = hm_tset_new(b->set, "w13", HM_DT_FP4X2, E, 2 * I, D / 2, 0);
  x.w13s = x.w13 ? hm_tset_new(b->set, "w13_s", HM_DT_E8M0, E, 2 * I * (D / 32), 0, 0) : NULL;
  x.w2 = x.w13s ? hm_tset_new(b->set, "w2", HM_DT_FP4X2, E, D, I / 2, 0) : NULL;
  x.w2s = x.w2 ? hm_tset_new(b->set, "w2_s", HM_DT_E8M0, E, D * x.w2_cols, 0, 0) : NULL;
  if (!x.w2s) return HM_ERR_NO_MEMORY;
  return hm_wb_experts(b, d->inter, rank, put950, &x);
}

static hm_status build_attn(builder *b, const hm_rank_dims *d, uint32_t rank, uint32_t positions) {
  const hm_layer_config *c = b->cfg;
  const uint64_t D = c->hidden, Q = c->q_lora, KV = c->kv_dim;
  hm_status st;
  if ((st = copy_whole(b, "hc_attn_fn", "hc_attn_fn")) != HM_OK) return st;
  if ((st = copy_whole(b, "hc_attn_scale", "hc_attn_scale")) != HM_OK) return st;
  if ((st = copy_whole(b, "hc_attn_base", "hc_attn_base")) != HM_OK) return st;
  if ((st = copy_whole(b, "attn_norm.weight", "attn_norm")) != HM_OK) return st;
  /* vLLM's fused_wqa_wkv: wq_a rows, then wkv rows */
  if ((st = mx8_slice(b, "attn.wq_a", "wqkv", 0, Q, 0, D, 0, Q + KV)) != HM_OK) return st;
  if ((st = mx8_slice(b, "attn.wkv", "wqkv", 0, KV, 0, D, Q, Q + KV)) != HM_OK) return st;
  if ((st = copy_whole(b, "attn.q_norm.weight", "q_norm")) != HM_OK) return st;
  if ((st = copy_whole(b, "attn.kv_norm.weight", "kv_norm")) != HM_OK) return st;
  /* heads, o-groups and the sink split by rank; wo_b by its K columns */
  if ((st = mx8_slice(b, "attn.wq_b", "wq_b", rank * d->q_rows, d->q_rows, 0, Q, 0, d->q_rows)) != HM_OK)
    return st;
  uint64_t woa_k = HM_HEADS_PER_GROUP * (uint64_t)c->head_dim;
  if ((st = mx8_slice(b, "attn.wo_a", "wo_a", rank * d->o_rows, d->o_rows, 0, woa_k, 0, d->o_rows)) != HM_OK)
    return st;
  if ((st = mx8_slice(b, "attn.wo_b", "wo_b", 0, D, rank * d->o_rows, d->o_rows, 0, D)) != HM_OK) return st;
  float *sink = hm_tset_new(b->set, "attn_sink", HM_DT_F32, d->heads, 0, 0, 0);
  if (!sink) return HM_ERR_NO_MEMORY;
  if ((st = hm_wb_read(b, "attn.attn_sink", 0, 1, rank * d->heads, d->heads, sink)) != HM_OK) return st;
  float *cs = hm_tset_new(b->set, "cos_sin", HM_DT_F32, positions, HM_ROPE_DIM, 0, 0);
  if (!cs) return HM_ERR_NO_MEMORY;
  return hm_rope_table(c, positions, cs);
}

static hm_status build_select(builder *b) {
  const hm_layer_config *c = b->cfg;
  hm_status st;
  if (hm_config_has(c, HM_ROLE_KV_SOURCE)) {
    if ((st = copy_whole(b, "attn.compressor.wkv.weight", "cmp_wkv")) != HM_OK) return st;
    if (c->compress_ratio == 2 && (st = copy_whole(b, "attn.compressor.wgate.weight", "cmp_wgate")) != HM_OK)
      return st;
    if ((st = copy_whole(b, "attn.compressor.norm.weight", "cmp_norm")) != HM_OK) return st;
    if ((st = copy_whole(b, "attn.indexer.wk.weight", "idx_wk")) != HM_OK) return st;
    if ((st = copy_whole(b, "attn.indexer.k_norm.weight", "idx_k_norm")) != HM_OK) return st;
  }
  if (hm_config_has(c, HM_ROLE_INDEX_SOURCE)) {
    uint64_t n = (uint64_t)c->index_heads * c->index_head_dim;
    if ((st = mx8_slice(b, "attn.indexer.wq_b", "idx_wq_b", 0, n, 0, c->q_lora, 0, n)) != HM_OK) return st;
    if ((st = copy_whole(b, "attn.indexer.weights_proj.weight", "idx_weights_proj")) != HM_OK) return st;
  }
  return HM_OK;
}

static hm_status build_engram(builder *b) {
  const hm_layer_config *c = b->cfg;
  uint64_t n = (uint64_t)c->hidden * (HM_HC + 1), k = (uint64_t)c->engram_heads * c->engram_ngram * c->engram_head_dim;
  hm_status st;
  if ((st = mx8_slice(b, "engram.wkv", "engram_wkv", 0, n, 0, k, 0, n)) != HM_OK) return st;
  if ((st = copy_whole(b, "engram.q_weight", "engram_q")) != HM_OK) return st;
  return copy_whole(b, "engram.k_weight", "engram_k");
}

hm_status hm_weights_build(const hm_layer_config *cfg, uint32_t tp, uint32_t rank, const hm_source *src,
                           const hm_build_opts *opts, hm_layer_weights *out) {
  if (!cfg || !src || !src->info || !src->read || !out)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_weights_build: null argument");
  hm_rank_dims d;
  hm_status st = hm_rank_dims_for(cfg, tp, &d);
  if (st != HM_OK) return st;
  if (rank >= tp) return hm_fail(HM_ERR_INVALID_ARG, "rank %u of tp %u", rank, tp);
  hm_arch arch = opts ? opts->arch : HM_ARCH_GFX950;
  if (arch != HM_ARCH_GFX950 && arch != HM_ARCH_GFX942)
    return hm_fail(HM_ERR_INVALID_ARG, "arch %d: HM_ARCH_GFX950 or HM_ARCH_GFX942", (int)arch);
  if (arch == HM_ARCH_GFX942 && tp != 4)
    return hm_fail(HM_ERR_INVALID_ARG, "tp %u: the gfx942 copies are TP4 only (spec/mono.md §5.1.3)", tp);
  uint32_t have = HM_WPART_FFN | HM_WPART_ATTN;
  if (hm_config_has(cfg, HM_ROLE_KV_SOURCE) || hm_config_has(cfg, HM_ROLE_INDEX_SOURCE)) have |= HM_WPART_SELECT;
  if (hm_config_has(cfg, HM_ROLE_ENGRAM)) have |= HM_WPART_ENGRAM;
  uint32_t parts = opts && opts->parts ? opts->parts : have;
  if (parts & ~have)
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d has no %s tensors", cfg->layer,
                   (parts & ~have & HM_WPART_SELECT) ? "compressor/indexer" : "Engram");
  uint32_t positions = opts && opts->rope_positions ? opts->rope_positions : 4096;
  uint32_t source_experts = opts && opts->source_experts ? opts->source_experts : cfg->experts;
  if (source_experts < cfg->experts)
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d: a source of %u experts holds fewer than the layer's %u", cfg->layer,
                   source_experts, cfg->experts);

  hm_layer_weights w;
  memset(&w, 0, sizeof w);
  w.cfg = *cfg;
  w.dims = d;
  w.arch = arch;
  w.rank = rank;
  w.parts = parts;
  w.rope_positions = (parts & HM_WPART_ATTN) ? positions : 0;
  hm_tset_init(&w.set);
  builder b = {cfg, src, NULL, 0, "", &w.set, arch};
  hm_config_prefix(cfg, b.prefix, sizeof b.prefix);
  if ((st = hm_ckpt_schema(cfg, &b.schema, &b.count)) != HM_OK) return st;
  /* the source's gate holds all its experts; the layer reads the first cfg->experts */
  for (uint32_t i = 0; i < b.count && source_experts != cfg->experts; i++) {
    const char *n = b.schema[i].name + strlen(b.prefix);
    if (!strcmp(n, "ffn.gate.weight") || !strcmp(n, "ffn.gate.bias")) b.schema[i].shape[0] = source_experts;
  }
  st = check_present(&b, parts);
  if (st == HM_OK && (parts & HM_WPART_FFN)) st = build_ffn(&b, &d, rank);
  if (st == HM_OK && (parts & HM_WPART_ATTN)) st = build_attn(&b, &d, rank, positions);
  if (st == HM_OK && (parts & HM_WPART_SELECT)) st = build_select(&b);
  if (st == HM_OK && (parts & HM_WPART_ENGRAM)) st = build_engram(&b);
  free(b.schema);
  if (st != HM_OK) {
    hm_tset_free(&w.set);
    return hm_fail_prefix(st, "layer %d rank %u/%u", cfg->layer, rank, tp);
  }
  *out = w;
  return HM_OK;
}

hm_status hm_weights_free(hm_layer_weights *w) {
  if (!w) return hm_fail(HM_ERR_INVALID_ARG, "hm_weights_free: NULL weights");
  uint32_t users = __atomic_load_n(&w->users, __ATOMIC_ACQUIRE);
  if (users)
    return hm_fail(HM_ERR_BUSY, "hm_weights_free: layer %d rank %u's weights are still read by %u layer(s): "
                   "hm_layer_destroy first", w->cfg.layer, w->rank, users);
  hm_tset_free(&w->set);
  memset(w, 0, sizeof *w);
  return HM_OK;
}

hm_status hm_weights_drop_uploaded(hm_layer_weights *w, uint64_t *freed) {
  static const char *const uploaded[] = {"w13",  "w13_s", "w2",   "w2_s", "sgu",    "sgu_s",  "sw2",
                                         "sw2_s", "wqkv", "wqkv_s", "wq_b", "wq_b_s", "wo_a", "wo_a_s",
                                         "wo_b", "wo_b_s", "gate_w", "hc_attn_fn", "hc_ffn_fn"};
  if (!w) return hm_fail(HM_ERR_INVALID_ARG, "hm_weights_drop_uploaded: NULL weights");
  uint64_t bytes = 0;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < w->set.count; i++) {
    hm_tensor *t = &w->set.t[i];
    bool drop = false;
    for (unsigned k = 0; k < sizeof uploaded / sizeof *uploaded && !drop; k++) drop = !strcmp(t->name, uploaded[k]);
    if (drop) {
      bytes += t->nbytes;
      free(t->data);
      continue;
    }
    w->set.t[kept++] = *t;
  }
  w->set.count = kept;
  if (freed) *freed = bytes;
  return HM_OK;
}

const hm_tensor *hm_weights_get(const hm_layer_weights *w, const char *name) {
  if (!w || !name) {
    hm_fail(HM_ERR_INVALID_ARG, "hm_weights_get: null argument");
    return NULL;
  }
  const hm_tensor *t = hm_tset_find(&w->set, name);
  if (!t) hm_fail(HM_ERR_NOT_FOUND, "layer %d rank %u: no weight '%s' (parts built: 0x%x)", w->cfg.layer, w->rank,
                  name, w->parts);
  return t;
}

/* ---------------------------------------------------------------- decoders */

static float e4m3_tab[256], e2m1_tab[16], fp4_lo[256], fp4_hi[256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;
static void tab_init(void) {
  for (int i = 0; i < 256; i++) e4m3_tab[i] = fmt_e4m3_decode((uint8_t)i);
  for (int i = 0; i < 16; i++) e2m1_tab[i] = fmt_e2m1_decode((uint8_t)i);
  for (int i = 0; i < 256; i++) {
    fp4_lo[i] = fmt_e2m1_decode(fmt_e2m1_nibble((uint8_t)i, 0));
    fp4_hi[i] = fmt_e2m1_decode(fmt_e2m1_nibble((uint8_t)i, 1));
  }
}
const float *hm_e4m3_table(void) {
  pthread_once(&tab_once, tab_init);
  return e4m3_tab;
}
const float *hm_e2m1_table(void) {
  pthread_once(&tab_once, tab_init);
  return e2m1_tab;
}

/* The dequantised weight is the element times 2^(code-127) (§4.1), exact in f32 for every code
 * a realistic tensor carries. */
void hm_mx8_decode_rows(const uint8_t *w, const uint8_t *s, uint32_t K, uint32_t r0, uint32_t nr, float *out) {
  const float *t = hm_e4m3_table();
  for (uint32_t r = 0; r < nr; r++) {
    uint32_t row = r0 + r;
    const uint8_t *wr = w + (uint64_t)row * K, *sr = s + (uint64_t)(row / 32) * (K / 32);
    float *o = out + (uint64_t)r * K;
    for (uint32_t cb = 0; cb < K / 32; cb++) {
      float sc = fmt_e8m0_decode(sr[cb]);
      for (uint32_t j = 0; j < 32; j++) o[cb * 32 + j] = t[wr[cb * 32 + j]] * sc;
    }
  }
}

/* one row R of a shuffled FP4 matrix of K columns (scale cols `cols`) into out[K] */
static void fp4_row(const uint8_t *m, const uint8_t *sc, uint32_t K, uint32_t cols, uint32_t R, float *out) {
  pthread_once(&tab_once, tab_init);
  for (uint32_t cb = 0; cb < K / 32; cb++) {
    float s = fmt_e8m0_decode(sc[hm_scale_shuffle_index(R, cb, cols)]);
    /* a 32-element block is 16 contiguous bytes of one lane */
    const uint8_t *p = m + hm_fp4_shuffle_offset(K, R, cb * 32);
    float *o = out + cb * 32;
    for (uint32_t j = 0; j < 16; j++) {
      o[2 * j] = fp4_lo[p[j]] * s;
      o[2 * j + 1] = fp4_hi[p[j]] * s;
    }
  }
}

void hm_w13_decode(const hm_layer_weights *w, uint32_t e, bool up, uint32_t i0, uint32_t n, float *out) {
  if (w->arch == HM_ARCH_GFX942) {
    hm_w942_w13_decode(w, e, up, i0, n, out);
    return;
  }
  const hm_tensor *tw = hm_tset_find(&w->set, "w13"), *ts = hm_tset_find(&w->set, "w13_s");
  const uint32_t D = w->cfg.hidden, I = w->dims.inter_pad;
  const uint8_t *m = (const uint8_t *)tw->data + (uint64_t)e * (2ull * I * D / 2);
  const uint8_t *s = (const uint8_t *)ts->data + (uint64_t)e * (2ull * I * (D / 32));
  for (uint32_t i = 0; i < n; i++) fp4_row(m, s, D, D / 32, hm_w13_row(i0 + i, up), out + (uint64_t)i * D);
}

void hm_w2_decode(const hm_layer_weights *w, uint32_t e, uint32_t r0, uint32_t n, float *out) {
  if (w->arch == HM_ARCH_GFX942) {
    hm_w942_w2_decode(w, e, r0, n, out);
    return;
  }
  const hm_tensor *tw = hm_tset_find(&w->set, "w2"), *ts = hm_tset_find(&w->set, "w2_s");
  const uint32_t D = w->cfg.hidden, I = w->dims.inter_pad, cols = w->dims.w2_scale_cols;
  const uint8_t *m = (const uint8_t *)tw->data + (uint64_t)e * ((uint64_t)D * I / 2);
  const uint8_t *s = (const uint8_t *)ts->data + (uint64_t)e * ((uint64_t)D * cols);
  for (uint32_t i = 0; i < n; i++) fp4_row(m, s, I, cols, r0 + i, out + (uint64_t)i * I);
}

/* ---------------------------------------------------------------- RoPE */

/* DeepSeek's precompute_freqs_cis in f32 (model.md §2 RoPE): f_i = 1 / theta^(2i/64); YaRN
 * ramps f_i/16 in over [low, high] from the correction dims of beta_fast / beta_slow. */
hm_status hm_rope_table(const hm_layer_config *c, uint32_t positions, float *out) {
  if (!c || !out || positions == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_rope_table: bad argument");
  const int half = HM_ROPE_DIM / 2;
  float f[HM_ROPE_DIM / 2];
  bool yarn = c->compress_ratio > 0;
  float theta = yarn ? c->compress_rope_theta : c->rope_theta;
  for (int i = 0; i < half; i++) f[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HM_ROPE_DIM);
  if (yarn) {
    /* correction dims in double, as Python's math module computes them */
    double cd_fast = HM_ROPE_DIM * log((double)c->yarn_orig / (c->yarn_beta_fast * 2 * M_PI)) / (2 * log((double)theta));
    double cd_slow = HM_ROPE_DIM * log((double)c->yarn_orig / (c->yarn_beta_slow * 2 * M_PI)) / (2 * log((double)theta));
    int low = (int)floor(cd_fast), high = (int)ceil(cd_slow);
    if (low < 0) low = 0;
    if (high > HM_ROPE_DIM - 1) high = HM_ROPE_DIM - 1;
    float lo = (float)low, hi = (float)high;
    if (low == high) hi += 0.001f;
    for (int i = 0; i < half; i++) {
      float ramp = ((float)i - lo) / (hi - lo);
      ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
      float smooth = 1.0f - ramp;
      f[i] = (f[i] / c->yarn_factor) * (1.0f - smooth) + f[i] * smooth;
    }
  }
  for (uint32_t p = 0; p < positions; p++) {
    for (int i = 0; i < half; i++) {
      float a = (float)p * f[i];
      out[(uint64_t)p * HM_ROPE_DIM + i] = cosf(a);
      out[(uint64_t)p * HM_ROPE_DIM + half + i] = sinf(a);
    }
  }
  return HM_OK;
}
