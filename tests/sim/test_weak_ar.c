/* tests/sim/test_weak_ar.c: the proof that the software agent catches the all-reduce's push / reduce
 * (device/ar.h) missing a step, in either protocol: whole, rank 0 sums rank 1's pushes right; broken, it does not. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../hsa/rt_helpers.h"
#include "hm_collectives.h"
#include "hm_hsa.h"
#include "kernels/ar_args.h"
#include "selftest/selftest.h"
#include "weak_helpers.h"

/* How many hand-offs a variant gets (each a fresh tag on the same heap, as steps are), without
 * chaos and under chaos seed 5. A hand-off fails when one sum is wrong or rank 0's wait gave up
 * (its status word says why). Seen here (ST_WEAK_VERBOSE=1 prints it): the split pair fails 2 to
 * 9 of 16 without chaos, depending on timing (rank 1's stores land one at a time at its scheduling
 * points, newest or oldest first, and rank 0 must poll in between), and 16 of 16 under chaos;
 * device-scope pushes and plain polls fail the first try either way (rank 0 waits out its
 * deadline). A failed wait sets the
 * group's abort words, which would fail every later try at once, so a broken variant stops at its
 * first failure (the split pair's failures are wrong sums: verbose runs it through). */
#define TRIES 16u
#define TP 2u
#define PAIRS 256u /* one a work-item: every wave of rank 1 pushes */
#define DEADLINE_NS 2000000000ull       /* rank 0's wait: a whole hand-off takes milliseconds */
#define LINGER_TICKS 400000000ull       /* rank 1 stays running at most 4 s (100 MHz ticks) */

/* The heaps' protocol for the next ar_failures (weak_broken_failures' callback takes no more). */
static hm_ar_protocol proto = HM_AR_PROTOCOL_PAIR;

struct rank {
  hm_runtime *rt;
  unsigned rank;
  hm_bootstrap boot;
  hm_heap *h;
  hm_status st;
  char err[256];
};

static void *heap_main(void *p) {
  struct rank *r = p;
  hm_heap_config c = {.rank = r->rank, .tp = TP, .half_bytes = hm_allreduce_region_bytes(TP, 1, 2 * PAIRS),
                      .protocol = proto};
  r->st = hm_heap_create(hm_agent_get(r->rt, r->rank), &c, &r->boot, &r->h);
  if (r->st) snprintf(r->err, sizeof r->err, "%s", hm_errmsg());
  return NULL;
}

/* The two ranks' heaps (hm_heap_create is collective: a thread a rank). */
static void heaps_create(hm_runtime *rt, struct rank *ranks) {
  hm_boot_group *g;
  pthread_t th[TP];
  ck_assert_int_eq(hm_boot_group_create(TP, &g), HM_OK);
  for (unsigned r = 0; r < TP; r++) {
    ranks[r] = (struct rank){.rt = rt, .rank = r};
    ck_assert_int_eq(hm_bootstrap_threads(g, &ranks[r].boot), HM_OK);
    ck_assert_int_eq(pthread_create(&th[r], NULL, heap_main, &ranks[r]), 0);
  }
  for (unsigned r = 0; r < TP; r++) pthread_join(th[r], NULL);
  hm_boot_group_destroy(g);
  for (unsigned r = 0; r < TP; r++) ck_assert_msg(ranks[r].st == HM_OK, "rank %u: %s", r, ranks[r].err);
}

/* Hand-offs through kernel `name` under `chaos`: how many failed (stopping at the first unless
 * `all`, which only a variant whose failures are wrong sums, not given-up waits, may ask). */
