/* tests/layer/test_ref_attn.c: the reference attention stage by stage (spec/mono.md §2.1 K1.4-K1.7,
 * §2.2): records, key table, norms and RoPE, GEMVs and sparse attention against double math,
 * and the whole layer step (window, reuse, first layer, draft) at TP 1/2/4. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"

START_TEST(record_layout) {
  /* a block of 4 records, page padded to 5 * 576 */
  enum { BS = 4 };
  uint64_t stride = 5 * 576;
  uint8_t *buf = calloc(3, stride);
  hm_kv_cache c = {buf, stride, BS, 3};
  float kv[512], back[512];
  for (int i = 0; i < 512; i++) kv[i] = i < 64 ? 1.0f : fmt_round_bf16(0.01f * (float)(i - 200));
  uint8_t d[576], s[8];
  hm_ref_kv_record(kv, d, s);
  /* block 0: amax 1 -> rule R code ceilexp(RN(1/448)) = 2^-8 -> 119; 1 * 2^8 = 256 = e4m3 0x78 */
  ck_assert_uint_eq(s[0], 119);
  ck_assert_uint_eq(d[0], 0x78);
  ck_assert_uint_eq(s[7], 0);
  /* rope dim 448 is bf16 little endian at byte 448 */
  uint16_t b448 = fmt_bf16_from_f32(kv[448]);
  ck_assert_uint_eq(d[448], b448 & 0xff);
  ck_assert_uint_eq(d[449], b448 >> 8);
  /* slot 6 = block 1, row 2: data at 1*stride + 2*576, scales after the 4 data rows */
  ck_assert_int_eq(hm_ref_kv_insert(&c, 6, d, s), HM_OK);
  ck_assert(!memcmp(buf + stride + 2 * 576, d, 576));
  ck_assert(!memcmp(buf + stride + 4 * 576 + 2 * 8, s, 8));
  ck_assert_int_eq(hm_ref_kv_read(&c, 6, back), HM_OK);
  for (int i = 0; i < 512; i++) {
    if (i >= 448) ck_assert(back[i] == kv[i]);
    else ck_assert_msg(fabsf(back[i] - kv[i]) <= fabsf(kv[i]) * 0.0625f + 1e-6f, "%d: %g %g", i, back[i], kv[i]);
    ck_assert(tl_is_bf16(back[i]));
  }
  ck_assert_int_eq(hm_ref_kv_insert(&c, 12, d, s), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_ref_kv_read(&c, -1, back), HM_ERR_INVALID_ARG);
  free(buf);
}
END_TEST

