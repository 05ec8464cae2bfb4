/* layer/run/hm_ffn.h: the FFN launch of one layer on one TP rank (DESIGN §1, spec/mono.md §2.3-§2.4,
 * §5): its weights bound on the GPU, the eligibility rules, a decode step, a recorded step. */
#ifndef HM_FFN_RUN_H
#define HM_FFN_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_collectives.h"
#include "hm_hsa.h"
#include "hm_timeline.h"
#include "hm_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_ffn hm_ffn;

typedef struct hm_ffn_config {
  /* spec/mono.md §5.1.6: a persistent launch of one CTA a CU wants the whole part (0: 256 CUs).
   * Tests on the software agent run small grids and lower it. */
  uint32_t min_cus;
  /* CTAs of the launch (0: one a CU, the residency check's whole grid) */
  uint32_t ctas;
  /* §5.2.4 fixes the routing at (384, 6), draft (128, 3), for DeepSeek-V4.1-Flash; a test or
   * benchmark build with fewer experts (hm_config_set_experts) must say so here */
  bool reduced_experts;
  /* a per-CTA timeline of every step (hm_timeline.h; hm_ffn_timeline, hm_k1_timeline read it):
   * false, the default, allocates nothing and the kernels stamp nothing */
  bool timeline;
  /* The step's bounds (docs/api.md, "Bounds"), each 0 for its default, ordered so the first to
   * expire names the root cause: arrival (the persistent grid resident and started; 0: 10 s on a GPU,
   * 30 s on the software agent, at most half the peer bound) <
   * the software agent's watchdog (a kernel without progress, not counting waits on peers;
   * HSAMONO_SIM_WATCHDOG_S, 60 s) < peer (a wait on a peer's push, counted from the step's start;
   * 0: 10 s on a GPU, 600 s on the software agent, where a step takes CPU time) < step (the host's
   * wait for the whole step; 0: the peer bound plus 10 s). hm_ffn_create refuses a set out of
   * this order (HM_ERR_INVALID_ARG naming the two). */
  uint64_t peer_timeout_ns, step_timeout_ns, arrival_timeout_ns;
  /* The all-reduce protocol of the heap an hm_ffn_group creates (device/ar.h; 0: the default, word).
   * hm_ffn_create runs on the caller's heap, whose protocol its hm_heap_config chose. */
  hm_ar_protocol ar_protocol;
} hm_ffn_config;

/* Binds this rank's weights of one layer (w: hm_weights_build for rank hm_heap_rank(heap) of
 * hm_heap_tp(heap), with the FFN part) to the heap's agent: checks every tensor's dtype and shape
 * against the layer's dims (one-line reason naming the tensor), copies them to the GPU, reserves
 * the launch's two all-reduce regions in the heap (collective in effect: every rank creates its
 * layers' launches in the same order), loads the kernel. Refusals (HM_ERR_REFUSED) name the rule
 * of spec/mono.md §5 (or the kernel limit) that fails; nothing is left allocated on any error. */
hm_status hm_ffn_create(hm_heap *heap, const hm_layer_weights *w, const hm_ffn_config *cfg, hm_ffn **out);
/* HM_ERR_BUSY (nothing done) while it is in use: a part of a layer (hm_layer_destroy destroys it),
 * a recorded step still in a chain (hm_chain_destroy first), a K1 on its epoch buffer (K2). The
 * runner holds its heap until then (hm_heap_destroy refuses). */
hm_status hm_ffn_destroy(hm_ffn *f);

/* The last step's per-CTA timeline (the FFN launch's, or K2's on a K2 runner), valid until the
 * runner's next step: HM_ERR_INVALID_ARG when the runner was created without
 * hm_ffn_config.timeline or has not stepped. */
hm_status hm_ffn_timeline(hm_ffn *f, hm_timeline *out);

