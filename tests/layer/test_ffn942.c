/* tests/layer/test_ffn942.c: the FFN launch on gfx942 (issue 13) on the software agent at TP4, rows 1, 6,
 * 7, 42 against an oracle, replays, and the refusals (§5.1.3 TP, §5.3.1 rows, the other arch's weights). */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"
#include "hm_ffn_group.h"
#include "kernels/ffn_args.h"
#include "layouts.h"

static const hm_ffn_config small_grid = {.min_cus = 1, .reduced_experts = true};

/* The software agent as an MI300X (every case: CK_RUN_CASE runs one alone). */
static hm_runtime *open_gfx942(void) {
  setenv("HSAMONO_SIM_ARCH", "gfx942", 1);
  return tl_open_sim();
}

/* ---------------------------------------------------------------- the oracle */

/* The fp32 reference's trace of a step of S rows, every rank's weights built for `arch` from the
 * same source as the launch's (the generator at `seed`), a rank at a time. */
static void reference(const hm_layer_config *cfg, uint64_t seed, hm_arch arch, uint32_t S, const tl_ffn_inputs *in,
                      hm_tensor_set *ref) {
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, cfg, seed), HM_OK);
  hm_source src = hm_gen_source(&g);
  hm_build_opts o = {.parts = HM_WPART_FFN, .arch = arch};
  hm_tset_init(ref);
  hm_status st = hm_ref_ffn_launch_source(cfg, 4, &src, &o, S, (const float *const *)in->parts, in->res, in->post,
                                          in->comb, in->pre, ref);
  ck_assert_msg(st == HM_OK, "reference (%s): %s", arch == HM_ARCH_GFX942 ? "gfx942" : "gfx950", hm_errmsg());
  hm_gen_free(&g);
}

/* The launch's expected trace: the reference's gfx942 mode (spec/mono.md §2.6 as the reference
 * models it: the same chains as gfx950, a step's blocks in K order, each added by fma). */
static void oracle(const hm_layer_config *cfg, uint64_t seed, uint32_t S, const tl_ffn_inputs *in, hm_tensor_set *ref) {
  reference(cfg, seed, HM_ARCH_GFX942, S, in, ref);
}

/* ---------------------------------------------------------------- checks */

/* The seam (reduce, mixes, norm) is the same code on both architectures, f32 and bf16: exact. */
static void expect_seam_exact(const hm_tensor_set *ref, const hm_ffn_outputs *o, uint32_t S, uint32_t D) {
  ck_assert_uint_eq(tl_count_diff(o->res, tl_f32(ref, "out.res"), (uint64_t)S * 4 * D), 0);
  ck_assert_uint_eq(tl_count_diff(o->post, tl_f32(ref, "out.post"), (uint64_t)S * 4), 0);
  ck_assert_uint_eq(tl_count_diff(o->comb, tl_f32(ref, "out.comb"), (uint64_t)S * 16), 0);
  ck_assert_uint_eq(tl_count_diff(o->pre, tl_f32(ref, "out.pre"), (uint64_t)S * 4), 0);
}

/* An activation as gfx942 stores it, derived here from the OCP bytes and codes of the same rule
 * (§2.6), apart from the reference's gfx942 mode: each byte read as FNUZ (half its value, -0 to
 * +0) under code + 1, true wherever the quotient against 224 is a normal f32; rule V's all-zero
 * group (X8, not chunked) has the subnormal quotient 2^-126 / 224, code 1. `chunked` (the routed
 * experts' X8R, rule A): each 8-byte chunk even K first. */
static void expect_act942(const uint8_t *got, const uint8_t *got_s, const uint8_t *ocp, const uint8_t *ocp_s,
                          uint32_t S, uint32_t D, int chunked, const char *what) {
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t k = 0; k < D; k++) {
      uint32_t src = chunked ? k - k % 32 + hm_chunk942_k(k % 32) : k;
      uint8_t want = fmt_e4m3_ocp_to_fnuz(ocp[(uint64_t)t * D + src]), have = got[(uint64_t)t * D + k];
      ck_assert_msg(have == want, "%s token %u byte %u: 0x%02x, want 0x%02x (OCP K %u)", what, t, k, have, want, src);
    }
  for (uint64_t g = 0; g < (uint64_t)S * D / 32; g++) {
    bool zero = true;
    for (uint32_t i = 0; i < 32; i++) zero = zero && (ocp[32 * g + i] & 0x7fu) == 0;
    uint32_t want = !chunked && zero ? 1u : ocp_s[g] + 1u;
    ck_assert_msg(got_s[g] == want, "%s code %llu: %u, want %u (OCP %u)", what, (unsigned long long)g, got_s[g], want,
                  ocp_s[g]);
  }
}

