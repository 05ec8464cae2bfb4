/* layer/ref/ref_moe.c: the MoE of the FFN launch (spec/mono.md §2.4): activation quantisation, router,
 * route table, shared expert, routed experts (MXFP4, aiter layouts), combine, rank-order reduce. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "ref_internal.h"

/* ---------------------------------------------------------------- router */

#define ROUTER_PARTS 4
#define ROUTER_STEP 32 /* bf16 MFMA 16x16x32 */

hm_status hm_ref_router_logits(uint32_t S, uint32_t D, uint32_t E, const uint16_t *gate_w, const float *x,
                               float *logits) {
  return hm_ref_router_logits_arch(HM_ARCH_GFX950, S, D, E, gate_w, x, logits);
}

hm_status hm_ref_router_logits_arch(hm_arch arch, uint32_t S, uint32_t D, uint32_t E, const uint16_t *gate_w,
                                    const float *x, float *logits) {
  /* gfx942 has no 16x16x32 bf16 MFMA: a step is two 16x16x16, each added to the chain */
  const uint32_t sub = arch == HM_ARCH_GFX942 ? ROUTER_STEP / 2 : ROUTER_STEP;
  const uint32_t qk = D / ROUTER_PARTS, qsteps = qk / ROUTER_STEP;
  if (D % (ROUTER_PARTS * ROUTER_STEP)) return hm_fail(HM_ERR_INVALID_ARG, "router: hidden %u", D);
  float *wr = hm_ref_alloc((size_t)D * sizeof(float));
  if (!wr) return HM_ERR_NO_MEMORY;
  float st[HM_TBLOCK];
  for (uint32_t e = 0; e < E; e++) {
    for (uint32_t k = 0; k < D; k++) wr[k] = fmt_bf16_to_f32(gate_w[(uint64_t)e * D + k]);
    for (uint32_t t0 = 0; t0 < S; t0 += HM_TBLOCK) {
      uint32_t n = S - t0 < HM_TBLOCK ? S - t0 : HM_TBLOCK;
      float part[ROUTER_PARTS][HM_TBLOCK], wave[8][HM_TBLOCK];
      for (uint32_t p = 0; p < ROUTER_PARTS; p++) {
        for (int v = 0; v < 8; v++)
          for (uint32_t t = 0; t < n; t++) wave[v][t] = 0.0f;
        /* in quarter p, wave w takes 32-wide steps w, w+8, ... */
        for (uint32_t s = 0; s < qsteps; s++)
          for (uint32_t k0 = p * qk + s * ROUTER_STEP; k0 < p * qk + (s + 1) * ROUTER_STEP; k0 += sub) {
            hm_step_sums(wr, x + (uint64_t)t0 * D, D, n, k0, k0 + sub, st);
            for (uint32_t t = 0; t < n; t++) wave[s % 8][t] = wave[s % 8][t] + st[t];
          }
        for (uint32_t t = 0; t < n; t++) {
          float a = wave[0][t];
          for (int v = 1; v < 8; v++) a = a + wave[v][t];
          part[p][t] = a;
        }
      }
      /* route: logit = ((p0 + p1) + p2) + p3, kept f32 (vLLM; ATOM rounds to bf16) */
      for (uint32_t t = 0; t < n; t++)
        logits[(uint64_t)(t0 + t) * E + e] = ((part[0][t] + part[1][t]) + part[2][t]) + part[3][t];
    }
  }
  free(wr);
  return HM_OK;
}

/* the wave network's order (§2.4): larger val first; equal vals by lane (expert % 64), then
 * by the expert's slot in its lane (expert / 64) */
static bool route_before(float va, uint32_t a, float vb, uint32_t b) {
  if (va != vb) return va > vb;
  if (a % 64 != b % 64) return a % 64 < b % 64;
  return a / 64 < b / 64;
}

