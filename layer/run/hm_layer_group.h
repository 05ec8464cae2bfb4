/* layer/run/hm_layer_group.h: a whole TP group of one layer, or of a chain of consecutive layers, in one
 * process (a thread a rank, an agent a rank), fed with host arrays as the reference takes them. */
#ifndef HM_LAYER_GROUP_H
#define HM_LAYER_GROUP_H

#include "hm_ffn_group.h"
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

/* hm_layer_group_create with the ranks' weights built from src (hm_weights_build of cfg, tp, opts)
 * by the group, in each rank's thread one rank at a time: a rank's weights are built, its layer
 * created (its launches copy them to its device) and the host copies the launches hold dropped
 * (hm_weights_drop_uploaded) before the next rank's are built, so the host holds one rank's whole
 * weights at most (~2 GB at V4.1-Flash TP4) beside the others' remainders (~1 %). The group owns
 * them (hm_layer_group_weights); src is read during this call only. */
hm_status hm_layer_group_create_source(hm_runtime *rt, const hm_layer_config *cfg, uint32_t tp, const hm_source *src,
                                       const hm_build_opts *opts, const hm_ffn_config *run,
                                       hm_select_state *const *select, hm_layer_group **out);

/* A chain of n layers (w[i] the tp ranks' weights of the chain's layer i, in model order): on each
 * rank one queue and one heap for all of them, layer i's outputs in device buffers that are layer
 * i + 1's inputs (nothing goes through the host between layers but the callbacks' data). */
hm_status hm_layer_group_create_chain(hm_runtime *rt, const hm_layer_weights *const *w, uint32_t n, uint32_t tp,
                                      const hm_ffn_config *run, hm_select_state *const *select, hm_layer_group **out);
void hm_layer_group_destroy(hm_layer_group *g);

/* Layers in the chain (1 for hm_layer_group_create). */
uint32_t hm_layer_group_layers(const hm_layer_group *g);

/* Rank r's select state (NULL without an index source; the caller's when it gave them): seed it as
 * the reference's (hm_gen_step_seed_select) before the first step. */
hm_select_state *hm_layer_group_select_state(hm_layer_group *g, uint32_t r);

/* One rank's outputs of one layer, copied back into host arrays the caller allocates (NULL skips
 * one): the five layer outputs x [S][D], res [S][4][D], post [S][4], comb [S][16], pre [S][4]; the
 * caches after the step (in->swa.blocks * block_stride and in->comp.blocks * block_stride bytes);
 * the index source's top-k [S][512]; K1's q [S][H][512], kt [S][640], klen [2S], res_mid [S][4][D]
 * and the attention seam's post_a, comb_a, pre_a (f32; bf16 tensors as their values). */
typedef struct hm_layer_outputs {
  float *x, *res, *post, *comb, *pre;
  uint8_t *swa, *comp;
  int32_t *topk;
  float *q;
  int32_t *kt, *klen;
  float *res_mid, *post_a, *comb_a, *pre_a;
} hm_layer_outputs;

/* Run `steps` whole steps of the chain on every rank (hm_layer_step of each layer in order, each
 * layer from the caller's caches, uploaded first), the outputs of the last into out (may be NULL):
 * layer i of rank r at out[i * tp + r]. in[i] is layer i's input as hm_ref_layer_step takes it:
 * its metadata, caches and top-k; only in[0]'s x, res and mixes are read (the chain's entry; layer
 * 0 of the model reads x as the embedding and no res); a REUSE layer reads in[i].topk; requests =
 * max(token_to_req) + 1. *ns: the mean wall time of a step of the whole chain on rank 0. */
hm_status hm_layer_group_step(hm_layer_group *g, const hm_step_inputs *in, uint32_t steps, hm_layer_outputs *out,
                              double *ns);

/* The same step on the ranks of the mask `ranks` only (bit r: rank r; the others do nothing, as a
 * dead peer would): what the failure-path tests drive. The first failure in rank order. */
hm_status hm_layer_group_step_ranks(hm_layer_group *g, const hm_step_inputs *in, uint32_t ranks, hm_layer_outputs *out);

/* An FFN-only step of chain layer i on every rank (hm_layer_ffn_step: the caller ran its own
 * attention; in->parts[r] is rank r's wo_b output), outputs into out[r] (may be NULL). It shares
 * the layer's epoch buffer and peer regions with its whole steps. */
hm_status hm_layer_group_ffn_step(hm_layer_group *g, uint32_t layer, const hm_ffn_inputs *in, hm_ffn_outputs *out);

/* Record one step of the whole chain per rank into one chain of packets (no index source, no
 * Engram layer: their callbacks are host work), replay it `replays` times, copy each rank's last
 * layer's outputs after every replay into out[r] and call check (a nonzero return stops). Every
 * layer's width must have run a step first. */
typedef int (*hm_layer_replay_check)(void *ctx, uint32_t replay, uint32_t rank, const hm_layer_outputs *o);
hm_status hm_layer_group_replay(hm_layer_group *g, const hm_step_inputs *in, uint32_t replays, hm_layer_outputs *out,
                                hm_layer_replay_check check, void *ctx);

/* Rank r's weights of chain layer i as the group holds them (hm_layer_group_create_source's:
 * trimmed to what a step's host work reads), or NULL. */
const hm_layer_weights *hm_layer_group_weights(const hm_layer_group *g, uint32_t i, uint32_t r);

/* Rank r's layer i (of the chain), agent and heap (to abort the group). hm_layer_group_rank is
 * layer 0's. */
hm_layer *hm_layer_group_layer(hm_layer_group *g, uint32_t i, uint32_t r);
hm_layer *hm_layer_group_rank(hm_layer_group *g, uint32_t r);
hm_agent *hm_layer_group_agent(hm_layer_group *g, uint32_t r);
hm_heap *hm_layer_group_heap(hm_layer_group *g, uint32_t r);

#ifdef __cplusplus
}
#endif
#endif /* HM_LAYER_GROUP_H */
