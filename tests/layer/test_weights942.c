/* tests/layer/test_weights942.c: the gfx942 weight copies of spec/mono.md §4.4: their layouts against
 * the spec's text and AMD's CDNA3 MFMA tables, FNUZ bytes over every code, values against gfx950's. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../device/format_tables.h"
#include "formats.h"
#include "helpers.h"
#include "layouts.h"

/* ---------------------------------------------------------------- the spec's layouts, written out */

/* Dense tile-major (§4.4) by walking the copy in storage order as the spec words it: per 16-row
 * tile, per 128-K step, half h (blocks 2h, 2h+1), lane 16j + r, block 2h + t, byte q: element
 * (row 16 tile + r, K 128 step + 32 (2h + t) + 8j + q). where[off] = row * Kp + k. */
static void dense_by_spec(uint32_t rows, uint32_t Kp, uint64_t *where) {
  uint64_t off = 0;
  for (uint32_t tile = 0; tile < rows / 16; tile++)
    for (uint32_t step = 0; step < Kp / 128; step++)
      for (uint32_t h = 0; h < 2; h++)
        for (uint32_t lane = 0; lane < 64; lane++)
          for (uint32_t t = 0; t < 2; t++)
            for (uint32_t q = 0; q < 8; q++) {
              uint32_t r = 16 * tile + lane % 16, k = 128 * step + 32 * (2 * h + t) + 8 * (lane / 16) + q;
              where[off++] = (uint64_t)r * Kp + k;
            }
}

/* FP4 tile-major (§4.4 fp4_tile_major): per 16-row tile, per 64-B step, lane 16j + r, block i of
 * the step, byte q: row r's byte 64 step + 16 i + 4 j + q; then a last 32-B step the same with two
 * blocks. where[off] = row * K/2 + byte. */
static void fp4_by_spec(uint32_t rows, uint32_t K, uint64_t *where) {
  uint32_t kb = K / 2, full = kb / 64 * 64;
  uint64_t off = 0;
  for (uint32_t tile = 0; tile < rows / 16; tile++) {
    for (uint32_t step = 0; step < full / 64; step++)
      for (uint32_t lane = 0; lane < 64; lane++)
        for (uint32_t i = 0; i < 4; i++)
          for (uint32_t q = 0; q < 4; q++)
            where[off++] = (uint64_t)(16 * tile + lane % 16) * kb + 64 * step + 16 * i + 4 * (lane / 16) + q;
    if (kb > full)
      for (uint32_t lane = 0; lane < 64; lane++)
        for (uint32_t i = 0; i < 2; i++)
          for (uint32_t q = 0; q < 4; q++)
            where[off++] = (uint64_t)(16 * tile + lane % 16) * kb + full + 16 * i + 4 * (lane / 16) + q;
  }
}

/* the library's offset function for both layouts, so one checker walks either */
typedef uint64_t (*offset_fn)(uint32_t K, uint32_t r, uint32_t k);
static uint64_t dense_off(uint32_t Kp, uint32_t r, uint32_t k) { return hm_dense942_offset(Kp, r, k); }
static uint64_t fp4_off(uint32_t K, uint32_t r, uint32_t byte) { return hm_fp4_942_offset(K, r, 2 * byte); }

/* every element at exactly one offset inside the matrix (a bijection), and that offset the one the
 * spec's walk puts it at; n = elements (bytes) a row */
static void check_layout(uint32_t rows, uint32_t K, uint32_t n, offset_fn f, const uint64_t *where) {
  uint64_t total = (uint64_t)rows * n, bad = 0, wrong = 0;
  uint8_t *seen = calloc(total, 1);
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t k = 0; k < n; k++) {
      uint64_t o = f(K, r, k);
      bad += o >= total || seen[o];
      if (o < total) {
        seen[o] = 1;
        wrong += where[o] != (uint64_t)r * n + k;
      }
    }
  ck_assert_msg(bad == 0, "%llu elements share an offset or fall outside (rows %u K %u)", (unsigned long long)bad,
                rows, K);
  ck_assert_msg(wrong == 0, "%llu elements not where the spec's order puts them (rows %u K %u)",
                (unsigned long long)wrong, rows, K);
  free(seen);
}

