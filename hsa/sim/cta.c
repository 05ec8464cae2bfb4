/* hsa/sim/cta.c: one CTA on its worker thread: its work-items as fibers in waves of 64, the
 * scheduler that runs them, and the primitives device/dev.h calls (barrier, wave operations,
 * LDS, polls, traps, chaos), installed in the host kernel object as its dev_host table. */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

SIM_TLS struct sim_lane *sim_cur;

/* ---------------------------------------------------------------- randomness (chaos) */

uint64_t sim_rng(uint64_t *s) {
  /* splitmix64: small, fast, and the same sequence from the same seed everywhere */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void nap_us(unsigned us) {
  struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000};
  nanosleep(&ts, NULL);
}

/* The longest nap of a CTA with nothing to do but poll: 200 us while few CTAs wait (the 8-CTA grids of
 * the suites, 32 at TP 4), and past that long enough that the waiting CTAs together wake about 40,000
 * times a second, which takes a third of a core or so (a wake-up is a nanosleep's two context switches
 * and a poll, 5 to 10 us). A GPU's grid is 256 or 304 CTAs an agent, 1,024 CTA threads at TP 4; their
 * naps of 200 us were 5 million wake-ups a second, more than two cores can make, and CTAs still
 * starting starved behind them (a TP 4 grid of 256 had 238 CTAs arrived after 30 s). A poll then
 * sees its data up to 25 ms late, which only slows the software agent: what a wait reads, and so
 * the order and the outcome of a launch, do not depend on it. */
#define SIM_NAP_US 200u
#define SIM_NAP_FEW 32u      /* waiting CTAs the 200 us cap is for */
/* The waiting CTAs' wake-ups a second past that. Under AddressSanitizer a wake-up costs about four
 * times as much (25 us: its interceptors and the fibers' stack switches), and 40,000 of them took a
 * whole core alone and 1.6 cores in CI's .ci/asan beside another suite: there 10,000. */
#if defined(__SANITIZE_ADDRESS__)
#define SIM_WAKES_S 10000u
#else
#define SIM_WAKES_S 40000u
#endif
static unsigned nap_cap_us(void) {
  uint32_t w = atomic_load_explicit(&sim.waiting, memory_order_relaxed);
  return w <= SIM_NAP_FEW ? SIM_NAP_US : w * (1000000u / SIM_WAKES_S);
}

/* A CTA counted in its dispatch's and the agent's idle CTAs, or not. */
static void sim_cta_set_waiting(struct sim_cta *c, bool on) {
  c->waiting = on;
  atomic_fetch_add_explicit(&c->d->waiting, on ? 1u : (uint32_t)-1, memory_order_relaxed);
  atomic_fetch_add_explicit(&sim.waiting, on ? 1u : (uint32_t)-1, memory_order_relaxed);
}

/* ---------------------------------------------------------------- the ready ring */

/* Lanes ready to run, in a ring of lane indices; chaos picks a random one instead of the head.
 * cap is a power of two (indices wrap with a mask: a division twice a turn was measurable). */
struct ready_ring {
  uint32_t *idx;
  uint32_t head, n, cap;
};
static SIM_TLS struct ready_ring ready;
static SIM_TLS uint32_t *polling;
static SIM_TLS uint32_t npolling;

static void ready_push(uint32_t i) { ready.idx[(ready.head + ready.n++) & (ready.cap - 1)] = i; }

static bool ready_pop(struct sim_cta *c, uint32_t *out) {
  if (!ready.n) return false;
  if (sim.cfg.chaos && ready.n > 1) {
    uint32_t k = (uint32_t)(sim_rng(&c->rng) % ready.n);
    uint32_t a = ready.head & (ready.cap - 1), b = (ready.head + k) & (ready.cap - 1);
    uint32_t t = ready.idx[a];
    ready.idx[a] = ready.idx[b];
    ready.idx[b] = t;
  }
  *out = ready.idx[ready.head & (ready.cap - 1)];
  ready.head = (ready.head + 1) & (ready.cap - 1);
  ready.n--;
  return true;
}

