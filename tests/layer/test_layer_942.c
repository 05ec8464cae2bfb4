/* tests/layer/test_layer_942.c: the whole layer on gfx942 (issue 13: K1 -> [select -> keylist] -> K2 at TP4
 * with the gfx942 copies) on the software agent against the reference's gfx942 mode, over every layer kind. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "layer_case.h"

/* ---------------------------------------------------------------- the tests */

/* A REUSE layer (ratio 2) over gfx942's row counts (spec/mono.md §1.1 TILE = 6, 42 rows at most;
 * chunks of 64 keys at every width, §1.2): one row at position 0, one token pass of 6, two passes
 * with a padding row (7) and OCP's -0 in the compressed records K2 reads (FNUZ's NaN: 0x80 must be
 * read as OCP), and the cap of 7 passes (42) over three requests. */
START_TEST(tiny_rows) {
  const shape s[] = {{1, 1, 0, 64, -1, 0}, {6, 1, 70, 64, -1, 0}, {7, 1, 129, 64, 3, HM_GEN_NEG_ZERO}, {42, 3, 300, 256, 41, 0}};
  lc_run_layer_arch("tiny", 3, 0, 4, s, sizeof s / sizeof *s, 9421, HM_ARCH_GFX942);
}
END_TEST

/* Every kind gfx942 runs whole (spec/mono.md §1.3's gfx942 column): the first layer (0, the embedding
 * in) and an Engram window layer (1), ratio 0; a REUSE layer of ratio 1 (21); the index path (K1's
 * index build, the reference select, keylist, K2) on a kv and index source (2, ratio 2), an Engram
 * one (14), the candidate producer (20) and a REINDEX layer (24, ratio 1). */
START_TEST(tiny_layer_kinds) {
  /* s7's padding row: an index source's row after it would need the compressed key its group makes */
  const shape s7 = {7, 1, 150, 64, 5, 0}, s7i = {7, 1, 150, 64, -1, 0}, s6 = {6, 2, 40, 256, -1, 0},
              s1 = {1, 1, 600, 64, -1, 0};
  lc_run_layer_arch("tiny", 0, 0, 4, &s7, 1, 9430, HM_ARCH_GFX942);
  lc_run_layer_arch("tiny", 1, 0, 4, &s1, 1, 9431, HM_ARCH_GFX942);
  lc_run_layer_arch("tiny", 21, 0, 4, &s6, 1, 9432, HM_ARCH_GFX942);
  lc_run_layer_arch("tiny", 2, 0, 4, &s7i, 1, 9433, HM_ARCH_GFX942);
  lc_run_layer_arch("tiny", 14, 0, 4, &s1, 1, 9434, HM_ARCH_GFX942);
  lc_run_layer_arch("tiny", 20, 0, 4, &s6, 1, 9435, HM_ARCH_GFX942);
  lc_run_layer_arch("tiny", 24, 0, 4, &s6, 1, 9436, HM_ARCH_GFX942);
}
END_TEST

/* The generator's hard cases through the whole layer on gfx942: padding rows, dead key chunks,
 * ratio-2 groups begun the step before (REUSE layer 3), and more than 512 compressed entries on an
 * index source (2: the indexer's scores pick the 512). */
START_TEST(tiny_hard_cases) {
  const shape s3 = {8, 2, 300, 64, -1, HM_GEN_PAD | HM_GEN_DEAD_CHUNK | HM_GEN_STRADDLE};
  lc_run_layer_arch("tiny", 3, 0, 4, &s3, 1, 9440, HM_ARCH_GFX942);
  const shape s2 = {2, 1, 0, 64, -1, HM_GEN_LONG};
  lc_run_layer_arch("tiny", 2, 0, 4, &s2, 1, 9441, HM_ARCH_GFX942);
}
END_TEST

/* One layer of DeepSeek-V4.1-Flash's dims at TP4 on gfx942 (16 heads and 2 o groups a rank: wo_a
 * tasks of 4096-wide K, wo_b's K of 2048), experts cut to 32 (top-6) so the weights and the agent's
 * time fit a test; seven rows, two token passes. */
START_TEST(full_dims) {
  const shape s = {7, 1, 900, 256, 4, 0};
  lc_run_layer_arch("v41-flash", 5, 32, 4, &s, 1, 9450, HM_ARCH_GFX942);
}
END_TEST

/* Producers and consumers of every K1 and K2 hand-off on gfx942 on different CTAs: odd small grids
 * and the whole one (8 CUs), each under its own chaos seed with a laggard CTA in every dispatch
 * (HSAMONO_SIM_LAGGARD=1: it publishes as late as it can, hsa/sim/cta.c) and the weak memory model
 * (tests/meson.build sets it for every test), so a stage that skips its wait, or waits on the wrong
 * tokens' or slots' flags, reads the last step's data. gfx942's token passes of 6 rows change which
 * flags a stage waits on, so test_layer.c's sweep does not stand for it: a REUSE layer (ratio 2: the
 * compressed-key path) and an index source (2: K1's index build, select, keylist, K2), one row and
 * seven (two passes, the padding row among them). The seeds are its own: it is its own meson test. */
