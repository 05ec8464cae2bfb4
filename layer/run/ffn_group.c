/* layer/run/ffn_group.c: a TP group of the FFN launch in one process: a thread a rank for the
 * collective and blocking calls, host arrays in and out through a staging buffer a rank. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

#include "formats.h"
#include "group_internal.h"
#include "hm_ffn_group.h"
#include "kernels/ffn_args.h"

#define IO_ROWS FFN_MAX_ROWS

struct grank {
  hm_ffn_group *g;
  uint32_t r;
  hm_agent *agent;
  hm_queue *q;
  hm_heap *heap;
  hm_ffn *ffn;
  hm_ffn_io io;     /* device buffers for IO_ROWS rows */
  void *stage;      /* host-visible staging */
  size_t stage_bytes;
  hm_rank_result res;
  double ns;
};

struct hm_ffn_group {
  hm_runtime *rt;
  const hm_layer_weights *w;
  const hm_ffn_config *cfg;
  uint32_t tp, D;
  /* hm_ffn_group_create_source: the ranks' weights the group builds from src, one rank at a time
   * (build held), each trimmed once its launch holds the device copies */
  hm_layer_weights *own;
  hm_source src;
  hm_build_opts bopts;
  pthread_mutex_t build;
  hm_boot_group *boot;
  /* the operation the rank threads run */
  uint32_t steps, rows;
  struct grank rank[8];
};

/* A rank's outcome (group_internal.h). */
static void *keep(struct grank *k, hm_status s) { return hm_rank_keep(&k->res, k->r, s); }

/* ---------------------------------------------------------------- set-up and teardown */

static size_t io_bytes(uint32_t D) {
  return (size_t)IO_ROWS * D * 2 * 2 + (size_t)IO_ROWS * 4 * D * 2 * 2 + (size_t)IO_ROWS * 24 * 4 * 2;
}

static void free_rank(struct grank *k, hm_runtime *rt) {
  if (k->ffn) hm_ffn_destroy(k->ffn);
  if (k->heap) hm_heap_destroy(k->heap);
  void *p[] = {(void *)k->io.part, (void *)k->io.res_in, (void *)k->io.post_in, (void *)k->io.comb_in,
               (void *)k->io.pre_in, k->io.out, k->io.res_out, k->io.post_out, k->io.comb_out, k->io.pre_out,
               k->stage};
  for (unsigned i = 0; i < sizeof p / sizeof *p; i++)
    if (p[i]) hm_mem_free(rt, p[i]);
  if (k->q) hm_queue_destroy(k->q);
  memset(&k->io, 0, sizeof k->io);
  k->ffn = NULL, k->heap = NULL, k->stage = NULL, k->q = NULL;
}

static hm_status alloc_io(struct grank *k, uint32_t D) {
  hm_status s;
  void *p;
#define ALLOC(field, bytes)                                                                     \
  if ((s = hm_mem_alloc(k->agent, HM_POOL_COARSE, (bytes), 256, &p))) return s;                 \
  k->io.field = p;
  ALLOC(part, (size_t)IO_ROWS * D * 2)
  ALLOC(res_in, (size_t)IO_ROWS * 4 * D * 2)
  ALLOC(post_in, (size_t)IO_ROWS * 16)
  ALLOC(comb_in, (size_t)IO_ROWS * 64)
  ALLOC(pre_in, (size_t)IO_ROWS * 16)
  ALLOC(out, (size_t)IO_ROWS * D * 2)
  ALLOC(res_out, (size_t)IO_ROWS * 4 * D * 2)
  ALLOC(post_out, (size_t)IO_ROWS * 16)
  ALLOC(comb_out, (size_t)IO_ROWS * 64)
  ALLOC(pre_out, (size_t)IO_ROWS * 16)
#undef ALLOC
  k->stage_bytes = io_bytes(D);
  return hm_mem_alloc(k->agent, HM_POOL_HOST, k->stage_bytes, 0, &k->stage);
}

