/* hsa/sim/memory.c: memory pools' allocations (memfd-backed shared memory, so IPC handles work
 * across processes), access rights, async copy and fill, and IPC export / attach / detach. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim.h"

/* ---------------------------------------------------------------- the registry */

/* Index of the first allocation whose base is > addr. Caller holds alloc_lock. */
static unsigned upper(uintptr_t addr) {
  unsigned lo = 0, hi = sim.nallocs;
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    if (sim.allocs[mid].base <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

bool sim_alloc_find(uintptr_t addr, struct sim_alloc *out) {
  pthread_rwlock_rdlock(&sim.alloc_lock);
  unsigned i = upper(addr);
  bool found = i > 0 && addr - sim.allocs[i - 1].base < sim.allocs[i - 1].size;
  if (found && out) *out = sim.allocs[i - 1];
  pthread_rwlock_unlock(&sim.alloc_lock);
  return found;
}

static hsa_status_t registry_add(const struct sim_alloc *a) {
  pthread_rwlock_wrlock(&sim.alloc_lock);
  if (sim.nallocs == sim.alloc_cap) {
    unsigned cap = sim.alloc_cap ? 2 * sim.alloc_cap : 64;
    struct sim_alloc *n = realloc(sim.allocs, cap * sizeof *n);
    if (!n) {
      pthread_rwlock_unlock(&sim.alloc_lock);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    sim.allocs = n;
    sim.alloc_cap = cap;
  }
  unsigned i = upper(a->base);
  memmove(&sim.allocs[i + 1], &sim.allocs[i], (sim.nallocs - i) * sizeof *sim.allocs);
  sim.allocs[i] = *a;
  sim.allocs[i].id = ++sim.next_alloc_id;
  sim.nallocs++;
  pthread_rwlock_unlock(&sim.alloc_lock);
  return HSA_STATUS_SUCCESS;
}

/* Remove the allocation based exactly at addr (attached or not, as asked). */
static bool registry_remove(uintptr_t base, bool attached, struct sim_alloc *out) {
  pthread_rwlock_wrlock(&sim.alloc_lock);
  unsigned i = upper(base);
  bool ok = i > 0 && sim.allocs[i - 1].base == base && sim.allocs[i - 1].attached == attached;
  if (ok) {
    *out = sim.allocs[i - 1];
    memmove(&sim.allocs[i - 1], &sim.allocs[i], (sim.nallocs - i) * sizeof *sim.allocs);
    sim.nallocs--;
  }
  pthread_rwlock_unlock(&sim.alloc_lock);
  return ok;
}

void sim_allocs_release_all(void) {
  pthread_rwlock_wrlock(&sim.alloc_lock);
  for (unsigned i = 0; i < sim.nallocs; i++) {
    munmap((void *)sim.allocs[i].base, sim.allocs[i].size);
    if (sim.allocs[i].fd >= 0) close(sim.allocs[i].fd);
  }
  free(sim.allocs);
  sim.allocs = NULL;
  sim.nallocs = sim.alloc_cap = 0;
  pthread_rwlock_unlock(&sim.alloc_lock);
}

/* Every allocation holds its memfd open (IPC exports it by path): lift the soft limit. */
static void raise_fd_limit(void) {
  static bool done;
  if (done) return;
  done = true;
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

static hsa_status_t map_new(size_t size, int *fd_out, void **ptr_out) {
  raise_fd_limit();
  int fd = memfd_create("hsamono-sim", MFD_CLOEXEC);
  if (fd < 0) return sim_error(HSA_STATUS_ERROR_OUT_OF_RESOURCES, "memfd_create: %s", strerror(errno));
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return sim_error(HSA_STATUS_ERROR_OUT_OF_RESOURCES, "ftruncate %zu: %s", size, strerror(errno));
  }
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return sim_error(HSA_STATUS_ERROR_OUT_OF_RESOURCES, "mmap %zu: %s", size, strerror(errno));
  }
  *fd_out = fd;
  *ptr_out = p;
  return HSA_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- allocate, free, access */

SIM_API hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool, size_t size, uint32_t flags,
                                                  void **ptr) {
  (void)flags;
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  struct sim_pool *p = sim_pool_of(pool);
  if (!p || !ptr || size == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (!p->alloc_allowed) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  if (size > p->size) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  size_t bytes = (size + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE;
  struct sim_alloc a = {.size = bytes, .pool = p, .owner = p->agent->gpu ? p->agent : NULL};
  void *m = NULL;
  hsa_status_t s = map_new(bytes, &a.fd, &m);
  if (s) return s;
  a.base = (uintptr_t)m;
  /* fine-grained system memory (the kernarg pool) is every agent's by default; other memory
   * belongs to its agent and the host (ROCr's defaults) */
  if (!p->agent->gpu && (p->flags & HM_POOL_FLAG_FINE_GRAINED)) a.access = ~0u;
  else a.access = 1u | (1u << p->agent->index);
  if ((s = registry_add(&a))) {
    munmap(m, bytes);
    close(a.fd);
    return s;
  }
  *ptr = m;
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_amd_memory_pool_free(void *ptr) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  struct sim_alloc a;
  if (!ptr || !registry_remove((uintptr_t)ptr, false, &a)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  munmap((void *)a.base, a.size);
  close(a.fd);
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents,
                                                 const uint32_t *flags, const void *ptr) {
  (void)flags;
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (num_agents == 0 || !agents || !ptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  uint32_t mask = 0;
  for (uint32_t i = 0; i < num_agents; i++) {
    struct sim_agent *a = sim_agent_of(agents[i]);
    if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
    mask |= 1u << a->index;
  }
  pthread_rwlock_wrlock(&sim.alloc_lock);
  unsigned i = upper((uintptr_t)ptr);
  hsa_status_t s = HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (i > 0 && (uintptr_t)ptr - sim.allocs[i - 1].base < sim.allocs[i - 1].size) {
    sim.allocs[i - 1].access |= mask;
    s = HSA_STATUS_SUCCESS;
  }
  pthread_rwlock_unlock(&sim.alloc_lock);
  return s;
}

SIM_API hsa_status_t hsa_amd_memory_fill(void *ptr, uint32_t value, size_t count) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!ptr || ((uintptr_t)ptr & 3)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_alloc a;
  if (!sim_alloc_find((uintptr_t)ptr, &a) || (uintptr_t)ptr + 4 * (uint64_t)count > a.base + a.size)
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  uint32_t *p = ptr;
  for (size_t i = 0; i < count; i++) p[i] = value;
  return HSA_STATUS_SUCCESS;
}

/* What ROCr tells of a pointer: its allocation, and the agent whose pool it came from (a CPU
 * agent for system memory: which NUMA node's memory it is). The accessible list is not kept. */
SIM_API hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info, void *(*alloc)(size_t),
                                          uint32_t *num_agents_accessible, hsa_agent_t **accessible) {
  (void)alloc;
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!ptr || !info || info->size < offsetof(hsa_amd_pointer_info_t, agentOwner) + sizeof(hsa_agent_t))
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (num_agents_accessible) *num_agents_accessible = 0;
  if (accessible) *accessible = NULL;
  uint32_t size = info->size < sizeof *info ? info->size : (uint32_t)sizeof *info;
  memset((char *)info + sizeof info->size, 0, size - sizeof info->size);
  info->size = size;
  struct sim_alloc a;
  if (!sim_alloc_find((uintptr_t)ptr, &a)) return HSA_STATUS_SUCCESS; /* HSA_EXT_POINTER_TYPE_UNKNOWN */
  info->type = a.attached ? HSA_EXT_POINTER_TYPE_IPC : HSA_EXT_POINTER_TYPE_HSA;
  info->agentBaseAddress = info->hostBaseAddress = (void *)a.base;
  info->sizeInBytes = a.size;
  if (a.pool) info->agentOwner.handle = (uint64_t)(uintptr_t)a.pool->agent;
  if (size >= offsetof(hsa_amd_pointer_info_t, global_flags) + sizeof info->global_flags && a.pool)
    info->global_flags = a.pool->flags;
  return HSA_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- async copy (the "DMA engine") */

struct sim_copy {
  void *dst;
  const void *src;
  size_t size;
  uint32_t ndeps;
  struct sim_signal **deps;
  struct sim_signal *completion;
  struct sim_copy *next;
};

static void *copier_main(void *arg) {
  struct sim_agent *a = arg;
  pthread_mutex_lock(&a->lock);
  for (;;) {
    while (!a->copies && !atomic_load(&sim.stopping)) pthread_cond_wait(&a->copy_cv, &a->lock);
    if (!a->copies) break;
    struct sim_copy *c = a->copies;
    a->copies = c->next;
    pthread_mutex_unlock(&a->lock);
    /* a copy starts once every dependency signal has reached 0 (hsa_ext_amd.h) */
    for (uint32_t i = 0; i < c->ndeps; i++)
      sim_signal_wait_value(c->deps[i], HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, &sim.stopping);
    memmove(c->dst, c->src, c->size);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (c->completion) sim_signal_complete(c->completion);
    free(c->deps);
    free(c);
    pthread_mutex_lock(&a->lock);
  }
  pthread_mutex_unlock(&a->lock);
  return NULL;
}

SIM_API hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src,
                                               hsa_agent_t src_agent, size_t size, uint32_t num_dep_signals,
                                               const hsa_signal_t *dep_signals, hsa_signal_t completion_signal) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  struct sim_agent *da = sim_agent_of(dst_agent), *sa = sim_agent_of(src_agent);
  if (!da || !sa) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!dst || !src || (num_dep_signals && !dep_signals)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_alloc d, s;
  if (!sim_alloc_find((uintptr_t)dst, &d) || (uintptr_t)dst + size > d.base + d.size ||
      !sim_alloc_find((uintptr_t)src, &s) || (uintptr_t)src + size > s.base + s.size)
    return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "async copy: a range is outside every allocation");
  struct sim_signal *cs = NULL;
  if (completion_signal.handle && !(cs = sim_signal_of(completion_signal))) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  struct sim_copy *c = calloc(1, sizeof *c);
  if (!c) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  c->dst = dst, c->src = src, c->size = size, c->completion = cs, c->ndeps = num_dep_signals;
  if (num_dep_signals) {
    c->deps = calloc(num_dep_signals, sizeof *c->deps);
    if (!c->deps) {
      free(c);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    for (uint32_t i = 0; i < num_dep_signals; i++)
      if (!(c->deps[i] = sim_signal_of(dep_signals[i]))) {
        free(c->deps);
        free(c);
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
      }
  }
  /* the engine of the GPU side of the copy, as ROCr uses that GPU's SDMA */
  struct sim_agent *e = da->gpu ? da : sa->gpu ? sa : da;
  pthread_mutex_lock(&e->lock);
  if (!e->copier_started) {
    if (pthread_create(&e->copier, NULL, copier_main, e) != 0) {
      pthread_mutex_unlock(&e->lock);
      free(c->deps);
      free(c);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    e->copier_started = true;
  }
  struct sim_copy **tail = &e->copies;
  while (*tail) tail = &(*tail)->next;
  *tail = c;
  pthread_cond_signal(&e->copy_cv);
  pthread_mutex_unlock(&e->lock);
  return HSA_STATUS_SUCCESS;
}

void sim_copiers_stop(void) {
  for (unsigned i = 0; i < sim.nagents; i++) {
    struct sim_agent *a = &sim.agents[i];
    pthread_mutex_lock(&a->lock);
    bool started = a->copier_started;
    pthread_cond_broadcast(&a->copy_cv);
    pthread_mutex_unlock(&a->lock);
    if (started) {
      pthread_join(a->copier, NULL);
      a->copier_started = false;
    }
  }
}

/* ---------------------------------------------------------------- IPC */

/* The 32-byte handle: magic, exporter pid, its memfd, size, allocation id, and a check word.
 * Attach opens the exporter's descriptor through /proc, so (as with ROCr's DMA-buf mode) the
 * exporting process must still be alive. */
#define IPC_MAGIC 0x48534d49u

static uint32_t ipc_check(const uint32_t h[8]) {
  uint32_t x = 0x9e3779b9u;
  for (int i = 0; i < 7; i++) x = (x ^ h[i]) * 0x01000193u;
  return x;
}

SIM_API hsa_status_t hsa_amd_ipc_memory_create(void *ptr, size_t len, hsa_amd_ipc_memory_t *handle) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!ptr || !handle || len == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_alloc a;
  /* ROCr: the pointer must be an allocation's first byte and the length its whole size
   * (a page-rounded length is tolerated) */
  if (!sim_alloc_find((uintptr_t)ptr, &a) || a.attached || a.base != (uintptr_t)ptr)
    return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "ipc create: %p is not the start of an allocation", ptr);
  if ((len + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE != a.size)
    return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "ipc create: length %zu is not the allocation's %zu", len,
                     a.size);
  uint32_t *h = handle->handle;
  h[0] = IPC_MAGIC;
  h[1] = (uint32_t)getpid();
  h[2] = (uint32_t)a.fd;
  h[3] = (uint32_t)a.size;
  h[4] = (uint32_t)(a.size >> 32);
  h[5] = (uint32_t)a.id;
  h[6] = (uint32_t)(a.id >> 32);
  h[7] = ipc_check(h);
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_amd_ipc_memory_attach(const hsa_amd_ipc_memory_t *handle, size_t len, uint32_t num_agents,
                                               const hsa_agent_t *mapping_agents, void **mapped_ptr) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!handle || !mapped_ptr || len == 0 || (num_agents && !mapping_agents)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const uint32_t *h = handle->handle;
  if (h[0] != IPC_MAGIC || h[7] != ipc_check(h))
    return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "ipc attach: not a valid handle");
  uint64_t size = h[3] | (uint64_t)h[4] << 32;
  if (len > size) return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "ipc attach: %zu > exported %llu", len,
                                   (unsigned long long)size);
  uint32_t mask = 1u;
  for (uint32_t i = 0; i < num_agents; i++) {
    struct sim_agent *a = sim_agent_of(mapping_agents[i]);
    if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
    mask |= 1u << a->index;
  }
  if (num_agents == 0) mask = ~0u;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fd/%u", h[1], h[2]);
  raise_fd_limit();
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "ipc attach: %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != size) {
    close(fd);
    return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "ipc attach: %s is not the exported allocation", path);
  }
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return sim_error(HSA_STATUS_ERROR_OUT_OF_RESOURCES, "ipc attach: mmap: %s", strerror(errno));
  }
  /* attached memory is a peer's: the visibility model treats it as remote (system scope) */
  struct sim_alloc a = {.base = (uintptr_t)p, .size = size, .fd = fd, .attached = true, .access = mask};
  hsa_status_t s = registry_add(&a);
  if (s) {
    munmap(p, size);
    close(fd);
    return s;
  }
  *mapped_ptr = p;
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_amd_ipc_memory_detach(void *mapped_ptr) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  struct sim_alloc a;
  if (!mapped_ptr || !registry_remove((uintptr_t)mapped_ptr, true, &a)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  munmap((void *)a.base, a.size);
  close(a.fd);
  return HSA_STATUS_SUCCESS;
}
