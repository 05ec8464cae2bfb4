/* hsa/rt_runtime.c: loading the HSA library (ROCr or the software agent) with dlopen, resolving
 * every entry point once, discovering agents and their pools, and closing everything down. */
#include <dlfcn.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_internal.h"

uint64_t hm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

hm_status hm_hsa_fail(const hm_runtime *rt, hsa_status_t s, const char *fmt, ...) {
  char what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *str = NULL;
  if (!rt || !rt->api.hsa_status_string || rt->api.hsa_status_string(s, &str) != HSA_STATUS_SUCCESS || !str)
    str = "unknown status";
  return hm_fail(HM_ERR_RUNTIME, "%s: %s (0x%x)", what, str, (unsigned)s);
}

/* ---------------------------------------------------------------- loading */

static const char rocr_lib[] = "libhsa-runtime64.so.1";

/* libhsamono-sim.so in this library's own directory (both are built and installed together). */
static void sim_path(char *out, size_t cap) {
  const char *e = getenv("HSAMONO_SIM_LIB");
  if (e && *e) {
    snprintf(out, cap, "%s", e);
    return;
  }
  Dl_info info;
  if (dladdr((void *)&hm_runtime_open, &info) && info.dli_fname) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", info.dli_fname);
    snprintf(out, cap, "%s/libhsamono-sim.so", dirname(tmp));
  } else {
    snprintf(out, cap, "libhsamono-sim.so");
  }
}

static hm_status load_table(hm_runtime *rt, const char *path) {
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) return hm_fail(HM_ERR_RUNTIME, "cannot load %s: %s", path, dlerror());
  struct hm_hsa_api *api = &rt->api;
  memset(api, 0, sizeof *api);
  api->dl = dl;
  char missing[256] = "";
