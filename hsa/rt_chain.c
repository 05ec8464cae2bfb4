/* hsa/rt_chain.c: recorded packet chains: packets (kernel arguments at fixed addresses) written
 * once and replayed by republishing their headers, the HSA counterpart of a graph replay. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

struct hm_chain {
  hm_queue *q;
  hsa_kernel_dispatch_packet_t *pkts; /* whole packets as recorded; bytes 0..3 unused */
  uint32_t *hs;                       /* header | setup << 16 of each */
  void **args;                        /* each dispatch's kernel arguments, held (NULL: a barrier) */
  unsigned n, cap;
  hm_signal done;
  uint64_t id;
  uint32_t version;                   /* bumped whenever a recorded packet changes */
  unsigned last_full;
  struct watcher {
    const hm_chain_hooks *hooks;
    const void *key;
    void *ctx;
  } *watch;                           /* hm_chain_watch: who must hear of each replay */
  unsigned nwatch;
  const void **held;                  /* hm_chain_hold: the recorded steps' tensors, held */
  unsigned nheld, capheld;
};

static _Atomic uint64_t next_chain_id = 1;

/* What a ring slot holds when it still carries packet i of this version of chain c. */
static uint64_t tag_of(const hm_chain *c, unsigned i) { return c->id << 32 | (uint64_t)(c->version & 0xffff) << 16 | i; }

hm_status hm_chain_create(hm_queue *q, hm_chain **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_create: out is NULL");
  *out = NULL;
  if (!q) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_create: NULL queue");
  hm_chain *c = calloc(1, sizeof *c);
  if (!c) return hm_fail(HM_ERR_NO_MEMORY, "out of memory");
  hm_status s = hm_signal_create(q->rt, 0, &c->done);
  if (s) {
    free(c);
    return s;
  }
  c->q = q;
  c->id = atomic_fetch_add(&next_chain_id, 1);
  /* the chain writes the queue's ring and the runtime's signals until destroyed */
  pthread_mutex_lock(&q->rt->lock);
  q->chains++;
  pthread_mutex_unlock(&q->rt->lock);
  hm_runtime_retain(q->rt);
  *out = c;
  return HM_OK;
}

static hm_status grow(hm_chain *c) {
  if (c->n == c->q->size) return hm_fail(HM_ERR_INVALID_ARG, "chain: %u packets fill the queue", c->n);
  if (c->n < c->cap) return HM_OK;
  unsigned cap = c->cap ? 2 * c->cap : 8;
  hsa_kernel_dispatch_packet_t *p = realloc(c->pkts, cap * sizeof *p);
  if (p) c->pkts = p;
  uint32_t *h = realloc(c->hs, cap * sizeof *h);
  if (h) c->hs = h;
  void **a = realloc(c->args, cap * sizeof *a);
  if (a) c->args = a;
  if (!p || !h || !a) return hm_fail(HM_ERR_NO_MEMORY, "out of memory");
  c->cap = cap;
  return HM_OK;
}

/* The chain's done signal rides on its last packet: moving it is a change of two packets. */
static void move_done(hm_chain *c) {
  for (unsigned i = 0; i < c->n; i++)
    c->pkts[i].completion_signal.handle = i + 1 == c->n ? c->done.handle : 0;
  c->version++;
}

hm_status hm_chain_add_dispatch(hm_chain *c, const hm_dispatch *d) {
  if (!c || !d) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_add_dispatch: NULL argument");
  if (d->completion.handle)
    return hm_fail(HM_ERR_INVALID_ARG, "chain packets take no completion signal (hm_chain_wait waits for the chain)");
  hm_status s;
  hm_dispatch one = *d;
  /* validated as a dispatch would be: write it to a scratch packet first */
  if ((s = grow(c))) return s;
  const hm_kernel *k = d->kernel;
  if (!k || !k->prog || k->prog->agent != c->q->agent)
    return hm_fail(HM_ERR_INVALID_ARG, "chain: no kernel, or a kernel loaded for another agent");
  if (k->refused[0]) return hm_fail(HM_ERR_UNSUPPORTED, "%s", k->refused);
  if (!d->ctas || (!d->cta_size && !k->info.cta_size) || (!d->kernarg && k->info.kernarg_size))
    return hm_fail(HM_ERR_INVALID_ARG, "chain: dispatch of %s lacks its grid, CTA size or arguments", k->info.name);
  /* a replay reads the arguments again: their owner may not free them while the chain lives */
  if (d->kernarg && (s = hm_mem_hold(c->q->rt, d->kernarg)))
    return hm_fail_prefix(s, "chain: the kernel arguments of %s", k->info.name);
  c->args[c->n] = d->kernarg;
  c->hs[c->n] = hm_aql_dispatch_body(&c->pkts[c->n], &one, k);
  c->n++;
  move_done(c);
  return HM_OK;
}