/* Rank 0's mailboxes against the oracle: the normed rows and both quantisations exactly (and, given
 * the gfx950 trace `ocp`, both as derived from its OCP bytes), and the route: an expert differs only
 * at a near tie of the reference's logits (within 1e-5 relative: the agent's MFMA rounds a sum
 * once, the reference adds product by product), the weights within a few f32 ulps. */
static bool expect_stages(hm_runtime *rt, hm_ffn_group *g, const hm_tensor_set *ref, const hm_tensor_set *ocp,
                          const hm_layer_config *cfg, uint32_t S) {
  const uint32_t D = cfg->hidden, K = cfg->topk, E = cfg->experts;
  struct hm_ffn_scratch_layout L;
  const uint8_t *dev = hm_ffn_scratch(hm_ffn_group_rank(g, 0), S, &L);
  ck_assert_ptr_nonnull(dev);
  uint8_t *scr = tl_fetch(rt, hm_agent_get(rt, 0), dev, L.bytes);
  const uint16_t *normed = (const uint16_t *)(scr + L.normed);
  const float *rn = tl_f32(ref, "ffn.seam.normed");
  for (uint64_t i = 0; i < (uint64_t)S * D; i++) ck_assert(fmt_bf16_to_f32(normed[i]) == rn[i]);
  ck_assert_mem_eq(scr + L.x8r, tl_u8(ref, "moe.x8r"), (size_t)S * D);
  ck_assert_mem_eq(scr + L.x8rs, tl_u8(ref, "moe.x8r_s"), (size_t)S * D / 32);
  ck_assert_mem_eq(scr + L.x8, tl_u8(ref, "moe.x8"), (size_t)S * D);
  ck_assert_mem_eq(scr + L.x8s, tl_u8(ref, "moe.x8_s"), (size_t)S * D / 32);
  if (ocp) {
    expect_act942(scr + L.x8r, scr + L.x8rs, tl_u8(ocp, "moe.x8r"), tl_u8(ocp, "moe.x8r_s"), S, D, 1, "X8R");
    expect_act942(scr + L.x8, scr + L.x8s, tl_u8(ocp, "moe.x8"), tl_u8(ocp, "moe.x8_s"), S, D, 0, "X8");
  }
  const uint64_t *ids = (const uint64_t *)(scr + L.ids), *wts = (const uint64_t *)(scr + L.wts);
  const int32_t *rids = tl_i32(ref, "router.ids");
  const float *rw = tl_f32(ref, "router.weights"), *lg = tl_f32(ref, "router.logits");
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t j = 0; j < K; j++) {
      int32_t id = (int32_t)(uint32_t)ids[t * K + j], want = rids[t * K + j];
      ck_assert(id >= 0 && (uint32_t)id < E);
      if (id != want) {
        float a = lg[(uint64_t)t * E + (uint32_t)id], b = lg[(uint64_t)t * E + (uint32_t)want];
        ck_assert_msg(fabsf(a - b) <= 1e-5f * fmaxf(fabsf(a), fabsf(b)),
                      "token %u pick %u: expert %d, the reference chose %d (logits %.9g vs %.9g)", t, j, id, want, a, b);
        continue;
      }
      float w = fmt_float((uint32_t)wts[t * K + j]);
      ck_assert_msg(fabsf(w - rw[t * K + j]) <= 1e-5f * fabsf(rw[t * K + j]) + 1e-7f,
                    "token %u pick %u: weight %.9g, reference %.9g", t, j, w, rw[t * K + j]);
    }
  bool split = tl_expect_ug_halves(scr, &L, ref, 0, cfg, 4, S, hm_ffn_grid(hm_ffn_group_rank(g, 0)));
  free(scr);
  return split;
}

