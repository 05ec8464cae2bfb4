/* tests/layer/test_k1_942.c: K1 on gfx942 (issue 13) on the software agent at TP4 against the reference's
 * gfx942 mode: rows 1, 6, 7, 42, every layer kind, keylist, and the gfx942 refusals (§5.1.3, §5.3.1, §4.4). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"
#include "hm_k1_group.h"
#include "kernels/k1_args.h"

/* 8-CTA parts on the software agent (tests/layer/meson.build), so every stage's placement wraps. */
static const hm_k1_config small_grid = {.min_cus = 1};

/* The software agent as an MI300X (every case sets it: CK_RUN_CASE runs one alone). */
static hm_runtime *open_gfx942(void) {
  setenv("HSAMONO_SIM_ARCH", "gfx942", 1);
  return tl_open_sim();
}

/* ---------------------------------------------------------------- a case */

typedef struct shape {
  uint32_t S, reqs, ctx, block;
  int32_t dead_row; /* a row given slot -1 (a padding token), or -1 for none */
  uint32_t cases;   /* the generator's hard cases (HM_GEN_*), each asserted to occur */
} shape;

typedef struct k1_case {
  hm_layer_config cfg;
  uint32_t S, H, Q;
  bool index;
  hm_gen_step step;   /* what the device gets (its cache as before the step) */
  hm_gen_step before; /* an untouched copy of the cache, to see what K1 wrote */
  hm_gen_step refs;   /* the reference's copy (its cache after the reference's step) */
  hm_tensor_set ref;
  hm_k1_outputs o[4];
} k1_case;

static void outputs_alloc(const k1_case *c, hm_k1_outputs *o) {
  const uint32_t S = c->S, D = c->cfg.hidden;
  o->res = calloc((size_t)S * 4 * D, 4), o->post = calloc(S * 4, 4), o->comb = calloc(S * 16, 4);
  o->pre = calloc(S * 4, 4), o->q = calloc((size_t)S * c->H * 512, 4);
  o->kt = calloc((size_t)S * K1_KEYS, 4), o->klen = calloc(2 * S, 4);
  o->x_out = calloc((size_t)S * D, 4), o->qr_out = calloc((size_t)S * c->Q, 4);
  o->swa = calloc(1, c->step.swa_bytes);
}
static void outputs_free(hm_k1_outputs *o) {
  free(o->res), free(o->post), free(o->comb), free(o->pre), free(o->q), free(o->kt), free(o->klen);
  free(o->x_out), free(o->qr_out), free(o->swa);
}

/* The step of `seed` with its SWA cache in gfx942's encoding (FNUZ records, §2.6), and the oracle:
 * the reference's gfx942 mode (the weights are gfx942 copies, so hm_ref_k1 computes as §2.6 says). */
static void case_make(k1_case *c, const hm_layer_weights *w, const shape *sh, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->cfg = w[0].cfg, c->S = sh->S, c->H = w[0].dims.heads, c->Q = c->cfg.q_lora;
  c->index = hm_config_has(&c->cfg, HM_ROLE_INDEX_SOURCE);
  hm_gen_opts go = {.S = sh->S, .reqs = sh->reqs, .ctx = sh->ctx, .block = sh->block, .seed = seed, .cases = sh->cases};
  hm_status st = hm_gen_step_make_opts(&c->cfg, &go, &c->step);
  ck_assert_msg(st == HM_OK, "step: %s", hm_errmsg());
  tl_expect_cases(&c->step, &c->cfg, sh->cases);
  hm_ref_kv_cache_to_fnuz(&c->step.in.swa);
  if (sh->dead_row >= 0) c->step.slot[sh->dead_row] = -1;
  ck_assert_int_eq(hm_gen_step_copy(&c->step, &c->before), HM_OK);
  ck_assert_int_eq(hm_gen_step_copy(&c->step, &c->refs), HM_OK);
  hm_tset_init(&c->ref);
  hm_ref_k1_in in = {sh->S, c->refs.x, c->refs.res, c->refs.post, c->refs.comb, c->refs.pre, &c->refs.in};
  st = hm_ref_k1(w, 4, &in, c->index, &c->ref);
  ck_assert_msg(st == HM_OK, "reference: %s", hm_errmsg());
  for (uint32_t r = 0; r < 4; r++) outputs_alloc(c, &c->o[r]);
}

