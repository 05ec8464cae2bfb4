/* collectives/hm_collectives.h: the host side of the peer-memory all-reduce (DESIGN §5): rank
 * bootstrap, the symmetric IPC heap every rank maps, and a standalone all-reduce launch (hm_allreduce). */
#ifndef HM_COLLECTIVES_H
#define HM_COLLECTIVES_H

#include <stddef.h>
#include <stdint.h>

#include "hm_hsa.h"
#include "hm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HM_MAX_TP 8

/* ---------------------------------------------------------------- bootstrap
 *
 * Setting up a heap needs one thing from the group: an all-gather. Each of the tp ranks passes
 * `bytes` of its own and receives all tp contributions in rank order (`all`, tp * bytes), or an
 * error naming the rank that failed, left or never arrived, within timeout_ns. Every rank makes
 * the same sequence of calls with the same `bytes`. Three built-ins fill this struct; a serving
 * stack may fill it with its own (say, over its CPU process group). */
typedef struct hm_bootstrap {
  hm_status (*allgather)(void *ctx, unsigned rank, unsigned tp, const void *mine, size_t bytes, void *all,
                         uint64_t timeout_ns);
  void (*release)(void *ctx); /* frees ctx (hm_bootstrap_release); may be NULL */
  void *ctx;
} hm_bootstrap;

/* Threads of one process, one an agent: the group is shared by the tp threads (create it before
 * starting them, destroy it after they have all returned from hm_heap_create). */
typedef struct hm_boot_group hm_boot_group;
hm_status hm_boot_group_create(unsigned tp, hm_boot_group **out);
void hm_boot_group_destroy(hm_boot_group *g);
hm_status hm_bootstrap_threads(hm_boot_group *g, hm_bootstrap *out);

/* Processes of one node: a rendezvous on the Unix-domain socket `path` (at most 107 bytes). Rank 0
 * creates the socket there, readable and writable by its owner only, and removes it once every
 * rank has connected; the others connect to it (retrying until the timeout) and must run as the
 * same user. A stale socket left at `path` by a dead rendezvous is replaced; anything else there
 * is an error. Release the bootstrap (closing its connections) after hm_heap_create. */
hm_status hm_bootstrap_unix(const char *path, hm_bootstrap *out);

/* A serving stack's own all-gather (say, over its CPU process group): fn must meet the contract
 * above (same calls on every rank, an error naming the culprit within timeout_ns). */
hm_status hm_bootstrap_allgather(hm_status (*fn)(void *ctx, unsigned rank, unsigned tp, const void *mine,
                                                 size_t bytes, void *all, uint64_t timeout_ns),
                                 void *ctx, hm_bootstrap *out);

/* Calls b->release once and clears b (a NULL release or b is fine). */
void hm_bootstrap_release(hm_bootstrap *b);

/* ---------------------------------------------------------------- the symmetric heap
 *
 * Each rank allocates one arena of uncached (extended fine-grained) memory on its agent, exports
 * it, and attaches every peer's (IPC handles, also between threads of one process, so a rank's
 * teardown never unmaps memory a peer may still write into). The arena holds a control page (the
 * rank's abort word, the table of every rank's arena as this rank maps it) and two equal halves,
 * selected by the epoch's parity (device/kernels/ar_args.h has the layout). */
typedef struct hm_heap hm_heap;
/* How a push says it has arrived (device/ar.h): PAIR sends each bf16 pair with the step's tag in one
 * 8-byte store; WORD sends the pair alone in a 4-byte store into a slot the reader emptied, half the
 * bytes on the links (docs/allreduce.md has both protocols' modelled times). The default is WORD. */
typedef enum hm_ar_protocol {
  HM_AR_PROTOCOL_DEFAULT = 0,
  HM_AR_PROTOCOL_PAIR = 1,
  HM_AR_PROTOCOL_WORD = 2,
} hm_ar_protocol;
const char *hm_ar_protocol_name(hm_ar_protocol p);

typedef struct hm_heap_config {
  unsigned rank, tp;       /* this rank, and the group's size (1 .. HM_MAX_TP) */
  size_t half_bytes;       /* bytes of a half; 0: room for one all-reduce of 48 x 5120 bf16 at tp */
  uint64_t timeout_ns;     /* the whole set-up's bound (0: 30 s) */
  hm_ar_protocol protocol; /* the all-reduces' protocol on this heap; every rank must ask the same */
} hm_heap_config;

/* Collective: every rank calls it with the same tp and half_bytes. Fails on every rank (with the
 * same reason where one rank's failure causes it) if any rank fails, leaves or does not arrive
 * within the timeout, naming that rank; nothing stays allocated then. */
