/* tools/launch_tool.h: what the tools that run a launch on a TP group share (hsa-mono-check and
 * hsa-mono-bench, ffn and k1): the group's generated weights and the grid for the runtime. */
#ifndef HM_TOOLS_LAUNCH_TOOL_H
#define HM_TOOLS_LAUNCH_TOOL_H

#include <stdint.h>

#include "hm_config.h"
#include "hm_hsa.h"
#include "hm_weights.h"

/* Ranks 0..tp-1 of layer cfg's weights (HM_WPART_* parts) from the seeded generator into w[]. On
 * failure nothing is left allocated and hm_errmsg says why. */
hm_status launch_tool_weights(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts,
                              hm_layer_weights *w);

/* The grid of a persistent launch on rt: on the software agent 8 CTAs a rank (its CTAs are CPU
 * threads; a part's 256 would take longer to start than a launch's arrival check waits) and no CU
 * minimum (*min_cus 1; its parts need not have a GPU's CUs); on a GPU *grid 0 (one CTA a CU) and
 * *min_cus 0 (the launch's own rule). ctas > 0 sets the grid on either. */
void launch_tool_grid(hm_runtime *rt, long ctas, uint32_t *min_cus, uint32_t *grid);

/* A whole decimal number in s, nothing after it (a typo is a usage error, not a zero): 1 and *out,
 * or 0. */
int launch_tool_num(const char *s, long *out);
/* A seed: a whole unsigned number (decimal, 0x hex or 0 octal) and nothing else; 1 when it is one. */
int launch_tool_seed(const char *s, unsigned long long *out);

#endif /* HM_TOOLS_LAUNCH_TOOL_H */