hm_status hm_ref_route(uint32_t S, uint32_t E, uint32_t k, float route_scale, const float *logits,
                       const float *bias, int32_t *ids, float *weights, float *scores) {
  if (k < 1 || k > 16 || k > E) return hm_fail(HM_ERR_INVALID_ARG, "route: top-%u of %u", k, E);
  float *val = hm_ref_alloc((size_t)E * sizeof(float)), *sc = hm_ref_alloc((size_t)E * sizeof(float));
  uint8_t *taken = hm_ref_alloc(E);
  if (!val || !sc || !taken) {
    free(val), free(sc), free(taken);
    return HM_ERR_NO_MEMORY;
  }
  for (uint32_t t = 0; t < S; t++) {
    for (uint32_t e = 0; e < E; e++) {
      sc[e] = hm_ref_sqrtsoftplus(logits[(uint64_t)t * E + e]);
      /* max(score + bias, -inf): a NaN becomes -inf, as v_max_f32 returns the other operand */
      val[e] = fmaxf(sc[e] + bias[e], -INFINITY);
      taken[e] = 0;
      if (scores) scores[(uint64_t)t * E + e] = sc[e];
    }
    float w[16];
    for (uint32_t j = 0; j < k; j++) {
      uint32_t best = E;
      for (uint32_t e = 0; e < E; e++)
        if (!taken[e] && (best == E || route_before(val[e], e, val[best], best))) best = e;
      taken[best] = 1;
      ids[t * k + j] = (int32_t)best;
      w[j] = isnan(sc[best]) ? 0.0f : sc[best]; /* the unbiased score */
    }
    float total = w[0];
    for (uint32_t j = 1; j < k; j++) total = total + w[j];
    float scale = route_scale / fmaxf(total, 1e-20f);
    for (uint32_t j = 0; j < k; j++) weights[t * k + j] = w[j] * scale;
  }
  free(val), free(sc), free(taken);
  return HM_OK;
}

/* ---------------------------------------------------------------- activations */

float hm_ref_shared_act(float g, float u, float limit) {
  float gc = fminf(g, limit);
  /* §2.4 shared: IEEE division, ocml expf (libm expf here) */
  float act = fmt_round_bf16(gc / (1.0f + expf(-gc)));
  float uc = fminf(fmaxf(u, -limit), limit);
  return fmt_round_bf16(act * uc);
}

float hm_ref_routed_act(float g, float u, float limit) {
  float gc = fminf(g, limit), uc = fminf(fmaxf(u, -limit), limit);
  float sig = hm_ref_rcp(1.0f + exp2f(gc * -HM_LOG2E));
  return fmt_round_bf16((gc * sig) * uc);
}

/* ---------------------------------------------------------------- shared expert */

#define MAX_STEPS HM_REF_MAX_STEPS

/* y[r*S + t] = bf16 of the §2.0 GEMV of rows r0..r0+n-1 of d against X [S][K] */
static hm_status mx8_gemv_bf16(const ref_dense *d, uint32_t r0, uint32_t n, const float *X, uint32_t S, float *y) {
  uint8_t chain[MAX_STEPS];
  const uint32_t K = d->K, steps = (K + 127) / 128;
  if (steps > MAX_STEPS) return hm_fail(HM_ERR_INVALID_ARG, "GEMV K %u", K);
  hm_wave_chains(chain, steps);
  hm_status st = hm_mx8_gemv(d, 0, K, r0, n, chain, 8, X, K, S, y);
  if (st == HM_OK)
    for (uint64_t i = 0; i < (uint64_t)n * S; i++) y[i] = fmt_round_bf16(y[i]);
  return st;
}