hm_status hm_heap_create(hm_agent *a, const hm_heap_config *cfg, const hm_bootstrap *boot, hm_heap **out);
/* Not collective: ranks tear down in any order, whatever state their peers are in. Refused
 * (HM_ERR_BUSY, nothing done) while an object still uses the heap: an all-reduce (hm_ar), an FFN
 * or K2 runner, a layer (through its K2). */
hm_status hm_heap_destroy(hm_heap *h);
/* Objects built on the heap hold it (hm_ar_create, hm_ffn_create, hm_k2_create do), so
 * hm_heap_destroy refuses while any lives. */
void hm_heap_retain(hm_heap *h);
void hm_heap_release(hm_heap *h);

unsigned hm_heap_rank(const hm_heap *h);
unsigned hm_heap_tp(const hm_heap *h);
hm_agent *hm_heap_agent(const hm_heap *h);
size_t hm_heap_half_bytes(const hm_heap *h);
/* The heap's protocol (never HM_AR_PROTOCOL_DEFAULT once created). */
hm_ar_protocol hm_heap_protocol(const hm_heap *h);
/* Bytes of the inboxes an all-reduce of rows x width bf16 needs in each half. */
size_t hm_allreduce_region_bytes(unsigned tp, uint32_t rows, uint32_t width);

/* A region of `bytes` in each half, never handed out before (so every slot of it is empty: a region
 * is never reused, since its tags would start over and its slots need not be empty), at *offset (8-byte aligned). Every rank must
 * reserve the same sizes in the same order: offsets are not exchanged. */
hm_status hm_heap_reserve(hm_heap *h, size_t bytes, size_t *offset);

/* What a kernel needs to run the device protocol (device/ar.h): fills a struct hm_ar_link
 * (device/kernels/ar_args.h) with the arena table, `status` (a u32 in memory the host can read,
 * where the launch reports failures) and the bound on a launch's waits on peers. */
struct hm_ar_link;
hm_status hm_heap_link(const hm_heap *h, uint32_t *status, uint64_t timeout_ns, struct hm_ar_link *out);

/* HM_OK while no rank has given up; else HM_ERR_PEER with the cause (the rank that was waited for
 * in vain, whose host stopped the group, or which failed, with its own reason). A failed group
 * stays failed: tear it down. */
hm_status hm_heap_check(hm_heap *h);
/* Stop the group: every rank's waits on peers end at their next poll, as if a peer had timed out
 * (HM_ERR_PEER naming this rank). For a host that learns of a peer's death before its kernels do. */
hm_status hm_heap_abort(hm_heap *h);
/* Stop the group because this rank failed with s (not HM_OK): `reason` (one line; NULL: the
 * thread's hm_errmsg()) goes into this rank's arena, then every rank's abort word names this rank
 * and s, so every peer's kernel ends its waits at its next poll and every peer's host returns
 * HM_ERR_PEER with "rank R failed (HM_ERR_...): reason". A cause already recorded stays (the
 * first failure is the root). The layer runners call it on every failure of a create or step
 * that would leave peers waiting (docs/api.md, "A group fails together"); a serving stack calls
 * it when its own part of a step fails on one rank. Returns s with the thread's message kept. */
hm_status hm_heap_fail(hm_heap *h, hm_status s, const char *reason);
/* Every rank makes the same steps in the same order. A synchronous step through the heap (the
 * FFN launch's, K2's) publishes its header first: its number (the n-th such step of this rank),
 * kind, layer (-1: none) and rows; while it waits for its launch (hm_heap_wait_step) the host reads
 * its peers' headers, and a peer whose n-th step is another kind, layer or rows stops the group
 * at once: every rank returns HM_ERR_PEER naming both steps, instead of waiting out the peer bound
 * for pushes laid out for another step (or, rows coinciding, reading them). */
typedef enum hm_step_kind { HM_STEP_FFN = 1, HM_STEP_K2 = 2, HM_STEP_ALLREDUCE = 3 } hm_step_kind;
hm_status hm_heap_step_begin(hm_heap *h, hm_step_kind kind, int32_t layer, uint32_t rows);
/* A step this rank refuses before its launch (s, hm_errmsg() its reason: a bad tensor, rows out of
 * range) while its peers may be making it: the reason goes into this rank's arena and its next
 * step's header says "refused" (the refusal takes the step's number, as a launch would). A peer whose launch of that
 * step waits for this rank sees it and stops the group at once: it returns HM_ERR_PEER "rank R
 * failed (HM_ERR_...): refused its step n: reason". Ranks that all refuse alike launch nothing,
 * and the group stays up. Returns s with the message kept (HM_ERR_PEER and tp 1: nothing done). */
hm_status hm_heap_step_refused(hm_heap *h, hm_status s);
/* Wait up to timeout_ns for a launch on q, the heap's agent's, to end (its completion signal
 * below 1), comparing the step headers while it runs (a disagreement stops the group; the launch
 * then ends at its next poll). A fault is reported only when it is q's: another rank's queue
 * (ranks as threads of one runtime) is that rank's to report. */