static void case_free(k1_case *c) {
  for (uint32_t r = 0; r < 4; r++) outputs_free(&c->o[r]);
  hm_tset_free(&c->ref);
  hm_gen_step_free(&c->step), hm_gen_step_free(&c->before), hm_gen_step_free(&c->refs);
}

/* ---------------------------------------------------------------- comparisons */

/* The seam is the same code on both architectures (device/seam.h), in the reference's order with the
 * same libm calls: bit-identical. */
static void expect_seam_exact(const k1_case *c, const hm_k1_outputs *o) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  ck_assert_uint_eq(tl_count_diff(o->res, tl_f32(&c->ref, "k1.seam.res"), S * 4 * D), 0);
  ck_assert_uint_eq(tl_count_diff(o->post, tl_f32(&c->ref, "k1.seam.post"), S * 4), 0);
  ck_assert_uint_eq(tl_count_diff(o->comb, tl_f32(&c->ref, "k1.seam.comb"), S * 16), 0);
  ck_assert_uint_eq(tl_count_diff(o->pre, tl_f32(&c->ref, "k1.seam.pre"), S * 4), 0);
  if (c->index) ck_assert_uint_eq(tl_count_diff(o->x_out, tl_f32(&c->ref, "k1.seam.normed"), S * D), 0);
}

static void expect_keys_exact(const k1_case *c, const hm_k1_outputs *o) {
  ck_assert_mem_eq(o->kt, tl_i32(&c->ref, "k1.kt"), (size_t)c->S * K1_KEYS * 4);
  ck_assert_mem_eq(o->klen, tl_i32(&c->ref, "k1.klen"), (size_t)c->S * 2 * 4);
}

/* A GEMV output against the reference's gfx942 mode. Only the agent's matrix instruction differs from
 * the reference's model of it: v_mfma_f32_16x16x32_fp8_fp8 sums a 32-wide block's products exactly
 * and rounds once, the reference adds them one by one in f32 (each block then scaled by fma in both).
 * 32 products of two FNUZ e4m3 values (4 significant bits each) mostly sum exactly in f32 either way,
 * so a GEMV result differs rarely and by an f32 ulp, which now and then flips the bf16 rounding that
 * follows (2^-8 relative in one element). Budget as test_k1.c's expect_gemv_close (the gfx950 launch
 * against its reference): relative L2 under 1e-3, cosine above 0.99999, at most 5 % of the elements
 * not bit-identical (measured here: see the log line). A wrong code factor (a power of two on a block)
 * or a wrong K order moves every element of a row and is far past it. */
static void expect_gemv_close(const char *what, uint32_t S, const float *x, const float *ref, uint64_t n) {
  double rel = tl_rel_l2(x, ref, n), cos = tl_cosine(x, ref, n);
  uint64_t diff = tl_count_diff(x, ref, n);
  fprintf(stderr, "gfx942 K1 %u rows: %s vs reference: rel L2 %.3g, cosine %.8f, %llu of %llu differ\n", S, what, rel,
          cos, (unsigned long long)diff, (unsigned long long)n);
  ck_assert_msg(rel < 1e-3 && cos > 0.99999 && diff <= n / 20,
                "%s vs reference: rel L2 %.3g, cosine %.8f, %llu of %llu differ", what, rel, cos,
                (unsigned long long)diff, (unsigned long long)n);
}

