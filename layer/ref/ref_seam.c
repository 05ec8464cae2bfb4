/* layer/ref/ref_seam.c: the delayed mHC seam of both launches (spec/mono.md §2.1 K1.1-K1.3, §2.3): fold,
 * mix projections, gate with the 20-round Sinkhorn, collapse with the previous pre, RMSNorm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "ref_internal.h"

#define SLICE 32   /* hidden columns of one slice task (§1.1 COLS) */
#define GATE_BLOCK 8

/* §2.1 K1.1: every product but the stream-3 one rounded on its own, additions in this order,
 * the stream-3 term fused; x == NULL is the zero x of a settled residual. */
static void fold(uint32_t S, uint32_t D, const float *x, const float *res, const float *post, const float *comb,
                 float *out) {
  for (uint32_t t = 0; t < S; t++) {
    const float *r = res + (uint64_t)t * HM_HC * D, *cb = comb + t * 16;
    for (uint32_t o = 0; o < HM_HC; o++) {
      float *dst = out + ((uint64_t)t * HM_HC + o) * D;
      for (uint32_t c = 0; c < D; c++) {
        float xv = x ? x[(uint64_t)t * D + c] : 0.0f;
        float a = post[t * HM_HC + o] * xv + cb[0 * 4 + o] * r[c];
        a = a + cb[1 * 4 + o] * r[D + c];
        a = a + cb[2 * 4 + o] * r[2 * D + c];
        dst[c] = fmt_round_bf16(fmaf(cb[3 * 4 + o], r[3 * D + c], a));
      }
    }
  }
}

void hm_ref_seam_fold(uint32_t S, uint32_t D, const float *x, const float *res, const float *post,
                      const float *comb, float *res_out) {
  fold(S, D, x, res, post, comb, res_out);
}

