/* layer/run/layer_group.c: a TP group of one layer or a chain of layers in one process: a thread a rank for
 * the collective and blocking calls, host arrays in and out through a staging buffer, caches a call. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group_internal.h"
#include "hm_layer_group.h"
#include "kernels/ffn_args.h"
#include "kernels/k1_args.h"

#define IO_ROWS K1_MAX_ROWS

/* The seam state a layer boundary carries (device, IO_ROWS rows each), and the metadata a layer
 * reads (host-visible). */
enum { B_X, B_RES, B_POST, B_COMB, B_PRE, B_COUNT };

/* One layer of the chain on one rank. */
struct lslot {
  hm_layer *layer;
  void *out[B_COUNT]; /* its outputs: the next layer's inputs */
  hm_group_meta meta;
  void *swa, *comp; /* SWA in the GPU's memory, the compressed one host-visible (the reference
                     * select writes it from the host) */
  size_t swa_bytes, comp_bytes;
  hm_layer_io io;
};

struct grank {
  hm_layer_group *g;
  uint32_t r;
  hm_agent *agent;
  hm_queue *q;
  hm_heap *heap;
  hm_select_state *sel;
  bool own_sel;       /* the group made sel (and frees it) */
  void *in[B_COUNT];  /* the chain's entry */
  void *part;         /* an FFN-only step's wo_b part */
  struct lslot *slot; /* [n] */
  void *stage;
  size_t stage_bytes;
  hm_rank_result res;
  double ns;
};

struct hm_layer_group {
  hm_runtime *rt;
  const hm_layer_weights *const *w; /* [n][tp] */
  const hm_layer_weights *w1;       /* hm_layer_group_create's, which w points at */
  /* hm_layer_group_create_source: the ranks' weights the group builds from src, one rank at a time
   * (build held), each trimmed to what a step's host work reads once its layer holds the rest */
  hm_layer_weights *own;
  hm_source src;
  hm_build_opts bopts;
  pthread_mutex_t build;
  uint32_t n, tp, D;
  hm_ffn_config run;
  hm_boot_group *boot;
  hm_select_state *const *select; /* the caller's states, or NULL (during creation) */
  /* the operation the rank threads run */
  const hm_step_inputs *in;
  hm_layer_outputs *out;
  uint32_t steps, ranks; /* ranks: the mask of ranks that run the call */
  uint32_t ffn_layer;
  const hm_ffn_inputs *ffn_in;
  hm_ffn_outputs *ffn_out;
  struct grank rank[HM_GROUP_MAX_TP];
};

static void *keep(struct grank *k, hm_status s) { return hm_rank_keep(&k->res, k->r, s); }
static hm_status on_ranks(hm_layer_group *g, void *(*fn)(void *)) {
  return hm_on_ranks(g->rank, sizeof g->rank[0], offsetof(struct grank, res), offsetof(struct grank, agent), g->tp,
                     fn);
}

/* ---------------------------------------------------------------- set-up and teardown */

static size_t buf_row_bytes(const hm_layer_group *g, int b) {
  const size_t D = g->D;
  switch (b) {
  case B_X: return D * 2;
  case B_RES: return HM_HC * D * 2;
  case B_POST: case B_PRE: return HM_HC * 4;
  case B_COMB: return HM_HC * HM_HC * 4;
  default: return 0;
  }
}
static void free_rank(struct grank *k, hm_layer_group *g) {
  hm_runtime *rt = g->rt;
  for (uint32_t i = 0; k->slot && i < g->n; i++) {
    struct lslot *s = &k->slot[i];
    if (s->layer) hm_layer_destroy(s->layer);
    for (int b = 0; b < B_COUNT; b++)
      if (s->out[b]) hm_mem_free(rt, s->out[b]);
    hm_group_meta_free(rt, &s->meta);
    void *p[] = {s->swa, s->comp};
    for (unsigned j = 0; j < sizeof p / sizeof *p; j++)
      if (p[j]) hm_mem_free(rt, p[j]);
  }
  free(k->slot);
  if (k->heap) hm_heap_destroy(k->heap);
  if (k->sel && k->own_sel) hm_select_state_free(k->sel);
  for (int b = 0; b < B_COUNT; b++)
    if (k->in[b]) hm_mem_free(rt, k->in[b]);
  if (k->part) hm_mem_free(rt, k->part);
  if (k->stage) hm_mem_free(rt, k->stage);
  if (k->q) hm_queue_destroy(k->q);
  memset(k->in, 0, sizeof k->in);
  k->slot = NULL, k->heap = NULL, k->sel = NULL, k->part = k->stage = NULL, k->q = NULL;
}

