/* tests/layer/test_timeline.c: the persistent launches' per-CTA timeline (issue 15) on the software
 * agent: complete, in program order and where the launch places its tasks; off by default and free. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "hm_ffn_group.h"
#include "hm_layer_group.h"
#include "kernels/ffn_args.h"

#define TP 2u
#define ROWS 7u

/* The FFN launch's stages in program order as device/ffn/launch.h places them: task count n and
 * first CTA base (task i on CTA (base + i) % grid) from the step's shape; gate_up's and down's
 * counts and placement follow the routing (n 0; tl_expect_ffn_placement). EVERY: the steps every
 * CTA runs once. */
struct stage {
  const char *name;
  uint32_t n, base;
};
#define EVERY HM_TIMELINE_EVERY
#define GATE_UP 9u /* gate_up's slot; down's is the next */

static uint32_t ffn_stages(const hm_layer_config *c, const hm_rank_dims *d, uint32_t S, struct stage *st) {
  const uint32_t NS = c->hidden / 32, tiles = (S + 15) / 16, r0 = S > 8 ? S : 8;
  const uint32_t router = c->experts / 16 * 4 * tiles, route0 = r0 + router, shared0 = route0 + (S > 8 ? S : 8);
  const uint32_t shared = d->shared_inter / 16 * tiles; /* half-tasks of 16 columns (device/ffn/shared.h) */
  const struct stage all[] = {{"start", EVERY, 0},  {"push", EVERY, 0},     {"slice", NS, 0},
                              {"gate", S, NS},      {"norm", S, NS + S},    {"router", router, r0},
                              {"route", S, route0}, {"shared", shared, shared0}, {"route_table", EVERY, 0},
                              {"gate_up", 0, 0},    {"down", 0, 0},         {"reduce", NS, 0}};
  memcpy(st, all, sizeof all);
  return sizeof all / sizeof *all;
}

/* Tasks of a stage of n placed from `base` round the grid that CTA c runs. */
static uint32_t round_robin(uint32_t n, uint32_t base, uint32_t grid, uint32_t c) {
  uint32_t ran = 0;
  for (uint32_t i = 0; i < n; i++) ran += (base + i) % grid == c;
  return ran;
}

/* One rank's timeline against the launch: every CTA stamped every slot in program order (the
 * library's check, then again here so a check that passes everything is caught), each stage's task
 * count the launch's and each CTA's share of it where the launch places it (gate/up and down from
 * the step's `tiles` slot tiles), none lost or run twice. */
static void expect_ffn_timeline(const hm_timeline *tl, const hm_layer_weights *w, uint32_t grid, uint32_t tiles) {
  struct stage st[16];
  const uint32_t n = ffn_stages(&w->cfg, &w->dims, ROWS, st);
  ck_assert_msg(hm_timeline_check(tl) == HM_OK, "%s", hm_errmsg());
  ck_assert_str_eq(tl->kernel, "ffn");
  ck_assert(tl->event_order);
  ck_assert_uint_eq(tl->hz, 0);
  ck_assert_uint_eq(tl->ctas, grid);
  ck_assert_uint_eq(tl->slots, n);
  for (uint32_t s = 0; s < n; s++) {
    ck_assert_str_eq(tl->names[s], st[s].name);
    uint32_t sum = 0;
    for (uint32_t c = 0; c < grid; c++) {
      const hm_timeline_stamp *p = &tl->stamps[(size_t)c * tl->stride + s];
      ck_assert_msg(p->t != 0, "CTA %u: %s never stamped", c, st[s].name);
      if (s) ck_assert_msg(p->t > p[-1].t, "CTA %u: %s ended at %llu, not after %s at %llu", c, st[s].name,
                           (unsigned long long)p->t, st[s - 1].name, (unsigned long long)p[-1].t);
      if (st[s].n) ck_assert_msg(p->n == st[s].n, "CTA %u %s: %u tasks, want %u", c, st[s].name, p->n, st[s].n);
      /* every CTA of a stage saw the same count (the routing's gate_up too) */
      ck_assert_uint_eq(p->n, tl->stamps[s].n);
      const uint32_t tasks = hm_timeline_tasks(tl, c, s);
      if (p->n == EVERY) ck_assert_uint_eq(p->ran, 1);
      else if (st[s].n) {
        const uint32_t want = round_robin(p->n, st[s].base, grid, c);
        ck_assert_msg(tasks == want, "CTA %u %s: %u tasks, placed %u", c, st[s].name, tasks, want);
      }
      sum += tasks;
    }
    if (st[s].n != EVERY) ck_assert_uint_eq(sum, tl->stamps[s].n);
  }
  ck_assert_uint_gt(tl->stamps[GATE_UP].n, 0); /* the step ran routed experts */
  (void)tl_expect_ffn_placement(tl, &w->cfg, &w->dims, false, ROWS, tiles, GATE_UP);
}

