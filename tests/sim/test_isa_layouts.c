/* tests/sim/test_isa_layouts.c: the agent's matrix instructions (hsa/sim/isa) against AMD's
 * register layouts: CDNA3 from the Matrix Instruction Calculator tables, gfx950 from formulas.
 *
 * Every check runs all 64 lanes and compares the whole D = A.B + C with a double-precision
 * reference, element by element through the layout tables. Operand values are small integers
 * (or e2m1 values) and scales are powers of two near 1, so every sum is exact in f32 and the
 * checks do not depend on the agent's accumulation model; the last test pins that model.
 *
 * gfx950 layouts (CDNA4; the calculator does not cover them). Sources read:
 *  [S1] "Matrix Core Programming on AMD CDNA3 and CDNA4 architecture", 2025-10-01,
 *       salykova.github.io (_posts/2025-10-01-matrix-cores-cdna.markdown), §5.4: the fp8
 *       32x32x64 kernel loads a_reg[16*h + e] = A[lane%32][16*(lane/32) + 32*h + e] and
 *       b_reg[16*h + e] = B[16*(lane/32) + 32*h + e][lane%32] (h = 0, 1; e < 16), and "each
 *       thread stores ... 1 entry from the matrix Ax (32x2)"; §5.5: the fp4 32x32x64 kernel
 *       loads 16 bytes = A[lane%32][32*(lane/32) .. +31], two a byte, low nibble first, the
 *       upper 128 bits of the 256-bit operand unused; "the scales are applied after the normal
 *       dot product and prior to output/accumulation".
 *  [S2] spec/mono.md §4.1 (the reference kernels' 16x16x128 fp8 GEMV): lane l reads row l%16,
 *       K bytes 128 st + 16 (l/16) and +64 (16 B each), and scale byte ... + 4 st + l/16, i.e.
 *       lane l carries the scale of K block l/16; §4.2: fp4 16x16x128 lane l holds row l%16,
 *       K 32 (l/16) .. +31.
 *  [S3] Triton, LinearLayoutConversions.cpp chooseScaledMfmaScaleLayout: scale lane bases
 *       {mn 1,2,4,8,16; kblock 1} for 32x32 and {mn 1,2,4,8; kblock 1,2} for 16x16, i.e. the
 *       scale of (row r, K block kb) is in lane M kb + r, whatever the element format.
 *  [S4] for v_mfma_f32_16x16x32_bf16: a public gfx950 probe kernel's comment "A: lane holds
 *       A[m=lane%16, k=(lane/16)*8 .. +7]", the CDNA3 16x16x32 fp8 distribution with 16-bit
 *       elements (checked below against the calculator's table for that K).
 * The AMD CDNA4 ISA guide itself (§7, matrix arithmetic) could not be read from here; the
 * formulas agree across S1-S4, and the reductions to the CDNA3 tables are checked below.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "hm_isa.h"

/* ---------------------------------------------------------------- layout tables */

struct loc {
  unsigned reg, lane, lo, width; /* register index, lane, lowest bit, width (0: whole dword) */
};
struct table {
  unsigned rows, cols;
  struct loc e[32 * 128];
};
static struct loc *at(struct table *t, unsigned r, unsigned c) { return &t->e[r * t->cols + c]; }

/* INSTR.{A,B,D}.csv of tests/data/mfma/cdna3: a header row "X[..][..],0,1,..." then one
 * row a matrix row, entries "v<reg>{<lane>}.[hi:lo]" (A, B) or "v<reg>{<lane>}" (D) */
static void load_csv(const char *instr, const char *m, struct table *t) {
  const char *dir = getenv("HSAMONO_TEST_DATA");
  ck_assert_msg(dir && *dir, "HSAMONO_TEST_DATA is not set (meson test sets it to tests/data)");
  char path[1024], line[8192];
  snprintf(path, sizeof path, "%s/mfma/cdna3/%s.%s.csv", dir, instr, m);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  memset(t, 0, sizeof *t);
  int in_body = 0;
  while (fgets(line, sizeof line, f)) {
    if (!in_body) {
      if (line[0] == m[0] && line[1] == '[') {
        for (char *p = line; *p; p++) t->cols += *p == ',';
        in_body = 1;
      }
      continue;
    }
    char *p = line;
    unsigned row = (unsigned)strtoul(p, &p, 10);
    ck_assert_uint_eq(row, t->rows);
    for (unsigned c = 0; c < t->cols; c++) {
      ck_assert_msg(*p == ',', "%s: row %u col %u", path, row, c);
      p++;
      unsigned reg, lane, hi = 31, lo = 0;
      int n = 0;
      ck_assert_msg(sscanf(p, "v%u{%u}%n", &reg, &lane, &n) == 2, "%s: bad entry %s", path, p);
      p += n;
      if (*p == '.') {
        int n2 = 0;
        ck_assert(sscanf(p, ".[%u:%u]%n", &hi, &lo, &n2) == 2);
        p += n2;
      }
      *at(t, row, c) = (struct loc){reg, lane, lo, hi - lo + 1};
    }
    t->rows++;
  }
  fclose(f);
  ck_assert_uint_gt(t->rows, 0);
}

/* gfx950 and the one calculator-less CDNA3 form, as formulas (sources in the header comment).
 * `bits` is the element width of the operand's format. Element e of a lane is bits
 * [bits*e, bits*e + bits) of its 8 registers read as one little-endian string. */
