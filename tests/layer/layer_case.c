/* tests/layer/layer_case.c: a whole-layer case on the software agent against the fp32 reference, stage by
 * stage and whole (test_layer.c on gfx950, test_layer_942.c on gfx942 in the reference's gfx942 mode). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "layer_case.h"
#include "kernels/ffn_args.h"
#include "kernels/k1_args.h"
#include "kernels/k2_args.h"

/* 8-CTA parts on the software agent (tests/layer/meson.build), so every stage's placement wraps. */
const hm_ffn_config lc_small_grid = {.min_cus = 1};

const shape lc_sweep_shapes[2] = {{1, 1, 0, 64, -1, 0}, {7, 1, 100, 64, 3, 0}};
const uint32_t lc_sweep_grids[LC_SWEEP_RUNS] = {3, 5, 8};

void lc_sweep_seed(uint32_t k) {
  static const char *const seeds[LC_SWEEP_RUNS] = {"5", "17", "29"};
  setenv("HSAMONO_SIM_LAGGARD", "1", 1);
  setenv("HSAMONO_SIM_CHAOS", seeds[k], 1);
}

void lc_sweep_end(void) {
  unsetenv("HSAMONO_SIM_CHAOS");
  unsetenv("HSAMONO_SIM_LAGGARD");
}

/* ---------------------------------------------------------------- a case */


static void outputs_alloc(layer_case *c) {
  const uint32_t S = c->S, D = c->cfg.hidden;
  for (uint32_t r = 0; r < c->tp; r++) {
    hm_layer_outputs *o = &c->o[r];
    o->x = calloc((size_t)S * D, 4), o->res = calloc((size_t)S * 4 * D, 4);
    o->post = calloc(S * 4, 4), o->comb = calloc(S * 16, 4), o->pre = calloc(S * 4, 4);
    o->swa = calloc(1, c->step.swa_bytes);
    o->comp = c->step.comp_bytes ? calloc(1, c->step.comp_bytes) : NULL;
    o->topk = calloc((size_t)S * K1_TOPK, 4);
    o->q = calloc((size_t)S * c->H * 512, 4), o->kt = calloc((size_t)S * K1_KEYS, 4), o->klen = calloc(2 * S, 4);
    o->res_mid = calloc((size_t)S * 4 * D, 4), o->post_a = calloc(S * 4, 4), o->comb_a = calloc(S * 16, 4);
    o->pre_a = calloc(S * 4, 4);
  }
}

void lc_case_free(layer_case *c) {
  for (uint32_t r = 0; r < c->tp; r++) {
    hm_layer_outputs *o = &c->o[r];
    free(o->x), free(o->res), free(o->post), free(o->comb), free(o->pre), free(o->swa), free(o->comp);
    free(o->topk), free(o->q), free(o->kt), free(o->klen), free(o->res_mid), free(o->post_a), free(o->comb_a);
    free(o->pre_a);
  }
  hm_tset_free(&c->ref);
  if (c->rsel) hm_select_state_free(c->rsel);
  hm_gen_step_free(&c->step), hm_gen_step_free(&c->refs);
}

/* The step and the reference's run of it (its own copy of the caches and select state). Layer 0
 * enters with the embedding (x) and no residual. */
/* With seam_seed nonzero the step's seam state (x, the residual, the mixes) is drawn from it
 * instead, the metadata and caches kept (the replays' input sets share one recorded step). */
void lc_case_make_seam(layer_case *c, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                           uint64_t seed, uint64_t seam_seed, const hm_source *table) {
  memset(c, 0, sizeof *c);
  c->cfg = w[0].cfg, c->arch = w[0].arch, c->tp = tp, c->S = sh->S, c->H = w[0].dims.heads;
  c->ck = hm_attn_chunk_keys(tp, sh->S, c->arch == HM_ARCH_GFX942);
  c->index = hm_config_has(&c->cfg, HM_ROLE_INDEX_SOURCE);
  c->opts = (hm_gen_opts){.S = sh->S, .reqs = sh->reqs, .ctx = sh->ctx, .block = sh->block, .seed = seed,
                          .cases = sh->cases};
  c->dead_row = sh->dead_row;
  hm_status st = hm_gen_step_make_opts(&c->cfg, &c->opts, &c->step);
  ck_assert_msg(st == HM_OK, "step: %s", hm_errmsg());
  tl_expect_cases(&c->step, &c->cfg, sh->cases);
  /* gfx942's SWA cache holds FNUZ records (spec/mono.md §2.6; the compressed one stays OCP) */
  if (c->arch == HM_ARCH_GFX942) hm_ref_kv_cache_to_fnuz(&c->step.in.swa);
  if (seam_seed) tl_step_new_seam(&c->step, &c->cfg, seam_seed);
  if (sh->dead_row >= 0) c->step.slot[sh->dead_row] = -1;
  if (hm_config_has(&c->cfg, HM_ROLE_FIRST)) c->step.in.res = NULL;
  c->step.in.engram_table = table;
  ck_assert_int_eq(hm_gen_step_copy(&c->step, &c->refs), HM_OK);
  if (hm_config_has(&c->cfg, HM_ROLE_FIRST)) c->refs.in.res = NULL;
  c->refs.in.engram_table = table;
  if (c->index) {
    ck_assert_int_eq(hm_select_state_new(&c->rsel), HM_OK);
    ck_assert_int_eq(hm_gen_step_seed_select(&c->step, &c->cfg, c->rsel, seed + 7), HM_OK);
    for (uint32_t r = 0; r < tp; r++)
      ck_assert_int_eq(hm_gen_step_seed_select(&c->step, &c->cfg, hm_layer_group_select_state(g, r), seed + 7), HM_OK);
  }
  hm_tset_init(&c->ref);
  st = hm_ref_layer_step(w, tp, &c->refs.in, NULL, c->rsel, &c->ref);
  ck_assert_msg(st == HM_OK, "reference: %s", hm_errmsg());
  outputs_alloc(c);
}

