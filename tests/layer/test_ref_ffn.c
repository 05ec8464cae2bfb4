/* tests/layer/test_ref_ffn.c: the whole FFN launch of the reference (spec/mono.md §2.3-2.4, §2.7
 * steps 7-11) for a TP group: invariants, TP 2 and 4 against TP 1, replay, the draft variant and
 * one full-dims case with few experts. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats.h"
#include "helpers.h"

static void run(const hm_layer_config *c, uint32_t tp, uint32_t S, uint64_t seed, hm_tensor_set *tr) {
  hm_layer_weights w[4];
  tl_build_group(c, tp, seed, HM_WPART_FFN, w);
  tl_ffn_inputs in;
  tl_ffn_inputs_make(c, S, tp, seed, &in);
  hm_tset_init(tr);
  hm_status st = hm_ref_ffn_launch(w, tp, S, (const float *const *)in.parts, in.res, in.post, in.comb, in.pre, tr);
  ck_assert_msg(st == HM_OK, "ffn launch: %s", hm_errmsg());
  tl_ffn_inputs_free(&in);
  tl_free_group(w, tp);
}

/* invariants every launch must hold */
static void invariants(const hm_layer_config *c, uint32_t tp, uint32_t S, const hm_tensor_set *tr) {
  const uint32_t D = c->hidden, k = c->topk;
  const float *rw = tl_f32(tr, "router.weights");
  const int32_t *ids = tl_i32(tr, "router.ids");
  for (uint32_t t = 0; t < S; t++) {
    double s = 0;
    for (uint32_t j = 0; j < k; j++) {
      s += rw[t * k + j];
      ck_assert(ids[t * k + j] >= 0 && (uint32_t)ids[t * k + j] < c->experts);
      for (uint32_t i = 0; i < j; i++) ck_assert_int_ne(ids[t * k + i], ids[t * k + j]);
    }
    ck_assert_msg(fabs(s - 1.5) < 1e-5, "token %u: routing weights sum to %g", t, s);
  }
  /* Sinkhorn: columns (normalised last) to 1e-5; rows as far as 20 rounds get (test_ref_seam) */
  const float *comb = tl_f32(tr, "out.comb");
  for (uint32_t t = 0; t < S; t++)
    for (int i = 0; i < 4; i++) {
      double rs = 0, cs = 0;
      for (int j = 0; j < 4; j++) rs += comb[t * 16 + 4 * i + j], cs += comb[t * 16 + 4 * j + i];
      ck_assert(fabs(rs - 1) < 5e-2 && fabs(cs - 1) < 1e-5);
    }
  /* bf16 rounding points */
  const char *bf[] = {"ffn.x", "ffn.seam.res", "ffn.seam.lin", "ffn.seam.normed", "out.x", "rank0.shared.out",
                      "rank0.routed.mid", "rank0.routed.sum", "rank0.partial", "rank0.shared.smid"};
  for (unsigned i = 0; i < sizeof bf / sizeof *bf; i++) {
    hm_tensor *t = hm_tset_find(tr, bf[i]);
    ck_assert_ptr_nonnull(t);
    const float *v = t->data;
    uint64_t off = 0;
    for (uint64_t j = 0; j < hm_tensor_numel(t); j++) off += !tl_is_bf16(v[j]);
    ck_assert_msg(off == 0, "%s: %llu values off the bf16 grid", bf[i], (unsigned long long)off);
  }
  /* the output is the rank-order reduction of the partials, recomputed: the same bits */
  const float *parts[4];
  char n[32];
  for (uint32_t r = 0; r < tp; r++) {
    snprintf(n, sizeof n, "rank%u.partial", r);
    parts[r] = tl_f32(tr, n);
  }
  float *x = malloc(sizeof(float) * S * D);
  hm_ref_reduce_rank_order(tp, parts, (uint64_t)S * D, x);
  ck_assert_uint_eq(tl_count_diff(x, tl_f32(tr, "out.x"), (uint64_t)S * D), 0);
  free(x);
  ck_assert(tl_rel_l2(tl_f32(tr, "out.x"), tl_f32(tr, "rank0.partial"), (uint64_t)S * D) < 10.0);
}

