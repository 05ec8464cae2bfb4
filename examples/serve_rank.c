/* examples/serve_rank.c: one TP rank's whole deployment in docs/api.md's order (weights, heap, layers,
 * queue, decode steps, a recorded chain replayed, teardown), with every status checked. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_rank.h"

#define SEC 1000000000ull

/* The seam state a layer boundary carries: x bf16 [S][D], res bf16 [S][4][D], post f32 [S][4],
 * comb f32 [S][4][4], pre f32 [S][4]. */
enum { B_X, B_RES, B_POST, B_COMB, B_PRE, B_COUNT };
/* The step's metadata arrays (hm_k1_meta), host-visible. */
enum { M_POS, M_SLOT, M_SWA_IDX, M_SWA_LEN, M_T2R, M_TOPK, M_COUNT };

typedef struct serve_layer {
  hm_layer_weights w;
  bool have_w;
  hm_layer *layer;
  void *out[B_COUNT];  /* device: this layer's outputs, the next layer's inputs (never via the host) */
  void *swa;           /* device: the layer's SWA cache, kept across steps as a stack keeps its KV cache */
  size_t swa_bytes;
  void *comp;          /* host-visible: the compressed cache of the layer's kv source */
  size_t comp_bytes;
  void *meta[M_COUNT]; /* host-visible (HM_POOL_HOST): the kernel reads the metadata there */
  void *bt;
  size_t bt_bytes;
  hm_layer_io io;
} serve_layer;

typedef struct rank_state {
  const serve_plan *p;
  hm_runtime *rt;
  uint32_t rank, D;
  hm_agent *agent;
  hm_queue *q;
  hm_heap *heap;
  hm_chain *chain;
  void *in[B_COUNT]; /* device: the chain's entry (what the layers before it produced) */
  void *stage;       /* host-visible staging: hm_mem_copy takes only the runtime's memory */
  size_t stage_bytes;
  serve_layer l[SERVE_MAX_LAYERS];
} rank_state;

static size_t row_bytes(uint32_t D, int b) {
  switch (b) {
  case B_X: return (size_t)D * 2;
  case B_RES: return (size_t)HM_HC * D * 2;
  case B_COMB: return HM_HC * HM_HC * 4;
  default: return HM_HC * 4;
  }
}
static size_t meta_row_bytes(int m) {
  switch (m) {
  case M_POS: case M_SLOT: return 8;
  case M_SWA_IDX: return HM_WINDOW * 4;
  case M_TOPK: return HM_TOPK_ATTN * 4;
  default: return 4;
  }
}

/* A failed call: its status and the library's one-line reason, on this rank. */
static int failed(const rank_state *k, const char *what, hm_status s) {
  fprintf(stderr, "serve rank %u: %s: %s: %s\n", k->rank, what, hm_status_name(s), hm_errmsg());
  return SERVE_FAIL;
}
#define TRY(call, what)                     \
  do {                                      \
    hm_status s_ = (call);                  \
    if (s_ != HM_OK) {                      \
      rc = failed(k, what, s_);             \
      goto out;                             \
    }                                       \
  } while (0)

uint64_t serve_layer_seed(const serve_plan *p, uint32_t i) {
  return p->seed + 4096ull * (uint64_t)(p->first_layer + (int32_t)i);
}

hm_status serve_gen_meta(const serve_plan *p, uint32_t i, uint32_t t, hm_gen_step *out) {
  hm_layer_config cfg;
  hm_status s = hm_config_tiny(p->first_layer + (int32_t)i, &cfg);
  /* a step later each request's tokens sit one position on */
  return s ? s : hm_gen_step_make(&cfg, p->rows, p->reqs, p->ctx + t, serve_layer_seed(p, i), out);
}

hm_status serve_gen_entry(const serve_plan *p, uint32_t t, hm_gen_step *out) {
  hm_layer_config cfg;
  hm_status s = hm_config_tiny(p->first_layer, &cfg);
  /* a new token's seam state each step (the step before the chain's first layer made it) */
  return s ? s : hm_gen_step_make(&cfg, p->rows, p->reqs, p->ctx + t, serve_layer_seed(p, 0) + t, out);
}

