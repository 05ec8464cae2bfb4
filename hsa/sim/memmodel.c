/* hsa/sim/memmodel.c: memory through the dialect, and the weak-visibility model (DESIGN §4) that
 * makes a hand-off missing its fence, wait or flag fail here as it would on an MI300X / MI355X.
 *
 * With HSAMONO_SIM_WEAK=1 (docs/memory-model.md sets this against AMDGPUUsage's tables):
 *  - each WAVE keeps its own pending stores (a GPU's vector memory counters are per wave: a
 *    wave's s_waitcnt vmcnt(0) or release waits for that wave's stores only), per 4-byte word,
 *    or per aligned 8-byte pair for an 8-byte store (single-copy atomic on the GPU: the
 *    value+tag hand-offs rely on it, so its two words land together and an 8-byte load reads
 *    both at once). A plain or non-temporal store (and a device-scope store to another agent's
 *    memory) is "release" class: other CTAs see it only after its wave executes a release of
 *    agent scope, or system scope when the memory is not this agent's. A device-scope store to
 *    this agent's memory, any system-scope store and a relaxed atomic store are "complete"
 *    class: it lands when its wave waits for its stores (s_waitcnt vmcnt(0)), at the wave's own
 *    release of agent scope or wider, or on its own at some later scheduling point, the
 *    wave's newest or its oldest at random, so two such stores with no wait between them may
 *    land in either order (as they may on the GPU). Another wave's release publishes none of them: a flag raised by one wave over
 *    data other waves stored needs every wave's drain before the barrier (spec/mono.md §3.3);
 *  - the CTA's other waves see a wave's pending stores (through the CU's L1) only after a CTA
 *    barrier or the wave's workgroup-scope release;
 *  - a small direct-mapped cache of 128-byte lines (the CU's L1) that plain and non-temporal
 *    loads read from: a line is filled from memory on a miss and stays (possibly stale) until an
 *    acquire of agent scope or wider, or until evicted;
 * while device- and system-scope loads and all atomics read memory itself. Under chaos, the
 * scheduling points land fewer pending stores, a releasing wave may stall before or after its
 * release, one complete-class data store in four is late (it lands at its wave's next wait or
 * release, or once every other CTA is done or waiting: sim_mem_drain_idle), and one CTA a dispatch (the
 * laggard) stalls for milliseconds before it publishes
 * (lagging producers: consumers run ahead). With HSAMONO_SIM_LAG_RANK one GPU agent reads its
 * peers' all-reduce pushes only once they have run ahead (cta.c). Every access through the
 * dialect is also checked against the agent's allocations and access rights.
 * Without HSAMONO_SIM_WEAK the accesses go straight to memory (x86's ordering, which hides bugs). */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

enum { PEND_RELEASE = 1, PEND_COMPLETE = 2 };

void sim_mem_init(struct sim_memview *m) {
  memset(m, 0, sizeof *m);
  m->cache = calloc(SIM_CACHE_LINES, sizeof *m->cache);
  m->gen = 1;
}

void sim_mem_free(struct sim_memview *m) {
  for (uint32_t w = 0; w < SIM_MAX_WAVES; w++) free(m->wave[w].pend);
  free(m->hash);
  free(m->cache);
  memset(m, 0, sizeof *m);
}

static void forget_pending(struct sim_memview *m) {
  for (uint32_t w = 0; w < SIM_MAX_WAVES; w++) {
    struct sim_wavebuf *b = &m->wave[w];
    b->npend = b->live = b->live_complete = b->visible_seq = 0;
  }
  m->live = m->live_complete = m->live_late = m->seq = 0;
  m->late_since_ns = m->late_first_ns = 0;
  m->hash_used = 0;
  m->gen++; /* every hash slot of an older generation reads as empty */
}

void sim_mem_reset(struct sim_memview *m) {
  forget_pending(m);
  if (m->cache) memset(m->cache, 0, SIM_CACHE_LINES * sizeof *m->cache);
  memset(m->last, 0, sizeof m->last);
  m->last_next = 0;
}

/* ---------------------------------------------------------------- access checks */

