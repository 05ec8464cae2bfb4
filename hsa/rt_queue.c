/* hsa/rt_queue.c: AQL queues and packets written as ROCr and HIP write them: reserve the write
 * index, wait for room, write the body, publish header and setup with one 32-bit release store,
 * ring the doorbell with the last index; barrier-AND packets; the queue error callback. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_internal.h"

/* The agent calls this from its own thread when a queue fails (a malformed packet, a kernel
 * that trapped or hung): record why, and let the next call of the runtime return it. */
static void on_queue_error(hsa_status_t status, hsa_queue_t *hq, void *data) {
  hm_queue *q = data;
  char text[1024] = "";
  if (q->rt->api.sim_queue_error) q->rt->api.sim_queue_error(hq, text, sizeof text);
  const char *str = NULL;
  if (q->rt->api.hsa_status_string(status, &str) != HSA_STATUS_SUCCESS || !str) str = "unknown status";
  if (text[0]) snprintf(q->fault_msg, sizeof q->fault_msg, "%s", text);
  else snprintf(q->fault_msg, sizeof q->fault_msg, "%s (0x%x)", str, (unsigned)status);
  atomic_store(&q->fault_status, (int)status);
  atomic_store(&q->rt->fault, q);
}

hm_status hm_queue_create(hm_agent *a, uint32_t size, hm_queue **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_create: out is NULL");
  *out = NULL;
  if (!a || !hm_rt_owns_agent(a->rt, a)) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_create: unknown agent");
  if (size == 0 || (size & (size - 1)) || size < a->info.queue_min || size > a->info.queue_max)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_create: %u packets (a power of two in %u..%u)", size,
                   a->info.queue_min, a->info.queue_max);
  hm_queue *q = calloc(1, sizeof *q);
  if (!q || !(q->slot_owner = calloc(size, sizeof *q->slot_owner))) {
    free(q);
    return hm_fail(HM_ERR_NO_MEMORY, "out of memory");
  }
  q->rt = a->rt;
  q->agent = a;
  hsa_status_t s = a->rt->api.hsa_queue_create(a->h, size, HSA_QUEUE_TYPE_MULTI, on_queue_error, q, UINT32_MAX,
                                                UINT32_MAX, &q->hq);
  if (s != HSA_STATUS_SUCCESS) {
    free(q->slot_owner);
    free(q);
    return hm_hsa_fail(a->rt, s, "creating a %u-packet queue on agent %u", size, a->index);
  }
  q->size = q->hq->size;
  q->mask = q->size - 1;
  q->ring = q->hq->base_address;
  pthread_mutex_lock(&a->rt->lock);
  q->next = a->rt->queues;
  a->rt->queues = q;
  pthread_mutex_unlock(&a->rt->lock);
  *out = q;
  return HM_OK;
}

static void destroy(hm_queue *q) {
  hm_queue *expect = q;
  atomic_compare_exchange_strong(&q->rt->fault, &expect, NULL);
  q->rt->api.hsa_queue_destroy(q->hq);
  free(q->slot_owner);
  free(q);
}

hm_status hm_queue_destroy(hm_queue *q) {
  if (!q) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_destroy: NULL queue");
  hm_runtime *rt = q->rt;
  pthread_mutex_lock(&rt->lock);
  if (q->chains) {
    unsigned n = q->chains;
    pthread_mutex_unlock(&rt->lock);
    return hm_fail(HM_ERR_BUSY, "hm_queue_destroy: %u recorded chain(s) still use the queue: hm_chain_destroy first", n);
  }
  for (hm_queue **pp = &rt->queues; *pp; pp = &(*pp)->next)
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  pthread_mutex_unlock(&rt->lock);
  destroy(q);
  return HM_OK;
}

void hm_queue_destroy_all(hm_runtime *rt) {
  while (rt->queues) {
    hm_queue *q = rt->queues;
    rt->queues = q->next;
    destroy(q);
  }
}

hm_status hm_queue_status(hm_queue *q) {
  if (!q) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_status: NULL queue");
  if (atomic_load(&q->fault_status)) {
    hm_queue *expect = q;
    atomic_compare_exchange_strong(&q->rt->fault, &expect, NULL); /* reported now */
    return hm_fail(HM_ERR_QUEUE_FAULT, "queue on agent %u: %s", q->agent->index, q->fault_msg);
  }
  return HM_OK;
}

hm_agent *hm_queue_agent(const hm_queue *q) { return q ? q->agent : NULL; }

/* ---------------------------------------------------------------- writing packets */

