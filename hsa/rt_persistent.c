/* hsa/rt_persistent.c: persistent launches: the residency check before (with the calculator and
 * the agent's CU count), and the arrival check after, so a grid that is not all resident becomes
 * an error instead of a hang. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dev_persist.h"
#include "rt_internal.h"

/* Why a CTA of this kernel fits `ctas_per_cu` times in a CU, in words. */
static void explain(const hm_residency *r, const hm_kernel_resources *res, const hm_cu_limits *L, char *out, size_t cap) {
  switch (r->binding) {
  case HM_LIMIT_VGPR:
    snprintf(out, cap, "%u VGPRs a work-item leave room for %u waves a SIMD; a CTA of %u waves needs %u", res->vgprs,
             r->waves_per_simd_vgpr, r->waves_per_cta, (r->waves_per_cta + L->simds_per_cu - 1) / L->simds_per_cu);
    break;
  case HM_LIMIT_SGPR:
    snprintf(out, cap, "%u SGPRs leave room for %u waves a SIMD", res->sgprs, r->waves_per_simd_sgpr);
    break;
  case HM_LIMIT_WAVES:
    snprintf(out, cap, "%u waves a CTA, %u wave slots a CU", r->waves_per_cta, L->simds_per_cu * L->max_waves_per_simd);
    break;
  case HM_LIMIT_LDS:
    snprintf(out, cap, "%u bytes of LDS a CTA, %u a CU in %u-byte granules", res->lds_bytes, L->lds_bytes,
             L->lds_granule);
    break;
  case HM_LIMIT_BARRIERS: snprintf(out, cap, "%u workgroup barriers a CU", L->max_barriers); break;
  }
}

hm_status hm_persistent_grid(const hm_kernel *k, hm_agent *a, uint32_t ctas, uint32_t dynamic_lds, uint32_t *grid) {
  if (!k || !a || !grid) return hm_fail(HM_ERR_INVALID_ARG, "hm_persistent_grid: NULL argument");
  *grid = 0;
  if (!k->prog || k->prog->agent != a) return hm_fail(HM_ERR_INVALID_ARG, "hm_persistent_grid: kernel of another agent");
  hm_kernel_resources res;
  hm_residency r;
  hm_status s = hm_kernel_resources_of(k->info.meta, 0, dynamic_lds, &res);
  if (s) return s;
  if ((s = hm_residency_compute(&a->info.limits, &res, &r))) return s;
  uint64_t resident = (uint64_t)r.ctas_per_cu * a->info.cus;
  char why[256];
  explain(&r, &res, &a->info.limits, why, sizeof why);
  if (resident == 0)
    return hm_fail(HM_ERR_REFUSED, "kernel %s cannot run on agent %u (%s): not one CTA fits a CU (%s: %s)",
                   k->info.name, a->index, a->info.name, hm_limit_name(r.binding), why);
  if (ctas == 0) ctas = resident > UINT32_MAX ? UINT32_MAX : (uint32_t)resident;
  if (ctas > resident)
    return hm_fail(HM_ERR_REFUSED,
                   "kernel %s: a grid of %u CTAs cannot be resident on agent %u (%s, %u CUs): %u CTA%s a CU, %llu in "
                   "all (bound by %s: %s)",
                   k->info.name, ctas, a->index, a->info.name, a->info.cus, r.ctas_per_cu, r.ctas_per_cu == 1 ? "" : "s",
                   (unsigned long long)resident, hm_limit_name(r.binding), why);
  *grid = ctas;
  return HM_OK;
}

uint64_t hm_arrival_default_ns(const hm_runtime *rt) {
  return hm_runtime_is_sim(rt) ? 30000000000ull : 10000000000ull;
}

hm_status hm_persist_new(hm_agent *a, struct hm_dev_persist **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_persist_new: out is NULL");
  void *p;
  hm_status s = hm_mem_alloc(a, HM_POOL_HOST, sizeof(struct hm_dev_persist), 0, &p);
  if (s) return s;
  memset(p, 0, sizeof(struct hm_dev_persist));
  *out = p;
  return HM_OK;
}

/* Whether the arrival bound has run out after `waited` ns. On a GPU: the wall time alone. On the
 * software agent a CTA it has placed on a CU is resident, however long its OS thread then waits for
 * a core (on CI's loaded 2 cores a CTA's first instruction came seconds after its dispatch), so there
 * the bound runs out only when the agent also reports CTAs of the queue it cannot start (no room,
 * held back, a packet blocked). Past the agent's own default on top of the bound it runs out anyway:
 * a placed grid that never arrives is the agent's watchdog's to end; this only keeps the wait finite
 * should that fail. `*behind` says the bound was passed while the agent was only behind. */
