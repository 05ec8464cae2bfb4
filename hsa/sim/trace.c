/* hsa/sim/trace.c: the trace of what each CTA of a traced dispatch did (hm_trace.h), recorded where the
 * dialect's primitives reach the agent, so no kernel does anything by hand and a GPU build is unchanged.
 *
 * It records what happened, not when, so a launch traces the same under any interleaving or chaos seed:
 *  - events count in the calling work-item's own stage slot (the timeline's stamps move it, every
 *    work-item at its own stamp), not in whatever slot lane 0 reached;
 *  - device- and system-scope loads count the distinct words (a (slot, word) pair once) that another CTA's
 *    traced store wrote, so poll rounds that failed add nothing; plain loads (never polls) count in full;
 *  - a wait is a device- or system-scope load returning the value a device- or system-scope store of
 *    another CTA made (value compared, so a stale read of a poll round never counts); atomic stores and
 *    exchanges are writers too, read-modify-writes are not: a counter's last writer depends on timing;
 *  - weights count as distinct 128-byte lines a CTA's stage (what HBM serves, however its work-items split
 *    a line), and a line is "loaded before the first wait" if any work-item read it before its own wait;
 *    a barrier passes a wait of any of the CTA's work-items on to all of them (what they do after it
 *    waited too). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dev_timeline.h"
#include "hm_trace.h"
#include "sim.h"

_Static_assert(HM_TRACE_MFMA_KINDS == DEV_MFMA_OP_COUNT, "hm_trace.h's matrix kinds are dev_host.h's");
_Static_assert(HM_TRACE_SLOTS == DEV_TL_SLOTS + 1u, "a trace slot a timeline slot, and the tail");

struct tr_dep {
  uint32_t slot, w_agent, w_launch, w_cta, w_slot, words;
};

struct sim_trace_cta {
  hm_trace_stage st[HM_TRACE_SLOTS];
  uint32_t top; /* slots below it used */
  struct tr_dep *deps;
  uint32_t ndeps, capdeps;
  uint64_t *seen; /* (word address << 6 | slot << 1 | waited) + 1, open addressing; 0 empty */
  uint32_t seen_cap, seen_used;
};

/* The writer of a word: the last traced plain or atomic store to it. */
struct tr_word {
  uintptr_t addr; /* 0: empty */
  uint32_t value;
  uint32_t agent, launch, cta, slot;
};

/* An allocation's memory file, so a word has one name in every mapping of it (a peer's arena is the
 * same memory at another address, attached through IPC). */
struct tr_file {
  uintptr_t base;
  int fd;
  uint64_t ino;
};
#define TR_FILES 256u

