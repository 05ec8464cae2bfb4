/* layer/weights/weights942.c: the gfx942 copies of one TP4 rank's MXFP8 linears and routed experts
 * (spec/mono.md §4.4), made from checkpoint-format tensors, and their decoders for the reference. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "layouts.h"
#include "weights_internal.h"

/* The gfx942 GEMV scales a 32-block product by 2^(ca + cb - 254) from FNUZ codes; G942's dense_copy
 * refuses weight codes from 250 up as overflowing that factor (docs/decisions.md "gfx942 copies"). */
#define CODE_LIMIT 250u
/* a padded K block: zero bytes under a harmless code (G942's choice) */
#define PAD_CODE 128u

/* ---------------------------------------------------------------- dense MXFP8 linears */

/* How the source stores one dense linear: `.weight` as OCP bytes or dequantised bf16, `.scale` in
 * 32x32 blocks or repeated over each block's 32 rows (vLLM on gfx942 does both at load). */
typedef struct dense_src {
  char wname[HM_TENSOR_NAME], sname[HM_TENSOR_NAME];
  bool bf16, row_codes;
} dense_src;

static hm_status dense_info(hm_wbuild *b, const char *base, dense_src *o) {
  char suffix[HM_TENSOR_NAME];
  hm_dtype dt;
  uint32_t nd;
  uint64_t sh[2] = {0, 0};
  snprintf(suffix, sizeof suffix, "%s.weight", base);
  const hm_ckpt_entry *we = hm_wb_entry(b, suffix, o->wname);
  if (!we) return HM_ERR_INVALID_ARG;
  hm_status st = b->src->info(b->src->ctx, o->wname, &dt, &nd, sh);
  if (st != HM_OK) return st;
  if ((dt != HM_DT_E4M3 && dt != HM_DT_BF16) || nd != 2 || sh[0] != we->shape[0] || sh[1] != we->shape[1])
    return hm_fail(HM_ERR_FORMAT, "'%s': %s %ux[%llu,%llu], the gfx942 copy needs F8_E4M3 or BF16 [%llu,%llu]",
                   o->wname, hm_dtype_st_name(dt), nd, (unsigned long long)sh[0], (unsigned long long)sh[1],
                   (unsigned long long)we->shape[0], (unsigned long long)we->shape[1]);
  o->bf16 = dt == HM_DT_BF16;
  const uint64_t N = we->shape[0], K = we->shape[1];
  snprintf(suffix, sizeof suffix, "%s.scale", base);
  if (!hm_wb_entry(b, suffix, o->sname)) return HM_ERR_INVALID_ARG;
  if ((st = b->src->info(b->src->ctx, o->sname, &dt, &nd, sh)) != HM_OK) return st;
  bool blocks = sh[0] == N / 32, rows = sh[0] == N;
  if ((dt != HM_DT_E8M0 && dt != HM_DT_U8) || nd != 2 || sh[1] != K / 32 || !(blocks || rows))
    return hm_fail(HM_ERR_FORMAT, "'%s': %s %ux[%llu,%llu], the gfx942 copy needs F8_E8M0 [%llu,%llu] or "
                   "[%llu,%llu] (repeated over rows)", o->sname, hm_dtype_st_name(dt), nd,
                   (unsigned long long)sh[0], (unsigned long long)sh[1], (unsigned long long)(N / 32),
                   (unsigned long long)(K / 32), (unsigned long long)N, (unsigned long long)(K / 32));
  o->row_codes = rows;
  return HM_OK;
}

/* The OCP e4m3 byte behind a bf16 value vLLM dequantised as e4m3 x 2^(code-127): the byte whose
 * dequantised bf16 has exactly the same bits, or -1. code < CODE_LIMIT, so 2^(127-code) is normal. */
static int ocp_from_bf16(uint16_t v, uint8_t code) {
  uint8_t q = fmt_e4m3_encode(fmt_bf16_to_f32(v) * fmt_pow2(127 - (int32_t)code));
  return fmt_bf16_from_f32(fmt_e4m3_decode(q) * fmt_e8m0_decode(code)) == v ? q : -1;
}

/* the 32 codes of one row block [nb] from a row-repeated scale [32][nb], or a refusal naming the
 * first column whose rows disagree */