/* float -> bf16 bits, round to nearest even (the generated values are bf16 already: exact) */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* host -> device and back through the staging buffer: a synchronous hm_mem_copy (no signal) */
static hm_status put(rank_state *k, void *dst, const void *src, size_t n) {
  hm_signal none = {0};
  for (size_t o = 0; o < n; o += k->stage_bytes) {
    size_t c = n - o < k->stage_bytes ? n - o : k->stage_bytes;
    memcpy(k->stage, (const uint8_t *)src + o, c);
    hm_status s = hm_mem_copy(k->rt, (uint8_t *)dst + o, k->stage, c, none);
    if (s) return s;
  }
  return HM_OK;
}
static hm_status get(rank_state *k, void *dst, const void *src, size_t n) {
  hm_signal none = {0};
  for (size_t o = 0; o < n; o += k->stage_bytes) {
    size_t c = n - o < k->stage_bytes ? n - o : k->stage_bytes;
    hm_status s = hm_mem_copy(k->rt, k->stage, (const uint8_t *)src + o, c, none);
    if (s) return s;
    memcpy((uint8_t *)dst + o, k->stage, c);
  }
  return HM_OK;
}
static hm_status put_bf16(rank_state *k, void *dst, const float *src, size_t n) {
  uint16_t *b = malloc(n * 2);
  if (!b) return hm_fail(HM_ERR_NO_MEMORY, "bf16 staging of %zu values", n);
  for (size_t i = 0; i < n; i++) b[i] = to_bf16(src[i]);
  hm_status s = put(k, dst, b, n * 2);
  free(b);
  return s;
}

/* Device memory of the rank's agent, zeroed (an output a layer does not write then reads as 0). */
static hm_status alloc_dev(rank_state *k, size_t n, void **p) {
  hm_status s = hm_mem_alloc(k->agent, HM_POOL_COARSE, n, 256, p);
  return s ? s : hm_mem_fill(k->rt, *p, 0, n / 4);
}

/* Plan layer i's inputs: the chain's entry for the first, the previous layer's outputs after. */
static void bind(rank_state *k, uint32_t i) {
  serve_layer *L = &k->l[i];
  void *const *src = i ? k->l[i - 1].out : k->in;
  /* the model's layer 0 reads x as the embedding and no residual or mixes */
  const bool first = hm_config_has(&L->w.cfg, HM_ROLE_FIRST);
  L->io.x = src[B_X];
  L->io.res = first ? NULL : src[B_RES];
  L->io.post = first ? NULL : src[B_POST];
  L->io.comb = first ? NULL : src[B_COMB];
  L->io.pre = first ? NULL : src[B_PRE];
  L->io.x_out = L->out[B_X], L->io.res_out = L->out[B_RES];
  L->io.post_out = L->out[B_POST], L->io.comb_out = L->out[B_COMB], L->io.pre_out = L->out[B_PRE];
}

/* A host-visible allocation of at least n bytes (a larger one is kept). */
static hm_status host_buf(rank_state *k, void **p, size_t *have, size_t n) {
  if (n <= *have) return HM_OK;
  if (*p) (void)hm_mem_free(k->rt, *p), *p = NULL, *have = 0;
  hm_status s = hm_mem_alloc(k->agent, HM_POOL_HOST, n, 0, p);
  if (!s) *have = n;
  return s;
}

/* Step t's metadata and caches of layer i into the layer's io. The SWA cache goes to the device
 * once, at the first step; later steps read what the earlier ones wrote into it. */
