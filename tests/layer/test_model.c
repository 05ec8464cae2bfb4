/* tests/layer/test_model.c: the software agent's trace of a launch and the timing model that replays it
 * (issue 15 items 2 and 3): the model's laws on traces made here, and a real launch's trace. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "hm_ffn_group.h"
#include "hm_model.h"
#include "hm_trace.h"

#define TP 2u
#define ROWS 7u
#define GRID 8u

/* A trace made here: `n` stages and `m` waits, one launch a agent of `ctas` CTAs. */
static hm_trace made(hm_trace_stage *st, uint32_t n, hm_trace_wait *w, uint32_t m, hm_trace_launch *l, uint32_t nl) {
  hm_trace t = {.launches = l, .nlaunches = nl, .stages = st, .nstages = n, .waits = w, .nwaits = m};
  return t;
}

static double path_sum(const hm_model_result *r) {
  double s = 0;
  for (uint32_t i = 0; i < r->npath; i++) s += r->path[i].s;
  return s;
}

/* A launch that only streams weights, spread evenly over a part's whole grid (one CTA a CU, one stage
 * each): the model's time is the weight bytes at the part's HBM bandwidth plus one load latency (the
 * first bytes' wait, which no stream hides), on both parts; and as the bytes grow its ratio to the
 * floor goes to 1. Relative tolerance 1e-9: the sums are of a few hundred doubles. */
START_TEST(weights_only_at_floor) {
  const char *ids[] = {"mi355x", "mi300x"};
  for (int k = 0; k < 2; k++) {
    const hm_part *p = hm_part_find(ids[k]);
    ck_assert_ptr_nonnull(p);
    const uint32_t G = p->cus;
    const uint64_t per = 1u << 20; /* bytes a CTA: 256 MB over MI355X's grid */
    hm_trace_stage *st = calloc(G, sizeof *st);
    ck_assert_ptr_nonnull(st);
    for (uint32_t c = 0; c < G; c++)
      st[c] = (hm_trace_stage){.cta = c, .slot = 0, .weight_bytes = per, .weight_level_bytes = {per}};
    hm_trace_launch l = {.agent = 0, .launch = 0, .ctas = G, .kernel = "stream"};
    hm_trace t = made(st, G, NULL, 0, &l, 1);
    hm_model_result r;
    char err[200];
    ck_assert_msg(hm_model_run(&t, p, &r, err, sizeof err) == 0, "%s", err);
    const double floor = (double)per * G / p->hbm_bw;
    ck_assert_uint_eq(r.weight_bytes, per * G);
    ck_assert_msg(fabs(r.floor_s - floor) <= 1e-9 * floor, "floor %g, want %g", r.floor_s, floor);
    ck_assert_msg(fabs(r.total_s - (floor + p->load_lat_s)) <= 1e-9 * floor, "%s: %g s, want the floor %g + %g",
                  p->name, r.total_s, floor, p->load_lat_s);
    ck_assert_msg(r.total_s / r.floor_s < 1.02, "%s: %.3f x the floor", p->name, r.total_s / r.floor_s);
    hm_model_result_free(&r);
    free(st);
  }
}
END_TEST

/* A chain of N hand-offs: CTA k's stage waits on CTA k-1's and none of them loads, stores or multiplies
 * anything, so the launch takes N x the hand-off latency: device-scope within an agent, system-scope
 * when the chain alternates between two agents; the critical path is the chain, every wait on it. */
