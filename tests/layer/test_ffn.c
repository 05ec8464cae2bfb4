/* tests/layer/test_ffn.c: the FFN launch (issue 7) on the software agent against the fp32
 * reference, stage by stage and whole: TP 2 and 4, rows 1..48, the draft variant, replays, refusals. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats.h"
#include "helpers.h"
#include "hm_ffn_group.h"
#include "hm_trace.h"
#include "kernels/ffn_args.h"

/* ---------------------------------------------------------------- a case: weights, inputs, reference */

typedef struct ffn_case {
  hm_layer_config cfg;
  uint32_t tp, S;
  uint64_t seed;
  const hm_layer_weights *w; /* the group's (tp of them) */
  tl_ffn_inputs in;
  hm_tensor_set ref;
} ffn_case;

/* A step of S rows on the group's weights w: inputs from `seed`, and the reference's trace. */
static void case_make(ffn_case *c, const hm_layer_weights *w, uint32_t tp, uint32_t S, uint64_t seed) {
  const hm_layer_config *cfg = &w[0].cfg;
  memset(c, 0, sizeof *c);
  c->cfg = *cfg, c->tp = tp, c->S = S, c->seed = seed, c->w = w;
  tl_ffn_inputs_make(cfg, S, tp, seed, &c->in);
  /* every rank's own wo_b part (std 0.5, bf16), so the reduce really adds tp terms */
  for (uint32_t r = 0; r < tp; r++) {
    char n[32];
    snprintf(n, sizeof n, "test.part%u", r);
    hm_gen_normal(seed, n, (uint64_t)S * cfg->hidden, 0.0f, 0.5f, true, c->in.parts[r]);
  }
  hm_tset_init(&c->ref);
  hm_status st = hm_ref_ffn_launch(c->w, tp, S, (const float *const *)c->in.parts, c->in.res, c->in.post, c->in.comb,
                                   c->in.pre, &c->ref);
  ck_assert_msg(st == HM_OK, "reference: %s", hm_errmsg());
}

static void case_free(ffn_case *c) {
  hm_tset_free(&c->ref);
  tl_ffn_inputs_free(&c->in);
}

static hm_ffn_inputs case_inputs(const ffn_case *c) {
  hm_ffn_inputs in = {.rows = c->S, .res = c->in.res, .post = c->in.post, .comb = c->in.comb, .pre = c->in.pre};
  for (uint32_t r = 0; r < c->tp; r++) in.parts[r] = c->in.parts[r];
  return in;
}

typedef struct outs {
  hm_ffn_outputs o[4];
} outs;

static void outs_alloc(outs *o, uint32_t tp, uint32_t S, uint32_t D) { tl_ffn_outputs_alloc(o->o, tp, S, D); }
static void outs_free(outs *o, uint32_t tp) { tl_ffn_outputs_free(o->o, tp); }

static const hm_ffn_config small_grid = {.min_cus = 1, .reduced_experts = true};

/* ---------------------------------------------------------------- comparisons */

/* The seam (reduce, fold, mixes, gate, collapse, norm) runs on the software agent in the
 * reference's own order with the same libm calls (dev_exp2 = exp2f, dev_rsq = 1/sqrtf, IEEE
 * divisions), so its outputs are bit-identical there. (On a GPU, v_exp/v_rcp/v_rsq are ~1 ulp
 * off; hsa-mono-check ffn applies tolerances for that.) */
static void expect_seam_exact(const ffn_case *c, const hm_ffn_outputs *o) {
  const uint32_t S = c->S, D = c->cfg.hidden;
  ck_assert_uint_eq(tl_count_diff(o->res, tl_f32(&c->ref, "out.res"), (uint64_t)S * 4 * D), 0);
  ck_assert_uint_eq(tl_count_diff(o->post, tl_f32(&c->ref, "out.post"), (uint64_t)S * 4), 0);
  ck_assert_uint_eq(tl_count_diff(o->comb, tl_f32(&c->ref, "out.comb"), (uint64_t)S * 16), 0);
  ck_assert_uint_eq(tl_count_diff(o->pre, tl_f32(&c->ref, "out.pre"), (uint64_t)S * 4), 0);
}

/* The MoE output against the reference. The matrix instructions differ from the reference's
 * model of them: the agent sums each instruction's products exactly and rounds once (hsa/sim/isa),
 * the reference adds them one by one in f32. That moves GEMV results by a few f32 ulps, which
 * now and then flips a bf16 rounding (g, u, mid, the shared output) or an e4m3 rounding (MID,
 * SMQ) of one element: such an element moves by one step of that format (2^-8 relative for bf16,
 * 2^-3 for e4m3), and it enters an output as one of ~I + Sh terms. Budget: the output's relative
 * L2 error under 1e-2 (a flipped e4m3 step in a few of the ~10^3 terms of a sum is ~1e-3), its
 * cosine above 0.9999, and at least 90 % of the elements bit-identical. */
static void expect_moe_close(const ffn_case *c, const float *x) {
  const uint64_t n = (uint64_t)c->S * c->cfg.hidden;
  const float *ref = tl_f32(&c->ref, "out.x");
  double rel = tl_rel_l2(x, ref, n), cos = tl_cosine(x, ref, n);
  uint64_t diff = tl_count_diff(x, ref, n);
  ck_assert_msg(rel < 1e-2 && cos > 0.9999 && diff <= n / 10,
                "MoE output vs reference: rel L2 %.3g, cosine %.8f, %llu of %llu elements differ", rel, cos,
                (unsigned long long)diff, (unsigned long long)n);
}

/* Every rank holds the same bits (the all-reduce sums in rank order on every rank). */
static void expect_ranks_identical(const outs *o, uint32_t tp, uint32_t S, uint32_t D) {
  for (uint32_t r = 1; r < tp; r++) {
    ck_assert_msg(memcmp(o->o[r].x, o->o[0].x, (size_t)S * D * 4) == 0, "rank %u's x differs from rank 0's", r);
    ck_assert(memcmp(o->o[r].res, o->o[0].res, (size_t)S * 4 * D * 4) == 0);
    ck_assert(memcmp(o->o[r].comb, o->o[0].comb, (size_t)S * 16 * 4) == 0);
  }
}