hm_status hm_chain_add_barrier(hm_chain *c, const hm_barrier_pkt *b) {
  if (!c || !b) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_add_barrier: NULL argument");
  if (b->completion.handle)
    return hm_fail(HM_ERR_INVALID_ARG, "chain packets take no completion signal (hm_chain_wait waits for the chain)");
  hm_status s = grow(c);
  if (s) return s;
  c->args[c->n] = NULL;
  c->hs[c->n] = hm_aql_barrier_body(&c->pkts[c->n], b);
  c->n++;
  move_done(c);
  return HM_OK;
}

void *hm_chain_watcher(const hm_chain *c, const hm_chain_hooks *hooks, const void *key) {
  for (unsigned i = 0; c && i < c->nwatch; i++)
    if (c->watch[i].hooks == hooks && c->watch[i].key == key) return c->watch[i].ctx;
  return NULL;
}

hm_status hm_chain_watch(hm_chain *c, const hm_chain_hooks *hooks, const void *key, void *ctx) {
  if (!c || !hooks) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_watch: NULL argument");
  if (hm_chain_watcher(c, hooks, key)) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_watch: watched already");
  struct watcher *w = realloc(c->watch, (c->nwatch + 1) * sizeof *w);
  if (!w) return hm_fail(HM_ERR_NO_MEMORY, "hm_chain_watch: out of memory");
  c->watch = w;
  c->watch[c->nwatch++] = (struct watcher){hooks, key, ctx};
  return HM_OK;
}

/* Every watcher's answer to the replay's or wait's status s, in order: the first non-OK stays. */
static hm_status settle(hm_chain *c, hm_status s) {
  for (unsigned i = 0; i < c->nwatch; i++)
    if (c->watch[i].hooks->done) {
      hm_status w = c->watch[i].hooks->done(c->watch[i].ctx, s);
      if (!s) s = w;
    }
  return s;
}

/* This chain's queue's fault, if it has one (hm_queue_status reports it). */
static hm_status own_fault(hm_queue *q) { return atomic_load(&q->fault_status) ? hm_queue_status(q) : HM_OK; }