START_TEST(key_table) {
  int64_t pos[3] = {9, 9, 300}, slot[3] = {5, -1, 7};
  int32_t swa_idx[3 * 128] = {0}, swa_len[3] = {3, 3, 128}, t2r[3] = {1, 1, 0};
  int32_t topk[3 * 512], bt[2 * 64], kt[3 * 640], klen[6];
  for (int i = 0; i < 3; i++) swa_idx[i * 128] = 100, swa_idx[i * 128 + 1] = 101, swa_idx[i * 128 + 2] = 102;
  for (int k = 0; k < 128; k++) swa_idx[2 * 128 + k] = 1000 + k;
  for (int i = 0; i < 3 * 512; i++) topk[i] = -1;
  int32_t tk[5] = {3, -1, 7, 0, 12};
  memcpy(topk, tk, sizeof tk);
  for (int b = 0; b < 64; b++) bt[b] = 50 + b, bt[64 + b] = 10 + b;
  for (int j = 0; j < 512; j++) topk[2 * 512 + j] = j; /* row 2: (300+1)/2 = 150 compressed keys */
  hm_key_args a = {3, 2, pos, slot, swa_idx, swa_len, t2r, topk, bt, 64, 4};
  ck_assert_int_eq(hm_ref_key_table(&a, kt, klen), HM_OK);
  /* row 0: ntopk = (9+1)/2 = 5; request 1's block table; bit 31 marks the compressed cache */
  int32_t want[8] = {(int32_t)(0x80000000u | (10 * 4 + 3)), -1, (int32_t)(0x80000000u | (11 * 4 + 3)),
                     (int32_t)(0x80000000u | (10 * 4 + 0)), (int32_t)(0x80000000u | (13 * 4 + 0)), 100, 101, 102};
  for (int k = 0; k < 8; k++) ck_assert_int_eq(kt[k], want[k]);
  for (int k = 8; k < 640; k++) ck_assert_int_eq(kt[k], -1);
  ck_assert_int_eq(klen[0], 8);
  ck_assert_int_eq(klen[3], 5);
  /* row 1 is dead (slot -1): no keys */
  ck_assert_int_eq(klen[1], 0);
  ck_assert_int_eq(klen[4], 0);
  ck_assert_int_eq(kt[640], -1);
  /* row 2: 150 compressed (request 0), then the 128 window slots */
  ck_assert_int_eq(klen[2], 278);
  ck_assert_int_eq(kt[2 * 640 + 149], (int32_t)(0x80000000u | (uint32_t)(bt[149 / 4] * 4 + 149 % 4)));
  ck_assert_int_eq(kt[2 * 640 + 150], 1000);
  ck_assert_int_eq(kt[2 * 640 + 277], 1127);
  ck_assert_int_eq(kt[2 * 640 + 278], -1);
  /* ratio 0: the window only */
  a.ratio = 0;
  ck_assert_int_eq(hm_ref_key_table(&a, kt, klen), HM_OK);
  ck_assert_int_eq(kt[0], 100);
  ck_assert_int_eq(klen[0], 3);
  ck_assert_int_eq(klen[3], 0);
}
END_TEST

