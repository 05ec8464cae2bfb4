/* tests/layer/test_group_fail.c: a TP group fails together and fast (issue 16 item 2): a rank whose
 * create or step fails stops the group at once, and every peer names that rank and its reason. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "group_case.h"
#include "helpers.h"
#include "hm_ffn.h"

/* The peer bound of these groups: long against what the tests allow (FAST_S), so a peer that
 * learns of a failure only at its bound (the behaviour these tests guard against) fails them, and
 * short enough that such a run ends in seconds rather than at the software agent's 600 s. */
#define PEER_NS 20000000000ull
/* What "at once" may take here: the peer's kernel ends its poll and its remaining stages (a tiny
 * TP2 step, well under a second alone), on two cores shared with other builds and tests. */
#define FAST_S 5.0

static const hm_ffn_config bounded = {.min_cus = 1, .reduced_experts = true, .peer_timeout_ns = PEER_NS};

/* A rank's step in its own thread: its status, message and when it returned. */
typedef struct {
  hm_ffn *f;
  hm_queue *q;
  const hm_ffn_io *io;
  unsigned delay_us; /* before the step: a rank that comes late */
  hm_status st;
  char err[1024];
  double end;
} rank_step;

static void *step_main(void *p) {
  rank_step *r = p;
  if (r->delay_us) usleep(r->delay_us);
  r->st = hm_layer_ffn(r->f, r->q, r->io);
  snprintf(r->err, sizeof r->err, "%s", r->st ? hm_errmsg() : "");
  r->end = gc_now_s();
  return NULL;
}

/* A TP2 group built by hand (heaps over the threads bootstrap, room for two layers' regions), so
 * a test can create more runners on it and step each rank on its own. */
typedef struct {
  hm_runtime *rt;
  hm_layer_weights w[2];
  hm_heap *h[2];
  hm_ffn *f[2]; /* layer 3 */
  hm_queue *q[2];
  gc_bufs b[2];
} tp2;

static void tp2_open(tp2 *t, const hm_ffn_config *fc, uint64_t seed) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  t->rt = tl_open_sim();
  tl_build_group(&cfg, 2, seed, HM_WPART_FFN, t->w);
  gc_heaps_create(t->rt, 2, 2 * hm_allreduce_region_bytes(2, 96, 4096), t->h);
  for (unsigned r = 0; r < 2; r++) {
    ck_assert_msg(hm_ffn_create(t->h[r], &t->w[r], fc, &t->f[r]) == HM_OK, "%s", hm_errmsg());
    hm_agent *a = hm_agent_get(t->rt, r);
    ck_assert_int_eq(hm_queue_create(a, 64, &t->q[r]), HM_OK);
    gc_bufs_make(t->rt, a, cfg.hidden, &t->b[r]);
  }
}

static void tp2_close(tp2 *t) {
  for (uint32_t r = 0; r < 2; r++) {
    hm_queue_destroy(t->q[r]);
    hm_ffn_destroy(t->f[r]);
    ck_assert_int_eq(hm_heap_destroy(t->h[r]), HM_OK);
  }
  tl_free_group(t->w, 2);
  hm_runtime_close(t->rt);
}

/* Rank 0 steps in a thread; once its kernel is waiting for rank 1's pushes, rank 1 fails on its
 * host. Rank 0 must end within FAST_S of that with HM_ERR_PEER naming rank 1 and `reason`. */
static void expect_told(tp2 *t, double failed_at, hm_status st, const char *err, double end, const char *reason) {
  double after = end - failed_at;
  ck_assert_msg(st == HM_ERR_PEER, "rank 0: %s: %s", hm_status_name(st), err);
  ck_assert_msg(strstr(err, "rank 1 failed") && strstr(err, reason), "rank 0 does not name rank 1's %s: %s", reason,
                err);
  ck_assert_msg(after < FAST_S, "rank 0 ended %.2f s after rank 1 failed (peer bound %.0f s): %s", after,
                PEER_NS / 1e9, err);
  /* and the group stays failed: the next step is refused at once, with the same root cause */
  ck_assert_int_eq(hm_layer_ffn(t->f[0], t->q[0], &t->b[0].io), HM_ERR_PEER);
  ck_assert_msg(strstr(hm_errmsg(), reason), "%s", hm_errmsg());
  fprintf(stderr, "rank 0 told %.3f s after rank 1 failed: %s\n", after, err);
}

