/* tests/collectives/test_heap.c: rank bootstrap and the symmetric heap: threads, processes through
 * the Unix-socket rendezvous, a caller's all-gather; ranks that never arrive or die; teardown. */
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "coll_helpers.h"
#include "kernels/ar_args.h"

static hm_runtime *open_rt(void) {
  hm_runtime *rt = NULL;
  ck_assert_msg(hm_runtime_open(NULL, &rt) == HM_OK, "%s", hm_errmsg());
  return rt;
}

/* ---------------------------------------------------------------- one rank's set-up */

struct t_setup {
  hm_runtime *rt;
  unsigned rank, tp;
  hm_bootstrap boot;
  size_t half;
  uint64_t timeout_ns;
  bool keep;        /* leave the heap for the caller */
  bool no_agent;    /* call hm_heap_create without an agent */
  unsigned claim_tp; /* the TP it gives the set-up (0: tp) */
  hm_ar_protocol protocol; /* the all-reduce protocol it asks for (0: the default) */
  hm_status st;
  char err[512];
  uint64_t took_ns;
  hm_heap *h;
};

static void *setup_main(void *p) {
  struct t_setup *t = p;
  hm_heap_config c = {.rank = t->rank, .tp = t->claim_tp ? t->claim_tp : t->tp, .half_bytes = t->half,
                      .timeout_ns = t->timeout_ns, .protocol = t->protocol};
  uint64_t t0 = t_now_ns();
  t->st = hm_heap_create(t->no_agent ? NULL : hm_agent_get(t->rt, t->rank), &c, &t->boot, &t->h);
  t->took_ns = t_now_ns() - t0;
  if (t->st) snprintf(t->err, sizeof t->err, "%s", hm_errmsg());
  else if (!t->keep) hm_heap_destroy(t->h), t->h = NULL;
  return NULL;
}

/* Run ranks `who` (a bit each) of a tp-rank group as threads; the others never arrive. */
static void setup_threads(hm_runtime *rt, unsigned tp, unsigned who, uint64_t timeout_ns, bool keep, struct t_setup *t) {
  hm_boot_group *g;
  ck_assert_int_eq(hm_boot_group_create(tp, &g), HM_OK);
  pthread_t th[HM_MAX_TP];
  for (unsigned r = 0; r < tp; r++) {
    t[r] = (struct t_setup){.rt = rt, .rank = r, .tp = tp, .timeout_ns = timeout_ns, .keep = keep};
    ck_assert_int_eq(hm_bootstrap_threads(g, &t[r].boot), HM_OK);
    if (who >> r & 1) ck_assert_int_eq(pthread_create(&th[r], NULL, setup_main, &t[r]), 0);
  }
  for (unsigned r = 0; r < tp; r++)
    if (who >> r & 1) pthread_join(th[r], NULL);
  hm_boot_group_destroy(g);
}

/* Run the tp set-ups t[] (filled by the caller) as threads over one group: rank 0 first and, after
 * delay_us (so it waits in the all-gather), the others. */
/* tp ranks' set-ups on rt with the bound timeout_ns, every other field zero (the test sets what differs). */
static void setups_of(hm_runtime *rt, struct t_setup *t, unsigned tp, uint64_t timeout_ns) {
  for (unsigned r = 0; r < tp; r++) t[r] = (struct t_setup){.rt = rt, .rank = r, .tp = tp, .timeout_ns = timeout_ns};
}

static void run_setups(unsigned tp, struct t_setup *t, unsigned delay_us) {
  hm_boot_group *g;
  ck_assert_int_eq(hm_boot_group_create(tp, &g), HM_OK);
  pthread_t th[HM_MAX_TP];
  for (unsigned r = 0; r < tp; r++) {
    ck_assert_int_eq(hm_bootstrap_threads(g, &t[r].boot), HM_OK);
    if (r == 1) usleep(delay_us);
    ck_assert_int_eq(pthread_create(&th[r], NULL, setup_main, &t[r]), 0);
  }
  for (unsigned r = 0; r < tp; r++) pthread_join(th[r], NULL);
  hm_boot_group_destroy(g);
}

/* ---------------------------------------------------------------- threads */

/* TP 2, 4, 8: every rank maps every arena; the table in each rank's control page lists them as that
 * rank maps them (its own arena first-hand, the others attached); reservations agree; teardown runs
 * in an order unlike set-up's. */
