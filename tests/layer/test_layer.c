/* tests/layer/test_layer.c: the whole layer (issue 12: K1 -> [select -> keylist] -> K2) on the software
 * agent against the fp32 reference, stage by stage and whole, over every layer kind. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"
#include "hm_layer_group.h"
#include "kernels/k1_args.h"
#include "kernels/k2_args.h"

/* 8-CTA parts on the software agent (tests/layer/meson.build), so every stage's placement wraps. */
static const hm_ffn_config small_grid = {.min_cus = 1};

/* ---------------------------------------------------------------- a case */

/* How a case bends the generated step. */
typedef struct shape {
  uint32_t S, reqs, ctx, block;
  int32_t dead_row; /* a row given slot -1 (a padding token), or -1 for none */
} shape;

typedef struct layer_case {
  hm_layer_config cfg;
  uint32_t tp, S, H, ck;
  bool index;
  hm_gen_step step;   /* what the group gets (caches as before the step) */
  hm_gen_step refs;   /* the reference's copy (caches after the reference's step) */
  hm_select_state *rsel; /* the reference's select state (index sources) */
  hm_tensor_set ref;
  hm_layer_outputs o[4];
} layer_case;

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

static void case_free(layer_case *c) {
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
static void case_make(layer_case *c, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                      uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->cfg = w[0].cfg, c->tp = tp, c->S = sh->S, c->H = w[0].dims.heads;
  c->ck = hm_attn_chunk_keys(tp, sh->S, false);
  c->index = hm_config_has(&c->cfg, HM_ROLE_INDEX_SOURCE);
  hm_status st = hm_gen_step_make_block(&c->cfg, sh->S, sh->reqs, sh->ctx, sh->block, seed, &c->step);
  ck_assert_msg(st == HM_OK, "step: %s", hm_errmsg());
  if (sh->dead_row >= 0) c->step.slot[sh->dead_row] = -1;
  if (hm_config_has(&c->cfg, HM_ROLE_FIRST)) c->step.in.res = NULL;
  ck_assert_int_eq(hm_gen_step_copy(&c->step, &c->refs), HM_OK);
  if (hm_config_has(&c->cfg, HM_ROLE_FIRST)) c->refs.in.res = NULL;
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

/* ---------------------------------------------------------------- comparisons */

/* A result of matrix instructions against the reference's: the software agent sums an
 * instruction's products exactly and rounds once, the reference adds them one by one in f32
 * (docs/decisions.md "FFN launch"), so a sum moves by a few f32 ulps and now and then flips the
 * bf16 or e4m3 rounding after it. Budget as K1's GEMVs: relative L2 under 1e-3, cosine above
 * 0.99999, at least 95 % of the elements bit-identical. */
static void expect_close(const char *what, const float *x, const float *ref, uint64_t n) {
  double rel = tl_rel_l2(x, ref, n), cos = tl_cosine(x, ref, n);
  uint64_t diff = tl_count_diff(x, ref, n);
  ck_assert_msg(rel < 1e-3 && cos > 0.99999 && diff <= n / 20, "%s vs reference: rel L2 %.3g, cosine %.8f, %llu of %llu differ",
                what, rel, cos, (unsigned long long)diff, (unsigned long long)n);
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
static void expect_ranks_identical(const layer_case *c) {
  const size_t S = c->S, D = c->cfg.hidden;
  for (uint32_t r = 1; r < c->tp; r++) {
    ck_assert_msg(memcmp(c->o[r].x, c->o[0].x, S * D * 4) == 0, "rank %u's x differs from rank 0's", r);
    ck_assert_msg(memcmp(c->o[r].res, c->o[0].res, S * 4 * D * 4) == 0, "rank %u's res differs", r);
    ck_assert(memcmp(c->o[r].post, c->o[0].post, S * 16) == 0);
    ck_assert(memcmp(c->o[r].comb, c->o[0].comb, S * 64) == 0);
    ck_assert(memcmp(c->o[r].pre, c->o[0].pre, S * 16) == 0);
  }
}

/* K1's half: the attention seam exactly (the same code and order as the reference's), the key table
 * exactly (discrete), q close (K1's GEMVs; test_k1.c checks them stage by stage). */
static void expect_k1(const layer_case *c) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  for (uint32_t r = 0; r < c->tp; r++) {
    const hm_layer_outputs *o = &c->o[r];
    ck_assert_uint_eq(tl_count_diff(o->res_mid, tl_f32(&c->ref, "k1.seam.res"), S * 4 * D), 0);
    ck_assert_uint_eq(tl_count_diff(o->post_a, tl_f32(&c->ref, "k1.seam.post"), S * 4), 0);
    ck_assert_uint_eq(tl_count_diff(o->comb_a, tl_f32(&c->ref, "k1.seam.comb"), S * 16), 0);
    ck_assert_uint_eq(tl_count_diff(o->pre_a, tl_f32(&c->ref, "k1.seam.pre"), S * 4), 0);
    if (c->index) ck_assert_mem_eq(o->topk, tl_i32(&c->ref, "k1.topk"), (size_t)S * K1_TOPK * 4);
    ck_assert_mem_eq(o->kt, tl_i32(&c->ref, "k1.kt"), (size_t)S * K1_KEYS * 4);
    ck_assert_mem_eq(o->klen, tl_i32(&c->ref, "k1.klen"), (size_t)S * 2 * 4);
    char name[32];
    snprintf(name, sizeof name, "rank%u.q", r);
    expect_close("q", o->q, tl_f32(&c->ref, name), S * c->H * 512);
  }
}

/* K2's attention back, stage by stage from each rank's mailboxes, each stage against the reference
 * run on the kernel's own inputs to it: split (chunk partials and statistics) against the
 * reference's attention of the kernel's q over the kernel's caches (close: matrix instructions);
 * the combine exactly, on the kernel's own partials (no matrix instruction: the same order and
 * libm calls); XO exactly the rule V of that; wo_a close on the kernel's own XO. */
static void expect_back(hm_runtime *rt, hm_layer_group *g, const layer_case *c, const hm_layer_weights *w) {
  const uint32_t S = c->S, H = c->H, nch = K2_KEYS / c->ck, G = H / 8;
  for (uint32_t r = 0; r < c->tp; r++) {
    const hm_layer_outputs *o = &c->o[r];
    struct k2_scratch L;
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
      expect_close("split m", m, rm, no);
      expect_close("split l", l, rl, no);
      expect_close("split partials", oc, roc, no * 512);
    }
    /* the combine and XO exactly, from the kernel's own partials */
    ck_assert_int_eq(hm_ref_attn_combine(&w[r], S, o->klen, c->step.pos, c->ck, m, l, oc, ro, ry), HM_OK);
    uint8_t *xo = malloc((size_t)S * H * 512), *xos = malloc((size_t)S * H * 16);
    hm_ref_mx8_quant(ry, S, H * 512, 32, FMT_RULE_V, xo, xos);
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

/* The layer's outputs against the reference's whole chain: the seam's mixes and residual close
 * (they follow the attention output through the FFN seam), x with the MoE's budget
 * (test_ffn.c expect_moe_close: rel L2 under 1e-2, cosine above 0.9999, 90 % identical). */
static void expect_outputs(const layer_case *c) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  const hm_layer_outputs *o = &c->o[0];
  expect_close("res", o->res, tl_f32(&c->ref, "out.res"), S * 4 * D);
  const float *x = o->x, *ref = tl_f32(&c->ref, "out.x");
  double rel = tl_rel_l2(x, ref, S * D), cos = tl_cosine(x, ref, S * D);
  uint64_t diff = tl_count_diff(x, ref, S * D);
  ck_assert_msg(rel < 1e-2 && cos > 0.9999 && diff <= S * D / 10,
                "layer output vs reference: rel L2 %.3g, cosine %.8f, %llu of %llu elements differ", rel, cos,
                (unsigned long long)diff, (unsigned long long)(S * D));
  double pe = tl_max_abs(o->post, tl_f32(&c->ref, "out.post"), S * 4);
  double ce = tl_max_abs(o->comb, tl_f32(&c->ref, "out.comb"), S * 16);
  ck_assert_msg(pe < 1e-3 && ce < 1e-3, "mixes: post %.3g, comb %.3g off the reference's", pe, ce);
}

static void run_case(hm_runtime *rt, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                     uint64_t seed) {
  layer_case c;
  case_make(&c, g, w, tp, sh, seed);
  hm_status st = hm_layer_group_step(g, &c.step.in, 1, c.o, NULL);
  ck_assert_msg(st == HM_OK, "layer %d, %u rows: %s", c.cfg.layer, sh->S, hm_errmsg());
  expect_ranks_identical(&c);
  expect_k1(&c);
  expect_back(rt, g, &c, w);
  expect_outputs(&c);
  case_free(&c);
}

static void run_layer(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *shapes, uint32_t n,
                      uint64_t seed) {
  hm_layer_config cfg = tl_config(model, layer, experts, experts ? 6 : 0);
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[4];
  uint32_t parts = HM_WPART_ATTN | HM_WPART_FFN;
  if (hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE)) parts |= HM_WPART_SELECT;
  if (hm_config_has(&cfg, HM_ROLE_ENGRAM)) parts |= HM_WPART_ENGRAM;
  tl_build_group(&cfg, tp, seed, parts, w);
  hm_ffn_config run = small_grid;
  run.reduced_experts = experts != 0;
  hm_layer_group *g;
  hm_status st = hm_layer_group_create(rt, w, tp, &run, &g);
  ck_assert_msg(st == HM_OK, "group: %s", hm_errmsg());
  for (uint32_t i = 0; i < n; i++) run_case(rt, g, w, tp, &shapes[i], seed + i);
  hm_layer_group_destroy(g);
  tl_free_group(w, tp);
  hm_runtime_close(rt);
}

/* ---------------------------------------------------------------- the tests */

/* A REUSE layer (ratio 2) at TP 2: position 0 (one window slot, no compressed key), a window that
 * wraps a 64-slot block, a padding row, two requests. */
START_TEST(tiny_reuse_ratio2_tp2) {
  const shape s[] = {{1, 1, 0, 64, -1}, {7, 1, 100, 64, 3}};
  run_layer("tiny", 3, 0, 2, s, sizeof s / sizeof *s, 100);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer");
  /* a case a test, so CK_RUN_CASE picks one */
  struct { const char *name; const TTest *t; } tests[] = {
      {"tiny_reuse_ratio2_tp2", tiny_reuse_ratio2_tp2},
  };
  for (unsigned i = 0; i < sizeof tests / sizeof *tests; i++) {
    TCase *tc = tcase_create(tests[i].name);
    tcase_set_timeout(tc, 1800);
    tcase_add_test(tc, tests[i].t);
    suite_add_tcase(s, tc);
  }
  return s;
}
