/* device/formats.h: the project's number formats (bf16, OCP and FNUZ fp8, e2m1, e8m0) and the
 * MXFP8 / MXFP4 quantisation rules of spec/mono.md §2.0, once, for GPU, agent and library.
 *
 * One source compiles three ways: OpenCL C 2.0 for amdgcn, host C (gnu11) in the software
 * agent's kernel object, and C11 (gcc, -Wall -Wextra -Werror) in the library and tests. Hence:
 * only dev_types.h is included, no libc, no double, float <-> bits through a union (gcc's C has
 * no __builtin_bit_cast), and every rounding done in integer arithmetic, so the result is the
 * same bit pattern in all three builds. In particular IEEE division is not trusted: OpenCL lets
 * the amdgcn backend lower `/` to a 2.5-ulp sequence, and the V and R rules need the correctly
 * rounded quotient, so fmt_div_rn divides mantissas as integers.
 *
 * Conventions: "RNE" is round to nearest, ties to even. Encoders that "saturate" clamp |x| to
 * the format's largest finite value BEFORE rounding (so ±inf gives ±max); the hardware's own
 * non-saturating conversions are modelled in hsa/sim/isa/, not here.
 */
#ifndef HM_FORMATS_H
#define HM_FORMATS_H

#include "dev_types.h"

/* ---------------------------------------------------------------- constants */

#define FMT_E4M3_MAX 448.0f      /* OCP e4m3fn, code 0x7e */
#define FMT_E4M3FNUZ_MAX 240.0f  /* gfx942 fp8, code 0x7f */
#define FMT_E5M2_MAX 57344.0f    /* OCP e5m2 (0x7b) and e5m2fnuz (0x7f) alike */
#define FMT_E2M1_MAX 6.0f
#define FMT_F32_QNAN 0x7fc00000u

/* MXFP8 activation-quantisation rules (spec/mono.md §2.0) */
#define FMT_RULE_V 0 /* vLLM mxfp8_e4m3_quantize: divide, floor FLT_MIN, clamp [0,254] */
#define FMT_RULE_A 1 /* aiter fused_mx_quant_moe_sort: multiply by RN(1/448), floor 1e-10, [1,254] */
#define FMT_RULE_R 2 /* KV record (64-wide groups): divide, floor 1e-4, no clamp */

/* f32 bit patterns of constants, so no build's decimal parsing is trusted */
#define FMT_BITS_FLT_MIN 0x00800000u /* 2^-126 */
#define FMT_BITS_1E_10 0x2edbe6ffu   /* RN(1e-10) */
#define FMT_BITS_1E_4 0x38d1b717u    /* RN(1e-4) */
#define FMT_BITS_RCP448 0x3b124925u  /* RN(1/448), slightly below 1/448 */

/* ---------------------------------------------------------------- float <-> bits */

static inline u32 fmt_bits(f32 x) {
  union {
    f32 f;
    u32 u;
  } t;
  t.f = x;
  return t.u;
}
static inline f32 fmt_float(u32 u) {
  union {
    f32 f;
    u32 u;
  } t;
  t.u = u;
  return t.f;
}
static inline f32 fmt_absf(f32 x) { return fmt_float(fmt_bits(x) & 0x7fffffffu); }
static inline int fmt_isnan(f32 x) { return (fmt_bits(x) & 0x7fffffffu) > 0x7f800000u; }
/* 2^k for -126 <= k <= 127 (normal range; callers stay inside it) */
static inline f32 fmt_pow2(i32 k) { return fmt_float((u32)(k + 127) << 23); }

/* ---------------------------------------------------------------- integer helpers */

/* leading-zero count of a nonzero u64, without builtins: OpenCL has no `long long`, which
 * __builtin_clzll is declared with */
static inline u32 fmt_clz64(u64 v) {
  u32 n = 0;
  if (!(v >> 32)) n += 32, v <<= 32;
  if (!(v >> 48)) n += 16, v <<= 16;
  if (!(v >> 56)) n += 8, v <<= 8;
  if (!(v >> 60)) n += 4, v <<= 4;
  if (!(v >> 62)) n += 2, v <<= 2;
  if (!(v >> 63)) n += 1;
  return n;
}

