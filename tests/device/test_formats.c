/* tests/device/test_formats.c: device/formats.h against the independent format tables of
 * tests/data/formats and hand-worked cases of the MX rules (spec/mono.md §2.0, §2.6).
 *
 * Expected values in the hand-worked cases are derived in the comments beside them, not read
 * back from the code under test.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats.h"
#include "format_tables.h"

/* ---------------------------------------------------------------- tables */

struct fmt_codec {
  const char *name;
  f32 (*decode)(u8);
  u8 (*encode)(f32); /* NULL: no encode table (e8m0) */
};

static f32 dec_e4m3(u8 c) { return fmt_e4m3_decode(c); }
static f32 dec_e4m3fnuz(u8 c) { return fmt_e4m3fnuz_decode(c); }
static f32 dec_e5m2(u8 c) { return fmt_e5m2_decode(c); }
static f32 dec_e5m2fnuz(u8 c) { return fmt_e5m2fnuz_decode(c); }
static f32 dec_e2m1(u8 c) { return fmt_e2m1_decode(c); }
static f32 dec_e8m0(u8 c) { return fmt_e8m0_decode(c); }
static u8 enc_e4m3(f32 x) { return fmt_e4m3_encode(x); }
static u8 enc_e4m3fnuz(f32 x) { return fmt_e4m3fnuz_encode(x); }
static u8 enc_e5m2(f32 x) { return fmt_e5m2_encode(x); }
static u8 enc_e5m2fnuz(f32 x) { return fmt_e5m2fnuz_encode(x); }
static u8 enc_e2m1(f32 x) { return fmt_e2m1_encode(x); }

static const struct fmt_codec codecs[] = {
    {"e4m3fn", dec_e4m3, enc_e4m3},         {"e4m3fnuz", dec_e4m3fnuz, enc_e4m3fnuz},
    {"e5m2", dec_e5m2, enc_e5m2},           {"e5m2fnuz", dec_e5m2fnuz, enc_e5m2fnuz},
    {"e2m1", dec_e2m1, enc_e2m1},           {"e8m0", dec_e8m0, NULL},
};
#define NCODECS ((int)(sizeof codecs / sizeof codecs[0]))

/* every code of every format decodes to the table's float32 bits; NaN codes to a NaN and
 * inf codes to the infinity of the code's sign */
START_TEST(decode_every_code) {
  const struct fmt_codec *f = &codecs[_i];
  struct ft_decode t;
  ft_load_decode(f->name, &t);
  ck_assert_uint_eq(t.n, strcmp(f->name, "e2m1") == 0 ? 16 : 256);
  unsigned nans = 0;
  for (unsigned c = 0; c < t.n; c++) {
    u32 got = fmt_bits(f->decode((u8)c));
    if (t.kind[c] == FT_NAN) {
      nans++;
      ck_assert_msg(fmt_isnan(fmt_float(got)), "%s code %u: %08x is not NaN", f->name, c, got);
    } else if (t.kind[c] == FT_INF) {
      u32 want = (c & 0x80u) ? 0xff800000u : 0x7f800000u;
      ck_assert_msg(got == want, "%s code %u: %08x, want inf %08x", f->name, c, got, want);
    } else {
      ck_assert_msg(got == t.bits[c], "%s code %u: %08x, want %08x", f->name, c, got, t.bits[c]);
    }
  }
  /* the formats' NaN counts: a table read as all-finite would otherwise pass silently */
  unsigned want_nans = strcmp(f->name, "e4m3fn") == 0 ? 2 : strcmp(f->name, "e5m2") == 0 ? 6
                       : strcmp(f->name, "e2m1") == 0 ? 0 : 1;
  ck_assert_uint_eq(nans, want_nans);
}
END_TEST

/* every row of NAME.encode_rne_sat.csv: exact values, midpoints, quarter steps, both signs */
START_TEST(encode_every_row) {
  const struct fmt_codec *f = &codecs[_i];
  struct ft_encode t;
  ft_load_encode(f->name, &t);
  for (unsigned i = 0; i < t.n; i++) {
    unsigned got = f->encode(fmt_float(t.in[i]));
    ck_assert_msg(got == t.code[i], "%s encode(%08x = %g) = %u, want %u", f->name, t.in[i],
                  (double)fmt_float(t.in[i]), got, t.code[i]);
  }
  ft_free_encode(&t);
}
END_TEST

