/* layer/run/layer_run.c: one layer's decode step on one rank (hm_layer.h): K1 and K2 bound together on one
 * epoch buffer, the layer's device buffers between them, the kinds of spec/mono.md §1.3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffn_internal.h"
#include "group_internal.h"
#include "hm_layer.h"
#include "k1_internal.h"
#include "seam_needs.h"
#include "kernels/k1_args.h"
#include "kernels/seam_prep_args.h"

#define ROWS K1_MAX_ROWS

/* The layer's device buffers between the launches, 48 rows each. */
enum { L_RES_MID, L_POST_A, L_COMB_A, L_PRE_A, L_Q, L_KT, L_KLEN, L_X_OUT, L_QR_OUT, /* K1 -> K2 */
       L_RES0,                                       /* the settled residual (layer 0, Engram) */
       L_ZERO_X, L_ZERO_POST, L_IDENT_COMB, L_E0_PRE, /* the identity seam's constants */
       L_COUNT };

struct hm_layer {
  hm_heap *heap;
  hm_agent *agent;
  hm_runtime *rt;
  const hm_layer_weights *w; /* the callbacks' host weights (kept by the caller) */
  hm_layer_config cfg;
  hm_layer_options opt;
  bool first, engram, index;
  hm_k2 *k2;
  hm_k1 *k1;
  hm_program *prog;            /* the broadcast's */
  const hm_kernel *bcast;
  void *bcast_kernarg;
  void *buf[L_COUNT];
  /* host-visible memory for the callbacks: bf16 transfers, their f32 forms, the top-k */
  void *stage;
  size_t stage_bytes;
  float *h_x, *h_res, *h_out, *h_post, *h_comb;
  int32_t *topk;
  void **recorded;             /* kernargs of recorded broadcasts, freed with the layer */
  uint32_t nrecorded, caprecorded;
  hm_k1_io k1io;
  hm_k2_io k2io;
  char who[32];                /* "layer L step": how the step's messages start */
};

static size_t buf_bytes(const hm_layer *l, int b) {
  const size_t D = l->cfg.hidden, S = ROWS;
  switch (b) {
  case L_RES_MID: case L_RES0: return S * HM_HC * D * 2;
  case L_POST_A: case L_PRE_A: case L_ZERO_POST: case L_E0_PRE: return S * HM_HC * 4;
  case L_COMB_A: case L_IDENT_COMB: return S * HM_HC * HM_HC * 4;
  case L_Q: return S * (size_t)l->w->dims.heads * K1_HEAD * 2;
  case L_KT: return S * K1_KEYS * 4;
  case L_KLEN: return S * 2 * 4;
  case L_X_OUT: case L_ZERO_X: return S * D * 2;
  case L_QR_OUT: return S * (size_t)l->cfg.q_lora * 2;
  default: return 0;
  }
}

/* Frees everything (a failed create, or a destroy once nothing uses the layer). */
static void layer_free(hm_layer *l) {
  if (l->k1) l->k1->owners--, hm_k1_destroy(l->k1);
  if (l->k2) l->k2->owners--, hm_ffn_destroy(l->k2);
  for (int b = 0; b < L_COUNT; b++)
    if (l->buf[b]) hm_mem_free(l->rt, l->buf[b]);
  void *host[] = {l->stage, l->h_x, l->h_res, l->h_out, l->h_post, l->h_comb, l->topk, l->bcast_kernarg};
  for (unsigned i = 0; i < sizeof host / sizeof *host; i++)
    if (host[i]) hm_mem_free(l->rt, host[i]);
  for (uint32_t i = 0; i < l->nrecorded; i++) hm_mem_free(l->rt, l->recorded[i]);
  free(l->recorded);
  if (l->prog) hm_program_unload(l->prog);
  free(l);
}

hm_status hm_layer_destroy(hm_layer *l) {
  if (!l) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_destroy: NULL layer");
  /* chains replay the recorded steps of the layer and its parts from their arguments; a K1
   * other than the layer's own on K2's epoch buffer steps on it */
  unsigned held = hm_mem_held(l->rt, l->recorded, l->nrecorded) + hm_k1_recorded_held(l->k1) +
                  hm_ffn_recorded_held(l->k2);
  unsigned epoch = hm_mem_holds(l->rt, hm_k2_epoch(l->k2));
  if (held)
    return hm_fail(HM_ERR_BUSY, "hm_layer_destroy: %u recorded launch(es) of layer %d are still in chains: "
                   "hm_chain_destroy first", held, l->cfg.layer);
  if (epoch > 1)
    return hm_fail(HM_ERR_BUSY, "hm_layer_destroy: %u other K1 runner(s) share layer %d's epoch buffer: hm_k1_destroy "
                   "first", epoch - 1, l->cfg.layer);
  __atomic_fetch_sub(&((hm_layer_weights *)l->w)->users, 1, __ATOMIC_RELEASE);
  layer_free(l);
  return HM_OK;
}