static void expect_same(const float *a, const float *b, uint64_t n, const char *what) {
  ck_assert_msg(memcmp(a, b, n * sizeof *a) == 0, "%s differs with the timeline on", what);
}

/* The FFN launch (tiny layer 3, TP 2, 7 rows, 8 CTAs a rank) with the timeline off, then on:
 * off, the runner has no buffer (hm_ffn_timeline refuses) and the kernel is given none; on, each
 * rank's timeline is complete and placed as the launch places its tasks, the ranks' placements
 * agree, and the outputs are the same bits as without it. */
START_TEST(ffn_timeline) {
  hm_runtime *rt = tl_open_sim();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[TP];
  tl_build_group(&cfg, TP, 41, HM_WPART_FFN, w);
  tl_ffn_inputs in;
  tl_ffn_inputs_make(&cfg, ROWS, TP, 41, &in);
  hm_ffn_inputs fi = {.rows = ROWS, .res = in.res, .post = in.post, .comb = in.comb, .pre = in.pre};
  for (uint32_t r = 0; r < TP; r++) fi.parts[r] = in.parts[r];
  hm_ffn_outputs off[TP], on[TP];
  tl_ffn_outputs_alloc(off, TP, ROWS, cfg.hidden);
  tl_ffn_outputs_alloc(on, TP, ROWS, cfg.hidden);
  hm_ffn_config fc = {.min_cus = 1, .reduced_experts = true};
  for (int pass = 0; pass < 2; pass++) {
    fc.timeline = pass == 1;
    hm_ffn_group *g;
    ck_assert_msg(hm_ffn_group_create(rt, w, TP, &fc, &g) == HM_OK, "%s", hm_errmsg());
    hm_timeline tl;
    if (pass == 1) {
      ck_assert_int_eq(hm_ffn_timeline(hm_ffn_group_rank(g, 0), &tl), HM_ERR_INVALID_ARG);
      ck_assert_ptr_nonnull(strstr(hm_errmsg(), "no step has run"));
    }
    ck_assert_msg(hm_ffn_group_step(g, &fi, 1, pass ? on : off, NULL) == HM_OK, "%s", hm_errmsg());
    for (uint32_t r = 0; r < TP; r++) {
      hm_status s = hm_ffn_timeline(hm_ffn_group_rank(g, r), &tl);
      if (pass == 0) {
        ck_assert_int_eq(s, HM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(hm_errmsg(), "without hm_ffn_config.timeline"));
        continue;
      }
      ck_assert_msg(s == HM_OK, "%s", hm_errmsg());
      struct hm_ffn_scratch_layout L;
      const uint8_t *dev = hm_ffn_scratch(hm_ffn_group_rank(g, r), ROWS, &L);
      ck_assert_ptr_nonnull(dev);
      uint8_t *scr = tl_fetch(rt, hm_agent_get(rt, r), dev, L.bytes);
      expect_ffn_timeline(&tl, &w[r], hm_ffn_grid(hm_ffn_group_rank(g, r)), tl_slot_tiles(scr, &L, &cfg, ROWS));
      free(scr);
      if (r) { /* both ranks place alike (the step's shape and routing are the group's) */
        hm_timeline t0;
        ck_assert_int_eq(hm_ffn_timeline(hm_ffn_group_rank(g, 0), &t0), HM_OK);
        for (uint32_t k = 0; k < tl.slots; k++)
          ck_assert(t0.stamps[k].n == tl.stamps[k].n && t0.stamps[k].ran == tl.stamps[k].ran);
      }
    }
    hm_ffn_group_destroy(g);
  }
  for (uint32_t r = 0; r < TP; r++) {
    expect_same(off[r].x, on[r].x, (uint64_t)ROWS * cfg.hidden, "x");
    expect_same(off[r].res, on[r].res, (uint64_t)ROWS * 4 * cfg.hidden, "res");
    expect_same(off[r].post, on[r].post, ROWS * 4, "post");
    expect_same(off[r].comb, on[r].comb, ROWS * 16, "comb");
    expect_same(off[r].pre, on[r].pre, ROWS * 4, "pre");
  }
  tl_ffn_outputs_free(off, TP);
  tl_ffn_outputs_free(on, TP);
  tl_ffn_inputs_free(&in);
  tl_free_group(w, TP);
  hm_runtime_close(rt);
}
END_TEST

