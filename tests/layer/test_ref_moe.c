/* tests/layer/test_ref_moe.c: the reference MoE stage by stage (spec/mono.md §2.4): rank-order
 * reduce, router K order and routing (ties, NaN, x1.5), activations, the ug chains, combine, and
 * the shared and routed experts against double sums over the checkpoint tensors themselves. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"
#include "ref_internal.h"

START_TEST(reduce_order) {
  /* ((2^24 + 1) + 1) - 2^24 = 0 in rank order (each +1 rounds away); another order gives 2 */
  float p0 = 0x1p24f, p1 = 1, p2 = 1, p3 = -0x1p24f, out;
  const float *parts[4] = {&p0, &p1, &p2, &p3};
  hm_ref_reduce_rank_order(4, parts, 1, &out);
  ck_assert(out == 0.0f);
  const float *rev[4] = {&p3, &p2, &p1, &p0};
  hm_ref_reduce_rank_order(4, rev, 1, &out);
  ck_assert(out == 2.0f);
  /* then bf16: 1 + 2^-9 -> 1 */
  float q0 = 1.0f, q1 = 0x1p-9f;
  const float *two[2] = {&q0, &q1};
  hm_ref_reduce_rank_order(2, two, 1, &out);
  ck_assert(out == 1.0f);
}
END_TEST

/* the §2.0 K order: wave w sums steps w, w+8, ..., the waves are added in order; the
 * vectorised 16-row GEMV gives the same bits as the scalar model */
START_TEST(gemv_order) {
  enum { K = 5120, T = 3 };
  float *w = calloc(K, sizeof(float)), *x = calloc(K, sizeof(float));
  for (int k = 0; k < K; k++) w[k] = 1.0f;
  x[0] = 0x1p24f, x[8 * 128] = 1.0f, x[2 * 128] = -0x1p24f, x[3 * 128] = 1.0f;
  /* waves: w0 = 2^24 (step 0) + 1 (step 8) -> 2^24, w2 = -2^24, w3 = 1: ((w0 + w1) + w2) + w3
   * = 1; summed in ascending K it would be ((2^24 + -2^24) + 1) + 1 = 2 */
  ck_assert(hm_ref_dot_waves(w, x, K) == 1.0f);
  float *W = malloc(sizeof(float) * 16 * K), *X = malloc(sizeof(float) * T * K), *WT = aligned_alloc(64, sizeof(float) * 16 * K);
  hm_gen_normal(3, "W", 16 * K, 0, 0.02f, false, W);
  hm_gen_normal(3, "X", T * K, 0, 1, true, X);
  uint8_t chain[40];
  hm_wave_chains(chain, 40);
  float out[16 * T];
  hm_transpose16(W, K, 13, K, WT); /* 13 rows: the last three are zero */
  hm_gemv16(WT, K, 128, chain, 8, X, K, T, out);
  for (int r = 0; r < 16; r++)
    for (int t = 0; t < T; t++) {
      float want = r < 13 ? hm_ref_dot_waves(W + (size_t)r * K, X + (size_t)t * K, K) : 0.0f;
      ck_assert_msg(fmt_bits(out[r * T + t]) == fmt_bits(want), "row %d token %d", r, t);
    }
  free(w), free(x), free(W), free(X), free(WT);
}
END_TEST

START_TEST(router_logits) {
  enum { D = 1024, E = 3, S = 2 };
  uint16_t *w = malloc(2 * D * E);
  float *x = calloc(S * D, sizeof(float)), logits[S * E];
  for (int i = 0; i < D * E; i++) w[i] = fmt_bf16_from_f32(i < D ? 1.0f : 0.0f);
  /* quarter 0 is 8 steps of 32, one a wave, waves added in order: ((2^24 + 1) + 1) - 2^24 = 0 */
  x[0] = 0x1p24f, x[32] = 1, x[64] = 1, x[96] = -0x1p24f;
  /* token 1: the quarters are added ((p0 + p1) + p2) + p3 */
  x[D + 0] = 0x1p24f, x[D + 256] = 1, x[D + 512] = 1, x[D + 768] = -0x1p24f;
  ck_assert_int_eq(hm_ref_router_logits(S, D, E, w, x, logits), HM_OK);
  ck_assert(logits[0] == 0.0f && logits[E] == 0.0f);
  ck_assert(logits[1] == 0.0f);
  /* random rows against double sums */
  hm_gen_normal(1, "x", S * D, 0, 1, true, x);
  float *wf = malloc(sizeof(float) * D * E);
  hm_gen_normal(1, "w", D * E, 0, 0.03f, true, wf);
  for (int i = 0; i < D * E; i++) w[i] = fmt_bf16_from_f32(wf[i]);
  ck_assert_int_eq(hm_ref_router_logits(S, D, E, w, x, logits), HM_OK);
  for (int t = 0; t < S; t++)
    for (int e = 0; e < E; e++) {
      double d = 0, mag = 0;
      for (int k = 0; k < D; k++) d += (double)wf[e * D + k] * x[t * D + k], mag += fabs((double)wf[e * D + k] * x[t * D + k]);
      ck_assert(fabs(logits[t * E + e] - d) < 1e-6 * mag);
    }
  free(w), free(x), free(wf);
}
END_TEST

