/* tests/layer/test_k1.c: K1 (issue 11) on the software agent against the fp32 reference, stage by
 * stage and whole: TP 2 and 4, rows 1..48, ratios 0/1/2, the index build and keylist, replays. */
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

/* ---------------------------------------------------------------- a case */

/* How a case bends the generated step. */
typedef struct shape {
  uint32_t S, reqs, ctx, block;
  int32_t dead_row; /* a row given slot -1 (a padding token), or -1 for none */
  uint32_t cases;   /* the generator's hard cases (HM_GEN_*), each asserted to occur */
} shape;

typedef struct k1_case {
  hm_layer_config cfg;
  uint32_t tp, S, H, Q;
  bool index;
  hm_gen_step step;   /* what the device gets (its cache as before the step) */
  hm_gen_step before; /* an untouched copy of the cache, to see what K1 wrote */
  hm_gen_step refs;   /* the reference's copy (its cache after the reference's step) */
  hm_tensor_set ref;
  hm_k1_outputs o[4];
} k1_case;

/* One rank's output arrays for c's step. */
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

/* The step of `seed`; with seam_seed nonzero, its seam state (x, res, the mixes) drawn from
 * seam_seed instead, the metadata and cache kept (the replays' input sets share one step). */
static void case_make_seam(k1_case *c, const hm_layer_weights *w, uint32_t tp, const shape *sh, uint64_t seed,
                           uint64_t seam_seed) {
  memset(c, 0, sizeof *c);
  c->cfg = w[0].cfg, c->tp = tp, c->S = sh->S, c->H = w[0].dims.heads, c->Q = c->cfg.q_lora;
  c->index = hm_config_has(&c->cfg, HM_ROLE_INDEX_SOURCE);
  hm_gen_opts go = {.S = sh->S, .reqs = sh->reqs, .ctx = sh->ctx, .block = sh->block, .seed = seed, .cases = sh->cases};
  hm_status st = hm_gen_step_make_opts(&c->cfg, &go, &c->step);
  ck_assert_msg(st == HM_OK, "step: %s", hm_errmsg());
  tl_expect_cases(&c->step, &c->cfg, sh->cases);
  if (seam_seed) tl_step_new_seam(&c->step, &c->cfg, seam_seed);
  if (sh->dead_row >= 0) c->step.slot[sh->dead_row] = -1;
  ck_assert_int_eq(hm_gen_step_copy(&c->step, &c->before), HM_OK);
  ck_assert_int_eq(hm_gen_step_copy(&c->step, &c->refs), HM_OK);
  hm_tset_init(&c->ref);
  hm_ref_k1_in in = {sh->S, c->refs.x, c->refs.res, c->refs.post, c->refs.comb, c->refs.pre, &c->refs.in};
  st = hm_ref_k1(w, tp, &in, c->index, &c->ref);
  ck_assert_msg(st == HM_OK, "reference: %s", hm_errmsg());
  for (uint32_t r = 0; r < tp; r++) outputs_alloc(c, &c->o[r]);
}

static void case_make(k1_case *c, const hm_layer_weights *w, uint32_t tp, const shape *sh, uint64_t seed) {
  case_make_seam(c, w, tp, sh, seed, 0);
}

static void case_free(k1_case *c) {
  for (uint32_t r = 0; r < c->tp; r++) outputs_free(&c->o[r]);
  hm_tset_free(&c->ref);
  hm_gen_step_free(&c->step), hm_gen_step_free(&c->before), hm_gen_step_free(&c->refs);
}

/* ---------------------------------------------------------------- comparisons */

/* The seam runs on the software agent in the reference's order with the same libm calls (as the
 * FFN launch's seam: the same code, device/seam.h), so its outputs are bit-identical there. */
static void expect_seam_exact(const k1_case *c, const hm_k1_outputs *o) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  ck_assert_uint_eq(tl_count_diff(o->res, tl_f32(&c->ref, "k1.seam.res"), S * 4 * D), 0);
  ck_assert_uint_eq(tl_count_diff(o->post, tl_f32(&c->ref, "k1.seam.post"), S * 4), 0);
  ck_assert_uint_eq(tl_count_diff(o->comb, tl_f32(&c->ref, "k1.seam.comb"), S * 16), 0);
  ck_assert_uint_eq(tl_count_diff(o->pre, tl_f32(&c->ref, "k1.seam.pre"), S * 4), 0);
  if (c->index) ck_assert_uint_eq(tl_count_diff(o->x_out, tl_f32(&c->ref, "k1.seam.normed"), S * D), 0);
}