/* specials the tables leave out: NaN inputs and infinities (saturation clamps them) */
START_TEST(encode_specials) {
  f32 inf = fmt_float(0x7f800000u), ninf = fmt_float(0xff800000u);
  f32 nan = fmt_float(0x7fc00000u), nnan = fmt_float(0xffc00001u);
  ck_assert_uint_eq(fmt_e4m3_encode(inf), 0x7e);
  ck_assert_uint_eq(fmt_e4m3_encode(ninf), 0xfe);
  ck_assert_uint_eq(fmt_e4m3_encode(nan), 0x7f);
  ck_assert_uint_eq(fmt_e4m3_encode(nnan), 0xff);
  ck_assert_uint_eq(fmt_e4m3fnuz_encode(inf), 0x7f);
  ck_assert_uint_eq(fmt_e4m3fnuz_encode(ninf), 0xff);
  ck_assert_uint_eq(fmt_e4m3fnuz_encode(nnan), 0x80);
  ck_assert_uint_eq(fmt_e5m2_encode(inf), 0x7b);
  ck_assert_uint_eq(fmt_e5m2_encode(ninf), 0xfb);
  ck_assert_uint_eq(fmt_e5m2_encode(nan), 0x7e);
  ck_assert_uint_eq(fmt_e5m2fnuz_encode(inf), 0x7f);
  ck_assert_uint_eq(fmt_e5m2fnuz_encode(nan), 0x80);
  ck_assert_uint_eq(fmt_e2m1_encode(ninf), 0xf);
  ck_assert_uint_eq(fmt_e2m1_encode(nan), 0x7);
  /* FNUZ has no -0: a negative value too small for the format is +0 */
  ck_assert_uint_eq(fmt_e4m3fnuz_encode(-1e-30f), 0x00);
  ck_assert_uint_eq(fmt_e4m3_encode(-1e-30f), 0x80);
  /* f32 subnormal inputs round to zero in every format */
  ck_assert_uint_eq(fmt_e5m2fnuz_encode(fmt_float(0x007fffffu)), 0x00);
  /* bits above the nibble are ignored by the e2m1 decoder */
  ck_assert_float_eq(fmt_e2m1_decode(0xf7), 6.0f);
}
END_TEST

/* ---------------------------------------------------------------- bf16 */

START_TEST(bf16_rne) {
  ck_assert_uint_eq(fmt_bf16_from_f32(1.0f), 0x3f80);
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x3f808000u)), 0x3f80); /* tie, even below */
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x3f818000u)), 0x3f82); /* tie, even above */
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x3f808001u)), 0x3f81); /* just past the tie */
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x3f807fffu)), 0x3f80);
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x7f800000u)), 0x7f80);
  ck_assert_uint_eq(fmt_bf16_from_f32(-0.0f), 0x8000);
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x00008000u)), 0x0000); /* subnormal tie */
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x00018000u)), 0x0002);
  /* NaN stays NaN and becomes quiet, even a signalling one whose payload is all low bits
   * (plain rounding would turn 0x7f800001 into inf) */
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0x7f800001u)), 0x7fc0);
  ck_assert_uint_eq(fmt_bf16_from_f32(fmt_float(0xffc00000u)), 0xffc0);
  ck_assert_uint_eq(fmt_bits(fmt_bf16_to_f32(0xbf81)), 0xbf810000u);
  ck_assert_uint_eq(fmt_bits(fmt_round_bf16(fmt_float(0x40490fdbu))), 0x40490000u); /* pi */
  ck_assert_uint_eq(fmt_bits(fmt_round_bf16(fmt_float(0x3f7fffffu))), 0x3f800000u);
}
END_TEST

/* ---------------------------------------------------------------- division and ceilexp */

static u32 rng_state = 0x2545f491u;
static u32 rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return rng_state;
}

static int same_result(f32 a, f32 b) {
  return (isnan(a) && isnan(b)) || fmt_bits(a) == fmt_bits(b);
}