START_TEST(tp_agreement) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t S = 6, D = c.hidden;
  hm_tensor_set t1, t2, t4;
  run(&c, 1, S, 77, &t1);
  run(&c, 2, S, 77, &t2);
  run(&c, 4, S, 77, &t4);
  invariants(&c, 1, S, &t1);
  invariants(&c, 2, S, &t2);
  invariants(&c, 4, S, &t4);
  /* the seam and the routing are replicated math on the same a: bit-identical */
  const char *same[] = {"ffn.x", "out.res", "out.post", "out.comb", "out.pre", "ffn.seam.normed", "router.logits",
                        "router.weights"};
  for (unsigned i = 0; i < sizeof same / sizeof *same; i++) {
    hm_tensor *a = hm_tset_find(&t1, same[i]), *b = hm_tset_find(&t2, same[i]), *d = hm_tset_find(&t4, same[i]);
    ck_assert(!memcmp(a->data, b->data, a->nbytes) && !memcmp(a->data, d->data, a->nbytes));
  }
  ck_assert(!memcmp(tl_i32(&t1, "router.ids"), tl_i32(&t4, "router.ids"), sizeof(int32_t) * S * c.topk));
  /* the routed mid columns are the same dot products on every split: rank r's real columns are
   * TP1's columns r*Ir.. bit for bit */
  const float *m1 = tl_f32(&t1, "rank0.routed.mid");
  for (uint32_t r = 0; r < 4; r++) {
    char n[32];
    snprintf(n, sizeof n, "rank%u.routed.mid", r);
    const float *m4 = tl_f32(&t4, n);
    for (uint32_t p = 0; p < S * c.topk; p++) ck_assert(!memcmp(m4 + p * 128, m1 + p * 256 + r * 64, 64 * sizeof(float)));
  }
  /* out.x differs only by where bf16 roundings fall: TP1 rounds routed + shared once per
   * element, TPn rounds each rank's partial (2^-9 relative of a partial) before the f32 sum,
   * and each rank's routed sum rounds at every add. A few bf16 ulps of |partial|: measured
   * rel-L2 ~3e-3 (TP2), ~4e-3 (TP4); bound 1e-2 and cosine 0.9999. */
  const float *x1 = tl_f32(&t1, "out.x");
  double r2 = tl_rel_l2(tl_f32(&t2, "out.x"), x1, (uint64_t)S * D), r4 = tl_rel_l2(tl_f32(&t4, "out.x"), x1, (uint64_t)S * D);
  double c2 = tl_cosine(tl_f32(&t2, "out.x"), x1, (uint64_t)S * D), c4 = tl_cosine(tl_f32(&t4, "out.x"), x1, (uint64_t)S * D);
  fprintf(stderr, "tp agreement: rel-L2 TP2 %.2e TP4 %.2e, cosine %.7f %.7f\n", r2, r4, c2, c4);
  ck_assert(r2 < 1e-2 && r4 < 1e-2);
  ck_assert(c2 > 0.9999 && c4 > 0.9999);
  hm_tset_free(&t1), hm_tset_free(&t2), hm_tset_free(&t4);
}
END_TEST

/* the same launch twice gives the same bits (the reference is a replayable oracle) */
START_TEST(replay) {
  hm_layer_config c = tl_config("tiny", 5, 0, 0);
  hm_tensor_set a, b;
  run(&c, 2, 3, 5, &a);
  run(&c, 2, 3, 5, &b);
  ck_assert_uint_eq(a.count, b.count);
  for (uint32_t i = 0; i < a.count; i++) {
    ck_assert_str_eq(a.t[i].name, b.t[i].name);
    ck_assert_msg(!memcmp(a.t[i].data, b.t[i].data, a.t[i].nbytes), "%s differs", a.t[i].name);
  }
  hm_tset_free(&a), hm_tset_free(&b);
}
END_TEST