/* ---------------------------------------------------------------- lanes */

/* The bottom of each fiber stack holds this; a work-item that overwrote it overflowed its stack.
 * It is read every STACK_CHECK_TURNS turns of the work-item, when it exits, and at the CTA's end:
 * reading it every turn was a cache and TLB miss a switch (a tenth of the agent's time), and an
 * overflow of less than SIM_STACK_ZONE lands in the unused zone below, harming no other
 * work-item, until it is seen. */
#define STACK_CANARY 0x5ca1ab1ec0ffee42ull
#define STACK_CHECK_TURNS 8u

static bool stack_intact(struct sim_cta *c, struct sim_lane *l) {
  if (*(volatile uint64_t *)l->fiber_stack == STACK_CANARY) return true;
  snprintf(c->trap, sizeof c->trap,
           "work-item %u of CTA %u overflowed its %zu-byte stack (HSAMONO_SIM_STACK_KB; the agent's state may be "
           "damaged)",
           l->lid, c->id, l->fiber_stack_size);
  c->aborted = true;
  sim_dispatch_abort(c->d, c->trap);
  return false;
}

static void lane_exited(struct sim_cta *c, struct sim_lane *l);

/* The end of lane l's turn (its state set): the scheduler's bookkeeping, done on the lane's own
 * stack so that it can hand the thread straight to the next ready lane, one switch instead of
 * two through the scheduler (every wave operation and barrier ends a turn of each of its lanes).
 * The scheduler takes over when no lane is ready, the CTA ended or was aborted, or under chaos
 * while the next CTA in the start order waits for this one. */
static void lane_turn_end(struct sim_lane *l) {
  struct sim_cta *c = l->cta;
  bool check = l->state == LANE_DONE || ++l->turns % STACK_CHECK_TURNS == 0;
  if (!(check && !stack_intact(c, l)) && !c->aborted) {
    if (l->state == LANE_DONE) lane_exited(c, l);
    else if (l->state == LANE_POLLING) polling[npolling++] = l->lid;
    if (sim.cfg.weak) sim_mem_drain_one(c);
    uint32_t i;
    if (c->live && !c->holding_next && ready_pop(c, &i)) {
      struct sim_lane *n = &c->lanes[i];
      c->turns++;
      n->state = LANE_RUNNING;
      sim_cur = n;
      if (n != l) sim_fiber_switch(&l->fiber, &n->fiber);
      return;
    }
  }
  sim_cur = NULL;
  sim_fiber_switch(&l->fiber, &c->sched);
}

static void lane_entry(void *arg) {
  struct sim_lane *l = arg;
  struct sim_cta *c = l->cta;
  c->d->k->fn(c->d->pkt.kernarg_address);
  l->state = LANE_DONE;
  lane_turn_end(l); /* never resumed: the fiber's stack is simply reused by the next CTA */
  __builtin_unreachable();
}

/* End the lane's turn with state st; returns when it is run again. */
void sim_lane_yield(enum lane_state st) {
  struct sim_lane *l = sim_cur;
  l->state = st;
  lane_turn_end(l);
}

void sim_check_abort(void) {
  struct sim_lane *l = sim_cur;
  struct sim_cta *c = l->cta;
  if (!atomic_load_explicit(&c->d->abort, memory_order_relaxed)) return;
  c->aborted = true;
  /* never resumed: the fiber's stack is simply reused by the next CTA */
  sim_fiber_switch(&l->fiber, &c->sched);
  __builtin_unreachable();
}

void sim_trap(const char *fmt, ...) {
  struct sim_lane *l = sim_cur;
  struct sim_cta *c = l->cta;
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(c->trap, sizeof c->trap, "work-item %u of CTA %u: %s", l->lid, c->id, what);
  c->aborted = true;
  sim_dispatch_abort(c->d, c->trap);
  sim_fiber_switch(&l->fiber, &c->sched);
  __builtin_unreachable();
}