/* m / 2^s rounded to nearest even, for m < 2^63 (s >= 63 gives 0, which is then exact RNE) */
static inline u64 fmt_rshift_rne(u64 m, u32 s) {
  if (s == 0) return m;
  if (s >= 63) return 0;
  u64 q = m >> s, rem = m & ((((u64)1) << s) - 1), hw = ((u64)1) << (s - 1);
  if (rem > hw || (rem == hw && (q & 1))) q++;
  return q;
}

/* The f32 nearest (RNE) to sign * m * 2^e, m != 0, m < 2^62, with IEEE gradual underflow
 * and overflow to infinity. Every rounding in this file that lands in f32 goes through here. */
static inline f32 fmt_f32_from_scaled(u32 sign, u64 m, i32 e) {
  i32 p = 63 - (i32)fmt_clz64(m); /* leading bit: value in [2^(p+e), 2^(p+e+1)) */
  i32 lead = p + e;
  u32 s = sign ? 0x80000000u : 0u;
  if (lead > 127) return fmt_float(s | 0x7f800000u);
  if (lead < -126) { /* subnormal: quantum 2^-149 */
    i32 sh = -149 - e;
    u64 q = sh > 0 ? fmt_rshift_rne(m, (u32)sh) : m << (u32)(-sh);
    return fmt_float(s | (u32)q); /* q == 2^23 is FLT_MIN, encoded the same way */
  }
  /* normal: keep 24 bits */
  i32 sh = p - 23;
  u64 q = sh > 0 ? fmt_rshift_rne(m, (u32)sh) : m << (u32)(-sh);
  if (q == ((u64)1 << 24)) q >>= 1, lead++;
  if (lead > 127) return fmt_float(s | 0x7f800000u);
  return fmt_float(s | ((u32)(lead + 127) << 23) | ((u32)q & 0x7fffffu));
}

/* |x| of a finite nonzero f32 as m * 2^e with m in [2^23, 2^24) (subnormals normalised) */
static inline void fmt_unpack(u32 mag, u64 *m, i32 *e) {
  u32 ef = mag >> 23, f = mag & 0x7fffffu;
  if (ef) {
    *m = f | 0x800000u;
    *e = (i32)ef - 150;
  } else {
    u32 sh = fmt_clz64(f) - 40; /* brings the leading bit of f to bit 23 */
    *m = (u64)f << sh;
    *e = -149 - (i32)sh;
  }
}

/* a / b correctly rounded (RNE) with IEEE specials, in integer arithmetic: the same bits on
 * every build, unlike `/` under OpenCL's relaxed division (see the top of this file). */
static inline f32 fmt_div_rn(f32 a, f32 b) {
  u32 ua = fmt_bits(a), ub = fmt_bits(b);
  u32 sign = (ua ^ ub) >> 31, ma_ = ua & 0x7fffffffu, mb_ = ub & 0x7fffffffu;
  u32 s = sign << 31;
  if (ma_ > 0x7f800000u || mb_ > 0x7f800000u) return fmt_float(FMT_F32_QNAN);
  if (ma_ == 0x7f800000u) return fmt_float(mb_ == 0x7f800000u ? FMT_F32_QNAN : s | 0x7f800000u);
  if (mb_ == 0x7f800000u) return fmt_float(s);
  if (mb_ == 0) return fmt_float(ma_ == 0 ? FMT_F32_QNAN : s | 0x7f800000u);
  if (ma_ == 0) return fmt_float(s);
  u64 ma, mb;
  i32 ea, eb;
  fmt_unpack(ma_, &ma, &ea);
  fmt_unpack(mb_, &mb, &eb);
  /* 40 extra bits: the quotient has 40 or 41 significant bits, far more than the 24 kept plus
   * the guard, and a nonzero remainder becomes a sticky bit below them */
  u64 num = ma << 40;
  u64 q = num / mb, r = num - q * mb;
  q = (q << 1) | (r != 0);
  return fmt_f32_from_scaled(sign, q, ea - eb - 41);
}

