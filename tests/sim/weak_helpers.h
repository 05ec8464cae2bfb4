/* tests/sim/weak_helpers.h: what the weak model's proofs share (test_weak*.c): a runtime on the
 * software agent in weak mode, with or without a chaos seed, and the schedules every proof runs. */
#ifndef HM_TEST_WEAK_HELPERS_H
#define HM_TEST_WEAK_HELPERS_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "hm_hsa.h"

/* The two schedules: no chaos, and chaos seed 5. */
static const char *const weak_chaos_of[] = {NULL, "5"};

/* ST_WEAK_VERBOSE=1: print every variant's count of failed tries, running them all (otherwise a
 * broken variant stops at its first failure). */
static inline bool weak_verbose(void) { return getenv("ST_WEAK_VERBOSE") != NULL; }

/* The software agent in weak mode with `cus` CUs an agent and `agents` agents, under chaos seed
 * `chaos` (NULL: none). */
static inline hm_runtime *weak_open(const char *chaos, const char *cus, const char *agents) {
  setenv("HSAMONO_SIM_WEAK", "1", 1);
  setenv("HSAMONO_SIM_CUS", cus, 1);
  setenv("HSAMONO_SIM_AGENTS", agents, 1);
  if (chaos) setenv("HSAMONO_SIM_CHAOS", chaos, 1);
  else unsetenv("HSAMONO_SIM_CHAOS");
  hm_runtime *rt = NULL;
  ck_assert_msg(hm_runtime_open("sim", &rt) == HM_OK, "%s", hm_errmsg());
  return rt;
}

static inline void weak_close(hm_runtime *rt) {
  hm_runtime_close(rt);
  unsetenv("HSAMONO_SIM_CHAOS");
}

/* A proof's tries of one kernel under one schedule: how many failed, stopping at the first unless
 * `all`. */
typedef uint32_t (*weak_tries_fn)(const char *name, const char *chaos, bool all);

/* Failed tries of a broken variant: without chaos, then (unless one failed already, or `all`)
 * under chaos. It must fail at least one. */
static inline uint32_t weak_broken_failures(weak_tries_fn tries, const char *name, bool all) {
  uint32_t failed = tries(name, weak_chaos_of[0], all);
  if (!failed || all) failed += tries(name, weak_chaos_of[1], all);
  return failed;
}

#endif /* HM_TEST_WEAK_HELPERS_H */
