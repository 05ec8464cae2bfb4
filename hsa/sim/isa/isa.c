/* hsa/sim/isa/isa.c: the matrix-instruction and fp8-conversion models of hm_isa.h: operand
 * layouts, decoding through device/formats.h, and an exact accumulator rounded once.
 */
#include "hm_isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

/* ---------------------------------------------------------------- instruction shapes */

struct shape {
  unsigned m;      /* M = N: 16 or 32 */
  unsigned k;      /* K */
  bool scaled;     /* f8f6f4 with E8M0 block scales */
  bool gfx950only;
};

static const struct shape shapes[DEV_MFMA_OP_COUNT] = {
    [DEV_MFMA_F32_16X16X4_F32] = {16, 4, false, false},
    [DEV_MFMA_F32_16X16X16_F16] = {16, 16, false, false},
    [DEV_MFMA_F32_16X16X16_BF16] = {16, 16, false, false},
    [DEV_MFMA_F32_32X32X8_BF16] = {32, 8, false, false},
    [DEV_MFMA_F32_16X16X32_BF16] = {16, 32, false, true},
    [DEV_MFMA_F32_16X16X32_FP8] = {16, 32, false, false},
    [DEV_MFMA_F32_32X32X16_FP8] = {32, 16, false, false},
    [DEV_MFMA_SCALE_F32_16X16X128_F8F6F4] = {16, 128, true, true},
    [DEV_MFMA_SCALE_F32_32X32X64_F8F6F4] = {32, 64, true, true},
};

bool hm_isa_mfma_supported(enum hm_isa_arch arch, enum dev_mfma_op op) {
  if ((unsigned)op >= DEV_MFMA_OP_COUNT) return false;
  if (arch == HM_ISA_GFX950) return true;
  return arch == HM_ISA_GFX942 && !shapes[op].gfx950only;
}

/* element kinds an operand is read as */
enum elem {
  EL_F32,
  EL_F16,
  EL_BF16,
  EL_E4M3,     /* OCP */
  EL_E4M3FNUZ, /* gfx942 fp8 */
  EL_E5M2,     /* OCP bf8 */
  EL_E2M1
};
static unsigned elem_bits(enum elem e) {
  return e == EL_F32 ? 32 : (e == EL_F16 || e == EL_BF16) ? 16 : e == EL_E2M1 ? 4 : 8;
}

/* Where A[r][k] (or B[k][r]) lives: the lane, and the element index within that lane's
 * registers (see the table in hm_isa.h). The scaled forms' layout depends on the element
 * width: 8-bit formats take 16-byte runs of K, fp4 takes 32 consecutive K a lane. */
static void locate(enum dev_mfma_op op, unsigned bits, unsigned r, unsigned k, unsigned *lane,
                   unsigned *elem) {
  switch (op) {
  case DEV_MFMA_F32_16X16X4_F32: *lane = 16 * k + r, *elem = 0; return;
  case DEV_MFMA_F32_16X16X16_F16:
  case DEV_MFMA_F32_16X16X16_BF16: *lane = 16 * (k / 4) + r, *elem = k % 4; return;
  case DEV_MFMA_F32_32X32X8_BF16: *lane = 32 * (k / 4) + r, *elem = k % 4; return;
  case DEV_MFMA_F32_16X16X32_BF16:
  case DEV_MFMA_F32_16X16X32_FP8: *lane = 16 * (k / 8) + r, *elem = k % 8; return;
  case DEV_MFMA_F32_32X32X16_FP8: *lane = 32 * (k / 8) + r, *elem = k % 8; return;
  case DEV_MFMA_SCALE_F32_16X16X128_F8F6F4:
    if (bits == 4) *lane = 16 * (k / 32) + r, *elem = k % 32;
    else *lane = 16 * ((k / 16) % 4) + r, *elem = 16 * (k / 64) + k % 16;
    return;
  case DEV_MFMA_SCALE_F32_32X32X64_F8F6F4:
    if (bits == 4) *lane = 32 * (k / 32) + r, *elem = k % 32;
    else *lane = 32 * ((k / 16) % 2) + r, *elem = 16 * (k / 32) + k % 16;
    return;
  default: *lane = 0, *elem = 0; return;
  }
}

static u32 field(const u32 regs[8], unsigned bits, unsigned elem) {
  unsigned bit = bits * elem;
  u32 w = regs[bit / 32] >> (bit % 32);
  return bits == 32 ? w : w & ((1u << bits) - 1u);
}

static f32 f16_to_f32(u32 h) {
  u32 s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31) return fmt_float(s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) return fmt_float(s | fmt_bits((f32)(i32)m * fmt_pow2(-24)));
  return fmt_float(s | ((e + 112u) << 23) | (m << 13));
}

/* ---------------------------------------------------------------- exact accumulator */

/* A two's-complement fixed-point integer of 11 x 64 bits whose bit b weighs 2^(b - 352). The
 * terms it receives are m * 2^e with m < 2^48 (a product of two f32 mantissas, which split
 * gives as odd integers with -149 <= e <= 104): f32 x f32 products lie in [2^-298, 2^256),
 * fp8/fp4 products times two scales of 2^-127..2^127 in [2^-286, 2^286) (e5m2's 57344 squared
 * times 2^254). C is an f32, and 129 terms add at most 8 bits: every bit lands between 54 and
 * 352 + 294, far from the sign bit 703, so every partial sum is exact. */
