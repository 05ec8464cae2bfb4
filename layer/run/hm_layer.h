/* layer/run/hm_layer.h: one decoder layer's decode step on one TP rank as the serving stack calls it
 * (DESIGN §1, spec/mono.md §1.3, §2.7, §5.4): K1 then K2, every layer kind, or the FFN launch alone.
 *
 * Kinds (hm_layer_config roles, spec/mono.md §1.3), all whole on gfx950:
 *  - REUSE (ratio 1 or 2, not an index source): K1 (key table from the index source's top-k the
 *    caller passes) -> K2.
 *  - index sources (2, 8, 14, 20, 24, 28, 32, 36): K1's index build -> the select callback (host:
 *    compressor + indexer writing the compressed cache and the layer's top-k) -> keylist -> K2.
 *  - window layers (0, 1) and the draft layers (40-42, ratio 0): K1 over the window -> K2. Layer 0
 *    enters with the embedding: residual = embedding x4 (a broadcast launch), x = 0, post = 0,
 *    comb = I, pre = e0 (the identity "window seam"). An Engram layer (1, 14) first runs vLLM's mHC
 *    post and the Engram block through the Engram callback (host), then the identity seam.
 * Host work happens only in the two callbacks (select, Engram), between launches; a layer without
 * them is packets only (and can be recorded). */
#ifndef HM_LAYER_RUN_H
#define HM_LAYER_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_k1.h"
#include "hm_k2.h"
#include "hm_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_layer hm_layer;

/* The Engram callback's arguments: the previous layer's outputs as host f32 arrays (bf16 values
 * where the layer's tensors are bf16), this step's hashes. It writes the settled residual res
 * [S][4][D] (bf16 values) the identity seam then starts from. */
typedef struct hm_engram_args {
  const hm_layer_weights *w; /* this rank's weights (HM_WPART_ENGRAM) */
  uint32_t S;
  const float *x, *res, *post, *comb; /* [S][D], [S][4][D], [S][4], [S][4][4] */
  const int64_t *hashes;        /* [S][24] */
  const uint8_t *mask;          /* [S], 1 = text; NULL: all text */
  const hm_source *table;       /* the checkpoint's engram.embed.{weight,scale} */
} hm_engram_args;
typedef hm_status (*hm_engram_fn)(void *ctx, const hm_engram_args *a, float *res);

/* The library's Engram callback: the reference's mHC post and Engram block (hm_ref_mhc_post,
 * hm_ref_engram); ctx unused. */
hm_status hm_layer_engram_ref(void *ctx, const hm_engram_args *a, float *res);

typedef struct hm_layer_options {
  hm_ffn_config run;     /* grid, residency, reduced experts, bounds (K1 takes min_cus, ctas, step bound) */
  /* index sources: the select step (hm_ref.h hm_select_fn: host arrays in, top-k [S][512] out, the
   * compressed cache written through hm_select_args.comp). NULL: the reference's compressor and
   * indexer (hm_ref_select) on select_ctx, an hm_select_state of this rank. Either way the
   * compressed cache is written by the host: it must be host-accessible memory (HM_POOL_HOST). */
  hm_select_fn select;
  void *select_ctx;
  /* Engram layers: NULL is hm_layer_engram_ref */
  hm_engram_fn engram;
  void *engram_ctx;
} hm_layer_options;

/* Binds rank hm_heap_rank(heap)'s weights of one layer (ATTN + FFN parts; SELECT on index sources,
 * ENGRAM on Engram layers) to the heap's agent: K2 (hm_k2_create: the heap's regions reserved,
 * collective in effect) and K1 on K2's epoch buffer, the layer's device buffers for 48 rows.
 * Refusals (HM_ERR_REFUSED) name the rule of spec/mono.md §5; nothing is left on any error. */
