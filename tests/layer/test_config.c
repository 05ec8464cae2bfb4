/* tests/layer/test_config.c: the V4.1-Flash schedule and dims as data (spec/mono.md §1.2-1.3),
 * the tiny configs' structure, per-rank widths at TP 1/2/4, and refused configs. */
#include <check.h>
#include <string.h>

#include "hm_config.h"

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

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, schedule);
  tcase_add_test(tc, dims_v41);
  tcase_add_test(tc, dims_tiny);
  tcase_add_test(tc, checks);
  suite_add_tcase(s, tc);
  return s;
}