static struct {
  pthread_mutex_t lock;
  struct tr_file files[TR_FILES];
  uint32_t nfiles;
  _Atomic bool on;
  struct tr_word *map;
  size_t cap, used;
  uint32_t launches[SIM_MAX_GPUS];
  hm_trace out;
  uint32_t cap_launches, cap_stages, cap_waits;
  bool oom;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t word_hash(uintptr_t a, size_t cap) { return (size_t)((a >> 2) * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1); }

/* under T.lock */
static struct tr_word *word_slot(uintptr_t a, bool add) {
  if (add && (T.used + 1) * 2 > T.cap) {
    size_t ncap = T.cap ? T.cap * 2 : 1u << 16;
    struct tr_word *n = calloc(ncap, sizeof *n);
    if (!n) {
      T.oom = true;
      return NULL;
    }
    for (size_t i = 0; i < T.cap; i++)
      if (T.map[i].addr) {
        size_t j = word_hash(T.map[i].addr, ncap);
        while (n[j].addr) j = (j + 1) & (ncap - 1);
        n[j] = T.map[i];
      }
    free(T.map);
    T.map = n, T.cap = ncap;
  }
  if (!T.cap) return NULL;
  size_t j = word_hash(a, T.cap);
  while (T.map[j].addr && T.map[j].addr != a) j = (j + 1) & (T.cap - 1);
  if (T.map[j].addr) return &T.map[j];
  if (!add) return NULL;
  T.map[j].addr = a;
  T.used++;
  return &T.map[j];
}

/* The word at p's name: its memory file's inode and its offset in it (p itself outside any allocation).
 * Sets *peer when the memory is another agent's (its own allocation or an IPC attachment of one). */
static uintptr_t word_name(const struct sim_cta *c, const void *p, bool *peer) {
  struct sim_alloc a;
  *peer = false;
  if (!sim_alloc_find((uintptr_t)p, &a)) return (uintptr_t)p;
  *peer = a.attached || (a.owner && a.owner != c->d->k->agent);
  uint64_t ino = 0;
  pthread_mutex_lock(&T.lock);
  uint32_t i = 0;
  while (i < T.nfiles && !(T.files[i].base == a.base && T.files[i].fd == a.fd)) i++;
  if (i < T.nfiles) {
    ino = T.files[i].ino;
  } else {
    struct stat sb;
    ino = a.fd >= 0 && fstat(a.fd, &sb) == 0 ? (uint64_t)sb.st_ino : (uint64_t)a.base;
    if (T.nfiles < TR_FILES) T.files[T.nfiles++] = (struct tr_file){a.base, a.fd, ino};
  }
  pthread_mutex_unlock(&T.lock);
  /* 4-byte aligned offsets below 2^40 and inodes below 2^22: distinct names (a clash only merges two
   * words' writers, never more than that) */
  return (uintptr_t)(ino << 42 | ((uintptr_t)p - a.base));
}

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t size) {
  if (need <= *cap) return true;
  uint32_t n = *cap ? *cap * 2 : 64;
  while (n < need) n *= 2;
  void *q = realloc(*p, (size_t)n * size);
  if (!q) return false;
  *p = q, *cap = n;
  return true;
}

SIM_API void hm_sim_trace_begin(void) {
  pthread_mutex_lock(&T.lock);
  free(T.map), free(T.out.launches), free(T.out.stages), free(T.out.waits);
  T.map = NULL, T.cap = T.used = 0;
  memset(&T.out, 0, sizeof T.out);
  memset(T.launches, 0, sizeof T.launches);
  T.cap_launches = T.cap_stages = T.cap_waits = 0;
  T.oom = false;
  T.nfiles = 0;
  atomic_store(&T.on, true);
  pthread_mutex_unlock(&T.lock);
}

static int cmp_u32s(const uint32_t *a, const uint32_t *b, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}
static int cmp_launch(const void *a, const void *b) { return cmp_u32s(a, b, 2); }
static int cmp_stage(const void *a, const void *b) { return cmp_u32s(a, b, 4); }
static int cmp_wait(const void *a, const void *b) { return cmp_u32s(a, b, 8); }

SIM_API int hm_sim_trace_end(hm_trace *out) {
  pthread_mutex_lock(&T.lock);
  atomic_store(&T.on, false);
  int rc = T.oom ? -1 : 0;
  if (!rc) {
    *out = T.out;
    /* an empty trace has NULL arrays, which qsort may not be given (UBSan: nonnull argument) */
    if (out->nlaunches) qsort(out->launches, out->nlaunches, sizeof *out->launches, cmp_launch);
    if (out->nstages) qsort(out->stages, out->nstages, sizeof *out->stages, cmp_stage);
    if (out->nwaits) qsort(out->waits, out->nwaits, sizeof *out->waits, cmp_wait);
  } else {
    free(T.out.launches), free(T.out.stages), free(T.out.waits);
    memset(out, 0, sizeof *out);
  }
  memset(&T.out, 0, sizeof T.out);
  T.cap_launches = T.cap_stages = T.cap_waits = 0;
  free(T.map);
  T.map = NULL, T.cap = T.used = 0;
  pthread_mutex_unlock(&T.lock);
  return rc;
}