START_TEST(route_picks) {
  ck_assert(hm_ref_sqrtsoftplus(25.0f) == 5.0f);
  ck_assert(fabsf(hm_ref_sqrtsoftplus(0.0f) - 0.83255461f) < 1e-6f);
  ck_assert(fabsf(hm_ref_sqrtsoftplus(-30.0f)) < 1e-6f);
  enum { E = 128, K = 3 };
  float logits[E], bias[E] = {0}, w[K], scores[E];
  int32_t ids[K];
  for (int e = 0; e < E; e++) logits[e] = -10.0f;
  logits[2] = 5.0f, logits[65] = 5.0f, logits[7] = 4.0f, logits[100] = NAN;
  bias[7] = 2.0f;
  ck_assert_int_eq(hm_ref_route(1, E, K, 1.5f, logits, bias, ids, w, scores), HM_OK);
  /* 7 by its bias; then the tie 65 (lane 1) before 2 (lane 2) */
  ck_assert_int_eq(ids[0], 7);
  ck_assert_int_eq(ids[1], 65);
  ck_assert_int_eq(ids[2], 2);
  float s7 = hm_ref_sqrtsoftplus(4.0f), s5 = hm_ref_sqrtsoftplus(5.0f);
  float total = (s7 + s5) + s5, sc = 1.5f / total;
  ck_assert(w[0] == s7 * sc && w[1] == s5 * sc && w[2] == s5 * sc);
  ck_assert(fabsf((w[0] + w[1]) + w[2] - 1.5f) < 1e-6f);
  ck_assert(isnan(scores[100]));
  /* within a lane, the lower index first: 1 and 65 share lane 1 */
  logits[1] = 5.0f;
  bias[7] = 0.0f;
  ck_assert_int_eq(hm_ref_route(1, E, K, 1.5f, logits, bias, ids, w, NULL), HM_OK);
  ck_assert_int_eq(ids[0], 1);
  ck_assert_int_eq(ids[1], 65);
  ck_assert_int_eq(ids[2], 2);
  /* a NaN score is picked last (val -inf) with weight 0 */
  float l4[4] = {1, NAN, 2, 3}, b4[4] = {0};
  int32_t i4[4];
  float w4[4];
  ck_assert_int_eq(hm_ref_route(1, 4, 4, 1.5f, l4, b4, i4, w4, NULL), HM_OK);
  ck_assert_int_eq(i4[0], 3);
  ck_assert_int_eq(i4[3], 1);
  ck_assert(w4[3] == 0.0f);
  ck_assert(fabsf(w4[0] + w4[1] + w4[2] - 1.5f) < 1e-6f);
  ck_assert_int_eq(hm_ref_route(1, 4, 5, 1.5f, l4, b4, i4, w4, NULL), HM_ERR_INVALID_ARG);
}
END_TEST