#define HM_API_LOAD(name)                                                                                   \
  api->name = (__typeof__(name) *)dlsym(dl, #name);                                                         \
  if (!api->name && strlen(missing) + sizeof(#name) + 2 < sizeof missing)                                   \
    strcat(strcat(missing, missing[0] ? " " : ""), #name);
  HM_HSA_FUNCTIONS(HM_API_LOAD)
#undef HM_API_LOAD
  if (missing[0]) {
    dlclose(dl);
    memset(api, 0, sizeof *api);
    return hm_fail(HM_ERR_RUNTIME, "%s lacks HSA entry points: %s", path, missing);
  }
  api->sim_set_host_object = (hm_sim_set_host_object_fn)dlsym(dl, HM_SIM_SET_HOST_OBJECT);
  api->sim_queue_error = (hm_sim_queue_error_fn)dlsym(dl, HM_SIM_QUEUE_ERROR);
  api->sim_queue_unplaced = (hm_sim_queue_unplaced_fn)dlsym(dl, HM_SIM_QUEUE_UNPLACED);
  api->sim_describe = (hm_sim_describe_fn)dlsym(dl, HM_SIM_DESCRIBE);
  api->sim_trace_begin = (hm_sim_trace_begin_fn)dlsym(dl, HM_SIM_TRACE_BEGIN);
  api->sim_trace_end = (hm_sim_trace_end_fn)dlsym(dl, HM_SIM_TRACE_END);
  rt->sim = api->sim_set_host_object != NULL;
  snprintf(rt->backend, sizeof rt->backend, "%s", path);
  return HM_OK;
}

static void unload_table(hm_runtime *rt) {
  if (rt->api.dl) dlclose(rt->api.dl);
  memset(&rt->api, 0, sizeof rt->api);
}

/* ---------------------------------------------------------------- agents and pools */

struct discover {
  hm_runtime *rt;
  hsa_agent_t gpus[64];
  unsigned ngpus;
};

static hsa_status_t on_agent(hsa_agent_t a, void *data) {
  struct discover *d = data;
  hsa_device_type_t type;
  if (d->rt->api.hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS) return HSA_STATUS_SUCCESS;
  if (type == HSA_DEVICE_TYPE_GPU && d->ngpus < 64) d->gpus[d->ngpus++] = a;
  if (type == HSA_DEVICE_TYPE_CPU && d->rt->ncpus < HM_MAX_CPU_AGENTS) {
    struct hm_cpu *c = &d->rt->cpus[d->rt->ncpus++];
    c->h = a;
    d->rt->api.hsa_agent_get_info(a, HSA_AGENT_INFO_NODE, &c->node);
    d->rt->api.hsa_agent_get_info(a, HSA_AGENT_INFO_NAME, c->name);
    c->name[sizeof c->name - 1] = 0;
  }
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t on_isa(hsa_isa_t isa, void *data) {
  hm_agent *a = data;
  uint32_t len = 0;
  if (a->rt->api.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, &len) != HSA_STATUS_SUCCESS ||
      len >= sizeof a->info.isa)
    return HSA_STATUS_SUCCESS;
  char name[sizeof a->info.isa] = "";
  if (a->rt->api.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, name) == HSA_STATUS_SUCCESS) {
    memcpy(a->info.isa, name, sizeof name);
    return HSA_STATUS_INFO_BREAK; /* the first ISA is the agent's own */
  }
  return HSA_STATUS_SUCCESS;
}

/* Classify a GPU agent's pools by their global flags (spec/runtime.md §1.2). */
static hsa_status_t on_gpu_pool(hsa_amd_memory_pool_t p, void *data) {
  hm_agent *a = data;
  const struct hm_hsa_api *api = &a->rt->api;
  hsa_amd_segment_t seg;
  uint32_t flags = 0;
  size_t size = 0, granule = 0;
  bool alloc = false;
  if (api->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg) != HSA_STATUS_SUCCESS)
    return HSA_STATUS_SUCCESS;
  api->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SIZE, &size);
  if (seg == HSA_AMD_SEGMENT_GROUP) {
    a->info.lds_bytes = (uint32_t)size;
    return HSA_STATUS_SUCCESS;
  }
  if (seg != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_SUCCESS;
  api->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  api->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
  api->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE, &granule);
  if (!alloc) return HSA_STATUS_SUCCESS;
  int kind = -1;
  if (flags & HM_POOL_FLAG_COARSE_GRAINED) kind = HM_POOL_COARSE;
  else if (flags & HM_POOL_FLAG_EXTENDED_SCOPE_FINE_GRAINED) kind = HM_POOL_UNCACHED;
  else if (flags & HM_POOL_FLAG_FINE_GRAINED) kind = HM_POOL_FINE;
  if (kind >= 0 && !a->info.pool_present[kind]) {
    a->pools[kind] = p;
    a->info.pool_present[kind] = true;
    a->info.pool_size[kind] = size;
    a->info.pool_granule[kind] = granule;
  }
  return HSA_STATUS_SUCCESS;
}

struct cpu_pools {
  hm_runtime *rt;
  struct hm_cpu *cpu;
};

/* A CPU agent's system pools: the first kernarg-capable and the first fine-grained one. */
static hsa_status_t on_cpu_pool(hsa_amd_memory_pool_t p, void *data) {
  hm_runtime *rt = ((struct cpu_pools *)data)->rt;
  struct hm_cpu *c = ((struct cpu_pools *)data)->cpu;
  hsa_amd_segment_t seg;
  uint32_t flags = 0;
  bool alloc = false;
  if (rt->api.hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg) != HSA_STATUS_SUCCESS ||
      seg != HSA_AMD_SEGMENT_GLOBAL)
    return HSA_STATUS_SUCCESS;
  rt->api.hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  rt->api.hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
  if (!alloc) return HSA_STATUS_SUCCESS;
  if ((flags & HM_POOL_FLAG_KERNARG_INIT) && !c->has_kernarg) c->kernarg = p, c->has_kernarg = true;
  if ((flags & HM_POOL_FLAG_FINE_GRAINED) && !c->has_fine) c->fine = p, c->has_fine = true;
  return HSA_STATUS_SUCCESS;
}