void sim_trace_dispatch(struct sim_dispatch *d) {
  if (!atomic_load_explicit(&T.on, memory_order_relaxed)) return;
  pthread_mutex_lock(&T.lock);
  if (atomic_load(&T.on)) {
    uint32_t g = d->k->agent->gpu_index;
    d->tr_on = true;
    d->tr_launch = T.launches[g]++;
    if (grow((void **)&T.out.launches, &T.cap_launches, T.out.nlaunches + 1, sizeof *T.out.launches)) {
      hm_trace_launch *L = &T.out.launches[T.out.nlaunches++];
      memset(L, 0, sizeof *L);
      L->agent = g, L->launch = d->tr_launch, L->ctas = d->nctas;
      size_t kn = strnlen(d->k->name, sizeof L->kernel - 1);
      memcpy(L->kernel, d->k->name, kn);
    } else {
      T.oom = true;
    }
  }
  pthread_mutex_unlock(&T.lock);
}

bool sim_trace_cta_begin(struct sim_cta *c) {
  if (!c->tr && !(c->tr = calloc(1, sizeof *c->tr))) return false;
  struct sim_trace_cta *t = c->tr;
  memset(t->st, 0, sizeof t->st);
  t->top = 0, t->ndeps = 0;
  if (t->seen) memset(t->seen, 0, (size_t)t->seen_cap * sizeof *t->seen);
  t->seen_used = 0;
  for (uint32_t i = 0; i < c->size; i++) c->lanes[i].tr_slot = 0, c->lanes[i].tr_waited = false;
  return true;
}

void sim_trace_cta_free(struct sim_cta *c) {
  if (!c->tr) return;
  free(c->tr->deps), free(c->tr->seen), free(c->tr);
  c->tr = NULL;
}

void sim_trace_cta_end(struct sim_cta *c) {
  struct sim_trace_cta *t = c->tr;
  if (!t) return;
  struct sim_dispatch *d = c->d;
  pthread_mutex_lock(&T.lock);
  if (atomic_load(&T.on) &&
      grow((void **)&T.out.stages, &T.cap_stages, T.out.nstages + t->top, sizeof *T.out.stages) &&
      grow((void **)&T.out.waits, &T.cap_waits, T.out.nwaits + t->ndeps, sizeof *T.out.waits)) {
    for (uint32_t s = 0; s < t->top; s++) {
      hm_trace_stage *o = &T.out.stages[T.out.nstages++];
      *o = t->st[s];
      o->agent = d->k->agent->gpu_index, o->launch = d->tr_launch, o->cta = c->id, o->slot = s;
    }
    for (uint32_t i = 0; i < t->ndeps; i++) {
      const struct tr_dep *p = &t->deps[i];
      T.out.waits[T.out.nwaits++] = (hm_trace_wait){d->k->agent->gpu_index, d->tr_launch, c->id, p->slot,
                                                    p->w_agent, p->w_launch, p->w_cta, p->w_slot, p->words};
    }
  } else if (atomic_load(&T.on)) {
    T.oom = true;
  }
  pthread_mutex_unlock(&T.lock);
}

static hm_trace_stage *stage_of(struct sim_lane *l) {
  struct sim_trace_cta *t = l->cta->tr;
  if (l->tr_slot >= t->top) t->top = l->tr_slot + 1;
  return &t->st[l->tr_slot];
}

