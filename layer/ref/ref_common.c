/* layer/ref/ref_common.c: the reference's numeric primitives (spec/mono.md §2.0, §2.6): transcendental
 * models, MXFP8 quantisation of rows (OCP or gfx942's FNUZ), the GEMV K order of either arch, the
 * rank-order reduction. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "layouts.h"
#include "ref_internal.h"

/* ---------------------------------------------------------------- transcendentals */

/* The kernels use v_rcp_f32 / v_rsq_f32 / v_exp_f32 / v_log_f32 (~1 ulp); libm and IEEE
 * division stand in for them (spec/mono.md §7.1 item 10). */
float hm_ref_rcp(float x) { return 1.0f / x; }
float hm_ref_rsq(float x) { return 1.0f / sqrtf(x); }

float hm_ref_sigmoid(float z) { return 1.0f / (1.0f + exp2f(z * -HM_LOG2E)); }

float hm_ref_sqrtsoftplus(float x) {
  /* §2.4 route: the softplus through exp2/log2, IEEE sqrt */
  float sp = x > 20.0f ? x : log2f(1.0f + exp2f(x * HM_LOG2E)) * HM_LN2;
  return sqrtf(sp);
}

/* ---------------------------------------------------------------- MXFP8 rows */

void hm_ref_mx8_quant(const float *x, uint32_t rows, uint32_t n, uint32_t g, int rule, uint8_t *bytes,
                      uint8_t *codes) {
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t j = 0; j < n / g; j++) {
      uint64_t o = (uint64_t)r * n + (uint64_t)j * g;
      fmt_mxfp8_quant(x + o, g, rule, bytes + o, codes + (uint64_t)r * (n / g) + j);
    }
}

void hm_ref_mx8_dequant(const uint8_t *bytes, const uint8_t *codes, uint32_t rows, uint32_t n, uint32_t g,
                        float *out) {
  const float *t = hm_e4m3_table();
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t i = 0; i < n; i++) {
      uint64_t o = (uint64_t)r * n + i;
      out[o] = t[bytes[o]] * fmt_e8m0_decode(codes[(uint64_t)r * (n / g) + i / g]);
    }
}

/* ---------------------------------------------------------------- gfx942 activations (§2.6) */

/* gfx942's activation maximum: FNUZ e4m3's 0x7e, the bits of OCP's 448 (§2.6) */
#define FNUZ_ACT_MAX 224.0f

/* where element i of an 8-value chunk is stored when the chunk is even-then-odd */
static uint32_t eo_pos(uint32_t i) { return (i & ~7u) + (i % 2u) * 4u + (i % 8u) / 2u; }

void ref_fnuz_group(const float *x, uint32_t n, int rule, uint8_t *bytes, uint8_t *code) {
  float amax = 0.0f;
  for (uint32_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i])); /* a NaN is ignored, as fmt_mxfp8_quant */
  /* the rule's quotient against 224 instead of 448 (A: times RN(1/224) = 2 RN(1/448)), its
   * clamp; a normal quotient is exactly twice the OCP one, hence the OCP code + 1 */
  float q = rule == FMT_RULE_A ? fmaxf(amax, fmt_float(FMT_BITS_1E_10)) * fmt_float(FMT_BITS_RCP448 + (1u << 23))
                               : fmt_div_rn(fmaxf(amax, fmt_float(rule == FMT_RULE_R ? FMT_BITS_1E_4 : FMT_BITS_FLT_MIN)),
                                            FNUZ_ACT_MAX);
  uint32_t c = fmt_ceilexp(q);
  if (rule != FMT_RULE_R) c = c > 254 ? 254 : c < (rule == FMT_RULE_A ? 1u : 0u) ? (rule == FMT_RULE_A ? 1u : 0u) : c;
  const float mul = fmt_e8m0_mul((uint8_t)c);
  for (uint32_t i = 0; i < n; i++) bytes[i] = fmt_e4m3fnuz_encode(fminf(fmaxf(x[i] * mul, -FNUZ_ACT_MAX), FNUZ_ACT_MAX));
  *code = (uint8_t)c;
}

void hm_ref_act_quant(hm_arch arch, bool even_odd, const float *x, uint32_t rows, uint32_t n, uint32_t g, int rule,
                      uint8_t *bytes, uint8_t *codes) {
  if (arch != HM_ARCH_GFX942) {
    hm_ref_mx8_quant(x, rows, n, g, rule, bytes, codes);
    return;
  }
  uint8_t grp[64];
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t j = 0; j < n / g; j++) {
      uint64_t o = (uint64_t)r * n + (uint64_t)j * g;
      ref_fnuz_group(x + o, g, rule, grp, codes + (uint64_t)r * (n / g) + j);
      for (uint32_t i = 0; i < g; i++) bytes[o + (even_odd ? eo_pos(i) : i)] = grp[i];
    }
}

