/* tests/collectives/test_allreduce.c: the peer all-reduce on the software agent: bitwise equality with the
 * CPU rank-order sum on every rank at TP 2, 4, 8, in threads and processes, on partials where the order
 * shows; 10,000 back-to-back steps; a recorded chain replayed; a stalled or killed rank is an error. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>

#include "coll_helpers.h"
#include "epoch.h"
#include "kernels/ar_args.h"

static hm_runtime *open_rt(void) {
  hm_runtime *rt = NULL;
  ck_assert_msg(hm_runtime_open(NULL, &rt) == HM_OK, "%s", hm_errmsg());
  return rt;
}

static void expect_all_ok(struct t_rank *runs, unsigned tp, unsigned failed) {
  for (unsigned r = 0; r < tp; r++) ck_assert_msg(runs[r].st == HM_OK, "%s", runs[r].err);
  ck_assert_uint_eq(failed, 0);
}

/* ---------------------------------------------------------------- threads of one process */

/* Every size from 1 x 5120 to 48 x 5120 at each TP, the rows changing from step to step (the
 * inboxes are laid out by each step's rows, nothing cleared in between); every rank's every output
 * equals the CPU's rank-order sum bit for bit (so the ranks agree with each other too). */
static void sizes_at(unsigned tp, const uint32_t *rows, unsigned nrows, hm_ar_protocol protocol) {
  hm_runtime *rt = open_rt();
  /* a generous bound: 8 ranks' 48-row steps share two cores here (a bound that passes is no claim
   * about speed; the deadline tests below use short ones) */
  struct t_rank proto = {.width = 5120, .max_rows = 48, .rows = rows, .nrows = nrows, .steps = nrows,
                         .keep_outputs = true, .timeout_ns = 200000000000ull, .protocol = protocol};
  struct t_rank runs[HM_MAX_TP];
  expect_all_ok(runs, tp, t_run_threads(rt, tp, &proto, runs));
  /* and, explicitly, the ranks' last outputs are the same bytes */
  size_t n = (size_t)rows[nrows - 1] * 5120;
  for (unsigned r = 1; r < tp; r++) ck_assert_int_eq(memcmp(runs[0].out, runs[r].out, 2 * n), 0);
  hm_runtime_close(rt);
}

START_TEST(tp2_sizes) {
  static const uint32_t rows[] = {1, 48, 2, 17, 48, 1, 5};
  sizes_at(2, rows, 7, HM_AR_PROTOCOL_DEFAULT);
}
END_TEST

START_TEST(tp4_sizes) {
  static const uint32_t rows[] = {1, 48, 3, 13};
  sizes_at(4, rows, 4, HM_AR_PROTOCOL_DEFAULT);
}
END_TEST

/* The pair protocol (device/ar.h), which the heap keeps beside the default word protocol. */
START_TEST(tp4_sizes_pair) {
  static const uint32_t rows[] = {1, 48, 3};
  sizes_at(4, rows, 3, HM_AR_PROTOCOL_PAIR);
}
END_TEST

START_TEST(tp8_sizes) {
  static const uint32_t rows[] = {1, 48, 6};
  uint64_t t0 = t_now_ns();
  sizes_at(8, rows, 3, HM_AR_PROTOCOL_DEFAULT);
  fprintf(stderr, "tp8 sizes: %.1f s\n", (t_now_ns() - t0) / 1e9);
}
END_TEST

/* 10,000 steps enqueued back to back (no host wait between them), every one with its own inputs
 * and outputs and checked; nothing is cleared between steps, the halves alternate 5,000 times
 * each, and a stale pair from two steps back (other values, another tag) would show. */
START_TEST(ten_thousand_steps) {
  hm_runtime *rt = open_rt();
  static const uint32_t rows[] = {1};
  struct t_rank proto = {.width = 64, .max_rows = 1, .rows = rows, .nrows = 1, .steps = 10000};
  struct t_rank runs[HM_MAX_TP];
  expect_all_ok(runs, 2, t_run_threads(rt, 2, &proto, runs));
  fprintf(stderr, "10,000 steps at TP2: %.1f s on the software agent\n", runs[0].took_ns / 1e9);
  hm_runtime_close(rt);
}
END_TEST

/* A recorded chain of three steps (fixed addresses) replayed 200 times per rank, with new inputs
 * written between replays: the epoch on the device gives each replay its tags and half. */
struct chain_rank {
  hm_runtime *rt;
  unsigned rank, tp;
  hm_bootstrap boot;
  hm_status st;
  char err[512];
};

