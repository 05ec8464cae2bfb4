/* hsa/sim/queue.c: user-mode AQL queues (ROCr's amd_queue_t over a ring of 64-byte packets) and
 * one packet processor thread a queue: doorbells, header publication, packet types, the barrier bit,
 * fence scopes, completion signals, barrier-AND/OR dependencies, wrap-around, malformed packets. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* The sim_queue sits just before the amd_queue_t in one block, so a queue handle (the
 * hsa_queue_t at the start of amd_queue_t) finds its agent-side state with no lookup. */
#define QBLOCK_HEAD 4096u

static struct sim_queue *queue_of(const hsa_queue_t *q) {
  if (!q) return NULL;
  struct sim_queue *s = (struct sim_queue *)((uintptr_t)q - QBLOCK_HEAD);
  return s->magic == SIM_QUEUE_MAGIC && (const void *)s->amd == (const void *)q ? s : NULL;
}

SIM_API size_t hm_sim_queue_error(const hsa_queue_t *queue, char *buf, size_t cap) {
  struct sim_queue *q = queue_of(queue);
  if (!q || !atomic_load(&q->failed)) return 0;
  pthread_mutex_lock(&q->lock);
  size_t n = strlen(q->error);
  if (buf && cap) snprintf(buf, cap, "%s", q->error);
  pthread_mutex_unlock(&q->lock);
  return n;
}

void sim_queue_fail(struct sim_queue *q, hsa_status_t status, const char *fmt, ...) {
  pthread_mutex_lock(&q->lock);
  bool first = !atomic_load(&q->failed);
  if (first) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->error, sizeof q->error, fmt, ap);
    va_end(ap);
    atomic_store(&q->failed, true);
  }
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->lock);
  sim_error(status, "queue %llu: %s", (unsigned long long)q->amd->hsa_queue.id, q->error);
  /* ROCr calls the error callback from its own thread; so does the agent (the packet
   * processor or the CTA worker that found the error) */
  if (first && q->callback) q->callback(status, &q->amd->hsa_queue, q->cb_data);
  /* the queue is inactive from here on; wake the processor so it stops waiting */
  sim_signal_busy(q->doorbell);
  sim_signal_changed(q->doorbell);
}

/* How many CTAs of this queue's packets the agent cannot start now: those of its dispatches not
 * placed on a CU (no room: another kernel holds the CUs; or held back by HSAMONO_SIM_HOLD_CTAS), and
 * one more while the packet processor waits on a packet's barrier bit or dependencies. 0 means the
 * agent is only behind: a packet it has not read yet though nothing blocks it, or CTAs placed whose
 * threads have not run yet (a loaded host). hm_persistent_launch tells the two apart with it. */
SIM_API uint32_t hm_sim_queue_unplaced(const hsa_queue_t *queue) {
  struct sim_queue *q = queue_of(queue);
  if (!q) return 0;
  return sim_queue_unplaced_ctas(q) + (atomic_load(&q->blocked) ? 1u : 0u);
}

/* ---------------------------------------------------------------- the packet processor */

static bool wait_signal_zero(struct sim_queue *q, hsa_signal_t h) {
  struct sim_signal *s = sim_signal_of(h);
  if (!s) return false;
  while (!atomic_load(&q->stop) && !atomic_load(&q->failed))
    if (sim_signal_wait_value(s, HSA_SIGNAL_CONDITION_EQ, 0, 10000000ull, &q->stop) == 0) return true;
  return true;
}

static void wait_idle(struct sim_queue *q) {
  pthread_mutex_lock(&q->lock);
  atomic_store(&q->blocked, q->inflight != 0);
  while (q->inflight && !atomic_load(&q->stop)) pthread_cond_wait(&q->cv, &q->lock);
  atomic_store(&q->blocked, false);
  pthread_mutex_unlock(&q->lock);
}

static void complete_signal(hsa_signal_t h) {
  struct sim_signal *s = sim_signal_of(h);
  if (s) sim_signal_complete(s);
}

