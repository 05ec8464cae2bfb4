/* tests/layer/test_config.c: the V4.1-Flash schedule and dims as data (spec/mono.md §1.2-1.3), every
 * model constant pinned to the spec's values, the tiny configs' structure, per-rank widths, refusals. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "epoch.h"
#include "formats.h"
#include "hm_config.h"
#include "hm_ffn.h"
#include "hm_hsa.h"
#include "hm_k1.h"
#include "hm_ref.h"
#include "hm_weights.h"
#include "kernels/ar_args.h"
#include "kernels/ffn_args.h"
#include "kernels/k1_args.h"
#include "kernels/k2_args.h"
#include "kernels/seam_args.h"

static hm_layer_config v41(int32_t l) {
  hm_layer_config c;
  ck_assert_int_eq(hm_config_v41_flash(l, &c), HM_OK);
  return c;
}

START_TEST(schedule) {
  /* compress_ratios = [0,0] + [2]x18 + [1]x20 + [0,0,0] */
  for (int l = 0; l < 43; l++) {
    hm_layer_config c = v41(l);
    uint32_t want = l < 2 ? 0 : l < 20 ? 2 : l < 40 ? 1 : 0;
    ck_assert_uint_eq(c.compress_ratio, want);
  }
  hm_layer_config c = v41(0);
  ck_assert(hm_config_has(&c, HM_ROLE_FIRST));
  ck_assert_int_eq(c.kv_source, -1);
  c = v41(1);
  ck_assert(hm_config_has(&c, HM_ROLE_ENGRAM) && !hm_config_has(&c, HM_ROLE_FIRST));
  ck_assert_uint_eq(c.engram_index, 0);
  c = v41(2);
  ck_assert(hm_config_has(&c, HM_ROLE_KV_SOURCE) && hm_config_has(&c, HM_ROLE_INDEX_SOURCE));
  c = v41(7); /* REUSE of layer 2 */
  ck_assert(!hm_config_has(&c, HM_ROLE_KV_SOURCE) && !hm_config_has(&c, HM_ROLE_INDEX_SOURCE));
  ck_assert_int_eq(c.kv_source, 2);
  ck_assert_int_eq(c.index_source, 2);
  c = v41(14);
  ck_assert(hm_config_has(&c, HM_ROLE_ENGRAM) && hm_config_has(&c, HM_ROLE_KV_SOURCE));
  ck_assert_uint_eq(c.engram_index, 1);
  c = v41(20);
  ck_assert(hm_config_has(&c, HM_ROLE_CANDIDATE) && hm_config_has(&c, HM_ROLE_KV_SOURCE));
  c = v41(24); /* REINDEX: own indexer, layer 20's compressed cache */
  ck_assert(hm_config_has(&c, HM_ROLE_INDEX_SOURCE) && !hm_config_has(&c, HM_ROLE_KV_SOURCE));
  ck_assert_int_eq(c.kv_source, 20);
  c = v41(39);
  ck_assert_int_eq(c.index_source, 36);
  ck_assert_int_eq(c.kv_source, 20);
  int engram = 0, kv = 0, idx = 0;
  for (int l = 0; l < 43; l++) {
    c = v41(l);
    engram += hm_config_has(&c, HM_ROLE_ENGRAM);
    kv += hm_config_has(&c, HM_ROLE_KV_SOURCE);
    idx += hm_config_has(&c, HM_ROLE_INDEX_SOURCE);
  }
  ck_assert_int_eq(engram, 2);
  ck_assert_int_eq(kv, 4);
  ck_assert_int_eq(idx, 8);
  hm_layer_config x;
  ck_assert_int_eq(hm_config_v41_flash(43, &x), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_config_v41_flash(-1, &x), HM_ERR_INVALID_ARG);
}
END_TEST

START_TEST(dims_v41) {
  hm_layer_config c = v41(5);
  ck_assert_uint_eq(c.hidden, 5120);
  ck_assert_uint_eq(c.experts, 384);
  ck_assert_uint_eq(c.topk, 6);
  ck_assert_uint_eq(c.q_lora, 1280);
  ck_assert_uint_eq(c.ug_groups, 2);
  ck_assert(c.eps == 1e-20f && c.hc_eps == 1e-6f && c.route_scale == 1.5f && c.swiglu_limit == 10.0f);
  /* spec/mono.md §1.2 per-rank widths */
  hm_rank_dims d;
  ck_assert_int_eq(hm_rank_dims_for(&c, 2, &d), HM_OK);
  ck_assert_uint_eq(d.heads, 32);
  ck_assert_uint_eq(d.groups, 4);
  ck_assert_uint_eq(d.o_rows, 4096);
  ck_assert_uint_eq(d.q_rows, 16384);
  ck_assert_uint_eq(d.inter, 1152);
  ck_assert_uint_eq(d.inter_pad, 1152);
  ck_assert_uint_eq(d.w2_scale_cols, 40);
  ck_assert_uint_eq(d.shared_inter, 1152);
  ck_assert_int_eq(hm_rank_dims_for(&c, 4, &d), HM_OK);
  ck_assert_uint_eq(d.heads, 16);
  ck_assert_uint_eq(d.groups, 2);
  ck_assert_uint_eq(d.o_rows, 2048);
  ck_assert_uint_eq(d.q_rows, 8192);
  ck_assert_uint_eq(d.inter, 576);
  ck_assert_uint_eq(d.inter_pad, 640);
  ck_assert_uint_eq(d.w2_scale_cols, 24);
  ck_assert_uint_eq(d.shared_inter, 576);
  ck_assert_int_eq(hm_rank_dims_for(&c, 1, &d), HM_OK);
  ck_assert_uint_eq(d.inter_pad, 2304);
  ck_assert_uint_eq(d.w2_scale_cols, 72);
  ck_assert_int_eq(hm_rank_dims_for(&c, 3, &d), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_rank_dims_for(&c, 8, &d), HM_ERR_INVALID_ARG);
  c = v41(41);
  ck_assert(hm_config_is_draft(&c));
  ck_assert_uint_eq(c.experts, 128);
  ck_assert_uint_eq(c.topk, 3);
  ck_assert_uint_eq(c.compress_ratio, 0);
  ck_assert_uint_eq(hm_attn_chunk_keys(2, 25, false), 64);
  ck_assert_uint_eq(hm_attn_chunk_keys(2, 26, false), 128);
  ck_assert_uint_eq(hm_attn_chunk_keys(4, 1, false), 128);
  ck_assert_uint_eq(hm_attn_chunk_keys(4, 48, true), 64);
}
END_TEST

