/* layer/weights/config.c: DeepSeek-V4.1-Flash's dims and layer schedule as data, the tiny test
 * configs with the same structure, and the widths each TP rank sees. */
#include <stdio.h>
#include <string.h>

#include "hm_config.h"

/* V4.1-Flash schedule (spec/mono.md §1.2; model.md §1.1 CFG-41). */
static const uint8_t v41_ratios[HM_MAX_LAYERS] = {
    0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0..19: [0,0] + [2]x18 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 20..39: [1]x20 */
    0, 0, 0};                                                   /* 40..42: drafts */
static const int32_t v41_kv_sources[] = {2, 8, 14, 20};
static const int32_t v41_index_sources[] = {2, 8, 14, 20, 24, 28, 32, 36};
static const int32_t v41_engram[] = {1, 14};
#define V41_CANDIDATE 20

static bool in_list(const int32_t *l, unsigned n, int32_t x) {
  for (unsigned i = 0; i < n; i++)
    if (l[i] == x) return true;
  return false;
}
/* the nearest listed layer <= x, or -1 */
static int32_t nearest_le(const int32_t *l, unsigned n, int32_t x) {
  int32_t best = -1;
  for (unsigned i = 0; i < n; i++)
    if (l[i] <= x && l[i] > best) best = l[i];
  return best;
}
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Roles and sources from the schedule; dims are filled by the callers. */
static hm_status schedule(const char *model, int32_t layer, hm_layer_config *c) {
  if (layer < 0 || layer >= HM_MAX_LAYERS)
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d: %s has layers 0..%d", layer, model, HM_MAX_LAYERS - 1);
  c->layer = layer;
  c->n_layers = 40;
  c->n_draft = 3;
  c->compress_ratio = v41_ratios[layer];
  c->roles = 0;
  c->kv_source = -1;
  c->index_source = -1;
  c->candidate_source = V41_CANDIDATE;
  if (layer == 0) c->roles |= HM_ROLE_FIRST;
  if (in_list(v41_engram, NELEM(v41_engram), layer)) c->roles |= HM_ROLE_ENGRAM;
  c->engram_index = layer == 14 ? 1 : 0;
  if (layer >= 40) {
    c->roles |= HM_ROLE_DRAFT;
    return HM_OK;
  }
  if (c->compress_ratio > 0) {
    c->kv_source = nearest_le(v41_kv_sources, NELEM(v41_kv_sources), layer);
    c->index_source = nearest_le(v41_index_sources, NELEM(v41_index_sources), layer);
    if (c->kv_source == layer) c->roles |= HM_ROLE_KV_SOURCE;
    if (c->index_source == layer) c->roles |= HM_ROLE_INDEX_SOURCE;
    if (layer == V41_CANDIDATE) c->roles |= HM_ROLE_CANDIDATE;
  }
  return HM_OK;
}

/* Values shared by every config of the V4.1 family. */
static void common(hm_layer_config *c) {
  c->hc = HM_HC;
  c->head_dim = HM_HEAD_DIM;
  c->nope_dim = HM_NOPE_DIM;
  c->rope_dim = HM_ROPE_DIM;
  c->kv_dim = HM_HEAD_DIM;
  c->route_scale = 1.5f;
  c->swiglu_limit = 10.0f;
  c->eps = 1e-20f;
  c->hc_eps = 1e-6f;
  c->sinkhorn_iters = 20;
  c->post_mult = 2.0f;
  c->window = HM_WINDOW;
  c->index_topk = HM_TOPK_ATTN;
  c->index_heads = 32;
  c->index_head_dim = 128;
  c->candidate_topk_blocks = 2048;
  c->candidate_block_size = 8;
  c->rope_theta = 10000.0f;
  c->compress_rope_theta = 160000.0f;
  c->yarn_factor = 16.0f;
  c->yarn_orig = 65536;
  c->yarn_beta_fast = 32.0f;
  c->yarn_beta_slow = 1.0f;
  c->engram_heads = 8;
  c->engram_ngram = 3; /* n-grams of 2, 3 and 4 tokens (engram_max_ngram_size 4) */
}

