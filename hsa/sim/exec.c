/* hsa/sim/exec.c: running a dispatch: CTAs placed on CUs with the resources the gfx code object
 * states (so a grid that exceeds residency waits, and a persistent one deadlocks), one OS thread a
 * resident CTA from a reusable pool, completion, and the watchdog that turns a hang into an error. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim.h"

/* ---------------------------------------------------------------- worker threads */

struct sim_worker {
  pthread_t thread;
  pthread_cond_t cv;
  struct sim_cta cta;         /* reused for every CTA this worker runs */
  uint8_t *stacks;            /* one fiber stack a work-item, grown on demand */
  uint32_t nstacks;
  bool has_job, quit;
  struct sim_worker *next_idle, *next_all;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_worker *idle_workers, *all_workers;
static pthread_cond_t active_cv = PTHREAD_COND_INITIALIZER;

static void cta_finished(struct sim_cta *c);

/* Fiber stacks in one mapping a worker; pages are committed only when a work-item touches them.
 * No guard page between them: a full-size grid has 131,072 work-items, and a guard each would
 * take two memory mappings each, past Linux's limit of 65,530. A canary at the bottom of each
 * stack, above an unused zone (SIM_STACK_ZONE), catches an overflow instead (cta.c). */
static bool ensure_stacks(struct sim_worker *w, uint32_t n) {
  if (w->nstacks >= n) return true;
  size_t per = sim.cfg.stack_bytes + SIM_STACK_ZONE;
  if (w->stacks) munmap(w->stacks, per * w->nstacks);
  w->stacks = mmap(NULL, per * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (w->stacks == MAP_FAILED) {
    w->stacks = NULL;
    w->nstacks = 0;
    return false;
  }
  w->nstacks = n;
  return true;
}

static bool prepare_cta(struct sim_worker *w, uint32_t size) {
  struct sim_cta *c = &w->cta;
  if (!c->lanes) {
    c->lanes = calloc(SIM_MAX_CTA, sizeof *c->lanes);
    c->lds = malloc(160 * 1024);
    c->xchg = calloc(SIM_MAX_CTA / 64, sizeof *c->xchg);
    c->wave_live = calloc(SIM_MAX_CTA / 64, sizeof *c->wave_live);
    sim_mem_init(&c->mem);
    if (!c->lanes || !c->lds || !c->xchg || !c->wave_live) return false;
  }
  if (!ensure_stacks(w, size)) return false;
  size_t per = sim.cfg.stack_bytes + SIM_STACK_ZONE;
  for (uint32_t i = 0; i < size; i++) {
    c->lanes[i].fiber.sp = NULL;
    c->lanes[i].lid = i;
    c->lanes[i].cta = c;
    c->lanes[i].fiber_stack = w->stacks + per * i + SIM_STACK_ZONE;
    c->lanes[i].fiber_stack_size = sim.cfg.stack_bytes;
  }
  return true;
}

static void *worker_main(void *arg) {
  struct sim_worker *w = arg;
  pthread_mutex_lock(&pool_lock);
  for (;;) {
    while (!w->has_job && !w->quit) pthread_cond_wait(&w->cv, &pool_lock);
    if (w->quit) break;
    pthread_mutex_unlock(&pool_lock);
    struct sim_cta *c = &w->cta;
    if (sim.cfg.start_late_ms) {
      struct timespec late = {(time_t)(sim.cfg.start_late_ms / 1000), (long)(sim.cfg.start_late_ms % 1000) * 1000000};
      nanosleep(&late, NULL);
    }
    if (prepare_cta(w, c->size)) {
      sim_cta_run(c);
      if (c->d->tr_on) sim_trace_cta_end(c);
    } else {
      c->aborted = true;
      snprintf(c->trap, sizeof c->trap, "out of memory for the fibers of a %u-work-item CTA", c->size);
      sim_dispatch_abort(c->d, c->trap);
    }
    cta_finished(c);
    pthread_mutex_lock(&pool_lock);
    w->has_job = false;
    w->next_idle = idle_workers;
    idle_workers = w;
  }
  pthread_mutex_unlock(&pool_lock);
  sim_cta_thread_end();
  return NULL;
}

/* Hand CTA `id` of d, placed on CU `cu`, to an idle worker (a new one if none is idle). */
static bool start_cta(struct sim_dispatch *d, uint32_t id, unsigned cu, const uint32_t simd_waves[4],
                      uint32_t pos) {
  pthread_mutex_lock(&pool_lock);
  struct sim_worker *w = idle_workers;
  if (w) {
    idle_workers = w->next_idle;
  } else {
    w = calloc(1, sizeof *w);
    if (!w) {
      pthread_mutex_unlock(&pool_lock);
      return false;
    }
    pthread_cond_init(&w->cv, NULL);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    if (pthread_create(&w->thread, &at, worker_main, w) != 0) {
      pthread_attr_destroy(&at);
      free(w);
      pthread_mutex_unlock(&pool_lock);
      return false;
    }
    pthread_attr_destroy(&at);
    w->next_all = all_workers;
    all_workers = w;
  }
  struct sim_cta *c = &w->cta;
  c->d = d;
  c->id = id;
  c->size = d->cta_size;
  c->cu = cu;
  c->pos = pos;
  memcpy(c->simd_waves, simd_waves, sizeof c->simd_waves);
  atomic_fetch_add(&d->running, 1);
  w->has_job = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&pool_lock);
  return true;
}

/* ---------------------------------------------------------------- placement on CUs */

static uint32_t round_up(uint32_t v, uint32_t g) { return (v + g - 1) / g * g; }

/* Whether a CTA of d's kernel fits on CU u; if so fill the waves it would put on each SIMD.
 * Waves go one at a time to the least-loaded SIMD with room, as the CU's wave dispatcher does. */
static bool cta_fits(const struct sim_agent *a, const struct sim_dispatch *d, const struct sim_cu *u, uint32_t out[4]) {
  const hm_cu_limits *L = &a->limits;
  const hm_kernel_resources *r = &d->k->res;
  uint32_t w = (d->cta_size + 63) / 64;
  uint32_t lds = d->group_bytes ? round_up(d->group_bytes, L->lds_granule) : 0;
  if (u->lds + lds > L->lds_bytes) return false;
  if (w > 1 && u->barriers + 1 > L->max_barriers) return false;
  uint32_t v = round_up(r->vgprs ? r->vgprs : 1, L->vgpr_granule), s = round_up(r->sgprs ? r->sgprs : 1, L->sgpr_granule);
  uint32_t waves[4], vg[4], sg[4];
  memcpy(waves, u->waves, sizeof waves);
  memcpy(vg, u->vgprs, sizeof vg);
  memcpy(sg, u->sgprs, sizeof sg);
  memset(out, 0, 4 * sizeof *out);
  for (uint32_t i = 0; i < w; i++) {
    int best = -1;
    for (int k = 0; k < 4; k++)
      if (waves[k] < L->max_waves_per_simd && vg[k] + v <= L->vgprs_per_lane && sg[k] + s <= L->sgprs_per_simd &&
          (best < 0 || waves[k] < waves[best]))
        best = k;
    if (best < 0) return false;
    waves[best]++, vg[best] += v, sg[best] += s, out[best]++;
  }
  return true;
}

static void cu_take(struct sim_agent *a, struct sim_dispatch *d, unsigned cu, const uint32_t simd[4], int sign) {
  const hm_cu_limits *L = &a->limits;
  const hm_kernel_resources *r = &d->k->res;
  struct sim_cu *u = &a->cu[cu];
  uint32_t v = round_up(r->vgprs ? r->vgprs : 1, L->vgpr_granule), s = round_up(r->sgprs ? r->sgprs : 1, L->sgpr_granule);
  for (int k = 0; k < 4; k++) {
    u->waves[k] += (uint32_t)sign * simd[k];
    u->vgprs[k] += (uint32_t)sign * simd[k] * v;
    u->sgprs[k] += (uint32_t)sign * simd[k] * s;
  }
  u->lds += (uint32_t)sign * (d->group_bytes ? round_up(d->group_bytes, L->lds_granule) : 0);
  if (d->cta_size > 64) u->barriers += (uint32_t)sign;
}

static void pending_remove(struct sim_agent *a, struct sim_dispatch *d) {
  struct sim_dispatch **pp = &a->pending_head, *prev = NULL;
  while (*pp && *pp != d) prev = *pp, pp = &(*pp)->next_pending;
  if (!*pp) return;
  *pp = d->next_pending;
  if (a->pending_tail == d) a->pending_tail = prev;
  d->next_pending = NULL;
}

/* Place waiting CTAs in order while they fit. Like the hardware's dispatcher, a CTA that does not
 * fit blocks the ones behind it. Caller holds a->lock. */
static void place_pending(struct sim_agent *a) {
  while (a->pending_head) {
    struct sim_dispatch *d = a->pending_head;
    if (atomic_load(&d->abort)) {
      pending_remove(a, d);
      continue;
    }
    if (d->next == d->hold_from && d->hold_from < d->nctas) {
      /* only held CTAs are left: late ones start once every CTA before them has ended (at once
       * if there is none); until then the dispatch leaves the list, so it blocks no other */
      if (d->hold_late && atomic_load(&d->finished) == d->hold_from) {
        d->hold_from = d->nctas;
      } else {
        pending_remove(a, d);
        d->hold_parked = true;
        continue;
      }
    }
    uint32_t simd[4];
    unsigned cu = a->ncus;
    for (unsigned i = 0; i < a->ncus; i++) {
      unsigned c = (a->next_cu + i) % a->ncus;
      if (cta_fits(a, d, &a->cu[c], simd)) {
        cu = c;
        break;
      }
    }
    if (cu == a->ncus) break;
    uint32_t id = d->order[d->next];
    uint32_t pos = d->next;
    cu_take(a, d, cu, simd, +1);
    a->next_cu = (cu + 1) % a->ncus;
    d->started[id] = 1;
    d->next++;
    if (d->next == d->nctas) pending_remove(a, d);
    atomic_fetch_add(&d->progress, 1);
    if (!start_cta(d, id, cu, simd, pos)) {
      /* never ran: undo its placement and count it finished; the caller aborts the dispatch
       * (which accounts for the CTAs not placed yet) once the agent's lock is released */
      cu_take(a, d, cu, simd, -1);
      d->started[id] = 0;
      atomic_fetch_add(&d->finished, 1);
      if (!a->start_failed) a->start_failed = d;
      break;
    }
  }
}

/* ---------------------------------------------------------------- dispatch lifetime */

static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;

static void active_add(struct sim_dispatch *d) {
  pthread_mutex_lock(&active_lock);
  d->next_active = sim.active;
  sim.active = d;
  pthread_mutex_unlock(&active_lock);
}

static void dispatch_free(struct sim_dispatch *d) {
  free(d->order);
  free(d->started);
  free(d);
}

/* Report a dispatch's end: the queue error, or the packet's release and completion signal. */
static void dispatch_report(struct sim_dispatch *d) {
  struct sim_queue *q = d->q;
  if (atomic_load(&d->failed)) {
    sim_queue_fail(q, HSA_STATUS_ERROR_EXCEPTION, "%s", d->error);
  } else if (d->pkt.completion_signal.handle) {
    /* the CTAs flushed their stores when they ended: this is the packet's release */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    struct sim_signal *s = sim_signal_of(d->pkt.completion_signal);
    if (s) sim_signal_complete(s);
  }
  pthread_mutex_lock(&q->lock);
  q->inflight--;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->lock);
}

