/* tests/layer/helpers.c: shared helpers of the layer tests: group weights, generated FFN-launch
 * inputs, error measures, staged device copies and input sets for replays with changing inputs. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "formats.h"
#include "helpers.h"
#include "hm_safetensors.h"
#include "kernels/ffn_args.h"

hm_layer_config tl_config(const char *model, int32_t layer, uint32_t experts, uint32_t topk) {
  hm_layer_config c;
  ck_assert_int_eq(hm_config_by_name(model, layer, &c), HM_OK);
  if (experts) ck_assert_int_eq(hm_config_set_experts(&c, experts, topk), HM_OK);
  return c;
}

void tl_build_group(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts, hm_layer_weights *w) {
  tl_build_group_arch(cfg, tp, seed, parts, HM_ARCH_GFX950, w);
}

void tl_build_group_arch(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts, hm_arch arch,
                         hm_layer_weights *w) {
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, cfg, seed), HM_OK);
  hm_source src = hm_gen_source(&g);
  hm_build_opts o = {.parts = parts, .rope_positions = TL_ROPE_POSITIONS, .arch = arch};
  for (uint32_t r = 0; r < tp; r++) {
    hm_status st = hm_weights_build(cfg, tp, r, &src, &o, &w[r]);
    ck_assert_msg(st == HM_OK, "build rank %u: %s", r, hm_errmsg());
  }
  hm_gen_free(&g);
}

void tl_free_group(hm_layer_weights *w, uint32_t tp) {
  for (uint32_t r = 0; r < tp; r++) hm_weights_free(&w[r]);
}

void tl_write_ckpt(const hm_layer_config *cfg, uint64_t seed, const char *dir, uint32_t shards) {
  hm_gen g;
  ck_assert_int_eq(hm_gen_init(&g, cfg, seed), HM_OK);
  hm_source gs = hm_gen_source(&g);
  for (uint32_t k = 0; k < shards; k++) {
    hm_tensor_set sh;
    hm_tset_init(&sh);
    for (uint32_t i = k; i < g.count; i += shards) {
      const hm_ckpt_entry *e = &g.schema[i];
      if (e->huge) continue;
      hm_tensor *t;
      ck_assert_int_eq(hm_tset_add(&sh, e->name, e->dtype, e->ndim, e->shape, &t), HM_OK);
      uint64_t rows = e->ndim == 2 ? e->shape[0] : 1, cols = e->ndim == 2 ? e->shape[1] : e->shape[0];
      ck_assert_int_eq(gs.read(gs.ctx, e->name, 0, rows, 0, cols, t->data), HM_OK);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/model-%05u-of-%05u.safetensors", dir, k + 1, shards);
    ck_assert_msg(hm_st_write(p, &sh, NULL, NULL, 0) == HM_OK, "%s", hm_errmsg());
    hm_tset_free(&sh);
  }
  hm_gen_free(&g);
}

void tl_patch_header(const char *path, const char *from, const char *to) {
  ck_assert_uint_eq(strlen(from), strlen(to));
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  uint8_t len[8];
  ck_assert_uint_eq(fread(len, 1, 8, f), 8);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | len[i];
  char *h = malloc(hl + 1);
  ck_assert_ptr_nonnull(h);
  ck_assert_uint_eq(fread(h, 1, hl, f), hl);
  h[hl] = 0;
  char *at = strstr(h, from);
  ck_assert_msg(at != NULL, "%s: no '%s' in the header", path, from);
  ck_assert_int_eq(fseek(f, 8 + (long)(at - h), SEEK_SET), 0);
  ck_assert_uint_eq(fwrite(to, 1, strlen(to), f), strlen(to));
  ck_assert_int_eq(fclose(f), 0);
  free(h);
}

void tl_ffn_inputs_make(const hm_layer_config *cfg, uint32_t S, uint32_t tp, uint64_t seed, tl_ffn_inputs *in) {
  memset(in, 0, sizeof *in);
  const uint32_t D = cfg->hidden;
  in->S = S, in->D = D, in->tp = tp;
  in->a = calloc((size_t)S * D, sizeof(float));
  in->res = calloc((size_t)S * HM_HC * D, sizeof(float));
  in->post = calloc((size_t)S * HM_HC, sizeof(float));
  in->comb = calloc((size_t)S * 16, sizeof(float));
  in->pre = calloc((size_t)S * HM_HC, sizeof(float));
  ck_assert(in->a && in->res && in->post && in->comb && in->pre);
  hm_gen_normal(seed, "test.a", (uint64_t)S * D, 0.0f, 1.0f, true, in->a);
  hm_gen_normal(seed, "test.res", (uint64_t)S * HM_HC * D, 0.0f, 4.0f, true, in->res);
  for (uint32_t r = 0; r < tp; r++) {
    in->parts[r] = calloc((size_t)S * D, sizeof(float));
    ck_assert(in->parts[r]);
    if (r == 0) memcpy(in->parts[0], in->a, (size_t)S * D * sizeof(float));
  }
  /* the attention seam's mixes as its gate makes them, from random mix logits */
  float *mix = calloc((size_t)S * HM_MIX, sizeof(float)), *sq = calloc(S, sizeof(float));
  float scale[3] = {1.0f, 1.0f, 1.0f}, base[HM_MIX];
  ck_assert(mix && sq);
  hm_gen_normal(seed, "test.mix", (uint64_t)S * HM_MIX, 0.0f, 1.0f, false, mix);
  for (int j = 0; j < HM_MIX; j++) base[j] = (j >= 8 && (j - 8) / 4 == (j - 8) % 4) ? 2.0f : 0.0f;
  for (uint32_t t = 0; t < S; t++) sq[t] = (float)(HM_HC * D); /* rms 1: the mixes as drawn */
  hm_ref_seam_gate(cfg, S, mix, sq, scale, base, in->pre, in->post, in->comb);
  free(mix);
  free(sq);
}

