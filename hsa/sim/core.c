/* hsa/sim/core.c: the software agent's lifetime and topology: configuration from the
 * environment, hsa_init / hsa_shut_down, agents with the properties ROCr reports, ISAs, pools. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hm_sim_ext.h"
#include "sim.h"

struct sim_state sim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .alloc_lock = PTHREAD_RWLOCK_INITIALIZER,
};

hsa_status_t sim_error(hsa_status_t s, const char *fmt, ...) {
  if (getenv("HSAMONO_SIM_VERBOSE")) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hsa-mono sim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
  }
  return s;
}

uint64_t sim_clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sim_now_ns(void) { return sim_clock_ns(CLOCK_MONOTONIC); }

/* A bad HSAMONO_SIM_* value: one line on stderr, unasked, naming the variable, the value, what it
 * must be and what is used instead. The agent is a test bench: a run under a misspelt setting must
 * not pass quietly as the run that was asked for (docs/decisions.md). */
static void env_bad(const char *name, const char *value, const char *want, const char *used) {
  fprintf(stderr, "hsa-mono sim: %s=%s is not %s; using %s\n", name, value, want, used);
}

/* A whole unsigned decimal number (digits only, no sign or space, no overflow) */
static bool whole_ulong(const char *e, unsigned long *out) {
  if (*e < '0' || *e > '9') return false;
  char *end;
  errno = 0;
  *out = strtoul(e, &end, 10);
  return !errno && !*end;
}

static unsigned env_uint(const char *name, unsigned dflt, unsigned lo, unsigned hi) {
  const char *e = getenv(name);
  if (!e || !*e) return dflt;
  unsigned long v;
  if (!whole_ulong(e, &v) || v < lo || v > hi) {
    char want[48], used[16];
    snprintf(want, sizeof want, "in %u..%u", lo, hi);
    snprintf(used, sizeof used, "%u", dflt);
    env_bad(name, e, want, used);
    return dflt;
  }
  return (unsigned)v;
}

/* HSAMONO_SIM_NUMA_NODES: 1..ngpus NUMA nodes, each a CPU agent with its own system pools. */
static unsigned numa_nodes(unsigned ngpus) {
  const char *e = getenv("HSAMONO_SIM_NUMA_NODES");
  if (!e || !*e) return 1;
  unsigned long v;
  if (!whole_ulong(e, &v) || v < 1 || v > ngpus) {
    char want[64];
    snprintf(want, sizeof want, "in 1..%u (the GPU agents)", ngpus);
    env_bad("HSAMONO_SIM_NUMA_NODES", e, want, "1 node");
    return 1;
  }
  return (unsigned)v;
}

/* HSAMONO_SIM_WATCHDOG_S: seconds, a whole decimal number > 0 and at most a day (fractions for
 * tests: 0.5) */
static double watchdog_s(void) {
  const char *e = getenv("HSAMONO_SIM_WATCHDOG_S");
  if (!e || !*e) return 60;
  char *end;
  errno = 0;
  double v = (*e >= '0' && *e <= '9') || *e == '.' ? strtod(e, &end) : 0;
  if (!((*e >= '0' && *e <= '9') || *e == '.') || errno || *end || !(v > 0 && v <= 86400)) {
    env_bad("HSAMONO_SIM_WATCHDOG_S", e, "seconds above 0, at most 86400", "60");
    return 60;
  }
  return v;
}

/* HSAMONO_SIM_CHAOS: a seed, a whole unsigned 64-bit number (decimal, 0x hex or 0 octal) */
static bool chaos_seed(uint64_t *seed) {
  const char *e = getenv("HSAMONO_SIM_CHAOS");
  if (!e || !*e) return false;
  char *end;
  errno = 0;
  unsigned long long v = *e >= '0' && *e <= '9' ? strtoull(e, &end, 0) : 0;
  if (*e < '0' || *e > '9' || errno || *end) {
    env_bad("HSAMONO_SIM_CHAOS", e, "a seed (an unsigned 64-bit number)", "no chaos");
    return false;
  }
  *seed = v;
  return true;
}