START_TEST(threads_tp_2_4_8) {
  hm_runtime *rt = open_rt();
  for (unsigned tp = 2; tp <= 8; tp *= 2) {
    struct t_setup t[HM_MAX_TP];
    setup_threads(rt, tp, (1u << tp) - 1, 60000000000ull, true, t);
    for (unsigned r = 0; r < tp; r++) ck_assert_msg(t[r].st == HM_OK, "tp %u rank %u: %s", tp, r, t[r].err);
    for (unsigned r = 0; r < tp; r++) {
      hm_heap *h = t[r].h;
      ck_assert_uint_eq(hm_heap_rank(h), r);
      ck_assert_uint_eq(hm_heap_tp(h), tp);
      ck_assert_uint_ge(hm_heap_half_bytes(h), hm_allreduce_region_bytes(tp, 48, 5120));
      uint32_t status = 0;
      struct hm_ar_link link;
      ck_assert_int_eq(hm_heap_link(h, &status, 1000000000ull, &link), HM_OK);
      ck_assert_uint_eq(link.rank, r);
      ck_assert_uint_eq(link.tp, tp);
      ck_assert_uint_eq(link.deadline_ticks, 100000000ull);
      /* the table, read back through the copy engine */
      uint64_t *tab;
      ck_assert_int_eq(hm_mem_alloc(hm_heap_agent(h), HM_POOL_HOST, 4096, 0, (void **)&tab), HM_OK);
      hm_signal none = {0};
      ck_assert_int_eq(hm_mem_copy(rt, tab, (void *)(uintptr_t)link.peers, 8 * HM_MAX_TP, none), HM_OK);
      ck_assert_uint_eq(tab[r], link.peers - AR_PEERS_OFF);
      for (unsigned q = 0; q < HM_MAX_TP; q++) {
        if (q < tp) ck_assert_uint_ne(tab[q], 0);
        else ck_assert_uint_eq(tab[q], 0);
        for (unsigned o = 0; o < q && q < tp; o++) ck_assert_uint_ne(tab[q], tab[o]);
      }
      hm_mem_free(rt, tab);
      size_t off1, off2;
      ck_assert_int_eq(hm_heap_reserve(h, 1000, &off1), HM_OK);
      ck_assert_int_eq(hm_heap_reserve(h, 8, &off2), HM_OK);
      ck_assert_uint_eq(off1, 0);
      ck_assert_uint_eq(off2, 1024); /* regions never share a 128-byte line */
      ck_assert_int_eq(hm_heap_check(h), HM_OK);
    }
    /* teardown in any order: odd ranks first, then even ones from the top */
    for (unsigned r = 1; r < tp; r += 2) ck_assert_int_eq(hm_heap_destroy(t[r].h), HM_OK);
    for (unsigned r = tp; r-- > 0;)
      if (r % 2 == 0) ck_assert_int_eq(hm_heap_destroy(t[r].h), HM_OK);
  }
  hm_runtime_close(rt);
}
END_TEST

/* Rank 2 of 3 never arrives: ranks 0 and 1 fail within their bound, naming it, holding nothing. */
START_TEST(threads_rank_never_arrives) {
  hm_runtime *rt = open_rt();
  struct t_setup t[HM_MAX_TP];
  setup_threads(rt, 3, 0x3, 1000000000ull, false, t);
  for (unsigned r = 0; r < 2; r++) {
    ck_assert_int_eq(t[r].st, HM_ERR_PEER);
    ck_assert_msg(strstr(t[r].err, "rank 2 never arrived"), "rank %u: %s", r, t[r].err);
    ck_assert_uint_lt(t[r].took_ns, 60000000000ull);
  }
  hm_runtime_close(rt);
}
END_TEST

/* A rank that cannot set up (its arena is too large for its agent) makes every rank fail, naming it;
 * so does a rank that asks for other halves than rank 0. */