/* fmt_div_rn is the correctly rounded quotient: compare with the host's IEEE division (x86-64
 * SSE, gradual underflow) over random bit patterns of every class, including the quotients
 * that land among the subnormals and those that overflow */
START_TEST(div_rn_matches_ieee) {
  for (int i = 0; i < 100000; i++) {
    u32 ua = rng(), ub = rng();
    if (i % 4 == 1) ub = (ub & 0x807fffffu) | (((ua >> 23) & 0xffu) + 20u) % 255u << 23; /* underflow */
    if (i % 4 == 2) ub = (ub & 0x807fffffu) | (((ua >> 23) & 0xffu) + 140u) % 255u << 23; /* overflow */
    if (i % 4 == 3) ub = 0x43e00000u | (ub & 0x80000000u);                               /* 448 */
    f32 a = fmt_float(ua), b = fmt_float(ub);
    f32 want = a / b;
    ck_assert_msg(same_result(fmt_div_rn(a, b), want), "%08x / %08x: %08x, want %08x", ua, ub,
                  fmt_bits(fmt_div_rn(a, b)), fmt_bits(want));
  }
  const u32 sp[] = {0, 0x80000000u, 1, 0x00800000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                    0x7fc00000u, 0x3f800000u, 0xbf800000u, 0x007fffffu};
  for (unsigned i = 0; i < sizeof sp / 4; i++)
    for (unsigned j = 0; j < sizeof sp / 4; j++) {
      f32 a = fmt_float(sp[i]), b = fmt_float(sp[j]);
      ck_assert_msg(same_result(fmt_div_rn(a, b), a / b), "%08x / %08x", sp[i], sp[j]);
    }
}
END_TEST

START_TEST(ceilexp_cases) {
  ck_assert_uint_eq(fmt_ceilexp(1.0f), 127);
  ck_assert_uint_eq(fmt_ceilexp(1.5f), 128);
  ck_assert_uint_eq(fmt_ceilexp(fmt_float(0x3f7fffffu)), 127); /* just below 1: 2^0 */
  ck_assert_uint_eq(fmt_ceilexp(0.0f), 0);
  ck_assert_uint_eq(fmt_ceilexp(-2.0f), 128); /* |v| */
  ck_assert_uint_eq(fmt_ceilexp(FLT_MIN), 1);
  ck_assert_uint_eq(fmt_ceilexp(fmt_float(1u)), 1);           /* subnormal: 2^-126 */
  ck_assert_uint_eq(fmt_ceilexp(fmt_float(0x7f7fffffu)), 255); /* FLT_MAX: 2^128 */
  ck_assert_uint_eq(fmt_ceilexp(fmt_float(0x7f800000u)), 255);
  ck_assert_uint_eq(fmt_ceilexp(fmt_float(0x7fc00000u)), 256);
}
END_TEST

/* ---------------------------------------------------------------- MX rules */

/* Reference for the rules from the host's own arithmetic: IEEE `/` and `*` on floats, fmaxf,
 * and frexpf for the smallest power of two >= q; only the subnormal-quotient case (rule V,
 * amax below 448 * 2^-126) follows the bit rule, which gives 1 there. */
static unsigned ref_ceilexp(float q) {
  if (q == 0.0f) return 0;
  if (q < FLT_MIN) return 1;
  if (isinf(q)) return 255;
  int e;
  float m = frexpf(q, &e); /* q = m 2^e, m in [0.5, 1) */
  return (unsigned)(m == 0.5f ? e - 1 + 127 : e + 127);
}
static unsigned ref_code(int rule, float amax) {
  unsigned c;
  if (rule == FMT_RULE_V) {
    c = ref_ceilexp(fmaxf(amax, FLT_MIN) / 448.0f);
    return c > 254 ? 254 : c;
  }
  if (rule == FMT_RULE_A) {
    c = ref_ceilexp(fmaxf(amax, 1e-10f) * (1.0f / 448.0f));
    return c < 1 ? 1 : c > 254 ? 254 : c;
  }
  return ref_ceilexp(fmaxf(amax, 1e-4f) / 448.0f);
}