void lc_case_make(layer_case *c, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                      uint64_t seed, const hm_source *table) {
  lc_case_make_seam(c, g, w, tp, sh, seed, 0, table);
}

/* ---------------------------------------------------------------- comparisons */

/* A result of matrix instructions against the reference's: the software agent sums an
 * instruction's products exactly and rounds once, the reference adds them one by one in f32
 * (docs/decisions.md "FFN launch"), so a sum moves by a few f32 ulps and now and then flips the
 * bf16 or e4m3 rounding after it. Budget as K1's GEMVs: relative L2 under 1e-3, cosine above
 * 0.99999, at least 95 % of the elements bit-identical. */
void lc_expect_close(const char *what, const float *x, const float *ref, uint64_t n) {
  double rel = tl_rel_l2(x, ref, n), cos = tl_cosine(x, ref, n);
  uint64_t diff = tl_count_diff(x, ref, n);
  ck_assert_msg(rel < 1e-3 && cos > 0.99999 && diff <= n / 20, "%s vs reference: rel L2 %.3g, cosine %.8f, %llu of %llu differ",
                what, rel, cos, (unsigned long long)diff, (unsigned long long)n);
}

/* f32 results that no rounding follows (a chunk's max score m_c and sum l_c): each element is a
 * sum the agent rounds once and the reference after every term, so most elements differ in their
 * last bits (a dot of 512 products: ~sqrt(512) ulps at worst, ~1e-6 relative), and none by more.
 * Budget: relative L2 under 1e-5. */
static void expect_sums_close(const char *what, const float *x, const float *ref, uint64_t n) {
  double rel = tl_rel_l2(x, ref, n);
  ck_assert_msg(rel < 1e-5, "%s vs reference: rel L2 %.3g", what, rel);
}

/* Quantised bytes against the reference's quantisation of nearly the same values: an e4m3 code
 * flips where a value sits at a rounding boundary. Budget: 2 % of the bytes. */
static void expect_bytes_close(const char *what, const uint8_t *x, const uint8_t *ref, uint64_t n) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; i++) bad += x[i] != ref[i];
  ck_assert_msg(bad * 50 <= n, "%s: %llu of %llu bytes differ from the reference's", what, (unsigned long long)bad,
                (unsigned long long)n);
}

/* Every rank ends the layer with the same bits (replicated seam, rank-order all-reduces). */
void lc_expect_ranks_identical(const layer_case *c) {
  const size_t S = c->S, D = c->cfg.hidden;
  for (uint32_t r = 1; r < c->tp; r++) {
    ck_assert_msg(memcmp(c->o[r].x, c->o[0].x, S * D * 4) == 0, "rank %u's x differs from rank 0's", r);
    ck_assert_msg(memcmp(c->o[r].res, c->o[0].res, S * 4 * D * 4) == 0, "rank %u's res differs", r);
    ck_assert(memcmp(c->o[r].post, c->o[0].post, S * 16) == 0);
    ck_assert(memcmp(c->o[r].comb, c->o[0].comb, S * 64) == 0);
    ck_assert(memcmp(c->o[r].pre, c->o[0].pre, S * 16) == 0);
  }
}

/* An index source's top-k against the reference's: exact in a row whose entries all fit the 512
 * (every entry is picked). Past 512 entries the scores decide, and the kernels' q latent (K1's
 * GEMVs, close not exact, then MXFP4 in the indexer) moves them, so picks near the cut move: there
 * the count must agree, and expect_select_own checks the picks exactly on the kernels' inputs. */
