/* tests/hsa/rt_helpers.h: small helpers the runtime tests share: open the runtime (whatever
 * HSAMONO_RUNTIME selects), load the embedded program, allocate host-visible buffers, run kernels. */
#ifndef HM_TEST_RT_HELPERS_H
#define HM_TEST_RT_HELPERS_H

#include <check.h>
#include <string.h>
#include <time.h>

#include "hm_hsa.h"

#define RUN_TIMEOUT_NS (120ull * 1000000000ull)

static inline uint64_t hm_now_test_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline hm_runtime *t_open(void) {
  hm_runtime *rt = NULL;
  hm_status s = hm_runtime_open(NULL, &rt);
  ck_assert_msg(s == HM_OK, "hm_runtime_open: %s", hm_errmsg());
  ck_assert_uint_ge(hm_agent_count(rt), 1);
  return rt;
}

static inline hm_program *t_program(hm_agent *a) {
  hm_program *p = NULL;
  ck_assert_msg(hm_program_load(a, &p) == HM_OK, "hm_program_load: %s", hm_errmsg());
  return p;
}

static inline const hm_kernel *t_kernel(hm_program *p, const char *name) {
  const hm_kernel *k = NULL;
  ck_assert_msg(hm_kernel_get(p, name, &k) == HM_OK, "%s: %s", name, hm_errmsg());
  return k;
}

/* zeroed host-visible memory every agent can read and write */
static inline void *t_host(hm_agent *a, size_t bytes) {
  void *p = NULL;
  ck_assert_msg(hm_mem_alloc(a, HM_POOL_HOST, bytes, 0, &p) == HM_OK, "hm_mem_alloc: %s", hm_errmsg());
  memset(p, 0, bytes);
  return p;
}

static inline void *t_kernarg(hm_agent *a, const void *args, size_t n) {
  void *p = NULL;
  ck_assert_msg(hm_kernarg_new(a, args, n, &p) == HM_OK, "hm_kernarg_new: %s", hm_errmsg());
  return p;
}

/* Dispatch k over `ctas` CTAs with these arguments and wait for it; returns the status. */
static inline hm_status t_run_status(hm_queue *q, const hm_kernel *k, uint32_t ctas, const void *args, size_t n) {
  hm_runtime *rt = hm_agent_runtime(hm_queue_agent(q));
  hm_signal done;
  ck_assert_int_eq(hm_signal_create(rt, 1, &done), HM_OK);
  hm_dispatch d = {.kernel = k, .ctas = ctas, .kernarg = t_kernarg(hm_queue_agent(q), args, n),
                   .acquire = HM_FENCE_SYSTEM, .release = HM_FENCE_SYSTEM, .barrier = true, .completion = done};
  hm_status s = hm_queue_dispatch(q, &d, 1);
  if (!s) s = hm_signal_wait(rt, done, HM_WAIT_LT, 1, RUN_TIMEOUT_NS, false, NULL);
  if (s == HM_ERR_TIMEOUT && hm_queue_status(q)) s = HM_ERR_QUEUE_FAULT;
  hm_signal_destroy(rt, done);
  hm_mem_free(rt, d.kernarg);
  return s;
}

static inline void t_run(hm_queue *q, const hm_kernel *k, uint32_t ctas, const void *args, size_t n) {
  hm_status s = t_run_status(q, k, ctas, args, n);
  ck_assert_msg(s == HM_OK, "%s: %s: %s", hm_kernel_info_of(k)->name, hm_status_name(s), hm_errmsg());
}

#endif /* HM_TEST_RT_HELPERS_H */
