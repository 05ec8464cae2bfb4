/* tools/launch_tool.c: the weights' source and the grid the launch tools share
 * (launch_tool.h). */

#include "launch_tool.h"

#include <stdlib.h>
#include <string.h>

#include "hm_safetensors.h"

hm_status launch_tool_source_open(launch_tool_source *s, const char *ckpt, const hm_layer_config *cfg, uint64_t seed) {
  s->ck = NULL;
  hm_status st = ckpt ? hm_ckpt_open(ckpt, &s->ck) : hm_gen_init(&s->gen, cfg, seed);
  if (st == HM_OK) s->src = s->ck ? hm_ckpt_source(s->ck) : hm_gen_source(&s->gen);
  return st;
}

void launch_tool_source_close(launch_tool_source *s) {
  if (s->ck) hm_ckpt_close(s->ck);
  else hm_gen_free(&s->gen);
}

void launch_tool_grid(hm_runtime *rt, long ctas, uint32_t *min_cus, uint32_t *grid) {
  *grid = ctas > 0 ? (uint32_t)ctas : 0;
  *min_cus = 0;
  if (hm_runtime_is_sim(rt)) {
    *min_cus = 1;
    if (!*grid) *grid = 8;
  }
}

const char *const launch_tool_configs[] = {"v41-flash", "tiny", NULL};
const long launch_tool_tps[2] = {2, 4};

int launch_tool_step_shape(cli *c, long rows, long reqs, long ctx, long block) {
  if (rows % reqs) return cli_refuse(c, "--rows %ld in --reqs %ld: the requests must be whole (rows a multiple)", rows, reqs);
  if (ctx + rows >= LAUNCH_TOOL_SLOTS)
    return cli_refuse(c, "--ctx %ld and --rows %ld: must stay below a request's %d slots", ctx, rows, LAUNCH_TOOL_SLOTS);
  if (block && (block & (block - 1)))
    return cli_refuse(c, "--block %ld: must be a power of two (an even divisor of %d)", block, LAUNCH_TOOL_SLOTS);
  return 0;
}

const char *const launch_tool_arches[] = {"gfx950", "gfx942", NULL};

static const char *arch_name(hm_arch arch) { return arch == HM_ARCH_GFX942 ? "gfx942" : "gfx950"; }

hm_arch launch_tool_arch(const char *word) { return !strcmp(word, "gfx942") ? HM_ARCH_GFX942 : HM_ARCH_GFX950; }

int launch_tool_arch_shape(cli *c, hm_arch arch, long tp, long rows) {
  if (arch != HM_ARCH_GFX942) return 0;
  if (tp != 4) return cli_refuse(c, "--tp %ld: --arch gfx942 is TP 4 only (spec/mono.md §5.1.3)", tp);
  if (rows > HM_MAX_ROWS_GFX942)
    return cli_refuse(c, "--rows %ld: --arch gfx942 takes at most %d rows (spec/mono.md §5.3.1)", rows,
                      HM_MAX_ROWS_GFX942);
  return 0;
}

void launch_tool_arch_select(hm_arch arch) {
  const char *set = getenv("HSAMONO_SIM_ARCH");
  if (!set || !*set) setenv("HSAMONO_SIM_ARCH", arch_name(arch), 1);
}

int launch_tool_arch_agents(const char *prog, hm_runtime *rt, uint32_t tp, hm_arch arch) {
  const char *want = arch_name(arch);
  for (uint32_t r = 0; r < tp && r < hm_agent_count(rt); r++) {
    const char *name = hm_agent_info_of(hm_agent_get(rt, r))->name;
    if (strcmp(name, want)) {
      if (hm_runtime_is_sim(rt))
        fprintf(stderr, "%s: --arch %s: agent %u is a %s (the software agent as HSAMONO_SIM_ARCH=%s makes it: "
                "unset it or set it to %s)\n", prog, want, r, name, name, want);
      else
        fprintf(stderr, "%s: --arch %s: agent %u is a %s (run it on a %s GPU)\n", prog, want, r, name, want);
      return CLI_EXIT_NOT_RUN;
    }
  }
  return 0;
}
