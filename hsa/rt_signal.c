/* hsa/rt_signal.c: signals (tracked, freed at close) and bounded waits that also notice a queue
 * error, so a failed dispatch returns a status instead of leaving the caller waiting. */
#include <stdio.h>
#include <stdlib.h>

#include "rt_internal.h"

hm_status hm_signal_create(hm_runtime *rt, int64_t initial, hm_signal *out) {
  if (!rt || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_signal_create: NULL argument");
  out->handle = 0;
  hsa_signal_t s;
  hsa_status_t hs = rt->api.hsa_signal_create(initial, 0, NULL, &s);
  if (hs != HSA_STATUS_SUCCESS) return hm_hsa_fail(rt, hs, "hsa_signal_create");
  pthread_mutex_lock(&rt->lock);
  if (rt->nsignals == rt->signal_cap) {
    unsigned cap = rt->signal_cap ? 2 * rt->signal_cap : 32;
    hm_signal *n = realloc(rt->signals, cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&rt->lock);
      rt->api.hsa_signal_destroy(s);
      return hm_fail(HM_ERR_NO_MEMORY, "out of memory tracking signals");
    }
    rt->signals = n, rt->signal_cap = cap;
  }
  rt->signals[rt->nsignals++].handle = s.handle;
  pthread_mutex_unlock(&rt->lock);
  out->handle = s.handle;
  return HM_OK;
}

hm_status hm_signal_destroy(hm_runtime *rt, hm_signal sig) {
  if (!rt || !sig.handle) return hm_fail(HM_ERR_INVALID_ARG, "hm_signal_destroy: NULL argument");
  pthread_mutex_lock(&rt->lock);
  unsigned i;
  for (i = 0; i < rt->nsignals; i++)
    if (rt->signals[i].handle == sig.handle) break;
  if (i == rt->nsignals) {
    pthread_mutex_unlock(&rt->lock);
    return hm_fail(HM_ERR_INVALID_ARG, "hm_signal_destroy: not a signal of this runtime");
  }
  rt->signals[i] = rt->signals[--rt->nsignals];
  pthread_mutex_unlock(&rt->lock);
  hsa_signal_t s = {sig.handle};
  hsa_status_t hs = rt->api.hsa_signal_destroy(s);
  return hs == HSA_STATUS_SUCCESS ? HM_OK : hm_hsa_fail(rt, hs, "hsa_signal_destroy");
}

void hm_signal_destroy_all(hm_runtime *rt) {
  for (unsigned i = 0; i < rt->nsignals; i++) {
    hsa_signal_t s = {rt->signals[i].handle};
    rt->api.hsa_signal_destroy(s);
  }
  rt->nsignals = 0;
}

int64_t hm_signal_load(hm_runtime *rt, hm_signal sig) {
  hsa_signal_t s = {sig.handle};
  return rt->api.hsa_signal_load_scacquire(s);
}

void hm_signal_store(hm_runtime *rt, hm_signal sig, int64_t v) {
  hsa_signal_t s = {sig.handle};
  rt->api.hsa_signal_store_screlease(s, v);
}

static bool holds(hm_wait_cond c, int64_t v, int64_t x) {
  switch (c) {
  case HM_WAIT_EQ: return v == x;
  case HM_WAIT_NE: return v != x;
  case HM_WAIT_LT: return v < x;
  case HM_WAIT_GTE: return v >= x;
  }
  return false;
}

hm_status hm_signal_wait(hm_runtime *rt, hm_signal sig, hm_wait_cond cond, int64_t value, uint64_t timeout_ns,
                         bool active, int64_t *observed) {
  if (!rt || !sig.handle) return hm_fail(HM_ERR_INVALID_ARG, "hm_signal_wait: NULL argument");
  if (cond > HM_WAIT_GTE) return hm_fail(HM_ERR_INVALID_ARG, "hm_signal_wait: unknown condition %d", (int)cond);
  static const hsa_signal_condition_t hc[] = {HSA_SIGNAL_CONDITION_EQ, HSA_SIGNAL_CONDITION_NE,
                                               HSA_SIGNAL_CONDITION_LT, HSA_SIGNAL_CONDITION_GTE};
  hsa_signal_t s = {sig.handle};
  uint64_t start = hm_now_ns();
  /* wait in slices of at most 5 ms, checking for queue errors between them */
  uint64_t slice_ticks = rt->ticks_per_s / 200;
  for (;;) {
    int64_t v = rt->api.hsa_signal_wait_scacquire(s, hc[cond], value, slice_ticks,
                                                  active ? HSA_WAIT_STATE_ACTIVE : HSA_WAIT_STATE_BLOCKED);
    if (observed) *observed = v;
    if (holds(cond, v, value)) return HM_OK;
    hm_status f = hm_rt_take_fault(rt);
    if (f) return f;
    if (hm_now_ns() - start >= timeout_ns) {
      /* A queue whose error an earlier call already reported may be why the signal never moved
       * (its dispatch was abandoned): the timeout names it rather than leaving the reason behind. */
      char failed[640] = "";
      pthread_mutex_lock(&rt->lock);
      for (hm_queue *q = rt->queues; q && !failed[0]; q = q->next)
        if (atomic_load(&q->fault_status))
          snprintf(failed, sizeof failed, "; queue on agent %u had failed: %.560s", q->agent->index, q->fault_msg);
      pthread_mutex_unlock(&rt->lock);
      return hm_fail(HM_ERR_TIMEOUT, "signal wait: value %lld after %.3f s%s", (long long)v, (double)timeout_ns / 1e9,
                     failed);
    }
  }
}
