/* tests/layer/test_gpu_grid.c: whole layers on the GPU's own grid (one CTA a CU: 256 on gfx950, 304 on
 * gfx942) on the software agent against the reference, where every other suite runs 8 CTAs a rank. */
#include <check.h>
#include <stdlib.h>

#include "helpers.h"
#include "layer_case.h"

/* A grid of 8 CTAs runs every stage's tasks several to a CTA, so it never meets what only the GPU's
 * grid has: stages with fewer tasks than CTAs (most CTAs idle, their flags never raised but still
 * waited past), bases that put a stage's first task high in the grid (SHARED0 + shared units past
 * CTA 255 at full dims), down's 320 tasks over 256 CTAs, every CTA rebuilding the route table, and
 * 1,024 CTAs (TP 4) arriving for the persistent check on two cores. These cases run the default
 * grid of the launch (hm_ffn_config zero: one CTA a CU, at least 256 CUs, the GPU's eligibility),
 * on agents of the GPU's CU count (meson.build leaves HSAMONO_SIM_CUS unset: the software agent's
 * default is the part's). */
static void run_gpu_grid(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *s, uint32_t n,
                         uint64_t seed, hm_arch arch, uint32_t cus) {
  /* the agents the group will run on (the software agent of the arch lc_setup_arch selects) */
  setenv("HSAMONO_SIM_ARCH", arch == HM_ARCH_GFX942 ? "gfx942" : "gfx950", 1);
  hm_runtime *rt = tl_open_sim();
  for (uint32_t r = 0; r < tp; r++) {
    const hm_agent_info *ai = hm_agent_info_of(hm_agent_get(rt, r));
    ck_assert_msg(ai && ai->cus == cus, "agent %u has %u CUs, the GPU's grid is %u", r, ai ? ai->cus : 0, cus);
  }
  hm_runtime_close(rt);
  const hm_ffn_config gpu = {0};
  lc_run_layer_grid(model, layer, experts, tp, s, n, seed, arch, &gpu);
}

/* V4.1-Flash's dims at TP 2 (experts cut to 32): 320 down tasks and wo_b tasks over 256 CTAs, a step
 * of one row (most stages a task or a few) and one of seven (two token passes of the routed tiles). */
START_TEST(full_dims_tp2) {
  const shape s[] = {{1, 1, 300, 64, -1, 0}, {7, 1, 301, 64, 4, 0}};
  run_gpu_grid("v41-flash", 5, 32, 2, s, 2, 1100, HM_ARCH_GFX950, 256);
}
END_TEST

/* Four ranks of 256 CTAs: a REUSE layer (ratio 2) at four rows. Before the software agent scaled its
 * idle CTAs' naps to their number, 238 of 256 had arrived after 30 s. */
START_TEST(tiny_tp4) {
  const shape s = {4, 1, 300, 64, -1, 0};
  run_gpu_grid("tiny", 3, 0, 4, &s, 1, 1110, HM_ARCH_GFX950, 256);
}
END_TEST

/* gfx942's grid: four ranks of 304 CTAs, seven rows (two token passes of 6). */
START_TEST(gfx942_tp4) {
  const shape s = {7, 1, 129, 64, 3, 0};
  run_gpu_grid("tiny", 3, 0, 4, &s, 1, 1120, HM_ARCH_GFX942, 304);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"full_dims_tp2", full_dims_tp2},
      {"tiny_tp4", tiny_tp4},
      {"gfx942_tp4", gfx942_tp4},
  };
  return TL_SUITE("gpu_grid", tests, 900);
}