/* The identity seam's constants for 48 rows: x = 0, post = 0, comb = I, pre = e0. */
static hm_status upload_constants(hm_layer *l) {
  float *post = (float *)l->stage, *comb = post + ROWS * HM_HC, *pre = comb + ROWS * HM_HC * HM_HC;
  memset(l->stage, 0, (size_t)ROWS * (HM_HC + 2 * HM_HC * HM_HC) * 4);
  for (uint32_t t = 0; t < ROWS; t++) {
    for (uint32_t h = 0; h < HM_HC; h++) comb[(t * HM_HC + h) * HM_HC + h] = 1.0f;
    pre[t * HM_HC] = 1.0f;
  }
  hm_signal none = {0};
  hm_status s;
  if ((s = hm_mem_fill(l->rt, l->buf[L_ZERO_X], 0, buf_bytes(l, L_ZERO_X) / 4)) ||
      (s = hm_mem_fill(l->rt, l->buf[L_ZERO_POST], 0, buf_bytes(l, L_ZERO_POST) / 4)) ||
      (s = hm_mem_copy(l->rt, l->buf[L_IDENT_COMB], comb, buf_bytes(l, L_IDENT_COMB), none)) ||
      (s = hm_mem_copy(l->rt, l->buf[L_E0_PRE], pre, buf_bytes(l, L_E0_PRE), none)))
    return s;
  return HM_OK;
}

hm_status hm_layer_create(hm_heap *heap, const hm_layer_weights *w, const hm_layer_options *opt, hm_layer **out) {
  if (!heap || !w || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_create: NULL argument");
  *out = NULL;
  const hm_layer_config *c = &w->cfg;
  bool index = hm_config_has(c, HM_ROLE_INDEX_SOURCE), engram = hm_config_has(c, HM_ROLE_ENGRAM);
  if (index && !(w->parts & HM_WPART_SELECT) && !(opt && opt->select))
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d: an index source's weights need the SELECT part for the reference "
                                       "select (or a select callback)", c->layer);
  if (index && !(opt && opt->select) && !(opt && opt->select_ctx))
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d: the reference select needs its state (hm_layer_options.select_ctx)",
                   c->layer);
  if (engram && !(w->parts & HM_WPART_ENGRAM) && !(opt && opt->engram))
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d: an Engram layer's weights need the ENGRAM part for the reference "
                                       "block (or an Engram callback)", c->layer);
  hm_layer *l = calloc(1, sizeof *l);
  if (!l) return hm_fail(HM_ERR_NO_MEMORY, "hm_layer_create");
  l->heap = heap, l->agent = hm_heap_agent(heap), l->rt = hm_agent_runtime(l->agent), l->w = w, l->cfg = *c;
  if (opt) l->opt = *opt;
  l->index = index, l->engram = engram, l->first = hm_config_has(c, HM_ROLE_FIRST);
  hm_status s;
  snprintf(l->who, sizeof l->who, "layer %d step", c->layer);
  if ((s = hm_k2_create(heap, w, &l->opt.run, &l->k2))) goto fail;
  l->k2->owners++;
  hm_k1_config k1c = {.min_cus = l->opt.run.min_cus, .ctas = l->opt.run.ctas, .epoch = hm_k2_epoch(l->k2),
                      .step_timeout_ns = l->opt.run.step_timeout_ns,
                      .arrival_timeout_ns = hm_k2_arrival_timeout(l->k2), .timeline = l->opt.run.timeline};
  if ((s = hm_k1_create(l->agent, w, &k1c, &l->k1))) goto fail;
  l->k1->owners++;
  for (int b = 0; b < L_COUNT; b++)
    if ((s = hm_mem_alloc(l->agent, HM_POOL_COARSE, buf_bytes(l, b), 256, &l->buf[b])) ||
        (s = hm_mem_fill(l->rt, l->buf[b], 0, buf_bytes(l, b) / 4)))
      goto fail;
  /* staging: the largest transfer (a residual) whole; the callbacks' f32 arrays */
  const size_t D = c->hidden, big = (size_t)ROWS * HM_HC * D;
  l->stage_bytes = big * 2;
  if ((s = hm_mem_alloc(l->agent, HM_POOL_HOST, l->stage_bytes, 0, &l->stage)) || (s = upload_constants(l))) goto fail;
  /* the callbacks' host arrays: x or K1's normed rows, the residual or the q latent, the
   * callback's residual, the mixes */
  const size_t xq = (size_t)ROWS * (D > c->q_lora ? D : c->q_lora) * 4;
  if ((index || engram) && ((s = hm_mem_alloc(l->agent, HM_POOL_HOST, xq, 0, (void **)&l->h_x)) ||
                            (s = hm_mem_alloc(l->agent, HM_POOL_HOST, big * 4, 0, (void **)&l->h_res))))
    goto fail;
  if (engram && ((s = hm_mem_alloc(l->agent, HM_POOL_HOST, big * 4, 0, (void **)&l->h_out)) ||
                 (s = hm_mem_alloc(l->agent, HM_POOL_HOST, (size_t)ROWS * 16, 0, (void **)&l->h_post)) ||
                 (s = hm_mem_alloc(l->agent, HM_POOL_HOST, (size_t)ROWS * 64, 0, (void **)&l->h_comb))))
    goto fail;
  if (index && (s = hm_mem_alloc(l->agent, HM_POOL_HOST, (size_t)ROWS * K1_TOPK * 4, 0, (void **)&l->topk))) goto fail;
  if (l->first) {
    struct res_broadcast_args zero = {0};
    if ((s = hm_program_load(l->agent, &l->prog)) || (s = hm_kernel_get(l->prog, "res_broadcast", &l->bcast)) ||
        (s = hm_kernarg_new(l->agent, &zero, sizeof zero, &l->bcast_kernarg)))
      goto fail;
  }
  /* the callbacks read the host weights at every step: hm_weights_free refuses until destroy */
  __atomic_fetch_add(&((hm_layer_weights *)w)->users, 1, __ATOMIC_ACQ_REL);
  *out = l;
  return HM_OK;