START_TEST(layout942_dense) {
  /* hand-computed from §4.4: tile 16 Kp, step 2048, half 1024, lane 16, block-in-half 8 */
  ck_assert_uint_eq(hm_dense942_offset(256, 0, 0), 0);
  ck_assert_uint_eq(hm_dense942_offset(256, 1, 0), 16);
  ck_assert_uint_eq(hm_dense942_offset(256, 0, 7), 7);
  ck_assert_uint_eq(hm_dense942_offset(256, 0, 8), 256);    /* lane 16 */
  ck_assert_uint_eq(hm_dense942_offset(256, 0, 32), 8);     /* block 1: second 8 B of lane 0 */
  ck_assert_uint_eq(hm_dense942_offset(256, 0, 64), 1024);  /* block 2: the second KB */
  ck_assert_uint_eq(hm_dense942_offset(256, 0, 128), 2048); /* step 1 */
  ck_assert_uint_eq(hm_dense942_offset(256, 16, 0), 4096);  /* tile 1 = 16 rows x 256 */
  ck_assert_uint_eq(hm_dense942_offset(256, 5, 58), 53 * 16 + 8 + 2);
  /* row 37: tile 2, r 5; K 600: step 4, block 2 (second KB, first 8 B), lane group 3 */
  ck_assert_uint_eq(hm_dense942_offset(640, 37, 600), 2 * 16 * 640 + 4 * 2048 + 1024 + (16 * 3 + 5) * 16);
  ck_assert_uint_eq(hm_dense942_kpad(576), 640);
  ck_assert_uint_eq(hm_dense942_kpad(5120), 5120);
  ck_assert_uint_eq(hm_dense942_kpad(64), 128);
  const uint32_t shapes[][2] = {{32, 128}, {64, 384}, {48, 640}};
  for (unsigned s = 0; s < 3; s++) {
    uint32_t rows = shapes[s][0], Kp = shapes[s][1];
    uint64_t *where = malloc(sizeof(uint64_t) * rows * Kp);
    dense_by_spec(rows, Kp, where);
    check_layout(rows, Kp, Kp, dense_off, where);
    free(where);
  }
}
END_TEST

START_TEST(layout942_fp4) {
  ck_assert_uint_eq(hm_w13_942_row(0, false), 0);
  ck_assert_uint_eq(hm_w13_942_row(0, true), 1);
  ck_assert_uint_eq(hm_w13_942_row(17, false), 34);
  ck_assert_uint_eq(hm_w13_942_row(575, true), 1151);
  /* K 256 (two 64-B steps): tile 8K, step 1024, lane 16, block-in-step 4 */
  ck_assert_uint_eq(hm_fp4_942_offset(256, 0, 0), 0);
  ck_assert_uint_eq(hm_fp4_942_offset(256, 0, 1), 0);
  ck_assert_uint_eq(hm_fp4_942_offset(256, 0, 2), 1);
  ck_assert_uint_eq(hm_fp4_942_offset(256, 0, 8), 256);  /* byte 4: lane group 1 */
  ck_assert_uint_eq(hm_fp4_942_offset(256, 0, 32), 4);   /* block 1: dword 1 of lane 0 */
  ck_assert_uint_eq(hm_fp4_942_offset(256, 3, 128), 1024 + 3 * 16);
  ck_assert_uint_eq(hm_fp4_942_offset(256, 16, 0), 2048);
  /* K 192: one 64-B step, then the 32-B tail at 16 x 64, 8 B a lane */
  ck_assert_uint_eq(hm_fp4_942_offset(192, 0, 128), 1024);
  ck_assert_uint_eq(hm_fp4_942_offset(192, 2, 136), 1024 + 18 * 8);
  ck_assert_uint_eq(hm_fp4_942_offset(192, 0, 160), 1024 + 4);
  ck_assert_uint_eq(hm_fp4_942_offset(192, 16, 0), 16 * 96);
  /* w2 at TP4: 576 columns, 288 B a row = 4 steps + a tail */
  ck_assert_uint_eq(hm_fp4_942_offset(576, 0, 512), 16 * 256);
  ck_assert_uint_eq(hm_fp4_942_offset(576, 15, 575), 16 * 256 + (48 + 15) * 8 + 4 + 3);
  /* codes in rounds of 8 blocks: tile 16 cols, round 128, row 8 */
  ck_assert_uint_eq(hm_codes942_index(0, 0, 16), 0);
  ck_assert_uint_eq(hm_codes942_index(0, 1, 16), 1);
  ck_assert_uint_eq(hm_codes942_index(1, 0, 16), 8);
  ck_assert_uint_eq(hm_codes942_index(0, 8, 16), 128);
  ck_assert_uint_eq(hm_codes942_index(16, 0, 16), 256);
  ck_assert_uint_eq(hm_codes942_index(17, 9, 16), 256 + 128 + 8 + 1);
  const uint32_t shapes[][2] = {{16, 128}, {32, 256}, {32, 192}, {48, 576}, {16, 1024}};
  for (unsigned s = 0; s < 5; s++) {
    uint32_t rows = shapes[s][0], K = shapes[s][1];
    uint64_t *where = malloc(sizeof(uint64_t) * rows * K / 2);
    fp4_by_spec(rows, K, where);
    check_layout(rows, K, K / 2, fp4_off, where);
    free(where);
  }
  /* the codes' order: a bijection, each round's 16 x 8 codes row after row */
  const uint32_t rows = 48, cols = 24;
  uint8_t *seen = calloc(rows * cols, 1);
  uint32_t bad = 0;
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t c = 0; c < cols; c++) {
      uint64_t o = hm_codes942_index(r, c, cols);
      bad += o >= rows * cols || seen[o];
      if (o < rows * cols) seen[o] = 1;
      bad += o != (uint64_t)(r / 16) * 16 * cols + (c / 8) * 128 + (r % 16) * 8 + c % 8;
    }
  ck_assert_uint_eq(bad, 0);
  free(seen);
}
END_TEST

/* ---------------------------------------------------------------- against AMD's CDNA3 tables */