static void expect_topk(const layer_case *c, const int32_t *tk) {
  const int32_t *ref = tl_i32(&c->ref, "k1.topk");
  for (uint32_t t = 0; t < c->S; t++) {
    const int32_t *x = tk + (size_t)t * K1_TOPK, *y = ref + (size_t)t * K1_TOPK;
    const bool crowded = c->step.slot[t] >= 0 && (c->step.pos[t] + 1) / c->cfg.compress_ratio > K1_TOPK;
    if (!crowded) {
      ck_assert_msg(!memcmp(x, y, K1_TOPK * 4), "row %u: top-k differs from the reference's", t);
      continue;
    }
    uint32_t nx = 0, ny = 0;
    while (nx < K1_TOPK && x[nx] >= 0) nx++;
    while (ny < K1_TOPK && y[ny] >= 0) ny++;
    ck_assert_msg(nx == ny, "row %u: %u picks, the reference %u", t, nx, ny);
  }
}

/* An index source's select on the kernels' own inputs to it (rank 0's x_out and qr_out from K1),
 * from the state and caches the step began with: every rank's top-k exactly that. */
static void expect_select_own(hm_runtime *rt, hm_layer_group *g, const layer_case *c, const hm_layer_weights *w) {
  const uint32_t S = c->S, D = c->cfg.hidden, Q = c->cfg.q_lora;
  const hm_k1_io *io = hm_layer_k1_io(hm_layer_group_layer(g, 0, 0));
  uint16_t *xb = tl_fetch(rt, hm_layer_group_agent(g, 0), io->x_out, (size_t)S * D * 2);
  uint16_t *qb = tl_fetch(rt, hm_layer_group_agent(g, 0), io->qr_out, (size_t)S * Q * 2);
  float *x = malloc((size_t)S * D * 4), *qr = malloc((size_t)S * Q * 4);
  for (size_t i = 0; i < (size_t)S * D; i++) x[i] = fmt_bf16_to_f32(xb[i]);
  for (size_t i = 0; i < (size_t)S * Q; i++) qr[i] = fmt_bf16_to_f32(qb[i]);
  hm_gen_step m;
  ck_assert_int_eq(hm_gen_step_make_opts(&c->cfg, &c->opts, &m), HM_OK);
  if (c->dead_row >= 0) m.slot[c->dead_row] = -1;
  hm_select_state *st;
  ck_assert_int_eq(hm_select_state_new(&st), HM_OK);
  ck_assert_int_eq(hm_gen_step_seed_select(&m, &c->cfg, st, c->opts.seed + 7), HM_OK);
  int32_t *tk = malloc((size_t)S * K1_TOPK * 4);
  hm_select_args a = {&c->cfg, &w[0], S, x, qr, m.pos, m.slot, m.t2r, m.in.comp, m.bt, m.in.bt_stride,
                      m.in.comp.block_size, NULL};
  ck_assert_msg(hm_ref_select(st, &a, tk) == HM_OK, "select on the kernels' inputs: %s", hm_errmsg());
  for (uint32_t r = 0; r < c->tp; r++)
    ck_assert_msg(!memcmp(c->o[r].topk, tk, (size_t)S * K1_TOPK * 4), "rank %u: top-k differs from the select on "
                  "the kernels' own inputs", r);
  hm_select_state_free(st);
  hm_gen_step_free(&m);
  free(xb), free(qb), free(x), free(qr), free(tk);
}

/* K1's half: the attention seam exactly (the same code and order as the reference's), the key table
 * exactly (discrete: the reference's, or on an index source keylist's of the kernels' own top-k),
 * q close (K1's GEMVs; test_k1.c checks them stage by stage). */
void lc_expect_k1(const layer_case *c) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  for (uint32_t r = 0; r < c->tp; r++) {
    const hm_layer_outputs *o = &c->o[r];
    ck_assert_uint_eq(tl_count_diff(o->res_mid, tl_f32(&c->ref, "k1.seam.res"), S * 4 * D), 0);
    ck_assert_uint_eq(tl_count_diff(o->post_a, tl_f32(&c->ref, "k1.seam.post"), S * 4), 0);
    ck_assert_uint_eq(tl_count_diff(o->comb_a, tl_f32(&c->ref, "k1.seam.comb"), S * 16), 0);
    ck_assert_uint_eq(tl_count_diff(o->pre_a, tl_f32(&c->ref, "k1.seam.pre"), S * 4), 0);
    const int32_t *kt = tl_i32(&c->ref, "k1.kt"), *klen = tl_i32(&c->ref, "k1.klen");
    int32_t *own = NULL;
    if (c->index) {
      expect_topk(c, o->topk);
      own = malloc((size_t)S * (K1_KEYS + 2) * 4);
      const hm_gen_step *m = &c->step;
      hm_key_args ka = {c->S, c->cfg.compress_ratio, m->pos, m->slot, m->swa_idx, m->swa_len, m->t2r, o->topk, m->bt,
                        m->in.bt_stride, m->in.comp.block_size};
      ck_assert_int_eq(hm_ref_key_table(&ka, own, own + S * K1_KEYS), HM_OK);
      kt = own, klen = own + S * K1_KEYS;
    }
    ck_assert_mem_eq(o->kt, kt, (size_t)S * K1_KEYS * 4);
    ck_assert_mem_eq(o->klen, klen, (size_t)S * 2 * 4);
    free(own);
    char name[32];
    snprintf(name, sizeof name, "rank%u.q", r);
    lc_expect_close("q", o->q, tl_f32(&c->ref, name), S * c->H * 512);
  }
}