void hm_ref_act_dequant(hm_arch arch, bool even_odd, const uint8_t *bytes, const uint8_t *codes, uint32_t rows,
                        uint32_t n, uint32_t g, float *out) {
  if (arch != HM_ARCH_GFX942) {
    hm_ref_mx8_dequant(bytes, codes, rows, n, g, out);
    return;
  }
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t i = 0; i < n; i++) {
      uint64_t o = (uint64_t)r * n;
      out[o + i] = fmt_e4m3fnuz_decode(bytes[o + (even_odd ? eo_pos(i) : i)]) *
                   fmt_e8m0_decode(codes[(uint64_t)r * (n / g) + i / g]);
    }
}

hm_dtype ref_act_dtype(hm_arch arch) { return arch == HM_ARCH_GFX942 ? HM_DT_U8 : HM_DT_E4M3; }

/* ---------------------------------------------------------------- K-step sums */

void hm_step_sums(const float *w, const float *X, size_t ldx, uint32_t T, uint32_t k0, uint32_t k1, float *out) {
  uint32_t t = 0;
  for (; t + 4 <= T; t += 4) {
    const float *x0 = X + t * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
    float a0 = w[k0] * x0[k0], a1 = w[k0] * x1[k0], a2 = w[k0] * x2[k0], a3 = w[k0] * x3[k0];
    for (uint32_t k = k0 + 1; k < k1; k++) {
      float wk = w[k];
      a0 = a0 + wk * x0[k];
      a1 = a1 + wk * x1[k];
      a2 = a2 + wk * x2[k];
      a3 = a3 + wk * x3[k];
    }
    out[t] = a0, out[t + 1] = a1, out[t + 2] = a2, out[t + 3] = a3;
  }
  for (; t < T; t++) {
    const float *x0 = X + t * ldx;
    float a0 = w[k0] * x0[k0];
    for (uint32_t k = k0 + 1; k < k1; k++) a0 = a0 + w[k] * x0[k];
    out[t] = a0;
  }
}

void hm_dot_waves_multi(const float *w, const float *X, size_t ldx, uint32_t T, uint32_t K, float *out) {
  uint32_t steps = (K + 127) / 128;
  float wave[8][HM_TBLOCK], st[HM_TBLOCK];
  for (uint32_t t0 = 0; t0 < T; t0 += HM_TBLOCK) {
    uint32_t n = T - t0 < HM_TBLOCK ? T - t0 : HM_TBLOCK;
    for (int v = 0; v < 8; v++)
      for (uint32_t t = 0; t < n; t++) wave[v][t] = 0.0f; /* the MFMA chain starts from C = 0 */
    for (uint32_t s = 0; s < steps; s++) {
      uint32_t k0 = 128 * s, k1 = k0 + 128 < K ? k0 + 128 : K;
      /* the zero products of a ragged last step add nothing to a nonzero sum */
      hm_step_sums(w, X + (size_t)t0 * ldx, ldx, n, k0, k1, st);
      for (uint32_t t = 0; t < n; t++) wave[s % 8][t] = wave[s % 8][t] + st[t];
    }
    for (uint32_t t = 0; t < n; t++) {
      float a = wave[0][t]; /* row_sum: wave partials in order 0..7 */
      for (int v = 1; v < 8; v++) a = a + wave[v][t];
      out[t0 + t] = a;
    }
  }
}

/* ---------------------------------------------------------------- 16-row GEMV */

/* GCC/clang vector extension: lane-wise IEEE mul and add, the same roundings as the scalar
 * model (no contraction: C11 mode, and no FMA in the x86-64 baseline) */
typedef float v4 __attribute__((vector_size(16)));

void hm_transpose16(const float *W, size_t ld, uint32_t nr, uint32_t K, float *WT) {
  for (uint32_t k = 0; k < K; k++) {
    float *o = WT + (size_t)k * HM_RB;
    uint32_t r = 0;
    for (; r < nr; r++) o[r] = W[(size_t)r * ld + k];
    for (; r < HM_RB; r++) o[r] = 0.0f;
  }
}

/* one step for two activation rows: a[0..3] row vectors for x0, b[0..3] for x1 */
static inline void steps16x2(const float *WT, const float *x0, const float *x1, uint32_t k0, uint32_t k1, v4 *a,
                             v4 *b) {
  const v4 *w = (const v4 *)(WT + (size_t)k0 * HM_RB);
  float s0 = x0[k0], s1 = x1[k0];
  a[0] = w[0] * s0, a[1] = w[1] * s0, a[2] = w[2] * s0, a[3] = w[3] * s0;
  b[0] = w[0] * s1, b[1] = w[1] * s1, b[2] = w[2] * s1, b[3] = w[3] * s1;
  for (uint32_t k = k0 + 1; k < k1; k++) {
    w += 4;
    s0 = x0[k], s1 = x1[k];
    a[0] = a[0] + w[0] * s0, a[1] = a[1] + w[1] * s0, a[2] = a[2] + w[2] * s0, a[3] = a[3] + w[3] * s0;
    b[0] = b[0] + w[0] * s1, b[1] = b[1] + w[1] * s1, b[2] = b[2] + w[2] * s1, b[3] = b[3] + w[3] * s1;
  }
}