/* Stage checks from rank 0's mailboxes: the normed rows and both quantisations exactly; the
 * route exactly, except where the two best candidates for a pick are within the GEMV's rounding
 * of each other (a documented tie: DESIGN §6). */
static bool expect_stages(hm_runtime *rt, hm_ffn_group *g, const ffn_case *c, uint32_t *leans) {
  const uint32_t S = c->S, D = c->cfg.hidden, K = c->cfg.topk, E = c->cfg.experts;
  hm_ffn *f = hm_ffn_group_rank(g, 0);
  struct hm_ffn_scratch_layout L;
  const uint8_t *dev = hm_ffn_scratch(f, S, &L);
  ck_assert_ptr_nonnull(dev);
  uint8_t *scr = tl_fetch(rt, hm_agent_get(rt, 0), dev, L.bytes);
  const uint16_t *normed = (const uint16_t *)(scr + L.normed);
  const float *rn = tl_f32(&c->ref, "ffn.seam.normed");
  uint64_t bad = 0;
  for (uint64_t i = 0; i < (uint64_t)S * D; i++) bad += fmt_bf16_to_f32(normed[i]) != rn[i];
  ck_assert_msg(bad == 0, "normed: %llu values differ", (unsigned long long)bad);
  ck_assert_mem_eq(scr + L.x8r, tl_u8(&c->ref, "moe.x8r"), (size_t)S * D);
  ck_assert_mem_eq(scr + L.x8rs, tl_u8(&c->ref, "moe.x8r_s"), (size_t)S * D / 32);
  ck_assert_mem_eq(scr + L.x8, tl_u8(&c->ref, "moe.x8"), (size_t)S * D);
  ck_assert_mem_eq(scr + L.x8s, tl_u8(&c->ref, "moe.x8_s"), (size_t)S * D / 32);
  const uint64_t *ids = (const uint64_t *)(scr + L.ids), *wts = (const uint64_t *)(scr + L.wts);
  const int32_t *rids = tl_i32(&c->ref, "router.ids");
  const float *rw = tl_f32(&c->ref, "router.weights"), *lg = tl_f32(&c->ref, "router.logits");
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t j = 0; j < K; j++) {
      int32_t id = (int32_t)(uint32_t)ids[t * K + j];
      float w = fmt_float((uint32_t)wts[t * K + j]);
      if (id != rids[t * K + j]) {
        /* a tie: the reference's logits of the two experts within 1e-5 relative */
        ck_assert(id >= 0 && (uint32_t)id < E);
        float a = lg[(uint64_t)t * E + (uint32_t)id], b = lg[(uint64_t)t * E + (uint32_t)rids[t * K + j]];
        ck_assert_msg(fabsf(a - b) <= 1e-5f * fmaxf(fabsf(a), fabsf(b)),
                      "token %u pick %u: expert %d, the reference chose %d (logits %.9g vs %.9g)", t, j, id,
                      rids[t * K + j], a, b);
        continue;
      }
      /* the weights follow the logits: a few f32 ulps apart */
      ck_assert_msg(fabsf(w - rw[t * K + j]) <= 1e-5f * fabsf(rw[t * K + j]) + 1e-7f,
                    "token %u pick %u: weight %.9g, reference %.9g", t, j, w, rw[t * K + j]);
    }
  bool split = tl_expect_ug_halves(scr, &L, &c->ref, 0, &c->cfg, c->tp, S, hm_ffn_grid(f));
  /* with the timeline on, which CTA ran which gate/up and down tasks (slots as ffn.cl stamps them) */
  hm_timeline tl;
  if (hm_ffn_timeline(f, &tl) == HM_OK) {
    ck_assert_msg(hm_timeline_check(&tl) == HM_OK, "%s", hm_errmsg());
    *leans += tl_expect_ffn_placement(&tl, &c->cfg, &c->w[0].dims, false, S, tl_slot_tiles(scr, &L, &c->cfg, S), 9);
  }
  free(scr);
  return split;
}

/* Steps of each of rows[] against the reference on a group made with `fc`; returns how many of them
 * split the gate/up units in halves (tl_expect_ug_halves), and in *leans (with fc's timeline on) how
 * many placed them leanly (tl_expect_ffn_placement). */
static uint32_t run_and_check_on(const hm_layer_config *cfg, uint32_t tp, const uint32_t *rows, uint32_t nrows,
                                 uint64_t seed, const hm_ffn_config *fc, uint32_t *leans) {
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[4];
  tl_build_group(cfg, tp, seed, HM_WPART_FFN, w);
  hm_ffn_group *g;
  uint32_t splits = 0;
  *leans = 0;
  hm_status st = hm_ffn_group_create(rt, w, tp, fc, &g);
  ck_assert_msg(st == HM_OK, "group: %s", hm_errmsg());
  for (uint32_t i = 0; i < nrows; i++) {
    ffn_case c;
    case_make(&c, w, tp, rows[i], seed + i);
    hm_ffn_inputs in = case_inputs(&c);
    outs o;
    outs_alloc(&o, tp, c.S, cfg->hidden);
    st = hm_ffn_group_step(g, &in, 1, o.o, NULL);
    ck_assert_msg(st == HM_OK, "%u rows: %s", c.S, hm_errmsg());
    expect_ranks_identical(&o, tp, c.S, cfg->hidden);
    expect_seam_exact(&c, &o.o[0]);
    splits += expect_stages(rt, g, &c, leans);
    expect_moe_close(&c, o.o[0].x);
    outs_free(&o, tp);
    case_free(&c);
  }
  hm_ffn_group_destroy(g);
  tl_free_group(w, tp);
  hm_runtime_close(rt);
  return splits;
}
static uint32_t run_and_check(const hm_layer_config *cfg, uint32_t tp, const uint32_t *rows, uint32_t nrows,
                              uint64_t seed) {
  uint32_t leans;
  return run_and_check_on(cfg, tp, rows, nrows, seed, &small_grid, &leans);
}

/* ---------------------------------------------------------------- the tests */

