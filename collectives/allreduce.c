/* collectives/allreduce.c: the standalone all-reduce (hm_allreduce): one launch of ar_allreduce a
 * step on the caller's queue, kernel arguments from a ring of slots, failures read from a status word. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"
#include "epoch.h"
#include "kernels/ar_args.h"

#define SLOTS 64u      /* steps in flight before hm_allreduce waits for the oldest */
#define SLOT_BYTES 128u
#define DEFAULT_CTAS 64u
#define MAX_BATCH 2u   /* AR_MAX_BATCH of device/ar.h */
_Static_assert(sizeof(struct ar_allreduce_args) <= SLOT_BYTES, "a kernel-argument slot holds the arguments");
_Static_assert(DEV_EPOCH_BYTES % 4 == 0, "the epoch buffer is words");

struct hm_ar {
  hm_heap *h;
  hm_runtime *rt;
  hm_agent *a;
  hm_program *prog;
  const hm_kernel *k;
  hm_ar_config cfg;
  struct hm_ar_link link;
  size_t region;
  uint32_t grid_max, batch;
  uint32_t *status; /* host-visible: the launches' sticky status word */
  uint32_t *epoch;  /* the device's epoch buffer */
  uint8_t *ka;      /* SLOTS kernel-argument blocks */
  hm_queue *q;      /* the queue of every hm_allreduce step (they share one epoch) */
  hm_signal sig[SLOTS];
  bool used[SLOTS];
  uint32_t step[SLOTS]; /* the group's step number of each slot's launch not yet waited for (0: none) */
  unsigned next;
  void **rec;       /* kernel arguments of recorded steps */
  unsigned nrec, rec_cap;
};

static void release_ar(hm_ar *ar) {
  for (unsigned i = 0; i < SLOTS; i++)
    if (ar->sig[i].handle) hm_signal_destroy(ar->rt, ar->sig[i]);
  for (unsigned i = 0; i < ar->nrec; i++) hm_mem_free(ar->rt, ar->rec[i]);
  free(ar->rec);
  if (ar->ka) hm_mem_free(ar->rt, ar->ka);
  if (ar->epoch) hm_mem_free(ar->rt, ar->epoch);
  if (ar->status) hm_mem_free(ar->rt, ar->status);
  if (ar->prog) hm_program_unload(ar->prog);
  free(ar);
}

