/* layer/run/k1_internal.h: K1's runner state, shared by its files (k1_bind.c: eligibility and weights;
 * k1_launch.c: the checks of a step, steps, recorded steps and the keylist launch). */
#ifndef HM_K1_INTERNAL_H
#define HM_K1_INTERNAL_H

#include "hm_k1.h"
#include "kernels/k1_args.h"
#include "timeline_internal.h"

/* The bound weights, in the order of struct k1_args. */
enum k1_tensor {
  K1_T_HC_FN, K1_T_HC_SCALE, K1_T_HC_BASE, K1_T_NORM, K1_T_WQKV, K1_T_WQKV_S, K1_T_Q_NORM, K1_T_KV_NORM,
  K1_T_WQ_B, K1_T_WQ_B_S, K1_T_COS_SIN, K1_T_COUNT
};

/* A width's mailboxes (zeroed once, never cleared again: the epoch tags them). */
struct k1_width {
  void *scratch;
  struct hm_k1_scratch_layout layout;
};

struct hm_k1 {
  hm_agent *agent;
  hm_runtime *rt;
  hm_program *prog;
  const hm_kernel *kernel, *keylist;
  hm_layer_config cfg;
  hm_rank_dims dims;
  uint32_t rank, tp, grid;
  hm_arch arch;          /* the agent's: gfx942 reads its own weight copies (spec/mono.md §2.6, §4.4) */
  uint32_t max_rows;     /* §5.3.1: K1_MAX_ROWS, K1_MAX_ROWS_GFX942 on gfx942 */
  uint32_t rope_rows;    /* rows of cos_sin: a position must be below it */
  bool index_build;      /* HM_ROLE_INDEX_SOURCE: x_out and qr_out, no key table */
  uint64_t step_timeout_ns, arrival_timeout_ns;
  void *w[K1_T_COUNT];   /* device copies */
  uint32_t *epoch;       /* DEV_EPOCH_WORDS: the caller's (shared with K2) or own_epoch */
  uint32_t *own_epoch;   /* allocated here when the caller gives none; K1 then advances it */
  struct hm_dev_persist *persist;
  void *kernarg;         /* the step's arguments (hm_k1_step waits, so one slot serves) */
  void *kl_kernarg;      /* the keylist launch's (waited for too) */
  hm_signal done;
  struct k1_width width[K1_MAX_ROWS + 1];
  void **recorded;       /* kernargs of recorded steps, freed with the runner */
  uint32_t nrecorded, caprecorded;
  uint32_t owners;       /* layers it is a part of: hm_k1_destroy refuses while any */
  struct hm_tl_buf tl;   /* the per-CTA timeline (hm_k1_config.timeline), else empty */
};

/* How many of its recorded steps' arguments chains still hold. */
unsigned hm_k1_recorded_held(const hm_k1 *k);

/* k1_bind.c: the checks of hm_k1_create (a refusal names its rule), and the weights' upload. */
hm_status hm_k1_check_agent(hm_agent *a, const hm_k1_config *cfg);
hm_status hm_k1_check_layer(const hm_layer_weights *w, hm_arch arch);
hm_status hm_k1_bind_weights(hm_k1 *k, const hm_layer_weights *w);

#endif /* HM_K1_INTERNAL_H */