/* One rank's timeline of kernel `kernel`: complete, in order, named as the kernel runs its stages,
 * every task of a stage on exactly one CTA. */
static void expect_complete(const hm_timeline *tl, const char *kernel, const char *const *names, uint32_t slots) {
  ck_assert_msg(hm_timeline_check(tl) == HM_OK, "%s", hm_errmsg());
  ck_assert_str_eq(tl->kernel, kernel);
  ck_assert_uint_eq(tl->slots, slots);
  for (uint32_t s = 0; s < slots; s++) {
    ck_assert_str_eq(tl->names[s], names[s]);
    uint32_t sum = 0;
    for (uint32_t c = 0; c < tl->ctas; c++) sum += hm_timeline_tasks(tl, c, s);
    ck_assert_uint_eq(sum, tl->stamps[s].n == EVERY ? tl->ctas : tl->stamps[s].n);
  }
}

/* A whole layer step (tiny layer 3 at TP 2, 3 rows) with the layer's run config asking for it: K1's
 * and K2's timelines on every rank, complete and in their stage order; K2's FFN stages placed as the
 * FFN launch places them, after its four attention-back stages. */
START_TEST(layer_k1_k2_timeline) {
  static const char *const k1_names[] = {"start", "seam_slice", "seam_norm", "seam_gate", "key_table", "wqkv", "qkv",
                                         "wq_b"};
  hm_runtime *rt = tl_open_sim();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  uint32_t parts = HM_WPART_ATTN | HM_WPART_FFN;
  ck_assert(!hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE));
  if (hm_config_has(&cfg, HM_ROLE_ENGRAM)) parts |= HM_WPART_ENGRAM;
  hm_layer_weights w[TP];
  tl_build_group(&cfg, TP, 43, parts, w);
  hm_gen gen;
  ck_assert_int_eq(hm_gen_init(&gen, &cfg, 43), HM_OK);
  hm_source table = hm_gen_source(&gen);
  hm_ffn_config run = {.min_cus = 1, .reduced_experts = true, .timeline = true};
  hm_layer_group *g;
  ck_assert_msg(hm_layer_group_create(rt, w, TP, &run, NULL, &g) == HM_OK, "%s", hm_errmsg());
  hm_gen_step step;
  ck_assert_int_eq(hm_gen_step_make(&cfg, 3, 1, 200, 43, &step), HM_OK);
  step.in.engram_table = &table;
  ck_assert_msg(hm_layer_group_step(g, &step.in, 1, NULL, NULL) == HM_OK, "%s", hm_errmsg());
  struct stage st[16];
  const uint32_t nffn = ffn_stages(&cfg, &w[0].dims, 3, st);
  const char *k2_names[16] = {"start", "split", "combine", "wo_a", "wo_b"};
  for (uint32_t s = 2; s < nffn; s++) k2_names[3 + s] = st[s].name; /* from the slice on: no push */
  for (uint32_t r = 0; r < TP; r++) {
    hm_layer *l = hm_layer_group_rank(g, r);
    hm_timeline k1, k2;
    ck_assert_msg(hm_k1_timeline(hm_layer_k1(l), &k1) == HM_OK, "%s", hm_errmsg());
    expect_complete(&k1, "k1", k1_names, 8);
    ck_assert_uint_eq(k1.stamps[1].n, cfg.hidden / 32); /* the seam's slices */
    ck_assert_msg(hm_ffn_timeline(hm_layer_k2(l), &k2) == HM_OK, "%s", hm_errmsg());
    expect_complete(&k2, "k2", k2_names, nffn + 3);
    for (uint32_t s = 2; s < nffn; s++)
      if (st[s].n && st[s].n != EVERY)
        for (uint32_t c = 0; c < k2.ctas; c++) {
          const hm_timeline_stamp *p = &k2.stamps[(size_t)c * k2.stride + 3 + s];
          const uint32_t want = round_robin(st[s].n, st[s].base, k2.ctas, c);
          ck_assert_msg(p->n == st[s].n && p->ran == want, "K2 CTA %u %s: %u of %u tasks, want %u of %u", c,
                        st[s].name, p->ran, p->n, want, st[s].n);
        }
  }
  hm_gen_step_free(&step);
  hm_layer_group_destroy(g);
  hm_gen_free(&gen);
  tl_free_group(w, TP);
  hm_runtime_close(rt);
}
END_TEST

