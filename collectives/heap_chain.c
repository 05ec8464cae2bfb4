/* collectives/heap_chain.c: a heap's steps recorded in a chain: a replay that fails on this rank
 * stops the group, and a replay that a peer's failure ended returns that peer's reason. */
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"
#include "kernels/ar_args.h"

/* What one chain recorded of one heap: the status words its launches report into. */
struct chain_steps {
  hm_heap *h;
  const uint32_t **status;
  unsigned nstatus, cap;
};

/* Before the doorbell: a failed group replays nothing (its launches would wait in vain). */
static hm_status on_replay(void *ctx) {
  struct chain_steps *cs = ctx;
  return hm_heap_check(cs->h);
}

/* The replay's end: this rank's own failure (its queue's fault, the wait's bound, a replay that
 * could not be written) stops the group, so the peers' launches end at their next poll; a replay
 * that ended because the group stopped returns why (a launch's status word, or the heap's). */
static hm_status on_done(void *ctx, hm_status s) {
  struct chain_steps *cs = ctx;
  hm_heap *h = cs->h;
  if (s) return s == HM_ERR_PEER ? s : hm_heap_fail(h, s, NULL);
  for (unsigned i = 0; i < cs->nstatus; i++) {
    uint32_t code = __atomic_load_n(cs->status[i], __ATOMIC_ACQUIRE);
    if (!code) continue;
    char why[AR_REASON_BYTES + 200];
    hm_heap_describe(h, code, why, sizeof why);
    return hm_fail(HM_ERR_PEER, "chain replay (rank %u of %u): %s", h->rank, h->tp, why);
  }
  return HM_OK;
}

static void on_release(void *ctx) {
  struct chain_steps *cs = ctx;
  free(cs->status);
  free(cs);
}

static const hm_chain_hooks hooks = {.replay = on_replay, .done = on_done, .release = on_release};

hm_status hm_heap_record(hm_heap *h, hm_chain *c, const uint32_t *status) {
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
  for (unsigned i = 0; i < cs->nstatus; i++)
    if (cs->status[i] == status) return HM_OK;
  if (cs->nstatus == cs->cap) {
    unsigned cap = cs->cap ? 2 * cs->cap : 4;
    const uint32_t **n = realloc(cs->status, cap * sizeof *n);
    if (!n) return hm_fail(HM_ERR_NO_MEMORY, "hm_heap_record: out of memory");
    cs->status = n, cs->cap = cap;
  }
  cs->status[cs->nstatus++] = status;
  return HM_OK;
}