/* v_mfma_f32_16x16x32_fp8_fp8's A operand (tests/data/mfma/cdna3, AMD's Matrix Instruction
 * Calculator): lane[m][k] and byte[m][k] (0..7 over v0, v1) of A[m][k] */
static void load_mfma_a(uint32_t lane[16][32], uint32_t byte[16][32]) {
  FILE *f = ft_open("mfma/cdna3", "v_mfma_f32_16x16x32_fp8_fp8.A.csv");
  char line[4096];
  unsigned n = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] < '0' || line[0] > '9') continue;
    uint32_t m = (uint32_t)strtoul(line, NULL, 10);
    ck_assert_uint_lt(m, 16);
    char *p = strchr(line, ',');
    for (uint32_t k = 0; k < 32; k++) {
      unsigned v, l, hi, lo;
      ck_assert_msg(p && sscanf(p, ",v%u{%u}.[%u:%u]", &v, &l, &hi, &lo) == 4, "row %u col %u: %s", m, k, line);
      lane[m][k] = l;
      byte[m][k] = 4 * v + lo / 8;
      p = strchr(p + 1, ',');
      n++;
    }
  }
  fclose(f);
  ck_assert_uint_eq(n, 16 * 32);
}

/* In both copies a lane's bytes of a 32-wide K block are its MFMA A operand: the dense copy's 8 B
 * of block b are exactly lane's v0:v1 bytes; an FP4 dword holds the lane's 8 K values (expanded
 * in-kernel to those 8 bytes, spec §2.6). */
START_TEST(layout942_is_mfma_operand) {
  uint32_t lane[16][32], byte[16][32];
  load_mfma_a(lane, byte);
  uint32_t bad = 0;
  for (uint32_t b = 0; b < 4; b++)
    for (uint32_t m = 0; m < 16; m++)
      for (uint32_t k = 0; k < 32; k++) {
        uint64_t o = hm_dense942_offset(256, m, 128 + 32 * b + k) - 2048; /* step 1 of the tile */
        bad += o / 1024 != b / 2 || (o % 1024) / 16 != lane[m][k] || (o % 16) / 8 != b % 2 || o % 8 != byte[m][k];
        o = hm_fp4_942_offset(256, m, 128 + 32 * b + k) - 1024;
        bad += (o % 1024) / 16 != lane[m][k] || (o % 16) / 4 != b;
        /* and the byte inside the dword holds K pair (8j + 2q, +1), in the lane's byte order */
        bad += (o % 4) != byte[m][k] / 2;
      }
  ck_assert_uint_eq(bad, 0);
}
END_TEST

/* ---------------------------------------------------------------- a source that rewrites tensors */

/* The generator's layer seen through a checkpoint as vLLM leaves it on gfx942 or with planted
 * faults: dense weights dequantised to bf16, codes repeated over rows, one value off, a code
 * raised, every byte of one tensor set to its position mod 256. */
static struct {
  hm_source inner;
  bool bf16, row_codes;
  const char *base; /* the tensor the faults below touch ("layers.3.attn.wq_b") */
  int64_t off_r, off_c; /* a bf16 value moved by one ulp (-1: none) */
  int64_t disagree_r;   /* a repeated-code row changed (-1: none) */
  int code_at_00;       /* block (0,0)'s code (-1: as generated) */
  bool all_codes, f32;  /* weight bytes = (row*K + col) mod 256; weight claimed F32 */
} rw;

static bool is_dense(const char *name, char *base, const char *suffix) {
  const char *dot = strrchr(name, '.');
  if (!dot || strcmp(dot, suffix)) return false;
  snprintf(base, HM_TENSOR_NAME, "%.*s", (int)(dot - name), name);
  char w[HM_TENSOR_NAME + 8];
  snprintf(w, sizeof w, "%s.weight", base);
  hm_dtype dt;
  uint32_t nd;
  uint64_t sh[2];
  return rw.inner.info(rw.inner.ctx, w, &dt, &nd, sh) == HM_OK && dt == HM_DT_E4M3;
}

static hm_status rw_info(void *ctx, const char *name, hm_dtype *dt, uint32_t *nd, uint64_t sh[2]) {
  hm_status st = rw.inner.info(ctx, name, dt, nd, sh);
  char base[HM_TENSOR_NAME];
  if (st != HM_OK) return st;
  if (rw.bf16 && is_dense(name, base, ".weight")) *dt = HM_DT_BF16;
  if (rw.f32 && is_dense(name, base, ".weight") && !strcmp(base, rw.base)) *dt = HM_DT_F32;
  if (rw.row_codes && is_dense(name, base, ".scale")) sh[0] *= 32;
  return st;
}