/* ---------------------------------------------------------------- bf16 */

/* f32 -> bf16 bits, RNE; a NaN stays a quiet NaN (sign and top payload bits kept) */
static inline u16 fmt_bf16_from_f32(f32 x) {
  u32 u = fmt_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (u16)(u >> 16);
}
static inline f32 fmt_bf16_to_f32(u16 b) { return fmt_float((u32)b << 16); }
/* bf16(x) kept as f32: the reference's rounding points (spec/mono.md §2.5) */
static inline f32 fmt_round_bf16(f32 x) { return fmt_bf16_to_f32(fmt_bf16_from_f32(x)); }

/* ---------------------------------------------------------------- small floats, generic */

/* Magnitude of a small-float code (sign bit already removed) with `mbits` mantissa bits and
 * exponent bias `bias`; the caller handles NaN / inf codes. Every value of every format here
 * is an f32 normal number, so the product below is exact. */
static inline f32 fmt_small_value(u32 mag, u32 mbits, i32 bias) {
  u32 e = mag >> mbits, f = mag & ((1u << mbits) - 1u);
  if (e == 0) return (f32)(i32)f * fmt_pow2(1 - bias - (i32)mbits);
  return (f32)(i32)(f | (1u << mbits)) * fmt_pow2((i32)e - bias - (i32)mbits);
}

/* Magnitude code nearest (RNE) to the finite f32 magnitude `mag` (bits) for a format with
 * `mbits` mantissa bits and smallest normal exponent `emin`, as if the format's exponent went
 * on without limit: callers clamp first (saturation) or compare the code with the largest
 * finite one (the hardware's overflow, hsa/sim/isa). Subnormals of the format come out of the
 * same formula (quantum 2^(emin - mbits) below 2^emin). */
static inline u32 fmt_small_code(u32 mag, u32 mbits, i32 emin) {
  if (mag == 0) return 0;
  u32 ef = mag >> 23;
  u64 m = ef ? ((mag & 0x7fffffu) | 0x800000u) : mag;
  i32 e = ef ? (i32)ef - 150 : -149;        /* |x| = m * 2^e */
  i32 E = ef ? (i32)ef - 127 : -127;        /* f32 subnormals are far below every emin */
  i32 b = E > emin ? E : emin;              /* exponent of the quantum's binade */
  i32 sh = (b - (i32)mbits) - e;            /* >= 23 - mbits > 0 */
  u32 n = (u32)fmt_rshift_rne(m, (u32)sh); /* in [0, 2^(mbits+1)] */
  return ((u32)(b - emin) << mbits) + n;    /* a carry to 2^(mbits+1) rolls into the exponent */
}

/* RNE with saturation for a format whose sign is bit `signbit`; `maxbits` is the f32 bits of
 * its largest finite value and `maxcode` that value's magnitude code. */
static inline u32 fmt_small_encode_sat(f32 x, u32 mbits, i32 emin, u32 maxbits, u32 maxcode,
                                       u32 signbit) {
  u32 u = fmt_bits(x), mag = u & 0x7fffffffu, sign = (u >> 31) << signbit;
  if (mag >= maxbits) return sign | maxcode; /* NaN is handled by the callers */
  return sign | fmt_small_code(mag, mbits, emin);
}

/* ---------------------------------------------------------------- e4m3 (OCP e4m3fn) */

/* bias 7, max 448, S.1111.111 NaN, no inf, -0 exists */
static inline f32 fmt_e4m3_decode(u8 c) {
  u32 mag = c & 0x7fu, s = (u32)(c & 0x80u) << 24;
  if (mag == 0x7fu) return fmt_float(s | FMT_F32_QNAN);
  return fmt_float(s | fmt_bits(fmt_small_value(mag, 3, 7)));
}
/* RNE, saturating to ±448 (clamp before rounding); -0 kept; NaN -> 0x7f | sign */
static inline u8 fmt_e4m3_encode(f32 x) {
  if (fmt_isnan(x)) return (u8)(0x7fu | ((fmt_bits(x) >> 24) & 0x80u));
  return (u8)fmt_small_encode_sat(x, 3, -6, 0x43e00000u, 0x7eu, 7);
}