START_TEST(threads_rank_fails_setup) {
  hm_runtime *rt = open_rt();
  for (int variant = 0; variant < 2; variant++) {
    struct t_setup t[3];
    setups_of(rt, t, 3, 60000000000ull);
    /* variant 0: more than the agent's whole pool */
    t[1].half = variant == 0 ? hm_agent_info_of(hm_agent_get(rt, 1))->pool_size[HM_POOL_UNCACHED] : 1u << 20;
    run_setups(3, t, 0);
    for (unsigned r = 0; r < 3; r++) {
      ck_assert_int_eq(t[r].st, HM_ERR_PEER);
      ck_assert_msg(strstr(t[r].err, variant == 0 ? "rank 1 could not set up" : "rank 1 has halves of 1048576 bytes, rank 0 of"), "rank %u: %s", r,
                    t[r].err);
    }
  }
  hm_runtime_close(rt);
}
END_TEST

/* The caller's own all-gather (here over shared arrays, unlike the built-ins), and one that fails:
 * the failure comes back, and nothing is left allocated. Rounds alternate between two buffers: a
 * rank can only start round g + 2 once every rank has entered round g + 1, i.e. left round g. */
struct my_gather {
  pthread_mutex_t lock;
  pthread_cond_t cv;
  unsigned arrived, gen;
  uint8_t buf[2][HM_MAX_TP * 1024];
  int fail;
};
static hm_status my_allgather(void *ctx, unsigned rank, unsigned tp, const void *mine, size_t bytes, void *all,
                              uint64_t timeout_ns) {
  (void)timeout_ns;
  struct my_gather *m = ctx;
  if (m->fail) return hm_fail(HM_ERR_IO, "the serving stack's process group is gone");
  if (bytes > 1024) return hm_fail(HM_ERR_INVALID_ARG, "too big");
  pthread_mutex_lock(&m->lock);
  unsigned gen = m->gen;
  uint8_t *b = m->buf[gen & 1];
  memcpy(b + rank * bytes, mine, bytes);
  if (++m->arrived == tp) {
    m->arrived = 0, m->gen++;
    pthread_cond_broadcast(&m->cv);
  } else {
    while (m->gen == gen) pthread_cond_wait(&m->cv, &m->lock);
  }
  memcpy(all, b, tp * bytes);
  pthread_mutex_unlock(&m->lock);
  return HM_OK;
}