static void expect_peer_told(tp2 *t, double failed_at, rank_step *r0, pthread_t th, const char *reason) {
  pthread_join(th, NULL);
  expect_told(t, failed_at, r0->st, r0->err, r0->end, reason);
}

static pthread_t start_rank0(tp2 *t, rank_step *r0) {
  *r0 = (rank_step){.f = t->f[0], .q = t->q[0], .io = &t->b[0].io};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, step_main, r0), 0);
  usleep(1000000); /* its kernel is polling for rank 1's pushes by now */
  return th;
}

/* A rank's step fails on its host while its peer's kernel waits for it: no queue, then (a new
 * group) a queue of another agent, which is this rank's failure too (it used to run there). */
START_TEST(step_failure_stops_peer) {
  for (int variant = 0; variant < 2; variant++) {
    tp2 t;
    tp2_open(&t, &bounded, 7100 + (uint64_t)variant);
    rank_step r0;
    pthread_t th = start_rank0(&t, &r0);
    hm_queue *q = variant == 0 ? NULL : t.q[0];
    ck_assert_int_eq(hm_layer_ffn(t.f[1], q, &t.b[1].io), HM_ERR_INVALID_ARG);
    double failed_at = gc_now_s();
    expect_peer_told(&t, failed_at, &r0, th, variant == 0 ? "NULL queue" : "the queue is on agent 0");
    tp2_close(&t);
  }
}
END_TEST

/* A rank that refuses a step before its launch, its peer launching it: a malloc'd out, then (a new
 * group) rows out of range. Each rank checks only its own inputs, so the peer used to wait out the
 * peer bound for pushes that never came; the refusal now tells it at once, naming the rank, the
 * step and the reason. */
START_TEST(refusal_stops_peer) {
  for (int variant = 0; variant < 2; variant++) {
    tp2 t;
    tp2_open(&t, &bounded, 7800 + (uint64_t)variant);
    rank_step r0;
    pthread_t th = start_rank0(&t, &r0);
    hm_ffn_io io = t.b[1].io;
    void *plain = NULL;
    if (variant == 0) io.out = plain = calloc(1, 2 * 4096 * 2);
    else io.rows = 49;
    hm_status want = variant == 0 ? HM_ERR_INVALID_ARG : HM_ERR_REFUSED;
    ck_assert_int_eq(hm_layer_ffn(t.f[1], t.q[1], &io), want);
    double failed_at = gc_now_s();
    /* the refusing rank's own answer is its own reason, unchanged */
    ck_assert_msg(strstr(hm_errmsg(), variant == 0 ? ": out " : "49 rows") && !strstr(hm_errmsg(), "refused its step"),
                  "%s", hm_errmsg());
    expect_peer_told(&t, failed_at, &r0, th, variant == 0 ? "refused its step 1: FFN step: out " : "49 rows");
    free(plain);
    tp2_close(&t);
  }
}
END_TEST

/* Ranks that refuse the same step alike launch nothing: the group stays up, and the next step
 * runs, though one rank comes to it late. */
START_TEST(refused_alike_keeps_group) {
  tp2 t;
  tp2_open(&t, &bounded, 7900);
  rank_step rs[2];
  hm_ffn_io io[2];
  pthread_t th[2];
  for (int round = 0; round < 2; round++) {
    for (uint32_t r = 0; r < 2; r++) {
      io[r] = t.b[r].io;
      if (round == 0) io[r].rows = 49;
      /* in the good round rank 0 comes 300 ms late: rank 1, already waiting in its launch, must
       * not take rank 0's refusal of the round before for a refusal of this one */
      rs[r] = (rank_step){.f = t.f[r], .q = t.q[r], .io = &io[r], .delay_us = round == 1 && r == 0 ? 300000 : 0};
      ck_assert_int_eq(pthread_create(&th[r], NULL, step_main, &rs[r]), 0);
    }
    for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (uint32_t r = 0; r < 2; r++)
      ck_assert_msg(rs[r].st == (round == 0 ? HM_ERR_REFUSED : HM_OK), "round %d rank %u: %s: %s", round, r,
                    hm_status_name(rs[r].st), rs[r].err);
  }
  for (uint32_t r = 0; r < 2; r++) ck_assert_int_eq(hm_heap_check(t.h[r]), HM_OK);
  tp2_close(&t);
}
END_TEST