/* K2's attention back, stage by stage from each rank's mailboxes, each stage against the reference
 * run on the kernel's own inputs to it: split (chunk partials and statistics) against the
 * reference's attention of the kernel's q over the kernel's caches (close: matrix instructions);
 * the combine exactly, on the kernel's own partials (no matrix instruction: the same order and
 * libm calls); XO exactly the rule V of that; wo_a close on the kernel's own XO. */
void lc_expect_back(hm_runtime *rt, hm_layer_group *g, const layer_case *c, const hm_layer_weights *w) {
  const uint32_t S = c->S, H = c->H, nch = K2_KEYS / c->ck, G = H / 8;
  for (uint32_t r = 0; r < c->tp; r++) {
    const hm_layer_outputs *o = &c->o[r];
    struct hm_k2_scratch_layout L;
    const uint8_t *dev = hm_k2_scratch(hm_layer_k2(hm_layer_group_rank(g, r)), S, &L);
    ck_assert_ptr_nonnull(dev);
    uint8_t *scr = tl_fetch(rt, hm_layer_group_agent(g, r), dev, L.bytes);
    const uint32_t orows = w[r].dims.o_rows;
    /* the kernel's partials and statistics of the live chunks (dead ones are never written) */
    const uint64_t no = (uint64_t)S * nch * H;
    float *m = calloc(no, 4), *l = calloc(no, 4), *oc = calloc(no * 512, 4);
    float *rm = calloc(no, 4), *rl = calloc(no, 4), *roc = calloc(no * 512, 4);
    float *ro = calloc((uint64_t)S * H * 512, 4), *ry = calloc((uint64_t)S * H * 512, 4);
    hm_kv_cache swa = c->step.in.swa, comp = c->step.in.comp;
    swa.base = o->swa, comp.base = o->comp;
    hm_attn_out ao = {ro, ry, rm, rl, roc};
    ck_assert_int_eq(hm_ref_attention(&w[r], S, o->q, o->kt, o->klen, &swa, &comp, c->step.pos, c->ck, &ao), HM_OK);
    uint64_t live_n = 0;
    for (uint32_t t = 0; t < S; t++)
      for (uint32_t ch = 0; ch < nch; ch++) {
        if ((int32_t)(ch * c->ck) >= o->klen[t]) continue;
        for (uint32_t h = 0; h < H; h++) {
          uint64_t i = ((uint64_t)t * nch + ch) * H + h;
          const uint32_t *v = (const uint32_t *)(scr + L.ml) + 2 * i;
          m[i] = fmt_float(v[0]), l[i] = fmt_float(v[1]);
          const uint16_t *p = (const uint16_t *)(scr + L.oc) + i * 512;
          for (uint32_t d = 0; d < 512; d++) oc[i * 512 + d] = fmt_bf16_to_f32(p[d]);
          live_n++;
        }
      }
    if (live_n) {
      expect_sums_close("split m", m, rm, no);
      expect_sums_close("split l", l, rl, no);
      lc_expect_close("split partials", oc, roc, no * 512);
    }
    /* the combine and XO exactly, from the kernel's own partials */
    ck_assert_int_eq(hm_ref_attn_combine(&w[r], S, o->klen, c->step.pos, c->ck, m, l, oc, ro, ry), HM_OK);
    uint8_t *xo = malloc((size_t)S * H * 512), *xos = malloc((size_t)S * H * 16);
    hm_ref_act_quant(c->arch, false, ry, S, H * 512, 32, FMT_RULE_V, xo, xos);
    for (uint32_t gi = 0; gi < G; gi++)
      for (uint32_t t = 0; t < S; t++) {
        ck_assert_msg(memcmp(scr + L.xo + ((uint64_t)gi * S + t) * 4096, xo + (uint64_t)t * H * 512 + gi * 4096, 4096) == 0,
                      "rank %u: XO of token %u group %u differs from the combine of its own partials", r, t, gi);
        ck_assert(memcmp(scr + L.xos + ((uint64_t)gi * S + t) * 128, xos + (uint64_t)t * H * 16 + gi * 128, 128) == 0);
      }
    /* wo_a on the kernel's own XO */
    float *z = malloc((size_t)S * orows * 4);
    uint8_t *x8b = malloc((size_t)S * orows), *x8bs = malloc((size_t)S * orows / 32);
    ck_assert_int_eq(hm_ref_wo_a(&w[r], S, xo, xos, z, x8b, x8bs), HM_OK);
    expect_bytes_close("X8B", scr + L.x8b, x8b, (uint64_t)S * orows);
    uint64_t badc = 0;
    for (uint64_t i = 0; i < (uint64_t)S * orows / 32; i++) badc += ((const uint32_t *)(scr + L.x8bs))[i] != x8bs[i];
    ck_assert_msg(badc * 50 <= (uint64_t)S * orows / 32 + 1, "X8B codes: %llu differ", (unsigned long long)badc);
    free(m), free(l), free(oc), free(rm), free(rl), free(roc), free(ro), free(ry), free(xo), free(xos), free(z);
    free(x8b), free(x8bs), free(scr);
  }
}

