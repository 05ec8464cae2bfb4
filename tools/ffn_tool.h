/* tools/ffn_tool.h: what hsa-mono-check ffn and hsa-mono-bench ffn share: the layer a user named
 * (with an optional expert count) and the launch configuration for the runtime they run on. */
#ifndef HM_TOOLS_FFN_TOOL_H
#define HM_TOOLS_FFN_TOOL_H

#include <stdbool.h>

#include "hm_config.h"
#include "hm_ffn.h"

/* Layer `layer` of config `model`, with `experts` routed experts top-`topk` where either is
 * non-zero (the other kept). *reduced: the routing differs from the named config's (the launch must
 * be told). HM_OK, or the config's error (hm_errmsg says why). */
hm_status ffn_tool_layer(const char *model, long layer, long experts, long topk, hm_layer_config *cfg,
                         bool *reduced);

/* The launch configuration on rt: the grid launch_tool_grid gives (8 CTAs a rank and no CU minimum
 * on the software agent, one CTA a CU on a GPU; ctas > 0 sets the grid on either). */
hm_ffn_config ffn_tool_launch(hm_runtime *rt, bool reduced, long ctas);

#endif /* HM_TOOLS_FFN_TOOL_H */