START_TEST(mx_constants) {
  /* the header spells its constants as bits: they must be what the spec's decimals are */
  ck_assert_uint_eq(FMT_BITS_1E_10, fmt_bits(1e-10f));
  ck_assert_uint_eq(FMT_BITS_1E_4, fmt_bits(1e-4f));
  ck_assert_uint_eq(FMT_BITS_RCP448, fmt_bits(1.0f / 448.0f));
  ck_assert_uint_eq(FMT_BITS_FLT_MIN, fmt_bits(FLT_MIN));
}
END_TEST

START_TEST(mx_rule_v_cases) {
  ck_assert_uint_eq(fmt_mx_code_v(448.0f), 127);                /* q = 1 exactly */
  ck_assert_uint_eq(fmt_mx_code_v(448.0f * 0x1p-20f), 107);     /* q = 2^-20 */
  ck_assert_uint_eq(fmt_mx_code_v(fmt_float(0x43e00001u)), 128); /* q = RN(1 + 8/7 2^-24) = 1 + 2^-23 */
  ck_assert_uint_eq(fmt_mx_code_v(7.0f), 121);                  /* q = 2^-6 */
  ck_assert_uint_eq(fmt_mx_code_v(8.0f), 122);                  /* q = 1/56, in (2^-6, 2^-5) */
  /* the floor: amax 0 -> FLT_MIN / 448, an f32 subnormal, whose ceilexp is 1 */
  ck_assert_uint_eq(fmt_mx_code_v(0.0f), 1);
  ck_assert_uint_eq(fmt_mx_code_v(fmt_float(0x00000100u)), 1); /* subnormal amax: floored */
  ck_assert_uint_eq(fmt_mx_code_v(fmt_float(0x7fc00000u)), 1); /* NaN amax: max() drops it */
  ck_assert_uint_eq(fmt_mx_code_v(448.0f * 0x1p-125f), 2);     /* q = 2^-125 */
  /* largest finite amax: FLT_MAX / 448 is in (2^119, 2^120) */
  ck_assert_uint_eq(fmt_mx_code_v(FLT_MAX), 247);
  /* the clamp to 254 acts only for inf (ceilexp 255) */
  ck_assert_uint_eq(fmt_mx_code_v(INFINITY), 254);
}
END_TEST

START_TEST(mx_rule_a_cases) {
  /* 448 * RN(1/448) = 1 + 0.75 2^-24, which rounds to 1 */
  ck_assert_uint_eq(fmt_mx_code_a(448.0f), 127);
  ck_assert_uint_eq(fmt_mx_code_a(fmt_float(0x43e00001u)), 128);
  ck_assert_uint_eq(fmt_mx_code_a(8.0f), 122);
  /* the floor 1e-10: 1e-10 / 448 ~ 2^-42.03, in (2^-43, 2^-42): 84 + 1 */
  ck_assert_uint_eq(fmt_mx_code_a(0.0f), 85);
  ck_assert_uint_eq(fmt_mx_code_a(1e-20f), 85);
  ck_assert_uint_eq(fmt_mx_code_a(fmt_float(0x7fc00000u)), 85);
  ck_assert_uint_eq(fmt_mx_code_a(FLT_MAX), 247);
  ck_assert_uint_eq(fmt_mx_code_a(INFINITY), 254);
  /* V and A differ where the floors do: amax 0 gives 1 under V and 85 under A */
  ck_assert_uint_ne(fmt_mx_code_v(1e-20f), fmt_mx_code_a(1e-20f));
  /* divide vs reciprocal: for amax = 3, V's quotient is RN(3/448) = 1.5B6DB7h 2^-8 (the
   * fraction 5/7 = .101101...b rounds up at bit 23) while A's is RN(3 * RN(1/448)), the exact
   * product 1B6DB6Fh 2^-33 being a tie that goes to the even 0x3bdb6db8 */
  ck_assert_uint_eq(fmt_bits(fmt_mx_quotient(FMT_RULE_V, 3.0f)), 0x3bdb6db7u);
  ck_assert_uint_eq(fmt_bits(fmt_mx_quotient(FMT_RULE_A, 3.0f)), 0x3bdb6db8u);
  /* ... yet the codes agree: 3/448 is far from a power of two */
  ck_assert_uint_eq(fmt_mx_code_v(3.0f), fmt_mx_code_a(3.0f));
}
END_TEST