void tl_ffn_inputs_free(tl_ffn_inputs *in) {
  free(in->a), free(in->res), free(in->post), free(in->comb), free(in->pre);
  for (uint32_t r = 0; r < HM_LAYER_MAX_TP; r++) free(in->parts[r]);
  memset(in, 0, sizeof *in);
}

double tl_max_abs(const float *a, const float *b, uint64_t n) {
  double m = 0;
  for (uint64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
  }
  return m;
}
double tl_rel_l2(const float *a, const float *ref, uint64_t n) {
  double num = 0, den = 0;
  for (uint64_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}
double tl_cosine(const float *a, const float *b, uint64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (uint64_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
  return (aa > 0 && bb > 0) ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}
uint64_t tl_count_diff(const float *a, const float *b, uint64_t n) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; i++) c += fmt_bits(a[i]) != fmt_bits(b[i]);
  return c;
}

static void *tdata(const hm_tensor_set *s, const char *name, hm_dtype dt) {
  hm_tensor *t = hm_tset_find(s, name);
  ck_assert_msg(t != NULL, "trace has no '%s'", name);
  ck_assert_msg(t->dtype == dt, "'%s' has dtype %s", name, hm_dtype_st_name(t->dtype));
  return t->data;
}
float *tl_f32(const hm_tensor_set *s, const char *name) { return tdata(s, name, HM_DT_F32); }
int32_t *tl_i32(const hm_tensor_set *s, const char *name) { return tdata(s, name, HM_DT_I32); }
uint8_t *tl_u8(const hm_tensor_set *s, const char *name) {
  hm_tensor *t = hm_tset_find(s, name);
  ck_assert_msg(t != NULL, "trace has no '%s'", name);
  ck_assert(hm_dtype_size(t->dtype) == 1);
  return t->data;
}

int tl_is_bf16(float x) { return (fmt_bits(x) & 0xffffu) == 0; }


hm_runtime *tl_open_sim(void) {
  hm_runtime *rt;
  ck_assert_msg(hm_runtime_open("sim", &rt) == HM_OK, "sim: %s", hm_errmsg());
  return rt;
}

void *tl_fetch(hm_runtime *rt, hm_agent *a, const void *dev, size_t n) {
  void *stage, *out = malloc(n ? n : 1);
  ck_assert_ptr_nonnull(out);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_HOST, n, 0, &stage), HM_OK);
  hm_signal none = {0};
  ck_assert_int_eq(hm_mem_copy(rt, stage, dev, n, none), HM_OK);
  memcpy(out, stage, n);
  hm_mem_free(rt, stage);
  return out;
}

/* ---------------------------------------------------------------- replays with changing inputs */

