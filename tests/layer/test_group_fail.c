/* tests/layer/test_group_fail.c: a TP group fails together and fast (issue 16 item 2): a rank whose
 * create or step fails stops the group at once, and every peer names that rank and its reason. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "hm_ffn_group.h"

/* The peer bound of these groups: long against what the tests allow (FAST_S), so a peer that
 * learns of a failure only at its bound (the behaviour these tests guard against) fails them, and
 * short enough that such a run ends in seconds rather than at the software agent's 600 s. */
#define PEER_NS 20000000000ull
/* What "at once" may take here: the peer's kernel ends its poll and its remaining stages (a tiny
 * TP2 step, well under a second alone), on two cores shared with other builds and tests. */
#define FAST_S 5.0

static const hm_ffn_config bounded = {.min_cus = 1, .reduced_experts = true, .peer_timeout_ns = PEER_NS};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One rank's step buffers (1 row, zeroed) on agent a. */
typedef struct {
  hm_ffn_io io;
  void *buf[10];
} step_bufs;

static void bufs_make(hm_runtime *rt, hm_agent *a, uint32_t D, step_bufs *b) {
  const size_t bytes[10] = {2 * D, 8 * D, 16, 64, 16, 2 * D, 8 * D, 16, 64, 16};
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, bytes[i], 0, &b->buf[i]), HM_OK);
    ck_assert_int_eq(hm_mem_fill(rt, b->buf[i], 0, bytes[i] / 4), HM_OK);
  }
  b->io = (hm_ffn_io){.rows = 1, .part = b->buf[0], .res_in = b->buf[1], .post_in = b->buf[2], .comb_in = b->buf[3],
                      .pre_in = b->buf[4], .out = b->buf[5], .res_out = b->buf[6], .post_out = b->buf[7],
                      .comb_out = b->buf[8], .pre_out = b->buf[9]};
}

/* A rank's step in its own thread: its status, message and when it returned. */
typedef struct {
  hm_ffn *f;
  hm_queue *q;
  const hm_ffn_io *io;
  hm_status st;
  char err[1024];
  double end;
} rank_step;

static void *step_main(void *p) {
  rank_step *r = p;
  r->st = hm_layer_ffn(r->f, r->q, r->io);
  snprintf(r->err, sizeof r->err, "%s", r->st ? hm_errmsg() : "");
  r->end = now_s();
  return NULL;
}

typedef struct {
  hm_runtime *rt;
  hm_layer_weights w[2];
  hm_ffn_group *g;
  hm_queue *q[2];
  step_bufs b[2];
} tp2;

static void tp2_open(tp2 *t, const hm_ffn_config *fc, uint64_t seed) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  t->rt = tl_open_sim();
  tl_build_group(&cfg, 2, seed, HM_WPART_FFN, t->w);
  ck_assert_msg(hm_ffn_group_create(t->rt, t->w, 2, fc, &t->g) == HM_OK, "%s", hm_errmsg());
  for (uint32_t r = 0; r < 2; r++) {
    hm_agent *a = hm_agent_get(t->rt, r);
    ck_assert_int_eq(hm_queue_create(a, 64, &t->q[r]), HM_OK);
    bufs_make(t->rt, a, cfg.hidden, &t->b[r]);
  }
}

static void tp2_close(tp2 *t) {
  for (uint32_t r = 0; r < 2; r++) hm_queue_destroy(t->q[r]);
  hm_ffn_group_destroy(t->g);
  tl_free_group(t->w, 2);
  hm_runtime_close(t->rt);
}

/* Rank 0 steps in a thread; once its kernel is waiting for rank 1's pushes, rank 1 fails on its
 * host. Rank 0 must end within FAST_S of that with HM_ERR_PEER naming rank 1 and `reason`. */