static void *create_rank(void *arg) {
  struct grank *k = arg;
  hm_ffn_group *g = k->g;
  hm_status s;
  if ((s = hm_queue_create(k->agent, 256, &k->q))) return keep(k, s);
  hm_bootstrap b;
  if ((s = hm_bootstrap_threads(g->boot, &b))) return keep(k, s);
  /* the launch's two all-reduce regions, at 48 rows, plus alignment slack */
  size_t region = hm_allreduce_region_bytes(g->tp, FFN_MAX_ROWS, g->D);
  hm_heap_config hc = {.rank = k->r, .tp = g->tp, .half_bytes = 2 * region + 4096,
                       .protocol = g->cfg ? g->cfg->ar_protocol : HM_AR_PROTOCOL_DEFAULT};
  s = hm_heap_create(k->agent, &hc, &b, &k->heap);
  hm_bootstrap_release(&b);
  if (s) return keep(k, s);
  if (g->own) {
    pthread_mutex_lock(&g->build);
    hm_layer_weights *b = &g->own[k->r];
    s = hm_weights_build(&b->cfg, g->tp, k->r, &g->src, &g->bopts, b);
    if (!s) s = hm_ffn_create(k->heap, b, g->cfg, &k->ffn);
    /* the launch holds its device copies now: the host keeps only the small remainder */
    if (!s) s = hm_weights_drop_uploaded(b, NULL);
    pthread_mutex_unlock(&g->build);
  } else {
    s = hm_ffn_create(k->heap, &g->w[k->r], g->cfg, &k->ffn);
  }
  if (s) return keep(k, s);
  return keep(k, alloc_io(k, g->D));
}

/* fn on every rank in its own thread; the first failure (rank order) as the result */
static hm_status on_ranks(hm_ffn_group *g, void *(*fn)(void *)) {
  return hm_on_ranks(g->rank, sizeof g->rank[0], offsetof(struct grank, res), offsetof(struct grank, agent), g->tp,
                     fn);
}

/* own: the weights the group builds (hm_ffn_group_create_source; w = own, their cfg set), with
 * their source and options, or NULL */
static hm_status create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_ffn_config *cfg,
                        hm_layer_weights *own, const hm_source *src, const hm_build_opts *bopts, hm_ffn_group **out) {
  if (!rt || !w || !out || tp < 1 || tp > 8) {
    free(own);
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_group_create: arguments");
  }
  *out = NULL;
  if (hm_agent_count(rt) < tp) {
    free(own);
    return hm_fail(HM_ERR_INVALID_ARG, "FFN group: TP %u needs %u GPU agents, the runtime has %u", tp, tp,
                   hm_agent_count(rt));
  }
  hm_ffn_group *g = calloc(1, sizeof *g);
  if (!g) {
    free(own);
    return hm_fail(HM_ERR_NO_MEMORY, "FFN group");
  }
  g->rt = rt, g->w = w, g->cfg = cfg, g->tp = tp, g->D = w[0].cfg.hidden;
  if (own) {
    g->own = own, g->src = *src, g->bopts = *bopts;
    pthread_mutex_init(&g->build, NULL);
  }
  hm_status s = hm_boot_group_create(tp, &g->boot);
  if (s) {
    hm_ffn_group_destroy(g); /* no rank made yet: frees own */
    return s;
  }
  for (uint32_t r = 0; r < tp; r++) g->rank[r] = (struct grank){.g = g, .r = r, .agent = hm_agent_get(rt, r)};
  s = on_ranks(g, create_rank);
  hm_boot_group_destroy(g->boot);
  g->boot = NULL;
  if (s) {
    hm_ffn_group_destroy(g);
    return s;
  }
  *out = g;
  return HM_OK;
}

hm_status hm_ffn_group_create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_ffn_config *cfg,
                              hm_ffn_group **out) {
  return create(rt, w, tp, cfg, NULL, NULL, NULL, out);
}