static struct loc formula_ab(enum dev_mfma_op op, unsigned bits, unsigned r, unsigned k) {
  unsigned lane = 0, e = 0;
  switch (op) {
  case DEV_MFMA_F32_16X16X4_F32: /* CDNA3 ISA §7.1 / calculator: one f32 a lane, lane 16k + r */
    lane = 16 * k + r, e = 0;
    break;
  case DEV_MFMA_F32_16X16X32_BF16: /* [S4] */
    lane = 16 * (k / 8) + r, e = k % 8;
    break;
  case DEV_MFMA_SCALE_F32_16X16X128_F8F6F4:
    if (bits == 4) lane = 16 * (k / 32) + r, e = k % 32;               /* [S2] §4.2 */
    else lane = 16 * ((k % 64) / 16) + r, e = 16 * (k / 64) + k % 16; /* [S2] §4.1 */
    break;
  case DEV_MFMA_SCALE_F32_32X32X64_F8F6F4:
    if (bits == 4) lane = 32 * (k / 32) + r, e = k % 32;               /* [S1] §5.5 */
    else lane = 32 * ((k % 32) / 16) + r, e = 16 * (k / 32) + k % 16; /* [S1] §5.4 */
    break;
  default: ck_abort_msg("no formula for op %d", op);
  }
  unsigned bit = bits * e;
  return (struct loc){bit / 32, lane, bit % 32, bits};
}

/* D (and C) of a 16x16 or 32x32 form: the calculator's formulas, identical for every form of
 * a size (checked against the tables in d_layouts_agree) */
static struct loc formula_d(unsigned m, unsigned i, unsigned j) {
  if (m == 16) return (struct loc){i % 4, 16 * (i / 4) + j, 0, 32};
  return (struct loc){4 * (i / 8) + i % 4, 32 * ((i / 4) % 2) + j, 0, 32};
}

/* ---------------------------------------------------------------- operand encodings */

enum kind { K_F32, K_F16, K_BF16, K_FP8_FNUZ, K_FP8, K_BF8, K_FP4 };

static u32 f16_bits(double v) { /* exact for the small integers used here */
  if (v == 0) return 0;
  u32 s = v < 0 ? 0x8000u : 0;
  double a = fabs(v);
  int e;
  double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  u32 frac = (u32)((m * 2 - 1) * 1024);
  ck_assert((m * 2 - 1) * 1024 == (double)frac);
  return s | ((u32)(e - 1 + 15) << 10) | frac;
}

static u32 encode(enum kind k, double v) {
  f32 f = (f32)v;
  ck_assert((double)f == v);
  switch (k) {
  case K_F32: return fmt_bits(f);
  case K_F16: return f16_bits(v);
  case K_BF16: return fmt_bf16_from_f32(f);
  case K_FP8_FNUZ: return fmt_e4m3fnuz_encode(f);
  case K_FP8: return fmt_e4m3_encode(f);
  case K_BF8: return fmt_e5m2_encode(f);
  case K_FP4: return fmt_e2m1_encode(f);
  }
  return 0;
}
static unsigned kind_bits(enum kind k) {
  return k == K_F32 ? 32 : (k == K_F16 || k == K_BF16) ? 16 : k == K_FP4 ? 4 : 8;
}