static hm_status fold_row_codes(const dense_src *s, const uint8_t *rows, uint64_t nb, uint64_t row0, uint8_t *out) {
  for (uint64_t c = 0; c < nb; c++) {
    for (uint32_t r = 1; r < 32; r++)
      if (rows[r * nb + c] != rows[c])
        return hm_fail(HM_ERR_FORMAT, "'%s': rows %llu..%llu of column %llu are not one 32x32 block's code (%u, "
                       "row %llu %u)", s->sname, (unsigned long long)row0, (unsigned long long)row0 + 31,
                       (unsigned long long)c, rows[c], (unsigned long long)row0 + r, rows[r * nb + c]);
    out[c] = rows[c];
  }
  return HM_OK;
}

hm_status hm_w942_dense(hm_wbuild *b, const char *base, const char *kname, uint64_t r0, uint64_t nr, uint64_t c0,
                        uint64_t nc, uint64_t at, uint64_t total) {
  dense_src s;
  hm_status st = dense_info(b, base, &s);
  if (st != HM_OK) return st;
  const uint64_t Kp = hm_dense942_kpad((uint32_t)nc), nb = nc / 32;
  char ks[HM_TENSOR_NAME];
  snprintf(ks, sizeof ks, "%s_s", kname);
  hm_tensor *w = hm_tset_find(b->set, kname), *sc = hm_tset_find(b->set, ks);
  if (!w) {
    uint64_t ws[2] = {total, Kp}, ss[2] = {total / 32, Kp / 32};
    if ((st = hm_tset_add(b->set, kname, HM_DT_U8, 2, ws, NULL)) != HM_OK) return st;
    if ((st = hm_tset_add(b->set, ks, HM_DT_E8M0, 2, ss, NULL)) != HM_OK) return st;
    w = hm_tset_find(b->set, kname);
    sc = hm_tset_find(b->set, ks);
    memset(sc->data, PAD_CODE, sc->nbytes); /* the real blocks are written over it */
  }
  uint8_t *dst = w->data, *codes = sc->data;
  /* one 32-row block at a time: its weight rows, its codes (32 rows of them when repeated) */
  const size_t esz = s.bf16 ? 2 : 1;
  uint8_t *rows = malloc(32 * nc * esz), *srows = malloc(32 * nb), *bc = malloc(nb);
  if (!rows || !srows || !bc) {
    st = hm_fail(HM_ERR_NO_MEMORY, "'%s': gfx942 staging", s.wname);
    goto out;
  }
  uint64_t bad = 0, bad_r = 0, bad_c = 0;
  for (uint64_t rb = 0; rb < nr; rb += 32) {
    if ((st = b->src->read(b->src->ctx, s.wname, r0 + rb, 32, c0, nc, rows)) != HM_OK) goto out;
    if (s.row_codes) {
      if ((st = b->src->read(b->src->ctx, s.sname, r0 + rb, 32, c0 / 32, nb, srows)) != HM_OK) goto out;
      if ((st = fold_row_codes(&s, srows, nb, r0 + rb, bc)) != HM_OK) goto out;
    } else if ((st = b->src->read(b->src->ctx, s.sname, (r0 + rb) / 32, 1, c0 / 32, nb, bc)) != HM_OK) {
      goto out;
    }
    for (uint64_t c = 0; c < nb; c++) {
      if (bc[c] >= CODE_LIMIT) {
        st = hm_fail(HM_ERR_FORMAT, "'%s': code %u at block (%llu, %llu): the gfx942 factor 2^(ca+cb-254) needs "
                     "codes below %u", s.sname, bc[c], (unsigned long long)(r0 + rb) / 32,
                     (unsigned long long)(c0 / 32 + c), CODE_LIMIT);
        goto out;
      }
      codes[((at + rb) / 32) * (Kp / 32) + c] = (uint8_t)(bc[c] + 1); /* FNUZ bytes are worth half */
    }
    for (uint32_t r = 0; r < 32; r++)
      for (uint64_t k = 0; k < nc; k++) {
        int ocp;
        if (s.bf16) {
          uint16_t v;
          memcpy(&v, rows + (r * nc + k) * 2, 2);
          ocp = ocp_from_bf16(v, bc[k / 32]);
          if (ocp < 0) {
            if (!bad++) bad_r = r0 + rb + r, bad_c = c0 + k;
            continue;
          }
        } else {
          ocp = rows[r * nc + k];
        }
        dst[hm_dense942_offset((uint32_t)Kp, (uint32_t)(at + rb + r), (uint32_t)k)] = fmt_e4m3_ocp_to_fnuz((uint8_t)ocp);
      }
  }
  if (bad)
    st = hm_fail(HM_ERR_FORMAT, "'%s': %llu of %llu bf16 values are not e4m3 x 2^(code-127) (first at row %llu col "
                 "%llu): no exact e4m3 copy", s.wname, (unsigned long long)bad, (unsigned long long)(nr * nc),
                 (unsigned long long)bad_r, (unsigned long long)bad_c);
out:
  free(rows);
  free(srows);
  free(bc);
  return st;
}