/* Checks of a kernel-dispatch packet; returns NULL and fills why when it is malformed. */
static struct sim_kernel *check_dispatch(struct sim_queue *q, const hsa_kernel_dispatch_packet_t *p, char *why,
                                         size_t cap) {
  unsigned dims = p->setup & 3;
  struct sim_kernel *k = sim_kernel_lookup(p->kernel_object);
  if (dims < 1 || dims > 3) snprintf(why, cap, "setup names %u dimensions", dims);
  else if (p->workgroup_size_x == 0 || p->workgroup_size_y == 0 || p->workgroup_size_z == 0 ||
           p->grid_size_x == 0 || p->grid_size_y == 0 || p->grid_size_z == 0)
    snprintf(why, cap, "a zero work-group or grid size");
  else if (p->workgroup_size_y != 1 || p->workgroup_size_z != 1 || p->grid_size_y != 1 || p->grid_size_z != 1)
    snprintf(why, cap, "the software agent runs one-dimensional grids only");
  else if (p->workgroup_size_x > SIM_MAX_CTA) snprintf(why, cap, "work-group of %u work-items", p->workgroup_size_x);
  else if (!k) snprintf(why, cap, "kernel_object 0x%llx is no loaded kernel", (unsigned long long)p->kernel_object);
  else if (k->agent != q->agent) snprintf(why, cap, "kernel %s was loaded for another agent", k->name);
  else if (k->meta.reqd_workgroup_size[0] && p->workgroup_size_x != k->meta.reqd_workgroup_size[0])
    snprintf(why, cap, "kernel %s requires %u work-items a CTA, the packet has %u", k->name,
             k->meta.reqd_workgroup_size[0], p->workgroup_size_x);
  else if (p->group_segment_size < k->meta.group_segment_fixed_size || p->group_segment_size > q->agent->limits.lds_bytes)
    snprintf(why, cap, "kernel %s: group segment %u (needs %u, at most %u)", k->name, p->group_segment_size,
             k->meta.group_segment_fixed_size, q->agent->limits.lds_bytes);
  else if (p->private_segment_size < k->meta.private_segment_fixed_size)
    snprintf(why, cap, "kernel %s: private segment %u < %u", k->name, p->private_segment_size,
             k->meta.private_segment_fixed_size);
  else if (k->meta.kernarg_size && (!p->kernarg_address || ((uintptr_t)p->kernarg_address & (k->meta.kernarg_align - 1))))
    snprintf(why, cap, "kernel %s: kernarg address %p missing or not %u-byte aligned", k->name, p->kernarg_address,
             k->meta.kernarg_align);
  else if (p->reserved0 || p->reserved2) snprintf(why, cap, "reserved fields are not zero");
  else if (p->completion_signal.handle && !sim_signal_of(p->completion_signal))
    snprintf(why, cap, "completion signal 0x%llx is not a signal", (unsigned long long)p->completion_signal.handle);
  else {
    struct sim_alloc a;
    if (k->meta.kernarg_size &&
        (!sim_alloc_find((uintptr_t)p->kernarg_address, &a) ||
         (uintptr_t)p->kernarg_address + k->meta.kernarg_size > a.base + a.size))
      snprintf(why, cap, "kernel %s: kernarg segment %p is not in agent-visible memory", k->name, p->kernarg_address);
    else return k;
  }
  return NULL;
}