uint32_t hm_aql_dispatch_body(hsa_kernel_dispatch_packet_t *slot, const hm_dispatch *d, const hm_kernel *k) {
  uint32_t cta = d->cta_size ? d->cta_size : k->info.cta_size;
  slot->workgroup_size_x = (uint16_t)cta;
  slot->workgroup_size_y = 1;
  slot->workgroup_size_z = 1;
  slot->reserved0 = 0;
  slot->grid_size_x = d->ctas * cta;
  slot->grid_size_y = 1;
  slot->grid_size_z = 1;
  slot->private_segment_size = k->info.private_bytes;
  slot->group_segment_size = k->info.group_bytes + d->dynamic_lds;
  slot->kernel_object = k->info.object;
  slot->kernarg_address = d->kernarg;
  slot->reserved2 = 0;
  slot->completion_signal.handle = d->completion.handle;
  uint32_t header = HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE |
                    (uint32_t)d->barrier << HSA_PACKET_HEADER_BARRIER |
                    (uint32_t)d->acquire << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE |
                    (uint32_t)d->release << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE;
  uint32_t setup = 1u << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  return header | setup << 16;
}

uint32_t hm_aql_barrier_body(hsa_kernel_dispatch_packet_t *slot, const hm_barrier_pkt *b) {
  hsa_barrier_and_packet_t *p = (hsa_barrier_and_packet_t *)slot;
  p->reserved1 = 0;
  for (int i = 0; i < 5; i++) p->dep_signal[i].handle = b->deps[i].handle;
  p->reserved2 = 0;
  p->completion_signal.handle = b->completion.handle;
  uint32_t header = HSA_PACKET_TYPE_BARRIER_AND << HSA_PACKET_HEADER_TYPE |
                    (uint32_t)b->barrier << HSA_PACKET_HEADER_BARRIER |
                    (uint32_t)b->acquire << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE |
                    (uint32_t)b->release << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE;
  return header; /* reserved0 (the setup half) is zero */
}

static void publish(hsa_kernel_dispatch_packet_t *slot, uint32_t header_setup) {
  __atomic_store_n((uint32_t *)slot, header_setup, __ATOMIC_RELEASE);
}

/* Reserve n consecutive packets and wait until the ring has room for them. A queue that stays
 * full for 30 s (a hung agent) is an error rather than a hang. */
hm_status hm_queue_reserve(hm_queue *q, uint32_t n, uint64_t *first) {
  if (atomic_load(&q->fault_status)) return hm_queue_status(q);
  const struct hm_hsa_api *api = &q->rt->api;
  uint64_t idx = api->hsa_queue_add_write_index_scacq_screl(q->hq, n);
  uint64_t spins = 0, t0 = 0;
  while (idx + n - api->hsa_queue_load_read_index_scacquire(q->hq) > q->size) {
    if (++spins < 64) continue;
    if (atomic_load(&q->fault_status)) return hm_queue_status(q);
    if (!t0) t0 = hm_now_ns();
    else if (hm_now_ns() - t0 > 30000000000ull)
      return hm_fail(HM_ERR_TIMEOUT, "queue on agent %u stayed full for 30 s", q->agent->index);
    sched_yield();
  }
  *first = idx;
  return HM_OK;
}

void hm_queue_ring(hm_queue *q, uint64_t last) {
  q->rt->api.hsa_signal_store_screlease(q->hq->doorbell_signal, (hsa_signal_value_t)last);
}

static bool kernel_on_agent(const hm_kernel *k, const hm_agent *a) { return k && k->prog && k->prog->agent == a; }