static u32 rng_state = 0x9e3779b9u;
static u32 rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return rng_state;
}
/* a random value every format represents exactly: integers -4..4, or e2m1's values */
static double rand_value(enum kind k) {
  static const double e2m1[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  if (k == K_FP4) return (rng() & 8 ? -1 : 1) * e2m1[rng() % 8];
  return (double)((int)(rng() % 9) - 4);
}

static void put(u32 regs[8], const struct loc *l, u32 code) {
  u32 mask = l->width == 32 ? 0xffffffffu : ((1u << l->width) - 1u) << l->lo;
  regs[l->reg] = (regs[l->reg] & ~mask) | ((code << l->lo) & mask);
}

/* ---------------------------------------------------------------- one full check */

struct problem {
  enum hm_isa_arch arch;
  enum dev_mfma_op op;
  unsigned m, k;
  enum kind ka, kb;
  const struct table *ta, *tb, *td; /* A[m][k], B[k][n], D[m][n] */
  int scaled;
  unsigned opsel_a, opsel_b;
};

static struct dev_mfma_lane lanes[64];
static double A[32][128], B[128][32], C[32][32];
static unsigned SA[32][4], SB[32][4]; /* E8M0 codes of (row, K block) / (column, K block) */

/* fill A, B, C (and scales) at random, place them through the tables, run every lane, and
 * compare every D element with the exact reference */
static void check_problem(const struct problem *p, const char *what) {
  memset(lanes, 0, sizeof lanes);
  for (unsigned l = 0; l < 64; l++) {
    /* unused register bits get noise: a model reading the wrong bits must not see zeros */
    for (unsigned r = 0; r < 8; r++) lanes[l].a[r] = rng(), lanes[l].b[r] = rng();
    if (p->scaled) {
      lanes[l].fmt_a = p->ka == K_FP4 ? DEV_FMT_FP4 : p->ka == K_BF8 ? DEV_FMT_BF8 : DEV_FMT_FP8;
      lanes[l].fmt_b = p->kb == K_FP4 ? DEV_FMT_FP4 : p->kb == K_BF8 ? DEV_FMT_BF8 : DEV_FMT_FP8;
      lanes[l].opsel_a = p->opsel_a, lanes[l].opsel_b = p->opsel_b;
      lanes[l].scale_a = rng(), lanes[l].scale_b = rng();
    }
  }
  /* the noise stays in register bits no table names, e.g. the upper 128 bits of an fp4
   * operand ([S1] §5.5 zero-fills them; the instruction reads only four registers) */
  for (unsigned i = 0; i < p->m; i++)
    for (unsigned x = 0; x < p->k; x++) {
      A[i][x] = rand_value(p->ka);
      const struct loc *l = &p->ta->e[i * p->k + x];
      put(lanes[l->lane].a, l, encode(p->ka, A[i][x]));
    }
  for (unsigned x = 0; x < p->k; x++)
    for (unsigned j = 0; j < p->m; j++) {
      B[x][j] = rand_value(p->kb);
      const struct loc *l = &p->tb->e[x * p->m + j];
      put(lanes[l->lane].b, l, encode(p->kb, B[x][j]));
    }
  for (unsigned i = 0; i < p->m; i++)
    for (unsigned j = 0; j < p->m; j++) {
      C[i][j] = (double)((int)(rng() % 33) - 16);
      const struct loc *l = &p->td->e[i * p->m + j];
      lanes[l->lane].c[l->reg] = (f32)C[i][j];
    }
  if (p->scaled) /* [S3]: the code of (row r, block kb) is byte opsel of lane m kb + r */
    for (unsigned r = 0; r < p->m; r++)
      for (unsigned kb = 0; kb < p->k / 32; kb++) {
        SA[r][kb] = 125 + rng() % 5, SB[r][kb] = 125 + rng() % 5; /* 2^-2 .. 2^2 */
        struct dev_mfma_lane *la = &lanes[p->m * kb + r];
        la->scale_a = (la->scale_a & ~(0xffu << (8 * p->opsel_a))) | (SA[r][kb] << (8 * p->opsel_a));
        la->scale_b = (la->scale_b & ~(0xffu << (8 * p->opsel_b))) | (SB[r][kb] << (8 * p->opsel_b));
      }
  static f32 d[64][16];
  for (unsigned l = 0; l < 64; l++)
    ck_assert_msg(hm_isa_mfma(p->arch, p->op, lanes, l, d[l]), "%s: refused", what);
  for (unsigned i = 0; i < p->m; i++)
    for (unsigned j = 0; j < p->m; j++) {
      double want = C[i][j];
      for (unsigned x = 0; x < p->k; x++) {
        double prod = A[i][x] * B[x][j];
        if (p->scaled) prod *= ldexp(1.0, (int)SA[i][x / 32] - 127 + (int)SB[j][x / 32] - 127);
        want += prod;
      }
      const struct loc *l = &p->td->e[i * p->m + j];
      ck_assert_msg((double)d[l->lane][l->reg] == want, "%s: D[%u][%u] (v%u lane %u) = %g, want %g",
                    what, i, j, l->reg, l->lane, (double)d[l->lane][l->reg], want);
    }
}

/* ---------------------------------------------------------------- CDNA3, from the tables */

struct cdna3_case {
  const char *instr;
  enum dev_mfma_op op;
  unsigned m, k;
  enum kind k942, k950; /* fp8 is FNUZ on gfx942 and OCP on gfx950 */
};
static const struct cdna3_case cdna3[] = {
    {"v_mfma_f32_16x16x16_f16", DEV_MFMA_F32_16X16X16_F16, 16, 16, K_F16, K_F16},
    {"v_mfma_f32_16x16x16_bf16", DEV_MFMA_F32_16X16X16_BF16, 16, 16, K_BF16, K_BF16},
    {"v_mfma_f32_32x32x8_bf16", DEV_MFMA_F32_32X32X8_BF16, 32, 8, K_BF16, K_BF16},
    {"v_mfma_f32_16x16x32_fp8_fp8", DEV_MFMA_F32_16X16X32_FP8, 16, 32, K_FP8_FNUZ, K_FP8},
    {"v_mfma_f32_32x32x16_fp8_fp8", DEV_MFMA_F32_32X32X16_FP8, 32, 16, K_FP8_FNUZ, K_FP8},
};

static struct table ta, tb, td;

/* each CDNA3 instruction on both architectures (gfx950 keeps the CDNA3 layouts), three random
 * problems each */
START_TEST(cdna3_tables) {
  const struct cdna3_case *c = &cdna3[_i];
  load_csv(c->instr, "A", &ta);
  load_csv(c->instr, "B", &tb);
  load_csv(c->instr, "D", &td);
  ck_assert_uint_eq(ta.rows, c->m);
  ck_assert_uint_eq(ta.cols, c->k);
  ck_assert_uint_eq(tb.rows, c->k);
  ck_assert_uint_eq(tb.cols, c->m);
  ck_assert_uint_eq(td.rows, c->m);
  ck_assert_uint_eq(td.cols, c->m);
  for (int arch = 0; arch < 2; arch++)
    for (int rep = 0; rep < 3; rep++) {
      enum kind kd = arch ? c->k950 : c->k942;
      struct problem p = {arch ? HM_ISA_GFX950 : HM_ISA_GFX942, c->op, c->m, c->k, kd, kd,
                          &ta, &tb, &td, 0, 0, 0};
      char what[128];
      snprintf(what, sizeof what, "%s %s #%d", c->instr, arch ? "gfx950" : "gfx942", rep);
      check_problem(&p, what);
    }
}
END_TEST

/* the one-hot form of the same check for the smallest table: A = e_(i,k) picks out row k of B
 * into row i of D, so a single misplaced element cannot hide behind a coincidence */
START_TEST(cdna3_one_hot) {
  load_csv("v_mfma_f32_16x16x16_bf16", "A", &ta);
  load_csv("v_mfma_f32_16x16x16_bf16", "B", &tb);
  load_csv("v_mfma_f32_16x16x16_bf16", "D", &td);
  static f32 d[64][16];
  for (unsigned i = 0; i < 16; i++)
    for (unsigned x = 0; x < 16; x++) {
      memset(lanes, 0, sizeof lanes);
      put(lanes[at(&ta, i, x)->lane].a, at(&ta, i, x), fmt_bf16_from_f32(1.0f));
      for (unsigned kk = 0; kk < 16; kk++)
        for (unsigned j = 0; j < 16; j++)
          put(lanes[at(&tb, kk, j)->lane].b, at(&tb, kk, j), fmt_bf16_from_f32((f32)(16 * kk + j)));
      for (unsigned l = 0; l < 64; l++) ck_assert(hm_isa_mfma(HM_ISA_GFX942, DEV_MFMA_F32_16X16X16_BF16, lanes, l, d[l]));
      for (unsigned ii = 0; ii < 16; ii++)
        for (unsigned j = 0; j < 16; j++) {
          struct loc *l = at(&td, ii, j);
          f32 want = ii == i ? (f32)(16 * x + j) : 0.0f;
          ck_assert_msg(d[l->lane][l->reg] == want, "A[%u][%u] one-hot: D[%u][%u] = %g", i, x, ii, j,
                        (double)d[l->lane][l->reg]);
        }
    }
}
END_TEST

static void formula_table(struct table *t, enum dev_mfma_op op, unsigned bits, unsigned m,
                          unsigned k, int is_b) {
  t->rows = is_b ? k : m;
  t->cols = is_b ? m : k;
  for (unsigned r = 0; r < m; r++)
    for (unsigned x = 0; x < k; x++)
      if (is_b) *at(t, x, r) = formula_ab(op, bits, r, x);
      else *at(t, r, x) = formula_ab(op, bits, r, x);
}
static void formula_d_table(struct table *t, unsigned m) {
  t->rows = t->cols = m;
  for (unsigned i = 0; i < m; i++)
    for (unsigned j = 0; j < m; j++) *at(t, i, j) = formula_d(m, i, j);
}

/* v_mfma_f32_16x16x4_f32 is not among the calculator tables here: its A/B layout by formula
 * (CDNA3 ISA: lane 16k + r holds A[r][k] / B[k][r]), its D the 16x16 table's */
START_TEST(cdna3_f32_16x16x4) {
  formula_table(&ta, DEV_MFMA_F32_16X16X4_F32, 32, 16, 4, 0);
  formula_table(&tb, DEV_MFMA_F32_16X16X4_F32, 32, 16, 4, 1);
  load_csv("v_mfma_f32_16x16x16_bf16", "D", &td);
  for (int arch = 0; arch < 2; arch++)
    for (int rep = 0; rep < 3; rep++) {
      struct problem p = {arch ? HM_ISA_GFX950 : HM_ISA_GFX942, DEV_MFMA_F32_16X16X4_F32, 16, 4,
                          K_F32, K_F32, &ta, &tb, &td, 0, 0, 0};
      check_problem(&p, "v_mfma_f32_16x16x4_f32");
    }
}
END_TEST

/* the D formulas used for the gfx950 forms are the calculator's D tables, for both sizes */
START_TEST(d_layouts_agree) {
  for (unsigned c = 0; c < sizeof cdna3 / sizeof cdna3[0]; c++) {
    load_csv(cdna3[c].instr, "D", &td);
    for (unsigned i = 0; i < cdna3[c].m; i++)
      for (unsigned j = 0; j < cdna3[c].m; j++) {
        struct loc f = formula_d(cdna3[c].m, i, j), *t = at(&td, i, j);
        ck_assert_msg(f.lane == t->lane && f.reg == t->reg, "%s D[%u][%u]", cdna3[c].instr, i, j);
      }
  }
}
END_TEST

/* ---------------------------------------------------------------- gfx950 reductions to CDNA3 */

/* byte (or element) index of a table entry within its lane */
static unsigned elem_index(const struct loc *l) { return (32 * l->reg + l->lo) / l->width; }

/* 16x16x32 bf16 distributes K exactly as CDNA3's 16x16x32 fp8 does (same K, 8 elements a
 * lane), with 16-bit elements: same lane and same element index for every A and B entry */
START_TEST(bf16_16x16x32_reduces_to_cdna3) {
  load_csv("v_mfma_f32_16x16x32_fp8_fp8", "A", &ta);
  load_csv("v_mfma_f32_16x16x32_fp8_fp8", "B", &tb);
  for (unsigned r = 0; r < 16; r++)
    for (unsigned x = 0; x < 32; x++) {
      struct loc f = formula_ab(DEV_MFMA_F32_16X16X32_BF16, 16, r, x);
      ck_assert_uint_eq(f.lane, at(&ta, r, x)->lane);
      ck_assert_uint_eq(elem_index(&f), elem_index(at(&ta, r, x)));
      ck_assert_uint_eq(f.lane, at(&tb, x, r)->lane);
      ck_assert_uint_eq(elem_index(&f), elem_index(at(&tb, x, r)));
    }
}
END_TEST

/* The scaled forms are the CDNA3 fp8 forms of the same M with K stretched:
 *  - fp4: 32 consecutive K a lane where CDNA3 has 8, so element (r, k) sits in the lane of
 *    CDNA3 element (r, k/4) at element index 4 x that of (r, k/4) + k%4;
 *  - 8-bit: 16 consecutive K a lane group where CDNA3 has 8, twice (the second 16 bytes take
 *    the second half of K), so for k below K/2 the lane is that of CDNA3 (r, k/2) and the
 *    byte 2 x its byte + k%2, and k + K/2 sits 16 bytes further in the same lane. */
START_TEST(scaled_reduce_to_cdna3) {
  static const struct {
    enum dev_mfma_op op;
    const char *cdna3;
    unsigned m, k;
  } f[] = {{DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, "v_mfma_f32_16x16x32_fp8_fp8", 16, 128},
           {DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, "v_mfma_f32_32x32x16_fp8_fp8", 32, 64}};
  for (unsigned c = 0; c < 2; c++) {
    load_csv(f[c].cdna3, "A", &ta);
    for (unsigned r = 0; r < f[c].m; r++)
      for (unsigned x = 0; x < f[c].k; x++) {
        struct loc q = formula_ab(f[c].op, 4, r, x), *t = at(&ta, r, x / 4);
        ck_assert_uint_eq(q.lane, t->lane);
        ck_assert_uint_eq(elem_index(&q), 4 * elem_index(t) + x % 4);
        struct loc e = formula_ab(f[c].op, 8, r, x);
        unsigned half = f[c].k / 2, xr = x % half;
        t = at(&ta, r, xr / 2);
        ck_assert_uint_eq(e.lane, t->lane);
        ck_assert_uint_eq(elem_index(&e), 2 * elem_index(t) + xr % 2 + (x >= half ? 16 : 0));
      }
  }
}
END_TEST

/* ---------------------------------------------------------------- gfx950 instructions */

START_TEST(gfx950_bf16_16x16x32) {
  formula_table(&ta, DEV_MFMA_F32_16X16X32_BF16, 16, 16, 32, 0);
  formula_table(&tb, DEV_MFMA_F32_16X16X32_BF16, 16, 16, 32, 1);
  formula_d_table(&td, 16);
  for (int rep = 0; rep < 3; rep++) {
    struct problem p = {HM_ISA_GFX950, DEV_MFMA_F32_16X16X32_BF16, 16, 32, K_BF16, K_BF16,
                        &ta, &tb, &td, 0, 0, 0};
    check_problem(&p, "v_mfma_f32_16x16x32_bf16");
  }
}
END_TEST

/* the scaled forms with non-unit scales on both sides (codes 125..129 a row/column and K
 * block), for the formats the kernels use (fp8 x fp8, fp4 x fp8) and the others the model
 * supports; opsel picks a byte of the scale registers whose other bytes are noise */
START_TEST(gfx950_scaled) {
  static const struct {
    enum dev_mfma_op op;
    unsigned m, k;
  } ops[] = {{DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, 16, 128}, {DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, 32, 64}};
  static const enum kind fa[] = {K_FP8, K_FP4, K_FP8, K_BF8, K_FP4};
  static const enum kind fb[] = {K_FP8, K_FP8, K_FP4, K_FP8, K_FP4};
  for (unsigned o = 0; o < 2; o++)
    for (unsigned f = 0; f < sizeof fa / sizeof fa[0]; f++)
      for (unsigned rep = 0; rep < 2; rep++) {
        formula_table(&ta, ops[o].op, kind_bits(fa[f]), ops[o].m, ops[o].k, 0);
        formula_table(&tb, ops[o].op, kind_bits(fb[f]), ops[o].m, ops[o].k, 1);
        formula_d_table(&td, ops[o].m);
        struct problem p = {HM_ISA_GFX950, ops[o].op, ops[o].m, ops[o].k, fa[f], fb[f],
                            &ta, &tb, &td, 1, rep ? 2u : 0u, rep ? 3u : 0u};
        char what[96];
        snprintf(what, sizeof what, "scaled %ux%ux%u formats %d x %d opsel %u", ops[o].m,
                 ops[o].m, ops[o].k, fa[f], fb[f], p.opsel_a);
        check_problem(&p, what);
      }
}
END_TEST

/* a scale applies to its K block only: A all ones, B all ones, one block's A scale 2^3 in
 * one row; D of that row grows by exactly (8 - 1) * 32 and no other row moves */
START_TEST(gfx950_scale_per_block) {
  struct dev_mfma_lane *L = lanes;
  static f32 d[64][16];
  memset(lanes, 0, sizeof lanes);
  formula_table(&ta, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, 8, 16, 128, 0);
  formula_table(&tb, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, 8, 16, 128, 1);
  formula_d_table(&td, 16);
  for (unsigned r = 0; r < 16; r++)
    for (unsigned x = 0; x < 128; x++) {
      put(L[at(&ta, r, x)->lane].a, at(&ta, r, x), fmt_e4m3_encode(1.0f));
      put(L[at(&tb, x, r)->lane].b, at(&tb, x, r), fmt_e4m3_encode(1.0f));
    }
  for (unsigned l = 0; l < 64; l++) L[l].scale_a = L[l].scale_b = 127;
  L[16 * 2 + 5].scale_a = 130; /* row 5, K block 2 ([S3]: lane 16 kb + r) */
  for (unsigned l = 0; l < 64; l++)
    ck_assert(hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, lanes, l, d[l]));
  for (unsigned i = 0; i < 16; i++)
    for (unsigned j = 0; j < 16; j++) {
      struct loc *l = at(&td, i, j);
      ck_assert_float_eq(d[l->lane][l->reg], i == 5 ? 128.0f + 7.0f * 32.0f : 128.0f);
    }
}
END_TEST