/* ---------------------------------------------------------------- e4m3fnuz (gfx942 fp8) */

/* bias 8, max 240, 0x80 the only NaN, no -0, no inf */
static inline f32 fmt_e4m3fnuz_decode(u8 c) {
  if (c == 0x80u) return fmt_float(FMT_F32_QNAN);
  u32 s = (u32)(c & 0x80u) << 24;
  return fmt_float(s | fmt_bits(fmt_small_value(c & 0x7fu, 3, 8)));
}
/* RNE, saturating to ±240; a result of zero magnitude is 0x00 whatever the sign; NaN -> 0x80 */
static inline u8 fmt_e4m3fnuz_encode(f32 x) {
  if (fmt_isnan(x)) return 0x80u;
  u32 c = fmt_small_encode_sat(x, 3, -7, 0x43700000u, 0x7fu, 7);
  return (u8)((c & 0x7fu) ? c : 0u);
}

/* ---------------------------------------------------------------- e5m2 (OCP) */

/* bias 15, max 57344, exponent 31: inf (mantissa 0) or NaN, as IEEE */
static inline f32 fmt_e5m2_decode(u8 c) {
  u32 mag = c & 0x7fu, s = (u32)(c & 0x80u) << 24;
  if (mag == 0x7cu) return fmt_float(s | 0x7f800000u);
  if (mag > 0x7cu) return fmt_float(s | FMT_F32_QNAN);
  return fmt_float(s | fmt_bits(fmt_small_value(mag, 2, 15)));
}
/* RNE, saturating to ±57344 (so ±inf -> ±max); -0 kept; NaN -> 0x7e | sign (the quiet NaN) */
static inline u8 fmt_e5m2_encode(f32 x) {
  if (fmt_isnan(x)) return (u8)(0x7eu | ((fmt_bits(x) >> 24) & 0x80u));
  return (u8)fmt_small_encode_sat(x, 2, -14, 0x47600000u, 0x7bu, 7);
}

/* ---------------------------------------------------------------- e5m2fnuz (gfx942 bf8) */

/* bias 16, max 57344, 0x80 the only NaN, no -0, no inf */
static inline f32 fmt_e5m2fnuz_decode(u8 c) {
  if (c == 0x80u) return fmt_float(FMT_F32_QNAN);
  u32 s = (u32)(c & 0x80u) << 24;
  return fmt_float(s | fmt_bits(fmt_small_value(c & 0x7fu, 2, 16)));
}
static inline u8 fmt_e5m2fnuz_encode(f32 x) {
  if (fmt_isnan(x)) return 0x80u;
  u32 c = fmt_small_encode_sat(x, 2, -15, 0x47600000u, 0x7fu, 7);
  return (u8)((c & 0x7fu) ? c : 0u);
}

/* ---------------------------------------------------------------- e2m1 (OCP MX FP4) */

/* nibble S.EE.M, bias 1: 0, .5, 1, 1.5, 2, 3, 4, 6 and negatives (8 is -0); bits above the
 * nibble are ignored */
static inline f32 fmt_e2m1_decode(u8 nib) {
  u32 s = (u32)(nib & 0x8u) << 28;
  return fmt_float(s | fmt_bits(fmt_small_value(nib & 0x7u, 1, 1)));
}
/* RNE, saturating to ±6; -0 kept (nibble 8). The format has no NaN: a NaN input saturates to
 * ±6 like an infinity, so it stays visible in the output rather than becoming zero. */