static hm_status rw_read(void *ctx, const char *name, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc, void *out) {
  char base[HM_TENSOR_NAME], sn[HM_TENSOR_NAME + 8];
  hm_status st;
  if (is_dense(name, base, ".scale")) {
    uint64_t b0 = rw.row_codes ? r0 / 32 : r0, nb = rw.row_codes ? (r0 + nr - 1) / 32 - b0 + 1 : nr;
    uint8_t *blk = malloc(nb * nc);
    if ((st = rw.inner.read(ctx, name, b0, nb, c0, nc, blk)) != HM_OK) return st;
    if (rw.code_at_00 >= 0 && !strcmp(base, rw.base) && b0 == 0 && c0 == 0) blk[0] = (uint8_t)rw.code_at_00;
    for (uint64_t r = 0; r < nr; r++) {
      uint64_t row = r0 + r, b = rw.row_codes ? row / 32 - b0 : r;
      memcpy((uint8_t *)out + r * nc, blk + b * nc, nc);
      if (rw.row_codes && (int64_t)row == rw.disagree_r && !strcmp(base, rw.base)) ((uint8_t *)out)[r * nc] ^= 1;
    }
    free(blk);
    return HM_OK;
  }
  if (!is_dense(name, base, ".weight") || !(rw.bf16 || rw.all_codes)) return rw.inner.read(ctx, name, r0, nr, c0, nc, out);
  /* the e4m3 bytes (or the planted pattern), and for bf16 their codes */
  uint8_t *q = malloc(nr * nc);
  if ((st = rw.inner.read(ctx, name, r0, nr, c0, nc, q)) != HM_OK) return st;
  hm_dtype dt;
  uint32_t nd;
  uint64_t sh[2];
  rw.inner.info(ctx, name, &dt, &nd, sh);
  bool target = !strcmp(base, rw.base);
  if (rw.all_codes && target)
    for (uint64_t r = 0; r < nr; r++)
      for (uint64_t c = 0; c < nc; c++) q[r * nc + c] = (uint8_t)(((r0 + r) * sh[1] + c0 + c) % 256);
  if (!rw.bf16) {
    memcpy(out, q, nr * nc);
    free(q);
    return HM_OK;
  }
  snprintf(sn, sizeof sn, "%s.scale", base);
  uint64_t b0 = r0 / 32, nb = (r0 + nr - 1) / 32 - b0 + 1, cb0 = c0 / 32, ncb = (c0 + nc - 1) / 32 - cb0 + 1;
  uint8_t *codes = malloc(nb * ncb);
  if ((st = rw.inner.read(ctx, sn, b0, nb, cb0, ncb, codes)) != HM_OK) return st;
  uint16_t *o = out;
  for (uint64_t r = 0; r < nr; r++)
    for (uint64_t c = 0; c < nc; c++) {
      uint8_t code = codes[((r0 + r) / 32 - b0) * ncb + (c0 + c) / 32 - cb0];
      float v = fmt_e4m3_decode(q[r * nc + c]) * fmt_e8m0_decode(code);
      o[r * nc + c] = fmt_bf16_from_f32(v);
      if (target && (int64_t)(r0 + r) == rw.off_r && (int64_t)(c0 + c) == rw.off_c) o[r * nc + c] += 1;
    }
  free(q), free(codes);
  return HM_OK;
}

static void rw_reset(hm_source inner) {
  memset(&rw, 0, sizeof rw);
  rw.inner = inner;
  rw.base = "layers.3.attn.wq_b";
  rw.off_r = rw.off_c = rw.disagree_r = -1;
  rw.code_at_00 = -1;
}

static hm_status build942(const hm_layer_config *c, uint32_t rank, uint32_t parts, hm_layer_weights *w) {
  hm_source s = {rw.inner.ctx, rw_info, rw_read};
  hm_build_opts o = {.parts = parts, .rope_positions = 64, .arch = HM_ARCH_GFX942};
  return hm_weights_build(c, 4, rank, &s, &o, w);
}

/* ---------------------------------------------------------------- dense copies */

static const char *const dense_names[] = {"wqkv", "wq_b", "wo_a", "wo_b", "sgu", "sw2", "idx_wq_b", "engram_wkv"};