/* q/kv norms and RoPE against double, wq_b's rotation, the qkv GEMV against decoded weights */
START_TEST(front_vs_double) {
  hm_layer_config c = tl_config("tiny", 5, 0, 0);
  const uint32_t D = c.hidden, Q = c.q_lora, S = 2;
  hm_layer_weights w;
  tl_build_group(&c, 1, 3, HM_WPART_ATTN, &w);
  float *normed = malloc(sizeof(float) * S * D), *X = malloc(sizeof(float) * S * D), *Wr = malloc(sizeof(float) * D);
  uint8_t *x8 = malloc(S * D), *x8s = malloc(S * D / 32);
  hm_gen_normal(3, "n", S * D, 0, 1, true, normed);
  hm_ref_mx8_quant(normed, S, D, 32, FMT_RULE_V, x8, x8s);
  hm_ref_mx8_dequant(x8, x8s, S, D, 32, X);
  float *qkv = malloc(sizeof(float) * S * (Q + 512));
  ck_assert_int_eq(hm_ref_qkv(&w, S, x8, x8s, qkv), HM_OK);
  const hm_tensor *wq = hm_weights_get(&w, "wqkv"), *wqs = hm_weights_get(&w, "wqkv_s");
  for (uint32_t r = 0; r < Q + 512; r += 13) {
    hm_mx8_decode_rows(wq->data, wqs->data, D, r, 1, Wr);
    for (uint32_t t = 0; t < S; t++) {
      double d = 0, m = 0;
      for (uint32_t k = 0; k < D; k++) d += (double)Wr[k] * X[t * D + k], m += fabs((double)Wr[k] * X[t * D + k]);
      ck_assert(fabs(qkv[t * (Q + 512) + r] - d) <= fabs(d) * 0x1p-8 + 1e-6 * m);
    }
  }
  float *qn = malloc(sizeof(float) * S * Q), *kn = malloc(sizeof(float) * S * 512);
  const uint16_t *qw = hm_weights_get(&w, "q_norm")->data, *kw = hm_weights_get(&w, "kv_norm")->data;
  hm_ref_q_norm(S, Q, qkv, qw, c.eps, qn);
  int64_t pos[2] = {17, 250};
  const float *cs = hm_weights_get(&w, "cos_sin")->data;
  hm_ref_kv_norm_rope(S, Q, qkv, kw, c.eps, cs, pos, kn);
  for (uint32_t t = 0; t < S; t++) {
    const float *row = qkv + t * (Q + 512);
    double ss = 0;
    for (uint32_t i = 0; i < Q; i++) ss += (double)row[i] * row[i];
    double rq = 1 / sqrt(ss / Q);
    for (uint32_t i = 0; i < Q; i++) {
      double want = row[i] * rq * fmt_bf16_to_f32(qw[i]);
      ck_assert(fabs(qn[t * Q + i] - want) <= fabs(want) * 0x1p-8 + 1e-30);
    }
    ss = 0;
    for (uint32_t i = 0; i < 512; i++) ss += (double)row[Q + i] * row[Q + i];
    double rk = 1 / sqrt(ss / 512);
    double v[512];
    for (uint32_t i = 0; i < 512; i++) v[i] = row[Q + i] * rk * fmt_bf16_to_f32(kw[i]);
    for (uint32_t i = 0; i < 448; i++) ck_assert(fabs(kn[t * 512 + i] - v[i]) <= fabs(v[i]) * 0x1p-8 + 1e-30);
    for (int j = 0; j < 32; j++) {
      double a = v[448 + 2 * j], b = v[449 + 2 * j], co = cs[pos[t] * 64 + j], si = cs[pos[t] * 64 + 32 + j];
      ck_assert(fabs(kn[t * 512 + 448 + 2 * j] - (a * co - b * si)) <= 0x1p-7 * (fabs(a) + fabs(b)) + 1e-30);
      ck_assert(fabs(kn[t * 512 + 449 + 2 * j] - (a * si + b * co)) <= 0x1p-7 * (fabs(a) + fabs(b)) + 1e-30);
    }
  }
  /* wq_b: bf16 rows, then the same pair rotation per head */
  uint8_t *qx8 = malloc(S * Q), *qx8s = malloc(S * Q / 32);
  hm_ref_mx8_quant(qn, S, Q, 32, FMT_RULE_V, qx8, qx8s);
  float *q = malloc(sizeof(float) * S * w.dims.q_rows);
  ck_assert_int_eq(hm_ref_wq_b(&w, S, qx8, qx8s, pos, q), HM_OK);
  float *XQ = malloc(sizeof(float) * S * Q);
  hm_ref_mx8_dequant(qx8, qx8s, S, Q, 32, XQ);
  const hm_tensor *wb = hm_weights_get(&w, "wq_b"), *wbs = hm_weights_get(&w, "wq_b_s");
  uint32_t h = 37, rows[2] = {h * 512 + 5, h * 512 + 448 + 10};
  for (int i = 0; i < 2; i++) {
    float wr0[256], wr1[256];
    hm_mx8_decode_rows(wb->data, wbs->data, Q, rows[i], 1, wr0);
    hm_mx8_decode_rows(wb->data, wbs->data, Q, rows[i] + 1, 1, wr1);
    for (uint32_t t = 0; t < S; t++) {
      double a = 0, b = 0;
      for (uint32_t k = 0; k < Q; k++) a += (double)wr0[k] * XQ[t * Q + k], b += (double)wr1[k] * XQ[t * Q + k];
      double e0 = a, e1 = b;
      if (i == 1) { /* a rotated pair (448 + 10, 449 + 10): j = 5 */
        double co = cs[pos[t] * 64 + 5], si = cs[pos[t] * 64 + 32 + 5];
        e0 = a * co - b * si, e1 = a * si + b * co;
      }
      double tol = 0x1p-7 * (fabs(a) + fabs(b)) + 1e-6;
      ck_assert_msg(fabs(q[t * w.dims.q_rows + rows[i]] - e0) <= tol, "row %u", rows[i]);
      ck_assert(fabs(q[t * w.dims.q_rows + rows[i] + 1] - e1) <= tol);
    }
  }
  free(normed), free(X), free(Wr), free(x8), free(x8s), free(qkv), free(qn), free(kn), free(qx8), free(qx8s), free(q), free(XQ);
  hm_weights_free(&w);
}
END_TEST

