/* layer/layer_group.c: a TP group of one whole layer in one process: a thread a rank for the collective
 * and blocking calls, host arrays in and out through a staging buffer, the caches uploaded a call. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group_internal.h"
#include "hm_layer_group.h"
#include "kernels/ffn_args.h"
#include "kernels/k1_args.h"

#define IO_ROWS K1_MAX_ROWS

/* A rank's device tensors (IO_ROWS rows each) and host-visible metadata. */
enum { B_X, B_RES, B_POST, B_COMB, B_PRE, B_X_OUT, B_RES_OUT, B_POST_OUT, B_COMB_OUT, B_PRE_OUT, B_COUNT };
enum { M_POS, M_SLOT, M_SWA_IDX, M_SWA_LENS, M_T2R, M_TOPK, M_COUNT };

struct grank {
  hm_layer_group *g;
  uint32_t r;
  hm_agent *agent;
  hm_queue *q;
  hm_heap *heap;
  hm_select_state *sel;
  bool own_sel;         /* the group made sel (and frees it) */
  hm_layer *layer;
  void *buf[B_COUNT];
  void *meta[M_COUNT];
  int32_t *bt;
  size_t bt_bytes;
  void *swa, *comp;     /* the caches: SWA in the GPU's memory, the compressed one host-visible (the
                         * reference select writes it from the host) */
  size_t swa_bytes, comp_bytes;
  hm_layer_io io;
  void *stage;
  size_t stage_bytes;
  hm_rank_result res;
  double ns;
};

struct hm_layer_group {
  hm_runtime *rt;
  const hm_layer_weights *w;
  hm_ffn_config run;
  uint32_t tp, D;
  hm_boot_group *boot;
  hm_select_state *const *select; /* the caller's states, or NULL (during creation) */
  const hm_step_inputs *in;
  hm_layer_outputs *out;
  uint32_t steps, ranks; /* ranks: the mask of ranks that run the call */
  struct grank rank[HM_GROUP_MAX_TP];
};

static void *keep(struct grank *k, hm_status s) { return hm_rank_keep(&k->res, k->r, s); }
static hm_status on_ranks(hm_layer_group *g, void *(*fn)(void *)) {
  return hm_on_ranks(g->rank, sizeof g->rank[0], offsetof(struct grank, res), g->tp, fn);
}

/* ---------------------------------------------------------------- set-up and teardown */

static size_t buf_row_bytes(const hm_layer_group *g, int b) {
  const size_t D = g->D;
  switch (b) {
  case B_X: case B_X_OUT: return D * 2;
  case B_RES: case B_RES_OUT: return HM_HC * D * 2;
  case B_POST: case B_PRE: case B_POST_OUT: case B_PRE_OUT: return HM_HC * 4;
  case B_COMB: case B_COMB_OUT: return HM_HC * HM_HC * 4;
  default: return 0;
  }
}
static size_t meta_row_bytes(int m) {
  switch (m) {
  case M_POS: case M_SLOT: return 8;
  case M_SWA_IDX: return K1_WINDOW * 4;
  case M_SWA_LENS: case M_T2R: return 4;
  case M_TOPK: return K1_TOPK * 4;
  default: return 0;
  }
}

static void free_rank(struct grank *k, hm_runtime *rt) {
  if (k->layer) hm_layer_destroy(k->layer);
  if (k->heap) hm_heap_destroy(k->heap);
  if (k->sel && k->own_sel) hm_select_state_free(k->sel);
  for (int b = 0; b < B_COUNT; b++)
    if (k->buf[b]) hm_mem_free(rt, k->buf[b]);
  for (int m = 0; m < M_COUNT; m++)
    if (k->meta[m]) hm_mem_free(rt, k->meta[m]);
  void *p[] = {k->bt, k->swa, k->comp, k->stage};
  for (unsigned i = 0; i < sizeof p / sizeof *p; i++)
    if (p[i]) hm_mem_free(rt, p[i]);
  if (k->q) hm_queue_destroy(k->q);
  memset(k->buf, 0, sizeof k->buf), memset(k->meta, 0, sizeof k->meta);
  k->layer = NULL, k->heap = NULL, k->sel = NULL, k->bt = NULL, k->swa = k->comp = k->stage = NULL, k->q = NULL;
}