/* a gfx942 dense copy against the gfx950 tensor of the same name (whose columns are the logical K) */
static void compare_dense(const hm_layer_weights *a, const hm_layer_weights *b, const char *name) {
  char sn[64];
  snprintf(sn, sizeof sn, "%s_s", name);
  const hm_tensor *t5 = hm_weights_get(a, name), *s5 = hm_weights_get(a, sn);
  const hm_tensor *t2 = hm_weights_get(b, name), *s2 = hm_weights_get(b, sn);
  ck_assert_ptr_nonnull(t5);
  ck_assert_ptr_nonnull(t2);
  const uint32_t N = (uint32_t)t5->shape[0], K = (uint32_t)t5->shape[1], Kp = hm_dense942_kpad(K);
  ck_assert_msg(t2->dtype == HM_DT_U8 && t2->shape[0] == N && t2->shape[1] == Kp, "%s: %s [%llu, %llu]", name,
                hm_dtype_st_name(t2->dtype), (unsigned long long)t2->shape[0], (unsigned long long)t2->shape[1]);
  ck_assert(s2->dtype == HM_DT_E8M0 && s2->shape[0] == N / 32 && s2->shape[1] == Kp / 32);
  float *x = malloc(sizeof(float) * 32 * K), *y = malloc(sizeof(float) * 32 * K);
  uint64_t diff = 0, nan = 0, codes = 0, pad = 0;
  const uint8_t *c5 = s5->data, *c2 = s2->data, *b2 = t2->data;
  for (uint32_t r = 0; r < N; r += 32) {
    hm_mx8_decode_rows(t5->data, s5->data, K, r, 32, x);
    hm_mx8_942_decode_rows(t2->data, s2->data, K, r, 32, y);
    for (uint64_t i = 0; i < 32ull * K; i++) diff += x[i] != y[i] && !(isnan(x[i]) && isnan(y[i]));
    for (uint32_t cb = 0; cb < Kp / 32; cb++) {
      uint8_t c = c2[(r / 32) * (Kp / 32) + cb];
      codes += cb < K / 32 ? c != c5[(r / 32) * (K / 32) + cb] + 1 : c != 128;
    }
    for (uint32_t rr = r; rr < r + 32; rr++)
      for (uint32_t k = K; k < Kp; k++) pad += b2[hm_dense942_offset(Kp, rr, k)] != 0;
  }
  for (uint64_t i = 0; i < t2->nbytes; i++) nan += b2[i] == 0x80;
  ck_assert_msg(diff == 0, "%s: %llu values differ from gfx950's", name, (unsigned long long)diff);
  ck_assert_msg(codes == 0, "%s: %llu codes are not gfx950's + 1 (padding 128)", name, (unsigned long long)codes);
  ck_assert_msg(pad == 0, "%s: %llu padding bytes not zero", name, (unsigned long long)pad);
  ck_assert_msg(nan == 0, "%s: %llu FNUZ NaN bytes (OCP -0 kept?)", name, (unsigned long long)nan);
  free(x), free(y);
}

/* every dense linear of a layer with attention, select and Engram parts: the gfx942 copy holds the
 * gfx950 copy's values (so every element landed and reads back), codes + 1, K padding zero */
START_TEST(dense942_values) {
  hm_layer_config c = tl_config("tiny", 14, 0, 0); /* kv + index source, Engram */
  hm_layer_weights w5[4], w2[4];
  tl_build_group(&c, 4, 21, HM_WPART_ALL, w5);
  tl_build_group_arch(&c, 4, 21, HM_WPART_ALL, HM_ARCH_GFX942, w2);
  for (uint32_t r = 0; r < 4; r++) {
    ck_assert_int_eq(w2[r].arch, HM_ARCH_GFX942);
    for (unsigned i = 0; i < sizeof dense_names / sizeof *dense_names; i++) compare_dense(&w5[r], &w2[r], dense_names[i]);
    /* the tensors that are not MX copies are the same bytes */
    const char *same[] = {"gate_w", "bias", "ffn_norm", "hc_ffn_fn", "attn_sink", "cos_sin", "cmp_wkv", "idx_wk"};
    for (unsigned i = 0; i < sizeof same / sizeof *same; i++) {
      const hm_tensor *a = hm_weights_get(&w5[r], same[i]), *b = hm_weights_get(&w2[r], same[i]);
      ck_assert(a && b && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes));
    }
  }
  /* sw2's K at TP4 is 64 (tiny) -> 128: the padding case */
  ck_assert_uint_eq(hm_weights_get(&w2[0], "sw2")->shape[1], 128);
  tl_free_group(w5, 4);
  tl_free_group(w2, 4);
}
END_TEST

/* every OCP e4m3 code through a built copy, against tests/data's e4m3fn and e4m3fnuz tables: the
 * FNUZ byte is worth half the OCP byte (its code is one more), -0 becomes 0, a NaN stays NaN */
START_TEST(fnuz942_every_code) {
  struct ft_decode ocp, fnuz;
  ft_load_decode("e4m3fn", &ocp);
  ft_load_decode("e4m3fnuz", &fnuz);
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 4), HM_OK);
  rw_reset(hm_gen_source(&g));
  rw.all_codes = true;
  hm_layer_weights w;
  ck_assert_int_eq(build942(&c, 1, HM_WPART_ATTN, &w), HM_OK);
  const hm_tensor *t = hm_weights_get(&w, "wq_b");
  const uint32_t K = c.q_lora, Kp = hm_dense942_kpad(K), rows = w.dims.q_rows;
  uint32_t seen[256] = {0}, bad = 0;
  for (uint32_t r = 0; r < rows; r += 37)
    for (uint32_t k = 0; k < K; k++) {
      uint32_t code = (uint32_t)(((uint64_t)(rows + r) * K + k) % 256); /* rank 1's rows start at `rows` */
      uint8_t b = ((const uint8_t *)t->data)[hm_dense942_offset(Kp, r, k)];
      seen[code]++;
      if (ocp.kind[code] == FT_NAN) {
        bad += fnuz.kind[b] != FT_NAN;
      } else {
        bad += fnuz.kind[b] != FT_FINITE || ft_f32(fnuz.bits[b]) * 2.0f != ft_f32(ocp.bits[code]);
        bad += code == 0x80 && b != 0x00; /* OCP -0: FNUZ has one zero */
      }
    }
  for (int i = 0; i < 256; i++) ck_assert_msg(seen[i] > 0, "code %02x never reached", i);
  ck_assert_uint_eq(bad, 0);
  hm_weights_free(&w);
  hm_gen_free(&g);
}
END_TEST

