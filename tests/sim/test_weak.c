/* tests/sim/test_weak.c: the proof that the software agent's weak memory model bites: every hand-off
 * primitive of device/handoff.h, whole, passes every attempt; with one step removed, it fails. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../hsa/rt_helpers.h"
#include "hm_hsa.h"
#include "selftest/selftest.h"
#include "weak_helpers.h"

/* How many tries a broken primitive gets to show itself (each a fresh launch and tag), without
 * chaos and under chaos seed 5; it must fail at least one of them. A try fails when a single word
 * is wrong. Seen here (ST_WEAK_VERBOSE=1 prints it): no drain, no barrier and no acquire fail every
 * try either way; the split pair fails 1 to 16 of 16 without chaos, depending on timing (stores
 * land only one at a time at scheduling points there), and 16 of 16 under chaos. The control's 32 clean tries are as many
 * chances for a false alarm. */
#define TRIES 16u
#define WORDS 1024u /* 4 words a work-item: every wave of the producer stores */

/* One hand-off through kernel k in `mode` (ST_PRIM_*); how many of the words arrived right. */
static uint32_t prim_once(hm_queue *q, const hm_kernel *k, uint32_t mode, uint32_t tag) {
  hm_agent *a = hm_queue_agent(q);
  hm_runtime *rt = hm_agent_runtime(a);
  uint32_t *data, *flag, *ack, *out = t_host(a, 4 * (WORDS + 2));
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, 8 * WORDS, 0, (void **)&data), HM_OK);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_UNCACHED, 64, 0, (void **)&flag), HM_OK);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_UNCACHED, 64, 0, (void **)&ack), HM_OK);
  ck_assert_int_eq(hm_mem_fill(rt, data, 0, 2 * WORDS), HM_OK);
  ck_assert_int_eq(hm_mem_fill(rt, flag, 0, 16), HM_OK);
  ck_assert_int_eq(hm_mem_fill(rt, ack, 0, 16), HM_OK);
  struct st_prim_args args = {.data = (uint64_t)(uintptr_t)data, .flag = (uint64_t)(uintptr_t)flag,
                              .out = (uint64_t)(uintptr_t)out, .ack = (uint64_t)(uintptr_t)ack,
                              .ticks = 200000000ull, .n = WORDS, .mode = mode, .tag = tag};
  t_run(q, k, 2, &args, sizeof args);
  uint32_t right = 0;
  for (uint32_t i = 0; i < WORDS; i++) right += out[i] == i * 3u + tag;
  hm_mem_free(rt, data);
  hm_mem_free(rt, flag);
  hm_mem_free(rt, ack);
  hm_mem_free(rt, out);
  return right;
}

/* Tries of kernel `name` in `mode`: how many were wholly right. */
static uint32_t prim_tries(const char *name, uint32_t mode, const char *chaos) {
  hm_runtime *rt = weak_open(chaos, "4", "1");
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), name);
  uint32_t whole = 0;
  for (uint32_t t = 0; t < TRIES; t++) whole += prim_once(q, k, mode, 10u + 2u * t) == WORDS;
  if (weak_verbose()) fprintf(stderr, "%s mode %u chaos %s: %u of %u tries whole\n", name, mode, chaos ? chaos : "off", whole, TRIES);
  weak_close(rt);
  return whole;
}

START_TEST(whole_primitives_pass) {
  for (int c = 0; c < 2; c++) {
    ck_assert_uint_eq(prim_tries("st_prim", ST_PRIM_FLAG, weak_chaos_of[c]), TRIES);
    ck_assert_uint_eq(prim_tries("st_prim", ST_PRIM_PAIR, weak_chaos_of[c]), TRIES);
  }
}
END_TEST

/* Whole tries of a broken variant over both schedules (must be fewer than all of them). */
static uint32_t broken_tries(const char *name, uint32_t mode) {
  return prim_tries(name, mode, weak_chaos_of[0]) + prim_tries(name, mode, weak_chaos_of[1]);
}

/* ho_flag_raise without its drain: the other waves' device-scope stores are still in flight when
 * wave 0's release raises the flag (a release waits for its own wave's stores only). */
START_TEST(flag_without_drain_fails) { ck_assert_uint_lt(broken_tries("st_prim_nodrain", ST_PRIM_FLAG), 2 * TRIES); }
END_TEST

/* ho_flag_raise with the flag before the barrier: raised before the other waves have stored;
 * ho_flags_wait without its barrier: the work-items that poll no flag read at once. */
START_TEST(flag_without_barrier_fails) {
  ck_assert_uint_lt(broken_tries("st_prim_nobarrier", ST_PRIM_FLAG), 2 * TRIES);
}
END_TEST

/* ho_flags_wait polling relaxed: the consumer's cache still holds the lines it read before the
 * hand-off, and nothing invalidates them. */
START_TEST(poll_without_acquire_fails) {
  ck_assert_uint_lt(broken_tries("st_prim_noacquire", ST_PRIM_FLAG), 2 * TRIES);
}
END_TEST

/* The data stored after its flag is raised (mode ST_PRIM_AFTER), the producer then idle (polling)
 * while the consumer is busy (barrier rounds) until it sees the flag: an idle CTA's stores land at
 * once, so without the late stores (hsa/sim/memmodel.c) nearly every try is whole (seen: 15 and 16
 * of 16 under chaos with them turned off); with them, one data store in four lands only once the
 * consumer is done, after it has read (seen: 0 of 16). So a stage that stores after its flag and
 * then waits is caught however long its consumer's path (mutation fault 06). Only chaos makes
 * late stores, so the chaos schedule alone is tried; it must fail most tries, which without the
 * late stores it does not. */
START_TEST(data_after_flag_fails) {
  ck_assert_uint_le(prim_tries("st_prim", ST_PRIM_AFTER, weak_chaos_of[1]), TRIES / 2);
}
END_TEST

/* ho_pair_put as two 4-byte stores: the tag may land before its value. */
START_TEST(split_pair_fails) { ck_assert_uint_lt(broken_tries("st_prim_split", ST_PRIM_PAIR), 2 * TRIES); }
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("weak");
  TCase *tc = tcase_create("primitives");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, whole_primitives_pass);
  tcase_add_test(tc, flag_without_drain_fails);
  tcase_add_test(tc, flag_without_barrier_fails);
  tcase_add_test(tc, poll_without_acquire_fails);
  tcase_add_test(tc, split_pair_fails);
  tcase_add_test(tc, data_after_flag_fails);
  suite_add_tcase(s, tc);
  return s;
}