/* The NUMA distance from GPU agent a to CPU agent c: the sum of the link hops' distances from the
 * GPU to the CPU's system pool (ROCr's link information, from KFD's io links), UINT32_MAX when
 * unknown (no hops reported, or no system pool to ask about). */
static uint32_t cpu_distance(const hm_runtime *rt, const hm_agent *a, const struct hm_cpu *c) {
  if (!c->has_fine && !c->has_kernarg) return UINT32_MAX;
  hsa_amd_memory_pool_t pool = c->has_fine ? c->fine : c->kernarg;
  uint32_t hops = 0;
  if (rt->api.hsa_amd_agent_memory_pool_get_info(a->h, pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS, &hops) !=
          HSA_STATUS_SUCCESS ||
      hops == 0 || hops > 8)
    return UINT32_MAX;
  /* the attribute fills one entry a hop */
  hsa_amd_memory_pool_link_info_t li[8];
  memset(li, 0, sizeof li);
  if (rt->api.hsa_amd_agent_memory_pool_get_info(a->h, pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO, li) !=
      HSA_STATUS_SUCCESS)
    return UINT32_MAX;
  uint32_t d = 0;
  for (uint32_t i = 0; i < hops; i++) d += li[i].numa_distance;
  return d;
}

/* The CPU agent nearest GPU agent a: the smallest NUMA distance, ties (and unknown distances) to
 * the lowest index; CPU agent 0 when none reports a distance. */
static void nearest_cpu(const hm_runtime *rt, hm_agent *a) {
  hm_agent_info *in = &a->info;
  in->cpu_agent = 0;
  in->numa_distance = 0;
  in->numa_node = rt->ncpus ? rt->cpus[0].node : 0;
  uint32_t best = UINT32_MAX;
  for (unsigned i = 0; i < rt->ncpus; i++) {
    uint32_t d = cpu_distance(rt, a, &rt->cpus[i]);
    if (d < best) best = d, in->cpu_agent = i;
  }
  if (rt->ncpus) in->numa_node = rt->cpus[in->cpu_agent].node;
  in->numa_distance = best == UINT32_MAX ? 0 : best;
  hm_log(HM_LOG_DEBUG, "GPU agent %u: nearest CPU agent %u (NUMA node %u, distance %u)", a->index, in->cpu_agent,
         in->numa_node, in->numa_distance);
}

