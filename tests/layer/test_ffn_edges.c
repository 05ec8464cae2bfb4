/* tests/layer/test_ffn_edges.c: the FFN launch where random inputs never go (issue 20): crafted
 * inputs that reach the SwiGLU clamps, the norms' epsilon, the top-k tie rules and the route's NaN
 * guard, each against the reference; and grid shapes under chaos seeds that expose missing waits. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "hm_ffn_group.h"
#include "formats.h"
#include "kernels/ffn_args.h"

static const hm_ffn_config small_grid = {.min_cus = 1, .reduced_experts = true};

/* ---------------------------------------------------------------- one step against the reference */

typedef struct edge_step {
  uint32_t tp, S;
  tl_ffn_inputs in;
  hm_tensor_set ref;
  hm_ffn_outputs out[HM_LAYER_MAX_TP];
} edge_step;

/* Inputs of S rows from seed, every input scaled by `scale` (1: as generated), and the reference. */
static void step_make(edge_step *s, const hm_layer_weights *w, uint32_t tp, uint32_t S, uint64_t seed, float scale) {
  const hm_layer_config *cfg = &w[0].cfg;
  const uint64_t D = cfg->hidden;
  memset(s, 0, sizeof *s);
  s->tp = tp, s->S = S;
  tl_ffn_inputs_make(cfg, S, tp, seed, &s->in);
  for (uint32_t r = 0; r < tp; r++) {
    char n[32];
    snprintf(n, sizeof n, "edge.part%u", r);
    hm_gen_normal(seed, n, S * D, 0.0f, 0.5f, true, s->in.parts[r]);
    for (uint64_t i = 0; i < S * D; i++) s->in.parts[r][i] *= scale; /* a power of two: still bf16 */
  }
  for (uint64_t i = 0; i < S * 4 * D; i++) s->in.res[i] *= scale;
  hm_tset_init(&s->ref);
  hm_status st = hm_ref_ffn_launch(w, tp, S, (const float *const *)s->in.parts, s->in.res, s->in.post, s->in.comb,
                                   s->in.pre, &s->ref);
  ck_assert_msg(st == HM_OK, "reference: %s", hm_errmsg());
  tl_ffn_outputs_alloc(s->out, tp, S, (uint32_t)D);
}

static void step_free(edge_step *s) {
  tl_ffn_outputs_free(s->out, s->tp);
  hm_tset_free(&s->ref);
  tl_ffn_inputs_free(&s->in);
}

static void step_run(hm_ffn_group *g, edge_step *s) {
  hm_ffn_inputs in = {.rows = s->S, .res = s->in.res, .post = s->in.post, .comb = s->in.comb, .pre = s->in.pre};
  for (uint32_t r = 0; r < s->tp; r++) in.parts[r] = s->in.parts[r];
  hm_status st = hm_ffn_group_step(g, &in, 1, s->out, NULL);
  ck_assert_msg(st == HM_OK, "%u rows: %s", s->S, hm_errmsg());
}

/* The seam bit-exact (the agent runs it in the reference's order with the same libm calls), the
 * route's experts exactly (crafted ties are exact ties: no tolerance here, unlike test_ffn.c's
 * near-ties of random logits), and the MoE output within test_ffn.c's budget (matrix-instruction
 * sums rounded once vs the reference's one by one: rel L2 < 1e-2, cosine > 0.9999). */
static void step_expect(hm_runtime *rt, hm_ffn_group *g, const edge_step *s, const hm_layer_config *cfg) {
  const uint32_t S = s->S, D = cfg->hidden, K = cfg->topk;
  const hm_ffn_outputs *o = &s->out[0];
  ck_assert_uint_eq(tl_count_diff(o->res, tl_f32(&s->ref, "out.res"), (uint64_t)S * 4 * D), 0);
  ck_assert_uint_eq(tl_count_diff(o->post, tl_f32(&s->ref, "out.post"), (uint64_t)S * 4), 0);
  ck_assert_uint_eq(tl_count_diff(o->comb, tl_f32(&s->ref, "out.comb"), (uint64_t)S * 16), 0);
  ck_assert_uint_eq(tl_count_diff(o->pre, tl_f32(&s->ref, "out.pre"), (uint64_t)S * 4), 0);
  hm_ffn *f = hm_ffn_group_rank(g, 0);
  struct hm_ffn_scratch_layout L;
  const uint8_t *dev = hm_ffn_scratch(f, S, &L);
  ck_assert_ptr_nonnull(dev);
  uint8_t *scr = tl_fetch(rt, hm_agent_get(rt, 0), dev, L.bytes);
  const uint64_t *ids = (const uint64_t *)(scr + L.ids);
  const int32_t *rids = tl_i32(&s->ref, "router.ids");
  for (uint32_t i = 0; i < S * K; i++)
    ck_assert_msg((int32_t)(uint32_t)ids[i] == rids[i], "token %u pick %u: expert %d, the reference chose %d", i / K,
                  i % K, (int32_t)(uint32_t)ids[i], rids[i]);
  free(scr);
  const uint64_t n = (uint64_t)S * D;
  const float *ref = tl_f32(&s->ref, "out.x");
  double rel = tl_rel_l2(o->x, ref, n), cos = tl_cosine(o->x, ref, n);
  ck_assert_msg(rel < 1e-2 && cos > 0.9999, "MoE output vs reference: rel L2 %.3g, cosine %.8f", rel, cos);
  for (uint32_t r = 1; r < s->tp; r++) ck_assert(memcmp(s->out[r].x, o->x, n * 4) == 0);
}

