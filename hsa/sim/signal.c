/* hsa/sim/signal.c: HSA signals: 64-bit values in ROCr's amd_signal_t layout, every change
 * bumping a futex word, so waiters sleep in the kernel instead of burning a core. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sim.h"

static void futex_wake_all(_Atomic uint32_t *w) { syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0); }

static void futex_wait(_Atomic uint32_t *w, uint32_t expect, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, expect, &ts, NULL, 0);
}

struct sim_signal *sim_signal_of(hsa_signal_t s) {
  struct sim_signal *p = (struct sim_signal *)(uintptr_t)s.handle;
  if (!p || ((uintptr_t)p & 63) || p->magic != SIM_SIGNAL_MAGIC) return NULL;
  return p;
}

/* busy counts from before the value changes (seq_cst: a thread that sees the new value sees busy
 * raised) until after the wake, the last touch of the signal; sim_signal_free waits for it to drop.
 * Without it the copy engine's wake landed in a signal hm_mem_copy had already destroyed (ASan, CI). */
void sim_signal_busy(struct sim_signal *s) { atomic_fetch_add_explicit(&s->busy, 1, memory_order_seq_cst); }

void sim_signal_changed(struct sim_signal *s) {
  atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
  if (atomic_load_explicit(&s->waiters, memory_order_acquire)) futex_wake_all(&s->seq);
  atomic_fetch_sub_explicit(&s->busy, 1, memory_order_release);
}

void sim_signal_complete(struct sim_signal *s) {
  sim_signal_busy(s);
  __atomic_fetch_sub(&s->amd.value, 1, __ATOMIC_RELEASE);
  sim_signal_changed(s);
}

hsa_status_t sim_signal_new(int64_t value, struct sim_signal **out) {
  struct sim_signal *s;
  if (posix_memalign((void **)&s, 64, sizeof *s)) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  memset(s, 0, sizeof *s);
  s->amd.kind = AMD_SIGNAL_KIND_USER;
  s->amd.value = value;
  s->magic = SIM_SIGNAL_MAGIC;
  *out = s;
  return HSA_STATUS_SUCCESS;
}

void sim_signal_free(struct sim_signal *s) {
  if (!s) return;
  while (atomic_load_explicit(&s->busy, memory_order_acquire)) sched_yield();
  s->magic = 0;
  free(s);
}

static bool satisfied(hsa_signal_condition_t cond, int64_t v, int64_t cmp) {
  switch (cond) {
  case HSA_SIGNAL_CONDITION_EQ: return v == cmp;
  case HSA_SIGNAL_CONDITION_NE: return v != cmp;
  case HSA_SIGNAL_CONDITION_LT: return v < cmp;
  case HSA_SIGNAL_CONDITION_GTE: return v >= cmp;
  }
  return false;
}

/* Wait until the condition holds, the timeout passes or *stop is set; returns the last value
 * seen. Sleeps in slices of at most 10 ms so a stop request is noticed. */
int64_t sim_signal_wait_value(struct sim_signal *s, hsa_signal_condition_t cond, int64_t cmp, uint64_t timeout_ns,
                              const _Atomic bool *stop) {
  uint64_t start = sim_now_ns();
  uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
  for (;;) {
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    int64_t v = __atomic_load_n(&s->amd.value, __ATOMIC_ACQUIRE);
    if (satisfied(cond, v, cmp)) return v;
    uint64_t now = sim_now_ns();
    if (now >= deadline || (stop && atomic_load(stop))) return v;
    uint64_t slice = deadline - now;
    if (slice > 10000000ull) slice = 10000000ull;
    atomic_fetch_add(&s->waiters, 1);
    futex_wait(&s->seq, seq, slice);
    atomic_fetch_sub(&s->waiters, 1);
  }
}

