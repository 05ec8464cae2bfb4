/* hsa/rt_internal.h: the runtime's private structures: the table of HSA entry points resolved
 * once from the loaded library, and what hm_runtime, hm_agent, hm_queue, hm_program hold. */
#ifndef HM_RT_INTERNAL_H
#define HM_RT_INTERNAL_H

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "hm_hsa.h"
#include "hm_hsa_compat.h"
#include "sim/hm_sim_ext.h"

/* Every HSA function the runtime calls, by its name in the library. */
#define HM_HSA_FUNCTIONS(X)                                                                                 \
  X(hsa_init)                                                                                               \
  X(hsa_shut_down)                                                                                          \
  X(hsa_status_string)                                                                                      \
  X(hsa_system_get_info)                                                                                    \
  X(hsa_iterate_agents)                                                                                     \
  X(hsa_agent_get_info)                                                                                     \
  X(hsa_agent_iterate_isas)                                                                                 \
  X(hsa_isa_get_info_alt)                                                                                   \
  X(hsa_amd_agent_iterate_memory_pools)                                                                     \
  X(hsa_amd_memory_pool_get_info)                                                                           \
  X(hsa_amd_agent_memory_pool_get_info)                                                                     \
  X(hsa_amd_memory_pool_allocate)                                                                           \
  X(hsa_amd_memory_pool_free)                                                                               \
  X(hsa_amd_agents_allow_access)                                                                            \
  X(hsa_amd_memory_async_copy)                                                                              \
  X(hsa_amd_memory_fill)                                                                                    \
  X(hsa_signal_create)                                                                                      \
  X(hsa_signal_destroy)                                                                                     \
  X(hsa_signal_load_scacquire)                                                                              \
  X(hsa_signal_store_screlease)                                                                             \
  X(hsa_signal_wait_scacquire)                                                                              \
  X(hsa_queue_create)                                                                                       \
  X(hsa_queue_destroy)                                                                                      \
  X(hsa_queue_load_read_index_scacquire)                                                                    \
  X(hsa_queue_add_write_index_scacq_screl)                                                                  \
  X(hsa_code_object_reader_create_from_memory)                                                              \
  X(hsa_code_object_reader_destroy)                                                                         \
  X(hsa_executable_create_alt)                                                                              \
  X(hsa_executable_load_agent_code_object)                                                                  \
  X(hsa_executable_freeze)                                                                                  \
  X(hsa_executable_destroy)                                                                                 \
  X(hsa_executable_get_symbol_by_name)                                                                      \
  X(hsa_executable_symbol_get_info)                                                                         \
  X(hsa_amd_ipc_memory_create)                                                                              \
  X(hsa_amd_ipc_memory_attach)                                                                              \
  X(hsa_amd_ipc_memory_detach)

struct hm_hsa_api {
  void *dl;
#define HM_API_MEMBER(name) __typeof__(name) *name;
  HM_HSA_FUNCTIONS(HM_API_MEMBER)
#undef HM_API_MEMBER
  /* the software agent's extensions (NULL on ROCr) */
  hm_sim_set_host_object_fn sim_set_host_object;
  hm_sim_queue_error_fn sim_queue_error;
  hm_sim_queue_unplaced_fn sim_queue_unplaced;
  hm_sim_describe_fn sim_describe;
  hm_sim_trace_begin_fn sim_trace_begin;
  hm_sim_trace_end_fn sim_trace_end;
};

struct hm_alloc {
  void *p;
  size_t size;
  hm_agent *agent; /* whose pool (NULL: attached through IPC) */
  hm_pool_kind kind;
  bool attached;
  unsigned holds; /* hm_mem_hold: users that read it later (a chain's packets, a K1 on a shared
                   * epoch); hm_mem_free refuses while any */
};

struct hm_agent {
  hm_runtime *rt;
  hsa_agent_t h;
  unsigned index;
  hm_agent_info info;
  hsa_amd_memory_pool_t pools[HM_POOL_KINDS];
  /* its NUMA node's usable CPUs, found once at open (hm_rt_numa_prepare) so that binding a rank
   * thread, once a group step, is one system call: numa_st says whether it can be bound, and
   * numa_why why not */
  cpu_set_t numa_cpus;
  unsigned numa_ncpus;
  hm_status numa_st;
  char numa_why[200];
};