/* All CTAs done (or never to start). `ended` is decided under active_lock, so exactly one of
 * this and the watchdog's abandonment reports the dispatch. */
static void dispatch_end(struct sim_dispatch *d) {
  pthread_mutex_lock(&active_lock);
  bool already = atomic_exchange(&d->ended, true);
  if (!already) {
    for (struct sim_dispatch **pp = &sim.active; *pp; pp = &(*pp)->next_active)
      if (*pp == d) {
        *pp = d->next_active;
        break;
      }
    pthread_cond_broadcast(&active_cv);
  }
  pthread_mutex_unlock(&active_lock);
  if (already) return;
  dispatch_report(d);
  dispatch_free(d);
}

/* Abort the dispatch place_pending could not start a CTA of (caller does not hold a->lock). */
static void abort_failed_start(struct sim_agent *a) {
  pthread_mutex_lock(&a->lock);
  struct sim_dispatch *d = a->start_failed;
  a->start_failed = NULL;
  pthread_mutex_unlock(&a->lock);
  if (d) sim_dispatch_abort(d, "the agent could not start a thread for a CTA (out of memory or threads)");
}

static void cta_finished(struct sim_cta *c) {
  struct sim_dispatch *d = c->d;
  struct sim_agent *a = d->k->agent;
  pthread_mutex_lock(&a->lock);
  cu_take(a, d, c->cu, c->simd_waves, -1);
  atomic_fetch_sub(&d->running, 1);
  uint32_t done = atomic_fetch_add(&d->finished, 1) + 1;
  atomic_fetch_add(&d->progress, 1);
  bool last = done == d->nctas;
  bool gone = atomic_load(&d->ended); /* abandoned earlier by the watchdog */
  if (d->hold_parked && d->hold_late && done == d->hold_from && !atomic_load(&d->abort)) {
    /* every CTA before the held ones has ended: back in line for the late ones */
    d->hold_parked = false;
    if (a->pending_tail) a->pending_tail->next_pending = d;
    else a->pending_head = d;
    a->pending_tail = d;
  }
  place_pending(a);
  pthread_mutex_unlock(&a->lock);
  abort_failed_start(a);
  if (last && !gone) dispatch_end(d);
}

