/* layer/ref/stepgen.c: generated inputs of a whole layer step (activations, mixes, positions, paged
 * SWA and compressed caches with records, window indices, top-k) for tests and hsa-mono-check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_internal.h"

#define SLOTS_A_REQ 4096
#define BLOCK 64

static uint64_t cache_bytes(uint32_t blocks, uint32_t bs, uint64_t *stride) {
  /* vLLM rounds a page up to a multiple of 576 B */
  *stride = ((uint64_t)bs * HM_RECORD + HM_RECORD_DATA - 1) / HM_RECORD_DATA * HM_RECORD_DATA;
  return *stride * blocks;
}

/* neg_zero: -0 in nope dims 5, 21, 37, ... (HM_GEN_NEG_ZERO) */
static hm_status fill_record(hm_kv_cache *c, int64_t slot, uint64_t seed, const char *stream, bool neg_zero) {
  float kv[HM_HEAD_DIM];
  uint8_t d[HM_RECORD_DATA], sc[8];
  char name[64];
  snprintf(name, sizeof name, "%s.%lld", stream, (long long)slot);
  hm_gen_normal(seed, name, HM_HEAD_DIM, 0.0f, 1.0f, true, kv);
  for (int i = 5; neg_zero && i < HM_NOPE_DIM; i += 16) kv[i] = -0.0f;
  hm_ref_kv_record(kv, d, sc);
  return hm_ref_kv_insert(c, slot, d, sc);
}

void hm_gen_step_free(hm_gen_step *s) {
  if (!s) return;
  free(s->x), free(s->res), free(s->post), free(s->comb), free(s->pre);
  free(s->pos), free(s->slot), free(s->hashes), free(s->swa_idx), free(s->swa_len), free(s->t2r), free(s->topk);
  free(s->bt), free(s->swa_buf), free(s->comp_buf);
  memset(s, 0, sizeof *s);
}

/* the input pointers of s->in from the arrays */
static void wire(hm_gen_step *s, uint32_t ratio) {
  hm_step_inputs *in = &s->in;
  in->x = s->x, in->res = s->res, in->post = s->post, in->comb = s->comb, in->pre = s->pre;
  in->positions = s->pos, in->slot_mapping = s->slot;
  in->swa_indices = s->swa_idx, in->swa_lens = s->swa_len, in->token_to_req = s->t2r;
  in->topk = ratio ? s->topk : NULL;
  in->engram_hashes = s->hashes;
  in->block_table = s->bt;
  in->swa.base = s->swa_buf;
  in->comp.base = s->comp_buf;
}

hm_status hm_gen_step_make(const hm_layer_config *cfg, uint32_t S, uint32_t reqs, uint32_t ctx, uint64_t seed,
                           hm_gen_step *out) {
  return hm_gen_step_make_block(cfg, S, reqs, ctx, BLOCK, seed, out);
}

hm_status hm_gen_step_make_block(const hm_layer_config *cfg, uint32_t S, uint32_t reqs, uint32_t ctx, uint32_t block,
                                 uint64_t seed, hm_gen_step *out) {
  hm_gen_opts o = {.S = S, .reqs = reqs, .ctx = ctx, .block = block, .seed = seed};
  return hm_gen_step_make_opts(cfg, &o, out);
}

static const char *const case_names[] = {"pad", "dead-chunk", "straddle", "start", "long", "neg-zero"};
#define NCASES (sizeof case_names / sizeof *case_names)

const char *hm_gen_case_name(uint32_t i) { return i < NCASES ? case_names[i] : NULL; }

hm_status hm_gen_cases_parse(const char *list, uint32_t *cases) {
  if (!list || !cases) return hm_fail(HM_ERR_INVALID_ARG, "hm_gen_cases_parse: null argument");
  uint32_t got = 0;
  for (const char *p = list;;) {
    size_t n = strcspn(p, ",");
    unsigned i = 0;
    while (i < NCASES && (strlen(case_names[i]) != n || strncmp(p, case_names[i], n))) i++;
    if (i == NCASES)
      return hm_fail(HM_ERR_INVALID_ARG, "case '%.*s': not one of pad, dead-chunk, straddle, start, long, neg-zero", (int)n, p);
    got |= 1u << i;
    if (!p[n]) break;
    p += n + 1;
  }
  *cases = got;
  return HM_OK;
}