START_TEST(tiny_tp2_rows) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t rows[] = {1, 2, 7, 16, 48};
  run_and_check(&c, 2, rows, 5, 1000);
}
END_TEST

START_TEST(tiny_tp4_rows) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t rows[] = {1, 7, 48};
  run_and_check(&c, 4, rows, 3, 2000);
}
END_TEST

/* The gate/up units in halves (device/ffn/routed.h ffn_ug_task: when the grid has a CTA for every
 * half): 16 experts top-2 at TP 4 (two groups a slot tile), one row on the 8-CTA grid is 2 x 2 units,
 * 8 halves, and split; five rows are at least 5 slot tiles, 10 units, and not. The even halves'
 * activations are checked in UGV, and the launch's output against the reference either way. */
START_TEST(ug_halves_tp4) {
  hm_layer_config c = tl_config("tiny", 3, 16, 2);
  const uint32_t rows[] = {1, 5, 1};
  ck_assert_uint_eq(run_and_check(&c, 4, rows, 3, 2500), 2);
}
END_TEST

/* The software agent's CU count for the runtimes opened until sim_cus_restore (a grid wider than the
 * suite's 8 CUs): the variable's value before, in was. */
static void sim_cus_set(const char *cus, char was[16]) {
  const char *v = getenv("HSAMONO_SIM_CUS");
  snprintf(was, 16, "%s", v ? v : "");
  setenv("HSAMONO_SIM_CUS", cus, 1);
}
static void sim_cus_restore(const char was[16]) {
  if (was[0]) setenv("HSAMONO_SIM_CUS", was, 1);
  else unsetenv("HSAMONO_SIM_CUS");
}

/* The lean placement of the gate/up units (device/ffn/routed.h ffn_ug_place): tiny at TP 2 on 61
 * CTAs has 64 down tasks, so 3 CTAs run one more, and 8 shared half-tasks; 16 rows touching 50 slot
 * tiles make 200 units (3 rounds and some), and a down task (50 tiles of 16 w2 rows of 64 bytes, 53
 * KB) outweighs a unit (32 KB): those 11 CTAs run a unit fewer. Checked against the reference,
 * and the placement against the timeline's counts; one row (6 tiles, fewer units than CTAs) stays
 * round the grid. */
START_TEST(lean_placement_tp2) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t rows[] = {16, 1, 16};
  hm_ffn_config fc = small_grid;
  fc.ctas = 61, fc.timeline = true;
  char cus_was[16];
  sim_cus_set("64", cus_was);
  uint32_t leans;
  run_and_check_on(&c, 2, rows, 3, 2700, &fc, &leans);
  sim_cus_restore(cus_was);
  /* the 16-row steps: seed 2702's 50 tiles are lean; 2700's 43 (172 units, 111 past the first round,
   * more than twice W = 50) stay round the grid, checked as that */
  ck_assert_uint_eq(leans, 1);
}
END_TEST

/* One traced step of layer cfg at TP tp on `ctas` CTAs with the timeline on, checked against the
 * reference: its trace (hm_trace_free), rank 0's down tasks a CTA (down[cta], from the timeline) and
 * the step's slot tiles. */
enum { TRACED_SHARED_SLOT = 7, TRACED_UG_SLOT = 9, TRACED_DOWN_SLOT = 10 }; /* ffn.cl's stamps */
static hm_trace traced_step_of(hm_layer_config cfg, uint32_t tp, uint32_t S, uint64_t seed, uint32_t ctas,
                               uint32_t *down, uint32_t *tiles) {
  hm_ffn_config fc = small_grid;
  fc.ctas = ctas, fc.timeline = true;
  char cus_was[16];
  sim_cus_set("64", cus_was);
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[4];
  ck_assert_uint_le(tp, 4);
  tl_build_group(&cfg, tp, seed, HM_WPART_FFN, w);
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, w, tp, &fc, &g) == HM_OK, "%s", hm_errmsg());
  ffn_case c;
  case_make(&c, w, tp, S, seed);
  hm_ffn_inputs in = case_inputs(&c);
  outs o;
  outs_alloc(&o, tp, S, cfg.hidden);
  hm_trace t;
  ck_assert_int_eq(hm_runtime_trace_begin(rt), HM_OK);
  ck_assert_msg(hm_ffn_group_step(g, &in, 1, o.o, NULL) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(hm_runtime_trace_end(rt, &t) == HM_OK, "%s", hm_errmsg());
  expect_moe_close(&c, o.o[0].x);
  hm_ffn *f = hm_ffn_group_rank(g, 0);
  struct hm_ffn_scratch_layout L;
  const uint8_t *dev = hm_ffn_scratch(f, S, &L);
  uint8_t *scr = tl_fetch(rt, hm_agent_get(rt, 0), dev, L.bytes);
  *tiles = tl_slot_tiles(scr, &L, &cfg, S);
  free(scr);
  hm_timeline tl;
  ck_assert_msg(hm_ffn_timeline(f, &tl) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(hm_timeline_check(&tl) == HM_OK, "%s", hm_errmsg());
  for (uint32_t k = 0; k < ctas; k++) down[k] = hm_timeline_tasks(&tl, k, TRACED_DOWN_SLOT);
  outs_free(&o, tp);
  case_free(&c);
  hm_ffn_group_destroy(g);
  tl_free_group(w, tp);
  hm_runtime_close(rt);
  sim_cus_restore(cus_was);
  return t;
}
/* Rank 0's records of stage `slot` in t, at most max of them, into out; how many. */
static uint32_t rank0_stages(const hm_trace *t, uint32_t slot, const hm_trace_stage **out, uint32_t max) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < t->nstages && n < max; i++)
    if (t->stages[i].agent == 0 && t->stages[i].slot == slot) out[n++] = &t->stages[i];
  return n;
}

/* The tiny layer's (layer 3) at TP 2. */
static hm_trace traced_step(uint32_t S, uint64_t seed, uint32_t ctas, uint32_t *down, uint32_t *tiles) {
  return traced_step_of(tl_config("tiny", 3, 0, 0), 2, S, seed, ctas, down, tiles);
}

