/* hsa/rt_memory.c: memory from a chosen pool, tracked so nothing leaks past hm_runtime_close;
 * access for peers and the host, copies on the copy engine, fills. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* The table is kept sorted by address (allocations never overlap), so a lookup is a binary
 * search: a step checks each of its tensors (hm_mem_check) and must stay cheap however many
 * weights, mailboxes and caches a process holds. Inserts and removals move the tail; they are
 * not on the step path. */

/* Caller holds rt->lock. */
hm_status hm_rt_alloc_insert(hm_runtime *rt, const struct hm_alloc *a) {
  if (rt->nallocs == rt->alloc_cap) {
    unsigned cap = rt->alloc_cap ? 2 * rt->alloc_cap : 64;
    struct hm_alloc *n = realloc(rt->allocs, cap * sizeof *n);
    if (!n) return hm_fail(HM_ERR_NO_MEMORY, "out of memory tracking allocations");
    rt->allocs = n, rt->alloc_cap = cap;
  }
  unsigned lo = 0, hi = rt->nallocs;
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    if ((uintptr_t)rt->allocs[mid].p < (uintptr_t)a->p) lo = mid + 1;
    else hi = mid;
  }
  memmove(&rt->allocs[lo + 1], &rt->allocs[lo], (rt->nallocs - lo) * sizeof *rt->allocs);
  rt->allocs[lo] = *a;
  rt->nallocs++;
  return HM_OK;
}

/* Caller holds rt->lock. */
void hm_rt_alloc_remove(hm_runtime *rt, unsigned i) {
  memmove(&rt->allocs[i], &rt->allocs[i + 1], (rt->nallocs - i - 1) * sizeof *rt->allocs);
  rt->nallocs--;
}

static hm_status track(hm_runtime *rt, const struct hm_alloc *a) {
  pthread_mutex_lock(&rt->lock);
  hm_status s = hm_rt_alloc_insert(rt, a);
  pthread_mutex_unlock(&rt->lock);
  return s;
}

/* The allocation holding p, or -1. Caller holds rt->lock. */
int hm_rt_alloc_index(const hm_runtime *rt, const void *p) {
  uintptr_t x = (uintptr_t)p;
  unsigned lo = 0, hi = rt->nallocs; /* the last allocation starting at or below p */
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    if ((uintptr_t)rt->allocs[mid].p <= x) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return -1;
  const struct hm_alloc *a = &rt->allocs[lo - 1];
  return x - (uintptr_t)a->p < a->size ? (int)(lo - 1) : -1;
}

static int find_index(const hm_runtime *rt, const void *p) { return hm_rt_alloc_index(rt, p); }

bool hm_rt_find_alloc(hm_runtime *rt, const void *p, struct hm_alloc *out) {
  pthread_mutex_lock(&rt->lock);
  int i = find_index(rt, p);
  if (i >= 0) *out = rt->allocs[i];
  pthread_mutex_unlock(&rt->lock);
  return i >= 0;
}

static const char *pool_name(hm_pool_kind k) {
  static const char *n[] = {"coarse", "fine", "uncached", "kernarg", "host"};
  return k < HM_POOL_KINDS ? n[k] : "?";
}

