/* tests/layer/test_layer.c: the whole layer (issue 12: K1 -> [select -> keylist] -> K2) on the software
 * agent against the fp32 reference, stage by stage and whole, over every layer kind. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"
#include "hm_layer_group.h"
#include "layer_case.h"
#include "kernels/ffn_args.h"
#include "kernels/k1_args.h"
#include "kernels/k2_args.h"

/* ---------------------------------------------------------------- the tests */

/* A REUSE layer (ratio 2) at TP 2 over the row counts (chunks of 64 keys to 25 rows, 128 past):
 * position 0 (one window slot, no compressed key), a window that wraps a 64-slot block, padding
 * rows (slot -1), two requests. */
START_TEST(tiny_reuse_ratio2_tp2) {
  const shape s[] = {{1, 1, 0, 64, -1, 0}, {2, 1, 1, 64, -1, 0}, {7, 1, 100, 64, 3, 0}, {16, 2, 60, 64, -1, 0},
                     {48, 2, 300, 64, 47, 0}};
  lc_run_layer("tiny", 3, 0, 2, s, sizeof s / sizeof *s, 100);
}
END_TEST

/* A REUSE layer (ratio 1) at TP 4 (chunks of 128): two requests in a step, 256-slot blocks, short
 * top-k lists. */
START_TEST(tiny_reuse_ratio1_tp4) {
  const shape s[] = {{1, 1, 5, 256, -1, 0}, {2, 2, 0, 256, 1, 0}, {7, 1, 250, 256, -1, 0}, {16, 4, 40, 256, 0, 0},
                     {48, 4, 700, 256, -1, 0}};
  lc_run_layer("tiny", 21, 0, 4, s, sizeof s / sizeof *s, 200);
}
END_TEST

/* Index sources: K1's index build, the reference select (compressor and indexer) between the
 * launches, keylist, K2. A kv source with its own compressor (2, ratio 2) at TP 2; the candidate
 * producer (20, ratio 1) at TP 4. */
START_TEST(tiny_index_sources) {
  const shape s2[] = {{1, 1, 40, 64, -1, 0}, {8, 2, 90, 64, 3, 0}};
  lc_run_layer("tiny", 2, 0, 2, s2, 2, 300);
  const shape s20[] = {{2, 1, 70, 256, -1, 0}, {16, 2, 130, 256, -1, 0}};
  lc_run_layer("tiny", 20, 0, 4, s20, 2, 310);
}
END_TEST

/* The generator's hard cases (hm_gen_opts.cases), each asserted to occur in its step, through
 * K1, the select and keylist, K2: a kv source (2, ratio 2) with padding rows and requests that
 * begin at odd positions (the first token of their group pending from the prefill), requests at
 * positions 0 and 1, and more than 512 compressed entries (the indexer's scores pick the 512); a
 * REUSE layer (3) whose top-k lists stop a whole key chunk short; the candidate producer (20) and
 * a reindex layer (24) past 512 entries. */
START_TEST(tiny_hard_cases) {
  const shape s2[] = {{8, 2, 300, 64, -1, HM_GEN_PAD | HM_GEN_STRADDLE}, {4, 2, 0, 64, -1, HM_GEN_START},
                      {2, 1, 0, 64, -1, HM_GEN_LONG}};
  lc_run_layer("tiny", 2, 0, 2, s2, 3, 700);
  const shape s3[] = {{8, 2, 300, 64, -1, HM_GEN_PAD | HM_GEN_DEAD_CHUNK | HM_GEN_STRADDLE},
                      {3, 1, 0, 64, -1, HM_GEN_LONG | HM_GEN_DEAD_CHUNK | HM_GEN_PAD}};
  lc_run_layer("tiny", 3, 0, 2, s3, 2, 710);
  const shape s20[] = {{2, 1, 0, 256, -1, HM_GEN_LONG}};
  lc_run_layer("tiny", 20, 0, 4, s20, 1, 720);
  const shape s24[] = {{4, 2, 0, 64, -1, HM_GEN_LONG | HM_GEN_PAD}};
  lc_run_layer("tiny", 24, 0, 2, s24, 1, 730);
}
END_TEST

/* Window layers: layer 0 (the embedding in, the identity seam), layer 1 (mHC post and Engram on
 * the host first), and a draft layer (routing 32/3 at tiny size), ratio 0 all. */
