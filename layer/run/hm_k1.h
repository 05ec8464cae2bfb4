/* layer/run/hm_k1.h: K1 of one layer on one TP rank (DESIGN §1, spec/mono.md §2.1, §5): the attention
 * seam and front in one persistent launch, its weights bound on the GPU, the rules, a step, a
 * recorded step; and the keylist launch that writes K1's key table from a top-k made after K1. */
#ifndef HM_K1_RUN_H
#define HM_K1_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_hsa.h"
#include "hm_timeline.h"
#include "hm_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_k1 hm_k1;

typedef struct hm_k1_config {
  /* spec/mono.md §5.1.6: CUs the part must have (0: 256); tests on small software parts lower it */
  uint32_t min_cus;
  /* CTAs of the launch (0: one a CU, the residency check's whole grid) */
  uint32_t ctas;
  /* The epoch buffer K1 shares with the launch that follows it on the same queue (K2), which
   * advances it: DEV_EPOCH_BYTES of the agent's memory, zero before its first use. NULL: K1 owns
   * one and ends every step's epoch itself (K1 alone: its tests, tools and bench). */
  void *epoch;
  /* how long a step may take before hm_k1_step gives up (0: 10 s on a GPU, 600 s on the software
   * agent), and how long its persistent grid may take to arrive (0: hm_arrival_default_ns, 10 s on
   * a GPU and 30 s on the software agent; a layer passes its hm_ffn_config's, docs/api.md "Bounds") */
  uint64_t step_timeout_ns, arrival_timeout_ns;
  /* a per-CTA timeline of every step (hm_k1_timeline; a layer passes its hm_ffn_config's): false,
   * the default, allocates nothing and the kernel stamps nothing */
  bool timeline;
} hm_k1_config;

/* Binds rank w->rank of TP w->dims.tp's attention weights of one layer (hm_weights_build with the
 * ATTN part) to agent a: checks every tensor's dtype and shape (one-line reason naming it), copies
 * them to the GPU, loads the kernels. The layer's kind decides the variant: an index-source layer
 * (HM_ROLE_INDEX_SOURCE) runs the index build (x_out and qr_out, no key table; the key table then
 * comes from hm_k1_keylist). Refusals (HM_ERR_REFUSED) name the rule of spec/mono.md §5 or the
 * kernel limit that fails; nothing is left allocated on any error. */
hm_status hm_k1_create(hm_agent *a, const hm_layer_weights *w, const hm_k1_config *cfg, hm_k1 **out);
/* HM_ERR_BUSY (nothing done) while it is in use: a part of a layer (hm_layer_destroy destroys it)
 * or a recorded step still in a chain (hm_chain_destroy first). A K1 holds the runtime and the
 * shared epoch buffer it was given (its K2's destroy refuses) until then. */
hm_status hm_k1_destroy(hm_k1 *k);

/* The last step's per-CTA timeline (hm_timeline.h), valid until the runner's next step:
 * HM_ERR_INVALID_ARG when it was created without hm_k1_config.timeline or has not stepped. */
hm_status hm_k1_timeline(hm_k1 *k, hm_timeline *out);

/* A paged fp8_ds_mla cache in the agent's memory: block b at base + b * block_stride, block_size
 * records a block (spec/mono.md §4.5). */
typedef struct hm_k1_cache {
  void *base;
  uint64_t block_stride; /* bytes, >= block_size * 584, a multiple of 4 */
  uint32_t block_size;
  uint32_t blocks;
} hm_k1_cache;

/* The step's decode metadata (spec/mono.md §2.1 inputs). It lives in host-visible memory of the
 * runtime (hm_mem_alloc HM_POOL_HOST): the runner reads every index in it before the launch and
 * the kernel reads it from there. Arrays are [S] unless said. */
typedef struct hm_k1_meta {
  const int64_t *positions;    /* row in the layer's RoPE table */
  const int64_t *slot_mapping; /* the token's SWA slot; -1: a padding token (no record, no keys) */
  const int32_t *swa_indices;  /* [S][128]: the window's SWA slots, oldest first */
  const int32_t *swa_lens;     /* live window slots, 0..128 */
  const int32_t *token_to_req; /* the token's request, < requests */
  const int32_t *topk;         /* [S][512] local compressed row ids, -1 none (ratio > 0; for the
                                * index build: given to hm_k1_keylist, not to the step) */
  const int32_t *block_table;  /* [requests][bt_stride] compressed blocks (ratio > 0) */
  uint32_t requests, bt_stride;
  uint32_t comp_block;         /* compressed rows a block */
  uint32_t comp_blocks;        /* blocks of the compressed cache */
} hm_k1_meta;

