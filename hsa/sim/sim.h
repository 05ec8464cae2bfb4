/* hsa/sim/sim.h: the software HSA agent's internal structures: agents and pools, allocations,
 * signals, queues, executables and kernels, dispatches, CTAs and their work-item fibers. */
#ifndef HM_SIM_H
#define HM_SIM_H

/* Thread-locals of the agent: initial-exec, so an access is one load from the thread pointer
 * rather than a __tls_get_addr call (the agent is dlopen'ed; its few bytes fit the static TLS
 * that glibc keeps for such libraries). sim_cur is read at every work-item operation. */
#define SIM_TLS __thread __attribute__((tls_model("initial-exec")))

#include <hsa/amd_hsa_queue.h>
#include <hsa/amd_hsa_signal.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "dev_host.h"
#include "fiber.h"
#include "hm_codeobj.h"
#include "hm_hsa_compat.h"
#include "hm_occupancy.h"
#include "isa/hm_isa.h"

#define SIM_API __attribute__((visibility("default")))
/* CPU agents (one a NUMA node) and GPU agents together: 16 GPUs on as many nodes */
#define SIM_MAX_AGENTS 32
#define SIM_MAX_GPUS 16
#define SIM_MAX_POOLS 4
#define SIM_PAGE 4096u
#define SIM_MAX_CTA 1024u
#define SIM_LINE 128u
#define SIM_ALLOC_CACHE 4u

/* ---------------------------------------------------------------- configuration */

struct sim_config {
  unsigned ngpus;          /* HSAMONO_SIM_AGENTS, default 4 */
  unsigned nnodes;         /* HSAMONO_SIM_NUMA_NODES, default 1: CPU agents, GPU g on node g*nnodes/ngpus */
  char arch[16];           /* HSAMONO_SIM_ARCH: gfx950 (default) or gfx942 */
  unsigned cus;            /* HSAMONO_SIM_CUS, default the part's 256 / 304 */
  double watchdog_s;       /* HSAMONO_SIM_WATCHDOG_S, default 60 */
  bool weak;               /* HSAMONO_SIM_WEAK=1: weak visibility of hand-off memory */
  bool chaos;              /* HSAMONO_SIM_CHAOS=<seed> set */
  uint64_t chaos_seed;
  unsigned laggard_every;  /* HSAMONO_SIM_LAGGARD=N: under chaos, one dispatch in N has a laggard CTA (default 4) */
  int lag_gpu;             /* HSAMONO_SIM_LAG_RANK=g[:ms]: GPU agent g reads its peers' pushes late (cta.c); -1 none */
  unsigned lag_quiet_ms;   /* ... until its peers have made no progress for this long (default 30) */
  size_t stack_bytes;      /* HSAMONO_SIM_STACK_KB, default 64: one work-item's fiber stack */
  /* HSAMONO_SIM_HOLD_CTAS=[kernel:]ids[:late]: CTAs of one dispatch held back, so tests can make
   * part of a persistent grid never start (or start after the rest have ended), as a GPU whose
   * CUs another kernel holds does */
  struct { uint32_t lo, hi; } hold[16]; /* id ranges, inclusive */
  unsigned nhold;
  uint32_t hold_max;       /* the largest held id: a dispatch must have it */
  bool hold_late;          /* start them once every other CTA has ended, rather than never */
  char hold_kernel[64];    /* only a dispatch of this kernel ("" = any) */
  bool hold_used;          /* the one dispatch it applies to has been taken (under sim.lock) */
  /* HSAMONO_SIM_START_LATE_MS: every CTA's thread waits this long before its first work-item
   * runs, as on a host whose cores other processes hold (CI's), so tests can check that a bound
   * measured on the host tells a slow agent from a grid that is not resident (0: off) */
  unsigned start_late_ms;
};

/* ---------------------------------------------------------------- agents, pools, memory */