/* The MoE output x against a reference trace; a flipped rounding (below) moves an output element by
 * about one step of a format (2^-8 relative for bf16, 2^-3 for e4m3) in one of its ~I + Sh terms.
 * Against the gfx942 oracle only the agent's MFMA differs from the reference's model of it: it
 * sums a block's products exactly and rounds once, the reference adds them one by one in f32;
 * 32 products of e4m3 x e4m3 (8 significant bits each) mostly sum exactly in f32 either way, so a
 * flip is rare: relative L2 under 1e-3, at most one element in 1000 not bit-identical (measured:
 * none at any size here). Against the gfx950 reference (the cross-check) §2.6's roundings add to
 * it: a block's product rounded once and added by fma where gfx950 rounds once a 128-wide step,
 * the router's MFMA as two; the bytes, codes and contributions are the same values. Those are f32
 * ulps of the GEMV sums, as between the gfx950 launch and its reference (test_ffn.c's
 * expect_moe_close), so its budget: relative L2 under 1e-2, at most 10 % not bit-identical
 * (measured: 1 of 43008 at 42 rows). Cosine above 0.9999 in both. A wrong code factor (a power of
 * two on a block or a whole expert) or a wrong K order (products of unrelated values) is orders of
 * magnitude past either. */
static void expect_x_close(const hm_tensor_set *ref, const char *what, bool loose, const float *x, uint32_t S,
                           uint32_t D) {
  const uint64_t n = (uint64_t)S * D;
  const float *want = tl_f32(ref, "out.x");
  double rel = tl_rel_l2(x, want, n), cos = tl_cosine(x, want, n);
  uint64_t diff = tl_count_diff(x, want, n);
  fprintf(stderr, "gfx942 %u rows: x vs %s: rel L2 %.3g, cosine %.8f, %llu of %llu differ\n", S, what, rel, cos,
          (unsigned long long)diff, (unsigned long long)n);
  ck_assert_msg(rel < (loose ? 1e-2 : 1e-3) && cos > 0.9999 && diff <= n / (loose ? 10 : 1000),
                "%u rows: x vs %s: rel L2 %.3g, cosine %.8f, %llu of %llu elements differ", S, what, rel, cos,
                (unsigned long long)diff, (unsigned long long)n);
}

static void expect_ranks_identical(const hm_ffn_outputs *o, uint32_t S, uint32_t D) {
  for (uint32_t r = 1; r < 4; r++) {
    ck_assert_msg(memcmp(o[r].x, o[0].x, (size_t)S * D * 4) == 0, "rank %u's x differs from rank 0's", r);
    ck_assert(memcmp(o[r].res, o[0].res, (size_t)S * 4 * D * 4) == 0);
  }
}

/* ---------------------------------------------------------------- the launch */

/* A TP4 group of gfx942 copies on the gfx942 agents, stepped at each of rows[], against the oracle
 * on weights built from the same source (seed); `cross`: against the reference's gfx950 mode on
 * the gfx950 layouts too (independent of the reference's gfx942 mode: the same values, only
 * §2.6's roundings apart). */