/* the same registers under another instruction, architecture or operand format must be
 * read afresh (the model may cache decoded operands between the 64 calls of one instruction).
 * A's bytes are 0x38 in lanes 0-15 and 0 elsewhere, B's 0x38 everywhere: 0x38 is 1.0 in OCP
 * e4m3, 0.5 in FNUZ e4m3 and in e5m2, and as fp4 nibbles -0 (even K) and 1.5 (odd K). */
START_TEST(same_registers_reinterpreted) {
  static f32 d[64][16];
  memset(lanes, 0, sizeof lanes);
  for (unsigned l = 0; l < 64; l++) {
    for (unsigned r = 0; r < 8; r++) lanes[l].a[r] = l < 16 ? 0x38383838u : 0, lanes[l].b[r] = 0x38383838u;
    lanes[l].scale_a = lanes[l].scale_b = 127;
  }
  static const struct {
    enum hm_isa_arch arch;
    enum dev_mfma_op op;
    u32 fa, fb;
    unsigned m;
    f32 want_lo, want_hi; /* D rows 0-15, rows 16-31 */
  } runs[] = {
      /* lanes 0-15 carry K 0-7 of rows 0-15 */
      {HM_ISA_GFX950, DEV_MFMA_F32_16X16X32_FP8, 0, 0, 16, 8 * 1.0f, 0},
      {HM_ISA_GFX942, DEV_MFMA_F32_16X16X32_FP8, 0, 0, 16, 8 * 0.25f, 0},
      {HM_ISA_GFX942, DEV_MFMA_F32_32X32X16_FP8, 0, 0, 32, 8 * 0.25f, 0},
      /* 8-bit: lanes 0-15 carry K 0-15 and 64-79; fp4: K 0-31 */
      {HM_ISA_GFX950, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, DEV_FMT_FP8, DEV_FMT_FP8, 16, 32 * 1.0f, 0},
      {HM_ISA_GFX950, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, DEV_FMT_BF8, DEV_FMT_FP8, 16, 32 * 0.5f, 0},
      {HM_ISA_GFX950, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, DEV_FMT_FP4, DEV_FMT_FP8, 16, 16 * 1.5f, 0},
  };
  for (unsigned r = 0; r < sizeof runs / sizeof runs[0]; r++) {
    for (unsigned l = 0; l < 64; l++) lanes[l].fmt_a = runs[r].fa, lanes[l].fmt_b = runs[r].fb;
    for (unsigned l = 0; l < 64; l++) ck_assert(hm_isa_mfma(runs[r].arch, runs[r].op, lanes, l, d[l]));
    for (unsigned i = 0; i < runs[r].m; i++)
      for (unsigned j = 0; j < runs[r].m; j++) {
        struct loc l = formula_d(runs[r].m, i, j);
        f32 want = i < 16 ? runs[r].want_lo : runs[r].want_hi;
        ck_assert_msg(d[l.lane][l.reg] == want, "run %u D[%u][%u] = %g, want %g", r, i, j,
                      (double)d[l.lane][l.reg], (double)want);
      }
  }
}
END_TEST