enum sim_pool_kind { POOL_COARSE, POOL_FINE, POOL_EXT_FINE, POOL_GROUP, POOL_SYS_FINE, POOL_SYS_COARSE };

struct sim_agent;
struct sim_pool {
  struct sim_agent *agent;
  enum sim_pool_kind kind;
  hsa_amd_segment_t segment;
  uint32_t flags;       /* hsa_amd_memory_pool_global_flag_t bits */
  size_t size;
  bool alloc_allowed;
};

/* A CU's resources in use, per SIMD where the hardware allocates per SIMD. */
struct sim_cu {
  uint32_t waves[4], vgprs[4], sgprs[4];
  uint32_t lds, barriers;
};

struct sim_dispatch;
struct sim_agent {
  unsigned index;       /* position in hsa_iterate_agents order */
  bool gpu;
  unsigned gpu_index;   /* among GPU agents */
  unsigned numa_node;   /* a CPU agent's node (its index), a GPU's nearest node */
  char name[16];        /* "gfx950" / "cpu" */
  char isa[80];         /* full target id */
  enum hm_isa_arch arch;
  hm_cu_limits limits;
  unsigned ncus;
  struct sim_pool pools[SIM_MAX_POOLS];
  unsigned npools;
  /* CTA placement: the CUs' usage and the dispatches waiting for room, in order */
  pthread_mutex_t lock;
  struct sim_cu *cu;
  unsigned next_cu;     /* CTAs are dealt round-robin over CUs, as the hardware does */
  struct sim_dispatch *pending_head, *pending_tail;
  struct sim_dispatch *start_failed; /* a dispatch a CTA thread could not be started for */
  /* copy engine */
  pthread_t copier;
  bool copier_started;
  pthread_cond_t copy_cv;
  struct sim_copy *copies;
};

/* One allocation (own or attached through IPC), backed by a memfd so other processes can map it. */
struct sim_alloc {
  uintptr_t base;
  size_t size;
  int fd;
  struct sim_pool *pool;      /* NULL for an IPC attachment */
  struct sim_agent *owner;    /* agent whose memory it is (NULL: system memory) */
  uint32_t access;            /* bit per agent index allowed to access it */
  bool attached;              /* mapped by hsa_amd_ipc_memory_attach */
  uint64_t id;
};

/* ---------------------------------------------------------------- signals */

/* The layout begins with ROCr's amd_signal_t: handle = its address, value at byte 8, as the
 * packet processor of a GPU sees it. */
struct sim_signal {
  amd_signal_t amd;
  _Atomic uint32_t seq;       /* futex word: bumped on every value change */
  _Atomic uint32_t waiters;
  _Atomic uint32_t busy;      /* changes under way (sim_signal_busy .. sim_signal_changed): destroy waits */
  uint32_t magic;
  bool is_doorbell;
  struct sim_queue *queue;    /* for a doorbell */
};
#define SIM_SIGNAL_MAGIC 0x5167a1edu

/* ---------------------------------------------------------------- executables and kernels */

struct sim_kernel {
  uint32_t magic;
  char name[HM_CO_NAME_MAX];
  char symbol[HM_CO_NAME_MAX];
  void (*fn)(const void *kernarg);
  hm_co_kernel meta;          /* from the gfx code object */
  hm_kernel_resources res;
  struct sim_agent *agent;
  struct sim_exe *exe;
};
#define SIM_KERNEL_MAGIC 0x6b65726eu

struct sim_exe {
  uint32_t magic;
  bool frozen;
  void *host_image;           /* the host kernel object handed over for this executable */
  size_t host_size;
  void *dl;                   /* its dlopen handle */
  int memfd;
  struct sim_kernel *kernels;
  unsigned nkernels;
  struct sim_agent *agent;
};
#define SIM_EXE_MAGIC 0x65786563u

struct sim_reader {
  uint32_t magic;
  void *image;
  size_t size;
};
#define SIM_READER_MAGIC 0x72656164u

/* ---------------------------------------------------------------- queues and dispatches */

