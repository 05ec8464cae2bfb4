/* layer/run/k1_group.c: a TP group of K1 in one process: a thread a rank for the blocking calls, host
 * arrays in and out through a staging buffer a rank, the metadata in host-visible memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

#include "formats.h"
#include "group_internal.h"
#include "hm_k1_group.h"
#include "kernels/k1_args.h"

#define IO_ROWS K1_MAX_ROWS

/* A rank's device tensors, IO_ROWS rows each. */
enum { B_X, B_RES_IN, B_POST_IN, B_COMB_IN, B_PRE_IN, B_RES_OUT, B_POST_OUT, B_COMB_OUT, B_PRE_OUT, B_Q, B_KT,
       B_KLEN, B_X_OUT, B_QR_OUT, B_COUNT };

struct grank {
  hm_k1_group *g;
  uint32_t r;
  hm_agent *agent;
  hm_queue *q;
  hm_k1 *k1;
  void *buf[B_COUNT];
  hm_group_meta meta;   /* the metadata in host-visible memory, IO_ROWS rows */
  void *cache;          /* the rank's SWA cache, cache_bytes */
  size_t cache_bytes;
  hm_k1_io io;          /* the call's view of the above */
  void *stage;          /* host-visible staging */
  size_t stage_bytes;
  hm_rank_result res;
  double ns;
};

struct hm_k1_group {
  hm_runtime *rt;
  const hm_layer_weights *w;
  const hm_k1_config *cfg;
  uint32_t tp, D, Q, H;
  /* hm_k1_group_create_source: the ranks' weights the group builds from src, one rank at a time
   * (build held), each trimmed once its K1 holds the device copies */
  hm_layer_weights *own;
  hm_source src;
  hm_build_opts bopts;
  pthread_mutex_t build;
  /* the operation the rank threads run */
  const hm_step_inputs *in;
  hm_k1_outputs *out;
  uint32_t steps;
  struct grank rank[8];
};

/* A rank's outcome (group_internal.h). */
static void *keep(struct grank *k, hm_status s) { return hm_rank_keep(&k->res, k->r, s); }

/* fn on every rank in its own thread; the first failure (rank order) as the result */
static hm_status on_ranks(hm_k1_group *g, void *(*fn)(void *)) {
  return hm_on_ranks(g->rank, sizeof g->rank[0], offsetof(struct grank, res), offsetof(struct grank, agent), g->tp,
                     fn);
}

/* ---------------------------------------------------------------- set-up and teardown */

static size_t buf_row_bytes(const hm_k1_group *g, int b) {
  const size_t D = g->D, Q = g->Q, H = g->H;
  switch (b) {
  case B_X: case B_X_OUT: return D * 2;
  case B_RES_IN: case B_RES_OUT: return HM_HC * D * 2;
  case B_POST_IN: case B_POST_OUT: case B_PRE_IN: case B_PRE_OUT: return HM_HC * 4;
  case B_COMB_IN: case B_COMB_OUT: return HM_HC * HM_HC * 4;
  case B_Q: return H * K1_HEAD * 2;
  case B_KT: return K1_KEYS * 4;
  case B_KLEN: return 2 * 4;
  case B_QR_OUT: return Q * 2;
  default: return 0;
  }
}

static void free_rank(struct grank *k, hm_runtime *rt) {
  if (k->k1) hm_k1_destroy(k->k1);
  for (int b = 0; b < B_COUNT; b++)
    if (k->buf[b]) hm_mem_free(rt, k->buf[b]);
  hm_group_meta_free(rt, &k->meta);
  if (k->cache) hm_mem_free(rt, k->cache);
  if (k->stage) hm_mem_free(rt, k->stage);
  if (k->q) hm_queue_destroy(k->q);
  memset(k->buf, 0, sizeof k->buf), memset(&k->io, 0, sizeof k->io);
  k->k1 = NULL, k->cache = NULL, k->stage = NULL, k->q = NULL;
  k->cache_bytes = k->stage_bytes = 0;
}

