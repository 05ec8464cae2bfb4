/* tests/layer/test_ref_seam.c: the reference seam stage by stage (spec/mono.md §2.1 K1.1-K1.3):
 * hand-computed folds and collapses (the fused stream-3 term), mixes and norms against double
 * sums, the Sinkhorn invariants and its first round by hand, the gate's ranges. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"

static hm_layer_config cfg(void) { return tl_config("tiny", 3, 0, 0); }

START_TEST(fold_hand) {
  enum { D = 4 };
  /* x = 1, streams r_h = h + 1, post 0.5, comb = I: R_new[o] = 0.5 + (o + 1) */
  float x[D] = {1, 1, 1, 1}, res[4 * D], post[4] = {0.5f, 0.5f, 0.5f, 0.5f}, comb[16] = {0}, out[4 * D];
  for (int h = 0; h < 4; h++)
    for (int c = 0; c < D; c++) res[h * D + c] = (float)(h + 1);
  for (int h = 0; h < 4; h++) comb[h * 4 + h] = 1.0f;
  hm_ref_seam_fold(1, D, x, res, post, comb, out);
  for (int o = 0; o < 4; o++)
    for (int c = 0; c < D; c++) ck_assert(out[o * D + c] == 0.5f + (float)(o + 1));
  /* comb[h][o] is source h, destination o: one source spread over every destination */
  memset(comb, 0, sizeof comb);
  for (int o = 0; o < 4; o++) comb[2 * 4 + o] = 0.25f * (float)(o + 1); /* source 2 (value 3) */
  memset(post, 0, sizeof post);
  hm_ref_seam_fold(1, D, x, res, post, comb, out);
  for (int o = 0; o < 4; o++) ck_assert(out[o * D] == 0.75f * (float)(o + 1));
  /* only the stream-3 term is fused: post*x = -(1 + 2^-7 + 2^-17) cancels comb3*r3 =
   * (1 + 2^-17)(1 + 2^-7) = 1 + 2^-7 + 2^-17 + 2^-24 to 2^-24 (unfused: 0) */
  memset(comb, 0, sizeof comb);
  post[0] = -(1.0f + 0x1p-7f + 0x1p-17f);
  comb[3 * 4 + 0] = 1.0f + 0x1p-17f;
  for (int c = 0; c < D; c++) res[3 * D + c] = 1.0f + 0x1p-7f;
  hm_ref_seam_fold(1, D, x, res, post, comb, out);
  ck_assert(out[0] == 0x1p-24f);
  /* every output is a bf16 value */
  hm_gen_normal(1, "r", 4 * D, 0, 3, true, res);
  hm_gen_normal(1, "x", D, 0, 1, true, x);
  hm_gen_normal(1, "c", 16, 0.2f, 0.1f, false, comb);
  hm_ref_seam_fold(1, D, x, res, post, comb, out);
  for (int i = 0; i < 4 * D; i++) ck_assert(tl_is_bf16(out[i]));
}
END_TEST

START_TEST(settled_and_collapse) {
  enum { D = 64, S = 2 };
  float res[S * 4 * D], out[S * 4 * D], lin[S * D];
  hm_gen_normal(2, "res", S * 4 * D, 0, 5, true, res);
  hm_ref_seam_settled(S, D, res, out);
  ck_assert(!memcmp(out, res, sizeof out));
  /* pre = 1/2, 1/4, 1/8, 1/16 on streams 2, 4, 8, 16: 4 */
  float pre[S * 4] = {0.5f, 0.25f, 0.125f, 0.0625f, 1, 0, 0, 0};
  for (int h = 0; h < 4; h++)
    for (int c = 0; c < D; c++) res[h * D + c] = (float)(2 << h);
  hm_ref_seam_collapse(S, D, res, pre, lin);
  ck_assert(lin[0] == 4.0f && lin[D - 1] == 4.0f);
  /* the second token takes stream 0 only: lin = R0 exactly */
  for (int c = 0; c < D; c++) ck_assert(lin[D + c] == res[4 * D + c]);
  /* one rounding at the end: 0.25 * (1 + 1 + 1 + (1 + 2^-7)) = 1 + 2^-9 -> bf16 1 */
  float p2[4] = {0.25f, 0.25f, 0.25f, 0.25f};
  for (int i = 0; i < 4 * D; i++) res[i] = i < 3 * D ? 1.0f : 1.0f + 0x1p-7f;
  hm_ref_seam_collapse(1, D, res, p2, lin);
  ck_assert(lin[0] == 1.0f);
}
END_TEST