static void *chain_main(void *p) {
  struct chain_rank *c = p;
  const uint32_t width = 640, rows = 3, replays = 200;
  size_t n = (size_t)width * rows;
  hm_agent *a = hm_agent_get(c->rt, c->rank);
  hm_queue *q = NULL;
  hm_heap *h = NULL;
  hm_ar *ar = NULL;
  hm_chain *ch = NULL;
  uint16_t *buf = NULL;
  hm_heap_config hc = {.rank = c->rank, .tp = c->tp, .half_bytes = hm_allreduce_region_bytes(c->tp, rows, width)};
  hm_ar_config ac = {.width = width, .max_rows = rows, .max_ctas = 2};
  hm_status s;
  if ((s = hm_queue_create(a, 64, &q)) || (s = hm_heap_create(a, &hc, &c->boot, &h)) ||
      (s = hm_ar_create(h, &ac, &ar)) || (s = hm_chain_create(q, &ch)) ||
      (s = hm_mem_alloc(a, HM_POOL_HOST, 6 * n * 2, 0, (void **)&buf))) {
    snprintf(c->err, sizeof c->err, "rank %u set-up: %s", c->rank, hm_errmsg());
    c->st = s;
    goto out;
  }
  /* step j reads in_j and writes out_j: buf = in0 in1 in2 out0 out1 out2 */
  for (unsigned j = 0; j < 3 && !s; j++) s = hm_ar_record(ar, ch, buf + j * n, buf + (3 + j) * n, rows);
  if (s) {
    snprintf(c->err, sizeof c->err, "rank %u record: %s", c->rank, hm_errmsg());
    c->st = s;
    goto out;
  }
  for (unsigned k = 0; k < replays && !c->st; k++) {
    for (unsigned j = 0; j < 3; j++) t_fill(buf + j * n, c->rank, 3 * k + j, n);
    if ((s = hm_chain_replay(ch)) || (s = hm_chain_wait(ch, WAIT_NS)) || (s = hm_ar_status(ar))) {
      snprintf(c->err, sizeof c->err, "rank %u replay %u: %s", c->rank, k, hm_errmsg());
      c->st = s;
      break;
    }
    for (unsigned j = 0; j < 3; j++) {
      long bad = t_check(buf + (3 + j) * n, c->tp, 3 * k + j, n);
      if (bad >= 0) {
        snprintf(c->err, sizeof c->err, "rank %u replay %u step %u: value %ld wrong", c->rank, k, j, bad);
        c->st = HM_ERR_RUNTIME;
        break;
      }
    }
  }
out:
  if (ch) hm_chain_destroy(ch);
  if (ar) hm_ar_destroy(ar);
  if (h) hm_heap_destroy(h);
  if (q) hm_queue_destroy(q);
  return NULL;
}

