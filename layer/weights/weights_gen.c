/* layer/weights/weights_gen.c: a layer's checkpoint tensor list (names and shapes, spec/model.md §1.3) and
 * the seeded generator that fills it with realistic values, any slice computable on its own. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "hm_weights.h"

/* ---------------------------------------------------------------- schema */

typedef struct schema_builder {
  hm_ckpt_entry *list;
  uint32_t count, cap;
  char prefix[32];
  hm_status st;
} schema_builder;

static void add(schema_builder *b, uint32_t part, const char *suffix, hm_dtype dt, uint64_t d0, uint64_t d1) {
  if (b->st != HM_OK) return;
  if (b->count == b->cap) {
    uint32_t cap = b->cap ? b->cap * 2 : 64;
    hm_ckpt_entry *l = realloc(b->list, cap * sizeof *l);
    if (!l) {
      b->st = hm_fail(HM_ERR_NO_MEMORY, "checkpoint schema");
      return;
    }
    b->list = l;
    b->cap = cap;
  }
  hm_ckpt_entry *e = &b->list[b->count++];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s%s", b->prefix, suffix);
  e->dtype = dt;
  e->ndim = d1 ? 2 : 1;
  e->shape[0] = d0;
  e->shape[1] = d1;
  e->part = part;
}
/* an MXFP8 linear: e4m3 [n, k] + E8M0 [n/32, k/32] (V4.1: 32x32 blocks, model.md §7.2) */
static void add_mx8(schema_builder *b, uint32_t part, const char *base, uint64_t n, uint64_t k) {
  char s[HM_TENSOR_NAME];
  snprintf(s, sizeof s, "%s.weight", base);
  add(b, part, s, HM_DT_E4M3, n, k);
  snprintf(s, sizeof s, "%s.scale", base);
  add(b, part, s, HM_DT_E8M0, n / 32, k / 32);
}
/* an MXFP4 expert matrix: packed e2m1 [n, k/2] ("I8") + E8M0 [n, k/32] */
static void add_mx4(schema_builder *b, const char *base, uint64_t n, uint64_t k) {
  char s[HM_TENSOR_NAME];
  snprintf(s, sizeof s, "%s.weight", base);
  add(b, HM_WPART_FFN, s, HM_DT_I8, n, k / 2);
  snprintf(s, sizeof s, "%s.scale", base);
  add(b, HM_WPART_FFN, s, HM_DT_E8M0, n, k / 32);
}

/* Σ of the 24 primes of each Engram layer's tables (model.md §8) */
static const uint64_t engram_rows[2] = {384006168ull, 384016682ull};