/* The key table: discrete, exactly the reference's. */
static void expect_keys_exact(const k1_case *c, const hm_k1_outputs *o) {
  ck_assert_mem_eq(o->kt, tl_i32(&c->ref, "k1.kt"), (size_t)c->S * K1_KEYS * 4);
  ck_assert_mem_eq(o->klen, tl_i32(&c->ref, "k1.klen"), (size_t)c->S * 2 * 4);
}

/* A GEMV output against the reference's. The software agent's matrix instruction sums a step's
 * products exactly and rounds once, the reference adds them one by one in f32 (docs/decisions.md
 * "FFN launch"): a GEMV result moves by a few f32 ulps, which now and then flips the bf16 rounding
 * that follows (a step of 2^-8 relative in one element) and, through a norm, nudges its row. Budget:
 * relative L2 error under 1e-3 (a flipped bf16 step in a few elements of a row is ~1e-4), cosine
 * above 0.99999, at least 95 % of the elements bit-identical. */
static void expect_gemv_close(const char *what, const float *x, const float *ref, uint64_t n) {
  double rel = tl_rel_l2(x, ref, n), cos = tl_cosine(x, ref, n);
  uint64_t diff = tl_count_diff(x, ref, n);
  ck_assert_msg(rel < 1e-3 && cos > 0.99999 && diff <= n / 20, "%s vs reference: rel L2 %.3g, cosine %.8f, %llu of %llu differ",
                what, rel, cos, (unsigned long long)diff, (unsigned long long)n);
}

/* Stage by stage from rank 0's mailboxes: X8 exactly the reference's; the kernel's own wqkv sums
 * (QKVP) against the reference's GEMV (expect_gemv_close); then every later stage of the front
 * recomputed by the reference from the kernel's own sums must equal the kernel's bit for bit: the
 * normed q latent's rule-V bytes and codes, the kv norm, RoPE and the record (byte for byte, at the
 * token's slot), the index build's qr_out. Outside the step's slots the cache is untouched. Then q
 * of every rank against the reference's wq_b on the kernel's own QX8. */
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
  expect_gemv_close("qkv", qkv, tl_f32(&c->ref, "k1.qkv"), (uint64_t)S * N);
  const hm_tensor *qw = hm_weights_get(&w[0], "q_norm"), *kw = hm_weights_get(&w[0], "kv_norm");
  const hm_tensor *cs = hm_weights_get(&w[0], "cos_sin");
  hm_ref_q_norm(S, Q, qkv, qw->data, c->cfg.eps, qn);
  uint8_t *qx8 = malloc((size_t)S * Q), *qx8s = malloc((size_t)S * Q / 32);
  hm_ref_mx8_quant(qn, S, Q, 32, FMT_RULE_V, qx8, qx8s);
  ck_assert_mem_eq(scr + L.qx8, qx8, (size_t)S * Q);
  ck_assert_mem_eq(scr + L.qx8s, qx8s, (size_t)S * Q / 32);
  if (c->index) ck_assert_uint_eq(tl_count_diff(c->o[0].qr_out, qn, (uint64_t)S * Q), 0);
  hm_ref_kv_norm_rope(S, Q, qkv, kw->data, c->cfg.eps, cs->data, c->step.pos, kn);
  /* the records: at every live slot the reference's record of the kernel's own kv latent; every
   * other byte of the cache as it was */
  uint8_t *want = malloc(c->step.swa_bytes);
  memcpy(want, c->before.swa_buf, c->step.swa_bytes);
  hm_kv_cache wc = c->before.in.swa;
  wc.base = want;
  for (uint32_t t = 0; t < S; t++) {
    uint8_t d[HM_RECORD_DATA], sc[8];
    hm_ref_kv_record(kn + (size_t)t * 512, d, sc);
    if (c->step.slot[t] >= 0) ck_assert_int_eq(hm_ref_kv_insert(&wc, c->step.slot[t], d, sc), HM_OK);
  }
  for (uint32_t r = 0; r < c->tp; r++) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < c->step.swa_bytes; i++) bad += c->o[r].swa[i] != want[i];
    ck_assert_msg(bad == 0, "rank %u: %llu bytes of the SWA cache differ from the records of its own kv",
                  r, (unsigned long long)bad);
  }
  /* q: every rank against the reference's wq_b of the kernel's own QX8 (the same GEMV budget), and
   * against the reference's whole chain */
  for (uint32_t r = 0; r < c->tp; r++) {
    uint64_t n = (uint64_t)S * c->H * 512;
    float *q = malloc(n * 4);
    ck_assert_int_eq(hm_ref_wq_b(&w[r], S, scr + L.qx8, scr + L.qx8s, c->step.pos, q), HM_OK);
    expect_gemv_close("q (stage)", c->o[r].q, q, n);
    char name[32];
    snprintf(name, sizeof name, "rank%u.q", r);
    expect_gemv_close("q (whole)", c->o[r].q, tl_f32(&c->ref, name), n);
    free(q);
  }
  free(want), free(qx8), free(qx8s), free(qkv), free(qn), free(kn), free(scr);
}