static void *processor_main(void *arg) {
  struct sim_queue *q = arg;
  amd_queue_t *aq = q->amd;
  hsa_kernel_dispatch_packet_t *ring = q->ring;
  for (;;) {
    if (atomic_load(&q->stop)) break;
    uint64_t rd = __atomic_load_n(&aq->read_dispatch_id, __ATOMIC_RELAXED);
    hsa_kernel_dispatch_packet_t *slot = &ring[rd & (q->size - 1)];
    /* seq is read before the state it guards, so a ring (or a stop, or a failure, which bump it
     * too) after these checks ends the sleep at once: no ring is missed, and none is invented */
    uint32_t seq = atomic_load_explicit(&q->doorbell->seq, memory_order_acquire);
    if (atomic_load(&q->failed) || rd >= atomic_load(&q->rung)) {
      /* inactive, or nothing announced: a GPU's packet processor reads the ring only when a
       * doorbell store tells it to, so a published packet nobody rang for waits, here too. The
       * timeout only bounds the sleep; a wake-up re-checks the doorbell, never the ring. */
      sim_signal_wait_seq(q->doorbell, seq, 1000000000ull);
      continue;
    }
    uint16_t header = __atomic_load_n(&slot->header, __ATOMIC_ACQUIRE);
    unsigned type = (header >> HSA_PACKET_HEADER_TYPE) & 0xff;
    if (type == HSA_PACKET_TYPE_INVALID) {
      /* announced but not published yet (another producer's ring covered a slot still being
       * written, or a ring ahead of its header): the packet processor re-reads the header until
       * it is valid, as the CP does for a packet the doorbell covers */
      sim_signal_wait_seq(q->doorbell, seq, 1000000ull);
      continue;
    }
    hsa_kernel_dispatch_packet_t pkt;
    memcpy(&pkt, slot, sizeof pkt);
    unsigned acq = (header >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3;
    unsigned rel = (header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3;
    if (header & (1u << HSA_PACKET_HEADER_BARRIER)) wait_idle(q);
    char why[256] = "";
    if (acq == 3 || rel == 3) {
      snprintf(why, sizeof why, "packet %llu: fence scope 3 is reserved", (unsigned long long)rd);
    } else if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH) {
      struct sim_kernel *k = check_dispatch(q, &pkt, why, sizeof why);
      if (k) {
        pthread_mutex_lock(&q->lock);
        q->inflight++;
        pthread_mutex_unlock(&q->lock);
        sim_dispatch_start(q, &pkt, rd, k);
      }
    } else if (type == HSA_PACKET_TYPE_BARRIER_AND || type == HSA_PACKET_TYPE_BARRIER_OR) {
      const hsa_barrier_and_packet_t *b = (const hsa_barrier_and_packet_t *)&pkt;
      for (int i = 0; i < 5 && !why[0]; i++)
        if (b->dep_signal[i].handle && !sim_signal_of(b->dep_signal[i]))
          snprintf(why, sizeof why, "barrier packet %llu: dependency %d is not a signal", (unsigned long long)rd, i);
      if (!why[0] && b->completion_signal.handle && !sim_signal_of(b->completion_signal))
        snprintf(why, sizeof why, "barrier packet %llu: completion signal is not a signal", (unsigned long long)rd);
      if (!why[0]) {
        atomic_store(&q->blocked, true);
        if (type == HSA_PACKET_TYPE_BARRIER_AND) {
          for (int i = 0; i < 5; i++)
            if (b->dep_signal[i].handle) wait_signal_zero(q, b->dep_signal[i]);
        } else {
          /* OR: done when any dependency reaches 0 (or when there is none) */
          for (;;) {
            struct sim_signal *first = NULL;
            bool any = false;
            for (int i = 0; i < 5; i++) {
              struct sim_signal *d = sim_signal_of(b->dep_signal[i]);
              if (!d) continue;
              if (!first) first = d;
              if (__atomic_load_n(&d->amd.value, __ATOMIC_ACQUIRE) == 0) any = true;
            }
            if (any || !first || atomic_load(&q->stop) || atomic_load(&q->failed)) break;
            sim_signal_wait_value(first, HSA_SIGNAL_CONDITION_EQ, 0, 1000000ull, &q->stop);
          }
        }
        atomic_store(&q->blocked, false);
        if (b->completion_signal.handle) complete_signal(b->completion_signal);
      }
    } else {
      snprintf(why, sizeof why, "packet %llu: type %u is not supported (vendor-specific or agent dispatch)",
               (unsigned long long)rd, type);
    }
    if (why[0]) {
      sim_queue_fail(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, "malformed packet: %s", why);
      continue;
    }
    /* consumed: the slot returns to INVALID and the read index moves on (the write side may
     * reuse the slot once read_index passes it) */
    __atomic_store_n(&slot->header, (uint16_t)(HSA_PACKET_TYPE_INVALID << HSA_PACKET_HEADER_TYPE), __ATOMIC_RELAXED);
    __atomic_store_n(&aq->read_dispatch_id, rd + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* ---------------------------------------------------------------- the API */

SIM_API hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
                                      void (*callback)(hsa_status_t, hsa_queue_t *, void *), void *data,
                                      uint32_t private_segment_size, uint32_t group_segment_size,
                                      hsa_queue_t **queue) {
  (void)private_segment_size, (void)group_segment_size;
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  struct sim_agent *a = sim_agent_of(agent);
  if (!a) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!a->gpu) return HSA_STATUS_ERROR_INVALID_QUEUE_CREATION;
  if (!queue || size < 64 || size > 131072 || (size & (size - 1))) return HSA_STATUS_ERROR_INVALID_QUEUE_CREATION;
  if (type != HSA_QUEUE_TYPE_MULTI && type != HSA_QUEUE_TYPE_SINGLE) return HSA_STATUS_ERROR_INVALID_QUEUE_CREATION;
  void *block;
  if (posix_memalign(&block, 4096, QBLOCK_HEAD + sizeof(amd_queue_t))) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  memset(block, 0, QBLOCK_HEAD + sizeof(amd_queue_t));
  struct sim_queue *q = block;
  q->amd = (amd_queue_t *)((char *)block + QBLOCK_HEAD);
  if (posix_memalign(&q->ring, 4096, (size_t)size * 64)) {
    free(block);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  /* every slot starts INVALID: a packet is only valid once its header is published */
  hsa_kernel_dispatch_packet_t *ring = q->ring;
  for (uint32_t i = 0; i < size; i++) {
    memset(&ring[i], 0, sizeof ring[i]);
    ring[i].header = HSA_PACKET_TYPE_INVALID << HSA_PACKET_HEADER_TYPE;
  }
  if (sim_signal_new(0, &q->doorbell)) {
    free(q->ring);
    free(block);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  q->doorbell->is_doorbell = true;
  q->doorbell->queue = q;
  q->doorbell->amd.kind = AMD_SIGNAL_KIND_DOORBELL;
  q->size = size;
  q->agent = a;
  q->callback = callback;
  q->cb_data = data;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cv, NULL);
  static _Atomic uint64_t next_id;
  amd_queue_t *aq = q->amd;
  aq->hsa_queue.type = type;
  aq->hsa_queue.features = HSA_QUEUE_FEATURE_KERNEL_DISPATCH;
  aq->hsa_queue.base_address = q->ring;
  aq->hsa_queue.doorbell_signal.handle = (uint64_t)(uintptr_t)q->doorbell;
  aq->hsa_queue.size = size;
  aq->hsa_queue.id = atomic_fetch_add(&next_id, 1);
  aq->max_cu_id = a->ncus - 1;
  aq->max_wave_id = 31;
  q->magic = SIM_QUEUE_MAGIC;
  if (pthread_create(&q->thread, NULL, processor_main, q) != 0) {
    sim_signal_free(q->doorbell);
    free(q->ring);
    free(block);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  *queue = &aq->hsa_queue;
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_queue_destroy(hsa_queue_t *queue) {
  struct sim_queue *q = queue_of(queue);
  if (!q) return HSA_STATUS_ERROR_INVALID_QUEUE;
  atomic_store(&q->stop, true);
  sim_signal_busy(q->doorbell);
  sim_signal_changed(q->doorbell);
  pthread_join(q->thread, NULL);
  /* kernels still running on the queue are stopped (a real queue's destruction does as much) */
  sim_dispatches_abort_queue(q);
  pthread_mutex_lock(&q->lock);
  while (q->inflight) pthread_cond_wait(&q->cv, &q->lock);
  pthread_mutex_unlock(&q->lock);
  q->magic = 0;
  q->doorbell->is_doorbell = false;
  sim_signal_free(q->doorbell);
  free(q->ring);
  free(q);
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_queue_inactivate(hsa_queue_t *queue) {
  struct sim_queue *q = queue_of(queue);
  if (!q) return HSA_STATUS_ERROR_INVALID_QUEUE;
  atomic_store(&q->failed, true);
  sim_signal_busy(q->doorbell);
  sim_signal_changed(q->doorbell);
  return HSA_STATUS_SUCCESS;
}

/* The index operations work on amd_queue_t's dispatch ids, as ROCr's do. */
#define AQ(q) ((amd_queue_t *)(q))
SIM_API uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t *q) { return __atomic_load_n(&AQ(q)->read_dispatch_id, __ATOMIC_ACQUIRE); }
SIM_API uint64_t hsa_queue_load_read_index_relaxed(const hsa_queue_t *q) { return __atomic_load_n(&AQ(q)->read_dispatch_id, __ATOMIC_RELAXED); }
SIM_API uint64_t hsa_queue_load_read_index_acquire(const hsa_queue_t *q) { return hsa_queue_load_read_index_scacquire(q); }
SIM_API uint64_t hsa_queue_load_write_index_scacquire(const hsa_queue_t *q) { return __atomic_load_n(&AQ(q)->write_dispatch_id, __ATOMIC_ACQUIRE); }
SIM_API uint64_t hsa_queue_load_write_index_relaxed(const hsa_queue_t *q) { return __atomic_load_n(&AQ(q)->write_dispatch_id, __ATOMIC_RELAXED); }
SIM_API void hsa_queue_store_write_index_relaxed(const hsa_queue_t *q, uint64_t v) { __atomic_store_n(&AQ(q)->write_dispatch_id, v, __ATOMIC_RELAXED); }
SIM_API void hsa_queue_store_write_index_screlease(const hsa_queue_t *q, uint64_t v) { __atomic_store_n(&AQ(q)->write_dispatch_id, v, __ATOMIC_RELEASE); }
SIM_API uint64_t hsa_queue_add_write_index_scacq_screl(const hsa_queue_t *q, uint64_t v) { return __atomic_fetch_add(&AQ(q)->write_dispatch_id, v, __ATOMIC_ACQ_REL); }
SIM_API uint64_t hsa_queue_add_write_index_scacquire(const hsa_queue_t *q, uint64_t v) { return __atomic_fetch_add(&AQ(q)->write_dispatch_id, v, __ATOMIC_ACQUIRE); }
SIM_API uint64_t hsa_queue_add_write_index_relaxed(const hsa_queue_t *q, uint64_t v) { return __atomic_fetch_add(&AQ(q)->write_dispatch_id, v, __ATOMIC_RELAXED); }
SIM_API uint64_t hsa_queue_add_write_index_screlease(const hsa_queue_t *q, uint64_t v) { return __atomic_fetch_add(&AQ(q)->write_dispatch_id, v, __ATOMIC_RELEASE); }
#define CASW(name, order)                                                                                    \
  SIM_API uint64_t name(const hsa_queue_t *q, uint64_t expected, uint64_t v) {                              \
    uint64_t e = expected;                                                                                  \
    __atomic_compare_exchange_n(&AQ(q)->write_dispatch_id, &e, v, false, order, __ATOMIC_RELAXED);          \
    return e;                                                                                               \
  }
CASW(hsa_queue_cas_write_index_scacq_screl, __ATOMIC_ACQ_REL)
CASW(hsa_queue_cas_write_index_scacquire, __ATOMIC_ACQUIRE)
CASW(hsa_queue_cas_write_index_relaxed, __ATOMIC_RELAXED)
CASW(hsa_queue_cas_write_index_screlease, __ATOMIC_RELEASE)
