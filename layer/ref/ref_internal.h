/* layer/ref/ref_internal.h: helpers shared by the reference's stage files (ref_*.c): K-step sums with
 * several independent chains, so the inner loops run at the machine's throughput. */
#ifndef HM_REF_INTERNAL_H
#define HM_REF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hm_ref.h"

/* 128-wide K steps a GEMV row at most (K <= 131072; the chain tables on the stack) */
#define HM_REF_MAX_STEPS 1024

/* activation rows a GEMV helper takes at once (its stack buffers) */
#define HM_TBLOCK 256

/* out[t] = sum over k in [k0, k1) of w[k] * X[t*ldx + k], each product rounded, summed in
 * ascending k starting from the first product (the model of one matrix-instruction step),
 * for t < T. Tokens run four chains at a time. */
void hm_step_sums(const float *w, const float *X, size_t ldx, uint32_t T, uint32_t k0, uint32_t k1, float *out);

/* GEMV in the §2.0 K order for T activation rows against one weight row: out[t]. K is padded
 * with zero products to whole 128-wide steps. */
void hm_dot_waves_multi(const float *w, const float *X, size_t ldx, uint32_t T, uint32_t K, float *out);

/* Weight rows a block of the vectorised GEMV: 16, four 4-wide vectors. */
#define HM_RB 16

/* nr (<= 16) rows of K values (row-major, leading dimension ld) into WT [K][16] (16-byte
 * aligned), absent rows zero. */
void hm_transpose16(const float *W, size_t ld, uint32_t nr, uint32_t K, float *WT);

/* A GEMV on 16 weight rows (WT [K][16]) and T activation rows (X [T][ldx]): K in `step`-wide
 * steps (a ragged last one shorter), each step's products summed from the first in ascending K
 * (lanes are rows: the same roundings as the scalar model), step s added to chain chain[s]
 * (< nchain <= 8, each starting from 0), the chains then added in order 0..nchain-1.
 * out[r*T + t]. */
void hm_gemv16(const float *WT, uint32_t K, uint32_t step, const uint8_t *chain, uint32_t nchain, const float *X,
               size_t ldx, uint32_t T, float *out);

/* 16-byte aligned allocation that records a failure (free with free()) */
void *hm_ref_alloc_aligned(size_t bytes);

/* The value every lane of a wave holds after xor-butterfly adds with these offsets, in order
 * (v[64] is overwritten). */
float hm_butterfly(float *v, const uint32_t *offs, uint32_t n);

/* GEMV chain tables: the §2.0 K order (step s on wave s % 8) */
void hm_wave_chains(uint8_t *chain, uint32_t steps);

/* hm_gemv16 for a narrow-format GEMV of w's arch, `chain` given per 128-wide K step (the §2.0
 * order). gfx950: one scaled MFMA a step, its products summed from the first. gfx942 (§2.6): the
 * step's 32-wide blocks in K order (a ragged step has fewer), each an unscaled MFMA from a zero
 * accumulator whose sum then goes into the step's chain, acc = fma(block, 2^(ca+cb-254), acc):
 * the block's products carry their scales here (powers of two, so the block sums to the same
 * value times the factor) and the add is that fma's one rounding. Dense MXFP8 and routed FP4
 * (FNUZ bytes e2m1 x 2^-7, factor 2^(cw+7+cx-254)) alike: one place for both arches' GEMVs. */
void hm_gemv16_arch(hm_arch arch, const float *WT, uint32_t K, const uint8_t *chain, uint32_t nchain, const float *X,
                    size_t ldx, uint32_t T, float *out);

/* A dense MXFP8 linear [N, K] as w's arch stores it: gfx950 OCP e4m3 [N, K] + codes [N/32, K/32]
 * (§4.1), gfx942 FNUZ bytes tile-major (u8 [N, Kp]) + codes [N/32, Kp/32] (§4.4). */
typedef struct ref_dense {
  const uint8_t *w, *s;
  uint32_t N, K;
  hm_arch arch;
} ref_dense;
/* w's `name` and `name`_s, dtypes and sizes checked for its arch (failure recorded otherwise) */
hm_status ref_dense_get(const hm_layer_weights *w, const char *name, uint32_t N, uint32_t K, ref_dense *d);
/* rows r0..r0+nr-1 as values [nr][K] (the same values on either arch) */
void ref_dense_rows(const ref_dense *d, uint32_t r0, uint32_t nr, float *out);

/* y[r*S + t] = the GEMV of rows r0..r0+n-1 of d (K-column slice [k0, k0+kn) of each row) against
 * X [S][ldx] (already offset to k0), `chain` per 128-wide step (nchain chains), f32, in d's
 * arch's order (hm_gemv16_arch). */
hm_status hm_mx8_gemv(const ref_dense *d, uint32_t k0, uint32_t kn, uint32_t r0, uint32_t n, const uint8_t *chain,
                      uint32_t nchain, const float *X, size_t ldx, uint32_t S, float *y);

/* REF's Linear (hm_ref_linear_fp8) on a dense weight of either arch */
hm_status ref_linear_fp8(const ref_dense *d, const float *x, float *y);

/* One group of n values quantised as gfx942's kernels do (§2.6): the rule's code against max 224,
 * FNUZ bytes of x * mul(code) clamped to +-224 (n <= 64). */
void ref_fnuz_group(const float *x, uint32_t n, int rule, uint8_t *bytes, uint8_t *code);

/* the dtype of quantised activation bytes in the trace: OCP e4m3 (gfx950), FNUZ as u8 (gfx942) */
hm_dtype ref_act_dtype(hm_arch arch);

/* allocation that records a failure */
void *hm_ref_alloc(size_t bytes);

/* trace helpers: a new zeroed f32 / u8 / i32 tensor, NULL (failure recorded) on error */
float *hm_trace_f32(hm_tensor_set *s, const char *name, uint64_t d0, uint64_t d1, uint64_t d2);
uint8_t *hm_trace_u8(hm_tensor_set *s, const char *name, hm_dtype dt, uint64_t d0, uint64_t d1, uint64_t d2);
int32_t *hm_trace_i32(hm_tensor_set *s, const char *name, uint64_t d0, uint64_t d1);

/* a weight's data with its dtype and element count checked; NULL (failure recorded) otherwise */
const void *hm_wdata(const hm_layer_weights *w, const char *name, hm_dtype dt, uint64_t numel);

/* A TP group's FFN weights, a rank at a time: the caller's (held[tp]) or built from a source on
 * demand, the rank before freed first, so a group step holds one rank's experts at once. */
typedef struct ref_ranks {
  const hm_layer_weights *held; /* w[tp], or NULL: built from src */
  const hm_layer_config *cfg;
  const hm_source *src;
  hm_build_opts opts; /* parts: HM_WPART_FFN */
  uint32_t tp;
  hm_layer_weights cur;
  int32_t cur_rank; /* the rank in cur, -1: none */
} ref_ranks;
/* rank r's FFN weights (valid until the next get or the release) */
hm_status ref_ranks_get(ref_ranks *k, uint32_t r, const hm_layer_weights **out);
void ref_ranks_release(ref_ranks *k);

/* The FFN launch on k's ranks (hm_ref_ffn_launch; the trace truncated to where it was on failure). */
hm_status hm_ref_ffn_launch_ranks(ref_ranks *k, uint32_t S, const float *const *parts, const float *res_mid,
                                  const float *post_a, const float *comb_a, const float *pre_a, hm_tensor_set *trace);

#endif /* HM_REF_INTERNAL_H */