void *tl_dev_alloc(hm_agent *a, size_t n) {
  void *p;
  ck_assert_msg(hm_mem_alloc(a, HM_POOL_COARSE, n, 256, &p) == HM_OK, "%zu device bytes: %s", n, hm_errmsg());
  ck_assert_int_eq(hm_mem_fill(hm_agent_runtime(a), p, 0, (n + 3) / 4), HM_OK);
  return p;
}

void *tl_host_alloc(hm_agent *a, size_t n) {
  void *p;
  ck_assert_msg(hm_mem_alloc(a, HM_POOL_HOST, n ? n : 4, 0, &p) == HM_OK, "%zu host bytes: %s", n, hm_errmsg());
  memset(p, 0, n);
  return p;
}

void tl_stage_init(tl_stage *s, hm_runtime *rt, hm_agent *a, size_t bytes) {
  s->rt = rt, s->bytes = bytes;
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_HOST, bytes, 0, &s->buf), HM_OK);
}

void tl_stage_free(tl_stage *s) {
  if (s->buf) hm_mem_free(s->rt, s->buf);
  s->buf = NULL;
}

/* in pieces of the stage's size */
void tl_put(const tl_stage *s, void *dev, const void *src, size_t n) {
  hm_signal none = {0};
  for (size_t o = 0; o < n; o += s->bytes) {
    size_t m = n - o < s->bytes ? n - o : s->bytes;
    memcpy(s->buf, (const char *)src + o, m);
    ck_assert_int_eq(hm_mem_copy(s->rt, (char *)dev + o, s->buf, m, none), HM_OK);
  }
}

void tl_get(const tl_stage *s, void *dst, const void *dev, size_t n) {
  hm_signal none = {0};
  for (size_t o = 0; o < n; o += s->bytes) {
    size_t m = n - o < s->bytes ? n - o : s->bytes;
    ck_assert_int_eq(hm_mem_copy(s->rt, s->buf, (const char *)dev + o, m, none), HM_OK);
    memcpy((char *)dst + o, s->buf, m);
  }
}

void tl_put_bf16(const tl_stage *s, void *dev, const float *src, uint64_t n) {
  hm_signal none = {0};
  const uint64_t per = s->bytes / 2;
  for (uint64_t o = 0; o < n; o += per) {
    uint64_t m = n - o < per ? n - o : per;
    uint16_t *b = s->buf;
    for (uint64_t i = 0; i < m; i++) b[i] = fmt_bf16_from_f32(src[o + i]);
    ck_assert_int_eq(hm_mem_copy(s->rt, (char *)dev + 2 * o, s->buf, (size_t)m * 2, none), HM_OK);
  }
}

void tl_get_bf16(const tl_stage *s, float *dst, const void *dev, uint64_t n) {
  hm_signal none = {0};
  const uint64_t per = s->bytes / 2;
  for (uint64_t o = 0; o < n; o += per) {
    uint64_t m = n - o < per ? n - o : per;
    ck_assert_int_eq(hm_mem_copy(s->rt, s->buf, (const char *)dev + 2 * o, (size_t)m * 2, none), HM_OK);
    const uint16_t *b = s->buf;
    for (uint64_t i = 0; i < m; i++) dst[o + i] = fmt_bf16_to_f32(b[i]);
  }
}

uint32_t tl_get_u32(const tl_stage *s, const void *dev) {
  uint32_t v;
  tl_get(s, &v, dev, 4);
  return v;
}

void tl_replay_order(uint32_t sets, uint32_t last, uint64_t seed, uint32_t n, uint32_t *order) {
  ck_assert_uint_ge(sets, 2);
  uint64_t x = seed;
  uint32_t prev = last;
  for (uint32_t i = 0; i < n; i++) {
    /* splitmix64: a step of 1 .. sets-1 past the previous set, so never the same one */
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    prev = (prev + 1u + (uint32_t)(z % (sets - 1u))) % sets;
    order[i] = prev;
  }
}