/* A point where chaos may reorder: another work-item runs first, or the whole CTA stalls. */
void sim_chaos_point(void) {
  if (!sim.cfg.chaos) return;
  struct sim_cta *c = sim_cur->cta;
  uint64_t r = sim_rng(&c->rng);
  if ((r & 63) == 0) nap_us((unsigned)((r >> 8) % 200));
  if ((r & 0x300) == 0) {
    ready_push(sim_cur->lid);
    sim_lane_yield(LANE_READY);
  }
}

/* A releasing wave under chaos: now and then its CTA stalls (before the release: the producer is
 * late and consumers that skip their wait run ahead; after it: the CTA's other waves are late,
 * so a flag raised before their stores drained is seen first). */
void sim_chaos_lag(void) {
  if (!sim.cfg.chaos || !sim_cur) return;
  uint64_t r = sim_rng(&sim_cur->cta->rng);
  if ((r & 15) == 0) nap_us(20 + (unsigned)((r >> 8) % 300));
}

/* The dispatch's laggard under chaos (one CTA in one dispatch of four, chosen from the seed): before
 * its first wave publishes stores it often stalls until the rest of the dispatch is quiet (no CTA
 * has made progress for 0.6 ms: each is done or polling), at most 10 ms. So what it produces comes
 * as late as it can, and a consumer anywhere that reads without waiting for it reads the old
 * data, however long the consumer's own path. Wave 0 only: the stall holds the whole CTA (one
 * thread), and one stall a hand-off keeps the cost near the others' remaining work. */
void sim_chaos_laggard_drain(void) {
  if (!sim.cfg.chaos || !sim_cur) return;
  struct sim_cta *c = sim_cur->cta;
  if (c->id != c->d->laggard || sim_cur->lid >= 64) return;
  if (!(sim_rng(&c->rng) & 1)) return;
  uint64_t last = atomic_load_explicit(&c->d->progress, memory_order_relaxed);
  for (unsigned quiet = 0, naps = 0; quiet < 3 && naps < 50; naps++) {
    nap_us(200);
    uint64_t now = atomic_load_explicit(&c->d->progress, memory_order_relaxed);
    quiet = now == last ? quiet + 1 : 0;
    last = now;
  }
}

/* ---------------------------------------------------------------- the lagging rank */

/* HSAMONO_SIM_LAG_RANK=g: GPU agent g is a rank that runs a whole step behind its peers where the
 * protocol lets it. A CTA of g that has pushed to peers (system-scope stores into another GPU's
 * memory: the all-reduce's tagged pairs) and then reads system-scope memory (its inbox) first holds
 * until its peers have made no progress for the quiet window (each is done, idle or waiting on a
 * later push of g's), at most LAG_MAX_NS. Its pushes land meanwhile, so the peers finish the step
 * and run the next one as far as they can: their next pushes reach g's inbox while g has yet to
 * read this step's, and a half reused too early, a tag that does not alternate or a region shared
 * by two all-reduces hands g a value of the wrong step or stage. The held work-items yield as
 * pollers, so the CTA's others still push. */
#define LAG_MAX_NS 3000000000ull

void sim_lag_pushed(struct sim_cta *c) {
  if ((int)c->d->k->agent->gpu_index != sim.cfg.lag_gpu || c->lag_holding) return;
  c->lag_armed = true;
}

/* Its peers: every other GPU agent of the process (an IPC mapping does not say whose memory it
 * is; agents outside the group run nothing, so they are quiet). */
static uint32_t lag_peers(void) { return ((1u << sim.cfg.ngpus) - 1u) & ~(1u << sim.cfg.lag_gpu); }