/* A number that changes whenever a dispatch of the GPU agents in the mask `gpus` makes progress,
 * starts or ends (the lagging rank's quiet test, cta.c). */
uint64_t sim_gpus_progress(uint32_t gpus) {
  uint64_t v = 0;
  pthread_mutex_lock(&active_lock);
  for (struct sim_dispatch *d = sim.active; d; d = d->next_active)
    if (gpus >> d->k->agent->gpu_index & 1) v += atomic_load(&d->progress) + (d->seq << 32);
  pthread_mutex_unlock(&active_lock);
  return v;
}

/* The order CTAs of the seq-th dispatch since hsa_init start in under chaos seed `seed`: a
 * permutation that depends on nothing else, so a failing seed fails again. Exported so tests can
 * tell which CTA a seed starts first. */
SIM_API void hm_sim_chaos_start_order(uint64_t seed, uint64_t seq, uint32_t n, uint32_t *order) {
  for (uint32_t i = 0; i < n; i++) order[i] = i;
  uint64_t st = seed ^ (seq * 0x9e3779b97f4a7c15ull);
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = (uint32_t)(sim_rng(&st) % i);
    uint32_t t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
}

static void start_order(struct sim_dispatch *d) {
  if (sim.cfg.chaos) hm_sim_chaos_start_order(sim.cfg.chaos_seed, d->seq, d->nctas, d->order);
  else
    for (uint32_t i = 0; i < d->nctas; i++) d->order[i] = i;
  /* the laggard (cta.c), in one dispatch of HSAMONO_SIM_LAGGARD (4): the CTA started last in the
   * chaos order (random, reproducible); none without chaos. One in four keeps its stalls' cost to
   * tests that run thousands of dispatches reasonable; a test after missing waits asks for 1. */
  uint64_t pick = sim.cfg.chaos_seed ^ d->seq * 0xd1b54a32d192ed03ull;
  d->laggard = sim.cfg.chaos && d->nctas > 1 && sim_rng(&pick) % sim.cfg.laggard_every == 0 ? d->order[d->nctas - 1]
                                                                                            : UINT32_MAX;
}