/* ---------------------------------------------------------------- routed experts */

/* Rank `rank`'s real Ir intermediate columns (no padding) of every expert: w13 gate/up rows
 * interleaved by row, w2's K columns, bytes in the FP4 tile-major order, no -0 nibbles. */
struct experts942 {
  uint64_t D, Ir;
  uint8_t *w13, *w13s, *w2, *w2s;
};

static void put942(void *ctx, uint32_t e, int which, const uint8_t *tw, const uint8_t *ts) {
  const struct experts942 *x = ctx;
  const uint64_t D = x->D, Ir = x->Ir;
  if (which != HM_EXPERT_DOWN) {
    uint8_t *ew = x->w13 + e * (2 * Ir * D / 2), *es = x->w13s + e * (2 * Ir * (D / 32));
    for (uint32_t i = 0; i < Ir; i++) {
      uint32_t R = hm_w13_942_row(i, which == HM_EXPERT_UP);
      for (uint32_t k = 0; k < D; k += 2)
        ew[hm_fp4_942_offset((uint32_t)D, R, k)] = fmt_fp4x2_drop_negzero(tw[(uint64_t)i * (D / 2) + k / 2]);
      for (uint32_t cb = 0; cb < D / 32; cb++) es[hm_codes942_index(R, cb, (uint32_t)(D / 32))] = ts[i * (D / 32) + cb];
    }
    return;
  }
  uint8_t *fw = x->w2 + e * (D * Ir / 2);
  for (uint32_t r = 0; r < D; r++)
    for (uint32_t k = 0; k < Ir; k += 2)
      fw[hm_fp4_942_offset((uint32_t)Ir, r, k)] = fmt_fp4x2_drop_negzero(tw[(uint64_t)r * (Ir / 2) + k / 2]);
  memcpy(x->w2s + e * (D * (Ir / 32)), ts, D * (Ir / 32)); /* row-major, as read */
}

hm_status hm_w942_experts(hm_wbuild *b, const hm_rank_dims *d, uint32_t rank) {
  const uint64_t D = b->cfg->hidden, E = b->cfg->experts, Ir = d->inter;
  /* w2 rows are Ir/2 bytes: whole 64-B steps and at most one 32-B step; w13's codes go in rounds
   * of 8 K blocks; both matrices in 16-row tiles */
  if (Ir % 64 != 0)
    return hm_fail(HM_ERR_INVALID_ARG, "routed intermediate %llu a rank: the gfx942 w2 copy needs a multiple of 64 "
                   "columns (64-byte steps and one 32-byte tail)", (unsigned long long)Ir);
  if (D % (32 * HM_UG_ROUND_942) != 0)
    return hm_fail(HM_ERR_INVALID_ARG, "hidden %llu: the gfx942 w13 copy needs a multiple of 256",
                   (unsigned long long)D);
  struct experts942 x = {D, Ir, NULL, NULL, NULL, NULL};
  x.w13 = hm_tset_new(b->set, "w13", HM_DT_FP4X2, E, 2 * Ir, D / 2, 0);
  x.w13s = x.w13 ? hm_tset_new(b->set, "w13_s", HM_DT_E8M0, E, 2 * Ir * (D / 32), 0, 0) : NULL;
  x.w2 = x.w13s ? hm_tset_new(b->set, "w2", HM_DT_FP4X2, E, D, Ir / 2, 0) : NULL;
  x.w2s = x.w2 ? hm_tset_new(b->set, "w2_s", HM_DT_E8M0, E, D * (Ir / 32), 0, 0) : NULL;
  if (!x.w2s) return HM_ERR_NO_MEMORY;
  return hm_wb_experts(b, Ir, rank, put942, &x);
}

