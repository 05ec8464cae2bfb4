/* tests/layer/test_weights.c: the checkpoint schema, the seeded generator, the kernel layouts of
 * spec/mono.md §4 (hand-computed offsets and bijections), TP slicing and padding, RoPE tables. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"
#include "layouts.h"

/* ---------------------------------------------------------------- layouts */

START_TEST(layout_offsets) {
  /* GUGU: 16-row groups, gate group 2b then up group 2b+1 */
  ck_assert_uint_eq(hm_w13_row(0, false), 0);
  ck_assert_uint_eq(hm_w13_row(15, false), 15);
  ck_assert_uint_eq(hm_w13_row(16, false), 32);
  ck_assert_uint_eq(hm_w13_row(0, true), 16);
  ck_assert_uint_eq(hm_w13_row(17, true), 49);
  /* (16,16) shuffle: group*8K + step*1024 + lane*16 + (k%32)/2, lane = 16*(kk/32) + r%16 */
  ck_assert_uint_eq(hm_fp4_shuffle_offset(256, 0, 0), 0);
  ck_assert_uint_eq(hm_fp4_shuffle_offset(256, 1, 0), 16);
  ck_assert_uint_eq(hm_fp4_shuffle_offset(256, 0, 2), 1);
  ck_assert_uint_eq(hm_fp4_shuffle_offset(256, 0, 32), 256);
  ck_assert_uint_eq(hm_fp4_shuffle_offset(256, 0, 128), 1024);
  ck_assert_uint_eq(hm_fp4_shuffle_offset(256, 16, 0), 2048);
  ck_assert_uint_eq(hm_fp4_shuffle_offset(256, 17, 100), 2048 + 49 * 16 + 2);
  /* the dword address of §4.2: expert*rows*K/8 + group*2K + step*256 + 4*lane */
  ck_assert_uint_eq(hm_fp4_shuffle_offset(5120, 35, 4096 + 64) / 4, 2 * 2 * 5120 + 32 * 256 + 4 * (2 * 16 + 3));
  /* shuffle_scale */
  ck_assert_uint_eq(hm_scale_shuffle_index(0, 0, 8), 0);
  ck_assert_uint_eq(hm_scale_shuffle_index(16, 0, 8), 1);
  ck_assert_uint_eq(hm_scale_shuffle_index(0, 4, 8), 2);
  ck_assert_uint_eq(hm_scale_shuffle_index(1, 0, 8), 4);
  ck_assert_uint_eq(hm_scale_shuffle_index(0, 1, 8), 64);
  ck_assert_uint_eq(hm_scale_shuffle_index(32, 0, 8), 256);
  ck_assert_uint_eq(hm_scale_shuffle_index(0, 8, 16), 256);
  ck_assert_uint_eq(hm_scale_shuffle_index(32, 0, 16), 512);
}
END_TEST

/* both layouts are permutations of their matrix */
START_TEST(layout_bijective) {
  const uint32_t rows = 64, K = 512;
  uint8_t *seen = calloc(rows * K / 2, 1);
  uint32_t bad = 0; /* counted, not asserted per element: Check's asserts are slow in loops */
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t k = 0; k < K; k += 2) {
      uint64_t o = hm_fp4_shuffle_offset(K, r, k);
      bad += o >= rows * K / 2 || seen[o];
      if (o < rows * K / 2) seen[o] = 1;
    }
  ck_assert_uint_eq(bad, 0);
  free(seen);
  const uint32_t cols = 24;
  seen = calloc(rows * cols, 1);
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t c = 0; c < cols; c++) {
      uint64_t o = hm_scale_shuffle_index(r, c, cols);
      bad += o >= rows * cols || seen[o];
      if (o < rows * cols) seen[o] = 1;
    }
  ck_assert_uint_eq(bad, 0);
  free(seen);
}
END_TEST

/* ---------------------------------------------------------------- schema and generator */

static const hm_ckpt_entry *find(hm_ckpt_entry *l, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(l[i].name, name)) return &l[i];
  return NULL;
}