START_TEST(handoff_chain) {
  const hm_part *p = hm_part_find("mi355x");
  enum { N = 9 };
  for (int sys = 0; sys < 2; sys++) {
    hm_trace_stage st[N + 1];
    hm_trace_wait w[N];
    hm_trace_launch l[2] = {{.agent = 0, .ctas = N + 1}, {.agent = 1, .ctas = N + 1}};
    memset(st, 0, sizeof st);
    for (uint32_t k = 0; k <= N; k++) st[k] = (hm_trace_stage){.agent = sys ? k % 2 : 0, .cta = k};
    for (uint32_t k = 1; k <= N; k++)
      w[k - 1] = (hm_trace_wait){.agent = st[k].agent, .cta = k, .w_agent = st[k - 1].agent, .w_cta = k - 1, .words = 1};
    /* the trace's order: (agent, launch, cta, slot), waits likewise */
    hm_trace_stage so[N + 1];
    hm_trace_wait wo[N];
    uint32_t ns = 0, nw = 0;
    for (uint32_t a = 0; a < 2; a++)
      for (uint32_t k = 0; k <= N; k++)
        if (st[k].agent == a) {
          so[ns++] = st[k];
          if (k) wo[nw++] = w[k - 1];
        }
    hm_trace t = made(so, ns, wo, nw, l, 2);
    hm_model_result r;
    char err[200];
    ck_assert_msg(hm_model_run(&t, p, &r, err, sizeof err) == 0, "%s", err);
    const double lat = sys ? p->sys_handoff_s : p->dev_handoff_s;
    ck_assert_msg(fabs(r.total_s - N * lat) <= 1e-12, "%s chain: %g s, want %d x %g", sys ? "system" : "device",
                  r.total_s, N, lat);
    uint32_t waits = 0;
    for (uint32_t i = 0; i < r.npath; i++) waits += r.path[i].kind == HM_SEG_WAIT;
    ck_assert_uint_eq(waits, N);
    ck_assert_msg(fabs(path_sum(&r) - r.total_s) <= 1e-15, "path %g, total %g", path_sum(&r), r.total_s);
    hm_model_result_free(&r);
  }
}
END_TEST

/* One traced step of the FFN launch (tiny layer 3, TP 2, 7 rows, 8 CTAs a rank), after a warm-up step,
 * its all-reduces in protocol `proto`. */
static hm_trace trace_ffn_step_as(hm_ar_protocol proto) {
  hm_runtime *rt = tl_open_sim();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[TP];
  tl_build_group(&cfg, TP, 41, HM_WPART_FFN, w);
  tl_ffn_inputs in;
  tl_ffn_inputs_make(&cfg, ROWS, TP, 41, &in);
  hm_ffn_inputs fi = {.rows = ROWS, .res = in.res, .post = in.post, .comb = in.comb, .pre = in.pre};
  for (uint32_t r = 0; r < TP; r++) fi.parts[r] = in.parts[r];
  hm_ffn_config fc = {.min_cus = 1, .reduced_experts = true, .ar_protocol = proto};
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, w, TP, &fc, &g) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(hm_ffn_group_step(g, &fi, 1, NULL, NULL) == HM_OK, "%s", hm_errmsg());
  hm_trace t;
  ck_assert_int_eq(hm_runtime_trace_begin(rt), HM_OK);
  ck_assert_msg(hm_ffn_group_step(g, &fi, 1, NULL, NULL) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(hm_runtime_trace_end(rt, &t) == HM_OK, "%s", hm_errmsg());
  /* a step after the trace ended is not recorded, nor is one before it began */
  ck_assert_msg(hm_ffn_group_step(g, &fi, 1, NULL, NULL) == HM_OK, "%s", hm_errmsg());
  hm_ffn_group_destroy(g);
  tl_ffn_inputs_free(&in);
  tl_free_group(w, TP);
  hm_runtime_close(rt);
  return t;
}
static hm_trace trace_ffn_step(void) { return trace_ffn_step_as(HM_AR_PROTOCOL_DEFAULT); }

/* What the trace must hold for the FFN launch: one launch a rank of the grid, every CTA's 12 stages
 * (prologue, push, the 10 FFN stages) and a tail where it did something after its last stamp; weights loaded, pushes to the peer over system scope,
 * matrix instructions, device-scope waits and system-scope ones (the slice reads the peer's pushes). */