/* A rank whose create fails (here: another rank's weights) stops the group: a peer already in its
 * step ends at once, naming it, instead of waiting for pushes that will never come. */
START_TEST(create_failure_stops_peer) {
  tp2 t;
  tp2_open(&t, &bounded, 7200);
  rank_step r0;
  pthread_t th = start_rank0(&t, &r0);
  hm_ffn *f = NULL;
  ck_assert_int_eq(hm_ffn_create(t.h[1], &t.w[0], &bounded, &f), HM_ERR_INVALID_ARG);
  double failed_at = gc_now_s();
  ck_assert_ptr_null(f);
  expect_peer_told(&t, failed_at, &r0, th, "the weights are rank 0's");
  tp2_close(&t);
}
END_TEST

/* Rank 1's kernel hangs (a CTA held back, so its grid never arrives, and an arrival bound longer
 * than the watchdog): the software agent's watchdog fails it, its host stops the group, and rank 0,
 * whose kernel only waits on rank 1, names rank 1's watchdog: its own waits on a peer are bounded by
 * the peer bound, not taken for a hang of its own by the watchdog. */
START_TEST(watchdog_names_the_hung_rank) {
  setenv("HSAMONO_SIM_WATCHDOG_S", "2", 1);
  setenv("HSAMONO_SIM_HOLD_CTAS", "ffn:1", 1);
  hm_ffn_config fc = bounded;
  fc.arrival_timeout_ns = 15000000000ull;
  tp2 t;
  tp2_open(&t, &fc, 7300);
  /* rank 1 first: its launch is the first of kernel ffn, whose CTA 1 is held */
  rank_step r1 = {.f = t.f[1], .q = t.q[1], .io = &t.b[1].io};
  pthread_t th1;
  ck_assert_int_eq(pthread_create(&th1, NULL, step_main, &r1), 0);
  usleep(300000);
  rank_step r0 = {.f = t.f[0], .q = t.q[0], .io = &t.b[0].io};
  pthread_t th0;
  ck_assert_int_eq(pthread_create(&th0, NULL, step_main, &r0), 0);
  pthread_join(th1, NULL);
  ck_assert_msg(r1.st == HM_ERR_QUEUE_FAULT && strstr(r1.err, "watchdog"), "rank 1: %s: %s", hm_status_name(r1.st),
                r1.err);
  expect_peer_told(&t, r1.end, &r0, th0, "watchdog");
  tp2_close(&t);
  unsetenv("HSAMONO_SIM_WATCHDOG_S");
  unsetenv("HSAMONO_SIM_HOLD_CTAS");
}
END_TEST

/* Each rank's FFN launch of one row recorded into a chain of its own (no step has run before). */
static void record_ffn_chains(tp2 *t, hm_chain *c[2]) {
  for (uint32_t r = 0; r < 2; r++) {
    ck_assert_int_eq(hm_ffn_prepare(t->f[r], 1), HM_OK);
    ck_assert_int_eq(hm_chain_create(t->q[r], &c[r]), HM_OK);
    ck_assert_msg(hm_ffn_record(t->f[r], c[r], &t->b[r].io) == HM_OK, "%s", hm_errmsg());
  }
}

/* A rank's replay of a recorded chain, in its own thread. */
typedef struct {
  hm_chain *c;
  hm_status st;
  char err[1024];
  double end;
} rank_replay;

static void *replay_main(void *p) {
  rank_replay *r = p;
  r->st = hm_chain_replay(r->c);
  if (!r->st) r->st = hm_chain_wait(r->c, 600000000000ull);
  snprintf(r->err, sizeof r->err, "%s", r->st ? hm_errmsg() : "");
  r->end = gc_now_s();
  return NULL;
}

/* A replay whose launch fails on one rank stops the group as a step does: rank 1's recorded FFN
 * launch hangs (a CTA held back) until its watchdog fails its queue, and rank 0's replay, whose
 * kernel waits for rank 1's pushes, ends at once naming rank 1's watchdog (it used to wait out the
 * peer bound, or take rank 1's queue fault for its own). */