/* The end-to-end records against the reference's own: the same up to the rare flips of
 * expect_gemv_close that reach a record (a flipped kv element, or a norm nudged across a rounding).
 * Budget: at most 2 % of the step's record bytes (measured: 0 to a few bytes a step). */
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

/* Every rank holds the same seam outputs, records and key table (replicated work). */
static void expect_ranks_identical(const k1_case *c) {
  const size_t S = c->S, D = c->cfg.hidden;
  for (uint32_t r = 1; r < c->tp; r++) {
    ck_assert_msg(memcmp(c->o[r].res, c->o[0].res, S * 4 * D * 4) == 0, "rank %u's res_mid differs", r);
    ck_assert(memcmp(c->o[r].comb, c->o[0].comb, S * 64) == 0);
    ck_assert(memcmp(c->o[r].swa, c->o[0].swa, c->step.swa_bytes) == 0);
    if (!c->index) ck_assert(memcmp(c->o[r].kt, c->o[0].kt, S * K1_KEYS * 4) == 0);
  }
}

static void run_case(hm_runtime *rt, hm_k1_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                     uint64_t seed) {
  k1_case c;
  case_make(&c, w, tp, sh, seed);
  hm_status st = hm_k1_group_step(g, &c.step.in, 1, c.o, NULL);
  ck_assert_msg(st == HM_OK, "%u rows: %s", sh->S, hm_errmsg());
  expect_ranks_identical(&c);
  expect_seam_exact(&c, &c.o[0]);
  if (!c.index) expect_keys_exact(&c, &c.o[0]);
  if (!c.index && (sh->cases & HM_GEN_DEAD_CHUNK))
    ck_assert_msg(tl_dead_chunk(tl_i32(&c.ref, "k1.kt"), tl_i32(&c.ref, "k1.klen"), c.S, 64), "no dead key chunk");
  expect_stages(rt, g, &c, w);
  expect_records_close(&c);
  if (c.index && c.cfg.compress_ratio) {
    /* keylist on a top-k made after K1 (here the generator's): K1's format, exactly */
    for (uint32_t r = 0; r < tp; r++) memset(c.o[r].kt, 0x5a, (size_t)c.S * K1_KEYS * 4);
    st = hm_k1_group_keylist(g, &c.step.in, c.o);
    ck_assert_msg(st == HM_OK, "keylist: %s", hm_errmsg());
    int32_t *kt = malloc((size_t)c.S * K1_KEYS * 4), *klen = malloc((size_t)c.S * 8);
    hm_key_args ka = {c.S, c.cfg.compress_ratio, c.step.pos, c.step.slot, c.step.swa_idx, c.step.swa_len, c.step.t2r,
                      c.step.topk, c.step.bt, c.step.in.bt_stride, c.step.in.comp.block_size};
    ck_assert_int_eq(hm_ref_key_table(&ka, kt, klen), HM_OK);
    if (sh->cases & HM_GEN_DEAD_CHUNK) ck_assert_msg(tl_dead_chunk(kt, klen, c.S, 64), "no dead key chunk");
    for (uint32_t r = 0; r < tp; r++) {
      ck_assert_mem_eq(c.o[r].kt, kt, (size_t)c.S * K1_KEYS * 4);
      ck_assert_mem_eq(c.o[r].klen, klen, (size_t)c.S * 8);
    }
    free(kt), free(klen);
  }
  case_free(&c);
}

static void run_layer(const char *model, int32_t layer, uint32_t tp, const shape *shapes, uint32_t n, uint64_t seed) {
  hm_layer_config cfg = tl_config(model, layer, 0, 0);
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[4];
  tl_build_group(&cfg, tp, seed, HM_WPART_ATTN, w);
  hm_k1_group *g;
  hm_status st = hm_k1_group_create(rt, w, tp, &small_grid, &g);
  ck_assert_msg(st == HM_OK, "group: %s", hm_errmsg());
  for (uint32_t i = 0; i < n; i++) run_case(rt, g, w, tp, &shapes[i], seed + i);
  hm_k1_group_destroy(g);
  tl_free_group(w, tp);
  hm_runtime_close(rt);
}

/* ---------------------------------------------------------------- the tests */

/* A REUSE layer (ratio 2) at TP 2 over the row counts, one request; position 0 (a window of one
 * slot, no compressed key yet), a window that wraps a 64-slot block, a padding row. */