/* Stage by stage from rank 0's mailboxes, as test_k1.c's expect_stages with gfx942's encodings: X8
 * exactly the reference's FNUZ bytes and codes; the kernel's wqkv sums (QKVP) against the
 * reference's GEMV; every later stage recomputed by the reference's gfx942 mode from the kernel's own
 * sums must equal the kernel's bit for bit: QX8 (rule V against 224, FNUZ, codes + 1), the kv norm,
 * RoPE and the FNUZ record at the token's slot, the index build's qr_out; outside the step's slots the
 * cache untouched. Then q of every rank against the reference's wq_b on the kernel's own QX8. */
static void expect_stages(hm_runtime *rt, hm_k1_group *g, k1_case *c, const hm_layer_weights *w) {
  const uint32_t S = c->S, D = c->cfg.hidden, Q = c->Q, N = Q + 512;
  hm_k1 *k = hm_k1_group_rank(g, 0);
  struct hm_k1_scratch_layout L;
  const uint8_t *dev = hm_k1_scratch(k, S, &L);
  ck_assert_ptr_nonnull(dev);
  uint8_t *scr = tl_fetch(rt, hm_k1_group_agent(g, 0), dev, L.bytes);
  ck_assert_mem_eq(scr + L.x8, tl_u8(&c->ref, "k1.x8"), (size_t)S * D);
  ck_assert_mem_eq(scr + L.x8s, tl_u8(&c->ref, "k1.x8_s"), (size_t)S * D / 32);
  const uint64_t *qkvp = (const uint64_t *)(scr + L.qkvp);
  float *qkv = malloc((size_t)S * N * 4), *qn = malloc((size_t)S * Q * 4), *kn = malloc((size_t)S * 512 * 4);
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t r = 0; r < N; r++)
      qkv[(size_t)t * N + r] = fmt_round_bf16(fmt_float((uint32_t)qkvp[(size_t)t * N + r]) +
                                              fmt_float((uint32_t)qkvp[((size_t)S + t) * N + r]));
  expect_gemv_close("qkv", S, qkv, tl_f32(&c->ref, "k1.qkv"), (uint64_t)S * N);
  const hm_tensor *qw = hm_weights_get(&w[0], "q_norm"), *kw = hm_weights_get(&w[0], "kv_norm");
  const hm_tensor *cs = hm_weights_get(&w[0], "cos_sin");
  hm_ref_q_norm(S, Q, qkv, qw->data, c->cfg.eps, qn);
  uint8_t *qx8 = malloc((size_t)S * Q), *qx8s = malloc((size_t)S * Q / 32);
  hm_ref_act_quant(HM_ARCH_GFX942, false, qn, S, Q, 32, FMT_RULE_V, qx8, qx8s);
  ck_assert_mem_eq(scr + L.qx8, qx8, (size_t)S * Q);
  ck_assert_mem_eq(scr + L.qx8s, qx8s, (size_t)S * Q / 32);
  if (c->index) ck_assert_uint_eq(tl_count_diff(c->o[0].qr_out, qn, (uint64_t)S * Q), 0);
  hm_ref_kv_norm_rope(S, Q, qkv, kw->data, c->cfg.eps, cs->data, c->step.pos, kn);
  uint8_t *want = malloc(c->step.swa_bytes);
  memcpy(want, c->before.swa_buf, c->step.swa_bytes);
  hm_kv_cache wc = c->before.in.swa;
  wc.base = want;
  for (uint32_t t = 0; t < S; t++) {
    uint8_t d[HM_RECORD_DATA], sc[8];
    hm_ref_kv_record_fnuz(kn + (size_t)t * 512, d, sc);
    if (c->step.slot[t] >= 0) ck_assert_int_eq(hm_ref_kv_insert(&wc, c->step.slot[t], d, sc), HM_OK);
  }
  for (uint32_t r = 0; r < 4; r++) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < c->step.swa_bytes; i++) bad += c->o[r].swa[i] != want[i];
    ck_assert_msg(bad == 0, "rank %u: %llu bytes of the SWA cache differ from the FNUZ records of its own kv", r,
                  (unsigned long long)bad);
  }
  for (uint32_t r = 0; r < 4; r++) {
    uint64_t n = (uint64_t)S * c->H * 512;
    float *q = malloc(n * 4);
    ck_assert_int_eq(hm_ref_wq_b(&w[r], S, scr + L.qx8, scr + L.qx8s, c->step.pos, q), HM_OK);
    expect_gemv_close("q (stage)", S, c->o[r].q, q, n);
    char name[32];
    snprintf(name, sizeof name, "rank%u.q", r);
    expect_gemv_close("q (whole)", S, c->o[r].q, tl_f32(&c->ref, name), n);
    free(q);
  }
  free(want), free(qx8), free(qx8s), free(qkv), free(qn), free(kn), free(scr);
}