START_TEST(replay_failure_stops_peer) {
  setenv("HSAMONO_SIM_WATCHDOG_S", "2", 1);
  setenv("HSAMONO_SIM_HOLD_CTAS", "ffn:1", 1);
  tp2 t;
  tp2_open(&t, &bounded, 7700);
  hm_chain *c[2];
  /* no step has run: the first launch of kernel ffn is rank 1's replay, whose CTA 1 is held */
  record_ffn_chains(&t, c);
  rank_replay r1 = {.c = c[1]}, r0 = {.c = c[0]};
  pthread_t th1, th0;
  ck_assert_int_eq(pthread_create(&th1, NULL, replay_main, &r1), 0);
  usleep(300000);
  ck_assert_int_eq(pthread_create(&th0, NULL, replay_main, &r0), 0);
  pthread_join(th1, NULL);
  pthread_join(th0, NULL);
  ck_assert_msg(r1.st == HM_ERR_QUEUE_FAULT && strstr(r1.err, "watchdog"), "rank 1: %s: %s", hm_status_name(r1.st),
                r1.err);
  expect_told(&t, r1.end, r0.st, r0.err, r0.end, "watchdog");
  /* a failed group replays nothing */
  ck_assert_int_eq(hm_chain_replay(c[0]), HM_ERR_PEER);
  for (uint32_t r = 0; r < 2; r++) hm_chain_destroy(c[r]);
  tp2_close(&t);
  unsetenv("HSAMONO_SIM_WATCHDOG_S");
  unsetenv("HSAMONO_SIM_HOLD_CTAS");
}
END_TEST

/* A replay whose peer never comes: rank 0 replays its recorded FFN launch, rank 1 records and stays
 * idle, so rank 0's first all-reduce (the attention output's) waits out its peer bound (2 s here) and
 * the replay names that site. The site numbers of the FFN launch equalled the standalone
 * all-reduce's, so a replay's message blamed "the standalone all-reduce". */
START_TEST(replay_timeout_names_the_site) {
  hm_ffn_config fc = bounded;
  fc.peer_timeout_ns = 2000000000ull;
  tp2 t;
  tp2_open(&t, &fc, 7750);
  hm_chain *c[2];
  record_ffn_chains(&t, c);
  rank_replay r0 = {.c = c[0]};
  replay_main(&r0);
  ck_assert_msg(r0.st == HM_ERR_PEER && strstr(r0.err, "rank 1's push") &&
                    strstr(r0.err, "the attention output's all-reduce") && !strstr(r0.err, "standalone"),
                "rank 0: %s: %s", hm_status_name(r0.st), r0.err);
  for (uint32_t r = 0; r < 2; r++) hm_chain_destroy(c[r]);
  tp2_close(&t);
}
END_TEST

/* Both ranks step at once (threads), rank r with runner f[r] and rows[r]; both must fail within
 * FAST_S with HM_ERR_PEER naming the disagreement and both steps. */
static void expect_disagreement(tp2 *t, hm_ffn *f0, hm_ffn *f1, const uint32_t rows[2], const char *mine,
                                const char *theirs) {
  rank_step rs[2] = {{.f = f0, .q = t->q[0], .io = &t->b[0].io}, {.f = f1, .q = t->q[1], .io = &t->b[1].io}};
  hm_ffn_io io[2];
  pthread_t th[2];
  double t0 = gc_now_s();
  for (uint32_t r = 0; r < 2; r++) {
    io[r] = t->b[r].io;
    io[r].rows = rows[r];
    rs[r].io = &io[r];
    ck_assert_int_eq(pthread_create(&th[r], NULL, step_main, &rs[r]), 0);
  }
  for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (uint32_t r = 0; r < 2; r++) {
    ck_assert_msg(rs[r].st == HM_ERR_PEER, "rank %u: %s: %s", r, hm_status_name(rs[r].st), rs[r].err);
    ck_assert_msg(strstr(rs[r].err, "steps disagree") && strstr(rs[r].err, mine) && strstr(rs[r].err, theirs),
                  "rank %u does not name both steps: %s", r, rs[r].err);
    /* a tiny TP2 step takes well under a second here; the peer bound is 20 s */
    ck_assert_msg(rs[r].end - t0 < FAST_S, "rank %u ended after %.2f s: %s", r, rs[r].end - t0, rs[r].err);
  }
  fprintf(stderr, "both ranks told within %.3f s: %s\n",
          (rs[0].end > rs[1].end ? rs[0].end : rs[1].end) - t0, rs[0].err);
}