START_TEST(tiny_ratio2_tp2) {
  const shape s[] = {{1, 1, 0, 64, -1, 0}, {2, 1, 1, 64, -1, 0}, {7, 1, 100, 64, 3, 0}, {16, 2, 60, 64, -1, 0},
                     {48, 2, 300, 64, 47, 0}};
  run_layer("tiny", 3, 2, s, sizeof s / sizeof *s, 100);
}
END_TEST

/* A REUSE layer (ratio 1) at TP 4: two requests in a step, 256-slot blocks, short top-k lists. */
START_TEST(tiny_ratio1_tp4) {
  const shape s[] = {{1, 1, 5, 256, -1, 0}, {2, 2, 0, 256, 1, 0}, {7, 1, 250, 256, -1, 0}, {16, 4, 40, 256, 0, 0},
                     {48, 4, 700, 256, -1, 0}};
  run_layer("tiny", 21, 4, s, sizeof s / sizeof *s, 200);
}
END_TEST

/* Window layers (ratio 0): no compressed keys; TP 2 and 4. */
START_TEST(tiny_ratio0) {
  const shape s[] = {{1, 1, 0, 64, -1, 0}, {7, 1, 129, 64, 6, 0}, {48, 2, 200, 256, -1, 0}};
  run_layer("tiny", 0, 2, s, sizeof s / sizeof *s, 300);
  run_layer("tiny", 41, 4, s, 2, 310);
}
END_TEST

/* An index-source layer (ratio 2, layer 2; ratio 1, layer 24): the index build's x_out and qr_out,
 * no key table from K1; keylist writes it from a top-k made between the launches. */
START_TEST(tiny_index_build) {
  const shape s[] = {{1, 1, 3, 64, -1, 0}, {7, 1, 90, 64, 2, 0}, {16, 2, 400, 256, -1, 0}};
  run_layer("tiny", 2, 2, s, sizeof s / sizeof *s, 400);
  run_layer("tiny", 24, 4, s, 2, 410);
}
END_TEST

/* The generator's hard cases (hm_gen_opts.cases), each asserted to occur in its step: padding
 * rows, top-k lists a whole key chunk short (dead chunks in the key table), requests starting at
 * odd positions (ratio-2 groups begun the step before), requests at positions 0 and 1, contexts of
 * more than 512 compressed entries. A REUSE layer (ratio 2) at TP 2, and the index build and
 * keylist of a reindex layer (24, ratio 1) at TP 4. */
START_TEST(tiny_hard_cases) {
  const shape s[] = {{8, 2, 300, 64, -1, HM_GEN_PAD | HM_GEN_DEAD_CHUNK | HM_GEN_STRADDLE},
                     {4, 2, 0, 64, -1, HM_GEN_START},
                     {3, 1, 50, 64, -1, HM_GEN_LONG | HM_GEN_DEAD_CHUNK | HM_GEN_PAD}};
  run_layer("tiny", 3, 2, s, sizeof s / sizeof *s, 450);
  const shape s24[] = {{4, 2, 0, 256, -1, HM_GEN_LONG | HM_GEN_PAD | HM_GEN_DEAD_CHUNK},
                       {2, 2, 9, 64, -1, HM_GEN_START}};
  run_layer("tiny", 24, 4, s24, 2, 460);
}
END_TEST

/* The V4.1-Flash attention dims (hidden 5120, 64 heads, q_lora 1280, head 512): TP 4 and 2, the
 * row counts, the three ratios, both block sizes, padding rows, two and four requests. */
START_TEST(full_dims_tp4) {
  const shape s[] = {{1, 1, 0, 64, -1, 0}, {2, 1, 150, 64, -1, 0}, {7, 1, 1000, 256, 4, 0}, {16, 2, 300, 64, -1, 0},
                     {48, 4, 900, 256, 20, 0}};
  run_layer("v41-flash", 5, 4, s, sizeof s / sizeof *s, 500);
  run_layer("v41-flash", 33, 4, s + 2, 1, 505);
}
END_TEST
START_TEST(full_dims_tp2) {
  const shape s[] = {{1, 1, 70, 64, -1, 0}, {2, 2, 1, 256, -1, 0}, {7, 1, 129, 64, -1, 0}, {16, 1, 600, 256, 9, 0},
                     {48, 2, 960, 64, -1, 0}};
  run_layer("v41-flash", 30, 2, s, sizeof s / sizeof *s, 510);
  run_layer("v41-flash", 0, 2, s + 3, 1, 515);
}
END_TEST
/* The index build at full dims (layer 2: ratio 2, a kv and index source; layer 28: ratio 1). */
START_TEST(full_dims_index_build) {
  const shape s[] = {{7, 1, 500, 64, 1, 0}, {16, 2, 90, 256, -1, 0}};
  run_layer("v41-flash", 2, 4, s, 2, 520);
  run_layer("v41-flash", 28, 2, s, 1, 525);
}
END_TEST