START_TEST(activations) {
  /* routed: gc = min(g, 10), uc = clamp(u, +-10), mid = bf16(gc * sigmoid(gc) * uc) */
  const float gs[] = {-30, -3, -0.5f, 0, 0.25f, 2, 9.5f, 10, 40}, us[] = {-50, -2, 0.5f, 3, 11};
  for (unsigned i = 0; i < sizeof gs / sizeof *gs; i++)
    for (unsigned j = 0; j < sizeof us / sizeof *us; j++) {
      double gc = fmin(gs[i], 10), uc = fmax(fmin(us[j], 10), -10);
      double want = gc / (1 + exp(-gc)) * uc;
      float r = hm_ref_routed_act(gs[i], us[j], 10.0f), s = hm_ref_shared_act(gs[i], us[j], 10.0f);
      ck_assert(tl_is_bf16(r) && tl_is_bf16(s));
      ck_assert_msg(fabs(r - want) <= fabs(want) * 0x1p-8 + 1e-30, "routed %g %g: %g vs %g", gs[i], us[j], r, want);
      /* shared rounds the activation before the product: two bf16 roundings */
      ck_assert_msg(fabs(s - want) <= fabs(want) * 0x1p-7 + 1e-30, "shared %g %g: %g vs %g", gs[i], us[j], s, want);
    }
  ck_assert(hm_ref_routed_act(40, 20, 10) == hm_ref_routed_act(10, 10, 10));
}
END_TEST

START_TEST(ug_chains) {
  /* the 40 steps of K = 5120 with ug_groups 2 (spec/mono.md §2.4) */
  for (uint32_t s = 0; s < 40; s++) {
    uint32_t want = (s < 8 || (s >= 16 && s < 24) || (s >= 32 && s < 36)) ? 0 : 1;
    ck_assert_uint_eq(hm_ref_ug_slice(s, 40, 2), want);
    /* quarters: steps 8i+2k, 8i+2k+1 */
    ck_assert_uint_eq(hm_ref_ug_slice(s, 40, 1), (s % 8) / 2);
  }
  /* tiny K = 1024 (8 steps): one partial round split in halves */
  for (uint32_t s = 0; s < 8; s++) ck_assert_uint_eq(hm_ref_ug_slice(s, 8, 2), s < 4 ? 0u : 1u);
}
END_TEST

START_TEST(combine_hand) {
  /* routed = bf16(1 + bf16(1.5 * 2^-8)) = 1 + 2^-7; partial = bf16(1 + 2^-7 + 2^-8) ties to 1 + 2^-6;
   * one f32 sum then bf16 would give 1 + 2^-7 */
  float contrib[2] = {1.0f, 1.0f}, w[2] = {1.0f, 1.5f * 0x1p-8f}, shared = 0x1p-8f, routed, partial;
  hm_ref_moe_combine(1, 1, 2, contrib, w, &shared, &routed, &partial);
  ck_assert(routed == 1.0f + 0x1p-7f);
  ck_assert(partial == 1.0f + 0x1p-6f);
}
END_TEST

/* ---------------------------------------------------------------- experts vs double */

typedef struct logical {
  hm_gen g;
  hm_source s;
} logical;

/* a checkpoint MXFP8 row dequantised straight from the source */
static void ck_mx8_row(logical *L, const char *base, uint64_t row, uint64_t k0, uint64_t K, double *out) {
  char wn[128], sn[128];
  snprintf(wn, sizeof wn, "%s.weight", base);
  snprintf(sn, sizeof sn, "%s.scale", base);
  uint8_t *b = malloc(K), *c = malloc(K / 32);
  ck_assert_int_eq(L->s.read(L->s.ctx, wn, row, 1, k0, K, b), HM_OK);
  ck_assert_int_eq(L->s.read(L->s.ctx, sn, row / 32, 1, k0 / 32, K / 32, c), HM_OK);
  for (uint64_t k = 0; k < K; k++) out[k] = (double)fmt_e4m3_decode(b[k]) * fmt_e8m0_decode(c[k / 32]);
  free(b), free(c);
}
/* a checkpoint MXFP4 row */
static void ck_mx4_row(logical *L, const char *base, uint64_t row, uint64_t k0, uint64_t K, double *out) {
  char wn[128], sn[128];
  snprintf(wn, sizeof wn, "%s.weight", base);
  snprintf(sn, sizeof sn, "%s.scale", base);
  uint8_t *b = malloc(K / 2), *c = malloc(K / 32);
  ck_assert_int_eq(L->s.read(L->s.ctx, wn, row, 1, k0 / 2, K / 2, b), HM_OK);
  ck_assert_int_eq(L->s.read(L->s.ctx, sn, row, 1, k0 / 32, K / 32, c), HM_OK);
  for (uint64_t k = 0; k < K; k++)
    out[k] = (double)fmt_e2m1_decode(fmt_e2m1_nibble(b[k / 2], k & 1)) * fmt_e8m0_decode(c[k / 32]);
  free(b), free(c);
}