/* The ranks disagree on the step's rows: each way round (rank 0 with more rows lays its pushes
 * where rank 1's fewer rows read them, so rank 1's launch completes on them: the check after the
 * launch catches that; the other way both wait, and the check while waiting does). */
START_TEST(rows_disagree) {
  tp2 t;
  tp2_open(&t, &bounded, 7500);
  const uint32_t more0[2] = {2, 1};
  expect_disagreement(&t, t.f[0], t.f[1], more0, "layer 3, 2 rows",
                      "layer 3, 1 rows");
  tp2_close(&t);
  tp2_open(&t, &bounded, 7501);
  const uint32_t more1[2] = {1, 2};
  expect_disagreement(&t, t.f[0], t.f[1], more1, "layer 3, 1 rows",
                      "layer 3, 2 rows");
  tp2_close(&t);
}
END_TEST

/* The ranks disagree on the layer: rank 0 steps layer 3, rank 1 layer 4 (both ranks created both
 * layers, in the same order). */
START_TEST(layers_disagree) {
  tp2 t;
  tp2_open(&t, &bounded, 7600);
  hm_layer_config c4 = tl_config("tiny", 4, 0, 0);
  hm_layer_weights w4[2];
  tl_build_group(&c4, 2, 7601, HM_WPART_FFN, w4);
  hm_ffn *f4[2];
  for (uint32_t r = 0; r < 2; r++)
    ck_assert_msg(hm_ffn_create(t.h[r], &w4[r], &bounded, &f4[r]) == HM_OK, "%s", hm_errmsg());
  const uint32_t rows[2] = {1, 1};
  expect_disagreement(&t, t.f[0], f4[1], rows, "layer 3, 1 rows", "layer 4, 1 rows");
  for (uint32_t r = 0; r < 2; r++) hm_ffn_destroy(f4[r]);
  tl_free_group(w4, 2);
  tp2_close(&t);
}
END_TEST

/* A rank's standalone all-reduce step and its wait, in its own thread. */
typedef struct {
  hm_ar *ar;
  hm_queue *q;
  void *buf;
  uint32_t rows;
  hm_status st;
  char err[1024];
  double end;
} rank_ar;

static void *ar_main(void *p) {
  rank_ar *r = p;
  r->st = hm_allreduce(r->ar, r->q, r->buf, r->buf, r->rows);
  if (!r->st) r->st = hm_ar_wait(r->ar, 600000000000ull);
  snprintf(r->err, sizeof r->err, "%s", r->st ? hm_errmsg() : "");
  r->end = gc_now_s();
  return NULL;
}

/* A rank's wait for the all-reduce steps it has enqueued, in its own thread. */
static void *ar_wait_main(void *p) {
  rank_ar *r = p;
  r->st = hm_ar_wait(r->ar, 600000000000ull);
  snprintf(r->err, sizeof r->err, "%s", r->st ? hm_errmsg() : "");
  r->end = gc_now_s();
  return NULL;
}

/* The standalone all-reduce carries the step header too: rank 0 reduces 2 rows, rank 1 one. Rank 1
 * read rank 0's first row and returned HM_OK with it, rank 0 waited out the peer bound for a
 * second row; both now fail at once naming both steps. */
START_TEST(allreduce_rows_disagree) {
  tp2 t;
  tp2_open(&t, &bounded, 8000);
  const hm_ar_config ac = {.width = 64, .max_rows = 2, .timeout_ns = PEER_NS};
  rank_ar ra[2];
  pthread_t th[2];
  double t0 = gc_now_s();
  for (uint32_t r = 0; r < 2; r++) {
    ra[r] = (rank_ar){.q = t.q[r], .buf = t.b[r].buf[1], .rows = r == 0 ? 2 : 1};
    ck_assert_msg(hm_ar_create(t.h[r], &ac, &ra[r].ar) == HM_OK, "%s", hm_errmsg());
  }
  for (uint32_t r = 0; r < 2; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, ar_main, &ra[r]), 0);
  for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (uint32_t r = 0; r < 2; r++) {
    ck_assert_msg(ra[r].st == HM_ERR_PEER && strstr(ra[r].err, "steps disagree") &&
                      strstr(ra[r].err, "an all-reduce of 2 rows") && strstr(ra[r].err, "an all-reduce of 1 rows"),
                  "rank %u: %s: %s", r, hm_status_name(ra[r].st), ra[r].err);
    ck_assert_msg(ra[r].end - t0 < FAST_S, "rank %u ended after %.2f s: %s", r, ra[r].end - t0, ra[r].err);
  }
  fprintf(stderr, "both ranks told within %.3f s: %s\n", (ra[0].end > ra[1].end ? ra[0].end : ra[1].end) - t0,
          ra[0].err);
  for (uint32_t r = 0; r < 2; r++) ck_assert_int_eq(hm_ar_destroy(ra[r].ar), HM_OK);
  tp2_close(&t);
}
END_TEST