/* request r's first position under the cases (HM_GEN_*, in hm_ref.h's order of precedence) */
static uint32_t first_position(const hm_layer_config *cfg, const hm_gen_opts *o, uint32_t r) {
  uint32_t p0 = o->ctx + 7 * r;
  if ((o->cases & HM_GEN_LONG) && p0 < HM_GEN_LONG_ENTRIES * cfg->compress_ratio + 7 * r)
    p0 = HM_GEN_LONG_ENTRIES * cfg->compress_ratio + 7 * r;
  if ((o->cases & HM_GEN_STRADDLE) && p0 % 2 == 0) p0++;
  if ((o->cases & HM_GEN_START) && r < 2) p0 = r;
  return p0;
}

/* the ids of a generated top-k row: two of every three of the n entries, ascending; with a dead
 * chunk they stop at a multiple of 128 at least 128 short of min(n, 512) */
static void topk_row(uint32_t n, bool dead_chunk, int32_t *row) {
  uint32_t nt = n < HM_TOPK_ATTN ? n : HM_TOPK_ATTN, cap = HM_TOPK_ATTN, m = 0;
  if (dead_chunk) cap = nt >= 128 ? (nt - 128) / 128 * 128 : 0;
  for (uint32_t j = 0; j < n && m < cap; j += 1 + (j % 3 == 1)) row[m++] = (int32_t)j;
  for (; m < HM_TOPK_ATTN; m++) row[m] = -1;
}