static uint32_t run_and_check(const hm_layer_config *cfg, const uint32_t *rows, uint32_t nrows, uint64_t seed,
                              bool cross) {
  hm_runtime *rt = open_gfx942();
  const uint32_t D = cfg->hidden;
  hm_layer_weights w942[4];
  tl_build_group_arch(cfg, 4, seed, HM_WPART_FFN, HM_ARCH_GFX942, w942);
  hm_ffn_group *g;
  uint32_t splits = 0;
  ck_assert_msg(hm_ffn_group_create(rt, w942, 4, &small_grid, &g) == HM_OK, "group: %s", hm_errmsg());
  for (uint32_t i = 0; i < nrows; i++) {
    const uint32_t S = rows[i];
    tl_ffn_inputs in;
    tl_ffn_inputs_make(cfg, S, 4, seed + i, &in);
    for (uint32_t r = 0; r < 4; r++) {
      char n[32];
      snprintf(n, sizeof n, "test.part%u", r);
      hm_gen_normal(seed + i, n, (uint64_t)S * D, 0.0f, 0.5f, true, in.parts[r]);
    }
    /* at 7 rows token 3 is silent (zero residual and parts, as a padded slot): its normed row is
     * zero, so every rule-V group's quotient against 224 is subnormal (code 1, not OCP's + 1) */
    if (S == 7) {
      memset(in.res + 3 * 4 * D, 0, 4 * D * sizeof(float));
      for (uint32_t r = 0; r < 4; r++) memset(in.parts[r] + 3 * D, 0, D * sizeof(float));
    }
    hm_tensor_set ref, ocp;
    oracle(cfg, seed, S, &in, &ref);
    if (cross) reference(cfg, seed, HM_ARCH_GFX950, S, &in, &ocp);
    hm_ffn_inputs fi = {.rows = S, .res = in.res, .post = in.post, .comb = in.comb, .pre = in.pre};
    for (uint32_t r = 0; r < 4; r++) fi.parts[r] = in.parts[r];
    hm_ffn_outputs o[4];
    tl_ffn_outputs_alloc(o, 4, S, D);
    ck_assert_msg(hm_ffn_group_step(g, &fi, 1, o, NULL) == HM_OK, "%u rows: %s", S, hm_errmsg());
    expect_ranks_identical(o, S, D);
    expect_seam_exact(&ref, &o[0], S, D);
    splits += expect_stages(rt, g, &ref, cross ? &ocp : NULL, cfg, S);
    expect_x_close(&ref, "the oracle", false, o[0].x, S, D);
    if (cross) {
      expect_seam_exact(&ocp, &o[0], S, D);
      expect_x_close(&ocp, "the gfx950 reference", true, o[0].x, S, D);
      hm_tset_free(&ocp);
    }
    tl_ffn_outputs_free(o, 4);
    hm_tset_free(&ref);
    tl_ffn_inputs_free(&in);
  }
  hm_ffn_group_destroy(g);
  tl_free_group(w942, 4);
  hm_runtime_close(rt);
  return splits;
}

/* The tiny layer (hidden 1024, a rank's routed and shared intermediate 64: w2's one 32-byte step,
 * the shared down's padded blocks): one tile of 6, 6 and one, 7 tiles (the cap). */
START_TEST(tiny_tp4_rows) {
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t rows[] = {1, 6, 7, 42};
  run_and_check(&c, rows, 4, 9420, true);
}
END_TEST

/* The gate/up units in halves on gfx942 (rows 2i gate, 2i + 1 up: a half's columns in its two row
 * tiles): 16 experts top-2, one row on the 8-CTA grid split (2 x 2 units), five rows not (test_ffn.c
 * ug_halves_tp4). */
START_TEST(ug_halves_tp4) {
  hm_layer_config c = tl_config("tiny", 3, 16, 2);
  const uint32_t rows[] = {1, 5};
  ck_assert_uint_eq(run_and_check(&c, rows, 2, 9425, false), 1);
}
END_TEST

/* The draft variant: top-3 of 32 experts, one FP4 group a gate/up unit (four K slices). */
START_TEST(tiny_draft_tp4) {
  hm_layer_config c = tl_config("tiny", 40, 0, 0);
  ck_assert(hm_config_is_draft(&c));
  const uint32_t rows[] = {7};
  run_and_check(&c, rows, 1, 9430, false);
}
END_TEST

/* DeepSeek-V4.1-Flash's dims (hidden 5120, a rank's routed and shared intermediate 576: w13's
 * rounds of codes, w2's four 64-byte steps and a 32-byte one, sw2 padded 576 -> 640) with the
 * experts cut to 32 so the agent's time fits a test. */
START_TEST(full_dims_tp4) {
  hm_layer_config c = tl_config("v41-flash", 3, 32, 6);
  const uint32_t rows[] = {2};
  run_and_check(&c, rows, 1, 9440, false);
}
END_TEST

/* ---------------------------------------------------------------- replays */

/* Replays on gfx942 whose inputs change every replay, as test_ffn.c's replays_bit_identical does on
 * gfx950: two input sets of 7 rows (two token tiles of gfx942's 6) are each stepped once and checked
 * against the oracle there, those outputs the set's expected bits. Then one launch a rank is recorded
 * into a chain on device buffers the test owns and replayed with the sets alternating (never one twice
 * in a row, the first not the set stepped last): every rank's outputs must be that set's bits, and each rank's tag (2e + 2,
 * its mailbox flags' value) one epoch past the launch before. A launch that reused an epoch or read a
 * mailbox or a peer's push of the replay before hands on the previous set's values and fails here.
 * 6 replays of TP4, each set three times, to stay within ~10 s of the agent's time (the epoch logic is
 * gfx950's, replayed 200 times there). */