/* mixes and the sum of squares agree with double sums: the orders only move the last bits */
START_TEST(mix_vs_double) {
  hm_layer_config c = cfg();
  const uint32_t D = c.hidden, S = 3;
  float *res = malloc(sizeof(float) * S * 4 * D), *fn = malloc(sizeof(float) * 24 * 4 * D);
  float mix[S * 24], sq[S];
  hm_gen_normal(3, "res", S * 4 * D, 0, 2, true, res);
  hm_gen_normal(3, "fn", 24 * 4 * D, 0, 1.0f / 64, false, fn);
  ck_assert_int_eq(hm_ref_seam_mix(S, D, res, fn, mix, sq), HM_OK);
  for (uint32_t t = 0; t < S; t++) {
    double s2 = 0;
    for (uint32_t i = 0; i < 4 * D; i++) s2 += (double)res[t * 4 * D + i] * res[t * 4 * D + i];
    ck_assert_msg(fabs(sq[t] - s2) < 1e-6 * s2, "sq %g vs %g", sq[t], s2);
    for (int m = 0; m < 24; m++) {
      double d = 0, mag = 0;
      for (uint32_t i = 0; i < 4 * D; i++) {
        /* the hi/lo split reproduces fn to 16 bits */
        double f = fn[m * 4 * D + i], hi = fmt_round_bf16((float)f);
        double eff = hi + fmt_round_bf16((float)(f - hi));
        d += eff * res[t * 4 * D + i];
        mag += fabs(eff * res[t * 4 * D + i]);
      }
      ck_assert_msg(fabs(mix[t * 24 + m] - d) < 1e-6 * mag, "mix %d: %g vs %g", m, mix[t * 24 + m], d);
    }
  }
  free(res), free(fn);
}
END_TEST

/* Sinkhorn: one round by hand (row softmax + eps, column normalise) and the doubly-stochastic
 * result after 20 rounds within 1e-4 */
START_TEST(sinkhorn) {
  float z[16], comb[16];
  hm_gen_normal(4, "z", 16, 0, 2, false, z);
  hm_ref_sinkhorn(z, 1, 1e-6f, comb);
  double e[16];
  for (int r = 0; r < 4; r++) {
    double m = -1e30, s = 0;
    for (int c = 0; c < 4; c++) m = fmax(m, z[4 * r + c]);
    for (int c = 0; c < 4; c++) s += exp(z[4 * r + c] - m);
    for (int c = 0; c < 4; c++) e[4 * r + c] = exp(z[4 * r + c] - m) / s + 1e-6;
  }
  for (int c = 0; c < 4; c++) {
    double s = e[c] + e[4 + c] + e[8 + c] + e[12 + c] + 1e-6;
    for (int r = 0; r < 4; r++) ck_assert_msg(fabs(comb[4 * r + c] - e[4 * r + c] / s) < 2e-6, "%d %d", r, c);
  }
  /* 20 rounds reach 1e-4 on moderate logits; on strongly peaked ones (a spread of e^6 and more)
   * the rows converge more slowly (1e-2 off at 20 rounds, 5e-5 at 200), while the columns,
   * normalised last, always sum to 1 - eps */
  for (int trial = 0; trial < 200; trial++) {
    char name[16];
    snprintf(name, sizeof name, "z%d", trial);
    hm_gen_normal(5, name, 16, 0, trial < 100 ? 0.5f : 2.0f, false, z);
    for (int i = 0; i < 4; i++) z[5 * i] += 1.0f;
    hm_ref_sinkhorn(z, 20, 1e-6f, comb);
    for (int i = 0; i < 4; i++) {
      double rs = 0, cs = 0;
      for (int j = 0; j < 4; j++) rs += comb[4 * i + j], cs += comb[4 * j + i];
      ck_assert_msg(fabs(cs - 1) < 1e-5, "trial %d: col %g", trial, cs);
      if (trial < 100) ck_assert_msg(fabs(rs - 1) < 1e-4, "trial %d: row %g", trial, rs);
    }
    for (int i = 0; i < 16; i++) ck_assert(comb[i] > 0.0f);
  }
}
END_TEST

START_TEST(gate_ranges) {
  hm_layer_config c = cfg();
  enum { S = 4 };
  float mix[S * 24], sq[S], pre[S * 4], post[S * 4], comb[S * 16], scale[3] = {1, 1, 1}, base[24] = {0};
  memset(mix, 0, sizeof mix);
  for (int t = 0; t < S; t++) sq[t] = 4.0f * c.hidden;
  hm_ref_seam_gate(&c, 1, mix, sq, scale, base, pre, post, comb);
  /* v = 0: pre = sigmoid(0) + 1e-6, post = 2 sigmoid(0) = 1, comb = uniform 1/4 */
  for (int j = 0; j < 4; j++) {
    ck_assert(pre[j] == 0.5f + 1e-6f);
    ck_assert(post[j] == 1.0f);
  }
  for (int j = 0; j < 16; j++) ck_assert(fabsf(comb[j] - 0.25f) < 1e-6f);
  hm_gen_normal(6, "mix", S * 24, 0, 3, false, mix);
  hm_gen_normal(6, "base", 24, 0, 1, false, base);
  hm_ref_seam_gate(&c, S, mix, sq, scale, base, pre, post, comb);
  for (int i = 0; i < S * 4; i++) {
    ck_assert(pre[i] > 1e-6f * 0.5f && pre[i] <= 1.0f + 1e-6f);
    ck_assert(post[i] >= 0.0f && post[i] <= 2.0f);
  }
  /* the rsqrt of the mean square scales the mixes: 4x the squares halves v */
  for (int t = 0; t < S; t++) sq[t] = 16.0f * c.hidden;
  float pre2[S * 4], post2[S * 4], comb2[S * 16];
  for (int i = 0; i < S * 24; i++) mix[i] *= 2.0f;
  hm_ref_seam_gate(&c, S, mix, sq, scale, base, pre2, post2, comb2);
  for (int i = 0; i < S * 4; i++) ck_assert(fabsf(pre2[i] - pre[i]) < 1e-6f);
}
END_TEST