void tl_step_new_seam(hm_gen_step *s, const hm_layer_config *cfg, uint64_t seed) {
  const uint32_t S = s->in.S, D = cfg->hidden;
  tl_ffn_inputs fi;
  tl_ffn_inputs_make(cfg, S, 1, seed, &fi);
  memcpy(s->x, fi.a, (size_t)S * D * 4);
  memcpy(s->res, fi.res, (size_t)S * HM_HC * D * 4);
  memcpy(s->post, fi.post, (size_t)S * HM_HC * 4);
  memcpy(s->comb, fi.comb, (size_t)S * 16 * 4);
  memcpy(s->pre, fi.pre, (size_t)S * HM_HC * 4);
  tl_ffn_inputs_free(&fi);
}

uint32_t tl_cases_seen(const hm_gen_step *g, const hm_layer_config *cfg) {
  const uint32_t S = g->in.S, r = cfg->compress_ratio;
  uint32_t seen = 0;
  bool at0 = false, at1 = false;
  for (uint32_t t = 0; t < S; t++) {
    if (g->slot[t] < 0) {
      seen |= HM_GEN_PAD;
      continue;
    }
    bool first = true; /* the first live row of its request */
    for (uint32_t u = 0; u < t; u++) first = first && !(g->slot[u] >= 0 && g->t2r[u] == g->t2r[t]);
    if (first && r == 2 && g->pos[t] % 2) seen |= HM_GEN_STRADDLE;
    at0 = at0 || (first && g->pos[t] == 0);
    at1 = at1 || (first && g->pos[t] == 1);
    if (r && (g->pos[t] + 1) / r > HM_TOPK_ATTN) seen |= HM_GEN_LONG;
  }
  if (at0 && at1) seen |= HM_GEN_START;
  /* an OCP -0 byte among the compressed records' nope dims (data, then the block's scales) */
  const hm_kv_cache *c = &g->in.comp;
  for (uint64_t b = 0; r && c->base && b < c->blocks; b++)
    for (uint32_t o = 0; o < c->block_size; o++)
      for (uint32_t i = 0; i < HM_NOPE_DIM; i++)
        if (c->base[b * c->block_stride + (uint64_t)o * HM_RECORD_DATA + i] == 0x80u) seen |= HM_GEN_NEG_ZERO;
  return seen;
}

void tl_expect_cases(const hm_gen_step *g, const hm_layer_config *cfg, uint32_t want) {
  uint32_t miss = want & ~tl_cases_seen(g, cfg) & ~HM_GEN_DEAD_CHUNK;
  for (uint32_t i = 0; hm_gen_case_name(i); i++)
    ck_assert_msg(!(miss & (1u << i)), "layer %d: the generated step has no '%s' case", cfg->layer,
                  hm_gen_case_name(i));
}

bool tl_dead_chunk(const int32_t *kt, const int32_t *klen, uint32_t S, uint32_t ck) {
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t c0 = 0; c0 + ck <= (uint32_t)klen[t]; c0 += ck) {
      uint32_t k = 0;
      while (k < ck && kt[(size_t)t * HM_KEYS + c0 + k] == -1) k++;
      if (k == ck) return true;
    }
  return false;
}

void tl_ffn_outputs_alloc(hm_ffn_outputs *o, uint32_t tp, uint32_t S, uint32_t D) {
  for (uint32_t r = 0; r < tp; r++) {
    o[r].x = calloc((size_t)S * D, 4);
    o[r].res = calloc((size_t)S * 4 * D, 4);
    o[r].post = calloc((size_t)S * 4, 4);
    o[r].comb = calloc((size_t)S * 16, 4);
    o[r].pre = calloc((size_t)S * 4, 4);
    ck_assert(o[r].x && o[r].res && o[r].post && o[r].comb && o[r].pre);
  }
}

void tl_ffn_outputs_free(hm_ffn_outputs *o, uint32_t tp) {
  for (uint32_t r = 0; r < tp; r++) free(o[r].x), free(o[r].res), free(o[r].post), free(o[r].comb), free(o[r].pre);
}

Suite *tl_suite(const char *name, const tl_case *cases, unsigned n, double timeout_s) {
  Suite *s = suite_create(name);
  for (unsigned i = 0; i < n; i++) {
    TCase *tc = tcase_create(cases[i].name);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_test(tc, cases[i].t);
    suite_add_tcase(s, tc);
  }
  return s;
}

void tl_expect_status(hm_status st, hm_status want, const char *words) {
  ck_assert_msg(st == want, "expected %s (%s), got %s: %s", hm_status_name(want), words, hm_status_name(st),
                hm_errmsg());
  ck_assert_msg(strstr(hm_errmsg(), words) && !strchr(hm_errmsg(), '\n'), "the message does not say '%s': %s",
                words, hm_errmsg());
}