/* HSAMONO_SIM_HOLD_CTAS: colon-separated parts in any order: the CTAs ("3", "0,5-7"), "late"
 * (start them once every other CTA has ended; the default is never) and a kernel name. Returns
 * false, leaving nothing held, when the value is malformed. */
static bool parse_hold(const char *e, struct sim_config *cfg) {
  char buf[256];
  if (strlen(e) >= sizeof buf) return false;
  strcpy(buf, e);
  bool have_ids = false;
  for (char *save = NULL, *part = strtok_r(buf, ":", &save); part; part = strtok_r(NULL, ":", &save)) {
    if (!strcmp(part, "late")) {
      cfg->hold_late = true;
    } else if (!strcmp(part, "never")) {
      cfg->hold_late = false;
    } else if (*part >= '0' && *part <= '9') {
      if (have_ids) return false;
      have_ids = true;
      for (char *s2 = NULL, *r = strtok_r(part, ",", &s2); r; r = strtok_r(NULL, ",", &s2)) {
        char *end;
        unsigned long lo = strtoul(r, &end, 10), hi = lo;
        if (*end == '-') hi = strtoul(end + 1, &end, 10);
        if (end == r || *end || hi < lo || hi >= (1ul << 24) || cfg->nhold == sizeof cfg->hold / sizeof cfg->hold[0])
          return false;
        cfg->hold[cfg->nhold].lo = (uint32_t)lo;
        cfg->hold[cfg->nhold++].hi = (uint32_t)hi;
        if (hi > cfg->hold_max) cfg->hold_max = (uint32_t)hi;
      }
    } else {
      if (cfg->hold_kernel[0] || strlen(part) >= sizeof cfg->hold_kernel) return false;
      strcpy(cfg->hold_kernel, part);
    }
  }
  return have_ids;
}

/* HSAMONO_SIM_LAG_RANK=g[:ms]: GPU agent g is the lagging rank (cta.c), ms its quiet window (1 to
 * 10000, default 30); a bad value leaves no rank lagging. */
static void lag_rank(struct sim_config *cfg) {
  cfg->lag_gpu = -1;
  cfg->lag_quiet_ms = 30;
  const char *e = getenv("HSAMONO_SIM_LAG_RANK");
  if (!e || !*e) return;
  char g[24], *colon;
  unsigned long v, ms = 30;
  bool ok = strlen(e) < sizeof g;
  if (ok) {
    strcpy(g, e);
    if ((colon = strchr(g, ':'))) {
      *colon = 0;
      ok = whole_ulong(colon + 1, &ms) && ms >= 1 && ms <= 10000;
    }
  }
  if (!ok || !whole_ulong(g, &v) || v >= cfg->ngpus) {
    char want[96];
    snprintf(want, sizeof want, "g[:ms] (g a GPU agent, 0..%u; ms 1..10000)", cfg->ngpus - 1);
    env_bad("HSAMONO_SIM_LAG_RANK", e, want, "no lagging rank");
    return;
  }
  cfg->lag_gpu = (int)v;
  cfg->lag_quiet_ms = (unsigned)ms;
}