hm_status hm_ref_shared_expert(const hm_layer_weights *w, uint32_t S, const uint8_t *x8, const uint8_t *x8s,
                               float *gate, float *up, float *smid, uint8_t *smq, uint8_t *smc, float *shared) {
  const uint32_t D = w->cfg.hidden, Sh = w->dims.shared_inter;
  ref_dense sgu, sw2;
  if (ref_dense_get(w, "sgu", 2 * Sh, D, &sgu) != HM_OK || ref_dense_get(w, "sw2", D, Sh, &sw2) != HM_OK)
    return hm_fail_prefix(HM_ERR_INVALID_ARG, "shared expert");
  float *X = hm_ref_alloc((size_t)S * D * sizeof(float)), *gu = hm_ref_alloc((size_t)2 * Sh * S * sizeof(float));
  float *X2 = hm_ref_alloc((size_t)S * Sh * sizeof(float)), *y = hm_ref_alloc((size_t)D * S * sizeof(float));
  hm_status st = HM_ERR_NO_MEMORY;
  if (!X || !gu || !X2 || !y) goto out;
  hm_ref_act_dequant(w->arch, false, x8, x8s, S, D, 32, X);
  /* gate rows 0..Sh-1 and up rows Sh..2Sh-1 of sgu, §2.0 K order; g = bf16, u = bf16 */
  if ((st = mx8_gemv_bf16(&sgu, 0, 2 * Sh, X, S, gu)) != HM_OK) goto out;
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t i = 0; i < Sh; i++) {
      float g = gu[(uint64_t)i * S + t], u = gu[(uint64_t)(Sh + i) * S + t];
      if (gate) gate[(uint64_t)t * Sh + i] = g;
      if (up) up[(uint64_t)t * Sh + i] = u;
      smid[(uint64_t)t * Sh + i] = hm_ref_shared_act(g, u, w->cfg.swiglu_limit);
    }
  /* SMQ: rule V over 32 columns (the code, not the docstring's quantize_fp8, §2.4) */
  hm_ref_act_quant(w->arch, false, smid, S, Sh, 32, FMT_RULE_V, smq, smc);
  hm_ref_act_dequant(w->arch, false, smq, smc, S, Sh, 32, X2);
  /* shared down: bf16(row_sum) over K = Sh in the §2.0 K order (a ragged last step is zero) */
  if ((st = mx8_gemv_bf16(&sw2, 0, D, X2, S, y)) != HM_OK) goto out;
  for (uint32_t r = 0; r < D; r++)
    for (uint32_t t = 0; t < S; t++) shared[(uint64_t)t * D + r] = y[(uint64_t)r * S + t];
  st = HM_OK;
out:
  free(X), free(gu), free(X2), free(y);
  return st;
}

/* ---------------------------------------------------------------- routed experts */

/* The K slice (chain) of a 128-wide step of the routed gate/up GEMV (§2.4 ug). ug_groups 2:
 * two slices, whole 16-step rounds give steps 0-7 to slice 0 and 8-15 to slice 1, a last
 * partial round splits in halves (40 steps: 0-7,16-23,32-35 | 8-15,24-31,36-39). ug_groups 1:
 * four slices, steps 8i+2k, 8i+2k+1 to slice k. */
uint32_t hm_ref_ug_slice(uint32_t s, uint32_t steps, uint32_t ug_groups) {
  if (ug_groups == 1) return (s % 8) / 2;
  uint32_t full = steps / 16 * 16;
  if (s < full) return (s % 16) / 8;
  uint32_t tail = steps - full;
  return (s - full) < (tail + 1) / 2 ? 0 : 1;
}