fail:
  layer_free(l);
  hm_fail_prefix(s, "layer %d", c->layer);
  /* as hm_ffn_create: only a refusal of the config's rules leaves the group up (K2's own
   * failures have stopped it already; the first reason stays) */
  return s == HM_ERR_REFUSED || s == HM_ERR_PEER ? s : hm_heap_fail(heap, s, NULL);
}

/* ---------------------------------------------------------------- a step's launches */

/* K1's io for the step: the seam state it starts from (the caller's, or the identity seam over the
 * settled residual in L_RES0), the layer's buffers for its outputs. */
static void k1_io_of(hm_layer *l, const hm_layer_io *io, bool settled, hm_k1_io *k) {
  memset(k, 0, sizeof *k);
  k->rows = io->rows, k->prefills = io->prefills;
  if (settled) {
    k->x = l->buf[L_ZERO_X], k->res_in = l->buf[L_RES0], k->post_in = l->buf[L_ZERO_POST];
    k->comb_in = l->buf[L_IDENT_COMB], k->pre_in = l->first ? l->buf[L_E0_PRE] : io->pre;
  } else {
    k->x = io->x, k->res_in = io->res, k->post_in = io->post, k->comb_in = io->comb, k->pre_in = io->pre;
  }
  k->res_out = l->buf[L_RES_MID], k->post_out = l->buf[L_POST_A], k->comb_out = l->buf[L_COMB_A];
  k->pre_out = l->buf[L_PRE_A], k->q = l->buf[L_Q], k->kt = l->buf[L_KT], k->klen = l->buf[L_KLEN];
  k->x_out = l->buf[L_X_OUT], k->qr_out = l->buf[L_QR_OUT];
  k->swa = io->swa, k->meta = io->meta;
  if (l->index) k->meta.topk = NULL; /* the index build makes its own (keylist gets it) */
}