START_TEST(callback_bootstrap) {
  hm_runtime *rt = open_rt();
  for (int fail = 0; fail < 2; fail++) {
    struct my_gather m = {.fail = fail};
    pthread_mutex_init(&m.lock, NULL);
    pthread_cond_init(&m.cv, NULL);
    struct t_setup t[2];
    pthread_t th[2];
    for (unsigned r = 0; r < 2; r++) {
      t[r] = (struct t_setup){.rt = rt, .rank = r, .tp = 2, .timeout_ns = 60000000000ull};
      ck_assert_int_eq(hm_bootstrap_allgather(my_allgather, &m, &t[r].boot), HM_OK);
      ck_assert_int_eq(pthread_create(&th[r], NULL, setup_main, &t[r]), 0);
    }
    for (unsigned r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (unsigned r = 0; r < 2; r++) {
      if (!fail) ck_assert_msg(t[r].st == HM_OK, "%s", t[r].err);
      else ck_assert_msg(t[r].st == HM_ERR_IO && strstr(t[r].err, "process group is gone"), "%s", t[r].err);
    }
  }
  hm_runtime_close(rt);
}
END_TEST

/* Every public entry point refuses bad arguments with a message, and changes nothing. */
START_TEST(arguments) {
  hm_runtime *rt = open_rt();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_boot_group *g;
  hm_bootstrap b;
  hm_heap *h = (hm_heap *)1;
  ck_assert_int_eq(hm_boot_group_create(0, &g), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_boot_group_create(9, &g), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_boot_group_create(2, NULL), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_bootstrap_threads(NULL, &b), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_bootstrap_unix(NULL, &b), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_bootstrap_allgather(NULL, NULL, &b), HM_ERR_INVALID_ARG);
  char longpath[200];
  memset(longpath, 'x', sizeof longpath - 1);
  longpath[sizeof longpath - 1] = 0;
  ck_assert_int_eq(hm_bootstrap_unix(longpath, &b), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "at most 107"), "%s", hm_errmsg());
  ck_assert_ptr_null(b.ctx);
  ck_assert_int_eq(hm_boot_group_create(2, &g), HM_OK);
  ck_assert_int_eq(hm_bootstrap_threads(g, &b), HM_OK);
  hm_heap_config c = {.rank = 2, .tp = 2};
  ck_assert_int_eq(hm_heap_create(a, &c, &b, &h), HM_ERR_INVALID_ARG);
  ck_assert_ptr_null(h);
  c = (hm_heap_config){.rank = 0, .tp = 9};
  ck_assert_int_eq(hm_heap_create(a, &c, &b, &h), HM_ERR_INVALID_ARG);
  /* a rank without an agent still joins the set-up, as failed (its peers fail at once, naming
   * it); rank 1 never comes here, so a short bound */
  c = (hm_heap_config){.rank = 0, .tp = 2, .timeout_ns = 100000000ull};
  ck_assert_int_eq(hm_heap_create(NULL, &c, &b, &h), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "no agent"), "%s", hm_errmsg());
  c.timeout_ns = 0;
  ck_assert_int_eq(hm_heap_create(a, NULL, &b, &h), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_create(a, &c, NULL, &h), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_create(a, &c, &b, NULL), HM_ERR_INVALID_ARG);
  hm_bootstrap empty = {0};
  ck_assert_int_eq(hm_heap_create(a, &c, &empty, &h), HM_ERR_INVALID_ARG);
  hm_boot_group_destroy(g);
  /* a heap of one rank (a group of one needs no peer) */
  ck_assert_int_eq(hm_boot_group_create(1, &g), HM_OK);
  ck_assert_int_eq(hm_bootstrap_threads(g, &b), HM_OK);
  c = (hm_heap_config){.rank = 0, .tp = 1, .half_bytes = 8192};
  ck_assert_msg(hm_heap_create(a, &c, &b, &h) == HM_OK, "%s", hm_errmsg());
  size_t off;
  ck_assert_int_eq(hm_heap_reserve(h, 0, &off), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_reserve(h, 8193, &off), HM_ERR_NO_MEMORY);
  ck_assert_int_eq(hm_heap_reserve(h, 8000, &off), HM_OK);
  ck_assert_int_eq(hm_heap_reserve(h, 129, &off), HM_ERR_NO_MEMORY); /* 8064 + 129 > 8192 */
  ck_assert_msg(strstr(hm_errmsg(), "128 of the heap's 8192-byte half free"), "%s", hm_errmsg());
  uint32_t st;
  struct hm_ar_link l;
  ck_assert_int_eq(hm_heap_link(h, NULL, 1, &l), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_link(h, &st, 0, &l), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_link(h, (uint32_t *)((char *)&st + 1), 1, &l), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_check(NULL), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_abort(NULL), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_heap_destroy(NULL), HM_ERR_INVALID_ARG);
  /* an all-reduce holds the heap */
  hm_ar *ar;
  hm_ar_config ac = {.width = 5, .max_rows = 1};
  ck_assert_int_eq(hm_ar_create(h, &ac, &ar), HM_ERR_INVALID_ARG);
  ac = (hm_ar_config){.width = 64, .max_rows = 1};
  ck_assert_int_eq(hm_ar_create(h, &ac, &ar), HM_ERR_NO_MEMORY); /* the half is used up */
  hm_heap_destroy(h);
  c.half_bytes = 0;
  ck_assert_int_eq(hm_heap_create(a, &c, &b, &h), HM_OK);
  ck_assert_msg(hm_ar_create(h, &ac, &ar) == HM_OK, "%s", hm_errmsg());
  ck_assert_int_eq(hm_heap_destroy(h), HM_ERR_BUSY);
  ck_assert_msg(strstr(hm_errmsg(), "still use"), "%s", hm_errmsg());
  hm_ar_destroy(ar);
  ck_assert_int_eq(hm_heap_destroy(h), HM_OK);
  hm_boot_group_destroy(g);
  hm_runtime_close(rt);
}
END_TEST