static hm_status alloc_io(struct grank *k) {
  hm_layer_group *g = k->g;
  hm_status s;
  size_t stage = 1u << 20;
  for (int b = 0; b < B_COUNT; b++) {
    size_t n = (size_t)IO_ROWS * buf_row_bytes(g, b);
    if ((s = hm_mem_alloc(k->agent, HM_POOL_COARSE, n, 256, &k->buf[b])) || (s = hm_mem_fill(g->rt, k->buf[b], 0, n / 4)))
      return s;
    if (n > stage) stage = n;
  }
  for (int m = 0; m < M_COUNT; m++)
    if ((s = hm_mem_alloc(k->agent, HM_POOL_HOST, (size_t)IO_ROWS * meta_row_bytes(m), 0, &k->meta[m]))) return s;
  /* the largest K1 output fetched whole (q at TP 2: 48 x 32 heads x 512 bf16) */
  size_t q = (size_t)IO_ROWS * g->w[k->r].dims.heads * K1_HEAD * 2;
  k->stage_bytes = stage > q ? stage : q;
  return hm_mem_alloc(k->agent, HM_POOL_HOST, k->stage_bytes, 0, &k->stage);
}

static void *create_rank(void *arg) {
  struct grank *k = arg;
  hm_layer_group *g = k->g;
  const hm_layer_weights *w = &g->w[k->r];
  hm_status s;
  if ((s = hm_queue_create(k->agent, 256, &k->q))) return keep(k, s);
  hm_bootstrap b;
  if ((s = hm_bootstrap_threads(g->boot, &b))) return keep(k, s);
  size_t region = hm_allreduce_region_bytes(g->tp, FFN_MAX_ROWS, g->D);
  hm_heap_config hc = {.rank = k->r, .tp = g->tp, .half_bytes = 2 * region + 4096};
  s = hm_heap_create(k->agent, &hc, &b, &k->heap);
  hm_bootstrap_release(&b);
  if (s) return keep(k, s);
  hm_layer_options opt = {.run = g->run};
  if (hm_config_has(&w->cfg, HM_ROLE_INDEX_SOURCE)) {
    if (g->select) k->sel = g->select[k->r];
    else if ((s = hm_select_state_new(&k->sel))) return keep(k, s);
    else k->own_sel = true;
    opt.select_ctx = k->sel;
  }
  if ((s = hm_layer_create(k->heap, w, &opt, &k->layer))) return keep(k, s);
  return keep(k, alloc_io(k));
}

hm_status hm_layer_group_create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_ffn_config *run,
                                hm_select_state *const *select, hm_layer_group **out) {
  if (!rt || !w || !out || tp < 1 || tp > HM_GROUP_MAX_TP)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_create: arguments");
  *out = NULL;
  if (hm_agent_count(rt) < tp)
    return hm_fail(HM_ERR_INVALID_ARG, "layer group: TP %u needs %u GPU agents, the runtime has %u", tp, tp,
                   hm_agent_count(rt));
  for (uint32_t r = 0; r < tp; r++)
    if (w[r].rank != r || w[r].dims.tp != tp)
      return hm_fail(HM_ERR_INVALID_ARG, "layer group: w[%u] holds rank %u of TP %u, the group wants rank %u of TP %u",
                     r, w[r].rank, w[r].dims.tp, r, tp);
  hm_layer_group *g = calloc(1, sizeof *g);
  if (!g) return hm_fail(HM_ERR_NO_MEMORY, "layer group");
  g->rt = rt, g->w = w, g->tp = tp, g->D = w[0].cfg.hidden;
  if (run) g->run = *run;
  hm_status s = hm_boot_group_create(tp, &g->boot);
  if (s) {
    free(g);
    return s;
  }
  for (uint32_t r = 0; r < tp; r++) g->rank[r] = (struct grank){.g = g, .r = r, .agent = hm_agent_get(rt, r)};
  g->select = select;
  s = on_ranks(g, create_rank);
  g->select = NULL;
  hm_boot_group_destroy(g->boot);
  g->boot = NULL;
  if (s) {
    hm_layer_group_destroy(g);
    return s;
  }
  *out = g;
  return HM_OK;
}

void hm_layer_group_destroy(hm_layer_group *g) {
  if (!g) return;
  for (uint32_t r = 0; r < g->tp; r++) free_rank(&g->rank[r], g->rt);
  free(g);
}

hm_select_state *hm_layer_group_select_state(hm_layer_group *g, uint32_t r) {
  return g && r < g->tp ? g->rank[r].sel : NULL;
}
hm_layer *hm_layer_group_rank(hm_layer_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].layer : NULL; }
hm_agent *hm_layer_group_agent(hm_layer_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].agent : NULL; }
hm_heap *hm_layer_group_heap(hm_layer_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].heap : NULL; }

/* ---------------------------------------------------------------- data in and out */