/* The codes of V and A can only part where the quotient crosses a power of two, i.e. amax
 * near 448 * 2^k (mantissa 1.75). Every f32 within 128 ulps of those points, in every binade
 * from 1e-10 up, gives the same code under both rules (see fmt_mx_quotient's comment); a
 * division where A multiplies, or the reverse, would still pass this, which is why the
 * quotient case above pins the operation itself. */
START_TEST(mx_v_a_agree_near_crossings) {
  for (u32 ef = 0x2e; ef < 0xff; ef++)
    for (i32 d = -128; d <= 128; d++) {
      u32 u = (ef << 23) + 0x600000u + (u32)d; /* 0x600000: the fraction of 1.75 */
      f32 a = fmt_float(u);
      if (a < 1e-10f) continue;
      ck_assert_msg(fmt_mx_code_v(a) == fmt_mx_code_a(a), "amax %08x: V %u A %u", u,
                    fmt_mx_code_v(a), fmt_mx_code_a(a));
      ck_assert_uint_eq(fmt_mx_code_v(a), ref_code(FMT_RULE_V, a));
    }
}
END_TEST

START_TEST(mx_rule_r_cases) {
  /* floor 1e-4: 1e-4/448 ~ 2.23e-7 in (2^-23, 2^-22): 104 + 1 */
  ck_assert_uint_eq(fmt_mx_code_r(0.0f), 105);
  ck_assert_uint_eq(fmt_mx_code_r(5e-5f), 105);
  ck_assert_uint_eq(fmt_mx_code_r(448.0f * 0x1p100f), 227); /* q = 2^100 */
  ck_assert_uint_eq(fmt_mx_code_r(FLT_MAX), 247);
  ck_assert_uint_eq(fmt_mx_code_r(INFINITY), 255); /* no clamp */
  ck_assert_uint_eq(fmt_mx_code_r(fmt_float(0x7fc00000u)), 105);
}
END_TEST

/* all three rules against the host-arithmetic reference, over random positive amax */
START_TEST(mx_rules_vs_reference) {
  for (int rule = FMT_RULE_V; rule <= FMT_RULE_R; rule++)
    for (int i = 0; i < 30000; i++) {
      f32 a = fmt_float(rng() & 0x7fffffffu);
      if (isnan(a)) continue;
      ck_assert_msg(fmt_mx_code(rule, a) == ref_code(rule, a), "rule %d amax %08x: %u want %u",
                    rule, fmt_bits(a), fmt_mx_code(rule, a), ref_code(rule, a));
    }
}
END_TEST

START_TEST(mx_e4m3_cases) {
  ck_assert_uint_eq(fmt_mx_e4m3(1.0f, 127), 0x38);    /* 1 = 2^0: exponent field 7 */
  ck_assert_uint_eq(fmt_mx_e4m3(-1.0f, 127), 0xb8);
  ck_assert_uint_eq(fmt_mx_e4m3(1000.0f, 127), 0x7e); /* clamped to 448 */
  ck_assert_uint_eq(fmt_mx_e4m3(-1e30f, 127), 0xfe);
  ck_assert_uint_eq(fmt_mx_e4m3(3.0f, 120), 0x7c);    /* 3 * 2^7 = 384 = 1.5 2^8 */
  ck_assert_uint_eq(fmt_mx_e4m3(1.0f, 254), 0x00);    /* mul(254) = 0 */
  ck_assert_uint_eq(fmt_mx_e4m3(-1.0f, 254), 0x80);   /* -0 kept */
  ck_assert_uint_eq(fmt_mx_e4m3(0x1p-130f, 0), 0x20); /* 2^-130 * 2^127 = 2^-3 */
  ck_assert_uint_eq(fmt_mx_e4m3(fmt_float(0x7fc00000u), 127), 0x7f);
}
END_TEST