/* the tiny config keeps the structure the kernels need: the TP4 rank's routed share is padded
 * (64 -> 128) like 576 -> 640, TP2 is not, heads stay 16 a TP4 rank in whole groups */
START_TEST(dims_tiny) {
  for (int l = 0; l < 43; l++) {
    hm_layer_config t, v;
    ck_assert_int_eq(hm_config_tiny(l, &t), HM_OK);
    v = v41(l);
    ck_assert_str_eq(t.model, "tiny");
    ck_assert_uint_eq(t.roles, v.roles);
    ck_assert_uint_eq(t.compress_ratio, v.compress_ratio);
    ck_assert_int_eq(t.kv_source, v.kv_source);
    ck_assert_int_eq(hm_config_check(&t), HM_OK);
    ck_assert_uint_eq(t.head_dim, 512);
    ck_assert_uint_eq(t.window, 128);
  }
  hm_layer_config t;
  ck_assert_int_eq(hm_config_by_name("tiny", 3, &t), HM_OK);
  hm_rank_dims d;
  ck_assert_int_eq(hm_rank_dims_for(&t, 4, &d), HM_OK);
  ck_assert_uint_eq(d.heads, 16);
  ck_assert_uint_eq(d.inter, 64);
  ck_assert_uint_eq(d.inter_pad, 128);
  ck_assert_uint_eq(d.w2_scale_cols, 8);
  ck_assert_int_eq(hm_rank_dims_for(&t, 2, &d), HM_OK);
  ck_assert_uint_eq(d.inter, 128);
  ck_assert_uint_eq(d.inter_pad, 128);
  ck_assert_int_eq(hm_config_by_name("nope", 3, &t), HM_ERR_NOT_FOUND);
}
END_TEST

START_TEST(checks) {
  hm_layer_config c = v41(3);
  ck_assert_int_eq(hm_config_set_experts(&c, 8, 6), HM_OK);
  ck_assert_uint_eq(c.experts, 8);
  ck_assert_int_eq(hm_config_set_experts(&c, 4, 6), HM_ERR_INVALID_ARG);
  ck_assert_uint_eq(c.experts, 8); /* unchanged on error */
  hm_layer_config bad = c;
  bad.hidden = 5000;
  ck_assert_int_eq(hm_config_check(&bad), HM_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "hidden 5000"));
  bad = c;
  bad.moe_inter = 2300;
  ck_assert_int_eq(hm_config_check(&bad), HM_ERR_INVALID_ARG);
  bad = c;
  bad.heads = 48;
  ck_assert_int_eq(hm_config_check(&bad), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_config_check(NULL), HM_ERR_INVALID_ARG);
  char p[32];
  hm_config_prefix(&c, p, sizeof p);
  ck_assert_str_eq(p, "layers.3.");
  c = v41(42);
  hm_config_prefix(&c, p, sizeof p);
  ck_assert_str_eq(p, "mtp.2.");
}
END_TEST

/* ---------------------------------------------------------------- the spec's values, pinned
 *
 * Every value below is a literal copied from the spec (spec/model.md, spec/mono.md: the files are not
 * shipped, so each one is written out here with the section it comes from). A config or kernel
 * constant that drifts from the model fails here by name, not as a numeric difference somewhere. */

/* The layer schedule of DeepSeek-V4.1-Flash, one row a layer (spec/mono.md §1.3 "Layer schedule";
 * model.md §1.1 compress_ratios = [0,0] + [2]x18 + [1]x20 + [0,0,0], kv_source_layer_ids
 * [2,8,14,20], index_source_layer_ids [2,8,14,20,24,28,32,36], candidate_source_layer_id 20,
 * Engram layers [1,14], 3 DSpark draft layers 40-42). kv / idx: the layer whose compressed cache /
 * top-k the layer reads (model.md §1.2: "the nearest kv source <= their index", likewise the index
 * source), -1 on window layers. */
#define R_FIRST HM_ROLE_FIRST
#define R_ENG HM_ROLE_ENGRAM
#define R_KV HM_ROLE_KV_SOURCE
#define R_IDX HM_ROLE_INDEX_SOURCE
#define R_CAND HM_ROLE_CANDIDATE
#define R_DRAFT HM_ROLE_DRAFT
static const struct {
  uint8_t ratio;
  uint32_t roles;
  int8_t kv, idx;
} spec_schedule[43] = {
    {0, R_FIRST, -1, -1},                {0, R_ENG, -1, -1},                       /* 0, 1 */
    {2, R_KV | R_IDX, 2, 2},             {2, 0, 2, 2},  {2, 0, 2, 2},  {2, 0, 2, 2},  /* 2-5 */
    {2, 0, 2, 2},                        {2, 0, 2, 2},                            /* 6, 7 */
    {2, R_KV | R_IDX, 8, 8},             {2, 0, 8, 8},  {2, 0, 8, 8},  {2, 0, 8, 8},  /* 8-11 */
    {2, 0, 8, 8},                        {2, 0, 8, 8},                            /* 12, 13 */
    {2, R_ENG | R_KV | R_IDX, 14, 14},   {2, 0, 14, 14}, {2, 0, 14, 14}, {2, 0, 14, 14}, /* 14-17 */
    {2, 0, 14, 14},                      {2, 0, 14, 14},                          /* 18, 19 */
    {1, R_KV | R_IDX | R_CAND, 20, 20},  {1, 0, 20, 20}, {1, 0, 20, 20}, {1, 0, 20, 20}, /* 20-23 */
    {1, R_IDX, 20, 24},                  {1, 0, 20, 24}, {1, 0, 20, 24}, {1, 0, 20, 24}, /* 24-27 */
    {1, R_IDX, 20, 28},                  {1, 0, 20, 28}, {1, 0, 20, 28}, {1, 0, 20, 28}, /* 28-31 */
    {1, R_IDX, 20, 32},                  {1, 0, 20, 32}, {1, 0, 20, 32}, {1, 0, 20, 32}, /* 32-35 */
    {1, R_IDX, 20, 36},                  {1, 0, 20, 36}, {1, 0, 20, 36}, {1, 0, 20, 36}, /* 36-39 */
    {0, R_DRAFT, -1, -1},                {0, R_DRAFT, -1, -1}, {0, R_DRAFT, -1, -1}, /* 40-42 */
};