static void expect_ffn_trace(const hm_trace *t) {
  ck_assert_uint_eq(t->nlaunches, TP);
  for (uint32_t a = 0; a < TP; a++) {
    ck_assert_uint_eq(t->launches[a].agent, a);
    ck_assert_uint_eq(t->launches[a].launch, 0);
    ck_assert_uint_eq(t->launches[a].ctas, GRID);
  }
  uint64_t weights = 0, peer = 0, mfma = 0;
  uint32_t stamped = 0, leveled = 0;
  for (uint32_t i = 0; i < t->nstages; i++) {
    ck_assert_uint_le(t->stages[i].slot, 12);
    stamped += t->stages[i].slot < 12;
    weights += t->stages[i].weight_bytes, peer += t->stages[i].peer_store_bytes;
    for (int k = 0; k < HM_TRACE_MFMA_KINDS; k++) mfma += t->stages[i].mfma[k];
    uint64_t sum = 0;
    for (uint32_t k = 0; k < HM_TRACE_LEVELS; k++) sum += t->stages[i].weight_level_bytes[k];
    ck_assert_uint_eq(sum, t->stages[i].weight_bytes);
    leveled += t->stages[i].weight_level_bytes[0] < t->stages[i].weight_bytes;
  }
  /* some stage loads weights after a wait: the GEMVs' loads after their first wait on activations */
  ck_assert_uint_gt(leveled, 0);
  ck_assert_uint_eq(stamped, TP * GRID * 12);
  ck_assert_uint_gt(weights, 0);
  ck_assert_uint_gt(peer, 0);
  ck_assert_uint_gt(mfma, 0);
  uint32_t dev = 0, sys = 0, later = 0;
  for (uint32_t i = 0; i < t->nwaits; i++) {
    const hm_trace_wait *w = &t->waits[i];
    ck_assert_uint_lt(w->level, HM_TRACE_LEVELS);
    later += w->level > 0;
    ck_assert(!(w->agent == w->w_agent && w->cta == w->w_cta)); /* a CTA does not wait on itself */
    ck_assert_uint_gt(w->words, 0);
    if (w->agent == w->w_agent) dev++;
    else sys++;
  }
  ck_assert_uint_gt(dev, 0);
  ck_assert_uint_gt(sys, 0);
  ck_assert_uint_gt(later, 0); /* a stage that waits twice (the down projection: its activations, then the shared) */
}

static void expect_same_trace(const hm_trace *a, const hm_trace *b, const char *what) {
  ck_assert_msg(a->nlaunches == b->nlaunches && a->nstages == b->nstages && a->nwaits == b->nwaits,
                "%s: %u/%u/%u records, first run %u/%u/%u", what, b->nlaunches, b->nstages, b->nwaits, a->nlaunches,
                a->nstages, a->nwaits);
  ck_assert_msg(!memcmp(a->launches, b->launches, a->nlaunches * sizeof *a->launches), "%s: launches differ", what);
  for (uint32_t i = 0; i < a->nstages; i++)
    ck_assert_msg(!memcmp(&a->stages[i], &b->stages[i], sizeof a->stages[i]),
                  "%s: stage record %u (rank %u CTA %u slot %u) differs: weights %llu/%llu pre %llu/%llu handoff "
                  "%llu/%llu",
                  what, i, a->stages[i].agent, a->stages[i].cta, a->stages[i].slot,
                  (unsigned long long)a->stages[i].weight_bytes, (unsigned long long)b->stages[i].weight_bytes,
                  (unsigned long long)a->stages[i].weight_level_bytes[0],
                  (unsigned long long)b->stages[i].weight_level_bytes[0],
                  (unsigned long long)a->stages[i].handoff_bytes, (unsigned long long)b->stages[i].handoff_bytes);
  ck_assert_msg(!memcmp(a->waits, b->waits, a->nwaits * sizeof *a->waits), "%s: waits differ", what);
}

/* The FFN launch's trace records what happened, not when: the same records, byte for byte, in two runs
 * and under two chaos seeds (random CTA start order, yields and delays, a laggard CTA), all under the
 * weak memory model; and the model's total is its critical path's sum. */
START_TEST(trace_deterministic) {
  const char *seeds[] = {NULL, NULL, "3", "11"};
  hm_trace first = {0};
  for (int i = 0; i < 4; i++) {
    if (seeds[i]) setenv("HSAMONO_SIM_CHAOS", seeds[i], 1);
    else unsetenv("HSAMONO_SIM_CHAOS");
    hm_trace t = trace_ffn_step();
    expect_ffn_trace(&t);
    char what[64];
    snprintf(what, sizeof what, "run %d (chaos %s)", i, seeds[i] ? seeds[i] : "off");
    if (i == 0) {
      first = t;
      const hm_part *p = hm_part_find("mi355x");
      hm_model_result r;
      char err[200];
      ck_assert_msg(hm_model_run(&t, p, &r, err, sizeof err) == 0, "%s", err);
      /* the total is the sum of its path (doubles added along it: 1e-12 relative) */
      ck_assert_msg(fabs(path_sum(&r) - r.total_s) <= 1e-12 * r.total_s, "path %g, total %g", path_sum(&r), r.total_s);
      ck_assert_uint_gt(r.npath, 2);
      ck_assert_double_ge(r.total_s, r.floor_s);
      hm_model_result_free(&r);
    } else {
      expect_same_trace(&first, &t, what);
      hm_trace_free(&t);
    }
  }
  unsetenv("HSAMONO_SIM_CHAOS");
  hm_trace_free(&first);
}
END_TEST