/* One host stops the group: every rank's heap reports it, naming that rank. */
START_TEST(host_abort) {
  hm_runtime *rt = open_rt();
  struct t_setup t[HM_MAX_TP];
  setup_threads(rt, 3, 0x7, 60000000000ull, true, t);
  for (unsigned r = 0; r < 3; r++) ck_assert_msg(t[r].st == HM_OK, "%s", t[r].err);
  ck_assert_int_eq(hm_heap_abort(t[1].h), HM_OK);
  for (unsigned r = 0; r < 3; r++) {
    ck_assert_int_eq(hm_heap_check(t[r].h), HM_ERR_PEER);
    ck_assert_msg(strstr(hm_errmsg(), "host of rank 1 stopped"), "%s", hm_errmsg());
  }
  for (unsigned r = 0; r < 3; r++) ck_assert_int_eq(hm_heap_destroy(t[r].h), HM_OK);
  hm_runtime_close(rt);
}
END_TEST

/* A rank that fails stops the group with its reason: every rank's heap names that rank, its
 * status and its own words; a later failure elsewhere does not replace the root cause. */
START_TEST(fail_names_rank_and_reason) {
  hm_runtime *rt = open_rt();
  struct t_setup t[HM_MAX_TP];
  setup_threads(rt, 3, 0x7, 60000000000ull, true, t);
  for (unsigned r = 0; r < 3; r++) ck_assert_msg(t[r].st == HM_OK, "%s", t[r].err);
  ck_assert_int_eq(hm_heap_check(t[0].h), HM_OK);
  ck_assert_int_eq(hm_heap_fail(t[2].h, HM_ERR_QUEUE_FAULT, "K2 step: no progress for 60 s (watchdog)"),
                   HM_ERR_QUEUE_FAULT);
  ck_assert_msg(strstr(hm_errmsg(), "K2 step: no progress") == hm_errmsg(), "the caller's message is kept: %s",
                hm_errmsg());
  ck_assert_int_eq(hm_heap_fail(t[0].h, HM_ERR_TIMEOUT, "an echo"), HM_ERR_TIMEOUT);
  for (unsigned r = 0; r < 3; r++) {
    ck_assert_int_eq(hm_heap_check(t[r].h), HM_ERR_PEER);
    ck_assert_msg(strstr(hm_errmsg(), "rank 2 failed (HM_ERR_QUEUE_FAULT): K2 step: no progress for 60 s (watchdog)"),
                  "rank %u: %s", r, hm_errmsg());
  }
  /* HM_OK stops nothing */
  ck_assert_int_eq(hm_heap_fail(t[1].h, HM_OK, NULL), HM_OK);
  for (unsigned r = 0; r < 3; r++) ck_assert_int_eq(hm_heap_destroy(t[r].h), HM_OK);
  hm_runtime_close(rt);
}
END_TEST

/* A rank that gives the threads bootstrap another TP breaks the group at once: rank 0 fails in
 * well under its 30 s bound, naming the mismatch, instead of waiting for a rank that has failed. */
START_TEST(threads_tp_mismatch_fails_fast) {
  hm_runtime *rt = open_rt();
  struct t_setup t[2];
  setups_of(rt, t, 2, 30000000000ull);
  t[1].claim_tp = 3;
  run_setups(2, t, 200000);
  ck_assert_int_eq(t[1].st, HM_ERR_INVALID_ARG);
  ck_assert_int_eq(t[0].st, HM_ERR_PEER);
  ck_assert_msg(strstr(t[0].err, "rank 1 of 3, but the group has 2 ranks"), "%s", t[0].err);
  /* 0.2 s of the test's own wait, then at once: 5 s is room for a loaded machine */
  ck_assert_msg(t[0].took_ns < 5000000000ull, "rank 0 took %.2f s: %s", t[0].took_ns / 1e9, t[0].err);
  hm_runtime_close(rt);
}
END_TEST

/* Ranks that ask for different all-reduce protocols (device/ar.h) fail the set-up at once, every rank
 * naming both; the default is the word protocol, so default and word agree; a protocol out of range is
 * refused by the rank that gave it, and its peers learn why. */
