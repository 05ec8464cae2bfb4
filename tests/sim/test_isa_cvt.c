/* tests/sim/test_isa_cvt.c: the agent's fp8 conversions (hm_isa_cvt) against the independent
 * format tables of tests/data/formats, for gfx950 (OCP) and gfx942 (FNUZ).
 *
 * Every code is decoded from every byte position; every encode-table row whose input is
 * within the format's range is packed from both operand slots into both halves. Above the
 * range the tables give saturation, which the hardware conversion does not do: those inputs
 * are checked against the model hm_isa.h documents instead.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "format_tables.h"
#include "formats.h"
#include "hm_isa.h"

struct arch_fmt {
  enum hm_isa_arch arch;
  const char *fp8, *bf8; /* table names */
};
static const struct arch_fmt archs[] = {{HM_ISA_GFX950, "e4m3fn", "e5m2"},
                                        {HM_ISA_GFX942, "e4m3fnuz", "e5m2fnuz"}};

static u32 rng_state = 0x1234567u;
static u32 rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return rng_state;
}

static void check_decode(enum hm_isa_arch arch, enum dev_cvt_op op, const char *name) {
  struct ft_decode t;
  ft_load_decode(name, &t);
  ck_assert_uint_eq(t.n, 256);
  for (unsigned c = 0; c < 256; c++)
    for (unsigned sel = 0; sel < 4; sel++) {
      u32 old = (rng() & ~(0xffu << (8 * sel))) | (c << (8 * sel));
      u32 got = hm_isa_cvt(arch, op, 0.0f, 0.0f, old, sel);
      if (t.kind[c] == FT_NAN)
        ck_assert_msg(fmt_isnan(fmt_float(got)), "%s %02x: %08x not NaN", name, c, got);
      else if (t.kind[c] == FT_INF)
        ck_assert_uint_eq(got, (c & 0x80u) ? 0xff800000u : 0x7f800000u);
      else
        ck_assert_msg(got == t.bits[c], "%s code %02x sel %u: %08x, want %08x", name, c, sel, got,
                      t.bits[c]);
    }
}

START_TEST(decode_every_code) {
  const struct arch_fmt *a = &archs[_i];
  check_decode(a->arch, DEV_CVT_F32_FP8, a->fp8);
  check_decode(a->arch, DEV_CVT_F32_BF8, a->bf8);
}
END_TEST

/* the largest finite value of a format, from its decode table */
static float table_max(const struct ft_decode *t) {
  float m = 0;
  for (unsigned c = 0; c < t->n; c++)
    if (t->kind[c] == FT_FINITE && fabsf(ft_f32(t->bits[c])) > m) m = fabsf(ft_f32(t->bits[c]));
  return m;
}

static void check_encode(enum hm_isa_arch arch, enum dev_cvt_op op, const char *name) {
  struct ft_decode d;
  struct ft_encode t;
  ft_load_decode(name, &d);
  ft_load_encode(name, &t);
  float max = table_max(&d);
  unsigned n = 0, in[2048], code[2048];
  for (unsigned i = 0; i < t.n; i++)
    if (fabsf(ft_f32(t.in[i])) <= max) in[n] = t.in[i], code[n] = t.code[i], n++;
  ck_assert_uint_gt(n, t.n / 2); /* most rows are in range: a bad max would show here */
  for (unsigned i = 0; i < n; i++) {
    unsigned j = (i * 7 + 3) % n; /* a different row for the second operand */
    for (unsigned sel = 0; sel < 2; sel++) {
      u32 old = rng();
      u32 got = hm_isa_cvt(arch, op, ft_f32(in[i]), ft_f32(in[j]), old, sel);
      u32 want = code[i] | (code[j] << 8);
      want = sel ? (old & 0xffffu) | (want << 16) : (old & 0xffff0000u) | want;
      ck_assert_msg(got == want, "%s pk(%08x, %08x) sel %u: %08x, want %08x", name, in[i], in[j],
                    sel, got, want);
    }
  }
  ft_free_encode(&t);
}

START_TEST(encode_in_range) {
  const struct arch_fmt *a = &archs[_i];
  check_encode(a->arch, DEV_CVT_PK_FP8_F32, a->fp8);
  check_encode(a->arch, DEV_CVT_PK_BF8_F32, a->bf8);
}
END_TEST

static unsigned pk(enum hm_isa_arch arch, enum dev_cvt_op op, float x) {
  return hm_isa_cvt(arch, op, x, 0.0f, 0u, 0) & 0xffu;
}

/* beyond the range: IEEE overflow without saturation (hm_isa.h), at the rounding boundary */
START_TEST(out_of_range_model) {
  enum hm_isa_arch g9 = HM_ISA_GFX950, g4 = HM_ISA_GFX942;
  enum dev_cvt_op f8 = DEV_CVT_PK_FP8_F32, b8 = DEV_CVT_PK_BF8_F32;
  /* OCP e4m3: 464 is the tie between 448 (even) and the NaN pattern: it stays 448 */
  ck_assert_uint_eq(pk(g9, f8, 464.0f), 0x7e);
  ck_assert_uint_eq(pk(g9, f8, 464.03125f), 0x7f);
  ck_assert_uint_eq(pk(g9, f8, -1e6f), 0xff);
  ck_assert_uint_eq(pk(g9, f8, INFINITY), 0x7f);
  ck_assert_uint_eq(pk(g9, f8, NAN), 0x7f);
  /* FNUZ e4m3: 240 is odd, so the tie 248 rounds up, out of range */
  ck_assert_uint_eq(pk(g4, f8, 247.984375f), 0x7f);
  ck_assert_uint_eq(pk(g4, f8, 248.0f), 0x80);
  ck_assert_uint_eq(pk(g4, f8, -INFINITY), 0x80);
  ck_assert_uint_eq(pk(g4, f8, NAN), 0x80);
  ck_assert_uint_eq(pk(g4, f8, -0.0f), 0x00);
  /* e5m2: 57344 is odd, the tie 61440 overflows: OCP to inf, FNUZ to NaN */
  ck_assert_uint_eq(pk(g9, b8, 61439.0f), 0x7b);
  ck_assert_uint_eq(pk(g9, b8, 61440.0f), 0x7c);
  ck_assert_uint_eq(pk(g9, b8, -INFINITY), 0xfc);
  ck_assert_uint_eq(pk(g9, b8, NAN), 0x7e);
  ck_assert_uint_eq(pk(g4, b8, 61439.0f), 0x7f);
  ck_assert_uint_eq(pk(g4, b8, 61440.0f), 0x80);
  /* the second operand and the high half take the same path */
  ck_assert_uint_eq(hm_isa_cvt(g9, f8, 1.0f, 1e6f, 0xabcd0000u, 0), 0xabcd7f38u);
  ck_assert_uint_eq(hm_isa_cvt(g9, f8, 1.0f, -2.0f, 0x0000abcdu, 1), 0xc038abcdu);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("isa_cvt");
  TCase *tc = tcase_create("cvt");
  tcase_add_loop_test(tc, decode_every_code, 0, 2);
  tcase_add_loop_test(tc, encode_in_range, 0, 2);
  tcase_add_test(tc, out_of_range_model);
  suite_add_tcase(s, tc);
  return s;
}