bool tl_expect_ug_halves(const uint8_t *scr, const struct hm_ffn_scratch_layout *L, const hm_tensor_set *ref,
                         uint32_t rank, const hm_layer_config *cfg, uint32_t tp, uint32_t S, uint32_t grid) {
  const uint32_t K = cfg->topk, E = cfg->experts, G = ffn_ug_groups_of(cfg->moe_inter / tp);
  char name[48];
  snprintf(name, sizeof name, "rank%u.routed.mid", rank);
  const float *mid = tl_f32(ref, name);
  const uint32_t I = (uint32_t)hm_tset_find(ref, name)->shape[2];
  const uint64_t *ids = (const uint64_t *)(scr + L->ids), *ugv = (const uint64_t *)(scr + L->ugv);
  const uint32_t tag = *(const uint32_t *)(scr + L->xrdy); /* every mailbox of the step carries it */
  /* the device's slot order (ffn_route_table): experts ascending, each one's picks by token */
  uint32_t count[FFN_MAX_E] = {0}, first[FFN_MAX_E], next[FFN_MAX_E] = {0}, pos = 0, tiles = 0;
  ck_assert_uint_le(E, FFN_MAX_E);
  for (uint32_t i = 0; i < S * K; i++) {
    ck_assert_uint_lt((uint32_t)ids[i], E);
    count[(uint32_t)ids[i]]++;
  }
  for (uint32_t e = 0; e < E; e++) first[e] = pos, pos += count[e], tiles += (count[e] + FFN_PICK_TILE - 1) / FFN_PICK_TILE;
  const bool split = 2 * tiles * G <= grid;
  uint64_t tagged = 0;
  for (uint32_t t = 0; t < S; t++)
    for (uint32_t k = 0; k < K; k++) {
      const uint32_t e = (uint32_t)ids[t * K + k], p = first[e] + next[e]++;
      for (uint32_t g = 0; g < G; g++)
        for (uint32_t q = 0; q < 16; q++) {
          const uint64_t pair = ugv[((uint64_t)p * G + g) * 16 + q];
          tagged += (uint32_t)(pair >> 32) == tag;
          if (!split) continue;
          const float want = mid[((uint64_t)t * K + k) * I + 32 * g + q];
          ck_assert_msg((uint32_t)(pair >> 32) == tag && (uint32_t)pair == fmt_bits(want),
                        "UGV token %u pick %u group %u column %u: 0x%08x tag %u, want %.9g (0x%08x) tag %u", t, k, g,
                        q, (uint32_t)pair, (uint32_t)(pair >> 32), want, fmt_bits(want), tag);
        }
    }
  ck_assert_msg(split || tagged == 0, "%u units on %u CTAs are not split, yet %llu UGV pairs carry the step's tag",
                tiles * G, grid, (unsigned long long)tagged);
  return split;
}

uint32_t tl_slot_tiles(const uint8_t *scr, const struct hm_ffn_scratch_layout *L, const hm_layer_config *cfg,
                       uint32_t S) {
  const uint64_t *ids = (const uint64_t *)(scr + L->ids);
  uint32_t count[FFN_MAX_E] = {0}, tiles = 0;
  ck_assert_uint_le(cfg->experts, FFN_MAX_E);
  for (uint32_t i = 0; i < S * cfg->topk; i++) {
    ck_assert_uint_lt((uint32_t)ids[i], cfg->experts);
    count[(uint32_t)ids[i]]++;
  }
  for (uint32_t e = 0; e < cfg->experts; e++) tiles += (count[e] + FFN_PICK_TILE - 1) / FFN_PICK_TILE;
  return tiles;
}

/* Hands out n tasks one at a time: the first `full` round the grid from base, the rest round the
 * first `width` CTAs from base; adds each CTA's count to ran[]. */
static void place_tasks(uint32_t grid, uint32_t base, uint32_t n, uint32_t full, uint32_t width, uint32_t *ran) {
  for (uint32_t i = 0; i < n; i++) ran[(base + (i < full ? i : (i - full) % width)) % grid]++;
}