static bool held(const struct sim_config *cfg, uint32_t id) {
  for (unsigned i = 0; i < cfg->nhold; i++)
    if (id >= cfg->hold[i].lo && id <= cfg->hold[i].hi) return true;
  return false;
}

/* HSAMONO_SIM_HOLD_CTAS takes the first dispatch (of its kernel, if it names one) whose grid has
 * every CTA it lists: those move to the end of the start order, behind hold_from. The others
 * keep their order (and chaos positions), so only the held ones change. Caller holds sim.lock. */
static void apply_hold(struct sim_dispatch *d) {
  struct sim_config *cfg = &sim.cfg;
  d->hold_from = d->nctas;
  if (!cfg->nhold || cfg->hold_used || cfg->hold_max >= d->nctas) return;
  if (cfg->hold_kernel[0] && strcmp(cfg->hold_kernel, d->k->name) != 0) return;
  cfg->hold_used = true;
  uint32_t n = 0;
  for (uint32_t i = 0; i < d->nctas; i++)
    if (!held(cfg, d->order[i])) d->order[n++] = d->order[i];
  d->hold_from = n;
  for (uint32_t id = 0; id < d->nctas; id++)
    if (held(cfg, id)) d->order[n++] = id;
  d->hold_late = cfg->hold_late;
}