/* every packed e2m1 byte: -0 nibbles become +0, every nibble keeps its value (tests/data's e2m1
 * table), so gfx942's FP4 -> FNUZ expansion never meets a -0 */
START_TEST(fp4_negzero_every_byte) {
  struct ft_decode e2;
  ft_load_decode("e2m1", &e2);
  ck_assert_uint_eq(e2.n, 16);
  uint32_t bad = 0, changed = 0;
  for (unsigned b = 0; b < 256; b++) {
    uint8_t r = fmt_fp4x2_drop_negzero((uint8_t)b);
    for (int h = 0; h < 2; h++) {
      unsigned in = h ? b >> 4 : b & 0xf, out = h ? (unsigned)r >> 4 : r & 0xfu;
      bad += out == 8 || ft_f32(e2.bits[out]) != ft_f32(e2.bits[in]);
      bad += in != 8 && out != in; /* only -0 is rewritten */
      changed += out != in;
    }
  }
  ck_assert_uint_eq(bad, 0);
  ck_assert_uint_eq(changed, 32); /* 16 bytes with a low -0, 16 with a high one */
}
END_TEST

/* a checkpoint vLLM dequantised at load (bf16 weights, codes repeated over each block's rows)
 * gives the very same copy as the e4m3 checkpoint: every dense tensor byte for byte */
START_TEST(dense942_from_dequantised) {
  hm_layer_config c = tl_config("tiny", 2, 0, 0); /* with the indexer's wq_b */
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 6), HM_OK);
  rw_reset(hm_gen_source(&g));
  rw.base = "layers.2.attn.wq_b";
  hm_layer_weights a, b;
  ck_assert_int_eq(build942(&c, 2, HM_WPART_FFN | HM_WPART_ATTN | HM_WPART_SELECT, &a), HM_OK);
  rw.bf16 = rw.row_codes = true;
  hm_status st = build942(&c, 2, HM_WPART_FFN | HM_WPART_ATTN | HM_WPART_SELECT, &b);
  ck_assert_msg(st == HM_OK, "%s", hm_errmsg());
  ck_assert_uint_eq(a.set.count, b.set.count);
  for (uint32_t i = 0; i < a.set.count; i++) {
    const hm_tensor *x = &a.set.t[i], *y = hm_tset_find(&b.set, x->name);
    ck_assert_msg(y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes), "%s differs", x->name);
  }
  hm_weights_free(&a);
  hm_weights_free(&b);
  hm_gen_free(&g);
}
END_TEST

/* ---------------------------------------------------------------- routed experts */

static uint32_t negzero_nibbles(const uint8_t *p, uint64_t n) {
  uint32_t z = 0;
  for (uint64_t i = 0; i < n; i++) z += (p[i] & 0xf) == 8, z += (p[i] >> 4) == 8;
  return z;
}

/* The TP4 routed copies of a target (64 experts) and a draft (32) tiny layer: shapes with only the
 * real columns, every value of every expert equal to gfx950's (whose padding decodes to zero), no -0
 * nibble left though the source has them, and spot bytes read at the spec's offsets by hand */
