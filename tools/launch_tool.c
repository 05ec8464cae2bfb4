/* tools/launch_tool.c: the generated weights and the grid the launch tools share
 * (launch_tool.h). */
#include <stdlib.h>

#include "launch_tool.h"

hm_status launch_tool_weights(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts,
                              hm_layer_weights *w) {
  hm_gen gen;
  hm_status st = hm_gen_init(&gen, cfg, seed);
  if (st != HM_OK) return st;
  hm_source src = hm_gen_source(&gen);
  hm_build_opts bo = {parts, 0};
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

int launch_tool_num(const char *s, long *out) {
  char *end;
  *out = strtol(s, &end, 10);
  return *s && !*end;
}

int launch_tool_seed(const char *s, unsigned long long *out) {
  char *end;
  if (!s || !*s || *s == '-') return 0;
  *out = strtoull(s, &end, 0);
  return !*end;
}