START_TEST(spec_layer_schedule) {
  int whole = 0;
  for (int l = 0; l < 43; l++) {
    for (int tiny = 0; tiny < 2; tiny++) {
      hm_layer_config c;
      ck_assert_int_eq(tiny ? hm_config_tiny(l, &c) : hm_config_v41_flash(l, &c), HM_OK);
      ck_assert_msg(c.compress_ratio == spec_schedule[l].ratio && c.roles == spec_schedule[l].roles &&
                        c.kv_source == spec_schedule[l].kv && c.index_source == spec_schedule[l].idx,
                    "%s layer %d: ratio %u roles 0x%x kv %d idx %d; the spec: ratio %u roles 0x%x kv %d idx %d",
                    c.model, l, c.compress_ratio, c.roles, c.kv_source, c.index_source, spec_schedule[l].ratio,
                    spec_schedule[l].roles, spec_schedule[l].kv, spec_schedule[l].idx);
      ck_assert_int_eq(c.layer, l);
      ck_assert_uint_eq(c.n_layers, 40); /* model.md §1.1: num_hidden_layers 40 */
      ck_assert_uint_eq(c.n_draft, 3);   /* model.md §1.1: num_nextn_predict_layers 3 */
      ck_assert_int_eq(c.candidate_source, 20); /* model.md §1.1: candidate_source_layer_id 20 */
      /* engram_index: which of the two Engram tables (layer 1's, layer 14's; model.md §8) */
      if (hm_config_has(&c, HM_ROLE_ENGRAM)) ck_assert_uint_eq(c.engram_index, l == 14 ? 1 : 0);
    }
    /* spec/mono.md §1.3: "Whole-layer count on gfx950: 30 of 40" (ratio 1 or 2, no Engram, no
     * compressor or indexer: the REUSE layers) */
    uint32_t r = spec_schedule[l].roles;
    whole += l < 40 && spec_schedule[l].ratio > 0 && !(r & (R_ENG | R_KV | R_IDX));
  }
  ck_assert_int_eq(whole, 30);
}
END_TEST

/* spec/mono.md §1.3's last two columns, row by row as the table words them:
 *   0            gfx950 vLLM attention + FFN launch   gfx942 whole via "window seam"
 *   1            FFN launch                           whole (mHC post + Engram first, then window seam)
 *   2, 8, 14     FFN launch                           K1(index build) -> compressor + indexer -> keylist -> K2
 *   3-7, 9-13, 15-19, 21-23, 25-27, 29-31, 33-35, 37-39   whole   whole
 *   20, 24, 28, 32, 36   FFN launch                   index path
 *   40-42        vLLM                                 FFN launch built for 128/3 */
static void spec_paths(int l, hm_layer_path *g950, hm_layer_path *g942) {
  if (l >= 40) {
    *g950 = HM_PATH_VLLM, *g942 = HM_PATH_FFN;
  } else if (l == 0 || l == 1) {
    *g950 = HM_PATH_FFN, *g942 = HM_PATH_WINDOW_SEAM;
  } else if (l == 2 || l == 8 || l == 14 || l == 20 || (l >= 24 && l <= 36 && l % 4 == 0)) {
    *g950 = HM_PATH_FFN, *g942 = HM_PATH_INDEX;
  } else {
    *g950 = HM_PATH_WHOLE, *g942 = HM_PATH_WHOLE;
  }
}

START_TEST(spec_layer_paths) {
  int whole950 = 0;
  for (int l = 0; l < 43; l++)
    for (int tiny = 0; tiny < 2; tiny++) {
      hm_layer_config c;
      ck_assert_int_eq(tiny ? hm_config_tiny(l, &c) : hm_config_v41_flash(l, &c), HM_OK);
      hm_layer_path p950, p942;
      spec_paths(l, &p950, &p942);
      ck_assert_msg(hm_layer_path_for(&c, false) == p950, "%s layer %d on gfx950: %s, §1.3 says %s", c.model, l,
                    hm_layer_path_name(hm_layer_path_for(&c, false)), hm_layer_path_name(p950));
      ck_assert_msg(hm_layer_path_for(&c, true) == p942, "%s layer %d on gfx942: %s, §1.3 says %s", c.model, l,
                    hm_layer_path_name(hm_layer_path_for(&c, true)), hm_layer_path_name(p942));
      whole950 += !tiny && l < 40 && p950 == HM_PATH_WHOLE;
    }
  ck_assert_int_eq(whole950, 30); /* "Whole-layer count on gfx950: 30 of 40" */
  /* a layer with fewer experts keeps its path (the path is the schedule's, not the routing's) */
  hm_layer_config c;
  ck_assert_int_eq(hm_config_v41_flash(41, &c), HM_OK);
  ck_assert_int_eq(hm_config_set_experts(&c, 4, 2), HM_OK);
  ck_assert_int_eq(hm_layer_path_for(&c, true), HM_PATH_FFN);
  ck_assert_str_eq(hm_layer_path_name(HM_PATH_WINDOW_SEAM), "window seam");
  ck_assert_str_eq(hm_layer_path_name((hm_layer_path)99), "?");
}
END_TEST