#define ACC_LIMBS 11
#define ACC_OFFSET 352

struct acc {
  u64 w[ACC_LIMBS];
  bool nonzero_term; /* some term was nonzero */
  bool all_neg_zero; /* every term so far was -0 (IEEE: then the zero sum is -0) */
};

static void acc_init(struct acc *a) {
  memset(a->w, 0, sizeof a->w);
  a->nonzero_term = false;
  a->all_neg_zero = true;
}

/* add (neg ? -1 : 1) * m * 2^e */
static void acc_add(struct acc *a, bool neg, u64 m, i32 e) {
  unsigned pos = (unsigned)(e + ACC_OFFSET), l = pos / 64, sh = pos % 64;
  u64 part[2] = {m << sh, sh ? m >> (64 - sh) : 0};
  if (!neg) {
    u64 carry = 0;
    for (unsigned i = l; i < ACC_LIMBS; i++) {
      u64 add = (i - l < 2 ? part[i - l] : 0);
      u64 s = a->w[i] + add;
      u64 c1 = s < add;
      u64 s2 = s + carry;
      u64 c2 = s2 < carry;
      a->w[i] = s2;
      carry = c1 | c2;
      if (i - l >= 1 && !carry) break;
    }
  } else {
    u64 borrow = 0;
    for (unsigned i = l; i < ACC_LIMBS; i++) {
      u64 sub = (i - l < 2 ? part[i - l] : 0);
      u64 d = a->w[i] - sub;
      u64 b1 = a->w[i] < sub;
      u64 d2 = d - borrow;
      u64 b2 = d < borrow;
      a->w[i] = d2;
      borrow = b1 | b2;
      if (i - l >= 1 && !borrow) break;
    }
  }
}

/* a finite f32 (or product of several) as a term; zero terms only update the sign rule */
static void acc_term(struct acc *a, bool neg, u64 m, i32 e) {
  if (m == 0) {
    a->all_neg_zero = a->all_neg_zero && neg;
    return;
  }
  a->nonzero_term = true;
  a->all_neg_zero = false;
  acc_add(a, neg, m, e);
}

/* the sum rounded once to f32 */
static f32 acc_round(struct acc *a) {
  u64 w[ACC_LIMBS];
  memcpy(w, a->w, sizeof w);
  bool neg = (w[ACC_LIMBS - 1] >> 63) != 0;
  if (neg) { /* magnitude of a negative two's-complement value */
    u64 carry = 1;
    for (unsigned i = 0; i < ACC_LIMBS; i++) {
      w[i] = ~w[i] + carry;
      carry = carry && w[i] == 0;
    }
  }
  int top = ACC_LIMBS - 1;
  while (top >= 0 && w[top] == 0) top--;
  if (top < 0) return fmt_float(!a->nonzero_term && a->all_neg_zero ? 0x80000000u : 0u);
  unsigned p = 64 * (unsigned)top + 63 - fmt_clz64(w[top]); /* leading bit */
  /* keep 61 bits from the leading one down, and whether anything below them is set */
  u64 m = 0;
  i32 e;
  bool sticky = false;
  if (p < 61) {
    m = w[0];
    e = -ACC_OFFSET;
  } else {
    unsigned lo = p - 60; /* lowest kept bit */
    for (unsigned b = 0; b < 61; b++) {
      unsigned bit = lo + b;
      m |= ((w[bit / 64] >> (bit % 64)) & 1u) << b;
    }
    for (unsigned i = 0; i < lo / 64 && !sticky; i++) sticky = w[i] != 0;
    if (!sticky && lo % 64) sticky = (w[lo / 64] & ((((u64)1) << (lo % 64)) - 1)) != 0;
    e = (i32)lo - ACC_OFFSET;
  }
  /* one more bit below for the sticky flag: still exact for round-to-nearest-even */
  m = (m << 1) | (sticky ? 1u : 0u);
  return fmt_f32_from_scaled(neg ? 1u : 0u, m, e - 1);
}

/* ---------------------------------------------------------------- one output element */

/* an operand value split for exact products: class, sign, and |v| = m * 2^e with m odd (the
 * trailing zeros moved into e keep products of narrow formats narrow) */
struct val {
  u32 m;
  i16 e;
  u8 neg;
  u8 cls; /* 0 zero, 1 finite, 2 inf or NaN (f holds it) */
  f32 f;
};

static struct val split(f32 f) {
  struct val v = {0, 0, 0, 0, f};
  u32 u = fmt_bits(f), mag = u & 0x7fffffffu, ef = mag >> 23;
  v.neg = (u8)(u >> 31);
  if (mag >= 0x7f800000u) v.cls = 2;
  else if (mag != 0) {
    u32 m = ef ? (mag & 0x7fffffu) | 0x800000u : mag;
    i32 e = ef ? (i32)ef - 150 : -149;
    unsigned tz = (unsigned)__builtin_ctz(m);
    v.cls = 1;
    v.m = m >> tz;
    v.e = (i16)(e + (i32)tz);
  }
  return v;
}