void sim_lag_hold(struct sim_cta *c) {
  if (!c->lag_holding) {
    uint64_t now = sim_now_ns();
    c->lag_armed = false;
    c->lag_holding = true;
    c->lag_start_ns = c->lag_quiet_ns = now;
    c->lag_next_ns = now;
    c->lag_seen = sim_gpus_progress(lag_peers());
    if (c->holding_next) { /* chaos start order: the CTAs after it need not wait for its hold */
      c->holding_next = false;
      atomic_fetch_add(&c->d->begun, 1);
    }
  }
  while (c->lag_holding) {
    uint64_t now = sim_now_ns();
    if (now >= c->lag_next_ns) {
      c->lag_next_ns = now + 200000;
      uint64_t v = sim_gpus_progress(lag_peers());
      if (v != c->lag_seen) c->lag_seen = v, c->lag_quiet_ns = now;
      uint64_t quiet_ns = (uint64_t)sim.cfg.lag_quiet_ms * 1000000ull;
      if (now - c->lag_quiet_ns >= quiet_ns || now - c->lag_start_ns >= LAG_MAX_NS) {
        c->lag_holding = false;
        break;
      }
    }
    sim_lane_yield(LANE_POLLING);
    sim_check_abort();
  }
}

/* ---------------------------------------------------------------- barrier and waves */

static void progressed(struct sim_cta *c) {
  c->progressed = true;
  if (c->waiting) sim_cta_set_waiting(c, false);
  atomic_fetch_add_explicit(&c->d->progress, 1, memory_order_relaxed);
}

static void release_barrier(struct sim_cta *c) {
  c->bar_arrived = 0;
  if (c->d->tr_on) sim_trace_barrier(c);
  if (sim.cfg.weak) sim_mem_barrier(c); /* every wave's stores so far, visible CTA-wide (the CU's L1) */
  for (uint32_t i = 0; i < c->size; i++)
    if (c->lanes[i].state == LANE_BARRIER) {
      c->lanes[i].state = LANE_READY;
      ready_push(i);
    }
  progressed(c);
}

static void op_barrier(void) {
  sim_check_abort();
  sim_chaos_point();
  struct sim_cta *c = sim_cur->cta;
  c->bar_arrived++;
  if (c->bar_arrived == c->live) {
    release_barrier(c);
    /* the last to arrive lets the others go first, as any of them may run first on a GPU */
    ready_push(sim_cur->lid);
    sim_lane_yield(LANE_READY);
  } else {
    sim_lane_yield(LANE_BARRIER);
  }
  sim_check_abort();
}

enum { XCHG_U32 = 1, XCHG_MFMA = 2 };

static void wave_complete(struct sim_cta *c, uint32_t w, struct sim_wave_xchg *x) {
  uint32_t lo = w * 64, hi = lo + 64 > c->size ? c->size : lo + 64;
  /* the next use of this area (two operations on) starts afresh; slots and the active mask
   * stay readable until then */
  x->arrived = 0;
  if (x->kind == XCHG_MFMA)
    for (uint32_t i = lo; i < hi; i++)
      if (!(x->active >> (i - lo) & 1)) memset(&x->slot.mfma[i - lo], 0, sizeof x->slot.mfma[0]);
  for (uint32_t i = lo; i < hi; i++)
    if (c->lanes[i].state == LANE_WAVE) {
      c->lanes[i].state = LANE_READY;
      ready_push(i);
    }
  progressed(c);
}

/* Deposit this lane's operand for a wave operation of `kind` and wait for the wave; returns the
 * exchange area holding every participating lane's operand. */