START_TEST(threads_protocol_mismatch_fails) {
  hm_runtime *rt = open_rt();
  struct t_setup t[2];
  setups_of(rt, t, 2, 30000000000ull);
  t[1].protocol = HM_AR_PROTOCOL_PAIR;
  run_setups(2, t, 0);
  for (unsigned r = 0; r < 2; r++) {
    ck_assert_int_eq(t[r].st, HM_ERR_PEER);
    ck_assert_msg(strstr(t[r].err, "rank 1 asks for the pair protocol, rank 0 for the word one"), "rank %u: %s", r,
                  t[r].err);
  }
  setups_of(rt, t, 2, 30000000000ull);
  t[0].keep = t[1].keep = true;
  t[1].protocol = HM_AR_PROTOCOL_WORD;
  run_setups(2, t, 0);
  for (unsigned r = 0; r < 2; r++) {
    ck_assert_msg(t[r].st == HM_OK, "rank %u: %s", r, t[r].err);
    ck_assert_int_eq(hm_heap_protocol(t[r].h), HM_AR_PROTOCOL_WORD);
    ck_assert_int_eq(hm_heap_destroy(t[r].h), HM_OK);
  }
  setups_of(rt, t, 2, 30000000000ull);
  t[0].protocol = (hm_ar_protocol)7;
  run_setups(2, t, 0);
  ck_assert_int_eq(t[0].st, HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(t[0].err, "protocol 7"), "%s", t[0].err);
  ck_assert_int_eq(t[1].st, HM_ERR_PEER);
  ck_assert_msg(strstr(t[1].err, "protocol 7"), "%s", t[1].err);
  hm_runtime_close(rt);
}
END_TEST

/* A rank without its agent (say, a TP8 group on a 4-GPU machine) joins the set-up as failed: the
 * others fail at once naming it, not at their bound with "rank N never arrived". */
START_TEST(threads_rank_without_agent_fails_fast) {
  hm_runtime *rt = open_rt();
  struct t_setup t[3];
  setups_of(rt, t, 3, 60000000000ull);
  t[2].no_agent = true;
  run_setups(3, t, 0);
  ck_assert_int_eq(t[2].st, HM_ERR_INVALID_ARG);
  ck_assert_ptr_null(t[2].h);
  for (unsigned r = 0; r < 2; r++) {
    ck_assert_int_eq(t[r].st, HM_ERR_PEER);
    ck_assert_msg(strstr(t[r].err, "rank 2 could not set up") && strstr(t[r].err, "no agent"), "rank %u: %s", r,
                  t[r].err);
    ck_assert_msg(t[r].took_ns < 5000000000ull, "rank %u took %.2f s: %s", r, t[r].took_ns / 1e9, t[r].err);
  }
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- processes */

/* A bootstrap that dies (the process, at once) on its second all-gather: a rank lost mid-set-up. */
static hm_bootstrap die_inner;
static hm_status dying_allgather(void *ctx, unsigned rank, unsigned tp, const void *mine, size_t bytes, void *all,
                                 uint64_t timeout_ns) {
  static int calls;
  if (++calls == 2) _exit(9);
  return die_inner.allgather(ctx, rank, tp, mine, bytes, all, timeout_ns);
}

/* argv: mode path rank tp timeout_ms [delay_ms | expected message]
 *  ok:    set up, tear down; exit 0
 *  fail:  set-up must fail with HM_ERR_PEER and the message must contain argv[5]; exit 0 if so
 *  fail-io: the same with HM_ERR_IO (the rendezvous itself could not be made)
 *  die:   join, then die during the second set-up step */
int hm_test_child(int argc, char **argv) {
  if (argc < 5) return 2;
  const char *mode = argv[0], *path = argv[1];
  unsigned rank = (unsigned)atoi(argv[2]), tp = (unsigned)atoi(argv[3]);
  uint64_t timeout = (uint64_t)atoll(argv[4]) * 1000000ull;
  if (!strcmp(mode, "ok") && argc > 5) t_nap_ms((unsigned)atoi(argv[5]));
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt)) return 3;
  hm_bootstrap b;
  if (hm_bootstrap_unix(path, &b)) return 4;
  if (!strcmp(mode, "die")) {
    die_inner = b;
    b.allgather = dying_allgather;
  }
  hm_heap_config c = {.rank = rank, .tp = tp, .half_bytes = 65536, .timeout_ns = timeout};
  hm_heap *h = NULL;
  hm_status s = hm_heap_create(hm_agent_get(rt, rank), &c, &b, &h);
  hm_bootstrap_release(&b);
  int code = 0;
  if (!strncmp(mode, "fail", 4)) {
    hm_status want = strcmp(mode, "fail-io") ? HM_ERR_PEER : HM_ERR_IO;
    if (s != want || argc < 6 || !strstr(hm_errmsg(), argv[5])) {
      fprintf(stderr, "rank %u: expected a failure naming '%s', got %s: %s\n", rank, argc > 5 ? argv[5] : "?",
              hm_status_name(s), hm_errmsg());
      code = 5;
    }
  } else if (s) {
    fprintf(stderr, "rank %u: %s\n", rank, hm_errmsg());
    code = 6;
  }
  if (h) hm_heap_destroy(h);
  hm_runtime_close(rt);
  return code;
}