/* K2's FFN half, each part against the reference run on the kernel's own inputs to it. The seam:
 * the reference's wo_b of every rank's own X8B, all-reduced and folded into the kernel's own
 * res_mid (test_ffn.c checks the FFN stages on exact inputs; here wo_b's rounding flips enter):
 * the residual and the normed rows close, the mixes within 1e-3. The MoE: the reference's on the
 * kernel's own normed rows, so the route must be the kernel's except at a tie of the reference's
 * logits (test_ffn.c expect_stages), and the output within test_ffn.c's MoE budget (rel L2 under
 * 1e-2, cosine above 0.9999, 90 % identical). The layer's whole-chain output is not compared
 * element by element: a token whose route flips at a tie changes as a whole. */
void lc_expect_ffn_half(hm_runtime *rt, hm_layer_group *g, const layer_case *c, const hm_layer_weights *w) {
  const uint32_t S = c->S, D = c->cfg.hidden, K = c->cfg.topk, E = c->cfg.experts;
  float *parts[4] = {0};
  uint8_t *scr0 = NULL;
  struct hm_ffn_scratch_layout F;
  for (uint32_t r = 0; r < c->tp; r++) {
    hm_k2 *k2 = hm_layer_k2(hm_layer_group_rank(g, r));
    struct hm_k2_scratch_layout L;
    const uint8_t *dev = hm_k2_scratch(k2, S, &L);
    ck_assert_ptr_nonnull(dev);
    ck_assert_ptr_eq(hm_ffn_scratch(k2, S, &F), dev);
    uint8_t *scr = tl_fetch(rt, hm_layer_group_agent(g, r), dev, L.bytes);
    const uint32_t orows = w[r].dims.o_rows;
    uint8_t *codes = malloc((size_t)S * orows / 32);
    for (uint64_t i = 0; i < (uint64_t)S * orows / 32; i++) codes[i] = (uint8_t)((const uint32_t *)(scr + L.x8bs))[i];
    parts[r] = malloc((size_t)S * D * 4);
    ck_assert_int_eq(hm_ref_wo_b(&w[r], S, scr + L.x8b, codes, parts[r]), HM_OK);
    free(codes);
    if (r == 0) scr0 = scr;
    else free(scr);
  }
  const hm_layer_outputs *o = &c->o[0];
  hm_tensor_set seam;
  hm_tset_init(&seam);
  ck_assert_int_eq(hm_ref_ffn_launch(w, c->tp, S, (const float *const *)parts, o->res_mid, o->post_a, o->comb_a,
                                     o->pre_a, &seam),
                   HM_OK);
  lc_expect_close("FFN seam res", o->res, tl_f32(&seam, "out.res"), (uint64_t)S * 4 * D);
  float *normed = malloc((size_t)S * D * 4);
  for (uint64_t i = 0; i < (uint64_t)S * D; i++) normed[i] = fmt_bf16_to_f32(((const uint16_t *)(scr0 + F.normed))[i]);
  lc_expect_close("FFN seam normed", normed, tl_f32(&seam, "ffn.seam.normed"), (uint64_t)S * D);
  double pe = tl_max_abs(o->post, tl_f32(&seam, "out.post"), (uint64_t)S * 4);
  double ce = tl_max_abs(o->comb, tl_f32(&seam, "out.comb"), (uint64_t)S * 16);
  double re = tl_max_abs(o->pre, tl_f32(&seam, "out.pre"), (uint64_t)S * 4);
  ck_assert_msg(pe < 1e-3 && ce < 1e-3 && re < 1e-3, "FFN seam mixes: post %.3g, comb %.3g, pre %.3g off", pe, ce, re);
  /* the MoE on the kernel's own normed rows */
  hm_tensor_set moe;
  hm_tset_init(&moe);
  ck_assert_int_eq(hm_ref_moe(w, c->tp, S, normed, &moe), HM_OK);
  const uint64_t *ids = (const uint64_t *)(scr0 + F.ids);
  const int32_t *rids = tl_i32(&moe, "router.ids");
  const float *lg = tl_f32(&moe, "router.logits");
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t j = 0; j < K; j++) {
      int32_t id = (int32_t)(uint32_t)ids[t * K + j];
      if (id == rids[t * K + j]) continue;
      ck_assert(id >= 0 && (uint32_t)id < E);
      float a = lg[(uint64_t)t * E + (uint32_t)id], b = lg[(uint64_t)t * E + (uint32_t)rids[t * K + j]];
      ck_assert_msg(fabsf(a - b) <= 1e-5f * fmaxf(fabsf(a), fabsf(b)),
                    "token %u pick %u: expert %d, the reference chose %d (logits %.9g vs %.9g)", t, j, id,
                    rids[t * K + j], a, b);
    }
  const float *rx = tl_f32(&moe, "out.x");
  const uint64_t n = (uint64_t)S * D;
  double rel = tl_rel_l2(o->x, rx, n), cos = tl_cosine(o->x, rx, n);
  uint64_t diff = tl_count_diff(o->x, rx, n);
  ck_assert_msg(rel < 1e-2 && cos > 0.9999 && diff <= n / 10,
                "layer output vs the reference's MoE of its normed rows: rel L2 %.3g, cosine %.8f, %llu of %llu "
                "differ", rel, cos, (unsigned long long)diff, (unsigned long long)n);
  /* the residual against the reference's whole chain too (no route in it) */
  lc_expect_close("res (whole chain)", o->res, tl_f32(&c->ref, "out.res"), (uint64_t)S * 4 * D);
  hm_tset_free(&seam), hm_tset_free(&moe);
  for (uint32_t r = 0; r < c->tp; r++) free(parts[r]);
  free(normed), free(scr0);
}

