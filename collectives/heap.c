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
/* the host stage page: words 64.. the abort words' copies; bytes from STAGE_HEADERS_OUT this
 * rank's header ring going out, from STAGE_HEADERS_IN the arena's header rings read back; then a
 * reason going out, one coming in */
#define STAGE_HEADERS_OUT 1024u
#define STAGE_HEADERS_IN 1536u
#define STAGE_REASON_OUT 2048u
#define STAGE_REASON_IN (STAGE_REASON_OUT + AR_REASON_BYTES)
_Static_assert(STAGE_REASON_IN + AR_REASON_BYTES <= 4096, "the reasons fit the stage page");
_Static_assert(STAGE_HEADERS_OUT + 8u * AR_HEADER_RING <= STAGE_HEADERS_IN &&
                   STAGE_HEADERS_IN + 8u * AR_HEADER_RING * AR_MAX_TP <= STAGE_REASON_OUT,
               "the header rings fit the stage page");

/* Round 1: who I am, my arena's handle, or why I could not make one. */
struct hello {
  uint32_t magic, version, rank, tp;
  uint32_t ok, protocol;
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

const char *hm_heap_site_name(uint32_t where) {
  switch (where) {
  case AR_WHERE_STANDALONE: return "the standalone all-reduce";
  case AR_WHERE_ATTN: return "the attention output's all-reduce";
  case AR_WHERE_MOE: return "the MoE output's all-reduce";
  default: return NULL;
  }
}

static void describe_code(uint32_t code, char *buf, size_t cap) {
  uint32_t peer1 = AR_STATUS_PEER1(code), where = AR_STATUS_WHERE(code);
  char site[48];
  const char *name = hm_heap_site_name(where);
  if (name) snprintf(site, sizeof site, "%s", name);
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
  case AR_ERR_FAILED:
    snprintf(buf, cap, "rank %u failed (%s)", peer1 ? peer1 - 1 : 0, hm_status_name((hm_status)where));
    break;
  case AR_ERR_STEP: snprintf(buf, cap, "the ranks' steps disagree (seen by rank %u)", peer1 ? peer1 - 1 : 0); break;
  case AR_ERR_ARGS: snprintf(buf, cap, "a launch's arguments were out of range (%s)", site); break;
  default: snprintf(buf, cap, "unknown status 0x%08x", code);
  }
}

void hm_heap_describe(hm_heap *h, uint32_t code, char *buf, size_t cap) {
  describe_code(code, buf, cap);
  uint32_t peer1 = AR_STATUS_PEER1(code);
  if ((AR_STATUS_CODE(code) != AR_ERR_FAILED && AR_STATUS_CODE(code) != AR_ERR_STEP) || !peer1 || peer1 > h->tp) return;
  /* the rank that stopped the group wrote its reason into its own arena before any abort word */
  char *why = (char *)h->stage + STAGE_REASON_IN;
  hm_signal none = {0};
  pthread_mutex_lock(&h->lock);
  hm_status s = hm_mem_copy(h->rt, why, h->peer[peer1 - 1] + AR_REASON_OFF, AR_REASON_BYTES, none);
  why[AR_REASON_BYTES - 1] = 0;
  size_t n = strlen(buf);
  if (!s && why[0] && n < cap) snprintf(buf + n, cap - n, ": %s", why);
  pthread_mutex_unlock(&h->lock);
}