static inline u8 fmt_e2m1_encode(f32 x) {
  u32 u = fmt_bits(x);
  if (fmt_isnan(x)) return (u8)(0x7u | ((u >> 28) & 0x8u));
  return (u8)fmt_small_encode_sat(x, 1, 0, 0x40c00000u, 0x7u, 3);
}
/* two values a byte, the EVEN index in the LOW nibble (spec/mono.md §4.2) */
static inline u8 fmt_e2m1_pack(u8 lo, u8 hi) { return (u8)((lo & 0xfu) | ((hi & 0xfu) << 4)); }
static inline u8 fmt_e2m1_nibble(u8 byte, int which) {
  return (u8)(which ? (byte >> 4) : (byte & 0xfu));
}

/* ---------------------------------------------------------------- e8m0 (OCP MX scale) */

/* 2^(c-127); code 0 is 2^-127 (an f32 subnormal), 255 is NaN */
static inline f32 fmt_e8m0_decode(u8 c) {
  if (c == 255u) return fmt_float(FMT_F32_QNAN);
  if (c == 0u) return fmt_float(0x00400000u);
  return fmt_float((u32)c << 23);
}
/* The reference's multiplier mul(c) = 2^(127-c), built as the f32 with bits (254-c)<<23
 * (spec/mono.md §2.0): code 0 gives 2^127, code 254 gives 0 (not 2^-127: the bit trick's
 * exponent field 0 with a zero mantissa). Code 255 (the NaN scale) gives NaN. */
static inline f32 fmt_e8m0_mul(u8 c) {
  if (c == 255u) return fmt_float(FMT_F32_QNAN);
  return fmt_float((u32)(254u - c) << 23);
}

/* ceilexp(v) = biased f32 exponent of v, plus 1 if its mantissa is nonzero: the E8M0 code of
 * the smallest power of two >= v (spec/mono.md §2.0), read off the bits as the reference does.
 * The sign is ignored (|v| is used). Edge cases, all from the same bit rule: 0 -> 0; an f32
 * subnormal -> 1 (2^-126, the smallest NORMAL power of two >= v); +inf -> 255; NaN -> 256.
 * Callers clamp as their rule says. */
static inline u32 fmt_ceilexp(f32 v) {
  u32 mag = fmt_bits(v) & 0x7fffffffu;
  return (mag >> 23) + ((mag & 0x7fffffu) != 0u);
}

/* ---------------------------------------------------------------- MXFP8 activations */

/* max(a, floor) where a NaN amax gives the floor (as fmaxf and v_max_f32 do) */
static inline f32 fmt_floor_amax(f32 amax, u32 floor_bits) {
  f32 fl = fmt_float(floor_bits);
  return amax > fl ? amax : fl;
}
/* The quotient each rule takes ceilexp of, before its clamp:
 *   V: RN(max(amax, FLT_MIN) / 448)      (a correctly rounded division)
 *   A: RN(max(amax, 1e-10) * RN(1/448))  (a multiply by the f32 reciprocal)
 *   R: RN(max(amax, 1e-4) / 448)
 * RN(1/448) is 0.75 ulp above 1/448, so V and A quotients differ in the last bit for many
 * amax (3.0 among them). Their ceilexp never does for amax >= 1e-10 (checked over every f32):
 * a code changes only where the quotient crosses a power of two, i.e. amax near 1.75 * 2^k,
 * and no f32 lies close enough to 448 * 2^k for the two roundings to fall on either side.
 * So V and A differ only through their floors (amax < 1e-10) and clamps. */
static inline f32 fmt_mx_quotient(int rule, f32 amax) {
  if (rule == FMT_RULE_A)
    return fmt_floor_amax(amax, FMT_BITS_1E_10) * fmt_float(FMT_BITS_RCP448);
  return fmt_div_rn(fmt_floor_amax(amax, rule == FMT_RULE_R ? FMT_BITS_1E_4 : FMT_BITS_FLT_MIN),
                    FMT_E4M3_MAX);
}
/* rule V: c = clamp(ceilexp(RN(max(amax, FLT_MIN) / 448)), 0, 254); amax 0 gives 1 (the
 * quotient is an f32 subnormal, see fmt_ceilexp) */
