/* collectives/heap_chain.c: a heap's steps recorded in a chain: a replay that fails on this rank
 * stops the group, and a replay that a peer's failure ended returns that peer's reason. */
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"
#include "kernels/ar_args.h"

/* What one chain recorded of one heap: the status words its launches report into, and its steps'
 * shapes in order (a replay makes each a step of the group with a header of its own). */
struct chain_steps {
  hm_heap *h;
  const uint32_t **status;
  unsigned nstatus, cap;
  uint64_t *shapes;
  unsigned nshapes, capshapes;
  uint32_t first;  /* the current replay's first step number (0: none published) */
  bool stopped;    /* this replay's comparison stopped the group */
};

/* Before the doorbell: a failed group replays nothing (its launches would wait in vain); else the
 * replay's steps take their numbers and their headers go out, as a direct step's do, so a peer
 * making other steps under those numbers (another chain, another width, one step more or fewer)
 * finds the disagreement while its launch waits, and so does this rank while it waits (poll). */
static hm_status on_replay(void *ctx) {
  struct chain_steps *cs = ctx;
  hm_status s = hm_heap_check(cs->h);
  if (s) return s;
  cs->stopped = false;
  cs->first = 0;
  uint32_t first;
  if ((s = hm_heap_steps_begin(cs->h, cs->shapes, cs->nshapes, &first))) return s;
  cs->first = first;
  return HM_OK;
}

/* Between hm_chain_wait's slices: a disagreement stops the group, whose launches then end at
 * their next poll, and the wait sees them end (the done hook gives the reason). */
static hm_status on_poll(void *ctx) {
  struct chain_steps *cs = ctx;
  if (!cs->first || cs->stopped) return HM_OK;
  return hm_heap_compare_steps(cs->h, cs->first, &cs->stopped);
}

/* The replay's end: this rank's own failure (its queue's fault, the wait's bound, a replay that
 * could not be written) stops the group, so the peers' launches end at their next poll; a replay
 * that ended because the group stopped returns why (a launch's status word, or the heap's). A
 * replay that completed is compared once more: its peers' headers are in place (their pushes,
 * which its launches read, came after them), so steps that completed on pushes laid out alike
 * for other steps are caught rather than returned. */
static hm_status on_done(void *ctx, hm_status s) {
  struct chain_steps *cs = ctx;
  hm_heap *h = cs->h;
  if (s) return s == HM_ERR_PEER ? s : hm_heap_fail(h, s, NULL);
  if (cs->first && !cs->stopped && (s = hm_heap_compare_steps(h, cs->first, &cs->stopped))) return s;
  for (unsigned i = 0; i < cs->nstatus; i++) {
    uint32_t code = __atomic_load_n(cs->status[i], __ATOMIC_ACQUIRE);
    if (!code) continue;
    char why[AR_REASON_BYTES + 200];
    hm_heap_describe(h, code, why, sizeof why);
    return hm_fail(HM_ERR_PEER, "chain replay (rank %u of %u): %s", h->rank, h->tp, why);
  }
  if (cs->stopped) return hm_fail_prefix(hm_heap_check(h), "chain replay (rank %u of %u)", h->rank, h->tp);
  return HM_OK;
}

static void on_release(void *ctx) {
  struct chain_steps *cs = ctx;
  free(cs->status);
  free(cs->shapes);
  free(cs);
}

static const hm_chain_hooks hooks = {.replay = on_replay, .poll = on_poll, .done = on_done, .release = on_release};

hm_status hm_heap_record(hm_heap *h, hm_chain *c, const uint32_t *status, hm_step_kind kind, int32_t layer,
                         uint32_t rows) {
  if (!h || !c || !status) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_record: NULL argument");
  struct chain_steps *cs = hm_chain_watcher(c, &hooks, h);
  if (!cs) {
    if (!(cs = calloc(1, sizeof *cs))) return hm_fail(HM_ERR_NO_MEMORY, "hm_heap_record: out of memory");
    cs->h = h;
    hm_status s = hm_chain_watch(c, &hooks, h, cs);
    if (s) {
      free(cs);
      return s;
    }
  }
  if (cs->nshapes == cs->capshapes) {
    unsigned cap = cs->capshapes ? 2 * cs->capshapes : 4;
    uint64_t *n = realloc(cs->shapes, cap * sizeof *n);
    if (!n) return hm_fail(HM_ERR_NO_MEMORY, "hm_heap_record: out of memory");
    cs->shapes = n, cs->capshapes = cap;
  }
  bool known = false;
  for (unsigned i = 0; i < cs->nstatus; i++) known = known || cs->status[i] == status;
  if (!known && cs->nstatus == cs->cap) {
    unsigned cap = cs->cap ? 2 * cs->cap : 4;
    const uint32_t **n = realloc(cs->status, cap * sizeof *n);
    if (!n) return hm_fail(HM_ERR_NO_MEMORY, "hm_heap_record: out of memory");
    cs->status = n, cs->cap = cap;
  }
  /* nothing fails past here: the step's shape and status word go in together */
  cs->shapes[cs->nshapes++] = hm_heap_shape(kind, layer, rows);
  if (!known) cs->status[cs->nstatus++] = status;
  return HM_OK;
}
