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
 *    a line), each at the level of its earliest reader (a min over them, so the interleaving does not
 *    matter). A work-item's level counts the runs of waits it has passed in the stage, in its program
 *    order: waits with no weight load between them are one run at one level, so a work-item that polls
 *    several flags in whatever order they come up (the route stage), or reads the data a flag published,
 *    traces the same; a barrier raises every work-item to the CTA's highest level (what they do after it
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
  uint32_t slot, w_agent, w_launch, w_cta, w_slot, words, level;
  uint32_t w_interval; /* the writer's barrier interval of the latest store read (see tr_mark) */
};

/* The end of a CTA's barrier interval: a stage's barriers number its intervals 0, 1, ... (interval k
 * ends at barrier k), and at a barrier every work-item has made its loads before it and none after,
 * so the stage's weight bytes then do not depend on their interleaving. A store is placed in its
 * interval; a wait on it reads the writer's bytes at that interval's end (hm_trace_wait.w_rest). */
struct tr_mark {
  uint32_t agent, launch, cta, slot, interval;
  uint64_t bytes;
};

/* A weight line of a stage and its level (the fewest waits a work-item that read it had passed). */
struct tr_line {
  uint64_t key; /* (line | slot) + 1: lines are 128-byte aligned; 0 empty */
  uint32_t level;
};

struct sim_trace_cta {
  hm_trace_stage st[HM_TRACE_SLOTS];
  uint32_t top; /* slots below it used */
  struct tr_dep *deps;
  uint32_t ndeps, capdeps;
  uint64_t *seen; /* (word address << 6 | slot << 1 | waited) + 1, open addressing; 0 empty */
  uint32_t seen_cap, seen_used;
  struct tr_line *lines; /* open addressing */
  uint32_t lines_cap, lines_used;
  /* the writers' stages its work-items had waited on at its last barrier (key: this CTA's stage slot
   * and the writer's stage; the latest writer interval read), open addressing */
  struct tr_known *known;
  uint32_t known_cap, known_used;
  uint32_t bars[HM_TRACE_SLOTS]; /* barriers each stage has passed: the interval its stores are in */
  struct tr_mark *marks;         /* its intervals' ends (agent, launch, cta filled at its end) */
  uint32_t nmarks, capmarks;
};

/* A writer's stage a CTA's stage has waited on (its latest interval read): a wait on it again, at or
 * before that interval, gates nothing the first did not (used: 0 empty). */
struct tr_known {
  uint32_t used, slot;
  struct sim_tr_writer w;
};

/* The writer of a word: the last traced plain or atomic store to it. */
struct tr_word {
  uintptr_t addr; /* 0: empty */
  uint32_t value;
  uint32_t agent, launch, cta, slot, interval;
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
  struct tr_mark *marks; /* every traced CTA's interval ends */
  uint32_t nmarks, cap_marks;
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
  free(T.map), free(T.out.launches), free(T.out.stages), free(T.out.waits), free(T.marks);
  T.map = NULL, T.cap = T.used = 0;
  T.marks = NULL, T.nmarks = T.cap_marks = 0;
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
/* waits by (reader stage, writer stage, level): a record a level (add_dep), so a total order, whichever
 * order the work-items made them in */
static int cmp_wait(const void *a, const void *b) {
  const hm_trace_wait *x = a, *y = b;
  int c = cmp_u32s(a, b, 8);
  return c ? c : x->level != y->level ? (x->level < y->level ? -1 : 1) : 0;
}
static int cmp_mark(const void *a, const void *b) { return cmp_u32s(a, b, 5); }

/* Each wait's w_rest, from the writer interval it holds there until now: the writer stage's weight
 * bytes less those at that interval's end, or 0 where no barrier ended it (a store in the stage's
 * last interval). Under T.lock, out's stages and T.marks sorted. */
static void resolve_rests(hm_trace *out) {
  for (uint32_t i = 0; i < out->nwaits; i++) {
    hm_trace_wait *w = &out->waits[i];
    const uint32_t key[5] = {w->w_agent, w->w_launch, w->w_cta, w->w_slot, (uint32_t)w->w_rest};
    const struct tr_mark *m = T.nmarks ? bsearch(key, T.marks, T.nmarks, sizeof *T.marks, cmp_mark) : NULL;
    const hm_trace_stage *st =
        m && out->nstages ? bsearch(key, out->stages, out->nstages, sizeof *out->stages, cmp_stage) : NULL;
    w->w_rest = m && st && st->weight_bytes > m->bytes ? st->weight_bytes - m->bytes : 0;
  }
}

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
    if (T.nmarks) qsort(T.marks, T.nmarks, sizeof *T.marks, cmp_mark);
    resolve_rests(out);
  } else {
    free(T.out.launches), free(T.out.stages), free(T.out.waits);
    memset(out, 0, sizeof *out);
  }
  memset(&T.out, 0, sizeof T.out);
  T.cap_launches = T.cap_stages = T.cap_waits = 0;
  free(T.map), free(T.marks);
  T.map = NULL, T.cap = T.used = 0;
  T.marks = NULL, T.nmarks = T.cap_marks = 0;
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
  t->top = 0, t->ndeps = 0, t->nmarks = 0;
  memset(t->bars, 0, sizeof t->bars);
  if (t->seen) memset(t->seen, 0, (size_t)t->seen_cap * sizeof *t->seen);
  t->seen_used = 0;
  if (t->lines) memset(t->lines, 0, (size_t)t->lines_cap * sizeof *t->lines);
  t->lines_used = 0;
  if (t->known) memset(t->known, 0, (size_t)t->known_cap * sizeof *t->known);
  t->known_used = 0;
  for (uint32_t i = 0; i < c->size; i++)
    c->lanes[i].tr_slot = 0, c->lanes[i].tr_level = 0, c->lanes[i].tr_pending = false, c->lanes[i].tr_nnew = 0;
  return true;
}

