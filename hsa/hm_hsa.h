/* hsa/hm_hsa.h: the runtime over the HSA API (no HIP): the loaded HSA library and its agents,
 * memory, signals, AQL queues and packets, code objects, persistent launches, recorded chains, IPC. */
#ifndef HM_HSA_H
#define HM_HSA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hm_codeobj.h"
#include "hm_occupancy.h"
#include "hm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_runtime hm_runtime;
typedef struct hm_agent hm_agent;
typedef struct hm_queue hm_queue;
typedef struct hm_program hm_program;
typedef struct hm_kernel hm_kernel;
typedef struct hm_chain hm_chain;
typedef struct hm_signal { uint64_t handle; } hm_signal; /* an hsa_signal_t */

/* ---------------------------------------------------------------- the HSA library */

/* Load and initialise an HSA library: `which` is "rocr" (ROCr's libhsa-runtime64.so.1), "sim"
 * (the software agent, libhsamono-sim.so beside this library or $HSAMONO_SIM_LIB), "auto"
 * (ROCr when it finds a GPU agent, else the software agent: a warning in the log, HSAMONO_LOG=warn,
 * and nothing on stderr otherwise; hm_runtime_is_sim says which was chosen), or a path.
 * NULL means $HSAMONO_RUNTIME, or "auto" when unset. Every entry point is resolved once. */
hm_status hm_runtime_open(const char *which, hm_runtime **out);
/* Frees everything the runtime still tracks (programs, queues, memory, signals), then shuts the
 * HSA library down. HM_ERR_BUSY (and nothing done) while an object built on it lives: a heap, a
 * K1, FFN or K2 runner, a layer, a recorded chain (destroy them first, docs/api.md "Teardown"). */
hm_status hm_runtime_close(hm_runtime *rt);
/* Objects built on the runtime hold it (the library's heaps, runners and chains do; a caller's
 * own may too), so hm_runtime_close refuses while any lives. */
void hm_runtime_retain(hm_runtime *rt);
void hm_runtime_release(hm_runtime *rt);
/* "rocr", "sim" or the path that was loaded */
const char *hm_runtime_backend(const hm_runtime *rt);
bool hm_runtime_is_sim(const hm_runtime *rt);
/* a one-line description (the software agent describes its configuration) */
const char *hm_runtime_describe(const hm_runtime *rt);
/* The software agent's trace of what each CTA does (hm_trace.h, issue 15): begin records every
 * dispatch started after it, end (once they have completed) hands the records over; hm_trace_free
 * frees them. HM_ERR_UNSUPPORTED on ROCr (a GPU has no such trace); HM_ERR_NO_MEMORY when the agent
 * ran out recording. Off unless begun, and then free for the dispatches it does not see. */
typedef struct hm_trace hm_trace;
hm_status hm_runtime_trace_begin(hm_runtime *rt);
hm_status hm_runtime_trace_end(hm_runtime *rt, hm_trace *out);
void hm_trace_free(hm_trace *t);

/* ---------------------------------------------------------------- agents */

typedef enum hm_pool_kind {
  HM_POOL_COARSE,   /* the GPU's memory, coherent at kernel boundaries (weights, activations) */
  HM_POOL_FINE,     /* the GPU's fine-grained memory */
  HM_POOL_UNCACHED, /* the GPU's extended-scope fine-grained memory: flags, peer inboxes */
  HM_POOL_KERNARG,  /* system memory for kernel arguments (the CPU agent's kernarg pool) */
  HM_POOL_HOST,     /* fine-grained system memory every agent reads and writes (status words) */
  HM_POOL_KINDS
} hm_pool_kind;