static void k2_io_of(hm_layer *l, const hm_layer_io *io, hm_k2_io *k) {
  memset(k, 0, sizeof *k);
  hm_ffn_io *f = &k->ffn;
  f->rows = io->rows, f->prefills = io->prefills;
  f->res_in = l->buf[L_RES_MID], f->post_in = l->buf[L_POST_A], f->comb_in = l->buf[L_COMB_A];
  f->pre_in = l->buf[L_PRE_A];
  f->out = io->x_out, f->res_out = io->res_out, f->post_out = io->post_out, f->comb_out = io->comb_out;
  f->pre_out = io->pre_out;
  k->q = l->buf[L_Q], k->kt = l->buf[L_KT], k->klen = l->buf[L_KLEN], k->positions = io->meta.positions;
  k->swa = io->swa, k->comp = io->comp;
}

/* The layer's own rules and K2's (cheap: pointers, the caches' shape, positions); K1's, which walk
 * the whole decode metadata, are hm_k1_accepts'. A step checks these first, then lets hm_k1_step /
 * hm_k1_record check K1's before anything is written, so the metadata is read once a step. */
static hm_status layer_checks(const hm_layer *l, const hm_layer_io *io) {
  if (!l || !io) return hm_fail(HM_ERR_INVALID_ARG, "layer step: NULL argument");
  if (!l->first && (!io->res || !io->post || !io->comb || !io->pre))
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d step: %s is NULL (res, post, comb and pre are needed after layer 0)",
                   l->cfg.layer, !io->res ? "res" : !io->post ? "post" : !io->comb ? "comb" : "pre");
  /* the caller's tensors by the layer's names, sized for the step (rows outside 1..48 are K2's
   * refusal below); K1 and K2 then check them again with the layer's own buffers, by their
   * names. The compressed cache is read through the block table's ids (< meta.comp_blocks) */
  hm_status s;
  if (io->rows >= 1 && io->rows <= ROWS && !io->prefills) {
    static const char *const in[4] = {"res", "post", "comb", "pre"};
    static const char *const out[4] = {"res_out", "post_out", "comb_out", "pre_out"};
    const uint64_t row = (uint64_t)io->rows * l->cfg.hidden * 2;
    const uint64_t comp_blocks = io->comp.blocks > io->meta.comp_blocks ? io->comp.blocks : io->meta.comp_blocks;
    hm_mem_need t[12];
    t[0] = (hm_mem_need){"x", io->x, row, HM_MEM_DEVICE};
    t[1] = (hm_mem_need){"x_out", io->x_out, row, HM_MEM_DEVICE};
    hm_seam_needs(&t[2], io->rows, l->cfg.hidden, out, io->res_out, io->post_out, io->comb_out, io->pre_out);
    t[6] = (hm_mem_need){"swa", io->swa.base, (uint64_t)io->swa.blocks * io->swa.block_stride, HM_MEM_DEVICE};
    hm_seam_needs(&t[7], io->rows, l->cfg.hidden, in, io->res, io->post, io->comb, io->pre); /* not on layer 0 */
    t[11] = (hm_mem_need){"comp", io->comp.base, comp_blocks * io->comp.block_stride,
                          l->index ? HM_MEM_HOST : HM_MEM_DEVICE};
    unsigned n = l->first ? 7 : 11;
    if ((s = hm_mem_check(l->agent, l->who, t, n)) ||
        (l->cfg.compress_ratio && (s = hm_mem_check(l->agent, l->who, &t[11], 1))))
      return s;
  }
  if (l->engram && !l->opt.engram && (!io->engram_hashes || !io->engram_table))
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d step: the Engram block needs the step's hashes and the table",
                   l->cfg.layer);
  hm_k2_io k2;
  k2_io_of((hm_layer *)l, io, &k2);
  return hm_k2_accepts(l->k2, &k2);
}

hm_status hm_layer_accepts(const hm_layer *l, const hm_layer_io *io) {
  hm_status s = layer_checks(l, io);
  if (s) return s;
  hm_k1_io k1;
  k1_io_of((hm_layer *)l, io, l->first || l->engram, &k1);
  return hm_k1_accepts(l->k1, &k1);
}

/* bf16 device [n] -> f32 host, through the stage */
static hm_status fetch_bf16(hm_layer *l, float *dst, const void *src, uint64_t n) {
  hm_signal none = {0};
  hm_status s = hm_mem_copy(l->rt, l->stage, src, (size_t)n * 2, none);
  if (!s) hm_group_from_bf16(l->stage, n, dst);
  return s;
}

/* Engram layers: the previous layer's outputs to the host, the callback, the settled residual back
 * into L_RES0. */