START_TEST(chain_replays) {
  hm_runtime *rt = open_rt();
  hm_boot_group *g;
  ck_assert_int_eq(hm_boot_group_create(2, &g), HM_OK);
  struct chain_rank c[2];
  pthread_t th[2];
  for (unsigned r = 0; r < 2; r++) {
    c[r] = (struct chain_rank){.rt = rt, .rank = r, .tp = 2};
    ck_assert_int_eq(hm_bootstrap_threads(g, &c[r].boot), HM_OK);
    ck_assert_int_eq(pthread_create(&th[r], NULL, chain_main, &c[r]), 0);
  }
  for (unsigned r = 0; r < 2; r++) pthread_join(th[r], NULL);
  hm_boot_group_destroy(g);
  for (unsigned r = 0; r < 2; r++) ck_assert_msg(c[r].st == HM_OK, "%s", c[r].err);
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- a rank a step behind */

/* One rank lags (HSAMONO_SIM_LAG_RANK, hsa/sim/cta.c): having pushed a step, it reads its inbox
 * only once its peers have run as far as they can, so their pushes of the next step (the other
 * half of every inbox, the next tag) land while it has yet to read this one's. Twelve steps
 * enqueued back to back, rows and inputs changing every step, at TP 2, 3 and 4 with another rank
 * lagging and another chaos seed each time; every output is the CPU's rank-order sum. A half
 * reused a step early hands the lagging rank a pair with the next step's tag: it waits out its
 * bound and the step fails. The bound, 12 s, is four times the longest hold the software agent
 * gives the lagging rank (LAG_MAX_NS, 3 s, hsa/sim/cta.c): a peer's wait on the lagging rank's next
 * push legitimately spans one whole hold, and on a loaded CI machine the holds run to their cap (a
 * 3 s bound equal to the cap failed a correct run there: "rank 2's push never arrived"). */
START_TEST(lagging_rank_steps) {
  /* the allreduce-chaos suite's seed where it runs, for the run without one of its own */
  char seed[32] = "";
  const char *suite = getenv("HSAMONO_SIM_CHAOS");
  if (suite) snprintf(seed, sizeof seed, "%s", suite);
  static const uint32_t rows[] = {1, 3, 2};
  static const struct {
    unsigned tp, lag;
    const char *chaos;
  } runs_of[] = {{2, 1, "5"}, {2, 0, "17"}, {3, 0, NULL}, {4, 2, "29"}};
  for (size_t i = 0; i < sizeof runs_of / sizeof *runs_of; i++) {
    char lag[16];
    snprintf(lag, sizeof lag, "%u", runs_of[i].lag);
    setenv("HSAMONO_SIM_LAG_RANK", lag, 1);
    const char *chaos = runs_of[i].chaos ? runs_of[i].chaos : seed[0] ? seed : NULL;
    if (chaos) setenv("HSAMONO_SIM_CHAOS", chaos, 1);
    else unsetenv("HSAMONO_SIM_CHAOS");
    hm_runtime *rt = open_rt();
    struct t_rank proto = {.width = 640, .max_rows = 3, .rows = rows, .nrows = 3, .steps = 12,
                           .timeout_ns = 12000000000ull};
    struct t_rank runs[HM_MAX_TP];
    unsigned failed = t_run_threads(rt, runs_of[i].tp, &proto, runs);
    for (unsigned r = 0; r < runs_of[i].tp; r++)
      ck_assert_msg(runs[r].st == HM_OK, "TP %u, rank %u lagging, chaos %s: %s", runs_of[i].tp, runs_of[i].lag,
                    chaos ? chaos : "off", runs[r].err);
    ck_assert_uint_eq(failed, 0);
    hm_runtime_close(rt);
  }
  unsetenv("HSAMONO_SIM_LAG_RANK");
  unsetenv("HSAMONO_SIM_CHAOS");
}
END_TEST

/* ---------------------------------------------------------------- the order of the sum */

/* The all-reduce's sum (spec/mono.md §2.3 reduce and §3.7: "f32 sum in rank order 0..tp-1, then
 * bf16"; docs/decisions.md "All-reduce": starting from rank 0's value, no fma, bf16 RNE) on
 * partials crafted so that the order shows in the result. Each case is one element's partials,
 * rank 0 first, and its bf16 result worked out by hand from that definition (the test checks the
 * hand work against the CPU's rank-order sum, and that the reversed order gives another result
 * where the case says so). bf16 bits: 1 = 0x3f80, -1 = 0xbf80, 2^-24 = 0x3380, 2^-23 = 0x3400,
 * 2^-8 = 0x3b80, 2 = 0x4000, 2^24 = 0x4b80, 1 + 2^-7 = 0x3f81, 1 + 2^-6 = 0x3f82. */
typedef struct order_case {
  uint16_t v[4];   /* rank r's partial (TP 2 uses v[0], v[1]) */
  uint16_t want;   /* the rank-order result */
  uint16_t rev;    /* the result of the reversed order (tp-1 first), where it differs; else want */
} order_case;

/* TP 4. 1 + 2^-24 is a tie in f32 and goes to even (1); -1 + 2^-24 = -(1 - 2^-24) is exact. */
static const order_case order4[] = {
    /* ((1 + 2^-24) + 2^-24) - 1 = 0; reversed ((-1 + 2^-24) + 2^-24) + 1 = 2^-23 */
    {{0x3f80, 0x3380, 0x3380, 0xbf80}, 0x0000, 0x3400},
    /* the mirror: ((-1 + 2^-24) + 2^-24) + 1 = 2^-23; reversed 0 */
    {{0xbf80, 0x3380, 0x3380, 0x3f80}, 0x3400, 0x0000},
    /* ((2^24 + 1) - 2^24) + 1 = 1 (2^24 + 1 ties to 2^24); reversed ((1 - 2^24) + 1) + 2^24 = 2 */
    {{0x4b80, 0x3f80, 0xcb80, 0x3f80}, 0x3f80, 0x4000},
    /* ((2^-24 + 1) - 1) + 2^-24 = 2^-24; reversed ((2^-24 - 1) + 1) + 2^-24 = 2^-23 */
    {{0x3380, 0x3f80, 0xbf80, 0x3380}, 0x3380, 0x3400},
    /* -0 + -0 + -0 + -0 = -0 (a sum from 0.0 instead of rank 0's value gives +0) */
    {{0x8000, 0x8000, 0x8000, 0x8000}, 0x8000, 0x8000},
    /* 1 + 2^-8 is a bf16 tie: even, 1 (not 1 + 2^-7: RNE, not rounding half up) */
    {{0x3f80, 0x3b80, 0x0000, 0x0000}, 0x3f80, 0x3f80},
    /* (1 + 2^-7) + 2^-8 is a bf16 tie: even, 1 + 2^-6 (not truncated to 1 + 2^-7) */
    {{0x3f81, 0x3b80, 0x0000, 0x0000}, 0x3f82, 0x3f82},
};

/* TP 2. x0 + x1 and x1 + x0 are the same f32 (IEEE addition commutes; one rounding), so no
 * choice of two partials shows the order of a two-rank sum: what TP 2 can show is the start (rank
 * 0's value, not 0.0) and the rounding to bf16. */
static const order_case order2[] = {
    {{0x8000, 0x8000}, 0x8000, 0x8000}, /* -0 + -0 = -0; 0 + -0 + -0 = +0 */
    {{0x3f80, 0xbf80}, 0x0000, 0x0000}, /* 1 - 1 = +0 */
    {{0x4b80, 0x3f80}, 0x4b80, 0x4b80}, /* 2^24 + 1 ties to 2^24 in f32 */
    {{0x3f80, 0x3b80}, 0x3f80, 0x3f80}, /* 1 + 2^-8: a bf16 tie, to even */
    {{0x3f81, 0x3b80}, 0x3f82, 0x3f82}, /* (1 + 2^-7) + 2^-8: a bf16 tie, to even (up) */
};

/* Element i of step k: case i % n, scaled by 2^s, s = (i / n + k) % 9 - 4 (a power of two scales
 * every partial sum alike, so each case holds at nine magnitudes; zeros stay as they are). */
static uint16_t scaled(uint16_t v, unsigned n, unsigned step, uint32_t i) {
  int s = (int)((i / n + step) % 9u) - 4;
  return (v & 0x7fffu) ? (uint16_t)(v + s * 128) : v;
}
static uint16_t order_value(const order_case *cs, unsigned n, unsigned rank, unsigned step, uint32_t i) {
  return scaled(cs[i % n].v[rank], n, step, i);
}
static uint16_t order_in4(unsigned rank, unsigned step, uint32_t i) {
  return order_value(order4, sizeof order4 / sizeof *order4, rank, step, i);
}
static uint16_t order_in2(unsigned rank, unsigned step, uint32_t i) {
  return order_value(order2, sizeof order2 / sizeof *order2, rank, step, i);
}
/* the definition: f32 from rank 0's value, ranks in order (reverse: tp-1 first), then bf16 */
static uint16_t order_sum(uint16_t (*in)(unsigned, unsigned, uint32_t), unsigned tp, unsigned step, uint32_t i,
                          bool reverse) {
  f32 acc = fmt_bf16_to_f32(in(reverse ? tp - 1 : 0, step, i));
  for (unsigned j = 1; j < tp; j++) acc = acc + fmt_bf16_to_f32(in(reverse ? tp - 1 - j : j, step, i));
  return fmt_bf16_from_f32(acc);
}
static uint16_t order_want4(unsigned tp, unsigned step, uint32_t i) { return order_sum(order_in4, tp, step, i, false); }
static uint16_t order_want2(unsigned tp, unsigned step, uint32_t i) { return order_sum(order_in2, tp, step, i, false); }

static void rank_order_at(unsigned tp, const order_case *cs, unsigned n, uint16_t (*in)(unsigned, unsigned, uint32_t),
                          uint16_t (*want)(unsigned, unsigned, uint32_t)) {
  static const uint32_t rows[] = {2};
  const uint32_t width = 64;
  /* the cases against the definition, at every scale the steps use */
  unsigned differ = 0;
  for (unsigned k = 0; k < 2; k++)
    for (uint32_t i = 0; i < 2 * width; i++) {
      const order_case *c = &cs[i % n];
      uint16_t sum = want(tp, k, i), rev = order_sum(in, tp, k, i, true);
      ck_assert_msg(sum == scaled(c->want, n, k, i), "case %u at scale step %u: the rank-order sum is 0x%04x, the "
                    "hand-worked 0x%04x", i % n, k, sum, scaled(c->want, n, k, i));
      ck_assert_msg(rev == scaled(c->rev, n, k, i), "case %u: the reversed sum is 0x%04x, the hand-worked 0x%04x",
                    i % n, rev, scaled(c->rev, n, k, i));
      differ += rev != sum;
    }
  if (tp > 2) ck_assert_uint_gt(differ, 0);
  /* the device's: every rank's every output the rank-order sum, bit for bit */
  hm_runtime *rt = open_rt();
  struct t_rank proto = {.width = width, .max_rows = 2, .rows = rows, .nrows = 1, .steps = 2, .keep_outputs = true,
                         .timeout_ns = 200000000000ull, .input = in, .expect = want};
  struct t_rank runs[HM_MAX_TP];
  expect_all_ok(runs, tp, t_run_threads(rt, tp, &proto, runs));
  hm_runtime_close(rt);
}

START_TEST(rank_order_tp2) { rank_order_at(2, order2, sizeof order2 / sizeof *order2, order_in2, order_want2); }
END_TEST
START_TEST(rank_order_tp4) { rank_order_at(4, order4, sizeof order4 / sizeof *order4, order_in4, order_want4); }
END_TEST

/* A bf16 pair whose bits are the word protocol's AR_EMPTY (two negative NaNs, every payload bit set),
 * from one rank, from another, from all: the push sends it as AR_EMPTY_SUB (ar.h), so the reduce
 * does not wait for it forever, and the sum is still the definition's to the bit (the add and the
 * rounding quiet the NaN the substitute differs in). Both protocols, TP 2 and 4, two steps. */
static uint16_t empty_in(unsigned rank, unsigned step, uint32_t i) {
  uint32_t f = i / 2u, c = (f + step) % 5u;
  if (c == 2u || (c == 1u && rank == 1u) || (c == 3u && rank == 0u)) return 0xffffu;
  return fmt_bf16_from_f32((f32)((int)((i * 7u + rank * 3u) % 13u) - 6));
}
static uint16_t empty_want(unsigned tp, unsigned step, uint32_t i) {
  f32 acc = fmt_bf16_to_f32(empty_in(0, step, i));
  for (unsigned r = 1; r < tp; r++) acc = acc + fmt_bf16_to_f32(empty_in(r, step, i));
  return fmt_bf16_from_f32(acc);
}
START_TEST(empty_word_pairs) {
  static const uint32_t rows[] = {2};
  hm_runtime *rt = open_rt();
  for (hm_ar_protocol p = HM_AR_PROTOCOL_PAIR; p <= HM_AR_PROTOCOL_WORD; p++)
    for (unsigned tp = 2; tp <= 4; tp += 2) {
      struct t_rank proto = {.width = 64, .max_rows = 2, .rows = rows, .nrows = 1, .steps = 2, .timeout_ns = 20000000000ull,
                             .input = empty_in, .expect = empty_want, .protocol = p};
      struct t_rank runs[HM_MAX_TP];
      expect_all_ok(runs, tp, t_run_threads(rt, tp, &proto, runs));
    }
  /* the inputs do hold whole AR_EMPTY pairs, and their sums are NaN */
  ck_assert_uint_eq((uint32_t)empty_in(1, 0, 2) | (uint32_t)empty_in(1, 0, 3) << 16, AR_EMPTY);
  ck_assert_uint_eq(empty_want(4, 0, 4) & 0x7fc0u, 0x7fc0u);
  hm_runtime_close(rt);
}
END_TEST

/* Rank 1 stops after 3 steps (a stalled peer): rank 0's fourth step ends with an error naming rank
 * 1 once its 3 s bound has passed — not a hang — later steps are refused, and both tear down. (The
 * bound is short for a test, yet long enough that a loaded machine cannot fail the first steps.) */
START_TEST(stalled_peer) {
  hm_runtime *rt = open_rt();
  static const uint32_t rows[] = {2};
  struct t_rank proto = {.width = 5120, .max_rows = 2, .rows = rows, .nrows = 1, .steps = 6,
                         .timeout_ns = 3000000000ull};
  hm_boot_group *g;
  ck_assert_int_eq(hm_boot_group_create(2, &g), HM_OK);
  struct t_rank runs[2];
  pthread_t th[2];
  for (unsigned r = 0; r < 2; r++) {
    runs[r] = proto;
    runs[r].rt = rt, runs[r].rank = r, runs[r].tp = 2;
    if (r == 1) runs[r].steps = 3;
    ck_assert_int_eq(hm_bootstrap_threads(g, &runs[r].boot), HM_OK);
    ck_assert_int_eq(pthread_create(&th[r], NULL, t_rank_main, &runs[r]), 0);
  }
  for (unsigned r = 0; r < 2; r++) pthread_join(th[r], NULL);
  hm_boot_group_destroy(g);
  ck_assert_msg(runs[1].st == HM_OK, "%s", runs[1].err);
  ck_assert_int_eq(runs[0].st, HM_ERR_PEER);
  ck_assert_msg(strstr(runs[0].err, "rank 1's push never arrived"), "%s", runs[0].err);
  ck_assert_uint_lt(runs[0].took_ns, 120000000000ull);
  hm_runtime_close(rt);
}
END_TEST

/* The first rank to give up stops the others: rank 2 of 3 stalls after one step; rank 0 waits at
 * most 2 s, rank 1 would wait 200 s. Rank 0's timeout sets rank 1's abort word, so rank 1
 * ends soon after, and both name rank 2 (the root cause travels with the abort). */
START_TEST(abort_propagates) {
  hm_runtime *rt = open_rt();
  static const uint32_t rows[] = {1};
  hm_boot_group *g;
  ck_assert_int_eq(hm_boot_group_create(3, &g), HM_OK);
  struct t_rank runs[3];
  pthread_t th[3];
  for (unsigned r = 0; r < 3; r++) {
    runs[r] = (struct t_rank){.rt = rt, .rank = r, .tp = 3, .width = 512, .max_rows = 1, .rows = rows, .nrows = 1,
                              .steps = r == 2 ? 1 : 3, .timeout_ns = r == 0 ? 2000000000ull : 200000000000ull};
    ck_assert_int_eq(hm_bootstrap_threads(g, &runs[r].boot), HM_OK);
    ck_assert_int_eq(pthread_create(&th[r], NULL, t_rank_main, &runs[r]), 0);
  }
  for (unsigned r = 0; r < 3; r++) pthread_join(th[r], NULL);
  hm_boot_group_destroy(g);
  ck_assert_msg(runs[2].st == HM_OK, "%s", runs[2].err);
  for (unsigned r = 0; r < 2; r++) {
    ck_assert_int_eq(runs[r].st, HM_ERR_PEER);
    ck_assert_msg(strstr(runs[r].err, "rank 2's push never arrived"), "%s", runs[r].err);
  }
  ck_assert_uint_lt(runs[1].took_ns, 100000000000ull); /* half its own bound: it was told */
  hm_runtime_close(rt);
}
END_TEST

/* Bad arguments are refused with a message and enqueue nothing; a refused group takes no step. */
START_TEST(arguments) {
  hm_runtime *rt = open_rt();
  hm_agent *a = hm_agent_get(rt, 0), *b = hm_agent_get(rt, 1);
  hm_boot_group *g;
  hm_bootstrap boot;
  ck_assert_int_eq(hm_boot_group_create(1, &g), HM_OK);
  ck_assert_int_eq(hm_bootstrap_threads(g, &boot), HM_OK);
  hm_heap_config hc = {.rank = 0, .tp = 1};
  hm_heap *h;
  ck_assert_int_eq(hm_heap_create(a, &hc, &boot, &h), HM_OK);
  hm_ar *ar = (hm_ar *)1;
  ck_assert_int_eq(hm_ar_create(h, NULL, &ar), HM_ERR_INVALID_ARG);
  ck_assert_ptr_null(ar);
  hm_ar_config ac = {.width = 5120, .max_rows = 0};
  ck_assert_int_eq(hm_ar_create(h, &ac, &ar), HM_ERR_INVALID_ARG);
  ac = (hm_ar_config){.width = 5120, .max_rows = 4000};
  ck_assert_int_eq(hm_ar_create(h, &ac, &ar), HM_ERR_NO_MEMORY);
  ck_assert_msg(strstr(hm_errmsg(), "needs"), "%s", hm_errmsg());
  ac = (hm_ar_config){.width = 64, .max_rows = 4};
  ck_assert_int_eq(hm_ar_create(h, &ac, &ar), HM_OK);
  hm_queue *q, *qb;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  ck_assert_int_eq(hm_queue_create(b, 64, &qb), HM_OK);
  uint16_t *buf;
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_HOST, 4096, 0, (void **)&buf), HM_OK);
  ck_assert_int_eq(hm_allreduce(NULL, q, buf, buf, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_allreduce(ar, NULL, buf, buf, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_allreduce(ar, qb, buf, buf, 1), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "not on the heap's agent"), "%s", hm_errmsg());
  ck_assert_int_eq(hm_allreduce(ar, q, NULL, buf, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_allreduce(ar, q, buf, (char *)buf + 2, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_allreduce(ar, q, buf, buf, 0), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_allreduce(ar, q, buf, buf, 5), HM_ERR_INVALID_ARG);
  /* in and out against their allocations (the launch trusts rows x width of each): a malloc'd
   * buffer, and one whose last row runs past its allocation's end */
  uint16_t *plain = calloc(4 * 64, 2);
  ck_assert_ptr_nonnull(plain);
  ck_assert_int_eq(hm_allreduce(ar, q, plain, buf, 1), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "in "), "%s", hm_errmsg());
  ck_assert_int_eq(hm_allreduce(ar, q, buf, (char *)buf + 4096 - 3 * 64 * 2, 4), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "out "), "%s", hm_errmsg());
  free(plain);
  ck_assert_int_eq(hm_ar_record(ar, NULL, buf, buf, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_ar_wait(NULL, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_ar_status(NULL), HM_ERR_INVALID_ARG);
  /* nothing was enqueued: the queue is idle at once */
  ck_assert_int_eq(hm_queue_wait_idle(q, WAIT_NS), HM_OK);
  /* TP 1: the sum of one rank is its own value (through f32, so bit for bit) */
  t_fill(buf, 0, 0, 4 * 64);
  ck_assert_int_eq(hm_allreduce(ar, q, buf, buf + 4 * 64, 4), HM_OK);
  hm_queue *q2;
  ck_assert_int_eq(hm_queue_create(a, 64, &q2), HM_OK);
  ck_assert_int_eq(hm_allreduce(ar, q2, buf, buf, 1), HM_ERR_INVALID_ARG); /* steps share an epoch */
  ck_assert_int_eq(hm_ar_wait(ar, WAIT_NS), HM_OK);
  ck_assert_int_eq(t_check(buf + 4 * 64, 1, 0, 4 * 64), -1);
  /* in place */
  ck_assert_int_eq(hm_allreduce(ar, q, buf, buf, 4), HM_OK);
  ck_assert_int_eq(hm_ar_wait(ar, WAIT_NS), HM_OK);
  ck_assert_int_eq(memcmp(buf, buf + 4 * 64, 2 * 4 * 64), 0);
  /* the host stops the group: the status says so and further steps are refused */
  ck_assert_int_eq(hm_heap_abort(h), HM_OK);
  ck_assert_int_eq(hm_allreduce(ar, q, buf, buf, 1), HM_OK); /* the launch finds the abort word */
  ck_assert_int_eq(hm_ar_wait(ar, WAIT_NS), HM_ERR_PEER);
  ck_assert_msg(strstr(hm_errmsg(), "host of rank 0 stopped the group"), "%s", hm_errmsg());
  ck_assert_int_eq(hm_allreduce(ar, q, buf, buf, 1), HM_ERR_PEER);
  hm_ar_destroy(ar);
  ck_assert_int_eq(hm_heap_destroy(h), HM_OK);
  hm_boot_group_destroy(g);
  hm_runtime_close(rt);
}
END_TEST

/* The kernel launched with arguments the host would refuse (tp 9, a batch of 3) writes nothing but
 * the status word: no epoch mark, no output. */
START_TEST(kernel_refuses_bad_arguments) {
  hm_runtime *rt = open_rt();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_program *p;
  const hm_kernel *k;
  hm_queue *q;
  ck_assert_int_eq(hm_program_load(a, &p), HM_OK);
  ck_assert_int_eq(hm_kernel_get(p, "ar_allreduce", &k), HM_OK);
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  uint32_t *status, *epoch, *buf;
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_HOST, 4096, 0, (void **)&status), HM_OK);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_HOST, DEV_EPOCH_BYTES, 0, (void **)&epoch), HM_OK);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_HOST, 4096, 0, (void **)&buf), HM_OK);
  for (int bad = 0; bad < 2; bad++) {
    memset(status, 0, 4096);
    memset(epoch, 0, DEV_EPOCH_BYTES);
    memset(buf, 0x5a, 4096);
    struct ar_allreduce_args args = {.link = {.status = (uint64_t)(uintptr_t)status, .rank = 0, .tp = bad ? 2 : 9},
                                     .epoch = (uint64_t)(uintptr_t)epoch, .in = (uint64_t)(uintptr_t)buf,
                                     .out = (uint64_t)(uintptr_t)buf, .rows = 1, .pairs = 256, .batch = bad ? 3 : 1};
    void *ka;
    hm_signal done;
    ck_assert_int_eq(hm_kernarg_new(a, &args, sizeof args, &ka), HM_OK);
    ck_assert_int_eq(hm_signal_create(rt, 1, &done), HM_OK);
    hm_dispatch d = {.kernel = k, .ctas = 2, .kernarg = ka, .completion = done, .barrier = true,
                     .acquire = HM_FENCE_SYSTEM, .release = HM_FENCE_SYSTEM};
    ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_OK);
    ck_assert_int_eq(hm_signal_wait(rt, done, HM_WAIT_EQ, 0, WAIT_NS, false, NULL), HM_OK);
    ck_assert_uint_eq(status[0], AR_STATUS(AR_ERR_ARGS, 0u, AR_WHERE_STANDALONE));
    for (uint32_t w = 0; w < DEV_EPOCH_WORDS; w++) ck_assert_uint_eq(epoch[w], 0);
    for (uint32_t w = 0; w < 1024; w++) ck_assert_uint_eq(buf[w], 0x5a5a5a5au);
  }
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- processes */