/* The allocation holding [p, p + bytes), checked for this agent's access; returns whether the
 * memory is another agent's (or the host's), i.e. needs system scope to be published, and points
 * *alloc at the allocation when asked. */
static bool check_access_alloc(struct sim_cta *c, const void *p, uint32_t bytes, const struct sim_alloc **alloc) {
  uintptr_t a = (uintptr_t)p;
  struct sim_memview *m = &c->mem;
  struct sim_alloc *l = NULL;
  for (uint32_t i = 0; i < SIM_ALLOC_CACHE && !l; i++)
    if (m->last[i].size && a - m->last[i].base < m->last[i].size) l = &m->last[i];
  if (!l) {
    l = &m->last[m->last_next];
    m->last_next = (m->last_next + 1) % SIM_ALLOC_CACHE;
    if (!sim_alloc_find(a, l)) {
      memset(l, 0, sizeof *l);
      sim_trap("address %p is in no HSA allocation (host memory the agent cannot see?)", p);
    }
  }
  struct sim_agent *ag = c->d->k->agent;
  if (!(l->access & (1u << ag->index)))
    sim_trap("agent %u accessed %p, memory it was not given access to (hsa_amd_agents_allow_access)", ag->gpu_index, p);
  if (a + bytes > l->base + l->size) sim_trap("access of %u bytes at %p runs past the end of its allocation", bytes, p);
  if (a & 3) sim_trap("unaligned access at %p", p);
  if (alloc) *alloc = l;
  return l->owner != ag;
}
static bool check_access(struct sim_cta *c, const void *p, uint32_t bytes) {
  return check_access_alloc(c, p, bytes, NULL);
}

/* ---------------------------------------------------------------- pending stores */

#define SLOT_WAVE(idx) ((idx) >> 24)
#define SLOT_INDEX(idx) ((idx) & 0xffffffu)

static uint32_t hash_of(uintptr_t w, uint32_t cap) { return (uint32_t)((w >> 2) * 0x9e3779b1u) & (cap - 1); }

static struct sim_hslot *hash_find(struct sim_memview *m, uintptr_t w, bool insert) {
  if (!m->hash_cap) return NULL;
  for (uint32_t h = hash_of(w, m->hash_cap);; h = (h + 1) & (m->hash_cap - 1)) {
    struct sim_hslot *s = &m->hash[h];
    if (s->gen != m->gen) {
      if (!insert) return NULL;
      s->gen = m->gen;
      s->addr = w;
      s->idx = UINT32_MAX;
      m->hash_used++;
      return s;
    }
    if (s->addr == w) return s;
  }
}

/* The live entry a slot names, if it still holds word w (a landed entry's index may have been
 * reused by its wave for another word). */
static struct sim_pending *slot_entry(struct sim_memview *m, uint32_t idx, uintptr_t w) {
  if (idx == UINT32_MAX) return NULL;
  struct sim_wavebuf *b = &m->wave[SLOT_WAVE(idx)];
  if (SLOT_INDEX(idx) >= b->npend) return NULL;
  struct sim_pending *e = &b->pend[SLOT_INDEX(idx)];
  return e->live && (e->addr == w || (e->wide && e->addr + 4 == w)) ? e : NULL;
}

/* Twice the size, keeping only the slots whose entries are still pending. */
static void hash_grow(struct sim_memview *m) {
  uint32_t cap = m->hash_cap ? 2 * m->hash_cap : 4096;
  struct sim_hslot *old = m->hash;
  uint32_t ocap = m->hash_cap, ogen = m->gen;
  m->hash = calloc(cap, sizeof *m->hash);
  if (!m->hash) abort(); /* the agent cannot go on without its model; out of memory here is fatal */
  m->hash_cap = cap;
  m->hash_used = 0;
  m->gen = 1;
  for (uint32_t i = 0; i < ocap; i++)
    if (old[i].gen == ogen && slot_entry(m, old[i].idx, old[i].addr)) hash_find(m, old[i].addr, true)->idx = old[i].idx;
  free(old);
}

