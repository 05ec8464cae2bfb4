/* hsa/rt_ipc.c: sharing whole allocations between processes with HSA IPC handles (ROCr's rule:
 * the handle names an allocation's first byte and its full size). */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

hm_status hm_ipc_export(hm_runtime *rt, void *p, hm_ipc_handle *out) {
  if (!rt || !p || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_ipc_export: NULL argument");
  struct hm_alloc a;
  if (!hm_rt_find_alloc(rt, p, &a) || a.p != p || a.attached)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ipc_export: %p is not the start of an allocation of this runtime", p);
  memset(out, 0, sizeof *out);
  hsa_amd_ipc_memory_t h;
  hsa_status_t s = rt->api.hsa_amd_ipc_memory_create(p, a.size, &h);
  if (s != HSA_STATUS_SUCCESS) return hm_hsa_fail(rt, s, "exporting %zu bytes at %p", a.size, p);
  memcpy(out->hsa, h.handle, sizeof out->hsa);
  out->size = a.size;
  return HM_OK;
}

hm_status hm_ipc_attach(hm_runtime *rt, const hm_ipc_handle *h, hm_agent *const *agents, unsigned n, void **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_ipc_attach: out is NULL");
  *out = NULL;
  if (!rt || !h || (n && !agents) || n > 64 || h->size == 0)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ipc_attach: NULL argument, no size or too many agents");
  hsa_agent_t list[64];
  for (unsigned i = 0; i < n; i++) {
    if (!hm_rt_owns_agent(rt, agents[i])) return hm_fail(HM_ERR_INVALID_ARG, "hm_ipc_attach: unknown agent");
    list[i] = agents[i]->h;
  }
  hsa_amd_ipc_memory_t hh;
  memcpy(hh.handle, h->hsa, sizeof hh.handle);
  void *p = NULL;
  hsa_status_t s = rt->api.hsa_amd_ipc_memory_attach(&hh, h->size, n, list, &p);
  if (s != HSA_STATUS_SUCCESS || !p) return hm_hsa_fail(rt, s, "attaching an IPC handle of %llu bytes", (unsigned long long)h->size);
  pthread_mutex_lock(&rt->lock);
  struct hm_alloc rec = {.p = p, .size = h->size, .attached = true};
  hm_status st = hm_rt_alloc_insert(rt, &rec);
  pthread_mutex_unlock(&rt->lock);
  if (st) {
    rt->api.hsa_amd_ipc_memory_detach(p);
    return hm_fail_prefix(st, "an attachment");
  }
  *out = p;
  return HM_OK;
}

hm_status hm_ipc_detach(hm_runtime *rt, void *p) {
  if (!rt || !p) return hm_fail(HM_ERR_INVALID_ARG, "hm_ipc_detach: NULL argument");
  pthread_mutex_lock(&rt->lock);
  int i = hm_rt_alloc_index(rt, p);
  if (i < 0 || rt->allocs[i].p != p || !rt->allocs[i].attached) {
    pthread_mutex_unlock(&rt->lock);
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ipc_detach: %p is not an attachment of this runtime", p);
  }
  hm_rt_alloc_remove(rt, (unsigned)i);
  pthread_mutex_unlock(&rt->lock);
  hsa_status_t s = rt->api.hsa_amd_ipc_memory_detach(p);
  return s == HSA_STATUS_SUCCESS ? HM_OK : hm_hsa_fail(rt, s, "detaching %p", p);
}