static hm_status alloc_io(struct grank *k) {
  hm_k1_group *g = k->g;
  hm_status s;
  /* the staging buffer holds the largest tensor whole (its bf16 form is converted in place);
   * the cache goes through it in pieces */
  size_t stage = 1u << 20;
  for (int b = 0; b < B_COUNT; b++) {
    size_t n = (size_t)IO_ROWS * buf_row_bytes(g, b);
    /* zeroed once, so an output a layer does not write reads back as zeros, not as garbage */
    if ((s = hm_mem_alloc(k->agent, HM_POOL_COARSE, n, 256, &k->buf[b])) ||
        (s = hm_mem_fill(g->rt, k->buf[b], 0, n / 4)))
      return s;
    if (n > stage) stage = n;
  }
  if ((s = hm_group_meta_alloc(k->agent, IO_ROWS, &k->meta))) return s;
  k->stage_bytes = stage;
  return hm_mem_alloc(k->agent, HM_POOL_HOST, k->stage_bytes, 0, &k->stage);
}

static void *create_rank(void *arg) {
  struct grank *k = arg;
  hm_k1_group *g = k->g;
  hm_status s;
  if ((s = hm_queue_create(k->agent, 256, &k->q))) return keep(k, s);
  if (g->own) {
    pthread_mutex_lock(&g->build);
    hm_layer_weights *b = &g->own[k->r];
    s = hm_weights_build(&b->cfg, g->tp, k->r, &g->src, &g->bopts, b);
    if (!s) s = hm_k1_create(k->agent, b, g->cfg, &k->k1);
    /* K1 holds its device copies now: the host keeps only the small remainder */
    if (!s) s = hm_weights_drop_uploaded(b, NULL);
    pthread_mutex_unlock(&g->build);
  } else {
    s = hm_k1_create(k->agent, &g->w[k->r], g->cfg, &k->k1);
  }
  if (s) return keep(k, s);
  return keep(k, alloc_io(k));
}

/* own: the weights the group builds (hm_k1_group_create_source; w = own, their cfg set; dims: the
 * ranks' dims, alike in every rank), with their source and options, or NULL */
static hm_status create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_k1_config *cfg,
                        hm_layer_weights *own, const hm_rank_dims *dims, const hm_source *src,
                        const hm_build_opts *bopts, hm_k1_group **out) {
  hm_status s = HM_OK;
  if (out) *out = NULL;
  if (!rt || !w || !out || tp < 1 || tp > 8) s = hm_fail(HM_ERR_INVALID_ARG, "hm_k1_group_create: arguments");
  else if (cfg && cfg->epoch)
    s = hm_fail(HM_ERR_INVALID_ARG, "K1 group: cfg.epoch must be NULL (an epoch buffer is one agent's)");
  else if (hm_agent_count(rt) < tp)
    s = hm_fail(HM_ERR_INVALID_ARG, "K1 group: TP %u needs %u GPU agents, the runtime has %u", tp, tp,
                hm_agent_count(rt));
  for (uint32_t r = 0; r < tp && !s && !own; r++)
    if (w[r].rank != r || w[r].dims.tp != tp)
      s = hm_fail(HM_ERR_INVALID_ARG, "K1 group: w[%u] holds rank %u of TP %u, the group wants rank %u of TP %u", r,
                  w[r].rank, w[r].dims.tp, r, tp);
  hm_k1_group *g = s ? NULL : calloc(1, sizeof *g);
  if (!s && !g) s = hm_fail(HM_ERR_NO_MEMORY, "K1 group");
  if (s) {
    free(own);
    return s;
  }
  g->rt = rt, g->w = w, g->cfg = cfg, g->tp = tp;
  g->D = w[0].cfg.hidden, g->Q = w[0].cfg.q_lora, g->H = own ? dims->heads : w[0].dims.heads;
  if (own) {
    g->own = own, g->src = *src, g->bopts = *bopts;
    pthread_mutex_init(&g->build, NULL);
  }
  for (uint32_t r = 0; r < tp; r++) g->rank[r] = (struct grank){.g = g, .r = r, .agent = hm_agent_get(rt, r)};
  s = on_ranks(g, create_rank);
  if (s) {
    hm_k1_group_destroy(g);
    return s;
  }
  *out = g;
  return HM_OK;
}

hm_status hm_k1_group_create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_k1_config *cfg,
                             hm_k1_group **out) {
  return create(rt, w, tp, cfg, NULL, NULL, NULL, NULL, out);
}