static hm_status describe_agent(hm_runtime *rt, hm_agent *a) {
  const struct hm_hsa_api *api = &rt->api;
  hm_agent_info *in = &a->info;
  char name[64] = "", product[64] = "";
  api->hsa_agent_get_info(a->h, HSA_AGENT_INFO_NAME, name);
  api->hsa_agent_get_info(a->h, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME, product);
  memcpy(in->name, name, sizeof in->name);
  memcpy(in->product, product, sizeof in->product);
  api->hsa_agent_get_info(a->h, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &in->cus);
  api->hsa_agent_get_info(a->h, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU, &in->simds_per_cu);
  api->hsa_agent_get_info(a->h, HSA_AGENT_INFO_WAVEFRONT_SIZE, &in->wave_size);
  api->hsa_agent_get_info(a->h, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU, &in->max_waves_per_cu);
  api->hsa_agent_get_info(a->h, HSA_AGENT_INFO_NODE, &in->node);
  api->hsa_agent_get_info(a->h, HSA_AGENT_INFO_QUEUE_MIN_SIZE, &in->queue_min);
  api->hsa_agent_get_info(a->h, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &in->queue_max);
  /* NUM_XCC arrived with newer ROCr: older libraries reject it, which means one */
  if (api->hsa_agent_get_info(a->h, HM_AMD_AGENT_INFO_NUM_XCC, &in->xccs) != HSA_STATUS_SUCCESS) in->xccs = 1;
  hsa_status_t s = api->hsa_agent_iterate_isas(a->h, on_isa, a);
  if (s != HSA_STATUS_SUCCESS && s != HSA_STATUS_INFO_BREAK) return hm_hsa_fail(rt, s, "agent %u: ISA", a->index);
  if (!in->isa[0]) return hm_fail(HM_ERR_RUNTIME, "agent %u (%s) reports no ISA", a->index, in->name);
  if (hm_target_id_parse(in->isa, &in->tid) != HM_OK) return hm_fail_prefix(HM_ERR_RUNTIME, "agent %u", a->index);
  s = api->hsa_amd_agent_iterate_memory_pools(a->h, on_gpu_pool, a);
  if (s != HSA_STATUS_SUCCESS) return hm_hsa_fail(rt, s, "agent %u: memory pools", a->index);
  /* kernel arguments and host-visible words come from the system pools of the nearest CPU
   * agent (its NUMA node's memory), so the host writes and the GPU reads cross the fewest links */
  nearest_cpu(rt, a);
  hm_rt_numa_prepare(a);
  if (rt->ncpus) {
    const struct hm_cpu *c = &rt->cpus[in->cpu_agent];
    if (c->has_kernarg) {
      a->pools[HM_POOL_KERNARG] = c->kernarg;
      a->info.pool_present[HM_POOL_KERNARG] = true;
    }
    if (c->has_fine) {
      a->pools[HM_POOL_HOST] = c->fine;
      a->info.pool_present[HM_POOL_HOST] = true;
    }
  }
  /* processors without a CU model (not gfx942 / gfx950) are listed but cannot run the kernels */
  if (hm_cu_limits_for(in->tid.processor, &in->limits) == HM_OK && in->lds_bytes == 0)
    in->lds_bytes = in->limits.lds_bytes;
  return HM_OK;
}

static hm_status discover(hm_runtime *rt) {
  struct discover d = {.rt = rt};
  hsa_status_t s = rt->api.hsa_iterate_agents(on_agent, &d);
  if (s != HSA_STATUS_SUCCESS) return hm_hsa_fail(rt, s, "hsa_iterate_agents");
  for (unsigned i = 0; i < rt->ncpus; i++) {
    struct cpu_pools cp = {rt, &rt->cpus[i]};
    rt->api.hsa_amd_agent_iterate_memory_pools(rt->cpus[i].h, on_cpu_pool, &cp);
  }
  rt->agents = calloc(d.ngpus ? d.ngpus : 1, sizeof *rt->agents);
  if (!rt->agents) return hm_fail(HM_ERR_NO_MEMORY, "out of memory for %u agents", d.ngpus);
  rt->nagents = d.ngpus;
  for (unsigned i = 0; i < d.ngpus; i++) {
    hm_agent *a = &rt->agents[i];
    a->rt = rt;
    a->h = d.gpus[i];
    a->index = i;
    hm_status st = describe_agent(rt, a);
    if (st) return st;
  }
  uint64_t freq = 0;
  if (rt->api.hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &freq) != HSA_STATUS_SUCCESS || !freq)
    freq = 1000000000ull;
  rt->ticks_per_s = freq;
  return HM_OK;
}

/* ---------------------------------------------------------------- open and close */

static hm_status try_open(hm_runtime *rt, const char *path, bool need_gpu) {
  hm_status s = load_table(rt, path);
  if (s) return s;
  hsa_status_t hs = rt->api.hsa_init();
  if (hs != HSA_STATUS_SUCCESS) {
    hm_hsa_fail(rt, hs, "%s: hsa_init", path);
    unload_table(rt);
    return HM_ERR_RUNTIME;
  }
  if ((s = discover(rt)) == HM_OK && need_gpu && rt->nagents == 0)
    s = hm_fail(HM_ERR_NOT_FOUND, "%s found no GPU agent", path);
  if (s) {
    free(rt->agents);
    rt->agents = NULL;
    rt->nagents = rt->ncpus = 0;
    memset(rt->cpus, 0, sizeof rt->cpus);
    rt->api.hsa_shut_down();
    unload_table(rt);
  }
  return s;
}