static hm_status run_engram(hm_layer *l, const hm_layer_io *io) {
  const uint32_t S = io->rows, D = l->cfg.hidden;
  hm_signal none = {0};
  hm_status s;
  if ((s = fetch_bf16(l, l->h_x, io->x, (uint64_t)S * D)) ||
      (s = fetch_bf16(l, l->h_res, io->res, (uint64_t)S * HM_HC * D)) ||
      (s = hm_mem_copy(l->rt, l->h_post, io->post, (size_t)S * HM_HC * 4, none)) ||
      (s = hm_mem_copy(l->rt, l->h_comb, io->comb, (size_t)S * HM_HC * HM_HC * 4, none)))
    return s;
  hm_engram_args a = {l->w, S, l->h_x, l->h_res, l->h_post, l->h_comb, io->engram_hashes, io->engram_mask,
                      io->engram_table};
  hm_engram_fn fn = l->opt.engram ? l->opt.engram : hm_layer_engram_ref;
  if ((s = fn(l->opt.engram_ctx, &a, l->h_out))) return hm_fail_prefix(s, "layer %d: Engram", l->cfg.layer);
  hm_group_to_bf16(l->h_out, (uint64_t)S * HM_HC * D, l->stage);
  return hm_mem_copy(l->rt, l->buf[L_RES0], l->stage, (size_t)S * HM_HC * D * 2, none);
}

hm_status hm_layer_engram_ref(void *ctx, const hm_engram_args *a, float *res) {
  (void)ctx;
  const uint32_t S = a->S, D = a->w->cfg.hidden;
  hm_ref_mhc_post(S, D, a->x, a->res, a->post, a->comb, res);
  return hm_ref_engram(a->w, S, a->table, a->hashes, a->mask, res, NULL, NULL);
}

/* Index sources: K1's normed rows and q latent to the host, the select callback, its top-k. */
static hm_status run_select(hm_layer *l, const hm_layer_io *io) {
  const uint32_t S = io->rows;
  hm_status s;
  if ((s = fetch_bf16(l, l->h_x, l->buf[L_X_OUT], (uint64_t)S * l->cfg.hidden)) ||
      (s = fetch_bf16(l, l->h_res, l->buf[L_QR_OUT], (uint64_t)S * l->cfg.q_lora)))
    return s;
  const hm_k1_meta *m = &io->meta;
  hm_select_args a = {&l->cfg, l->w, S, l->h_x, l->h_res, m->positions, m->slot_mapping, m->token_to_req,
                      {io->comp.base, io->comp.block_stride, io->comp.block_size, io->comp.blocks},
                      m->block_table, m->bt_stride, m->comp_block, NULL};
  hm_select_fn fn = l->opt.select ? l->opt.select : hm_ref_select;
  if ((s = fn(l->opt.select_ctx, &a, l->topk))) return hm_fail_prefix(s, "layer %d: select", l->cfg.layer);
  return HM_OK;
}

/* Layer 0: the embedding broadcast to the 4 streams (queued; K1's barrier bit orders it). */
static hm_status queue_broadcast(hm_layer *l, hm_queue *q, const hm_layer_io *io) {
  struct res_broadcast_args *a = l->bcast_kernarg;
  a->x = (uintptr_t)io->x, a->res = (uintptr_t)l->buf[L_RES0], a->S = io->rows, a->D = l->cfg.hidden;
  uint32_t n = io->rows * (l->cfg.hidden / 2), ctas = (n + 255) / 256;
  hm_dispatch d = {.kernel = l->bcast, .ctas = ctas, .kernarg = a, .barrier = true};
  d.acquire = d.release = HM_FENCE_SYSTEM;
  return hm_queue_dispatch(q, &d, 1);
}

/* The step's launches; *refused when K1's checks of the step's metadata refused it (they come
 * first in hm_k1_step, before anything of K1 runs). */