/* The all-reduce's two protocols in the FFN launch's trace (issue 15 item 5): the word protocol stores
 * exactly half the pair protocol's bytes into the peer (the pushes are the launch's only stores to
 * another agent: 4 bytes a pair instead of 8), everything else the launch loads and multiplies is the
 * same, and the model's time is lower; the word protocol is the default. */
START_TEST(word_protocol_halves_pushes) {
  hm_trace t[2] = {trace_ffn_step_as(HM_AR_PROTOCOL_PAIR), trace_ffn_step_as(HM_AR_PROTOCOL_WORD)};
  uint64_t peer[2] = {0, 0}, weights[2] = {0, 0}, mfma[2] = {0, 0};
  double total[2];
  for (int k = 0; k < 2; k++) {
    expect_ffn_trace(&t[k]);
    for (uint32_t i = 0; i < t[k].nstages; i++) {
      peer[k] += t[k].stages[i].peer_store_bytes, weights[k] += t[k].stages[i].weight_bytes;
      for (int m = 0; m < HM_TRACE_MFMA_KINDS; m++) mfma[k] += t[k].stages[i].mfma[m];
    }
    hm_model_result r;
    char err[200];
    ck_assert_msg(hm_model_run(&t[k], hm_part_find("mi355x"), &r, err, sizeof err) == 0, "%s", err);
    total[k] = r.total_s;
    hm_model_result_free(&r);
    hm_trace_free(&t[k]);
  }
  /* the pair protocol sends 8 bytes a pair, the word protocol 4 */
  ck_assert_uint_eq(peer[0], 2 * peer[1]);
  /* word: each rank pushes both all-reduces' 7 x hidden bf16 (2 bytes each) to its one peer */
  ck_assert_uint_eq(peer[1], (uint64_t)TP * 2 * ROWS * tl_config("tiny", 3, 0, 0).hidden * 2);
  ck_assert_uint_eq(weights[0], weights[1]);
  ck_assert_uint_eq(mfma[0], mfma[1]);
  ck_assert_msg(total[1] < total[0], "word %g s, pair %g s", total[1], total[0]);
}
END_TEST

/* A stage that issues part of its weights (P of W bytes) before waiting on another CTA's stage: when the
 * wait passes before that part has streamed in, the stage is one stream from its start and pays the
 * load latency once (L + W / share, the same as a stage with no wait; the model charged L twice before:
 * L + P / share to the gate, then L + (W - P) / share); when the wait holds it past that, the loads
 * after the gate pay the latency again, and the preloaded part was hidden under the wait (gate + L +
 * (W - P) / share). The critical path sums to the total in both, with the wait on it only in the second.
 * On MI355X's whole grid (share = HBM / CUs): P 64 KB is 2.3 µs there, the hand-off 0.45 µs. */