START_TEST(schema) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_ckpt_entry *l;
  uint32_t n;
  ck_assert_int_eq(hm_ckpt_schema(&c, &l, &n), HM_OK);
  const hm_ckpt_entry *e = find(l, n, "layers.3.ffn.experts.5.w2.weight");
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(e->dtype, HM_DT_I8);
  ck_assert_uint_eq(e->shape[0], 1024);
  ck_assert_uint_eq(e->shape[1], 128);
  e = find(l, n, "layers.3.ffn.experts.63.w1.scale");
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(e->dtype, HM_DT_E8M0);
  ck_assert_uint_eq(e->shape[0], 256);
  ck_assert_uint_eq(e->shape[1], 32);
  ck_assert_ptr_null(find(l, n, "layers.3.ffn.experts.64.w1.scale"));
  e = find(l, n, "layers.3.attn.wo_a.weight");
  ck_assert_uint_eq(e->shape[0], 8 * 256);
  ck_assert_uint_eq(e->shape[1], 4096);
  ck_assert_ptr_null(find(l, n, "layers.3.attn.compressor.wkv.weight"));
  free(l);
  c = tl_config("tiny", 2, 0, 0); /* ratio 2 kv + index source */
  ck_assert_int_eq(hm_ckpt_schema(&c, &l, &n), HM_OK);
  ck_assert_ptr_nonnull(find(l, n, "layers.2.attn.compressor.wgate.weight"));
  ck_assert_ptr_nonnull(find(l, n, "layers.2.attn.indexer.wk.weight"));
  ck_assert_ptr_nonnull(find(l, n, "layers.2.attn.indexer.wq_b.scale"));
  free(l);
  c = tl_config("tiny", 20, 0, 0); /* ratio 1: wkv only */
  ck_assert_int_eq(hm_ckpt_schema(&c, &l, &n), HM_OK);
  ck_assert_ptr_nonnull(find(l, n, "layers.20.attn.compressor.wkv.weight"));
  ck_assert_ptr_null(find(l, n, "layers.20.attn.compressor.wgate.weight"));
  free(l);
  c = tl_config("tiny", 24, 0, 0); /* reindex: no wk, own wq_b */
  ck_assert_int_eq(hm_ckpt_schema(&c, &l, &n), HM_OK);
  ck_assert_ptr_null(find(l, n, "layers.24.attn.indexer.wk.weight"));
  ck_assert_ptr_nonnull(find(l, n, "layers.24.attn.indexer.weights_proj.weight"));
  free(l);
  c = tl_config("v41-flash", 14, 0, 0);
  ck_assert_int_eq(hm_ckpt_schema(&c, &l, &n), HM_OK);
  e = find(l, n, "layers.14.engram.embed.weight");
  ck_assert_ptr_nonnull(e);
  ck_assert(e->huge);
  ck_assert_uint_eq(e->shape[0], 384016682ull);
  ck_assert_uint_eq(find(l, n, "layers.14.engram.wkv.weight")->shape[0], 5 * 5120);
  free(l);
  c = tl_config("v41-flash", 40, 0, 0);
  ck_assert_int_eq(hm_ckpt_schema(&c, &l, &n), HM_OK);
  ck_assert_ptr_nonnull(find(l, n, "mtp.0.ffn.experts.127.w3.weight"));
  free(l);
}
END_TEST

/* any region of a generated tensor equals that part of the whole tensor; seeds differ */
START_TEST(generator_regions) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_gen g, g2;
  ck_assert_int_eq(hm_gen_init(&g, &c, 7), HM_OK);
  ck_assert_int_eq(hm_gen_init(&g2, &c, 8), HM_OK);
  hm_source s = hm_gen_source(&g), s2 = hm_gen_source(&g2);
  const char *names[] = {"layers.3.ffn.experts.9.w2.weight", "layers.3.ffn.experts.9.w2.scale",
                         "layers.3.attn.wq_b.weight", "layers.3.attn.wq_b.scale", "layers.3.ffn.gate.weight",
                         "layers.3.hc_ffn_fn"};
  for (unsigned i = 0; i < sizeof names / sizeof *names; i++) {
    hm_dtype dt;
    uint32_t nd;
    uint64_t sh[2];
    ck_assert_int_eq(s.info(s.ctx, names[i], &dt, &nd, sh), HM_OK);
    size_t es = hm_dtype_size(dt), bytes = sh[0] * sh[1] * es;
    uint8_t *whole = malloc(bytes), *other = malloc(bytes);
    ck_assert_int_eq(s.read(s.ctx, names[i], 0, sh[0], 0, sh[1], whole), HM_OK);
    ck_assert_int_eq(s2.read(s2.ctx, names[i], 0, sh[0], 0, sh[1], other), HM_OK);
    ck_assert(memcmp(whole, other, bytes) != 0);
    uint64_t r0 = sh[0] / 3, nr = sh[0] / 4 + 1, c0 = sh[1] / 2, nc = sh[1] - sh[1] / 2;
    uint8_t *part = malloc(nr * nc * es);
    ck_assert_int_eq(s.read(s.ctx, names[i], r0, nr, c0, nc, part), HM_OK);
    for (uint64_t r = 0; r < nr; r++)
      ck_assert(!memcmp(part + r * nc * es, whole + ((r0 + r) * sh[1] + c0) * es, nc * es));
    free(whole), free(other), free(part);
  }
  uint8_t b;
  ck_assert_int_eq(s.read(s.ctx, "layers.3.nothing", 0, 1, 0, 1, &b), HM_ERR_NOT_FOUND);
  ck_assert_int_eq(s.read(s.ctx, "layers.3.ffn.gate.bias", 0, 1, 64, 1, &b), HM_ERR_INVALID_ARG);
  hm_gen_free(&g);
  hm_gen_free(&g2);
}
END_TEST

