/* tests/layer/test_ref_stream.c: the reference with weights built from a source a rank at a time
 * (hm_ref_layer_step_source, hm_ref_ffn_launch_source, hm_ref_moe_source, hm_ref_k1_source): the held group's trace bit
 * for bit, one rank's FFN weights alive at once, a failed build leaving the trace as it was. */
#include <check.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void same_trace(const hm_tensor_set *a, const hm_tensor_set *b) {
  ck_assert_uint_eq(a->count, b->count);
  for (uint32_t i = 0; i < a->count; i++) {
    ck_assert_str_eq(a->t[i].name, b->t[i].name);
    ck_assert_uint_eq(a->t[i].nbytes, b->t[i].nbytes);
    ck_assert_msg(!memcmp(a->t[i].data, b->t[i].data, a->t[i].nbytes), "%s differs", a->t[i].name);
  }
}

/* One step of layer `layer` (tiny, 8 experts) at TP2, held and streamed, from the same generator. */
static void step_both(int32_t layer, uint32_t topk) {
  hm_layer_config c = tl_config("tiny", layer, 8, topk);
  hm_layer_weights w[2];
  tl_build_group(&c, 2, 5, 0, w);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 5), HM_OK);
  hm_source src = hm_gen_source(&g);
  hm_gen_step s[2];
  hm_select_state *sel[2] = {NULL, NULL};
  hm_tensor_set t[2];
  bool index = hm_config_has(&c, HM_ROLE_INDEX_SOURCE);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(hm_gen_step_make(&c, 2, 1, 200, 5, &s[i]), HM_OK);
    s[i].in.engram_table = &src;
    if (index) {
      ck_assert_int_eq(hm_select_state_new(&sel[i]), HM_OK);
      ck_assert_int_eq(hm_gen_step_seed_select(&s[i], &c, sel[i], 5), HM_OK);
    }
    hm_tset_init(&t[i]);
  }
  ck_assert_msg(hm_ref_layer_step(w, 2, &s[0].in, NULL, sel[0], &t[0]) == HM_OK, "%s", hm_errmsg());
  hm_build_opts o = {.parts = HM_WPART_FFN, .rope_positions = 1024}; /* parts ignored: the layer's all */
  ck_assert_msg(hm_ref_layer_step_source(&c, 2, &src, &o, &s[1].in, NULL, sel[1], &t[1]) == HM_OK, "%s", hm_errmsg());
  same_trace(&t[0], &t[1]);
  for (int i = 0; i < 2; i++) hm_tset_free(&t[i]), hm_gen_step_free(&s[i]), hm_select_state_free(sel[i]);
  hm_gen_free(&g);
  tl_free_group(w, 2);
}

/* an Engram layer, a kv + index source (select), a REUSE layer and a draft layer */
START_TEST(same_trace_as_held) {
  step_both(1, 6);
  step_both(2, 6);
  step_both(3, 6);
  step_both(40, 3);
  /* the FFN launch alone */
  hm_layer_config c = tl_config("tiny", 3, 8, 6);
  hm_layer_weights w[4];
  tl_build_group(&c, 4, 9, HM_WPART_FFN, w);
  tl_ffn_inputs in;
  tl_ffn_inputs_make(&c, 3, 4, 9, &in);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 9), HM_OK);
  hm_source src = hm_gen_source(&g);
  hm_tensor_set t[2];
  hm_tset_init(&t[0]), hm_tset_init(&t[1]);
  const float *const *p = (const float *const *)in.parts;
  ck_assert_int_eq(hm_ref_ffn_launch(w, 4, 3, p, in.res, in.post, in.comb, in.pre, &t[0]), HM_OK);
  ck_assert_msg(hm_ref_ffn_launch_source(&c, 4, &src, NULL, 3, p, in.res, in.post, in.comb, in.pre, &t[1]) == HM_OK,
                "%s", hm_errmsg());
  same_trace(&t[0], &t[1]);
  hm_tset_free(&t[0]), hm_tset_free(&t[1]);
  /* the MoE alone on the same normed rows (hsa-mono-check's x.own), each rank built in turn */
  hm_tset_init(&t[0]), hm_tset_init(&t[1]);
  ck_assert_int_eq(hm_ref_moe(w, 4, 3, in.a, &t[0]), HM_OK);
  ck_assert_msg(hm_ref_moe_source(&c, 4, &src, NULL, 3, in.a, &t[1]) == HM_OK, "%s", hm_errmsg());
  same_trace(&t[0], &t[1]);
  hm_tset_free(&t[0]), hm_tset_free(&t[1]);
  hm_gen_free(&g);
  tl_ffn_inputs_free(&in);
  tl_free_group(w, 4);
}
END_TEST