hm_status hm_ckpt_schema(const hm_layer_config *cfg, hm_ckpt_entry **list, uint32_t *count) {
  if (!cfg || !list || !count) return hm_fail(HM_ERR_INVALID_ARG, "hm_ckpt_schema: null argument");
  hm_status st = hm_config_check(cfg);
  if (st != HM_OK) return st;
  schema_builder b = {0};
  b.st = HM_OK;
  hm_config_prefix(cfg, b.prefix, sizeof b.prefix);
  const uint64_t D = cfg->hidden, Q = cfg->q_lora, H = cfg->heads;
  const uint32_t A = HM_WPART_ATTN, F = HM_WPART_FFN, S = HM_WPART_SELECT, G = HM_WPART_ENGRAM;
  add(&b, A, "hc_attn_fn", HM_DT_F32, HM_MIX, HM_HC * D);
  add(&b, A, "hc_attn_scale", HM_DT_F32, 3, 0);
  add(&b, A, "hc_attn_base", HM_DT_F32, HM_MIX, 0);
  add(&b, A, "attn_norm.weight", HM_DT_BF16, D, 0);
  add_mx8(&b, A, "attn.wq_a", Q, D);
  add_mx8(&b, A, "attn.wkv", cfg->kv_dim, D);
  add(&b, A, "attn.q_norm.weight", HM_DT_BF16, Q, 0);
  add(&b, A, "attn.kv_norm.weight", HM_DT_BF16, cfg->kv_dim, 0);
  add_mx8(&b, A, "attn.wq_b", H * cfg->head_dim, Q);
  add_mx8(&b, A, "attn.wo_a", (uint64_t)cfg->o_groups * cfg->o_lora, HM_HEADS_PER_GROUP * cfg->head_dim);
  add_mx8(&b, A, "attn.wo_b", D, (uint64_t)cfg->o_groups * cfg->o_lora);
  add(&b, A, "attn.attn_sink", HM_DT_F32, H, 0);
  add(&b, F, "hc_ffn_fn", HM_DT_F32, HM_MIX, HM_HC * D);
  add(&b, F, "hc_ffn_scale", HM_DT_F32, 3, 0);
  add(&b, F, "hc_ffn_base", HM_DT_F32, HM_MIX, 0);
  add(&b, F, "ffn_norm.weight", HM_DT_BF16, D, 0);
  add(&b, F, "ffn.gate.weight", HM_DT_BF16, cfg->experts, D);
  add(&b, F, "ffn.gate.bias", HM_DT_F32, cfg->experts, 0);
  for (uint32_t e = 0; e < cfg->experts; e++) {
    char base[64];
    snprintf(base, sizeof base, "ffn.experts.%u.w1", e);
    add_mx4(&b, base, cfg->moe_inter, D);
    snprintf(base, sizeof base, "ffn.experts.%u.w2", e);
    add_mx4(&b, base, D, cfg->moe_inter);
    snprintf(base, sizeof base, "ffn.experts.%u.w3", e);
    add_mx4(&b, base, cfg->moe_inter, D);
  }
  add_mx8(&b, F, "ffn.shared_experts.w1", cfg->shared_inter, D);
  add_mx8(&b, F, "ffn.shared_experts.w2", D, cfg->shared_inter);
  add_mx8(&b, F, "ffn.shared_experts.w3", cfg->shared_inter, D);
  if (hm_config_has(cfg, HM_ROLE_KV_SOURCE)) {
    /* V4.1 compressor: bf16 wkv (ratio 1), + wgate (ratio 2), no ape (model.md §7.2) */
    add(&b, S, "attn.compressor.wkv.weight", HM_DT_BF16, cfg->kv_dim, D);
    if (cfg->compress_ratio == 2) add(&b, S, "attn.compressor.wgate.weight", HM_DT_BF16, cfg->kv_dim, D);
    add(&b, S, "attn.compressor.norm.weight", HM_DT_BF16, cfg->kv_dim, 0);
    add(&b, S, "attn.indexer.wk.weight", HM_DT_BF16, cfg->index_head_dim, cfg->kv_dim);
    add(&b, S, "attn.indexer.k_norm.weight", HM_DT_BF16, cfg->index_head_dim, 0);
  }
  if (hm_config_has(cfg, HM_ROLE_INDEX_SOURCE)) {
    add_mx8(&b, S, "attn.indexer.wq_b", (uint64_t)cfg->index_heads * cfg->index_head_dim, Q);
    add(&b, S, "attn.indexer.weights_proj.weight", HM_DT_BF16, cfg->index_heads, D);
  }
  if (hm_config_has(cfg, HM_ROLE_ENGRAM)) {
    uint64_t rows = (uint64_t)cfg->engram_heads * cfg->engram_ngram;
    add_mx8(&b, G, "engram.wkv", D * (HM_HC + 1), rows * cfg->engram_head_dim);
    add(&b, G, "engram.q_weight", HM_DT_BF16, HM_HC, D);
    add(&b, G, "engram.k_weight", HM_DT_BF16, HM_HC, D);
    /* the table: fp8 rows with one E8M0 per 32 of a row (model.md §8, §11 q1) */
    add(&b, G, "engram.embed.weight", HM_DT_E4M3, engram_rows[cfg->engram_index], cfg->engram_head_dim);
    b.list[b.count - 1].huge = true;
    add(&b, G, "engram.embed.scale", HM_DT_E8M0, engram_rows[cfg->engram_index], cfg->engram_head_dim / 32);
    b.list[b.count - 1].huge = true;
  }
  if (b.st != HM_OK) {
    free(b.list);
    return b.st;
  }
  *list = b.list;
  *count = b.count;
  return HM_OK;
}

/* ---------------------------------------------------------------- random numbers */

static uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static uint64_t name_hash(uint64_t seed, const char *s) {
  uint64_t h = 0xcbf29ce484222325ull ^ splitmix(seed);
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return splitmix(h);
}