START_TEST(tiny_window_layers) {
  const shape s[] = {{1, 1, 0, 64, -1, 0}, {8, 2, 129, 64, 6, 0}};
  lc_run_layer("tiny", 0, 0, 2, s, 2, 400);
  lc_run_layer("tiny", 1, 0, 4, s, 2, 410);
  lc_run_layer("tiny", 41, 0, 4, s + 1, 1, 420);
}
END_TEST

/* Producers and consumers of every K1 and K2 hand-off on different CTAs: odd small grids and the
 * whole one (8 CUs), each under its own chaos seeds with a laggard CTA in every dispatch
 * (HSAMONO_SIM_LAGGARD=1: it publishes as late as it can, hsa/sim/cta.c), so a stage that skips
 * its wait, or waits on the wrong tokens' or slots' flags, reads the last step's data. A REUSE
 * layer (ratio 2: the compressed-key path) at TP 2 and a window layer at TP 4, one and seven rows
 * (the padding row among them). The seeds are its own: under layer-chaos it is not run again. */
START_TEST(grid_shapes_under_chaos) {
  if (getenv("HSAMONO_SIM_CHAOS")) return;
  const shape *s = lc_sweep_shapes;
  for (uint32_t k = 0; k < LC_SWEEP_RUNS; k++) {
    lc_sweep_seed(k);
    for (uint32_t i = 0; i < LC_SWEEP_RUNS; i++) {
      hm_ffn_config run = lc_small_grid;
      run.ctas = lc_sweep_grids[i];
      const int32_t layer = i == 1 ? 41 : 3;
      const uint32_t tp = i == 1 ? 4 : 2;
      const uint64_t seed = 900 + 10 * k + i;
      layer_setup L;
      lc_setup(&L, "tiny", layer, 0, tp, seed, &run);
      for (uint32_t j = 0; j < 2; j++) lc_run_case(L.rt, L.g, L.w, tp, &s[j], seed + j, &L.table);
      lc_teardown(&L);
    }
  }
  lc_sweep_end();
}
END_TEST

/* Layer 14: an Engram layer that is also a kv and index source (Engram, index build, select). */
START_TEST(tiny_engram_index) {
  const shape s[] = {{2, 1, 50, 64, -1, 0}};
  lc_run_layer("tiny", 14, 0, 4, s, 1, 500);
}
END_TEST

/* One full-size layer of DeepSeek-V4.1-Flash (hidden 5120, 64 heads, wo_a groups of 1024 rows),
 * experts cut to 32 (top-6) so the weights and the software agent's time fit a test. TP 4 at two
 * rows (chunks of 128), TP 2 at one row (chunks of 64). */
START_TEST(full_dims_tp4) {
  const shape s[] = {{2, 1, 150, 64, -1, 0}};
  lc_run_layer("v41-flash", 3, 32, 4, s, 1, 600);
}
END_TEST

START_TEST(full_dims_tp2) {
  const shape s[] = {{1, 1, 300, 64, -1, 0}};
  lc_run_layer("v41-flash", 23, 32, 2, s, 1, 610);
}
END_TEST

/* The other kinds at full size (experts cut to 32 as above): the first layer (the embedding in,
 * the identity seam) at TP 2, a kv source (its K1's index build and the reference select between
 * the launches) at TP 4, one row each. */
START_TEST(full_dims_kinds) {
  const shape s[] = {{1, 1, 200, 64, -1, 0}};
  lc_run_layer("v41-flash", 0, 32, 2, s, 1, 620);
  lc_run_layer("v41-flash", 8, 32, 4, s, 1, 630);
}
END_TEST

START_TEST(replays_bit_identical) { lc_replays_of(HM_ARCH_GFX950, 2, 3, 2, 1000, 30); }
END_TEST