/* The newest live pending entry holding word w (its wave in *wave), or NULL. */
static struct sim_pending *pending_of(struct sim_memview *m, uintptr_t w, uint32_t *wave) {
  if (!m->live) return NULL;
  struct sim_hslot *s = hash_find(m, w, false);
  if (!s) return NULL;
  struct sim_pending *e = slot_entry(m, s->idx, w);
  if (e && wave) *wave = SLOT_WAVE(s->idx);
  return e;
}

static uint32_t pend_word(const struct sim_pending *e, uintptr_t w) { return w == e->addr ? e->value : e->value_hi; }

/* Drop entry e of wave `wave` from the counts (landed or superseded). */
static void retire(struct sim_memview *m, uint32_t wave, struct sim_pending *e) {
  struct sim_wavebuf *b = &m->wave[wave];
  e->live = 0;
  b->live--;
  m->live--;
  if (e->cls == PEND_COMPLETE) b->live_complete--, m->live_complete--;
  if (e->late) m->live_late--;
  if (b->live == 0) b->npend = 0; /* its slots now name nothing (slot_entry checks) */
  if (m->live == 0) forget_pending(m);
}

static void land(struct sim_memview *m, uint32_t wave, struct sim_pending *e) {
  if (e->wide)
    __atomic_store_n((uint64_t *)e->addr, (uint64_t)e->value_hi << 32 | e->value, __ATOMIC_RELAXED);
  else
    __atomic_store_n((uint32_t *)e->addr, e->value, __ATOMIC_RELAXED);
  retire(m, wave, e);
}

/* A newer store to word w supersedes the older entry holding it: dropping the word keeps the word's
 * stores in program order whatever order entries land in. A wide entry keeps its other word (the
 * newer store broke the pair, as a 4-byte store into a 64-bit location does on the GPU). */
static void supersede(struct sim_memview *m, uintptr_t w) {
  uint32_t wave;
  struct sim_pending *old = pending_of(m, w, &wave);
  if (!old) return;
  if (old->wide) {
    old->wide = 0;
    if (old->addr == w) old->addr = w + 4, old->value = old->value_hi;
    return;
  }
  retire(m, wave, old);
}

/* A pending store by `wave` of word w (value), or with wide of the aligned pair w, w + 4 (value, hi). */
static void pend_add(struct sim_memview *m, uint32_t wave, uintptr_t w, uint32_t value, uint32_t hi, bool wide,
                     uint8_t cls, uint8_t need_system, uint8_t late) {
  if ((m->hash_used + 2) * 2 > m->hash_cap) hash_grow(m);
  supersede(m, w);
  if (wide) supersede(m, w + 4);
  struct sim_wavebuf *b = &m->wave[wave];
  if (b->npend == b->cap) {
    uint32_t cap = b->cap ? 2 * b->cap : 1024;
    struct sim_pending *n = cap <= 0x1000000u ? realloc(b->pend, cap * sizeof *n) : NULL;
    if (!n) abort();
    b->pend = n, b->cap = cap;
  }
  uint32_t idx = b->npend++;
  b->pend[idx] = (struct sim_pending){.addr = w, .value = value, .value_hi = hi, .seq = ++m->seq, .cls = cls,
                                      .need_system = need_system, .live = 1, .wide = wide, .late = late};
  uint32_t slot = wave << 24 | idx;
  hash_find(m, w, true)->idx = slot;
  if (wide) hash_find(m, w + 4, true)->idx = slot;
  b->live++;
  m->live++;
  if (cls == PEND_COMPLETE) b->live_complete++, m->live_complete++;
  if (late && !m->live_late++) m->late_first_ns = sim_now_ns();
}

/* Land `wave`'s pending entries in program order: complete-class ones, and release-class ones
 * the scope publishes (scope 0: none of them). */
static void publish(struct sim_memview *m, uint32_t wave, int release_scope) {
  struct sim_wavebuf *b = &m->wave[wave];
  for (uint32_t i = 0; i < b->npend && b->live; i++) {
    struct sim_pending *e = &b->pend[i];
    if (!e->live) continue;
    if (e->cls == PEND_COMPLETE ||
        (release_scope >= DEV_HOST_SCOPE_AGENT && (!e->need_system || release_scope == DEV_HOST_SCOPE_SYSTEM)))
      land(m, wave, e);
  }
}