/* Whether a key is new to this CTA; false also when out of memory (it then counts nothing). */
static bool seen_key(struct sim_trace_cta *t, uint64_t key) {
  if ((t->seen_used + 1) * 2 > t->seen_cap) {
    uint32_t ncap = t->seen_cap ? t->seen_cap * 2 : 1u << 12;
    uint64_t *n = calloc(ncap, sizeof *n);
    if (!n) return false;
    for (uint32_t i = 0; i < t->seen_cap; i++)
      if (t->seen[i]) {
        uint32_t j = (uint32_t)(t->seen[i] * 0x9e3779b97f4a7c15ull >> 32) & (ncap - 1);
        while (n[j]) j = (j + 1) & (ncap - 1);
        n[j] = t->seen[i];
      }
    free(t->seen);
    t->seen = n, t->seen_cap = ncap;
  }
  uint32_t j = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & (t->seen_cap - 1);
  while (t->seen[j] && t->seen[j] != key) j = (j + 1) & (t->seen_cap - 1);
  if (t->seen[j]) return false;
  t->seen[j] = key;
  t->seen_used++;
  return true;
}

/* (slot, word, read or waited on) */
static bool seen_first(struct sim_trace_cta *t, uint32_t slot, uintptr_t a, bool waited) {
  return seen_key(t, ((uint64_t)a << 6 | slot << 1 | (waited ? 1u : 0u)) + 1);
}

/* (slot, 128-byte line, loaded at all or before a wait): bit 63 keeps these apart from words' keys */
static bool seen_line(struct sim_trace_cta *t, uint32_t slot, uintptr_t line, bool pre) {
  return seen_key(t, (1ull << 63 | (uint64_t)line | slot << 2 | (pre ? 2u : 0u)) + 1);
}

static void add_dep(struct sim_trace_cta *t, uint32_t slot, const struct tr_word *w) {
  for (uint32_t i = t->ndeps; i-- > 0;) {
    struct tr_dep *p = &t->deps[i];
    if (p->slot == slot && p->w_agent == w->agent && p->w_launch == w->launch && p->w_cta == w->cta &&
        p->w_slot == w->slot) {
      p->words++;
      return;
    }
  }
  if (!grow((void **)&t->deps, &t->capdeps, t->ndeps + 1, sizeof *t->deps)) return;
  t->deps[t->ndeps++] = (struct tr_dep){slot, w->agent, w->launch, w->cta, w->slot, 1};
}

/* A device- or system-scope read of `bytes` at p that returned `val` (a poll, or data a flag published):
 * the words among them another CTA's traced store wrote, each once a stage, are waits and hand-off bytes.
 * The rest are not counted: a poll round that failed reads stale words, and some rounds read more (an
 * all-reduce's poll reads the abort word only when it has to wait), so they depend on timing. */
static void handoff_read(struct sim_lane *l, const void *p, const void *val, uint32_t bytes) {
  struct sim_cta *c = l->cta;
  struct sim_trace_cta *t = c->tr;
  hm_trace_stage *s = stage_of(l);
  const uint32_t agent = c->d->k->agent->gpu_index, launch = c->d->tr_launch;
  bool peer;
  const uintptr_t name = word_name(c, p, &peer);
  for (uint32_t o = 0; o + 4 <= bytes; o += 4) {
    uintptr_t a = name + o;
    uint32_t v;
    memcpy(&v, (const uint8_t *)val + o, 4);
    pthread_mutex_lock(&T.lock);
    struct tr_word *w = word_slot(a, false);
    struct tr_word found;
    bool dep = w && w->value == v && !(w->agent == agent && w->launch == launch && w->cta == c->id);
    if (dep) found = *w;
    pthread_mutex_unlock(&T.lock);
    if (dep) {
      l->tr_waited = true;
      if (seen_first(t, l->tr_slot, a, true)) add_dep(t, l->tr_slot, &found), s->handoff_bytes += 4;
    }
  }
}