hm_status hm_ref_routed_experts(const hm_layer_weights *w, uint32_t S, const uint8_t *x8r, const uint8_t *x8rs,
                                const int32_t *ids, float *mid, uint8_t *midq, uint8_t *midc, float *contrib) {
  const hm_layer_config *c = &w->cfg;
  const uint32_t D = c->hidden, E = c->experts, k = c->topk, I = w->dims.inter_pad, Ir = w->dims.inter;
  /* gfx942 keeps only the real Ir columns (§4.4): its down GEMV's K is Ir (a last half step) */
  const bool g942 = w->arch == HM_ARCH_GFX942;
  const uint32_t P = S * k, steps = D / 128, Iw = g942 ? Ir : I, isteps = (Iw + 127) / 128;
  const uint64_t w2_scales = g942 ? Ir / 32 : w->dims.w2_scale_cols;
  if (!hm_wdata(w, "w13", HM_DT_FP4X2, (uint64_t)E * 2 * Iw * D / 2) ||
      !hm_wdata(w, "w13_s", HM_DT_E8M0, (uint64_t)E * 2 * Iw * (D / 32)) ||
      !hm_wdata(w, "w2", HM_DT_FP4X2, (uint64_t)E * D * Iw / 2) ||
      !hm_wdata(w, "w2_s", HM_DT_E8M0, (uint64_t)E * D * w2_scales))
    return hm_fail_prefix(HM_ERR_INVALID_ARG, "routed experts");
  if (S < 1 || S > HM_TBLOCK) return hm_fail(HM_ERR_INVALID_ARG, "routed experts: %u rows (1..%d)", S, HM_TBLOCK);
  if (steps > MAX_STEPS) return hm_fail(HM_ERR_INVALID_ARG, "routed experts: hidden %u", D);
  for (uint32_t p = 0; p < P; p++)
    if (ids[p] < 0 || (uint32_t)ids[p] >= E)
      return hm_fail(HM_ERR_INVALID_ARG, "routed experts: pick %u names expert %d of %u", p, ids[p], E);
  uint8_t ug_chain[MAX_STEPS], ab_chain[MAX_STEPS];
  const uint32_t nsl = c->ug_groups == 1 ? 4 : 2;
  for (uint32_t s = 0; s < steps; s++) ug_chain[s] = (uint8_t)hm_ref_ug_slice(s, steps, c->ug_groups);
  for (uint32_t s = 0; s < isteps; s++) ab_chain[s] = (uint8_t)(s % 2); /* down: even A, odd B */
  const size_t KM = D > I ? D : I;
  float *X = hm_ref_alloc((size_t)S * D * sizeof(float)), *Xe = hm_ref_alloc((size_t)S * KM * sizeof(float));
  float *W = hm_ref_alloc((size_t)HM_RB * KM * sizeof(float)), *WT = hm_ref_alloc_aligned((size_t)HM_RB * KM * sizeof(float));
  float *gv = hm_ref_alloc((size_t)HM_RB * S * sizeof(float)), *uv = hm_ref_alloc((size_t)HM_RB * S * sizeof(float));
  float *M = hm_ref_alloc((size_t)P * I * sizeof(float));
  uint32_t *picks = hm_ref_alloc((size_t)S * sizeof(uint32_t));
  hm_status status = HM_ERR_NO_MEMORY;
  if (!X || !Xe || !W || !WT || !gv || !uv || !M || !picks) goto out;
  hm_ref_act_dequant(w->arch, g942, x8r, x8rs, S, D, 32, X);
  memset(mid, 0, (size_t)P * I * sizeof(float)); /* the padding: parts never run (§2.4) */
  for (uint32_t e = 0; e < E; e++) {
    /* the picks of expert e (at most one a token), in token order; their activations gathered */
    uint32_t np = 0;
    for (uint32_t p = 0; p < P; p++)
      if ((uint32_t)ids[p] == e) {
        picks[np] = p;
        memcpy(Xe + (size_t)np * D, X + (size_t)(p / k) * D, D * sizeof(float));
        np++;
      }
    if (!np) continue;
    /* gate / up: the real intermediate columns only (parts in the padding are not run);
     * g = s0 + s1 (quarters in order), f32, no bf16 */
    for (uint32_t i0 = 0; i0 < Ir; i0 += HM_RB) {
      uint32_t nr = Ir - i0 < HM_RB ? Ir - i0 : HM_RB;
      hm_w13_decode(w, e, false, i0, nr, W);
      hm_transpose16(W, D, nr, D, WT);
      hm_gemv16_arch(w->arch, WT, D, ug_chain, nsl, Xe, D, np, gv);
      hm_w13_decode(w, e, true, i0, nr, W);
      hm_transpose16(W, D, nr, D, WT);
      hm_gemv16_arch(w->arch, WT, D, ug_chain, nsl, Xe, D, np, uv);
      for (uint32_t r = 0; r < nr; r++)
        for (uint32_t q = 0; q < np; q++)
          mid[(size_t)picks[q] * I + i0 + r] = hm_ref_routed_act(gv[r * np + q], uv[r * np + q], c->swiglu_limit);
    }
  }
  /* MID: rule A over each 32-column group; groups wholly in the padding are never written
   * (bytes zero, code 0 here; the kernels mask them) */
  hm_ref_act_quant(w->arch, g942, mid, P, I, 32, FMT_RULE_A, midq, midc);
  for (uint32_t p = 0; p < P; p++)
    for (uint32_t g = (Ir + 31) / 32; g < I / 32; g++) midc[(size_t)p * (I / 32) + g] = 0;
  hm_ref_act_dequant(w->arch, g942, midq, midc, P, I, 32, M);
  /* down: per pick, K = I (gfx942: Ir) in 128 steps, even steps on accumulator A, odd on B,
   * contrib = A + B */
  for (uint32_t e = 0; e < E; e++) {
    uint32_t np = 0;
    for (uint32_t p = 0; p < P; p++)
      if ((uint32_t)ids[p] == e) {
        picks[np] = p;
        memcpy(Xe + (size_t)np * I, M + (size_t)p * I, I * sizeof(float));
        np++;
      }
    if (!np) continue;
    for (uint32_t r0 = 0; r0 < D; r0 += HM_RB) {
      hm_w2_decode(w, e, r0, HM_RB, W);
      hm_transpose16(W, I, HM_RB, Iw, WT);
      hm_gemv16_arch(w->arch, WT, Iw, ab_chain, 2, Xe, I, np, gv);
      for (uint32_t r = 0; r < HM_RB; r++)
        for (uint32_t q = 0; q < np; q++) contrib[(size_t)picks[q] * D + r0 + r] = gv[r * np + q];
    }
  }
  status = HM_OK;
out:
  free(X), free(Xe), free(W), free(WT), free(gv), free(uv), free(M), free(picks);
  return status;
}