/* Whether a reader in wave `reader` sees entry e of wave `wave` (its own wave's always; another
 * wave's once a barrier or that wave's workgroup release made it visible in the CU). */
static bool visible_to(const struct sim_memview *m, const struct sim_pending *e, uint32_t wave, uint32_t reader) {
  return wave == reader || e->seq <= m->wave[wave].visible_seq;
}

static uint32_t cur_wave(void) { return sim_cur ? sim_cur->lid / 64u : 0u; }

void sim_mem_barrier(struct sim_cta *c) {
  struct sim_memview *m = &c->mem;
  for (uint32_t w = 0; w < c->nwaves; w++) m->wave[w].visible_seq = m->seq;
}

/* Complete-class stores land on their own, late: at a scheduling point now and then one of them
 * (of the next wave that has one; rarer under chaos), and all of them once the CTA has nothing but
 * polling work-items (its stores would long have completed on a GPU). The one that lands is the
 * wave's newest or its oldest, at random: two stores with no wait between them complete in either
 * order on a GPU (different L2 channels), so a hand-off that forgets its drain sees its data
 * arrive after the flag, and a reader that polls one tagged pair and then reads another the same
 * lane stored after it, unpolled, sees the second arrive late. */
#define LATE_MAX_NS 100000000ull
static void land_late(struct sim_memview *m);
void sim_mem_drain_one(struct sim_cta *c) {
  struct sim_memview *m = &c->mem;
  if (!m->live_complete) return;
  /* a store completes on a GPU within microseconds whatever its wave does next: a late one that
   * neither a wait of its wave nor an idle round has landed lands here after LATE_MAX_NS (a wave
   * that spins in barrier rounds, never polling, held a peer's push until its own kernel ended) */
  if (m->live_late && sim_now_ns() - m->late_first_ns >= LATE_MAX_NS) land_late(m);
  uint64_t r = sim_rng(&c->rng);
  if ((r & (sim.cfg.chaos ? 63 : 15)) != 0) return;
  const bool oldest = (r >> 32) & 1;
  for (uint32_t k = 0; k < c->nwaves; k++) {
    uint32_t w = (m->drain_wave + k) % c->nwaves;
    struct sim_wavebuf *b = &m->wave[w];
    if (!b->live_complete) continue;
    for (uint32_t j = 0; j < b->npend; j++) {
      uint32_t i = oldest ? j : b->npend - 1 - j;
      if (b->pend[i].live && b->pend[i].cls == PEND_COMPLETE && !b->pend[i].late) {
        m->drain_wave = w + 1;
        land(m, w, &b->pend[i]);
        return;
      }
    }
  }
}

/* The CTA has nothing but polling work-items: its complete-class stores land, but for the late
 * ones, which wait until every other CTA of the dispatch is done or waiting (idle a whole round
 * with no progress: whoever could still read them early has had its chance), at most LATE_MAX_NS.
 * A state, not a quiet time: a consumer whose thread the host does not run for a while has not
 * read yet. */
void sim_mem_drain_idle(struct sim_cta *c) {
  struct sim_memview *m = &c->mem;
  bool late_too = true;
  if (m->live_late) {
    const struct sim_dispatch *d = c->d;
    uint64_t now = sim_now_ns();
    if (!m->late_since_ns) m->late_since_ns = now;
    uint32_t others = atomic_load_explicit(&d->waiting, memory_order_relaxed) - (c->waiting ? 1u : 0u) +
                      atomic_load_explicit(&d->finished, memory_order_relaxed);
    late_too = others + 1 >= d->nctas || now - m->late_since_ns >= LATE_MAX_NS;
  }
  /* what lands now may be what a waiting CTA waits for: the late ones wait at least a round more */
  uint32_t early = m->live_complete - m->live_late;
  for (uint32_t w = 0; w < c->nwaves && m->live_complete; w++) {
    struct sim_wavebuf *b = &m->wave[w];
    for (uint32_t i = 0; i < b->npend && b->live_complete; i++) {
      struct sim_pending *e = &b->pend[i];
      if (e->live && e->cls == PEND_COMPLETE && ((late_too && !early) || !e->late)) land(m, w, e);
    }
  }
  if (!m->live_late) m->late_since_ns = 0;
}