/* argv: mode path rank tp width rows steps timeout_ms
 *  ar:   run `steps` steps of `rows` rows, check every output; exit 0, else print why, exit 3
 *  loop: run steps one at a time, printing "k" after each, until one fails; exit 7 if the failure
 *        is HM_ERR_PEER naming rank argv[8] (the victim), 8 otherwise; print the seconds from the
 *        last good step to the error on stderr */
int hm_test_child(int argc, char **argv) {
  if (argc < 8) return 2;
  const char *mode = argv[0], *path = argv[1];
  unsigned rank = (unsigned)atoi(argv[2]), tp = (unsigned)atoi(argv[3]);
  uint32_t width = (uint32_t)atoi(argv[4]), rows = (uint32_t)atoi(argv[5]);
  unsigned steps = (unsigned)atoi(argv[6]);
  uint64_t timeout = (uint64_t)atoll(argv[7]) * 1000000ull;
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt)) return 3;
  struct t_rank run = {.rt = rt, .rank = rank, .tp = tp, .width = width, .max_rows = rows, .rows = &rows,
                       .nrows = 1, .steps = steps, .timeout_ns = timeout};
  if (hm_bootstrap_unix(path, &run.boot)) return 3;
  if (!strcmp(mode, "ar")) {
    t_rank_main(&run);
    hm_bootstrap_release(&run.boot);
    hm_runtime_close(rt);
    if (run.st) fprintf(stderr, "%s\n", run.err);
    return run.st ? 3 : 0;
  }
  /* loop */
  hm_agent *a = hm_agent_get(rt, rank);
  hm_queue *q;
  hm_heap *h;
  hm_ar *ar;
  hm_heap_config hc = {.rank = rank, .tp = tp, .half_bytes = hm_allreduce_region_bytes(tp, rows, width),
                       .timeout_ns = 60000000000ull};
  hm_ar_config ac = {.width = width, .max_rows = rows, .max_ctas = 2, .timeout_ns = timeout};
  uint16_t *in, *out;
  size_t n = (size_t)rows * width;
  if (hm_queue_create(a, 64, &q) || hm_heap_create(a, &hc, &run.boot, &h) || hm_ar_create(h, &ac, &ar) ||
      hm_mem_alloc(a, HM_POOL_HOST, 2 * n, 0, (void **)&in) || hm_mem_alloc(a, HM_POOL_HOST, 2 * n, 0, (void **)&out)) {
    fprintf(stderr, "rank %u: %s\n", rank, hm_errmsg());
    return 3;
  }
  hm_bootstrap_release(&run.boot);
  hm_status s = HM_OK;
  uint64_t last = t_now_ns();
  for (unsigned k = 0; k < 1000000 && !s; k++) {
    t_fill(in, rank, k, n);
    if (!(s = hm_allreduce(ar, q, in, out, rows)) && !(s = hm_ar_wait(ar, WAIT_NS))) {
      if (t_check(out, tp, k, n) >= 0) {
        fprintf(stderr, "rank %u: step %u wrong\n", rank, k);
        return 4;
      }
      printf("%u\n", k);
      fflush(stdout);
      last = t_now_ns();
    }
  }
  double after = (t_now_ns() - last) / 1e9;
  char victim[32];
  snprintf(victim, sizeof victim, "rank %s's push", argc > 8 ? argv[8] : "?");
  int code = s == HM_ERR_PEER && strstr(hm_errmsg(), victim) ? 7 : 8;
  fprintf(stderr, "rank %u: %.2f s after its last step: %s: %s\n", rank, after, hm_status_name(s), hm_errmsg());
  hm_ar_destroy(ar);
  if (hm_heap_destroy(h)) code = 9; /* the survivors tear down cleanly */
  hm_runtime_close(rt);
  return after < 120.0 ? code : 10;
}