hm_status hm_runtime_open(const char *which, hm_runtime **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_runtime_open: out is NULL");
  *out = NULL;
  if (!which || !*which) which = getenv("HSAMONO_RUNTIME");
  if (!which || !*which) which = "auto";
  hm_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return hm_fail(HM_ERR_NO_MEMORY, "out of memory");
  pthread_mutex_init(&rt->lock, NULL);
  char simlib[4096];
  sim_path(simlib, sizeof simlib);
  hm_status s;
  if (strcmp(which, "rocr") == 0) {
    s = try_open(rt, rocr_lib, false);
    if (s)
      hm_fail_prefix(s, "ROCr (%s) did not start; without a GPU use the software agent: HSAMONO_RUNTIME=sim", rocr_lib);
  } else if (strcmp(which, "sim") == 0) {
    s = try_open(rt, simlib, false);
  } else if (strcmp(which, "auto") == 0) {
    s = try_open(rt, rocr_lib, true);
    if (s) {
      char why[512];
      snprintf(why, sizeof why, "%s", hm_errmsg());
      s = try_open(rt, simlib, false);
      /* Through the log, not stderr: a library is silent unless asked (HSAMONO_LOG); a tool
       * says where it runs itself (hm_runtime_is_sim, hm_runtime_describe). Once a process. */
      static _Atomic bool told;
      if (!s && !atomic_exchange(&told, true))
        hm_log(HM_LOG_WARN, "no GPU agent (ROCr: %s); running on the software HSA agent (timings are not GPU timings)",
               why);
      if (s) hm_fail_prefix(s, "no GPU agent (%s), and the software agent did not start either", why);
    }
  } else {
    s = try_open(rt, which, false);
  }
  if (s) {
    pthread_mutex_destroy(&rt->lock);
    free(rt);
    return s;
  }
  if (rt->sim) {
    snprintf(rt->backend, sizeof rt->backend, "sim");
    snprintf(rt->describe, sizeof rt->describe, "%s", rt->api.sim_describe ? rt->api.sim_describe() : "software agent");
  } else {
    if (strstr(rt->backend, rocr_lib)) snprintf(rt->backend, sizeof rt->backend, "rocr");
    snprintf(rt->describe, sizeof rt->describe, "ROCr: %u GPU agent%s", rt->nagents, rt->nagents == 1 ? "" : "s");
  }
  *out = rt;
  return HM_OK;
}

void hm_program_unload_all(hm_runtime *rt);
void hm_queue_destroy_all(hm_runtime *rt);
void hm_mem_free_all(hm_runtime *rt);
void hm_signal_destroy_all(hm_runtime *rt);

void hm_runtime_retain(hm_runtime *rt) {
  if (!rt) return;
  pthread_mutex_lock(&rt->lock);
  rt->users++;
  pthread_mutex_unlock(&rt->lock);
}

void hm_runtime_release(hm_runtime *rt) {
  if (!rt) return;
  pthread_mutex_lock(&rt->lock);
  if (rt->users) rt->users--;
  pthread_mutex_unlock(&rt->lock);
}

hm_status hm_runtime_close(hm_runtime *rt) {
  if (!rt) return hm_fail(HM_ERR_INVALID_ARG, "hm_runtime_close: NULL runtime");
  /* the heaps, runners, layers and chains still alive would free into a closed runtime */
  pthread_mutex_lock(&rt->lock);
  unsigned users = rt->users;
  pthread_mutex_unlock(&rt->lock);
  if (users)
    return hm_fail(HM_ERR_BUSY,
                   "hm_runtime_close: %u object(s) built on the runtime (heaps, K1/FFN/K2 runners, chains) still use "
                   "it: destroy them first",
                   users);
  hm_queue_destroy_all(rt);
  hm_program_unload_all(rt);
  hm_signal_destroy_all(rt);
  hm_mem_free_all(rt);
  rt->api.hsa_shut_down();
  unload_table(rt);
  free(rt->agents);
  free(rt->allocs);
  free(rt->signals);
  pthread_mutex_destroy(&rt->lock);
  free(rt);
  return HM_OK;
}