static hm_status feed_layer(rank_state *k, uint32_t i, const hm_gen_step *g, bool first_step) {
  serve_layer *L = &k->l[i];
  const hm_step_inputs *in = &g->in;
  const uint32_t S = in->S;
  hm_status s;
  if (first_step) {
    if ((s = alloc_dev(k, g->swa_bytes, &L->swa)) || (s = put(k, L->swa, g->swa_buf, g->swa_bytes))) return s;
    L->swa_bytes = g->swa_bytes;
  } else if (g->swa_bytes != L->swa_bytes) {
    return hm_fail(HM_ERR_INVALID_ARG, "layer %u's SWA cache changed size between steps", i);
  }
  /* the compressed cache belongs to the layer's kv source, which runs before this chain: the
   * stack hands over what it wrote (here: generated), into host-visible memory */
  if (in->comp.blocks) {
    if ((s = host_buf(k, &L->comp, &L->comp_bytes, g->comp_bytes))) return s;
    memcpy(L->comp, g->comp_buf, g->comp_bytes);
  }
  const void *src[M_COUNT] = {in->positions, in->slot_mapping, in->swa_indices, in->swa_lens, in->token_to_req,
                              in->topk};
  for (int m = 0; m < M_COUNT; m++)
    if (src[m]) memcpy(L->meta[m], src[m], (size_t)S * meta_row_bytes(m));
  hm_k1_meta *mt = &L->io.meta;
  memset(mt, 0, sizeof *mt);
  mt->positions = L->meta[M_POS], mt->slot_mapping = L->meta[M_SLOT];
  mt->swa_indices = L->meta[M_SWA_IDX], mt->swa_lens = L->meta[M_SWA_LEN];
  mt->token_to_req = L->meta[M_T2R];
  mt->topk = in->topk ? L->meta[M_TOPK] : NULL;
  mt->requests = k->p->reqs, mt->bt_stride = in->bt_stride;
  mt->comp_block = in->comp.block_size, mt->comp_blocks = in->comp.blocks;
  if (in->block_table) {
    size_t bt = (size_t)k->p->reqs * in->bt_stride * 4;
    if ((s = host_buf(k, &L->bt, &L->bt_bytes, bt))) return s;
    memcpy(L->bt, in->block_table, bt);
    mt->block_table = L->bt;
  }
  L->io.rows = S, L->io.prefills = 0;
  L->io.swa = (hm_k1_cache){L->swa, in->swa.block_stride, in->swa.block_size, in->swa.blocks};
  L->io.comp = in->comp.blocks ? (hm_k1_cache){L->comp, in->comp.block_stride, in->comp.block_size, in->comp.blocks}
                               : (hm_k1_cache){0};
  bind(k, i);
  return HM_OK;
}

/* The chain's entry seam state of step t. */
static hm_status feed_entry(rank_state *k, const hm_gen_step *e) {
  const size_t S = e->in.S, D = k->D;
  hm_status s;
  if ((s = put_bf16(k, k->in[B_X], e->x, S * D))) return s;
  if (!e->res) return HM_OK; /* layer 0 of the model: the embedding alone */
  if ((s = put_bf16(k, k->in[B_RES], e->res, S * HM_HC * D)) ||
      (s = put(k, k->in[B_POST], e->post, S * row_bytes(k->D, B_POST))) ||
      (s = put(k, k->in[B_COMB], e->comb, S * row_bytes(k->D, B_COMB))) ||
      (s = put(k, k->in[B_PRE], e->pre, S * row_bytes(k->D, B_PRE))))
    return s;
  return HM_OK;
}

/* Layer i's five outputs as raw bytes, one after another (what ranks compare). */
static size_t outputs_bytes(const rank_state *k) {
  size_t n = 0;
  for (int b = 0; b < B_COUNT; b++) n += k->p->rows * row_bytes(k->D, b);
  return n;
}
static hm_status read_outputs(rank_state *k, uint32_t i, uint8_t *dst) {
  for (int b = 0; b < B_COUNT; b++) {
    size_t n = k->p->rows * row_bytes(k->D, b);
    hm_status s = get(k, dst, k->l[i].out[b], n);
    if (s) return s;
    dst += n;
  }
  return HM_OK;
}

/* Layer i's outputs as f32 (the reference check's form). */
static hm_status read_f32(rank_state *k, uint32_t i, serve_out *o) {
  const size_t S = k->p->rows, D = k->D;
  uint8_t *raw = malloc(outputs_bytes(k));
  if (!raw) return hm_fail(HM_ERR_NO_MEMORY, "read-back buffer");
  hm_status s = read_outputs(k, i, raw);
  if (!s) {
    const uint8_t *p = raw;
    uint16_t b;
    for (size_t j = 0; j < S * D; j++, p += 2) memcpy(&b, p, 2), o->x[j] = from_bf16(b);
    for (size_t j = 0; j < S * HM_HC * D; j++, p += 2) memcpy(&b, p, 2), o->res[j] = from_bf16(b);
    memcpy(o->post, p, S * 16), p += S * 16;
    memcpy(o->comb, p, S * 64), p += S * 64;
    memcpy(o->pre, p, S * 16);
  }
  free(raw);
  return s;
}