/* A CTA's two down tasks run as a pair (device/ffn/routed.h ffn_down_task): each round of slot tiles
 * streams for both before the next round's wait, so the second task's weights no longer all load
 * after the first's last wait. The software agent's trace shows where in a stage its weights load
 * (hm_trace_stage.weight_level_bytes: by the waits passed before them). Tiny layer, TP 2, 61 CTAs: 64
 * down tasks, so three CTAs run two; two rows, 11 or 12 slot tiles, so two rounds, whose units (4 a
 * tile, one a CTA) run on different CTAs: the second round's wait is a new one. Paired, a CTA's loads
 * after its last wait are the second round of both tasks (4 of 12 tiles each); one task after the
 * other, they are the first's second round and the whole second task, more than half the stage's. */
START_TEST(down_pairs_tp2) {
  enum { CTAS = 61 };
  uint32_t down[CTAS], tiles;
  hm_trace t = traced_step(2, 2800, CTAS, down, &tiles);
  ck_assert_msg(tiles > 8 && tiles <= 12, "%u slot tiles: the case wants two rounds of one unit a CTA", tiles);
  const hm_trace_stage *stages[CTAS];
  const uint32_t seen = rank0_stages(&t, TRACED_DOWN_SLOT, stages, CTAS);
  uint32_t pairs = 0;
  for (uint32_t i = 0; i < seen; i++) {
    const hm_trace_stage *st = stages[i];
    uint32_t top = HM_TRACE_LEVELS - 1;
    while (top && !st->weight_level_bytes[top]) top--;
    pairs += down[st->cta] == 2;
    ck_assert_msg(2 * st->weight_level_bytes[top] <= st->weight_bytes,
                  "CTA %u (%u down tasks): %llu of its %llu weight bytes load after its last wait (level %u)", st->cta,
                  down[st->cta], (unsigned long long)st->weight_level_bytes[top],
                  (unsigned long long)st->weight_bytes, top);
  }
  ck_assert_uint_eq(seen, CTAS);
  ck_assert_uint_eq(pairs, 3);
  hm_trace_free(&t);
}
END_TEST

/* The down stage's pairs land past the gate/up halves, then on half 0's CTAs, never on a half 1's
 * (device/ffn/routed.h ffn_ug_task: half h of unit u is task h x units + u). A half 1 finishes last
 * (it waits for its half 0's activations), and a pair after it streams both tasks after the step's
 * last unit. Tiny layer, TP 2, one row: 24 units, 48 halves on 50 CTAs, 64 down tasks from the CTA
 * after the last half, so 14 pairs: 2 past the halves, 12 on halves. The half 1 CTAs are those whose
 * gate/up stage waited on another's (the trace's waits); none may run two down tasks. With the
 * halves interleaved (task 2u + h), 6 of the 12 would. */
START_TEST(down_pairs_after_halves_tp2) {
  enum { CTAS = 50 };
  uint32_t down[CTAS], tiles;
  hm_trace t = traced_step(1, 2900, CTAS, down, &tiles);
  ck_assert_uint_eq(tiles, 6);
  bool odd[CTAS] = {false};
  uint32_t nodd = 0, pairs = 0;
  for (uint32_t i = 0; i < t.nwaits; i++) {
    const hm_trace_wait *w = &t.waits[i];
    if (w->agent == 0 && w->w_agent == 0 && w->slot == TRACED_UG_SLOT && w->w_slot == TRACED_UG_SLOT && !odd[w->cta])
      odd[w->cta] = true, nodd++;
  }
  ck_assert_uint_eq(nodd, 24);
  for (uint32_t k = 0; k < CTAS; k++) {
    pairs += down[k] == 2;
    ck_assert_msg(!(odd[k] && down[k] == 2), "CTA %u ran a half 1 and then two down tasks", k);
  }
  ck_assert_uint_eq(pairs, 14);
  hm_trace_free(&t);
}
END_TEST

/* A shared half-task loads all of its K steps before its wait on the norm (device/ffn/shared.h
 * FFN_SHARED_PRE), so its stream runs under the norm: at V4.1-Flash's D 5120 a wave's five steps.
 * The trace puts a stage's weight lines at level 0 when they were loaded before any wait. Full
 * dimensions (32 experts), TP 4, one row: 36 half-tasks on 61 CTAs, one a CTA (a CTA's second task
 * would load after its first's wait). With one step before the wait, 4 of a wave's 5 load after it. */
START_TEST(shared_preload_full_dims_tp4) {
  enum { CTAS = 61 };
  uint32_t down[CTAS], tiles;
  hm_trace t = traced_step_of(tl_config("v41-flash", 3, 32, 6), 4, 1, 4100, CTAS, down, &tiles);
  const hm_trace_stage *stages[CTAS];
  const uint32_t n = rank0_stages(&t, TRACED_SHARED_SLOT, stages, CTAS);
  uint32_t shared = 0;
  for (uint32_t i = 0; i < n; i++) {
    const hm_trace_stage *st = stages[i];
    if (!st->weight_bytes) continue;
    shared++;
    ck_assert_msg(st->weight_level_bytes[0] == st->weight_bytes,
                  "CTA %u's shared half-task: %llu of its %llu weight bytes load before its wait", st->cta,
                  (unsigned long long)st->weight_level_bytes[0], (unsigned long long)st->weight_bytes);
  }
  ck_assert_uint_eq(shared, 36);
  hm_trace_free(&t);
}
END_TEST

/* The draft layers' variant: 32 experts (128 at full size) top-3, one FP4 group a gate/up unit. */
START_TEST(tiny_draft_tp2) {
  hm_layer_config c = tl_config("tiny", 40, 0, 0);
  ck_assert(hm_config_is_draft(&c));
  ck_assert_uint_eq(c.topk, 3);
  const uint32_t rows[] = {2, 16};
  run_and_check(&c, 2, rows, 2, 3000);
}
END_TEST

/* One full-size layer of DeepSeek-V4.1-Flash (hidden 5120, routed and shared intermediate 2304,
 * so a TP4 rank's 576 padded to 640) with the expert count cut to 32 (top-6) so the weights and
 * the software agent's time fit a test: every tile shape of the real layer, fewer experts. */
