/* tests/layer/test_group_source.c: a layer, FFN or K1 group that builds its ranks' weights from a source, one
 * rank at a time, keeping on the host only what a step's host work reads (hm_*_group_create_source). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "hm_k1_group.h"
#include "hm_layer_group.h"

static const hm_ffn_config small_grid = {.min_cus = 1};
static const hm_k1_config small_k1_grid = {.min_cus = 1};

/* A source passing the generator's reads through and noting which thread made them: a thread that
 * reads again after another has read is a build interleaved with another rank's. */
typedef struct watched {
  hm_source inner;
  pthread_mutex_t m;
  pthread_t seen[HM_LAYER_MAX_TP + 1];
  uint32_t runs;
  bool interleaved;
} watched;

static void note(watched *w) {
  pthread_mutex_lock(&w->m);
  pthread_t self = pthread_self();
  if (!w->runs || !pthread_equal(w->seen[w->runs - 1], self)) {
    for (uint32_t i = 0; i < w->runs && i <= HM_LAYER_MAX_TP; i++)
      w->interleaved |= pthread_equal(w->seen[i], self) != 0;
    if (w->runs <= HM_LAYER_MAX_TP) w->seen[w->runs] = self;
    w->runs++;
  }
  pthread_mutex_unlock(&w->m);
}
static hm_status w_info(void *ctx, const char *name, hm_dtype *dt, uint32_t *nd, uint64_t shape[2]) {
  watched *w = ctx;
  note(w);
  return w->inner.info(w->inner.ctx, name, dt, nd, shape);
}
static hm_status w_read(void *ctx, const char *name, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc, void *out) {
  watched *w = ctx;
  note(w);
  return w->inner.read(w->inner.ctx, name, r0, nr, c0, nc, out);
}

/* One step of S rows of the group on a fresh copy of the step (caches written in place), rank r's
 * outputs into o[r]. */
static void step_group(hm_layer_group *g, const hm_layer_config *c, const hm_gen_step *base, uint32_t tp,
                       const hm_source *table, uint64_t seed, hm_layer_outputs *o) {
  hm_gen_step s;
  ck_assert_int_eq(hm_gen_step_copy(base, &s), HM_OK);
  s.in.engram_table = table;
  if (hm_config_has(c, HM_ROLE_INDEX_SOURCE))
    for (uint32_t r = 0; r < tp; r++)
      ck_assert_int_eq(hm_gen_step_seed_select(&s, c, hm_layer_group_select_state(g, r), seed), HM_OK);
  ck_assert_msg(hm_layer_group_step(g, &s.in, 1, o, NULL) == HM_OK, "%s", hm_errmsg());
  hm_gen_step_free(&s);
}

static void outputs_alloc(hm_layer_outputs *o, uint32_t S, uint32_t D) {
  memset(o, 0, sizeof *o);
  o->x = calloc((size_t)S * D, 4), o->res = calloc((size_t)S * HM_HC * D, 4);
  o->post = calloc((size_t)S * HM_HC, 4), o->comb = calloc((size_t)S * 16, 4), o->pre = calloc((size_t)S * HM_HC, 4);
  o->topk = calloc((size_t)S * HM_TOPK_ATTN, 4);
  ck_assert(o->x && o->res && o->post && o->comb && o->pre && o->topk);
}
static void outputs_free(hm_layer_outputs *o) {
  free(o->x), free(o->res), free(o->post), free(o->comb), free(o->pre), free(o->topk);
}

/* Tiny layer 14 (kv + index source and Engram: the select and Engram host work read the kept
 * tensors) at TP 2: the group that built its weights from the generator steps the held group's
 * outputs bit for bit; each rank's weights were read in one run of the reads, never interleaved
 * with another rank's; the host keeps no tensor the launches hold, and what it keeps is the held
 * build's, byte for byte. */