void sim_config_load(struct sim_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  const char *arch = getenv("HSAMONO_SIM_ARCH");
  if (arch && *arch && strcmp(arch, "gfx942") != 0 && strcmp(arch, "gfx950") != 0) {
    env_bad("HSAMONO_SIM_ARCH", arch, "gfx950 or gfx942", "gfx950");
    arch = NULL;
  }
  if (arch && !*arch) arch = NULL;
  snprintf(cfg->arch, sizeof cfg->arch, "%s", arch ? arch : "gfx950");
  cfg->ngpus = env_uint("HSAMONO_SIM_AGENTS", 4, 1, SIM_MAX_GPUS);
  cfg->nnodes = numa_nodes(cfg->ngpus);
  cfg->cus = env_uint("HSAMONO_SIM_CUS", strcmp(cfg->arch, "gfx942") == 0 ? 304 : 256, 1, 1024);
  cfg->watchdog_s = watchdog_s();
  const char *weak = getenv("HSAMONO_SIM_WEAK");
  cfg->weak = weak && !strcmp(weak, "1");
  if (weak && *weak && strcmp(weak, "0") && strcmp(weak, "1")) env_bad("HSAMONO_SIM_WEAK", weak, "0 or 1", "off");
  cfg->chaos = chaos_seed(&cfg->chaos_seed);
  cfg->laggard_every = (unsigned)env_uint("HSAMONO_SIM_LAGGARD", 4, 1, 1000000);
  lag_rank(cfg);
  cfg->stack_bytes = (size_t)env_uint("HSAMONO_SIM_STACK_KB", 64, 16, 8192) * 1024;
  cfg->start_late_ms = env_uint("HSAMONO_SIM_START_LATE_MS", 0, 0, 60000);
  const char *hold = getenv("HSAMONO_SIM_HOLD_CTAS");
  if (hold && *hold && !parse_hold(hold, cfg)) {
    env_bad("HSAMONO_SIM_HOLD_CTAS", hold,
            "[kernel:]ids[:late] (ids like 3 or 0,5-7, below 16777216, at most 16 ranges)", "none held");
    cfg->nhold = 0;
    cfg->hold_max = 0;
    cfg->hold_late = false;
    cfg->hold_kernel[0] = 0;
  }
}

/* ---------------------------------------------------------------- topology */

static void add_pool(struct sim_agent *a, enum sim_pool_kind kind, hsa_amd_segment_t seg, uint32_t flags,
                     size_t size, bool alloc) {
  struct sim_pool *p = &a->pools[a->npools++];
  p->agent = a;
  p->kind = kind;
  p->segment = seg;
  p->flags = flags;
  p->size = size;
  p->alloc_allowed = alloc;
}

static void build_topology(void) {
  const struct sim_config *cfg = &sim.cfg;
  sim.nagents = 0;
  /* ROCr lists the CPU agents first, one a NUMA node, each with its node's system memory; their
   * KFD node ids (HSA_AGENT_INFO_NODE, the index here) are the NUMA node numbers */
  for (unsigned n = 0; n < cfg->nnodes; n++) {
    struct sim_agent *cpu = &sim.agents[sim.nagents];
    memset(cpu, 0, sizeof *cpu);
    cpu->index = sim.nagents++;
    cpu->numa_node = n;
    strcpy(cpu->name, "cpu");
    add_pool(cpu, POOL_SYS_FINE, HSA_AMD_SEGMENT_GLOBAL, HM_POOL_FLAG_KERNARG_INIT | HM_POOL_FLAG_FINE_GRAINED,
             64ull << 30, true);
    add_pool(cpu, POOL_SYS_COARSE, HSA_AMD_SEGMENT_GLOBAL, HM_POOL_FLAG_COARSE_GRAINED, 64ull << 30, true);
  }
  bool g942 = strcmp(cfg->arch, "gfx942") == 0;
  for (unsigned i = 0; i < cfg->ngpus; i++) {
    struct sim_agent *a = &sim.agents[sim.nagents];
    memset(a, 0, sizeof *a);
    a->index = sim.nagents++;
    a->gpu = true;
    a->gpu_index = i;
    a->numa_node = i * cfg->nnodes / cfg->ngpus;
    strcpy(a->name, cfg->arch);
    /* ROCr reports the full target id with the part's features: both parts run sramecc on
     * and xnack off in their usual configuration (spec/runtime.md §1.1). */
    snprintf(a->isa, sizeof a->isa, "amdgcn-amd-amdhsa--%s:sramecc+:xnack-", cfg->arch);
    a->arch = g942 ? HM_ISA_GFX942 : HM_ISA_GFX950;
    hm_cu_limits_for(cfg->arch, &a->limits);
    a->ncus = cfg->cus;
    size_t vram = (g942 ? 192ull : 288ull) << 30;
    add_pool(a, POOL_COARSE, HSA_AMD_SEGMENT_GLOBAL, HM_POOL_FLAG_COARSE_GRAINED, vram, true);
    add_pool(a, POOL_EXT_FINE, HSA_AMD_SEGMENT_GLOBAL, HM_POOL_FLAG_EXTENDED_SCOPE_FINE_GRAINED, vram, true);
    add_pool(a, POOL_FINE, HSA_AMD_SEGMENT_GLOBAL, HM_POOL_FLAG_FINE_GRAINED, vram, true);
    add_pool(a, POOL_GROUP, HSA_AMD_SEGMENT_GROUP, 0, a->limits.lds_bytes, false);
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->copy_cv, NULL);
    a->cu = calloc(a->ncus, sizeof *a->cu);
  }
  char numa[32];
  snprintf(numa, sizeof numa, ", %u NUMA nodes", cfg->nnodes);
  char lag[48];
  snprintf(lag, sizeof lag, ", GPU %d lagging", cfg->lag_gpu);
  snprintf(sim.describe, sizeof sim.describe,
           "software HSA agent: %u x %s, %u CUs each%s%s%s%s%s%s; timings are not GPU timings", cfg->ngpus, cfg->arch,
           cfg->cus, cfg->nnodes > 1 ? numa : "", cfg->weak ? ", weak visibility" : "", cfg->chaos ? ", chaos" : "",
           cfg->nhold ? ", CTAs held back (HSAMONO_SIM_HOLD_CTAS)" : "", cfg->lag_gpu >= 0 ? lag : "",
           cfg->start_late_ms ? ", CTAs start late (HSAMONO_SIM_START_LATE_MS)" : "");
}