void sim_trace_cta_free(struct sim_cta *c) {
  if (!c->tr) return;
  free(c->tr->deps), free(c->tr->seen), free(c->tr->lines), free(c->tr->marks), free(c->tr->known), free(c->tr);
  c->tr = NULL;
}

void sim_trace_cta_end(struct sim_cta *c) {
  struct sim_trace_cta *t = c->tr;
  if (!t) return;
  struct sim_dispatch *d = c->d;
  pthread_mutex_lock(&T.lock);
  if (atomic_load(&T.on) &&
      grow((void **)&T.out.stages, &T.cap_stages, T.out.nstages + t->top, sizeof *T.out.stages) &&
      grow((void **)&T.out.waits, &T.cap_waits, T.out.nwaits + t->ndeps, sizeof *T.out.waits) &&
      grow((void **)&T.marks, &T.cap_marks, T.nmarks + t->nmarks, sizeof *T.marks)) {
    for (uint32_t s = 0; s < t->top; s++) {
      hm_trace_stage *o = &T.out.stages[T.out.nstages++];
      *o = t->st[s];
      o->agent = d->k->agent->gpu_index, o->launch = d->tr_launch, o->cta = c->id, o->slot = s;
    }
    for (uint32_t i = 0; i < t->ndeps; i++) {
      const struct tr_dep *p = &t->deps[i];
      /* w_rest holds the writer's interval until the trace ends (resolve_rests) */
      T.out.waits[T.out.nwaits++] = (hm_trace_wait){d->k->agent->gpu_index, d->tr_launch, c->id,     p->slot,
                                                    p->w_agent,              p->w_launch,   p->w_cta, p->w_slot,
                                                    p->words,                p->level,      p->w_interval};
    }
    for (uint32_t i = 0; i < t->nmarks; i++) {
      struct tr_mark m = t->marks[i];
      m.agent = d->k->agent->gpu_index, m.launch = d->tr_launch, m.cta = c->id;
      T.marks[T.nmarks++] = m;
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

/* (slot, word, the level a wait on it was made at): a wait's words counted at each of its levels. The
 * level goes in the top bits, beside the other keys' (a clash only merges two words, as word_name's) */
static bool seen_at_level(struct sim_trace_cta *t, uint32_t slot, uintptr_t a, uint32_t level) {
  return seen_key(t, (((uint64_t)a << 6 | slot << 1) ^ ((uint64_t)(level + 1u) << 59)) + 1);
}

/* A weight line the stage `slot` read at `level`: the stage's bytes by level, each line at the lowest
 * level any of its readers read it (a reader at a lower level than an earlier one moves it down). */
static void line_read(struct sim_trace_cta *t, hm_trace_stage *s, uint32_t slot, uintptr_t line, uint32_t level) {
  if ((t->lines_used + 1) * 2 > t->lines_cap) {
    uint32_t ncap = t->lines_cap ? t->lines_cap * 2 : 1u << 12;
    struct tr_line *n = calloc(ncap, sizeof *n);
    if (!n) return; /* out of memory: the line counts nothing */
    for (uint32_t i = 0; i < t->lines_cap; i++)
      if (t->lines[i].key) {
        uint32_t j = (uint32_t)(t->lines[i].key * 0x9e3779b97f4a7c15ull >> 32) & (ncap - 1);
        while (n[j].key) j = (j + 1) & (ncap - 1);
        n[j] = t->lines[i];
      }
    free(t->lines);
    t->lines = n, t->lines_cap = ncap;
  }
  const uint64_t key = ((uint64_t)line | slot) + 1;
  uint32_t j = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & (t->lines_cap - 1);
  while (t->lines[j].key && t->lines[j].key != key) j = (j + 1) & (t->lines_cap - 1);
  if (!t->lines[j].key) {
    t->lines[j] = (struct tr_line){key, level};
    t->lines_used++;
    s->weight_bytes += SIM_LINE;
    s->weight_level_bytes[level] += SIM_LINE;
  } else if (level < t->lines[j].level) {
    s->weight_level_bytes[t->lines[j].level] -= SIM_LINE;
    s->weight_level_bytes[level] += SIM_LINE;
    t->lines[j].level = level;
  }
}

/* The wait of stage `slot` on w's stage, made at `level`: a record a (writer stage, level), its words
 * counted when `word_new` (a word new to that level), keeping the latest writer interval it read. Each
 * level's record is its own: the words a work-item reads at a level are fixed by its program order,
 * whichever work-item got there first, and a later level's waits may read later stores (a down task's
 * round of tiles after the next, on a writer that ran several units). */
static void add_dep(struct sim_trace_cta *t, uint32_t slot, const struct tr_word *w, bool word_new, uint32_t level) {
  for (uint32_t i = t->ndeps; i-- > 0;) {
    struct tr_dep *p = &t->deps[i];
    if (p->slot == slot && p->level == level && p->w_agent == w->agent && p->w_launch == w->launch &&
        p->w_cta == w->cta && p->w_slot == w->slot) {
      p->words += word_new;
      if (w->interval > p->w_interval) p->w_interval = w->interval;
      return;
    }
  }
  if (!word_new || !grow((void **)&t->deps, &t->capdeps, t->ndeps + 1, sizeof *t->deps)) return;
  t->deps[t->ndeps++] = (struct tr_dep){slot, w->agent, w->launch, w->cta, w->slot, 1, level, w->interval};
}

static uint32_t level_cap(uint32_t level) { return level < HM_TRACE_LEVELS ? level : HM_TRACE_LEVELS - 1; }

static bool same_writer(const struct sim_tr_writer *a, const struct sim_tr_writer *b) {
  return a->agent == b->agent && a->launch == b->launch && a->cta == b->cta && a->slot == b->slot;
}

static uint32_t known_hash(uint32_t slot, const struct sim_tr_writer *w) {
  return slot * 0x9e3779b9u ^ w->cta * 0x85ebca6bu ^ w->slot * 0xc2b2ae35u ^ w->agent * 0x27d4eb2fu ^ w->launch;
}

/* The CTA's entry of (its stage slot, a writer's stage): found, or the empty one to fill; NULL when out
 * of memory (nothing more is known then: every wait counts as new, as without this record). */
static struct tr_known *known_slot(struct sim_trace_cta *t, uint32_t slot, const struct sim_tr_writer *w) {
  if ((t->known_used + 1) * 2 > t->known_cap) {
    uint32_t ncap = t->known_cap ? t->known_cap * 2 : 1u << 8;
    struct tr_known *n = calloc(ncap, sizeof *n);
    if (!n) return NULL;
    for (uint32_t i = 0; i < t->known_cap; i++)
      if (t->known[i].used) {
        uint32_t j = known_hash(t->known[i].slot, &t->known[i].w) & (ncap - 1);
        while (n[j].used) j = (j + 1) & (ncap - 1);
        n[j] = t->known[i];
      }
    free(t->known);
    t->known = n, t->known_cap = ncap;
  }
  uint32_t j = known_hash(slot, w) & (t->known_cap - 1);
  while (t->known[j].used && !(t->known[j].slot == slot && same_writer(&t->known[j].w, w)))
    j = (j + 1) & (t->known_cap - 1);
  return &t->known[j];
}

/* Whether a wait of work-item l on writer w (a stage and the interval of the store read) is new to
 * it: neither the work-item since the CTA's last barrier nor any work-item before that barrier had
 * read that stage at that interval or a later one. A wait that is not new gates no load the first
 * did not (its store was made no later), so it starts no level: a gate/up unit reads its token's X8R
 * every K step, and each read starting a level ran a stage past HM_TRACE_LEVELS, where its later,
 * real waits (on another CTA's unit half) gated every load of the top level. What the CTA knows
 * changes only at barriers (known_merge), so the answer does not depend on the work-items' order. */
static bool wait_is_new(struct sim_trace_cta *t, struct sim_lane *l, const struct sim_tr_writer *w) {
  for (uint32_t i = 0; i < l->tr_nnew; i++)
    if (same_writer(&l->tr_new[i], w)) {
      if (w->interval <= l->tr_new[i].interval) return false;
      l->tr_new[i].interval = w->interval;
      return true;
    }
  if (t->known_cap) {
    const struct tr_known *k = known_slot(t, l->tr_slot, w);
    if (k && k->used && w->interval <= k->w.interval) return false;
  }
  if (l->tr_nnew < SIM_TR_NEW) l->tr_new[l->tr_nnew++] = *w;
  return true;
}

/* At a barrier: the waits each work-item made since the last one become the CTA's. */
static void known_merge(struct sim_cta *c) {
  struct sim_trace_cta *t = c->tr;
  for (uint32_t i = 0; i < c->size; i++) {
    struct sim_lane *l = &c->lanes[i];
    for (uint32_t n = 0; n < l->tr_nnew; n++) {
      struct tr_known *k = known_slot(t, l->tr_slot, &l->tr_new[n]);
      if (!k) continue;
      if (!k->used) *k = (struct tr_known){1, l->tr_slot, l->tr_new[n]}, t->known_used++;
      else if (l->tr_new[n].interval > k->w.interval) k->w.interval = l->tr_new[n].interval;
    }
    l->tr_nnew = 0;
  }
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
      /* at the work-item's level; the weights it loads next are above it, if the wait is new */
      const struct sim_tr_writer wr = {found.agent, found.launch, found.cta, found.slot, found.interval};
      if (wait_is_new(t, l, &wr)) l->tr_pending = true;
      const uint32_t level = level_cap(l->tr_level);
      if (seen_first(t, l->tr_slot, a, true)) s->handoff_bytes += 4;
      add_dep(t, l->tr_slot, &found, seen_at_level(t, l->tr_slot, a, level), level);
    }
  }
}

void sim_trace_load(struct sim_lane *l, const void *p, const void *out, uint32_t bytes, enum dev_cache_policy cp) {
  hm_trace_stage *s = stage_of(l);
  if (cp == DEV_HOST_CP_NT) {
    /* weights count as the lines HBM serves, each once a CTA's stage however many of its work-items
     * read words of it (a scale byte each, or a 16-byte piece each), at the lowest level a work-item
     * read it (a min, so the work-items' interleaving does not matter) */
    struct sim_trace_cta *t = l->cta->tr;
    if (l->tr_pending) l->tr_level++, l->tr_pending = false;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)(SIM_LINE - 1); a < (uintptr_t)p + bytes; a += SIM_LINE)
      line_read(t, s, l->tr_slot, a, level_cap(l->tr_level));
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
    w->interval = c->tr->bars[l->tr_slot];
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
  l->tr_level = 0, l->tr_pending = false, l->tr_nnew = 0;
}