/* Each rank's chain: its FFN launch of layer 3 recorded for rows[r] (a step of that width
 * prepared first, as a record requires). */
static void record_ffn(tp2 *t, const uint32_t rows[2], hm_chain *c[2]) {
  for (uint32_t r = 0; r < 2; r++) {
    hm_ffn_io io = t->b[r].io;
    io.rows = rows[r];
    ck_assert_msg(hm_ffn_prepare(t->f[r], rows[r]) == HM_OK, "%s", hm_errmsg());
    ck_assert_int_eq(hm_chain_create(t->q[r], &c[r]), HM_OK);
    ck_assert_msg(hm_ffn_record(t->f[r], c[r], &io) == HM_OK, "%s", hm_errmsg());
  }
}

/* Both ended HM_ERR_PEER within FAST_S of t0, naming the disagreement and both steps. */
static void expect_both_named(const hm_status st[2], char err[2][1024], const double end[2], double t0,
                              const char *a, const char *b) {
  for (uint32_t r = 0; r < 2; r++) {
    ck_assert_msg(st[r] == HM_ERR_PEER, "rank %u: %s: %s", r, hm_status_name(st[r]), err[r]);
    ck_assert_msg(strstr(err[r], "steps disagree") && strstr(err[r], a) && strstr(err[r], b),
                  "rank %u does not name both steps: %s", r, err[r]);
    ck_assert_msg(end[r] - t0 < FAST_S, "rank %u ended after %.2f s (peer bound %.0f s): %s", r, end[r] - t0,
                  PEER_NS / 1e9, err[r]);
  }
  fprintf(stderr, "both ranks told within %.3f s: %s\n", (end[0] > end[1] ? end[0] : end[1]) - t0, err[0]);
}

/* Two all-reduces enqueued before one wait, the first of them disagreeing (rank 0 reduces 2 rows
 * there, rank 1 one), the second alike. hm_ar_wait compared only the latest step, which agrees:
 * rank 1 completed the first on rank 0's first row and waited in the second for rank 0, whose
 * first waited out the peer bound for a second row. Every step in flight is compared now: both
 * fail at once naming the first step. */
START_TEST(allreduce_earlier_step_disagrees) {
  tp2 t;
  tp2_open(&t, &bounded, 8050);
  const hm_ar_config ac = {.width = 64, .max_rows = 2, .timeout_ns = PEER_NS};
  hm_ar *ar[2];
  for (uint32_t r = 0; r < 2; r++) ck_assert_msg(hm_ar_create(t.h[r], &ac, &ar[r]) == HM_OK, "%s", hm_errmsg());
  double t0 = gc_now_s();
  hm_status st[2];
  char err[2][1024];
  double end[2];
  /* each rank enqueues both steps, then waits: one thread a rank, as a serving stack's ranks */
  for (uint32_t r = 0; r < 2; r++) {
    ck_assert_msg(hm_allreduce(ar[r], t.q[r], t.b[r].buf[1], t.b[r].buf[1], r == 0 ? 2 : 1) == HM_OK, "%s",
                  hm_errmsg());
    ck_assert_msg(hm_allreduce(ar[r], t.q[r], t.b[r].buf[1], t.b[r].buf[1], 1) == HM_OK, "%s", hm_errmsg());
  }
  rank_ar ra[2];
  pthread_t th[2];
  for (uint32_t r = 0; r < 2; r++) {
    ra[r] = (rank_ar){.ar = ar[r]};
    ck_assert_int_eq(pthread_create(&th[r], NULL, ar_wait_main, &ra[r]), 0);
  }
  for (uint32_t r = 0; r < 2; r++) {
    pthread_join(th[r], NULL);
    st[r] = ra[r].st, end[r] = ra[r].end;
    snprintf(err[r], sizeof err[r], "%s", ra[r].err);
  }
  expect_both_named(st, err, end, t0, "step 1 is an all-reduce of ", "an all-reduce of 2 rows");
  for (uint32_t r = 0; r < 2; r++) ck_assert_msg(strstr(err[r], "an all-reduce of 1 rows"), "%s", err[r]);
  for (uint32_t r = 0; r < 2; r++) ck_assert_int_eq(hm_ar_destroy(ar[r]), HM_OK);
  tp2_close(&t);
}
END_TEST