void hm_gemv16(const float *WT, uint32_t K, uint32_t step, const uint8_t *chain, uint32_t nchain, const float *X,
               size_t ldx, uint32_t T, float *out) {
  const uint32_t steps = (K + step - 1) / step;
  for (uint32_t t = 0; t < T; t += 2) {
    const float *x0 = X + (size_t)t * ldx, *x1 = t + 1 < T ? x0 + ldx : x0;
    v4 acc[2][8][4];
    memset(acc, 0, sizeof acc);
    for (uint32_t s = 0; s < steps; s++) {
      uint32_t k0 = s * step, k1 = k0 + step < K ? k0 + step : K, c = chain[s];
      v4 a[4], b[4];
      steps16x2(WT, x0, x1, k0, k1, a, b);
      for (int j = 0; j < 4; j++) acc[0][c][j] = acc[0][c][j] + a[j], acc[1][c][j] = acc[1][c][j] + b[j];
    }
    for (uint32_t u = 0; u < 2 && t + u < T; u++) {
      v4 r[4] = {acc[u][0][0], acc[u][0][1], acc[u][0][2], acc[u][0][3]};
      for (uint32_t c = 1; c < nchain; c++)
        for (int j = 0; j < 4; j++) r[j] = r[j] + acc[u][c][j];
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 4; l++) out[(size_t)(4 * j + l) * T + t + u] = r[j][l];
    }
  }
}

void *hm_ref_alloc_aligned(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) hm_fail(HM_ERR_NO_MEMORY, "reference scratch of %zu bytes", bytes);
  return p;
}

float hm_ref_dot_waves(const float *w, const float *x, uint32_t K) {
  float r;
  hm_dot_waves_multi(w, x, K, 1, K, &r);
  return r;
}

float hm_butterfly(float *v, const uint32_t *offs, uint32_t n) {
  float nv[64];
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t l = 0; l < 64; l++) nv[l] = v[l] + v[l ^ offs[i]];
    memcpy(v, nv, sizeof nv);
  }
  return v[0];
}

void hm_wave_chains(uint8_t *chain, uint32_t steps) {
  for (uint32_t s = 0; s < steps; s++) chain[s] = (uint8_t)(s % 8);
}

void hm_gemv16_arch(hm_arch arch, const float *WT, uint32_t K, const uint8_t *chain, uint32_t nchain, const float *X,
                    size_t ldx, uint32_t T, float *out) {
  if (arch != HM_ARCH_GFX942) {
    hm_gemv16(WT, K, 128, chain, nchain, X, ldx, T, out);
    return;
  }
  uint8_t blocks[HM_REF_MAX_STEPS * 4]; /* callers check K against HM_REF_MAX_STEPS steps */
  for (uint32_t b = 0; b < (K + 31) / 32; b++) blocks[b] = chain[b / 4];
  hm_gemv16(WT, K, 32, blocks, nchain, X, ldx, T, out);
}

hm_status ref_dense_get(const hm_layer_weights *w, const char *name, uint32_t N, uint32_t K, ref_dense *d) {
  char sn[HM_TENSOR_NAME];
  snprintf(sn, sizeof sn, "%s_s", name);
  const bool g942 = w->arch == HM_ARCH_GFX942;
  const uint32_t Kp = g942 ? hm_dense942_kpad(K) : K;
  *d = (ref_dense){NULL, NULL, N, K, w->arch};
  d->w = hm_wdata(w, name, g942 ? HM_DT_U8 : HM_DT_E4M3, (uint64_t)N * Kp);
  if (d->w) d->s = hm_wdata(w, sn, HM_DT_E8M0, (uint64_t)N / 32 * (Kp / 32));
  return d->s ? HM_OK : HM_ERR_INVALID_ARG;
}

void ref_dense_rows(const ref_dense *d, uint32_t r0, uint32_t nr, float *out) {
  if (d->arch == HM_ARCH_GFX942) hm_mx8_942_decode_rows(d->w, d->s, d->K, r0, nr, out);
  else hm_mx8_decode_rows(d->w, d->s, d->K, r0, nr, out);
}