hm_status hm_ffn_group_create_source(hm_runtime *rt, const hm_layer_config *lc, uint32_t tp, const hm_source *src,
                                     const hm_build_opts *opts, const hm_ffn_config *cfg, hm_ffn_group **out) {
  if (!lc || !src || !src->info || !src->read || !out)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_group_create_source: null argument");
  if (tp < 1 || tp > 8) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_group_create_source: tp %u", tp);
  hm_status s = hm_config_check(lc);
  if (s) return s;
  hm_layer_weights *own = calloc(tp, sizeof *own);
  if (!own) return hm_fail(HM_ERR_NO_MEMORY, "FFN group weights");
  for (uint32_t r = 0; r < tp; r++) own[r].cfg = *lc;
  hm_build_opts bo = opts ? *opts : (hm_build_opts){0};
  bo.parts = HM_WPART_FFN;
  return create(rt, own, tp, cfg, own, src, &bo, out); /* create owns own */
}

void hm_ffn_group_destroy(hm_ffn_group *g) {
  if (!g) return;
  for (uint32_t r = 0; r < g->tp; r++) free_rank(&g->rank[r], g->rt);
  if (g->own) {
    /* after the launches (their users) are gone */
    for (uint32_t r = 0; r < g->tp; r++) hm_weights_free(&g->own[r]);
    free(g->own);
    pthread_mutex_destroy(&g->build);
  }
  free(g);
}

const hm_layer_weights *hm_ffn_group_weights(const hm_ffn_group *g, uint32_t r) {
  return g && r < g->tp ? &g->w[r] : NULL;
}

hm_ffn *hm_ffn_group_rank(hm_ffn_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].ffn : NULL; }
hm_heap *hm_ffn_group_heap(hm_ffn_group *g, uint32_t r) { return g && r < g->tp ? g->rank[r].heap : NULL; }

/* ---------------------------------------------------------------- data in and out */


/* host -> device through the staging buffer (bytes <= stage_bytes) */
static hm_status put(struct grank *k, hm_runtime *rt, void *dst, const void *src, size_t bytes) {
  hm_signal none = {0};
  if (src != k->stage) memcpy(k->stage, src, bytes);
  return hm_mem_copy(rt, dst, k->stage, bytes, none);
}
static hm_status get(struct grank *k, hm_runtime *rt, void *dst, const void *src, size_t bytes) {
  hm_signal none = {0};
  hm_status s = hm_mem_copy(rt, k->stage, src, bytes, none);
  if (!s && dst != k->stage) memcpy(dst, k->stage, bytes);
  return s;
}

static hm_status upload(hm_ffn_group *g, struct grank *k, const hm_ffn_inputs *in) {
  const uint32_t S = in->rows, D = g->D;
  hm_status s;
  uint16_t *b = k->stage;
  hm_group_to_bf16(in->parts[k->r], (uint64_t)S * D, b);
  if ((s = put(k, g->rt, (void *)k->io.part, b, (size_t)S * D * 2))) return s;
  hm_group_to_bf16(in->res, (uint64_t)S * 4 * D, b);
  if ((s = put(k, g->rt, (void *)k->io.res_in, b, (size_t)S * 4 * D * 2))) return s;
  if ((s = put(k, g->rt, (void *)k->io.post_in, in->post, (size_t)S * 16)) ||
      (s = put(k, g->rt, (void *)k->io.comb_in, in->comb, (size_t)S * 64)) ||
      (s = put(k, g->rt, (void *)k->io.pre_in, in->pre, (size_t)S * 16)))
    return s;
  k->io.rows = S, k->io.prefills = 0;
  return HM_OK;
}

static hm_status download(hm_ffn_group *g, struct grank *k, uint32_t S, const hm_ffn_outputs *o) {
  const uint32_t D = g->D;
  hm_status s = HM_OK;
  if (o->x && !(s = get(k, g->rt, k->stage, k->io.out, (size_t)S * D * 2))) hm_group_from_bf16(k->stage, (uint64_t)S * D, o->x);
  if (!s && o->res && !(s = get(k, g->rt, k->stage, k->io.res_out, (size_t)S * 4 * D * 2)))
    hm_group_from_bf16(k->stage, (uint64_t)S * 4 * D, o->res);
  if (!s && o->post) s = get(k, g->rt, o->post, k->io.post_out, (size_t)S * 16);
  if (!s && o->comb) s = get(k, g->rt, o->comb, k->io.comb_out, (size_t)S * 64);
  if (!s && o->pre) s = get(k, g->rt, o->pre, k->io.pre_out, (size_t)S * 16);
  return s;
}