/* Every late entry lands (sim_mem_drain_one's bound). */
static void land_late(struct sim_memview *m) {
  for (uint32_t w = 0; w < SIM_MAX_WAVES && m->live_late; w++) {
    struct sim_wavebuf *b = &m->wave[w];
    for (uint32_t i = 0; i < b->npend && m->live_late; i++)
      if (b->pend[i].live && b->pend[i].late) land(m, w, &b->pend[i]);
  }
}

void sim_mem_flush_all(struct sim_cta *c) {
  struct sim_memview *m = &c->mem;
  for (uint32_t w = 0; w < SIM_MAX_WAVES && m->live; w++) {
    struct sim_wavebuf *b = &m->wave[w];
    for (uint32_t i = 0; i < b->npend && b->live; i++)
      if (b->pend[i].live) land(m, w, &b->pend[i]);
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void sim_mem_wait_stores(struct sim_cta *c) {
  if (!sim.cfg.weak) return;
  uint32_t w = cur_wave();
  if (c->mem.wave[w].live_complete) sim_chaos_laggard_drain();
  publish(&c->mem, w, 0);
}

/* ---------------------------------------------------------------- the cache of plain loads */

static uint32_t cached_word(struct sim_memview *m, uintptr_t w) {
  uintptr_t tag = w & ~(uintptr_t)(SIM_LINE - 1);
  struct sim_line *line = &m->cache[(tag / SIM_LINE) % SIM_CACHE_LINES];
  if (line->tag != tag) {
    /* fill from memory: the line is what this CTA will see until an acquire or an eviction;
     * 8 bytes at a time, so an aligned 8-byte location is never torn */
    for (uint32_t i = 0; i < SIM_LINE; i += 8)
      __atomic_load((uint64_t *)(tag + i), (uint64_t *)(line->data + i), __ATOMIC_RELAXED);
    line->tag = tag;
  }
  uint32_t v;
  memcpy(&v, line->data + (w - tag), 4);
  return v;
}

static void cache_update(struct sim_memview *m, uintptr_t w, uint32_t v) {
  uintptr_t tag = w & ~(uintptr_t)(SIM_LINE - 1);
  struct sim_line *line = &m->cache[(tag / SIM_LINE) % SIM_CACHE_LINES];
  if (line->tag == tag) memcpy(line->data + (w - tag), &v, 4);
}

static void invalidate(struct sim_memview *m) {
  for (uint32_t i = 0; i < SIM_CACHE_LINES; i++) m->cache[i].tag = 0;
}

/* ---------------------------------------------------------------- the dialect's accesses */

void sim_mem_load(struct sim_cta *c, const void *p, void *out, uint32_t bytes, enum dev_cache_policy cp) {
  check_access(c, p, bytes);
  if (c->lag_armed && cp == DEV_HOST_CP_SYS) sim_lag_hold(c); /* the lagging rank reads its peers' pushes late */
  bool pair = bytes == 8 && ((uintptr_t)p & 7) == 0; /* single-copy atomic on the GPU */
  if (!sim.cfg.weak) {
    if (pair) {
      uint64_t v = __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
      memcpy(out, &v, 8);
      return;
    }
    for (uint32_t i = 0; i < bytes; i += 4)
      __atomic_load((const uint32_t *)((const char *)p + i), (uint32_t *)((char *)out + i), __ATOMIC_RELAXED);
    return;
  }
  struct sim_memview *m = &c->mem;
  bool cached = cp == DEV_HOST_CP_PLAIN || cp == DEV_HOST_CP_NT;
  uint32_t reader = cur_wave(), wave;
  if (pair && !cached && !pending_of(m, (uintptr_t)p, NULL) && !pending_of(m, (uintptr_t)p + 4, NULL)) {
    uint64_t v = __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
    memcpy(out, &v, 8);
    return;
  }
  /* (a cached pair reads both words from one line fill, which is 8-byte atomic) */
  for (uint32_t i = 0; i < bytes; i += 4) {
    uintptr_t w = (uintptr_t)p + i;
    struct sim_pending *e = pending_of(m, w, &wave);
    uint32_t v;
    if (e && visible_to(m, e, wave, reader)) v = pend_word(e, w); /* in program order, or through the CU */
    else if (cached) v = cached_word(m, w);
    else v = __atomic_load_n((const uint32_t *)w, __ATOMIC_RELAXED);
    memcpy((char *)out + i, &v, 4);
  }
}

void sim_mem_store(struct sim_cta *c, void *p, const void *in, uint32_t bytes, enum dev_cache_policy cp) {
  const struct sim_alloc *al;
  bool remote = check_access_alloc(c, p, bytes, &al);
  /* a push to a peer: system scope into another GPU's memory, its own or attached through IPC */
  if (sim.cfg.lag_gpu >= 0 && remote && cp == DEV_HOST_CP_SYS && (al->attached || (al->owner && al->owner->gpu)))
    sim_lag_pushed(c);
  bool pair = bytes == 8 && ((uintptr_t)p & 7) == 0; /* single-copy atomic on the GPU */
  if (!sim.cfg.weak) {
    if (pair) {
      uint64_t v;
      memcpy(&v, in, 8);
      __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELAXED);
      return;
    }
    for (uint32_t i = 0; i < bytes; i += 4)
      __atomic_store((uint32_t *)((char *)p + i), (const uint32_t *)((const char *)in + i), __ATOMIC_RELAXED);
    return;
  }
  uint8_t cls = (cp == DEV_HOST_CP_SYS || (cp == DEV_HOST_CP_DEV && !remote)) ? PEND_COMPLETE : PEND_RELEASE;
  /* Under chaos one complete-class data store in four is late (sim_mem_drain_idle): it lands at its
   * wave's next wait or release, as any store does, but not on its own while another CTA still
   * runs. A hand-off drains its data before its flag, so this costs a correct one nothing; data
   * stored after the flag it belongs to (or never drained) reaches its reader only after the
   * reader has run its whole path, as it may on a GPU. Pairs and atomics (the flags and tagged
   * values themselves) are never late: they publish, and a late one would only slow the test. */
  uint8_t late = 0;
  if (sim.cfg.chaos && cls == PEND_COMPLETE && !pair) late = (sim_rng(&c->rng) & 3) == 0;
  if (pair) {
    uint32_t v[2];
    memcpy(v, in, 8);
    pend_add(&c->mem, cur_wave(), (uintptr_t)p, v[0], v[1], true, cls, remote, 0);
    cache_update(&c->mem, (uintptr_t)p, v[0]);
    cache_update(&c->mem, (uintptr_t)p + 4, v[1]);
    return;
  }
  for (uint32_t i = 0; i < bytes; i += 4) {
    uint32_t v;
    memcpy(&v, (const char *)in + i, 4);
    pend_add(&c->mem, cur_wave(), (uintptr_t)p + i, v, 0, false, cls, remote, late);
    cache_update(&c->mem, (uintptr_t)p + i, v);
  }
}

static bool releases(enum dev_order o) { return o == DEV_HOST_RELEASE || o == DEV_HOST_ACQ_REL || o == DEV_HOST_SEQ_CST; }
static bool acquires(enum dev_order o) { return o == DEV_HOST_ACQUIRE || o == DEV_HOST_ACQ_REL || o == DEV_HOST_SEQ_CST; }

/* A release by the current wave: at workgroup scope its stores become visible to the CTA's other
 * waves; at agent or system scope its pending stores the scope covers land (the releasing wave's
 * only: other waves' stores need their own drain). Under chaos the producer may lag first. */
static void release(struct sim_cta *c, int scope) {
  struct sim_memview *m = &c->mem;
  uint32_t w = cur_wave();
  if (scope >= DEV_HOST_SCOPE_AGENT) {
    if (m->wave[w].live) sim_chaos_laggard_drain();
    sim_chaos_lag();
    publish(m, w, scope);
  }
  m->wave[w].visible_seq = m->seq;
}

void sim_mem_fence(struct sim_cta *c, enum dev_order order, enum dev_scope scope) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (!sim.cfg.weak) return;
  if (releases(order)) release(c, scope);
  if (acquires(order) && scope >= DEV_HOST_SCOPE_AGENT) invalidate(&c->mem);
}