hm_status hm_layer_create(hm_heap *heap, const hm_layer_weights *w, const hm_layer_options *opt, hm_layer **out);
/* HM_ERR_BUSY (nothing done) while a chain still holds a recorded launch of the layer
 * (hm_chain_destroy first). A layer holds its heap (through its K2) and its weights
 * (hm_weights_free refuses) until destroyed; its K1 and K2 are its own (their destroy refuses). */
hm_status hm_layer_destroy(hm_layer *l);

/* One whole step's tensors. Device memory of the heap's agent unless said (or the runtime's host
 * memory), from hm_mem_alloc, 4-byte aligned, each with room for rows x its shape; bf16 as u16
 * bits. Checked before anything is launched (hm_mem_check): anything else is HM_ERR_INVALID_ARG
 * naming the tensor ("layer L step: x_out ..."). */
typedef struct hm_layer_io {
  uint32_t rows, prefills;
  /* the seam state in: x bf16 [S][D] (the previous layer's output; on layer 0 the embedding),
   * res bf16 [S][4][D] (NULL on layer 0), post f32 [S][4], comb f32 [S][4][4], pre f32 [S][4]
   * (unused on layer 0) */
  const void *x, *res;
  const float *post, *comb, *pre;
  /* the five outputs (the next layer's seam state) */
  void *x_out, *res_out;
  float *post_out, *comb_out, *pre_out;
  /* the step's metadata (host-visible, hm_k1.h): on a REUSE layer meta.topk is its index source's
   * top-k; an index source makes its own (meta.topk ignored) */
  hm_k1_meta meta;
  hm_k1_cache swa;  /* this layer's SWA cache (the step's records are written into it) */
  hm_k1_cache comp; /* the compressed cache of the layer's kv source (ratio > 0) */
  /* Engram layers: host arrays (hm_engram_args) */
  const int64_t *engram_hashes;
  const uint8_t *engram_mask;
  const hm_source *engram_table;
} hm_layer_io;

/* Whether the whole layer takes this step (K1's and K2's rules, hm_k1_accepts / hm_k2_accepts):
 * HM_OK, HM_ERR_REFUSED naming the rule, HM_ERR_INVALID_ARG for a bad tensor or index. */
hm_status hm_layer_accepts(const hm_layer *l, const hm_layer_io *io);

/* The whole step on q, waited for: K1 (the index build on index sources, then the select callback
 * and keylist), K2; the Engram callback first on Engram layers. HM_ERR_PEER when a peer failed. */
hm_status hm_layer_step(hm_layer *l, hm_queue *q, const hm_layer_io *io);

/* The FFN-only step (the caller ran its own attention: io->part is this rank's wo_b output) on the
 * same weights, epoch and regions as K2 (hm_layer_ffn on the layer's K2 runner): whole and
 * FFN-only steps interleave freely. */
hm_status hm_layer_ffn_step(hm_layer *l, hm_queue *q, const hm_ffn_io *io);

/* The whole step appended to a recorded chain (packets only): K1 and K2, and layer 0's broadcast.
 * A layer whose step needs host work (an index source's select, an Engram layer's block) is
 * refused (HM_ERR_INVALID_ARG, saying which callback). The width must have run a step first. */
hm_status hm_layer_record(hm_layer *l, hm_chain *c, const hm_layer_io *io);

/* The index source's top-k of its last step ([rows][512] host memory; NULL on other layers):
 * the top-k the REUSE layers after it read. */
const int32_t *hm_layer_topk(const hm_layer *l);

/* Parts, for tools and the harness: the layer's K1 and K2 runners, its dims. K1's intermediate
 * outputs of the last step (q, kt, klen, res_mid and the mixes) in the layer's device buffers:
 * hm_layer_k1_io gives the last step's K1 io. */
hm_k1 *hm_layer_k1(hm_layer *l);
hm_k2 *hm_layer_k2(hm_layer *l);
const hm_k1_io *hm_layer_k1_io(const hm_layer *l);
const hm_layer_config *hm_layer_cfg(const hm_layer *l);

#ifdef __cplusplus
}
#endif
#endif /* HM_LAYER_RUN_H */