hm_status hm_k1_group_create_source(hm_runtime *rt, const hm_layer_config *lc, uint32_t tp, const hm_source *src,
                                    const hm_build_opts *opts, const hm_k1_config *cfg, hm_k1_group **out) {
  if (!lc || !src || !src->info || !src->read || !out)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_group_create_source: null argument");
  if (tp < 1 || tp > 8) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_group_create_source: tp %u", tp);
  hm_rank_dims dims;
  hm_status s = hm_config_check(lc);
  if (!s) s = hm_rank_dims_for(lc, tp, &dims);
  if (s) return s;
  hm_layer_weights *own = calloc(tp, sizeof *own);
  if (!own) return hm_fail(HM_ERR_NO_MEMORY, "K1 group weights");
  for (uint32_t r = 0; r < tp; r++) own[r].cfg = *lc;
  hm_build_opts bo = opts ? *opts : (hm_build_opts){0};
  bo.parts = HM_WPART_ATTN;
  return create(rt, own, tp, cfg, own, &dims, src, &bo, out); /* create owns own */
}

void hm_k1_group_destroy(hm_k1_group *g) {
  if (!g) return;
  for (uint32_t r = 0; r < g->tp; r++) free_rank(&g->rank[r], g->rt);
  if (g->own) {
    /* after the K1s (their users) are gone */
    for (uint32_t r = 0; r < g->tp; r++) hm_weights_free(&g->own[r]);
    free(g->own);
    pthread_mutex_destroy(&g->build);
  }
  free(g);
}

const hm_layer_weights *hm_k1_group_weights(const hm_k1_group *g, uint32_t r) {
  return g && r < g->tp ? &g->w[r] : NULL;
}

hm_k1 *hm_k1_group_rank(hm_k1_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].k1 : NULL; }
hm_agent *hm_k1_group_agent(hm_k1_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].agent : NULL; }

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

static uint64_t cache_bytes(const hm_kv_cache *c) { return (uint64_t)c->blocks * c->block_stride; }

/* The rank's SWA cache at least `bytes` (a larger one is kept; a call with a bigger cache
 * reallocates it). */
static hm_status size_cache(struct grank *k, uint64_t bytes) {
  if (bytes <= k->cache_bytes) return HM_OK;
  if (k->cache) hm_mem_free(k->g->rt, k->cache), k->cache = NULL, k->cache_bytes = 0;
  hm_status s = hm_mem_alloc(k->agent, HM_POOL_COARSE, bytes, 256, &k->cache);
  if (s) return hm_fail_prefix(s, "K1 group: rank %u's SWA cache of %llu bytes", k->r, (unsigned long long)bytes);
  k->cache_bytes = bytes;
  return HM_OK;
}

/* The call's metadata into the rank's host-visible buffers and io (group.c), and the SWA cache's
 * shape. */
static hm_status upload_meta(struct grank *k, const hm_step_inputs *in) {
  hm_status s = hm_group_meta_upload(k->agent, &k->meta, in, &k->io.meta);
  if (s) return hm_fail_prefix(s, "K1 group: rank %u", k->r);
  k->io.rows = in->S, k->io.prefills = 0;
  k->io.swa = (hm_k1_cache){.base = k->cache, .block_stride = in->swa.block_stride,
                            .block_size = in->swa.block_size, .blocks = in->swa.blocks};
  return HM_OK;
}

