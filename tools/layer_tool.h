/* tools/layer_tool.h: what the whole-layer tools share (hsa-mono-check layer and model, hsa-mono-bench
 * layer and model): a layer's TP group on generated weights of the parts its kind runs, the Engram table. */
#ifndef HM_TOOLS_LAYER_TOOL_H
#define HM_TOOLS_LAYER_TOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_layer_group.h"

/* One layer of a tool's run: its config, where its weights come from (the seeded generator, or a
 * checkpoint the caller holds open) and the options they are built with, the group (which built
 * and holds them, a rank at a time), the Engram table (the same source's engram.embed). */
typedef struct layer_tool {
  hm_layer_config cfg;
  uint32_t tp;
  hm_gen gen;
  bool have_gen;
  hm_source src;        /* the weights' source: the generator's or the caller's checkpoint */
  hm_build_opts bopts;  /* what the group built them with (the reference builds them so again) */
  hm_source table;
  hm_layer_group *g;
} layer_tool;

/* The weight parts a layer of cfg's kind runs: ATTN | FFN, SELECT on an index source (the reference
 * select's compressor and indexer), ENGRAM on an Engram layer. */
uint32_t layer_tool_parts(const hm_layer_config *cfg);

/* The layer's kind in a few words ("REUSE, ratio 2", "kv + index source, ratio 2", ...) into buf. */
const char *layer_tool_kind(const hm_layer_config *cfg, char *buf, unsigned size);

/* The group of cfg's layer on rt, its ranks' weights built by the group from ckpt (NULL: the seeded
 * generator of seed; source_experts: the experts the checkpoint holds, hm_build_opts') in arch's
 * layouts (gfx942: its copies, spec/mono.md §4.4) one rank at a time (hm_layer_group_create_source; run: the launch configuration; select: rank r's select state
 * in select[r], shared by a chain's layers, or NULL for the group's own). t must outlive the group;
 * ckpt must stay open while t is. On failure nothing is left and hm_errmsg says why. */
hm_status layer_tool_open(layer_tool *t, hm_runtime *rt, const hm_layer_config *cfg, uint32_t tp, uint64_t seed,
                          const hm_source *ckpt, uint32_t source_experts, hm_arch arch, const hm_ffn_config *run,
                          hm_select_state *const *select);
void layer_tool_close(layer_tool *t);

/* A generated step for arch: gfx942's SWA cache holds FNUZ records (spec/mono.md §2.6), the generator's
 * OCP ones are converted; the compressed cache stays OCP on both. */
void layer_tool_step_arch(hm_gen_step *step, hm_arch arch);

/* Host arrays for a step's outputs of S rows of hidden D: the five layer outputs, and with `keys`
 * the top-k and the key table (kt, klen); the rest NULL. 1, or 0 out of memory (free what was made
 * with layer_tool_outputs_free either way). */
int layer_tool_outputs(hm_layer_outputs *o, uint32_t S, uint32_t D, bool keys);
void layer_tool_outputs_free(hm_layer_outputs *o);

/* Rank 0's last step of S rows as its FFN half saw it, from K2's mailboxes: the FFN seam's normed rows
 * (bf16 values, [S][D]) and the route (ids [S][topk], pick order). HM_OK or the copy's error. */
hm_status layer_tool_route(hm_runtime *rt, hm_layer_group *g, uint32_t S, float *normed, int32_t *ids);

#endif /* HM_TOOLS_LAYER_TOOL_H */