hm_status hm_chain_replay(hm_chain *c) {
  if (!c) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_replay: NULL chain");
  if (c->n == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_replay: empty chain");
  hm_queue *q = c->q;
  /* only this queue's fault: with ranks as threads of one runtime, another rank's queue fault
   * is that rank's to report (and its host stops the group) */
  hm_status s = own_fault(q);
  if (s) return settle(c, s);
  /* a watcher's refusal replays nothing, and the others hear it as the replay's answer (a group's
   * heap stops the group: its peers' replays would wait for this rank's launches) */
  for (unsigned i = 0; i < c->nwatch; i++)
    if (c->watch[i].hooks->replay && (s = c->watch[i].hooks->replay(c->watch[i].ctx))) return settle(c, s);
  hm_signal_store(q->rt, c->done, 1);
  uint64_t first;
  if ((s = hm_queue_reserve(q, c->n, &first))) return settle(c, s);
  unsigned full = 0;
  for (unsigned i = 0; i < c->n; i++) {
    uint32_t slot = (uint32_t)((first + i) & q->mask);
    uint64_t tag = tag_of(c, i);
    if (q->slot_owner[slot] != tag) {
      /* the slot holds something else: write the whole body (past the header word) */
      memcpy((char *)&q->ring[slot] + 4, (const char *)&c->pkts[i] + 4, sizeof c->pkts[i] - 4);
      q->slot_owner[slot] = tag;
      full++;
    }
  }
  for (unsigned i = 0; i < c->n; i++) __atomic_store_n((uint32_t *)&q->ring[(first + i) & q->mask], c->hs[i], __ATOMIC_RELEASE);
  hm_queue_ring(q, first + c->n - 1);
  c->last_full = full;
  return HM_OK;
}

hm_status hm_chain_wait(hm_chain *c, uint64_t timeout_ns) {
  if (!c) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_wait: NULL chain");
  /* slices of 5 .. 50 ms: a fault of this queue ends the wait, another queue's does not (its
   * user reports it), and the watchers look at the group between slices */
  uint64_t start = hm_now_ns(), slice = 5000000ull;
  for (;;) {
    uint64_t spent = hm_now_ns() - start, left = spent < timeout_ns ? timeout_ns - spent : 0;
    hm_status s = hm_signal_wait(c->q->rt, c->done, HM_WAIT_LT, 1, left < slice ? left : slice, false, NULL);
    if (s == HM_OK) return settle(c, HM_OK);
    if (s != HM_ERR_TIMEOUT && s != HM_ERR_QUEUE_FAULT) return settle(c, s);
    if ((s = own_fault(c->q))) return settle(c, s);
    if (!left) return settle(c, hm_fail_prefix(HM_ERR_TIMEOUT, "hm_chain_wait"));
    for (unsigned i = 0; i < c->nwatch; i++)
      if (c->watch[i].hooks->poll && (s = c->watch[i].hooks->poll(c->watch[i].ctx))) return settle(c, s);
    if (slice < 50000000ull) slice *= 2;
  }
}

unsigned hm_chain_last_full_writes(const hm_chain *c) { return c ? c->last_full : 0; }

hm_status hm_chain_hold(hm_chain *c, const hm_mem_need *t, unsigned n) {
  if (!c || (n && !t)) return hm_fail(HM_ERR_INVALID_ARG, "hm_chain_hold: NULL argument");
  unsigned want = c->nheld + n;
  if (want > c->capheld) {
    unsigned cap = c->capheld ? 2 * c->capheld : 32;
    while (cap < want) cap *= 2;
    const void **h = realloc(c->held, cap * sizeof *h);
    if (!h) return hm_fail(HM_ERR_NO_MEMORY, "hm_chain_hold: out of memory");
    c->held = h, c->capheld = cap;
  }
  hm_runtime *rt = c->q->rt;
  unsigned from = c->nheld;
  for (unsigned i = 0; i < n; i++) {
    if (!t[i].p) continue; /* an optional tensor the step does not take */
    hm_status s = hm_mem_hold(rt, t[i].p);
    if (s) {
      /* nothing of this call stays held */
      while (c->nheld > from) hm_mem_unhold(rt, c->held[--c->nheld]);
      return hm_fail_prefix(s, "chain: %s", t[i].name);
    }
    c->held[c->nheld++] = t[i].p;
  }
  return HM_OK;
}

void hm_chain_destroy(hm_chain *c) {
  if (!c) return;
  hm_runtime *rt = c->q->rt;
  for (uint32_t i = 0; i < c->q->size; i++)
    if (c->q->slot_owner[i] >> 32 == c->id) c->q->slot_owner[i] = 0;
  for (unsigned i = 0; i < c->nwatch; i++)
    if (c->watch[i].hooks->release) c->watch[i].hooks->release(c->watch[i].ctx);
  free(c->watch);
  for (unsigned i = 0; i < c->n; i++) hm_mem_unhold(rt, c->args[i]);
  for (unsigned i = 0; i < c->nheld; i++) hm_mem_unhold(rt, c->held[i]);
  free(c->held);
  hm_signal_destroy(rt, c->done);
  pthread_mutex_lock(&rt->lock);
  c->q->chains--;
  pthread_mutex_unlock(&rt->lock);
  hm_runtime_release(rt);
  free(c->pkts);
  free(c->hs);
  free(c->args);
  free(c);
}