/* sparse attention with the sink against a double-precision softmax over the same keys */
START_TEST(attention_vs_double) {
  hm_layer_config c = tl_config("tiny", 5, 0, 0);
  hm_layer_weights w[2];
  tl_build_group(&c, 2, 8, HM_WPART_ATTN, w);
  hm_gen_step st;
  ck_assert_int_eq(hm_gen_step_make(&c, 2, 2, 200, 8, &st), HM_OK);
  const uint32_t S = 2, H = w[1].dims.heads;
  /* the step's own records are in the cache for this test: write them */
  for (uint32_t t = 0; t < S; t++) {
    float kv[512];
    uint8_t d[576], s8[8];
    hm_gen_normal(8, t ? "own1" : "own0", 512, 0, 1, true, kv);
    hm_ref_kv_record(kv, d, s8);
    ck_assert_int_eq(hm_ref_kv_insert(&st.in.swa, st.slot[t], d, s8), HM_OK);
  }
  int32_t kt[2 * 640], klen[4];
  hm_key_args ka = {S, c.compress_ratio, st.pos, st.slot, st.swa_idx, st.swa_len, st.t2r, st.topk, st.bt,
                    st.in.bt_stride, st.in.comp.block_size};
  ck_assert_int_eq(hm_ref_key_table(&ka, kt, klen), HM_OK);
  float *q = malloc(sizeof(float) * S * H * 512);
  hm_gen_normal(8, "q", S * H * 512, 0, 1, true, q);
  float *o64 = malloc(sizeof(float) * S * H * 512), *y64 = malloc(sizeof(float) * S * H * 512);
  float *o128 = malloc(sizeof(float) * S * H * 512), *y128 = malloc(sizeof(float) * S * H * 512);
  hm_attn_out a64 = {o64, y64, NULL, NULL, NULL}, a128 = {o128, y128, NULL, NULL, NULL};
  ck_assert_int_eq(hm_ref_attention(&w[1], S, q, kt, klen, &st.in.swa, &st.in.comp, st.pos, 64, &a64), HM_OK);
  ck_assert_int_eq(hm_ref_attention(&w[1], S, q, kt, klen, &st.in.swa, &st.in.comp, st.pos, 128, &a128), HM_OK);
  const float *sink = hm_weights_get(&w[1], "attn_sink")->data, *cs = hm_weights_get(&w[1], "cos_sin")->data;
  float K[512];
  double *ref = calloc((size_t)S * H * 512, sizeof(double));
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t h = 0; h < H; h++) {
      const float *qh = q + (t * H + h) * 512;
      double sc[640], mx = sink[h], den;
      for (int k = 0; k < klen[t]; k++) {
        int32_t v = kt[t * 640 + k];
        sc[k] = -INFINITY;
        if (v == -1) continue;
        hm_ref_kv_read((uint32_t)v >> 31 ? &st.in.comp : &st.in.swa, (uint32_t)v & 0x7fffffff, K);
        double d = 0;
        for (int i = 0; i < 512; i++) d += (double)qh[i] * K[i];
        sc[k] = d / sqrt(512.0);
        mx = fmax(mx, sc[k]);
      }
      den = exp(sink[h] - mx);
      for (int k = 0; k < klen[t]; k++) den += exp(sc[k] - mx);
      for (int k = 0; k < klen[t]; k++) {
        int32_t v = kt[t * 640 + k];
        if (v == -1) continue;
        hm_ref_kv_read((uint32_t)v >> 31 ? &st.in.comp : &st.in.swa, (uint32_t)v & 0x7fffffff, K);
        double p = exp(sc[k] - mx) / den;
        for (int i = 0; i < 512; i++) ref[(t * H + h) * 512 + i] += p * K[i];
      }
    }
  /* bf16 p in PV and bf16 chunk partials: about 2^-9 relative each */
  float *reff = malloc(sizeof(float) * S * H * 512);
  for (uint32_t i = 0; i < S * H * 512; i++) reff[i] = (float)ref[i];
  double e64 = tl_rel_l2(o64, reff, S * H * 512), e128 = tl_rel_l2(o128, reff, S * H * 512);
  fprintf(stderr, "attention vs double: rel-L2 %.2e (64-key chunks) %.2e (128)\n", e64, e128);
  ck_assert(e64 < 5e-3 && e128 < 5e-3);
  /* inverse RoPE: y rotates o's rope pairs back by the row's position */
  for (uint32_t t = 0; t < S; t++)
    for (int j = 0; j < 32; j++) {
      float a = o64[(t * H + 3) * 512 + 448 + 2 * j], b = o64[(t * H + 3) * 512 + 449 + 2 * j];
      float co = cs[st.pos[t] * 64 + j], si = cs[st.pos[t] * 64 + 32 + j];
      ck_assert(y64[(t * H + 3) * 512 + 448 + 2 * j] == a * co + b * si);
      ck_assert(y64[(t * H + 3) * 512 + 449 + 2 * j] == b * co - a * si);
      ck_assert(y64[(t * H + 3) * 512 + j] == o64[(t * H + 3) * 512 + j]);
    }
  /* a row with no keys attends only the sink: o = 0 */
  klen[1] = 0;
  ck_assert_int_eq(hm_ref_attention(&w[1], S, q, kt, klen, &st.in.swa, &st.in.comp, st.pos, 128, &a128), HM_OK);
  for (uint32_t i = 0; i < H * 512; i++) ck_assert(o128[H * 512 + i] == 0.0f);
  ck_assert_int_eq(hm_ref_attention(&w[1], S, q, kt, klen, &st.in.swa, &st.in.comp, st.pos, 32, &a128), HM_ERR_INVALID_ARG);
  free(q), free(o64), free(y64), free(o128), free(y128), free(ref), free(reff);
  hm_gen_step_free(&st);
  tl_free_group(w, 2);
}
END_TEST