void hm_ref_seam_settled(uint32_t S, uint32_t D, const float *res, float *res_out) {
  /* gfx942's window seam (§1.3): zero x, zero post, identity comb */
  static const float ident[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  static const float zero4[HM_HC] = {0};
  for (uint32_t t = 0; t < S; t++)
    fold(1, D, NULL, res + (uint64_t)t * HM_HC * D, zero4, ident, res_out + (uint64_t)t * HM_HC * D);
}

void hm_ref_seam_collapse(uint32_t S, uint32_t D, const float *res, const float *pre, float *lin) {
  for (uint32_t t = 0; t < S; t++) {
    const float *r = res + (uint64_t)t * HM_HC * D, *p = pre + t * HM_HC;
    for (uint32_t c = 0; c < D; c++) {
      float a = 0.0f + p[0] * r[c];
      a = a + p[1] * r[D + c];
      a = a + p[2] * r[2 * D + c];
      a = a + p[3] * r[3 * D + c];
      lin[(uint64_t)t * D + c] = fmt_round_bf16(a);
    }
  }
}


hm_status hm_ref_seam_mix(uint32_t S, uint32_t D, const float *res, const float *fn, float *mix, float *sq) {
  const uint32_t slices = D / SLICE, W = HM_HC * D;
  /* aiter's two bf16 MFMAs as one weight: hi + lo, exact in f32 (§2.1 K1.1) */
  float *eff = hm_ref_alloc((size_t)HM_MIX * W * sizeof(float));
  float *part = hm_ref_alloc((size_t)slices * (HM_MIX + 1) * sizeof(float));
  if (!eff || !part) {
    free(eff);
    free(part);
    return HM_ERR_NO_MEMORY;
  }
  for (uint64_t i = 0; i < (uint64_t)HM_MIX * W; i++) {
    float hi = fmt_round_bf16(fn[i]);
    eff[i] = hi + fmt_round_bf16(fn[i] - hi);
  }
  static const uint32_t offs[6] = {32, 16, 8, 4, 2, 1};
  for (uint32_t t = 0; t < S; t++) {
    const float *r = res + (uint64_t)t * W;
    for (uint32_t j = 0; j < slices; j++) {
      /* the slice's 128 values: stream h, column 32j + cc at position 32h + cc */
      float v[HM_HC * SLICE];
      for (uint32_t h = 0; h < HM_HC; h++)
        for (uint32_t cc = 0; cc < SLICE; cc++) v[h * SLICE + cc] = r[(uint64_t)h * D + SLICE * j + cc];
      for (uint32_t m = 0; m < HM_MIX; m++) {
        const float *fm = eff + (uint64_t)m * W;
        float wave[8];
        /* f32 MFMA 16x16x4: wave w covers positions 16w..16w+15 in 4 steps of 4 */
        for (uint32_t w = 0; w < 8; w++) {
          float acc = 0.0f;
          for (uint32_t q = 0; q < 4; q++) {
            uint32_t i0 = 16 * w + 4 * q;
            float s = 0.0f;
            for (uint32_t i = i0; i < i0 + 4; i++) {
              uint32_t h = i / SLICE, cc = i % SLICE;
              float p = fm[(uint64_t)h * D + SLICE * j + cc] * v[i];
              s = i == i0 ? p : s + p;
            }
            acc = acc + s;
          }
          wave[w] = acc;
        }
        float a = wave[0];
        for (uint32_t w = 1; w < 8; w++) a = a + wave[w];
        part[j * (HM_MIX + 1) + m] = a;
      }
      /* sum of squares: two values a lane (x0^2 + x1^2), butterfly 32..1 */
      float lane[64];
      for (uint32_t l = 0; l < 64; l++) lane[l] = v[2 * l] * v[2 * l] + v[2 * l + 1] * v[2 * l + 1];
      part[j * (HM_MIX + 1) + HM_MIX] = hm_butterfly(lane, offs, 6);
    }
    /* K1.2: the 160 partials as groups of 8 in slice order, groups in order */
    for (uint32_t m = 0; m <= HM_MIX; m++) {
      float total = 0.0f;
      for (uint32_t g = 0; g * GATE_BLOCK < slices; g++) {
        float gs = 0.0f;
        for (uint32_t i = 0; i < GATE_BLOCK && g * GATE_BLOCK + i < slices; i++)
          gs = gs + part[(g * GATE_BLOCK + i) * (HM_MIX + 1) + m];
        total = total + gs;
      }
      if (m < HM_MIX) mix[t * HM_MIX + m] = total;
      else sq[t] = total;
    }
  }
  free(eff);
  free(part);
  return HM_OK;
}

void hm_ref_sinkhorn(const float *z, uint32_t iters, float hc_eps, float *comb) {
  float e[16];
  /* round 1: row softmax (exp2 of the log2e-scaled difference), + eps through the fma */
  for (int r = 0; r < 4; r++) {
    const float *zr = z + 4 * r;
    float m = fmaxf(fmaxf(zr[0], zr[1]), fmaxf(zr[2], zr[3]));
    for (int c = 0; c < 4; c++) e[4 * r + c] = exp2f((zr[c] - m) * HM_LOG2E);
    float inv = hm_ref_rcp((e[4 * r] + e[4 * r + 1]) + (e[4 * r + 2] + e[4 * r + 3]));
    for (int c = 0; c < 4; c++) e[4 * r + c] = fmaf(e[4 * r + c], inv, hc_eps);
  }
  for (uint32_t it = 0; it < iters; it++) {
    if (it > 0) {
      for (int r = 0; r < 4; r++) {
        float inv = hm_ref_rcp(((e[4 * r] + e[4 * r + 1]) + (e[4 * r + 2] + e[4 * r + 3])) + hc_eps);
        for (int c = 0; c < 4; c++) e[4 * r + c] = e[4 * r + c] * inv;
      }
    }
    for (int c = 0; c < 4; c++) {
      float inv = hm_ref_rcp(((e[c] + e[4 + c]) + (e[8 + c] + e[12 + c])) + hc_eps);
      for (int r = 0; r < 4; r++) e[4 * r + c] = e[4 * r + c] * inv;
    }
  }
  memcpy(comb, e, sizeof e);
}

void hm_ref_seam_gate(const hm_layer_config *cfg, uint32_t S, const float *mix, const float *sq,
                      const float *scale, const float *base, float *pre, float *post, float *comb) {
  const float inv_n = 1.0f / (float)(HM_HC * cfg->hidden); /* RN(1/20480) */
  for (uint32_t t = 0; t < S; t++) {
    float rstd = hm_ref_rsq(fmaf(sq[t], inv_n, cfg->eps));
    float v[HM_MIX];
    for (int j = 0; j < HM_MIX; j++) v[j] = mix[t * HM_MIX + j] * rstd;
    for (int j = 0; j < HM_HC; j++) {
      pre[t * HM_HC + j] = hm_ref_sigmoid(fmaf(v[j], scale[0], base[j])) + cfg->hc_eps;
      post[t * HM_HC + j] = hm_ref_sigmoid(fmaf(v[4 + j], scale[1], base[4 + j])) * cfg->post_mult;
    }
    float z[16];
    for (int j = 0; j < 16; j++) z[j] = fmaf(v[8 + j], scale[2], base[8 + j]);
    hm_ref_sinkhorn(z, cfg->sinkhorn_iters, cfg->hc_eps, comb + t * 16);
  }
}

/* K1.3: 256 threads, thread u holds columns 8u + 2048*chunk .. +7; its squares summed in order,
 * butterfly 1..32 in each wave, waves combined as (w0 + w1) + (w2 + w3). */
static float norm_ss(const float *x, uint32_t D) {
  float lanes[4][64];
  for (uint32_t u = 0; u < 256; u++) {
    float s = 0.0f;
    for (uint32_t c0 = 8 * u; c0 < D; c0 += 2048)
      for (uint32_t i = 0; i < 8 && c0 + i < D; i++) s = s + x[c0 + i] * x[c0 + i];
    lanes[u / 64][u % 64] = s;
  }
  static const uint32_t offs[6] = {1, 2, 4, 8, 16, 32};
  float w[4];
  for (int i = 0; i < 4; i++) w[i] = hm_butterfly(lanes[i], offs, 6);
  return (w[0] + w[1]) + (w[2] + w[3]);
}

void hm_ref_seam_norm(uint32_t S, uint32_t D, const float *lin, const uint16_t *w, float eps, float *normed) {
  const float inv_d = 1.0f / (float)D; /* RN(1/5120) */
  for (uint32_t t = 0; t < S; t++) {
    const float *x = lin + (uint64_t)t * D;
    float r = hm_ref_rsq(fmaf(norm_ss(x, D), inv_d, eps));
    for (uint32_t c = 0; c < D; c++)
      normed[(uint64_t)t * D + c] = fmt_round_bf16((x[c] * r) * fmt_bf16_to_f32(w[c]));
  }
}

hm_status hm_ref_seam(const hm_layer_config *cfg, uint32_t S, const float *x, const float *res_in,
                      const float *post_in, const float *comb_in, const float *pre_in, const float *fn,
                      const float *scale, const float *base, const uint16_t *norm_w, const hm_ref_seam_out *out) {
  const uint32_t D = cfg->hidden;
  if (x) hm_ref_seam_fold(S, D, x, res_in, post_in, comb_in, out->res);
  else hm_ref_seam_settled(S, D, res_in, out->res);
  float *mix = out->mix ? out->mix : hm_ref_alloc((size_t)S * HM_MIX * sizeof(float));
  float *sq = out->sq ? out->sq : hm_ref_alloc((size_t)S * sizeof(float));
  hm_status st = mix && sq ? hm_ref_seam_mix(S, D, out->res, fn, mix, sq) : HM_ERR_NO_MEMORY;
  if (st == HM_OK) hm_ref_seam_gate(cfg, S, mix, sq, scale, base, out->pre, out->post, out->comb);
  if (!out->mix) free(mix);
  if (!out->sq) free(sq);
  if (st != HM_OK) return st;
  /* the delayed pre: the collapse uses the previous seam's pre (model.md §7.1) */
  hm_ref_seam_collapse(S, D, out->res, pre_in, out->lin);
  hm_ref_seam_norm(S, D, out->lin, norm_w, cfg->eps, out->normed);
  return HM_OK;
}