/* A group over w (tp ranks), steps of `rows` from seed, each checked; inputs scaled by scale. */
static void run_steps(const hm_layer_weights *w, uint32_t tp, const uint32_t *rows, uint32_t nrows, uint64_t seed,
                      float scale, const hm_ffn_config *fc) {
  hm_runtime *rt = tl_open_sim();
  hm_ffn_group *g;
  hm_status st = hm_ffn_group_create(rt, w, tp, fc, &g);
  ck_assert_msg(st == HM_OK, "group: %s", hm_errmsg());
  for (uint32_t i = 0; i < nrows; i++) {
    edge_step s;
    step_make(&s, w, tp, rows[i], seed + i, scale);
    step_run(g, &s);
    step_expect(rt, g, &s, &w[0].cfg);
    step_free(&s);
  }
  hm_ffn_group_destroy(g);
  hm_runtime_close(rt);
}

/* ---------------------------------------------------------------- the edges */

/* Multiply tensor `name` of every rank by a power of two (exact in bf16 and f32). */
static void scale_tensor(hm_layer_weights *w, uint32_t tp, const char *name, float f) {
  for (uint32_t r = 0; r < tp; r++) {
    hm_tensor *t = (hm_tensor *)hm_weights_get(&w[r], name);
    ck_assert_ptr_nonnull(t);
    uint64_t n = hm_tensor_numel(t);
    if (t->dtype == HM_DT_BF16) {
      uint16_t *v = t->data;
      for (uint64_t i = 0; i < n; i++) v[i] = fmt_bf16_from_f32(fmt_bf16_to_f32(v[i]) * f);
    } else {
      ck_assert_int_eq(t->dtype, HM_DT_F32);
      float *v = t->data;
      for (uint64_t i = 0; i < n; i++) v[i] *= f;
    }
  }
}

/* The SwiGLU clamps (shared and routed: min(g, L), clamp(u, +-L), L = 10, the only limit the
 * launch takes, §5.2.4): the FFN norm's gain times 64 puts most gate and up values past 10. The
 * reference with no clamp (L = 1e30) must differ, else the clamp was not reached and the test
 * proves nothing. */
START_TEST(swiglu_clamps_reached) {
  hm_layer_config c = tl_config("tiny", 3, 16, 2), open = c;
  open.swiglu_limit = 1e30f;
  hm_layer_weights w[2], wo[2];
  tl_build_group(&c, 2, 610, HM_WPART_FFN, w);
  tl_build_group(&open, 2, 610, HM_WPART_FFN, wo);
  scale_tensor(w, 2, "ffn_norm", 64.0f);
  scale_tensor(wo, 2, "ffn_norm", 64.0f);
  edge_step s, so;
  step_make(&s, w, 2, 3, 611, 1.0f);
  step_make(&so, wo, 2, 3, 611, 1.0f);
  ck_assert_msg(tl_count_diff(tl_f32(&s.ref, "out.x"), tl_f32(&so.ref, "out.x"), 3ull * c.hidden) > 3ull * c.hidden / 2,
                "the clamp changes too little: not reached");
  step_free(&s), step_free(&so);
  tl_free_group(wo, 2);
  const uint32_t rows[] = {1, 3};
  run_steps(w, 2, rows, 2, 611, 1.0f, &small_grid);
  tl_free_group(w, 2);
}
END_TEST