/* DSpark draft layer: 32 experts top-3 at tiny size, ug_groups 1 */
START_TEST(draft) {
  hm_layer_config c = tl_config("tiny", 41, 0, 0);
  ck_assert_uint_eq(c.topk, 3);
  ck_assert_uint_eq(c.ug_groups, 1);
  hm_tensor_set t;
  run(&c, 4, 5, 9, &t);
  invariants(&c, 4, 5, &t);
  ck_assert_uint_eq(hm_tset_find(&t, "router.ids")->shape[1], 3);
  ck_assert_uint_eq(hm_tset_find(&t, "router.logits")->shape[1], 32);
  hm_tset_free(&t);
}
END_TEST

/* argument errors leave nothing behind */
START_TEST(errors) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[2];
  tl_build_group(&c, 2, 3, HM_WPART_FFN, w);
  tl_ffn_inputs in;
  tl_ffn_inputs_make(&c, 2, 2, 3, &in);
  hm_tensor_set t;
  hm_tset_init(&t);
  const float *const *p = (const float *const *)in.parts;
  ck_assert_int_eq(hm_ref_ffn_launch(w, 4, 2, p, in.res, in.post, in.comb, in.pre, &t), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_ref_ffn_launch(w, 1, 2, p, in.res, in.post, in.comb, in.pre, &t), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_ref_ffn_launch(w, 2, 0, p, in.res, in.post, in.comb, in.pre, &t), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_ref_ffn_launch(w, 2, 2, p, NULL, in.post, in.comb, in.pre, &t), HM_ERR_INVALID_ARG);
  ck_assert_uint_eq(t.count, 0);
  ck_assert_int_eq(hm_ref_ffn_launch(w, 2, 2, p, in.res, in.post, in.comb, in.pre, &t), HM_OK);
  /* a name already in the trace is refused */
  ck_assert_int_ne(hm_ref_ffn_launch(w, 2, 2, p, in.res, in.post, in.comb, in.pre, &t), HM_OK);
  hm_tset_free(&t);
  tl_ffn_inputs_free(&in);
  tl_free_group(w, 2);
}
END_TEST

/* V4.1-Flash dims at TP4 with 8 experts: shapes of the real launch, invariants, time */
START_TEST(full_dims) {
  hm_layer_config c = tl_config("v41-flash", 3, 8, 6);
  const uint32_t S = 4;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  hm_tensor_set t;
  run(&c, 4, S, 123, &t);
  clock_gettime(CLOCK_MONOTONIC, &b);
  fprintf(stderr, "full dims TP4, 8 experts, %u rows: %.2f s (weights + reference)\n", S,
          (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
  invariants(&c, 4, S, &t);
  ck_assert_uint_eq(hm_tset_find(&t, "rank3.routed.mid")->shape[2], 640);
  ck_assert_uint_eq(hm_tset_find(&t, "rank3.shared.smid")->shape[1], 576);
  ck_assert_uint_eq(hm_tset_find(&t, "out.x")->shape[1], 5120);
  /* the padded MID columns 576..639 are zero */
  const float *mid = tl_f32(&t, "rank2.routed.mid");
  uint32_t nz = 0;
  for (uint32_t p = 0; p < S * 6; p++)
    for (uint32_t i = 576; i < 640; i++) nz += mid[p * 640 + i] != 0.0f;
  ck_assert_uint_eq(nz, 0);
  hm_tset_free(&t);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-ref-ffn");
  TCase *tc = tcase_create("ffn");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, tp_agreement);
  tcase_add_test(tc, replay);
  tcase_add_test(tc, draft);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, full_dims);
  suite_add_tcase(s, tc);
  return s;
}