START_TEST(full_dims_tp4) {
  hm_layer_config c = tl_config("v41-flash", 3, 32, 6);
  const uint32_t rows[] = {2};
  run_and_check(&c, 4, rows, 1, 4000);
}
END_TEST

/* The same layer at TP2 (a rank's intermediate 1152, its gate/up parts twice TP4's), one row. */
START_TEST(full_dims_tp2) {
  hm_layer_config c = tl_config("v41-flash", 3, 32, 6);
  const uint32_t rows[] = {1};
  run_and_check(&c, 2, rows, 1, 4500);
}
END_TEST

/* Replays whose inputs change every step. SETS input sets (each rank's wo_b part, the residual, the
 * mixes) are each run once as a step and checked against the reference there; those outputs are
 * the set's expected bits. Then one step a rank is recorded on device buffers the test owns (the
 * fixed addresses of a captured graph) and replayed with the sets in a pseudo-random order that
 * never runs a set twice in a row: before a replay the set's inputs are written into the buffers,
 * after it every rank's outputs must be that set's bits, and the launch's tag (2e + 2, the value of
 * its mailbox flags) one epoch past the launch before. A launch that reused an epoch, or took a
 * mailbox value or a peer's push of the step before, hands on the previous set's values and fails
 * here; with one set replayed over and over it would not. Launches in all as before: 200 (50 under
 * chaos, where the agent is several times slower); the thousand replays run in test_layer.c, of
 * a whole layer (K2 runs these stages). */
enum { SETS = 4 };

/* One rank's recorded steps (a chain of `n` launches on its queue), each on buffers of its own. */
enum { REC_MAX = 3 };
typedef struct rec_rank {
  hm_queue *q;
  hm_chain *c;
  uint32_t n;
  hm_ffn_io io[REC_MAX];
  tl_stage st;
  void *dev[REC_MAX][10];
} rec_rank;

static void rec_create(hm_runtime *rt, hm_ffn *f, hm_agent *a, uint32_t S, uint32_t D, uint32_t n, rec_rank *k) {
  memset(k, 0, sizeof *k);
  ck_assert_uint_le(n, REC_MAX);
  k->n = n;
  const size_t bytes[10] = {(size_t)S * D * 2, (size_t)S * 4 * D * 2, S * 16u, S * 64u, S * 16u,
                            (size_t)S * D * 2, (size_t)S * 4 * D * 2, S * 16u, S * 64u, S * 16u};
  tl_stage_init(&k->st, rt, a, (size_t)S * 4 * D * 4);
  ck_assert_int_eq(hm_queue_create(a, 64, &k->q), HM_OK);
  ck_assert_int_eq(hm_chain_create(k->q, &k->c), HM_OK);
  for (uint32_t j = 0; j < n; j++) {
    void **b = k->dev[j];
    for (int i = 0; i < 10; i++) b[i] = tl_dev_alloc(a, bytes[i]);
    k->io[j] = (hm_ffn_io){.rows = S, .part = b[0], .res_in = b[1], .post_in = b[2], .comb_in = b[3], .pre_in = b[4],
                           .out = b[5], .res_out = b[6], .post_out = b[7], .comb_out = b[8], .pre_out = b[9]};
    ck_assert_msg(hm_ffn_record(f, k->c, &k->io[j]) == HM_OK, "record: %s", hm_errmsg());
  }
}

static void rec_destroy(hm_runtime *rt, rec_rank *k) {
  hm_chain_destroy(k->c);
  hm_queue_destroy(k->q);
  tl_stage_free(&k->st);
  for (uint32_t j = 0; j < k->n; j++)
    for (int i = 0; i < 10; i++) hm_mem_free(rt, k->dev[j][i]);
}

/* set c's inputs of rank r into the buffers of recorded step j */
static void rec_upload(rec_rank *k, uint32_t j, const ffn_case *c, uint32_t r) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  const hm_ffn_io *io = &k->io[j];
  tl_put_bf16(&k->st, (void *)io->part, c->in.parts[r], S * D);
  tl_put_bf16(&k->st, (void *)io->res_in, c->in.res, S * 4 * D);
  tl_put(&k->st, (void *)io->post_in, c->in.post, S * 16);
  tl_put(&k->st, (void *)io->comb_in, c->in.comb, S * 64);
  tl_put(&k->st, (void *)io->pre_in, c->in.pre, S * 16);
}

/* recorded step j's outputs into o */
static void rec_download(rec_rank *k, uint32_t j, uint32_t S, uint32_t D, hm_ffn_outputs *o) {
  const hm_ffn_io *io = &k->io[j];
  tl_get_bf16(&k->st, o->x, io->out, (uint64_t)S * D);
  tl_get_bf16(&k->st, o->res, io->res_out, (uint64_t)S * 4 * D);
  tl_get(&k->st, o->post, io->post_out, S * 16);
  tl_get(&k->st, o->comb, io->comb_out, S * 64);
  tl_get(&k->st, o->pre, io->pre_out, S * 16);
}

/* the tag of rank r's last launch (its mailbox flags carry 2e + 2) */
static uint32_t rec_tag(hm_ffn_group *g, uint32_t r, rec_rank *k, uint32_t S) {
  struct hm_ffn_scratch_layout L;
  const uint8_t *scr = hm_ffn_scratch(hm_ffn_group_rank(g, r), S, &L);
  ck_assert_ptr_nonnull(scr);
  return tl_get_u32(&k->st, scr + L.xrdy);
}

static bool same_outputs(const hm_ffn_outputs *a, const hm_ffn_outputs *b, uint32_t S, uint32_t D) {
  return !memcmp(a->x, b->x, (size_t)S * D * 4) && !memcmp(a->res, b->res, (size_t)S * 4 * D * 4) &&
         !memcmp(a->post, b->post, (size_t)S * 16) && !memcmp(a->comb, b->comb, (size_t)S * 64) &&
         !memcmp(a->pre, b->pre, (size_t)S * 16);
}

/* Input sets 0..n-1 (seeds seed + k), each run once as a step of the group and checked against the
 * reference there; want[k] gets its outputs, the set's expected bits from then on. */