hm_status hm_mem_alloc(hm_agent *a, hm_pool_kind kind, size_t bytes, size_t align, void **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_alloc: out is NULL");
  *out = NULL;
  if (!a || !hm_rt_owns_agent(a->rt, a)) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_alloc: unknown agent");
  if (kind >= HM_POOL_KINDS) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_alloc: unknown pool kind %d", (int)kind);
  if (bytes == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_alloc: zero bytes");
  if (!a->info.pool_present[kind])
    return hm_fail(HM_ERR_UNSUPPORTED, "agent %u has no %s pool", a->index, pool_name(kind));
  hm_runtime *rt = a->rt;
  size_t granule = 4096;
  if (align == 0) align = granule;
  if (align & (align - 1)) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_alloc: alignment %zu is not a power of two", align);
  size_t pool_align = 0;
  rt->api.hsa_amd_memory_pool_get_info(a->pools[kind], HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT, &pool_align);
  if (pool_align == 0) pool_align = granule;
  if (align > pool_align)
    return hm_fail(HM_ERR_UNSUPPORTED, "hm_mem_alloc: alignment %zu exceeds the %s pool's %zu", align, pool_name(kind),
                   pool_align);
  void *p = NULL;
  hsa_status_t s = rt->api.hsa_amd_memory_pool_allocate(a->pools[kind], bytes, 0, &p);
  if (s != HSA_STATUS_SUCCESS || !p)
    return hm_hsa_fail(rt, s, "allocating %zu bytes from agent %u's %s pool", bytes, a->index, pool_name(kind));
  /* System memory is used by every GPU agent (kernel arguments, status words): allow them all,
   * as HIP does for host allocations. */
  if (kind == HM_POOL_KERNARG || kind == HM_POOL_HOST) {
    hsa_agent_t all[64];
    unsigned n = 0;
    for (unsigned i = 0; i < rt->nagents && n < 64; i++) all[n++] = rt->agents[i].h;
    if (n && (s = rt->api.hsa_amd_agents_allow_access(n, all, NULL, p)) != HSA_STATUS_SUCCESS) {
      rt->api.hsa_amd_memory_pool_free(p);
      return hm_hsa_fail(rt, s, "allowing the GPU agents to access %zu bytes of system memory", bytes);
    }
  }
  struct hm_alloc rec = {.p = p, .size = bytes, .agent = a, .kind = kind};
  hm_status st = track(rt, &rec);
  if (st) {
    rt->api.hsa_amd_memory_pool_free(p);
    return st;
  }
  *out = p;
  return HM_OK;
}

hm_status hm_mem_free(hm_runtime *rt, void *p) {
  if (!rt || !p) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_free: NULL argument");
  pthread_mutex_lock(&rt->lock);
  int i = find_index(rt, p);
  if (i < 0 || rt->allocs[i].p != p || rt->allocs[i].attached) {
    pthread_mutex_unlock(&rt->lock);
    return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_free: %p is not the start of an allocation of this runtime", p);
  }
  unsigned holds = rt->allocs[i].holds;
  if (holds) {
    pthread_mutex_unlock(&rt->lock);
    return hm_fail(HM_ERR_BUSY, "hm_mem_free: %p is still used by %u holder(s) (a recorded chain, a K1 on a shared "
                   "epoch): release them first", p, holds);
  }
  hm_rt_alloc_remove(rt, (unsigned)i);
  pthread_mutex_unlock(&rt->lock);
  hsa_status_t s = rt->api.hsa_amd_memory_pool_free(p);
  return s == HSA_STATUS_SUCCESS ? HM_OK : hm_hsa_fail(rt, s, "freeing %p", p);
}

size_t hm_mem_size(hm_runtime *rt, const void *p) {
  if (!rt || !p) return 0;
  pthread_mutex_lock(&rt->lock);
  int i = find_index(rt, p);
  size_t n = i < 0 ? 0 : rt->allocs[i].size;
  pthread_mutex_unlock(&rt->lock);
  return n;
}

void hm_mem_free_all(hm_runtime *rt) {
  pthread_mutex_lock(&rt->lock);
  for (unsigned i = 0; i < rt->nallocs; i++) {
    if (rt->allocs[i].attached) rt->api.hsa_amd_ipc_memory_detach(rt->allocs[i].p);
    else rt->api.hsa_amd_memory_pool_free(rt->allocs[i].p);
  }
  rt->nallocs = 0;
  pthread_mutex_unlock(&rt->lock);
}

hm_status hm_mem_allow(hm_runtime *rt, const void *p, hm_agent *const *agents, unsigned n, bool host) {
  if (!rt || !p || (n && !agents) || (n == 0 && !host))
    return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_allow: NULL pointer or nobody to allow");
  if (n > 63) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_allow: %u agents", n);
  if (!hm_mem_size(rt, p)) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_allow: %p is in no allocation of this runtime", p);
  hsa_agent_t list[64];
  unsigned k = 0;
  for (unsigned i = 0; i < n; i++) {
    if (!hm_rt_owns_agent(rt, agents[i])) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_allow: unknown agent");
    list[k++] = agents[i]->h;
  }
  /* the host: every CPU agent, whichever node the thread touching it runs on */
  for (unsigned i = 0; host && i < rt->ncpus && k < 64; i++) list[k++] = rt->cpus[i].h;
  hsa_status_t s = rt->api.hsa_amd_agents_allow_access(k, list, NULL, p);
  return s == HSA_STATUS_SUCCESS ? HM_OK : hm_hsa_fail(rt, s, "allowing %u agents to access %p", k, p);
}

/* The agent whose memory holds p (for system memory, the CPU agent whose pool it came from). */
static hsa_agent_t owner_of(hm_runtime *rt, const void *p) {
  struct hm_alloc a;
  if (hm_rt_find_alloc(rt, p, &a) && a.agent)
    return a.kind == HM_POOL_KERNARG || a.kind == HM_POOL_HOST ? hm_rt_cpu_of(a.agent) : a.agent->h;
  return rt->ncpus ? rt->cpus[0].h : rt->agents[0].h;
}

hm_status hm_mem_copy(hm_runtime *rt, void *dst, const void *src, size_t n, hm_signal done) {
  if (!rt || !dst || !src || n == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_copy: NULL pointer or zero bytes");
  /* The copy engine reaches only memory the HSA runtime knows: plain host memory (malloc, the
   * stack) would need locking first, which this runtime does not do; say so and name the side. */
  struct hm_alloc da, sa;
  const char *side = !hm_rt_find_alloc(rt, dst, &da) ? "destination" : !hm_rt_find_alloc(rt, src, &sa) ? "source" : NULL;
  if (side)
    return hm_fail(HM_ERR_INVALID_ARG,
                   "hm_mem_copy: the %s (%p) is not memory of this runtime; copies need both ends from hm_mem_alloc "
                   "(host memory: HM_POOL_HOST), not malloc or stack memory",
                   side, side[0] == 'd' ? dst : (void *)(uintptr_t)src);
  if ((char *)dst + n > (char *)da.p + da.size || (const char *)src + n > (char *)sa.p + sa.size)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_copy: %zu bytes run past the end of the %s allocation", n,
                   (char *)dst + n > (char *)da.p + da.size ? "destination" : "source");
  hsa_signal_t sig = {done.handle};
  bool wait = done.handle == 0;
  if (wait) {
    hsa_status_t s = rt->api.hsa_signal_create(1, 0, NULL, &sig);
    if (s != HSA_STATUS_SUCCESS) return hm_hsa_fail(rt, s, "hm_mem_copy: signal");
  }
  hsa_status_t s = rt->api.hsa_amd_memory_async_copy(dst, owner_of(rt, dst), src, owner_of(rt, src), n, 0, NULL, sig);
  hm_status st = HM_OK;
  if (s != HSA_STATUS_SUCCESS) st = hm_hsa_fail(rt, s, "copying %zu bytes", n);
  else if (wait) {
    hm_signal h = {sig.handle};
    st = hm_signal_wait(rt, h, HM_WAIT_LT, 1, 60ull * 1000000000ull, false, NULL);
  }
  if (wait) rt->api.hsa_signal_destroy(sig);
  return st;
}

hm_status hm_mem_fill(hm_runtime *rt, void *p, uint32_t value, size_t count) {
  if (!rt || !p || ((uintptr_t)p & 3)) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_fill: NULL or unaligned pointer");
  struct hm_alloc a;
  if (!hm_rt_find_alloc(rt, p, &a) || (char *)p + 4 * count > (char *)a.p + a.size)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_fill: %zu words at %p run outside the allocation", count, p);
  if (count == 0) return HM_OK;
  hsa_status_t s = rt->api.hsa_amd_memory_fill(p, value, count);
  return s == HSA_STATUS_SUCCESS ? HM_OK : hm_hsa_fail(rt, s, "filling %zu words at %p", count, p);
}

hm_status hm_kernarg_new(hm_agent *a, const void *args, size_t n, void **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_kernarg_new: out is NULL");
  *out = NULL;
  if (n && !args) return hm_fail(HM_ERR_INVALID_ARG, "hm_kernarg_new: args is NULL");
  void *p;
  hm_status s = hm_mem_alloc(a, HM_POOL_KERNARG, n ? n : 8, 0, &p);
  if (s) return s;
  if (n) memcpy(p, args, n);
  *out = p;
  return HM_OK;
}

/* ---------------------------------------------------------------- a step's tensors */

static const char *kind_is(hm_pool_kind k) {
  return k == HM_POOL_HOST || k == HM_POOL_KERNARG ? "host" : "device";
}

/* One tensor against the table (caller holds rt->lock); formats a message only on failure. */
static hm_status check_one(const hm_runtime *rt, const hm_agent *a, const char *who, const hm_mem_need *t) {
  if (!t->p) return hm_fail(HM_ERR_INVALID_ARG, "%s: %s is NULL", who, t->name);
  if ((uintptr_t)t->p & 3) return hm_fail(HM_ERR_INVALID_ARG, "%s: %s (%p) is not 4-byte aligned", who, t->name, t->p);
  int i = find_index(rt, t->p);
  if (i < 0)
    return hm_fail(HM_ERR_INVALID_ARG,
                   "%s: %s (%p) is not memory of this runtime (malloc'd, stack or freed memory?): step tensors come "
                   "from hm_mem_alloc",
                   who, t->name, t->p);
  const struct hm_alloc *m = &rt->allocs[i];
  if (m->attached)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: %s (%p) is another rank's memory mapped through IPC", who, t->name, t->p);
  const bool host = m->kind == HM_POOL_HOST || m->kind == HM_POOL_KERNARG;
  if (t->use == HM_MEM_HOST && !host)
    return hm_fail(HM_ERR_INVALID_ARG,
                   "%s: %s (%p) is agent %u's device memory: the host reads it, so it must come from HM_POOL_HOST", who,
                   t->name, t->p, m->agent->index);
  /* system memory is open to every GPU agent (hm_mem_alloc allows them all); device memory is
   * the pool's own agent's */
  if (!host && m->agent != a)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: %s (%p) is agent %u's memory; the step runs on agent %u", who, t->name,
                   t->p, m->agent->index, a->index);
  const uint64_t left = (uint64_t)m->size - ((uintptr_t)t->p - (uintptr_t)m->p);
  if (t->bytes > left)
    return hm_fail(HM_ERR_INVALID_ARG,
                   "%s: %s needs %llu bytes for the step, its %s allocation has %llu from %p (%zu bytes at %p)", who,
                   t->name, (unsigned long long)t->bytes, kind_is(m->kind), (unsigned long long)left, t->p, m->size,
                   m->p);
  return HM_OK;
}