void hm_ref_moe_combine(uint32_t S, uint32_t D, uint32_t k, const float *contrib, const float *weights,
                        const float *shared, float *routed, float *partial) {
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t r = 0; r < D; r++) {
      /* top-k pick order, bf16 at every add (§2.4 combine) */
      float a = 0.0f;
      for (uint32_t j = 0; j < k; j++)
        a = fmt_round_bf16(a + fmt_round_bf16(contrib[((size_t)t * k + j) * D + r] * weights[t * k + j]));
      if (routed) routed[(size_t)t * D + r] = a;
      partial[(size_t)t * D + r] = fmt_round_bf16(a + shared[(size_t)t * D + r]);
    }
}

/* ---------------------------------------------------------------- whole MoE / FFN launch */

hm_status ref_ranks_get(ref_ranks *k, uint32_t r, const hm_layer_weights **out) {
  if (k->held) {
    *out = &k->held[r];
    return HM_OK;
  }
  if (k->cur_rank != (int32_t)r) {
    ref_ranks_release(k); /* the rank before goes first: one rank's experts at a time */
    hm_status st = hm_weights_build(k->cfg, k->tp, r, k->src, &k->opts, &k->cur);
    if (st != HM_OK) return st;
    k->cur_rank = (int32_t)r;
  }
  *out = &k->cur;
  return HM_OK;
}

void ref_ranks_release(ref_ranks *k) {
  if (k->cur_rank >= 0) hm_weights_free(&k->cur);
  k->cur_rank = -1;
}

static hm_status check_rank(const hm_layer_weights *w, const hm_layer_weights *w0, uint32_t r, uint32_t tp) {
  if (w->rank != r || w->dims.tp != tp)
    return hm_fail(HM_ERR_INVALID_ARG, "reference: weights %u are rank %u of tp %u, not %u of %u", r, w->rank,
                   w->dims.tp, r, tp);
  if (!(w->parts & HM_WPART_FFN)) return hm_fail(HM_ERR_INVALID_ARG, "reference: rank %u has no FFN weights", r);
  if (w->cfg.layer != w0->cfg.layer || w->cfg.experts != w0->cfg.experts)
    return hm_fail(HM_ERR_INVALID_ARG, "reference: ranks hold different layers");
  if (w->arch != w0->arch)
    return hm_fail(HM_ERR_INVALID_ARG, "reference: rank %u's weights are for another GPU than rank 0's", r);
  return HM_OK;
}

/* the group's shape; the caller's ranks checked whole before anything is computed (built ones are
 * checked as they come) */
static hm_status check_group(const ref_ranks *k, uint32_t S) {
  if (!k->held && !k->src) return hm_fail(HM_ERR_INVALID_ARG, "reference: NULL weights");
  const uint32_t tp = k->tp;
  if (tp < 1 || tp > HM_LAYER_MAX_TP) return hm_fail(HM_ERR_INVALID_ARG, "reference: %u ranks (1..%d)", tp, HM_LAYER_MAX_TP);
  if (S < 1 || S > HM_TBLOCK / 4) return hm_fail(HM_ERR_INVALID_ARG, "reference: %u rows (1..%d)", S, HM_TBLOCK / 4);
  for (uint32_t r = 0; k->held && r < tp; r++) {
    hm_status st = check_rank(&k->held[r], &k->held[0], r, tp);
    if (st != HM_OK) return st;
  }
  return HM_OK;
}

#define TRY(x)                  \
  do {                          \
    if (!(x)) goto fail;        \
  } while (0)

