/* layer/run/ffn_bind.c: what hm_ffn_create checks before anything runs (the rules of spec/mono.md §5
 * that apply to the FFN launch, the kernel's limits, every weight's dtype and shape) and the upload. */
#include <math.h>
#include <string.h>

#include "bind_internal.h"
#include "ffn_internal.h"
#include "layouts.h"

/* ---------------------------------------------------------------- eligibility */

/* gfx950 and gfx942 (its own weight copies, spec/mono.md §2.6, §4.4) */
hm_status hm_ffn_check_agent(hm_agent *a, const hm_ffn_config *cfg) {
  return hm_bind_check_agent(a, cfg ? cfg->min_cus : 0, "FFN launch", NULL);
}

hm_status hm_ffn_check_layer(const hm_layer_weights *w, const hm_ffn_config *cfg, uint32_t tp, hm_arch arch,
                             const char *who) {
  const hm_layer_config *c = &w->cfg;
  const hm_rank_dims *d = &w->dims;
  bool draft = hm_config_is_draft(c);
  if (arch == HM_ARCH_GFX942 && tp != 4)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.1.3: TP %u on gfx942 (gfx942 runs TP 4 only)", who, tp);
  if (tp != 2 && tp != 4)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.1.3: TP %u (the launch runs TP 2 or 4)", who, tp);
  if (!(w->parts & HM_WPART_FFN))
    return hm_fail(HM_ERR_INVALID_ARG, "%s: layer %d's weights were built without the FFN part", who, c->layer);
  if (w->dims.tp != tp)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: the weights are for TP %u, the group is TP %u", who, w->dims.tp, tp);
  /* §5.2.4: the routing the kernel implements */
  if (d->shared_inter == 0) return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.2.4: no shared expert", who);
  if (c->route_scale != 1.5f || c->swiglu_limit != 10.0f)
    return hm_fail(HM_ERR_REFUSED,
                   "%s: spec/mono.md §5.2.4: routed scaling %g and swiglu limit %g (the launch implements "
                   "1.5 and 10)",
                   who, (double)c->route_scale, (double)c->swiglu_limit);
  if (strcmp(c->model, "v41-flash") == 0 && !(cfg && cfg->reduced_experts)) {
    uint32_t e = draft ? 128 : 384, k = draft ? 3 : 6;
    if (c->experts != e || c->topk != k)
      return hm_fail(HM_ERR_REFUSED,
                     "%s: spec/mono.md §5.2.4: %s layer %d routes top-%u of %u experts, DeepSeek-V4.1 "
                     "routes top-%u of %u (a reduced test build sets hm_ffn_config.reduced_experts)",
                     who, draft ? "draft" : "target", c->layer, c->topk, c->experts, k, e);
  }
  /* the kernel's own limits (device/kernels/ffn_args.h, device/ffn/ffn.h) */
  if (c->experts % 16 || c->experts < 16 || c->experts > FFN_MAX_E)
    return hm_fail(HM_ERR_REFUSED, "%s: %u experts (the kernel takes multiples of 16 up to %u)", who, c->experts,
                   FFN_MAX_E);
  if (c->topk < 1 || c->topk > FFN_MAX_TOPK)
    return hm_fail(HM_ERR_REFUSED, "%s: top-%u (the kernel takes 1..%u)", who, c->topk, FFN_MAX_TOPK);
  if (c->hidden % 256 || c->hidden > FFN_MAX_D)
    return hm_fail(HM_ERR_REFUSED, "%s: hidden %u (the kernel takes multiples of 256 up to %u)", who, c->hidden,
                   FFN_MAX_D);
  if (d->shared_inter % 32 || d->inter_pad % 128 || d->inter % 32 || c->ug_groups < 1 || c->ug_groups > 2)
    return hm_fail(HM_ERR_REFUSED,
                   "%s: a rank's intermediates (routed %u padded %u, shared %u, %u groups a unit) are not "
                   "whole tiles",
                   who, d->inter, d->inter_pad, d->shared_inter, c->ug_groups);
  /* gfx942's FP4 copies hold K in 64-byte steps and at most one last 32-byte one (§4.4) */
  if (arch == HM_ARCH_GFX942 && d->inter % 64)
    return hm_fail(HM_ERR_REFUSED, "%s: a rank's routed intermediate %u on gfx942 (the kernel takes multiples of 64: "
                   "w2's FP4 steps)", who, d->inter);
  return HM_OK;
}

/* ---------------------------------------------------------------- weights */

/* gfx950: the layouts of hm_weights.h (§4.1-§4.3); gfx942: its copies (§4.4), the routed experts
 * Ir = inter wide with codes row-major, the dense linears' K padded to x128 (Kp). */
hm_status hm_ffn_bind_weights(hm_ffn *f, const hm_layer_weights *w) {
  const bool g942 = f->arch == HM_ARCH_GFX942;
  const uint64_t D = f->cfg.hidden, E = f->cfg.experts, I = f->mid_cols, Sh = f->dims.shared_inter;
  const uint64_t Shp = g942 ? hm_dense942_kpad((uint32_t)Sh) : Sh, w2c = g942 ? I / 32 : f->dims.w2_scale_cols;
  const struct hm_bind_want want[FFN_T_COUNT] = {
      [FFN_T_HC_FN] = {"hc_ffn_fn", HM_DT_F32, 2, {HM_MIX, HM_HC * D}},
      [FFN_T_HC_SCALE] = {"hc_ffn_scale", HM_DT_F32, 1, {3}},
      [FFN_T_HC_BASE] = {"hc_ffn_base", HM_DT_F32, 1, {HM_MIX}},
      [FFN_T_NORM] = {"ffn_norm", HM_DT_BF16, 1, {D}},
      [FFN_T_GATE_W] = {"gate_w", HM_DT_BF16, 2, {E, D}},
      [FFN_T_BIAS] = {"bias", HM_DT_F32, 1, {E}},
      [FFN_T_W13] = {"w13", HM_DT_FP4X2, 3, {E, 2 * I, D / 2}},
      [FFN_T_W13_S] = {"w13_s", HM_DT_E8M0, 2, {E, 2 * I * (D / 32)}},
      [FFN_T_W2] = {"w2", HM_DT_FP4X2, 3, {E, D, I / 2}},
      [FFN_T_W2_S] = {"w2_s", HM_DT_E8M0, 2, {E, D * w2c}},
      [FFN_T_SGU] = {"sgu", g942 ? HM_DT_U8 : HM_DT_E4M3, 2, {2 * Sh, D}},
      [FFN_T_SGU_S] = {"sgu_s", HM_DT_E8M0, 2, {2 * Sh / 32, D / 32}},
      [FFN_T_SW2] = {"sw2", g942 ? HM_DT_U8 : HM_DT_E4M3, 2, {D, Shp}},
      [FFN_T_SW2_S] = {"sw2_s", HM_DT_E8M0, 2, {D / 32, Shp / 32}},
  };
  return hm_bind_tensors(f->agent, w, f->arch, "FFN weights", want, FFN_T_COUNT, f->w);
}