/* The scalar constants every V4.1 config carries, whatever its size (the tiny configs keep them:
 * hm_config.h). model.md §1.1 (CFG-41 column) and mono.md §1.1-1.2 unless said. */
static void expect_v41_scalars(const hm_layer_config *c) {
  const bool draft = hm_config_is_draft(c);
  ck_assert_uint_eq(c->hc, 4);              /* hc_mult 4 */
  ck_assert_uint_eq(c->head_dim, 512);      /* head_dim 512 (K = V latent, one KV head) */
  ck_assert_uint_eq(c->nope_dim, 448);      /* qk_rope_head_dim 64, nope = 448 */
  ck_assert_uint_eq(c->rope_dim, 64);
  ck_assert_uint_eq(c->kv_dim, 512);        /* wkv [512, D] (model.md §1.3) */
  ck_assert_uint_eq(c->heads, 64);          /* heads H 64; tiny keeps them (hm_config.h) */
  ck_assert_uint_eq(c->o_groups, 8);        /* o_groups G 8: each group = 8 heads (mono.md §1.2) */
  ck_assert_uint_eq(c->heads / c->o_groups, 8);
  ck_assert_msg(c->route_scale == 1.5f, "route_scale %g", c->route_scale);    /* routed_scaling_factor 1.5 */
  ck_assert_msg(c->swiglu_limit == 10.0f, "swiglu %g", c->swiglu_limit);      /* swiglu_limit 10.0 */
  ck_assert_msg(c->eps == 1e-20f, "rms_norm_eps %g", c->eps);                 /* rms_norm_eps 1e-20 (V4.1) */
  ck_assert_msg(c->hc_eps == 1e-6f, "hc_eps %g", c->hc_eps);                  /* hc_eps 1e-6 */
  ck_assert_uint_eq(c->sinkhorn_iters, 20);                                   /* hc_sinkhorn_iters 20 */
  ck_assert_msg(c->post_mult == 2.0f, "post_mult %g", c->post_mult);          /* mono.md §1.1 POST_MULT 2.0 */
  ck_assert_uint_eq(c->window, 128);        /* sliding_window 128; mono.md §1.1 SWA_WIDTH 128 */
  ck_assert_uint_eq(c->index_topk, 512);    /* indexer topk 512 */
  ck_assert_uint_eq(c->index_heads, 32);    /* index_n_heads 32 */
  ck_assert_uint_eq(c->index_head_dim, 128); /* index_head_dim 128 */
  ck_assert_uint_eq(c->candidate_topk_blocks, 2048); /* candidate_topk_blocks 2048 */
  ck_assert_uint_eq(c->candidate_block_size, 8);     /* candidate_block_size 8 */
  ck_assert_msg(c->rope_theta == 10000.0f, "rope_theta %g", c->rope_theta);   /* rope_theta 10000 */
  ck_assert_msg(c->compress_rope_theta == 160000.0f, "%g", c->compress_rope_theta); /* compress_rope_theta */
  ck_assert_msg(c->yarn_factor == 16.0f, "yarn factor %g", c->yarn_factor);    /* rope_scaling: yarn, factor 16 */
  ck_assert_uint_eq(c->yarn_orig, 65536);                                      /* original 65536 */
  ck_assert_msg(c->yarn_beta_fast == 32.0f && c->yarn_beta_slow == 1.0f, "beta %g/%g", c->yarn_beta_fast,
                c->yarn_beta_slow);                                            /* beta_fast 32, beta_slow 1 */
  ck_assert_uint_eq(c->engram_heads, 8);    /* engram_n_heads 8 */
  ck_assert_uint_eq(c->engram_ngram, 3);    /* engram_max_ngram_size 4: n-grams of 2..4 (model.md §8) */
  ck_assert_uint_eq(c->engram_heads * c->engram_ngram, 24); /* model.md §8: 24 row ids a token */
  /* routing: mono.md §1.1 TARGET_ROUTING (384, 6) / DRAFT_ROUTING (128, 3); top-k (6 / 3) at any size */
  ck_assert_uint_eq(c->topk, draft ? 3 : 6);
  /* mono.md §1.1 ug_groups 2 (target); DRAFT_UG_GROUPS is absent from the sources, "presumably 1" */
  ck_assert_uint_eq(c->ug_groups, draft ? 1 : 2);
}