/* host <-> device through the staging buffer, in pieces */
static hm_status put(struct grank *k, void *dst, const void *src, size_t bytes) {
  hm_signal none = {0};
  if (src == k->stage) return hm_mem_copy(k->g->rt, dst, k->stage, bytes, none);
  for (size_t o = 0; o < bytes; o += k->stage_bytes) {
    size_t n = bytes - o < k->stage_bytes ? bytes - o : k->stage_bytes;
    memcpy(k->stage, (const char *)src + o, n);
    hm_status s = hm_mem_copy(k->g->rt, (char *)dst + o, k->stage, n, none);
    if (s) return s;
  }
  return HM_OK;
}
static hm_status get(struct grank *k, void *dst, const void *src, size_t bytes) {
  hm_signal none = {0};
  if (dst == k->stage) return hm_mem_copy(k->g->rt, k->stage, src, bytes, none);
  for (size_t o = 0; o < bytes; o += k->stage_bytes) {
    size_t n = bytes - o < k->stage_bytes ? bytes - o : k->stage_bytes;
    hm_status s = hm_mem_copy(k->g->rt, k->stage, (const char *)src + o, n, none);
    if (s) return s;
    memcpy((char *)dst + o, k->stage, n);
  }
  return HM_OK;
}
static hm_status put_bf16(struct grank *k, void *dst, const float *src, uint64_t n) {
  hm_group_to_bf16(src, n, k->stage);
  return put(k, dst, k->stage, (size_t)n * 2);
}
static hm_status get_bf16(struct grank *k, float *dst, const void *src, uint64_t n) {
  hm_status s = get(k, k->stage, src, (size_t)n * 2);
  if (!s) hm_group_from_bf16(k->stage, n, dst);
  return s;
}

static uint64_t cache_bytes(const hm_kv_cache *c) { return (uint64_t)c->blocks * c->block_stride; }

/* A cache of at least `bytes` in pool kind (a larger one is kept). */
static hm_status size_cache(struct grank *k, void **p, size_t *have, uint64_t bytes, hm_pool_kind kind) {
  if (bytes <= *have) return HM_OK;
  if (*p) hm_mem_free(k->g->rt, *p), *p = NULL, *have = 0;
  hm_status s = hm_mem_alloc(k->agent, kind, bytes, 256, p);
  if (s) return hm_fail_prefix(s, "layer group: rank %u's cache of %llu bytes", k->r, (unsigned long long)bytes);
  *have = bytes;
  return HM_OK;
}

static hm_status upload_meta(struct grank *k, const hm_step_inputs *in) {
  const uint32_t S = in->S;
  hm_k1_meta *m = &k->io.meta;
  memset(m, 0, sizeof *m);
  const void *src[M_COUNT] = {in->positions, in->slot_mapping, in->swa_indices, in->swa_lens, in->token_to_req,
                              in->topk};
  for (int i = 0; i < M_COUNT; i++)
    if (src[i]) memcpy(k->meta[i], src[i], (size_t)S * meta_row_bytes(i));
  m->positions = in->positions ? k->meta[M_POS] : NULL;
  m->slot_mapping = in->slot_mapping ? k->meta[M_SLOT] : NULL;
  m->swa_indices = in->swa_indices ? k->meta[M_SWA_IDX] : NULL;
  m->swa_lens = in->swa_lens ? k->meta[M_SWA_LENS] : NULL;
  m->token_to_req = in->token_to_req ? k->meta[M_T2R] : NULL;
  m->topk = in->topk ? k->meta[M_TOPK] : NULL;
  int64_t reqs = 0;
  for (uint32_t t = 0; in->token_to_req && t < S; t++)
    if ((int64_t)in->token_to_req[t] + 1 > reqs) reqs = (int64_t)in->token_to_req[t] + 1;
  m->requests = (uint32_t)reqs, m->bt_stride = in->bt_stride;
  m->comp_block = in->comp.block_size, m->comp_blocks = in->comp.blocks;
  size_t bt = (size_t)m->requests * in->bt_stride * 4;
  if (in->block_table && bt) {
    if (bt > k->bt_bytes) {
      if (k->bt) hm_mem_free(k->g->rt, k->bt), k->bt = NULL, k->bt_bytes = 0;
      hm_status s = hm_mem_alloc(k->agent, HM_POOL_HOST, bt, 0, (void **)&k->bt);
      if (s) return hm_fail_prefix(s, "layer group: rank %u's block table", k->r);
      k->bt_bytes = bt;
    }
    memcpy(k->bt, in->block_table, bt);
    m->block_table = k->bt;
  }
  return HM_OK;
}