/* A replay is a step of its own with a header made as it is replayed: rank 0 replays its FFN
 * launch recorded for 2 rows, rank 1 the same launch recorded for 1 row. Replays carried no header,
 * so rank 1 completed on rank 0's first row (HM_OK) and rank 0 waited out the peer bound for a
 * second; both now fail at once naming both steps. */
START_TEST(replay_rows_disagree) {
  tp2 t;
  tp2_open(&t, &bounded, 7800);
  hm_chain *c[2];
  const uint32_t rows[2] = {2, 1};
  record_ffn(&t, rows, c);
  rank_replay rr[2] = {{.c = c[0]}, {.c = c[1]}};
  pthread_t th[2];
  double t0 = gc_now_s();
  for (uint32_t r = 0; r < 2; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, replay_main, &rr[r]), 0);
  for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
  const hm_status st[2] = {rr[0].st, rr[1].st};
  char err[2][1024];
  const double end[2] = {rr[0].end, rr[1].end};
  for (uint32_t r = 0; r < 2; r++) snprintf(err[r], sizeof err[r], "%s", rr[r].err);
  expect_both_named(st, err, end, t0, "an FFN launch step of layer 3, 2 rows", "an FFN launch step of layer 3, 1 rows");
  /* the stopped group replays nothing more */
  ck_assert_int_eq(hm_chain_replay(c[1]), HM_ERR_PEER);
  for (uint32_t r = 0; r < 2; r++) hm_chain_destroy(c[r]);
  tp2_close(&t);
}
END_TEST

/* Rank 0 replays its recorded FFN launch once more than rank 1, whose next step is an all-reduce:
 * every replay takes a step number, so rank 0's second replay and rank 1's all-reduce are the same
 * step, and both fail at once naming both (replays took no number: rank 0's replay and rank 1's
 * all-reduce each waited out the peer bound for the other's pushes). */
START_TEST(replay_one_more) {
  tp2 t;
  tp2_open(&t, &bounded, 7900);
  hm_chain *c[2];
  const uint32_t rows[2] = {1, 1};
  record_ffn(&t, rows, c);
  const hm_ar_config ac = {.width = 64, .max_rows = 2, .timeout_ns = PEER_NS};
  rank_ar ra = {.q = t.q[1], .buf = t.b[1].buf[1], .rows = 1};
  ck_assert_msg(hm_ar_create(t.h[1], &ac, &ra.ar) == HM_OK, "%s", hm_errmsg());
  hm_ar *ar0;
  ck_assert_msg(hm_ar_create(t.h[0], &ac, &ar0) == HM_OK, "%s", hm_errmsg());
  /* the first replay, made by both, agrees */
  rank_replay rr[2] = {{.c = c[0]}, {.c = c[1]}};
  pthread_t th[2];
  for (uint32_t r = 0; r < 2; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, replay_main, &rr[r]), 0);
  for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (uint32_t r = 0; r < 2; r++) ck_assert_msg(rr[r].st == HM_OK, "rank %u: %s", r, rr[r].err);
  /* then rank 0 replays again while rank 1 reduces */
  double t0 = gc_now_s();
  rr[0] = (rank_replay){.c = c[0]};
  ck_assert_int_eq(pthread_create(&th[0], NULL, replay_main, &rr[0]), 0);
  ck_assert_int_eq(pthread_create(&th[1], NULL, ar_main, &ra), 0);
  for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
  const hm_status st[2] = {rr[0].st, ra.st};
  char err[2][1024];
  snprintf(err[0], sizeof err[0], "%s", rr[0].err);
  snprintf(err[1], sizeof err[1], "%s", ra.err);
  const double end[2] = {rr[0].end, ra.end};
  expect_both_named(st, err, end, t0, "an FFN launch step of layer 3, 1 rows", "an all-reduce of 1 rows");
  for (uint32_t r = 0; r < 2; r++) hm_chain_destroy(c[r]);
  ck_assert_int_eq(hm_ar_destroy(ra.ar), HM_OK);
  ck_assert_int_eq(hm_ar_destroy(ar0), HM_OK);
  tp2_close(&t);
}
END_TEST