struct sim_queue {
  amd_queue_t *amd;           /* ROCr's queue structure; amd->hsa_queue is what callers hold */
  void *ring;
  uint32_t size;
  struct sim_agent *agent;
  struct sim_signal *doorbell;
  void (*callback)(hsa_status_t, hsa_queue_t *, void *);
  void *cb_data;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cv;          /* a dispatch of this queue finished */
  _Atomic bool stop;
  _Atomic bool failed;        /* after an error the queue processes nothing more */
  _Atomic uint64_t rung;      /* packets below this id were announced by a doorbell store */
  unsigned inflight;          /* dispatches launched and not finished */
  _Atomic bool blocked;       /* the processor waits on a packet's barrier bit or dependencies */
  char error[1024];
  uint32_t magic;
};
#define SIM_QUEUE_MAGIC 0x71756575u

enum lane_state { LANE_READY, LANE_RUNNING, LANE_BARRIER, LANE_WAVE, LANE_POLLING, LANE_DONE };

struct sim_cta;
#define SIM_TR_NEW 8u
struct sim_lane {
  struct sim_fiber fiber;
  void *fiber_stack;
  size_t fiber_stack_size;
  struct sim_cta *cta;
  uint32_t lid;
  enum lane_state state;
  uint32_t wave_parity;       /* which exchange buffer its next wave operation uses */
  uint32_t turns;             /* turns it has ended (its stack canary is checked every few) */
  /* the trace (trace.c): the stage slot its events count in, its level there (the runs of waits on
   * other CTAs' stages it has passed, each run ended by a weight load) and whether it has waited since
   * its level last rose (its next weight load raises it) */
  uint32_t tr_slot;
  uint32_t tr_level;
  bool tr_pending;
  /* the writers' stages (and their latest interval) it has waited on since the CTA's last barrier,
   * which the barrier makes known to the whole CTA (trace.c tr_known); past SIM_TR_NEW a wait not in
   * them counts as new */
  uint32_t tr_nnew;
  struct sim_tr_writer {
    uint32_t agent, launch, cta, slot, interval;
  } tr_new[SIM_TR_NEW];
};

/* Below each fiber stack, under its canary, a zone no work-item uses (committed only if touched):
 * a stack that overflows by less than this lands there, not in the next work-item's frames,
 * until its canary is checked (cta.c). */
#define SIM_STACK_ZONE 4096u

/* One wave's exchange area for cross-lane operations: each lane deposits its operand, the last
 * to arrive releases the others, everyone reads what it needs. Two areas alternate so a fast
 * lane's next operation cannot overwrite what a slow lane has yet to read. */
struct sim_wave_xchg {
  uint32_t arrived;
  uint32_t kind;
  uint64_t active;            /* lanes that deposited */
  union {
    uint32_t u32[64];
    struct dev_mfma_lane mfma[64];
  } slot;
  /* a matrix instruction's D registers of every lane, computed once by the first lane to read
   * them (mfma_state: 0 not yet, 1 done, 2 refused) */
  uint32_t mfma_state;
  float mfma_d[64][16];
};

/* The weak-visibility model's state of one CTA (see memmodel.c). */
#define SIM_MAX_WAVES (SIM_MAX_CTA / 64u)
struct sim_pending {
  uintptr_t addr;             /* 4-byte aligned word (8-byte aligned when wide) */
  uint32_t value;
  uint32_t value_hi;          /* the word at addr + 4 of a wide entry */
  uint32_t seq;               /* the CTA's store count when it was made (visibility to other waves) */
  uint8_t cls;                /* PEND_RELEASE or PEND_COMPLETE */
  uint8_t need_system;        /* target memory needs a system-scope release */
  uint8_t late;               /* under chaos, a complete-class data store that lands only when its wave
                                 waits or releases, or once the dispatch is quiet (memmodel.c) */
  uint8_t live;
  uint8_t wide;               /* an aligned 8-byte store: both words land together (single-copy atomic) */
};
struct sim_line {
  uintptr_t tag;              /* line address, 0 = empty */
  uint8_t data[SIM_LINE];
};
#define SIM_CACHE_LINES 1024u
struct sim_hslot {
  uintptr_t addr;
  uint32_t idx, gen;          /* idx: wave << 24 | index in that wave's buffer */
};
/* One wave's store buffer: its stores not yet in memory, in program order (s_waitcnt vmcnt
 * counts a wave's own stores only, so each wave drains and publishes its own). */