int serve_rank(const serve_plan *p, hm_runtime *rt, uint32_t rank, hm_bootstrap *boot, serve_out *trace) {
  rank_state st, *k = &st;
  memset(k, 0, sizeof *k);
  k->p = p, k->rt = rt, k->rank = rank;
  int rc = SERVE_OK;
  uint8_t *mine = NULL, *again = NULL, *all = NULL;
  hm_gen_step g, e;
  memset(&g, 0, sizeof g), memset(&e, 0, sizeof e);
  const bool sim = hm_runtime_is_sim(rt);
  if (p->layers < 1 || p->layers > SERVE_MAX_LAYERS || p->tp < 1 || p->tp > HM_LAYER_MAX_TP ||
      p->rows < 1 || p->rows > HM_MAX_ROWS || p->reqs < 1 || p->rows % p->reqs) {
    fprintf(stderr, "serve rank %u: a plan outside the launch's limits\n", rank);
    rc = SERVE_FAIL;
    goto out;
  }
  k->agent = hm_agent_get(rt, rank);
  if (!k->agent) {
    fprintf(stderr, "serve rank %u: the runtime has %u GPU agents, rank %u needs agent %u\n", rank,
            hm_agent_count(rt), rank, rank);
    rc = SERVE_FAIL;
    goto out;
  }
  /* this thread (or process) runs beside its GPU: on the CPUs of the NUMA node the rank's kernel
   * arguments and staging come from. A machine without NUMA, or without that node, runs the rank
   * where it is (the library logs why at HSAMONO_LOG=debug). */
  hm_status bound = hm_agent_bind_thread(k->agent);
  if (bound != HM_OK && bound != HM_ERR_UNSUPPORTED && bound != HM_ERR_NOT_FOUND) {
    fprintf(stderr, "serve rank %u: not bound to NUMA node %u (running unbound): %s\n", rank,
            hm_agent_info_of(k->agent)->numa_node, hm_errmsg());
  }

  /* 1. this rank's weights of each layer: the seeded generator as the checkpoint */
  for (uint32_t i = 0; i < p->layers; i++) {
    hm_layer_config cfg;
    TRY(hm_config_tiny(p->first_layer + (int32_t)i, &cfg), "config");
    /* a recorded chain is packets only: an index source's select and an Engram block are host
     * work between launches, so such layers would be stepped, never recorded (docs/api.md) */
    if (hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE) || hm_config_has(&cfg, HM_ROLE_ENGRAM)) {
      fprintf(stderr, "serve rank %u: layer %d needs host callbacks: pick a chain without index sources and "
              "Engram layers to record it\n", rank, cfg.layer);
      rc = SERVE_FAIL;
      goto out;
    }
    hm_gen gen;
    TRY(hm_gen_init(&gen, &cfg, serve_layer_seed(p, i)), "generator");
    hm_source src = hm_gen_source(&gen);
    hm_status s = hm_weights_build(&cfg, p->tp, rank, &src, NULL, &k->l[i].w);
    hm_gen_free(&gen);
    TRY(s, "weights");
    k->l[i].have_w = true;
  }
  k->D = k->l[0].w.cfg.hidden;

  /* 2. the queue, then the heap: collective, every rank at once through the bootstrap; sized
   * for each layer's two all-reduce regions at 48 rows (docs/api.md, "Heap") */
  TRY(hm_queue_create(k->agent, 256, &k->q), "queue");
  const size_t region = hm_allreduce_region_bytes(p->tp, HM_MAX_ROWS, k->D);
  hm_heap_config hc = {.rank = rank, .tp = p->tp, .half_bytes = p->layers * (2 * region + 4096)};
  TRY(hm_heap_create(k->agent, &hc, boot, &k->heap), "heap");
  /* the bootstrap stays open: the ranks compare their outputs over its all-gather at the end */

  /* 3. the layers, in the same order on every rank (the order is the heap's agreement) */
  hm_layer_options opt = {0};
  /* a step's waits on peers: bounded well below the software agent's default 600 s, so a rank
   * that dies costs its peers a minute, not ten */
  opt.run.peer_timeout_ns = 60 * SEC;
  if (sim) {
    /* the software agent has a handful of CUs (HSAMONO_SIM_CUS), not the 256 a persistent grid
     * of one CTA a CU wants on a GPU (spec/mono.md §5.1.6): lower the rule, as the tools do */
    opt.run.min_cus = 1;
  }
  for (uint32_t i = 0; i < p->layers; i++) {
    hm_status s = hm_layer_create(k->heap, &k->l[i].w, &opt, &k->l[i].layer);
    if (s == HM_ERR_REFUSED) {
      /* docs/api.md: run that layer by the stack's own path; every rank is refused alike. This
       * example has no other path, so it says so and skips. */
      fprintf(stderr, "serve rank %u: layer %d refused (%s): a serving stack runs it by its own path\n", rank,
              k->l[i].w.cfg.layer, hm_errmsg());
      rc = SERVE_SKIP;
      goto out;
    }
    TRY(s, "layer");
  }

  /* 4. the step buffers: seam state on the device, metadata host-visible, a staging buffer */
  for (int b = 0; b < B_COUNT; b++) {
    const size_t n = HM_MAX_ROWS * row_bytes(k->D, b);
    TRY(alloc_dev(k, n, &k->in[b]), "entry buffer");
    for (uint32_t i = 0; i < p->layers; i++) TRY(alloc_dev(k, n, &k->l[i].out[b]), "output buffer");
  }
  for (uint32_t i = 0; i < p->layers; i++)
    for (int m = 0; m < M_COUNT; m++)
      TRY(hm_mem_alloc(k->agent, HM_POOL_HOST, HM_MAX_ROWS * meta_row_bytes(m), 0, &k->l[i].meta[m]), "metadata");
  k->stage_bytes = 1u << 20;
  TRY(hm_mem_alloc(k->agent, HM_POOL_HOST, k->stage_bytes, 0, &k->stage), "staging");

  /* 5. decode steps: each layer's outputs are the next one's inputs on the device */
  for (uint32_t t = 0; t < p->steps; t++) {
    for (uint32_t i = 0; i < p->layers; i++) {
      hm_gen_step_free(&g);
      TRY(serve_gen_meta(p, i, t, &g), "step metadata");
      TRY(feed_layer(k, i, &g, t == 0), "step metadata upload");
    }
    hm_gen_step_free(&e);
    TRY(serve_gen_entry(p, t, &e), "step entry");
    TRY(feed_entry(k, &e), "step entry upload");
    if (t == 0) {
      /* a step with prefill tokens is refused by rule (decode-only launches); the stack learns
       * so before any launch and runs such a step by its own path. Show that it does. */
      hm_layer_io pre = k->l[0].io;
      pre.prefills = 1;
      hm_status s = hm_layer_accepts(k->l[0].layer, &pre);
      if (s != HM_ERR_REFUSED) {
        fprintf(stderr, "serve rank %u: a prefill step was not refused (%s)\n", rank, hm_status_name(s));
        rc = SERVE_FAIL;
        goto out;
      }
      if (rank == 0) printf("serve: a step with prefill tokens goes to the stack's own path: %s\n", hm_errmsg());
    }
    for (uint32_t i = 0; i < p->layers; i++) {
      serve_layer *L = &k->l[i];
      hm_status s = hm_layer_accepts(L->layer, &L->io);
      if (s == HM_ERR_REFUSED) {
        /* the step's shape is the same on every rank, so every rank takes this branch together */
        fprintf(stderr, "serve rank %u: step %u of layer %d refused (%s): the stack's own path would run it\n",
                rank, t, L->w.cfg.layer, hm_errmsg());
        rc = SERVE_FAIL;
        goto out;
      }
      TRY(s, "step check");
      s = hm_layer_step(L->layer, k->q, &L->io);
      if (s == HM_ERR_PEER) {
        /* the group has failed for good: tear down (below) and bootstrap a new heap */
        rc = failed(k, "step (the TP group failed: rebuild it)", s);
        goto out;
      }
      TRY(s, "step");
    }
    for (uint32_t i = 0; trace && i < p->layers; i++) TRY(read_f32(k, i, &trace[t * p->layers + i]), "read back");
    if (rank == 0) printf("serve: step %u of layers %d-%d done\n", t, p->first_layer, p->first_layer + (int)p->layers - 1);
  }
  const size_t nout = outputs_bytes(k);
  if (!(mine = malloc(nout)) || !(again = malloc(nout)) || !(all = malloc(nout * p->tp))) {
    fprintf(stderr, "serve rank %u: out of host memory\n", rank);
    rc = SERVE_FAIL;
    goto out;
  }
  TRY(read_outputs(k, p->layers - 1, mine), "read back");

  /* 6. the last step recorded as one chain of packets and replayed: the same inputs and caches
   * give the same bits, and a replay only rewrites packet headers */
  const uint64_t wait_ns = (sim ? 600 : 20) * SEC * p->layers;
  TRY(hm_chain_create(k->q, &k->chain), "chain");
  for (uint32_t i = 0; i < p->layers; i++) TRY(hm_layer_record(k->l[i].layer, k->chain, &k->l[i].io), "record");
  for (uint32_t n = 0; n < p->replays; n++) {
    TRY(hm_chain_replay(k->chain), "replay");
    TRY(hm_chain_wait(k->chain, wait_ns), "replay wait");
    /* a replay has no step call to return a status: the queue and each layer's K2 report it */
    TRY(hm_queue_status(k->q), "replay queue");
    for (uint32_t i = 0; i < p->layers; i++) TRY(hm_ffn_status(hm_layer_k2(k->l[i].layer)), "replay launch");
    TRY(read_outputs(k, p->layers - 1, again), "read back");
    if (memcmp(mine, again, nout)) {
      fprintf(stderr, "serve rank %u: replay %u's outputs differ from the stepped step's\n", rank, n);
      rc = SERVE_FAIL;
      goto out;
    }
  }
  if (rank == 0) printf("serve: %u replays of the recorded chain match the stepped step\n", p->replays);

  /* 7. every rank must hold the same bits (the all-reduce sums in rank order on every rank) */
  TRY(boot->allgather(boot->ctx, rank, p->tp, mine, nout, all, 60 * SEC), "all-gather");
  for (uint32_t r = 1; r < p->tp; r++)
    if (memcmp(all, all + r * nout, nout)) {
      size_t at = 0;
      while (all[at] == all[r * nout + at]) at++;
      fprintf(stderr, "serve rank %u: rank %u's outputs differ from rank 0's at byte %zu of %zu\n", rank, r, at, nout);
      rc = SERVE_FAIL;
    }
  if (rc == SERVE_OK && rank == 0) printf("serve: all %u ranks hold the same %zu bytes of outputs\n", p->tp, nout);