static hm_status alloc_dev(struct grank *k, size_t n, void **p) {
  hm_status s = hm_mem_alloc(k->agent, HM_POOL_COARSE, n, 256, p);
  /* zeroed once, so an output a layer does not write reads back as zeros, not as garbage */
  return s ? s : hm_mem_fill(k->g->rt, *p, 0, n / 4);
}

static hm_status alloc_io(struct grank *k) {
  hm_layer_group *g = k->g;
  hm_status s;
  size_t stage = 1u << 20;
  for (int b = 0; b < B_COUNT; b++) {
    size_t n = (size_t)IO_ROWS * buf_row_bytes(g, b);
    if ((s = alloc_dev(k, n, &k->in[b]))) return s;
    for (uint32_t i = 0; i < g->n; i++)
      if ((s = alloc_dev(k, n, &k->slot[i].out[b]))) return s;
    if (n > stage) stage = n;
  }
  if ((s = alloc_dev(k, (size_t)IO_ROWS * g->D * 2, &k->part))) return s;
  for (uint32_t i = 0; i < g->n; i++) {
    if ((s = hm_group_meta_alloc(k->agent, IO_ROWS, &k->slot[i].meta))) return s;
    /* the largest K1 output fetched whole (q at TP 2: 48 x 32 heads x 512 bf16) */
    size_t q = (size_t)IO_ROWS * g->w[i][k->r].dims.heads * K1_HEAD * 2;
    if (q > stage) stage = q;
  }
  k->stage_bytes = stage;
  return hm_mem_alloc(k->agent, HM_POOL_HOST, k->stage_bytes, 0, &k->stage);
}

static void *create_rank(void *arg) {
  struct grank *k = arg;
  hm_layer_group *g = k->g;
  hm_status s;
  if (!(k->slot = calloc(g->n, sizeof *k->slot))) return keep(k, hm_fail(HM_ERR_NO_MEMORY, "layer group"));
  if ((s = hm_queue_create(k->agent, 256, &k->q))) return keep(k, s);
  hm_bootstrap b;
  if ((s = hm_bootstrap_threads(g->boot, &b))) return keep(k, s);
  /* each layer's K2 reserves two all-reduce regions at 48 rows, plus alignment slack */
  size_t region = hm_allreduce_region_bytes(g->tp, FFN_MAX_ROWS, g->D);
  hm_heap_config hc = {.rank = k->r, .tp = g->tp, .half_bytes = (size_t)g->n * (2 * region + 4096)};
  s = hm_heap_create(k->agent, &hc, &b, &k->heap);
  hm_bootstrap_release(&b);
  if (s) return keep(k, s);
  for (uint32_t i = 0; i < g->n; i++) {
    const hm_layer_weights *w = &g->w[i][k->r];
    hm_layer_options opt = {.run = g->run};
    if (hm_config_has(&w->cfg, HM_ROLE_INDEX_SOURCE)) {
      if (!k->sel && g->select) k->sel = g->select[k->r];
      else if (!k->sel && !(s = hm_select_state_new(&k->sel))) k->own_sel = true;
      if (s) return keep(k, s);
      opt.select_ctx = k->sel;
    }
    if (g->own) {
      pthread_mutex_lock(&g->build);
      hm_layer_weights *b = &g->own[k->r];
      s = hm_weights_build(&b->cfg, g->tp, k->r, &g->src, &g->bopts, b);
      if (!s) s = hm_layer_create(k->heap, w, &opt, &k->slot[i].layer);
      /* the launches hold their device copies now: the host keeps what a step's host work reads */
      if (!s) s = hm_weights_drop_uploaded(b, NULL);
      pthread_mutex_unlock(&g->build);
    } else {
      s = hm_layer_create(k->heap, w, &opt, &k->slot[i].layer);
    }
    if (s) return keep(k, s);
  }
  return keep(k, alloc_io(k));
}