static void sets_make(hm_runtime *rt, hm_ffn_group *g, const hm_layer_weights *w, uint32_t tp, uint32_t S,
                      uint64_t seed, uint32_t n, ffn_case *c, outs *want) {
  const uint32_t D = w[0].cfg.hidden;
  for (uint32_t k = 0; k < n; k++) {
    case_make(&c[k], w, tp, S, seed + k);
    hm_ffn_inputs in = case_inputs(&c[k]);
    outs_alloc(&want[k], tp, S, D);
    ck_assert_msg(hm_ffn_group_step(g, &in, 1, want[k].o, NULL) == HM_OK, "%s", hm_errmsg());
    expect_ranks_identical(&want[k], tp, S, D);
    expect_seam_exact(&c[k], &want[k].o[0]);
    expect_stages(rt, g, &c[k], &(uint32_t){0});
    expect_moe_close(&c[k], want[k].o[0].x);
    for (uint32_t j = 0; j < k; j++)
      ck_assert_msg(!same_outputs(&want[j].o[0], &want[k].o[0], S, D), "sets %u and %u give the same outputs", j, k);
  }
}

/* Rank r's outputs q of step j of replay n, which ran set k, are set k's bits (and if another set's,
 * the message says whose: a value of another step handed on). */
static void expect_set(const hm_ffn_outputs *q, const outs *want, uint32_t sets, uint32_t k, uint32_t r, uint32_t S,
                       uint32_t D, uint32_t n, uint32_t j) {
  if (same_outputs(q, &want[k].o[r], S, D)) return;
  int other = -1;
  for (uint32_t i = 0; i < sets; i++)
    if (i != k && same_outputs(q, &want[i].o[r], S, D)) other = (int)i;
  if (other >= 0)
    ck_abort_msg("replay %u step %u (set %u), rank %u: the outputs are set %d's, not this set's", n, j, k, r, other);
  ck_abort_msg("replay %u step %u (set %u), rank %u: the outputs differ from every set's", n, j, k, r);
}

START_TEST(replays_bit_identical) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  const uint32_t TP = 2, S = 1, D = cfg.hidden;
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[2];
  tl_build_group(&cfg, TP, 5000, HM_WPART_FFN, w);
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, w, TP, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  ffn_case c[SETS];
  outs want[SETS], o;
  sets_make(rt, g, w, TP, S, 5000, SETS, c, want);
  outs_alloc(&o, TP, S, D);
  /* the tag of a rank's last launch (its mailbox flags carry 2e + 2): the epoch buffer starts at 0
   * and each of the SETS steps advanced it by one */
  rec_rank rec[2];
  uint32_t tag[2];
  for (uint32_t r = 0; r < TP; r++) {
    rec_create(rt, hm_ffn_group_rank(g, r), hm_agent_get(rt, r), S, D, 1, &rec[r]);
    tag[r] = rec_tag(g, r, &rec[r], S);
    ck_assert_msg(tag[r] == 2 * (SETS - 1) + 2, "rank %u: tag %u after %u steps from epoch 0", r, tag[r], SETS);
  }
  const char *chaos = getenv("HSAMONO_SIM_CHAOS");
  const uint32_t replays = (chaos && *chaos ? 50 : 200) - SETS;
  uint32_t order[200];
  tl_replay_order(SETS, SETS - 1, 5099, replays, order);
  for (uint32_t n = 0; n < replays; n++) {
    const uint32_t k = order[n];
    for (uint32_t r = 0; r < TP; r++) rec_upload(&rec[r], 0, &c[k], r);
    /* every rank's chain in flight at once: the launches all-reduce with each other */
    for (uint32_t r = 0; r < TP; r++) ck_assert_int_eq(hm_chain_replay(rec[r].c), HM_OK);
    for (uint32_t r = 0; r < TP; r++) {
      hm_ffn *f = hm_ffn_group_rank(g, r);
      ck_assert_msg(hm_chain_wait(rec[r].c, 600000000000ull) == HM_OK && hm_ffn_status(f) == HM_OK,
                    "replay %u, rank %u: %s", n, r, hm_errmsg());
      uint32_t t = rec_tag(g, r, &rec[r], S);
      ck_assert_msg(t == tag[r] + 2, "replay %u, rank %u: tag %u after %u: the epoch did not advance by one", n, r, t,
                    tag[r]);
      tag[r] = t;
      hm_ffn_outputs *q = &o.o[r];
      rec_download(&rec[r], 0, S, D, q);
      expect_set(q, want, SETS, k, r, S, D, n, 0);
    }
  }
  for (uint32_t r = 0; r < TP; r++) rec_destroy(rt, &rec[r]);
  for (uint32_t k = 0; k < SETS; k++) outs_free(&want[k], TP), case_free(&c[k]);
  outs_free(&o, TP);
  hm_ffn_group_destroy(g);
  tl_free_group(w, TP);
  hm_runtime_close(rt);
}
END_TEST

/* The FFN launch with one rank a step behind (HSAMONO_SIM_LAG_RANK, hsa/sim/cta.c): having pushed,
 * the lagging rank reads its inbox only once its peers have run as far as they can. Each rank
 * records three launches into one chain, each on its own buffers, so its queue runs them back to
 * back: within a step the peers push their MoE output while the lagging rank has yet to read their
 * attention output, and across steps they push the next step's wo_b parts while it has yet to read
 * this step's MoE output. The three input sets rotate over the steps from replay to replay (a step
 * never has its own last inputs, nor the step before's), every step's outputs must be its set's
 * bits on every rank, and each replay advances every rank's tag by three epochs. TP 2 (rank 1
 * lagging, a chaos seed) and TP 4 (rank 2 lagging, no chaos; in ffn-chaos both take its seed). */