hm_status hm_config_v41_flash(int32_t layer, hm_layer_config *out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_config_v41_flash: null output");
  hm_layer_config c;
  memset(&c, 0, sizeof c);
  hm_status st = schedule("V4.1-Flash", layer, &c);
  if (st != HM_OK) return st;
  common(&c);
  c.model = "v41-flash";
  c.hidden = 5120;
  c.heads = 64;
  c.q_lora = 1280;
  c.o_lora = 1024;
  c.o_groups = 8;
  bool draft = hm_config_is_draft(&c);
  c.experts = draft ? 128 : 384;
  c.topk = draft ? 3 : 6;
  c.moe_inter = 2304;
  c.shared_inter = 2304;
  /* DRAFT_UG_GROUPS does not appear in the cited sources; spec/mono.md §1.1 says
   * "presumably 1" (docs/decisions.md "Reference") */
  c.ug_groups = draft ? 1 : 2;
  c.engram_head_dim = 256;
  *out = c;
  return HM_OK;
}

hm_status hm_config_tiny(int32_t layer, hm_layer_config *out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_config_tiny: null output");
  hm_layer_config c;
  memset(&c, 0, sizeof c);
  hm_status st = schedule("tiny", layer, &c);
  if (st != HM_OK) return st;
  common(&c);
  c.model = "tiny";
  c.hidden = 1024;
  c.heads = 64;
  c.q_lora = 256;
  c.o_lora = 256;
  c.o_groups = 8;
  bool draft = hm_config_is_draft(&c);
  c.experts = draft ? 32 : 64;
  c.topk = draft ? 3 : 6;
  c.moe_inter = 256;
  c.shared_inter = 256;
  c.ug_groups = draft ? 1 : 2;
  c.engram_head_dim = 64;
  *out = c;
  return HM_OK;
}

hm_status hm_config_by_name(const char *model, int32_t layer, hm_layer_config *out) {
  if (!model) return hm_fail(HM_ERR_INVALID_ARG, "hm_config_by_name: null model name");
  if (!strcmp(model, "v41-flash")) return hm_config_v41_flash(layer, out);
  if (!strcmp(model, "tiny")) return hm_config_tiny(layer, out);
  return hm_fail(HM_ERR_NOT_FOUND, "unknown model config '%s' (v41-flash, tiny)", model);
}

hm_status hm_config_set_experts(hm_layer_config *cfg, uint32_t experts, uint32_t topk) {
  if (!cfg) return hm_fail(HM_ERR_INVALID_ARG, "hm_config_set_experts: null config");
  if (experts == 0 || topk == 0 || topk > experts || experts > 1024 || topk > 16)
    return hm_fail(HM_ERR_INVALID_ARG, "experts %u top-%u: need 1 <= topk <= 16, topk <= experts <= 1024",
                   experts, topk);
  cfg->experts = experts;
  cfg->topk = topk;
  return HM_OK;
}

hm_status hm_config_check(const hm_layer_config *c) {
  if (!c) return hm_fail(HM_ERR_INVALID_ARG, "hm_config_check: null config");
#define NEED(cond, ...) \
  do {                  \
    if (!(cond)) return hm_fail(HM_ERR_INVALID_ARG, __VA_ARGS__); \
  } while (0)
  NEED(c->hc == HM_HC, "hc_mult %u: the kernels take 4 streams", c->hc);
  NEED(c->hidden >= 256 && c->hidden % 256 == 0, "hidden %u: not a multiple of 256 (128-wide K steps, "
       "MXFP4 scale columns in eights)", c->hidden);
  NEED(c->head_dim == HM_HEAD_DIM && c->nope_dim == HM_NOPE_DIM && c->rope_dim == HM_ROPE_DIM,
       "head dims %u/%u/%u: the record and the kernels take 512 = 448 + 64", c->head_dim, c->nope_dim,
       c->rope_dim);
  NEED(c->heads % (HM_HEADS_PER_GROUP * HM_LAYER_MAX_TP) == 0 && c->heads == c->o_groups * HM_HEADS_PER_GROUP,
       "%u heads in %u groups: need 8 heads a group and whole groups at TP4", c->heads, c->o_groups);
  NEED(c->q_lora % 128 == 0 && c->q_lora > 0, "q_lora %u: not a multiple of 128", c->q_lora);
  NEED(c->o_lora % 32 == 0 && c->o_lora > 0, "o_lora %u: not a multiple of 32", c->o_lora);
  NEED(c->moe_inter % (32 * HM_LAYER_MAX_TP) == 0 && c->moe_inter > 0,
       "moe_inter %u: a TP4 rank's share is not whole 32-column groups", c->moe_inter);
  NEED(c->shared_inter % (32 * HM_LAYER_MAX_TP) == 0 && c->shared_inter > 0,
       "shared_inter %u: a TP4 rank's share is not whole 32-row blocks", c->shared_inter);
  NEED(c->experts >= c->topk && c->topk >= 1 && c->experts <= 1024 && c->topk <= 16,
       "experts %u top-%u", c->experts, c->topk);
  NEED(c->ug_groups == 1 || c->ug_groups == 2, "ug_groups %u: 1 or 2", c->ug_groups);
  NEED(c->compress_ratio <= 2, "compress ratio %u: V4.1 has 0, 1, 2", c->compress_ratio);
  NEED(c->sinkhorn_iters >= 1, "sinkhorn_iters 0");
#undef NEED
  return HM_OK;
}