/* own: the weights the group builds (hm_layer_group_create_source; w1 = own, their cfg set), with
 * their source and options, or NULL */
static hm_status create(hm_runtime *rt, const hm_layer_weights *const *w, const hm_layer_weights *w1, uint32_t n,
                        uint32_t tp, const hm_ffn_config *run, hm_select_state *const *select, hm_layer_weights *own,
                        const hm_source *src, const hm_build_opts *bopts, hm_layer_group **out) {
  if (!rt || !w || !out || n < 1 || n > HM_MAX_LAYERS || tp < 1 || tp > HM_GROUP_MAX_TP) {
    free(own);
    return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_create: arguments");
  }
  *out = NULL;
  if (hm_agent_count(rt) < tp) {
    free(own);
    return hm_fail(HM_ERR_INVALID_ARG, "layer group: TP %u needs %u GPU agents, the runtime has %u", tp, tp,
                   hm_agent_count(rt));
  }
  for (uint32_t i = 0; i < n && !own; i++)
    for (uint32_t r = 0; r < tp; r++) {
      if (!w[i]) return hm_fail(HM_ERR_INVALID_ARG, "layer group: no weights for chain layer %u", i);
      if (w[i][r].rank != r || w[i][r].dims.tp != tp)
        return hm_fail(HM_ERR_INVALID_ARG,
                       "layer group: layer %u's w[%u] holds rank %u of TP %u, the group wants rank %u of TP %u", i, r,
                       w[i][r].rank, w[i][r].dims.tp, r, tp);
      if (w[i][r].cfg.hidden != w[0][0].cfg.hidden)
        return hm_fail(HM_ERR_INVALID_ARG, "layer group: the chain's layers differ in hidden size");
    }
  hm_layer_group *g = calloc(1, sizeof *g);
  if (!g) {
    free(own);
    return hm_fail(HM_ERR_NO_MEMORY, "layer group");
  }
  g->rt = rt, g->w1 = w1, g->w = w1 ? &g->w1 : w, g->n = n, g->tp = tp, g->D = w[0][0].cfg.hidden;
  if (run) g->run = *run;
  if (own) {
    g->own = own, g->src = *src, g->bopts = *bopts;
    pthread_mutex_init(&g->build, NULL);
  }
  hm_status s = hm_boot_group_create(tp, &g->boot);
  if (s) {
    hm_layer_group_destroy(g); /* no rank made yet: frees own */
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

hm_status hm_layer_group_create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_ffn_config *run,
                                hm_select_state *const *select, hm_layer_group **out) {
  if (!w) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_create: NULL weights");
  const hm_layer_weights *const one[1] = {w};
  return create(rt, one, w, 1, tp, run, select, NULL, NULL, NULL, out);
}

hm_status hm_layer_group_create_source(hm_runtime *rt, const hm_layer_config *cfg, uint32_t tp, const hm_source *src,
                                       const hm_build_opts *opts, const hm_ffn_config *run,
                                       hm_select_state *const *select, hm_layer_group **out) {
  if (!cfg || !src || !src->info || !src->read || !out)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_create_source: null argument");
  if (tp < 1 || tp > HM_GROUP_MAX_TP) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_create_source: tp %u", tp);
  hm_status s = hm_config_check(cfg);
  if (s) return s;
  hm_layer_weights *own = calloc(tp, sizeof *own);
  if (!own) return hm_fail(HM_ERR_NO_MEMORY, "layer group weights");
  for (uint32_t r = 0; r < tp; r++) own[r].cfg = *cfg;
  hm_build_opts bo = opts ? *opts : (hm_build_opts){0};
  const hm_layer_weights *const one[1] = {own};
  return create(rt, one, own, 1, tp, run, select, own, src, &bo, out); /* create owns own */
}

hm_status hm_layer_group_create_chain(hm_runtime *rt, const hm_layer_weights *const *w, uint32_t n, uint32_t tp,
                                      const hm_ffn_config *run, hm_select_state *const *select, hm_layer_group **out) {
  return create(rt, w, NULL, n, tp, run, select, NULL, NULL, NULL, out);
}

void hm_layer_group_destroy(hm_layer_group *g) {
  if (!g) return;
  for (uint32_t r = 0; r < g->tp; r++) free_rank(&g->rank[r], g);
  if (g->own) {
    /* after the layers (their users) are gone */
    for (uint32_t r = 0; r < g->tp; r++) hm_weights_free(&g->own[r]);
    free(g->own);
    pthread_mutex_destroy(&g->build);
  }
  free(g);
}

uint32_t hm_layer_group_layers(const hm_layer_group *g) { return g ? g->n : 0; }
hm_select_state *hm_layer_group_select_state(hm_layer_group *g, uint32_t r) {
  return g && r < g->tp ? g->rank[r].sel : NULL;
}
hm_layer *hm_layer_group_layer(hm_layer_group *g, uint32_t i, uint32_t r) {
  return g && i < g->n && r < g->tp && g->rank[r].slot ? g->rank[r].slot[i].layer : NULL;
}
const hm_layer_weights *hm_layer_group_weights(const hm_layer_group *g, uint32_t i, uint32_t r) {
  return g && i < g->n && r < g->tp ? &g->w[i][r] : NULL;
}
hm_layer *hm_layer_group_rank(hm_layer_group *g, uint32_t r) { return hm_layer_group_layer(g, 0, r); }
hm_agent *hm_layer_group_agent(hm_layer_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].agent : NULL; }
hm_heap *hm_layer_group_heap(hm_layer_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].heap : NULL; }