hm_status hm_gen_step_make_opts(const hm_layer_config *cfg, const hm_gen_opts *o, hm_gen_step *out) {
  if (!cfg || !out || !o)
    return hm_fail(HM_ERR_INVALID_ARG, "step inputs: NULL %s", cfg ? o ? "output" : "options" : "config");
  const uint32_t S = o->S, reqs = o->reqs, ctx = o->ctx, block = o->block ? o->block : BLOCK;
  const uint64_t seed = o->seed;
  if (S < 1 || S > HM_MAX_ROWS || reqs < 1 || S % reqs || ctx + S >= SLOTS_A_REQ)
    return hm_fail(HM_ERR_INVALID_ARG, "step inputs: %u rows in %u requests at context %u", S, reqs, ctx);
  if (block < 2 || block > SLOTS_A_REQ || SLOTS_A_REQ % block || block % 2)
    return hm_fail(HM_ERR_INVALID_ARG, "step inputs: SWA block size %u (an even divisor of %u)", block, SLOTS_A_REQ);
  if (o->cases >> NCASES) return hm_fail(HM_ERR_INVALID_ARG, "step inputs: unknown cases 0x%x", o->cases);
  if ((o->cases & HM_GEN_PAD) && S < 2)
    return hm_fail(HM_ERR_INVALID_ARG, "step inputs: a padding row needs a step of at least 2 rows");
  for (uint32_t r = 0; r < reqs; r++)
    if (first_position(cfg, o, r) + S / reqs > SLOTS_A_REQ)
      return hm_fail(HM_ERR_INVALID_ARG, "step inputs: request %u's rows from position %u pass its %u slots", r,
                     first_position(cfg, o, r), SLOTS_A_REQ);
  hm_gen_step g;
  memset(&g, 0, sizeof g);
  const uint32_t D = cfg->hidden, per = S / reqs, ratio = cfg->compress_ratio, nrow = cfg->engram_heads * cfg->engram_ngram;
  hm_step_inputs *in = &g.in;
  in->S = S;
  g.hidden = D, g.nhash = nrow, g.reqs = reqs;
  in->swa.block_size = block;
  in->swa.blocks = reqs * SLOTS_A_REQ / block;
  g.swa_bytes = cache_bytes(in->swa.blocks, block, &in->swa.block_stride);
  uint32_t rpb = ratio ? block / ratio : block, cbr = SLOTS_A_REQ / rpb;
  in->comp.block_size = rpb;
  in->comp.blocks = reqs * cbr;
  g.comp_bytes = cache_bytes(in->comp.blocks, rpb, &in->comp.block_stride);
  in->bt_stride = cbr;
  g.x = hm_ref_alloc((size_t)S * D * sizeof(float));
  g.res = hm_ref_alloc((size_t)S * HM_HC * D * sizeof(float));
  g.post = hm_ref_alloc((size_t)S * HM_HC * sizeof(float));
  g.comb = hm_ref_alloc((size_t)S * 16 * sizeof(float));
  g.pre = hm_ref_alloc((size_t)S * HM_HC * sizeof(float));
  g.pos = hm_ref_alloc((size_t)S * sizeof(int64_t));
  g.slot = hm_ref_alloc((size_t)S * sizeof(int64_t));
  g.hashes = hm_ref_alloc((size_t)S * (nrow ? nrow : 1) * sizeof(int64_t));
  g.swa_idx = hm_ref_alloc((size_t)S * HM_WINDOW * sizeof(int32_t));
  g.swa_len = hm_ref_alloc((size_t)S * sizeof(int32_t));
  g.t2r = hm_ref_alloc((size_t)S * sizeof(int32_t));
  g.topk = hm_ref_alloc((size_t)S * HM_TOPK_ATTN * sizeof(int32_t));
  g.bt = hm_ref_alloc((size_t)reqs * cbr * sizeof(int32_t));
  g.swa_buf = hm_ref_alloc(g.swa_bytes);
  g.comp_buf = hm_ref_alloc(g.comp_bytes);
  float *mix = hm_ref_alloc((size_t)S * HM_MIX * sizeof(float)), *sq = hm_ref_alloc((size_t)S * sizeof(float));
  hm_status st = HM_ERR_NO_MEMORY;
  if (!g.x || !g.res || !g.post || !g.comb || !g.pre || !g.pos || !g.slot || !g.hashes || !g.swa_idx || !g.swa_len ||
      !g.t2r || !g.topk || !g.bt || !g.swa_buf || !g.comp_buf || !mix || !sq)
    goto fail;
  wire(&g, ratio);
  hm_gen_normal(seed, "step.x", (uint64_t)S * D, 0.0f, 1.0f, true, g.x);
  hm_gen_normal(seed, "step.res", (uint64_t)S * HM_HC * D, 0.0f, 4.0f, true, g.res);
  /* the previous seam's mixes as its gate makes them, from random logits at rms 1 */
  float scale[3] = {1.0f, 1.0f, 1.0f}, base[HM_MIX];
  hm_gen_normal(seed, "step.mix", (uint64_t)S * HM_MIX, 0.0f, 1.0f, false, mix);
  for (int j = 0; j < HM_MIX; j++) base[j] = (j >= 8 && (j - 8) / 4 == (j - 8) % 4) ? 2.0f : 0.0f;
  for (uint32_t t = 0; t < S; t++) sq[t] = (float)(HM_HC * D);
  hm_ref_seam_gate(cfg, S, mix, sq, scale, base, g.pre, g.post, g.comb);
  /* each request's compressed blocks in reverse order, so the table matters */
  for (uint32_t r = 0; r < reqs; r++)
    for (uint32_t b = 0; b < cbr; b++) g.bt[r * cbr + b] = (int32_t)(r * cbr + cbr - 1 - b);
  st = HM_OK;
  for (uint32_t r = 0; r < reqs && st == HM_OK; r++) {
    uint32_t p0 = first_position(cfg, o, r);
    for (uint32_t p = p0 > HM_WINDOW ? p0 - HM_WINDOW : 0; p < p0 && st == HM_OK; p++)
      st = fill_record(&in->swa, (int64_t)r * SLOTS_A_REQ + p, seed, "swa", false);
    for (uint32_t j = 0; ratio && j < (p0 + per) / ratio && st == HM_OK; j++)
      st = fill_record(&in->comp, (int64_t)g.bt[r * cbr + j / rpb] * rpb + j % rpb, seed, "comp",
                       o->cases & HM_GEN_NEG_ZERO);
    for (uint32_t i = 0; i < per; i++) {
      uint32_t t = r * per + i, p = p0 + i;
      g.pos[t] = p;
      g.slot[t] = (int64_t)r * SLOTS_A_REQ + p;
      g.t2r[t] = (int32_t)r;
      uint32_t lo = p + 1 > HM_WINDOW ? p + 1 - HM_WINDOW : 0;
      g.swa_len[t] = (int32_t)(p + 1 - lo);
      for (uint32_t k = 0; k < p + 1 - lo; k++) g.swa_idx[t * HM_WINDOW + k] = (int32_t)(r * SLOTS_A_REQ + lo + k);
      topk_row(ratio ? (p + 1) / ratio : 0, o->cases & HM_GEN_DEAD_CHUNK, g.topk + (size_t)t * HM_TOPK_ATTN);
      for (uint32_t h = 0; h < nrow; h++) g.hashes[t * nrow + h] = (int64_t)(1000003ull * (t + 1) + 7919ull * h);
    }
  }
  if (st != HM_OK) goto fail;
  if (o->cases & HM_GEN_PAD) {
    /* as a serving stack pads a step: slot -1, position 0, no window, no top-k */
    const uint32_t t = S - 1;
    g.slot[t] = -1, g.pos[t] = 0, g.swa_len[t] = 0;
    for (uint32_t k = 0; k < HM_TOPK_ATTN; k++) g.topk[t * HM_TOPK_ATTN + k] = -1;
  }
  free(mix), free(sq);
  *out = g;
  return HM_OK;
fail:
  free(mix), free(sq);
  hm_gen_step_free(&g);
  return st;
}