hm_status hm_ar_create(hm_heap *h, const hm_ar_config *cfg, hm_ar **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_ar_create: out is NULL");
  *out = NULL;
  if (!h || !cfg) return hm_fail(HM_ERR_INVALID_ARG, "hm_ar_create: NULL argument");
  if (cfg->width < 2 || cfg->width % 2 || cfg->max_rows < 1 ||
      (uint64_t)cfg->max_rows * (cfg->width / 2) > (1u << 30))
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ar_create: %u rows of %u bf16 (width even, >= 2; at most 2^30 pairs)",
                   cfg->max_rows, cfg->width);
  size_t bytes = hm_allreduce_region_bytes(h->tp, cfg->max_rows, cfg->width);
  if (bytes > h->half_bytes)
    return hm_fail(HM_ERR_NO_MEMORY, "hm_ar_create: %u x %u bf16 at tp %u needs %zu bytes a half, the heap has %zu",
                   cfg->max_rows, cfg->width, h->tp, bytes, h->half_bytes);
  hm_ar *ar = calloc(1, sizeof *ar);
  if (!ar) return hm_fail(HM_ERR_NO_MEMORY, "hm_ar_create: out of memory");
  ar->h = h, ar->rt = h->rt, ar->a = h->a, ar->cfg = *cfg;
  if (!ar->cfg.timeout_ns) ar->cfg.timeout_ns = 10000000000ull;
  if (!ar->cfg.max_ctas) ar->cfg.max_ctas = DEFAULT_CTAS;
  /* at most 12 loads a poll round, as mono's batches */
  ar->batch = 12u / h->tp;
  ar->batch = ar->batch < 1 ? 1 : ar->batch > MAX_BATCH ? MAX_BATCH : ar->batch;
  hm_status s;
  uint32_t resident = 0;
  if ((s = hm_program_load(ar->a, &ar->prog)) || (s = hm_kernel_get(ar->prog, "ar_allreduce", &ar->k)) ||
      (s = hm_persistent_grid(ar->k, ar->a, 0, 0, &resident)))
    goto fail;
  /* every CTA resident at once: a CTA waits for peers' CTAs of the same index, which must not
   * wait for it in turn to get a CU */
  ar->grid_max = ar->cfg.max_ctas < resident ? ar->cfg.max_ctas : resident;
  if (ar->grid_max > DEV_EPOCH_MAX_CTAS) ar->grid_max = DEV_EPOCH_MAX_CTAS;
  if ((s = hm_mem_alloc(ar->a, HM_POOL_HOST, 64, 0, (void **)&ar->status))) goto fail;
  memset(ar->status, 0, 64);
  if ((s = hm_mem_alloc(ar->a, HM_POOL_COARSE, DEV_EPOCH_BYTES, 0, (void **)&ar->epoch)) ||
      (s = hm_mem_fill(ar->rt, ar->epoch, 0, DEV_EPOCH_WORDS)))
    goto fail;
  if ((s = hm_mem_alloc(ar->a, HM_POOL_KERNARG, SLOTS * SLOT_BYTES, 0, (void **)&ar->ka))) goto fail;
  for (unsigned i = 0; i < SLOTS; i++)
    if ((s = hm_signal_create(ar->rt, 0, &ar->sig[i]))) goto fail;
  if ((s = hm_heap_link(h, ar->status, ar->cfg.timeout_ns, &ar->link))) goto fail;
  /* last, so a failure above leaves the heap as it was */
  if ((s = hm_heap_reserve(h, bytes, &ar->region))) goto fail;
  hm_heap_retain(h);
  *out = ar;
  return HM_OK;
fail:
  hm_fail_prefix(s, "hm_ar_create (rank %u of %u)", h->rank, h->tp);
  release_ar(ar);
  return s;
}

hm_status hm_ar_destroy(hm_ar *ar) {
  if (!ar) return hm_fail(HM_ERR_INVALID_ARG, "hm_ar_destroy: NULL all-reduce");
  /* a chain replays its recorded steps from their arguments */
  unsigned held = hm_mem_held(ar->rt, ar->rec, ar->nrec);
  if (held)
    return hm_fail(HM_ERR_BUSY, "hm_ar_destroy: %u recorded step(s) are still in chains: hm_chain_destroy first", held);
  /* steps still in flight read their argument slots: every step ends within its bound on
   * waiting, so wait that long; should one not end (a hung agent), keep the slots rather than
   * free memory a kernel may still read (hm_runtime_close frees them) */
  uint64_t bound = ar->cfg.timeout_ns + 120000000000ull;
  for (unsigned i = 0; i < SLOTS; i++)
    if (ar->used[i] && hm_signal_wait(ar->rt, ar->sig[i], HM_WAIT_EQ, 0, bound, false, NULL) != HM_OK) {
      hm_log(HM_LOG_ERROR, "hm_ar_destroy: a step has not ended (%s); its arguments stay allocated", hm_errmsg());
      ar->ka = NULL;
      memset(ar->sig, 0, sizeof ar->sig);
      break;
    }
  hm_heap_release(ar->h);
  release_ar(ar);
  return HM_OK;
}

hm_status hm_ar_status(const hm_ar *ar) {
  if (!ar) return hm_fail(HM_ERR_INVALID_ARG, "hm_ar_status: NULL all-reduce");
  uint32_t code = __atomic_load_n(ar->status, __ATOMIC_ACQUIRE);
  if (!code) return HM_OK;
  char why[AR_REASON_BYTES + 200];
  hm_heap_describe(ar->h, code, why, sizeof why);
  return hm_fail(HM_ERR_PEER, "all-reduce (rank %u of %u): %s", ar->h->rank, ar->h->tp, why);
}