/* The narrow formats' 256 (or 16) codes, split once for all threads. */
static struct val narrow[4][256]; /* EL_E4M3, EL_E4M3FNUZ, EL_E5M2, EL_E2M1 */
static pthread_once_t narrow_once = PTHREAD_ONCE_INIT;
/* For the integer fast path (hm_isa_mfma's fast_dot): e4m3's and e2m1's codes as integers of
 * their smallest step (2^-9, 2^-1), and a code's class bits. */
#define NF_SPECIAL 1u
#define NF_ZERO 2u
#define NF_NEG 4u
static i32 narrow_int[2][256]; /* EL_E4M3, EL_E2M1 */
static u8 narrow_flags[2][256];
static void narrow_init(void) {
  for (unsigned c = 0; c < 256; c++) {
    narrow[0][c] = split(fmt_e4m3_decode((u8)c));
    narrow[1][c] = split(fmt_e4m3fnuz_decode((u8)c));
    narrow[2][c] = split(fmt_e5m2_decode((u8)c));
    narrow[3][c] = split(fmt_e2m1_decode((u8)c));
    for (unsigned f = 0; f < 2; f++) {
      const struct val *v = &narrow[f ? 3 : 0][c];
      i32 off = f ? -1 : -9, x = v->cls == 1 ? (i32)v->m << (v->e - off) : 0;
      narrow_int[f][c] = v->neg ? -x : x;
      narrow_flags[f][c] = (u8)((v->cls == 2 ? NF_SPECIAL : 0u) | (v->cls == 0 ? NF_ZERO : 0u) | (v->neg ? NF_NEG : 0u));
    }
  }
}

static struct val value(enum elem e, u32 code) {
  switch (e) {
  case EL_F32: return split(fmt_float(code));
  case EL_F16: return split(f16_to_f32(code));
  case EL_BF16: return split(fmt_bf16_to_f32((u16)code));
  case EL_E4M3: return narrow[0][code & 0xffu];
  case EL_E4M3FNUZ: return narrow[1][code & 0xffu];
  case EL_E5M2: return narrow[2][code & 0xffu];
  case EL_E2M1: return narrow[3][code & 0xfu];
  }
  return split(0.0f);
}

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

/* The exact sum of n finite nonzero terms (-1)^tn m 2^te (lo: the lowest te; hi: one past the
 * highest bit), rounded once to f32; n == 0 gives the zero that all_neg_zero says. The terms
 * usually span few binades, so they are summed in a 128-bit integer aligned at the lowest term
 * when their span plus 8 carry bits fits; otherwise in the wide accumulator. Both are exact. */
static f32 sum_terms(const u64 *tm, const i32 *te, const u8 *tn, unsigned n, i32 lo, i32 hi, bool all_neg_zero) {
  if (!n) return fmt_float(all_neg_zero ? 0x80000000u : 0u);
  if (hi - lo <= 118) { /* every term < 2^118 after alignment; 129 of them < 2^126 */
    i128 acc = 0;
    for (unsigned x = 0; x < n; x++) {
      i128 v = (i128)tm[x] << (te[x] - lo);
      acc += tn[x] ? -v : v;
    }
    if (acc == 0) return fmt_float(0u); /* exact cancellation of nonzero terms: +0 */
    bool neg = acc < 0;
    u128 mag = neg ? (u128)(-acc) : (u128)acc;
    u64 h64 = (u64)(mag >> 64);
    unsigned p = h64 ? 127u - (unsigned)__builtin_clzll(h64) : 63u - (unsigned)__builtin_clzll((u64)mag);
    if (p <= 60) return fmt_f32_from_scaled(neg, (u64)mag, lo);
    unsigned drop = p - 60; /* keep 61 bits, fold the rest into a sticky bit */
    u64 m = (u64)(mag >> drop);
    bool sticky = (mag & (((u128)1 << drop) - 1)) != 0;
    return fmt_f32_from_scaled(neg, (m << 1) | (sticky ? 1u : 0u), lo + (i32)drop - 1);
  }
  struct acc w;
  acc_init(&w);
  for (unsigned x = 0; x < n; x++) acc_term(&w, tn[x] != 0, tm[x], te[x]);
  return acc_round(&w);
}

/* C + sum_k A[i][k] B[k][j] (times the block scales), per the model in hm_isa.h: `a` and `b`
 * are row i of A and column j of B, decoded; sa / sb the E8M0 codes of each 32-wide K block
 * (NULL for unscaled forms). The terms usually span few binades (narrow formats, scales
 * close together), so they are summed in a 128-bit integer aligned at the lowest term when
 * their span plus 8 carry bits fits; otherwise in the wide accumulator. Both sums are exact,
 * so which one runs never shows in the result. */