static void procs(unsigned tp, uint32_t rows, unsigned steps) {
  char dir[64], path[128];
  t_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rv", dir);
  char tps[8], rs[8], ss[16];
  snprintf(tps, sizeof tps, "%u", tp);
  snprintf(rs, sizeof rs, "%u", rows);
  snprintf(ss, sizeof ss, "%u", steps);
  pid_t pid[HM_MAX_TP];
  for (unsigned r = 0; r < tp; r++) {
    char rk[8];
    snprintf(rk, sizeof rk, "%u", r);
    pid[r] = t_spawn(NULL, "ar", path, rk, tps, "5120", rs, ss, "60000", NULL);
  }
  for (unsigned r = 0; r < tp; r++) ck_assert_msg(t_reap(pid[r]) == 0, "tp %u: rank %u failed (its stderr says why)", tp, r);
  rmdir(dir);
}

/* Each rank its own process, agent = rank, heaps through the socket rendezvous and IPC. */
START_TEST(processes_tp2) { procs(2, 48, 3); }
END_TEST
START_TEST(processes_tp4) { procs(4, 7, 3); }
END_TEST
START_TEST(processes_tp8) { procs(8, 1, 2); }
END_TEST

/* Three processes run steps one after another; rank 2 is killed (SIGKILL) while they run. Ranks 0
 * and 1 each end with an error naming rank 2 within their 5 s bound (plus a loaded machine's
 * slack: the child checks 120 s), and tear down cleanly. */