/* A CPU agent (a NUMA node's CPUs and memory, as KFD reports them) and the system pools it
 * offers: each GPU takes its kernel arguments and host-visible words from its nearest one. */
#define HM_MAX_CPU_AGENTS 32
struct hm_cpu {
  hsa_agent_t h;
  uint32_t node; /* HSA_AGENT_INFO_NODE: the KFD node id, taken to be the Linux NUMA node */
  char name[64];
  hsa_amd_memory_pool_t fine, kernarg;
  bool has_fine, has_kernarg;
};

struct hm_runtime {
  struct hm_hsa_api api;
  char backend[256];
  char describe[384];
  bool sim;
  uint64_t ticks_per_s; /* HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: signal-wait timeouts */
  hm_agent *agents;
  unsigned nagents;
  struct hm_cpu cpus[HM_MAX_CPU_AGENTS];
  unsigned ncpus;
  pthread_mutex_t lock;
  /* sorted by address, so a step's pointer checks (hm_mem_check) are a binary search each */
  struct hm_alloc *allocs;
  unsigned nallocs, alloc_cap;
  unsigned users; /* hm_runtime_retain: objects built on it (heaps, launches, chains) */
  hm_queue *queues;
  hm_program *programs;
  hm_signal *signals;
  unsigned nsignals, signal_cap;
  _Atomic(hm_queue *) fault; /* a queue error the next call has not reported yet */
};

struct hm_queue {
  hm_runtime *rt;
  hm_agent *agent;
  hsa_queue_t *hq;
  uint32_t size, mask;
  hsa_kernel_dispatch_packet_t *ring;
  /* which recorded chain packet each ring slot still holds (0: none), for header-only replays */
  uint64_t *slot_owner;
  unsigned chains; /* recorded chains on it (they touch its ring): hm_queue_destroy refuses while any */
  _Atomic int fault_status; /* hsa_status_t of the queue's error, 0 while healthy */
  char fault_msg[1024];
  hm_queue *next;
};

struct hm_kernel {
  hm_program *prog;
  hm_kernel_info info;
  char refused[512]; /* why hm_kernel_get refuses it ("" if usable) */
};

struct hm_program {
  hm_agent *agent;
  hsa_executable_t exe;
  hsa_code_object_reader_t reader;
  hm_codeobj *co;
  hm_kernel *kernels;
  unsigned nkernels;
  hm_program *next;
};

/* helpers shared by the runtime's files */
hm_status hm_hsa_fail(const hm_runtime *rt, hsa_status_t s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
hm_status hm_rt_take_fault(hm_runtime *rt);
bool hm_rt_owns_agent(const hm_runtime *rt, const hm_agent *a);
/* the CPU agent whose system pools serve GPU agent a (its nearest) */
hsa_agent_t hm_rt_cpu_of(const hm_agent *a);
/* find the CPUs of GPU agent a's NUMA node (a->info.numa_node) for hm_agent_bind_thread */
void hm_rt_numa_prepare(hm_agent *a);
bool hm_rt_find_alloc(hm_runtime *rt, const void *p, struct hm_alloc *out);
/* the sorted allocation table (rt_memory.c); the caller holds rt->lock */
int hm_rt_alloc_index(const hm_runtime *rt, const void *p);
hm_status hm_rt_alloc_insert(hm_runtime *rt, const struct hm_alloc *a);
void hm_rt_alloc_remove(hm_runtime *rt, unsigned i);
uint64_t hm_now_ns(void);
/* write one packet body (everything but its first 32 bits) into slot; returns header|setup<<16 */
uint32_t hm_aql_dispatch_body(hsa_kernel_dispatch_packet_t *slot, const hm_dispatch *d, const hm_kernel *k);
uint32_t hm_aql_barrier_body(hsa_kernel_dispatch_packet_t *slot, const hm_barrier_pkt *b);
hm_status hm_queue_reserve(hm_queue *q, uint32_t n, uint64_t *first);
void hm_queue_ring(hm_queue *q, uint64_t last);

#endif /* HM_RT_INTERNAL_H */