static double stddev(const float *x, uint64_t n) {
  double s = 0, s2 = 0;
  for (uint64_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
  return sqrt(s2 / n - (s / n) * (s / n));
}

/* the generated layer has the statistics docs/decisions.md states */
START_TEST(generator_stats) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w;
  tl_build_group(&c, 1, 11, HM_WPART_FFN | HM_WPART_ATTN, &w);
  const uint32_t D = c.hidden;
  float *row = malloc(sizeof(float) * 64 * D);
  hm_w13_decode(&w, 3, false, 0, 64, row);
  double sd = stddev(row, 64ull * D);
  ck_assert_msg(fabs(sd * sqrt(D) - 1.0) < 0.3, "w1 std %g, want ~1/sqrt(D)", sd);
  const hm_tensor *t = hm_weights_get(&w, "wq_b");
  const hm_tensor *ts = hm_weights_get(&w, "wq_b_s");
  hm_mx8_decode_rows(t->data, ts->data, c.q_lora, 0, 64, row);
  sd = stddev(row, 64ull * c.q_lora);
  ck_assert_msg(fabs(sd * sqrt(c.q_lora) - 1.0) < 0.3, "wq_b std %g", sd);
  const uint16_t *gw = hm_weights_get(&w, "gate_w")->data;
  for (uint32_t i = 0; i < 64 * D; i++) row[i] = fmt_bf16_to_f32(gw[i]);
  sd = stddev(row, 64ull * D);
  ck_assert_msg(fabs(sd * sqrt(D) - 1.0) < 0.1, "gate_w std %g", sd);
  const uint16_t *nw = hm_weights_get(&w, "ffn_norm")->data;
  uint32_t neg = 0;
  for (uint32_t i = 0; i < D; i++) neg += fmt_bf16_to_f32(nw[i]) < 0.0f;
  ck_assert_uint_eq(neg, 0);
  /* the mHC comb base favours the identity */
  const float *base = hm_weights_get(&w, "hc_ffn_base")->data;
  ck_assert(base[8] > 0.5f && base[8 + 5] > 0.5f && fabsf(base[9]) < 1.5f);
  free(row);
  hm_weights_free(&w);
}
END_TEST

/* ---------------------------------------------------------------- TP slicing */

/* rank r's decoded gate/up/w2 rows equal TP1's rows of its slice, bit for bit; the padding
 * decodes to zero; and TP1 equals the checkpoint tensors dequantised directly */