static struct sim_wave_xchg *wave_exchange(uint32_t kind, const void *operand, size_t bytes) {
  sim_check_abort();
  struct sim_lane *l = sim_cur;
  struct sim_cta *c = l->cta;
  uint32_t w = l->lid / 64, lane = l->lid % 64;
  struct sim_wave_xchg *x = &c->xchg[w][l->wave_parity & 1];
  if (x->arrived == 0) {
    x->kind = kind;
    x->active = 0;
    x->mfma_state = 0;
  } else if (x->kind != kind) {
    sim_trap("lanes of wave %u are in different wave operations (a wave operation in divergent control flow)", w);
  }
  if (kind == XCHG_U32) memcpy(&x->slot.u32[lane], operand, bytes);
  else memcpy(&x->slot.mfma[lane], operand, bytes);
  x->active |= 1ull << lane;
  x->arrived++;
  l->wave_parity++;
  if (x->arrived == c->wave_live[w]) {
    wave_complete(c, w, x);
    ready_push(l->lid);
    sim_lane_yield(LANE_READY);
  } else {
    sim_lane_yield(LANE_WAVE);
  }
  sim_check_abort();
  return x;
}

/* The area is reset by the first lane of the operation after next (two areas alternate), so a
 * lane may read it until its next wave operation. */
static void wave_done(struct sim_wave_xchg *x) { (void)x; }

static u32 op_wave_shfl(u32 value, u32 src) {
  struct sim_wave_xchg *x = wave_exchange(XCHG_U32, &value, 4);
  u32 r = (x->active >> (src & 63) & 1) ? x->slot.u32[src & 63] : 0;
  wave_done(x);
  return r;
}

static u64 op_wave_ballot(int pred) {
  u32 v = pred != 0;
  struct sim_wave_xchg *x = wave_exchange(XCHG_U32, &v, 4);
  u64 m = 0;
  for (int i = 0; i < 64; i++)
    if ((x->active >> i & 1) && x->slot.u32[i]) m |= 1ull << i;
  wave_done(x);
  return m;
}

static u32 op_wave_first(u32 value) {
  struct sim_wave_xchg *x = wave_exchange(XCHG_U32, &value, 4);
  u32 r = x->active ? x->slot.u32[__builtin_ctzll(x->active)] : value;
  wave_done(x);
  return r;
}

static void op_mfma(enum dev_mfma_op op, const struct dev_mfma_lane *in, f32 *d) {
  struct sim_wave_xchg *x = wave_exchange(XCHG_MFMA, in, sizeof *in);
  struct sim_cta *c = sim_cur->cta;
  /* the wave's instruction is computed once, by the first lane to resume (the lanes of a CTA
   * run one at a time on its thread) */
  if (x->mfma_state == 0) x->mfma_state = hm_isa_mfma_wave(c->d->k->agent->arch, op, x->slot.mfma, x->mfma_d) ? 1 : 2;
  if (c->d->tr_on) sim_trace_mfma(sim_cur, op);
  if (x->mfma_state == 1) memcpy(d, x->mfma_d[sim_cur->lid % 64], sizeof x->mfma_d[0]);
  else
    sim_trap("matrix instruction %d is not available on %s (or its operand format is not modelled)", (int)op,
             c->d->k->agent->name);
  wave_done(x);
}

/* After a lane leaves the CTA (its kernel returned), barriers and wave operations count one
 * fewer: waves that have exited do not take part on the GPU either. */
static void lane_exited(struct sim_cta *c, struct sim_lane *l) {
  uint32_t w = l->lid / 64;
  c->live--;
  c->wave_live[w]--;
  if (c->bar_arrived && c->bar_arrived == c->live) release_barrier(c);
  for (int p = 0; p < 2; p++) {
    struct sim_wave_xchg *x = &c->xchg[w][p];
    bool waiting = false;
    uint32_t lo = w * 64, hi = lo + 64 > c->size ? c->size : lo + 64;
    for (uint32_t i = lo; i < hi; i++)
      if (c->lanes[i].state == LANE_WAVE && ((c->lanes[i].wave_parity - 1) & 1) == (uint32_t)p) waiting = true;
    if (waiting && x->arrived == c->wave_live[w]) wave_complete(c, w, x);
  }
  progressed(c);
}

/* ---------------------------------------------------------------- ids, LDS, time, polls */