/* ---------------------------------------------------------------- replays */

/* Replays whose inputs change every step. SETS seam states (x, the residual, the mixes) over one
 * step's metadata and cache are each run once as a step and checked stage by stage against the
 * reference (run_case's checks); those outputs (the seam, q, the key table, the whole SWA cache
 * with the step's records) are the set's expected bits. Then one step a rank is recorded on
 * device buffers the test owns (a captured graph's fixed addresses) and replayed with the sets in
 * a pseudo-random order that never runs a set twice in a row: before a replay the set's seam
 * state is written into the buffers, after it every output must be that set's bits (the records
 * at the step's slots are rewritten each replay, so the cache is the set's too), and the launch's
 * tag (2e + 1, the value of its mailbox flags; K1 alone ends its own epochs) one epoch past the
 * launch before. A launch that reused an epoch or read a mailbox of the step before hands on the
 * previous set's values and fails here; with one set replayed over and over it would not.
 * Launches in all as before: 200 (50 under chaos); the thousand replays run in test_layer.c, of
 * K1 and K2 recorded back to back on one epoch buffer. */
enum { SETS = 4, IO_ALL = 14 };

/* One rank's recorded step on buffers of its own: the device tensors, the SWA cache, the metadata
 * in host-visible memory (K1 reads it from there and checks it when recorded). */
typedef struct rec_rank {
  hm_queue *q;
  hm_chain *c;
  hm_k1_io io;
  tl_stage st;
  void *dev[IO_ALL], *cache, *meta[7];
} rec_rank;

static void rec_create(hm_runtime *rt, hm_k1 *k1, hm_agent *a, const k1_case *c, rec_rank *k) {
  memset(k, 0, sizeof *k);
  const hm_step_inputs *in = &c->step.in;
  const size_t S = c->S, D = c->cfg.hidden, Q = c->Q, H = c->H;
  /* x, res, post, comb, pre in; res, post, comb, pre, q, kt, klen, x_out, qr_out out */
  const size_t bytes[IO_ALL] = {S * D * 2, S * 4 * D * 2, S * 16, S * 64, S * 16, S * 4 * D * 2, S * 16, S * 64,
                                S * 16,    S * H * 512 * 2, S * K1_KEYS * 4, S * 8, S * D * 2, S * Q * 2};
  for (int i = 0; i < IO_ALL; i++) k->dev[i] = tl_dev_alloc(a, bytes[i]);
  tl_stage_init(&k->st, rt, a, 1u << 20);
  k->cache = tl_dev_alloc(a, c->step.swa_bytes);
  tl_put(&k->st, k->cache, c->step.swa_buf, c->step.swa_bytes);
  /* the metadata as the group lays it out (layer/run/group.c), requests = max(token_to_req) + 1 */
  uint32_t reqs = 0;
  for (uint32_t t = 0; t < S; t++)
    if ((uint32_t)in->token_to_req[t] + 1 > reqs) reqs = (uint32_t)in->token_to_req[t] + 1;
  const void *src[7] = {in->positions, in->slot_mapping, in->swa_indices, in->swa_lens, in->token_to_req, in->topk,
                        in->block_table};
  const size_t mb[7] = {S * 8, S * 8, S * HM_WINDOW * 4, S * 4, S * 4, S * HM_TOPK_ATTN * 4,
                        (size_t)reqs * in->bt_stride * 4};
  for (int i = 0; i < 7; i++) {
    k->meta[i] = tl_host_alloc(a, mb[i]);
    if (src[i]) memcpy(k->meta[i], src[i], mb[i]);
  }
  k->io = (hm_k1_io){.rows = c->S, .x = k->dev[0], .res_in = k->dev[1], .post_in = k->dev[2], .comb_in = k->dev[3],
                     .pre_in = k->dev[4], .res_out = k->dev[5], .post_out = k->dev[6], .comb_out = k->dev[7],
                     .pre_out = k->dev[8], .q = k->dev[9], .kt = k->dev[10], .klen = k->dev[11],
                     .x_out = k->dev[12], .qr_out = k->dev[13]};
  k->io.swa = (hm_k1_cache){k->cache, in->swa.block_stride, in->swa.block_size, in->swa.blocks};
  k->io.meta = (hm_k1_meta){k->meta[0], k->meta[1], k->meta[2], k->meta[3], k->meta[4],
                            in->topk ? k->meta[5] : NULL, in->block_table ? k->meta[6] : NULL, reqs, in->bt_stride,
                            in->comp.block_size, in->comp.blocks};
  ck_assert_int_eq(hm_queue_create(a, 64, &k->q), HM_OK);
  ck_assert_int_eq(hm_chain_create(k->q, &k->c), HM_OK);
  ck_assert_msg(hm_k1_record(k1, k->c, &k->io) == HM_OK, "record: %s", hm_errmsg());
}

