/* collectives/heap.c: the symmetric heap: one uncached arena a rank, exported and attached by every
 * rank in two all-gather rounds (handles, then agreement), torn down in any order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_internal.h"
#include "kernels/ar_args.h"

#define HELLO_MAGIC 0x50484d48u /* "HMHP" */
#define HELLO_VERSION 1u
#define DEFAULT_ROWS 48u
#define DEFAULT_WIDTH 5120u

/* Round 1: who I am, my arena's handle, or why I could not make one. */
struct hello {
  uint32_t magic, version, rank, tp;
  uint32_t ok, pad;
  uint64_t half_bytes, arena_bytes, pid;
  hm_ipc_handle handle;
  char isa[64];
  char err[240];
};
/* Round 2: whether I mapped every peer's arena. */
struct agree {
  uint32_t magic, ok;
  char err[248];
};

size_t hm_allreduce_region_bytes(unsigned tp, uint32_t rows, uint32_t width) {
  return (size_t)tp * rows * (width / 2) * AR_SLOT_BYTES;
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

void hm_coll_describe(uint32_t code, char *buf, size_t cap) {
  uint32_t peer1 = AR_STATUS_PEER1(code), where = AR_STATUS_WHERE(code);
  char site[48];
  if (where == AR_WHERE_STANDALONE) snprintf(site, sizeof site, "the standalone all-reduce");
  else snprintf(site, sizeof site, "site %u", where);
  switch (AR_STATUS_CODE(code)) {
  case AR_ERR_TIMEOUT:
    if (peer1) snprintf(buf, cap, "rank %u's push never arrived: a wait on it timed out (%s)", peer1 - 1, site);
    else snprintf(buf, cap, "a wait on a peer timed out (%s)", site);
    break;
  case AR_ERR_ABORTED:
    if (peer1) snprintf(buf, cap, "the host of rank %u stopped the group", peer1 - 1);
    else snprintf(buf, cap, "a host stopped the group");
    break;
  case AR_ERR_ARGS: snprintf(buf, cap, "a launch's arguments were out of range (%s)", site); break;
  default: snprintf(buf, cap, "unknown status 0x%08x", code);
  }
}

/* Free what a (partial) set-up holds. */
static void release_heap(hm_heap *h) {
  for (unsigned r = 0; r < h->tp; r++)
    if (h->peer[r] && h->peer[r] != h->arena) hm_ipc_detach(h->rt, h->peer[r]);
  if (h->arena) hm_mem_free(h->rt, h->arena);
  if (h->stage) hm_mem_free(h->rt, h->stage);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

/* This rank's part before round 1: the arena, zeroed, exported. */
static hm_status local_setup(hm_heap *h, hm_ipc_handle *handle) {
  hm_status s;
  if ((s = hm_mem_alloc(h->a, HM_POOL_HOST, 4096, 0, (void **)&h->stage))) return s;
  if ((s = hm_mem_alloc(h->a, HM_POOL_UNCACHED, h->arena_bytes, 0, (void **)&h->arena)))
    return hm_fail_prefix(s, "allocating its %zu-byte arena", h->arena_bytes);
  /* zero: no tag is 0, so no poll can take never-written memory for a push */
  if ((s = hm_mem_fill(h->rt, h->arena, 0, h->arena_bytes / 4))) return s;
  if ((s = hm_ipc_export(h->rt, h->arena, handle))) return hm_fail_prefix(s, "exporting its arena");
  return HM_OK;
}

/* The arena table, as this rank maps the arenas, into its control page (the kernels read it). */
static hm_status write_table(hm_heap *h) {
  uint64_t *t = (uint64_t *)h->stage;
  for (unsigned r = 0; r < HM_MAX_TP; r++) t[r] = r < h->tp ? (uint64_t)(uintptr_t)h->peer[r] : 0;
  hm_signal none = {0};
  return hm_mem_copy(h->rt, h->arena + AR_PEERS_OFF, t, 8 * HM_MAX_TP, none);
}

hm_status hm_heap_create(hm_agent *a, const hm_heap_config *cfg, const hm_bootstrap *boot, hm_heap **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: out is NULL");
  *out = NULL;
  if (!a || !cfg || !boot || !boot->allgather) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: NULL argument");
  if (cfg->tp < 1 || cfg->tp > HM_MAX_TP || cfg->rank >= cfg->tp)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: rank %u of %u (tp is 1 .. %d)", cfg->rank, cfg->tp, HM_MAX_TP);
  const hm_agent_info *ai = hm_agent_info_of(a);
  if (!ai || !ai->pool_present[HM_POOL_UNCACHED])
    return hm_fail(HM_ERR_UNSUPPORTED, "hm_heap_create: agent %u has no uncached (extended fine-grained) pool",
                   hm_agent_index(a));
  size_t half = cfg->half_bytes ? cfg->half_bytes : hm_allreduce_region_bytes(cfg->tp, DEFAULT_ROWS, DEFAULT_WIDTH);
  if (half > ((size_t)1 << 40)) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: a half of %zu bytes", half);
  half = round_up(half, 4096);
  size_t granule = ai->pool_granule[HM_POOL_UNCACHED] ? ai->pool_granule[HM_POOL_UNCACHED] : 4096;
  uint64_t timeout = cfg->timeout_ns ? cfg->timeout_ns : 30000000000ull;
  uint64_t deadline = hm_coll_now_ns() + timeout;

  hm_heap *h = calloc(1, sizeof *h);
  if (!h) return hm_fail(HM_ERR_NO_MEMORY, "hm_heap_create: out of memory");
  pthread_mutex_init(&h->lock, NULL);
  h->rt = hm_agent_runtime(a), h->a = a, h->rank = cfg->rank, h->tp = cfg->tp;
  h->half_bytes = half;
  h->arena_bytes = round_up(AR_CTRL_BYTES + 2 * half, granule);

  /* round 1: every rank's handle (or its failure, so the others fail at once, naming it) */
  struct hello mine = {.magic = HELLO_MAGIC, .version = HELLO_VERSION, .rank = h->rank, .tp = h->tp,
                       .half_bytes = half, .arena_bytes = h->arena_bytes, .pid = (uint64_t)getpid()};
  snprintf(mine.isa, sizeof mine.isa, "%s", ai->name);
  if (local_setup(h, &mine.handle) == HM_OK) mine.ok = 1;
  else snprintf(mine.err, sizeof mine.err, "%s", hm_errmsg());
  struct hello all[HM_MAX_TP];
  hm_status s = boot->allgather(boot->ctx, h->rank, h->tp, &mine, sizeof mine, all, hm_coll_left(deadline));
  if (s) {
    hm_fail_prefix(s, "heap set-up (rank %u of %u)", h->rank, h->tp);
    release_heap(h);
    return s;
  }
  /* every rank reads the same table, so every rank names the same culprit: the first that
   * failed, else the first that disagrees with rank 0 */
  char why[400] = "";
  for (unsigned r = 0; r < h->tp && !why[0]; r++) {
    const struct hello *o = &all[r];
    if (o->magic != HELLO_MAGIC || o->version != HELLO_VERSION || o->rank != r || o->tp != h->tp)
      snprintf(why, sizeof why, "rank %u's set-up message is not rank %u of %u (a bootstrap that mixes up ranks?)", r, r,
               h->tp);
    else if (!o->ok)
      snprintf(why, sizeof why, "rank %u could not set up: %.240s", r, o->err);
  }
  for (unsigned r = 1; r < h->tp && !why[0]; r++) {
    if (all[r].half_bytes != all[0].half_bytes)
      snprintf(why, sizeof why, "rank %u has halves of %llu bytes, rank 0 of %llu (every rank must ask the same)", r,
               (unsigned long long)all[r].half_bytes, (unsigned long long)all[0].half_bytes);
    else if (strncmp(all[r].isa, all[0].isa, sizeof all[0].isa) != 0)
      snprintf(why, sizeof why, "rank %u runs on %.63s, rank 0 on %.63s", r, all[r].isa, all[0].isa);
  }
  if (why[0]) {
    release_heap(h);
    return hm_fail(HM_ERR_PEER, "heap set-up (rank %u of %u): %s", cfg->rank, cfg->tp, why);
  }

  /* map every peer's arena, then agree: one rank's failure is everyone's */
  struct agree ok = {.magic = HELLO_MAGIC, .ok = 1};
  h->peer[h->rank] = h->arena;
  for (unsigned r = 0; r < h->tp && ok.ok; r++) {
    if (r == h->rank) continue;
    void *p = NULL;
    if (all[r].arena_bytes != h->arena_bytes || hm_ipc_attach(h->rt, &all[r].handle, &h->a, 1, &p) != HM_OK) {
      ok.ok = 0;
      if (all[r].arena_bytes != h->arena_bytes)
        snprintf(ok.err, sizeof ok.err, "rank %u's arena is %llu bytes, not %zu", r,
                 (unsigned long long)all[r].arena_bytes, h->arena_bytes);
      else
        snprintf(ok.err, sizeof ok.err, "could not map rank %u's arena: %.200s", r, hm_errmsg());
    }
    h->peer[r] = p;
  }
  if (ok.ok && write_table(h) != HM_OK) {
    ok.ok = 0;
    snprintf(ok.err, sizeof ok.err, "could not write its arena table: %.200s", hm_errmsg());
  }
  struct agree agreed[HM_MAX_TP];
  s = boot->allgather(boot->ctx, h->rank, h->tp, &ok, sizeof ok, agreed, hm_coll_left(deadline));
  if (s) {
    hm_fail_prefix(s, "heap set-up (rank %u of %u)", h->rank, h->tp);
    release_heap(h);
    return s;
  }
  for (unsigned r = 0; r < h->tp; r++)
    if (agreed[r].magic != HELLO_MAGIC || !agreed[r].ok) {
      snprintf(why, sizeof why, "rank %u %.260s", r, agreed[r].magic == HELLO_MAGIC ? agreed[r].err : "sent garbage");
      release_heap(h);
      return hm_fail(HM_ERR_PEER, "heap set-up (rank %u of %u): %s", cfg->rank, cfg->tp, why);
    }
  hm_log(HM_LOG_INFO, "heap: rank %u of %u, arena %zu bytes, halves of %zu", h->rank, h->tp, h->arena_bytes, half);
  hm_runtime_retain(h->rt); /* its arena and mappings are the runtime's */
  *out = h;
  return HM_OK;
}

hm_status hm_heap_destroy(hm_heap *h) {
  if (!h) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_destroy: NULL heap");
  pthread_mutex_lock(&h->lock);
  unsigned users = h->users;
  pthread_mutex_unlock(&h->lock);
  if (users)
    return hm_fail(HM_ERR_BUSY,
                   "hm_heap_destroy: %u object(s) still use the heap (all-reduces, FFN/K2 runners, layers): destroy "
                   "them first",
                   users);
  hm_runtime_release(h->rt);
  release_heap(h);
  return HM_OK;
}

void hm_heap_retain(hm_heap *h) {
  if (!h) return;
  pthread_mutex_lock(&h->lock);
  h->users++;
  pthread_mutex_unlock(&h->lock);
}

void hm_heap_release(hm_heap *h) {
  if (!h) return;
  pthread_mutex_lock(&h->lock);
  if (h->users) h->users--;
  pthread_mutex_unlock(&h->lock);
}

unsigned hm_heap_rank(const hm_heap *h) { return h ? h->rank : 0; }
unsigned hm_heap_tp(const hm_heap *h) { return h ? h->tp : 0; }
hm_agent *hm_heap_agent(const hm_heap *h) { return h ? h->a : NULL; }
size_t hm_heap_half_bytes(const hm_heap *h) { return h ? h->half_bytes : 0; }

hm_status hm_heap_reserve(hm_heap *h, size_t bytes, size_t *offset) {
  if (!h || !offset || bytes == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_reserve: NULL argument or zero bytes");
  pthread_mutex_lock(&h->lock);
  size_t at = round_up(h->reserved, 128); /* regions never share a cache line */
  if (at > h->half_bytes || bytes > h->half_bytes - at) {
    size_t free_bytes = at < h->half_bytes ? h->half_bytes - at : 0;
    pthread_mutex_unlock(&h->lock);
    return hm_fail(HM_ERR_NO_MEMORY, "hm_heap_reserve: %zu bytes asked, %zu of the heap's %zu-byte half free", bytes,
                   free_bytes, h->half_bytes);
  }
  h->reserved = at + bytes;
  pthread_mutex_unlock(&h->lock);
  *offset = at;
  return HM_OK;
}

hm_status hm_heap_link(const hm_heap *h, uint32_t *status, uint64_t timeout_ns, struct hm_ar_link *out) {
  if (!h || !status || !out || ((uintptr_t)status & 3))
    return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_link: NULL or unaligned argument");
  if (timeout_ns == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_link: a zero bound on waits would fail every wait");
  *out = (struct hm_ar_link){.peers = (uint64_t)(uintptr_t)(h->arena + AR_PEERS_OFF),
                          .status = (uint64_t)(uintptr_t)status,
                          .half_bytes = h->half_bytes,
                          .deadline_ticks = timeout_ns / (1000000000ull / 100000000ull), /* 100 MHz */
                          .rank = h->rank,
                          .tp = h->tp};
  return HM_OK;
}

/* This rank's abort word, through the copy engine (the arena need not be host-mapped). */
static hm_status read_abort(hm_heap *h, uint32_t *code) {
  hm_signal none = {0};
  pthread_mutex_lock(&h->lock);
  hm_status s = hm_mem_copy(h->rt, h->stage + 64, h->arena + AR_ABORT_OFF, 4, none);
  *code = h->stage[64];
  pthread_mutex_unlock(&h->lock);
  return s;
}

hm_status hm_heap_check(hm_heap *h) {
  if (!h) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_check: NULL heap");
  uint32_t code;
  hm_status s = read_abort(h, &code);
  if (s) return s;
  if (!code) return HM_OK;
  char why[200];
  hm_coll_describe(code, why, sizeof why);
  return hm_fail(HM_ERR_PEER, "heap (rank %u of %u): %s", h->rank, h->tp, why);
}

hm_status hm_heap_abort(hm_heap *h) {
  if (!h) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_abort: NULL heap");
  hm_signal none = {0};
  pthread_mutex_lock(&h->lock);
  hm_status s = HM_OK;
  h->stage[80] = AR_STATUS(AR_ERR_ABORTED, h->rank + 1u, AR_WHERE_HOST);
  for (unsigned r = 0; r < h->tp && !s; r++) {
    /* a cause already there (a kernel's timeout) stays: it is the root */
    s = hm_mem_copy(h->rt, h->stage + 81, h->peer[r] + AR_ABORT_OFF, 4, none);
    if (!s && h->stage[81] == 0) s = hm_mem_copy(h->rt, h->peer[r] + AR_ABORT_OFF, h->stage + 80, 4, none);
  }
  pthread_mutex_unlock(&h->lock);
  return s;
}