START_TEST(refusals) {
  static f32 d[16];
  memset(lanes, 0, sizeof lanes);
  /* gfx942 has none of the gfx950-only forms */
  ck_assert(!hm_isa_mfma_supported(HM_ISA_GFX942, DEV_MFMA_F32_16X16X32_BF16));
  ck_assert(!hm_isa_mfma_supported(HM_ISA_GFX942, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4));
  ck_assert(!hm_isa_mfma_supported(HM_ISA_GFX942, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4));
  ck_assert(!hm_isa_mfma(HM_ISA_GFX942, DEV_MFMA_F32_16X16X32_BF16, lanes, 0, d));
  ck_assert(!hm_isa_mfma(HM_ISA_GFX942, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, lanes, 0, d));
  ck_assert(!hm_isa_mfma(HM_ISA_GFX942, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, lanes, 0, d));
  for (int op = 0; op < DEV_MFMA_OP_COUNT; op++) {
    ck_assert(hm_isa_mfma_supported(HM_ISA_GFX950, (enum dev_mfma_op)op));
    if (op != DEV_MFMA_F32_16X16X32_BF16 && op != DEV_MFMA_SCALE_F32_16X16X128_F8F6F4 &&
        op != DEV_MFMA_SCALE_F32_32X32X64_F8F6F4)
      ck_assert(hm_isa_mfma_supported(HM_ISA_GFX942, (enum dev_mfma_op)op));
  }
  ck_assert(!hm_isa_mfma_supported(HM_ISA_GFX950, DEV_MFMA_OP_COUNT));
  /* fp6 / bf6 are not modelled, nor codes past fp4; opsel is two bits; fields are uniform */
  for (unsigned l = 0; l < 64; l++) lanes[l].fmt_a = DEV_FMT_FP6;
  ck_assert(!hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, lanes, 0, d));
  for (unsigned l = 0; l < 64; l++) lanes[l].fmt_a = DEV_FMT_FP8, lanes[l].fmt_b = DEV_FMT_BF6;
  ck_assert(!hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, lanes, 0, d));
  for (unsigned l = 0; l < 64; l++) lanes[l].fmt_b = 5;
  ck_assert(!hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, lanes, 0, d));
  for (unsigned l = 0; l < 64; l++) lanes[l].fmt_b = DEV_FMT_FP4, lanes[l].opsel_a = 4;
  ck_assert(!hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, lanes, 0, d));
  for (unsigned l = 0; l < 64; l++) lanes[l].opsel_a = 0;
  ck_assert(hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, lanes, 0, d));
  lanes[17].fmt_b = DEV_FMT_FP8;
  ck_assert(!hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, lanes, 0, d));
  ck_assert(!hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_F32_16X16X16_BF16, lanes, 64, d));
  ck_assert(!hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_F32_16X16X16_BF16, NULL, 0, d));
}
END_TEST