START_TEST(spec_v41_constants) {
  for (int l = 0; l < 43; l++) {
    hm_layer_config c = v41(l);
    ck_assert_str_eq(c.model, "v41-flash");
    expect_v41_scalars(&c);
    ck_assert_uint_eq(c.hidden, 5120);        /* hidden_size 5120 */
    ck_assert_uint_eq(c.q_lora, 1280);        /* q_lora_rank 1280 */
    ck_assert_uint_eq(c.o_lora, 1024);        /* o_lora_rank 1024 */
    ck_assert_uint_eq(c.experts, hm_config_is_draft(&c) ? 128 : 384); /* 384 routed; dspark 128 */
    ck_assert_uint_eq(c.moe_inter, 2304);     /* moe_intermediate_size 2304 */
    ck_assert_uint_eq(c.shared_inter, 2304);  /* 1 shared expert, same intermediate (mono.md §1.2) */
    ck_assert_uint_eq(c.engram_head_dim, 256); /* engram_head_dim 256 */
    ck_assert_int_eq(hm_config_check(&c), HM_OK);
  }
  /* the per-rank task counts of mono.md §1.2 and §1.1, from the per-rank widths */
  hm_layer_config c = v41(3);
  ck_assert_uint_eq((c.q_lora + c.kv_dim) / 16, 112); /* WQKV_TASKS 112 (x 2 K halves = 224 units) */
  ck_assert_uint_eq(c.hidden / 32, 160);               /* SLICES 160; RED_TASKS 160 */
  ck_assert_uint_eq(c.hidden / 16, 320);               /* DOWN_TASKS 320 */
  ck_assert_uint_eq(c.hidden / 32 / 8, 20);            /* the gate: "20 groups of 8" slices (§2.1 K1.2) */
  ck_assert_uint_eq(c.experts / 16 * 4, 96);           /* router: groups x 96 tasks (§3.1) */
  const uint32_t tps[2] = {2, 4}, wq_b[2] = {1024, 512}, wo_a[2] = {128, 64}, shared[2] = {72, 36};
  const uint32_t ug_parts[2] = {18, 9};
  for (int i = 0; i < 2; i++) {
    hm_rank_dims d;
    ck_assert_int_eq(hm_rank_dims_for(&c, tps[i], &d), HM_OK);
    ck_assert_uint_eq(d.q_rows / 16, wq_b[i]);             /* wq_b tasks 1024 / 512 */
    ck_assert_uint_eq(d.q_rows / 16 / 256, wq_b[i] / 256); /* (4 / 2 a CTA) */
    ck_assert_uint_eq(d.o_rows / 32, wo_a[i]);             /* wo_a tasks (32 rows) 128 / 64 */
    ck_assert_uint_eq(d.shared_inter / 16, shared[i]);     /* shared tasks (16 rows) 72 / 36 */
    ck_assert_uint_eq(d.inter / (32 * c.ug_groups), ug_parts[i]); /* ug parts (ug_groups 2) 18 / 9 */
  }
}
END_TEST

/* The tiny configs are small in hidden, q latent, o latent, intermediates and expert count only
 * (hm_config.h); everything the spec fixes beyond those is the model's. */
START_TEST(spec_tiny_constants) {
  for (int l = 0; l < 43; l++) {
    hm_layer_config c;
    ck_assert_int_eq(hm_config_tiny(l, &c), HM_OK);
    expect_v41_scalars(&c);
  }
}
END_TEST

/* RoPE as the built table has it (model.md §2 "RoPE"): f_i = theta^(-2i/64) in f32, theta 10000
 * and no YaRN on ratio-0 layers; on ratio > 0 layers theta 160000 and YaRN with factor 16 over the
 * ramp [low, high] = [15, 25] ("For theta=160000: low=15, high=25 (derived)"), no mscale. Row p of
 * the table is cos(p f_i) (i < 32) then sin(p f_i); at p = 1 the angle is f_i itself, recovered by
 * atan2. Tolerance: the table's f32 powf, mixing, cosf and sinf are each within a few ulps
 * (2^-23 ~ 1.2e-7 relative) and atan2 gives the angle back to about that, so 1e-5 relative is
 * ample; the smallest difference the check draws is 9 % (theta 160000 against 10000 at i = 1:
 * 16^(2/64)) and a factor 16 (YaRN). */
static void expect_rope(int32_t layer, double theta, bool yarn) {
  hm_layer_config c = v41(layer);
  float t[2 * 64];
  ck_assert_int_eq(hm_rope_table(&c, 2, t), HM_OK);
  for (int i = 0; i < 32; i++) {
    double f = pow(theta, -2.0 * i / 64.0);
    if (yarn) {
      double ramp = (i - 15.0) / (25.0 - 15.0);
      ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
      f = f * ramp / 16.0 + f * (1.0 - ramp);
    }
    double got = atan2((double)t[64 + 32 + i], (double)t[64 + i]);
    ck_assert_msg(fabs(got - f) <= 1e-5 * f, "layer %d pair %d: frequency %.9g, the spec's %.9g", layer, i, got, f);
    ck_assert_msg(t[i] == 1.0f && t[32 + i] == 0.0f, "position 0 is the identity rotation");
  }
}

START_TEST(spec_rope) {
  expect_rope(0, 10000.0, false);  /* ratio 0 */
  expect_rope(3, 160000.0, true);  /* ratio 2 */
  expect_rope(21, 160000.0, true); /* ratio 1 */
  expect_rope(41, 10000.0, false); /* a draft layer: ratio 0 */
}
END_TEST

/* The checkpoint tensors' shapes and dtypes: the dims above as the weights carry them, and the
 * quantisation blocks (model.md §1.1 quantization_config: fp8 e4m3 with weight_block_size [32, 32]
 * and ue8m0 scales, expert_dtype fp4 with one E8M0 per 32 along K; §1.3 the tensors; §7.2 the
 * V4.1 compressor and indexer; §8 Engram; mono.md §4.1-4.2). */
typedef struct schema {
  hm_ckpt_entry *list;
  uint32_t n;
  char prefix[32];
} schema;

static schema schema_of(int32_t layer) {
  schema s;
  hm_layer_config c = v41(layer);
  ck_assert_int_eq(hm_ckpt_schema(&c, &s.list, &s.n), HM_OK);
  hm_config_prefix(&c, s.prefix, sizeof s.prefix);
  return s;
}

static const hm_ckpt_entry *entry(const schema *s, const char *suffix) {
  char name[HM_TENSOR_NAME];
  snprintf(name, sizeof name, "%s%s", s->prefix, suffix);
  for (uint32_t i = 0; i < s->n; i++)
    if (!strcmp(s->list[i].name, name)) return &s->list[i];
  return NULL;
}

static void expect_tensor(const schema *s, const char *suffix, hm_dtype dt, uint64_t d0, uint64_t d1) {
  const hm_ckpt_entry *e = entry(s, suffix);
  ck_assert_msg(e != NULL, "%s%s: not in the schema", s->prefix, suffix);
  ck_assert_msg(e->dtype == dt && e->shape[0] == d0 && e->shape[1] == (d1 ? d1 : 0) && e->ndim == (d1 ? 2u : 1u),
                "%s: dtype %d [%llu, %llu], the spec's %d [%llu, %llu]", e->name, e->dtype,
                (unsigned long long)e->shape[0], (unsigned long long)e->shape[1], dt, (unsigned long long)d0,
                (unsigned long long)d1);
}