/* The library's own check refuses a CTA that never stamped, stamps that go back in time, a stage's
 * tasks counted twice or not at all, CTAs that disagree on a stage's count, and a once-each step
 * not run once. */
START_TEST(check_refuses) {
  static const char *const names[] = {"start", "a", "b"};
  hm_timeline_stamp s[2 * 3] = {{1, EVERY, 1}, {2, 3, 2}, {5, 1, 0}, {3, EVERY, 1}, {4, 3, 1}, {6, 1, 1}};
  hm_timeline tl = {.kernel = "x", .ctas = 2, .slots = 3, .stride = 3, .names = names, .stamps = s};
  ck_assert_int_eq(hm_timeline_check(&tl), HM_OK);
  ck_assert_uint_eq(hm_timeline_tasks(&tl, 0, 1), 2); /* tasks 0, 2 */
  ck_assert_uint_eq(hm_timeline_tasks(&tl, 1, 1), 1);
  ck_assert_uint_eq(hm_timeline_tasks(&tl, 0, 2), 0); /* task 0 on CTA 1 */
  ck_assert_uint_eq(hm_timeline_tasks(&tl, 1, 2), 1);
  s[5].t = 0;
  ck_assert_int_eq(hm_timeline_check(&tl), HM_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "CTA 1 never stamped slot 2 (b)"));
  s[5].t = 6, s[1].t = 9;
  ck_assert_int_eq(hm_timeline_check(&tl), HM_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "CTA 0 ended b at 5, before a at 9"));
  s[1].t = 2, s[4].ran = 2; /* task counted on both CTAs */
  ck_assert_int_eq(hm_timeline_check(&tl), HM_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "the CTAs ran 4 of a's 3 tasks"));
  s[4].ran = 1, s[5].n = 2;
  ck_assert_int_eq(hm_timeline_check(&tl), HM_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "CTA 1 counts 2 tasks in b, CTA 0 1"));
  s[5].n = 1, s[3].ran = 0;
  ck_assert_int_eq(hm_timeline_check(&tl), HM_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "CTA 1 ran start 0 times, not once"));
  s[3].ran = 1;
  ck_assert_int_eq(hm_timeline_check(&tl), HM_OK);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"ffn_timeline", ffn_timeline},
      {"layer_k1_k2_timeline", layer_k1_k2_timeline},
      {"check_refuses", check_refuses},
  };
  return TL_SUITE("timeline", tests, 600);
}
