/* tools/launch_tool.h: what the tools that run a launch on a TP group share (hsa-mono-check and
 * hsa-mono-bench, ffn and k1): the source of the group's weights and the grid for the runtime. */
#ifndef HM_TOOLS_LAUNCH_TOOL_H
#define HM_TOOLS_LAUNCH_TOOL_H

#include <stdint.h>

#include "cli.h"
#include "hm_config.h"
#include "hm_hsa.h"
#include "hm_weights.h"

/* The weights' source of a check or a bench: the seeded generator of cfg, or the checkpoint at ckpt (not
 * NULL). A tool's group builds each rank's weights from it, one rank at a time (hm_*_group_create_source).
 * open: HM_OK with s->src set, or the error with nothing left open; close frees what open made. */
typedef struct launch_tool_source {
  hm_gen gen;
  struct hm_ckpt *ck; /* NULL: the generator */
  hm_source src;
} launch_tool_source;
hm_status launch_tool_source_open(launch_tool_source *s, const char *ckpt, const hm_layer_config *cfg, uint64_t seed);
void launch_tool_source_close(launch_tool_source *s);

/* --arch: the words it takes (NULL-terminated; gfx950 the default) and the hm_arch of one. */
extern const char *const launch_tool_arches[];
hm_arch launch_tool_arch(const char *word);

/* What --arch gfx942 allows of a launch that runs there (every launch of the layer): TP 4 only (spec/mono.md
 * §5.1.3) and at most HM_MAX_ROWS_GFX942 rows (§5.3.1; rows the largest asked for). 0, or the
 * refusal's exit code with the reason printed. gfx950: 0. */
int launch_tool_arch_shape(cli *c, hm_arch arch, long tp, long rows);

/* The usage's line for --arch on a command that runs the whole layer (layer, model). */
#define LAUNCH_TOOL_ARCH_LAYER_HELP                                                                              \
  "--arch gfx950 (the default) or gfx942 (MI300X/MI325X: the gfx942 weight copies on gfx942 agents, TP 4, at\n" \
  "most 42 rows; the software agent makes one unless HSAMONO_SIM_ARCH says otherwise).\n"

/* Before the runtime opens: the software agent made the architecture asked for where the user has
 * not set HSAMONO_SIM_ARCH (a GPU's runtime does not read it). */
void launch_tool_arch_select(hm_arch arch);

/* After it opened: agents 0..tp-1 must be of `arch` (a GPU's own, or the software agent's
 * HSAMONO_SIM_ARCH). 0, or CLI_EXIT_NOT_RUN with one line on stderr saying which agent is what and
 * what to change ("prog: --arch gfx942: agent 0 is a gfx950 ..."). */
int launch_tool_arch_agents(const char *prog, hm_runtime *rt, uint32_t tp, hm_arch arch);

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