static void lagging_rank_at(uint32_t tp, uint32_t lag, const char *chaos, const hm_layer_weights *w, uint64_t seed) {
  enum { LSETS = 3, LSTEPS = 3, LREPLAYS = 2 };
  const uint32_t S = 2, D = w[0].cfg.hidden;
  char v[16];
  snprintf(v, sizeof v, "%u", lag);
  setenv("HSAMONO_SIM_LAG_RANK", v, 1);
  if (chaos) setenv("HSAMONO_SIM_CHAOS", chaos, 1);
  else unsetenv("HSAMONO_SIM_CHAOS");
  hm_runtime *rt = tl_open_sim();
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, w, tp, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  ffn_case c[LSETS];
  outs want[LSETS], o;
  sets_make(rt, g, w, tp, S, seed, LSETS, c, want);
  outs_alloc(&o, tp, S, D);
  rec_rank rec[4];
  uint32_t tag[4];
  for (uint32_t r = 0; r < tp; r++) {
    rec_create(rt, hm_ffn_group_rank(g, r), hm_agent_get(rt, r), S, D, LSTEPS, &rec[r]);
    tag[r] = rec_tag(g, r, &rec[r], S);
  }
  for (uint32_t n = 0; n < LREPLAYS; n++) {
    for (uint32_t r = 0; r < tp; r++)
      for (uint32_t j = 0; j < LSTEPS; j++) rec_upload(&rec[r], j, &c[(j + n + 1) % LSETS], r);
    for (uint32_t r = 0; r < tp; r++) ck_assert_int_eq(hm_chain_replay(rec[r].c), HM_OK);
    for (uint32_t r = 0; r < tp; r++) {
      hm_ffn *f = hm_ffn_group_rank(g, r);
      ck_assert_msg(hm_chain_wait(rec[r].c, 600000000000ull) == HM_OK && hm_ffn_status(f) == HM_OK,
                    "TP %u, rank %u lagging, chaos %s: replay %u, rank %u: %s", tp, lag, chaos ? chaos : "off", n, r,
                    hm_errmsg());
      uint32_t t = rec_tag(g, r, &rec[r], S);
      ck_assert_msg(t == tag[r] + 2 * LSTEPS, "replay %u, rank %u: tag %u after %u: not %u epochs on", n, r, t, tag[r],
                    LSTEPS);
      tag[r] = t;
      for (uint32_t j = 0; j < LSTEPS; j++) {
        rec_download(&rec[r], j, S, D, &o.o[r]);
        expect_set(&o.o[r], want, LSETS, (j + n + 1) % LSETS, r, S, D, n, j);
      }
    }
  }
  for (uint32_t r = 0; r < tp; r++) rec_destroy(rt, &rec[r]);
  for (uint32_t k = 0; k < LSETS; k++) outs_free(&want[k], tp), case_free(&c[k]);
  outs_free(&o, tp);
  hm_ffn_group_destroy(g);
  hm_runtime_close(rt);
  unsetenv("HSAMONO_SIM_LAG_RANK");
  unsetenv("HSAMONO_SIM_CHAOS");
}

START_TEST(lagging_rank_steps) {
  /* the ffn-chaos suite's seed where it runs, so the two suites do not run the same schedule */
  char seed[32] = "";
  const char *suite = getenv("HSAMONO_SIM_CHAOS");
  if (suite) snprintf(seed, sizeof seed, "%s", suite);
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[4];
  tl_build_group(&cfg, 2, 7000, HM_WPART_FFN, w);
  lagging_rank_at(2, 1, seed[0] ? seed : "3", w, 7100);
  tl_free_group(w, 2);
  tl_build_group(&cfg, 4, 7300, HM_WPART_FFN, w);
  lagging_rank_at(4, 2, seed[0] ? seed : NULL, w, 7400);
  tl_free_group(w, 4);
}
END_TEST

/* A rank whose peer never runs its step ends it with HM_ERR_PEER naming that peer, within its
 * bound (no hang: every stage still completes, with the failure recorded), a later step is
 * refused at once, and the group tears down cleanly. */
START_TEST(dead_peer_is_an_error) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[2];
  tl_build_group(&cfg, 2, 6000, HM_WPART_FFN, w);
  hm_ffn_config fc = small_grid;
  fc.peer_timeout_ns = 2000000000ull;
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, w, 2, &fc, &g) == HM_OK, "%s", hm_errmsg());
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const uint32_t D = cfg.hidden;
  void *buf[10];
  const size_t bytes[10] = {2 * D, 8 * D, 16, 64, 16, 2 * D, 8 * D, 16, 64, 16};
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, bytes[i], 0, &buf[i]), HM_OK);
    ck_assert_int_eq(hm_mem_fill(rt, buf[i], 0, bytes[i] / 4), HM_OK);
  }
  hm_ffn_io io = {.rows = 1, .part = buf[0], .res_in = buf[1], .post_in = buf[2], .comb_in = buf[3],
                  .pre_in = buf[4], .out = buf[5], .res_out = buf[6], .post_out = buf[7], .comb_out = buf[8],
                  .pre_out = buf[9]};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  hm_status st = hm_layer_ffn(hm_ffn_group_rank(g, 0), q, &io); /* rank 1 never runs */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  ck_assert_msg(st == HM_ERR_PEER && strstr(hm_errmsg(), "rank 1"), "%s: %s", hm_status_name(st), hm_errmsg());
  /* the bound is 2 s from the launch's start; the agent's own time on top is a few seconds */
  ck_assert_msg(s >= 1.9 && s < 15.0, "the step ended after %.2f s", s);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(hm_layer_ffn(hm_ffn_group_rank(g, 0), q, &io), HM_ERR_PEER);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ck_assert(t1.tv_sec - t0.tv_sec < 2);
  hm_ffn_group_destroy(g);
  tl_free_group(w, 2);
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- refusals and bad input */

/* A one-rank heap on agent 0 (enough for hm_ffn_create's checks, which come first). */
static hm_heap *heap_of(hm_runtime *rt, unsigned tp, unsigned rank) {
  hm_boot_group *bg;
  ck_assert_int_eq(hm_boot_group_create(tp, &bg), HM_OK);
  hm_bootstrap b;
  ck_assert_int_eq(hm_bootstrap_threads(bg, &b), HM_OK);
  hm_heap_config hc = {.rank = rank, .tp = tp};
  hm_heap *h;
  ck_assert_msg(hm_heap_create(hm_agent_get(rt, 0), &hc, &b, &h) == HM_OK, "%s", hm_errmsg());
  hm_bootstrap_release(&b);
  hm_boot_group_destroy(bg);
  return h;
}