/* wo_a (4 contiguous K quarters) and wo_b against double */
START_TEST(wo_vs_double) {
  hm_layer_config c = tl_config("tiny", 5, 0, 0);
  hm_layer_weights w[4];
  tl_build_group(&c, 4, 12, HM_WPART_ATTN, w);
  const hm_layer_weights *r = &w[2];
  const uint32_t S = 2, XO = r->dims.heads * 512, OR = r->dims.o_rows, D = c.hidden;
  float *y = malloc(sizeof(float) * S * XO), *X = malloc(sizeof(float) * S * XO), *z = malloc(sizeof(float) * S * OR);
  uint8_t *xo = malloc(S * XO), *xos = malloc(S * XO / 32), *x8b = malloc(S * OR), *x8bs = malloc(S * OR / 32);
  hm_gen_normal(12, "y", S * XO, 0, 0.3f, false, y);
  hm_ref_mx8_quant(y, S, XO, 32, FMT_RULE_V, xo, xos);
  hm_ref_mx8_dequant(xo, xos, S, XO, 32, X);
  ck_assert_int_eq(hm_ref_wo_a(r, S, xo, xos, z, x8b, x8bs), HM_OK);
  const hm_tensor *wa = hm_weights_get(r, "wo_a"), *was = hm_weights_get(r, "wo_a_s");
  float *Wr = malloc(sizeof(float) * 4096);
  for (uint32_t row = 0; row < OR; row += 37) {
    uint32_t g = row / c.o_lora;
    hm_mx8_decode_rows(wa->data, was->data, 4096, row, 1, Wr);
    for (uint32_t t = 0; t < S; t++) {
      double d = 0, m = 0;
      for (int k = 0; k < 4096; k++) d += (double)Wr[k] * X[t * XO + g * 4096 + k], m += fabs((double)Wr[k] * X[t * XO + g * 4096 + k]);
      ck_assert_msg(fabs(z[t * OR + row] - d) <= fabs(d) * 0x1p-8 + 1e-6 * m, "wo_a row %u", row);
    }
  }
  float *part = malloc(sizeof(float) * S * D), *XB = malloc(sizeof(float) * S * OR);
  ck_assert_int_eq(hm_ref_wo_b(r, S, x8b, x8bs, part), HM_OK);
  hm_ref_mx8_dequant(x8b, x8bs, S, OR, 32, XB);
  const hm_tensor *wb = hm_weights_get(r, "wo_b"), *wbs = hm_weights_get(r, "wo_b_s");
  for (uint32_t row = 0; row < D; row += 53) {
    hm_mx8_decode_rows(wb->data, wbs->data, OR, row, 1, Wr);
    for (uint32_t t = 0; t < S; t++) {
      double d = 0, m = 0;
      for (uint32_t k = 0; k < OR; k++) d += (double)Wr[k] * XB[t * OR + k], m += fabs((double)Wr[k] * XB[t * OR + k]);
      ck_assert(fabs(part[t * D + row] - d) <= fabs(d) * 0x1p-8 + 1e-6 * m);
    }
  }
  free(y), free(X), free(z), free(xo), free(xos), free(x8b), free(x8bs), free(Wr), free(part), free(XB);
  tl_free_group(w, 4);
}
END_TEST