/* A step's whole input: the activations as bf16 / f32, the metadata, the caller's SWA cache. */
static hm_status upload(struct grank *k, const hm_step_inputs *in) {
  hm_k1_group *g = k->g;
  const uint32_t S = in->S, D = g->D;
  hm_status s;
  uint16_t *b = k->stage;
  hm_group_to_bf16(in->x, (uint64_t)S * D, b);
  if ((s = put(k, k->buf[B_X], b, (size_t)S * D * 2))) return s;
  hm_group_to_bf16(in->res, (uint64_t)S * HM_HC * D, b);
  if ((s = put(k, k->buf[B_RES_IN], b, (size_t)S * HM_HC * D * 2)) ||
      (s = put(k, k->buf[B_POST_IN], in->post, (size_t)S * HM_HC * 4)) ||
      (s = put(k, k->buf[B_COMB_IN], in->comb, (size_t)S * HM_HC * HM_HC * 4)) ||
      (s = put(k, k->buf[B_PRE_IN], in->pre, (size_t)S * HM_HC * 4)))
    return s;
  const uint64_t cb = cache_bytes(&in->swa);
  if ((s = size_cache(k, cb)) || (s = put(k, k->cache, in->swa.base, cb)) || (s = upload_meta(k, in))) return s;
  hm_k1_io *io = &k->io;
  io->x = k->buf[B_X], io->res_in = k->buf[B_RES_IN], io->post_in = k->buf[B_POST_IN];
  io->comb_in = k->buf[B_COMB_IN], io->pre_in = k->buf[B_PRE_IN];
  io->res_out = k->buf[B_RES_OUT], io->post_out = k->buf[B_POST_OUT], io->comb_out = k->buf[B_COMB_OUT];
  io->pre_out = k->buf[B_PRE_OUT], io->q = k->buf[B_Q], io->kt = k->buf[B_KT], io->klen = k->buf[B_KLEN];
  io->x_out = k->buf[B_X_OUT], io->qr_out = k->buf[B_QR_OUT];
  return HM_OK;
}

/* bf16 device [n] -> f32 host */
static hm_status get_bf16(struct grank *k, float *dst, const void *src, uint64_t n) {
  hm_status s = get(k, k->stage, src, (size_t)n * 2);
  if (!s) hm_group_from_bf16(k->stage, n, dst);
  return s;
}

static hm_status download(struct grank *k, uint32_t S, const hm_kv_cache *swa, const hm_k1_outputs *o) {
  hm_k1_group *g = k->g;
  const uint64_t D = g->D, Q = g->Q, H = g->H;
  hm_status s = HM_OK;
  if (o->res) s = get_bf16(k, o->res, k->buf[B_RES_OUT], S * HM_HC * D);
  if (!s && o->post) s = get(k, o->post, k->buf[B_POST_OUT], (size_t)S * HM_HC * 4);
  if (!s && o->comb) s = get(k, o->comb, k->buf[B_COMB_OUT], (size_t)S * HM_HC * HM_HC * 4);
  if (!s && o->pre) s = get(k, o->pre, k->buf[B_PRE_OUT], (size_t)S * HM_HC * 4);
  if (!s && o->q) s = get_bf16(k, o->q, k->buf[B_Q], S * H * K1_HEAD);
  if (!s && o->kt) s = get(k, o->kt, k->buf[B_KT], (size_t)S * K1_KEYS * 4);
  if (!s && o->klen) s = get(k, o->klen, k->buf[B_KLEN], (size_t)S * 2 * 4);
  if (!s && o->x_out) s = get_bf16(k, o->x_out, k->buf[B_X_OUT], S * D);
  if (!s && o->qr_out) s = get_bf16(k, o->qr_out, k->buf[B_QR_OUT], S * Q);
  if (!s && o->swa && swa) s = get(k, o->swa, k->cache, cache_bytes(swa));
  return s;
}

/* ---------------------------------------------------------------- steps */

static hm_status check_inputs(const hm_step_inputs *in, bool step) {
  if (!in || in->S < 1 || in->S > IO_ROWS)
    return hm_fail(HM_ERR_INVALID_ARG, "K1 group: inputs (rows 1..%u)", IO_ROWS);
  if (step && (!in->x || !in->res || !in->post || !in->comb || !in->pre))
    return hm_fail(HM_ERR_INVALID_ARG, "K1 group: x, res, post, comb and pre are all needed (layer 0's seam is "
                                       "not K1's)");
  if (step && (!in->swa.base || !cache_bytes(&in->swa)))
    return hm_fail(HM_ERR_INVALID_ARG, "K1 group: no SWA cache");
  return HM_OK;
}

static void *step_rank(void *arg) {
  struct grank *k = arg;
  hm_k1_group *g = k->g;
  hm_status s = upload(k, g->in);
  if (s) return keep(k, s);
  double t = 0;
  for (uint32_t i = 0; i < g->steps; i++) {
    double t0 = hm_group_now_ns();
    s = hm_k1_step(k->k1, k->q, &k->io);
    t += hm_group_now_ns() - t0;
    if (s) return keep(k, s);
  }
  k->ns = t / g->steps;
  return keep(k, g->out ? download(k, g->in->S, &g->in->swa, &g->out[k->r]) : HM_OK);
}

