/* tools/layer_tool.c: a whole layer's TP group for the tools, its outputs and rank 0's route
 * (layer_tool.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "kernels/ffn_args.h"
#include "launch_tool.h"
#include "layer_tool.h"

uint32_t layer_tool_parts(const hm_layer_config *cfg) {
  uint32_t p = HM_WPART_ATTN | HM_WPART_FFN;
  if (hm_config_has(cfg, HM_ROLE_INDEX_SOURCE)) p |= HM_WPART_SELECT;
  if (hm_config_has(cfg, HM_ROLE_ENGRAM)) p |= HM_WPART_ENGRAM;
  return p;
}

const char *layer_tool_kind(const hm_layer_config *c, char *buf, unsigned size) {
  const char *what = hm_config_has(c, HM_ROLE_FIRST)         ? "first layer, window"
                     : hm_config_is_draft(c)                 ? "draft layer, window"
                     : hm_config_has(c, HM_ROLE_CANDIDATE)   ? "kv + index source, candidates"
                     : hm_config_has(c, HM_ROLE_KV_SOURCE)   ? "kv + index source"
                     : hm_config_has(c, HM_ROLE_INDEX_SOURCE) ? "index source"
                     : c->compress_ratio                     ? "REUSE"
                                                             : "window";
  snprintf(buf, size, "%s%s, ratio %u", what, hm_config_has(c, HM_ROLE_ENGRAM) ? ", Engram" : "", c->compress_ratio);
  return buf;
}

hm_status layer_tool_open(layer_tool *t, hm_runtime *rt, const hm_layer_config *cfg, uint32_t tp, uint64_t seed,
                          const hm_source *ckpt, uint32_t source_experts, hm_arch arch, const hm_ffn_config *run,
                          hm_select_state *const *select) {
  memset(t, 0, sizeof *t);
  t->cfg = *cfg, t->tp = tp;
  t->bopts = (hm_build_opts){.parts = layer_tool_parts(cfg), .source_experts = source_experts, .arch = arch};
  hm_status s;
  if (ckpt) {
    t->src = *ckpt;
  } else {
    if ((s = hm_gen_init(&t->gen, cfg, seed))) return s;
    t->have_gen = true;
    t->src = hm_gen_source(&t->gen);
  }
  /* the Engram table is the source's engram.embed (the generator's of the same seed) */
  t->table = t->src;
  if ((s = hm_layer_group_create_source(rt, cfg, tp, &t->src, &t->bopts, run, select, &t->g))) goto fail;
  return HM_OK;
fail:
  layer_tool_close(t);
  return s;
}

void layer_tool_close(layer_tool *t) {
  hm_layer_group_destroy(t->g);
  t->g = NULL;
  if (t->have_gen) hm_gen_free(&t->gen);
  t->have_gen = false;
}

void layer_tool_step_arch(hm_gen_step *step, hm_arch arch) {
  if (arch == HM_ARCH_GFX942) hm_ref_kv_cache_to_fnuz(&step->in.swa);
}

int layer_tool_outputs(hm_layer_outputs *o, uint32_t S, uint32_t D, bool keys) {
  memset(o, 0, sizeof *o);
  o->x = malloc(sizeof(float) * S * D), o->res = malloc(sizeof(float) * S * HM_HC * D);
  o->post = malloc(sizeof(float) * S * HM_HC), o->comb = malloc(sizeof(float) * S * 16);
  o->pre = malloc(sizeof(float) * S * HM_HC);
  int ok = o->x && o->res && o->post && o->comb && o->pre;
  if (keys) {
    o->topk = malloc(sizeof(int32_t) * S * HM_TOPK_ATTN), o->kt = malloc(sizeof(int32_t) * S * HM_KEYS);
    o->klen = malloc(sizeof(int32_t) * 2 * S);
    ok = ok && o->topk && o->kt && o->klen;
  }
  return ok;
}

void layer_tool_outputs_free(hm_layer_outputs *o) {
  free(o->x), free(o->res), free(o->post), free(o->comb), free(o->pre), free(o->topk), free(o->kt), free(o->klen);
  memset(o, 0, sizeof *o);
}

/* n bytes of agent a's memory at dev into host memory, through host-visible staging as on a GPU */
static hm_status fetch(hm_runtime *rt, hm_agent *a, const void *dev, size_t n, void *out) {
  void *stage;
  hm_status s = hm_mem_alloc(a, HM_POOL_HOST, n, 0, &stage);
  if (s) return s;
  hm_signal none = {0};
  s = hm_mem_copy(rt, stage, dev, n, none);
  if (!s) memcpy(out, stage, n);
  hm_mem_free(rt, stage);
  return s;
}

hm_status layer_tool_route(hm_runtime *rt, hm_layer_group *g, uint32_t S, float *normed, int32_t *ids) {
  hm_k2 *k2 = hm_layer_k2(hm_layer_group_rank(g, 0));
  const hm_layer_config *c = hm_ffn_layer(k2);
  const uint32_t D = c->hidden, K = c->topk;
  struct hm_ffn_scratch_layout F;
  const uint8_t *dev = hm_ffn_scratch(k2, S, &F);
  if (!dev) return hm_fail(HM_ERR_INVALID_ARG, "layer tool: no step of %u rows has run", S);
  hm_agent *a = hm_layer_group_agent(g, 0);
  uint16_t *bits = malloc((size_t)S * D * 2);
  uint64_t *pairs = malloc((size_t)S * K * 8);
  hm_status s = bits && pairs ? HM_OK : hm_fail(HM_ERR_NO_MEMORY, "layer tool: route");
  if (!s) s = fetch(rt, a, dev + F.normed, (size_t)S * D * 2, bits);
  if (!s) s = fetch(rt, a, dev + F.ids, (size_t)S * K * 8, pairs);
  if (!s) {
    for (uint64_t i = 0; i < (uint64_t)S * D; i++) normed[i] = fmt_bf16_to_f32(bits[i]);
    /* a pick is a pair: the expert in the low word */
    for (uint64_t i = 0; i < (uint64_t)S * K; i++) ids[i] = (int32_t)(uint32_t)pairs[i];
  }
  free(bits), free(pairs);
  return s;
}