void sim_trace_load(struct sim_lane *l, const void *p, const void *out, uint32_t bytes, enum dev_cache_policy cp) {
  hm_trace_stage *s = stage_of(l);
  if (cp == DEV_HOST_CP_NT) {
    /* weights count as the lines HBM serves, each once a CTA's stage however many of its work-items
     * read words of it (a scale byte each, or a 16-byte piece each); a line any work-item read before
     * its wait counts as loaded before the wait (a set, so the work-items' interleaving does not matter) */
    struct sim_trace_cta *t = l->cta->tr;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)(SIM_LINE - 1); a < (uintptr_t)p + bytes; a += SIM_LINE) {
      if (seen_line(t, l->tr_slot, a, false)) s->weight_bytes += SIM_LINE;
      if (!l->tr_waited && seen_line(t, l->tr_slot, a, true)) s->weight_pre_bytes += SIM_LINE;
    }
  } else if (cp == DEV_HOST_CP_PLAIN) {
    s->handoff_bytes += bytes; /* no poll reads through the L1, so every one counts */
  } else {
    handoff_read(l, p, out, bytes);
  }
}

static void wrote(struct sim_lane *l, const void *p, const void *in, uint32_t bytes, bool system) {
  struct sim_cta *c = l->cta;
  hm_trace_stage *s = stage_of(l);
  bool peer;
  const uintptr_t name = word_name(c, p, &peer);
  if (!system) {
    s->dev_store_bytes += bytes;
  } else {
    s->sys_store_bytes += bytes;
    if (peer) s->peer_store_bytes += bytes;
  }
  pthread_mutex_lock(&T.lock);
  for (uint32_t o = 0; o + 4 <= bytes; o += 4) {
    struct tr_word *w = word_slot(name + o, true);
    if (!w) break;
    memcpy(&w->value, (const uint8_t *)in + o, 4);
    w->agent = c->d->k->agent->gpu_index, w->launch = c->d->tr_launch, w->cta = c->id, w->slot = l->tr_slot;
  }
  pthread_mutex_unlock(&T.lock);
}

void sim_trace_store(struct sim_lane *l, const void *p, const void *in, uint32_t bytes, enum dev_cache_policy cp) {
  if (cp == DEV_HOST_CP_DEV || cp == DEV_HOST_CP_SYS) wrote(l, p, in, bytes, cp == DEV_HOST_CP_SYS);
  else stage_of(l)->dev_store_bytes += bytes; /* a plain store: no hand-off without a flag after it */
}

void sim_trace_atomic(struct sim_lane *l, void *p, enum dev_atomic_op op, uint32_t bytes, uint64_t v, uint64_t old,
                      uint64_t cmp, enum dev_scope scope) {
  (void)cmp;
  if (op == DEV_ATOMIC_LOAD) {
    if (scope != DEV_HOST_SCOPE_WG) handoff_read(l, p, &old, bytes);
    return;
  }
  if (op == DEV_ATOMIC_STORE || op == DEV_ATOMIC_XCHG) {
    wrote(l, p, &v, bytes, scope == DEV_HOST_SCOPE_SYSTEM);
    return;
  }
  /* a read-modify-write: its bytes, no writer (its last one depends on timing); a compare-and-swap
   * loop's rounds would depend on timing too, so it counts nothing */
  if (op == DEV_ATOMIC_CAS) return;
  hm_trace_stage *s = stage_of(l);
  if (scope == DEV_HOST_SCOPE_SYSTEM) s->sys_store_bytes += bytes;
  else s->dev_store_bytes += bytes;
}

void sim_trace_mfma(struct sim_lane *l, enum dev_mfma_op op) {
  if (l->lid % 64 == 0 && (unsigned)op < HM_TRACE_MFMA_KINDS) stage_of(l)->mfma[op]++;
}

void sim_trace_stage(struct sim_lane *l, uint32_t slot) {
  l->tr_slot = slot + 1 < HM_TRACE_SLOTS ? slot + 1 : HM_TRACE_SLOTS - 1;
  l->tr_waited = false;
}

void sim_trace_barrier(struct sim_cta *c) {
  bool any = false;
  for (uint32_t i = 0; i < c->size && !any; i++) any = c->lanes[i].tr_waited;
  if (any)
    for (uint32_t i = 0; i < c->size; i++) c->lanes[i].tr_waited = true;
}