static hm_status moe(ref_ranks *k, uint32_t S, const float *normed, hm_tensor_set *trace) {
  hm_status st = check_group(k, S);
  if (st != HM_OK) return st;
  if (!normed || !trace) return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_moe: null argument");
  const uint32_t tp = k->tp;
  const hm_layer_weights *w0;
  if ((st = ref_ranks_get(k, 0, &w0)) != HM_OK || (st = check_rank(w0, w0, 0, tp)) != HM_OK) return st;
  const hm_layer_config c = w0->cfg; /* a copy: w0 goes when rank 1 is built */
  const hm_arch arch = w0->arch;
  const hm_dtype adt = ref_act_dtype(arch);
  const uint32_t D = c.hidden, E = c.experts, kk = c.topk;
  char n[64];
  /* xq (§2.4): rule A for the routed experts, rule V for the shared expert */
  uint8_t *x8r, *x8rs, *x8, *x8s;
  float *logits, *scores, *rw, *parts[HM_LAYER_MAX_TP], *out;
  int32_t *ids;
  TRY(x8r = hm_trace_u8(trace, "moe.x8r", adt, S, D, 0));
  TRY(x8rs = hm_trace_u8(trace, "moe.x8r_s", HM_DT_E8M0, S, D / 32, 0));
  TRY(x8 = hm_trace_u8(trace, "moe.x8", adt, S, D, 0));
  TRY(x8s = hm_trace_u8(trace, "moe.x8_s", HM_DT_E8M0, S, D / 32, 0));
  /* gfx942: FNUZ, X8R even-then-odd to match the expanded FP4 weights (§2.6) */
  hm_ref_act_quant(arch, arch == HM_ARCH_GFX942, normed, S, D, 32, FMT_RULE_A, x8r, x8rs);
  hm_ref_act_quant(arch, false, normed, S, D, 32, FMT_RULE_V, x8, x8s);
  const uint16_t *gate_w = hm_wdata(w0, "gate_w", HM_DT_BF16, (uint64_t)E * D);
  const float *bias = hm_wdata(w0, "bias", HM_DT_F32, E);
  if (!gate_w || !bias) return hm_fail_prefix(HM_ERR_INVALID_ARG, "router");
  TRY(logits = hm_trace_f32(trace, "router.logits", S, E, 0));
  TRY(scores = hm_trace_f32(trace, "router.scores", S, E, 0));
  TRY(ids = hm_trace_i32(trace, "router.ids", S, kk));
  TRY(rw = hm_trace_f32(trace, "router.weights", S, kk, 0));
  if ((st = hm_ref_router_logits_arch(arch, S, D, E, gate_w, normed, logits)) != HM_OK) return st;
  if ((st = hm_ref_route(S, E, kk, c.route_scale, logits, bias, ids, rw, scores)) != HM_OK) return st;
  for (uint32_t r = 0; r < tp; r++) {
    const hm_layer_weights *wr;
    if ((st = ref_ranks_get(k, r, &wr)) != HM_OK) return st;
    if (wr->cfg.layer != c.layer || wr->cfg.experts != c.experts || wr->arch != arch ||
        (st = check_rank(wr, wr, r, tp)) != HM_OK)
      return st != HM_OK ? st : hm_fail(HM_ERR_INVALID_ARG, "reference: ranks hold different layers or GPUs");
    const uint32_t Sh = wr->dims.shared_inter, I = wr->dims.inter_pad;
    float *g, *u, *smid, *shared, *mid, *contrib, *routed;
    uint8_t *smq, *smc, *midq, *midc;
#define NAME(s) (snprintf(n, sizeof n, "rank%u.%s", r, s), n)
    TRY(g = hm_trace_f32(trace, NAME("shared.gate"), S, Sh, 0));
    TRY(u = hm_trace_f32(trace, NAME("shared.up"), S, Sh, 0));
    TRY(smid = hm_trace_f32(trace, NAME("shared.smid"), S, Sh, 0));
    TRY(smq = hm_trace_u8(trace, NAME("shared.smq"), adt, S, Sh, 0));
    TRY(smc = hm_trace_u8(trace, NAME("shared.smc"), HM_DT_E8M0, S, Sh / 32, 0));
    TRY(shared = hm_trace_f32(trace, NAME("shared.out"), S, D, 0));
    if ((st = hm_ref_shared_expert(wr, S, x8, x8s, g, u, smid, smq, smc, shared)) != HM_OK) return st;
    TRY(mid = hm_trace_f32(trace, NAME("routed.mid"), S, kk, I));
    TRY(midq = hm_trace_u8(trace, NAME("routed.midq"), adt, S, kk, I));
    TRY(midc = hm_trace_u8(trace, NAME("routed.midc"), HM_DT_E8M0, S, kk, I / 32));
    TRY(contrib = hm_trace_f32(trace, NAME("routed.contrib"), S, kk, D));
    if ((st = hm_ref_routed_experts(wr, S, x8r, x8rs, ids, mid, midq, midc, contrib)) != HM_OK) return st;
    if (arch == HM_ARCH_GFX942) {
      /* gfx942's down stage stores each pick's bf16(contrib * w), which the combine adds (§2.6) */
      float *cw;
      TRY(cw = hm_trace_f32(trace, NAME("routed.cw"), S, kk, D));
      for (uint64_t i = 0; i < (uint64_t)S * kk * D; i++) cw[i] = fmt_round_bf16(contrib[i] * rw[i / D]);
    }
    TRY(routed = hm_trace_f32(trace, NAME("routed.sum"), S, D, 0));
    TRY(parts[r] = hm_trace_f32(trace, NAME("partial"), S, D, 0));
    hm_ref_moe_combine(S, D, kk, contrib, rw, shared, routed, parts[r]);
#undef NAME
  }
  TRY(out = hm_trace_f32(trace, "out.x", S, D, 0));
  hm_ref_reduce_rank_order(tp, (const float *const *)parts, (uint64_t)S * D, out);
  return HM_OK;
fail:
  return hm_fail_prefix(HM_ERR_INVALID_ARG, "MoE trace");
}