void sim_signal_wait_seq(struct sim_signal *s, uint32_t seq, uint64_t timeout_ns) {
  if (atomic_load_explicit(&s->seq, memory_order_acquire) != seq) return;
  atomic_fetch_add(&s->waiters, 1);
  futex_wait(&s->seq, seq, timeout_ns);
  atomic_fetch_sub(&s->waiters, 1);
}

/* ---------------------------------------------------------------- the API */

static hsa_status_t create(hsa_signal_value_t initial, hsa_signal_t *signal) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!signal) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_signal *s;
  hsa_status_t st = sim_signal_new(initial, &s);
  if (st) return st;
  signal->handle = (uint64_t)(uintptr_t)s;
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                                       const hsa_agent_t *consumers, hsa_signal_t *signal) {
  if (num_consumers && !consumers) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  return create(initial_value, signal);
}

SIM_API hsa_status_t hsa_amd_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                                           const hsa_agent_t *consumers, uint64_t attributes, hsa_signal_t *signal) {
  (void)attributes;
  if (num_consumers && !consumers) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  return create(initial_value, signal);
}

SIM_API hsa_status_t hsa_signal_destroy(hsa_signal_t signal) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  struct sim_signal *s = sim_signal_of(signal);
  if (!s || s->is_doorbell) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  sim_signal_free(s);
  return HSA_STATUS_SUCCESS;
}

#define SIG(signal) ((struct sim_signal *)(uintptr_t)(signal).handle)

SIM_API hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t s) { return __atomic_load_n(&SIG(s)->amd.value, __ATOMIC_ACQUIRE); }
SIM_API hsa_signal_value_t hsa_signal_load_relaxed(hsa_signal_t s) { return __atomic_load_n(&SIG(s)->amd.value, __ATOMIC_RELAXED); }
SIM_API hsa_signal_value_t hsa_signal_load_acquire(hsa_signal_t s) { return hsa_signal_load_scacquire(s); }

/* A store to a queue's doorbell rings it: the value is the id of the last packet written, and
 * the ring announces every packet up to it (ROCr's AQL doorbell). What the queue has been told is
 * the highest id ever rung, so a late, lower ring from another producer withdraws nothing. Only
 * stores ring, as in ROCr, where a doorbell signal takes stores only. */
static void ring(struct sim_signal *s, hsa_signal_value_t v) {
  if (!s->is_doorbell || v < 0) return;
  uint64_t want = (uint64_t)v + 1, cur = atomic_load(&s->queue->rung);
  while (cur < want && !atomic_compare_exchange_weak(&s->queue->rung, &cur, want)) {
  }
}

#define STORE(name, order)                                                                                   \
  SIM_API void name(hsa_signal_t s, hsa_signal_value_t v) {                                                 \
    sim_signal_busy(SIG(s));                                                                                \
    __atomic_store_n(&SIG(s)->amd.value, v, order);                                                         \
    ring(SIG(s), v);                                                                                        \
    sim_signal_changed(SIG(s));                                                                             \
  }
STORE(hsa_signal_store_relaxed, __ATOMIC_RELAXED)
STORE(hsa_signal_store_screlease, __ATOMIC_RELEASE)
STORE(hsa_signal_store_release, __ATOMIC_RELEASE)
STORE(hsa_signal_silent_store_relaxed, __ATOMIC_RELAXED)
STORE(hsa_signal_silent_store_screlease, __ATOMIC_RELEASE)

#define RMW(name, fn, order)                                                                                 \
  SIM_API void name(hsa_signal_t s, hsa_signal_value_t v) {                                                 \
    sim_signal_busy(SIG(s));                                                                                \
    fn(&SIG(s)->amd.value, v, order);                                                                       \
    sim_signal_changed(SIG(s));                                                                             \
  }
