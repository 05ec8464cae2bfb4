/* layer/run/timeline.c: the persistent launches' per-CTA timelines on the host: each kernel's stage
 * names in program order, the buffer a runner allocates only when asked, and reading it back. */
#include <stddef.h>
#include <string.h>

#include "dev_timeline.h"
#include "hm_hsa.h"
#include "timeline_internal.h"

_Static_assert(sizeof(hm_timeline_stamp) == sizeof(struct hm_tl_stamp) &&
                   offsetof(hm_timeline_stamp, n) == offsetof(struct hm_tl_stamp, n) &&
                   offsetof(hm_timeline_stamp, ran) == offsetof(struct hm_tl_stamp, ran),
               "hm_timeline_stamp is the kernels' struct hm_tl_stamp");
_Static_assert(HM_TIMELINE_EVERY == DEV_TL_EVERY, "HM_TIMELINE_EVERY");

/* The slots each kernel stamps, as its source runs them: device/kernels/ffn.cl (ffn_stages with the
 * push), k2.cl (its four back stages, then ffn_stages from the slice), k1.cl (K1_STAGE). */
#define FFN_STAGE_NAMES "slice", "gate", "norm", "router", "route", "shared", "route_table", "gate_up", "down", "reduce"
static const char *const ffn_names[] = {"start", "push", FFN_STAGE_NAMES};
static const char *const k2_names[] = {"start", "split", "combine", "wo_a", "wo_b", FFN_STAGE_NAMES};
static const char *const k1_names[] = {"start", "seam_slice", "seam_norm", "seam_gate", "key_table", "wqkv", "qkv",
                                       "wq_b"};
#define COUNT(a) (uint32_t)(sizeof(a) / sizeof *(a))
_Static_assert(COUNT(k2_names) <= DEV_TL_SLOTS && COUNT(ffn_names) <= DEV_TL_SLOTS && COUNT(k1_names) <= DEV_TL_SLOTS,
               "a kernel stamps more slots than DEV_TL_SLOTS");

static const struct {
  const char *kernel;
  const char *const *names;
  uint32_t slots;
} kernels[HM_TL_KERNELS] = {
    [HM_TL_FFN] = {"ffn", ffn_names, COUNT(ffn_names)},
    [HM_TL_K1] = {"k1", k1_names, COUNT(k1_names)},
    [HM_TL_K2] = {"k2", k2_names, COUNT(k2_names)},
};

hm_status hm_tl_alloc(hm_agent *a, uint32_t ctas, const char *who, struct hm_tl_buf *b) {
  b->ctas = ctas, b->bytes = (size_t)ctas * DEV_TL_SLOTS * sizeof(struct hm_tl_stamp), b->ran = HM_TL_KERNELS;
  hm_status s = hm_mem_alloc(a, HM_POOL_HOST, b->bytes, 0, (void **)&b->stamps);
  if (s) return hm_fail_prefix(s, "%s: the timeline's %zu bytes", who, b->bytes);
  memset(b->stamps, 0, b->bytes);
  return HM_OK;
}

void hm_tl_free(hm_runtime *rt, struct hm_tl_buf *b) {
  if (b->stamps) hm_mem_free(rt, b->stamps);
  b->stamps = NULL;
}

void hm_tl_arm(struct hm_tl_buf *b, enum hm_tl_kernel k, bool zero) {
  if (!b->stamps) return;
  if (zero) memset(b->stamps, 0, b->bytes);
  b->ran = k;
}

hm_status hm_tl_view(const struct hm_tl_buf *b, bool sim, const char *who, hm_timeline *out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "%s: NULL timeline", who);
  memset(out, 0, sizeof *out);
  if (!b->stamps)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: no timeline (the runner was created without hm_ffn_config.timeline)", who);
  if (b->ran == HM_TL_KERNELS) return hm_fail(HM_ERR_INVALID_ARG, "%s: no timeline yet (no step has run)", who);
  out->kernel = kernels[b->ran].kernel, out->names = kernels[b->ran].names, out->slots = kernels[b->ran].slots;
  out->ctas = b->ctas, out->stride = DEV_TL_SLOTS, out->event_order = sim, out->hz = sim ? 0 : 100000000u;
  out->stamps = b->stamps;
  return HM_OK;
}

uint32_t hm_timeline_tasks(const hm_timeline *tl, uint32_t cta, uint32_t slot) {
  if (!tl || cta >= tl->ctas || slot >= tl->slots) return 0;
  const hm_timeline_stamp *s = &tl->stamps[(size_t)cta * tl->stride + slot];
  return s->n == HM_TIMELINE_EVERY ? 1 : s->ran;
}

hm_status hm_timeline_check(const hm_timeline *tl) {
  if (!tl || !tl->stamps) return hm_fail(HM_ERR_INVALID_ARG, "hm_timeline_check: NULL timeline");
  for (uint32_t c = 0; c < tl->ctas; c++)
    for (uint32_t s = 0; s < tl->slots; s++) {
      const hm_timeline_stamp *p = &tl->stamps[(size_t)c * tl->stride + s];
      if (!p->t)
        return hm_fail(HM_ERR_INVALID_ARG, "%s timeline: CTA %u never stamped slot %u (%s)", tl->kernel, c, s,
                       tl->names[s]);
      if (s && p->t < p[-1].t)
        return hm_fail(HM_ERR_INVALID_ARG, "%s timeline: CTA %u ended %s at %llu, before %s at %llu", tl->kernel, c,
                       tl->names[s], (unsigned long long)p->t, tl->names[s - 1], (unsigned long long)p[-1].t);
    }
  /* each stage's tasks, as the CTAs count them, all ran and none twice */
  for (uint32_t s = 0; s < tl->slots; s++) {
    const uint32_t n = tl->stamps[s].n;
    uint64_t ran = 0;
    for (uint32_t c = 0; c < tl->ctas; c++) {
      const hm_timeline_stamp *p = &tl->stamps[(size_t)c * tl->stride + s];
      if (p->n != n)
        return hm_fail(HM_ERR_INVALID_ARG, "%s timeline: CTA %u counts %u tasks in %s, CTA 0 %u", tl->kernel, c, p->n,
                       tl->names[s], n);
      if (n == HM_TIMELINE_EVERY && p->ran != 1)
        return hm_fail(HM_ERR_INVALID_ARG, "%s timeline: CTA %u ran %s %u times, not once", tl->kernel, c,
                       tl->names[s], p->ran);
      ran += p->ran;
    }
    if (n != HM_TIMELINE_EVERY && ran != n)
      return hm_fail(HM_ERR_INVALID_ARG, "%s timeline: the CTAs ran %llu of %s's %u tasks", tl->kernel,
                     (unsigned long long)ran, tl->names[s], n);
  }
  return HM_OK;
}