/* ---------------------------------------------------------------- decoders */

static float fnuz_tab[256];
static pthread_once_t fnuz_once = PTHREAD_ONCE_INIT;
static void fnuz_init(void) {
  for (int i = 0; i < 256; i++) fnuz_tab[i] = fmt_e4m3fnuz_decode((uint8_t)i);
}

/* FNUZ byte x 2^(code'-127) with code' = code + 1 is the OCP value x 2^(code-127), exactly */
void hm_mx8_942_decode_rows(const uint8_t *w, const uint8_t *s, uint32_t K, uint32_t r0, uint32_t nr, float *out) {
  pthread_once(&fnuz_once, fnuz_init);
  const uint32_t Kp = hm_dense942_kpad(K);
  for (uint32_t r = 0; r < nr; r++) {
    uint32_t row = r0 + r;
    const uint8_t *sr = s + (uint64_t)(row / 32) * (Kp / 32);
    float *o = out + (uint64_t)r * K;
    for (uint32_t k = 0; k < K; k++) o[k] = fnuz_tab[w[hm_dense942_offset(Kp, row, k)]] * fmt_e8m0_decode(sr[k / 32]);
  }
}

/* one value of a gfx942 FP4 copy of K columns */
static float fp4_942_at(const uint8_t *m, uint32_t K, uint32_t r, uint32_t k, float scale) {
  return hm_e2m1_table()[fmt_e2m1_nibble(m[hm_fp4_942_offset(K, r, k)], (int)(k & 1))] * scale;
}

void hm_w942_w13_decode(const hm_layer_weights *w, uint32_t e, bool up, uint32_t i0, uint32_t n, float *out) {
  const hm_tensor *tw = hm_tset_find(&w->set, "w13"), *ts = hm_tset_find(&w->set, "w13_s");
  const uint32_t D = w->cfg.hidden, Ir = w->dims.inter;
  const uint8_t *m = (const uint8_t *)tw->data + (uint64_t)e * ((uint64_t)Ir * D);
  const uint8_t *s = (const uint8_t *)ts->data + (uint64_t)e * (2ull * Ir * (D / 32));
  for (uint32_t i = 0; i < n; i++) {
    float *o = out + (uint64_t)i * D;
    if (i0 + i >= Ir) { /* the padding the gfx950 layout has and this copy does not */
      memset(o, 0, sizeof(float) * D);
      continue;
    }
    uint32_t R = hm_w13_942_row(i0 + i, up);
    for (uint32_t k = 0; k < D; k++) o[k] = fp4_942_at(m, D, R, k, fmt_e8m0_decode(s[hm_codes942_index(R, k / 32, D / 32)]));
  }
}

void hm_w942_w2_decode(const hm_layer_weights *w, uint32_t e, uint32_t r0, uint32_t n, float *out) {
  const hm_tensor *tw = hm_tset_find(&w->set, "w2"), *ts = hm_tset_find(&w->set, "w2_s");
  const uint32_t D = w->cfg.hidden, Ir = w->dims.inter, I = w->dims.inter_pad;
  const uint8_t *m = (const uint8_t *)tw->data + (uint64_t)e * ((uint64_t)D * Ir / 2);
  const uint8_t *s = (const uint8_t *)ts->data + (uint64_t)e * ((uint64_t)D * (Ir / 32));
  for (uint32_t i = 0; i < n; i++) {
    uint32_t r = r0 + i;
    float *o = out + (uint64_t)i * I;
    for (uint32_t k = 0; k < Ir; k++) o[k] = fp4_942_at(m, Ir, r, k, fmt_e8m0_decode(s[(uint64_t)r * (Ir / 32) + k / 32]));
    for (uint32_t k = Ir; k < I; k++) o[k] = 0.0f;
  }
}