/* ---------------------------------------------------------------- the numerics model */

/* Pins the model hm_isa.h documents, with 16x16x4 f32 (lane 16k + r, D lane 16(i/4) + j):
 * exact sum rounded once, the -0 rule, and IEEE specials. */
static f32 f32_row0(const f32 a[4], const f32 b[4], f32 c) {
  static f32 d[16];
  memset(lanes, 0, sizeof lanes);
  for (unsigned x = 0; x < 4; x++) {
    lanes[16 * x].a[0] = fmt_bits(a[x]); /* A[0][x] */
    lanes[16 * x].b[0] = fmt_bits(b[x]); /* B[x][0] */
  }
  lanes[0].c[0] = c; /* D[0][0] is lane 0, register 0 */
  ck_assert(hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_F32_16X16X4_F32, lanes, 0, d));
  return d[0];
}

START_TEST(accumulation_model) {
  /* 2^30 + 1 - 2^30: any f32 running sum loses the 1; the exact model keeps it */
  f32 a1[4] = {0x1p30f, 1.0f, -0x1p30f, 0.0f}, one[4] = {1, 1, 1, 1};
  ck_assert_float_eq(f32_row0(a1, one, 0.0f), 1.0f);
  /* products exact: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24, then - 1 leaves 2^-11 + 2^-24 exactly */
  f32 a2[4] = {1.0f + 0x1p-12f, 0, 0, 0}, b2[4] = {1.0f + 0x1p-12f, 0, 0, 0};
  ck_assert_uint_eq(fmt_bits(f32_row0(a2, b2, -1.0f)), fmt_bits(0x1p-11f + 0x1p-24f));
  /* one rounding at the end: 1 + 2^-24 + 2^-24 is 1 + 2^-23 exactly (two roundings give 1) */
  f32 a3[4] = {0x1p-24f, 0x1p-24f, 0, 0};
  ck_assert_float_eq(f32_row0(a3, one, 1.0f), 1.0f + 0x1p-23f);
  /* a tie rounds to even: 1 + 2^-24 alone stays 1 */
  f32 a4[4] = {0x1p-24f, 0, 0, 0};
  ck_assert_float_eq(f32_row0(a4, one, 1.0f), 1.0f);
  /* ... but a term 66 binades further down breaks the tie either way: the rounding sees
   * every bit of the exact sum, however far below */
  f32 a4b[4] = {0x1p-24f, 0x1p-45f, 0, 0}, b4b[4] = {1.0f, 0x1p-45f, 0, 0};
  ck_assert_float_eq(f32_row0(a4b, b4b, 1.0f), 1.0f + 0x1p-23f);
  b4b[1] = -0x1p-45f;
  ck_assert_float_eq(f32_row0(a4b, b4b, 1.0f), 1.0f);
  f32 a4c[4] = {-0x1p-24f, -0x1p-45f, 0, 0}; /* the same through a negative sum */
  b4b[1] = 0x1p-45f;
  ck_assert_float_eq(f32_row0(a4c, b4b, -1.0f), -1.0f - 0x1p-23f);
  /* the same 116 binades further down still counts (a span no 128-bit window holds) */
  f32 a4d[4] = {0x1p-24f, 0x1p-70f, 0, 0}, b4d[4] = {1.0f, 0x1p-70f, 0, 0};
  ck_assert_float_eq(f32_row0(a4d, b4d, 1.0f), 1.0f + 0x1p-23f);
  a4d[0] = -0x1p-24f, a4d[1] = -0x1p-70f;
  ck_assert_float_eq(f32_row0(a4d, b4d, -1.0f), -1.0f - 0x1p-23f);
  f32 a4e[4] = {0x1p100f, 0x1p-100f, 0, 0}, b4e[4] = {0x1p20f, 0x1p-40f, 0, 0};
  ck_assert_float_eq(f32_row0(a4e, b4e, -0x1p120f), 0x1p-140f);
  /* overflow to inf, and gradual underflow */
  f32 a5[4] = {0x1p127f, 0x1p127f, 0, 0};
  ck_assert(isinf(f32_row0(a5, one, 0.0f)));
  f32 a6[4] = {0x1p-100f, 0, 0, 0}, b6[4] = {0x1p-49f, 0, 0, 0};
  ck_assert_uint_eq(fmt_bits(f32_row0(a6, b6, 0.0f)), 1u);
  /* zeros: -0 only when C and every product are -0; exact cancellation gives +0 */
  f32 z[4] = {-0.0f, -0.0f, -0.0f, -0.0f};
  ck_assert_uint_eq(fmt_bits(f32_row0(z, one, -0.0f)), 0x80000000u);
  ck_assert_uint_eq(fmt_bits(f32_row0(z, one, 0.0f)), 0u);
  f32 a7[4] = {1.0f, -1.0f, 0, 0};
  ck_assert_uint_eq(fmt_bits(f32_row0(a7, one, -0.0f)), 0u);
  /* specials */
  f32 a8[4] = {INFINITY, 0, 0, 0}, a9[4] = {INFINITY, -INFINITY, 0, 0};
  ck_assert(isinf(f32_row0(a8, one, 5.0f)) && f32_row0(a8, one, 5.0f) > 0);
  ck_assert(isnan(f32_row0(a9, one, 0.0f)));
  f32 zero[4] = {0, 0, 0, 0};
  ck_assert(isnan(f32_row0(a8, zero, 0.0f))); /* inf * 0 */
  ck_assert(isnan(f32_row0(one, one, NAN)));
}
END_TEST

