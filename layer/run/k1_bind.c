/* layer/run/k1_bind.c: what hm_k1_create checks before anything runs (the rules of spec/mono.md §5 that
 * apply to K1, the kernel's limits, every weight's dtype and shape) and the weights' upload. */
#include <string.h>

#include "bind_internal.h"
#include "k1_internal.h"
#include "layouts.h"

/* ---------------------------------------------------------------- eligibility */

/* gfx950 and gfx942 (its own weight copies, spec/mono.md §2.6, §4.4) */
hm_status hm_k1_check_agent(hm_agent *a, const hm_k1_config *cfg) {
  return hm_bind_check_agent(a, cfg ? cfg->min_cus : 0, "K1", NULL);
}

hm_status hm_k1_check_layer(const hm_layer_weights *w, hm_arch arch) {
  const hm_layer_config *c = &w->cfg;
  const uint32_t tp = w->dims.tp;
  if (arch == HM_ARCH_GFX942 && tp != 4)
    return hm_fail(HM_ERR_REFUSED, "K1: spec/mono.md §5.1.3: TP %u on gfx942 (gfx942 runs TP 4 only)", tp);
  if (tp != 2 && tp != 4) return hm_fail(HM_ERR_REFUSED, "K1: spec/mono.md §5.1.3: TP %u (K1 runs TP 2 or 4)", tp);
  if (!(w->parts & HM_WPART_ATTN))
    return hm_fail(HM_ERR_INVALID_ARG, "K1: layer %d's weights were built without the attention part (HM_WPART_ATTN)", c->layer);
  if (w->rope_positions == 0) return hm_fail(HM_ERR_INVALID_ARG, "K1: layer %d's weights have no RoPE rows", c->layer);
  if (w->rank >= tp) return hm_fail(HM_ERR_INVALID_ARG, "K1: the weights are rank %u's of TP %u", w->rank, tp);
  /* the kernel's own limits (device/kernels/k1_args.h, seam_args.h) */
  if (c->hidden == 0 || c->hidden % 256 || c->hidden > SEAM_MAX_D)
    return hm_fail(HM_ERR_REFUSED, "K1: hidden %u (the kernel takes multiples of 256 up to %u)", c->hidden,
                   SEAM_MAX_D);
  if (c->q_lora == 0 || c->q_lora % 128 || c->q_lora > K1_MAX_Q)
    return hm_fail(HM_ERR_REFUSED, "K1: q latent %u (the kernel takes multiples of 128 up to %u)", c->q_lora,
                   K1_MAX_Q);
  if (c->head_dim != K1_HEAD || c->nope_dim != K1_NOPE || c->rope_dim != K1_HEAD - K1_NOPE)
    return hm_fail(HM_ERR_REFUSED, "K1: head dim %u (%u nope + %u rope; the kernel takes %u = %u + %u)", c->head_dim,
                   c->nope_dim, c->rope_dim, K1_HEAD, K1_NOPE, K1_HEAD - K1_NOPE);
  if (c->compress_ratio > 2)
    return hm_fail(HM_ERR_REFUSED, "K1: compress ratio %u (the kernel takes 0, 1 or 2)", c->compress_ratio);
  if (w->dims.heads == 0) return hm_fail(HM_ERR_REFUSED, "K1: no heads on rank %u of TP %u", w->rank, tp);
  return HM_OK;
}

/* ---------------------------------------------------------------- weights */

/* gfx950: the layouts of hm_weights.h; gfx942: its dense copies (§4.4), FNUZ bytes (u8) tile-major with
 * K padded to x128 (D and Q already are: hm_k1_check_layer). */
hm_status hm_k1_bind_weights(hm_k1 *k, const hm_layer_weights *w) {
  const bool g942 = k->arch == HM_ARCH_GFX942;
  const hm_dtype f8 = g942 ? HM_DT_U8 : HM_DT_E4M3;
  const uint64_t D = k->cfg.hidden, Q = k->cfg.q_lora, H = k->dims.heads, N = Q + K1_HEAD;
  const uint64_t Dp = g942 ? hm_dense942_kpad((uint32_t)D) : D, Qp = g942 ? hm_dense942_kpad((uint32_t)Q) : Q;
  const struct hm_bind_want want[K1_T_COUNT] = {
      [K1_T_HC_FN] = {"hc_attn_fn", HM_DT_F32, 2, {HM_MIX, HM_HC * D}},
      [K1_T_HC_SCALE] = {"hc_attn_scale", HM_DT_F32, 1, {3}},
      [K1_T_HC_BASE] = {"hc_attn_base", HM_DT_F32, 1, {HM_MIX}},
      [K1_T_NORM] = {"attn_norm", HM_DT_BF16, 1, {D}},
      [K1_T_WQKV] = {"wqkv", f8, 2, {N, Dp}},
      [K1_T_WQKV_S] = {"wqkv_s", HM_DT_E8M0, 2, {N / 32, Dp / 32}},
      [K1_T_Q_NORM] = {"q_norm", HM_DT_BF16, 1, {Q}},
      [K1_T_KV_NORM] = {"kv_norm", HM_DT_BF16, 1, {K1_HEAD}},
      [K1_T_WQ_B] = {"wq_b", f8, 2, {H * K1_HEAD, Qp}},
      [K1_T_WQ_B_S] = {"wq_b_s", HM_DT_E8M0, 2, {H * K1_HEAD / 32, Qp / 32}},
      [K1_T_COS_SIN] = {"cos_sin", HM_DT_F32, 2, {w->rope_positions, HM_ROPE_DIM}},
  };
  return hm_bind_tensors(k->agent, w, k->arch, "K1 weights", want, K1_T_COUNT, k->w);
}