/* ---------------------------------------------------------------- whole steps */

static void layer_run(const hm_layer_config *c, uint32_t tp, const hm_gen_step *base, uint64_t seed, hm_tensor_set *tr,
                      hm_source *engram) {
  hm_layer_weights w[4];
  tl_build_group(c, tp, seed, HM_WPART_FFN | HM_WPART_ATTN | (engram ? HM_WPART_ENGRAM : 0), w);
  hm_gen_step st;
  ck_assert_int_eq(hm_gen_step_copy(base, &st), HM_OK);
  st.in.engram_table = engram;
  hm_tset_init(tr);
  hm_status s = hm_ref_layer_step(w, tp, &st.in, NULL, NULL, tr);
  ck_assert_msg(s == HM_OK, "layer step: %s", hm_errmsg());
  hm_gen_step_free(&st);
  tl_free_group(w, tp);
}

static void compare_tp(const hm_layer_config *c, uint32_t S, uint32_t reqs, uint32_t ctx, hm_source *engram) {
  hm_gen_step base;
  ck_assert_int_eq(hm_gen_step_make(c, S, reqs, ctx, 51, &base), HM_OK);
  hm_tensor_set t1, t2, t4;
  layer_run(c, 1, &base, 51, &t1, engram);
  layer_run(c, 2, &base, 51, &t2, engram);
  layer_run(c, 4, &base, 51, &t4, engram);
  const uint32_t D = c->hidden;
  /* K1 is replicated: bit-identical at every TP */
  const char *same[] = {"k1.seam.res", "k1.seam.normed", "k1.qkv", "k1.qn", "k1.kv", "k1.record", "k1.kt", "k1.klen"};
  for (unsigned i = 0; i < sizeof same / sizeof *same; i++) {
    hm_tensor *a = hm_tset_find(&t1, same[i]), *b = hm_tset_find(&t4, same[i]);
    ck_assert_msg(a && b && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes), "%s", same[i]);
  }
  /* the heads of rank r at TP4 are heads 16r.. of TP1: q and the attention output bit for bit
   * (the chunking differs only for TP2 <= 25 rows) */
  const float *q1 = tl_f32(&t1, "rank0.q"), *q4 = tl_f32(&t4, "rank3.q"), *o1 = tl_f32(&t1, "rank0.attn.o"),
              *o4 = tl_f32(&t4, "rank3.attn.o");
  for (uint32_t t = 0; t < S; t++) {
    ck_assert(!memcmp(q4 + (size_t)t * 16 * 512, q1 + ((size_t)t * 64 + 48) * 512, 16 * 512 * sizeof(float)));
    ck_assert(!memcmp(o4 + (size_t)t * 16 * 512, o1 + ((size_t)t * 64 + 48) * 512, 16 * 512 * sizeof(float)));
  }
  /* the output: the parts differ by where bf16 roundings fall (and TP2 <= 25 rows chunks by 64
   * keys): the attention output by ~3e-3. The MoE then sees slightly different normed rows; a
   * token whose top-k set changes (a near tie of its k-th and k+1-th scores) is exempt, as in
   * the reference tests (spec/mono.md §6.1); the others agree within 2e-2, the residual streams
   * (bf16(stream + update)) within 5e-3. Where the chunking differs (TP2, <= 25 rows: 64 keys
   * against 128) o moves by ~3e-3, and the two MXFP8 re-quantisations after it (XO, X8B) turn
   * that into e4m3 rounding flips of 2^-4 of an element: ~3e-2 on the attention output, so the
   * bounds there are 5e-2. */
  const hm_tensor_set *tn[2] = {&t2, &t4};
  for (int v = 0; v < 2; v++) {
    double a = tl_rel_l2(tl_f32(tn[v], "ffn.x"), tl_f32(&t1, "ffn.x"), (uint64_t)S * D);
    double r = tl_rel_l2(tl_f32(tn[v], "out.res"), tl_f32(&t1, "out.res"), (uint64_t)S * 4 * D);
    const int32_t *i1 = tl_i32(&t1, "router.ids"), *in_ = tl_i32(tn[v], "router.ids");
    uint32_t exempt = 0;
    double worst = 0;
    for (uint32_t t = 0; t < S; t++) {
      uint32_t same_set = 1;
      for (uint32_t j = 0; j < c->topk; j++) {
        uint32_t found = 0;
        for (uint32_t i = 0; i < c->topk; i++) found |= i1[t * c->topk + j] == in_[t * c->topk + i];
        same_set &= found;
      }
      if (!same_set) {
        exempt++;
        continue;
      }
      double e = tl_rel_l2(tl_f32(tn[v], "out.x") + (size_t)t * D, tl_f32(&t1, "out.x") + (size_t)t * D, D);
      worst = e > worst ? e : worst;
    }
    fprintf(stderr, "layer %d TP%d vs TP1: attention out rel-L2 %.2e, residual %.2e, x worst token %.2e (%u of %u exempt)\n",
            c->layer, v ? 4 : 2, a, r, worst, exempt, S);
    bool rechunked = hm_attn_chunk_keys(v ? 4 : 2, S, false) != hm_attn_chunk_keys(1, S, false);
    double bound = rechunked ? 5e-2 : 2e-2;
    ck_assert(a < bound && r < 5e-3 && worst < bound && exempt * 2 <= S);
  }
  hm_tset_free(&t1), hm_tset_free(&t2), hm_tset_free(&t4);
  hm_gen_step_free(&base);
}

