/* tools/launch_tool.h: what the tools that run a launch on a TP group share (hsa-mono-check and
 * hsa-mono-bench, ffn and k1): the group's generated weights and the grid for the runtime. */
#ifndef HM_TOOLS_LAUNCH_TOOL_H
#define HM_TOOLS_LAUNCH_TOOL_H

#include <stdint.h>

#include "cli.h"
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

/* The options every launch tool shares: the configs --config names (NULL-terminated), the TP sizes
 * a group runs (--tp), the largest grid --ctas asks for (a GPU has at most a few hundred CUs; the
 * launch itself refuses a grid that is not resident). */
extern const char *const launch_tool_configs[];
extern const long launch_tool_tps[2];
#define LAUNCH_TOOL_MAX_CTAS 4096
/* --experts and --topk: hm_config_set_experts' bounds (it says why a pair does not fit) */
#define LAUNCH_TOOL_MAX_EXPERTS 1024
#define LAUNCH_TOOL_MAX_TOPK 16
/* The most steps a tool runs (--steps) */
#define LAUNCH_TOOL_MAX_STEPS 1000000
/* A generated request's slots and positions (hm_gen_step_make's: request r's slots r*4096 + position) */
#define LAUNCH_TOOL_SLOTS 4096

/* A generated step's shape as the options gave it, refused before anything is opened: R rows in whole
 * requests of Q, context C and the rows within a request's slots, SWA blocks of B an even divisor of
 * them (block 0: none given). 0, or the refusal's exit code with the reason and usage printed. */
int launch_tool_step_shape(cli *c, long rows, long reqs, long ctx, long block);

#endif /* HM_TOOLS_LAUNCH_TOOL_H */