SIM_API const char *hm_sim_describe(void) { return sim.describe; }

struct sim_agent *sim_agent_of(hsa_agent_t a) {
  uintptr_t h = (uintptr_t)a.handle;
  for (unsigned i = 0; i < sim.nagents; i++)
    if (h == (uintptr_t)&sim.agents[i]) return &sim.agents[i];
  return NULL;
}

struct sim_pool *sim_pool_of(hsa_amd_memory_pool_t p) {
  uintptr_t h = (uintptr_t)p.handle;
  for (unsigned i = 0; i < sim.nagents; i++)
    for (unsigned j = 0; j < sim.agents[i].npools; j++)
      if (h == (uintptr_t)&sim.agents[i].pools[j]) return &sim.agents[i].pools[j];
  return NULL;
}

/* ---------------------------------------------------------------- init and shutdown */

SIM_API hsa_status_t hsa_init(void) {
  pthread_mutex_lock(&sim.lock);
  if (sim.refcount++ == 0) {
    sim_config_load(&sim.cfg);
    atomic_store(&sim.stopping, false);
    sim.dispatch_seq = 0; /* chaos orders count dispatches from here */
    build_topology();
  }
  pthread_mutex_unlock(&sim.lock);
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_shut_down(void) {
  pthread_mutex_lock(&sim.lock);
  if (sim.refcount == 0) {
    pthread_mutex_unlock(&sim.lock);
    return HSA_STATUS_ERROR_NOT_INITIALIZED;
  }
  if (--sim.refcount == 0) {
    atomic_store(&sim.stopping, true);
    pthread_mutex_unlock(&sim.lock);
    sim_exec_shutdown();
    sim_allocs_release_all();
    pthread_mutex_lock(&sim.lock);
    for (unsigned i = 0; i < sim.nagents; i++) {
      free(sim.agents[i].cu);
      sim.agents[i].cu = NULL;
    }
    sim.nagents = 0;
  }
  pthread_mutex_unlock(&sim.lock);
  return HSA_STATUS_SUCCESS;
}

#define NEED_INIT()                                                                                         \
  do {                                                                                                      \
    if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;                                         \
  } while (0)

SIM_API hsa_status_t hsa_status_string(hsa_status_t status, const char **str) {
  if (!str) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (status) {
  case HSA_STATUS_SUCCESS: *str = "HSA_STATUS_SUCCESS: the function has been executed successfully"; break;
  case HSA_STATUS_INFO_BREAK: *str = "HSA_STATUS_INFO_BREAK: a traversal was stopped early"; break;
  case HSA_STATUS_ERROR: *str = "HSA_STATUS_ERROR: a generic error"; break;
  case HSA_STATUS_ERROR_INVALID_ARGUMENT: *str = "HSA_STATUS_ERROR_INVALID_ARGUMENT: an invalid argument"; break;
  case HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: *str = "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: invalid queue size or type"; break;
  case HSA_STATUS_ERROR_INVALID_ALLOCATION: *str = "HSA_STATUS_ERROR_INVALID_ALLOCATION: the allocation is invalid"; break;
  case HSA_STATUS_ERROR_INVALID_AGENT: *str = "HSA_STATUS_ERROR_INVALID_AGENT: the agent is invalid"; break;
  case HSA_STATUS_ERROR_INVALID_REGION: *str = "HSA_STATUS_ERROR_INVALID_REGION: the region or pool is invalid"; break;
  case HSA_STATUS_ERROR_INVALID_SIGNAL: *str = "HSA_STATUS_ERROR_INVALID_SIGNAL: the signal is invalid"; break;
  case HSA_STATUS_ERROR_INVALID_QUEUE: *str = "HSA_STATUS_ERROR_INVALID_QUEUE: the queue is invalid"; break;
  case HSA_STATUS_ERROR_OUT_OF_RESOURCES: *str = "HSA_STATUS_ERROR_OUT_OF_RESOURCES: out of resources"; break;
  case HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: *str = "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: a malformed AQL packet"; break;
  case HSA_STATUS_ERROR_RESOURCE_FREE: *str = "HSA_STATUS_ERROR_RESOURCE_FREE: a resource is still in use"; break;
  case HSA_STATUS_ERROR_NOT_INITIALIZED: *str = "HSA_STATUS_ERROR_NOT_INITIALIZED: hsa_init has not been called"; break;
  case HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: *str = "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: incompatible arguments"; break;
  case HSA_STATUS_ERROR_INVALID_ISA: *str = "HSA_STATUS_ERROR_INVALID_ISA: the ISA is invalid"; break;
  case HSA_STATUS_ERROR_INVALID_CODE_OBJECT: *str = "HSA_STATUS_ERROR_INVALID_CODE_OBJECT: the code object is invalid"; break;
  case HSA_STATUS_ERROR_INVALID_EXECUTABLE: *str = "HSA_STATUS_ERROR_INVALID_EXECUTABLE: the executable is invalid"; break;
  case HSA_STATUS_ERROR_FROZEN_EXECUTABLE: *str = "HSA_STATUS_ERROR_FROZEN_EXECUTABLE: the executable is frozen"; break;
  case HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: *str = "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: no symbol of that name"; break;
  case HSA_STATUS_ERROR_EXCEPTION: *str = "HSA_STATUS_ERROR_EXCEPTION: a kernel raised an exception"; break;
  case HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: *str = "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: invalid reader"; break;
  default: *str = "unknown HSA status"; break;
  }
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_system_get_info(hsa_system_info_t attribute, void *value) {
  NEED_INIT();
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (attribute) {
  case HSA_SYSTEM_INFO_VERSION_MAJOR: *(uint16_t *)value = 1; break;
  case HSA_SYSTEM_INFO_VERSION_MINOR: *(uint16_t *)value = 1; break;
  case HSA_SYSTEM_INFO_TIMESTAMP: *(uint64_t *)value = sim_now_ns(); break;
  case HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: *(uint64_t *)value = 1000000000ull; break;
  case HSA_SYSTEM_INFO_SIGNAL_MAX_WAIT: *(uint64_t *)value = UINT64_MAX; break;
  case HSA_SYSTEM_INFO_ENDIANNESS: *(hsa_endianness_t *)value = HSA_ENDIANNESS_LITTLE; break;
  case HSA_SYSTEM_INFO_MACHINE_MODEL: *(hsa_machine_model_t *)value = HSA_MACHINE_MODEL_LARGE; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t, void *), void *data) {
  NEED_INIT();
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < sim.nagents; i++) {
    hsa_agent_t a = {(uint64_t)(uintptr_t)&sim.agents[i]};
    hsa_status_t s = callback(a, data);
    if (s != HSA_STATUS_SUCCESS) return s;
  }
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t put_string(void *value, const char *s, size_t cap) {
  size_t n = strlen(s);
  if (n > cap - 1) n = cap - 1;
  memset(value, 0, cap);
  memcpy(value, s, n);
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void *value) {
  NEED_INIT();
  struct sim_agent *a = sim_agent_of(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const bool g942 = a->gpu && a->arch == HM_ISA_GFX942;
  switch ((int)attribute) {
  case HSA_AGENT_INFO_NAME: return put_string(value, a->name, 64);
  case HSA_AGENT_INFO_VENDOR_NAME: return put_string(value, a->gpu ? "AMD" : "CPU", 64);
  case HSA_AGENT_INFO_FEATURE:
    *(hsa_agent_feature_t *)value = a->gpu ? HSA_AGENT_FEATURE_KERNEL_DISPATCH : HSA_AGENT_FEATURE_AGENT_DISPATCH;
    break;
  case HSA_AGENT_INFO_MACHINE_MODEL: *(hsa_machine_model_t *)value = HSA_MACHINE_MODEL_LARGE; break;
  case HSA_AGENT_INFO_PROFILE: *(hsa_profile_t *)value = HSA_PROFILE_BASE; break;
  case HSA_AGENT_INFO_WAVEFRONT_SIZE: *(uint32_t *)value = a->gpu ? 64 : 0; break;
  case HSA_AGENT_INFO_WORKGROUP_MAX_DIM: {
    uint16_t *d = value;
    d[0] = d[1] = d[2] = a->gpu ? 1024 : 0;
    break;
  }
  case HSA_AGENT_INFO_WORKGROUP_MAX_SIZE: *(uint32_t *)value = a->gpu ? 1024 : 0; break;
  case HSA_AGENT_INFO_GRID_MAX_DIM: {
    hsa_dim3_t *d = value;
    d->x = d->y = d->z = a->gpu ? UINT32_MAX : 0;
    break;
  }
  case HSA_AGENT_INFO_GRID_MAX_SIZE: *(uint32_t *)value = a->gpu ? UINT32_MAX : 0; break;
  case HSA_AGENT_INFO_FBARRIER_MAX_SIZE: *(uint32_t *)value = a->gpu ? 32 : 0; break;
  case HSA_AGENT_INFO_QUEUES_MAX: *(uint32_t *)value = a->gpu ? 128 : 0; break;
  case HSA_AGENT_INFO_QUEUE_MIN_SIZE: *(uint32_t *)value = a->gpu ? 64 : 0; break;
  case HSA_AGENT_INFO_QUEUE_MAX_SIZE: *(uint32_t *)value = a->gpu ? 131072 : 0; break;
  case HSA_AGENT_INFO_QUEUE_TYPE: *(hsa_queue_type32_t *)value = HSA_QUEUE_TYPE_MULTI; break;
  case HSA_AGENT_INFO_NODE: *(uint32_t *)value = a->index; break;
  case HSA_AGENT_INFO_DEVICE: *(hsa_device_type_t *)value = a->gpu ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU; break;
  case HSA_AGENT_INFO_VERSION_MAJOR: *(uint16_t *)value = 1; break;
  case HSA_AGENT_INFO_VERSION_MINOR: *(uint16_t *)value = 1; break;
  case HSA_AMD_AGENT_INFO_CHIP_ID: *(uint32_t *)value = a->gpu ? (g942 ? 0x74a1 : 0x75a3) : 0; break;
  case HSA_AMD_AGENT_INFO_CACHELINE_SIZE: *(uint32_t *)value = 128; break;
  case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: *(uint32_t *)value = a->gpu ? a->ncus : 2; break;
  case HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY: *(uint32_t *)value = a->gpu ? (g942 ? 2100 : 2400) : 2000; break;
  case HSA_AMD_AGENT_INFO_DRIVER_NODE_ID: *(uint32_t *)value = a->index; break;
  case HSA_AMD_AGENT_INFO_BDFID: *(uint32_t *)value = a->gpu ? (0x0100u * (a->gpu_index + 1)) : 0; break;
  case HSA_AMD_AGENT_INFO_PRODUCT_NAME:
    return put_string(value, a->gpu ? (g942 ? "AMD Instinct MI300X (software agent)" : "AMD Instinct MI355X (software agent)")
                                    : "software agent host CPU",
                      64);
  case HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU: *(uint32_t *)value = a->gpu ? 32 : 0; break;
  case HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU: *(uint32_t *)value = a->gpu ? 4 : 0; break;
  case HSA_AMD_AGENT_INFO_NUM_SHADER_ENGINES: *(uint32_t *)value = a->gpu ? 32 : 0; break;
  case HSA_AMD_AGENT_INFO_NUM_SHADER_ARRAYS_PER_SE: *(uint32_t *)value = a->gpu ? 1 : 0; break;
  case HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES: *(bool *)value = false; break;
  case HSA_AMD_AGENT_INFO_UUID: {
    char u[32];
    snprintf(u, sizeof u, a->gpu ? "GPU-5eedc0de%08x" : "CPU-XX", a->gpu_index);
    return put_string(value, u, 21);
  }
  case HSA_AMD_AGENT_INFO_COOPERATIVE_COMPUTE_UNIT_COUNT: *(uint32_t *)value = a->gpu ? a->ncus : 0; break;
  case (int)HM_AMD_AGENT_INFO_NUM_XCC: *(uint32_t *)value = a->gpu ? 8 : 0; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* One ISA a GPU agent: its handle is the agent's address tagged in the low bit. */
SIM_API hsa_status_t hsa_agent_iterate_isas(hsa_agent_t agent, hsa_status_t (*callback)(hsa_isa_t, void *),
                                            void *data) {
  NEED_INIT();
  struct sim_agent *a = sim_agent_of(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!a->gpu) return HSA_STATUS_SUCCESS;
  hsa_isa_t isa = {(uint64_t)(uintptr_t)a | 1};
  hsa_status_t s = callback(isa, data);
  return s == HSA_STATUS_INFO_BREAK ? HSA_STATUS_SUCCESS : s;
}

SIM_API hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, hsa_isa_info_t attribute, void *value) {
  NEED_INIT();
  if (!(isa.handle & 1)) return HSA_STATUS_ERROR_INVALID_ISA;
  hsa_agent_t ag = {isa.handle & ~1ull};
  struct sim_agent *a = sim_agent_of(ag);
  if (!a || !a->gpu) return HSA_STATUS_ERROR_INVALID_ISA;
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (attribute) {
  case HSA_ISA_INFO_NAME_LENGTH: *(uint32_t *)value = (uint32_t)strlen(a->isa) + 1; break;
  case HSA_ISA_INFO_NAME: memcpy(value, a->isa, strlen(a->isa) + 1); break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- pools */

SIM_API hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent,
                                                        hsa_status_t (*callback)(hsa_amd_memory_pool_t, void *),
                                                        void *data) {
  NEED_INIT();
  struct sim_agent *a = sim_agent_of(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!callback) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < a->npools; i++) {
    hsa_amd_memory_pool_t p = {(uint64_t)(uintptr_t)&a->pools[i]};
    hsa_status_t s = callback(p, data);
    if (s != HSA_STATUS_SUCCESS) return s == HSA_STATUS_INFO_BREAK ? HSA_STATUS_SUCCESS : s;
  }
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool, hsa_amd_memory_pool_info_t attribute,
                                                  void *value) {
  NEED_INIT();
  struct sim_pool *p = sim_pool_of(pool);
  if (!p) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (attribute) {
  case HSA_AMD_MEMORY_POOL_INFO_SEGMENT: *(hsa_amd_segment_t *)value = p->segment; break;
  case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: *(uint32_t *)value = p->flags; break;
  case HSA_AMD_MEMORY_POOL_INFO_SIZE: *(size_t *)value = p->size; break;
  case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: *(bool *)value = p->alloc_allowed; break;
  case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE: *(size_t *)value = p->alloc_allowed ? SIM_PAGE : 0; break;
  case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT: *(size_t *)value = p->alloc_allowed ? SIM_PAGE : 0; break;
  case HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL: *(bool *)value = !p->agent->gpu; break;
  case HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE: *(size_t *)value = p->alloc_allowed ? p->size : 0; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* Link hops between two different agents: GPU-GPU one (xGMI), CPU-CPU one; a GPU and a CPU one
 * when they share a NUMA node, two (through the GPU's own node) when not. */
static unsigned link_hops(const struct sim_agent *a, const struct sim_agent *b) {
  return a->gpu != b->gpu && a->numa_node != b->numa_node ? 2 : 1;
}

SIM_API hsa_status_t hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent, hsa_amd_memory_pool_t pool,
                                                        hsa_amd_agent_memory_pool_info_t attribute, void *value) {
  NEED_INIT();
  struct sim_agent *a = sim_agent_of(agent);
  struct sim_pool *p = sim_pool_of(pool);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!p || !value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  bool own = p->agent == a;
  switch (attribute) {
  case HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS:
    /* own pools and system memory by default; a peer GPU's memory once allowed (ROCr) */
    if (p->segment == HSA_AMD_SEGMENT_GROUP)
      *(hsa_amd_memory_pool_access_t *)value =
          own ? HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT : HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;
    else if (own || (!p->agent->gpu && (p->flags & HM_POOL_FLAG_FINE_GRAINED)))
      *(hsa_amd_memory_pool_access_t *)value = HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
    else
      *(hsa_amd_memory_pool_access_t *)value = HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
    break;
  case HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS: *(uint32_t *)value = own ? 0 : link_hops(a, p->agent); break;
  case HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO: {
    /* one entry a hop, as ROCr writes them (the caller sizes the array by NUM_LINK_HOPS) */
    hsa_amd_memory_pool_link_info_t *li = value;
    unsigned hops = own ? 0 : link_hops(a, p->agent);
    memset(li, 0, sizeof *li * (hops ? hops : 1));
    if (hops == 2) {
      /* a GPU and another node's CPU: across the sockets' link, then the GPU's PCIe link */
      li[0].link_type = HSA_AMD_LINK_INFO_TYPE_QPI, li[0].numa_distance = 32;
      li[0].min_bandwidth = li[0].max_bandwidth = 64000;
      li[1].link_type = HSA_AMD_LINK_INFO_TYPE_PCIE, li[1].numa_distance = 20;
      li[1].min_bandwidth = li[1].max_bandwidth = 32000;
    } else if (hops == 1) {
      /* GPUs of one box are one xGMI hive: every peer one hop away (MI300X / MI355X OAM); a GPU
       * and its own node's CPU one PCIe hop; two CPU agents the sockets' link */
      bool xgmi = a->gpu && p->agent->gpu, sockets = !a->gpu && !p->agent->gpu;
      li->link_type = xgmi ? HSA_AMD_LINK_INFO_TYPE_XGMI : sockets ? HSA_AMD_LINK_INFO_TYPE_QPI : HSA_AMD_LINK_INFO_TYPE_PCIE;
      li->numa_distance = xgmi ? 15 : sockets ? 32 : 20;
      li->min_bandwidth = li->max_bandwidth = xgmi || sockets ? 64000 : 32000;
    }
    break;
  }
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}