/* MX elements are quantised normals at a fixed level (e4m3: z*100, a 32x32 block's largest
 * |z| of ~3.4 lands near 340 < 448; e2m1: z*2.2, a 32-element max of ~2.1 near 4.6 < 6) */
#define MX8_LEVEL 100.0f
#define MX4_LEVEL 2.2f

/* Exact normal quantiles at (i + 0.5) / 65536: a 16-bit draw becomes a normal sample with
 * tails to 4.3 sigma, four draws a 64-bit hash. */
static float normal_table[65536];
static uint8_t mx8_table[65536], mx4_table[65536]; /* the MX element codes of each draw */
static pthread_once_t normal_once = PTHREAD_ONCE_INIT;
static void normal_init(void) {
  for (int i = 0; i < 32768; i++) {
    double p = (i + 0.5) / 65536.0; /* lower tail: solve 0.5 * erfc(-z / sqrt 2) = p */
    double lo = -10.0, hi = 0.0;
    for (int it = 0; it < 80; it++) {
      double mid = 0.5 * (lo + hi);
      if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid;
      else hi = mid;
    }
    float z = (float)(0.5 * (lo + hi));
    normal_table[i] = z;
    normal_table[65535 - i] = -z;
  }
  for (int i = 0; i < 65536; i++) {
    mx8_table[i] = fmt_e4m3_encode(normal_table[i] * MX8_LEVEL);
    mx4_table[i] = fmt_e2m1_encode(normal_table[i] * MX4_LEVEL);
  }
}
static inline float normal_at(uint64_t id, uint64_t idx) {
  uint64_t h = splitmix(id ^ splitmix(idx >> 2));
  return normal_table[(h >> (16 * (idx & 3))) & 0xffff];
}
/* the table indices of normal_at(id, i0 + j) for j < n, one hash a group of four */
static void normal_idx(uint64_t id, uint64_t i0, uint64_t n, uint16_t *out) {
  uint64_t j = 0;
  for (; j < n && ((i0 + j) & 3); j++) out[j] = (uint16_t)(splitmix(id ^ splitmix((i0 + j) >> 2)) >> (16 * ((i0 + j) & 3)));
  for (; j + 4 <= n; j += 4) {
    uint64_t h = splitmix(id ^ splitmix((i0 + j) >> 2));
    out[j] = (uint16_t)h, out[j + 1] = (uint16_t)(h >> 16), out[j + 2] = (uint16_t)(h >> 32), out[j + 3] = (uint16_t)(h >> 48);
  }
  for (; j < n; j++) out[j] = (uint16_t)(splitmix(id ^ splitmix((i0 + j) >> 2)) >> (16 * ((i0 + j) & 3)));
}

/* ---------------------------------------------------------------- statistics */

typedef enum { K_F32, K_BF16, K_MX8, K_MX8S, K_MX4, K_MX4S } gen_kind;
typedef struct gen_stats {
  gen_kind kind;
  float mean, sigma;
  bool abs_val;    /* norm weights: |mean + sigma z| */
  bool comb_base;  /* hc_*_base: identity-favouring comb part */
} gen_stats;

static bool ends_with(const char *s, const char *t) {
  size_t a = strlen(s), b = strlen(t);
  return a >= b && !strcmp(s + a - b, t);
}

