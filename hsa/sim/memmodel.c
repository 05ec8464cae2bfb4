/* hsa/sim/memmodel.c: memory through the dialect, and the weak-visibility model (DESIGN §4) that
 * makes a hand-off missing its fence, wait or flag fail here as it would on an MI300X / MI355X.
 *
 * With HSAMONO_SIM_WEAK=1 each CTA keeps:
 *  - pending stores, per 4-byte word, or per aligned 8-byte pair of words for an 8-byte store (an
 *    aligned 64-bit access is single-copy atomic on the GPU: the value+tag hand-offs rely on it, so
 *    its two words land together and an 8-byte load reads both at once). A plain or non-temporal store (and a device-scope store to
 *    another agent's memory) is "release" class: other CTAs see it only after this CTA executes a
 *    release (fence or release atomic) of agent scope, or system scope when the memory is not this
 *    agent's. A device-scope store to this agent's memory, and any system-scope store, is
 *    "complete" class: it lands when the CTA waits for its stores (s_waitcnt vmcnt(0)), at any
 *    agent-or-wider release, or on its own at some later scheduling point, newest first, so two
 *    such stores with no wait between them may land in either order (as they may on the GPU);
 *  - a small direct-mapped cache of 128-byte lines that plain and non-temporal loads read from:
 *    a line is filled from memory on a miss and stays (possibly stale) until an acquire of agent
 *    scope or wider, or until evicted;
 * while device- and system-scope loads and all atomics read memory itself. Every access through
 * the dialect is also checked against the agent's allocations and access rights.
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
  free(m->pend);
  free(m->hash);
  free(m->cache);
  memset(m, 0, sizeof *m);
}

static void forget_pending(struct sim_memview *m) {
  m->npend = m->live = m->live_complete = 0;
  m->hash_used = 0;
  m->gen++; /* every hash slot of an older generation reads as empty */
}

void sim_mem_reset(struct sim_memview *m) {
  forget_pending(m);
  if (m->cache) memset(m->cache, 0, SIM_CACHE_LINES * sizeof *m->cache);
  memset(&m->last, 0, sizeof m->last);
}

/* ---------------------------------------------------------------- access checks */

/* The allocation holding [p, p + bytes), checked for this agent's access; returns whether the
 * memory is another agent's (or the host's), i.e. needs system scope to be published. */
static bool check_access(struct sim_cta *c, const void *p, uint32_t bytes) {
  uintptr_t a = (uintptr_t)p;
  struct sim_alloc *l = &c->mem.last;
  if (!(l->size && a - l->base < l->size)) {
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
  return l->owner != ag;
}

/* ---------------------------------------------------------------- pending stores */

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
    if (old[i].gen == ogen) {
      struct sim_hslot *s = hash_find(m, old[i].addr, true);
      s->idx = old[i].idx;
    }
  free(old);
}

/* The newest live pending entry holding word w, or NULL. */
static struct sim_pending *pending_of(struct sim_memview *m, uintptr_t w) {
  if (!m->live) return NULL;
  struct sim_hslot *s = hash_find(m, w, false);
  if (!s || s->idx >= m->npend) return NULL;
  struct sim_pending *e = &m->pend[s->idx];
  return e->live && (e->addr == w || (e->wide && e->addr + 4 == w)) ? e : NULL;
}

static uint32_t pend_word(const struct sim_pending *e, uintptr_t w) { return w == e->addr ? e->value : e->value_hi; }

static void land(struct sim_memview *m, struct sim_pending *e) {
  if (e->wide)
    __atomic_store_n((uint64_t *)e->addr, (uint64_t)e->value_hi << 32 | e->value, __ATOMIC_RELAXED);
  else
    __atomic_store_n((uint32_t *)e->addr, e->value, __ATOMIC_RELAXED);
  e->live = 0;
  m->live--;
  if (e->cls == PEND_COMPLETE) m->live_complete--;
  if (m->live == 0) forget_pending(m);
}

/* A newer store to word w supersedes the older entry holding it: dropping the word keeps the word's
 * stores in program order whatever order entries land in. A wide entry keeps its other word (the
 * newer store broke the pair, as a 4-byte store into a 64-bit location does on the GPU). */
static void supersede(struct sim_memview *m, uintptr_t w) {
  struct sim_pending *old = pending_of(m, w);
  if (!old) return;
  if (old->wide) {
    old->wide = 0;
    if (old->addr == w) old->addr = w + 4, old->value = old->value_hi;
    return;
  }
  old->live = 0;
  m->live--;
  if (old->cls == PEND_COMPLETE) m->live_complete--;
}