/* Everything a packet needs, checked before anything is written (no half-written packets). */
static hm_status check_dispatch(hm_queue *q, const hm_dispatch *d) {
  if (!d) return hm_fail(HM_ERR_INVALID_ARG, "dispatch: NULL description");
  const hm_kernel *k = d->kernel;
  if (!kernel_on_agent(k, q->agent))
    return hm_fail(HM_ERR_INVALID_ARG, "dispatch: no kernel, or a kernel loaded for another agent");
  if (k->refused[0]) return hm_fail(HM_ERR_UNSUPPORTED, "%s", k->refused);
  uint32_t cta = d->cta_size ? d->cta_size : k->info.cta_size;
  if (cta == 0) return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: no CTA size given and none required", k->info.name);
  if (k->info.cta_size && cta != k->info.cta_size)
    return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: CTA of %u work-items, the kernel requires %u", k->info.name, cta,
                   k->info.cta_size);
  if (cta > k->info.max_cta_size || cta > 1024)
    return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: CTA of %u work-items (at most %u)", k->info.name, cta,
                   k->info.max_cta_size);
  if (d->ctas == 0 || (uint64_t)d->ctas * cta > UINT32_MAX)
    return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: grid of %u CTAs", k->info.name, d->ctas);
  if ((uint64_t)k->info.group_bytes + d->dynamic_lds > q->agent->info.lds_bytes)
    return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: %u + %u bytes of LDS exceed the agent's %u", k->info.name,
                   k->info.group_bytes, d->dynamic_lds, q->agent->info.lds_bytes);
  if (d->acquire > HM_FENCE_SYSTEM || d->release > HM_FENCE_SYSTEM)
    return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: unknown fence scope", k->info.name);
  if (k->info.kernarg_size) {
    struct hm_alloc a;
    if (!d->kernarg) return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: no kernel arguments", k->info.name);
    if ((uintptr_t)d->kernarg & (k->info.kernarg_align - 1))
      return hm_fail(HM_ERR_INVALID_ARG, "dispatch %s: kernel arguments at %p are not %u-byte aligned", k->info.name,
                     d->kernarg, k->info.kernarg_align);
    if (!hm_rt_find_alloc(q->rt, d->kernarg, &a) || (char *)d->kernarg + k->info.kernarg_size > (char *)a.p + a.size)
      return hm_fail(HM_ERR_INVALID_ARG,
                     "dispatch %s: kernel arguments at %p are not %u bytes of this runtime's memory (hm_kernarg_new)",
                     k->info.name, d->kernarg, k->info.kernarg_size);
  }
  return HM_OK;
}

hm_status hm_queue_dispatch(hm_queue *q, const hm_dispatch *d, unsigned n) {
  if (!q || !d || n == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_dispatch: NULL queue, no packets");
  if (n > q->size) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_dispatch: %u packets exceed the %u-packet queue", n, q->size);
  for (unsigned i = 0; i < n; i++) {
    hm_status s = check_dispatch(q, &d[i]);
    if (s) return s;
  }
  hm_status s = hm_rt_take_fault(q->rt);
  if (s) return s;
  uint64_t first;
  if ((s = hm_queue_reserve(q, n, &first))) return s;
  uint32_t hs[64];
  for (unsigned i = 0; i < n; i++) {
    hsa_kernel_dispatch_packet_t *slot = &q->ring[(first + i) & q->mask];
    uint32_t h = hm_aql_dispatch_body(slot, &d[i], d[i].kernel);
    q->slot_owner[(first + i) & q->mask] = 0;
    if (n <= 64) hs[i] = h;
    else publish(slot, h); /* a long batch publishes as it goes */
  }
  if (n <= 64)
    for (unsigned i = 0; i < n; i++) publish(&q->ring[(first + i) & q->mask], hs[i]);
  hm_queue_ring(q, first + n - 1);
  return HM_OK;
}

hm_status hm_queue_barrier(hm_queue *q, const hm_barrier_pkt *b) {
  if (!q || !b) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_barrier: NULL argument");
  if (b->acquire > HM_FENCE_SYSTEM || b->release > HM_FENCE_SYSTEM)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_barrier: unknown fence scope");
  hm_status s = hm_rt_take_fault(q->rt);
  if (s) return s;
  uint64_t first;
  if ((s = hm_queue_reserve(q, 1, &first))) return s;
  hsa_kernel_dispatch_packet_t *slot = &q->ring[first & q->mask];
  uint32_t h = hm_aql_barrier_body(slot, b);
  q->slot_owner[first & q->mask] = 0;
  publish(slot, h);
  hm_queue_ring(q, first);
  return HM_OK;
}

hm_status hm_queue_wait_idle(hm_queue *q, uint64_t timeout_ns) {
  if (!q) return hm_fail(HM_ERR_INVALID_ARG, "hm_queue_wait_idle: NULL queue");
  hm_signal done;
  hm_status s = hm_signal_create(q->rt, 1, &done);
  if (s) return s;
  hm_barrier_pkt b = {.completion = done, .barrier = true, .acquire = HM_FENCE_SYSTEM, .release = HM_FENCE_SYSTEM};
  s = hm_queue_barrier(q, &b);
  if (!s) s = hm_signal_wait(q->rt, done, HM_WAIT_LT, 1, timeout_ns, false, NULL);
  if (s == HM_ERR_TIMEOUT && atomic_load(&q->fault_status)) s = hm_queue_status(q);
  hm_signal_destroy(q->rt, done);
  return s;
}