hm_status hm_mx8_gemv(const ref_dense *d, uint32_t k0, uint32_t kn, uint32_t r0, uint32_t n, const uint8_t *chain,
                      uint32_t nchain, const float *X, size_t ldx, uint32_t S, float *y) {
  const uint32_t K = d->K;
  if ((kn + 127) / 128 > HM_REF_MAX_STEPS) return hm_fail(HM_ERR_INVALID_ARG, "GEMV K %u", kn);
  float *W = hm_ref_alloc((size_t)HM_RB * K * sizeof(float)), *WT = hm_ref_alloc_aligned((size_t)HM_RB * kn * sizeof(float));
  float *o = hm_ref_alloc((size_t)HM_RB * S * sizeof(float));
  hm_status st = HM_ERR_NO_MEMORY;
  if (W && WT && o) {
    for (uint32_t b = 0; b < n; b += HM_RB) {
      uint32_t nr = n - b < HM_RB ? n - b : HM_RB;
      ref_dense_rows(d, r0 + b, nr, W);
      hm_transpose16(W + k0, K, nr, kn, WT);
      hm_gemv16_arch(d->arch, WT, kn, chain, nchain, X, ldx, S, o);
      memcpy(y + (size_t)b * S, o, (size_t)nr * S * sizeof(float));
    }
    st = HM_OK;
  }
  free(W), free(WT), free(o);
  return st;
}

/* ---------------------------------------------------------------- reductions */

void hm_ref_reduce_rank_order(uint32_t tp, const float *const *parts, uint64_t n, float *out) {
  /* §3.7: f32 sum in rank order 0..tp-1, then bf16; identical on every rank */
  for (uint64_t i = 0; i < n; i++) {
    float a = parts[0][i];
    for (uint32_t r = 1; r < tp; r++) a = a + parts[r][i];
    out[i] = fmt_round_bf16(a);
  }
}

/* ---------------------------------------------------------------- plumbing */

void *hm_ref_alloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) hm_fail(HM_ERR_NO_MEMORY, "reference scratch of %zu bytes", bytes);
  return p;
}

float *hm_trace_f32(hm_tensor_set *s, const char *name, uint64_t d0, uint64_t d1, uint64_t d2) {
  return hm_tset_new(s, name, HM_DT_F32, d0, d1, d2, 0);
}
uint8_t *hm_trace_u8(hm_tensor_set *s, const char *name, hm_dtype dt, uint64_t d0, uint64_t d1, uint64_t d2) {
  return hm_tset_new(s, name, dt, d0, d1, d2, 0);
}
int32_t *hm_trace_i32(hm_tensor_set *s, const char *name, uint64_t d0, uint64_t d1) {
  return hm_tset_new(s, name, HM_DT_I32, d0, d1, 0, 0);
}

const void *hm_wdata(const hm_layer_weights *w, const char *name, hm_dtype dt, uint64_t numel) {
  const hm_tensor *t = hm_weights_get(w, name);
  if (!t) return NULL;
  if (t->dtype != dt || hm_tensor_numel(t) != numel) {
    hm_fail(HM_ERR_FORMAT, "weight '%s': %s with %llu elements, the reference needs %s with %llu", name,
            hm_dtype_st_name(t->dtype), (unsigned long long)hm_tensor_numel(t), hm_dtype_st_name(dt),
            (unsigned long long)numel);
    return NULL;
  }
  return t->data;
}

hm_status ref_linear_fp8(const ref_dense *d, const float *x, float *y) {
  const uint32_t N = d->N, K = d->K;
  float *W = hm_ref_alloc((size_t)K * sizeof(float)), *qa = hm_ref_alloc((size_t)K * sizeof(float));
  uint8_t *q8 = hm_ref_alloc(K), *qs = hm_ref_alloc(K / 32 ? K / 32 : 1);
  hm_status st = HM_ERR_NO_MEMORY;
  if (W && qa && q8 && qs) {
    hm_ref_mx8_quant(x, 1, K, 32, FMT_RULE_A, q8, qs);
    hm_ref_mx8_dequant(q8, qs, 1, K, 32, qa);
    for (uint32_t n = 0; n < N; n++) {
      ref_dense_rows(d, n, 1, W);
      float acc = 0.0f;
      for (uint32_t b = 0; b < K / 32; b++) {
        float p = 0.0f;
        for (uint32_t j = 0; j < 32; j++) p = p + qa[b * 32 + j] * W[b * 32 + j];
        acc = acc + p;
      }
      y[n] = fmt_round_bf16(acc);
    }
    st = HM_OK;
  }
  free(W), free(qa), free(q8), free(qs);
  return st;
}

hm_status hm_ref_linear_fp8(const uint8_t *w, const uint8_t *ws, uint32_t N, uint32_t K, const float *x, float *y) {
  const ref_dense d = {w, ws, N, K, HM_ARCH_GFX950};
  return ref_linear_fp8(&d, x, y);
}
