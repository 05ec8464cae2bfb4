/* tests/sim/test_weak_persist.c: the proof that the software agent catches a persistent-launch verdict
 * (dev_persist_arrive) missing a step: whole, every work-item gets the host's verdict; broken, not. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../hsa/rt_helpers.h"
#include "dev_persist.h"
#include "hm_hsa.h"
#include "selftest/selftest.h"
#include "weak_helpers.h"

/* How many launches a variant gets, without chaos and under chaos seed 5; a launch fails when a
 * work-item's verdict is not the launch's. Seen here (ST_WEAK_VERBOSE=1 prints it): the barrier or
 * the wait removed fail every launch either way (a CTA's lane 0 polls while the rest read the verdict
 * word: junk, or lane 0 reads the state before the grid has arrived); the compare-and-swap removed
 * fails its late launch either way (the late CTA always arrives last, after the host's ABORT). */
#define TRIES 16u
#define CTAS 4u /* a persistent grid on the 4 CUs */
#define HELD 3u /* the CTA held back in the late launches */
#define WORK_ITEMS (CTAS * ST_PERSIST_CTA)

struct launch {
  hm_runtime *rt;
  hm_agent *a;
  hm_queue *q;
  const hm_kernel *k;
  struct hm_dev_persist *arrive;
  uint32_t *out;
};

static void launch_open(struct launch *l, const char *name, const char *chaos) {
  l->rt = weak_open(chaos, "4", "1");
  l->a = hm_agent_get(l->rt, 0);
  ck_assert_int_eq(hm_queue_create(l->a, 64, &l->q), HM_OK);
  l->k = t_kernel(t_program(l->a), name);
  ck_assert_int_eq(hm_persist_new(l->a, &l->arrive), HM_OK);
  l->out = t_host(l->a, 4 * WORK_ITEMS);
}

static void launch_close(struct launch *l) {
  hm_mem_free(l->rt, l->out);
  hm_mem_free(l->rt, l->arrive);
  weak_close(l->rt);
}

/* One persistent launch within `bound_ns`: its status, once the dispatch has ended. */
static hm_status launch_once(struct launch *l, uint64_t bound_ns) {
  struct st_persist_args args = {.persist = (uint64_t)(uintptr_t)l->arrive, .out = (uint64_t)(uintptr_t)l->out};
  memset(l->out, 0, 4 * WORK_ITEMS);
  hm_signal done;
  ck_assert_int_eq(hm_signal_create(l->rt, 1, &done), HM_OK);
  hm_dispatch d = {.kernel = l->k, .ctas = CTAS, .kernarg = t_kernarg(l->a, &args, sizeof args),
                   .acquire = HM_FENCE_SYSTEM, .release = HM_FENCE_SYSTEM, .barrier = true, .completion = done};
  hm_status s = hm_persistent_launch(l->q, &d, l->arrive, bound_ns);
  ck_assert_msg(hm_signal_wait(l->rt, done, HM_WAIT_EQ, 0, RUN_TIMEOUT_NS, false, NULL) == HM_OK, "%s", hm_errmsg());
  hm_signal_destroy(l->rt, done);
  hm_mem_free(l->rt, d.kernarg);
  return s;
}

/* Whole-grid launches of kernel `name`: how many failed (stopping at the first unless `all`). Every
 * work-item must get GO (out 2). */
static uint32_t grid_failures(const char *name, const char *chaos, bool all) {
  struct launch l;
  launch_open(&l, name, chaos);
  uint32_t failed = 0;
  for (uint32_t t = 0; t < TRIES && (all || !failed); t++) {
    hm_status s = launch_once(&l, 0);
    bool right = s == HM_OK;
    for (uint32_t i = 0; i < WORK_ITEMS; i++) right &= l.out[i] == 2u;
    failed += !right;
  }
  if (weak_verbose()) fprintf(stderr, "%s chaos %s: %u of %u launches failed\n", name, chaos ? chaos : "off", failed, TRIES);
  launch_close(&l);
  return failed;
}

/* One launch of kernel `name` whose CTA HELD starts only once the others have ended, after the
 * host gave up on the grid (0.3 s): whether every CTA, the late one too, left on ABORT (out 1). */
static bool late_launch_right(const char *name, const char *chaos) {
  char hold[64];
  snprintf(hold, sizeof hold, "%s:%u:late", name, HELD);
  setenv("HSAMONO_SIM_HOLD_CTAS", hold, 1);
  struct launch l;
  launch_open(&l, name, chaos);
  unsetenv("HSAMONO_SIM_HOLD_CTAS");
  hm_status s = launch_once(&l, 300000000ull);
  bool right = s == HM_ERR_REFUSED;
  for (uint32_t i = 0; i < WORK_ITEMS; i++) right &= l.out[i] == 1u;
  if (weak_verbose())
    fprintf(stderr, "%s late, chaos %s: %s (CTA %u left on %s)\n", name, chaos ? chaos : "off", right ? "right" : "WRONG",
            HELD, l.out[HELD * ST_PERSIST_CTA] == 2u ? "GO" : "ABORT");
  launch_close(&l);
  return right;
}

START_TEST(whole_verdict_passes) {
  for (int c = 0; c < 2; c++) {
    ck_assert_uint_eq(grid_failures("st_persist", weak_chaos_of[c], true), 0);
    ck_assert(late_launch_right("st_persist", weak_chaos_of[c]));
  }
}
END_TEST

/* Failed launches of a broken variant (weak_broken_failures). */
static uint32_t broken_failures(const char *name) { return weak_broken_failures(grid_failures, name, weak_verbose()); }

/* No barrier after lane 0 wrote the verdict into LDS: the other work-items read the junk there. */
START_TEST(verdict_without_barrier_fails) { ck_assert_uint_gt(broken_failures("st_persist_nobarrier"), 0); }
END_TEST

/* The state read once instead of polled: a CTA that arrives before the last reads no verdict yet. */
START_TEST(verdict_without_wait_fails) { ck_assert_uint_gt(broken_failures("st_persist_nowait"), 0); }
END_TEST

/* The last arrival storing GO instead of its compare-and-swap: a CTA that arrives after the host
 * gave up overwrites ABORT and runs alone. One late launch a schedule: the late CTA always arrives
 * last there, so it fails every time. */
START_TEST(verdict_without_cas_fails) {
  bool right = late_launch_right("st_persist_nocas", weak_chaos_of[0]);
  if (right || weak_verbose()) right &= late_launch_right("st_persist_nocas", weak_chaos_of[1]);
  ck_assert_msg(!right, "the late CTA never overwrote the host's ABORT");
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("weak_persist");
  TCase *tc = tcase_create("persist");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, whole_verdict_passes);
  tcase_add_test(tc, verdict_without_barrier_fails);
  tcase_add_test(tc, verdict_without_wait_fails);
  tcase_add_test(tc, verdict_without_cas_fails);
  suite_add_tcase(s, tc);
  return s;
}
