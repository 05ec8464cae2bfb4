/* tools/launch_tool.c: the generated weights and the grid the launch tools share
 * (launch_tool.h). */

#include "launch_tool.h"

hm_status launch_tool_weights(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts,
                              hm_layer_weights *w) {
  hm_gen gen;
  hm_status st = hm_gen_init(&gen, cfg, seed);
  if (st != HM_OK) return st;
  hm_source src = hm_gen_source(&gen);
  hm_build_opts bo = {.parts = parts};
  uint32_t r = 0;
  for (; r < tp; r++)
    if ((st = hm_weights_build(cfg, tp, r, &src, &bo, &w[r])) != HM_OK) break;
  /* the rank that failed holds nothing (hm_weights_build's rule); the ones before it are freed */
  if (st != HM_OK)
    while (r--) hm_weights_free(&w[r]);
  hm_gen_free(&gen);
  return st;
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