enum { SETS942 = 2, REPLAYS942 = 6 };

typedef struct rec942 {
  hm_queue *q;
  hm_chain *c;
  hm_ffn_io io;
  tl_stage st;
  void *dev[10];
} rec942;

static void rec942_create(hm_runtime *rt, hm_ffn *f, hm_agent *a, uint32_t S, uint32_t D, rec942 *k) {
  memset(k, 0, sizeof *k);
  const size_t bytes[10] = {(size_t)S * D * 2, (size_t)S * 4 * D * 2, S * 16u, S * 64u, S * 16u,
                            (size_t)S * D * 2, (size_t)S * 4 * D * 2, S * 16u, S * 64u, S * 16u};
  tl_stage_init(&k->st, rt, a, (size_t)S * 4 * D * 4);
  ck_assert_int_eq(hm_queue_create(a, 64, &k->q), HM_OK);
  ck_assert_int_eq(hm_chain_create(k->q, &k->c), HM_OK);
  void **b = k->dev;
  for (int i = 0; i < 10; i++) b[i] = tl_dev_alloc(a, bytes[i]);
  k->io = (hm_ffn_io){.rows = S, .part = b[0], .res_in = b[1], .post_in = b[2], .comb_in = b[3], .pre_in = b[4],
                      .out = b[5], .res_out = b[6], .post_out = b[7], .comb_out = b[8], .pre_out = b[9]};
  ck_assert_msg(hm_ffn_record(f, k->c, &k->io) == HM_OK, "record: %s", hm_errmsg());
}

static void rec942_destroy(hm_runtime *rt, rec942 *k) {
  hm_chain_destroy(k->c);
  hm_queue_destroy(k->q);
  tl_stage_free(&k->st);
  for (int i = 0; i < 10; i++) hm_mem_free(rt, k->dev[i]);
}

static uint32_t rec942_tag(hm_ffn_group *g, uint32_t r, rec942 *k, uint32_t S) {
  struct hm_ffn_scratch_layout L;
  const uint8_t *scr = hm_ffn_scratch(hm_ffn_group_rank(g, r), S, &L);
  ck_assert_ptr_nonnull(scr);
  return tl_get_u32(&k->st, scr + L.xrdy);
}

static bool same_bits(const hm_ffn_outputs *a, const hm_ffn_outputs *b, uint32_t S, uint32_t D) {
  return !memcmp(a->x, b->x, (size_t)S * D * 4) && !memcmp(a->res, b->res, (size_t)S * 4 * D * 4) &&
         !memcmp(a->post, b->post, (size_t)S * 16) && !memcmp(a->comb, b->comb, (size_t)S * 64) &&
         !memcmp(a->pre, b->pre, (size_t)S * 16);
}