/* Layer 0 recorded: its broadcast, K1 and K2 replay as packets too (a few replays). */
START_TEST(replays_first_layer) {
  layer_setup L;
  lc_setup(&L, "tiny", 0, 0, 2, 750, NULL);
  const shape sh = {3, 1, 20, 64, -1, 0};
  layer_case c;
  lc_case_make(&c, L.g, L.w, 2, &sh, 751, &L.table);
  ck_assert_msg(hm_layer_group_step(L.g, &c.step.in, 1, c.o, NULL) == HM_OK, "%s", hm_errmsg());
  /* one set (layer 0's entry, the embedding, is the group's own buffer, not K1's: hm_layer.h), its
   * outputs and the epoch checked after every replay */
  lc_replay_ctx rc;
  lc_replay_ctx_init(&rc, L.rt, L.g, 2, 3, L.cfg.hidden, 1, 1);
  const uint32_t order[5] = {0, 0, 0, 0, 0};
  rc.want[0] = c.o, rc.in[0] = &c.step.in, rc.order = order, rc.replays = 5, rc.keep_inputs = true;
  hm_layer_outputs o[2];
  lc_last_outputs_alloc(o, 2, 3, L.cfg.hidden);
  ck_assert_msg(hm_layer_group_replay(L.g, &c.step.in, 5, o, lc_replay_check, &rc) == HM_OK, "%s", hm_errmsg());
  lc_last_outputs_free(o, 2);
  lc_replay_ctx_free(&rc);
  /* an index source cannot be recorded: its select runs on the host */
  lc_case_free(&c);
  lc_teardown(&L);
}
END_TEST

/* A rank that never runs its step (dead) makes every other rank end K2 with HM_ERR_PEER naming
 * it (K1 has no peers; K2's attention all-reduce waits for the dead rank's wo_b rows), within the
 * bound, and the group tears down cleanly. TP 4, rank 2 dead. */
START_TEST(dead_peer_mid_k2) {
  hm_ffn_config run = lc_small_grid;
  /* 8 s: the arrival bound is half of it, and under chaos 4 ranks' 32 CTA threads on CI's 2 cores
   * took over 1 s to arrive (the 2 s peer bound failed K1's arrival there, not the dead peer) */
  run.peer_timeout_ns = 8000000000ull;
  layer_setup L;
  lc_setup(&L, "tiny", 21, 0, 4, 800, &run);
  const shape sh = {2, 1, 30, 256, -1, 0};
  layer_case c;
  lc_case_make(&c, L.g, L.w, 4, &sh, 801, &L.table);
  hm_status st = hm_layer_group_step_ranks(L.g, &c.step.in, 0xbu, NULL);
  ck_assert_msg(st == HM_ERR_PEER && strstr(hm_errmsg(), "rank 2"), "%s: %s", hm_status_name(st), hm_errmsg());
  for (uint32_t r = 0; r < 4; r++) {
    if (r == 2) continue;
    st = hm_ffn_status(hm_layer_k2(hm_layer_group_rank(L.g, r)));
    ck_assert_msg(st == HM_ERR_PEER && strstr(hm_errmsg(), "rank 2's push"), "rank %u: %s: %s", r, hm_status_name(st),
                  hm_errmsg());
  }
  lc_case_free(&c);
  lc_teardown(&L);
}
END_TEST

/* Whole steps and FFN-only steps interleave on one layer (one K2 runner: the same weights, epoch
 * buffer and peer regions): a whole step, an FFN-only step on parts the caller made (the FFN seam
 * bit for bit with the reference's, the MoE within its budget), and a whole step again. */