/* a NaN scale (E8M0 255) makes its block's products NaN */
START_TEST(nan_scale) {
  static f32 d[64][16];
  memset(lanes, 0, sizeof lanes);
  for (unsigned l = 0; l < 64; l++) lanes[l].scale_a = lanes[l].scale_b = 127;
  lanes[32 + 3].scale_b = 255; /* column 3, K block 1 of 32x32x64 */
  for (unsigned l = 0; l < 64; l++)
    ck_assert(hm_isa_mfma(HM_ISA_GFX950, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, lanes, l, d[l]));
  for (unsigned i = 0; i < 32; i++)
    for (unsigned j = 0; j < 32; j++) {
      struct loc l = formula_d(32, i, j);
      ck_assert(j == 3 ? isnan(d[l.lane][l.reg]) : d[l.lane][l.reg] == 0.0f);
    }
}
END_TEST

/* The integer fast path (hm_isa_mfma_fast_path) computes the same exact sum as the general path:
 * random operands of every narrow format pairing (NaN and zero codes of both signs among them,
 * whole zero columns as a GEMV's padded tokens give), scales around 127 with an occasional NaN
 * scale, and C of every class; bf16 operands mostly within a few binades (the fast path) and now
 * and then a row too wide for it, a subnormal, a zero, an inf or a NaN; every lane's D bit for
 * bit, both ways. */