bool tl_ffn_placement(const hm_layer_config *cfg, const hm_rank_dims *d, bool gfx942, uint32_t S, uint32_t tiles,
                      uint32_t grid, uint32_t *ug_ran, uint32_t *down_ran) {
  /* the stages before gate/up as device/ffn/launch.h places them: gate/up starts after the shared
   * expert's half-tasks (SH of them, 16 columns of a token tile each) */
  const uint32_t r0 = S > 8 ? S : 8, router = cfg->experts / 16 * 4 * ((S + 15) / 16);
  const uint32_t SH = d->shared_inter / 16 * ((S + 15) / 16), base = r0 + router + r0 + SH;
  const uint32_t G = ffn_ug_groups_of(d->inter), units = tiles * G, split = 2 * units <= grid;
  const uint32_t U = split ? 2 * units : units, Dn = cfg->hidden / 16, X = Dn % grid;
  /* bytes a CTA streams: a unit's w13 rows (64 of D/2 bytes) or a shared half-task's (32 of D), a
   * down task's w2 (16 rows of I/2 a slot tile) and sw2 (16 rows of Sh) */
  const uint64_t I = gfx942 ? d->inter : d->inter_pad; /* the launch's MID columns (gfx942: the real ones) */
  const uint64_t ub = 32ull * cfg->hidden, db = 8ull * I * tiles + 16ull * d->shared_inter;
  uint32_t *pu = calloc(grid, sizeof *pu), *pd = calloc(grid, sizeof *pd), *lu = calloc(grid, sizeof *lu),
           *ld = calloc(grid, sizeof *ld), *sh = calloc(grid, sizeof *sh);
  ck_assert(pu && pd && lu && ld && sh);
  place_tasks(grid, base - SH, SH, 0, grid, sh);
  place_tasks(grid, base, U, 0, grid, pu);
  place_tasks(grid, base + U, Dn, 0, grid, pd);
  /* lean: when a down task outweighs a unit and the units past q - 1 rounds fit twice round the CTAs
   * that run neither a second down task nor a shared half-task */
  const uint32_t q = U / grid, W = grid > X + SH ? grid - X - SH : 0;
  const bool lean = !split && X && q && W && db > ub && U - (q - 1) * grid <= 2 * W;
  if (lean) {
    place_tasks(grid, base, U, (q - 1) * grid, W, lu);
    place_tasks(grid, base + W, Dn, 0, grid, ld);
    /* the claim that makes it worth taking: its busiest CTA streams less */
    uint64_t plain = 0, leaner = 0;
    for (uint32_t c = 0; c < grid; c++) {
      const uint64_t p = (pu[c] + sh[c]) * ub + pd[c] * db, l = (lu[c] + sh[c]) * ub + ld[c] * db;
      plain = p > plain ? p : plain, leaner = l > leaner ? l : leaner;
    }
    ck_assert_msg(leaner < plain, "the lean placement's busiest CTA streams %llu bytes, round the grid's %llu",
                  (unsigned long long)leaner, (unsigned long long)plain);
  }
  memcpy(ug_ran, lean ? lu : pu, grid * sizeof *ug_ran);
  memcpy(down_ran, lean ? ld : pd, grid * sizeof *down_ran);
  free(pu), free(pd), free(lu), free(ld), free(sh);
  return lean;
}

bool tl_expect_ffn_placement(const hm_timeline *tl, const hm_layer_config *cfg, const hm_rank_dims *d, bool gfx942,
                             uint32_t S, uint32_t tiles, uint32_t ug_slot) {
  const uint32_t grid = tl->ctas;
  uint32_t *ug = calloc(grid, sizeof *ug), *down = calloc(grid, sizeof *down);
  ck_assert(ug && down);
  const bool lean = tl_ffn_placement(cfg, d, gfx942, S, tiles, grid, ug, down);
  for (uint32_t c = 0; c < grid; c++) {
    const hm_timeline_stamp *p = &tl->stamps[(size_t)c * tl->stride + ug_slot];
    ck_assert_msg(p[0].ran == ug[c] && p[1].ran == down[c],
                  "CTA %u ran %u gate/up and %u down tasks, the %s placement gives it %u and %u", c, p[0].ran,
                  p[1].ran, lean ? "lean" : "plain", ug[c], down[c]);
  }
  free(ug), free(down);
  return lean;
}