/* The end-to-end records against the reference's own: the same up to the rare flips of
 * expect_gemv_close that reach a record. Budget as test_k1.c's: at most 2 % of the record bytes. */
static void expect_records_close(const k1_case *c) {
  uint64_t bad = 0, n = 0;
  for (uint32_t t = 0; t < c->S; t++) {
    if (c->step.slot[t] < 0) continue;
    uint64_t d, s;
    ck_assert_int_eq(hm_ref_kv_offsets(&c->step.in.swa, c->step.slot[t], &d, &s), HM_OK);
    for (uint32_t i = 0; i < HM_RECORD_DATA; i++) bad += c->o[0].swa[d + i] != c->refs.swa_buf[d + i];
    for (uint32_t i = 0; i < 8; i++) bad += c->o[0].swa[s + i] != c->refs.swa_buf[s + i];
    n += HM_RECORD;
  }
  ck_assert_msg(bad * 50 <= n, "records: %llu of %llu bytes differ from the reference's", (unsigned long long)bad,
                (unsigned long long)n);
}

static void expect_ranks_identical(const k1_case *c) {
  const size_t S = c->S, D = c->cfg.hidden;
  for (uint32_t r = 1; r < 4; r++) {
    ck_assert_msg(memcmp(c->o[r].res, c->o[0].res, S * 4 * D * 4) == 0, "rank %u's res_mid differs", r);
    ck_assert(memcmp(c->o[r].comb, c->o[0].comb, S * 64) == 0);
    ck_assert(memcmp(c->o[r].swa, c->o[0].swa, c->step.swa_bytes) == 0);
    if (!c->index) ck_assert(memcmp(c->o[r].kt, c->o[0].kt, S * K1_KEYS * 4) == 0);
  }
}

static void run_case(hm_runtime *rt, hm_k1_group *g, const hm_layer_weights *w, const shape *sh, uint64_t seed) {
  k1_case c;
  case_make(&c, w, sh, seed);
  hm_status st = hm_k1_group_step(g, &c.step.in, 1, c.o, NULL);
  ck_assert_msg(st == HM_OK, "layer %d, %u rows: %s", c.cfg.layer, sh->S, hm_errmsg());
  expect_ranks_identical(&c);
  expect_seam_exact(&c, &c.o[0]);
  if (!c.index) expect_keys_exact(&c, &c.o[0]);
  expect_stages(rt, g, &c, w);
  expect_records_close(&c);
  if (c.index && c.cfg.compress_ratio) {
    /* gfx942's index path (§1.3, §3.9): keylist on a top-k made after K1, K1's format exactly */
    for (uint32_t r = 0; r < 4; r++) memset(c.o[r].kt, 0x5a, (size_t)c.S * K1_KEYS * 4);
    st = hm_k1_group_keylist(g, &c.step.in, c.o);
    ck_assert_msg(st == HM_OK, "keylist: %s", hm_errmsg());
    int32_t *kt = malloc((size_t)c.S * K1_KEYS * 4), *klen = malloc((size_t)c.S * 8);
    hm_key_args ka = {c.S, c.cfg.compress_ratio, c.step.pos, c.step.slot, c.step.swa_idx, c.step.swa_len, c.step.t2r,
                      c.step.topk, c.step.bt, c.step.in.bt_stride, c.step.in.comp.block_size};
    ck_assert_int_eq(hm_ref_key_table(&ka, kt, klen), HM_OK);
    for (uint32_t r = 0; r < 4; r++) {
      ck_assert_mem_eq(c.o[r].kt, kt, (size_t)c.S * K1_KEYS * 4);
      ck_assert_mem_eq(c.o[r].klen, klen, (size_t)c.S * 8);
    }
    free(kt), free(klen);
  }
  case_free(&c);
}