void lc_run_case(hm_runtime *rt, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                     uint64_t seed, const hm_source *table) {
  layer_case c;
  lc_case_make(&c, g, w, tp, sh, seed, table);
  hm_status st = hm_layer_group_step(g, &c.step.in, 1, c.o, NULL);
  ck_assert_msg(st == HM_OK, "layer %d, %u rows: %s", c.cfg.layer, sh->S, hm_errmsg());
  lc_expect_ranks_identical(&c);
  if (sh->cases & HM_GEN_DEAD_CHUNK)
    ck_assert_msg(tl_dead_chunk(tl_i32(&c.ref, "k1.kt"), tl_i32(&c.ref, "k1.klen"), c.S, c.ck),
                  "no key chunk of %u all -1", c.ck);
  lc_expect_k1(&c);
  if (c.index) expect_select_own(rt, g, &c, w);
  lc_expect_back(rt, g, &c, w);
  lc_expect_ffn_half(rt, g, &c, w);
  lc_case_free(&c);
}


void lc_setup_arch(layer_setup *L, const char *model, int32_t layer, uint32_t experts, uint32_t tp, uint64_t seed,
                   const hm_ffn_config *run_in, hm_arch arch) {
  memset(L, 0, sizeof *L);
  L->cfg = tl_config(model, layer, experts, experts ? 6 : 0);
  L->tp = tp;
  /* the software agent of the weights' arch, set by every case (CK_RUN_CASE runs one alone; without
   * Check's fork a gfx942 case must not leave it for the next) */
  setenv("HSAMONO_SIM_ARCH", arch == HM_ARCH_GFX942 ? "gfx942" : "gfx950", 1);
  L->rt = tl_open_sim();
  uint32_t parts = HM_WPART_ATTN | HM_WPART_FFN;
  if (hm_config_has(&L->cfg, HM_ROLE_INDEX_SOURCE)) parts |= HM_WPART_SELECT;
  if (hm_config_has(&L->cfg, HM_ROLE_ENGRAM)) parts |= HM_WPART_ENGRAM;
  tl_build_group_arch(&L->cfg, tp, seed, parts, arch, L->w);
  ck_assert_int_eq(hm_gen_init(&L->gen, &L->cfg, seed), HM_OK);
  L->table = hm_gen_source(&L->gen);
  hm_ffn_config run = run_in ? *run_in : lc_small_grid;
  run.reduced_experts = experts != 0;
  hm_status st = hm_layer_group_create(L->rt, L->w, tp, &run, NULL, &L->g);
  ck_assert_msg(st == HM_OK, "group: %s", hm_errmsg());
}

void lc_setup(layer_setup *L, const char *model, int32_t layer, uint32_t experts, uint32_t tp, uint64_t seed,
              const hm_ffn_config *run_in) {
  lc_setup_arch(L, model, layer, experts, tp, seed, run_in, HM_ARCH_GFX950);
}