/* statistics of a tensor from its name without the layer prefix */
static gen_stats stats_for(const hm_layer_config *c, const char *n) {
  gen_stats s = {K_F32, 0.0f, 1.0f, false, false};
  const float D = (float)c->hidden;
  bool scale = ends_with(n, ".scale");
  if (!strcmp(n, "hc_attn_fn") || !strcmp(n, "hc_ffn_fn")) {
    s.sigma = 1.0f / sqrtf(HM_HC * D); /* mixes ~ N(0, 1) after the 1/rms factor */
  } else if (!strcmp(n, "hc_attn_scale") || !strcmp(n, "hc_ffn_scale")) {
    s.mean = 1.0f, s.sigma = 0.3f, s.abs_val = true;
  } else if (!strcmp(n, "hc_attn_base") || !strcmp(n, "hc_ffn_base")) {
    s.sigma = 0.5f, s.comb_base = true;
  } else if (!strcmp(n, "attn.attn_sink")) {
    s.sigma = 1.0f;
  } else if (!strcmp(n, "ffn.gate.bias")) {
    s.sigma = 0.1f;
  } else if (ends_with(n, "norm.weight") || !strcmp(n, "engram.q_weight") || !strcmp(n, "engram.k_weight")) {
    s.kind = K_BF16, s.mean = 1.0f, s.sigma = 0.2f, s.abs_val = true;
  } else if (!strcmp(n, "ffn.gate.weight") || !strncmp(n, "attn.compressor.", 16) ||
             !strcmp(n, "attn.indexer.weights_proj.weight")) {
    s.kind = K_BF16, s.sigma = 1.0f / sqrtf(D);
  } else if (!strcmp(n, "attn.indexer.wk.weight")) {
    s.kind = K_BF16, s.sigma = 1.0f / sqrtf((float)c->kv_dim);
  } else if (!strncmp(n, "ffn.experts.", 12)) {
    s.kind = scale ? K_MX4S : K_MX4;
    bool w2 = strstr(n, ".w2.") != NULL;
    s.sigma = 1.0f / sqrtf(w2 ? (float)c->moe_inter : D);
  } else {
    /* the MXFP8 linears, by fan-in */
    s.kind = scale ? K_MX8S : K_MX8;
    float fan = D;
    if (!strncmp(n, "attn.wq_b", 9) || !strncmp(n, "attn.indexer.wq_b", 17)) fan = (float)c->q_lora;
    else if (!strncmp(n, "attn.wo_a", 9)) fan = (float)(HM_HEADS_PER_GROUP * c->head_dim);
    else if (!strncmp(n, "attn.wo_b", 9)) fan = (float)(c->o_groups * c->o_lora);
    else if (!strncmp(n, "ffn.shared_experts.w2", 21)) fan = (float)c->shared_inter;
    else if (!strncmp(n, "engram.wkv", 10)) fan = (float)(c->engram_heads * c->engram_ngram * c->engram_head_dim);
    s.sigma = 1.0f / sqrtf(fan);
    if (!strncmp(n, "engram.embed", 12)) s.sigma = 1.0f;
  }
  return s;
}

/* The block code sets the scale around the tensor's std and moves by +-1 in 1 block of 16
 * each way. */
static int block_level(const gen_stats *s) {
  float level = s->kind == K_MX8S ? MX8_LEVEL : MX4_LEVEL;
  return 127 + (int)lroundf(log2f(s->sigma / level));
}
static uint8_t block_code(int c0, uint64_t id, uint64_t block) {
  uint32_t j = (uint32_t)(splitmix(id ^ splitmix(block + 0x5ca1e)) & 15u);
  int c = c0 + (j == 0 ? -1 : j == 1 ? 1 : 0);
  return (uint8_t)(c < 1 ? 1 : c > 254 ? 254 : c);
}

/* ---------------------------------------------------------------- the source */

hm_status hm_gen_init(hm_gen *g, const hm_layer_config *cfg, uint64_t seed) {
  if (!g || !cfg) return hm_fail(HM_ERR_INVALID_ARG, "hm_gen_init: null argument");
  memset(g, 0, sizeof *g);
  hm_status st = hm_ckpt_schema(cfg, &g->schema, &g->count);
  if (st != HM_OK) return st;
  g->cfg = *cfg;
  g->seed = seed;
  hm_config_prefix(cfg, g->prefix, sizeof g->prefix);
  pthread_once(&normal_once, normal_init);
  return HM_OK;
}

void hm_gen_free(hm_gen *g) {
  if (!g) return;
  free(g->schema);
  memset(g, 0, sizeof *g);
}

static const hm_ckpt_entry *gen_find(const hm_gen *g, const char *name) {
  for (uint32_t i = 0; i < g->count; i++)
    if (!strcmp(g->schema[i].name, name)) return &g->schema[i];
  return NULL;
}

static hm_status gen_info(void *ctx, const char *name, hm_dtype *dt, uint32_t *ndim, uint64_t shape[2]) {
  const hm_ckpt_entry *e = gen_find(ctx, name);
  if (!e) return hm_fail(HM_ERR_NOT_FOUND, "generator: no tensor '%s' in this layer", name);
  *dt = e->dtype;
  *ndim = e->ndim;
  shape[0] = e->shape[0];
  shape[1] = e->ndim == 2 ? e->shape[1] : 0;
  return HM_OK;
}