static bool arrival_expired(const hm_queue *q, uint64_t waited, uint64_t bound, bool *behind) {
  if (waited <= bound) return false;
  if (!q->rt->api.sim_queue_unplaced || waited > bound + hm_arrival_default_ns(q->rt)) return true;
  if (q->rt->api.sim_queue_unplaced(q->hq)) return true;
  *behind = true;
  return false;
}

hm_status hm_persistent_launch(hm_queue *q, const hm_dispatch *d, struct hm_dev_persist *arrive,
                               uint64_t arrival_timeout_ns) {
  if (!q || !d || !arrive) return hm_fail(HM_ERR_INVALID_ARG, "hm_persistent_launch: NULL argument");
  struct hm_alloc a;
  if (!hm_rt_find_alloc(q->rt, arrive, &a) || (a.kind != HM_POOL_HOST && a.kind != HM_POOL_KERNARG))
    return hm_fail(HM_ERR_INVALID_ARG, "hm_persistent_launch: the handshake must be host memory (hm_persist_new)");
  uint32_t grid;
  hm_status s = hm_persistent_grid(d->kernel, q->agent, d->ctas, d->dynamic_lds, &grid);
  if (s) return s;
  if (!arrival_timeout_ns) arrival_timeout_ns = hm_arrival_default_ns(q->rt);
  __atomic_store_n(&arrive->arrived, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&arrive->state, 0, __ATOMIC_RELEASE);
  hm_dispatch one = *d;
  one.ctas = grid;
  if ((s = hm_queue_dispatch(q, &one, 1))) return s;
  uint64_t t0 = hm_now_ns();
  unsigned nap = 1;
  bool behind = false;
  for (;;) {
    if (__atomic_load_n(&arrive->state, __ATOMIC_ACQUIRE) == DEV_PERSIST_GO) return HM_OK;
    if ((s = hm_queue_status(q)))
      /* the agent ended the dispatch (a trap, its watchdog) before the grid had arrived: its
       * reason, with which launch it was */
      return hm_fail_prefix(s, "kernel %s: persistent launch of %u CTAs (%u arrived)", d->kernel->info.name, grid,
                            __atomic_load_n(&arrive->arrived, __ATOMIC_ACQUIRE));
    uint64_t waited = hm_now_ns() - t0;
    if (arrival_expired(q, waited, arrival_timeout_ns, &behind)) {
      /* Not resident: claim the verdict for ABORT. If the last CTA claimed GO first, the grid did
       * arrive after all. CTAs that arrived leave on ABORT; then wait for the kernel to end. */
      uint32_t expect = 0;
      if (!__atomic_compare_exchange_n(&arrive->state, &expect, DEV_PERSIST_ABORT, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE))
        return HM_OK;
      uint32_t n = __atomic_load_n(&arrive->arrived, __ATOMIC_ACQUIRE);
      /* How the aborted launch ended goes into the message: it did not end (CTAs that never
       * started keep it alive), or the agent failed it, with the agent's reason. */
      char end[768] = "";
      if (d->completion.handle) {
        hm_status w = hm_signal_wait(q->rt, d->completion, HM_WAIT_LT, 1, arrival_timeout_ns, false, NULL);
        if (w == HM_ERR_TIMEOUT && atomic_load(&q->fault_status)) w = hm_queue_status(q);
        if (w == HM_ERR_TIMEOUT)
          snprintf(end, sizeof end, " and had not ended %.3f s later (it is still in flight)",
                   (double)arrival_timeout_ns / 1e9);
        else if (w)
          snprintf(end, sizeof end, ", then failed: %s", hm_errmsg());
      }
      char late[160] = "";
      if (behind)
        snprintf(late, sizeof late, " (and %.3f s more, the software agent behind: CTAs placed, not yet run)",
                 (double)(waited - arrival_timeout_ns) / 1e9);
      return hm_fail(HM_ERR_REFUSED,
                     "kernel %s: only %u of %u CTAs arrived within %.3f s%s: the grid is not resident (another "
                     "kernel holding CUs?); the launch was aborted%s",
                     d->kernel->info.name, n, grid, (double)arrival_timeout_ns / 1e9, late, end);
    }
    struct timespec ts = {0, (long)nap * 1000};
    nanosleep(&ts, NULL);
    if (nap < 500) nap *= 2;
  }
}