/* What a step of `rows` reads and writes: in and out, rows x width bf16 each. */
static void io_needs(const hm_ar *ar, const void *in, const void *out, uint32_t rows, hm_mem_need t[2]) {
  const uint64_t bytes = (uint64_t)rows * ar->cfg.width * 2;
  t[0] = (hm_mem_need){"in", in, bytes, HM_MEM_DEVICE};
  t[1] = (hm_mem_need){"out", out, bytes, HM_MEM_DEVICE};
}

/* The arguments and dispatch of one step (checked here, for both the queue and the chain). */
static hm_status prepare(hm_ar *ar, const char *fn, const void *in, void *out, uint32_t rows,
                         struct ar_allreduce_args *args, hm_dispatch *d) {
  if (!in || !out || ((uintptr_t)in & 3) || ((uintptr_t)out & 3))
    return hm_fail(HM_ERR_INVALID_ARG, "%s: in and out must be non-NULL and 4-byte aligned", fn);
  if (rows < 1 || rows > ar->cfg.max_rows)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: %u rows (1 .. %u)", fn, rows, ar->cfg.max_rows);
  /* each against the allocation it lies in: the launch trusts both addresses for rows x width */
  hm_mem_need t[2];
  io_needs(ar, in, out, rows, t);
  hm_status s = hm_mem_check(ar->a, fn, t, 2);
  if (s) return s;
  uint32_t pairs = ar->cfg.width / 2, n = rows * pairs;
  uint32_t ctas = (n + AR_CTA - 1) / AR_CTA;
  if (ctas > ar->grid_max) ctas = ar->grid_max;
  *args = (struct ar_allreduce_args){.link = ar->link,
                                     .epoch = (uint64_t)(uintptr_t)ar->epoch,
                                     .in = (uint64_t)(uintptr_t)in,
                                     .out = (uint64_t)(uintptr_t)out,
                                     .region = ar->region,
                                     .rows = rows,
                                     .pairs = pairs,
                                     .batch = ar->batch};
  /* system scope both ways: the input may come from the host or another agent's copy, and the
   * output may be read by either */
  *d = (hm_dispatch){.kernel = ar->k, .ctas = ctas, .acquire = HM_FENCE_SYSTEM, .release = HM_FENCE_SYSTEM,
                     .barrier = true};
  return HM_OK;
}

hm_status hm_allreduce(hm_ar *ar, hm_queue *q, const void *in, void *out, uint32_t rows) {
  if (!ar) return hm_fail(HM_ERR_INVALID_ARG, "hm_allreduce: NULL all-reduce");
  struct ar_allreduce_args args;
  hm_dispatch d;
  hm_status s;
  if ((s = hm_ar_status(ar))) return s; /* a failed group takes no more steps */
  if (!q) s = hm_fail(HM_ERR_INVALID_ARG, "hm_allreduce: NULL queue");
  else if (hm_queue_agent(q) != ar->a)
    s = hm_fail(HM_ERR_INVALID_ARG, "hm_allreduce: the queue is not on the heap's agent %u", hm_agent_index(ar->a));
  /* two queues could run two steps at once, both reading the same epoch */
  else if (ar->q && q != ar->q)
    s = hm_fail(HM_ERR_INVALID_ARG, "hm_allreduce: every step of an all-reduce goes to the queue of its first step");
  else s = prepare(ar, "hm_allreduce", in, out, rows, &args, &d);
  /* refused on this rank alone, the peers' launches would wait for it: they learn at once */
  if (s) return hm_heap_step_refused(ar->h, s);
  unsigned i = ar->next;
  if (ar->used[i]) {
    /* the step that used this slot SLOTS steps ago: long done unless the group is stuck, and
     * every step ends within its bound on waiting */
    uint64_t bound = ar->cfg.timeout_ns + 120000000000ull;
    if ((s = hm_signal_wait(ar->rt, ar->sig[i], HM_WAIT_EQ, 0, bound, false, NULL)))
      return hm_fail_prefix(s, "hm_allreduce: the step %u before has not completed", SLOTS);
  }
  void *ka = ar->ka + (size_t)i * SLOT_BYTES;
  memcpy(ka, &args, sizeof args);
  d.kernarg = ka;
  d.completion = ar->sig[i];
  /* the step's header, which the peers compare with theirs while they wait (hm_ar_wait); its
   * number is taken under the heap's lock with it, so it is this step's whatever else uses the heap */
  uint64_t shape = hm_heap_shape(HM_STEP_ALLREDUCE, -1, rows);
  uint32_t number;
  if ((s = hm_heap_steps_begin(ar->h, &shape, 1, &number))) return hm_heap_fail(ar->h, s, NULL);
  hm_signal_store(ar->rt, ar->sig[i], 1);
  if ((s = hm_queue_dispatch(q, &d, 1))) {
    hm_signal_store(ar->rt, ar->sig[i], 0);
    /* the peers' launches of this step wait for this rank's pushes: stop them now, with why */
    return hm_heap_fail(ar->h, s, NULL);
  }
  ar->used[i] = true;
  ar->step[i] = number;
  ar->next = (i + 1) % SLOTS;
  ar->q = q;
  return HM_OK;
}