hm_status hm_k1_group_step(hm_k1_group *g, const hm_step_inputs *in, uint32_t steps, hm_k1_outputs *out,
                           double *ns) {
  if (!g) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_group_step: NULL group");
  hm_status s = check_inputs(in, true);
  if (s) return s;
  g->in = in, g->out = out, g->steps = steps ? steps : 1;
  s = on_ranks(g, step_rank);
  g->in = NULL, g->out = NULL;
  if (s) return s;
  if (ns) *ns = g->rank[0].ns;
  return HM_OK;
}

static void *keylist_rank(void *arg) {
  struct grank *k = arg;
  hm_k1_group *g = k->g;
  hm_status s;
  /* the keylist reads no record, but the window's slots are checked against the cache's size */
  if ((s = size_cache(k, cache_bytes(&g->in->swa))) || (s = upload_meta(k, g->in))) return keep(k, s);
  k->io.kt = k->buf[B_KT], k->io.klen = k->buf[B_KLEN];
  if ((s = hm_k1_keylist(k->k1, k->q, &k->io))) return keep(k, s);
  if (!g->out) return keep(k, HM_OK);
  const hm_k1_outputs *o = &g->out[k->r];
  const uint32_t S = g->in->S;
  if (o->kt && (s = get(k, o->kt, k->buf[B_KT], (size_t)S * K1_KEYS * 4))) return keep(k, s);
  if (o->klen && (s = get(k, o->klen, k->buf[B_KLEN], (size_t)S * 2 * 4))) return keep(k, s);
  return keep(k, HM_OK);
}

hm_status hm_k1_group_keylist(hm_k1_group *g, const hm_step_inputs *in, hm_k1_outputs *out) {
  if (!g) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_group_keylist: NULL group");
  hm_status s = check_inputs(in, false);
  if (s) return s;
  g->in = in, g->out = out;
  s = on_ranks(g, keylist_rank);
  g->in = NULL, g->out = NULL;
  return s;
}

hm_status hm_k1_group_replay(hm_k1_group *g, const hm_step_inputs *in, uint32_t replays, hm_k1_outputs *out,
                             hm_k1_replay_check check, void *ctx) {
  if (!g || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_group_replay: NULL argument");
  hm_status s = check_inputs(in, true);
  if (s) return s;
  const uint64_t timeout = g->cfg && g->cfg->step_timeout_ns ? g->cfg->step_timeout_ns
                           : hm_runtime_is_sim(g->rt)         ? 600000000000ull
                                                              : 10000000000ull;
  hm_chain *c[8] = {0};
  for (uint32_t r = 0; r < g->tp; r++) {
    struct grank *k = &g->rank[r];
    if ((s = upload(k, in)) || (s = hm_chain_create(k->q, &c[r])) || (s = hm_k1_record(k->k1, c[r], &k->io))) {
      s = hm_fail_prefix(s, "rank %u", r);
      goto done;
    }
  }
  for (uint32_t i = 0; i < replays; i++) {
    /* no peers: every rank's chain in flight at once only so the ranks overlap */
    for (uint32_t r = 0; r < g->tp; r++)
      if ((s = hm_chain_replay(c[r]))) {
        s = hm_fail_prefix(s, "rank %u", r);
        goto done;
      }
    for (uint32_t r = 0; r < g->tp; r++) {
      struct grank *k = &g->rank[r];
      if ((s = hm_chain_wait(c[r], timeout)) || (s = hm_queue_status(k->q)) ||
          (s = download(k, in->S, &in->swa, &out[r]))) {
        s = hm_fail_prefix(s, "rank %u: replay %u", r, i);
        goto done;
      }
      if (check && check(ctx, i, r, &out[r])) {
        s = hm_fail(HM_ERR_RUNTIME, "K1 group: replay %u of rank %u failed its check", i, r);
        goto done;
      }
    }
  }
done:
  for (uint32_t r = 0; r < g->tp; r++)
    if (c[r]) hm_chain_destroy(c[r]);
  return s;
}