#define DUP(f, n)                        \
  do {                                   \
    g.f = hm_ref_alloc(n);               \
    if (!g.f) goto fail;                 \
    memcpy(g.f, from->f, n);             \
  } while (0)

hm_status hm_gen_step_copy(const hm_gen_step *from, hm_gen_step *to) {
  if (!from || !to || !from->x) return hm_fail(HM_ERR_INVALID_ARG, "hm_gen_step_copy: bad argument");
  const size_t S = from->in.S, D = from->hidden;
  hm_gen_step g;
  memset(&g, 0, sizeof g);
  g.in = from->in;
  g.swa_bytes = from->swa_bytes, g.comp_bytes = from->comp_bytes;
  g.hidden = from->hidden, g.nhash = from->nhash, g.reqs = from->reqs;
  DUP(x, S * D * sizeof(float));
  DUP(res, S * HM_HC * D * sizeof(float));
  DUP(post, S * HM_HC * sizeof(float));
  DUP(comb, S * 16 * sizeof(float));
  DUP(pre, S * HM_HC * sizeof(float));
  DUP(pos, S * sizeof(int64_t));
  DUP(slot, S * sizeof(int64_t));
  DUP(hashes, S * (from->nhash ? from->nhash : 1) * sizeof(int64_t));
  DUP(swa_idx, S * HM_WINDOW * sizeof(int32_t));
  DUP(swa_len, S * sizeof(int32_t));
  DUP(t2r, S * sizeof(int32_t));
  DUP(topk, S * HM_TOPK_ATTN * sizeof(int32_t));
  DUP(bt, (size_t)from->reqs * from->in.bt_stride * sizeof(int32_t));
  DUP(swa_buf, from->swa_bytes);
  DUP(comp_buf, from->comp_bytes);
  wire(&g, from->in.topk != NULL);
  /* keep what the caller changed in the inputs (a NULL residual, a mask, the Engram table) */
  if (!from->in.res) g.in.res = NULL;
  *to = g;
  return HM_OK;
fail:
  hm_gen_step_free(&g);
  return HM_ERR_NO_MEMORY;
}