/* One step's tensors: the agent's device memory (or the runtime's host memory), from hm_mem_alloc,
 * 4-byte aligned, each with room for rows x its shape (the cache: blocks x block_stride; the
 * metadata: host memory, HM_POOL_HOST). Checked before anything is read or launched
 * (hm_mem_check): anything else is HM_ERR_INVALID_ARG naming the tensor. */
typedef struct hm_k1_io {
  uint32_t rows;        /* S: decode tokens of the step */
  uint32_t prefills;    /* prefill tokens in the step (the launch is decode-only: must be 0) */
  const void *x;        /* bf16 [S][D]: the previous layer's output */
  const void *res_in;   /* bf16 [S][4][D] */
  const float *post_in; /* f32 [S][4] */
  const float *comb_in; /* f32 [S][4][4] */
  const float *pre_in;  /* f32 [S][4]: the previous seam's pre */
  void *res_out;        /* bf16 [S][4][D]: res_mid */
  float *post_out, *comb_out, *pre_out; /* this seam's mixes: f32 [S][4], [S][4][4], [S][4] */
  void *q;              /* bf16 [S][H][512]: this rank's heads, roped */
  int32_t *kt;          /* i32 [S][640]: the key table (not the index build) */
  int32_t *klen;        /* i32 [2S] */
  void *x_out;          /* bf16 [S][D]: the index build's normed row */
  void *qr_out;         /* bf16 [S][Q]: the index build's normed q latent */
  hm_k1_cache swa;      /* the step's records go in here */
  hm_k1_meta meta;
} hm_k1_io;

/* Whether K1 takes this step: HM_OK, or HM_ERR_REFUSED naming the rule (rows outside 1..48, a
 * step that is not decode-only). A NULL or misaligned tensor and any index of the metadata that
 * would reach outside its table (a position past the RoPE table, a slot past the cache, a window
 * index past the cache, a request past the block table, a top-k id past the compressed table) is
 * HM_ERR_INVALID_ARG naming the row and the index; nothing is written. */
hm_status hm_k1_accepts(const hm_k1 *k, const hm_k1_io *io);

/* Run one step on q (a queue of the agent) and wait for it. A step width's mailboxes are
 * allocated at its first step (hm_k1_prepare does it ahead); nothing else on the step path. */
hm_status hm_k1_step(hm_k1 *k, hm_queue *q, const hm_k1_io *io);
hm_status hm_k1_prepare(hm_k1 *k, uint32_t rows);

/* The same step appended to a recorded chain (the metadata is checked now; a replay reads the
 * same addresses, whose contents the caller keeps valid). The width must have run a step first. */
hm_status hm_k1_record(hm_k1 *k, hm_chain *c, const hm_k1_io *io);

/* The keylist launch (spec/mono.md §3.9): io->kt / io->klen from io->meta (its topk), in exactly
 * K1's format, on q, waited for. For the index build's layers, after the select step. */
hm_status hm_k1_keylist(hm_k1 *k, hm_queue *q, const hm_k1_io *io);

/* The launch's grid, the layer, whether it runs the index build. */
uint32_t hm_k1_grid(const hm_k1 *k);
const hm_layer_config *hm_k1_layer(const hm_k1 *k);
bool hm_k1_index_build(const hm_k1 *k);

/* The bytes a step of `rows` must move on this rank: wqkv, wq_b, the seam's weights, the norms,
 * the RoPE rows, the step's inputs, the records written and K1's other outputs. */
uint64_t hm_k1_step_bytes(const hm_k1 *k, uint32_t rows);

/* For the harness's stage checks: the device address and layout of width rows' mailboxes
 * (device/kernels/k1_args.h's struct hm_k1_scratch_layout). NULL before that width's first step. */
struct hm_k1_scratch_layout;
const void *hm_k1_scratch(const hm_k1 *k, uint32_t rows, struct hm_k1_scratch_layout *layout);

#ifdef __cplusplus
}
#endif
#endif /* HM_K1_RUN_H */