static f32 dot(const struct val *a, const struct val *b, unsigned k, const u32 *sa, const u32 *sb,
               f32 c) {
  u64 tm[129];
  i32 te[129];
  u8 tn[129];
  i32 escale[4] = {0, 0, 0, 0};
  unsigned n = 0;
  bool all_neg_zero = true, special = false;
  i32 lo = 0, hi = 0; /* lowest bit weight, and one past the highest, over nonzero terms */
  struct val cv = split(c);
  if (cv.cls == 2) special = true;
  if (sa)
    for (unsigned kb = 0; kb < k / 32; kb++) {
      if (sa[kb] == 255u || sb[kb] == 255u) special = true; /* a NaN scale */
      escale[kb] = (i32)sa[kb] - 127 + (i32)sb[kb] - 127;
    }
  if (cv.cls == 1) {
    tm[0] = cv.m, te[0] = cv.e, tn[0] = cv.neg, n = 1;
    lo = cv.e, hi = cv.e + 32 - __builtin_clz(cv.m);
    all_neg_zero = false;
  } else all_neg_zero = cv.neg != 0;
  for (unsigned x = 0; x < k && !special; x++) {
    u8 neg = a[x].neg ^ b[x].neg;
    if (a[x].cls == 2 || b[x].cls == 2) special = true;
    else if (a[x].cls == 0 || b[x].cls == 0) all_neg_zero = all_neg_zero && neg;
    else {
      u64 m = (u64)a[x].m * b[x].m;
      i32 e = a[x].e + b[x].e + escale[x / 32];
      i32 top = e + 64 - __builtin_clzll(m);
      if (!n || e < lo) lo = e;
      if (!n || top > hi) hi = top;
      tm[n] = m, te[n] = e, tn[n] = neg, n++;
      all_neg_zero = false;
    }
  }
  if (special) {
    /* IEEE specials decide the result; double arithmetic propagates them the same way, and
     * the finite part of the sum cannot change an infinite or NaN total */
    double s = (double)c;
    for (unsigned x = 0; x < k; x++) {
      double p = (double)a[x].f * (double)b[x].f;
      if (sa) p = p * (double)fmt_e8m0_decode((u8)sa[x / 32]) * (double)fmt_e8m0_decode((u8)sb[x / 32]);
      s += p;
    }
    return (f32)s;
  }
  return sum_terms(tm, te, tn, n, lo, hi, all_neg_zero);
}

/* ---------------------------------------------------------------- hm_isa_mfma */

static _Atomic bool fast_off; /* hm_isa_mfma_fast_path(false): tests compare the two paths */
void hm_isa_mfma_fast_path(bool on) { fast_off = !on; }

/* ---------------------------------------------------------------- the integer fast path */

/* e4m3 (OCP and FNUZ) and e2m1 values are small integers times their format's smallest step
 * (2^-9, 2^-10, 2^-1): |v| < 2^18. A product is then an exact integer below 2^36 and a 32-wide
 * block's sum one below 2^41, so a block needs only integer multiply-adds; the blocks (each at
 * the weight its two scales give) and C are then summed exactly by sum_terms. The result is the
 * same exact sum rounded once: the fast path changes the cost, never the value.
 * bf16 values have 8-bit significands but a wide exponent, so there is no one step for the
 * format: a row (or column) whose finite values span at most ROW_SPAN_BITS bits is an integer
 * multiple of its own lowest bit (|v| < 2^28, products < 2^56, a sum of 32 below 2^61), and
 * the rest (a tiny value beside a large one) take the general path. */
#define ROW_SPAN_BITS 28

static bool int_step(enum elem e, i32 *off) {
  switch (e) {
  case EL_E4M3: *off = -9; return true;
  case EL_E4M3FNUZ: *off = -10; return true;
  case EL_E2M1: *off = -1; return true;
  default: return false;
  }
}

/* v as an integer multiple of 2^off (finite, or zero); sign applied */
static i32 int_of(const struct val *v, i32 off) {
  if (v->cls != 1) return 0;
  i32 x = (i32)v->m << (v->e - off);
  return v->neg ? -x : x;
}

/* The dot product of fast_dot's model: C + sum over blocks of bk elements of
 * 2^(off + escale[kb]) * (the block's integer sum); ia, ib: the row's and column's integers;
 * escale[kb]: the two scales' exponents of block kb (zeros when unscaled); zero: the row or column
 * is all zeros, and sa / sb whether each side's signs are all + (1), all - (2) or mixed (0). C
 * finite or zero. False when the result is a zero whose sign the integers cannot tell (C is -0
 * and every product is a zero: -0 only if every product is -0): the caller then decides it from
 * the values (zero_product_sign). */
static bool fast_dot(const i32 *ia, const i32 *ib, unsigned k, unsigned bk, i32 off, const i32 *escale, f32 c,
                     bool zero, unsigned sa, unsigned sb, f32 *out) {
  const u32 cb = fmt_bits(c);
  /* a zero row or column (a GEMV's padded tokens: most columns of a few-row step) with C nonzero:
   * C + 0 is C exactly; decided before C is split, the cost of most calls */
  if (zero && (cb & 0x7fffffffu) != 0) return *out = c, true;
  u64 tm[5];
  i32 te[5];
  u8 tn[5];
  unsigned n = 0;
  i32 lo = 0, hi = 0;
  struct val cv = split(c);
  if (cv.cls == 1) {
    tm[0] = cv.m, te[0] = cv.e, tn[0] = cv.neg, n = 1;
    lo = cv.e, hi = cv.e + 32 - __builtin_clz(cv.m);
  }
  bool any = false;
  for (unsigned kb = 0; kb < k / bk && !zero; kb++) {
    i64 sum = 0;
    for (unsigned x = bk * kb; x < bk * kb + bk; x++) sum += (i64)ia[x] * ib[x];
    if (!sum) continue;
    any = true;
    u64 m = sum < 0 ? (u64)-sum : (u64)sum;
    i32 e = off + escale[kb];
    i32 top = e + 64 - __builtin_clzll(m);
    if (!n || e < lo) lo = e;
    if (!n || top > hi) hi = top;
    tm[n] = m, te[n] = e, tn[n] = sum < 0, n++;
  }
  if (n) {
    if (!any && cv.cls == 1) return *out = c, true; /* only C: exact already */
    return *out = sum_terms(tm, te, tn, n, lo, hi, false), true;
  }
  /* C is zero and the products sum to zero: +0 if some product is nonzero (they cancelled);
   * otherwise -0 only when C and every product are -0 (the model of hm_isa.h) */
  if (!cv.neg) return *out = fmt_float(0u), true;
  /* a zero row or column: every product a zero; with one sign a side, known at once (-0 needs
   * every pair's signs opposite) */
  if (zero) {
    if (!sa || !sb) return false;
    return *out = fmt_float((sa ^ sb) == 3 ? 0x80000000u : 0u), true;
  }
  for (unsigned x = 0; x < k; x++)
    if (ia[x] && ib[x]) return *out = fmt_float(0u), true;
  return false;
}