START_TEST(ffn_only_interleaved) {
  layer_setup L;
  lc_setup(&L, "tiny", 3, 0, 2, 850, NULL);
  const shape sh = {4, 1, 40, 64, -1, 0};
  for (uint32_t round = 0; round < 2; round++) {
    layer_case c;
    lc_case_make(&c, L.g, L.w, 2, &sh, 851 + round, &L.table);
    ck_assert_msg(hm_layer_group_step(L.g, &c.step.in, 1, c.o, NULL) == HM_OK, "%s", hm_errmsg());
    lc_expect_ranks_identical(&c);
    lc_expect_k1(&c);
    lc_expect_back(L.rt, L.g, &c, L.w);
    lc_expect_ffn_half(L.rt, L.g, &c, L.w);
    lc_case_free(&c);
    if (round) break;
    tl_ffn_inputs fi;
    tl_ffn_inputs_make(&L.cfg, 4, 2, 860, &fi);
    hm_ffn_inputs in = {.rows = 4, .res = fi.res, .post = fi.post, .comb = fi.comb, .pre = fi.pre};
    for (uint32_t r = 0; r < 2; r++) in.parts[r] = fi.parts[r];
    const uint64_t D = L.cfg.hidden;
    hm_ffn_outputs o[2];
    for (uint32_t r = 0; r < 2; r++)
      o[r] = (hm_ffn_outputs){calloc(4 * D, 4), calloc(16 * D, 4), calloc(16, 4), calloc(64, 4), calloc(16, 4)};
    ck_assert_msg(hm_layer_group_ffn_step(L.g, 0, &in, o) == HM_OK, "%s", hm_errmsg());
    hm_tensor_set ref;
    hm_tset_init(&ref);
    ck_assert_int_eq(hm_ref_ffn_launch(L.w, 2, 4, (const float *const *)fi.parts, fi.res, fi.post, fi.comb, fi.pre, &ref),
                     HM_OK);
    /* the seam runs in the reference's order with the same libm calls: bit-identical */
    ck_assert_uint_eq(tl_count_diff(o[0].res, tl_f32(&ref, "out.res"), 16 * D), 0);
    ck_assert_uint_eq(tl_count_diff(o[0].post, tl_f32(&ref, "out.post"), 16), 0);
    ck_assert_uint_eq(tl_count_diff(o[0].comb, tl_f32(&ref, "out.comb"), 64), 0);
    ck_assert_uint_eq(tl_count_diff(o[0].pre, tl_f32(&ref, "out.pre"), 16), 0);
    const float *rx = tl_f32(&ref, "out.x");
    double rel = tl_rel_l2(o[0].x, rx, 4 * D);
    ck_assert_msg(rel < 1e-2 && tl_cosine(o[0].x, rx, 4 * D) > 0.9999, "FFN-only output: rel L2 %.3g", rel);
    ck_assert(memcmp(o[0].x, o[1].x, 4 * D * 4) == 0);
    hm_tset_free(&ref);
    for (uint32_t r = 0; r < 2; r++) free(o[r].x), free(o[r].res), free(o[r].post), free(o[r].comb), free(o[r].pre);
    tl_ffn_inputs_free(&fi);
  }
  lc_teardown(&L);
}
END_TEST

/* A chain of three layers (REUSE ratio 2, layers 3-5) on one queue a rank, each layer's outputs
 * the next one's inputs in device memory. CSETS entry seam states (the chain's x, residual and
 * mixes; the layers' metadata and caches shared) are each run once as a chained step, each layer
 * checked on the chain's own input to it (the reference's step of that layer from the previous
 * layer's GPU outputs: K1 exactly, the attention-side residual close); the last layer's outputs
 * are the set's expected bits. Then the whole chain is recorded once as packets and replayed with
 * the sets changing every replay as lc_replays_of does (never the same set twice in a row), the last
 * layer's outputs the set's bits and every layer's epoch one step on each time: 20 launches of the
 * chain in all, 5 under chaos (a launch of three layers costs the agent about a second; the
 * thousand replays run on one layer above). */
static void chain_layer_inputs(const hm_layer_config *cfg, uint32_t i, uint64_t seed, hm_gen_step *st) {
  ck_assert_int_eq(hm_gen_step_make_block(cfg, 2, 1, 60, 64, seed + 10 * i, st), HM_OK);
}