static inline u8 fmt_mx_code_v(f32 amax) {
  u32 c = fmt_ceilexp(fmt_mx_quotient(FMT_RULE_V, amax));
  return (u8)(c > 254u ? 254u : c);
}
/* rule A: c = clamp(ceilexp(RN(max(amax, 1e-10) * RN(1/448))), 1, 254); the floor keeps c at
 * 85 or more, so only the upper clamp can act */
static inline u8 fmt_mx_code_a(f32 amax) {
  u32 c = fmt_ceilexp(fmt_mx_quotient(FMT_RULE_A, amax));
  return (u8)(c < 1u ? 1u : c > 254u ? 254u : c);
}
/* rule R (64-wide KV groups): c = ceilexp(RN(max(amax, 1e-4) / 448)), no clamp; an infinite
 * amax gives 255 (the E8M0 NaN code) */
static inline u8 fmt_mx_code_r(f32 amax) {
  return (u8)fmt_ceilexp(fmt_mx_quotient(FMT_RULE_R, amax));
}
static inline u8 fmt_mx_code(int rule, f32 amax) {
  return rule == FMT_RULE_A ? fmt_mx_code_a(amax)
         : rule == FMT_RULE_R ? fmt_mx_code_r(amax)
                              : fmt_mx_code_v(amax);
}
/* the byte of every rule: e4m3(clamp(x * mul(code), ±448)), one rounding in the product */
static inline u8 fmt_mx_e4m3(f32 x, u8 code) { return fmt_e4m3_encode(x * fmt_e8m0_mul(code)); }

/* One group: n values (32, or 64 for rule R) -> n e4m3 bytes and one E8M0 code. amax is the
 * largest |x|; a NaN element is ignored by it (the comparison is false) and encodes as NaN. */
static inline void fmt_mxfp8_quant(const f32 *x, u32 n, int rule, u8 *bytes, u8 *code) {
  f32 amax = 0.0f;
  for (u32 i = 0; i < n; i++) {
    f32 a = fmt_absf(x[i]);
    amax = a > amax ? a : amax;
  }
  u8 c = fmt_mx_code(rule, amax);
  for (u32 i = 0; i < n; i++) bytes[i] = fmt_mx_e4m3(x[i], c);
  *code = c;
}

/* ---------------------------------------------------------------- MXFP4 weights */

/* OCP MX v1.0 §6.3: shared scale X = 2^(floor(log2(amax)) - 2) (2 = emax of e2m1), code =
 * that exponent + 127 clamped to [0, 254]; elements e2m1(x / X) RNE saturating, two a byte,
 * even index low. n is even (32 for the project's groups). Choices where the spec leaves
 * room: amax 0 gives code 0 and elements ±0 (sign kept, as fmt_e2m1_encode does); a NaN or
 * infinite element gives code 255 (the NaN scale) and all nibbles 0. x / X is computed as
 * x * 2^(127-code), exact whenever the result is an f32 normal number, and values small
 * enough to be otherwise are far below e2m1's smallest step. */
static inline void fmt_mxfp4_quant(const f32 *x, u32 n, u8 *packed, u8 *code) {
  u32 amax_bits = 0;
  for (u32 i = 0; i < n; i++) {
    u32 m = fmt_bits(x[i]) & 0x7fffffffu;
    amax_bits = m > amax_bits ? m : amax_bits; /* magnitudes order as their bits */
  }
  if (amax_bits >= 0x7f800000u) {
    for (u32 i = 0; i < n / 2; i++) packed[i] = 0;
    *code = 255u;
    return;
  }
  i32 c = 0;
  if (amax_bits != 0) {
    u64 m;
    i32 e;
    fmt_unpack(amax_bits, &m, &e);
    i32 fl = e + 23; /* floor(log2(amax)): m is in [2^23, 2^24) */
    c = fl - 2 + 127;
    c = c < 0 ? 0 : c > 254 ? 254 : c;
  }
  f32 mul = fmt_e8m0_mul((u8)c);
  for (u32 i = 0; i + 1 < n; i += 2)
    packed[i / 2] = fmt_e2m1_pack(fmt_e2m1_encode(x[i] * mul), fmt_e2m1_encode(x[i + 1] * mul));
  *code = (u8)c;
}

