/* layer/run/hm_k1_group.h: a whole TP group of K1 in one process (a thread a rank, an agent a rank), fed
 * with host arrays: what the tests, hsa-mono-check and hsa-mono-bench drive. */
#ifndef HM_K1_GROUP_H
#define HM_K1_GROUP_H

#include "hm_k1.h"
#include "hm_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_k1_group hm_k1_group;

/* tp ranks on GPU agents 0..tp-1 of rt, weights w[0..tp) (rank r's in w[r]): each rank's K1
 * created (hm_k1_create with cfg, whose epoch must be NULL: a rank's epoch buffer is its agent's),
 * a queue, device I/O buffers and host-visible metadata for up to 48 rows each. K1 has no peers,
 * so there is no heap. Fails (nothing left) with the first rank's reason. */
hm_status hm_k1_group_create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_k1_config *cfg,
                             hm_k1_group **out);
/* hm_k1_group_create with the ranks' attention weights built from src (hm_weights_build of layer cfg
 * lc, tp, opts; its parts HM_WPART_ATTN whatever opts says) by the group one rank at a time: a rank's
 * weights are built, its K1 created (which copies them to its device) and the host copies it holds
 * dropped (hm_weights_drop_uploaded) before the next rank's are built. The group owns them
 * (hm_k1_group_weights); src is read during this call only. */
hm_status hm_k1_group_create_source(hm_runtime *rt, const hm_layer_config *lc, uint32_t tp, const hm_source *src,
                                    const hm_build_opts *opts, const hm_k1_config *cfg, hm_k1_group **out);
void hm_k1_group_destroy(hm_k1_group *g);
/* Rank r's weights as the group holds them (the caller's, or hm_k1_group_create_source's trimmed
 * ones), or NULL. */
const hm_layer_weights *hm_k1_group_weights(const hm_k1_group *g, uint32_t r);

/* One rank's outputs, copied back into host arrays the caller allocates (NULL skips one): res
 * [S][4][D], post [S][4], comb [S][16], pre [S][4], q [S][H][512] (H: the rank's heads), kt
 * [S][640], klen [2S], x_out [S][D], qr_out [S][Q] (bf16 values as f32; kt and klen are the
 * step's unless the layer runs the index build, x_out and qr_out only then), swa: the rank's whole
 * SWA cache after the step (in->swa.blocks * in->swa.block_stride bytes). */
typedef struct hm_k1_outputs {
  float *res, *post, *comb, *pre;
  float *q;
  int32_t *kt, *klen;
  float *x_out, *qr_out;
  uint8_t *swa;
} hm_k1_outputs;

/* Run `steps` steps of the same inputs on every rank (hm_k1_step each, in the rank's thread), the
 * outputs of the last into out[0..tp) (out may be NULL). The inputs as the reference takes them
 * (x and res f32 holding bf16 values; res must be given: layer 0's seam is not K1's); requests =
 * max(token_to_req) + 1; the compressed cache only as in->comp.blocks and in->comp.block_size.
 * Every call starts from the caller's SWA cache (uploaded to each rank first). *ns (if given): the
 * mean wall time of a step on rank 0. HM_ERR_* of the first rank that failed, with its message. */
hm_status hm_k1_group_step(hm_k1_group *g, const hm_step_inputs *in, uint32_t steps, hm_k1_outputs *out,
                           double *ns);

/* The keylist launch on every rank (hm_k1_keylist) from in's metadata (in->topk the top-k to use):
 * kt and klen into out[0..tp) (out may be NULL). */
hm_status hm_k1_group_keylist(hm_k1_group *g, const hm_step_inputs *in, hm_k1_outputs *out);

/* Record one step of these inputs per rank into a chain of its own (the inputs and the cache
 * uploaded once; K1 has no peers, so the ranks replay independently), replay it `replays` times,
 * and copy out each rank's outputs after every replay into out[r], then call `check` with them (a
 * nonzero return stops). The width must have run a step first (hm_k1_group_step). */
typedef int (*hm_k1_replay_check)(void *ctx, uint32_t replay, uint32_t rank, const hm_k1_outputs *o);
hm_status hm_k1_group_replay(hm_k1_group *g, const hm_step_inputs *in, uint32_t replays, hm_k1_outputs *out,
                             hm_k1_replay_check check, void *ctx);

/* Rank r's K1 (for its scratch and dims), and its agent. */
hm_k1 *hm_k1_group_rank(hm_k1_group *g, uint32_t r);
hm_agent *hm_k1_group_agent(hm_k1_group *g, uint32_t r);

#ifdef __cplusplus
}
#endif
#endif /* HM_K1_GROUP_H */