static void expect_peer_told(tp2 *t, double failed_at, rank_step *r0, pthread_t th, const char *reason) {
  pthread_join(th, NULL);
  double after = r0->end - failed_at;
  ck_assert_msg(r0->st == HM_ERR_PEER, "rank 0: %s: %s", hm_status_name(r0->st), r0->err);
  ck_assert_msg(strstr(r0->err, "rank 1 failed") && strstr(r0->err, reason), "rank 0 does not name rank 1's %s: %s",
                reason, r0->err);
  ck_assert_msg(after < FAST_S, "rank 0 ended %.2f s after rank 1 failed (peer bound %.0f s): %s", after,
                PEER_NS / 1e9, r0->err);
  /* and the group stays failed: the next step is refused at once, with the same root cause */
  ck_assert_int_eq(hm_layer_ffn(hm_ffn_group_rank(t->g, 0), t->q[0], &t->b[0].io), HM_ERR_PEER);
  ck_assert_msg(strstr(hm_errmsg(), reason), "%s", hm_errmsg());
  fprintf(stderr, "rank 0 told %.3f s after rank 1 failed: %s\n", after, r0->err);
}

static pthread_t start_rank0(tp2 *t, rank_step *r0) {
  *r0 = (rank_step){.f = hm_ffn_group_rank(t->g, 0), .q = t->q[0], .io = &t->b[0].io};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, step_main, r0), 0);
  usleep(1000000); /* its kernel is polling for rank 1's pushes by now */
  return th;
}

/* A rank's step fails on its host (here: no queue) while its peer's kernel waits for it. */
START_TEST(step_failure_stops_peer) {
  tp2 t;
  tp2_open(&t, &bounded, 7100);
  rank_step r0;
  pthread_t th = start_rank0(&t, &r0);
  ck_assert_int_eq(hm_layer_ffn(hm_ffn_group_rank(t.g, 1), NULL, &t.b[1].io), HM_ERR_INVALID_ARG);
  double failed_at = now_s();
  ck_assert_msg(strstr(hm_errmsg(), "NULL queue"), "%s", hm_errmsg());
  expect_peer_told(&t, failed_at, &r0, th, "NULL queue");
  tp2_close(&t);
}
END_TEST

/* A rank's step on a queue of another agent is this rank's failure too (and no longer runs). */
START_TEST(wrong_queue_stops_peer) {
  tp2 t;
  tp2_open(&t, &bounded, 7150);
  rank_step r0;
  pthread_t th = start_rank0(&t, &r0);
  ck_assert_int_eq(hm_layer_ffn(hm_ffn_group_rank(t.g, 1), t.q[0], &t.b[1].io), HM_ERR_INVALID_ARG);
  double failed_at = now_s();
  expect_peer_told(&t, failed_at, &r0, th, "the queue is on agent 0");
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
  ck_assert_int_eq(hm_ffn_create(hm_ffn_group_heap(t.g, 1), &t.w[0], &bounded, &f), HM_ERR_INVALID_ARG);
  double failed_at = now_s();
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
  rank_step r1 = {.f = hm_ffn_group_rank(t.g, 1), .q = t.q[1], .io = &t.b[1].io};
  pthread_t th1;
  ck_assert_int_eq(pthread_create(&th1, NULL, step_main, &r1), 0);
  usleep(300000);
  rank_step r0 = {.f = hm_ffn_group_rank(t.g, 0), .q = t.q[0], .io = &t.b[0].io};
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

/* The bounds must be ordered so the first to expire names the root cause. */
START_TEST(bounds_out_of_order_refused) {
  tp2 t;
  tp2_open(&t, &bounded, 7400);
  hm_ffn *f = NULL;
  hm_ffn_config fc = bounded;
  fc.arrival_timeout_ns = PEER_NS; /* not below the peer bound */
  ck_assert_int_eq(hm_ffn_create(hm_ffn_group_heap(t.g, 0), &t.w[0], &fc, &f), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "bounds out of order"), "%s", hm_errmsg());
  fc = bounded;
  fc.step_timeout_ns = PEER_NS; /* not above it */
  ck_assert_int_eq(hm_ffn_create(hm_ffn_group_heap(t.g, 0), &t.w[0], &fc, &f), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "step 20.000 s"), "%s", hm_errmsg());
  ck_assert_ptr_null(f);
  tp2_close(&t);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"step_failure_stops_peer", step_failure_stops_peer},
      {"wrong_queue_stops_peer", wrong_queue_stops_peer},
      {"create_failure_stops_peer", create_failure_stops_peer},
      {"watchdog_names_the_hung_rank", watchdog_names_the_hung_rank},
      {"bounds_out_of_order_refused", bounds_out_of_order_refused},
  };
  return TL_SUITE("group_fail", tests, 120);
}