void sim_dispatch_start(struct sim_queue *q, const hsa_kernel_dispatch_packet_t *pkt, uint64_t id, struct sim_kernel *k) {
  struct sim_dispatch *d = calloc(1, sizeof *d);
  uint32_t n = (pkt->grid_size_x + pkt->workgroup_size_x - 1) / pkt->workgroup_size_x;
  if (d) {
    d->order = malloc(n * sizeof *d->order);
    d->started = calloc(n, 1);
  }
  if (!d || !d->order || !d->started) {
    if (d) dispatch_free(d);
    sim_queue_fail(q, HSA_STATUS_ERROR_OUT_OF_RESOURCES, "out of memory starting kernel %s", k->name);
    pthread_mutex_lock(&q->lock);
    q->inflight--;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->lock);
    return;
  }
  d->q = q;
  d->k = k;
  d->pkt = *pkt;
  d->packet_id = id;
  d->nctas = n;
  d->cta_size = pkt->workgroup_size_x;
  d->group_bytes = pkt->group_segment_size;
  pthread_mutex_lock(&sim.lock);
  d->seq = ++sim.dispatch_seq;
  sim_trace_dispatch(d);
  start_order(d);
  apply_hold(d);
  pthread_mutex_unlock(&sim.lock);
  hm_kernel_resources r = k->res;
  r.cta_size = d->cta_size;
  r.lds_bytes = d->group_bytes;
  hm_residency res;
  d->resident_limit = hm_residency_compute(&k->agent->limits, &r, &res) == HM_OK ? res.ctas_per_cu * k->agent->ncus : 0;
  d->last_change_ns = sim_now_ns();
  d->cpu_at_change_ns = sim_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  sim_watchdog_ensure();
  active_add(d);
  struct sim_agent *a = k->agent;
  pthread_mutex_lock(&a->lock);
  if (a->pending_tail) a->pending_tail->next_pending = d;
  else a->pending_head = d;
  a->pending_tail = d;
  place_pending(a);
  pthread_mutex_unlock(&a->lock);
  abort_failed_start(a);
}

/* ---------------------------------------------------------------- abort and the watchdog */

/* Describe CTAs never started as ranges ("256-299, 301"). */
static void never_started(const struct sim_dispatch *d, char *out, size_t cap, uint32_t *count) {
  size_t n = 0;
  *count = 0;
  out[0] = 0;
  for (uint32_t i = 0; i < d->nctas; i++) {
    if (d->started[i]) continue;
    uint32_t j = i;
    while (j + 1 < d->nctas && !d->started[j + 1]) j++;
    *count += j - i + 1;
    if (n + 32 < cap) n += (size_t)snprintf(out + n, cap - n, "%s%u%s", n ? ", " : "", i, "");
    if (j > i && n + 32 < cap) n += (size_t)snprintf(out + n, cap - n, "-%u", j);
    i = j;
  }
  if (n + 32 >= cap) snprintf(out + cap - 8, 8, ", ...");
}

/* Stop a dispatch: its CTAs not yet started never will; running ones stop at their next call
 * into the agent. The last one to stop ends the dispatch with the error. */
void sim_dispatch_abort(struct sim_dispatch *d, const char *why) {
  struct sim_agent *a = d->k->agent;
  pthread_mutex_lock(&a->lock);
  if (atomic_exchange(&d->abort, true)) {
    pthread_mutex_unlock(&a->lock);
    return;
  }
  pending_remove(a, d);
  d->abort_ns = sim_now_ns();
  char ns[512];
  uint32_t count;
  never_started(d, ns, sizeof ns, &count);
  /* the dispatch is named by its kernel and its packet (queue id, packet id), so a caller with
   * several in flight knows which one failed */
  if (!atomic_exchange(&d->failed, true))
    snprintf(d->error, sizeof d->error,
             "kernel %s (packet %llu of queue %llu; grid %u CTAs of %u work-items on a %s with %u CUs): %s; resident "
             "limit %u CTAs; %u CTA%s never started%s%s%s; %u still running",
             d->k->name, (unsigned long long)d->packet_id, (unsigned long long)d->q->amd->hsa_queue.id, d->nctas,
             d->cta_size, a->name, a->ncus, why, d->resident_limit, count, count == 1 ? "" : "s", count ? ": " : "", ns,
             d->hold_from < d->nctas ? " (held back by HSAMONO_SIM_HOLD_CTAS)" : "", atomic_load(&d->running));
  uint32_t skipped = d->nctas - d->next;
  d->next = d->nctas;
  uint32_t done = atomic_fetch_add(&d->finished, skipped) + skipped;
  pthread_mutex_unlock(&a->lock);
  if (skipped && done == d->nctas) dispatch_end(d);
}