static hm_status layer_step(hm_layer *l, hm_queue *q, const hm_layer_io *io, bool *refused) {
  hm_status s;
  if (!q) return hm_fail(HM_ERR_INVALID_ARG, "layer %d step: NULL queue", l->cfg.layer);
  const bool settled = l->first || l->engram;
  if (l->first && (s = queue_broadcast(l, q, io))) return s;
  if (l->engram && !l->first && (s = run_engram(l, io))) return s;
  k1_io_of(l, io, settled, &l->k1io);
  if ((s = hm_k1_step(l->k1, q, &l->k1io))) {
    *refused = s == HM_ERR_INVALID_ARG || s == HM_ERR_REFUSED;
    return s;
  }
  if (l->index) {
    if ((s = run_select(l, io))) return s;
    hm_k1_io kl = l->k1io;
    kl.meta.topk = l->topk;
    if ((s = hm_k1_keylist(l->k1, q, &kl))) return s;
  }
  k2_io_of(l, io, &l->k2io);
  return hm_k2_step(l->k2, q, &l->k2io);
}

hm_status hm_layer_step(hm_layer *l, hm_queue *q, const hm_layer_io *io) {
  hm_status s = layer_checks(l, io);
  if (s) return hm_heap_step_refused(l->heap, s);
  bool refused = false;
  s = layer_step(l, q, io, &refused);
  /* A refusal of the step's inputs (the layer's and K1's checks) ran nothing: ranks that all
   * refuse alike keep the group up, and a peer that launched K2 alone learns of it at once
   * (hm_heap_step_refused). Anything else leaves the peers waiting in K2 for this rank's pushes:
   * stop the group now, with why. */
  if (refused) return hm_heap_step_refused(l->heap, s);
  return s && s != HM_ERR_PEER ? hm_heap_fail(l->heap, s, NULL) : s;
}

hm_status hm_layer_ffn_step(hm_layer *l, hm_queue *q, const hm_ffn_io *io) {
  if (!l) return hm_fail(HM_ERR_INVALID_ARG, "hm_layer_ffn_step: NULL layer");
  return hm_layer_ffn(l->k2, q, io);
}

hm_status hm_layer_record(hm_layer *l, hm_chain *c, const hm_layer_io *io) {
  hm_status s = layer_checks(l, io);
  if (s) return s;
  if (!c) return hm_fail(HM_ERR_INVALID_ARG, "layer %d record: NULL chain", l->cfg.layer);
  if (l->index)
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d record: an index source's select callback runs on the host between "
                                       "K1 and K2 (step it with hm_layer_step)", l->cfg.layer);
  if (l->engram)
    return hm_fail(HM_ERR_INVALID_ARG, "layer %d record: the Engram callback runs on the host before K1 (step it "
                                       "with hm_layer_step)", l->cfg.layer);
  if (l->first) {
    /* the broadcast's arguments are fixed for the chain: a kernarg of its own */
    struct res_broadcast_args a = {(uintptr_t)io->x, (uintptr_t)l->buf[L_RES0], io->rows, l->cfg.hidden};
    void *k;
    if ((s = hm_kernarg_new(l->agent, &a, sizeof a, &k))) return s;
    uint32_t n = io->rows * (l->cfg.hidden / 2);
    hm_dispatch d = {.kernel = l->bcast, .ctas = (n + 255) / 256, .kernarg = k, .barrier = true};
    d.acquire = d.release = HM_FENCE_SYSTEM;
    if (l->nrecorded == l->caprecorded) {
      uint32_t cap = l->caprecorded ? 2 * l->caprecorded : 4;
      void **n2 = realloc(l->recorded, cap * sizeof *n2);
      if (!n2) {
        hm_mem_free(l->rt, k);
        return hm_fail(HM_ERR_NO_MEMORY, "layer %d record", l->cfg.layer);
      }
      l->recorded = n2, l->caprecorded = cap;
    }
    if ((s = hm_chain_add_dispatch(c, &d))) {
      hm_mem_free(l->rt, k);
      return s;
    }
    l->recorded[l->nrecorded++] = k;
  }
  hm_k1_io k1;
  k1_io_of(l, io, l->first, &k1);
  if ((s = hm_k1_record(l->k1, c, &k1))) return s;
  hm_k2_io k2;
  k2_io_of(l, io, &k2);
  return hm_k2_record(l->k2, c, &k2);
}

const int32_t *hm_layer_topk(const hm_layer *l) { return l ? l->topk : NULL; }
hm_k1 *hm_layer_k1(hm_layer *l) { return l ? l->k1 : NULL; }
hm_k2 *hm_layer_k2(hm_layer *l) { return l ? l->k2 : NULL; }
const hm_k1_io *hm_layer_k1_io(const hm_layer *l) { return l ? &l->k1io : NULL; }
const hm_layer_config *hm_layer_cfg(const hm_layer *l) { return l ? &l->cfg : NULL; }