#define RMW4(op, fn)                                                                                         \
  RMW(hsa_signal_##op##_relaxed, fn, __ATOMIC_RELAXED)                                                      \
  RMW(hsa_signal_##op##_scacquire, fn, __ATOMIC_ACQUIRE)                                                    \
  RMW(hsa_signal_##op##_screlease, fn, __ATOMIC_RELEASE)                                                    \
  RMW(hsa_signal_##op##_scacq_screl, fn, __ATOMIC_ACQ_REL)
RMW4(add, __atomic_fetch_add)
RMW4(subtract, __atomic_fetch_sub)
RMW4(and, __atomic_fetch_and)
RMW4(or, __atomic_fetch_or)
RMW4(xor, __atomic_fetch_xor)

#define XCHG(name, order)                                                                                    \
  SIM_API hsa_signal_value_t name(hsa_signal_t s, hsa_signal_value_t v) {                                   \
    sim_signal_busy(SIG(s));                                                                                \
    hsa_signal_value_t old = __atomic_exchange_n(&SIG(s)->amd.value, v, order);                             \
    sim_signal_changed(SIG(s));                                                                             \
    return old;                                                                                             \
  }
XCHG(hsa_signal_exchange_relaxed, __ATOMIC_RELAXED)
XCHG(hsa_signal_exchange_scacquire, __ATOMIC_ACQUIRE)
XCHG(hsa_signal_exchange_screlease, __ATOMIC_RELEASE)
XCHG(hsa_signal_exchange_scacq_screl, __ATOMIC_ACQ_REL)

#define CAS(name, order)                                                                                     \
  SIM_API hsa_signal_value_t name(hsa_signal_t s, hsa_signal_value_t expected, hsa_signal_value_t v) {      \
    hsa_signal_value_t e = expected;                                                                        \
    sim_signal_busy(SIG(s));                                                                                \
    __atomic_compare_exchange_n(&SIG(s)->amd.value, &e, v, false, order, __ATOMIC_RELAXED);                 \
    sim_signal_changed(SIG(s));                                                                             \
    return e;                                                                                               \
  }
CAS(hsa_signal_cas_relaxed, __ATOMIC_RELAXED)
CAS(hsa_signal_cas_scacquire, __ATOMIC_ACQUIRE)
CAS(hsa_signal_cas_screlease, __ATOMIC_RELEASE)
CAS(hsa_signal_cas_scacq_screl, __ATOMIC_ACQ_REL)

/* The wait hint only changes how long the first part of the wait spins; the agent never burns a
 * core for the whole wait (it sleeps on the futex). */
static hsa_signal_value_t wait(hsa_signal_t signal, hsa_signal_condition_t cond, hsa_signal_value_t cmp,
                               uint64_t timeout, hsa_wait_state_t hint) {
  struct sim_signal *s = SIG(signal);
  if (hint == HSA_WAIT_STATE_ACTIVE) {
    /* spin briefly: a dispatch of a few microseconds completes without a sleep */
    uint64_t until = sim_now_ns() + 20000;
    while (sim_now_ns() < until) {
      hsa_signal_value_t v = __atomic_load_n(&s->amd.value, __ATOMIC_ACQUIRE);
      if (satisfied(cond, v, cmp)) return v;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }
  /* the timeout is a hint in HSA; here it is honoured, in nanoseconds (TIMESTAMP_FREQUENCY) */
  return sim_signal_wait_value(s, cond, cmp, timeout, NULL);
}

SIM_API hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t s, hsa_signal_condition_t cond,
                                                     hsa_signal_value_t cmp, uint64_t timeout, hsa_wait_state_t hint) {
  return wait(s, cond, cmp, timeout, hint);
}
SIM_API hsa_signal_value_t hsa_signal_wait_relaxed(hsa_signal_t s, hsa_signal_condition_t cond,
                                                   hsa_signal_value_t cmp, uint64_t timeout, hsa_wait_state_t hint) {
  return wait(s, cond, cmp, timeout, hint);
}
SIM_API hsa_signal_value_t hsa_signal_wait_acquire(hsa_signal_t s, hsa_signal_condition_t cond,
                                                   hsa_signal_value_t cmp, uint64_t timeout, hsa_wait_state_t hint) {
  return wait(s, cond, cmp, timeout, hint);
}