/* A step's whole input: the seam state, the metadata, the caller's caches. */
static hm_status upload(struct grank *k, const hm_step_inputs *in) {
  hm_layer_group *g = k->g;
  const uint32_t S = in->S, D = g->D;
  const bool first = hm_config_has(&g->w[0].cfg, HM_ROLE_FIRST) || !in->res;
  hm_status s;
  if ((s = put_bf16(k, k->buf[B_X], in->x, (uint64_t)S * D))) return s;
  if (!first && ((s = put_bf16(k, k->buf[B_RES], in->res, (uint64_t)S * HM_HC * D)) ||
                 (s = put(k, k->buf[B_POST], in->post, (size_t)S * HM_HC * 4)) ||
                 (s = put(k, k->buf[B_COMB], in->comb, (size_t)S * HM_HC * HM_HC * 4)) ||
                 (s = put(k, k->buf[B_PRE], in->pre, (size_t)S * HM_HC * 4))))
    return s;
  const uint64_t sb = cache_bytes(&in->swa), cb = cache_bytes(&in->comp);
  if ((s = size_cache(k, &k->swa, &k->swa_bytes, sb, HM_POOL_COARSE)) || (s = put(k, k->swa, in->swa.base, sb)))
    return s;
  if (cb && ((s = size_cache(k, &k->comp, &k->comp_bytes, cb, HM_POOL_HOST)) || (s = put(k, k->comp, in->comp.base, cb))))
    return s;
  if ((s = upload_meta(k, in))) return s;
  hm_layer_io *io = &k->io;
  io->rows = S, io->prefills = 0;
  io->x = k->buf[B_X], io->res = first ? NULL : k->buf[B_RES];
  io->post = first ? NULL : k->buf[B_POST], io->comb = first ? NULL : k->buf[B_COMB];
  io->pre = first ? NULL : k->buf[B_PRE];
  io->x_out = k->buf[B_X_OUT], io->res_out = k->buf[B_RES_OUT], io->post_out = k->buf[B_POST_OUT];
  io->comb_out = k->buf[B_COMB_OUT], io->pre_out = k->buf[B_PRE_OUT];
  io->swa = (hm_k1_cache){k->swa, in->swa.block_stride, in->swa.block_size, in->swa.blocks};
  io->comp = cb ? (hm_k1_cache){k->comp, in->comp.block_stride, in->comp.block_size, in->comp.blocks} : (hm_k1_cache){0};
  io->engram_hashes = in->engram_hashes, io->engram_mask = in->engram_mask, io->engram_table = in->engram_table;
  return HM_OK;
}

static hm_status download(struct grank *k, const hm_step_inputs *in, const hm_layer_outputs *o) {
  hm_layer_group *g = k->g;
  const uint64_t S = in->S, D = g->D, H = g->w[k->r].dims.heads;
  const hm_k1_io *k1 = hm_layer_k1_io(k->layer);
  hm_status s = HM_OK;
  if (o->x) s = get_bf16(k, o->x, k->buf[B_X_OUT], S * D);
  if (!s && o->res) s = get_bf16(k, o->res, k->buf[B_RES_OUT], S * HM_HC * D);
  if (!s && o->post) s = get(k, o->post, k->buf[B_POST_OUT], (size_t)S * HM_HC * 4);
  if (!s && o->comb) s = get(k, o->comb, k->buf[B_COMB_OUT], (size_t)S * HM_HC * HM_HC * 4);
  if (!s && o->pre) s = get(k, o->pre, k->buf[B_PRE_OUT], (size_t)S * HM_HC * 4);
  if (!s && o->swa) s = get(k, o->swa, k->swa, cache_bytes(&in->swa));
  if (!s && o->comp && cache_bytes(&in->comp)) s = get(k, o->comp, k->comp, cache_bytes(&in->comp));
  if (!s && o->topk && hm_layer_topk(k->layer)) memcpy(o->topk, hm_layer_topk(k->layer), (size_t)S * K1_TOPK * 4);
  if (!s && o->q) s = get_bf16(k, o->q, k1->q, S * H * K1_HEAD);
  if (!s && o->kt) s = get(k, o->kt, k1->kt, (size_t)S * K1_KEYS * 4);
  if (!s && o->klen) s = get(k, o->klen, k1->klen, (size_t)S * 2 * 4);
  if (!s && o->res_mid) s = get_bf16(k, o->res_mid, k1->res_out, S * HM_HC * D);
  if (!s && o->post_a) s = get(k, o->post_a, k1->post_out, (size_t)S * HM_HC * 4);
  if (!s && o->comb_a) s = get(k, o->comb_a, k1->comb_out, (size_t)S * HM_HC * HM_HC * 4);
  if (!s && o->pre_a) s = get(k, o->pre_a, k1->pre_out, (size_t)S * HM_HC * 4);
  return s;
}