/* Free what a (partial) set-up holds. */
static void release_heap(hm_heap *h) {
  if (h->copies.handle) hm_signal_destroy(h->rt, h->copies);
  for (unsigned r = 0; r < h->tp; r++)
    if (h->peer[r] && h->peer[r] != h->arena) hm_ipc_detach(h->rt, h->peer[r]);
  if (h->arena) hm_mem_free(h->rt, h->arena);
  if (h->stage) hm_mem_free(h->rt, h->stage);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

/* This rank's part before round 1: the arena (control page zeroed, halves empty), exported. */
static hm_status local_setup(hm_heap *h, hm_ipc_handle *handle) {
  hm_status s;
  if ((s = hm_mem_alloc(h->a, HM_POOL_HOST, 4096, 0, (void **)&h->stage))) return s;
  if ((s = hm_signal_create(h->rt, 0, &h->copies))) return s;
  if ((s = hm_mem_alloc(h->a, HM_POOL_UNCACHED, h->arena_bytes, 0, (void **)&h->arena)))
    return hm_fail_prefix(s, "allocating its %zu-byte arena", h->arena_bytes);
  /* every slot AR_EMPTY: the word protocol's "nothing pushed", and no tag of the pair protocol (tags
   * are even), so no poll can take never-written memory for a push; the control page zero (healthy) */
  if ((s = hm_mem_fill(h->rt, h->arena, 0, AR_CTRL_BYTES / 4))) return s;
  if ((s = hm_mem_fill(h->rt, h->arena + AR_CTRL_BYTES, AR_EMPTY, (h->arena_bytes - AR_CTRL_BYTES) / 4))) return s;
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

/* A rank that cannot even start its set-up (no agent, no uncached pool, a bad size) still takes
 * part in round 1, as failed with its reason, so the others fail at once naming it instead of
 * waiting out the set-up's bound for a rank that never arrives. Returns s, its message kept. */
static hm_status join_failed(const hm_heap_config *cfg, const hm_bootstrap *boot, hm_status s) {
  struct hello mine = {.magic = HELLO_MAGIC, .version = HELLO_VERSION, .rank = cfg->rank, .tp = cfg->tp,
                       .pid = (uint64_t)getpid()};
  snprintf(mine.err, sizeof mine.err, "%s", hm_errmsg());
  char msg[sizeof mine.err];
  snprintf(msg, sizeof msg, "%s", hm_errmsg());
  struct hello *all = calloc(cfg->tp, sizeof *all);
  if (all) {
    (void)boot->allgather(boot->ctx, cfg->rank, cfg->tp, &mine, sizeof mine, all,
                          cfg->timeout_ns ? cfg->timeout_ns : 30000000000ull);
    free(all);
  }
  return hm_fail(s, "%s", msg);
}

hm_status hm_heap_create(hm_agent *a, const hm_heap_config *cfg, const hm_bootstrap *boot, hm_heap **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: out is NULL");
  *out = NULL;
  if (!cfg || !boot || !boot->allgather) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: NULL argument");
  if (cfg->tp < 1 || cfg->tp > HM_MAX_TP || cfg->rank >= cfg->tp)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: rank %u of %u (tp is 1 .. %d)", cfg->rank, cfg->tp, HM_MAX_TP);
  const hm_agent_info *ai = a ? hm_agent_info_of(a) : NULL;
  if (!ai || !ai->pool_present[HM_POOL_UNCACHED])
    return join_failed(cfg, boot,
                       a ? hm_fail(HM_ERR_UNSUPPORTED, "hm_heap_create: agent %u has no uncached (extended "
                                                       "fine-grained) pool", hm_agent_index(a))
                         : hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: rank %u has no agent (NULL)", cfg->rank));
  size_t half = cfg->half_bytes ? cfg->half_bytes : hm_allreduce_region_bytes(cfg->tp, DEFAULT_ROWS, DEFAULT_WIDTH);
  if (half > ((size_t)1 << 40))
    return join_failed(cfg, boot, hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: a half of %zu bytes", half));
  half = round_up(half, 4096);
  hm_ar_protocol protocol = cfg->protocol == HM_AR_PROTOCOL_DEFAULT ? HM_AR_PROTOCOL_WORD : cfg->protocol;
  if (protocol != HM_AR_PROTOCOL_PAIR && protocol != HM_AR_PROTOCOL_WORD)
    return join_failed(cfg, boot, hm_fail(HM_ERR_INVALID_ARG, "hm_heap_create: protocol %d (0 default, 1 pair, 2 word)",
                                          (int)cfg->protocol));
  size_t granule = ai->pool_granule[HM_POOL_UNCACHED] ? ai->pool_granule[HM_POOL_UNCACHED] : 4096;
  uint64_t timeout = cfg->timeout_ns ? cfg->timeout_ns : 30000000000ull;
  uint64_t deadline = hm_coll_now_ns() + timeout;

  hm_heap *h = calloc(1, sizeof *h);
  if (!h) return hm_fail(HM_ERR_NO_MEMORY, "hm_heap_create: out of memory");
  pthread_mutex_init(&h->lock, NULL);
  h->rt = hm_agent_runtime(a), h->a = a, h->rank = cfg->rank, h->tp = cfg->tp;
  h->half_bytes = half;
  h->protocol = protocol;
  h->arena_bytes = round_up(AR_CTRL_BYTES + 2 * half, granule);

  /* round 1: every rank's handle (or its failure, so the others fail at once, naming it) */
  struct hello mine = {.magic = HELLO_MAGIC, .version = HELLO_VERSION, .rank = h->rank, .tp = h->tp,
                       .protocol = protocol, .half_bytes = half, .arena_bytes = h->arena_bytes,
                       .pid = (uint64_t)getpid()};
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
    else if (all[r].protocol != all[0].protocol)
      snprintf(why, sizeof why, "rank %u asks for the %s protocol, rank 0 for the %s one (every rank must ask the same)",
               r, hm_ar_protocol_name(all[r].protocol), hm_ar_protocol_name(all[0].protocol));
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
  hm_log(HM_LOG_INFO, "heap: rank %u of %u, arena %zu bytes, halves of %zu, %s protocol", h->rank, h->tp,
         h->arena_bytes, half, hm_ar_protocol_name(protocol));
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
hm_ar_protocol hm_heap_protocol(const hm_heap *h) { return h ? h->protocol : HM_AR_PROTOCOL_DEFAULT; }

const char *hm_ar_protocol_name(hm_ar_protocol p) {
  switch (p) {
  case HM_AR_PROTOCOL_DEFAULT: return "default";
  case HM_AR_PROTOCOL_PAIR: return "pair";
  case HM_AR_PROTOCOL_WORD: return "word";
  }
  return "unknown";
}

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
                          .tp = h->tp,
                          .proto = h->protocol == HM_AR_PROTOCOL_WORD ? AR_PROTO_WORD : AR_PROTO_PAIR};
  return HM_OK;
}

/* This rank's abort word, through the copy engine (the arena need not be host-mapped). */
hm_status hm_heap_read_abort(hm_heap *h, uint32_t *code) {
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
  hm_status s = hm_heap_read_abort(h, &code);
  if (s) return s;
  if (!code) return HM_OK;
  char why[AR_REASON_BYTES + 200];
  hm_heap_describe(h, code, why, sizeof why);
  return hm_fail(HM_ERR_PEER, "heap (rank %u of %u): %s", h->rank, h->tp, why);
}

/* Every rank's abort word takes `code` unless it holds a cause already (a kernel's timeout, an
 * earlier failure): the first is the root. Caller holds the lock. */
static hm_status set_abort_words(hm_heap *h, uint32_t code) {
  hm_signal none = {0};
  hm_status s = HM_OK;
  h->stage[80] = code;
  for (unsigned r = 0; r < h->tp && !s; r++) {
    s = hm_mem_copy(h->rt, h->stage + 81, h->peer[r] + AR_ABORT_OFF, 4, none);
    if (!s && h->stage[81] == 0) s = hm_mem_copy(h->rt, h->peer[r] + AR_ABORT_OFF, h->stage + 80, 4, none);
  }
  return s;
}

hm_status hm_heap_abort(hm_heap *h) {
  if (!h) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_abort: NULL heap");
  pthread_mutex_lock(&h->lock);
  hm_status s = set_abort_words(h, AR_STATUS(AR_ERR_ABORTED, h->rank + 1u, AR_WHERE_HOST));
  pthread_mutex_unlock(&h->lock);
  return s;
}

/* This rank's words into its arena, where a peer naming it reads them (prefix, then msg, cut to
 * one reason's bytes). Caller holds the lock. */
static hm_status write_reason(hm_heap *h, const char *prefix, const char *msg) {
  hm_signal none = {0};
  char *out = (char *)h->stage + STAGE_REASON_OUT;
  memset(out, 0, AR_REASON_BYTES);
  snprintf(out, AR_REASON_BYTES, "%s%.*s", prefix, (int)(AR_REASON_BYTES - 1), msg);
  return hm_mem_copy(h->rt, h->arena + AR_REASON_OFF, out, AR_REASON_BYTES, none);
}

/* Stop the group with `code`, this rank's words `msg` going first into its arena (once: the first
 * reason stays with the first cause). */
static hm_status stop_group(hm_heap *h, uint32_t code, const char *msg) {
  pthread_mutex_lock(&h->lock);
  hm_status w = HM_OK;
  if (!h->failed) {
    w = write_reason(h, "", msg);
    h->failed = true;
  }
  if (!w) w = set_abort_words(h, code);
  pthread_mutex_unlock(&h->lock);
  if (w) hm_log(HM_LOG_ERROR, "heap (rank %u of %u): could not stop the group: %s", h->rank, h->tp, hm_errmsg());
  hm_log(HM_LOG_INFO, "heap (rank %u of %u): stopped the group: %s", h->rank, h->tp, msg);
  return w;
}

hm_status hm_heap_fail(hm_heap *h, hm_status s, const char *reason) {
  if (!h || s == HM_OK) return s;
  /* the caller's message is its own answer: keep it whatever the copies below do */
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", reason ? reason : hm_errmsg());
  stop_group(h, AR_STATUS(AR_ERR_FAILED, h->rank + 1u, (uint32_t)s), msg);
  return hm_fail(s, "%s", msg);
}

/* ---------------------------------------------------------------- step headers
 *
 * One u64 a step: its number (32 bits, from 1), kind (4), layer + 1 (12) and rows (16). A rank
 * keeps its latest AR_HEADER_RING steps' headers, step n in slot n % AR_HEADER_RING of its row in
 * every arena, each written whole by its copy, so a host reads a peer's slot as one step's header
 * or a later one's, every peer's row in one copy of its own arena's table. A direct step publishes
 * one header; a replay publishes all of its recorded steps' before its doorbell, so a peer whose
 * step of the same number is another shape, direct or replayed, sees the disagreement. */

#define RING AR_HEADER_RING

static uint64_t header_of(uint32_t n, uint32_t kind, int32_t layer, uint32_t rows) {
  return (uint64_t)n << 32 | (uint64_t)(kind & 0xfu) << 28 | (uint64_t)((uint32_t)(layer + 1) & 0xfffu) << 16 |
         (rows & 0xffffu);
}

uint64_t hm_heap_shape(hm_step_kind kind, int32_t layer, uint32_t rows) { return header_of(0, kind, layer, rows); }

#define KIND_REFUSED 0xfu /* a step this rank refused before its launch; rows: its hm_status */

static void describe_header(uint64_t hd, char *buf, size_t cap) {
  uint32_t kind = (uint32_t)(hd >> 28) & 0xfu, layer1 = (uint32_t)(hd >> 16) & 0xfffu, rows = (uint32_t)hd & 0xffffu;
  const char *k = kind == HM_STEP_FFN ? "an FFN launch step" : kind == HM_STEP_K2 ? "a K2 step"
                  : kind == HM_STEP_ALLREDUCE ? "an all-reduce" : "a step";
  if (layer1) snprintf(buf, cap, "%s of layer %u, %u rows", k, layer1 - 1, rows);
  else snprintf(buf, cap, "%s of %u rows", k, rows);
}

/* This rank's headers of steps first .. first + n - 1 (n <= RING, already in h->mine) into its row
 * of every arena, the copies in flight together, one wait for all. Caller holds the lock. */
static hm_status publish(hm_heap *h, uint32_t first, unsigned n) {
  uint8_t *out = (uint8_t *)h->stage + STAGE_HEADERS_OUT;
  memcpy(out, h->mine, sizeof h->mine);
  unsigned a = first % RING, n1 = n < RING - a ? n : RING - a, n2 = n - n1; /* the ring may wrap */
  unsigned want = h->tp * (n2 ? 2u : 1u), issued = 0;
  hm_signal_store(h->rt, h->copies, want);
  hm_status s = HM_OK;
  for (unsigned r = 0; r < h->tp && !s; r++) {
    uint8_t *row = h->peer[r] + AR_HEADERS_OFF + 8u * RING * h->rank;
    if (!(s = hm_mem_copy(h->rt, row + 8u * a, out + 8u * a, 8u * n1, h->copies))) issued++;
    if (!s && n2 && !(s = hm_mem_copy(h->rt, row, out, 8u * n2, h->copies))) issued++;
  }
  /* each copy issued counts the signal down by one */
  hm_status w = hm_signal_wait(h->rt, h->copies, HM_WAIT_LT, (int64_t)(want - issued) + 1, 60000000000ull, false, NULL);
  return s ? s : w;
}

/* The next step takes the next number with header hd's shape. Caller holds the lock. */
static uint32_t take_number(hm_heap *h, uint64_t shape) {
  uint32_t n = (uint32_t)(h->header >> 32) + 1u;
  h->header = (uint64_t)n << 32 | (shape & 0xffffffffu);
  h->mine[n % RING] = h->header;
  return n;
}

hm_status hm_heap_step_begin(hm_heap *h, hm_step_kind kind, int32_t layer, uint32_t rows) {
  if (!h) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_step_begin: NULL heap");
  pthread_mutex_lock(&h->lock);
  hm_status s = publish(h, take_number(h, hm_heap_shape(kind, layer, rows)), 1);
  pthread_mutex_unlock(&h->lock);
  return s;
}

hm_status hm_heap_steps_begin(hm_heap *h, const uint64_t *shapes, unsigned n, uint32_t *first) {
  if (!h || !first || (n && !shapes)) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_steps_begin: NULL argument");
  pthread_mutex_lock(&h->lock);
  *first = (uint32_t)(h->header >> 32) + 1u;
  for (unsigned i = 0; i < n; i++) take_number(h, shapes[i]);
  /* a replay of more steps than the ring holds publishes (and compares) its last RING */
  unsigned kept = n < RING ? n : RING;
  hm_status s = kept ? publish(h, *first + (n - kept), kept) : HM_OK;
  pthread_mutex_unlock(&h->lock);
  return s;
}

hm_status hm_heap_step_refused(hm_heap *h, hm_status s) {
  if (!h || s == HM_OK || s == HM_ERR_PEER || h->tp == 1) return s;
  char msg[AR_REASON_BYTES];
  snprintf(msg, sizeof msg, "%s", hm_errmsg());
  char prefix[40];
  snprintf(prefix, sizeof prefix, "refused its step %u: ", (unsigned)(h->header >> 32) + 1u);
  pthread_mutex_lock(&h->lock);
  /* the reason first (a peer that sees the header reads it), unless a failure's reason is there */
  hm_status w = h->failed ? HM_OK : write_reason(h, prefix, msg);
  /* The refusal takes the step's number, as a launch would: a peer that launched this step sees
   * the refusal under its own number, and the next step, launched by all, has a number of its
   * own. Were the number left for the next step, a peer already in that step would read this
   * rank's stale refusal under its number while this rank was still on its way (seen under chaos:
   * a refused step and a good one after it stopped the group). Ranks that all refuse alike all
   * take the number, and stay in step. */
  uint32_t n = take_number(h, header_of(0, KIND_REFUSED, -1, (uint32_t)s));
  if (!w) w = publish(h, n, 1);
  pthread_mutex_unlock(&h->lock);
  if (w) hm_log(HM_LOG_ERROR, "heap (rank %u of %u): could not tell the peers of a refused step: %s", h->rank, h->tp,
                hm_errmsg());
  return hm_fail(s, "%s", msg);
}

/* The first (lowest step, then lowest rank) of the peers' headers numbered lo .. latest that is
 * not this rank's header of that number: *rank_out, *step_out and *hd_out; false if none. */
static bool find_disagreement(const hm_heap *h, const uint64_t *t, uint32_t lo, uint32_t latest, unsigned *rank_out,
                              uint32_t *step_out, uint64_t *hd_out) {
  for (uint32_t m = lo; m <= latest && m >= lo; m++)
    for (unsigned r = 0; r < h->tp; r++) {
      uint64_t hd = t[r * RING + m % RING];
      if (r == h->rank || hd >> 32 != m || hd == h->mine[m % RING]) continue;
      *rank_out = r, *step_out = m, *hd_out = hd;
      return true;
    }
  return false;
}

hm_status hm_heap_compare_steps(hm_heap *h, uint32_t first, bool *stopped) {
  hm_signal none = {0};
  uint64_t t[AR_MAX_TP * RING];
  uint32_t latest = (uint32_t)(h->header >> 32);
  /* only the ring's steps are still in it */
  uint32_t lo = first ? first : 1u;
  if (latest >= RING && lo < latest - RING + 1u) lo = latest - RING + 1u;
  if (!latest || lo > latest) return HM_OK;
  hm_status s = HM_OK;
  for (int look = 0; look < 2 && !s; look++) {
    pthread_mutex_lock(&h->lock);
    uint8_t *in = (uint8_t *)h->stage + STAGE_HEADERS_IN;
    s = hm_mem_copy(h->rt, in, h->arena + AR_HEADERS_OFF, 8u * RING * h->tp, none);
    memcpy(t, in, 8u * RING * h->tp);
    pthread_mutex_unlock(&h->lock);
    unsigned r;
    uint32_t m;
    uint64_t hd;
    if (s || !find_disagreement(h, t, lo, latest, &r, &m, &hd)) return s;
    if (look == 0) continue; /* seen once: look again, a copy racing that peer's next header */
    *stopped = true;
    if ((uint32_t)(hd >> 28 & 0xfu) == KIND_REFUSED) {
      /* the peer refused the step this rank launched: it names itself and its reason */
      pthread_mutex_lock(&h->lock);
      s = set_abort_words(h, AR_STATUS(AR_ERR_FAILED, r + 1u, (uint32_t)hd & 0xffffu));
      pthread_mutex_unlock(&h->lock);
      return s;
    }
    char a[96], b[96], msg[400];
    describe_header(hd, a, sizeof a);
    describe_header(h->mine[m % RING], b, sizeof b);
    snprintf(msg, sizeof msg, "rank %u's step %u is %s, rank %u's is %s (every rank must make the same steps)", r,
             (unsigned)m, a, h->rank, b);
    return stop_group(h, AR_STATUS(AR_ERR_STEP, h->rank + 1u, 0u), msg);
  }
  return s;
}

uint32_t hm_heap_step_number(hm_heap *h) {
  pthread_mutex_lock(&h->lock);
  uint32_t n = (uint32_t)(h->header >> 32);
  pthread_mutex_unlock(&h->lock);
  return n;
}

hm_status hm_heap_wait_step(hm_heap *h, hm_queue *q, hm_signal done, uint64_t timeout_ns) {
  if (!h || !q) return hm_fail(HM_ERR_INVALID_ARG, "hm_heap_wait_step: NULL heap or queue");
  return hm_heap_wait_steps(h, q, done, hm_heap_step_number(h), timeout_ns);
}

hm_status hm_heap_wait_steps(hm_heap *h, hm_queue *q, hm_signal done, uint32_t first, uint64_t timeout_ns) {
  uint64_t start = hm_coll_now_ns(), slice = 2000000ull; /* 2 ms, growing to 50 ms */
  uint32_t step = first; /* 0: no step has begun */
  bool stopped = false;
  for (;;) {
    uint64_t spent = hm_coll_now_ns() - start, left = spent < timeout_ns ? timeout_ns - spent : 0;
    hm_status s = hm_signal_wait(h->rt, done, HM_WAIT_LT, 1, left < slice ? left : slice, false, NULL);
    /* Ended: the peers' headers of this step are in place (its pushes, which this launch read,
     * came after them), so a step that completed on pushes laid out alike for another step (the
     * same rows, another kind) is caught here rather than returning its mixture. */
    if (s == HM_OK) {
      if (step && !stopped && (s = hm_heap_compare_steps(h, step, &stopped))) return s;
      /* a group stopped while this launch ran, or a disagreement found now, is the step's answer */
      return stopped ? hm_heap_check(h) : HM_OK;
    }
    /* A signal wait reports the first fault of any queue of the runtime, once: another rank's (a
     * thread a rank) is that rank's to report, and its host stops the group; this rank's own
     * queue keeps its fault (hm_queue_status), whichever thread the signal wait told. */
    if (s == HM_ERR_QUEUE_FAULT || s == HM_ERR_TIMEOUT) s = hm_queue_status(q) ? HM_ERR_QUEUE_FAULT : HM_ERR_TIMEOUT;
    if (s != HM_ERR_TIMEOUT) return s;
    if (!left)
      return hm_fail(HM_ERR_TIMEOUT, "the launch had not ended after %.3f s (the step bound)", timeout_ns / 1e9);
    /* A step that takes this long may be waiting for a peer in another step: once the group is
     * stopped, the launch ends at its next poll, and this wait sees it end. */
    if (step && !stopped) {
      uint32_t code = 0;
      if ((s = hm_heap_compare_steps(h, step, &stopped)) || (s = hm_heap_read_abort(h, &code))) return s;
      stopped = stopped || code != 0;
    }
    if (slice < 50000000ull) slice *= 2;
  }
}