static void rmdir_all(const char *dir, const char *path) {
  unlink(path);
  rmdir(dir);
}

/* TP 4 as four processes: set-up through the socket. Once rank 0 accepts connections (a probe
 * connects and leaves at once, which rank 0 ignores), the socket is owner-only; once every rank has
 * joined, it is gone. */
START_TEST(unix_tp4_processes) {
  char dir[64], path[128];
  t_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rv", dir);
  pid_t pid[4];
  pid[0] = t_spawn(NULL, "ok", path, "0", "4", "60000", NULL);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  ck_assert_uint_lt(strlen(path), sizeof sa.sun_path);
  memcpy(sa.sun_path, path, strlen(path) + 1);
  bool up = false;
  for (uint64_t end = t_now_ns() + 60000000000ull; !up && t_now_ns() < end;) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    up = connect(s, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(s);
    if (!up) t_nap_ms(5);
  }
  ck_assert_msg(up, "rank 0 never listened at %s", path);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert(S_ISSOCK(st.st_mode));
  ck_assert_uint_eq(st.st_mode & 077, 0);
  for (unsigned r = 1; r < 4; r++) {
    char rs[8];
    snprintf(rs, sizeof rs, "%u", r);
    pid[r] = t_spawn(NULL, "ok", path, rs, "4", "60000", NULL);
  }
  for (unsigned r = 0; r < 4; r++) ck_assert_int_eq(t_reap(pid[r]), 0);
  ck_assert_int_ne(stat(path, &st), 0); /* removed once everyone had connected */
  rmdir_all(dir, path);
}
END_TEST

/* Rank 2 of 3 never starts: ranks 0 and 1 fail within their 5 s bound (plus a loaded machine's
 * slack), naming it. Rank 0 never starts: rank 1 fails naming rank 0. */
START_TEST(unix_rank_never_arrives) {
  char dir[64], path[128];
  t_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rv", dir);
  uint64_t t0 = t_now_ns();
  pid_t a = t_spawn(NULL, "fail", path, "0", "3", "5000", "rank 2 never arrived", NULL);
  pid_t b = t_spawn(NULL, "fail", path, "1", "3", "5000", "rank 2 never arrived", NULL);
  ck_assert_int_eq(t_reap(a), 0);
  ck_assert_int_eq(t_reap(b), 0);
  ck_assert_uint_lt(t_now_ns() - t0, 90000000000ull);
  pid_t c = t_spawn(NULL, "fail", path, "1", "2", "1000", "rank 0 never arrived", NULL);
  ck_assert_int_eq(t_reap(c), 0);
  rmdir_all(dir, path);
}
END_TEST

/* Rank 2 of 3 dies in the middle of the set-up: the others fail naming it, rather than waiting out
 * their bound (it is 60 s here, and the test's own bound would catch a hang). */
START_TEST(unix_rank_dies_during_setup) {
  char dir[64], path[128];
  t_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rv", dir);
  uint64_t t0 = t_now_ns();
  pid_t a = t_spawn(NULL, "fail", path, "0", "3", "60000", "rank 2 left during set-up", NULL);
  pid_t b = t_spawn(NULL, "fail", path, "1", "3", "60000", "rank 2 left during set-up", NULL);
  pid_t c = t_spawn(NULL, "die", path, "2", "3", "60000", NULL);
  ck_assert_int_eq(t_reap(c), 9);
  ck_assert_int_eq(t_reap(a), 0);
  ck_assert_int_eq(t_reap(b), 0);
  ck_assert_uint_lt(t_now_ns() - t0, 50000000000ull);
  rmdir_all(dir, path);
}
END_TEST

/* The Unix bootstrap's rounds driven directly, ranks as threads of this process: round 1 (which
 * makes the connections) on three threads, then round 2 in an order that makes the race of
 * unix_rank_dies_during_setup certain: rank 2 leaves, rank 0 notices and tells rank 1 why, then
 * closes; only then does rank 1 send its round-2 data, into a closed connection. Rank 1 must still
 * report rank 0's reason (rank 2 left), not "rank 0 left". */