/* ---------------------------------------------------------------- steps */

static hm_status check_inputs(const hm_layer_group *g, const hm_step_inputs *in) {
  if (!in || in->S < 1 || in->S > IO_ROWS || !in->x)
    return hm_fail(HM_ERR_INVALID_ARG, "layer group: inputs (rows 1..%u, x)", IO_ROWS);
  bool first = hm_config_has(&g->w[0].cfg, HM_ROLE_FIRST) || !in->res;
  if (!first && (!in->post || !in->comb || !in->pre))
    return hm_fail(HM_ERR_INVALID_ARG, "layer group: a later layer needs res, post, comb and pre");
  if (!in->swa.base || !cache_bytes(&in->swa)) return hm_fail(HM_ERR_INVALID_ARG, "layer group: no SWA cache");
  return HM_OK;
}

static void *step_rank(void *arg) {
  struct grank *k = arg;
  hm_layer_group *g = k->g;
  if (!(g->ranks >> k->r & 1u)) return keep(k, HM_OK);
  hm_status s = upload(k, g->in);
  if (s) return keep(k, s);
  double t = 0;
  for (uint32_t i = 0; i < g->steps; i++) {
    double t0 = hm_group_now_ns();
    s = hm_layer_step(k->layer, k->q, &k->io);
    t += hm_group_now_ns() - t0;
    if (s) return keep(k, s);
  }
  k->ns = t / g->steps;
  return keep(k, g->out ? download(k, g->in, &g->out[k->r]) : HM_OK);
}

hm_status hm_layer_group_step(hm_layer_group *g, const hm_step_inputs *in, uint32_t steps, hm_layer_outputs *out,
                              double *ns) {
  if (!g) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_step: NULL group");
  hm_status s = check_inputs(g, in);
  if (s) return s;
  g->in = in, g->out = out, g->steps = steps ? steps : 1, g->ranks = ~0u;
  s = on_ranks(g, step_rank);
  g->in = NULL, g->out = NULL;
  if (s) return s;
  if (ns) *ns = g->rank[0].ns;
  return HM_OK;
}

hm_status hm_layer_group_step_ranks(hm_layer_group *g, const hm_step_inputs *in, uint32_t ranks, hm_layer_outputs *out) {
  if (!g) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_step_ranks: NULL group");
  hm_status s = check_inputs(g, in);
  if (s) return s;
  g->in = in, g->out = out, g->steps = 1, g->ranks = ranks;
  s = on_ranks(g, step_rank);
  g->in = NULL, g->out = NULL;
  return s;
}

hm_status hm_layer_group_replay(hm_layer_group *g, const hm_step_inputs *in, uint32_t replays, hm_layer_outputs *out,
                                hm_layer_replay_check check, void *ctx) {
  if (!g || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_replay: NULL argument");
  hm_status s = check_inputs(g, in);
  if (s) return s;
  const uint64_t timeout = g->run.step_timeout_ns ? g->run.step_timeout_ns
                           : hm_runtime_is_sim(g->rt) ? 600000000000ull
                                                      : 20000000000ull;
  hm_chain *c[HM_GROUP_MAX_TP] = {0};
  for (uint32_t r = 0; r < g->tp; r++) {
    struct grank *k = &g->rank[r];
    if ((s = upload(k, in)) || (s = hm_chain_create(k->q, &c[r])) || (s = hm_layer_record(k->layer, c[r], &k->io))) {
      s = hm_fail_prefix(s, "rank %u", r);
      goto done;
    }
  }
  for (uint32_t i = 0; i < replays; i++) {
    /* every rank's chain in flight at once: K2 all-reduces across the ranks */
    for (uint32_t r = 0; r < g->tp; r++)
      if ((s = hm_chain_replay(c[r]))) goto done;
    for (uint32_t r = 0; r < g->tp; r++) {
      struct grank *k = &g->rank[r];
      if ((s = hm_chain_wait(c[r], timeout)) || (s = hm_queue_status(k->q)) ||
          (s = hm_ffn_status(hm_layer_k2(k->layer))) || (s = download(k, in, &out[r]))) {
        s = hm_fail_prefix(s, "rank %u: replay %u", r, i);
        goto done;
      }
      if (check && check(ctx, i, r, &out[r])) {
        s = hm_fail(HM_ERR_RUNTIME, "layer group: replay %u of rank %u failed its check", i, r);
        goto done;
      }
    }
  }
done:
  for (uint32_t r = 0; r < g->tp; r++)
    if (c[r]) hm_chain_destroy(c[r]);
  return s;
}
