/* layer/run/k2_bind.c: what hm_k2_create checks before anything runs (both weight parts, the attention
 * back's kernel limits, then the FFN half's rules) and the upload of the back's weights. */
#include "bind_internal.h"
#include "ffn_internal.h"
#include "layouts.h"

/* ---------------------------------------------------------------- eligibility */

/* gfx950 and gfx942 (its own weight copies, spec/mono.md §2.6, §4.4) */
hm_status hm_k2_check_agent(hm_agent *a, const hm_ffn_config *cfg) {
  return hm_bind_check_agent(a, cfg ? cfg->min_cus : 0, "K2", NULL);
}

hm_status hm_k2_check_layer(const hm_layer_weights *w, const hm_ffn_config *cfg, uint32_t tp, hm_arch arch) {
  const hm_layer_config *c = &w->cfg;
  const hm_rank_dims *d = &w->dims;
  const uint32_t need = HM_WPART_ATTN | HM_WPART_FFN;
  if ((w->parts & need) != need)
    return hm_fail(HM_ERR_INVALID_ARG, "K2: layer %d's weights were built without the %s part (K2 needs ATTN and FFN)",
                   c->layer, !(w->parts & HM_WPART_ATTN) ? "attention (HM_WPART_ATTN)" : "FFN (HM_WPART_FFN)");
  /* the FFN half runs the FFN launch's stages: its rules and limits (TP, routing, hidden: a
   * multiple of 256, which wo_b's 16-row tasks need too) are K2's */
  hm_status s = hm_ffn_check_layer(w, cfg, tp, arch, "K2");
  if (s) return s;
  if (w->rope_positions == 0) return hm_fail(HM_ERR_INVALID_ARG, "K2: layer %d's weights have no RoPE rows", c->layer);
  /* the back's own limits (device/kernels/k2_args.h, device/attn/k2.h) */
  if (c->head_dim != K2_HEAD || c->nope_dim != K2_NOPE || c->rope_dim != K2_HEAD - K2_NOPE)
    return hm_fail(HM_ERR_REFUSED, "K2: head dim %u (%u nope + %u rope; the kernel takes %u = %u + %u)", c->head_dim,
                   c->nope_dim, c->rope_dim, K2_HEAD, K2_NOPE, K2_HEAD - K2_NOPE);
  /* the split's MFMA tiles take 16 heads, a wave at most two (key, head) tiles: 16 or 32 heads,
   * which are whole o groups of 8; gfx942's LDS holds a unit of 16 */
  const uint32_t max_heads = arch == HM_ARCH_GFX942 ? K2_MAX_HEADS_GFX942 : K2_MAX_HEADS;
  if (d->heads == 0 || d->heads % 16 || d->heads > max_heads)
    return hm_fail(HM_ERR_REFUSED, "K2: %u heads on rank %u of TP %u (the kernel takes 16%s: 16-head tiles, whole "
                   "groups of %u, at most %u%s)", d->heads, w->rank, tp, max_heads > 16 ? " or 32" : "", K2_GROUP_HEADS,
                   max_heads, arch == HM_ARCH_GFX942 ? " in gfx942's 64 KB of LDS" : "");
  /* a wo_a task is 32 rows of one group */
  if (c->o_lora == 0 || c->o_lora % 32)
    return hm_fail(HM_ERR_REFUSED, "K2: o_lora %u (the kernel takes multiples of 32: a wo_a task's rows)", c->o_lora);
  /* wo_b's K is the rank's o rows, in 128-wide steps, at most 4 a wave of 8 (device/gemv.h
   * GEMV_MAX_WSTEPS) */
  const uint32_t orows = d->heads / K2_GROUP_HEADS * c->o_lora;
  if (orows % 128 || orows > 4096)
    return hm_fail(HM_ERR_REFUSED, "K2: %u o rows on a rank (wo_b's K: the kernel takes multiples of 128 up to 4096)",
                   orows);
  /* hidden: the FFN half's limit above (multiples of 256) covers wo_b's 16-row tasks too */
  return HM_OK;
}

/* ---------------------------------------------------------------- weights */

/* gfx950: the layouts of hm_weights.h; gfx942: its dense copies (§4.4), FNUZ bytes (u8) tile-major with
 * K padded to x128 (wo_a's 4096 already is; wo_b's o rows are: hm_k2_check_layer). */
hm_status hm_k2_bind_weights(hm_ffn *f, const hm_layer_weights *w) {
  /* the shapes the kernel reads: o rows from its own formula (H / 8 groups of o_lora rows), so a
   * layer whose split disagrees is refused here, naming the tensor */
  const bool g942 = f->arch == HM_ARCH_GFX942;
  const hm_dtype f8 = g942 ? HM_DT_U8 : HM_DT_E4M3;
  const uint64_t D = f->cfg.hidden, H = f->dims.heads, OR = H / K2_GROUP_HEADS * f->cfg.o_lora;
  const uint64_t GKp = g942 ? hm_dense942_kpad(K2_GROUP_K) : K2_GROUP_K, ORp = g942 ? hm_dense942_kpad((uint32_t)OR) : OR;
  const struct hm_bind_want want[K2_T_COUNT] = {
      [K2_T_SINK] = {"attn_sink", HM_DT_F32, 1, {H}},
      [K2_T_COS_SIN] = {"cos_sin", HM_DT_F32, 2, {w->rope_positions, HM_ROPE_DIM}},
      [K2_T_WO_A] = {"wo_a", f8, 2, {OR, GKp}},
      [K2_T_WO_A_S] = {"wo_a_s", HM_DT_E8M0, 2, {OR / 32, GKp / 32}},
      [K2_T_WO_B] = {"wo_b", f8, 2, {D, ORp}},
      [K2_T_WO_B_S] = {"wo_b_s", HM_DT_E8M0, 2, {D / 32, ORp / 32}},
  };
  return hm_bind_tensors(f->agent, w, f->arch, "K2 weights", want, K2_T_COUNT, f->back_w);
}
