/* tools/layer_tool.h: what the whole-layer tools share (hsa-mono-check layer and model, hsa-mono-bench
 * layer and model): a layer's TP group on generated weights of the parts its kind runs, the Engram table. */
#ifndef HM_TOOLS_LAYER_TOOL_H
#define HM_TOOLS_LAYER_TOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_layer_group.h"

/* One layer of a tool's run: its config, every rank's weights, the generator the Engram table is
 * read from (the one the weights came from: same config and seed), the group. */
typedef struct layer_tool {
  hm_layer_config cfg;
  uint32_t tp;
  hm_layer_weights w[HM_LAYER_MAX_TP];
  uint32_t built;
  hm_gen gen;
  bool have_gen;
  hm_source table;
  hm_layer_group *g;
} layer_tool;

/* The weight parts a layer of cfg's kind runs: ATTN | FFN, SELECT on an index source (the reference
 * select's compressor and indexer), ENGRAM on an Engram layer. */
uint32_t layer_tool_parts(const hm_layer_config *cfg);

/* The layer's kind in a few words ("REUSE, ratio 2", "kv + index source, ratio 2", ...) into buf. */
const char *layer_tool_kind(const hm_layer_config *cfg, char *buf, unsigned size);

/* Builds ranks 0..tp-1 of cfg's weights from the seeded generator and the group on rt (run: the
 * launch configuration; select: rank r's select state in select[r], shared by a chain's layers, or
 * NULL for the group's own). t must outlive the group (the weights and table are kept in it). On
 * failure nothing is left and hm_errmsg says why. */
hm_status layer_tool_open(layer_tool *t, hm_runtime *rt, const hm_layer_config *cfg, uint32_t tp, uint64_t seed,
                          const hm_ffn_config *run, hm_select_state *const *select);
void layer_tool_close(layer_tool *t);

/* Host arrays for a step's outputs of S rows of hidden D: the five layer outputs, and with `keys`
 * the top-k and the key table (kt, klen); the rest NULL. 1, or 0 out of memory (free what was made
 * with layer_tool_outputs_free either way). */
int layer_tool_outputs(hm_layer_outputs *o, uint32_t S, uint32_t D, bool keys);
void layer_tool_outputs_free(hm_layer_outputs *o);

/* Rank 0's last step of S rows as its FFN half saw it, from K2's mailboxes: the FFN seam's normed rows
 * (bf16 values, [S][D]) and the route (ids [S][topk], pick order). HM_OK or the copy's error. */
hm_status layer_tool_route(hm_runtime *rt, hm_layer_group *g, uint32_t S, float *normed, int32_t *ids);

#endif /* HM_TOOLS_LAYER_TOOL_H */