/* ---------------------------------------------------------------- gfx942 conversions */

/* ---------------------------------------------------------------- gfx942 activations (FNUZ, max 224) */

#define FMT_FNUZ_ACT_MAX 224.0f

/* gfx942's code of rule V, A or R (spec/mono.md §2.6): the rule's quotient against 224 instead of
 * 448 (A: times RN(1/224) = 2 RN(1/448)), ceilexp, the rule's clamp (R: none). A normal quotient is
 * exactly twice the OCP one, hence the OCP code + 1; a subnormal one (rule V with amax below 224 x
 * 2^-126, an all-zero group among them) gives 1 (the reference's ref_fnuz_group); R's 1e-4 floor
 * keeps its quotient normal. */
static inline u8 fmt_mx_code_fnuz(int rule, f32 amax) {
  f32 q = rule == FMT_RULE_A ? fmt_floor_amax(amax, FMT_BITS_1E_10) * fmt_float(FMT_BITS_RCP448 + (1u << 23))
                             : fmt_div_rn(fmt_floor_amax(amax, rule == FMT_RULE_R ? FMT_BITS_1E_4 : FMT_BITS_FLT_MIN),
                                          FMT_FNUZ_ACT_MAX);
  u32 c = fmt_ceilexp(q), lo = rule == FMT_RULE_A ? 1u : 0u;
  if (rule == FMT_RULE_R) return (u8)c;
  return (u8)(c > 254u ? 254u : c < lo ? lo : c);
}
/* Its byte: FNUZ e4m3 of clamp(x * mul(code), +-224), the clamp as fminf(fmaxf(v, -224), 224)
 * (a NaN product gives -224). */
static inline u8 fmt_mx_fnuz(f32 x, u8 code) {
  f32 v = x * fmt_e8m0_mul(code);
  v = fmt_isnan(v) || v < -FMT_FNUZ_ACT_MAX ? -FMT_FNUZ_ACT_MAX : v > FMT_FNUZ_ACT_MAX ? FMT_FNUZ_ACT_MAX : v;
  return fmt_e4m3fnuz_encode(v);
}

/* An OCP e4m3 byte as the FNUZ byte of HALF its value (spec/mono.md §2.6, §4.4): FNUZ has bias
 * 8, so the same bits read as FNUZ are worth half; the caller adds 1 to the block's E8M0 code.
 * Bytes are kept, except OCP -0 (0x80, which is FNUZ's NaN) -> 0x00, and OCP NaN (0x7f, 0xff)
 * -> 0x80, so a NaN stays a NaN (0x7f read as FNUZ would be the finite 240). */
static inline u8 fmt_e4m3_ocp_to_fnuz(u8 b) {
  if (b == 0x80u) return 0u;
  if ((b & 0x7fu) == 0x7fu) return 0x80u;
  return b;
}
/* The FNUZ e4m3 byte whose value is e2m1(nib) * 2^-7 exactly (gfx942 expands FP4 weights to
 * fp8 in-kernel, spec/mono.md §2.6): 0.5*2^-7 is the FNUZ subnormal 4*2^-10, the rest are
 * normal; -0 (nibble 8) -> 0x00, FNUZ having no -0. */
static inline u8 fmt_e2m1_to_e4m3fnuz(u8 nib) {
  return fmt_e4m3fnuz_encode(fmt_e2m1_decode(nib) * fmt_pow2(-7));
}

/* A packed e2m1 pair with each -0 nibble (8) rewritten to +0: gfx942's FP4 -> FNUZ expansion
 * would make -0 the FNUZ NaN, and -0 and +0 give the same products (spec/mono.md §4.4). */
static inline u8 fmt_fp4x2_drop_negzero(u8 b) {
  if ((b & 0x0fu) == 0x08u) b = (u8)(b & 0xf0u);
  if ((b & 0xf0u) == 0x80u) b = (u8)(b & 0x0fu);
  return b;
}

#endif /* HM_FORMATS_H */