static u32 rnd_state = 12345;
static u32 rnd(void) {
  rnd_state = rnd_state * 1664525u + 1013904223u;
  return rnd_state >> 8;
}
static u32 rnd_bf16(void) {
  u32 sign = (rnd() & 1) << 15, man = rnd() & 0x7f, kind = rnd() % 400;
  if (kind == 0) return sign | 0x7f80u | (rnd() % 2 ? man | 1 : 0); /* inf or NaN */
  if (kind < 10) return sign;                                        /* zero */
  if (kind < 16) return sign | man;                                  /* subnormal (or zero) */
  if (kind < 24) return sign | (1 + rnd() % 253) << 7 | man;         /* any binade */
  return sign | (127 - 8 + rnd() % 16) << 7 | man;
}
START_TEST(fast_path_matches_general) {
  static f32 d0[64][16], d1[64][16];
  struct { enum hm_isa_arch arch; enum dev_mfma_op op; bool bf16; unsigned nreg; } ops[] = {
      {HM_ISA_GFX950, DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, false, 4},
      {HM_ISA_GFX950, DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, false, 16},
      {HM_ISA_GFX942, DEV_MFMA_F32_16X16X32_FP8, false, 4},
      {HM_ISA_GFX942, DEV_MFMA_F32_32X32X16_FP8, false, 16},
      {HM_ISA_GFX942, DEV_MFMA_F32_16X16X16_BF16, true, 4},
      {HM_ISA_GFX942, DEV_MFMA_F32_32X32X8_BF16, true, 16},
      {HM_ISA_GFX950, DEV_MFMA_F32_16X16X32_BF16, true, 4},
  };
  const unsigned nops = sizeof ops / sizeof ops[0];
  const f32 cs[] = {0.0f, -0.0f, 1.0f, -3.5f, 0x1p-140f, 0x1p100f, 1e-3f, INFINITY};
  for (unsigned it = 0; it < 140 * nops; it++) {
    unsigned o = it % nops;
    memset(lanes, 0, sizeof lanes);
    u32 fa = rnd() % 2 ? DEV_FMT_FP8 : DEV_FMT_FP4, fb = rnd() % 2 ? DEV_FMT_FP8 : DEV_FMT_FP4;
    unsigned zero_col = rnd() % 16, sparse = rnd() % 4;
    for (unsigned l = 0; l < 64; l++) {
      for (unsigned w = 0; w < 8; w++) {
        u32 a = rnd() ^ rnd() << 16, b = rnd() ^ rnd() << 16;
        if (ops[o].bf16) a = rnd_bf16() | rnd_bf16() << 16, b = rnd_bf16() | rnd_bf16() << 16;
        /* rows and columns just too wide for the integers (a span of 29 to 31 bits): all large
         * (1.99) but one small element, so a bound set too loose overflows the integer sum */
        if (ops[o].bf16 && it % 5 == 0 && l % 16 == 3) {
          a = b = 0x3fff3fffu;
          if (w == 0) a = b = 0x3fff0000u | (106 - rnd() % 3) << 7 | 1; /* 2^-21 .. 2^-23 */
        }
        if (sparse == 0) a &= 0x0f0f0f0f; /* small values and zeros */
        if (sparse == 1) b = (rnd() % 3) ? 0 : 0x80808080u & b; /* zeros of both signs */
        lanes[l].a[w] = a, lanes[l].b[w] = b;
      }
      if (l % 16 == zero_col) memset(lanes[l].b, 0, sizeof lanes[l].b);
      if (l % 16 == (zero_col + 5) % 16) memset(lanes[l].a, sparse == 2 ? 0x80 : 0, sizeof lanes[l].a);
      if (sparse == 3 && l % 16 == (zero_col + 9) % 16) /* zeros whose signs alternate, both sides */
        for (unsigned w = 0; w < 8; w++) lanes[l].a[w] = 0x00800080u, lanes[l].b[w] = 0x80008000u;
      for (unsigned r = 0; r < 16; r++) lanes[l].c[r] = cs[rnd() % (sizeof cs / sizeof *cs - (it % 7 ? 1 : 0))];
      lanes[l].fmt_a = fa, lanes[l].fmt_b = fb;
      lanes[l].scale_a = rnd() % 200 == 0 ? 255u : 127 - 6 + rnd() % 12;
      lanes[l].scale_b = 127 - 6 + rnd() % 12;
    }
    hm_isa_mfma_fast_path(false);
    for (unsigned l = 0; l < 64; l++) ck_assert(hm_isa_mfma(ops[o].arch, ops[o].op, lanes, l, d0[l]));
    hm_isa_mfma_fast_path(true);
    /* both ways a wave is computed: lane by lane (operands compared with the thread's decoded
     * ones), and the whole wave at once as the agent does (decoded once, rows lazily) */
    for (unsigned way = 0; way < 2; way++) {
      if (way == 0)
        for (unsigned l = 0; l < 64; l++) ck_assert(hm_isa_mfma(ops[o].arch, ops[o].op, lanes, l, d1[l]));
      else
        ck_assert(hm_isa_mfma_wave(ops[o].arch, ops[o].op, lanes, d1));
      for (unsigned l = 0; l < 64; l++)
        for (unsigned r = 0; r < ops[o].nreg; r++) /* a 16x16 form writes 4 registers a lane */
          ck_assert_msg(fmt_bits(d0[l][r]) == fmt_bits(d1[l][r]) || (isnan(d0[l][r]) && isnan(d1[l][r])),
                        "op %u iteration %u way %u lane %u reg %u: general %a, fast %a", o, it, way, l, r,
                        (double)d0[l][r], (double)d1[l][r]);
    }
  }
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("isa_layouts");
  TCase *tc = tcase_create("cdna3");
  tcase_add_loop_test(tc, cdna3_tables, 0, (int)(sizeof cdna3 / sizeof cdna3[0]));
  tcase_add_test(tc, cdna3_one_hot);
  tcase_add_test(tc, cdna3_f32_16x16x4);
  tcase_add_test(tc, d_layouts_agree);
  suite_add_tcase(s, tc);
  tc = tcase_create("gfx950");
  tcase_add_test(tc, bf16_16x16x32_reduces_to_cdna3);
  tcase_add_test(tc, scaled_reduce_to_cdna3);
  tcase_add_test(tc, gfx950_bf16_16x16x32);
  tcase_add_test(tc, gfx950_scaled);
  tcase_add_test(tc, gfx950_scale_per_block);
  tcase_add_test(tc, same_registers_reinterpreted);
  tcase_add_test(tc, refusals);
  suite_add_tcase(s, tc);
  tc = tcase_create("model");
  tcase_add_test(tc, accumulation_model);
  tcase_add_test(tc, nan_scale);
  tcase_add_test(tc, fast_path_matches_general);
  suite_add_tcase(s, tc);
  return s;
}