START_TEST(e8m0_mul_cases) {
  ck_assert_uint_eq(fmt_bits(fmt_e8m0_mul(127)), 0x3f800000u);
  ck_assert_uint_eq(fmt_bits(fmt_e8m0_mul(0)), 0x7f000000u);   /* 2^127 */
  ck_assert_uint_eq(fmt_bits(fmt_e8m0_mul(253)), 0x00800000u); /* 2^-126 */
  ck_assert_uint_eq(fmt_bits(fmt_e8m0_mul(254)), 0u);          /* the bit trick's 0 */
  ck_assert(isnan(fmt_e8m0_mul(255)));
  /* mul(c) is the exact inverse of the table's 2^(c-127) for every code below 254 */
  struct ft_decode t;
  ft_load_decode("e8m0", &t);
  for (unsigned c = 0; c < 254; c++)
    ck_assert_msg(fmt_e8m0_mul((u8)c) * ft_f32(t.bits[c]) == 1.0f, "code %u", c);
}
END_TEST

/* one 32-value group, V and A: x_i = (i - 16)/2, amax 8, code 122 (mul 2^5): bytes are
 * e4m3(16 (i - 16)), all exact */
START_TEST(mxfp8_group) {
  f32 x[32];
  u8 bytes[32], code = 0;
  for (int i = 0; i < 32; i++) x[i] = (f32)(i - 16) * 0.5f;
  for (int rule = FMT_RULE_V; rule <= FMT_RULE_A; rule++) {
    memset(bytes, 0xaa, sizeof bytes);
    fmt_mxfp8_quant(x, 32, rule, bytes, &code);
    ck_assert_uint_eq(code, 122);
    ck_assert_uint_eq(bytes[0], 0xf8);  /* -256 = -2^8: exponent field 15 */
    ck_assert_uint_eq(bytes[31], 0x77); /* 240 = 1.875 2^7 */
    ck_assert_uint_eq(bytes[16], 0x00);
    ck_assert_uint_eq(bytes[15], 0xd8); /* -16 = -2^4: exponent field 11 */
    for (int i = 0; i < 32; i++) ck_assert_float_eq(fmt_e4m3_decode(bytes[i]), x[i] * 32.0f);
  }
}
END_TEST

/* rule R over 64: x_i = i 2^-20, amax 63 2^-20 < 1e-4 so the floor gives code 105 (mul 2^22),
 * bytes e4m3(4 i), which round from i = 33 up */
START_TEST(mxfp8_group_r) {
  f32 x[64];
  u8 bytes[64], code = 0;
  for (int i = 0; i < 64; i++) x[i] = (f32)i * 0x1p-20f;
  fmt_mxfp8_quant(x, 64, FMT_RULE_R, bytes, &code);
  ck_assert_uint_eq(code, 105);
  ck_assert_uint_eq(bytes[1], 0x48);  /* 4 */
  ck_assert_uint_eq(bytes[3], 0x54);  /* 12 = 1.5 2^3 */
  ck_assert_uint_eq(bytes[33], 0x70); /* 132 -> 128 (step 16 above 128) */
  ck_assert_uint_eq(bytes[34], 0x70); /* 136: tie, to the even 128 */
  ck_assert_uint_eq(bytes[36], 0x71); /* 144 */
  ck_assert_uint_eq(bytes[38], 0x72); /* 152: tie, to the even 160 */
  ck_assert_uint_eq(bytes[63], 0x78); /* 252 -> 256 */
}
END_TEST

/* ---------------------------------------------------------------- MXFP4 */

START_TEST(e2m1_packing) {
  ck_assert_uint_eq(fmt_e2m1_pack(0x3, 0xc), 0xc3);
  ck_assert_uint_eq(fmt_e2m1_nibble(0xc3, 0), 0x3);
  ck_assert_uint_eq(fmt_e2m1_nibble(0xc3, 1), 0xc);
  ck_assert_uint_eq(fmt_e2m1_pack(0xf3, 0x1c), 0xc3); /* stray high bits dropped */
}
END_TEST

