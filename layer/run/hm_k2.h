/* layer/run/hm_k2.h: K2 of one layer on one TP rank (DESIGN §1, spec/mono.md §2.2-§2.4, §5): the attention
 * back (split, combine, wo_a, wo_b) and then the FFN launch's stages, in one persistent launch. */
#ifndef HM_K2_RUN_H
#define HM_K2_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_ffn.h"
#include "hm_k1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* K2 is the FFN launch with the attention back in front of its seam: the same runner (hm_ffn.h),
 * which in K2 mode holds both kernels. hm_ffn_destroy, hm_ffn_status, hm_ffn_grid, hm_ffn_layer,
 * hm_ffn_prepare, hm_ffn_scratch and hm_ffn_step_bytes (the FFN half, less the part K2 does not
 * read) apply to it, and so do hm_ffn_accepts, hm_layer_ffn and hm_ffn_record: the layer's FFN-only
 * steps (the caller ran its own attention) run on the same weights, epoch buffer and peer regions
 * as its K2 steps, so the two interleave freely. hm_k2_step, hm_k2_record and hm_k2_accepts refuse
 * a runner of hm_ffn_create, and hm_k2_epoch, hm_k2_chunk_keys, hm_k2_back_bytes and hm_k2_scratch
 * give NULL or 0 for it. */
typedef struct hm_ffn hm_k2;

/* Binds rank hm_heap_rank(heap)'s weights of one layer with both the ATTN and the FFN parts (the
 * back's wo_a, wo_b, attn_sink, cos_sin and everything hm_ffn_create binds) to the heap's agent;
 * as hm_ffn_create otherwise (refusals name their rule; the heap's regions reserved; nothing left on
 * error). */
hm_status hm_k2_create(hm_heap *heap, const hm_layer_weights *w, const hm_ffn_config *cfg, hm_k2 **out);

/* One step's tensors (as hm_ffn_io's: the heap's agent's memory from hm_mem_alloc, 4-byte
 * aligned, rows x the shape; the caches blocks x block_stride; positions host memory,
 * HM_POOL_HOST). Checked before the launch: anything else is HM_ERR_INVALID_ARG naming it. */
typedef struct hm_k2_io {
  /* the FFN seam's inputs (K1's res_out, post_out, comb_out, pre_out) and the layer's outputs;
   * ffn.part must be NULL (wo_b pushes its rows itself) */
  hm_ffn_io ffn;
  const void *q;             /* bf16 [S][H][512]: K1's roped q of this rank's heads */
  const int32_t *kt;         /* i32 [S][640]: the key table of this step (K1's, or keylist's) */
  const int32_t *klen;       /* i32 [2S] */
  const int64_t *positions;  /* [S], host-visible (hm_k1_meta.positions): rows of the RoPE table */
  hm_k1_cache swa;           /* the caches the key table points into (K1 has written the step's records) */
  hm_k1_cache comp;          /* zero on ratio-0 layers */
} hm_k2_io;

/* Whether K2 takes this step: as hm_ffn_accepts (a part given is HM_ERR_INVALID_ARG), plus the
 * back's tensors (NULL or misaligned: HM_ERR_INVALID_ARG), the caches' geometry (block_size >= 1,
 * block_stride >= block_size * 584 and a multiple of 4; comp only on a layer with a compress
 * ratio) and every position against the RoPE table (naming the row). The key table is trusted to
 * be this step's K1 or keylist output over the same caches (its indices were checked there). */
hm_status hm_k2_accepts(const hm_k2 *k, const hm_k2_io *io);

/* Run one step on q and wait for it (as hm_layer_ffn: HM_ERR_PEER when a peer failed, ...). */
hm_status hm_k2_step(hm_k2 *k, hm_queue *q, const hm_k2_io *io);

/* The same step appended to a recorded chain (as hm_ffn_record). */
hm_status hm_k2_record(hm_k2 *k, hm_chain *c, const hm_k2_io *io);

/* The epoch buffer K2 advances: K1 of the same layer and rank shares it (hm_k1_config.epoch), so
 * K1's tag 2e + 1 and K2's 2e + 2 belong to one step. */
void *hm_k2_epoch(hm_k2 *k);
/* K2's per-CTA timeline: hm_ffn_timeline (an hm_k2 is an hm_ffn runner), created with
 * hm_ffn_config.timeline. */
/* The arrival bound the runner resolved from its hm_ffn_config (K1 of the same layer takes it). */
uint64_t hm_k2_arrival_timeout(const hm_k2 *k);

/* Keys a split unit reads at this width (64 or 128, spec/mono.md §1.2). */
uint32_t hm_k2_chunk_keys(const hm_k2 *k, uint32_t rows);

/* The bytes a step of `rows` must read on this rank beyond the FFN half's (hm_ffn_step_bytes):
 * wo_a, wo_b, the sink, the RoPE rows, q, the key table, and 584 bytes for each of the step's live
 * keys (klen: the step's [2S] key lengths, host memory, of which kv_len klen[0..S) counts, each
 * clamped to 0..640; NULL counts none). 0 for rows outside 1..48. */
uint64_t hm_k2_back_bytes(const hm_k2 *k, uint32_t rows, const int32_t *klen);

/* For the harness's stage checks: the back's mailboxes of width rows (device/kernels/k2_args.h's
 * struct hm_k2_scratch_layout, offsets from the returned base, which is also hm_ffn_scratch's). */
struct hm_k2_scratch_layout;
const void *hm_k2_scratch(const hm_k2 *k, uint32_t rows, struct hm_k2_scratch_layout *layout);

#ifdef __cplusplus
}
#endif
#endif /* HM_K2_RUN_H */