START_TEST(experts942_values) {
  const int32_t layers[] = {3, 40};
  for (unsigned li = 0; li < 2; li++) {
    hm_layer_config c = tl_config("tiny", layers[li], 0, 0);
    hm_layer_weights w5[4], w2[4];
    tl_build_group(&c, 4, 8, HM_WPART_FFN, w5);
    tl_build_group_arch(&c, 4, 8, HM_WPART_FFN, HM_ARCH_GFX942, w2);
    const uint32_t D = c.hidden, E = c.experts, Ir = w2[0].dims.inter, I = w2[0].dims.inter_pad;
    ck_assert_uint_eq(E, li ? 32 : 64);
    ck_assert_uint_eq(Ir, 64);
    const hm_tensor *t = hm_weights_get(&w2[0], "w13");
    ck_assert(t->shape[0] == E && t->shape[1] == 2 * Ir && t->shape[2] == D / 2);
    t = hm_weights_get(&w2[0], "w2");
    ck_assert(t->shape[0] == E && t->shape[1] == D && t->shape[2] == Ir / 2);
    ck_assert_uint_eq(hm_weights_get(&w2[0], "w13_s")->nbytes, (uint64_t)E * 2 * Ir * (D / 32));
    ck_assert_uint_eq(hm_weights_get(&w2[0], "w2_s")->nbytes, (uint64_t)E * D * (Ir / 32));
    float *x = malloc(sizeof(float) * I * D), *y = malloc(sizeof(float) * I * D);
    uint64_t diff = 0;
    uint32_t neg5 = 0;
    for (uint32_t r = 0; r < 4; r++) {
      for (uint32_t e = 0; e < E; e++) {
        for (int up = 0; up < 2; up++) {
          hm_w13_decode(&w5[r], e, up, 0, I, x);
          hm_w13_decode(&w2[r], e, up, 0, I, y);
          for (uint64_t i = 0; i < (uint64_t)I * D; i++) diff += x[i] != y[i];
        }
        hm_w2_decode(&w5[r], e, 0, D, x);
        hm_w2_decode(&w2[r], e, 0, D, y);
        for (uint64_t i = 0; i < (uint64_t)I * D; i++) diff += x[i] != y[i];
      }
      ck_assert_uint_eq(negzero_nibbles(hm_weights_get(&w2[r], "w13")->data, hm_weights_get(&w2[r], "w13")->nbytes), 0);
      ck_assert_uint_eq(negzero_nibbles(hm_weights_get(&w2[r], "w2")->data, hm_weights_get(&w2[r], "w2")->nbytes), 0);
      neg5 += negzero_nibbles(hm_weights_get(&w5[r], "w13")->data, hm_weights_get(&w5[r], "w13")->nbytes);
    }
    ck_assert_msg(diff == 0, "layer %d: %llu routed values differ from gfx950's", c.layer, (unsigned long long)diff);
    ck_assert_msg(neg5 > 0, "the source has no -0 nibble: the rewrite is untested");
    /* spot bytes against the checkpoint: rank 3, expert 5, up row 37 (w13 row 75), K pair 300;
     * w2 row 900, K pair 44 (the second K block's dword 1: lane 16 + 900%16) */
    hm_gen g;
    ck_assert_int_eq(hm_gen_init(&g, &c, 8), HM_OK);
    hm_source s = hm_gen_source(&g);
    char n[96];
    uint8_t pk;
    snprintf(n, sizeof n, "%sffn.experts.5.w3.weight", c.layer >= 40 ? "mtp.0." : "layers.3.");
    ck_assert_int_eq(s.read(s.ctx, n, 3 * Ir + 37, 1, 150, 1, &pk), HM_OK);
    const uint8_t *m = (const uint8_t *)hm_weights_get(&w2[3], "w13")->data + 5ull * 2 * Ir * D / 2;
    /* tile 75/16 = 4 (8 K a tile), step 300/128 = 2, byte 150 % 64 = 22: block 1, lane 16*1 + 11, byte 2 */
    ck_assert_uint_eq(m[4ull * 8 * D + 2 * 1024 + (16 + 11) * 16 + 1 * 4 + 2], fmt_fp4x2_drop_negzero(pk));
    snprintf(n, sizeof n, "%sffn.experts.5.w3.scale", c.layer >= 40 ? "mtp.0." : "layers.3.");
    uint8_t sc32[32];
    ck_assert_int_eq(s.read(s.ctx, n, 3 * Ir + 37, 1, 0, D / 32, sc32), HM_OK);
    const uint8_t *ms = (const uint8_t *)hm_weights_get(&w2[3], "w13_s")->data + 5ull * 2 * Ir * (D / 32);
    for (uint32_t cb = 0; cb < D / 32; cb++) /* tile 4, round cb/8 of 128 codes, row 11, block cb%8 */
      ck_assert_uint_eq(ms[4ull * 16 * (D / 32) + (cb / 8) * 128 + 11 * 8 + cb % 8], sc32[cb]);
    snprintf(n, sizeof n, "%sffn.experts.5.w2.weight", c.layer >= 40 ? "mtp.0." : "layers.3.");
    ck_assert_int_eq(s.read(s.ctx, n, 900, 1, 3 * Ir / 2 + 22, 1, &pk), HM_OK);
    m = (const uint8_t *)hm_weights_get(&w2[3], "w2")->data + 5ull * D * Ir / 2;
    /* Ir 64: 32 B a row, all tail: tile 56 (16 x 32 B), lane 16*1 + 4, block 1, byte 2 */
    ck_assert_uint_eq(m[56ull * 16 * 32 + (16 + 4) * 8 + 4 + 2], fmt_fp4x2_drop_negzero(pk));
    hm_gen_free(&g);
    free(x), free(y);
    tl_free_group(w5, 4);
    tl_free_group(w2, 4);
  }
}
END_TEST

/* V4.1's own widths with two experts: target layer 3 and draft layer 40 (128 experts in the model) */
START_TEST(full942_shapes) {
  const int32_t layers[] = {3, 40};
  for (unsigned li = 0; li < 2; li++) {
    hm_layer_config c = tl_config("v41-flash", layers[li], 0, 0);
    ck_assert_uint_eq(c.experts, li ? 128 : 384);
    ck_assert_int_eq(hm_config_set_experts(&c, 2, li ? 2 : 2), HM_OK);
    hm_gen g;
    ck_assert_int_eq(hm_gen_init(&g, &c, 3), HM_OK);
    hm_source s = hm_gen_source(&g);
    hm_build_opts o = {.parts = HM_WPART_FFN, .arch = HM_ARCH_GFX942};
    hm_layer_weights w;
    ck_assert_int_eq(hm_weights_build(&c, 4, 1, &s, &o, &w), HM_OK);
    const hm_tensor *t = hm_weights_get(&w, "w13");
    ck_assert(t->shape[0] == 2 && t->shape[1] == 1152 && t->shape[2] == 2560);
    t = hm_weights_get(&w, "w2");
    ck_assert(t->shape[0] == 2 && t->shape[1] == 5120 && t->shape[2] == 288);
    ck_assert_uint_eq(hm_weights_get(&w, "w13_s")->nbytes, 2ull * 1152 * 160);
    ck_assert_uint_eq(hm_weights_get(&w, "w2_s")->nbytes, 2ull * 5120 * 18);
    t = hm_weights_get(&w, "sw2");
    ck_assert(t->shape[0] == 5120 && t->shape[1] == 640);
    t = hm_weights_get(&w, "sw2_s");
    ck_assert(t->shape[0] == 160 && t->shape[1] == 20);
    ck_assert_uint_eq(hm_weights_get(&w, "sgu")->shape[1], 5120);
    hm_weights_free(&w);
    hm_gen_free(&g);
  }
}
END_TEST