START_TEST(chain_replays) {
  enum { N = 3, TP = 2, CSETS = 3 };
  hm_runtime *rt = tl_open_sim();
  hm_layer_config cfg[N];
  hm_layer_weights w[N][TP];
  const hm_layer_weights *wp[N];
  hm_gen_step st[N], entry[CSETS];
  hm_step_inputs in[CSETS][N];
  for (uint32_t i = 0; i < N; i++) {
    cfg[i] = tl_config("tiny", 3 + (int32_t)i, 0, 0);
    tl_build_group(&cfg[i], TP, 900 + i, HM_WPART_ATTN | HM_WPART_FFN, w[i]);
    wp[i] = w[i];
    chain_layer_inputs(&cfg[i], i, 910, &st[i]);
  }
  /* set k: the chain's entry from seed 920 + k (set 0 as generated), the layers' steps otherwise */
  for (uint32_t k = 0; k < CSETS; k++) {
    ck_assert_int_eq(hm_gen_step_copy(&st[0], &entry[k]), HM_OK);
    if (k) tl_step_new_seam(&entry[k], &cfg[0], 920 + k);
    in[k][0] = entry[k].in;
    for (uint32_t i = 1; i < N; i++) in[k][i] = st[i].in;
  }
  hm_layer_group *g;
  ck_assert_msg(hm_layer_group_create_chain(rt, wp, N, TP, &lc_small_grid, NULL, &g) == HM_OK, "%s", hm_errmsg());
  ck_assert_uint_eq(hm_layer_group_layers(g), N);
  const uint32_t S = 2, D = cfg[0].hidden;
  hm_layer_outputs o[CSETS][N * TP];
  memset(o, 0, sizeof o);
  for (uint32_t k = 0; k < CSETS; k++) {
    for (uint32_t j = 0; j < N * TP; j++) {
      o[k][j].x = calloc((size_t)S * D, 4), o[k][j].res = calloc((size_t)S * 4 * D, 4);
      o[k][j].post = calloc(S * 4, 4), o[k][j].comb = calloc(S * 16, 4), o[k][j].pre = calloc(S * 4, 4);
      o[k][j].res_mid = calloc((size_t)S * 4 * D, 4), o[k][j].kt = calloc((size_t)S * K1_KEYS, 4);
    }
    ck_assert_msg(hm_layer_group_step(g, in[k], 1, o[k], NULL) == HM_OK, "%s", hm_errmsg());
    for (uint32_t i = 0; i < N; i++) {
      /* the reference's layer i on the chain's own input to it (its caches as before the step) */
      hm_gen_step ref;
      chain_layer_inputs(&cfg[i], i, 910, &ref);
      const float *px = entry[k].x, *pres = entry[k].res, *ppost = entry[k].post, *pcomb = entry[k].comb,
                  *ppre = entry[k].pre;
      if (i > 0) {
        const hm_layer_outputs *p = &o[k][(i - 1) * TP];
        px = p->x, pres = p->res, ppost = p->post, pcomb = p->comb, ppre = p->pre;
      }
      memcpy(ref.x, px, (size_t)S * D * 4), memcpy(ref.res, pres, (size_t)S * 4 * D * 4);
      memcpy(ref.post, ppost, S * 16), memcpy(ref.comb, pcomb, S * 64), memcpy(ref.pre, ppre, S * 16);
      hm_tensor_set tr;
      hm_tset_init(&tr);
      ck_assert_msg(hm_ref_layer_step(w[i], TP, &ref.in, NULL, NULL, &tr) == HM_OK, "%s", hm_errmsg());
      const hm_layer_outputs *q = &o[k][i * TP];
      ck_assert_uint_eq(tl_count_diff(q->res_mid, tl_f32(&tr, "k1.seam.res"), (uint64_t)S * 4 * D), 0);
      ck_assert_mem_eq(q->kt, tl_i32(&tr, "k1.kt"), (size_t)S * K1_KEYS * 4);
      lc_expect_close("chain layer res", q->res, tl_f32(&tr, "out.res"), (uint64_t)S * 4 * D);
      for (uint32_t r = 1; r < TP; r++) ck_assert(memcmp(o[k][i * TP + r].x, q->x, (size_t)S * D * 4) == 0);
      hm_tset_free(&tr);
      hm_gen_step_free(&ref);
    }
    for (uint32_t j = 0; j < k; j++)
      ck_assert_msg(!lc_same_outputs(&o[j][(N - 1) * TP], &o[k][(N - 1) * TP], S, D), "sets %u and %u alike", j, k);
  }
  lc_replay_ctx rc;
  lc_replay_ctx_init(&rc, rt, g, TP, S, D, N, CSETS);
  const char *chaos = getenv("HSAMONO_SIM_CHAOS");
  rc.replays = (chaos && *chaos ? 5 : 20) - CSETS;
  uint32_t order[20];
  tl_replay_order(CSETS, CSETS - 1, 999, rc.replays, order);
  rc.order = order;
  for (uint32_t k = 0; k < CSETS; k++) rc.want[k] = &o[k][(N - 1) * TP], rc.in[k] = in[k];
  hm_layer_outputs last[TP];
  lc_last_outputs_alloc(last, TP, S, D);
  ck_assert_msg(hm_layer_group_replay(g, in[order[0]], rc.replays, last, lc_replay_check, &rc) == HM_OK, "%s",
                hm_errmsg());
  lc_last_outputs_free(last, TP);
  lc_replay_ctx_free(&rc);
  for (uint32_t k = 0; k < CSETS; k++)
    for (uint32_t j = 0; j < N * TP; j++)
      free(o[k][j].x), free(o[k][j].res), free(o[k][j].post), free(o[k][j].comb), free(o[k][j].pre),
          free(o[k][j].res_mid), free(o[k][j].kt);
  hm_layer_group_destroy(g);
  for (uint32_t k = 0; k < CSETS; k++) hm_gen_step_free(&entry[k]);
  for (uint32_t i = 0; i < N; i++) tl_free_group(w[i], TP), hm_gen_step_free(&st[i]);
  hm_runtime_close(rt);
}
END_TEST