START_TEST(tp_slices_experts) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t D = c.hidden;
  hm_layer_weights w1, w4[4];
  tl_build_group(&c, 1, 5, HM_WPART_FFN, &w1);
  tl_build_group(&c, 4, 5, HM_WPART_FFN, w4);
  const uint32_t Ir = w4[0].dims.inter, I4 = w4[0].dims.inter_pad, I1 = w1.dims.inter_pad;
  ck_assert_uint_eq(Ir, 64);
  ck_assert_uint_eq(I4, 128);
  ck_assert_uint_eq(I1, 256);
  float *a = malloc(sizeof(float) * D * I1), *b = malloc(sizeof(float) * D * I4);
  for (uint32_t e = 0; e < c.experts; e += 21) {
    for (int up = 0; up < 2; up++) {
      hm_w13_decode(&w1, e, up, 0, I1, a);
      for (uint32_t r = 0; r < 4; r++) {
        hm_w13_decode(&w4[r], e, up, 0, I4, b);
        ck_assert(!memcmp(b, a + (size_t)r * Ir * D, sizeof(float) * Ir * D));
        uint64_t nz = 0;
        for (uint64_t i = (uint64_t)Ir * D; i < (uint64_t)I4 * D; i++) nz += b[i] != 0.0f;
        ck_assert_uint_eq(nz, 0);
      }
    }
    hm_w2_decode(&w1, e, 0, 16, a);
    for (uint32_t r = 0; r < 4; r++) {
      hm_w2_decode(&w4[r], e, 0, 16, b);
      uint32_t nz = 0;
      for (uint32_t row = 0; row < 16; row++) {
        ck_assert(!memcmp(b + row * I4, a + row * I1 + r * Ir, sizeof(float) * Ir));
        for (uint32_t k = Ir; k < I4; k++) nz += b[row * I4 + k] != 0.0f;
      }
      ck_assert_uint_eq(nz, 0);
    }
  }
  /* TP1 against the checkpoint tensors themselves: w3 row 37 and w2 row 700 of expert 50 */
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 5), HM_OK);
  hm_source s = hm_gen_source(&g);
  uint8_t pk[512], sc[32];
  ck_assert_int_eq(s.read(s.ctx, "layers.3.ffn.experts.50.w3.weight", 37, 1, 0, D / 2, pk), HM_OK);
  ck_assert_int_eq(s.read(s.ctx, "layers.3.ffn.experts.50.w3.scale", 37, 1, 0, D / 32, sc), HM_OK);
  hm_w13_decode(&w1, 50, true, 37, 1, a);
  uint32_t diff = 0;
  for (uint32_t k = 0; k < D; k++)
    diff += a[k] != fmt_e2m1_decode(fmt_e2m1_nibble(pk[k / 2], k & 1)) * fmt_e8m0_decode(sc[k / 32]);
  ck_assert_uint_eq(diff, 0);
  ck_assert_int_eq(s.read(s.ctx, "layers.3.ffn.experts.50.w2.weight", 700, 1, 0, 128, pk), HM_OK);
  ck_assert_int_eq(s.read(s.ctx, "layers.3.ffn.experts.50.w2.scale", 700, 1, 0, 8, sc), HM_OK);
  hm_w2_decode(&w1, 50, 700, 1, a);
  for (uint32_t k = 0; k < 256; k++)
    diff += a[k] != fmt_e2m1_decode(fmt_e2m1_nibble(pk[k / 2], k & 1)) * fmt_e8m0_decode(sc[k / 32]);
  ck_assert_uint_eq(diff, 0);
  hm_gen_free(&g);
  free(a), free(b);
  hm_weights_free(&w1);
  tl_free_group(w4, 4);
}
END_TEST