/* A TP4 group of gfx942 copies of `layer` on the gfx942 agents, each shape a step. */
static void run_layer(const char *model, int32_t layer, const shape *shapes, uint32_t n, uint64_t seed) {
  hm_layer_config cfg = tl_config(model, layer, 0, 0);
  hm_runtime *rt = open_gfx942();
  hm_layer_weights w[4];
  tl_build_group_arch(&cfg, 4, seed, HM_WPART_ATTN, HM_ARCH_GFX942, w);
  hm_k1_group *g;
  hm_status st = hm_k1_group_create(rt, w, 4, &small_grid, &g);
  ck_assert_msg(st == HM_OK, "group: %s", hm_errmsg());
  for (uint32_t i = 0; i < n; i++) run_case(rt, g, w, &shapes[i], seed + i);
  hm_k1_group_destroy(g);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
}

/* ---------------------------------------------------------------- the tests */

/* A REUSE layer (ratio 2) over gfx942's row counts: one token pass of 6 rows, one row, two passes
 * with a padding row (7), and the cap of 7 passes (42) over three requests. */
START_TEST(tiny_rows) {
  const shape s[] = {{1, 1, 0, 64, -1, 0}, {6, 1, 70, 64, -1, 0}, {7, 1, 129, 64, 3, 0}, {42, 3, 300, 256, 41, 0}};
  run_layer("tiny", 3, s, sizeof s / sizeof *s, 9421);
}
END_TEST

/* Every layer kind on gfx942's schedule (spec/mono.md §1.3): the first layer (0) and an Engram window
 * layer (1), ratio 0; a REUSE layer of ratio 1 (21); the index build with keylist on a KV and index
 * source (2, ratio 2), an Engram one (14) and a REINDEX layer (24, ratio 1). */
START_TEST(tiny_layer_kinds) {
  const shape s7 = {7, 1, 150, 64, 5, 0}, s6 = {6, 2, 40, 256, -1, 0}, s1 = {1, 1, 600, 64, -1, 0};
  run_layer("tiny", 0, &s7, 1, 9430);
  run_layer("tiny", 1, &s1, 1, 9431);
  run_layer("tiny", 21, &s6, 1, 9432);
  run_layer("tiny", 2, &s7, 1, 9433);
  run_layer("tiny", 14, &s1, 1, 9434);
  run_layer("tiny", 24, &s6, 1, 9436);
}
END_TEST

/* The generator's hard cases on gfx942 (the key table is the same code on both; one step of them):
 * padding rows, dead key chunks, ratio-2 groups begun the step before. */
START_TEST(tiny_hard_cases) {
  const shape s = {8, 2, 300, 64, -1, HM_GEN_PAD | HM_GEN_DEAD_CHUNK | HM_GEN_STRADDLE};
  run_layer("tiny", 3, &s, 1, 9440);
}
END_TEST

/* The V4.1-Flash attention dims at TP4 (hidden 5120: wqkv's K halves of 20 steps, q_lora 1280: wq_b's
 * 10 steps, 16 heads a rank). */
START_TEST(full_dims) {
  const shape s = {7, 1, 900, 256, 4, 0};
  run_layer("v41-flash", 5, &s, 1, 9450);
}
END_TEST

/* ---------------------------------------------------------------- refusals */