/* The sum of k zero products and C = -0: -0 only when every product is -0. */
static f32 zero_product_sign(const struct val *a, const struct val *b, unsigned k) {
  for (unsigned x = 0; x < k; x++)
    if (!(a[x].neg ^ b[x].neg)) return fmt_float(0u);
  return fmt_float(0x80000000u);
}

static bool fmt_elem(u32 fmt, enum elem *e) {
  switch (fmt) {
  case DEV_FMT_FP8: *e = EL_E4M3; return true;
  case DEV_FMT_BF8: *e = EL_E5M2; return true;
  case DEV_FMT_FP4: *e = EL_E2M1; return true;
  default: return false; /* fp6 / bf6 are not modelled */
  }
}

/* Row r of A (b == false) or column r of B of the scaled 16x16x128 form in e4m3 or e2m1 (the
 * layers' GEMVs), read straight off the registers in locate()'s layout: with out, decoded; with
 * iout, as integers of the format's smallest step, and fl[0] / fl[1] the OR / AND of the codes'
 * NF_ bits (iout and fl come together). */
static void gather_narrow(enum elem el, bool b, const struct dev_mfma_lane *lanes, unsigned r, struct val *out,
                          i32 *iout, u8 fl[2]) {
  const unsigned f = el == EL_E4M3 ? 0 : 1;
  const struct val *tab = narrow[f ? 3 : 0];
  const i32 *itab = narrow_int[f];
  const u8 *ftab = narrow_flags[f];
  u8 fo = 0, fa = 0xff;
  /* a column of all-zero codes (a GEMV's padding tokens: most columns of a few-row step) is
   * filled at once: every element is code 0's value */
  u32 any = 0;
  for (unsigned g = 0; g < 4; g++) {
    const u32 *reg = b ? lanes[16 * g + r].b : lanes[16 * g + r].a;
    for (unsigned w = 0; w < 8; w++) any |= reg[w];
  }
  if (!any) {
    for (unsigned x = 0; out && x < 128; x++) out[x] = tab[0];
    if (iout) memset(iout, 0, 128 * sizeof *iout), fl[0] = fl[1] = ftab[0];
    return;
  }
  for (unsigned g = 0; g < 4; g++) {
    const u32 *reg = b ? lanes[16 * g + r].b : lanes[16 * g + r].a;
    for (unsigned e = 0; e < 32; e++) {
      u32 code = f ? (reg[e / 8] >> (4 * (e % 8))) & 0xfu : (reg[e / 4] >> (8 * (e % 4))) & 0xffu;
      unsigned x = f ? 32 * g + e : 64 * (e / 16) + 16 * g + e % 16;
      if (out) out[x] = tab[code];
      if (iout) iout[x] = itab[code], fo |= ftab[code], fa &= ftab[code];
    }
  }
  if (iout) fl[0] = fo, fl[1] = fa;
}

/* Every bf16 code split once for all threads (the attention's matrix instructions: 1 MB). */
static struct val *bf16_vals;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static void bf16_init(void) {
  struct val *t = malloc(65536 * sizeof *t);
  if (!t) return; /* decoded per element instead */
  for (u32 c = 0; c < 65536; c++) t[c] = split(fmt_bf16_to_f32((u16)c));
  bf16_vals = t;
}

/* Row r of A (b == false) or column r of B of a 16x16 bf16 form (lane 16(k/n) + r, element
 * k % n, n = k / 4 elements a lane), read straight off the registers through the table; false
 * when the table could not be made. */
static bool gather_bf16(bool b, const struct dev_mfma_lane *lanes, unsigned r, unsigned k, struct val *out) {
  pthread_once(&bf16_once, bf16_init);
  if (!bf16_vals) return false;
  const unsigned n = k / 4;
  for (unsigned g = 0; g < 4; g++) {
    const u32 *reg = b ? lanes[16 * g + r].b : lanes[16 * g + r].a;
    for (unsigned e = 0; e < n; e++) out[n * g + e] = bf16_vals[(reg[e / 2] >> (16 * (e % 2))) & 0xffffu];
  }
  return true;
}