/* dense slices: shared expert rows/cols, wq_b rows, wo_a rows, wo_b cols, the sink */
START_TEST(tp_slices_dense) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t D = c.hidden;
  hm_layer_weights w1, w2[2];
  tl_build_group(&c, 1, 9, HM_WPART_FFN | HM_WPART_ATTN, &w1);
  tl_build_group(&c, 2, 9, HM_WPART_FFN | HM_WPART_ATTN, w2);
  const uint32_t Sh1 = w1.dims.shared_inter, Sh = w2[0].dims.shared_inter;
  float *a = malloc(sizeof(float) * 4096 * 4), *b = malloc(sizeof(float) * 4096 * 4);
  const hm_tensor *s1 = hm_weights_get(&w1, "sgu"), *s1s = hm_weights_get(&w1, "sgu_s");
  ck_assert_uint_eq(s1->shape[0], 2 * Sh1);
  for (uint32_t r = 0; r < 2; r++) {
    const hm_tensor *t = hm_weights_get(&w2[r], "sgu"), *ts = hm_weights_get(&w2[r], "sgu_s");
    ck_assert_uint_eq(t->shape[0], 2 * Sh);
    /* gate row 5 and up row 40 of the rank's shard */
    hm_mx8_decode_rows(t->data, ts->data, D, 5, 1, b);
    hm_mx8_decode_rows(s1->data, s1s->data, D, r * Sh + 5, 1, a);
    ck_assert(!memcmp(a, b, sizeof(float) * D));
    hm_mx8_decode_rows(t->data, ts->data, D, Sh + 40, 1, b);
    hm_mx8_decode_rows(s1->data, s1s->data, D, Sh1 + r * Sh + 40, 1, a);
    ck_assert(!memcmp(a, b, sizeof(float) * D));
    /* sw2 row 77, the rank's K columns */
    t = hm_weights_get(&w2[r], "sw2"), ts = hm_weights_get(&w2[r], "sw2_s");
    hm_mx8_decode_rows(t->data, ts->data, Sh, 77, 1, b);
    hm_mx8_decode_rows(hm_weights_get(&w1, "sw2")->data, hm_weights_get(&w1, "sw2_s")->data, Sh1, 77, 1, a);
    ck_assert(!memcmp(a + r * Sh, b, sizeof(float) * Sh));
    /* wq_b: heads of the rank (512 rows each); wo_a: its groups' rows; wo_b: its K columns */
    t = hm_weights_get(&w2[r], "wq_b"), ts = hm_weights_get(&w2[r], "wq_b_s");
    hm_mx8_decode_rows(t->data, ts->data, c.q_lora, 600, 1, b);
    hm_mx8_decode_rows(hm_weights_get(&w1, "wq_b")->data, hm_weights_get(&w1, "wq_b_s")->data, c.q_lora,
                       r * 32 * 512 + 600, 1, a);
    ck_assert(!memcmp(a, b, sizeof(float) * c.q_lora));
    t = hm_weights_get(&w2[r], "wo_a"), ts = hm_weights_get(&w2[r], "wo_a_s");
    hm_mx8_decode_rows(t->data, ts->data, 4096, 300, 1, b);
    hm_mx8_decode_rows(hm_weights_get(&w1, "wo_a")->data, hm_weights_get(&w1, "wo_a_s")->data, 4096,
                       r * 4 * 256 + 300, 1, a);
    ck_assert(!memcmp(a, b, sizeof(float) * 4096));
    t = hm_weights_get(&w2[r], "wo_b"), ts = hm_weights_get(&w2[r], "wo_b_s");
    ck_assert_uint_eq(t->shape[1], 1024);
    hm_mx8_decode_rows(t->data, ts->data, 1024, 999, 1, b);
    hm_mx8_decode_rows(hm_weights_get(&w1, "wo_b")->data, hm_weights_get(&w1, "wo_b_s")->data, 2048, 999, 1, a);
    ck_assert(!memcmp(a + r * 1024, b, sizeof(float) * 1024));
    const float *sk = hm_weights_get(&w2[r], "attn_sink")->data, *sk1 = hm_weights_get(&w1, "attn_sink")->data;
    ck_assert(!memcmp(sk, sk1 + r * 32, 32 * sizeof(float)));
    /* replicated tensors are whole */
    ck_assert(!memcmp(hm_weights_get(&w2[r], "wqkv")->data, hm_weights_get(&w1, "wqkv")->data,
                      (size_t)(c.q_lora + 512) * D));
  }
  free(a), free(b);
  hm_weights_free(&w1);
  tl_free_group(w2, 2);
}
END_TEST

/* a source whose info disagrees with the layer is refused, with the name in the message */
static hm_source inner;
static hm_status lying_info(void *ctx, const char *name, hm_dtype *dt, uint32_t *nd, uint64_t sh[2]) {
  hm_status st = inner.info(ctx, name, dt, nd, sh);
  if (st == HM_OK && strstr(name, "experts.2.w2.weight")) sh[1] += 16;
  return st;
}

START_TEST(build_errors) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 1), HM_OK);
  inner = hm_gen_source(&g);
  hm_source lying = inner;
  lying.info = lying_info;
  hm_layer_weights w;
  memset(&w, 0x5a, sizeof w);
  ck_assert_int_eq(hm_weights_build(&c, 2, 0, &lying, NULL, &w), HM_ERR_FORMAT);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "experts.2.w2.weight"));
  ck_assert_int_eq(hm_weights_build(&c, 2, 2, &inner, NULL, &w), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_weights_build(&c, 3, 0, &inner, NULL, &w), HM_ERR_INVALID_ARG);
  hm_build_opts o = {.parts = HM_WPART_ENGRAM};
  ck_assert_int_eq(hm_weights_build(&c, 1, 0, &inner, &o, &w), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_weights_build(NULL, 1, 0, &inner, NULL, &w), HM_ERR_INVALID_ARG);
  hm_gen_free(&g);
  ck_assert_ptr_null(hm_weights_get(NULL, "w13"));
}
END_TEST

