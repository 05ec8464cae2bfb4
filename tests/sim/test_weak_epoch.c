/* tests/sim/test_weak_epoch.c: the proof that the software agent catches an epoch (device/epoch.h)
 * missing a step: whole, every launch reads and advances it right; with one barrier or wait gone, not. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "../hsa/rt_helpers.h"
#include "epoch.h"
#include "hm_hsa.h"
#include "selftest/selftest.h"
#include "weak_helpers.h"

/* How many launches a variant gets, each one epoch on from the last (the buffer is never cleared,
 * as in a layer's chain of steps), without chaos and under chaos seed 5. A launch fails when a
 * work-item got an e other than the buffer's before the launch, or the launch did not advance it by
 * exactly one. Seen here (ST_WEAK_VERBOSE=1 prints it): the free barrier removed fails 16 of 16 either
 * way (lane 0 runs first and reuses the word before the others read it); the hand-out barrier
 * removed 0 of 16 without chaos (lane 0 runs first) and 16 of 16 under chaos (lanes in random
 * order); the marks' wait removed 11 to 15 of 16 without chaos and 9 to 10 of 16 under chaos, the
 * barrier after it 10 and 11 of 16 (CTA 0 ends before another CTA has started; when it does not,
 * the launch passes). A launch that fails costs the watchdog's 3 s, so a broken variant stops at its
 * first failure; the whole variant prints how a launch failed. */
#define TRIES 16u
#define CTAS 4u /* a persistent grid on the 4 CUs */

/* Launches of kernel `name` under `chaos`: how many failed (stopping at the first unless `all`). A
 * work-item that got a wrong e marks a wrong e + 1, so CTA 0 waits for its mark forever: the agent's
 * watchdog ends that launch (3 s without progress; a whole launch polls for microseconds), a
 * failure too, and the next launch gets a new queue. */
static uint32_t epoch_failures(const char *name, const char *chaos, bool all) {
  /* The whole variant gets 20 s: it must never hang, and a loaded machine (CI's sanitizer pass,
   * beside a suite starting 1,024 CTA threads) once stalled one of its launches past 3 s. */
  setenv("HSAMONO_SIM_WATCHDOG_S", strcmp(name, "st_epoch") ? "3" : "20", 1);
  hm_runtime *rt = weak_open(chaos, "4", "1");
  unsetenv("HSAMONO_SIM_WATCHDOG_S");
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), name);
  uint32_t *ep, *out = t_host(a, 4 * CTAS * ST_EPOCH_CTA), *e_now = t_host(a, 4);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, DEV_EPOCH_BYTES, 0, (void **)&ep), HM_OK);
  ck_assert_int_eq(hm_mem_fill(rt, ep, 0, DEV_EPOCH_WORDS), HM_OK);
  struct st_epoch_args args = {.epoch = (uint64_t)(uintptr_t)ep, .out = (uint64_t)(uintptr_t)out};
  uint32_t failed = 0;
  for (uint32_t t = 0; t < TRIES && (all || !failed); t++) {
    ck_assert_int_eq(hm_mem_copy(rt, e_now, ep, 4, (hm_signal){0}), HM_OK);
    uint32_t e = *e_now;
    memset(out, 0xff, 4 * CTAS * ST_EPOCH_CTA);
    hm_status st = t_run_status(q, k, CTAS, &args, sizeof args);
    if (st == HM_ERR_QUEUE_FAULT) {
      /* the whole variant (`all`) must never fail: say how it did */
      if (all) fprintf(stderr, "%s chaos %s, launch %u of e %u: %s\n", name, chaos ? chaos : "off", t, e, hm_errmsg());
      failed++;
      ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
      continue;
    }
    ck_assert_msg(st == HM_OK, "%s: %s", hm_status_name(st), hm_errmsg());
    ck_assert_int_eq(hm_mem_copy(rt, e_now, ep, 4, (hm_signal){0}), HM_OK);
    bool right = *e_now == e + 1u;
    uint32_t wrong = 0;
    for (uint32_t i = 0; i < CTAS * ST_EPOCH_CTA; i++) wrong += out[i] != e;
    if (all && (wrong || !right))
      fprintf(stderr, "%s chaos %s, launch %u of e %u: advanced to %u, %u work-items got another e\n", name,
              chaos ? chaos : "off", t, e, *e_now, wrong);
    failed += !right || wrong;
  }
  if (weak_verbose()) fprintf(stderr, "%s chaos %s: %u of %u launches failed\n", name, chaos ? chaos : "off", failed, TRIES);
  hm_mem_free(rt, ep);
  hm_mem_free(rt, out);
  hm_mem_free(rt, e_now);
  weak_close(rt);
  return failed;
}

START_TEST(whole_epoch_passes) {
  for (int c = 0; c < 2; c++) ck_assert_uint_eq(epoch_failures("st_epoch", weak_chaos_of[c], true), 0);
}
END_TEST

/* Failed launches of a broken variant (weak_broken_failures). */
static uint32_t broken_failures(const char *name) { return weak_broken_failures(epoch_failures, name, weak_verbose()); }

/* dev_epoch_begin without the barrier after lane 0 wrote e into LDS: the others read the junk there. */
START_TEST(begin_without_hand_barrier_fails) { ck_assert_uint_gt(broken_failures("st_epoch_nohand"), 0); }
END_TEST

/* dev_epoch_begin returning with no barrier after the read: lane 0 reuses the word before the
 * others have read e from it. */
START_TEST(begin_without_free_barrier_fails) { ck_assert_uint_gt(broken_failures("st_epoch_nofree"), 0); }
END_TEST

/* dev_epoch_end not waiting for the marks: CTA 0 publishes e + 1 before another CTA has read e,
 * which then reads e + 1. */
START_TEST(end_without_marks_fails) { ck_assert_uint_gt(broken_failures("st_epoch_nomarks"), 0); }
END_TEST

/* dev_epoch_end without the barrier after the polls: lane 0, which polls only its own CTA's mark,
 * publishes while the other lanes still wait for theirs. */
START_TEST(end_without_barrier_fails) { ck_assert_uint_gt(broken_failures("st_epoch_noendbar"), 0); }
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("weak_epoch");
  TCase *tc = tcase_create("epoch");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, whole_epoch_passes);
  tcase_add_test(tc, begin_without_hand_barrier_fails);
  tcase_add_test(tc, begin_without_free_barrier_fails);
  tcase_add_test(tc, end_without_marks_fails);
  tcase_add_test(tc, end_without_barrier_fails);
  suite_add_tcase(s, tc);
  return s;
}