START_TEST(step_reuse_ratio2) {
  hm_layer_config c = tl_config("tiny", 5, 0, 0);
  compare_tp(&c, 4, 2, 300, NULL);
}
END_TEST

START_TEST(step_ratio1_short) {
  /* ratio 1, 60 rows of context: fewer keys than one 128 chunk, the window not yet full */
  hm_layer_config c = tl_config("tiny", 33, 0, 0);
  compare_tp(&c, 2, 1, 60, NULL);
}
END_TEST

START_TEST(step_first_layer) {
  hm_layer_config c = tl_config("tiny", 0, 0, 0);
  hm_gen_step base;
  ck_assert_int_eq(hm_gen_step_make(&c, 3, 3, 40, 61, &base), HM_OK);
  base.in.res = NULL; /* the entry: the embedding only */
  hm_tensor_set t;
  layer_run(&c, 2, &base, 61, &t, NULL);
  const uint32_t D = c.hidden;
  /* every stream starts as the embedding; pre = e0, so the collapse is stream 0 */
  const float *res = tl_f32(&t, "k1.seam.res"), *lin = tl_f32(&t, "k1.seam.lin");
  for (uint32_t s = 0; s < 3; s++)
    for (uint32_t h = 0; h < 4; h++) ck_assert(!memcmp(res + (s * 4 + h) * D, base.x + s * D, D * sizeof(float)));
  ck_assert(!memcmp(lin, base.x, 3 * D * sizeof(float)));
  ck_assert(tl_f32(&t, "k1.pre_in")[0] == 1.0f && tl_f32(&t, "k1.pre_in")[1] == 0.0f);
  hm_tset_free(&t);
  hm_gen_step_free(&base);
}
END_TEST