static void expect_refused(hm_status st, const char *rule) {
  ck_assert_msg(st == HM_ERR_REFUSED, "expected a refusal (%s), got %s: %s", rule, hm_status_name(st), hm_errmsg());
  ck_assert_msg(strstr(hm_errmsg(), rule), "the refusal does not name %s: %s", rule, hm_errmsg());
}

START_TEST(create_refusals) {
  hm_runtime *rt = tl_open_sim();
  hm_heap *h1 = heap_of(rt, 1, 0);
  hm_layer_config tiny = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w = {.cfg = tiny, .parts = HM_WPART_FFN};
  ck_assert_int_eq(hm_rank_dims_for(&tiny, 1, &w.dims), HM_OK);
  hm_ffn *f = NULL;
  /* §5.1.3: TP 1 */
  expect_refused(hm_ffn_create(h1, &w, &small_grid, &f), "§5.1.3");
  ck_assert_ptr_null(f);
  /* §5.1.6: the software agent's 8 CUs against the default 256 */
  ck_assert_int_eq(hm_rank_dims_for(&tiny, 2, &w.dims), HM_OK);
  expect_refused(hm_ffn_create(h1, &w, NULL, &f), "§5.1.6");
  hm_heap_destroy(h1);
  hm_runtime_close(rt);
}
END_TEST

START_TEST(create_refusals_tp2) {
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[2];
  hm_layer_config tiny = tl_config("tiny", 3, 0, 0);
  tl_build_group(&tiny, 2, 9, HM_WPART_FFN, w);
  /* a TP2 group on two threads, so hm_ffn_create gets past the heap */
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, w, 2, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  hm_heap *h = hm_ffn_group_heap(g, 0);
  hm_ffn *f = NULL;
  /* §5.2.4: DeepSeek-V4.1's routing, unless the build says its experts are reduced */
  hm_layer_weights v = {.parts = HM_WPART_FFN, .rank = 0};
  v.cfg = tl_config("v41-flash", 3, 32, 6);
  ck_assert_int_eq(hm_rank_dims_for(&v.cfg, 2, &v.dims), HM_OK);
  hm_ffn_config strict = small_grid;
  strict.reduced_experts = false;
  expect_refused(hm_ffn_create(h, &v, &strict, &f), "§5.2.4");
  v.cfg.route_scale = 2.0f;
  expect_refused(hm_ffn_create(h, &v, &small_grid, &f), "§5.2.4");
  /* a weight of the wrong shape: one line naming it, nothing created */
  hm_tensor *t = hm_tset_find(&w[0].set, "w2_s");
  ck_assert_ptr_nonnull(t);
  t->shape[1] -= 8;
  hm_status st = hm_ffn_create(h, &w[0], &small_grid, &f);
  ck_assert_int_eq(st, HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "w2_s") && !strchr(hm_errmsg(), '\n'), "%s", hm_errmsg());
  ck_assert_ptr_null(f);
  t->shape[1] += 8;
  /* weights built as gfx942 copies (spec §4.4) are refused, not read as gfx950 layouts */
  w[0].arch = HM_ARCH_GFX942;
  st = hm_ffn_create(h, &w[0], &small_grid, &f);
  ck_assert_int_eq(st, HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "gfx942 copies") && !strchr(hm_errmsg(), '\n'), "%s", hm_errmsg());
  ck_assert_ptr_null(f);
  w[0].arch = HM_ARCH_GFX950;
  /* steps outside the launch's scope are refusals the caller falls back on */
  hm_ffn *r0 = hm_ffn_group_rank(g, 0);
  hm_ffn_io io = {.rows = 7};
  /* one buffer of rank 0's agent with room for the widest tensor of 7 rows (res, 7 x 4 x D bf16) */
  char *dummy = tl_dev_alloc(hm_heap_agent(hm_ffn_group_heap(g, 0)), 7 * 4 * 1024 * 2);
  io.part = io.res_in = io.post_in = io.comb_in = io.pre_in = (const float *)dummy;
  io.out = io.res_out = io.post_out = io.comb_out = io.pre_out = (float *)dummy;
  ck_assert_int_eq(hm_ffn_accepts(r0, &io), HM_OK);
  io.rows = 49;
  expect_refused(hm_ffn_accepts(r0, &io), "§5.3.1");
  io.rows = 0;
  expect_refused(hm_ffn_accepts(r0, &io), "§5.3.1");
  io.rows = 7, io.prefills = 2;
  expect_refused(hm_ffn_accepts(r0, &io), "§5.3.4");
  io.prefills = 0, io.res_out = NULL;
  ck_assert_int_eq(hm_ffn_accepts(r0, &io), HM_ERR_INVALID_ARG);
  ck_assert(strstr(hm_errmsg(), "res_out"));
  io.res_out = (char *)dummy + 2;
  ck_assert_int_eq(hm_ffn_accepts(r0, &io), HM_ERR_INVALID_ARG);
  hm_ffn_group_destroy(g);
  tl_free_group(w, 2);
  hm_runtime_close(rt);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"create_refusals", create_refusals},
      {"create_refusals_tp2", create_refusals_tp2}, {"tiny_tp2_rows", tiny_tp2_rows},
      {"tiny_tp4_rows", tiny_tp4_rows},       {"ug_halves_tp4", ug_halves_tp4},
      {"lean_placement_tp2", lean_placement_tp2},       {"down_pairs_tp2", down_pairs_tp2},
      {"down_pairs_after_halves_tp2", down_pairs_after_halves_tp2},
      {"shared_preload_full_dims_tp4", shared_preload_full_dims_tp4},
      {"tiny_draft_tp2", tiny_draft_tp2},
      {"replays_bit_identical", replays_bit_identical}, {"lagging_rank_steps", lagging_rank_steps},
      {"full_dims_tp4", full_dims_tp4},
      {"full_dims_tp2", full_dims_tp2},
      {"dead_peer_is_an_error", dead_peer_is_an_error},
  };
  return TL_SUITE("ffn", tests, 1800);
}