hm_status hm_rank_dims_for(const hm_layer_config *c, uint32_t tp, hm_rank_dims *out) {
  if (!c || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_rank_dims_for: null argument");
  if (tp != 1 && tp != 2 && tp != 4) return hm_fail(HM_ERR_INVALID_ARG, "tp %u: 1, 2 or 4", tp);
  hm_status st = hm_config_check(c);
  if (st != HM_OK) return st;
  hm_rank_dims d;
  d.tp = tp;
  d.heads = c->heads / tp;
  d.groups = c->o_groups / tp;
  d.q_rows = d.heads * c->head_dim;
  d.o_rows = d.groups * c->o_lora;
  d.inter = c->moe_inter / tp;
  d.inter_pad = (d.inter + 127) / 128 * 128;
  d.w2_scale_cols = (d.inter_pad / 32 + 7) / 8 * 8;
  d.shared_inter = c->shared_inter / tp;
  *out = d;
  return HM_OK;
}

uint32_t hm_attn_chunk_keys(uint32_t tp, uint32_t rows, bool gfx942) {
  if (gfx942) return 64;
  return (tp == 2 && rows <= 25) ? 64 : 128;
}

hm_layer_path hm_layer_path_for(const hm_layer_config *c, bool gfx942) {
  const bool ratio12 = c->compress_ratio == 1 || c->compress_ratio == 2;
  const bool indexer = hm_config_has(c, HM_ROLE_INDEX_SOURCE), compressor = hm_config_has(c, HM_ROLE_KV_SOURCE);
  if (hm_config_is_draft(c)) return gfx942 ? HM_PATH_FFN : HM_PATH_VLLM; /* §5.2.3 */
  if (gfx942 && indexer && ratio12) return HM_PATH_INDEX;                /* §5.2.5 */
  if (gfx942 && c->compress_ratio == 0 && !indexer && !compressor) return HM_PATH_WINDOW_SEAM; /* §5.2.6 */
  if (!hm_config_has(c, HM_ROLE_ENGRAM) && !indexer && !compressor && ratio12) return HM_PATH_WHOLE; /* §5.2.7 */
  return HM_PATH_FFN;
}

const char *hm_layer_path_name(hm_layer_path p) {
  switch (p) {
    case HM_PATH_VLLM: return "vllm";
    case HM_PATH_FFN: return "ffn";
    case HM_PATH_WHOLE: return "whole";
    case HM_PATH_WINDOW_SEAM: return "window seam";
    case HM_PATH_INDEX: return "index";
  }
  return "?";
}

void hm_config_prefix(const hm_layer_config *c, char *buf, uint32_t size) {
  if (!buf || size == 0) return;
  if (c->layer >= (int32_t)c->n_layers)
    snprintf(buf, size, "mtp.%d.", c->layer - (int32_t)c->n_layers);
  else
    snprintf(buf, size, "layers.%d.", c->layer);
}