static double dot(const double *a, const float *b, uint64_t n, double *mag) {
  double s = 0, m = 0;
  for (uint64_t i = 0; i < n; i++) s += a[i] * b[i], m += fabs(a[i] * b[i]);
  if (mag) *mag = m;
  return s;
}

START_TEST(shared_vs_double) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t D = c.hidden, S = 3, tp = 2;
  hm_layer_weights w[2];
  tl_build_group(&c, tp, 31, HM_WPART_FFN, w);
  logical L;
  ck_assert_int_eq(hm_gen_init(&L.g, &c, 31), HM_OK);
  L.s = hm_gen_source(&L.g);
  float *normed = malloc(sizeof(float) * S * D), *X = malloc(sizeof(float) * S * D);
  uint8_t *x8 = malloc(S * D), *x8s = malloc(S * D / 32);
  hm_gen_normal(31, "normed", S * D, 0, 1, true, normed);
  hm_ref_mx8_quant(normed, S, D, 32, FMT_RULE_V, x8, x8s);
  hm_ref_mx8_dequant(x8, x8s, S, D, 32, X);
  const uint32_t Sh = w[0].dims.shared_inter;
  double *row = malloc(sizeof(double) * D);
  for (uint32_t r = 0; r < tp; r++) {
    float *g = malloc(sizeof(float) * S * Sh), *u = malloc(sizeof(float) * S * Sh), *smid = malloc(sizeof(float) * S * Sh);
    float *out = malloc(sizeof(float) * S * D), *M = malloc(sizeof(float) * S * Sh);
    uint8_t *smq = malloc(S * Sh), *smc = malloc(S * Sh / 32);
    ck_assert_int_eq(hm_ref_shared_expert(&w[r], S, x8, x8s, g, u, smid, smq, smc, out), HM_OK);
    for (uint32_t i = 0; i < Sh; i += 5) {
      double wg[1024], wu[1024];
      ck_mx8_row(&L, "layers.3.ffn.shared_experts.w1", r * Sh + i, 0, D, wg);
      ck_mx8_row(&L, "layers.3.ffn.shared_experts.w3", r * Sh + i, 0, D, wu);
      for (uint32_t t = 0; t < S; t++) {
        double mg, mu, dg = dot(wg, X + t * D, D, &mg), du = dot(wu, X + t * D, D, &mu);
        ck_assert_msg(fabs(g[t * Sh + i] - dg) <= fabs(dg) * 0x1p-8 + 1e-6 * mg, "gate %u: %g vs %g", i, g[t * Sh + i], dg);
        ck_assert(fabs(u[t * Sh + i] - du) <= fabs(du) * 0x1p-8 + 1e-6 * mu);
        ck_assert(smid[t * Sh + i] == hm_ref_shared_act(g[t * Sh + i], u[t * Sh + i], 10.0f));
      }
    }
    /* the down projection over this rank's K columns against double, on the reference's SMQ */
    hm_ref_mx8_dequant(smq, smc, S, Sh, 32, M);
    for (uint32_t row_i = 0; row_i < D; row_i += 97) {
      ck_mx8_row(&L, "layers.3.ffn.shared_experts.w2", row_i, r * Sh, Sh, row);
      for (uint32_t t = 0; t < S; t++) {
        double m, d = dot(row, M + t * Sh, Sh, &m);
        ck_assert_msg(fabs(out[t * D + row_i] - d) <= fabs(d) * 0x1p-8 + 1e-6 * m, "down %u: %g vs %g", row_i,
                      out[t * D + row_i], d);
      }
    }
    free(g), free(u), free(smid), free(out), free(M), free(smq), free(smc);
  }
  free(normed), free(X), free(x8), free(x8s), free(row);
  hm_gen_free(&L.g);
  tl_free_group(w, tp);
}
END_TEST