static ref_ranks held_ranks(const hm_layer_weights *w, uint32_t tp) {
  ref_ranks k = {.held = w, .tp = tp, .cur_rank = -1};
  return k;
}

hm_status hm_ref_moe(const hm_layer_weights *w, uint32_t tp, uint32_t S, const float *normed, hm_tensor_set *trace) {
  uint32_t n0 = trace ? trace->count : 0;
  ref_ranks k = held_ranks(w, tp);
  hm_status st = moe(&k, S, normed, trace);
  if (st != HM_OK && trace) hm_tset_truncate(trace, n0);
  return st;
}

hm_status hm_ref_moe_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src, const hm_build_opts *opts,
                            uint32_t S, const float *normed, hm_tensor_set *trace) {
  if (!cfg || !src) return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_moe_source: null argument");
  uint32_t n0 = trace ? trace->count : 0;
  ref_ranks k = {.cfg = cfg, .src = src, .tp = tp, .cur_rank = -1};
  if (opts) k.opts = *opts;
  k.opts.parts = HM_WPART_FFN;
  hm_status st = moe(&k, S, normed, trace);
  ref_ranks_release(&k);
  if (st != HM_OK && trace) hm_tset_truncate(trace, n0);
  return st;
}

static hm_status ffn_launch(ref_ranks *k, uint32_t S, const float *const *parts, const float *res_mid,
                            const float *post_a, const float *comb_a, const float *pre_a, hm_tensor_set *trace) {
  hm_status st = check_group(k, S);
  if (st != HM_OK) return st;
  const uint32_t tp = k->tp;
  if (!parts || !res_mid || !post_a || !comb_a || !pre_a || !trace)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_ffn_launch: null argument");
  for (uint32_t r = 0; r < tp; r++)
    if (!parts[r]) return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_ffn_launch: no part from rank %u", r);
  const hm_layer_weights *w0;
  if ((st = ref_ranks_get(k, 0, &w0)) != HM_OK || (st = check_rank(w0, w0, 0, tp)) != HM_OK) return st;
  const hm_layer_config *c = &w0->cfg;
  const uint32_t D = c->hidden;
  const float *fn = hm_wdata(w0, "hc_ffn_fn", HM_DT_F32, (uint64_t)HM_MIX * HM_HC * D);
  const float *scale = hm_wdata(w0, "hc_ffn_scale", HM_DT_F32, 3);
  const float *base = hm_wdata(w0, "hc_ffn_base", HM_DT_F32, HM_MIX);
  const uint16_t *norm = hm_wdata(w0, "ffn_norm", HM_DT_BF16, D);
  if (!fn || !scale || !base || !norm) return hm_fail_prefix(HM_ERR_INVALID_ARG, "FFN seam");
  float *a;
  hm_ref_seam_out so;
  TRY(a = hm_trace_f32(trace, "ffn.x", S, D, 0));
  /* §2.3 reduce: the ranks' wo_b parts in rank order, f32, then bf16 */
  hm_ref_reduce_rank_order(tp, parts, (uint64_t)S * D, a);
  TRY(so.res = hm_trace_f32(trace, "ffn.seam.res", S, HM_HC, D));
  TRY(so.post = hm_trace_f32(trace, "ffn.seam.post", S, HM_HC, 0));
  TRY(so.comb = hm_trace_f32(trace, "ffn.seam.comb", S, HM_HC, HM_HC));
  TRY(so.pre = hm_trace_f32(trace, "ffn.seam.pre", S, HM_HC, 0));
  TRY(so.lin = hm_trace_f32(trace, "ffn.seam.lin", S, D, 0));
  TRY(so.mix = hm_trace_f32(trace, "ffn.seam.mix", S, HM_MIX, 0));
  TRY(so.sq = hm_trace_f32(trace, "ffn.seam.sq", S, 0, 0));
  TRY(so.normed = hm_trace_f32(trace, "ffn.seam.normed", S, D, 0));
  /* §2.3: slice with res_in = res_mid, post/comb = the attention seam's, collapse with its pre */
  if ((st = hm_ref_seam(c, S, a, res_mid, post_a, comb_a, pre_a, fn, scale, base, norm, &so)) != HM_OK) return st;
  if ((st = moe(k, S, so.normed, trace)) != HM_OK) return st;
  /* the layer's outputs besides out.x: this seam's stream and mixes (the next layer's inputs) */
  float *o;
  TRY(o = hm_trace_f32(trace, "out.res", S, HM_HC, D));
  memcpy(o, so.res, (size_t)S * HM_HC * D * sizeof(float));
  TRY(o = hm_trace_f32(trace, "out.post", S, HM_HC, 0));
  memcpy(o, so.post, (size_t)S * HM_HC * sizeof(float));
  TRY(o = hm_trace_f32(trace, "out.comb", S, HM_HC, HM_HC));
  memcpy(o, so.comb, (size_t)S * 16 * sizeof(float));
  TRY(o = hm_trace_f32(trace, "out.pre", S, HM_HC, 0));
  memcpy(o, so.pre, (size_t)S * HM_HC * sizeof(float));
  return HM_OK;
fail:
  return hm_fail_prefix(HM_ERR_INVALID_ARG, "FFN trace");
}