hm_status hm_mem_check(hm_agent *a, const char *who, const hm_mem_need *t, unsigned n) {
  if (!a || !who || (n && !t)) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_check: NULL argument");
  hm_runtime *rt = a->rt;
  hm_status s = HM_OK;
  pthread_mutex_lock(&rt->lock);
  for (unsigned i = 0; i < n && !s; i++) s = check_one(rt, a, who, &t[i]);
  pthread_mutex_unlock(&rt->lock);
  return s;
}

/* ---------------------------------------------------------------- holds */

hm_status hm_mem_hold(hm_runtime *rt, const void *p) {
  if (!rt || !p) return hm_fail(HM_ERR_INVALID_ARG, "hm_mem_hold: NULL argument");
  pthread_mutex_lock(&rt->lock);
  int i = find_index(rt, p);
  if (i >= 0) rt->allocs[i].holds++;
  pthread_mutex_unlock(&rt->lock);
  return i >= 0 ? HM_OK : hm_fail(HM_ERR_INVALID_ARG, "hm_mem_hold: %p is in no allocation of this runtime", p);
}

void hm_mem_unhold(hm_runtime *rt, const void *p) {
  if (!rt || !p) return;
  pthread_mutex_lock(&rt->lock);
  int i = find_index(rt, p);
  if (i >= 0 && rt->allocs[i].holds) rt->allocs[i].holds--;
  pthread_mutex_unlock(&rt->lock);
}

unsigned hm_mem_holds(hm_runtime *rt, const void *p) {
  if (!rt || !p) return 0;
  pthread_mutex_lock(&rt->lock);
  int i = find_index(rt, p);
  unsigned n = i >= 0 ? rt->allocs[i].holds : 0;
  pthread_mutex_unlock(&rt->lock);
  return n;
}

unsigned hm_mem_held(hm_runtime *rt, void *const *p, unsigned n) {
  if (!rt) return 0;
  unsigned held = 0;
  pthread_mutex_lock(&rt->lock);
  for (unsigned k = 0; k < n; k++) {
    int i = p[k] ? find_index(rt, p[k]) : -1;
    held += i >= 0 && rt->allocs[i].holds;
  }
  pthread_mutex_unlock(&rt->lock);
  return held;
}