START_TEST(preload_latency_once) {
  const hm_part *p = hm_part_find("mi355x");
  const double share = p->hbm_bw / p->cus, L = p->load_lat_s;
  const uint64_t P = 64u << 10, W = 128u << 10;
  for (int binds = 0; binds < 2; binds++) {
    /* CTA 0 writes what CTA 1 waits for: nothing to load (its end is 0) or 1 MB of weights first */
    const uint64_t w0 = binds ? 1u << 20 : 0;
    hm_trace_stage st[2] = {{.cta = 0, .weight_bytes = w0, .weight_level_bytes = {w0}},
                            {.cta = 1, .weight_bytes = W, .weight_level_bytes = {P, W - P}}};
    hm_trace_wait w = {.cta = 1, .w_cta = 0, .words = 1};
    hm_trace_launch l = {.agent = 0, .ctas = p->cus};
    hm_trace t = made(st, 2, &w, 1, &l, 1);
    hm_model_result r;
    char err[200];
    ck_assert_msg(hm_model_run(&t, p, &r, err, sizeof err) == 0, "%s", err);
    const double gate = (w0 ? L + (double)w0 / share : 0) + p->dev_handoff_s;
    ck_assert(binds ? gate > P / share : gate <= P / share); /* the case is the one it says */
    const double want = binds ? gate + L + (double)(W - P) / share : L + (double)W / share;
    ck_assert_msg(fabs(r.total_s - want) <= 1e-12 * want, "%s: %g s, want %g", binds ? "binds" : "hidden", r.total_s,
                  want);
    ck_assert_msg(fabs(path_sum(&r) - r.total_s) <= 1e-15, "path %g, total %g", path_sum(&r), r.total_s);
    ck_assert_uint_eq(r.npath, binds ? 3 : 1);
    ck_assert_uint_eq(r.path[r.npath - 1].cta, 1);
    if (binds) ck_assert_int_eq(r.path[1].kind, HM_SEG_WAIT);
    hm_model_result_free(&r);
  }
}
END_TEST

/* A stage that waits twice: CTA 2 waits for its activations (CTA 0's stage, which ends at once) before
 * it loads W bytes of weights, then for CTA 1's stage (which streams 1 MB first) before it reads H
 * bytes CTA 1 published. Its weights are at level 1 (after one wait) and the second wait is at level 1,
 * so only the hand-off read waits for CTA 1: the weights stream from the first gate. When they take
 * longer than CTA 1 (W 2 MB) the stage is that stream and the read after it; when not (W 64 KB), the
 * read pays the load latency again after CTA 1's end. A stage with one gate (its latest wait) charged
 * every weight after CTA 1's end: gate + L + (W + H) / share. On MI355X's whole grid. */
START_TEST(second_wait_gates_only_later_loads) {
  const hm_part *p = hm_part_find("mi355x");
  const double share = p->hbm_bw / p->cus, L = p->load_lat_s, lat = p->dev_handoff_s;
  const uint64_t w1 = 1u << 20, H = 4096;
  for (int hidden = 0; hidden < 2; hidden++) {
    const uint64_t W = hidden ? 2u << 20 : 64u << 10;
    hm_trace_stage st[3] = {{.cta = 0},
                            {.cta = 1, .weight_bytes = w1, .weight_level_bytes = {w1}},
                            {.cta = 2, .weight_bytes = W, .weight_level_bytes = {0, W}, .handoff_bytes = H}};
    hm_trace_wait w[2] = {{.cta = 2, .w_cta = 0, .words = 1, .level = 0}, {.cta = 2, .w_cta = 1, .words = 1, .level = 1}};
    hm_trace_launch l = {.agent = 0, .ctas = p->cus};
    hm_trace t = made(st, 3, w, 2, &l, 1);
    hm_model_result r;
    char err[200];
    ck_assert_msg(hm_model_run(&t, p, &r, err, sizeof err) == 0, "%s", err);
    const double stream = lat + L + (double)W / share, late = L + (double)w1 / share + lat;
    ck_assert(hidden ? stream > late : stream < late); /* the case is the one it says */
    const double want = hidden ? stream + (double)H / share : late + L + (double)H / share;
    ck_assert_msg(fabs(r.total_s - want) <= 1e-12 * want, "W %llu: %g s, want %g (one gate: %g)",
                  (unsigned long long)W, r.total_s, want, late + L + (double)(W + H) / share);
    ck_assert_msg(fabs(path_sum(&r) - r.total_s) <= 1e-15, "path %g, total %g", path_sum(&r), r.total_s);
    /* the path: the writer whose gate set the end (CTA 0 when the weights' stream did, else CTA 1), its
     * hand-off, CTA 2 */
    ck_assert_uint_eq(r.npath, 3);
    ck_assert_uint_eq(r.path[0].cta, hidden ? 0 : 1);
    ck_assert_int_eq(r.path[1].kind, HM_SEG_WAIT);
    ck_assert_uint_eq(r.path[2].cta, 2);
    hm_model_result_free(&r);
  }
}
END_TEST