static u32 op_lid(void) { return sim_cur->lid; }
static u32 op_cta(void) { return sim_cur->cta->id; }
static u32 op_ncta(void) { return sim_cur->cta->d->nctas; }
static u32 op_cta_size(void) { return sim_cur->cta->size; }

static void *op_lds(u32 bytes) {
  struct sim_cta *c = sim_cur->cta;
  if (bytes > c->lds_size)
    sim_trap("the kernel's LDS struct is %u bytes, the dispatch's group segment %u", bytes, c->lds_size);
  return c->lds;
}

static u64 op_realtime(void) { return sim_now_ns() / 10; } /* 100 MHz, as s_memrealtime */
/* the timeline's clock: an order of events across the agent's CTAs (from 1: 0 is "not stamped") */
static u64 sim_events;
static u64 op_event(void) { return __atomic_add_fetch(&sim_events, 1, __ATOMIC_RELAXED); }

static void op_poll_wait(u32 round) {
  sim_check_abort();
  if (round & DEV_POLL_PEER)
    atomic_store_explicit(&sim_cur->cta->d->peer_poll_ns, sim_now_ns(), memory_order_relaxed);
  if (sim.cfg.chaos) {
    uint64_t r = sim_rng(&sim_cur->cta->rng);
    if ((r & 15) == 0) nap_us((unsigned)((r >> 8) % 100));
  }
  sim_lane_yield(LANE_POLLING);
  sim_check_abort();
}

static void op_poll_done(void) { progressed(sim_cur->cta); }

static void op_sleep(u32 units) {
  (void)units;
  op_poll_wait(0);
}

static void op_trap(const char *why) { sim_trap("trap at %s", why); }

static u32 op_cvt(enum dev_cvt_op op, f32 a, f32 b, u32 old, u32 sel) {
  return hm_isa_cvt(sim_cur->cta->d->k->agent->arch, op, a, b, old, sel);
}

/* ---------------------------------------------------------------- memory through the model */

static void op_load(const void *p, void *out, u32 bytes, enum dev_cache_policy cp) {
  sim_check_abort();
  sim_mem_load(sim_cur->cta, p, out, bytes, cp);
  if (sim_cur->cta->d->tr_on) sim_trace_load(sim_cur, p, out, bytes, cp);
}
/* A traced writer is recorded before its store, so a reader on another thread that sees the value
 * finds its writer: recorded after, a reader could see the value first, and whether its wait counted
 * would depend on timing (the trace's one promise is that it does not). Under chaos a traced store
 * is followed by a chaos point, which keeps that window open if the order is ever turned round. */
static void op_store(void *p, const void *in, u32 bytes, enum dev_cache_policy cp) {
  sim_check_abort();
  const bool traced = sim_cur->cta->d->tr_on;
  if (traced) sim_trace_store(sim_cur, p, in, bytes, cp);
  sim_mem_store(sim_cur->cta, p, in, bytes, cp);
  if (traced) sim_chaos_point();
}
static u64 op_atomic(void *p, enum dev_atomic_op op, u32 bytes, u64 v, u64 cmp, enum dev_order o, enum dev_scope s) {
  sim_check_abort();
  sim_chaos_point();
  const bool traced = sim_cur->cta->d->tr_on, writer = op == DEV_ATOMIC_STORE || op == DEV_ATOMIC_XCHG;
  /* a writer (store, exchange) is recorded before, as op_store's; loads and read-modify-writes after,
   * with the value they returned */
  if (traced && writer) sim_trace_atomic(sim_cur, p, op, bytes, v, 0, cmp, s);
  u64 old = sim_mem_atomic(sim_cur->cta, p, op, bytes, v, cmp, o, s);
  if (traced) {
    if (writer) sim_chaos_point();
    else sim_trace_atomic(sim_cur, p, op, bytes, v, old, cmp, s);
  }
  return old;
}
static void op_fence(enum dev_order o, enum dev_scope s) {
  sim_check_abort();
  sim_mem_fence(sim_cur->cta, o, s);
}
static void op_wait_stores(void) { sim_mem_wait_stores(sim_cur->cta); }
static void op_stage(u32 slot) {
  if (sim_cur->cta->d->tr_on) sim_trace_stage(sim_cur, slot);
}