/* row r of A (b == false) or column r of B, decoded into out[0..k) */
static void gather(enum dev_mfma_op op, enum elem el, bool b, const struct dev_mfma_lane *lanes,
                   unsigned r, unsigned k, struct val *out) {
  unsigned bits = elem_bits(el);
  if (op == DEV_MFMA_SCALE_F32_16X16X128_F8F6F4 && (el == EL_E4M3 || el == EL_E2M1)) {
    gather_narrow(el, b, lanes, r, out, NULL, NULL);
    return;
  }
  if ((op == DEV_MFMA_F32_16X16X16_BF16 || op == DEV_MFMA_F32_16X16X32_BF16) && gather_bf16(b, lanes, r, k, out)) return;
  for (unsigned x = 0; x < k; x++) {
    unsigned l, e;
    locate(op, bits, r, x, &l, &e);
    out[x] = value(el, field(b ? lanes[l].b : lanes[l].a, bits, e));
  }
}

/* The agent calls hm_isa_mfma once a lane with the same 64 lanes' operands, and decoding them
 * is most of the cost, so each thread keeps the last instruction's decoded A and B, reused
 * while the operands (compared in full) and the instruction are the same. A thread whose
 * cache cannot be allocated decodes per call instead: same result, slower. */
struct mfma_cache {
  bool valid;
  enum hm_isa_arch arch;
  enum dev_mfma_op op;
  enum elem ea, eb;
  u32 regs[64][16]; /* a[0..7] then b[0..7] of every lane */
  struct val a[32 * 128]; /* A row-major, rows of k */
  struct val bt[32 * 128]; /* B transposed: column j's k values contiguous */
  /* the integer form (fast_dot): both operands narrow or bf16, each row's (column's) values an
   * integer multiple of 2^aoff[r] (boff[r]): the format's smallest step, or for bf16 the row's
   * lowest bit */
  bool fast, fast_off;
  i32 aoff[32], boff[32];
  i32 ia[32 * 128], ibt[32 * 128];
  u8 aslow[32], bslow[32]; /* the row / column takes the general path: an inf or NaN, or too wide */
  u8 azero[32], bzero[32]; /* every value of the row / column is a zero */
  u8 asign[32], bsign[32]; /* 1: every sign of the row / column is +, 2: every sign -, 0: mixed */
  /* a and bt hold the row / column decoded: the narrow GEMV form decodes only the integers up
   * front, and a row's values when they are first needed (an inf or NaN, a NaN scale, a C not
   * finite, the sign of a zero sum: rare) */
  u8 adec[32], bdec[32];
};

/* The fast path's form of row (or column) r decoded in v[0..k): integers, offset, classes;
 * off is the format's step, or INT32_MIN for bf16 (the row's own lowest bit). */
static void int_row(const struct val *v, unsigned k, i32 off, i32 *iv, i32 *voff, u8 *slow, u8 *zero, u8 *sign) {
  u8 z = 1, sg = 3, sp = 0;
  i32 lo = INT32_MAX, top = INT32_MIN;
  for (unsigned x = 0; x < k; x++) {
    sp |= v[x].cls == 2, z &= v[x].cls == 0, sg &= v[x].neg ? 2 : 1;
    if (v[x].cls == 1 && off == INT32_MIN) {
      if (v[x].e < lo) lo = v[x].e;
      if (v[x].e + 32 - __builtin_clz(v[x].m) > top) top = v[x].e + 32 - __builtin_clz(v[x].m);
    }
  }
  if (off == INT32_MIN) {
    off = lo == INT32_MAX ? 0 : lo;
    if (lo != INT32_MAX && top - lo > ROW_SPAN_BITS) sp = 1;
  }
  *voff = off, *slow = sp, *zero = z, *sign = sg;
  for (unsigned x = 0; x < k; x++) iv[x] = sp ? 0 : int_of(&v[x], off);
}
static pthread_key_t cache_key;
static bool cache_key_ok;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static void cache_key_init(void) { cache_key_ok = pthread_key_create(&cache_key, free) == 0; }

static struct mfma_cache *cache_get(void) {
  pthread_once(&cache_once, cache_key_init);
  if (!cache_key_ok) return NULL;
  struct mfma_cache *c = pthread_getspecific(cache_key);
  if (!c) {
    c = calloc(1, sizeof *c);
    if (c && pthread_setspecific(cache_key, c) != 0) {
      free(c);
      c = NULL;
    }
  }
  return c;
}

static bool cache_hit(const struct mfma_cache *c, enum hm_isa_arch arch, enum dev_mfma_op op,
                      enum elem ea, enum elem eb, const struct dev_mfma_lane *lanes) {
  if (!c->valid || c->arch != arch || c->op != op || c->ea != ea || c->eb != eb || c->fast_off != fast_off) return false;
  for (unsigned l = 0; l < 64; l++)
    if (memcmp(c->regs[l], lanes[l].a, 32) || memcmp(c->regs[l] + 8, lanes[l].b, 32)) return false;
  return true;
}

/* How a lane's call treats the thread's decoded operands: compare them with the registers (a
 * caller of hm_isa_mfma), decode afresh (the first lane of hm_isa_mfma_wave), or use them as they
 * are (its other lanes: the same registers, decoded a moment ago). */
enum reuse { REUSE_COMPARE, REUSE_DECODE, REUSE_TRUST };