typedef struct hm_agent_info {
  char name[64];      /* "gfx950" */
  char isa[96];       /* the full target id, "amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-" */
  char product[64];
  hm_target_id tid;
  uint32_t cus, simds_per_cu, wave_size, max_waves_per_cu, xccs, node;
  uint32_t lds_bytes; /* the group segment a CTA may use */
  uint32_t queue_min, queue_max;
  bool pool_present[HM_POOL_KINDS];
  size_t pool_size[HM_POOL_KINDS];
  size_t pool_granule[HM_POOL_KINDS];
  hm_cu_limits limits; /* the CU model behind the residency checks */
  /* NUMA placement: the CPU agent nearest this GPU (smallest link-info NUMA distance, ties to the
   * lowest index), whose system pools serve HM_POOL_KERNARG and HM_POOL_HOST, and its node */
  uint32_t cpu_agent;     /* index among hm_cpu_agent_count */
  uint32_t numa_node;     /* that CPU agent's node id, taken as the Linux NUMA node */
  uint32_t numa_distance; /* summed over the link's hops (0: no CPU agent reported one) */
} hm_agent_info;

/* GPU agents, in the HSA library's order */
unsigned hm_agent_count(const hm_runtime *rt);
hm_agent *hm_agent_get(hm_runtime *rt, unsigned index);
const hm_agent_info *hm_agent_info_of(const hm_agent *a);
unsigned hm_agent_index(const hm_agent *a);
hm_runtime *hm_agent_runtime(const hm_agent *a);
/* the CPU agents (one a NUMA node), in the HSA library's order: count, node id (KFD's, which is
 * the Linux NUMA node number; UINT32_MAX past the count) and name */
unsigned hm_cpu_agent_count(const hm_runtime *rt);
uint32_t hm_cpu_agent_node(const hm_runtime *rt, unsigned cpu);
const char *hm_cpu_agent_name(const hm_runtime *rt, unsigned cpu);

/* Bind the calling thread to the CPUs of GPU agent a's NUMA node (hm_agent_info numa_node), so a
 * rank's host work runs beside the memory its kernel arguments and staging come from. Returns
 * HM_ERR_UNSUPPORTED when the system has no NUMA support (libnuma), HM_ERR_NOT_FOUND when the node
 * does not exist here or has no CPUs this process may use, HM_ERR_RUNTIME when the kernel refuses;
 * on failure the thread's affinity is unchanged. Not binding is never fatal to the library: the
 * TP groups' rank threads call this, log a failure at debug level and run on. */
hm_status hm_agent_bind_thread(hm_agent *a);

/* ---------------------------------------------------------------- memory */

/* Allocate `bytes` from agent a's pool of `kind` (KERNARG and HOST come from the system pools of
 * a's nearest CPU agent, hm_agent_info cpu_agent), aligned to `align` (a power of two up to the
 * pool's 4 KiB granule; 0 = the granule). The runtime tracks every allocation; hm_runtime_close frees what is left. */
hm_status hm_mem_alloc(hm_agent *a, hm_pool_kind kind, size_t bytes, size_t align, void **out);
hm_status hm_mem_free(hm_runtime *rt, void *p);
/* A tensor a step reads or writes, for hm_mem_check: its name (for the message), its address and
 * the bytes from there the step touches. HM_MEM_DEVICE: the agent's own device memory or the
 * runtime's host memory (HM_POOL_HOST / HM_POOL_KERNARG, open to every GPU agent);
 * HM_MEM_HOST: the runtime's host memory only (the host reads it too: decode metadata). */
typedef enum hm_mem_use { HM_MEM_DEVICE, HM_MEM_HOST } hm_mem_use;
typedef struct hm_mem_need {
  const char *name;
  const void *p;
  uint64_t bytes;
  hm_mem_use use;
} hm_mem_need;
/* Each of t[0..n) against the allocation it lies in: not NULL, 4-byte aligned, an allocation of
 * a's runtime (not malloc'd, stack, freed or IPC-mapped memory), of agent a if device memory,
 * host memory if HM_MEM_HOST, with t->bytes left in it from t->p. The first that fails is
 * HM_ERR_INVALID_ARG: "<who>: <name> ...". One lock and a binary search a tensor; no allocation. */
hm_status hm_mem_check(hm_agent *a, const char *who, const hm_mem_need *t, unsigned n);
/* Holds on an allocation (the one holding p): a user that reads it later (a recorded chain's
 * kernel arguments, a K1 on a K2's epoch buffer). hm_mem_free refuses it (HM_ERR_BUSY) while held. */