/* §5.1.3: TP 4 only on gfx942 (a TP2 group: the TP rule is named first, before the weights' arch). */
START_TEST(tp2_refused) {
  hm_runtime *rt = open_gfx942();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[2];
  tl_build_group(&cfg, 2, 11, HM_WPART_ATTN, w);
  hm_k1 *k = NULL;
  tl_expect_status(hm_k1_create(hm_agent_get(rt, 0), &w[0], &small_grid, &k), HM_ERR_REFUSED, "§5.1.3: TP 2 on gfx942");
  ck_assert_ptr_null(k);
  tl_free_group(w, 2);
  hm_runtime_close(rt);
}
END_TEST

/* §4.4: the other architecture's weights, gfx950 layouts on a gfx942 agent and gfx942 copies on gfx950. */
START_TEST(other_arch_weights_refused) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[4];
  hm_k1 *k = NULL;
  hm_runtime *rt = open_gfx942();
  tl_build_group(&cfg, 4, 12, HM_WPART_ATTN, w);
  tl_expect_status(hm_k1_create(hm_agent_get(rt, 0), &w[0], &small_grid, &k), HM_ERR_INVALID_ARG,
                "the weights are gfx950 layouts (spec/mono.md §4.4); this launch reads the gfx942 copies");
  ck_assert_ptr_null(k);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
  setenv("HSAMONO_SIM_ARCH", "gfx950", 1);
  rt = tl_open_sim();
  tl_build_group_arch(&cfg, 4, 12, HM_WPART_ATTN, HM_ARCH_GFX942, w);
  tl_expect_status(hm_k1_create(hm_agent_get(rt, 0), &w[0], &small_grid, &k), HM_ERR_INVALID_ARG,
                "the weights are gfx942 copies (spec/mono.md §4.4); this launch reads the gfx950 layouts");
  ck_assert_ptr_null(k);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
}
END_TEST

/* §5.3.1: 42 rows at most on gfx942 (43 refused naming the rule, the keylist too, and no mailboxes
 * for it); §5.1.6 still applies (8 CUs against the default 256). */
START_TEST(rows_refused) {
  hm_runtime *rt = open_gfx942();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[4];
  tl_build_group_arch(&cfg, 4, 13, HM_WPART_ATTN, HM_ARCH_GFX942, w);
  hm_k1 *k = NULL;
  tl_expect_status(hm_k1_create(hm_agent_get(rt, 0), &w[0], NULL, &k), HM_ERR_REFUSED, "§5.1.6");
  ck_assert_ptr_null(k);
  ck_assert_msg(hm_k1_create(hm_agent_get(rt, 0), &w[0], &small_grid, &k) == HM_OK, "%s", hm_errmsg());
  hm_k1_io io = {.rows = 43};
  tl_expect_status(hm_k1_accepts(k, &io), HM_ERR_REFUSED, "§5.3.1: 43 rows (K1 takes 1..42 on gfx942)");
  tl_expect_status(hm_k1_keylist(k, NULL, &io), HM_ERR_REFUSED, "§5.3.1: 43 rows (K1 takes 1..42 on gfx942)");
  io.rows = 1, io.prefills = 2;
  tl_expect_status(hm_k1_accepts(k, &io), HM_ERR_REFUSED, "§5.3.4");
  ck_assert_int_eq(hm_k1_prepare(k, 43), HM_ERR_INVALID_ARG);
  ck_assert_ptr_null(hm_k1_scratch(k, 43, NULL));
  ck_assert_int_eq(hm_k1_prepare(k, 42), HM_OK);
  ck_assert_ptr_nonnull(hm_k1_scratch(k, 42, NULL));
  hm_k1_destroy(k);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"tp2_refused", tp2_refused},
      {"other_arch_weights_refused", other_arch_weights_refused},
      {"rows_refused", rows_refused},
      {"tiny_rows", tiny_rows},
      {"tiny_layer_kinds", tiny_layer_kinds},
      {"tiny_hard_cases", tiny_hard_cases},
      {"full_dims", full_dims},
  };
  return TL_SUITE("k1_942", tests, 1800);
}