static bool mfma_lane(enum hm_isa_arch arch, enum dev_mfma_op op, const struct dev_mfma_lane lanes[64], unsigned lane,
                      f32 d[16], enum reuse reuse) {
  if (!lanes || !d || lane >= 64 || !hm_isa_mfma_supported(arch, op)) return false;
  const struct shape sh = shapes[op];
  enum elem ea, eb;
  switch (op) {
  case DEV_MFMA_F32_16X16X4_F32: ea = eb = EL_F32; break;
  case DEV_MFMA_F32_16X16X16_F16: ea = eb = EL_F16; break;
  case DEV_MFMA_F32_16X16X16_BF16:
  case DEV_MFMA_F32_32X32X8_BF16:
  case DEV_MFMA_F32_16X16X32_BF16: ea = eb = EL_BF16; break;
  case DEV_MFMA_F32_16X16X32_FP8:
  case DEV_MFMA_F32_32X32X16_FP8: ea = eb = arch == HM_ISA_GFX950 ? EL_E4M3 : EL_E4M3FNUZ; break;
  default:
    if (!fmt_elem(lanes[lane].fmt_a, &ea) || !fmt_elem(lanes[lane].fmt_b, &eb)) return false;
    if (lanes[lane].opsel_a > 3 || lanes[lane].opsel_b > 3) return false;
    /* instruction fields: the same in every lane (checked once a wave: a trusting lane's are the
     * lanes the first lane checked) */
    for (unsigned l = 0; reuse != REUSE_TRUST && l < 64; l++)
      if (lanes[l].fmt_a != lanes[lane].fmt_a || lanes[l].fmt_b != lanes[lane].fmt_b ||
          lanes[l].opsel_a != lanes[lane].opsel_a || lanes[l].opsel_b != lanes[lane].opsel_b)
        return false;
    break;
  }
  pthread_once(&narrow_once, narrow_init);
  unsigned m = sh.m, k = sh.k;
  unsigned j = lane % m; /* this lane's D column */

  struct mfma_cache *c = cache_get();
  if (c && (reuse == REUSE_DECODE || (reuse == REUSE_COMPARE && !cache_hit(c, arch, op, ea, eb, lanes)))) {
    c->valid = true, c->arch = arch, c->op = op, c->ea = ea, c->eb = eb;
    for (unsigned l = 0; l < 64; l++) {
      memcpy(c->regs[l], lanes[l].a, 32);
      memcpy(c->regs[l] + 8, lanes[l].b, 32);
    }
    c->fast_off = fast_off;
    /* blocks of 32 under scales, else one block of at most 32 (the integer sums' bound) */
    i32 offa = INT32_MIN, offb = INT32_MIN;
    c->fast = !fast_off && (sh.scaled ? k % 32 == 0 : k <= 32) && (ea == EL_BF16 || int_step(ea, &offa)) &&
              (eb == EL_BF16 || int_step(eb, &offb));
    bool narrow_ab = c->fast && op == DEV_MFMA_SCALE_F32_16X16X128_F8F6F4 && (ea == EL_E4M3 || ea == EL_E2M1) &&
                     (eb == EL_E4M3 || eb == EL_E2M1);
    for (unsigned r = 0; narrow_ab && r < m; r++) {
      /* the layers' GEMVs: integers and class bits from the codes in one pass */
      u8 fla[2], flb[2];
      gather_narrow(ea, false, lanes, r, NULL, &c->ia[r * k], fla);
      gather_narrow(eb, true, lanes, r, NULL, &c->ibt[r * k], flb);
      c->adec[r] = c->bdec[r] = 0;
      c->aoff[r] = offa, c->boff[r] = offb;
      c->aslow[r] = (fla[0] & NF_SPECIAL) != 0, c->bslow[r] = (flb[0] & NF_SPECIAL) != 0;
      c->azero[r] = (fla[1] & NF_ZERO) != 0, c->bzero[r] = (flb[1] & NF_ZERO) != 0;
      c->asign[r] = (u8)((fla[1] & NF_NEG) ? 2 : !(fla[0] & NF_NEG) ? 1 : 0);
      c->bsign[r] = (u8)((flb[1] & NF_NEG) ? 2 : !(flb[0] & NF_NEG) ? 1 : 0);
    }
    for (unsigned r = 0; !narrow_ab && r < m; r++) {
      gather(op, ea, false, lanes, r, k, &c->a[r * k]);
      gather(op, eb, true, lanes, r, k, &c->bt[r * k]);
      c->adec[r] = c->bdec[r] = 1;
    }
    for (unsigned r = 0; c->fast && !narrow_ab && r < m; r++) {
      int_row(&c->a[r * k], k, offa, &c->ia[r * k], &c->aoff[r], &c->aslow[r], &c->azero[r], &c->asign[r]);
      int_row(&c->bt[r * k], k, offb, &c->ibt[r * k], &c->boff[r], &c->bslow[r], &c->bzero[r], &c->bsign[r]);
    }
  }
  struct val bcol[128], arow[128];
  const struct val *bj = bcol;
  if (c) bj = &c->bt[j * k];
  else gather(op, eb, true, lanes, j, k, bcol);
  bool lazy = c && !c->bdec[j]; /* bj is decoded when the general path first needs it */

  u32 sbv[4], sav[4];
  if (sh.scaled) /* the code for (column j, block kb) sits in lane m*kb + j, byte opsel */
    for (unsigned kb = 0; kb < k / 32; kb++)
      sbv[kb] = (lanes[m * kb + j].scale_b >> (8 * lanes[lane].opsel_b)) & 0xffu;
  unsigned nreg = m == 16 ? 4 : 16;
  for (unsigned r = 0; r < nreg; r++) {
    unsigned i = m == 16 ? 4 * (lane / 16) + r : 8 * (r / 4) + 4 * (lane / 32) + r % 4;
    const struct val *ai = arow;
    if (c) ai = &c->a[i * k];
    else gather(op, ea, false, lanes, i, k, arow);
    if (sh.scaled)
      for (unsigned kb = 0; kb < k / 32; kb++)
        sav[kb] = (lanes[m * kb + i].scale_a >> (8 * lanes[lane].opsel_a)) & 0xffu;
    f32 cin = lanes[lane].c[r];
    bool fast = c && c->fast && !c->aslow[i] && !c->bslow[j] && (fmt_bits(cin) & 0x7fffffffu) < 0x7f800000u;
    i32 escale[4] = {0, 0, 0, 0};
    for (unsigned kb = 0; fast && sh.scaled && kb < k / 32; kb++) {
      if (sav[kb] == 255u || sbv[kb] == 255u) fast = false; /* a NaN scale: the general path */
      escale[kb] = (i32)sav[kb] - 127 + (i32)sbv[kb] - 127;
    }
    if (fast && fast_dot(&c->ia[i * k], &c->ibt[j * k], k, sh.scaled ? 32 : k, c->aoff[i] + c->boff[j], escale,
                         cin, c->azero[i] || c->bzero[j], c->asign[i], c->bsign[j], &d[r]))
      continue;
    if (c && !c->adec[i]) gather(op, ea, false, lanes, i, k, &c->a[i * k]), c->adec[i] = 1;
    if (lazy) gather(op, eb, true, lanes, j, k, &c->bt[j * k]), c->bdec[j] = 1, lazy = false;
    d[r] = fast ? zero_product_sign(ai, bj, k) : dot(ai, bj, k, sh.scaled ? sav : NULL, sh.scaled ? sbv : NULL, cin);
  }
  return true;
}

