/* tools/check_moe.c: a layer's MoE against the reference's run on the kernel's own FFN normed rows
 * (check.h): the route up to ties and x within the MoE budget, free of the layer's earlier drift. */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "hm_ref.h"

/* The MoE budget of hsa-mono-check ffn: the matrix instructions' internal summation flips an
 * occasional bf16 or e4m3 rounding of one of an output's ~10^3 terms: relative L2 1e-2, cosine
 * 0.9999. A pick may differ only where the reference's logits of the two experts tie to 1e-5
 * relative (tests/layer/test_layer.c's rule): on the same rows nothing else may move a route. */
#define TOL_X_REL 1e-2
#define TOL_X_COS 0.9999
#define TOL_TIE 1e-5f

int check_same_route(const int32_t *a, const int32_t *b, uint32_t k) {
  for (uint32_t i = 0; i < k; i++) {
    int found = 0;
    for (uint32_t j = 0; j < k && !found; j++) found = a[i] == b[j];
    if (!found) return 0;
  }
  return 1;
}

int check_moe_own(const hm_layer_config *cfg, uint32_t tp, const hm_source *src, const hm_build_opts *opts, uint32_t S,
                  const float *normed, const int32_t *ids, const float *x) {
  const uint32_t D = cfg->hidden, K = cfg->topk, E = cfg->experts;
  hm_tensor_set moe;
  hm_tset_init(&moe);
  int ok = -1;
  const float *mx, *mlog;
  const int32_t *mids;
  if (hm_ref_moe_source(cfg, tp, src, opts, S, normed, &moe) != HM_OK || !(mx = hm_tset_data(&moe, "out.x", HM_DT_F32, (uint64_t)S * D)) ||
      !(mids = hm_tset_data(&moe, "router.ids", HM_DT_I32, (uint64_t)S * K)) ||
      !(mlog = hm_tset_data(&moe, "router.logits", HM_DT_F32, (uint64_t)S * E)))
    goto done;
  ok = check_compare("x.own", x, mx, (uint64_t)S * D, TOL_X_REL, TOL_X_COS);
  uint64_t picks = 0, untied = 0;
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t j = 0; j < K; j++) {
      int32_t a = ids[t * K + j], b = mids[t * K + j];
      if (a == b) continue;
      picks++;
      float la = a >= 0 && (uint32_t)a < E ? mlog[(uint64_t)t * E + (uint32_t)a] : NAN;
      float lb = mlog[(uint64_t)t * E + (uint32_t)b];
      untied += !(fabsf(la - lb) <= TOL_TIE * fmaxf(fabsf(la), fabsf(lb)));
    }
  char what[96];
  snprintf(what, sizeof what, "picks not at a tie (%llu differ) from the reference's on the kernel's rows",
           (unsigned long long)picks);
  ok &= check_count("route", untied, (uint64_t)S * K, what, 0, "logits within 1e-5 may swap");
done:
  hm_tset_free(&moe);
  return ok;
}