/* a dense MXFP8 linear [n, k]: e4m3 with one E8M0 a 32 x 32 block */
static void expect_mx8(const schema *s, const char *base, uint64_t n, uint64_t k) {
  char w[HM_TENSOR_NAME], sc[HM_TENSOR_NAME];
  snprintf(w, sizeof w, "%s.weight", base);
  snprintf(sc, sizeof sc, "%s.scale", base);
  expect_tensor(s, w, HM_DT_E4M3, n, k);
  expect_tensor(s, sc, HM_DT_E8M0, n / 32, k / 32);
}

/* a routed expert's MXFP4 matrix [n, k]: packed e2m1 (two a byte, "I8") with one E8M0 per 1 x 32 */
static void expect_mx4(const schema *s, const char *base, uint64_t n, uint64_t k) {
  char w[HM_TENSOR_NAME], sc[HM_TENSOR_NAME];
  snprintf(w, sizeof w, "%s.weight", base);
  snprintf(sc, sizeof sc, "%s.scale", base);
  expect_tensor(s, w, HM_DT_I8, n, k / 2);
  expect_tensor(s, sc, HM_DT_E8M0, n, k / 32);
}

START_TEST(spec_checkpoint_shapes) {
  const uint64_t D = 5120, Q = 1280, H = 64, G = 8, E = 384, I = 2304;
  /* layer 3: a REUSE layer, no compressor, indexer or Engram */
  schema s = schema_of(3);
  expect_tensor(&s, "hc_attn_fn", HM_DT_F32, 24, 4 * D); /* hc_*_fn F32 [24, 4D] */
  expect_tensor(&s, "hc_attn_scale", HM_DT_F32, 3, 0);   /* hc_*_scale F32 [3] */
  expect_tensor(&s, "hc_attn_base", HM_DT_F32, 24, 0);   /* hc_*_base F32 [24] */
  expect_tensor(&s, "hc_ffn_fn", HM_DT_F32, 24, 4 * D);
  expect_tensor(&s, "hc_ffn_scale", HM_DT_F32, 3, 0);
  expect_tensor(&s, "hc_ffn_base", HM_DT_F32, 24, 0);
  expect_tensor(&s, "attn_norm.weight", HM_DT_BF16, D, 0);
  expect_tensor(&s, "ffn_norm.weight", HM_DT_BF16, D, 0);
  expect_mx8(&s, "attn.wq_a", Q, D);                     /* wq_a [q_lora, D] */
  expect_mx8(&s, "attn.wkv", 512, D);                    /* wkv [512, D] */
  expect_tensor(&s, "attn.q_norm.weight", HM_DT_BF16, Q, 0);
  expect_tensor(&s, "attn.kv_norm.weight", HM_DT_BF16, 512, 0);
  expect_mx8(&s, "attn.wq_b", H * 512, Q);               /* wq_b [H*512, q_lora] */
  expect_mx8(&s, "attn.wo_a", G * 1024, H * 512 / G);    /* wo_a [G*1024, H*512/G] */
  expect_mx8(&s, "attn.wo_b", D, G * 1024);              /* wo_b [D, G*1024] */
  expect_tensor(&s, "attn.attn_sink", HM_DT_F32, H, 0);  /* attn_sink F32 [H] */
  expect_tensor(&s, "ffn.gate.weight", HM_DT_BF16, E, D); /* gate BF16 [E, D] */
  expect_tensor(&s, "ffn.gate.bias", HM_DT_F32, E, 0);    /* e_score_correction_bias F32 [E] */
  ck_assert_ptr_null(entry(&s, "ffn.gate.tid2eid"));      /* num_hash_layers: none in V4.1 */
  expect_mx4(&s, "ffn.experts.0.w1", I, D);              /* w1/w3 [inter, D/2] + [inter, D/32] */
  expect_mx4(&s, "ffn.experts.383.w3", I, D);
  expect_mx4(&s, "ffn.experts.200.w2", D, I);            /* w2 [D, inter/2] + [D, inter/32] */
  ck_assert_ptr_null(entry(&s, "ffn.experts.384.w1.weight"));
  expect_mx8(&s, "ffn.shared_experts.w1", I, D);         /* shared [inter, D], FP8 */
  expect_mx8(&s, "ffn.shared_experts.w3", I, D);
  expect_mx8(&s, "ffn.shared_experts.w2", D, I);
  ck_assert_ptr_null(entry(&s, "attn.compressor.wkv.weight"));
  ck_assert_ptr_null(entry(&s, "attn.indexer.wq_b.weight"));
  free(s.list);
  /* layer 2: a kv and index source of ratio 2 (model.md §1.3 "V4.1 extras", §7.2): compressor
   * wkv and wgate bf16 [512, D], no ape; the indexer's wk [128, 512] and k_norm [128] (kv
   * sources only), wq_b [32*128, q_lora], weights_proj [32, D] */
  s = schema_of(2);
  expect_tensor(&s, "attn.compressor.wkv.weight", HM_DT_BF16, 512, D);
  expect_tensor(&s, "attn.compressor.wgate.weight", HM_DT_BF16, 512, D);
  expect_tensor(&s, "attn.compressor.norm.weight", HM_DT_BF16, 512, 0);
  ck_assert_ptr_null(entry(&s, "attn.compressor.ape"));
  expect_tensor(&s, "attn.indexer.wk.weight", HM_DT_BF16, 128, 512);
  expect_tensor(&s, "attn.indexer.k_norm.weight", HM_DT_BF16, 128, 0);
  expect_mx8(&s, "attn.indexer.wq_b", 32 * 128, Q);
  expect_tensor(&s, "attn.indexer.weights_proj.weight", HM_DT_BF16, 32, D);
  free(s.list);
  /* layer 20: ratio 1, "only wkv (bf16) and no wgate" */
  s = schema_of(20);
  expect_tensor(&s, "attn.compressor.wkv.weight", HM_DT_BF16, 512, D);
  ck_assert_ptr_null(entry(&s, "attn.compressor.wgate.weight"));
  free(s.list);
  /* layer 24: an index source without a compressor (no wk: keys only from kv sources) */
  s = schema_of(24);
  expect_mx8(&s, "attn.indexer.wq_b", 32 * 128, Q);
  ck_assert_ptr_null(entry(&s, "attn.compressor.wkv.weight"));
  ck_assert_ptr_null(entry(&s, "attn.indexer.wk.weight"));
  free(s.list);
  /* Engram (model.md §1.1 engram_num_embeddings [384006168, 384016682], head_dim 256; §1.3 embed
   * F8 [rows, 256] + E8M0 [rows, 8], wkv FP8 [D*(hc+1), 24*256], q_weight / k_weight [hc, D]) */
  const int32_t eng[2] = {1, 14};
  const uint64_t rows[2] = {384006168ull, 384016682ull};
  for (int i = 0; i < 2; i++) {
    s = schema_of(eng[i]);
    expect_tensor(&s, "engram.embed.weight", HM_DT_E4M3, rows[i], 256);
    expect_tensor(&s, "engram.embed.scale", HM_DT_E8M0, rows[i], 8);
    expect_mx8(&s, "engram.wkv", D * 5, 24 * 256);
    expect_tensor(&s, "engram.q_weight", HM_DT_BF16, 4, D);
    expect_tensor(&s, "engram.k_weight", HM_DT_BF16, 4, D);
    free(s.list);
  }
  /* a draft layer: the draft MoE's 128 experts (model.md §1.1 "draft MoE 128 experts top-3") */
  s = schema_of(41);
  expect_tensor(&s, "ffn.gate.weight", HM_DT_BF16, 128, D);
  expect_mx4(&s, "ffn.experts.127.w2", D, I);
  ck_assert_ptr_null(entry(&s, "ffn.experts.128.w2.weight"));
  free(s.list);
}
END_TEST

