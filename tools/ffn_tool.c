/* tools/ffn_tool.c: the layer and launch configuration hsa-mono-check ffn and hsa-mono-bench ffn
 * share (ffn_tool.h). */
#include "ffn_tool.h"

#include "launch_tool.h"

hm_status ffn_tool_layer(const char *model, long layer, long experts, long topk, hm_layer_config *cfg,
                         bool *reduced) {
  *reduced = false;
  hm_status s = hm_config_by_name(model, (int32_t)layer, cfg);
  if (s || (!experts && !topk)) return s;
  uint32_t e = experts ? (uint32_t)experts : cfg->experts, k = topk ? (uint32_t)topk : cfg->topk;
  *reduced = e != cfg->experts || k != cfg->topk;
  return hm_config_set_experts(cfg, e, k);
}

hm_ffn_config ffn_tool_launch(hm_runtime *rt, bool reduced, long ctas) {
  hm_ffn_config fc = {.reduced_experts = reduced};
  launch_tool_grid(rt, ctas, &fc.min_cus, &fc.ctas);
  return fc;
}