hm_status hm_ref_ffn_launch_ranks(ref_ranks *k, uint32_t S, const float *const *parts, const float *res_mid,
                                  const float *post_a, const float *comb_a, const float *pre_a, hm_tensor_set *trace) {
  uint32_t n0 = trace ? trace->count : 0;
  hm_status st = ffn_launch(k, S, parts, res_mid, post_a, comb_a, pre_a, trace);
  if (st != HM_OK && trace) hm_tset_truncate(trace, n0);
  return st;
}

hm_status hm_ref_ffn_launch(const hm_layer_weights *w, uint32_t tp, uint32_t S, const float *const *parts,
                            const float *res_mid, const float *post_a, const float *comb_a, const float *pre_a,
                            hm_tensor_set *trace) {
  ref_ranks k = held_ranks(w, tp);
  return hm_ref_ffn_launch_ranks(&k, S, parts, res_mid, post_a, comb_a, pre_a, trace);
}

hm_status hm_ref_ffn_launch_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src,
                                   const hm_build_opts *opts, uint32_t S, const float *const *parts,
                                   const float *res_mid, const float *post_a, const float *comb_a, const float *pre_a,
                                   hm_tensor_set *trace) {
  if (!cfg || !src) return hm_fail(HM_ERR_INVALID_ARG, "hm_ref_ffn_launch_source: null argument");
  ref_ranks k = {.cfg = cfg, .src = src, .tp = tp, .cur_rank = -1};
  if (opts) k.opts = *opts;
  k.opts.parts = HM_WPART_FFN;
  hm_status st = hm_ref_ffn_launch_ranks(&k, S, parts, res_mid, post_a, comb_a, pre_a, trace);
  ref_ranks_release(&k);
  return st;
}