hm_status hm_gen_step_tensors(const hm_gen_step *s, const hm_layer_config *cfg, hm_tensor_set *set) {
  if (!s || !cfg || !set || !s->x) return hm_fail(HM_ERR_INVALID_ARG, "hm_gen_step_tensors: bad argument");
  const uint64_t S = s->in.S, D = s->hidden;
  uint32_t n0 = set->count;
  struct {
    const char *name;
    hm_dtype dt;
    uint64_t d0, d1, d2;
    const void *src;
  } t[] = {
      {"in.x", HM_DT_F32, S, D, 0, s->x},
      {"in.res", HM_DT_F32, S, HM_HC, D, s->in.res},
      {"in.post", HM_DT_F32, S, HM_HC, 0, s->post},
      {"in.comb", HM_DT_F32, S, HM_HC, HM_HC, s->comb},
      {"in.pre", HM_DT_F32, S, HM_HC, 0, s->pre},
      {"in.positions", HM_DT_I64, S, 0, 0, s->pos},
      {"in.slot_mapping", HM_DT_I64, S, 0, 0, s->slot},
      {"in.swa_indices", HM_DT_I32, S, HM_WINDOW, 0, s->swa_idx},
      {"in.swa_lens", HM_DT_I32, S, 0, 0, s->swa_len},
      {"in.token_to_req", HM_DT_I32, S, 0, 0, s->t2r},
      {"in.topk", HM_DT_I32, S, HM_TOPK_ATTN, 0, s->in.topk},
      {"in.block_table", HM_DT_I32, s->reqs, s->in.bt_stride, 0, s->bt},
      {"in.engram_hashes", HM_DT_I64, S, s->nhash, 0, hm_config_has(cfg, HM_ROLE_ENGRAM) ? s->hashes : NULL},
      {"in.swa_cache", HM_DT_U8, s->in.swa.blocks, s->in.swa.block_stride, 0, s->swa_buf},
      {"in.comp_cache", HM_DT_U8, s->in.comp.blocks, s->in.comp.block_stride, 0, cfg->compress_ratio ? s->comp_buf : NULL},
  };
  for (unsigned i = 0; i < sizeof t / sizeof *t; i++) {
    if (!t[i].src) continue;
    void *d = hm_tset_new(set, t[i].name, t[i].dt, t[i].d0, t[i].d1, t[i].d2, 0);
    if (!d) {
      hm_tset_truncate(set, n0);
      return hm_fail_prefix(HM_ERR_INVALID_ARG, "step inputs");
    }
    memcpy(d, t[i].src, hm_tset_find(set, t[i].name)->nbytes);
  }
  return HM_OK;
}

hm_status hm_gen_step_seed_select(const hm_gen_step *s, const hm_layer_config *cfg, hm_select_state *st, uint64_t seed) {
  if (!s || !cfg || !st) return hm_fail(HM_ERR_INVALID_ARG, "hm_gen_step_seed_select: null argument");
  if (!hm_config_has(cfg, HM_ROLE_INDEX_SOURCE)) return HM_OK;
  const uint32_t S = s->in.S, r = cfg->compress_ratio;
  const bool owns = hm_config_has(cfg, HM_ROLE_KV_SOURCE);
  for (uint32_t q = 0; q < s->reqs; q++) {
    /* the request's live rows (a padding row is no token of it) */
    int64_t first = -1, last = -1;
    for (uint32_t t = 0; t < S; t++)
      if (s->t2r[t] == (int32_t)q && s->slot[t] >= 0) {
        if (first < 0 || s->pos[t] < first) first = s->pos[t];
        if (s->pos[t] > last) last = s->pos[t];
      }
    if (first < 0) continue;
    uint32_t n = (uint32_t)(owns ? first / r : (last + 1) / r);
    hm_status e = hm_select_state_seed(st, cfg, cfg->kv_source, (int32_t)q, n, seed);
    if (e != HM_OK) return e;
    if (!owns || r != 2 || first % 2 == 0) continue;
    /* the step's first row ends a group begun before it: its first token, as the prefill (or the
     * step before) left it in the compressor's state, f32 projections at the rms of real ones */
    float kv[HM_HEAD_DIM], gate[HM_HEAD_DIM];
    char name[64];
    snprintf(name, sizeof name, "prefill.kv.%d.%u.%lld", cfg->layer, q, (long long)(first - 1));
    hm_gen_normal(seed, name, HM_HEAD_DIM, 0.0f, 1.0f, false, kv);
    snprintf(name, sizeof name, "prefill.gate.%d.%u.%lld", cfg->layer, q, (long long)(first - 1));
    hm_gen_normal(seed, name, HM_HEAD_DIM, 0.0f, 1.0f, false, gate);
    if ((e = hm_select_state_pend(st, cfg, (int32_t)q, first - 1, kv, gate)) != HM_OK) return e;
  }
  return HM_OK;
}