/* ---------------------------------------------------------------- steps */

static void *step_rank(void *arg) {
  struct grank *k = arg;
  hm_ffn_group *g = k->g;
  double t = 0;
  for (uint32_t i = 0; i < g->steps; i++) {
    double t0 = hm_group_now_ns();
    hm_status s = hm_layer_ffn(k->ffn, k->q, &k->io);
    t += hm_group_now_ns() - t0;
    if (s) return keep(k, s);
  }
  k->ns = g->steps ? t / g->steps : 0;
  return keep(k, HM_OK);
}

static hm_status check_inputs(const hm_ffn_group *g, const hm_ffn_inputs *in) {
  if (!in || in->rows < 1 || in->rows > IO_ROWS || !in->res || !in->post || !in->comb || !in->pre)
    return hm_fail(HM_ERR_INVALID_ARG, "FFN group: inputs (rows 1..%u, every array)", IO_ROWS);
  for (uint32_t r = 0; r < g->tp; r++)
    if (!in->parts[r]) return hm_fail(HM_ERR_INVALID_ARG, "FFN group: no part for rank %u", r);
  return HM_OK;
}

hm_status hm_ffn_group_step(hm_ffn_group *g, const hm_ffn_inputs *in, uint32_t steps, hm_ffn_outputs *out,
                            double *ns) {
  if (!g) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_group_step: NULL group");
  hm_status s = check_inputs(g, in);
  if (s) return s;
  for (uint32_t r = 0; r < g->tp; r++)
    if ((s = upload(g, &g->rank[r], in))) return s;
  g->steps = steps ? steps : 1;
  if ((s = on_ranks(g, step_rank))) return s;
  if (ns) *ns = g->rank[0].ns;
  for (uint32_t r = 0; out && r < g->tp; r++)
    if ((s = download(g, &g->rank[r], in->rows, &out[r]))) return s;
  return HM_OK;
}

hm_status hm_ffn_group_replay(hm_ffn_group *g, const hm_ffn_inputs *in, uint32_t replays, hm_ffn_outputs *out,
                              hm_ffn_replay_check check, void *ctx) {
  if (!g || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_group_replay: NULL argument");
  hm_status s = check_inputs(g, in);
  if (s) return s;
  hm_chain *c[8] = {0};
  for (uint32_t r = 0; r < g->tp; r++) {
    struct grank *k = &g->rank[r];
    if ((s = upload(g, k, in)) || (s = hm_chain_create(k->q, &c[r])) || (s = hm_ffn_record(k->ffn, c[r], &k->io)))
      goto done;
  }
  for (uint32_t i = 0; i < replays; i++) {
    /* every rank's chain in flight at once: the launches all-reduce with each other */
    for (uint32_t r = 0; r < g->tp; r++)
      if ((s = hm_chain_replay(c[r]))) goto done;
    for (uint32_t r = 0; r < g->tp; r++) {
      struct grank *k = &g->rank[r];
      if ((s = hm_chain_wait(c[r], g->cfg && g->cfg->step_timeout_ns ? g->cfg->step_timeout_ns : 600000000000ull)) ||
          (s = hm_ffn_status(k->ffn)) || (s = download(g, k, in->rows, &out[r])))
        goto done;
      if (check && check(ctx, i, r, &out[r])) {
        s = hm_fail(HM_ERR_RUNTIME, "FFN group: replay %u of rank %u failed its check", i, r);
        goto done;
      }
    }
  }
done:
  for (uint32_t r = 0; r < g->tp; r++)
    if (c[r]) hm_chain_destroy(c[r]);
  return s;
}