struct boot_round {
  hm_bootstrap *b;
  unsigned rank;
  hm_status s;
  char msg[400];
};
static void *boot_round_main(void *arg) {
  struct boot_round *r = arg;
  uint64_t mine = r->rank, all[3];
  r->s = r->b->allgather(r->b->ctx, r->rank, 3, &mine, sizeof mine, all, 20000000000ull);
  snprintf(r->msg, sizeof r->msg, "%s", r->s ? hm_errmsg() : "");
  return NULL;
}

START_TEST(unix_client_reads_why_after_rank0_closed) {
  char dir[64], path[128];
  t_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rv", dir);
  hm_bootstrap b[3];
  struct boot_round r[3];
  pthread_t th[3];
  for (unsigned i = 0; i < 3; i++) {
    ck_assert_int_eq(hm_bootstrap_unix(path, &b[i]), HM_OK);
    r[i] = (struct boot_round){.b = &b[i], .rank = i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, boot_round_main, &r[i]), 0);
  }
  for (unsigned i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (unsigned i = 0; i < 3; i++) ck_assert_msg(r[i].s == HM_OK, "round 1, rank %u: %s", i, r[i].msg);
  hm_bootstrap_release(&b[2]); /* rank 2 leaves */
  boot_round_main(&r[0]);      /* rank 0 sees it, tells rank 1, closes */
  ck_assert_int_eq(r[0].s, HM_ERR_PEER);
  ck_assert_msg(strstr(r[0].msg, "rank 2 left during set-up step 2"), "rank 0: %s", r[0].msg);
  boot_round_main(&r[1]);
  ck_assert_int_eq(r[1].s, HM_ERR_PEER);
  ck_assert_msg(strstr(r[1].msg, "rank 2 left during set-up step 2"), "rank 1: %s", r[1].msg);
  hm_bootstrap_release(&b[0]);
  hm_bootstrap_release(&b[1]);
  rmdir_all(dir, path);
}
END_TEST

/* A socket left behind by a rendezvous that crashed is replaced; anything else at the path is not
 * touched, and the set-up says why. */
START_TEST(unix_stale_socket_and_foreign_file) {
  char dir[64], path[128];
  t_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/rv", dir);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  ck_assert_uint_lt(strlen(path), sizeof sa.sun_path);
  memcpy(sa.sun_path, path, strlen(path) + 1);
  ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
  close(s); /* bound, never listened on: stale */
  pid_t a = t_spawn(NULL, "ok", path, "0", "2", "60000", NULL);
  pid_t b = t_spawn(NULL, "ok", path, "1", "2", "60000", NULL);
  ck_assert_int_eq(t_reap(a), 0);
  ck_assert_int_eq(t_reap(b), 0);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("not a socket\n", f);
  fclose(f);
  pid_t c = t_spawn(NULL, "fail-io", path, "0", "2", "2000", "bind", NULL);
  ck_assert_int_eq(t_reap(c), 0);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert(S_ISREG(st.st_mode));
  rmdir_all(dir, path);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("heap");
  TCase *tc = tcase_create("heap");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, threads_tp_2_4_8);
  tcase_add_test(tc, threads_rank_never_arrives);
  tcase_add_test(tc, threads_rank_fails_setup);
  tcase_add_test(tc, callback_bootstrap);
  tcase_add_test(tc, arguments);
  tcase_add_test(tc, host_abort);
  tcase_add_test(tc, fail_names_rank_and_reason);
  tcase_add_test(tc, threads_tp_mismatch_fails_fast);
  tcase_add_test(tc, threads_protocol_mismatch_fails);
  tcase_add_test(tc, threads_rank_without_agent_fails_fast);
  tcase_add_test(tc, unix_tp4_processes);
  tcase_add_test(tc, unix_rank_never_arrives);
  tcase_add_test(tc, unix_rank_dies_during_setup);
  tcase_add_test(tc, unix_client_reads_why_after_rank0_closed);
  tcase_add_test(tc, unix_stale_socket_and_foreign_file);
  suite_add_tcase(s, tc);
  return s;
}