/* ---------------------------------------------------------------- refusals */

/* each refusal: its status, a one-line reason naming its cause, and *out left as it was */
static void refused(hm_status st, hm_status want, const char *words, const hm_layer_weights *w) {
  ck_assert_msg(st == want, "status %d (%s), want %d", st, hm_errmsg(), want);
  ck_assert_msg(strstr(hm_errmsg(), words), "'%s' does not say '%s'", hm_errmsg(), words);
  ck_assert_msg(!strchr(hm_errmsg(), '\n'), "more than one line: %s", hm_errmsg());
  const uint8_t *p = (const uint8_t *)w;
  for (size_t i = 0; i < sizeof *w; i++) ck_assert_msg(p[i] == 0x5a, "the output was written at byte %zu", i);
}

START_TEST(refusals942) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 2), HM_OK);
  hm_source src = hm_gen_source(&g);
  hm_layer_weights w;
  memset(&w, 0x5a, sizeof w);
  hm_build_opts o = {.parts = HM_WPART_ATTN, .arch = HM_ARCH_GFX942};
  refused(hm_weights_build(&c, 2, 0, &src, &o, &w), HM_ERR_INVALID_ARG, "TP4 only", &w);
  refused(hm_weights_build(&c, 1, 0, &src, &o, &w), HM_ERR_INVALID_ARG, "TP4 only", &w);
  o.arch = (hm_arch)7;
  refused(hm_weights_build(&c, 4, 0, &src, &o, &w), HM_ERR_INVALID_ARG, "arch 7", &w);

  rw_reset(src);
  rw.bf16 = true;
  rw.off_r = 8192 + 100, rw.off_c = 17; /* rank 1's row 100 */
  refused(build942(&c, 1, HM_WPART_ATTN, &w), HM_ERR_FORMAT, "1 of 2097152 bf16 values are not e4m3", &w);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "layers.3.attn.wq_b.weight"));
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "row 8292 col 17"));

  rw_reset(src);
  rw.row_codes = true;
  rw.disagree_r = 8192 + 45;
  refused(build942(&c, 1, HM_WPART_ATTN, &w), HM_ERR_FORMAT, "not one 32x32 block's code", &w);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "row 8237"));

  rw_reset(src);
  rw.code_at_00 = 250;
  refused(build942(&c, 0, HM_WPART_ATTN, &w), HM_ERR_FORMAT, "code 250 at block (0, 0)", &w);
  rw.code_at_00 = 249; /* the largest code taken */
  ck_assert_int_eq(build942(&c, 0, HM_WPART_ATTN, &w), HM_OK);
  ck_assert_uint_eq(((const uint8_t *)hm_weights_get(&w, "wq_b_s")->data)[0], 250);
  hm_weights_free(&w);
  memset(&w, 0x5a, sizeof w);

  rw_reset(src);
  rw.f32 = true;
  refused(build942(&c, 0, HM_WPART_ATTN, &w), HM_ERR_FORMAT, "needs F8_E4M3 or BF16", &w);
  hm_gen_free(&g);

  /* routed intermediate 96 a rank: w2 rows of 48 bytes fit no 64-B steps + one 32-B tail */
  c.moe_inter = 384;
  ck_assert_int_eq(hm_gen_init(&g, &c, 2), HM_OK);
  src = hm_gen_source(&g);
  o = (hm_build_opts){.parts = HM_WPART_FFN, .arch = HM_ARCH_GFX942};
  refused(hm_weights_build(&c, 4, 0, &src, &o, &w), HM_ERR_INVALID_ARG, "multiple of 64 columns", &w);
  o.arch = HM_ARCH_GFX950; /* gfx950 pads it to 128 and takes it */
  ck_assert_int_eq(hm_weights_build(&c, 4, 0, &src, &o, &w), HM_OK);
  hm_weights_free(&w);
  hm_gen_free(&g);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-weights942");
  TCase *tc = tcase_create("weights942");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, layout942_dense);
  tcase_add_test(tc, layout942_fp4);
  tcase_add_test(tc, layout942_is_mfma_operand);
  tcase_add_test(tc, dense942_values);
  tcase_add_test(tc, fnuz942_every_code);
  tcase_add_test(tc, fp4_negzero_every_byte);
  tcase_add_test(tc, dense942_from_dequantised);
  tcase_add_test(tc, experts942_values);
  tcase_add_test(tc, full942_shapes);
  tcase_add_test(tc, refusals942);
  suite_add_tcase(s, tc);
  return s;
}