/* full V4.1 dims at TP4 with two experts: the §1.2 / §4.2 shapes */
START_TEST(full_dims_shapes) {
  hm_layer_config c = tl_config("v41-flash", 3, 2, 1);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 3), HM_OK);
  hm_source s = hm_gen_source(&g);
  hm_build_opts o = {.parts = HM_WPART_FFN};
  hm_layer_weights w;
  ck_assert_int_eq(hm_weights_build(&c, 4, 3, &s, &o, &w), HM_OK);
  const hm_tensor *t = hm_weights_get(&w, "w13");
  ck_assert_uint_eq(t->shape[0], 2);
  ck_assert_uint_eq(t->shape[1], 1280);
  ck_assert_uint_eq(t->shape[2], 2560);
  ck_assert_uint_eq(hm_weights_get(&w, "w13_s")->nbytes, 2ull * 1280 * 160);
  t = hm_weights_get(&w, "w2");
  ck_assert_uint_eq(t->shape[1], 5120);
  ck_assert_uint_eq(t->shape[2], 320);
  ck_assert_uint_eq(hm_weights_get(&w, "w2_s")->nbytes, 2ull * 5120 * 24);
  ck_assert_uint_eq(hm_weights_get(&w, "sgu")->shape[0], 1152);
  ck_assert_uint_eq(hm_weights_get(&w, "sw2")->shape[1], 576);
  ck_assert_uint_eq(hm_weights_get(&w, "sw2_s")->shape[1], 18);
  ck_assert_uint_eq(hm_weights_get(&w, "gate_w")->shape[0], 2);
  /* the padded gate columns 576..639 are zero bytes with code 0 */
  const uint8_t *m = hm_weights_get(&w, "w13")->data, *sc = hm_weights_get(&w, "w13_s")->data;
  for (uint32_t i = 576; i < 640; i += 7) {
    uint32_t R = hm_w13_row(i, false);
    ck_assert_uint_eq(m[hm_fp4_shuffle_offset(5120, R, 1000)], 0);
    ck_assert_uint_eq(sc[hm_scale_shuffle_index(R, 31, 160)], 0);
  }
  ck_assert_ptr_null(hm_tset_find(&w.set, "wq_b"));
  hm_weights_free(&w);
  hm_gen_free(&g);
}
END_TEST

/* ---------------------------------------------------------------- RoPE */

START_TEST(rope) {
  hm_layer_config c = tl_config("tiny", 0, 0, 0);
  float *t = malloc(sizeof(float) * 100 * 64);
  ck_assert_int_eq(hm_rope_table(&c, 100, t), HM_OK);
  for (int i = 0; i < 32; i++) {
    double f = pow(10000.0, -2.0 * i / 64.0);
    ck_assert(fabs(t[99 * 64 + i] - cos(99.0 * f)) < 2e-5);
    ck_assert(fabs(t[99 * 64 + 32 + i] - sin(99.0 * f)) < 2e-5);
  }
  ck_assert(t[0] == 1.0f && t[32] == 0.0f);
  /* ratio > 0: theta 160000, YaRN ramp over [15, 25]: f_i below 15 kept, above 25 divided by 16 */
  c = tl_config("tiny", 5, 0, 0);
  ck_assert_int_eq(hm_rope_table(&c, 100, t), HM_OK);
  for (int i = 0; i < 32; i++) {
    double f = pow(160000.0, -2.0 * i / 64.0), ramp = (i - 15) / 10.0;
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    double fy = f / 16 * ramp + f * (1 - ramp);
    ck_assert_msg(fabs(t[64 + i] - cos(fy)) < 2e-6, "i %d", i);
    ck_assert(fabs(t[50 * 64 + 32 + i] - sin(50 * fy)) < 2e-5);
  }
  ck_assert_int_eq(hm_rope_table(&c, 0, t), HM_ERR_INVALID_ARG);
  free(t);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-weights");
  TCase *tc = tcase_create("weights");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, layout_offsets);
  tcase_add_test(tc, layout_bijective);
  tcase_add_test(tc, schema);
  tcase_add_test(tc, generator_regions);
  tcase_add_test(tc, generator_stats);
  tcase_add_test(tc, tp_slices_experts);
  tcase_add_test(tc, tp_slices_dense);
  tcase_add_test(tc, build_errors);
  tcase_add_test(tc, full_dims_shapes);
  tcase_add_test(tc, rope);
  suite_add_tcase(s, tc);
  return s;
}