/* A source that notes the heap in use (malloc'd and mmap'd blocks) at every read, and refuses to
 * read one tensor if told. */
typedef struct metered {
  hm_source inner;
  size_t peak;
  const char *refuse;
} metered;

static size_t heap_in_use(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}
static hm_status m_info(void *ctx, const char *name, hm_dtype *dt, uint32_t *nd, uint64_t shape[2]) {
  metered *m = ctx;
  return m->inner.info(m->inner.ctx, name, dt, nd, shape);
}
static hm_status m_read(void *ctx, const char *name, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc, void *out) {
  metered *m = ctx;
  size_t h = heap_in_use();
  if (h > m->peak) m->peak = h;
  if (m->refuse && !strcmp(name, m->refuse)) return hm_fail(HM_ERR_IO, "metered: '%s' refused", name);
  return m->inner.read(m->inner.ctx, name, r0, nr, c0, nc, out);
}

static size_t set_bytes(const hm_layer_weights *w) {
  size_t n = 0;
  for (uint32_t i = 0; i < w->set.count; i++) n += w->set.t[i].nbytes;
  return n;
}

/* A TP4 step of a 64-expert layer: while the weights are read, the heap holds every rank's attention
 * weights and at most one rank's FFN weights (and the one being built), not the group's. Holding all
 * four ranks' FFN weights, as building the group first does, passes 3 of them by rank 3's read. A
 * build refused half way (rank 2's experts) leaves the trace as it was, and says why. */
START_TEST(one_rank_ffn_at_a_time) {
  hm_layer_config c = tl_config("tiny", 3, 64, 6);
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, &c, 3), HM_OK);
  metered m = {hm_gen_source(&g), 0, NULL};
  hm_source src = {&m, m_info, m_read};
  size_t attn = 0, ffn = 0;
  for (uint32_t r = 0; r < 4; r++) {
    hm_layer_weights w;
    hm_build_opts a = {.parts = HM_WPART_ATTN, .rope_positions = 1024}, f = {.parts = HM_WPART_FFN};
    ck_assert_int_eq(hm_weights_build(&c, 4, r, &src, &a, &w), HM_OK);
    attn += set_bytes(&w);
    hm_weights_free(&w);
    ck_assert_int_eq(hm_weights_build(&c, 4, r, &src, &f, &w), HM_OK);
    if (set_bytes(&w) > ffn) ffn = set_bytes(&w);
    hm_weights_free(&w);
  }
  hm_gen_step s;
  ck_assert_int_eq(hm_gen_step_make(&c, 2, 1, 200, 3, &s), HM_OK);
  hm_tensor_set t;
  hm_tset_init(&t);
  hm_build_opts o = {.rope_positions = 1024};
  size_t base = heap_in_use();
  m.peak = 0;
  ck_assert_msg(hm_ref_layer_step_source(&c, 4, &src, &o, &s.in, NULL, NULL, &t) == HM_OK, "%s", hm_errmsg());
  size_t bound = attn + ffn + ffn / 2 + (4u << 20); /* + the trace and staging: a few MB */
  ck_assert_msg(m.peak - base < bound, "%zu MB in use while reading (attention %zu MB, one rank's FFN %zu MB)",
                (m.peak - base) >> 20, attn >> 20, ffn >> 20);
  m.refuse = "layers.3.ffn.experts.5.w2.weight";
  hm_gen_step s2;
  ck_assert_int_eq(hm_gen_step_make(&c, 2, 1, 200, 3, &s2), HM_OK);
  hm_tensor_set t2;
  hm_tset_init(&t2);
  ck_assert_ptr_nonnull(hm_tset_new(&t2, "before", HM_DT_F32, 1, 0, 0, 0));
  ck_assert_int_eq(hm_ref_layer_step_source(&c, 4, &src, &o, &s2.in, NULL, NULL, &t2), HM_ERR_IO);
  ck_assert_msg(strstr(hm_errmsg(), "experts.5.w2") != NULL, "%s", hm_errmsg());
  ck_assert_uint_eq(t2.count, 1);
  hm_gen_step_free(&s), hm_gen_step_free(&s2);
  hm_tset_free(&t), hm_tset_free(&t2);
  hm_gen_free(&g);
}
END_TEST