struct sim_wavebuf {
  struct sim_pending *pend;
  uint32_t npend, cap, live, live_complete;
  uint32_t visible_seq;       /* its entries up to this seq are visible to the CTA's other waves */
};
struct sim_memview {
  struct sim_wavebuf wave[SIM_MAX_WAVES];
  uint32_t live, live_complete; /* over all waves */
  uint32_t live_late;         /* late entries (sim_pending.late) over all waves */
  uint64_t late_since_ns;     /* since when the CTA has been idle with late entries (0: not) */
  uint64_t late_first_ns;     /* when the first of the live late entries was stored (0: none live) */
  uint32_t seq;               /* stores made so far (since the last quiet point) */
  uint32_t drain_wave;        /* where the next drain_one starts looking */
  struct sim_hslot *hash;     /* word address -> its newest pending entry */
  uint32_t hash_cap, hash_used, gen;
  struct sim_line *cache;     /* SIM_CACHE_LINES lines, direct mapped: the CU's L1, shared by its waves */
  /* the last registry lookups (a kernel streams from a few allocations at once: weights,
   * activations, hand-off scratch), so most accesses skip the registry's lock */
  struct sim_alloc last[SIM_ALLOC_CACHE];
  uint32_t last_next;         /* the entry the next miss replaces */
};

struct sim_cta {
  struct sim_dispatch *d;
  uint32_t id, size, nwaves;
  struct sim_lane *lanes;     /* size of them */
  struct sim_fiber sched;     /* the worker's own context */
  uint8_t *lds;
  uint32_t lds_size;
  uint32_t live, bar_arrived;
  struct sim_wave_xchg (*xchg)[2];
  uint32_t *wave_live;        /* live lanes a wave */
  struct sim_memview mem;
  uint64_t rng;               /* chaos */
  uint32_t poll_rounds_idle;  /* consecutive scheduling rounds with only polling lanes */
  uint32_t turns;             /* lane turns since the CTA began (chaos start order) */
  bool holding_next;          /* chaos: the next CTA in the start order waits for this one */
  /* the lagging rank (HSAMONO_SIM_LAG_RANK, cta.c) */
  bool lag_armed;             /* pushed since its last hold: its next system-scope load holds */
  bool lag_holding;
  uint64_t lag_start_ns, lag_quiet_ns, lag_next_ns, lag_seen;
  bool progressed;
  bool waiting;               /* counted in d->waiting: idle a whole round with no progress */
  bool aborted;
  char trap[512];
  unsigned cu;                /* where it was placed */
  uint32_t pos;               /* its place in the dispatch's start order */
  uint32_t simd_waves[4];
  struct sim_trace_cta *tr;   /* the trace's counters of this CTA (trace.c), NULL until one is traced */
};