/* After a barrier every work-item is past every wait any of them made before it: each takes the CTA's
 * highest level, pending if a work-item at that level waited since it rose (the waits at lower levels
 * gate that level's lines already, in the model). */
void sim_trace_barrier(struct sim_cta *c) {
  uint32_t top = 0;
  bool pending = false;
  for (uint32_t i = 0; i < c->size; i++) {
    const struct sim_lane *l = &c->lanes[i];
    if (l->tr_level > top) top = l->tr_level, pending = false;
    if (l->tr_level == top) pending |= l->tr_pending;
  }
  for (uint32_t i = 0; i < c->size; i++) c->lanes[i].tr_level = top, c->lanes[i].tr_pending = pending;
  if (c->tr) known_merge(c);
  /* the end of the stage's barrier interval: its weight bytes now (every work-item is in the stage
   * the barrier is in: each passes the same stamps before it) */
  struct sim_trace_cta *t = c->tr;
  const uint32_t slot = c->lanes[0].tr_slot;
  if (!t) return;
  /* counted even when the mark cannot be kept (out of memory): later stores stay in their own
   * intervals, and a store whose interval has no mark gets w_rest 0, its writer's end */
  const uint32_t interval = t->bars[slot]++;
  if (grow((void **)&t->marks, &t->capmarks, t->nmarks + 1, sizeof *t->marks))
    t->marks[t->nmarks++] = (struct tr_mark){.slot = slot, .interval = interval, .bytes = t->st[slot].weight_bytes};
}