hm_status hm_mem_hold(hm_runtime *rt, const void *p);
void hm_mem_unhold(hm_runtime *rt, const void *p);
unsigned hm_mem_holds(hm_runtime *rt, const void *p);
/* How many of p[0..n) are held (an owner's recorded kernel arguments still in chains). */
unsigned hm_mem_held(hm_runtime *rt, void *const *p, unsigned n);
/* Size of the allocation holding p (0 if none) */
size_t hm_mem_size(hm_runtime *rt, const void *p);
/* Let the given GPU agents (and the host, if host) access the allocation holding p. */
hm_status hm_mem_allow(hm_runtime *rt, const void *p, hm_agent *const *agents, unsigned n, bool host);
/* Copy n bytes with the copy engine; with done.handle == 0 the call waits for the copy, else it
 * returns at once and `done` is decremented when the copy has finished. Both ranges must lie in
 * allocations of this runtime (hm_mem_alloc; host memory from HM_POOL_HOST): plain host memory
 * (malloc, the stack) is refused with HM_ERR_INVALID_ARG naming the side, never copied. */
hm_status hm_mem_copy(hm_runtime *rt, void *dst, const void *src, size_t n, hm_signal done);
/* Fill `count` 32-bit words at p (4-byte aligned) with value. */
hm_status hm_mem_fill(hm_runtime *rt, void *p, uint32_t value, size_t count);

/* ---------------------------------------------------------------- signals */

typedef enum hm_wait_cond { HM_WAIT_EQ, HM_WAIT_NE, HM_WAIT_LT, HM_WAIT_GTE } hm_wait_cond;

hm_status hm_signal_create(hm_runtime *rt, int64_t initial, hm_signal *out);
hm_status hm_signal_destroy(hm_runtime *rt, hm_signal s);
int64_t hm_signal_load(hm_runtime *rt, hm_signal s);
void hm_signal_store(hm_runtime *rt, hm_signal s, int64_t v);
/* Wait until `s cond value` holds: HM_ERR_TIMEOUT after timeout_ns, HM_ERR_QUEUE_FAULT at once
 * if any queue of the runtime reported an error meanwhile (the message is the agent's reason:
 * on the software agent the kernel, its packet and why, the watchdog or a trap). A timeout's
 * message names a queue that had failed before (its error reported to an earlier call), the
 * likely reason the signal never moved. active = poll (no sleeping). The last value seen goes to
 * *observed when it is not NULL. */
hm_status hm_signal_wait(hm_runtime *rt, hm_signal s, hm_wait_cond cond, int64_t value, uint64_t timeout_ns,
                         bool active, int64_t *observed);

/* ---------------------------------------------------------------- code objects and kernels */

/* Load the library's embedded code object for a's ISA (a mismatch is refused naming both target
 * ids), freeze it, and read every kernel. On the software agent the matching host kernel object
 * goes with it. */
hm_status hm_program_load(hm_agent *a, hm_program **out);
/* The same from a caller's image or file; host_object (the kernels built as host C, see
 * device/meson.build) is required on the software agent and ignored on a GPU. */
hm_status hm_program_load_image(hm_agent *a, const void *image, size_t size, const void *host_object,
                                size_t host_size, hm_program **out);
hm_status hm_program_load_file(hm_agent *a, const char *path, const char *host_object_path, hm_program **out);
void hm_program_unload(hm_program *p);

typedef struct hm_kernel_info {
  const char *name;
  uint64_t object;         /* the AQL kernel_object */
  uint32_t kernarg_size, kernarg_align;
  uint32_t group_bytes, private_bytes;
  uint32_t cta_size;       /* the required work-group size (0: any up to max_cta_size) */
  uint32_t max_cta_size;
  hm_residency residency;  /* on this agent, with its required CTA size and no dynamic LDS */
  const hm_co_kernel *meta;
} hm_kernel_info;

/* A kernel by name. Kernels that declare code-object-v5 hidden arguments are refused: the
 * project's kernels read what they need from the dispatch packet (docs/decisions.md). */
hm_status hm_kernel_get(hm_program *p, const char *name, const hm_kernel **out);
const hm_kernel_info *hm_kernel_info_of(const hm_kernel *k);