/* A pending store of word w (value), or with wide of the aligned pair w, w + 4 (value, hi). */
static void pend_add(struct sim_memview *m, uintptr_t w, uint32_t value, uint32_t hi, bool wide, uint8_t cls,
                     uint8_t need_system) {
  if ((m->hash_used + 2) * 2 > m->hash_cap) hash_grow(m);
  supersede(m, w);
  if (wide) supersede(m, w + 4);
  if (m->npend == m->cap) {
    uint32_t cap = m->cap ? 2 * m->cap : 1024;
    struct sim_pending *n = realloc(m->pend, cap * sizeof *n);
    if (!n) abort();
    m->pend = n, m->cap = cap;
  }
  uint32_t idx = m->npend++;
  m->pend[idx] = (struct sim_pending){.addr = w, .value = value, .value_hi = hi, .cls = cls,
                                      .need_system = need_system, .live = 1, .wide = wide};
  hash_find(m, w, true)->idx = idx;
  if (wide) hash_find(m, w + 4, true)->idx = idx;
  m->live++;
  if (cls == PEND_COMPLETE) m->live_complete++;
}

/* Land pending entries in program order: complete-class ones, and release-class ones the scope
 * publishes (scope 0: none of them). */
static void publish(struct sim_memview *m, int release_scope) {
  for (uint32_t i = 0; i < m->npend && m->live; i++) {
    struct sim_pending *e = &m->pend[i];
    if (!e->live) continue;
    if (e->cls == PEND_COMPLETE ||
        (release_scope >= DEV_HOST_SCOPE_AGENT && (!e->need_system || release_scope == DEV_HOST_SCOPE_SYSTEM)))
      land(m, e);
  }
}

void sim_mem_drain_one(struct sim_cta *c) {
  struct sim_memview *m = &c->mem;
  if (!m->live_complete) return;
  for (uint32_t i = m->npend; i-- > 0;)
    if (m->pend[i].live && m->pend[i].cls == PEND_COMPLETE) {
      land(m, &m->pend[i]);
      return;
    }
}

void sim_mem_flush_all(struct sim_cta *c) {
  struct sim_memview *m = &c->mem;
  for (uint32_t i = 0; i < m->npend && m->live; i++)
    if (m->pend[i].live) land(m, &m->pend[i]);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void sim_mem_wait_stores(struct sim_cta *c) {
  if (!sim.cfg.weak) return;
  publish(&c->mem, 0);
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
  if (pair && !cached && !pending_of(m, (uintptr_t)p) && !pending_of(m, (uintptr_t)p + 4)) {
    uint64_t v = __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
    memcpy(out, &v, 8);
    return;
  }
  /* (a cached pair reads both words from one line fill, which is 8-byte atomic) */
  for (uint32_t i = 0; i < bytes; i += 4) {
    uintptr_t w = (uintptr_t)p + i;
    struct sim_pending *e = pending_of(m, w);
    uint32_t v;
    if (e) v = pend_word(e, w); /* the CTA's own store, in program order */
    else if (cached) v = cached_word(m, w);
    else v = __atomic_load_n((const uint32_t *)w, __ATOMIC_RELAXED);
    memcpy((char *)out + i, &v, 4);
  }
}

void sim_mem_store(struct sim_cta *c, void *p, const void *in, uint32_t bytes, enum dev_cache_policy cp) {
  bool remote = check_access(c, p, bytes);
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
  if (pair) {
    uint32_t v[2];
    memcpy(v, in, 8);
    pend_add(&c->mem, (uintptr_t)p, v[0], v[1], true, cls, remote);
    cache_update(&c->mem, (uintptr_t)p, v[0]);
    cache_update(&c->mem, (uintptr_t)p + 4, v[1]);
    return;
  }
  for (uint32_t i = 0; i < bytes; i += 4) {
    uint32_t v;
    memcpy(&v, (const char *)in + i, 4);
    pend_add(&c->mem, (uintptr_t)p + i, v, 0, false, cls, remote);
    cache_update(&c->mem, (uintptr_t)p + i, v);
  }
}

static bool releases(enum dev_order o) { return o == DEV_HOST_RELEASE || o == DEV_HOST_ACQ_REL || o == DEV_HOST_SEQ_CST; }
static bool acquires(enum dev_order o) { return o == DEV_HOST_ACQUIRE || o == DEV_HOST_ACQ_REL || o == DEV_HOST_SEQ_CST; }

void sim_mem_fence(struct sim_cta *c, enum dev_order order, enum dev_scope scope) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (!sim.cfg.weak || scope < DEV_HOST_SCOPE_AGENT) return;
  if (releases(order)) publish(&c->mem, scope);
  if (acquires(order)) invalidate(&c->mem);
}

uint64_t sim_mem_atomic(struct sim_cta *c, void *p, enum dev_atomic_op op, uint32_t bytes, uint64_t v, uint64_t cmp,
                        enum dev_order order, enum dev_scope scope) {
  if (bytes != 4 && bytes != 8) sim_trap("atomic of %u bytes", bytes);
  check_access(c, p, bytes);
  if (((uintptr_t)p & (bytes - 1)) != 0) sim_trap("misaligned %u-byte atomic at %p", bytes, p);
  if (sim.cfg.weak) {
    if (releases(order) && scope >= DEV_HOST_SCOPE_AGENT) publish(&c->mem, scope);
    /* the CTA's own earlier stores to these words come first (one location's order) */
    for (uint32_t i = 0; i < bytes; i += 4) {
      struct sim_pending *e = pending_of(&c->mem, (uintptr_t)p + i);
      if (e) land(&c->mem, e);
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
  return old;
}