static void rec_destroy(hm_runtime *rt, rec_rank *k) {
  hm_chain_destroy(k->c);
  hm_queue_destroy(k->q);
  tl_stage_free(&k->st);
  for (int i = 0; i < IO_ALL; i++) hm_mem_free(rt, k->dev[i]);
  for (int i = 0; i < 7; i++) hm_mem_free(rt, k->meta[i]);
  hm_mem_free(rt, k->cache);
}

/* set c's seam state into the buffers */
static void rec_upload(rec_rank *k, const k1_case *c) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  tl_put_bf16(&k->st, k->dev[0], c->step.x, S * D);
  tl_put_bf16(&k->st, k->dev[1], c->step.res, S * 4 * D);
  tl_put(&k->st, k->dev[2], c->step.post, S * 16);
  tl_put(&k->st, k->dev[3], c->step.comb, S * 64);
  tl_put(&k->st, k->dev[4], c->step.pre, S * 16);
}

static void rec_download(rec_rank *k, const k1_case *c, hm_k1_outputs *o) {
  const uint64_t S = c->S, D = c->cfg.hidden;
  tl_get_bf16(&k->st, o->res, k->io.res_out, S * 4 * D);
  tl_get(&k->st, o->post, k->io.post_out, S * 16);
  tl_get(&k->st, o->comb, k->io.comb_out, S * 64);
  tl_get(&k->st, o->pre, k->io.pre_out, S * 16);
  tl_get_bf16(&k->st, o->q, k->io.q, S * c->H * 512);
  tl_get(&k->st, o->kt, k->io.kt, S * K1_KEYS * 4);
  tl_get(&k->st, o->klen, k->io.klen, S * 8);
  tl_get(&k->st, o->swa, k->cache, c->step.swa_bytes);
}

static bool same_outputs(const hm_k1_outputs *a, const hm_k1_outputs *b, const k1_case *c) {
  const size_t S = c->S, D = c->cfg.hidden;
  return !memcmp(a->res, b->res, S * 4 * D * 4) && !memcmp(a->post, b->post, S * 16) &&
         !memcmp(a->comb, b->comb, S * 64) && !memcmp(a->pre, b->pre, S * 16) &&
         !memcmp(a->q, b->q, S * c->H * 512 * 4) && !memcmp(a->kt, b->kt, S * K1_KEYS * 4) &&
         !memcmp(a->klen, b->klen, S * 8) && !memcmp(a->swa, b->swa, c->step.swa_bytes);
}

