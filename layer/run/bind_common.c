/* layer/run/bind_common.c: the weight binding the launch runners share: a tensor's dtype and shape
 * against what the kernel reads (a one-line reason naming it), and the upload through staging. */
#include <stdio.h>
#include <string.h>

#include "bind_internal.h"

static void describe(char *buf, size_t cap, hm_dtype dt, uint32_t ndim, const uint64_t *shape) {
  int n = snprintf(buf, cap, "%s [", hm_dtype_st_name(dt));
  for (uint32_t i = 0; i < ndim && n > 0 && (size_t)n < cap; i++)
    n += snprintf(buf + n, cap - (size_t)n, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
  if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

static hm_status check_tensor(const hm_layer_weights *w, const char *who, const struct hm_bind_want *x,
                              const hm_tensor **out) {
  const hm_tensor *t = hm_tset_find(&w->set, x->name);
  char want[96], have[96];
  describe(want, sizeof want, x->dt, x->ndim, x->shape);
  if (!t) return hm_fail(HM_ERR_INVALID_ARG, "%s: %s is missing (the launch needs %s)", who, x->name, want);
  bool ok = t->dtype == x->dt && t->ndim == x->ndim && t->data;
  for (uint32_t i = 0; ok && i < x->ndim; i++) ok = t->shape[i] == x->shape[i];
  if (!ok) {
    describe(have, sizeof have, t->dtype, t->ndim, t->shape);
    return hm_fail(HM_ERR_INVALID_ARG, "%s: %s is %s, the launch needs %s", who, x->name, have, want);
  }
  *out = t;
  return HM_OK;
}

/* Host bytes -> a new coarse-grained allocation of the agent, through a fine-grained staging
 * buffer (the copy engine reads system memory the agent can reach, not any malloc'd page). */
static hm_status upload(hm_agent *a, const void *src, size_t n, void *stage, size_t stage_bytes, void **out) {
  hm_runtime *rt = hm_agent_runtime(a);
  void *dst;
  hm_status s = hm_mem_alloc(a, HM_POOL_COARSE, n, 256, &dst);
  if (s) return s;
  for (size_t o = 0; o < n; o += stage_bytes) {
    size_t k = n - o < stage_bytes ? n - o : stage_bytes;
    memcpy(stage, (const char *)src + o, k);
    hm_signal none = {0};
    if ((s = hm_mem_copy(rt, (char *)dst + o, stage, k, none))) {
      hm_mem_free(rt, dst);
      return s;
    }
  }
  *out = dst;
  return HM_OK;
}

hm_status hm_bind_tensors(hm_agent *a, const hm_layer_weights *w, hm_arch arch, const char *who,
                          const struct hm_bind_want *want, unsigned n, void **out) {
  enum { MAX_TENSORS = 32 };
  const hm_tensor *t[MAX_TENSORS];
  if (n > MAX_TENSORS) return hm_fail(HM_ERR_INVALID_ARG, "%s: %u tensors (at most %u)", who, n, MAX_TENSORS);
  if (w->arch != arch)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: the weights are %s (spec/mono.md §4.4); this launch reads the %s",
                   who, w->arch == HM_ARCH_GFX942 ? "gfx942 copies" : "gfx950 layouts",
                   arch == HM_ARCH_GFX942 ? "gfx942 copies (hm_build_opts.arch = HM_ARCH_GFX942)"
                                          : "gfx950 layouts");
  hm_status s;
  size_t largest = 0;
  for (unsigned i = 0; i < n; i++) {
    if ((s = check_tensor(w, who, &want[i], &t[i]))) return s;
    if (t[i]->nbytes > largest) largest = t[i]->nbytes;
  }
  /* the staging buffer: the largest tensor, at most 64 MiB (bigger ones go in pieces) */
  const size_t stage_bytes = largest < (64u << 20) ? (largest ? largest : 1) : (64u << 20);
  hm_runtime *rt = hm_agent_runtime(a);
  void *stage;
  if ((s = hm_mem_alloc(a, HM_POOL_HOST, stage_bytes, 0, &stage))) return hm_fail_prefix(s, "%s: staging", who);
  for (unsigned i = 0; i < n && !s; i++) s = upload(a, t[i]->data, t[i]->nbytes, stage, stage_bytes, &out[i]);
  hm_mem_free(rt, stage);
  if (s) {
    for (unsigned i = 0; i < n; i++)
      if (out[i]) hm_mem_free(rt, out[i]), out[i] = NULL;
    return hm_fail_prefix(s, "%s: upload", who);
  }
  return HM_OK;
}

hm_arch hm_bind_arch(hm_agent *a) {
  return strcmp(hm_agent_info_of(a)->name, "gfx942") == 0 ? HM_ARCH_GFX942 : HM_ARCH_GFX950;
}

hm_status hm_bind_check_agent(hm_agent *a, uint32_t min_cus, const char *who, const char *gfx942_why) {
  const hm_agent_info *ai = hm_agent_info_of(a);
  bool gfx942 = strcmp(ai->name, "gfx942") == 0;
  if (gfx942 ? gfx942_why != NULL : strcmp(ai->name, "gfx950") != 0)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.1.2: its kernel is built for gfx950%s and agent %u is %s%s%s%s",
                   who, gfx942_why ? "" : " and gfx942", hm_agent_index(a), ai->name, gfx942_why ? " (" : "",
                   gfx942_why ? gfx942_why : "", gfx942_why ? ")" : "");
  if (!min_cus) min_cus = 256;
  if (ai->cus < min_cus)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.1.6: agent %u has %u CUs, the launch wants %u", who,
                   hm_agent_index(a), ai->cus, min_cus);
  return HM_OK;
}
