/* layer/ffn_internal.h: the FFN launch runner's state, shared by its files (ffn_bind.c: weights and
 * eligibility; ffn_launch.c: steps). */
#ifndef HM_FFN_INTERNAL_H
#define HM_FFN_INTERNAL_H

#include "hm_ffn.h"
#include "kernels/ffn_args.h"

/* The bound weights, in the order of struct ffn_args. */
enum ffn_tensor {
  FFN_T_HC_FN, FFN_T_HC_SCALE, FFN_T_HC_BASE, FFN_T_NORM, FFN_T_GATE_W, FFN_T_BIAS, FFN_T_W13, FFN_T_W13_S,
  FFN_T_W2, FFN_T_W2_S, FFN_T_SGU, FFN_T_SGU_S, FFN_T_SW2, FFN_T_SW2_S, FFN_T_COUNT
};

/* A width's mailboxes (zeroed once, never cleared again: the epoch tags them). */
struct ffn_width {
  void *scratch;
  struct ffn_scratch layout;
};

struct hm_ffn {
  hm_heap *heap;
  hm_agent *agent;
  hm_runtime *rt;
  hm_program *prog;
  const hm_kernel *kernel;
  hm_layer_config cfg;
  hm_rank_dims dims;
  uint32_t rank, tp, grid;
  uint64_t peer_timeout_ns, step_timeout_ns;
  void *w[FFN_T_COUNT];  /* device copies */
  size_t region_attn, region_ffn;
  uint32_t *epoch;       /* DEV_EPOCH_WORDS, device memory */
  uint32_t *status;      /* host-visible */
  struct dev_persist *persist;
  void *kernarg;         /* the step's arguments (hm_layer_ffn waits, so one slot serves) */
  hm_signal done;
  struct ffn_width width[FFN_MAX_ROWS + 1];
  void **recorded;       /* kernargs of recorded steps, freed with the launch */
  uint32_t nrecorded, caprecorded;
};

/* ffn_bind.c: the checks of hm_ffn_create (a refusal names its rule), and the weights' upload. */
hm_status hm_ffn_check_layer(const hm_layer_weights *w, const hm_ffn_config *cfg, uint32_t tp);
hm_status hm_ffn_check_agent(hm_agent *a, const hm_ffn_config *cfg);
hm_status hm_ffn_bind_weights(hm_ffn *f, const hm_layer_weights *w);

#endif /* HM_FFN_INTERNAL_H */