/* routed experts at TP4 (padded ranks) against double sums over the checkpoint's w1/w3/w2 */
START_TEST(routed_vs_double) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t D = c.hidden, S = 2, k = c.topk, tp = 4;
  hm_layer_weights w[4];
  tl_build_group(&c, tp, 41, HM_WPART_FFN, w);
  logical L;
  ck_assert_int_eq(hm_gen_init(&L.g, &c, 41), HM_OK);
  L.s = hm_gen_source(&L.g);
  float *normed = malloc(sizeof(float) * S * D), *X = malloc(sizeof(float) * S * D);
  uint8_t *x8 = malloc(S * D), *x8s = malloc(S * D / 32);
  hm_gen_normal(41, "normed", S * D, 0, 1, true, normed);
  hm_ref_mx8_quant(normed, S, D, 32, FMT_RULE_A, x8, x8s);
  hm_ref_mx8_dequant(x8, x8s, S, D, 32, X);
  int32_t ids[2 * 6] = {0, 5, 9, 13, 20, 63, 63, 1, 5, 40, 41, 2};
  const uint32_t I = w[0].dims.inter_pad, Ir = w[0].dims.inter, P = S * k;
  float *mid = malloc(sizeof(float) * P * I), *contrib = malloc(sizeof(float) * P * D), *M = malloc(sizeof(float) * P * I);
  uint8_t *midq = malloc(P * I), *midc = malloc(P * I / 32);
  double *wg = malloc(sizeof(double) * D), *wu = malloc(sizeof(double) * D), *w2 = malloc(sizeof(double) * Ir);
  for (uint32_t r = 0; r < tp; r++) {
    ck_assert_int_eq(hm_ref_routed_experts(&w[r], S, x8, x8s, ids, mid, midq, midc, contrib), HM_OK);
    hm_ref_mx8_dequant(midq, midc, P, I, 32, M);
    for (uint32_t p = 0; p < P; p++) {
      uint32_t t = p / k, e = (uint32_t)ids[p];
      char base[64];
      for (uint32_t i = 0; i < I; i++) {
        if (i >= Ir) {
          ck_assert(mid[p * I + i] == 0.0f && midq[p * I + i] == 0);
          continue;
        }
        if (i % 3) continue;
        snprintf(base, sizeof base, "layers.3.ffn.experts.%u.w1", e);
        ck_mx4_row(&L, base, r * Ir + i, 0, D, wg);
        snprintf(base, sizeof base, "layers.3.ffn.experts.%u.w3", e);
        ck_mx4_row(&L, base, r * Ir + i, 0, D, wu);
        double mg, mu, g = dot(wg, X + t * D, D, &mg), u = dot(wu, X + t * D, D, &mu);
        double gc = fmin(g, 10), uc = fmax(fmin(u, 10), -10), want = gc / (1 + exp(-gc)) * uc;
        /* one bf16 rounding, plus the f32 sums' error carried through the activation */
        double tol = fabs(want) * 0x1p-8 + 1e-5 * (mg + mu) * (fabs(uc) + fabs(gc) + 1);
        ck_assert_msg(fabs(mid[p * I + i] - want) <= tol, "rank %u pick %u col %u: %g vs %g", r, p, i,
                      mid[p * I + i], want);
      }
      for (uint32_t row = 0; row < D; row += 61) {
        snprintf(base, sizeof base, "layers.3.ffn.experts.%u.w2", e);
        ck_mx4_row(&L, base, row, r * Ir, Ir, w2);
        double m, d = dot(w2, M + p * I, Ir, &m);
        ck_assert_msg(fabs(contrib[p * D + row] - d) <= 1e-6 * m + 1e-30, "contrib %u %u: %g vs %g", p, row,
                      contrib[p * D + row], d);
      }
    }
  }
  int32_t bad[12];
  memcpy(bad, ids, sizeof bad);
  bad[3] = 64;
  ck_assert_int_eq(hm_ref_routed_experts(&w[0], S, x8, x8s, bad, mid, midq, midc, contrib), HM_ERR_INVALID_ARG);
  free(normed), free(X), free(x8), free(x8s), free(mid), free(contrib), free(M), free(midq), free(midc);
  free(wg), free(wu), free(w2);
  hm_gen_free(&L.g);
  tl_free_group(w, tp);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-ref-moe");
  TCase *tc = tcase_create("moe");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, reduce_order);
  tcase_add_test(tc, gemv_order);
  tcase_add_test(tc, router_logits);
  tcase_add_test(tc, route_picks);
  tcase_add_test(tc, activations);
  tcase_add_test(tc, ug_chains);
  tcase_add_test(tc, combine_hand);
  tcase_add_test(tc, shared_vs_double);
  tcase_add_test(tc, routed_vs_double);
  suite_add_tcase(s, tc);
  return s;
}