void lc_teardown(layer_setup *L) {
  hm_layer_group_destroy(L->g);
  hm_gen_free(&L->gen);
  tl_free_group(L->w, L->tp);
  hm_runtime_close(L->rt);
}

/* Every rank's epoch after `steps` layer steps: one a step (K2 advances it; K1, which shares the
 * buffer, only reads it), so tags stay 2e + 1 / 2e + 2 and K2's all-reduce alternates halves. */
void lc_expect_epoch(layer_setup *L, uint32_t steps) {
  for (uint32_t r = 0; r < L->tp; r++) {
    uint32_t *e = tl_fetch(L->rt, hm_layer_group_agent(L->g, r),
                           hm_k2_epoch(hm_layer_k2(hm_layer_group_layer(L->g, 0, r))), 4);
    ck_assert_msg(*e == steps, "rank %u: epoch %u after %u layer steps", r, *e, steps);
    free(e);
  }
}

void lc_run_layer_arch(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *shapes, uint32_t n,
                       uint64_t seed, hm_arch arch) {
  lc_run_layer_grid(model, layer, experts, tp, shapes, n, seed, arch, NULL);
}

void lc_run_layer_grid(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *shapes, uint32_t n,
                       uint64_t seed, hm_arch arch, const hm_ffn_config *run) {
  layer_setup L;
  lc_setup_arch(&L, model, layer, experts, tp, seed, run, arch);
  for (uint32_t i = 0; i < n; i++) {
    lc_run_case(L.rt, L.g, L.w, tp, &shapes[i], seed + i, &L.table);
    lc_expect_epoch(&L, i + 1);
  }
  lc_teardown(&L);
}

void lc_run_layer(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *shapes, uint32_t n,
                  uint64_t seed) {
  lc_run_layer_arch(model, layer, experts, tp, shapes, n, seed, HM_ARCH_GFX950);
}

/* ---------------------------------------------------------------- replays */

bool lc_same_outputs(const hm_layer_outputs *a, const hm_layer_outputs *b, uint32_t S, uint32_t D) {
  return !memcmp(a->x, b->x, (size_t)S * D * 4) && !memcmp(a->res, b->res, (size_t)S * 4 * D * 4) &&
         !memcmp(a->post, b->post, (size_t)S * 16) && !memcmp(a->comb, b->comb, (size_t)S * 64) &&
         !memcmp(a->pre, b->pre, (size_t)S * 16);
}

static uint32_t epoch_of(lc_replay_ctx *c, uint32_t layer, uint32_t r) {
  return tl_get_u32(&c->st[r], hm_k2_epoch(hm_layer_k2(hm_layer_group_layer(c->g, layer, r))));
}

/* set k's seam state into rank r's entry buffers, where the recorded K1 of the chain's first layer
 * reads it */
static void upload_entry(lc_replay_ctx *c, uint32_t r, uint32_t k) {
  const hm_k1_io *io = hm_layer_k1_io(hm_layer_group_layer(c->g, 0, r));
  const hm_step_inputs *in = c->in[k];
  const uint64_t S = c->S, D = c->D;
  tl_put_bf16(&c->st[r], (void *)io->x, in->x, S * D);
  tl_put_bf16(&c->st[r], (void *)io->res_in, in->res, S * 4 * D);
  tl_put(&c->st[r], (void *)io->post_in, in->post, S * 16);
  tl_put(&c->st[r], (void *)io->comb_in, in->comb, S * 64);
  tl_put(&c->st[r], (void *)io->pre_in, in->pre, S * 16);
}

int lc_replay_check(void *ctx, uint32_t n, uint32_t r, const hm_layer_outputs *o) {
  lc_replay_ctx *c = ctx;
  const uint32_t k = c->order[n];
  for (uint32_t i = 0; i < c->layers; i++) {
    uint32_t e = epoch_of(c, i, r);
    if (e != c->epoch[r][i] + 1) {
      fprintf(stderr, "replay %u, rank %u, layer %u: epoch %u after %u: not one step on\n", n, r, i, e, c->epoch[r][i]);
      return 1;
    }
    c->epoch[r][i] = e;
  }
  if (!lc_same_outputs(o, &c->want[k][r], c->S, c->D)) {
    int other = -1;
    for (uint32_t j = 0; j < LC_SETS; j++)
      if (j != k && c->want[j] && lc_same_outputs(o, &c->want[j][r], c->S, c->D)) other = (int)j;
    if (other >= 0)
      fprintf(stderr, "replay %u (set %u), rank %u: the outputs are set %d's, not this set's\n", n, k, r, other);
    else
      fprintf(stderr, "replay %u (set %u), rank %u: the outputs differ from every set's\n", n, k, r);
    return 1;
  }
  /* this rank's chain is done: its next replay's inputs (the other ranks read none of them) */
  if (n + 1 < c->replays && !c->keep_inputs) upload_entry(c, r, c->order[n + 1]);
  return 0;
}