/* ---------------------------------------------------------------- queues and packets */

typedef enum hm_fence { HM_FENCE_NONE = 0, HM_FENCE_AGENT = 1, HM_FENCE_SYSTEM = 2 } hm_fence;

/* One long-lived AQL queue; size in packets (a power of two the agent allows). */
hm_status hm_queue_create(hm_agent *a, uint32_t size, hm_queue **out);
/* HM_ERR_BUSY (and nothing done) while a recorded chain is on it (hm_chain_destroy first). */
hm_status hm_queue_destroy(hm_queue *q);
/* HM_OK, or HM_ERR_QUEUE_FAULT with the agent's reason once the queue has reported an error. */
hm_status hm_queue_status(hm_queue *q);
hm_agent *hm_queue_agent(const hm_queue *q);

typedef struct hm_dispatch {
  const hm_kernel *kernel;
  uint32_t ctas;        /* grid size in CTAs */
  uint32_t cta_size;    /* 0: the kernel's required size */
  uint32_t dynamic_lds; /* group bytes beyond the kernel's own */
  void *kernarg;        /* kernel arguments already written, in kernarg (or host) memory */
  hm_fence acquire, release;
  bool barrier;         /* wait for every earlier packet of the queue to complete first */
  hm_signal completion; /* decremented when the kernel has completed (0: none) */
} hm_dispatch;

typedef struct hm_barrier_pkt {
  hm_signal deps[5];    /* waits until each non-zero one reaches 0 (AND) */
  hm_signal completion;
  hm_fence acquire, release;
  bool barrier;
} hm_barrier_pkt;

/* Write n kernel-dispatch packets as ROCr and HIP do (reserve the write index, wait for room,
 * write each body, publish each header+setup with one 32-bit release store) and ring the
 * doorbell once with the last index. */
hm_status hm_queue_dispatch(hm_queue *q, const hm_dispatch *d, unsigned n);
hm_status hm_queue_barrier(hm_queue *q, const hm_barrier_pkt *b);
/* A barrier packet with its own completion signal, then a wait for it. */
hm_status hm_queue_wait_idle(hm_queue *q, uint64_t timeout_ns);

/* Kernel arguments: kernarg memory of `bytes`, filled with args (n bytes). */
hm_status hm_kernarg_new(hm_agent *a, const void *args, size_t n, void **out);

/* ---------------------------------------------------------------- recorded packet chains */

/* A fixed sequence of packets (kernargs at fixed addresses) recorded once and replayed by
 * rewriting only the headers when it lands on the same ring slots as its last replay (the full
 * packets otherwise), with one doorbell: the HSA equivalent of a graph replay. The chain owns a
 * completion signal set on its last packet. */
hm_status hm_chain_create(hm_queue *q, hm_chain **out);
hm_status hm_chain_add_dispatch(hm_chain *c, const hm_dispatch *d);
hm_status hm_chain_add_barrier(hm_chain *c, const hm_barrier_pkt *b);
/* A fault of this chain's queue is the replay's (another queue's is its own user's to report). */
hm_status hm_chain_replay(hm_chain *c);
hm_status hm_chain_wait(hm_chain *c, uint64_t timeout_ns);
/* A chain's watchers: what recorded a step whose failure is more than this queue's (a group's
 * heap, whose peers wait on this rank's launches) hooks into every replay. replay runs before the
 * doorbell (non-OK: nothing is replayed, and that status goes to every done hook, whose answer is
 * returned); poll runs between hm_chain_wait's
 * slices (non-OK ends the wait with it); done gets the replay's or the wait's status and returns the
 * chain's answer (it may turn HM_OK into a peer's failure, or stop the group on this rank's own);
 * release runs once, at hm_chain_destroy. Each may be NULL. One watcher a (hooks, key) pair:
 * hm_chain_watcher finds it, hm_chain_watch adds it (at record time: not on the step path). */