uint32_t sim_queue_unplaced_ctas(struct sim_queue *q) {
  uint32_t n = 0;
  /* lock order active_lock, then an agent's lock (nothing takes them the other way round) */
  pthread_mutex_lock(&active_lock);
  for (struct sim_dispatch *d = sim.active; d; d = d->next_active) {
    if (d->q != q || atomic_load(&d->abort)) continue;
    struct sim_agent *a = d->k->agent;
    pthread_mutex_lock(&a->lock);
    n += d->nctas - d->next;
    pthread_mutex_unlock(&a->lock);
  }
  pthread_mutex_unlock(&active_lock);
  return n;
}

void sim_dispatches_abort_queue(struct sim_queue *q) {
  pthread_mutex_lock(&active_lock);
  struct sim_dispatch *list[256];
  unsigned n = 0;
  for (struct sim_dispatch *d = sim.active; d && n < 256; d = d->next_active)
    if (d->q == q) list[n++] = d;
  pthread_mutex_unlock(&active_lock);
  for (unsigned i = 0; i < n; i++) sim_dispatch_abort(list[i], "its queue was destroyed");
}

/* Rounds of polling with no progress that, past the watchdog's time, make a hang (a hung poll
 * runs thousands of rounds a second; 64 rounds take at most 64 naps of the cap). */
#define WATCHDOG_ROUNDS 64u

/* Whether dispatch d, with no progress for `idle_ns` of wall time, is hung rather than starved.
 * Wall time alone is not enough: on a loaded machine (CI's sanitizer pass runs a suite that starts
 * 1,024 CTA threads beside this one, and the kernel shares the cores a thread at a time) a
 * dispatch's threads may not run for seconds, and a 4-CTA launch that polls for microseconds was
 * reported hung after 3 s. So a dispatch with CTAs running must also have had its chance to move:
 * every one of them is idle (only polling work-items, a whole round without progress) and they
 * polled WATCHDOG_ROUNDS rounds since the last progress (a hang in the dialect's waits; a CTA that
 * has work but no core is not idle), or the process had a watchdog's time of CPU (a CTA spinning
 * outside the dialect's waits, never idle). With none running, wall time alone, as before. */
static bool watchdog_fires(struct sim_dispatch *d, uint64_t idle_ns, uint64_t rounds, uint64_t cpu_ns) {
  double bound = sim.cfg.watchdog_s * 1e9;
  if ((double)idle_ns <= bound) return false;
  uint32_t running = atomic_load(&d->running);
  /* none running: it waits for the agent to start a CTA (one held back, or with no room), which
   * no thread of its own can starve */
  if (running == 0) return true;
  bool all_idle = atomic_load(&d->waiting) == running;
  return (all_idle && rounds >= WATCHDOG_ROUNDS) || (double)cpu_ns > bound;
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&active_lock);
  while (!atomic_load(&sim.stopping)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&active_cv, &active_lock, &ts);
    uint64_t now = sim_now_ns(), cpu = sim_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    struct sim_dispatch *stuck[64], *gone[64];
    unsigned n = 0, ng = 0;
    for (struct sim_dispatch **pp = &sim.active; *pp;) {
      struct sim_dispatch *d = *pp;
      /* aborted, yet CTAs still run 2 s later: they spin outside the dialect and will never
       * look at the abort flag; report the dispatch without them so nothing waits forever.
       * It stays allocated: their threads still point at it. */
      if (atomic_load(&d->abort) && d->abort_ns && now - d->abort_ns > 2000000000ull && ng < 64 &&
          !atomic_exchange(&d->ended, true)) {
        *pp = d->next_active;
        gone[ng++] = d;
        continue;
      }
      pp = &d->next_active;
      uint64_t p = atomic_load(&d->progress), rounds = atomic_load_explicit(&d->idle_rounds, memory_order_relaxed);
      /* a kernel waiting on a peer (a round in the last second) is bounded by its own deadline,
       * which names the peer: not a hang of its own */
      uint64_t peer = atomic_load_explicit(&d->peer_poll_ns, memory_order_relaxed);
      if (p != d->last_progress || (peer && now < peer + 1000000000ull)) {
        d->last_progress = p;
        d->last_change_ns = now;
        d->rounds_at_change = rounds;
        d->cpu_at_change_ns = cpu;
      } else if (!atomic_load(&d->abort) && n < 64 &&
                 watchdog_fires(d, now - d->last_change_ns, rounds - d->rounds_at_change, cpu - d->cpu_at_change_ns)) {
        stuck[n++] = d;
      }
    }
    pthread_mutex_unlock(&active_lock);
    for (unsigned i = 0; i < ng; i++) {
      size_t l = strlen(gone[i]->error);
      snprintf(gone[i]->error + l, sizeof gone[i]->error - l,
               "; %u CTA%s did not stop (spinning outside the dialect's poll helpers?) and were abandoned",
               atomic_load(&gone[i]->running), atomic_load(&gone[i]->running) == 1 ? "" : "s");
      dispatch_report(gone[i]);
    }
    for (unsigned i = 0; i < n; i++) {
      char why[96];
      snprintf(why, sizeof why, "no progress for %.1f s (watchdog, HSAMONO_SIM_WATCHDOG_S)", sim.cfg.watchdog_s);
      sim_dispatch_abort(stuck[i], why);
    }
    pthread_mutex_lock(&active_lock);
  }
  pthread_mutex_unlock(&active_lock);
  return NULL;
}