/* K1 alone (hsa-mono-check k1's reference) with each rank's attention weights built in turn: the held
 * group's trace bit for bit, on an index source (tiny layer 2, the index build) and a REUSE layer (3)
 * at TP 4. */
START_TEST(k1_same_trace_as_held) {
  static const int32_t layers[] = {2, 3};
  for (unsigned l = 0; l < 2; l++) {
    hm_layer_config c = tl_config("tiny", layers[l], 0, 0);
    const bool index = hm_config_has(&c, HM_ROLE_INDEX_SOURCE);
    hm_layer_weights w[4];
    tl_build_group(&c, 4, 11, HM_WPART_ATTN, w);
    hm_gen g;
    ck_assert_int_eq(hm_gen_init(&g, &c, 11), HM_OK);
    hm_source src = hm_gen_source(&g);
    hm_gen_step s[2];
    hm_tensor_set t[2];
    for (int i = 0; i < 2; i++) {
      ck_assert_int_eq(hm_gen_step_make(&c, 3, 1, 200, 11, &s[i]), HM_OK);
      hm_tset_init(&t[i]);
    }
    hm_ref_k1_in in0 = {3, s[0].in.settled ? NULL : s[0].x, s[0].res, s[0].post, s[0].comb, s[0].pre, &s[0].in};
    hm_ref_k1_in in1 = {3, s[1].in.settled ? NULL : s[1].x, s[1].res, s[1].post, s[1].comb, s[1].pre, &s[1].in};
    ck_assert_msg(hm_ref_k1(w, 4, &in0, index, &t[0]) == HM_OK, "%s", hm_errmsg());
    hm_build_opts o = {.parts = HM_WPART_FFN, .rope_positions = TL_ROPE_POSITIONS}; /* parts: ATTN whatever */
    ck_assert_msg(hm_ref_k1_source(&c, 4, &src, &o, &in1, index, &t[1]) == HM_OK, "%s", hm_errmsg());
    same_trace(&t[0], &t[1]);
    ck_assert_ptr_nonnull(hm_tset_find(&t[1], "rank3.q"));
    ck_assert_msg(!memcmp(s[0].swa_buf, s[1].swa_buf, s[0].swa_bytes), "layer %d: the records", layers[l]);
    for (int i = 0; i < 2; i++) hm_tset_free(&t[i]), hm_gen_step_free(&s[i]);
    hm_gen_free(&g);
    tl_free_group(w, 4);
  }
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {{"same_trace_as_held", same_trace_as_held},
                           {"one_rank_ffn_at_a_time", one_rank_ffn_at_a_time},
                           {"k1_same_trace_as_held", k1_same_trace_as_held}};
  return TL_SUITE("layer-ref-stream", tests, 300);
}
