/* layer/run/hm_ffn_group.h: a whole TP group of the FFN launch in one process (a thread a rank, an agent
 * a rank), fed with host arrays: what the tests, hsa-mono-check and hsa-mono-bench drive. */
#ifndef HM_FFN_GROUP_H
#define HM_FFN_GROUP_H

#include "hm_ffn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_ffn_group hm_ffn_group;

/* tp ranks on GPU agents 0..tp-1 of rt, weights w[0..tp) (rank r's in w[r]): heaps bootstrapped
 * over threads, each rank's launch created (hm_ffn_create with cfg), a queue and I/O buffers for
 * up to 48 rows each. Fails (nothing left) with the first rank's reason. */
hm_status hm_ffn_group_create(hm_runtime *rt, const hm_layer_weights *w, uint32_t tp, const hm_ffn_config *cfg,
                              hm_ffn_group **out);
/* hm_ffn_group_create with the ranks' FFN weights built from src (hm_weights_build of layer cfg lc,
 * tp, opts; its parts HM_WPART_FFN whatever opts says) by the group, in each rank's thread one rank
 * at a time: a rank's weights are built, its launch created (which copies them to its device) and
 * the host copies it holds dropped (hm_weights_drop_uploaded) before the next rank's are built, so the
 * host holds one rank's FFN weights at most beside the others' small remainders. The group owns them
 * (hm_ffn_group_weights); src is read during this call only. */
hm_status hm_ffn_group_create_source(hm_runtime *rt, const hm_layer_config *lc, uint32_t tp, const hm_source *src,
                                     const hm_build_opts *opts, const hm_ffn_config *cfg, hm_ffn_group **out);
void hm_ffn_group_destroy(hm_ffn_group *g);
/* Rank r's weights as the group holds them (the caller's, or hm_ffn_group_create_source's trimmed
 * ones), or NULL. */
const hm_layer_weights *hm_ffn_group_weights(const hm_ffn_group *g, uint32_t r);

/* One step's host inputs, as the reference takes them (f32 holding bf16 values where the launch
 * reads bf16): parts[r] [S][D] rank r's wo_b output, res [S][4][D], post [S][4], comb [S][4][4],
 * pre [S][4]. */
typedef struct hm_ffn_inputs {
  uint32_t rows;
  const float *parts[8];
  const float *res, *post, *comb, *pre;
} hm_ffn_inputs;

/* One rank's outputs, copied back: x [S][D], res [S][4][D], post [S][4], comb [S][16], pre [S][4]
 * (f32; x and res hold bf16 values). The caller allocates them (NULL skips one). */
typedef struct hm_ffn_outputs {
  float *x, *res, *post, *comb, *pre;
} hm_ffn_outputs;

/* Run `steps` steps of the same inputs on every rank (hm_layer_ffn each), outputs of the last
 * into out[0..tp) (out may be NULL). *ns (if given): the mean wall time of a step on rank 0, from
 * the launch to its completion. HM_ERR_* of the first rank that failed, with its message. */
hm_status hm_ffn_group_step(hm_ffn_group *g, const hm_ffn_inputs *in, uint32_t steps, hm_ffn_outputs *out,
                            double *ns);

/* Record one step of these inputs per rank into a chain (the inputs uploaded once), replay it
 * `replays` times, and copy out the outputs after every replay into out[r] (replay-by-replay
 * comparison: `check` is called after each replay with the rank's outputs, and a nonzero return
 * stops). The width must have run a step first. */
typedef int (*hm_ffn_replay_check)(void *ctx, uint32_t replay, uint32_t rank, const hm_ffn_outputs *o);
hm_status hm_ffn_group_replay(hm_ffn_group *g, const hm_ffn_inputs *in, uint32_t replays, hm_ffn_outputs *out,
                              hm_ffn_replay_check check, void *ctx);

/* Rank r's launch (for its scratch and dims), and its heap (to abort the group). */
hm_ffn *hm_ffn_group_rank(hm_ffn_group *g, uint32_t r);
hm_heap *hm_ffn_group_heap(hm_ffn_group *g, uint32_t r);

#ifdef __cplusplus
}
#endif
#endif /* HM_FFN_GROUP_H */
