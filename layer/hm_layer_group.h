/* layer/hm_layer_group.h: a whole TP group of one layer in one process (a thread a rank, an agent a
 * rank), fed with host arrays as the reference takes them: what the tests and the tools drive. */
#ifndef HM_LAYER_GROUP_H
#define HM_LAYER_GROUP_H

#include "hm_layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_layer_group hm_layer_group;

/* tp ranks on GPU agents 0..tp-1 of rt, weights w[0..tp) (rank r's in w[r], which must outlive the
 * group): heaps bootstrapped over threads, each rank's hm_layer (hm_layer_create with run; the
 * reference Engram block; on an index source the reference select on rank r's state select[r],
 * which a chain of layers shares (layer 20's candidates feed 24, 28, ...), or, with select NULL,
 * on a state the group makes for each rank), a queue, device I/O buffers and host-visible metadata
 * for up to 48 rows. Nothing is left on failure. */
hm_status hm_layer_group_create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_ffn_config *run,
                                hm_select_state *const *select, hm_layer_group **out);
void hm_layer_group_destroy(hm_layer_group *g);

/* Rank r's select state (index sources; NULL otherwise; the caller's when it gave them): seed it
 * as the reference's (hm_gen_step_seed_select) before the first step. */
hm_select_state *hm_layer_group_select_state(hm_layer_group *g, uint32_t r);

/* One rank's outputs, copied back into host arrays the caller allocates (NULL skips one): the five
 * layer outputs x [S][D], res [S][4][D], post [S][4], comb [S][16], pre [S][4]; the caches after
 * the step (in->swa.blocks * block_stride and in->comp.blocks * block_stride bytes); the index
 * source's top-k [S][512]; K1's q [S][H][512], kt [S][640], klen [2S], res_mid [S][4][D] and the
 * attention seam's post_a, comb_a, pre_a (f32; bf16 tensors as their values). */
typedef struct hm_layer_outputs {
  float *x, *res, *post, *comb, *pre;
  uint8_t *swa, *comp;
  int32_t *topk;
  float *q;
  int32_t *kt, *klen;
  float *res_mid, *post_a, *comb_a, *pre_a;
} hm_layer_outputs;

/* Run `steps` whole steps of the same inputs on every rank (hm_layer_step, each from the caller's
 * caches, uploaded first), the outputs of the last into out[0..tp) (out may be NULL). The inputs as
 * hm_ref_layer_step takes them: layer 0 reads x as the embedding and no res; a REUSE layer reads
 * in->topk; requests = max(token_to_req) + 1. *ns: the mean wall time of a step on rank 0. */
hm_status hm_layer_group_step(hm_layer_group *g, const hm_step_inputs *in, uint32_t steps, hm_layer_outputs *out,
                              double *ns);

/* The same step on the ranks of the mask `ranks` only (bit r: rank r; the others do nothing, as a
 * dead peer would): what the failure-path tests drive. The first failure in rank order. */
hm_status hm_layer_group_step_ranks(hm_layer_group *g, const hm_step_inputs *in, uint32_t ranks, hm_layer_outputs *out);

/* Record one whole step of these inputs per rank (packets only: no index source, no Engram
 * layer), replay it `replays` times, copy each rank's outputs after every replay into out[r] and
 * call check (a nonzero return stops). The width must have run a step first. */
typedef int (*hm_layer_replay_check)(void *ctx, uint32_t replay, uint32_t rank, const hm_layer_outputs *o);
hm_status hm_layer_group_replay(hm_layer_group *g, const hm_step_inputs *in, uint32_t replays, hm_layer_outputs *out,
                                hm_layer_replay_check check, void *ctx);

/* Rank r's layer, agent and heap (to abort the group). */
hm_layer *hm_layer_group_rank(hm_layer_group *g, uint32_t r);
hm_agent *hm_layer_group_agent(hm_layer_group *g, uint32_t r);
hm_heap *hm_layer_group_heap(hm_layer_group *g, uint32_t r);

#ifdef __cplusplus
}
#endif
#endif /* HM_LAYER_GROUP_H */