/* A replay of several steps publishes every step's header (a ring of 8 a rank): each rank's chain
 * records three all-reduces, alike but for the second (rank 0 reduces 2 rows there, rank 1 one).
 * The first steps agree; the second disagreement is found and named, as the first would be. */
START_TEST(replay_second_step_disagrees) {
  tp2 t;
  tp2_open(&t, &bounded, 8100);
  const hm_ar_config ac = {.width = 64, .max_rows = 2, .timeout_ns = PEER_NS};
  hm_ar *ar[2];
  hm_chain *c[2];
  for (uint32_t r = 0; r < 2; r++) {
    ck_assert_msg(hm_ar_create(t.h[r], &ac, &ar[r]) == HM_OK, "%s", hm_errmsg());
    ck_assert_int_eq(hm_chain_create(t.q[r], &c[r]), HM_OK);
    for (uint32_t j = 0; j < 3; j++) {
      uint32_t rows = j == 1 && r == 0 ? 2 : 1;
      ck_assert_msg(hm_ar_record(ar[r], c[r], t.b[r].buf[1], t.b[r].buf[6], rows) == HM_OK, "%s", hm_errmsg());
    }
  }
  rank_replay rr[2] = {{.c = c[0]}, {.c = c[1]}};
  pthread_t th[2];
  double t0 = gc_now_s();
  for (uint32_t r = 0; r < 2; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, replay_main, &rr[r]), 0);
  for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
  const hm_status st[2] = {rr[0].st, rr[1].st};
  char err[2][1024];
  const double end[2] = {rr[0].end, rr[1].end};
  for (uint32_t r = 0; r < 2; r++) snprintf(err[r], sizeof err[r], "%s", rr[r].err);
  /* no step ran before: the replay's steps are 1, 2 and 3, and the second is named */
  expect_both_named(st, err, end, t0, "step 2 is an all-reduce of ", "an all-reduce of 2 rows");
  for (uint32_t r = 0; r < 2; r++) ck_assert_msg(strstr(err[r], "an all-reduce of 1 rows"), "%s", err[r]);
  for (uint32_t r = 0; r < 2; r++) {
    hm_chain_destroy(c[r]);
    ck_assert_int_eq(hm_ar_destroy(ar[r]), HM_OK);
  }
  tp2_close(&t);
}
END_TEST

/* The bounds must be ordered so the first to expire names the root cause. */
START_TEST(bounds_out_of_order_refused) {
  tp2 t;
  tp2_open(&t, &bounded, 7400);
  hm_ffn *f = NULL;
  hm_ffn_config fc = bounded;
  fc.arrival_timeout_ns = PEER_NS; /* not below the peer bound */
  ck_assert_int_eq(hm_ffn_create(t.h[0], &t.w[0], &fc, &f), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "bounds out of order"), "%s", hm_errmsg());
  fc = bounded;
  fc.step_timeout_ns = PEER_NS; /* not above it */
  ck_assert_int_eq(hm_ffn_create(t.h[0], &t.w[0], &fc, &f), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "step 20.000 s"), "%s", hm_errmsg());
  ck_assert_ptr_null(f);
  tp2_close(&t);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"step_failure_stops_peer", step_failure_stops_peer},
      {"create_failure_stops_peer", create_failure_stops_peer},
      {"watchdog_names_the_hung_rank", watchdog_names_the_hung_rank},
      {"replay_failure_stops_peer", replay_failure_stops_peer},
      {"replay_timeout_names_the_site", replay_timeout_names_the_site},
      {"refusal_stops_peer", refusal_stops_peer},
      {"refused_alike_keeps_group", refused_alike_keeps_group},
      {"allreduce_rows_disagree", allreduce_rows_disagree},
      {"allreduce_earlier_step_disagrees", allreduce_earlier_step_disagrees},
      {"rows_disagree", rows_disagree},
      {"layers_disagree", layers_disagree},
      {"replay_rows_disagree", replay_rows_disagree},
      {"replay_one_more", replay_one_more},
      {"replay_second_step_disagrees", replay_second_step_disagrees},
      {"bounds_out_of_order_refused", bounds_out_of_order_refused},
  };
  return TL_SUITE("group_fail", tests, 120);
}