void lc_replay_ctx_init(lc_replay_ctx *c, hm_runtime *rt, hm_layer_group *g, uint32_t tp, uint32_t S, uint32_t D,
                            uint32_t layers, uint32_t sets) {
  memset(c, 0, sizeof *c);
  c->g = g, c->tp = tp, c->S = S, c->D = D, c->layers = layers;
  for (uint32_t r = 0; r < tp; r++) {
    tl_stage_init(&c->st[r], rt, hm_layer_group_agent(g, r), (size_t)S * 4 * D * 4);
    /* every layer's epoch buffer starts at 0, and each of the sets' steps advanced it by one */
    for (uint32_t i = 0; i < layers; i++) {
      c->epoch[r][i] = epoch_of(c, i, r);
      ck_assert_msg(c->epoch[r][i] == sets, "rank %u layer %u: epoch %u after %u steps", r, i, c->epoch[r][i], sets);
    }
  }
}

void lc_replay_ctx_free(lc_replay_ctx *c) {
  for (uint32_t r = 0; r < c->tp; r++) tl_stage_free(&c->st[r]);
}

void lc_last_outputs_alloc(hm_layer_outputs *o, uint32_t tp, uint32_t S, uint32_t D) {
  memset(o, 0, tp * sizeof *o);
  for (uint32_t r = 0; r < tp; r++) {
    o[r].x = calloc((size_t)S * D, 4), o[r].res = calloc((size_t)S * 4 * D, 4);
    o[r].post = calloc(S * 4, 4), o[r].comb = calloc(S * 16, 4), o[r].pre = calloc(S * 4, 4);
  }
}
void lc_last_outputs_free(hm_layer_outputs *o, uint32_t tp) {
  for (uint32_t r = 0; r < tp; r++) free(o[r].x), free(o[r].res), free(o[r].post), free(o[r].comb), free(o[r].pre);
}

/* `launches` of a whole layer (chaos_launches under chaos): the LC_SETS checked steps, then the replays. */
void lc_replays_of(hm_arch arch, uint32_t tp, int32_t layer, uint32_t S, uint32_t launches, uint32_t chaos_launches) {
  layer_setup L;
  lc_setup_arch(&L, "tiny", layer, 0, tp, 700 + (uint64_t)layer, NULL, arch);
  const shape sh = {S, 1, 70, 64, -1, 0};
  layer_case c[LC_SETS];
  lc_replay_ctx rc;
  for (uint32_t k = 0; k < LC_SETS; k++) {
    lc_case_make_seam(&c[k], L.g, L.w, tp, &sh, 701, k ? 701 + 100 * k : 0, &L.table);
    ck_assert_msg(hm_layer_group_step(L.g, &c[k].step.in, 1, c[k].o, NULL) == HM_OK, "%s", hm_errmsg());
    lc_expect_ranks_identical(&c[k]);
    lc_expect_k1(&c[k]);
    lc_expect_back(L.rt, L.g, &c[k], L.w);
    lc_expect_ffn_half(L.rt, L.g, &c[k], L.w);
    for (uint32_t j = 0; j < k; j++)
      ck_assert_msg(!lc_same_outputs(&c[j].o[0], &c[k].o[0], S, L.cfg.hidden), "sets %u and %u alike", j, k);
  }
  lc_replay_ctx_init(&rc, L.rt, L.g, tp, S, L.cfg.hidden, 1, LC_SETS);
  const char *chaos = getenv("HSAMONO_SIM_CHAOS");
  rc.replays = (chaos && *chaos ? chaos_launches : launches) - LC_SETS;
  uint32_t *order = malloc(rc.replays * sizeof *order);
  tl_replay_order(LC_SETS, LC_SETS - 1, 799, rc.replays, order);
  rc.order = order;
  for (uint32_t k = 0; k < LC_SETS; k++) rc.want[k] = c[k].o, rc.in[k] = &c[k].step.in;
  hm_layer_outputs o[4];
  lc_last_outputs_alloc(o, tp, S, L.cfg.hidden);
  /* the recorded step's first inputs are its first set's; the caches and metadata are every set's */
  hm_status st = hm_layer_group_replay(L.g, rc.in[order[0]], rc.replays, o, lc_replay_check, &rc);
  ck_assert_msg(st == HM_OK, "%s", hm_errmsg());
  lc_last_outputs_free(o, tp);
  lc_replay_ctx_free(&rc);
  free(order);
  for (uint32_t k = 0; k < LC_SETS; k++) lc_case_free(&c[k]);
  lc_teardown(&L);
}