START_TEST(mxfp4_cases) {
  f32 x[32];
  u8 p[16], code = 0;
  memset(x, 0, sizeof x);
  /* amax 7: floor(log2 7) = 2, scale 2^0, code 127; then RNE on e2m1's grid */
  x[0] = 5.0f;   /* tie 4 | 6 -> 4 (even mantissa): nibble 6 */
  x[1] = -2.5f;  /* tie 2 | 3 -> 2: nibble 8|4 */
  x[2] = 0.25f;  /* tie 0 | 0.5 -> 0 */
  x[3] = 0.75f;  /* tie 0.5 | 1 -> 1: nibble 2 */
  x[4] = 7.0f;   /* saturates to 6: nibble 7 */
  x[5] = -0.0f;  /* nibble 8 */
  x[6] = 3.5f;   /* tie 3 | 4 -> 4: nibble 6 */
  x[7] = 0.1f;   /* 0 */
  fmt_mxfp4_quant(x, 32, p, &code);
  ck_assert_uint_eq(code, 127);
  ck_assert_uint_eq(p[0], 0xc6);
  ck_assert_uint_eq(p[1], 0x20);
  ck_assert_uint_eq(p[2], 0x87);
  ck_assert_uint_eq(p[3], 0x06);
  for (int i = 4; i < 16; i++) ck_assert_uint_eq(p[i], 0);

  /* amax 0.3: floor(log2) = -2, scale 2^-4, code 123; 0.3 * 16 = 4.8 -> 4: nibble 6 */
  memset(x, 0, sizeof x);
  x[9] = 0.3f;
  fmt_mxfp4_quant(x, 32, p, &code);
  ck_assert_uint_eq(code, 123);
  ck_assert_uint_eq(p[4], 0x60);
  /* a subnormal amax: the scale exponent -132 clamps to code 0 (2^-127) */
  x[9] = 0x1p-130f;
  fmt_mxfp4_quant(x, 32, p, &code);
  ck_assert_uint_eq(code, 0);
  ck_assert_uint_eq(p[4], 0x00); /* 2^-130 * 2^127 = 1/8 rounds to 0 */
  /* the largest finite amax: floor(log2) 127, code 252 */
  x[9] = FLT_MAX;
  fmt_mxfp4_quant(x, 32, p, &code);
  ck_assert_uint_eq(code, 252);
  ck_assert_uint_eq(p[4], 0x70); /* (2 - 2^-23) 2^127 / 2^125 = 8 - tiny: saturates to 6 */
  /* amax 0: code 0, zeros with their signs */
  memset(x, 0, sizeof x);
  x[3] = -0.0f;
  fmt_mxfp4_quant(x, 32, p, &code);
  ck_assert_uint_eq(code, 0);
  ck_assert_uint_eq(p[1], 0x80);
  /* a NaN element: the NaN scale and zero nibbles */
  x[3] = NAN;
  x[4] = 1.0f;
  fmt_mxfp4_quant(x, 32, p, &code);
  ck_assert_uint_eq(code, 255);
  for (int i = 0; i < 16; i++) ck_assert_uint_eq(p[i], 0);
}
END_TEST

/* groups of e2m1 values times 2^s, one of them ±4 or ±6 so floor(log2 amax) = s + 2: the
 * quantiser must give code s + 127 and the original nibbles back */
START_TEST(mxfp4_round_trip) {
  struct ft_decode t;
  ft_load_decode("e2m1", &t);
  const int scales[] = {-120, -20, -1, 0, 3, 60, 120};
  for (unsigned si = 0; si < sizeof scales / sizeof scales[0]; si++)
    for (int rep = 0; rep < 50; rep++) {
      int s = scales[si];
      u8 nib[32], p[16], code = 0;
      f32 x[32];
      for (int i = 0; i < 32; i++) nib[i] = (u8)(rng() & 0xf);
      nib[rng() % 32] = (u8)((rng() & 8) | (6 + (rng() & 1))); /* ±4 or ±6 */
      for (int i = 0; i < 32; i++) x[i] = ft_f32(t.bits[nib[i]]) * ldexpf(1.0f, s);
      fmt_mxfp4_quant(x, 32, p, &code);
      ck_assert_int_eq(code, s + 127);
      for (int i = 0; i < 32; i++) {
        u8 n = fmt_e2m1_nibble(p[i / 2], i & 1);
        ck_assert_msg(n == nib[i], "scale %d element %d: nibble %u, want %u", s, i, n, nib[i]);
        ck_assert_float_eq(fmt_e2m1_decode(n) * ldexpf(1.0f, code - 127), x[i]);
      }
    }
}
END_TEST