hm_status hm_heap_wait_step(hm_heap *h, hm_queue *q, hm_signal done, uint64_t timeout_ns);

/* A launch of this heap's recorded into chain c (by hm_ffn_record, hm_k2_record, hm_layer_record,
 * hm_ar_record), `status` its status word, (kind, layer, rows) its step's shape: every replay of c
 * is then a step of the group for each launch recorded, in order. A replay is refused once the
 * group has failed; before its doorbell its steps take their numbers and publish their headers as
 * direct steps do (at most the last 8 of a chain are compared), so ranks whose replays (or a replay
 * and a direct step) disagree fail at once naming both steps; a replay or wait that fails on this
 * rank (its queue's fault, the wait's bound) stops the group with its reason, so the peers'
 * replays end at once; a replay that a peer's failure ended makes hm_chain_wait return
 * HM_ERR_PEER with that peer's reason. */
hm_status hm_heap_record(hm_heap *h, hm_chain *c, const uint32_t *status, hm_step_kind kind, int32_t layer,
                         uint32_t rows);

/* One line for a status or abort word a launch reported (kernels/ar_args.h's encoding), with the
 * failed rank's own reason when one stopped the group: for the runners of kernels that link to
 * the heap. */
void hm_heap_describe(hm_heap *h, uint32_t code, char *buf, size_t cap);
/* The all-reduce a status word's site number names (kernels/ar_args.h AR_WHERE_*), or NULL. */
const char *hm_heap_site_name(uint32_t where);

/* ---------------------------------------------------------------- the standalone all-reduce
 *
 * bf16 in, bf16 out: out[r][c] = bf16(sum over ranks in rank order of f32(in_rank[r][c])), the
 * same bits on every rank. One launch a step (device/kernels/ar_allreduce.cl) on a queue of the
 * heap's agent; every rank must make the same calls with the same rows. The launch never hangs:
 * a peer that does not push within timeout_ns ends it with an error (hm_ar_status). */
typedef struct hm_ar hm_ar;
typedef struct hm_ar_config {
  uint32_t width;      /* bf16 values a row: even, >= 2 (5120 for DeepSeek-V4.1) */
  uint32_t max_rows;   /* the most rows a call (its inboxes are reserved in the heap) */
  uint32_t max_ctas;   /* CTAs a launch at most (0: 64), capped by what the agent holds at once */
  uint64_t timeout_ns; /* how long a launch waits for its peers' pushes (0: 10 s) */
} hm_ar_config;

/* Collective in effect (every rank reserves the same region). Loads the kernel on the heap's agent. */
hm_status hm_ar_create(hm_heap *h, const hm_ar_config *cfg, hm_ar **out);
/* Enqueue one step on q (a queue of the heap's agent), ordered after q's earlier packets; returns
 * at once. Every step of one hm_ar goes to the same queue (steps share the device's epoch and must
 * run one after another), and recorded steps (hm_ar_record) must be ordered with them too. in and
 * out: device-visible bf16 [rows][width], 4-byte aligned; out may be in. Refused (HM_ERR_PEER,
 * nothing enqueued) once the group has failed. One thread at a time per hm_ar. */
hm_status hm_allreduce(hm_ar *ar, hm_queue *q, const void *in, void *out, uint32_t rows);
/* The same step added to a recorded chain of the heap's agent (hm_chain_*): a replay runs it again
 * with the same addresses; the epoch on the device gives every replay its own tags. */
hm_status hm_ar_record(hm_ar *ar, hm_chain *c, const void *in, void *out, uint32_t rows);
/* Wait until every step enqueued by hm_allreduce has completed; then hm_ar_status. Each step
 * publishes its header (hm_heap_step_begin: an all-reduce of `rows`) as it is enqueued, and this
 * wait compares the peers' headers of every step enqueued since the last wait (the last 8 at
 * most) with this rank's, so ranks whose steps disagree (another row count, an FFN step against
 * an all-reduce), the latest or an earlier one, fail at once naming both. */
hm_status hm_ar_wait(hm_ar *ar, uint64_t timeout_ns);
/* HM_OK, or HM_ERR_PEER with what the launches reported (which rank was waited for in vain). */
hm_status hm_ar_status(const hm_ar *ar);
/* Waits for the steps hm_allreduce enqueued (each ends within its bound); replays of recorded
 * steps are the caller's to have finished (hm_chain_wait) first. HM_ERR_BUSY (nothing done)
 * while a chain still holds a recorded step (hm_chain_destroy first). */
hm_status hm_ar_destroy(hm_ar *ar);

#ifdef __cplusplus
}
#endif
#endif /* HM_COLLECTIVES_H */