const char *hm_runtime_backend(const hm_runtime *rt) { return rt ? rt->backend : ""; }
bool hm_runtime_is_sim(const hm_runtime *rt) { return rt && rt->sim; }
const char *hm_runtime_describe(const hm_runtime *rt) { return rt ? rt->describe : ""; }

hm_status hm_runtime_trace_begin(hm_runtime *rt) {
  if (!rt) return hm_fail(HM_ERR_INVALID_ARG, "hm_runtime_trace_begin: NULL runtime");
  if (!rt->api.sim_trace_begin)
    return hm_fail(HM_ERR_UNSUPPORTED, "hm_runtime_trace_begin: %s records no trace (the software agent does)",
                   rt->backend);
  rt->api.sim_trace_begin();
  return HM_OK;
}

hm_status hm_runtime_trace_end(hm_runtime *rt, hm_trace *out) {
  if (!rt || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_runtime_trace_end: NULL argument");
  memset(out, 0, sizeof *out);
  if (!rt->api.sim_trace_end)
    return hm_fail(HM_ERR_UNSUPPORTED, "hm_runtime_trace_end: %s records no trace (the software agent does)",
                   rt->backend);
  if (rt->api.sim_trace_end(out)) return hm_fail(HM_ERR_NO_MEMORY, "hm_runtime_trace_end: the agent ran out of memory tracing");
  return HM_OK;
}

void hm_trace_free(hm_trace *t) {
  if (!t) return;
  free(t->launches), free(t->stages), free(t->waits);
  memset(t, 0, sizeof *t);
}

unsigned hm_agent_count(const hm_runtime *rt) { return rt ? rt->nagents : 0; }
unsigned hm_cpu_agent_count(const hm_runtime *rt) { return rt ? rt->ncpus : 0; }
uint32_t hm_cpu_agent_node(const hm_runtime *rt, unsigned cpu) {
  return rt && cpu < rt->ncpus ? rt->cpus[cpu].node : UINT32_MAX;
}
const char *hm_cpu_agent_name(const hm_runtime *rt, unsigned cpu) {
  return rt && cpu < rt->ncpus ? rt->cpus[cpu].name : "";
}
hsa_agent_t hm_rt_cpu_of(const hm_agent *a) {
  return a->rt->ncpus ? a->rt->cpus[a->info.cpu_agent].h : a->h;
}

hm_agent *hm_agent_get(hm_runtime *rt, unsigned index) {
  if (!rt || index >= rt->nagents) {
    hm_fail(HM_ERR_NOT_FOUND, "no GPU agent %u (%u present)", index, rt ? rt->nagents : 0);
    return NULL;
  }
  return &rt->agents[index];
}

const hm_agent_info *hm_agent_info_of(const hm_agent *a) { return a ? &a->info : NULL; }
unsigned hm_agent_index(const hm_agent *a) { return a ? a->index : 0; }
hm_runtime *hm_agent_runtime(const hm_agent *a) { return a ? a->rt : NULL; }

bool hm_rt_owns_agent(const hm_runtime *rt, const hm_agent *a) {
  return rt && a && a >= rt->agents && a < rt->agents + rt->nagents;
}

/* A queue error reported by the agent and not yet returned by any call: return it once. */
hm_status hm_rt_take_fault(hm_runtime *rt) {
  hm_queue *q = atomic_exchange(&rt->fault, NULL);
  if (!q) return HM_OK;
  return hm_fail(HM_ERR_QUEUE_FAULT, "queue on agent %u: %s", q->agent->index, q->fault_msg);
}