START_TEST(replays_bit_identical) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  const uint32_t S = 7, D = cfg.hidden;
  const uint64_t seed = 9450;
  hm_runtime *rt = open_gfx942();
  hm_layer_weights w[4];
  tl_build_group_arch(&cfg, 4, seed, HM_WPART_FFN, HM_ARCH_GFX942, w);
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, w, 4, &small_grid, &g) == HM_OK, "group: %s", hm_errmsg());
  tl_ffn_inputs in[SETS942];
  hm_ffn_outputs want[SETS942][4], got[4];
  for (uint32_t k = 0; k < SETS942; k++) {
    tl_ffn_inputs_make(&cfg, S, 4, seed + k, &in[k]);
    for (uint32_t r = 0; r < 4; r++) {
      char n[32];
      snprintf(n, sizeof n, "test.part%u", r);
      hm_gen_normal(seed + k, n, (uint64_t)S * D, 0.0f, 0.5f, true, in[k].parts[r]);
    }
    hm_ffn_inputs fi = {.rows = S, .res = in[k].res, .post = in[k].post, .comb = in[k].comb, .pre = in[k].pre};
    for (uint32_t r = 0; r < 4; r++) fi.parts[r] = in[k].parts[r];
    tl_ffn_outputs_alloc(want[k], 4, S, D);
    ck_assert_msg(hm_ffn_group_step(g, &fi, 1, want[k], NULL) == HM_OK, "set %u: %s", k, hm_errmsg());
    hm_tensor_set ref;
    oracle(&cfg, seed, S, &in[k], &ref);
    expect_ranks_identical(want[k], S, D);
    expect_seam_exact(&ref, &want[k][0], S, D);
    expect_x_close(&ref, "the oracle", false, want[k][0].x, S, D);
    hm_tset_free(&ref);
    for (uint32_t j = 0; j < k; j++)
      ck_assert_msg(!same_bits(&want[j][0], &want[k][0], S, D), "sets %u and %u give the same outputs", j, k);
  }
  tl_ffn_outputs_alloc(got, 4, S, D);
  rec942 rec[4];
  uint32_t tag[4];
  for (uint32_t r = 0; r < 4; r++) {
    rec942_create(rt, hm_ffn_group_rank(g, r), hm_agent_get(rt, r), S, D, &rec[r]);
    tag[r] = rec942_tag(g, r, &rec[r], S);
    ck_assert_msg(tag[r] == 2 * (SETS942 - 1) + 2, "rank %u: tag %u after %u steps from epoch 0", r, tag[r], SETS942);
  }
  uint32_t order[REPLAYS942];
  tl_replay_order(SETS942, SETS942 - 1, seed, REPLAYS942, order);
  for (uint32_t n = 0; n < REPLAYS942; n++) {
    const uint32_t k = order[n];
    for (uint32_t r = 0; r < 4; r++) {
      const hm_ffn_io *io = &rec[r].io;
      tl_put_bf16(&rec[r].st, (void *)io->part, in[k].parts[r], (uint64_t)S * D);
      tl_put_bf16(&rec[r].st, (void *)io->res_in, in[k].res, (uint64_t)S * 4 * D);
      tl_put(&rec[r].st, (void *)io->post_in, in[k].post, S * 16);
      tl_put(&rec[r].st, (void *)io->comb_in, in[k].comb, S * 64);
      tl_put(&rec[r].st, (void *)io->pre_in, in[k].pre, S * 16);
    }
    /* every rank's chain in flight at once: the launches all-reduce with each other */
    for (uint32_t r = 0; r < 4; r++) ck_assert_int_eq(hm_chain_replay(rec[r].c), HM_OK);
    for (uint32_t r = 0; r < 4; r++) {
      const hm_ffn *f = hm_ffn_group_rank(g, r);
      ck_assert_msg(hm_chain_wait(rec[r].c, 600000000000ull) == HM_OK && hm_ffn_status(f) == HM_OK,
                    "replay %u, rank %u: %s", n, r, hm_errmsg());
      const uint32_t t = rec942_tag(g, r, &rec[r], S);
      ck_assert_msg(t == tag[r] + 2, "replay %u, rank %u: tag %u after %u: the epoch did not advance by one", n, r, t,
                    tag[r]);
      tag[r] = t;
      const hm_ffn_io *io = &rec[r].io;
      tl_get_bf16(&rec[r].st, got[r].x, io->out, (uint64_t)S * D);
      tl_get_bf16(&rec[r].st, got[r].res, io->res_out, (uint64_t)S * 4 * D);
      tl_get(&rec[r].st, got[r].post, io->post_out, S * 16);
      tl_get(&rec[r].st, got[r].comb, io->comb_out, S * 64);
      tl_get(&rec[r].st, got[r].pre, io->pre_out, S * 16);
      if (same_bits(&got[r], &want[k][r], S, D)) continue;
      for (uint32_t j = 0; j < SETS942; j++)
        ck_assert_msg(j == k || !same_bits(&got[r], &want[j][r], S, D),
                      "replay %u (set %u), rank %u: the outputs are set %u's, not this set's", n, k, r, j);
      ck_abort_msg("replay %u (set %u), rank %u: the outputs differ from every set's", n, k, r);
    }
  }
  for (uint32_t r = 0; r < 4; r++) rec942_destroy(rt, &rec[r]);
  tl_ffn_outputs_free(got, 4);
  for (uint32_t k = 0; k < SETS942; k++) tl_ffn_outputs_free(want[k], 4), tl_ffn_inputs_free(&in[k]);
  hm_ffn_group_destroy(g);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- refusals */