/* Constants the kernels and the reference hold as named macros rather than in the config. */
START_TEST(spec_kernel_constants) {
  /* hm_config.h (mono.md §1.1-1.2) */
  ck_assert_int_eq(HM_HC, 4);                 /* hc_mult */
  ck_assert_int_eq(HM_MIX, (2 + 4) * 4);      /* MIX 24: (2 + n) n, model.md §4 */
  ck_assert_int_eq(HM_HEAD_DIM, 512);
  ck_assert_int_eq(HM_NOPE_DIM, 448);
  ck_assert_int_eq(HM_ROPE_DIM, 64);
  ck_assert_int_eq(HM_HEADS_PER_GROUP, 8);    /* o_groups: 8 heads a group, K = 4096 */
  ck_assert_int_eq(HM_RECORD, 584);           /* RECORD 584 = 576 data + 8 scale */
  ck_assert_int_eq(HM_RECORD_DATA, 448 + 64 * 2); /* 448 e4m3 nope + 64 bf16 rope (§4.5) */
  ck_assert_int_eq(HM_WINDOW, 128);           /* SWA_WIDTH / WINDOW */
  ck_assert_int_eq(HM_TOPK_ATTN, 512);        /* TOPK (attention) */
  ck_assert_int_eq(HM_KEYS, 640);             /* KEYS = 512 + 128 */
  ck_assert_int_eq(HM_MAX_ROWS, 48);          /* MAX_TOKENS: 8 requests x (1 + 5 DSpark drafts) */
  ck_assert_int_eq(HM_MAX_ROWS_GFX942, 42);   /* MAX_ROWS_GFX942 (7 x 6) */
  ck_assert_int_eq(HM_LAYER_MAX_TP, 4);       /* §5.1.3: TP 2 or 4 */
  ck_assert_int_eq(HM_MAX_LAYERS, 40 + 3);    /* 40 backbone layers + 3 DSpark layers (ids 40-42) */
  /* the kernels' argument headers (mono.md §1.1) */
  ck_assert_uint_eq(SEAM_MAX_ROWS, 48);
  ck_assert_uint_eq(SEAM_MIX, 24);            /* MIX 24 */
  ck_assert_uint_eq(SEAM_PMIX, 25);           /* PART 25: 24 mix partials + the sum of squares */
  ck_assert_uint_eq(SEAM_CTA, 512);           /* THREADS 512 = 8 wave64 waves */
  ck_assert_uint_eq(K1_MAX_ROWS, 48);
  ck_assert_uint_eq(K1_TILE, 16);             /* TILE 16 (gfx950) */
  ck_assert_uint_eq(K1_CTA, 512);
  ck_assert_uint_eq(K1_HEAD, 512);
  ck_assert_uint_eq(K1_NOPE, 448);
  ck_assert_uint_eq(K1_RECORD_DATA, 576);
  ck_assert_uint_eq(K1_RECORD, 584);
  ck_assert_uint_eq(K1_WINDOW, 128);
  ck_assert_uint_eq(K1_TOPK, 512);
  ck_assert_uint_eq(K1_KEYS, 640);
  ck_assert_uint_eq(K2_HEAD, 512);
  ck_assert_uint_eq(K2_NOPE, 448);
  ck_assert_uint_eq(K2_RECORD_DATA, 576);
  ck_assert_uint_eq(K2_KEYS, 640);
  ck_assert_uint_eq(K2_GROUP_HEADS, 8);       /* each o group = 8 heads */
  ck_assert_uint_eq(K2_GROUP_K, 4096);        /* wo_a K = 4096 */
  ck_assert_uint_eq(K2_MAX_HEADS, 64 / 2);    /* heads a rank at TP 2 (§1.2: 32) */
  ck_assert_uint_eq(K2_MAX_CK, 128);          /* chunk keys 64 or 128 (§1.2) */
  ck_assert_uint_eq(FFN_TILE, 16);
  ck_assert_uint_eq(FFN_MAX_ROWS, 48);
  ck_assert_uint_eq(FFN_MAX_E, 384);          /* TARGET_ROUTING (384, 6) */
  ck_assert_uint_ge(FFN_MAX_TOPK, 6);         /* a kernel limit, not a model value: top-6 must fit */
  ck_assert_uint_eq(FFN_CTA, 512);
  ck_assert_uint_eq(AR_SLOT_BYTES, 8);        /* §3.3 / §3.7: one 8-byte store of (value, tag) */
  /* epoch buffer: counters of 256 slots each, slot = e & 255 (§3.4). (The marks' offset and the
   * buffer's size are the project's own, up to 1024 CTAs: docs/decisions.md "All-reduce".) */
  ck_assert_uint_eq(DEV_EPOCH_ARRIVALS - DEV_EPOCH_QUEUES, 256);
  ck_assert_uint_eq(DEV_EPOCH_WORDS - DEV_EPOCH_ARRIVALS, 256);
  /* number formats (model.md §2, mono.md §2.0): OCP e4m3 max 448, e2m1 max 6 */
  ck_assert(FMT_E4M3_MAX == 448.0f);
  ck_assert(FMT_E2M1_MAX == 6.0f);
  /* the MX rules' constants (mono.md §2.0): V floors amax at FLT_MIN, A at 1e-10 and multiplies by
   * RN(1/448), R floors at 1e-4 */
  ck_assert_uint_eq(FMT_BITS_FLT_MIN, fmt_bits(FLT_MIN));
  ck_assert_uint_eq(FMT_BITS_1E_10, fmt_bits(1e-10f));
  ck_assert_uint_eq(FMT_BITS_1E_4, fmt_bits(1e-4f));
  ck_assert_uint_eq(FMT_BITS_RCP448, fmt_bits((float)(1.0 / 448.0)));
  /* ... and their effect on an all-zero group, by hand from §2.0: V: ceilexp(RN(2^-126 / 448)), a
   * subnormal, = 1 (clamp [0, 254]); A: ceilexp(RN(1e-10 * RN(1/448))) ~ ceilexp(2.23e-13) = 85;
   * R: ceilexp(RN(1e-4 / 448)) ~ ceilexp(2.23e-7) = 105 (no clamp) */
  ck_assert_uint_eq(fmt_mx_code_v(0.0f), 1);
  ck_assert_uint_eq(fmt_mx_code_a(0.0f), 85);
  ck_assert_uint_eq(fmt_mx_code_r(0.0f), 105);
  ck_assert_uint_eq(fmt_mx_code_v(448.0f), 127); /* amax 448: scale 2^0 */
  /* f32(log2 e) and f32(ln 2) of the sigmoid, softplus and exp2 sites (mono.md §2.1 K1.2, §2.4) */
  ck_assert_uint_eq(fmt_bits(HM_LOG2E), 0x3fb8aa3bu);
  ck_assert_uint_eq(fmt_bits(HM_LOG2E), fmt_bits((float)1.4426950408889634));
  ck_assert_uint_eq(fmt_bits(HM_LN2), fmt_bits((float)0.6931471805599453));
  /* sqrt-softplus passes x > 20 through (mono.md §2.4): sqrt(25) = 5 exactly */
  ck_assert(hm_ref_sqrtsoftplus(25.0f) == 5.0f);
}
END_TEST