/* ---------------------------------------------------------------- data in and out */

/* host <-> device through the rank's staging buffer (group.c) */
static hm_status put(struct grank *k, void *dst, const void *src, size_t bytes) {
  hm_group_stage st = {k->g->rt, k->stage, k->stage_bytes};
  return hm_group_put(&st, dst, src, bytes);
}
static hm_status get(struct grank *k, void *dst, const void *src, size_t bytes) {
  hm_group_stage st = {k->g->rt, k->stage, k->stage_bytes};
  return hm_group_get(&st, dst, src, bytes);
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

/* A layer's view of its inputs: layer 0 the chain's entry buffers, a later one its predecessor's
 * outputs; the model's first layer reads no residual or mixes. */
static void bind_inputs(struct grank *k, uint32_t i, bool first) {
  struct lslot *sl = &k->slot[i];
  void *const *src = i == 0 ? k->in : k->slot[i - 1].out;
  hm_layer_io *io = &sl->io;
  io->x = src[B_X], io->res = first ? NULL : src[B_RES];
  io->post = first ? NULL : src[B_POST], io->comb = first ? NULL : src[B_COMB], io->pre = first ? NULL : src[B_PRE];
  io->x_out = sl->out[B_X], io->res_out = sl->out[B_RES], io->post_out = sl->out[B_POST];
  io->comb_out = sl->out[B_COMB], io->pre_out = sl->out[B_PRE];
}

static bool is_first(const hm_layer_group *g, uint32_t i, const hm_step_inputs *in) {
  return i == 0 && (hm_config_has(&g->w[0][0].cfg, HM_ROLE_FIRST) || !in->res);
}

/* A step's whole input: the chain's entry seam state, every layer's metadata and caches. */
static hm_status upload(struct grank *k, const hm_step_inputs *in) {
  hm_layer_group *g = k->g;
  const uint32_t S = in[0].S, D = g->D;
  const bool first = is_first(g, 0, in);
  hm_status s;
  if ((s = put_bf16(k, k->in[B_X], in[0].x, (uint64_t)S * D))) return s;
  if (!first && ((s = put_bf16(k, k->in[B_RES], in[0].res, (uint64_t)S * HM_HC * D)) ||
                 (s = put(k, k->in[B_POST], in[0].post, (size_t)S * HM_HC * 4)) ||
                 (s = put(k, k->in[B_COMB], in[0].comb, (size_t)S * HM_HC * HM_HC * 4)) ||
                 (s = put(k, k->in[B_PRE], in[0].pre, (size_t)S * HM_HC * 4))))
    return s;
  for (uint32_t i = 0; i < g->n; i++) {
    struct lslot *sl = &k->slot[i];
    const hm_step_inputs *li = &in[i];
    const uint64_t sb = cache_bytes(&li->swa), cb = cache_bytes(&li->comp);
    if ((s = size_cache(k, &sl->swa, &sl->swa_bytes, sb, HM_POOL_COARSE)) || (s = put(k, sl->swa, li->swa.base, sb)))
      return s;
    if (cb && ((s = size_cache(k, &sl->comp, &sl->comp_bytes, cb, HM_POOL_HOST)) ||
               (s = put(k, sl->comp, li->comp.base, cb))))
      return s;
    if ((s = hm_group_meta_upload(k->agent, &sl->meta, li, &sl->io.meta)))
      return hm_fail_prefix(s, "layer group: rank %u", k->r);
    hm_layer_io *io = &sl->io;
    io->rows = S, io->prefills = 0;
    bind_inputs(k, i, is_first(g, i, in));
    io->swa = (hm_k1_cache){sl->swa, li->swa.block_stride, li->swa.block_size, li->swa.blocks};
    io->comp = cb ? (hm_k1_cache){sl->comp, li->comp.block_stride, li->comp.block_size, li->comp.blocks}
                  : (hm_k1_cache){0};
    io->engram_hashes = li->engram_hashes, io->engram_mask = li->engram_mask, io->engram_table = li->engram_table;
  }
  return HM_OK;
}

static hm_status download(struct grank *k, uint32_t i, const hm_step_inputs *in, const hm_layer_outputs *o) {
  hm_layer_group *g = k->g;
  const struct lslot *sl = &k->slot[i];
  const uint64_t S = in->S, D = g->D, H = g->w[i][k->r].dims.heads;
  const hm_k1_io *k1 = hm_layer_k1_io(sl->layer);
  hm_status s = HM_OK;
  if (o->x) s = get_bf16(k, o->x, sl->out[B_X], S * D);
  if (!s && o->res) s = get_bf16(k, o->res, sl->out[B_RES], S * HM_HC * D);
  if (!s && o->post) s = get(k, o->post, sl->out[B_POST], (size_t)S * HM_HC * 4);
  if (!s && o->comb) s = get(k, o->comb, sl->out[B_COMB], (size_t)S * HM_HC * HM_HC * 4);
  if (!s && o->pre) s = get(k, o->pre, sl->out[B_PRE], (size_t)S * HM_HC * 4);
  if (!s && o->swa) s = get(k, o->swa, sl->swa, cache_bytes(&in->swa));
  if (!s && o->comp && cache_bytes(&in->comp)) s = get(k, o->comp, sl->comp, cache_bytes(&in->comp));
  if (!s && o->topk && hm_layer_topk(sl->layer)) memcpy(o->topk, hm_layer_topk(sl->layer), (size_t)S * K1_TOPK * 4);
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
  if (!in || in[0].S < 1 || in[0].S > IO_ROWS || !in[0].x)
    return hm_fail(HM_ERR_INVALID_ARG, "layer group: inputs (rows 1..%u, x)", IO_ROWS);
  if (!is_first(g, 0, in) && (!in[0].post || !in[0].comb || !in[0].pre))
    return hm_fail(HM_ERR_INVALID_ARG, "layer group: a later layer needs res, post, comb and pre");
  for (uint32_t i = 0; i < g->n; i++) {
    if (in[i].S != in[0].S)
      return hm_fail(HM_ERR_INVALID_ARG, "layer group: chain layer %u has %u rows, layer 0 %u", i, in[i].S, in[0].S);
    if (!in[i].swa.base || !cache_bytes(&in[i].swa))
      return hm_fail(HM_ERR_INVALID_ARG, "layer group: chain layer %u has no SWA cache", i);
  }
  return HM_OK;
}

static void *step_rank(void *arg) {
  struct grank *k = arg;
  hm_layer_group *g = k->g;
  if (!(g->ranks >> k->r & 1u)) return keep(k, HM_OK);
  hm_status s = upload(k, g->in);
  if (s) return keep(k, s);
  double t = 0;
  for (uint32_t n = 0; n < g->steps; n++) {
    double t0 = hm_group_now_ns();
    for (uint32_t i = 0; i < g->n; i++)
      if ((s = hm_layer_step(k->slot[i].layer, k->q, &k->slot[i].io))) return keep(k, s);
    t += hm_group_now_ns() - t0;
  }
  k->ns = t / g->steps;
  for (uint32_t i = 0; g->out && i < g->n; i++)
    if ((s = download(k, i, &g->in[i], &g->out[i * g->tp + k->r]))) return keep(k, s);
  return keep(k, HM_OK);
}

static hm_status run_steps(hm_layer_group *g, const hm_step_inputs *in, uint32_t steps, uint32_t ranks,
                           hm_layer_outputs *out) {
  hm_status s = check_inputs(g, in);
  if (s) return s;
  g->in = in, g->out = out, g->steps = steps ? steps : 1, g->ranks = ranks;
  s = on_ranks(g, step_rank);
  g->in = NULL, g->out = NULL;
  return s;
}

hm_status hm_layer_group_step(hm_layer_group *g, const hm_step_inputs *in, uint32_t steps, hm_layer_outputs *out,
                              double *ns) {
  if (!g) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_step: NULL group");
  hm_status s = run_steps(g, in, steps, ~0u, out);
  if (!s && ns) *ns = g->rank[0].ns;
  return s;
}

hm_status hm_layer_group_step_ranks(hm_layer_group *g, const hm_step_inputs *in, uint32_t ranks, hm_layer_outputs *out) {
  if (!g) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_step_ranks: NULL group");
  return run_steps(g, in, 1, ranks, out);
}

/* ---------------------------------------------------------------- FFN-only steps */

static void *ffn_rank(void *arg) {
  struct grank *k = arg;
  hm_layer_group *g = k->g;
  const hm_ffn_inputs *in = g->ffn_in;
  const uint32_t S = in->rows, D = g->D;
  struct lslot *sl = &k->slot[g->ffn_layer];
  hm_status s;
  if ((s = put_bf16(k, k->part, in->parts[k->r], (uint64_t)S * D)) ||
      (s = put_bf16(k, k->in[B_RES], in->res, (uint64_t)S * HM_HC * D)) ||
      (s = put(k, k->in[B_POST], in->post, (size_t)S * HM_HC * 4)) ||
      (s = put(k, k->in[B_COMB], in->comb, (size_t)S * HM_HC * HM_HC * 4)) ||
      (s = put(k, k->in[B_PRE], in->pre, (size_t)S * HM_HC * 4)))
    return keep(k, s);
  hm_ffn_io io = {.rows = S, .part = k->part, .res_in = k->in[B_RES], .post_in = k->in[B_POST],
                  .comb_in = k->in[B_COMB], .pre_in = k->in[B_PRE], .out = sl->out[B_X], .res_out = sl->out[B_RES],
                  .post_out = sl->out[B_POST], .comb_out = sl->out[B_COMB], .pre_out = sl->out[B_PRE]};
  if ((s = hm_layer_ffn_step(sl->layer, k->q, &io))) return keep(k, s);
  if (!g->ffn_out) return keep(k, HM_OK);
  const hm_ffn_outputs *o = &g->ffn_out[k->r];
  if (o->x) s = get_bf16(k, o->x, sl->out[B_X], (uint64_t)S * D);
  if (!s && o->res) s = get_bf16(k, o->res, sl->out[B_RES], (uint64_t)S * HM_HC * D);
  if (!s && o->post) s = get(k, o->post, sl->out[B_POST], (size_t)S * HM_HC * 4);
  if (!s && o->comb) s = get(k, o->comb, sl->out[B_COMB], (size_t)S * HM_HC * HM_HC * 4);
  if (!s && o->pre) s = get(k, o->pre, sl->out[B_PRE], (size_t)S * HM_HC * 4);
  return keep(k, s);
}

hm_status hm_layer_group_ffn_step(hm_layer_group *g, uint32_t layer, const hm_ffn_inputs *in, hm_ffn_outputs *out) {
  if (!g || !in || layer >= g->n) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_ffn_step: arguments");
  if (in->rows < 1 || in->rows > IO_ROWS || !in->res || !in->post || !in->comb || !in->pre)
    return hm_fail(HM_ERR_INVALID_ARG, "layer group: FFN-only inputs (rows 1..%u, every array)", IO_ROWS);
  for (uint32_t r = 0; r < g->tp; r++)
    if (!in->parts[r]) return hm_fail(HM_ERR_INVALID_ARG, "layer group: no part for rank %u", r);
  g->ffn_in = in, g->ffn_out = out, g->ffn_layer = layer;
  hm_status s = on_ranks(g, ffn_rank);
  g->ffn_in = NULL, g->ffn_out = NULL;
  return s;
}

/* ---------------------------------------------------------------- recorded chains */

hm_status hm_layer_group_replay(hm_layer_group *g, const hm_step_inputs *in, uint32_t replays, hm_layer_outputs *out,
                                hm_layer_replay_check check, void *ctx) {
  if (!g || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_group_replay: NULL argument");
  hm_status s = check_inputs(g, in);
  if (s) return s;
  const uint64_t timeout = g->run.step_timeout_ns ? (uint64_t)g->n * g->run.step_timeout_ns
                           : hm_runtime_is_sim(g->rt) ? 600000000000ull * g->n
                                                      : 20000000000ull * g->n;
  hm_chain *c[HM_GROUP_MAX_TP] = {0};
  for (uint32_t r = 0; r < g->tp; r++) {
    struct grank *k = &g->rank[r];
    if ((s = upload(k, in)) || (s = hm_chain_create(k->q, &c[r]))) {
      s = hm_fail_prefix(s, "rank %u", r);
      goto done;
    }
    for (uint32_t i = 0; i < g->n; i++)
      if ((s = hm_layer_record(k->slot[i].layer, c[r], &k->slot[i].io))) {
        s = hm_fail_prefix(s, "rank %u", r);
        goto done;
      }
  }
  for (uint32_t n = 0; n < replays; n++) {
    /* every rank's chain in flight at once: each K2 all-reduces across the ranks */
    for (uint32_t r = 0; r < g->tp; r++)
      if ((s = hm_chain_replay(c[r]))) goto done;
    for (uint32_t r = 0; r < g->tp; r++) {
      struct grank *k = &g->rank[r];
      if ((s = hm_chain_wait(c[r], timeout)) || (s = hm_queue_status(k->q))) {
        s = hm_fail_prefix(s, "rank %u: replay %u", r, n);
        goto done;
      }
      for (uint32_t i = 0; i < g->n; i++)
        if ((s = hm_ffn_status(hm_layer_k2(k->slot[i].layer)))) {
          s = hm_fail_prefix(s, "rank %u: replay %u", r, n);
          goto done;
        }
      if ((s = download(k, g->n - 1, &in[g->n - 1], &out[r]))) goto done;
      if (check && check(ctx, n, r, &out[r])) {
        s = hm_fail(HM_ERR_RUNTIME, "layer group: replay %u of rank %u failed its check", n, r);
        goto done;
      }
    }
  }
done:
  for (uint32_t r = 0; r < g->tp; r++)
    if (c[r]) hm_chain_destroy(c[r]);
  return s;
}