/* ---------------------------------------------------------------- gfx942 conversions */

/* every OCP byte: the FNUZ byte is worth exactly half (values from both tables), -0 becomes
 * +0, NaN stays NaN */
START_TEST(ocp_to_fnuz_exhaustive) {
  struct ft_decode ocp, fnuz;
  ft_load_decode("e4m3fn", &ocp);
  ft_load_decode("e4m3fnuz", &fnuz);
  for (unsigned b = 0; b < 256; b++) {
    u8 r = fmt_e4m3_ocp_to_fnuz((u8)b);
    if (ocp.kind[b] == FT_NAN) {
      ck_assert_msg(fnuz.kind[r] == FT_NAN, "OCP NaN %02x -> %02x", b, r);
      continue;
    }
    ck_assert_msg(fnuz.kind[r] == FT_FINITE, "OCP %02x -> FNUZ NaN", b);
    ck_assert_msg(ft_f32(fnuz.bits[r]) * 2.0f == ft_f32(ocp.bits[b]), "OCP %02x -> %02x", b, r);
    if (b != 0x80) ck_assert_uint_eq(r, b); /* bytes kept */
  }
  ck_assert_uint_eq(fmt_e4m3_ocp_to_fnuz(0x80), 0x00);
}
END_TEST

/* every e2m1 nibble: the FNUZ byte's table value is the e2m1 table value times 2^-7 */
START_TEST(e2m1_to_fnuz_exhaustive) {
  struct ft_decode e2, fnuz;
  ft_load_decode("e2m1", &e2);
  ft_load_decode("e4m3fnuz", &fnuz);
  for (unsigned n = 0; n < 16; n++) {
    u8 r = fmt_e2m1_to_e4m3fnuz((u8)n);
    ck_assert_msg(fnuz.kind[r] == FT_FINITE, "nibble %u -> NaN %02x", n, r);
    ck_assert_msg(ft_f32(fnuz.bits[r]) == ft_f32(e2.bits[n]) * 0x1p-7f, "nibble %u -> %02x", n, r);
  }
  ck_assert_uint_eq(fmt_e2m1_to_e4m3fnuz(0x8), 0x00);
  ck_assert_uint_eq(fmt_e2m1_to_e4m3fnuz(0x1), 0x04); /* 2^-8: the FNUZ subnormal 4 2^-10 */
  ck_assert_uint_eq(fmt_e2m1_to_e4m3fnuz(0xf), 0x9c); /* -6 2^-7 = -1.5 2^-5: field 3 */
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("formats");
  TCase *tc = tcase_create("tables");
  tcase_add_loop_test(tc, decode_every_code, 0, NCODECS);
  tcase_add_loop_test(tc, encode_every_row, 0, NCODECS - 1); /* e8m0 (last) has no encode */
  tcase_add_test(tc, encode_specials);
  tcase_add_test(tc, bf16_rne);
  suite_add_tcase(s, tc);
  tc = tcase_create("arith");
  tcase_add_test(tc, div_rn_matches_ieee);
  tcase_add_test(tc, ceilexp_cases);
  tcase_add_test(tc, e8m0_mul_cases);
  suite_add_tcase(s, tc);
  tc = tcase_create("mx");
  tcase_add_test(tc, mx_constants);
  tcase_add_test(tc, mx_rule_v_cases);
  tcase_add_test(tc, mx_rule_a_cases);
  tcase_add_test(tc, mx_v_a_agree_near_crossings);
  tcase_add_test(tc, mx_rule_r_cases);
  tcase_add_test(tc, mx_rules_vs_reference);
  tcase_add_test(tc, mx_e4m3_cases);
  tcase_add_test(tc, mxfp8_group);
  tcase_add_test(tc, mxfp8_group_r);
  tcase_add_test(tc, e2m1_packing);
  tcase_add_test(tc, mxfp4_cases);
  tcase_add_test(tc, mxfp4_round_trip);
  suite_add_tcase(s, tc);
  tc = tcase_create("gfx942");
  tcase_add_test(tc, ocp_to_fnuz_exhaustive);
  tcase_add_test(tc, e2m1_to_fnuz_exhaustive);
  suite_add_tcase(s, tc);
  return s;
}