void sim_watchdog_ensure(void) {
  pthread_mutex_lock(&sim.lock);
  if (!sim.watchdog_started && pthread_create(&sim.watchdog, NULL, watchdog_main, NULL) == 0)
    sim.watchdog_started = true;
  pthread_mutex_unlock(&sim.lock);
}

void sim_exec_shutdown(void) {
  /* stop everything still running, then the threads */
  pthread_mutex_lock(&active_lock);
  struct sim_dispatch *list[256];
  unsigned n = 0;
  for (struct sim_dispatch *d = sim.active; d && n < 256; d = d->next_active) list[n++] = d;
  pthread_mutex_unlock(&active_lock);
  for (unsigned i = 0; i < n; i++) sim_dispatch_abort(list[i], "the agent is shutting down");
  /* wait (bounded) for running CTAs to notice */
  uint64_t until = sim_now_ns() + 2000000000ull;
  pthread_mutex_lock(&active_lock);
  while (sim.active && sim_now_ns() < until) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&active_cv, &active_lock, &ts);
  }
  pthread_cond_broadcast(&active_cv);
  pthread_mutex_unlock(&active_lock);
  if (sim.watchdog_started) {
    pthread_join(sim.watchdog, NULL);
    sim.watchdog_started = false;
  }
  sim_copiers_stop();
  /* Workers still returning from their last CTA become idle within moments: wait for them
   * (bounded), so they are joined; busy ones after that (a CTA spinning outside the dialect)
   * are left behind, harmlessly, since the library stays mapped (-z nodelete). */
  until = sim_now_ns() + 2000000000ull;
  for (;;) {
    pthread_mutex_lock(&pool_lock);
    unsigned busy = 0;
    for (struct sim_worker *w = all_workers; w; w = w->next_all) busy += w->has_job;
    pthread_mutex_unlock(&pool_lock);
    if (!busy || sim_now_ns() > until) break;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&pool_lock);
  struct sim_worker *idle = idle_workers;
  idle_workers = NULL;
  for (struct sim_worker *w = idle; w; w = w->next_idle) {
    w->quit = true;
    pthread_cond_signal(&w->cv);
  }
  pthread_mutex_unlock(&pool_lock);
  for (struct sim_worker *w = idle; w; w = w->next_idle) pthread_join(w->thread, NULL);
  pthread_mutex_lock(&pool_lock);
  for (struct sim_worker **pp = &all_workers; *pp;) {
    struct sim_worker *w = *pp;
    if (w->quit) {
      *pp = w->next_all;
      struct sim_cta *c = &w->cta;
      sim_mem_free(&c->mem);
      sim_trace_cta_free(c);
      free(c->lanes);
      free(c->lds);
      free(c->xchg);
      free(c->wave_live);
      if (w->stacks) munmap(w->stacks, (sim.cfg.stack_bytes + SIM_STACK_ZONE) * w->nstacks);
      free(w);
    } else {
      pp = &w->next_all;
    }
  }
  pthread_mutex_unlock(&pool_lock);
}