bool hm_isa_mfma(enum hm_isa_arch arch, enum dev_mfma_op op, const struct dev_mfma_lane lanes[64],
                 unsigned lane, f32 d[16]) {
  return mfma_lane(arch, op, lanes, lane, d, REUSE_COMPARE);
}

bool hm_isa_mfma_wave(enum hm_isa_arch arch, enum dev_mfma_op op, const struct dev_mfma_lane lanes[64],
                      f32 d[64][16]) {
  if (!d) return false;
  memset(d, 0, 64 * sizeof d[0]); /* a 16x16 form leaves registers 4..15 */
  for (unsigned l = 0; l < 64; l++)
    if (!mfma_lane(arch, op, lanes, l, d[l], l == 0 ? REUSE_DECODE : REUSE_TRUST)) return false;
  return true;
}

/* ---------------------------------------------------------------- conversions */

/* RNE without saturation (see hm_isa.h): the magnitude code is computed as if the format went
 * on past its largest value, and anything beyond that code overflows */
static u8 cvt_encode(f32 x, bool e5m2, bool fnuz) {
  u32 u = fmt_bits(x), mag = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
  u32 mbits = e5m2 ? 2 : 3, maxcode = e5m2 ? (fnuz ? 0x7fu : 0x7bu) : (fnuz ? 0x7fu : 0x7eu);
  i32 emin = e5m2 ? (fnuz ? -15 : -14) : (fnuz ? -7 : -6);
  if (mag > 0x7f800000u) return (u8)(fnuz ? 0x80u : s | (e5m2 ? 0x7eu : 0x7fu));
  u32 code = mag >= 0x7f800000u ? maxcode + 1 : fmt_small_code(mag, mbits, emin);
  if (code > maxcode) return (u8)(fnuz ? 0x80u : s | (e5m2 ? 0x7cu : 0x7fu));
  if (fnuz && code == 0) return 0;
  return (u8)(s | code);
}

u32 hm_isa_cvt(enum hm_isa_arch arch, enum dev_cvt_op op, f32 a, f32 b, u32 old, u32 sel) {
  bool fnuz = arch != HM_ISA_GFX950;
  switch (op) {
  case DEV_CVT_PK_FP8_F32:
  case DEV_CVT_PK_BF8_F32: {
    bool e5 = op == DEV_CVT_PK_BF8_F32;
    u32 pair = (u32)cvt_encode(a, e5, fnuz) | ((u32)cvt_encode(b, e5, fnuz) << 8);
    return sel ? (old & 0x0000ffffu) | (pair << 16) : (old & 0xffff0000u) | pair;
  }
  case DEV_CVT_F32_FP8:
  case DEV_CVT_F32_BF8: {
    u8 byte = (u8)(old >> (8 * (sel & 3u)));
    f32 v = op == DEV_CVT_F32_FP8 ? (fnuz ? fmt_e4m3fnuz_decode(byte) : fmt_e4m3_decode(byte))
                                  : (fnuz ? fmt_e5m2fnuz_decode(byte) : fmt_e5m2_decode(byte));
    return fmt_bits(v);
  }
  }
  return FMT_F32_QNAN;
}