static hm_status gen_read(void *ctx, const char *name, uint64_t r0, uint64_t nr, uint64_t c0,
                          uint64_t nc, void *out) {
  hm_gen *g = ctx;
  const hm_ckpt_entry *e = gen_find(g, name);
  if (!e) return hm_fail(HM_ERR_NOT_FOUND, "generator: no tensor '%s' in this layer", name);
  uint64_t rows = e->ndim == 2 ? e->shape[0] : 1, cols = e->ndim == 2 ? e->shape[1] : e->shape[0];
  if (r0 + nr > rows || c0 + nc > cols || nr == 0 || nc == 0)
    return hm_fail(HM_ERR_INVALID_ARG, "generator: '%s' [%llu+%llu, %llu+%llu] outside [%llu, %llu]", name,
                   (unsigned long long)r0, (unsigned long long)nr, (unsigned long long)c0,
                   (unsigned long long)nc, (unsigned long long)rows, (unsigned long long)cols);
  size_t plen = strlen(g->prefix);
  gen_stats s = stats_for(&g->cfg, name + plen);
  uint64_t id = name_hash(g->seed, name);
  if (s.kind == K_MX8S || s.kind == K_MX4S) {
    /* the scale's statistics follow its weight */
    char wname[HM_TENSOR_NAME];
    snprintf(wname, sizeof wname, "%.*s.weight", (int)(strlen(name) - strlen(".scale")), name);
    gen_stats ws = stats_for(&g->cfg, wname + plen);
    s.sigma = ws.sigma;
  }
  uint16_t *z = malloc(sizeof(uint16_t) * 2 * (nc + 8));
  if (!z) return hm_fail(HM_ERR_NO_MEMORY, "generator row buffer");
  for (uint64_t r = r0; r < r0 + nr; r++) {
    uint64_t row0 = r * cols;
    switch (s.kind) {
      case K_F32:
      case K_BF16:
        normal_idx(id, row0 + c0, nc, z);
        for (uint64_t cc = c0; cc < c0 + nc; cc++) {
          uint64_t o = (r - r0) * nc + (cc - c0), idx = row0 + cc;
          float mean = s.mean;
          if (s.comb_base && idx >= 8) {
            uint32_t j = (uint32_t)idx - 8;
            mean = (j / 4 == j % 4) ? 2.0f : 0.0f;
          }
          float v = mean + s.sigma * normal_table[z[cc - c0]];
          if (s.abs_val) v = fabsf(v);
          if (s.kind == K_F32) ((float *)out)[o] = v;
          else ((uint16_t *)out)[o] = fmt_bf16_from_f32(v);
        }
        break;
      case K_MX8: {
        uint8_t *o = (uint8_t *)out + (r - r0) * nc;
        normal_idx(id, row0 + c0, nc, z);
        for (uint64_t j = 0; j < nc; j++) o[j] = mx8_table[z[j]];
        break;
      }
      case K_MX4: {
        /* byte cc holds elements 2cc (low nibble) and 2cc+1 of row r */
        uint8_t *o = (uint8_t *)out + (r - r0) * nc;
        normal_idx(id, 2 * (row0 + c0), 2 * nc, z);
        for (uint64_t j = 0; j < nc; j++) o[j] = fmt_e2m1_pack(mx4_table[z[2 * j]], mx4_table[z[2 * j + 1]]);
        break;
      }
      case K_MX8S: /* one code a block: the scale tensor's own position */
      case K_MX4S: {
        int lv = block_level(&s);
        for (uint64_t cc = c0; cc < c0 + nc; cc++) ((uint8_t *)out)[(r - r0) * nc + (cc - c0)] = block_code(lv, id, row0 + cc);
        break;
      }
    }
  }
  free(z);
  return HM_OK;
}

hm_source hm_gen_source(hm_gen *g) {
  hm_source s = {g, gen_info, gen_read};
  return s;
}

void hm_gen_normal(uint64_t seed, const char *stream, uint64_t n, float mean, float sigma, bool bf16, float *out) {
  pthread_once(&normal_once, normal_init);
  uint64_t id = name_hash(seed, stream ? stream : "");
  for (uint64_t i = 0; i < n; i++) {
    float v = mean + sigma * normal_at(id, i);
    out[i] = bf16 ? fmt_round_bf16(v) : v;
  }
}