START_TEST(replays_bit_identical) {
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  const uint32_t TP = 2;
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[2];
  tl_build_group(&cfg, TP, 600, HM_WPART_ATTN, w);
  hm_k1_group *g;
  ck_assert_msg(hm_k1_group_create(rt, w, TP, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  /* each set once as a step (from the step's cache as generated), checked as run_case does */
  const shape sh = {2, 1, 70, 64, -1, 0};
  k1_case c[SETS];
  hm_k1_outputs got;
  for (uint32_t k = 0; k < SETS; k++) {
    case_make_seam(&c[k], w, TP, &sh, 600, k ? 600 + 100 * k : 0);
    ck_assert_msg(hm_k1_group_step(g, &c[k].step.in, 1, c[k].o, NULL) == HM_OK, "%s", hm_errmsg());
    expect_ranks_identical(&c[k]);
    expect_seam_exact(&c[k], &c[k].o[0]);
    expect_keys_exact(&c[k], &c[k].o[0]);
    expect_stages(rt, g, &c[k], w);
    expect_records_close(&c[k]);
    for (uint32_t j = 0; j < k; j++) ck_assert_msg(!same_outputs(&c[j].o[0], &c[k].o[0], &c[k]), "sets %u, %u alike", j, k);
  }
  outputs_alloc(&c[0], &got);
  rec_rank rec[2];
  uint32_t tag[2];
  for (uint32_t r = 0; r < TP; r++) {
    hm_k1 *k1 = hm_k1_group_rank(g, r);
    struct hm_k1_scratch_layout L;
    const uint8_t *scr = hm_k1_scratch(k1, sh.S, &L);
    rec_create(rt, k1, hm_k1_group_agent(g, r), &c[0], &rec[r]);
    /* the epoch buffer starts at 0 and each of the SETS steps advanced it by one */
    tag[r] = tl_get_u32(&rec[r].st, scr + L.xrdy);
    ck_assert_msg(tag[r] == 2 * (SETS - 1) + 1, "rank %u: tag %u after %u steps from epoch 0", r, tag[r], SETS);
  }
  const char *chaos = getenv("HSAMONO_SIM_CHAOS");
  const uint32_t replays = (chaos && *chaos ? 50 : 200) - SETS;
  uint32_t order[200];
  tl_replay_order(SETS, SETS - 1, 699, replays, order);
  for (uint32_t n = 0; n < replays; n++) {
    const uint32_t k = order[n];
    for (uint32_t r = 0; r < TP; r++) rec_upload(&rec[r], &c[k]);
    /* no peers: the chains in flight at once only so the ranks overlap */
    for (uint32_t r = 0; r < TP; r++) ck_assert_int_eq(hm_chain_replay(rec[r].c), HM_OK);
    for (uint32_t r = 0; r < TP; r++) {
      hm_k1 *k1 = hm_k1_group_rank(g, r);
      ck_assert_msg(hm_chain_wait(rec[r].c, 600000000000ull) == HM_OK && hm_queue_status(rec[r].q) == HM_OK,
                    "replay %u, rank %u: %s", n, r, hm_errmsg());
      struct hm_k1_scratch_layout L;
      const uint8_t *scr = hm_k1_scratch(k1, sh.S, &L);
      uint32_t t = tl_get_u32(&rec[r].st, scr + L.xrdy);
      ck_assert_msg(t == tag[r] + 2, "replay %u, rank %u: tag %u after %u: the epoch did not advance by one", n, r, t,
                    tag[r]);
      tag[r] = t;
      rec_download(&rec[r], &c[k], &got);
      if (!same_outputs(&got, &c[k].o[r], &c[k])) {
        int other = -1;
        for (uint32_t j = 0; j < SETS; j++)
          if (j != k && same_outputs(&got, &c[j].o[r], &c[j])) other = (int)j;
        if (other >= 0)
          ck_abort_msg("replay %u (set %u), rank %u: the outputs are set %d's, not this set's", n, k, r, other);
        ck_abort_msg("replay %u (set %u), rank %u: the outputs differ from every set's", n, k, r);
      }
    }
  }
  for (uint32_t r = 0; r < TP; r++) rec_destroy(rt, &rec[r]);
  hm_k1_group_destroy(g);
  for (uint32_t k = 0; k < SETS; k++) case_free(&c[k]);
  outputs_free(&got);
  tl_free_group(w, TP);
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- refusals and bad metadata */

static void expect_status(hm_status st, hm_status want, const char *needle) {
  ck_assert_msg(st == want, "status %d (want %d): %s", st, want, hm_errmsg());
  ck_assert_msg(strstr(hm_errmsg(), needle) != NULL, "message '%s' lacks '%s'", hm_errmsg(), needle);
}

/* Every index of the decode metadata is checked before the launch: a bad one is an error naming
 * the row and the index, and nothing is written (the cache and every output as they were). */
START_TEST(bad_metadata_refused) {
  hm_layer_config cfg = tl_config("tiny", 21, 0, 0);
  hm_runtime *rt = tl_open_sim();
  hm_layer_weights w[2];
  tl_build_group(&cfg, 2, 700, HM_WPART_ATTN, w);
  hm_k1_group *g;
  ck_assert_msg(hm_k1_group_create(rt, w, 2, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  const shape sh = {4, 1, 300, 64, -1, 0};
  k1_case c;
  case_make(&c, w, 2, &sh, 700);
  uint64_t cache = (uint64_t)c.step.in.swa.blocks * c.step.in.swa.block_size;
  struct { const char *what; int64_t *i64; int32_t *i32; int64_t bad; const char *needle; } cases[] = {
      {"slot past the cache", &c.step.slot[1], NULL, (int64_t)cache, "slot"},
      {"position past the RoPE table", &c.step.pos[2], NULL, 1 << 30, "position"},
      {"window index past the cache", NULL, &c.step.swa_idx[1 * HM_WINDOW + 3], (int32_t)cache, "window"},
      {"window length past 128", NULL, &c.step.swa_len[0], 129, "window"},
      {"request outside the block table", NULL, &c.step.t2r[3], -1, "request"},
      {"top-k id past the block table", NULL, &c.step.topk[2 * HM_TOPK_ATTN + 1], 1 << 28, "top-k"},
  };
  for (unsigned i = 0; i < sizeof cases / sizeof *cases; i++) {
    int64_t keep64 = cases[i].i64 ? *cases[i].i64 : 0;
    int32_t keep32 = cases[i].i32 ? *cases[i].i32 : 0;
    if (cases[i].i64) *cases[i].i64 = cases[i].bad;
    else *cases[i].i32 = (int32_t)cases[i].bad;
    for (uint32_t r = 0; r < 2; r++) memset(c.o[r].swa, 0xee, c.step.swa_bytes), memset(c.o[r].kt, 0xee, 4);
    hm_status st = hm_k1_group_step(g, &c.step.in, 1, c.o, NULL);
    ck_assert_msg(st == HM_ERR_INVALID_ARG, "%s: status %d (%s)", cases[i].what, st, hm_errmsg());
    ck_assert_msg(strstr(hm_errmsg(), cases[i].needle), "%s: message '%s'", cases[i].what, hm_errmsg());
    if (cases[i].i64) *cases[i].i64 = keep64;
    else *cases[i].i32 = keep32;
  }
  /* nothing ran: a good step now writes exactly what the reference says (its first step) */
  ck_assert_msg(hm_k1_group_step(g, &c.step.in, 1, c.o, NULL) == HM_OK, "%s", hm_errmsg());
  expect_seam_exact(&c, &c.o[0]);
  expect_keys_exact(&c, &c.o[0]);
  case_free(&c);
  hm_k1_group_destroy(g);
  tl_free_group(w, 2);
  hm_runtime_close(rt);
}
END_TEST

/* Creation refusals name their rule; on a gfx942 agent a TP2 group is refused (§5.1.3: gfx942 runs
 * TP 4 only; gfx942's own refusals are test_k1_942.c's). */
START_TEST(create_refusals) {
  hm_runtime *rt = tl_open_sim();
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w;
  tl_build_group(&cfg, 1, 800, HM_WPART_ATTN, &w);
  hm_k1 *k = NULL;
  expect_status(hm_k1_create(hm_agent_get(rt, 0), &w, &small_grid, &k), HM_ERR_REFUSED, "§5.1.3");
  ck_assert_ptr_null(k);
  tl_free_group(&w, 1);
  hm_layer_weights w2[2];
  tl_build_group(&cfg, 2, 800, HM_WPART_FFN, w2);
  expect_status(hm_k1_create(hm_agent_get(rt, 0), &w2[0], &small_grid, &k), HM_ERR_INVALID_ARG, "attention");
  tl_free_group(w2, 2);
  tl_build_group(&cfg, 2, 800, HM_WPART_ATTN, w2);
  hm_k1_config big = {.min_cus = 1000};
  expect_status(hm_k1_create(hm_agent_get(rt, 0), &w2[0], &big, &k), HM_ERR_REFUSED, "§5.1.6");
  ck_assert_int_eq(hm_k1_create(hm_agent_get(rt, 0), &w2[0], &small_grid, &k), HM_OK);
  hm_k1_io io = {.rows = 49};
  expect_status(hm_k1_accepts(k, &io), HM_ERR_REFUSED, "§5.3.1");
  io.rows = 1, io.prefills = 3;
  expect_status(hm_k1_accepts(k, &io), HM_ERR_REFUSED, "§5.3.4");
  hm_k1_destroy(k);
  tl_free_group(w2, 2);
  hm_runtime_close(rt);
  setenv("HSAMONO_SIM_ARCH", "gfx942", 1);
  rt = tl_open_sim();
  tl_build_group(&cfg, 2, 800, HM_WPART_ATTN, w2);
  expect_status(hm_k1_create(hm_agent_get(rt, 0), &w2[0], &small_grid, &k), HM_ERR_REFUSED, "§5.1.3: TP 2 on gfx942");
  tl_free_group(w2, 2);
  hm_runtime_close(rt);
  unsetenv("HSAMONO_SIM_ARCH");
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"create_refusals", create_refusals},   {"bad_metadata_refused", bad_metadata_refused},
      {"tiny_ratio2_tp2", tiny_ratio2_tp2},   {"tiny_ratio1_tp4", tiny_ratio1_tp4},
      {"tiny_ratio0", tiny_ratio0},           {"tiny_index_build", tiny_index_build},
      {"tiny_hard_cases", tiny_hard_cases},
      {"replays_bit_identical", replays_bit_identical}, {"full_dims_tp4", full_dims_tp4},
      {"full_dims_tp2", full_dims_tp2},       {"full_dims_index_build", full_dims_index_build},
  };
  return TL_SUITE("k1", tests, 1800);
}