/* The norms' epsilon (rms_norm_eps 1e-20 in the seam's and the mixes' rsqrt): inputs scaled by
 * 2^-36 make the mean square ~1e-22, so the epsilon is most of it. The reference with a quarter of
 * the epsilon must differ (proof that it matters); the launch must match the reference bit for bit
 * in the seam. */
START_TEST(norm_epsilon_matters) {
  hm_layer_config c = tl_config("tiny", 3, 16, 2);
  const float scale = 0x1p-36f;
  hm_layer_weights w[2], w4[2];
  tl_build_group(&c, 2, 620, HM_WPART_FFN, w);
  hm_layer_config c4 = c;
  c4.eps = c.eps / 4.0f;
  tl_build_group(&c4, 2, 620, HM_WPART_FFN, w4);
  edge_step s, s4;
  step_make(&s, w, 2, 2, 621, scale);
  step_make(&s4, w4, 2, 2, 621, scale);
  ck_assert_msg(tl_count_diff(tl_f32(&s.ref, "out.res"), tl_f32(&s4.ref, "out.res"), 2ull * 4 * c.hidden) > 0 ||
                    tl_count_diff(tl_f32(&s.ref, "out.x"), tl_f32(&s4.ref, "out.x"), 2ull * c.hidden) > 0,
                "epsilon / 4 changes nothing at scale 2^-36: the test does not reach it");
  step_free(&s), step_free(&s4);
  tl_free_group(w4, 2);
  const uint32_t rows[] = {2};
  run_steps(w, 2, rows, 1, 621, scale, &small_grid);
  tl_free_group(w, 2);
}
END_TEST

/* Gate row b := row a and bias b := bias a: experts a and b tie exactly for every token. */
static void tie(hm_layer_weights *w, uint32_t tp, uint32_t a, uint32_t b, float bias) {
  for (uint32_t r = 0; r < tp; r++) {
    hm_tensor *g = (hm_tensor *)hm_weights_get(&w[r], "gate_w"), *bs = (hm_tensor *)hm_weights_get(&w[r], "bias");
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(bs);
    const size_t row = g->nbytes / g->shape[0];
    memcpy((uint8_t *)g->data + b * row, (uint8_t *)g->data + a * row, row);
    ((float *)bs->data)[a] = ((float *)bs->data)[b] = bias;
  }
}

/* The top-k tie rule (larger val first; equal vals by lane = expert % 64, then expert / 64): with
 * 128 experts, 3 and 67 share lane 3 (3 first), 66 (lane 2) and 5 (lane 5) tie below them (66
 * first). Large biases put all four on top of every token's picks, so the first four picks are
 * known exactly; and expert 10's bias is NaN: the route's guard makes it -inf, never picked. */
START_TEST(topk_ties_and_nan_bias) {
  hm_layer_config c = tl_config("tiny", 3, 128, 6);
  hm_layer_weights w[2];
  tl_build_group(&c, 2, 630, HM_WPART_FFN, w);
  tie(w, 2, 3, 67, 40.0f);
  tie(w, 2, 5, 66, 30.0f);
  for (uint32_t r = 0; r < 2; r++) ((float *)((hm_tensor *)hm_weights_get(&w[r], "bias"))->data)[10] = NAN;
  edge_step s;
  step_make(&s, w, 2, 4, 631, 1.0f);
  const int32_t *rids = tl_i32(&s.ref, "router.ids"), want[4] = {3, 67, 66, 5};
  for (uint32_t t = 0; t < 4; t++) {
    for (uint32_t j = 0; j < 4; j++)
      ck_assert_msg(rids[t * 6 + j] == want[j], "reference, token %u pick %u: %d", t, j, rids[t * 6 + j]);
    for (uint32_t j = 0; j < 6; j++) ck_assert_int_ne(rids[t * 6 + j], 10);
  }
  step_free(&s);
  const uint32_t rows[] = {4};
  run_steps(w, 2, rows, 1, 631, 1.0f, &small_grid);
  tl_free_group(w, 2);
}
END_TEST

/* NaN scores: gate rows 1..15 of 16 experts all NaN (a corrupt row of a checkpoint), so 15
 * experts score NaN and only expert 0 is finite. A NaN's biased value becomes -inf, so the second
 * of the two picks is the first -inf by the tie rule (expert 1), and its weight must be 0 (the
 * router's NaN guard), not NaN: a NaN weight would make every pick's normalised weight NaN and
 * the token's output NaN. The reference picks and weighs the same (ref_moe.c). */