const struct dev_host_ops sim_dev_ops = {
    .abi = DEV_HOST_ABI,
    .lid = op_lid,
    .cta = op_cta,
    .ncta = op_ncta,
    .cta_size = op_cta_size,
    .lds = op_lds,
    .barrier = op_barrier,
    .wave_shfl = op_wave_shfl,
    .wave_ballot = op_wave_ballot,
    .wave_first = op_wave_first,
    .mfma = op_mfma,
    .cvt = op_cvt,
    .load = op_load,
    .store = op_store,
    .atomic = op_atomic,
    .fence = op_fence,
    .wait_stores = op_wait_stores,
    .poll_wait = op_poll_wait,
    .poll_done = op_poll_done,
    .realtime = op_realtime,
    .event = op_event,
    .sleep = op_sleep,
    .trap = op_trap,
    .stage = op_stage,
};

/* ---------------------------------------------------------------- the scheduler */

static bool ensure_ring(uint32_t n) {
  if (ready.cap >= n) return true;
  while (n & (n - 1)) n += n & -n; /* up to a power of two */
  uint32_t *a = realloc(ready.idx, n * sizeof *a), *b = realloc(polling, n * sizeof *b);
  if (a) ready.idx = a;
  if (b) polling = b;
  if (!a || !b) return false;
  ready.cap = n;
  return true;
}

void sim_cta_thread_end(void) {
  free(ready.idx);
  free(polling);
  ready = (struct ready_ring){0};
  polling = NULL;
}

/* Describe a CTA whose work-items all wait on each other (a barrier or wave operation that not
 * every work-item reaches). */
static void describe_deadlock(struct sim_cta *c, char *out, size_t cap) {
  uint32_t bar = 0, wave = 0, first_bar = 0, first_wave = 0;
  for (uint32_t i = 0; i < c->size; i++) {
    if (c->lanes[i].state == LANE_BARRIER && !bar++) first_bar = i;
    if (c->lanes[i].state == LANE_WAVE && !wave++) first_wave = i;
  }
  snprintf(out, cap,
           "work-items of CTA %u wait on each other forever: %u at a barrier (first %u), %u in a wave operation "
           "(first %u), %u exited (a barrier or wave operation in divergent control flow)",
           c->id, bar, first_bar, wave, first_wave, c->size - c->live);
}