START_TEST(killed_rank) {
  char dir[64], path[128];
  t_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rv", dir);
  pid_t pid[3];
  int fd[3];
  for (unsigned r = 0; r < 3; r++) {
    char rk[8];
    snprintf(rk, sizeof rk, "%u", r);
    pid[r] = t_spawn(&fd[r], "loop", path, rk, "3", "1024", "2", "0", "5000", "2", NULL);
  }
  /* let the victim finish 20 steps, then kill it while the next ones are in flight */
  FILE *f = fdopen(fd[2], "r");
  char line[64];
  unsigned done = 0;
  while (done < 20 && fgets(line, sizeof line, f)) done = (unsigned)atoi(line) + 1;
  ck_assert_uint_eq(done, 20);
  ck_assert_int_eq(kill(pid[2], SIGKILL), 0);
  ck_assert_int_eq(t_reap(pid[2]), -1);
  fclose(f);
  for (unsigned r = 0; r < 2; r++) {
    int code = t_reap(pid[r]);
    ck_assert_msg(code == 7, "rank %u: exit %d (7: an error naming rank 2 in time and a clean teardown)", r, code);
    close(fd[r]);
  }
  rmdir(dir);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("allreduce");
  struct {
    const char *name;
    const TTest *tests[4];
  } cases[] = {
      {"sizes", {tp2_sizes, tp4_sizes, tp8_sizes, tp4_sizes_pair}},
      {"steps", {ten_thousand_steps, chain_replays}},
      {"lagging_rank", {lagging_rank_steps}},
      {"order", {rank_order_tp2, rank_order_tp4, empty_word_pairs}},
      {"failures", {stalled_peer, abort_propagates, arguments, kernel_refuses_bad_arguments}},
      {"processes", {processes_tp2, processes_tp4, processes_tp8, killed_rank}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    TCase *tc = tcase_create(cases[c].name);
    tcase_set_timeout(tc, 900);
    for (int i = 0; i < 4 && cases[c].tests[i]; i++) tcase_add_test(tc, cases[c].tests[i]);
    suite_add_tcase(s, tc);
  }
  return s;
}