START_TEST(grid_shapes_under_chaos) {
  if (getenv("HSAMONO_SIM_CHAOS")) return;
  const shape *s = lc_sweep_shapes;
  for (uint32_t i = 0; i < LC_SWEEP_RUNS; i++) {
    lc_sweep_seed(i);
    hm_ffn_config run = lc_small_grid;
    run.ctas = lc_sweep_grids[i];
    const int32_t layer = i == 1 ? 2 : 3;
    const uint64_t seed = 9480 + 10 * i;
    layer_setup L;
    lc_setup_arch(&L, "tiny", layer, 0, 4, seed, &run, HM_ARCH_GFX942);
    /* the index source's padding row would need the compressed key its group makes (tiny_layer_kinds) */
    const shape s7i = {7, 1, 100, 64, -1, 0};
    for (uint32_t j = 0; j < 2; j++) lc_run_case(L.rt, L.g, L.w, 4, j == 1 && layer == 2 ? &s7i : &s[j], seed + j, &L.table);
    lc_teardown(&L);
  }
  lc_sweep_end();
}
END_TEST

/* A recorded whole-layer step on gfx942 (K1 and K2 on one queue, packets only) replayed over input
 * sets that change every replay (layer_case.c lc_replays_of): every rank's outputs the set's bits
 * from its checked step, the epoch one on each replay. A launch that read the step before's
 * mailboxes or pushes hands on the previous set's values and fails it. */
/* TP 4 at 7 rows (two token passes) costs the software agent several times gfx950's TP 2 at 2 rows a
 * launch: 40 launches here (8 under chaos); test_layer.c's 1,000 cover the protocol's reuse. */
START_TEST(replays_bit_identical) { lc_replays_of(HM_ARCH_GFX942, 4, 3, 7, 40, 8); }
END_TEST

/* ---------------------------------------------------------------- refusals */

/* §5.3.1: a step of 43 rows on gfx942 is refused naming the cap, every rank alike, and the group
 * stays up: a 42-row step after it runs. */
START_TEST(rows_43_refused) {
  layer_setup L;
  lc_setup_arch(&L, "tiny", 3, 0, 4, 9460, NULL, HM_ARCH_GFX942);
  hm_gen_step st;
  hm_gen_opts go = {.S = 43, .reqs = 1, .ctx = 100, .block = 64, .seed = 9461};
  ck_assert_int_eq(hm_gen_step_make_opts(&L.cfg, &go, &st), HM_OK);
  hm_ref_kv_cache_to_fnuz(&st.in.swa);
  tl_expect_status(hm_layer_group_step(L.g, &st.in, 1, NULL, NULL), HM_ERR_REFUSED, "§5.3.1: 43 rows (the launch takes "
                "1..42 on gfx942)");
  hm_gen_step_free(&st);
  const shape s = {42, 2, 50, 64, -1, 0};
  lc_run_case(L.rt, L.g, L.w, 4, &s, 9462, &L.table);
  lc_teardown(&L);
}
END_TEST

/* §5.1.3 and §4.4 at the layer's creation: a TP 2 group on gfx942 agents is refused naming the TP rule
 * (gfx942 copies are TP4 only, so the gfx950 layouts: the TP rule comes first); the gfx950 layouts at
 * TP 4 on gfx942 agents are refused naming the copies the launches read. */
START_TEST(create_refusals) {
  setenv("HSAMONO_SIM_ARCH", "gfx942", 1);
  hm_runtime *rt = tl_open_sim();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[4];
  hm_layer_group *g = NULL;
  tl_build_group(&cfg, 2, 9470, HM_WPART_ATTN | HM_WPART_FFN, w);
  tl_expect_status(hm_layer_group_create(rt, w, 2, &lc_small_grid, NULL, &g), HM_ERR_REFUSED,
                "§5.1.3: TP 2 on gfx942");
  ck_assert_ptr_null(g);
  tl_free_group(w, 2);
  tl_build_group(&cfg, 4, 9471, HM_WPART_ATTN | HM_WPART_FFN, w);
  tl_expect_status(hm_layer_group_create(rt, w, 4, &lc_small_grid, NULL, &g), HM_ERR_INVALID_ARG,
                "this launch reads the gfx942 copies");
  ck_assert_ptr_null(g);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"tiny_rows", tiny_rows},           {"tiny_layer_kinds", tiny_layer_kinds}, {"tiny_hard_cases", tiny_hard_cases},
      {"full_dims", full_dims},           {"rows_43_refused", rows_43_refused},   {"create_refusals", create_refusals},
      {"replays_bit_identical", replays_bit_identical}, {"grid_shapes_under_chaos", grid_shapes_under_chaos},
  };
  return TL_SUITE("layer_942", tests, 1800);
}