START_TEST(same_as_held) {
  const uint32_t TP = 2, S = 4;
  const uint64_t seed = 31;
  hm_layer_config c = tl_config("tiny", 14, 0, 0);
  ck_assert(hm_config_has(&c, HM_ROLE_ENGRAM) && hm_config_has(&c, HM_ROLE_KV_SOURCE));
  const uint32_t parts = HM_WPART_ALL;
  hm_runtime *rt = tl_open_sim();
  hm_gen gen;
  ck_assert_int_eq(hm_gen_init(&gen, &c, seed), HM_OK);
  hm_source table = hm_gen_source(&gen);
  hm_gen_step base;
  ck_assert_int_eq(hm_gen_step_make_block(&c, S, 1, 60, 64, seed, &base), HM_OK);
  hm_layer_outputs o[2][2];
  for (int k = 0; k < 2; k++)
    for (uint32_t r = 0; r < TP; r++) outputs_alloc(&o[k][r], S, c.hidden);

  hm_layer_weights held[2];
  tl_build_group(&c, TP, seed, parts, held);
  hm_layer_group *g;
  ck_assert_msg(hm_layer_group_create(rt, held, TP, &small_grid, NULL, &g) == HM_OK, "%s", hm_errmsg());
  step_group(g, &c, &base, TP, &table, seed, o[0]);
  hm_layer_group_destroy(g);

  watched w = {.inner = hm_gen_source(&gen)};
  pthread_mutex_init(&w.m, NULL);
  hm_source src = {&w, w_info, w_read};
  hm_build_opts bo = {.parts = parts, .rope_positions = TL_ROPE_POSITIONS}; /* as tl_build_group's */
  ck_assert_msg(hm_layer_group_create_source(rt, &c, TP, &src, &bo, &small_grid, NULL, &g) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(!w.interleaved && w.runs == TP, "the ranks' builds interleaved: %u runs of reads for %u ranks", w.runs,
                TP);
  static const char *const uploaded[] = {"w13", "w13_s", "w2", "w2_s", "sgu", "sgu_s", "sw2", "sw2_s", "wqkv",
                                         "wqkv_s", "wq_b", "wq_b_s", "wo_a", "wo_a_s", "wo_b", "wo_b_s", "gate_w",
                                         "hc_attn_fn", "hc_ffn_fn"};
  const unsigned nup = sizeof uploaded / sizeof *uploaded;
  for (uint32_t r = 0; r < TP; r++) {
    const hm_layer_weights *k = hm_layer_group_weights(g, 0, r);
    ck_assert_ptr_nonnull(k);
    ck_assert_uint_eq(k->rank, r);
    for (unsigned i = 0; i < nup; i++)
      ck_assert_msg(!hm_tset_find(&k->set, uploaded[i]), "rank %u keeps %s on the host", r, uploaded[i]);
    ck_assert_uint_eq(k->set.count, held[r].set.count - nup);
    for (uint32_t i = 0; i < k->set.count; i++) {
      const hm_tensor *t = &k->set.t[i], *h = hm_tset_find(&held[r].set, t->name);
      ck_assert_msg(h && h->nbytes == t->nbytes && !memcmp(h->data, t->data, t->nbytes), "rank %u's %s", r, t->name);
    }
  }
  step_group(g, &c, &base, TP, &table, seed, o[1]);
  hm_layer_group_destroy(g);
  pthread_mutex_destroy(&w.m);

  for (uint32_t r = 0; r < TP; r++) {
    ck_assert_msg(!memcmp(o[0][r].x, o[1][r].x, (size_t)S * c.hidden * 4), "rank %u x", r);
    ck_assert_msg(!memcmp(o[0][r].res, o[1][r].res, (size_t)S * HM_HC * c.hidden * 4), "rank %u res", r);
    ck_assert_msg(!memcmp(o[0][r].post, o[1][r].post, (size_t)S * HM_HC * 4) &&
                      !memcmp(o[0][r].comb, o[1][r].comb, (size_t)S * 64) &&
                      !memcmp(o[0][r].pre, o[1][r].pre, (size_t)S * HM_HC * 4),
                  "rank %u mixes", r);
    ck_assert_msg(!memcmp(o[0][r].topk, o[1][r].topk, (size_t)S * HM_TOPK_ATTN * 4), "rank %u top-k", r);
  }
  for (int k = 0; k < 2; k++)
    for (uint32_t r = 0; r < TP; r++) outputs_free(&o[k][r]);
  tl_free_group(held, TP);
  hm_gen_step_free(&base);
  hm_gen_free(&gen);
  hm_runtime_close(rt);
}
END_TEST

/* A build that fails on one rank (a tensor the source refuses) fails the group with its reason and
 * leaves nothing: the runtime closes (nothing of the group holds it). */
static hm_status refusing_read(void *ctx, const char *name, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc,
                               void *out) {
  hm_source *inner = ctx;
  if (strstr(name, "ffn.experts.3.w2.weight")) return hm_fail(HM_ERR_IO, "test source: '%s' refused", name);
  return inner->read(inner->ctx, name, r0, nr, c0, nc, out);
}
static hm_status pass_info(void *ctx, const char *name, hm_dtype *dt, uint32_t *nd, uint64_t shape[2]) {
  hm_source *inner = ctx;
  return inner->info(inner->ctx, name, dt, nd, shape);
}

START_TEST(failed_build) {
  hm_layer_config c = tl_config("tiny", 3, 8, 6);
  hm_runtime *rt = tl_open_sim();
  hm_gen gen;
  ck_assert_int_eq(hm_gen_init(&gen, &c, 5), HM_OK);
  hm_source inner = hm_gen_source(&gen), src = {&inner, pass_info, refusing_read};
  hm_layer_group *g = (hm_layer_group *)&g;
  ck_assert_int_eq(hm_layer_group_create_source(rt, &c, 2, &src, NULL, &small_grid, NULL, &g), HM_ERR_IO);
  ck_assert_msg(strstr(hm_errmsg(), "ffn.experts.3.w2.weight") != NULL, "%s", hm_errmsg());
  ck_assert_ptr_null(g);
  ck_assert_int_eq(hm_runtime_close(rt), HM_OK);
  hm_gen_free(&gen);
}
END_TEST

/* The tensors a launch holds on its device, which a group built from a source drops from the host. */
static const char *const uploaded[] = {"w13",  "w13_s",  "w2",   "w2_s",   "sgu",  "sgu_s",  "sw2",
                                       "sw2_s", "wqkv", "wqkv_s", "wq_b", "wq_b_s", "wo_a", "wo_a_s",
                                       "wo_b", "wo_b_s", "gate_w", "hc_attn_fn", "hc_ffn_fn"};

/* Rank r's weights as a source-built group keeps them (k) against the held build's (h): none of the
 * uploaded tensors, every other one the held build's byte for byte. */
static void kept_only_rest(const hm_layer_weights *k, const hm_layer_weights *h, uint32_t r) {
  ck_assert_ptr_nonnull(k);
  ck_assert_uint_eq(k->rank, r);
  unsigned held_uploaded = 0;
  for (unsigned i = 0; i < sizeof uploaded / sizeof *uploaded; i++) {
    ck_assert_msg(!hm_tset_find(&k->set, uploaded[i]), "rank %u keeps %s on the host", r, uploaded[i]);
    held_uploaded += hm_tset_find(&h->set, uploaded[i]) != NULL;
  }
  ck_assert_uint_eq(k->set.count, h->set.count - held_uploaded);
  for (uint32_t i = 0; i < k->set.count; i++) {
    const hm_tensor *t = &k->set.t[i], *o = hm_tset_find(&h->set, t->name);
    ck_assert_msg(o && o->nbytes == t->nbytes && !memcmp(o->data, t->data, t->nbytes), "rank %u's %s", r, t->name);
  }
}

/* The FFN group (hsa-mono-check ffn's) built from the generator through a watching source, tiny layer
 * 3 at TP 4: each rank's weights read in one run of reads, never interleaved with another rank's; the
 * host keeps no tensor the launches hold; a step's outputs are the held group's bit for bit. */
START_TEST(ffn_same_as_held) {
  const uint32_t TP = 4, S = 5;
  const uint64_t seed = 13;
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  const uint32_t D = c.hidden;
  hm_runtime *rt = tl_open_sim();
  hm_gen gen;
  ck_assert_int_eq(hm_gen_init(&gen, &c, seed), HM_OK);
  /* inputs as hsa-mono-check ffn makes them */
  float *res = malloc(4 * (size_t)S * 4 * D), *post = malloc(16 * S), *comb = malloc(64 * S), *pre = malloc(16 * S);
  float *parts[4];
  hm_ffn_inputs in = {.rows = S, .res = res, .post = post, .comb = comb, .pre = pre};
  hm_gen_normal(seed, "t.res", (uint64_t)S * 4 * D, 0.0f, 4.0f, true, res);
  hm_gen_normal(seed, "t.post", (uint64_t)S * 4, 1.0f, 0.2f, false, post);
  hm_gen_normal(seed, "t.pre", (uint64_t)S * 4, 0.5f, 0.1f, false, pre);
  for (uint32_t i = 0; i < S * 16; i++) comb[i] = i % 5 == 0 ? 0.7f : 0.1f;
  for (uint32_t r = 0; r < TP; r++) {
    char n[16];
    snprintf(n, sizeof n, "t.part%u", r);
    parts[r] = malloc(4 * (size_t)S * D);
    hm_gen_normal(seed, n, (uint64_t)S * D, 0.0f, 0.5f, true, parts[r]);
    in.parts[r] = parts[r];
  }
  hm_ffn_outputs o[2][4];
  for (int k = 0; k < 2; k++)
    for (uint32_t r = 0; r < TP; r++)
      o[k][r] = (hm_ffn_outputs){calloc((size_t)S * D, 4), calloc((size_t)S * 4 * D, 4), calloc(S * 4, 4),
                                 calloc(S * 16, 4), calloc(S * 4, 4)};

  hm_layer_weights held[4];
  tl_build_group(&c, TP, seed, HM_WPART_FFN, held);
  hm_ffn_group *g;
  ck_assert_msg(hm_ffn_group_create(rt, held, TP, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(hm_ffn_group_step(g, &in, 1, o[0], NULL) == HM_OK, "%s", hm_errmsg());
  hm_ffn_group_destroy(g);

  watched w = {.inner = hm_gen_source(&gen)};
  pthread_mutex_init(&w.m, NULL);
  hm_source src = {&w, w_info, w_read};
  /* as tl_build_group's; the parts are the group's own (FFN) whatever these say */
  hm_build_opts bo = {.parts = HM_WPART_ALL, .rope_positions = TL_ROPE_POSITIONS};
  ck_assert_msg(hm_ffn_group_create_source(rt, &c, TP, &src, &bo, &small_grid, &g) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(!w.interleaved && w.runs == TP, "the ranks' builds interleaved: %u runs of reads for %u ranks", w.runs,
                TP);
  for (uint32_t r = 0; r < TP; r++) kept_only_rest(hm_ffn_group_weights(g, r), &held[r], r);
  ck_assert_msg(hm_ffn_group_step(g, &in, 1, o[1], NULL) == HM_OK, "%s", hm_errmsg());
  hm_ffn_group_destroy(g);
  pthread_mutex_destroy(&w.m);

  for (uint32_t r = 0; r < TP; r++) {
    ck_assert_msg(!memcmp(o[0][r].x, o[1][r].x, (size_t)S * D * 4), "rank %u x", r);
    ck_assert_msg(!memcmp(o[0][r].res, o[1][r].res, (size_t)S * 4 * D * 4), "rank %u res", r);
    ck_assert_msg(!memcmp(o[0][r].post, o[1][r].post, S * 16) && !memcmp(o[0][r].comb, o[1][r].comb, S * 64) &&
                      !memcmp(o[0][r].pre, o[1][r].pre, S * 16),
                  "rank %u mixes", r);
  }
  for (int k = 0; k < 2; k++)
    for (uint32_t r = 0; r < TP; r++)
      free(o[k][r].x), free(o[k][r].res), free(o[k][r].post), free(o[k][r].comb), free(o[k][r].pre);
  for (uint32_t r = 0; r < TP; r++) free(parts[r]);
  free(res), free(post), free(comb), free(pre);
  tl_free_group(held, TP);
  hm_gen_free(&gen);
  ck_assert_int_eq(hm_runtime_close(rt), HM_OK);
}
END_TEST

/* K1's group (hsa-mono-check k1's) the same way, on tiny layer 2 (an index source: K1's index build)
 * at TP 2: reads a rank at a time, no uploaded tensor kept, the step's outputs (seam, every rank's q,
 * x_out, qr_out, the SWA cache) the held group's bit for bit. */
START_TEST(k1_same_as_held) {
  const uint32_t TP = 2, S = 3;
  const uint64_t seed = 17;
  hm_layer_config c = tl_config("tiny", 2, 0, 0);
  ck_assert(hm_config_has(&c, HM_ROLE_INDEX_SOURCE));
  const uint32_t D = c.hidden;
  hm_runtime *rt = tl_open_sim();
  hm_gen gen;
  ck_assert_int_eq(hm_gen_init(&gen, &c, seed), HM_OK);
  hm_gen_step step;
  ck_assert_int_eq(hm_gen_step_make_block(&c, S, 1, 70, 64, seed, &step), HM_OK);
  hm_layer_weights held[2];
  tl_build_group(&c, TP, seed, HM_WPART_ATTN, held);
  const uint32_t H = held[0].dims.heads;
  hm_k1_outputs o[2][2];
  for (int k = 0; k < 2; k++)
    for (uint32_t r = 0; r < TP; r++)
      o[k][r] = (hm_k1_outputs){.res = calloc((size_t)S * 4 * D, 4), .post = calloc(S * 4, 4),
                                .comb = calloc(S * 16, 4), .pre = calloc(S * 4, 4),
                                .q = calloc((size_t)S * H * HM_HEAD_DIM, 4), .x_out = calloc((size_t)S * D, 4),
                                .qr_out = calloc((size_t)S * c.q_lora, 4), .swa = calloc(step.swa_bytes, 1)};
  hm_k1_group *g;
  ck_assert_msg(hm_k1_group_create(rt, held, TP, &small_k1_grid, &g) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(hm_k1_group_step(g, &step.in, 1, o[0], NULL) == HM_OK, "%s", hm_errmsg());
  hm_k1_group_destroy(g);

  watched w = {.inner = hm_gen_source(&gen)};
  pthread_mutex_init(&w.m, NULL);
  hm_source src = {&w, w_info, w_read};
  hm_build_opts bo = {.parts = HM_WPART_FFN, .rope_positions = TL_ROPE_POSITIONS}; /* parts: the group's (ATTN) */
  ck_assert_msg(hm_k1_group_create_source(rt, &c, TP, &src, &bo, &small_k1_grid, &g) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(!w.interleaved && w.runs == TP, "the ranks' builds interleaved: %u runs of reads for %u ranks", w.runs,
                TP);
  for (uint32_t r = 0; r < TP; r++) kept_only_rest(hm_k1_group_weights(g, r), &held[r], r);
  ck_assert_msg(hm_k1_group_step(g, &step.in, 1, o[1], NULL) == HM_OK, "%s", hm_errmsg());
  hm_k1_group_destroy(g);
  pthread_mutex_destroy(&w.m);

  for (uint32_t r = 0; r < TP; r++) {
    ck_assert_msg(!memcmp(o[0][r].res, o[1][r].res, (size_t)S * 4 * D * 4), "rank %u res", r);
    ck_assert_msg(!memcmp(o[0][r].post, o[1][r].post, S * 16) && !memcmp(o[0][r].comb, o[1][r].comb, S * 64) &&
                      !memcmp(o[0][r].pre, o[1][r].pre, S * 16),
                  "rank %u mixes", r);
    ck_assert_msg(!memcmp(o[0][r].q, o[1][r].q, (size_t)S * H * HM_HEAD_DIM * 4), "rank %u q", r);
    ck_assert_msg(!memcmp(o[0][r].x_out, o[1][r].x_out, (size_t)S * D * 4) &&
                      !memcmp(o[0][r].qr_out, o[1][r].qr_out, (size_t)S * c.q_lora * 4),
                  "rank %u index build rows", r);
    ck_assert_msg(!memcmp(o[0][r].swa, o[1][r].swa, step.swa_bytes), "rank %u records", r);
  }
  for (int k = 0; k < 2; k++)
    for (uint32_t r = 0; r < TP; r++) {
      hm_k1_outputs *p = &o[k][r];
      free(p->res), free(p->post), free(p->comb), free(p->pre), free(p->q), free(p->x_out), free(p->qr_out);
      free(p->swa);
    }
  tl_free_group(held, TP);
  hm_gen_step_free(&step);
  hm_gen_free(&gen);
  ck_assert_int_eq(hm_runtime_close(rt), HM_OK);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {{"same_as_held", same_as_held}, {"failed_build", failed_build},
                           {"ffn_same_as_held", ffn_same_as_held}, {"k1_same_as_held", k1_same_as_held}};
  return TL_SUITE("layer-group-source", tests, 300);
}