void sim_cta_run(struct sim_cta *c) {
  struct sim_dispatch *d = c->d;
  c->live = c->size;
  c->nwaves = (c->size + 63) / 64;
  c->bar_arrived = 0;
  c->aborted = false;
  c->trap[0] = 0;
  c->lds_size = d->group_bytes;
  c->poll_rounds_idle = 0;
  c->waiting = false;
  c->rng = sim.cfg.chaos_seed ^ (d->seq * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)c->id << 32);
  /* LDS is not cleared on a GPU: a kernel that reads what it never wrote sees junk here too */
  if (c->lds_size) memset(c->lds, 0xcd, c->lds_size);
  for (uint32_t w = 0; w < c->nwaves; w++) {
    c->wave_live[w] = (w + 1) * 64 <= c->size ? 64 : c->size - w * 64;
    memset(&c->xchg[w][0], 0, offsetof(struct sim_wave_xchg, slot));
    memset(&c->xchg[w][1], 0, offsetof(struct sim_wave_xchg, slot));
  }
  sim_mem_reset(&c->mem);
  if (d->tr_on && !sim_trace_cta_begin(c)) {
    c->aborted = true;
    snprintf(c->trap, sizeof c->trap, "out of memory tracing CTA %u", c->id);
    sim_dispatch_abort(d, c->trap);
    return;
  }
  if (!ensure_ring(c->size)) {
    c->aborted = true;
    snprintf(c->trap, sizeof c->trap, "out of memory scheduling CTA %u", c->id);
    sim_dispatch_abort(d, c->trap);
    return;
  }
  ready.head = ready.n = 0;
  npolling = 0;
  for (uint32_t i = 0; i < c->size; i++) {
    struct sim_lane *l = &c->lanes[i];
    l->state = LANE_READY;
    l->wave_parity = 0;
    l->turns = 0;
    *(volatile uint64_t *)l->fiber_stack = STACK_CANARY;
    sim_fiber_init(&l->fiber, l->fiber_stack, l->fiber_stack_size, lane_entry, l);
    ready_push(i);
  }
  atomic_fetch_add(&d->progress, 1);
  /* Chaos start order is enforced, not left to thread timing (a loaded machine may stall any
   * thread for milliseconds): a CTA begins only once the one before it in the order has run a
   * while: until it finished, or every work-item is waiting, or each had several turns. So a
   * consumer placed first really reads before its producer runs. */
  c->holding_next = sim.cfg.chaos;
  c->turns = 0;
  c->lag_armed = c->lag_holding = false;
  if (sim.cfg.chaos)
    while (atomic_load(&d->begun) < c->pos && !atomic_load(&d->abort)) nap_us(20);
  uint32_t backoff = 0;
  for (;;) {
    uint32_t i;
    if (c->holding_next && (ready.n == 0 || c->live == 0 || c->aborted || c->turns >= 4 * c->size)) {
      c->holding_next = false;
      atomic_fetch_add(&d->begun, 1);
    }
    if (ready_pop(c, &i)) {
      /* lanes run, handing the thread from one to the next (lane_turn_end), until none is
       * ready or the CTA ended or was aborted: then the last of them switches back here */
      c->turns++;
      struct sim_lane *l = &c->lanes[i];
      l->state = LANE_RUNNING;
      sim_cur = l;
      sim_fiber_switch(&c->sched, &l->fiber);
      sim_cur = NULL;
      if (c->aborted || c->live == 0) break;
      continue;
    }
    if (atomic_load_explicit(&d->abort, memory_order_relaxed)) {
      c->aborted = true;
      break;
    }
    if (npolling == 0) {
      describe_deadlock(c, c->trap, sizeof c->trap);
      c->aborted = true;
      sim_dispatch_abort(d, c->trap);
      break;
    }
    /* Only polling work-items left: let other CTAs' threads run before polling again, backing
     * off while nothing in this CTA moves. */
    if (c->progressed) backoff = 0;
    else if (!c->waiting) sim_cta_set_waiting(c, true);
    c->progressed = false;
    if (sim.cfg.weak) sim_mem_drain_idle(c);
    if (backoff < 2) sched_yield();
    else {
      unsigned cap = nap_cap_us(), us = backoff < 24 ? 1u << (backoff - 2) : cap;
      nap_us(us < cap ? us : cap);
    }
    backoff++;
    atomic_fetch_add_explicit(&d->idle_rounds, 1, memory_order_relaxed);
    for (uint32_t k = 0; k < npolling; k++) {
      c->lanes[polling[k]].state = LANE_READY;
      ready_push(polling[k]);
    }
    npolling = 0;
  }
  if (c->holding_next) atomic_fetch_add(&d->begun, 1);
  /* every stack's canary once more: a lane that overflowed in its last turns before a wait */
  for (uint32_t i = 0; i < c->size && !c->aborted; i++) stack_intact(c, &c->lanes[i]);
  /* no lane runs again: the next CTA starts fresh fibers on these stacks */
  for (uint32_t i = 0; i < c->size; i++) sim_fiber_forget(&c->lanes[i].fiber);
  if (c->waiting) sim_cta_set_waiting(c, false);
  /* the end of a CTA publishes everything it stored (the dispatch's release) */
  sim_mem_flush_all(c);
  atomic_fetch_add(&d->progress, 1);
}