/* RMSNorm in the task's order against double: within one bf16 rounding */
START_TEST(norm_vs_double) {
  hm_layer_config c = cfg();
  const uint32_t D = c.hidden, S = 3;
  float *x = malloc(sizeof(float) * S * D), *y = malloc(sizeof(float) * S * D);
  uint16_t *w = malloc(2 * D);
  hm_gen_normal(7, "x", S * D, 0, 3, true, x);
  for (uint32_t i = 0; i < D; i++) w[i] = fmt_bf16_from_f32(1.0f + 0.01f * (float)(i % 17));
  hm_ref_seam_norm(S, D, x, w, 1e-20f, y);
  for (uint32_t t = 0; t < S; t++) {
    double ss = 0;
    for (uint32_t i = 0; i < D; i++) ss += (double)x[t * D + i] * x[t * D + i];
    double r = 1.0 / sqrt(ss / D + 1e-20);
    for (uint32_t i = 0; i < D; i++) {
      double want = x[t * D + i] * r * fmt_bf16_to_f32(w[i]);
      ck_assert(tl_is_bf16(y[t * D + i]));
      ck_assert_msg(fabs(y[t * D + i] - want) <= fabs(want) * 0x1p-8 + 1e-30, "%g vs %g", y[t * D + i], want);
    }
  }
  /* D = 5120 reaches the third 2048-column chunk of a thread */
  float *xb = malloc(sizeof(float) * 5120), *yb = malloc(sizeof(float) * 5120);
  uint16_t *wb = malloc(2 * 5120);
  hm_gen_normal(8, "xb", 5120, 0, 1, true, xb);
  for (int i = 0; i < 5120; i++) wb[i] = fmt_bf16_from_f32(1.0f);
  hm_ref_seam_norm(1, 5120, xb, wb, 1e-20f, yb);
  double ss = 0;
  for (int i = 0; i < 5120; i++) ss += (double)xb[i] * xb[i];
  double r = 1.0 / sqrt(ss / 5120);
  for (int i = 4090; i < 5120; i += 37) ck_assert(fabs(yb[i] - xb[i] * r) <= fabs(xb[i] * r) * 0x1p-8);
  free(x), free(y), free(w), free(xb), free(yb), free(wb);
}
END_TEST

/* the whole seam: outputs at their rounding points, the delayed pre used by the collapse */
START_TEST(seam_whole) {
  hm_layer_config c = cfg();
  const uint32_t D = c.hidden, S = 2;
  hm_layer_weights w;
  tl_build_group(&c, 1, 21, HM_WPART_FFN, &w);
  tl_ffn_inputs in;
  tl_ffn_inputs_make(&c, S, 1, 21, &in);
  float *res = malloc(sizeof(float) * S * 4 * D), *lin = malloc(sizeof(float) * S * D);
  float *normed = malloc(sizeof(float) * S * D), *lin2 = malloc(sizeof(float) * S * D);
  float post[S * 4], comb[S * 16], pre[S * 4];
  hm_ref_seam_out o = {res, post, comb, pre, lin, normed, NULL, NULL};
  ck_assert_int_eq(hm_ref_seam(&c, S, in.a, in.res, in.post, in.comb, in.pre, hm_weights_get(&w, "hc_ffn_fn")->data,
                               hm_weights_get(&w, "hc_ffn_scale")->data, hm_weights_get(&w, "hc_ffn_base")->data,
                               hm_weights_get(&w, "ffn_norm")->data, &o),
                   HM_OK);
  uint32_t off = 0;
  for (uint32_t i = 0; i < S * D; i++) off += !tl_is_bf16(lin[i]) || !tl_is_bf16(normed[i]);
  ck_assert_uint_eq(off, 0);
  hm_ref_seam_collapse(S, D, res, in.pre, lin2);
  ck_assert(!memcmp(lin, lin2, sizeof(float) * S * D));
  hm_ref_seam_collapse(S, D, res, pre, lin2);
  ck_assert(memcmp(lin, lin2, sizeof(float) * S * D) != 0);
  free(res), free(lin), free(normed), free(lin2);
  tl_ffn_inputs_free(&in);
  hm_weights_free(&w);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-ref-seam");
  TCase *tc = tcase_create("seam");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, fold_hand);
  tcase_add_test(tc, settled_and_collapse);
  tcase_add_test(tc, mix_vs_double);
  tcase_add_test(tc, sinkhorn);
  tcase_add_test(tc, gate_ranges);
  tcase_add_test(tc, norm_vs_double);
  tcase_add_test(tc, seam_whole);
  suite_add_tcase(s, tc);
  return s;
}