START_TEST(nan_scores_weigh_zero) {
  hm_layer_config c = tl_config("tiny", 3, 16, 2);
  hm_layer_weights w[2];
  tl_build_group(&c, 2, 660, HM_WPART_FFN, w);
  for (uint32_t r = 0; r < 2; r++) {
    hm_tensor *g = (hm_tensor *)hm_weights_get(&w[r], "gate_w");
    ck_assert_ptr_nonnull(g);
    const uint64_t cols = hm_tensor_numel(g) / g->shape[0];
    for (uint64_t e = 1; e < 16; e++)
      for (uint64_t i = 0; i < cols; i++) {
        if (g->dtype == HM_DT_BF16) ((uint16_t *)g->data)[e * cols + i] = 0x7fc0;
        else ((float *)g->data)[e * cols + i] = NAN;
      }
  }
  edge_step s;
  step_make(&s, w, 2, 3, 661, 1.0f);
  const int32_t *rids = tl_i32(&s.ref, "router.ids");
  for (uint32_t t = 0; t < 3; t++)
    ck_assert_msg(rids[t * 2] == 0 && rids[t * 2 + 1] == 1, "reference, token %u: picks %d %d", t, rids[t * 2],
                  rids[t * 2 + 1]);
  const float *x = tl_f32(&s.ref, "out.x");
  for (uint64_t i = 0; i < 3ull * c.hidden; i++) ck_assert_msg(isfinite(x[i]), "reference out.x[%llu] = %g", (unsigned long long)i, x[i]);
  step_free(&s);
  const uint32_t rows[] = {3};
  run_steps(w, 2, rows, 1, 661, 1.0f, &small_grid);
  tl_free_group(w, 2);
}
END_TEST

/* ---------------------------------------------------------------- grid shapes under chaos */

/* Producers and consumers of every hand-off on different CTAs: odd small grids, the suite's whole one
 * (8 CUs) and one of 16 on agents of 16 CUs, each under several chaos seeds (the laggard CTA,
 * hsa/sim/cta.c, publishes as late as it can). Two picks a token from 16 experts at one row make 4
 * shared tasks and 8 routed units (of 32 columns): on 16 CTAs the shared tasks' CTAs run no routed
 * unit after them, so no later release of theirs publishes a store left after their flag (fault 06),
 * and a down projection that skipped its wait on the shared expert reads the last step's
 * activations (fault 09); on 8 CTAs every CTA now runs a unit after its shared task. A laggard in
 * every dispatch (HSAMONO_SIM_LAGGARD=1). */
START_TEST(grid_shapes_under_chaos) {
  hm_layer_config c = tl_config("tiny", 3, 16, 2);
  hm_layer_weights w[2];
  tl_build_group(&c, 2, 640, HM_WPART_FFN, w);
  const char *seeds[] = {"3", "7", "11", "19"};
  const uint32_t grids[] = {3, 5, 8, 16}, rows[] = {1, 3, 1};
  const char *cus = getenv("HSAMONO_SIM_CUS");
  char cus_was[16];
  snprintf(cus_was, sizeof cus_was, "%s", cus ? cus : "");
  setenv("HSAMONO_SIM_WEAK", "1", 1);
  setenv("HSAMONO_SIM_LAGGARD", "1", 1); /* a laggard in every dispatch */
  for (uint32_t k = 0; k < 4; k++) {
    setenv("HSAMONO_SIM_CHAOS", seeds[k], 1);
    for (uint32_t i = 0; i < 4; i++) {
      hm_ffn_config fc = small_grid;
      fc.ctas = grids[i];
      if (grids[i] > 8) setenv("HSAMONO_SIM_CUS", "16", 1);
      run_steps(w, 2, rows, grids[i] > 8 ? 1 : 3, 650 + 10 * k + i, 1.0f, &fc);
      if (cus_was[0]) setenv("HSAMONO_SIM_CUS", cus_was, 1);
      else unsetenv("HSAMONO_SIM_CUS");
    }
  }
  unsetenv("HSAMONO_SIM_CHAOS");
  unsetenv("HSAMONO_SIM_LAGGARD");
  tl_free_group(w, 2);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"swiglu_clamps_reached", swiglu_clamps_reached},
      {"norm_epsilon_matters", norm_epsilon_matters},
      {"topk_ties_and_nan_bias", topk_ties_and_nan_bias},
      {"nan_scores_weigh_zero", nan_scores_weigh_zero},
      {"grid_shapes_under_chaos", grid_shapes_under_chaos},
  };
  return TL_SUITE("ffn_edges", tests, 1800);
}