START_TEST(step_draft) {
  /* a DSpark draft layer: window attention, 32 experts top-3 */
  hm_layer_config c = tl_config("tiny", 40, 0, 0);
  hm_gen_step base;
  ck_assert_int_eq(hm_gen_step_make(&c, 5, 1, 90, 71, &base), HM_OK);
  hm_tensor_set t;
  layer_run(&c, 4, &base, 71, &t, NULL);
  ck_assert_uint_eq(hm_tset_find(&t, "router.ids")->shape[1], 3);
  const int32_t *klen = tl_i32(&t, "k1.klen");
  ck_assert_int_eq(klen[0], 91);
  ck_assert_int_eq(klen[5], 0);
  hm_tset_free(&t);
  hm_gen_step_free(&base);
}
END_TEST

START_TEST(step_engram) {
  /* layer 1: mHC post, Engram from the generator's table, then the settled seam */
  hm_layer_config c = tl_config("tiny", 1, 0, 0);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 81), HM_OK);
  hm_source table = hm_gen_source(&g);
  hm_gen_step base;
  ck_assert_int_eq(hm_gen_step_make(&c, 2, 1, 20, 81, &base), HM_OK);
  hm_tensor_set t;
  layer_run(&c, 1, &base, 81, &t, &table);
  const uint32_t D = c.hidden;
  const float *gate = tl_f32(&t, "engram.gate");
  for (int i = 0; i < 8; i++) ck_assert(gate[i] > 0.0f && gate[i] < 1.0f);
  /* the seam started from the settled residual: R_new = the Engram output */
  float *post = malloc(sizeof(float) * 2 * 4 * D);
  hm_ref_mhc_post(2, D, base.x, base.res, base.post, base.comb, post);
  ck_assert(memcmp(post, tl_f32(&t, "k1.res_in"), sizeof(float) * 2 * 4 * D) != 0);
  ck_assert(!memcmp(tl_f32(&t, "k1.res_in"), tl_f32(&t, "k1.seam.res"), sizeof(float) * 2 * 4 * D));
  /* a masked (image) token keeps its stream: gate 0 */
  hm_gen_step m;
  ck_assert_int_eq(hm_gen_step_copy(&base, &m), HM_OK);
  uint8_t mask[2] = {0, 1};
  m.in.engram_mask = mask;
  hm_layer_weights w;
  tl_build_group(&c, 1, 81, HM_WPART_ENGRAM, &w);
  memcpy(post, base.res, sizeof(float) * 2 * 4 * D);
  float gates[8];
  ck_assert_int_eq(hm_ref_engram(&w, 2, &table, base.hashes, mask, post, NULL, gates), HM_OK);
  ck_assert(gates[0] == 0.0f && gates[3] == 0.0f && gates[4] > 0.0f);
  ck_assert(!memcmp(post, base.res, sizeof(float) * 4 * D));
  hm_weights_free(&w);
  free(post);
  hm_gen_step_free(&m);
  hm_tset_free(&t);
  hm_gen_step_free(&base);
  hm_gen_free(&g);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-ref-attn");
  TCase *tc = tcase_create("attn");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, record_layout);
  tcase_add_test(tc, key_table);
  tcase_add_test(tc, front_vs_double);
  tcase_add_test(tc, attention_vs_double);
  tcase_add_test(tc, wo_vs_double);
  tcase_add_test(tc, step_reuse_ratio2);
  tcase_add_test(tc, step_ratio1_short);
  tcase_add_test(tc, step_first_layer);
  tcase_add_test(tc, step_draft);
  tcase_add_test(tc, step_engram);
  suite_add_tcase(s, tc);
  return s;
}