/* A refusal names its cause: a NULL object is said to be NULL (not "rows 4" or "width 4 has not
 * run"), a layer past the schedule names the config asked for (issue 16, finding 8). */
START_TEST(refusals_name_the_cause) {
  static const struct {
    const char *call, *want, *not;
  } want[] = {{"hm_ffn_prepare(NULL, 4)", "NULL launch", "rows 4"},
              {"hm_ffn_step_bytes(NULL, 4)", "NULL launch", "has not run"},
              {"hm_k1_prepare(NULL, 4)", "NULL launch", "rows 4"},
              {"hm_chain_replay(NULL)", "NULL chain", "empty"},
              {"hm_config_tiny(99)", "tiny has layers 0..42", "V4.1-Flash"},
              {"hm_config_v41_flash(-1)", "V4.1-Flash has layers 0..42", "tiny"},
              {"hm_gen_step_make(NULL config)", "NULL config", "rows"}};
  uint64_t bytes;
  hm_layer_config c;
  hm_gen_step g;
  for (unsigned i = 0; i < sizeof want / sizeof *want; i++) {
    hm_status st = i == 0   ? hm_ffn_prepare(NULL, 4)
                   : i == 1 ? hm_ffn_step_bytes(NULL, 4, &bytes, NULL)
                   : i == 2 ? hm_k1_prepare(NULL, 4)
                   : i == 3 ? hm_chain_replay(NULL)
                   : i == 4 ? hm_config_tiny(99, &c)
                   : i == 5 ? hm_config_v41_flash(-1, &c)
                            : hm_gen_step_make(NULL, 4, 1, 300, 1, &g);
    ck_assert_int_eq(st, HM_ERR_INVALID_ARG);
    ck_assert_msg(strstr(hm_errmsg(), want[i].want) && !strstr(hm_errmsg(), want[i].not), "%s: \"%s\"", want[i].call,
                  hm_errmsg());
  }
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, schedule);
  tcase_add_test(tc, refusals_name_the_cause);
  tcase_add_test(tc, dims_v41);
  tcase_add_test(tc, dims_tiny);
  tcase_add_test(tc, checks);
  tcase_add_test(tc, spec_layer_schedule);
  tcase_add_test(tc, spec_layer_paths);
  tcase_add_test(tc, spec_v41_constants);
  tcase_add_test(tc, spec_tiny_constants);
  tcase_add_test(tc, spec_rope);
  tcase_add_test(tc, spec_checkpoint_shapes);
  tcase_add_test(tc, spec_kernel_constants);
  suite_add_tcase(s, tc);
  return s;
}