struct sim_dispatch {
  struct sim_queue *q;
  struct sim_kernel *k;
  hsa_kernel_dispatch_packet_t pkt;
  uint64_t packet_id;
  uint32_t nctas, cta_size, group_bytes;
  uint32_t next;              /* next CTA (position in order[]) to place */
  uint32_t *order;            /* CTA start order (a permutation under chaos) */
  uint32_t laggard;           /* under chaos, the CTA that publishes late (cta.c); else none */
  uint8_t *started;           /* per CTA */
  _Atomic uint32_t finished;  /* CTAs done (or abandoned) */
  _Atomic uint32_t running;
  _Atomic uint64_t progress;  /* bumped by anything that moves the kernel forward */
  _Atomic uint32_t waiting;   /* CTAs idle (only polling work-items) a whole round with no progress */
  _Atomic uint32_t begun;     /* chaos: CTAs (in start order) that have begun running */
  _Atomic bool abort;
  _Atomic bool failed;
  _Atomic bool ended;         /* completion reported (once) */
  uint64_t abort_ns;          /* when it was aborted: CTAs that never stop are abandoned later */
  char error[1024];
  uint64_t last_progress, last_change_ns;
  /* the watchdog's evidence that the dispatch ran while it made no progress (exec.c) */
  _Atomic uint64_t idle_rounds; /* its CTAs' scheduling rounds with only polling work-items */
  uint64_t rounds_at_change, cpu_at_change_ns;
  _Atomic uint64_t peer_poll_ns; /* the last round of a wait on a peer (DEV_POLL_PEER): no hang */
  uint32_t resident_limit;    /* CUs x resident CTAs a CU for this kernel */
  uint32_t hold_from;         /* order[] positions from here are held back (HSAMONO_SIM_HOLD_CTAS) */
  bool hold_late;             /* they start once every CTA before them has ended */
  bool hold_parked;           /* off the pending list until then (under the agent's lock) */
  struct sim_dispatch *next_pending;
  struct sim_dispatch *next_active;
  uint64_t seq;
  bool tr_on;                 /* traced (trace.c): decided once, at its start */
  uint32_t tr_launch;         /* its order among its agent's traced dispatches */
};

/* ---------------------------------------------------------------- the agent's global state */

struct sim_state {
  pthread_mutex_t lock;
  int refcount;               /* hsa_init / hsa_shut_down */
  struct sim_config cfg;
  struct sim_agent agents[SIM_MAX_AGENTS];
  unsigned nagents;
  /* allocations, sorted by base */
  pthread_rwlock_t alloc_lock;
  struct sim_alloc *allocs;
  unsigned nallocs, alloc_cap;
  uint64_t next_alloc_id;
  /* dispatches in flight (for the watchdog) */
  struct sim_dispatch *active;
  pthread_t watchdog;
  bool watchdog_started;
  _Atomic bool stopping;
  uint64_t dispatch_seq;
  char describe[384];
  _Atomic uint32_t waiting;   /* CTAs idle a whole round, over every dispatch (their naps' length) */
};

extern struct sim_state sim;

/* ---------------------------------------------------------------- shared functions */