uint64_t sim_mem_atomic(struct sim_cta *c, void *p, enum dev_atomic_op op, uint32_t bytes, uint64_t v, uint64_t cmp,
                        enum dev_order order, enum dev_scope scope) {
  if (bytes != 4 && bytes != 8) sim_trap("atomic of %u bytes", bytes);
  bool remote = check_access(c, p, bytes);
  if (((uintptr_t)p & (bytes - 1)) != 0) sim_trap("misaligned %u-byte atomic at %p", bytes, p);
  if (sim.cfg.weak) {
    if (releases(order)) release(c, scope);
    if (op == DEV_ATOMIC_STORE && !releases(order)) {
      /* a relaxed atomic store is a store like any other (a device- or system-scope one): it
       * may land after the wave's later stores unless the wave waits for it */
      struct sim_memview *m = &c->mem;
      uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
      pend_add(m, cur_wave(), (uintptr_t)p, lo, hi, bytes == 8, PEND_COMPLETE, remote, 0);
      cache_update(m, (uintptr_t)p, lo);
      if (bytes == 8) cache_update(m, (uintptr_t)p + 4, hi);
      return 0;
    }
    /* earlier stores to these words come first (one location's order: an atomic reads memory) */
    for (uint32_t i = 0; i < bytes; i += 4) {
      uint32_t wave;
      struct sim_pending *e = pending_of(&c->mem, (uintptr_t)p + i, &wave);
      if (e) land(&c->mem, wave, e);
    }
  }
  uint64_t old = 0;
  if (bytes == 4) {
    uint32_t *q = p, x = (uint32_t)v;
    switch (op) {
    case DEV_ATOMIC_LOAD: old = __atomic_load_n(q, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_STORE: __atomic_store_n(q, x, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_ADD: old = __atomic_fetch_add(q, x, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_AND: old = __atomic_fetch_and(q, x, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_OR: old = __atomic_fetch_or(q, x, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_XCHG: old = __atomic_exchange_n(q, x, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_CAS: {
      uint32_t e = (uint32_t)cmp;
      __atomic_compare_exchange_n(q, &e, x, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      old = e;
      break;
    }
    case DEV_ATOMIC_MAX: {
      uint32_t cur = __atomic_load_n(q, __ATOMIC_RELAXED);
      while (cur < x && !__atomic_compare_exchange_n(q, &cur, x, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      }
      old = cur;
      break;
    }
    case DEV_ATOMIC_MIN: {
      uint32_t cur = __atomic_load_n(q, __ATOMIC_RELAXED);
      while (cur > x && !__atomic_compare_exchange_n(q, &cur, x, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      }
      old = cur;
      break;
    }
    }
  } else {
    uint64_t *q = p;
    switch (op) {
    case DEV_ATOMIC_LOAD: old = __atomic_load_n(q, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_STORE: __atomic_store_n(q, v, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_ADD: old = __atomic_fetch_add(q, v, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_AND: old = __atomic_fetch_and(q, v, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_OR: old = __atomic_fetch_or(q, v, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_XCHG: old = __atomic_exchange_n(q, v, __ATOMIC_SEQ_CST); break;
    case DEV_ATOMIC_CAS: {
      uint64_t e = cmp;
      __atomic_compare_exchange_n(q, &e, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      old = e;
      break;
    }
    case DEV_ATOMIC_MAX: {
      uint64_t cur = __atomic_load_n(q, __ATOMIC_RELAXED);
      while (cur < v && !__atomic_compare_exchange_n(q, &cur, v, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      }
      old = cur;
      break;
    }
    case DEV_ATOMIC_MIN: {
      uint64_t cur = __atomic_load_n(q, __ATOMIC_RELAXED);
      while (cur > v && !__atomic_compare_exchange_n(q, &cur, v, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      }
      old = cur;
      break;
    }
    }
  }
  if (sim.cfg.weak && acquires(order) && scope >= DEV_HOST_SCOPE_AGENT) invalidate(&c->mem);
  if (sim.cfg.weak && releases(order) && scope >= DEV_HOST_SCOPE_AGENT) sim_chaos_lag(); /* the rest of the producer lags */
  return old;
}