out:
  /* a rank that gives up tells its peers at once, rather than leaving them to their bound */
  if (rc == SERVE_FAIL && k->heap) (void)hm_heap_abort(k->heap);
  hm_bootstrap_release(boot);
  hm_gen_step_free(&g), hm_gen_step_free(&e);
  free(mine), free(again), free(all);
  /* 8. teardown in docs/api.md's order: chain (before its queue), layers, heap, queue, memory */
  if (k->chain) hm_chain_destroy(k->chain);
  for (uint32_t i = 0; i < SERVE_MAX_LAYERS; i++)
    if (k->l[i].layer) hm_layer_destroy(k->l[i].layer);
  if (k->heap) {
    hm_status s = hm_heap_destroy(k->heap);
    if (s) rc = failed(k, "heap teardown", s);
  }
  if (k->q) hm_queue_destroy(k->q);
  for (uint32_t i = 0; i < SERVE_MAX_LAYERS; i++) {
    serve_layer *L = &k->l[i];
    void *bufs[] = {L->out[0], L->out[1], L->out[2], L->out[3], L->out[4], L->swa, L->comp, L->bt, L->meta[0],
                    L->meta[1], L->meta[2], L->meta[3], L->meta[4], L->meta[5]};
    for (unsigned j = 0; j < sizeof bufs / sizeof *bufs; j++)
      if (bufs[j]) (void)hm_mem_free(rt, bufs[j]); /* ours, so it cannot be refused */
    if (L->have_w) hm_weights_free(&L->w);
  }
  for (int b = 0; b < B_COUNT; b++)
    if (k->in[b]) (void)hm_mem_free(rt, k->in[b]);
  if (k->stage) (void)hm_mem_free(rt, k->stage);
  return rc;
}