hsa_status_t sim_error(hsa_status_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t sim_now_ns(void);
uint64_t sim_clock_ns(clockid_t clock); /* clock_gettime's clock in ns (the watchdog's CPU time) */
void sim_config_load(struct sim_config *cfg);

/* agents */
struct sim_agent *sim_agent_of(hsa_agent_t a);
struct sim_pool *sim_pool_of(hsa_amd_memory_pool_t p);

/* allocations */
bool sim_alloc_find(uintptr_t addr, struct sim_alloc *out);
void sim_allocs_release_all(void);

/* signals */
struct sim_signal *sim_signal_of(hsa_signal_t s);
/* A change of a signal's value: sim_signal_busy before the value changes, sim_signal_changed after it
 * (wakes the waiters, ends the change). Destroy waits for changes under way to end: a waiter that saw
 * the new value may destroy the signal at once, before the changer's wake is done. */
void sim_signal_busy(struct sim_signal *s);
void sim_signal_changed(struct sim_signal *s);
/* A completion (a dispatch's, a barrier packet's, a copy's): the value decremented with release, the
 * waiters woken, all of it one change. */
void sim_signal_complete(struct sim_signal *s);
hsa_status_t sim_signal_new(int64_t value, struct sim_signal **out);
void sim_signal_free(struct sim_signal *s);
/* sleep until the signal's change counter moves past seq (or the timeout) */
void sim_signal_wait_seq(struct sim_signal *s, uint32_t seq, uint64_t timeout_ns);
int64_t sim_signal_wait_value(struct sim_signal *s, hsa_signal_condition_t cond, int64_t cmp, uint64_t timeout_ns,
                              const _Atomic bool *stop);

/* dispatch and execution */
struct sim_kernel *sim_kernel_lookup(uint64_t kernel_object);
void sim_dispatch_start(struct sim_queue *q, const hsa_kernel_dispatch_packet_t *pkt, uint64_t id,
                        struct sim_kernel *k);
void sim_exec_shutdown(void);
void sim_dispatches_abort_queue(struct sim_queue *q);
/* CTAs of q's dispatches the agent has taken from the ring but not placed on a CU (no room, or
 * held back by HSAMONO_SIM_HOLD_CTAS) */
uint32_t sim_queue_unplaced_ctas(struct sim_queue *q);
void sim_dispatch_abort(struct sim_dispatch *d, const char *why);
void sim_copiers_stop(void);
void sim_watchdog_ensure(void);
void sim_cta_run(struct sim_cta *c);
/* A worker thread is leaving: free its scheduler's rings. */
void sim_cta_thread_end(void);
void sim_queue_fail(struct sim_queue *q, hsa_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* the memory model (memmodel.c) */
void sim_mem_init(struct sim_memview *m);
void sim_mem_free(struct sim_memview *m);
void sim_mem_reset(struct sim_memview *m);
void sim_mem_load(struct sim_cta *c, const void *p, void *out, uint32_t bytes, enum dev_cache_policy cp);
void sim_mem_store(struct sim_cta *c, void *p, const void *in, uint32_t bytes, enum dev_cache_policy cp);
uint64_t sim_mem_atomic(struct sim_cta *c, void *p, enum dev_atomic_op op, uint32_t bytes, uint64_t v, uint64_t cmp,
                        enum dev_order order, enum dev_scope scope);
void sim_mem_fence(struct sim_cta *c, enum dev_order order, enum dev_scope scope);
void sim_mem_wait_stores(struct sim_cta *c);
void sim_mem_drain_one(struct sim_cta *c);
void sim_mem_flush_all(struct sim_cta *c);
void sim_mem_barrier(struct sim_cta *c);
void sim_mem_drain_idle(struct sim_cta *c);

/* the CTA side (cta.c): what dev_host ops call */
extern SIM_TLS struct sim_lane *sim_cur;
void sim_lane_yield(enum lane_state st);
void sim_check_abort(void);
__attribute__((noreturn)) void sim_trap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t sim_rng(uint64_t *state);
void sim_chaos_point(void);
void sim_chaos_lag(void);
void sim_chaos_laggard_drain(void);
void sim_lag_pushed(struct sim_cta *c);
void sim_lag_hold(struct sim_cta *c);
uint64_t sim_gpus_progress(uint32_t gpus);
extern const struct dev_host_ops sim_dev_ops;

/* the trace (trace.c, hm_trace.h): each hook is called only for a traced dispatch (d->tr_on) */
void sim_trace_dispatch(struct sim_dispatch *d);
bool sim_trace_cta_begin(struct sim_cta *c);
void sim_trace_cta_end(struct sim_cta *c);
void sim_trace_cta_free(struct sim_cta *c);
void sim_trace_load(struct sim_lane *l, const void *p, const void *out, uint32_t bytes, enum dev_cache_policy cp);
void sim_trace_store(struct sim_lane *l, const void *p, const void *in, uint32_t bytes, enum dev_cache_policy cp);
void sim_trace_atomic(struct sim_lane *l, void *p, enum dev_atomic_op op, uint32_t bytes, uint64_t v, uint64_t old,
                      uint64_t cmp, enum dev_scope scope);
void sim_trace_mfma(struct sim_lane *l, enum dev_mfma_op op);
void sim_trace_stage(struct sim_lane *l, uint32_t slot);
void sim_trace_barrier(struct sim_cta *c);

#endif /* HM_SIM_H */