/* One step's tensors: the heap's agent's device memory (or the runtime's host memory), from
 * hm_mem_alloc, 4-byte aligned, each with room for rows x its shape from its address. Checked
 * before the launch (hm_mem_check): anything else is HM_ERR_INVALID_ARG naming the tensor. */
typedef struct hm_ffn_io {
  uint32_t rows;        /* S: decode tokens of the step */
  uint32_t prefills;    /* prefill tokens in the step (the launch is decode-only: must be 0) */
  const void *part;     /* bf16 [S][D]: this rank's unreduced wo_b output */
  const void *res_in;   /* bf16 [S][4][D]: the attention seam's residual streams */
  const float *post_in; /* f32 [S][4] */
  const float *comb_in; /* f32 [S][4][4] */
  const float *pre_in;  /* f32 [S][4]: the attention seam's pre (the collapse's delayed pre) */
  void *out;            /* bf16 [S][D]: the layer's x (the reduced MoE output), every rank alike */
  void *res_out;        /* bf16 [S][4][D] */
  float *post_out, *comb_out, *pre_out; /* f32 [S][4], [S][4][4], [S][4] */
} hm_ffn_io;

/* Whether the launch takes this step: HM_OK, or HM_ERR_REFUSED with the rule (rows outside
 * 1..48, a step that is not decode-only): the caller runs its own path for it. Bad pointers are
 * HM_ERR_INVALID_ARG. Every rank decides alike (the step's shape is TP-replicated). A K2 runner
 * (hm_k2.h) is HM_ERR_INVALID_ARG here, in hm_layer_ffn and in hm_ffn_record: its step is hm_k2_step. */
hm_status hm_ffn_accepts(const hm_ffn *f, const hm_ffn_io *io);

/* Run one step on q (a queue of the heap's agent) and wait for it: HM_OK, a refusal as
 * hm_ffn_accepts, HM_ERR_PEER when a peer failed (the group is then failed: tear it down),
 * HM_ERR_TIMEOUT. A step width's mailboxes are allocated at its first step (hm_ffn_prepare does
 * it ahead); nothing else is allocated on the step path. */
hm_status hm_layer_ffn(hm_ffn *f, hm_queue *q, const hm_ffn_io *io);
/* Allocate the mailboxes of width rows now. */
hm_status hm_ffn_prepare(hm_ffn *f, uint32_t rows);

/* The same step appended to a recorded chain of q's agent: every replay runs it again on the same
 * addresses (the epoch on the device tags each replay). The first step of a width must have run
 * through hm_layer_ffn (its residency and arrival checked) before it is recorded. */
hm_status hm_ffn_record(hm_ffn *f, hm_chain *c, const hm_ffn_io *io);
/* After replays: HM_OK, or HM_ERR_PEER with what a launch reported. */
hm_status hm_ffn_status(const hm_ffn *f);

/* The launch's grid and the dims it runs (for tools). */
uint32_t hm_ffn_grid(const hm_ffn *f);
const hm_layer_config *hm_ffn_layer(const hm_ffn *f);

/* The bytes width rows' last step had to read from memory on this rank: the weights of the experts
 * it chose (real gate/up rows, every down column), the shared expert, the router, the seam's
 * weights, and the step's inputs and outputs. *experts: how many distinct experts it chose. */
hm_status hm_ffn_step_bytes(const hm_ffn *f, uint32_t rows, uint64_t *bytes, uint32_t *experts);

/* For the harness's stage checks: the device address and layout of width rows' mailboxes (the
 * stage outputs of the last step of that width: normed rows, quantised inputs, route, MID, ...),
 * laid out as device/kernels/ffn_args.h's struct hm_ffn_scratch_layout. NULL before that width's first step. */
struct hm_ffn_scratch_layout;
const void *hm_ffn_scratch(const hm_ffn *f, uint32_t rows, struct hm_ffn_scratch_layout *layout);

#ifdef __cplusplus
}
#endif
#endif /* HM_FFN_RUN_H */