typedef struct hm_chain_hooks {
  hm_status (*replay)(void *ctx);
  hm_status (*poll)(void *ctx);
  hm_status (*done)(void *ctx, hm_status s);
  void (*release)(void *ctx);
} hm_chain_hooks;
void *hm_chain_watcher(const hm_chain *c, const hm_chain_hooks *hooks, const void *key);
hm_status hm_chain_watch(hm_chain *c, const hm_chain_hooks *hooks, const void *key, void *ctx);
/* The tensors a recorded step reads and writes (those its entry point checked, hm_mem_check; a
 * NULL pointer is skipped): every replay reads and writes them again, so each one's allocation is
 * held (hm_mem_free refuses it, HM_ERR_BUSY) until hm_chain_destroy. On failure nothing of this
 * call stays held. The runners' record calls (hm_ffn_record, hm_k1_record, ...) make it. */
hm_status hm_chain_hold(hm_chain *c, const hm_mem_need *t, unsigned n);
/* how many of the last replay's packets needed their whole body written (0 when only headers) */
unsigned hm_chain_last_full_writes(const hm_chain *c);
/* A chain holds its queue, the runtime, every kernel-argument allocation it recorded (whose
 * owners, the runners and layers, refuse to be destroyed while it lives) and its steps' tensors. */
void hm_chain_destroy(hm_chain *c);

/* ---------------------------------------------------------------- persistent launches */

/* The grid a persistent launch of k gets on a: `ctas` if given, else every CU times the CTAs a
 * CU holds. Refused (HM_ERR_REFUSED, with the numbers and the binding limit) when that grid cannot
 * be resident at once. */
hm_status hm_persistent_grid(const hm_kernel *k, hm_agent *a, uint32_t ctas, uint32_t dynamic_lds, uint32_t *grid);

/* The default arrival bound: 10 s on a GPU, where a resident grid arrives within microseconds;
 * 30 s on the software agent, where a CTA's first instructions wait for an OS thread of a loaded CPU
 * (CI once took over 10 s for 3 of a full-size K1's 8, at TP 4 on 2 cores), and still half its
 * watchdog's 60 s, which would otherwise fire first on the CTAs that wait for the verdict. A NULL
 * runtime gets the GPU's figure (the function has no error to return). */
uint64_t hm_arrival_default_ns(const hm_runtime *rt);

/* Launch d (d->ctas 0: the whole resident grid) after the residency check, then verify that every
 * CTA arrived within arrival_timeout_ns (0: hm_arrival_default_ns) through the kernel's handshake (device/dev.h
 * dev_persist_arrive on the struct hm_dev_persist whose address the caller put in the kernel's
 * arguments). If not, the launch is told to abort and HM_ERR_REFUSED says how many arrived and
 * how the aborted launch ended within another arrival_timeout_ns (when d has a completion signal):
 * not at all (still in flight), or failed on the agent, with its reason. A queue error before the
 * grid arrived returns HM_ERR_QUEUE_FAULT with the agent's reason. On the software agent the bound
 * runs out only while the agent reports CTAs it cannot start (no room, held back, a blocked packet):
 * a CTA it has placed is resident, only waiting for a core of a loaded host; the agent's own default
 * on top of the bound ends even that wait. */
struct hm_dev_persist;
hm_status hm_persistent_launch(hm_queue *q, const hm_dispatch *d, struct hm_dev_persist *arrive,
                               uint64_t arrival_timeout_ns);
/* A handshake word in host-visible fine-grained memory (free with hm_mem_free). */
hm_status hm_persist_new(hm_agent *a, struct hm_dev_persist **out);

/* ---------------------------------------------------------------- IPC */

typedef struct hm_ipc_handle {
  uint32_t hsa[8]; /* hsa_amd_ipc_memory_t */
  uint64_t size;
} hm_ipc_handle;

/* Export a whole allocation (p must be its first byte). */
hm_status hm_ipc_export(hm_runtime *rt, void *p, hm_ipc_handle *out);
/* Map another process's (or this one's) exported allocation for these agents. */
hm_status hm_ipc_attach(hm_runtime *rt, const hm_ipc_handle *h, hm_agent *const *agents, unsigned n, void **out);
hm_status hm_ipc_detach(hm_runtime *rt, void *p);

#ifdef __cplusplus
}
#endif
#endif /* HM_HSA_H */
