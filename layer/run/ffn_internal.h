/* layer/run/ffn_internal.h: the FFN launch runner's state, shared by its files (ffn_bind.c, k2_bind.c:
 * weights and eligibility; ffn_launch.c: creation, steps; k2_launch.c: K2's steps on the same runner). */
#ifndef HM_FFN_INTERNAL_H
#define HM_FFN_INTERNAL_H

#include "hm_ffn.h"
#include "kernels/ffn_args.h"
#include "kernels/k2_args.h"
#include "timeline_internal.h"

/* What a runner launches: the FFN launch alone (its step is hm_layer_ffn), or K2, the same stages
 * with the attention back in front (hm_k2_step). One runner, so creation, mailboxes, steps and
 * status are one code path; the mode decides the kernel, its arguments and what is bound. */
enum ffn_mode { FFN_MODE_FFN, FFN_MODE_K2 };
/* What a step launches: the FFN launch (either mode: a K2 runner runs the layer's FFN-only steps
 * too, on the same weights, epoch and regions), or K2 (K2 mode). */
enum ffn_step { FFN_STEP_FFN, FFN_STEP_K2 };

/* The bound weights, in the order of struct ffn_args. */
enum ffn_tensor {
  FFN_T_HC_FN, FFN_T_HC_SCALE, FFN_T_HC_BASE, FFN_T_NORM, FFN_T_GATE_W, FFN_T_BIAS, FFN_T_W13, FFN_T_W13_S,
  FFN_T_W2, FFN_T_W2_S, FFN_T_SGU, FFN_T_SGU_S, FFN_T_SW2, FFN_T_SW2_S, FFN_T_COUNT
};

/* K2's attention back's bound weights (K2 mode only), in the order of struct k2_back_args. */
enum k2_tensor { K2_T_SINK, K2_T_COS_SIN, K2_T_WO_A, K2_T_WO_A_S, K2_T_WO_B, K2_T_WO_B_S, K2_T_COUNT };

/* A width's mailboxes (zeroed once, never cleared again: the epoch tags them). In K2 mode the
 * back's regions follow the FFN's in the same allocation (k2_scratch_layout), so one base serves
 * both struct ffn_args.scratch and the back's offsets. */
struct ffn_width {
  void *scratch;
  struct hm_ffn_scratch_layout layout;
  struct hm_k2_scratch_layout back; /* K2 mode: back.bytes is the allocation's size */
  uint32_t ck;            /* K2 mode: keys a split unit at this width (hm_attn_chunk_keys) */
};

struct hm_ffn {
  enum ffn_mode mode;
  const char *name;      /* "FFN" or "K2": messages say "<name> step", "<name> record" */
  const char *launch;    /* "FFN launch" or "K2": how creation and status messages name it */
  hm_heap *heap;
  hm_agent *agent;
  hm_runtime *rt;
  hm_program *prog;
  const hm_kernel *kernel[2]; /* by enum ffn_step (K2's in K2 mode only) */
  hm_layer_config cfg;
  hm_rank_dims dims;
  hm_arch arch;          /* the agent's: gfx942 runs its own copies (spec/mono.md §2.6, §4.4) */
  uint32_t mid_cols;     /* I of the kernel: MID's row (gfx950 inter_pad, gfx942 inter) */
  uint32_t max_rows;     /* §5.3.1: 48, gfx942 42 */
  uint32_t rank, tp, grid;
  uint32_t rope_rows;    /* K2 mode: rows of cos_sin (a position must be below it) */
  uint64_t peer_timeout_ns, step_timeout_ns, arrival_timeout_ns;
  void *w[FFN_T_COUNT];  /* device copies */
  void *back_w[K2_T_COUNT]; /* K2 mode: the back's device copies */
  size_t region_attn, region_ffn;
  uint32_t *epoch;       /* DEV_EPOCH_WORDS, device memory */
  uint32_t *status;      /* host-visible */
  struct hm_dev_persist *persist;
  void *kernarg;         /* the step's arguments (a step waits, so one slot serves) */
  hm_signal done;
  struct ffn_width width[FFN_MAX_ROWS + 1];
  void **recorded;       /* kernargs of recorded steps, freed with the launch */
  uint32_t nrecorded, caprecorded;
  uint32_t owners;       /* layers it is a part of: hm_ffn_destroy refuses while any */
  struct hm_tl_buf tl;   /* the per-CTA timeline (hm_ffn_config.timeline), else empty */
};

/* How many of its recorded steps' arguments chains still hold. */
unsigned hm_ffn_recorded_held(const hm_ffn *f);

/* ffn_bind.c: the checks of hm_ffn_create (a refusal names its rule, messages start "<who>: "),
 * and the weights' upload. K2 runs the FFN half's checks too, as who "K2". */
hm_status hm_ffn_check_layer(const hm_layer_weights *w, const hm_ffn_config *cfg, uint32_t tp, hm_arch arch,
                             const char *who);
hm_status hm_ffn_check_agent(hm_agent *a, const hm_ffn_config *cfg);
hm_status hm_ffn_bind_weights(hm_ffn *f, const hm_layer_weights *w);

/* k2_bind.c: K2's own checks (both weight parts, the back's kernel limits, then the FFN half's)
 * and the back's upload into f->back_w. */
hm_status hm_k2_check_agent(hm_agent *a, const hm_ffn_config *cfg);
hm_status hm_k2_check_layer(const hm_layer_weights *w, const hm_ffn_config *cfg, uint32_t tp, hm_arch arch);
hm_status hm_k2_bind_weights(hm_ffn *f, const hm_layer_weights *w);

/* ffn_launch.c: what the FFN launch's and K2's entry points share. */

/* Creation in either mode: its checks, the kernel, the weights, the heap regions, the state.
 * Nothing is left allocated on error. */
hm_status hm_ffn_open(hm_heap *heap, const hm_layer_weights *w, const hm_ffn_config *cfg, enum ffn_mode mode,
                      hm_ffn **out);
/* HM_ERR_INVALID_ARG when f is not a runner of `mode` ("<fn>: ... is a K2 runner: use <instead>"). */
hm_status hm_ffn_check_mode(const hm_ffn *f, enum ffn_mode mode, const char *fn, const char *instead);
/* hm_ffn_accepts' rules on io as a step of kind `step` reads them: the FFN launch needs part, K2
 * must not be given one (its wo_b pushes the rows itself). hold (a record's chain, else NULL):
 * the checked tensors are held by it (hm_chain_hold). */
hm_status hm_ffn_check_io(const hm_ffn *f, const hm_ffn_io *io, enum ffn_step step, hm_chain *hold);
/* struct ffn_args of a step of io->rows (whose mailboxes exist), as the FFN launch runs it. */
void hm_ffn_fill_args(const hm_ffn *f, const hm_ffn_io *io, struct ffn_args *a);

/* Writes a step's whole arguments (struct ffn_args first) at args, from the mode's io. */
typedef void ffn_fill_fn(const hm_ffn *f, const void *io, void *args);
/* A step of `rows` (io already checked): the group's state, the width's mailboxes, the arguments,
 * the persistent launch on q, the wait, the launch's status. */
hm_status hm_ffn_launch(hm_ffn *f, hm_queue *q, enum ffn_step step, uint32_t rows, ffn_fill_fn *fill, const void *io);
/* The same step appended to c (io already checked; the width must have run a step). */
hm_status hm_ffn_append(hm_ffn *f, hm_chain *c, enum ffn_step step, uint32_t rows, ffn_fill_fn *fill, const void *io);

#endif /* HM_FFN_INTERNAL_H */