/* A writer that stores what its reader waits for early in a long stream: CTA 0 streams W0 bytes and
 * raised its flag with R of them still to load (hm_trace_wait.w_rest, as a gate/up unit's flag before
 * the CTA's next unit); CTA 1 waits for it, then streams W1. The flag left CTA 0 at its end less R at
 * its share, so CTA 1 starts then plus the hand-off, not after CTA 0's end; with R = 0 it waits for
 * the end. The critical path still sums to the total, CTA 0's piece ending at its store. A w_rest over
 * the writer's weight bytes is a malformed trace: refused. On MI355X's whole grid. */
START_TEST(early_store_gates_early) {
  const hm_part *p = hm_part_find("mi355x");
  const double share = p->hbm_bw / p->cus, L = p->load_lat_s, lat = p->dev_handoff_s;
  const uint64_t W0 = 1u << 20, R = 768u << 10, W1 = 1u << 20;
  for (int early = 0; early < 3; early++) {
    hm_trace_stage st[2] = {{.cta = 0, .weight_bytes = W0, .weight_level_bytes = {W0}},
                            {.cta = 1, .weight_bytes = W1, .weight_level_bytes = {0, W1}}};
    hm_trace_wait w = {.cta = 1, .w_cta = 0, .words = 1, .w_rest = early == 2 ? W0 + 1 : early ? R : 0};
    hm_trace_launch l = {.agent = 0, .ctas = p->cus};
    hm_trace t = made(st, 2, &w, 1, &l, 1);
    hm_model_result r;
    char err[200];
    if (early == 2) {
      ck_assert_int_eq(hm_model_run(&t, p, &r, err, sizeof err), -1);
      ck_assert_msg(strstr(err, "more bytes than its writer loads") != NULL, "%s", err);
      continue;
    }
    ck_assert_msg(hm_model_run(&t, p, &r, err, sizeof err) == 0, "%s", err);
    const double store = L + (double)(W0 - (early ? R : 0)) / share;
    const double want = store + lat + L + (double)W1 / share;
    ck_assert_msg(fabs(r.total_s - want) <= 1e-12 * want, "w_rest %s: %g s, want %g", early ? "R" : "0", r.total_s,
                  want);
    ck_assert_msg(fabs(path_sum(&r) - r.total_s) <= 1e-15, "path %g, total %g", path_sum(&r), r.total_s);
    ck_assert_uint_eq(r.npath, 3);
    ck_assert_uint_eq(r.path[0].cta, 0);
    ck_assert_msg(fabs(r.path[0].s - store) <= 1e-12 * store, "CTA 0's piece %g, want %g", r.path[0].s, store);
    ck_assert_int_eq(r.path[1].kind, HM_SEG_WAIT);
    ck_assert_uint_eq(r.path[2].cta, 1);
    hm_model_result_free(&r);
  }
}
END_TEST

/* A stage whose weight levels do not add up to its weight bytes is a malformed trace: refused. */
START_TEST(levels_must_sum) {
  hm_trace_stage st = {.weight_bytes = 256, .weight_level_bytes = {128}};
  hm_trace_launch l = {.ctas = 1};
  hm_trace t = made(&st, 1, NULL, 0, &l, 1);
  hm_model_result r;
  char err[200];
  ck_assert_int_eq(hm_model_run(&t, hm_part_find("mi355x"), &r, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "levels") != NULL, "%s", err);
}
END_TEST

/* Tracing off (never begun): hm_runtime_trace_end hands back nothing. */
START_TEST(trace_off_records_nothing) {
  hm_runtime *rt = tl_open_sim();
  hm_trace t;
  ck_assert_int_eq(hm_runtime_trace_end(rt, &t), HM_OK);
  ck_assert_uint_eq(t.nstages + t.nwaits + t.nlaunches, 0);
  hm_trace_free(&t);
  hm_runtime_close(rt);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"weights_only_at_floor", weights_only_at_floor},
      {"handoff_chain", handoff_chain},
      {"preload_latency_once", preload_latency_once},
      {"second_wait_gates_only_later_loads", second_wait_gates_only_later_loads},
      {"early_store_gates_early", early_store_gates_early},
      {"levels_must_sum", levels_must_sum},
      {"trace_off_records_nothing", trace_off_records_nothing},
      {"trace_deterministic", trace_deterministic},
      {"word_protocol_halves_pushes", word_protocol_halves_pushes},
  };
  return TL_SUITE("model", tests, 600);
}