static uint32_t ar_failures(const char *name, const char *chaos, bool all) {
  hm_runtime *rt = weak_open(chaos, "4", "2");
  struct rank ranks[TP];
  heaps_create(rt, ranks);
  hm_queue *q[TP];
  const hm_kernel *k[TP];
  uint32_t *status[TP];
  struct hm_ar_link link[TP];
  size_t region = 0;
  hm_agent *a0 = hm_agent_get(rt, 0);
  uint32_t *ack = t_host(a0, 64), *out = t_host(a0, 4 * (PAIRS + ST_AR_CTA));
  for (unsigned r = 0; r < TP; r++) {
    hm_agent *a = hm_agent_get(rt, r);
    ck_assert_int_eq(hm_queue_create(a, 64, &q[r]), HM_OK);
    k[r] = t_kernel(t_program(a), name);
    status[r] = t_host(a, 4);
    ck_assert_int_eq(hm_heap_reserve(ranks[r].h, hm_allreduce_region_bytes(TP, 1, 2 * PAIRS), &region), HM_OK);
    ck_assert_int_eq(hm_heap_link(ranks[r].h, status[r], DEADLINE_NS, &link[r]), HM_OK);
  }
  uint32_t failed = 0;
  for (uint32_t t = 0; t < TRIES && (all || !failed); t++) {
    uint32_t tag = 10u + t;
    memset(out, 0, 4 * PAIRS);
    hm_signal done;
    void *kernarg[TP];
    ck_assert_int_eq(hm_signal_create(rt, TP, &done), HM_OK);
    for (unsigned r = TP; r-- > 0;) { /* the producer first: it waits for rank 0's word to push */
      struct st_ar_args args = {.link = link[r], .ack = (uint64_t)(uintptr_t)ack, .out = (uint64_t)(uintptr_t)out,
                                .region = region, .ticks = LINGER_TICKS, .n = PAIRS, .tag = tag};
      kernarg[r] = t_kernarg(hm_queue_agent(q[r]), &args, sizeof args);
      hm_dispatch d = {.kernel = k[r], .ctas = 1, .kernarg = kernarg[r], .acquire = HM_FENCE_SYSTEM,
                       .release = HM_FENCE_SYSTEM, .barrier = true, .completion = done};
      ck_assert_int_eq(hm_queue_dispatch(q[r], &d, 1), HM_OK);
    }
    ck_assert_msg(hm_signal_wait(rt, done, HM_WAIT_EQ, 0, RUN_TIMEOUT_NS, false, NULL) == HM_OK, "%s", hm_errmsg());
    hm_signal_destroy(rt, done);
    for (unsigned r = 0; r < TP; r++) hm_mem_free(rt, kernarg[r]);
    bool right = *status[0] == 0;
    for (uint32_t f = 0; f < PAIRS; f++) {
      uint32_t want = 0;
      for (int h = 0; h < 2; h++) {
        float s = fmt_bf16_to_f32((uint16_t)(st_ar_value(0, f, tag) >> 16 * h)) +
                  fmt_bf16_to_f32((uint16_t)(st_ar_value(1, f, tag) >> 16 * h));
        want |= (uint32_t)fmt_bf16_from_f32(s) << 16 * h;
      }
      right &= out[f] == want;
    }
    failed += !right;
  }
  if (weak_verbose())
    fprintf(stderr, "%s, %s protocol, chaos %s: %u of %u hand-offs failed (status %#x)\n", name,
            hm_ar_protocol_name(proto), chaos ? chaos : "off", failed, all ? TRIES : failed, *status[0]);
  for (unsigned r = 0; r < TP; r++) {
    ck_assert_int_eq(hm_heap_destroy(ranks[r].h), HM_OK);
    hm_mem_free(rt, status[r]);
  }
  hm_mem_free(rt, ack);
  hm_mem_free(rt, out);
  weak_close(rt);
  return failed;
}

START_TEST(whole_handoff_passes) {
  for (proto = HM_AR_PROTOCOL_PAIR; proto <= HM_AR_PROTOCOL_WORD; proto++)
    for (int c = 0; c < 2; c++) ck_assert_uint_eq(ar_failures("st_ar", weak_chaos_of[c], true), 0);
}
END_TEST

/* Failed hand-offs of a broken variant (weak_broken_failures) on a heap of protocol p. */
static uint32_t broken_failures(hm_ar_protocol p, const char *name, bool all) {
  proto = p;
  return weak_broken_failures(ar_failures, name, all);
}

/* ar_push as two 4-byte stores: rank 1's tag lands before its value, and rank 0 sums the old one. */
START_TEST(push_split_fails) {
  ck_assert_uint_gt(broken_failures(HM_AR_PROTOCOL_PAIR, "st_ar_split", weak_verbose()), 0);
}
END_TEST

/* ar_push at device scope: a store to a peer's memory is not published without a system-scope
 * release, which the protocol never makes; rank 0 waits until its deadline. Either protocol. */
START_TEST(push_device_scope_fails) {
  for (hm_ar_protocol p = HM_AR_PROTOCOL_PAIR; p <= HM_AR_PROTOCOL_WORD; p++)
    ck_assert_uint_gt(broken_failures(p, "st_ar_devscope", false), 0);
}
END_TEST

/* ar_reduce polling through the L1: rank 0's cache keeps the old pairs it read, and nothing in the
 * poll invalidates them; it waits until its deadline (pair), or takes the old pair (word). */
START_TEST(poll_plain_fails) {
  for (hm_ar_protocol p = HM_AR_PROTOCOL_PAIR; p <= HM_AR_PROTOCOL_WORD; p++)
    ck_assert_uint_gt(broken_failures(p, "st_ar_plainpoll", weak_verbose()), 0);
}
END_TEST

/* The word protocol without its reducer emptying the slots it read: the next hand-off in the same
 * half finds the last one's pairs there and sums them before rank 1's new ones land. */
START_TEST(word_without_clear_fails) {
  ck_assert_uint_gt(broken_failures(HM_AR_PROTOCOL_WORD, "st_ar_noclear", true), 0);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("weak_ar");
  TCase *tc = tcase_create("allreduce");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, whole_handoff_passes);
  tcase_add_test(tc, push_split_fails);
  tcase_add_test(tc, push_device_scope_fails);
  tcase_add_test(tc, poll_plain_fails);
  tcase_add_test(tc, word_without_clear_fails);
  suite_add_tcase(s, tc);
  return s;
}