/* §5.1.3: TP 4 only on gfx942 (a TP2 group of gfx950 weights: the TP rule is named first). */
START_TEST(tp2_refused) {
  hm_runtime *rt = open_gfx942();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[2];
  tl_build_group(&cfg, 2, 11, HM_WPART_FFN, w);
  hm_ffn_group *g = NULL;
  tl_expect_status(hm_ffn_group_create(rt, w, 2, &small_grid, &g), HM_ERR_REFUSED, "§5.1.3: TP 2 on gfx942");
  ck_assert_ptr_null(g);
  tl_free_group(w, 2);
  hm_runtime_close(rt);
}
END_TEST

/* The other architecture's weights: gfx950 layouts on gfx942 agents, and gfx942 copies on gfx950. */
START_TEST(other_arch_weights_refused) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[4];
  hm_ffn_group *g = NULL;
  hm_runtime *rt = open_gfx942();
  tl_build_group(&cfg, 4, 12, HM_WPART_FFN, w);
  tl_expect_status(hm_ffn_group_create(rt, w, 4, &small_grid, &g), HM_ERR_INVALID_ARG,
                "the weights are gfx950 layouts (spec/mono.md §4.4); this launch reads the gfx942 copies");
  ck_assert_ptr_null(g);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
  setenv("HSAMONO_SIM_ARCH", "gfx950", 1);
  rt = tl_open_sim();
  tl_build_group_arch(&cfg, 4, 12, HM_WPART_FFN, HM_ARCH_GFX942, w);
  tl_expect_status(hm_ffn_group_create(rt, w, 4, &small_grid, &g), HM_ERR_INVALID_ARG,
                "the weights are gfx942 copies (spec/mono.md §4.4); this launch reads the gfx950 layouts");
  ck_assert_ptr_null(g);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
}
END_TEST

/* §5.3.1: 42 rows at most on gfx942 (43 refused naming the rule, before anything runs), and §5.1.6
 * still applies (the agent's 8 CUs against the default 256). */
START_TEST(rows_refused) {
  hm_runtime *rt = open_gfx942();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[4];
  tl_build_group_arch(&cfg, 4, 13, HM_WPART_FFN, HM_ARCH_GFX942, w);
  hm_ffn_group *g = NULL;
  tl_expect_status(hm_ffn_group_create(rt, w, 4, NULL, &g), HM_ERR_REFUSED, "§5.1.6");
  ck_assert_ptr_null(g);
  ck_assert_msg(hm_ffn_group_create(rt, w, 4, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  hm_ffn *r0 = hm_ffn_group_rank(g, 0);
  hm_ffn_io io = {.rows = 43};
  char *buf = tl_dev_alloc(hm_heap_agent(hm_ffn_group_heap(g, 0)), 43 * 4 * cfg.hidden * 2);
  io.part = io.res_in = io.post_in = io.comb_in = io.pre_in = (const float *)buf;
  io.out = io.res_out = io.post_out = io.comb_out = io.pre_out = (float *)buf;
  tl_expect_status(hm_ffn_accepts(r0, &io), HM_ERR_REFUSED, "§5.3.1: 43 rows (the launch takes 1..42 on gfx942)");
  io.rows = 42;
  ck_assert_msg(hm_ffn_accepts(r0, &io) == HM_OK, "%s", hm_errmsg());
  ck_assert_int_eq(hm_ffn_prepare(r0, 43), HM_ERR_INVALID_ARG);
  ck_assert_ptr_null(hm_ffn_scratch(r0, 43, NULL));
  hm_mem_free(rt, buf);
  hm_ffn_group_destroy(g);
  tl_free_group(w, 4);
  hm_runtime_close(rt);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"tp2_refused", tp2_refused},
      {"other_arch_weights_refused", other_arch_weights_refused},
      {"rows_refused", rows_refused},
      {"tiny_tp4_rows", tiny_tp4_rows}, {"ug_halves_tp4", ug_halves_tp4},
      {"tiny_draft_tp4", tiny_draft_tp4},
      {"full_dims_tp4", full_dims_tp4},
      {"replays_bit_identical", replays_bit_identical},
  };
  return TL_SUITE("ffn942", tests, 1800);
}