hm_status hm_ar_record(hm_ar *ar, hm_chain *c, const void *in, void *out, uint32_t rows) {
  if (!ar || !c) return hm_fail(HM_ERR_INVALID_ARG, "hm_ar_record: NULL all-reduce or chain");
  struct ar_allreduce_args args;
  hm_dispatch d;
  hm_status s = prepare(ar, "hm_ar_record", in, out, rows, &args, &d);
  if (s) return s;
  if (ar->nrec == ar->rec_cap) {
    unsigned cap = ar->rec_cap ? 2 * ar->rec_cap : 8;
    void **r = realloc(ar->rec, cap * sizeof *r);
    if (!r) return hm_fail(HM_ERR_NO_MEMORY, "hm_ar_record: out of memory");
    ar->rec = r, ar->rec_cap = cap;
  }
  /* each replay is a step of the group: it fails together, as hm_allreduce's do */
  if ((s = hm_heap_record(ar->h, c, ar->status, HM_STEP_ALLREDUCE, -1, rows))) return s;
  void *ka;
  if ((s = hm_kernarg_new(ar->a, &args, sizeof args, &ka))) return s;
  d.kernarg = ka;
  if ((s = hm_chain_add_dispatch(c, &d))) {
    hm_mem_free(ar->rt, ka);
    return s;
  }
  ar->rec[ar->nrec++] = ka;
  /* every replay reads in and writes out again: the chain holds them */
  hm_mem_need t[2];
  io_needs(ar, in, out, rows, t);
  return hm_chain_hold(c, t, 2);
}

hm_status hm_ar_wait(hm_ar *ar, uint64_t timeout_ns) {
  if (!ar) return hm_fail(HM_ERR_INVALID_ARG, "hm_ar_wait: NULL all-reduce");
  uint64_t deadline = hm_coll_now_ns() + timeout_ns;
  /* Every step enqueued since the last wait is compared, not only the latest: a peer whose
   * earlier step was another (more rows) leaves this rank's launch of it waiting for pushes that
   * never come, while the latest steps agree. */
  uint32_t first = 0;
  for (unsigned i = 0; i < SLOTS; i++)
    if (ar->step[i] && (!first || ar->step[i] < first)) first = ar->step[i];
  for (unsigned i = 0; i < SLOTS; i++) {
    if (!ar->used[i]) continue;
    /* the peers' headers compared while it runs and once it has ended: a disagreement stops
     * the group, and the launch ends at its next poll */
    hm_status s = hm_heap_wait_steps(ar->h, ar->q, ar->sig[i], first ? first : hm_heap_step_number(ar->h),
                                      hm_coll_left(deadline));
    if (s == HM_ERR_PEER) return __atomic_load_n(ar->status, __ATOMIC_ACQUIRE) ? hm_ar_status(ar) : s;
    /* a fault of this rank's launch (or its wait's end) stops the group, so the peers end now */
    if (s) return hm_heap_fail(ar->h, hm_fail_prefix(s, "hm_ar_wait (rank %u of %u)", ar->h->rank, ar->h->tp), NULL);
  }
  memset(ar->step, 0, sizeof ar->step); /* compared, each after its launch ended */
  return hm_ar_status(ar);
}