/* A bad index in the decode metadata is refused before anything runs (K1's checks, made once a
 * step inside hm_k1_step), naming the row; the group then takes a good step. */
START_TEST(bad_metadata_refused) {
  layer_setup L;
  lc_setup(&L, "tiny", 3, 0, 2, 870, NULL);
  const shape sh = {2, 1, 40, 64, -1, 0};
  layer_case c;
  lc_case_make(&c, L.g, L.w, 2, &sh, 871, &L.table);
  int32_t keep = c.step.topk[5];
  c.step.topk[5] = 1 << 30;
  hm_status st = hm_layer_group_step(L.g, &c.step.in, 1, NULL, NULL);
  ck_assert_msg(st == HM_ERR_INVALID_ARG && strstr(hm_errmsg(), "row 0"), "%s: %s", hm_status_name(st), hm_errmsg());
  c.step.topk[5] = keep;
  ck_assert_msg(hm_layer_group_step(L.g, &c.step.in, 1, c.o, NULL) == HM_OK, "%s", hm_errmsg());
  lc_expect_k1(&c);
  lc_case_free(&c);
  lc_teardown(&L);
}
END_TEST

/* Refusals name their rule; nothing is left behind. */
START_TEST(create_refusals) {
  layer_setup L;
  memset(&L, 0, sizeof L);
  L.cfg = tl_config("tiny", 3, 0, 0);
  L.rt = tl_open_sim();
  /* TP 1 is not a mono deployment (§5.1.3) */
  tl_build_group(&L.cfg, 1, 900, HM_WPART_ATTN | HM_WPART_FFN, L.w);
  hm_layer_group *g = NULL;
  hm_status st = hm_layer_group_create(L.rt, L.w, 1, &lc_small_grid, NULL, &g);
  ck_assert_msg(st == HM_ERR_REFUSED && strstr(hm_errmsg(), "5.1.3"), "%s: %s", hm_status_name(st), hm_errmsg());
  ck_assert_ptr_null(g);
  tl_free_group(L.w, 1);
  /* an index source without its select weights and no callback */
  L.cfg = tl_config("tiny", 2, 0, 0);
  tl_build_group(&L.cfg, 2, 901, HM_WPART_ATTN | HM_WPART_FFN, L.w);
  st = hm_layer_group_create(L.rt, L.w, 2, &lc_small_grid, NULL, &g);
  ck_assert_msg(st == HM_ERR_INVALID_ARG && strstr(hm_errmsg(), "SELECT"), "%s: %s", hm_status_name(st), hm_errmsg());
  ck_assert_ptr_null(g);
  tl_free_group(L.w, 2);
  hm_runtime_close(L.rt);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"tiny_reuse_ratio2_tp2", tiny_reuse_ratio2_tp2}, {"tiny_reuse_ratio1_tp4", tiny_reuse_ratio1_tp4},
      {"tiny_index_sources", tiny_index_sources},       {"tiny_window_layers", tiny_window_layers},
      {"tiny_hard_cases", tiny_hard_cases},
      {"tiny_engram_index", tiny_engram_index},         {"full_dims_tp4", full_dims_tp4},
      {"full_dims_tp2", full_dims_tp2},                 {"replays_bit_identical", replays_bit_identical},
      {"replays_first_layer", replays_first_layer},     {"dead_peer_mid_k2", dead_peer_mid_k2},
      {"create_refusals", create_refusals},             {"ffn_only_interleaved", ffn_only_interleaved},
      {"chain_replays", chain_replays},                 {"full_dims_kinds", full_dims_kinds},
      {"bad_metadata_refused", bad_metadata_refused},   {"grid_shapes_under_chaos", grid_shapes_under_chaos},
  };
  return TL_SUITE("layer", tests, 1800);
}
