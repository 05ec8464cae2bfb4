/* tests/layer/layer_case.h: the whole-layer case test_layer.c and test_layer_942.c share: a generated step
 * through a layer group and every hand-off checked against the reference (layer_case.c). */
#ifndef HM_TESTS_LAYER_CASE_H
#define HM_TESTS_LAYER_CASE_H

#include "helpers.h"
#include "hm_layer_group.h"

/* 8-CTA parts on the software agent (every stage's placement wraps) */
extern const hm_ffn_config lc_small_grid;

/* How a case bends the generated step. */
typedef struct shape {
  uint32_t S, reqs, ctx, block;
  int32_t dead_row; /* a row given slot -1 (a padding token), or -1 for none */
  uint32_t cases;   /* the generator's hard cases (HM_GEN_*), each asserted to occur */
} shape;

/* The grid sweeps' schedule (grid_shapes_under_chaos in test_layer.c and test_layer_942.c): one row
 * and seven (the padding row among them), chaos seeds and small grids, a laggard CTA in every dispatch
 * (HSAMONO_SIM_LAGGARD=1: it publishes as late as it can, hsa/sim/cta.c). lc_sweep_seed(k) sets seed k
 * and the laggard, lc_sweep_end unsets both. */
#define LC_SWEEP_RUNS 3u
extern const shape lc_sweep_shapes[2];
extern const uint32_t lc_sweep_grids[LC_SWEEP_RUNS];
void lc_sweep_seed(uint32_t k);
void lc_sweep_end(void);

typedef struct layer_case {
  hm_layer_config cfg;
  hm_arch arch;       /* the weights' (gfx942: its copies, FNUZ SWA records, 64-key chunks) */
  uint32_t tp, S, H, ck;
  bool index;
  hm_gen_step step;   /* what the group gets (caches as before the step) */
  hm_gen_step refs;   /* the reference's copy (caches after the reference's step) */
  hm_select_state *rsel; /* the reference's select state (index sources) */
  hm_gen_opts opts;      /* how the step was made (expect_select_own makes it again) */
  int32_t dead_row;
  hm_tensor_set ref;
  hm_layer_outputs o[4];
} layer_case;

/* The step and the reference's run of it; seam_seed nonzero draws the seam state from it instead. */
void lc_case_make_seam(layer_case *c, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                       uint64_t seed, uint64_t seam_seed, const hm_source *table);
void lc_case_make(layer_case *c, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                  uint64_t seed, const hm_source *table);
void lc_case_free(layer_case *c);

/* A result of matrix instructions against the reference's (rel L2 < 1e-3, cosine > 0.99999, 95 %
 * identical: layer_case.c says why). */
void lc_expect_close(const char *what, const float *x, const float *ref, uint64_t n);
/* The checks of a run case: every rank's outputs alike, K1's half, K2's attention back, K2's FFN half. */
void lc_expect_ranks_identical(const layer_case *c);
void lc_expect_k1(const layer_case *c);
void lc_expect_back(hm_runtime *rt, hm_layer_group *g, const layer_case *c, const hm_layer_weights *w);
void lc_expect_ffn_half(hm_runtime *rt, hm_layer_group *g, const layer_case *c, const hm_layer_weights *w);
/* One step of the group on a case of `sh`, every check above. */
void lc_run_case(hm_runtime *rt, hm_layer_group *g, const hm_layer_weights *w, uint32_t tp, const shape *sh,
                 uint64_t seed, const hm_source *table);

/* A layer's weights for a TP group: attention and FFN, the select and Engram parts where the kind
 * has them; the Engram table from the generator (the checkpoint's engram.embed). */
typedef struct layer_setup {
  hm_layer_config cfg;
  uint32_t tp;
  hm_layer_weights w[4];
  hm_gen gen;
  hm_source table;
  hm_runtime *rt;
  hm_layer_group *g;
} layer_setup;

/* The group of `layer` (gfx950 layouts, or in lc_setup_arch the arch's) on the software agent. */
void lc_setup(layer_setup *L, const char *model, int32_t layer, uint32_t experts, uint32_t tp, uint64_t seed,
              const hm_ffn_config *run_in);
void lc_setup_arch(layer_setup *L, const char *model, int32_t layer, uint32_t experts, uint32_t tp, uint64_t seed,
                   const hm_ffn_config *run_in, hm_arch arch);
void lc_teardown(layer_setup *L);
/* Every rank's epoch after `steps` layer steps */
void lc_expect_epoch(layer_setup *L, uint32_t steps);
/* A group of `layer`, each shape a step (lc_run_case) */
void lc_run_layer(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *shapes, uint32_t n,
                  uint64_t seed);
void lc_run_layer_arch(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *shapes, uint32_t n,
                       uint64_t seed, hm_arch arch);
/* The same with the launches' grid config `run` (NULL: lc_small_grid) */
void lc_run_layer_grid(const char *model, int32_t layer, uint32_t experts, uint32_t tp, const shape *shapes, uint32_t n,
                       uint64_t seed, hm_arch arch, const hm_ffn_config *run);

/* ---------------------------------------------------------------- replays */

/* Replays whose inputs change every step. LC_SETS seam states (x, the residual, the mixes) over one
 * step's metadata and caches are each run once as a whole step and checked stage by stage against
 * the reference (run_case's checks); those outputs are the set's expected bits. The step is then
 * recorded (K1 and K2 on one queue, packets only) and replayed with the sets in a pseudo-random
 * order that never runs a set twice in a row: after each replay every rank's outputs must be the
 * set's bits, each layer's device epoch (word 0 of its epoch buffer, which K1 reads and K2
 * advances) exactly one past the replay before, and then the next set's seam state is written
 * into the rank's entry buffers (the fixed addresses the recorded K1 reads: hm_layer_k1_io). A
 * launch that reused an epoch, or read a mailbox or a peer's push of the step before, hands on
 * the previous set's values and fails here; with one set replayed over and over it would not. */

enum { LC_SETS = 4 };

typedef struct lc_replay_ctx {
  hm_layer_group *g;
  uint32_t tp, S, D, layers;
  const hm_layer_outputs *want[LC_SETS]; /* [set]: the last layer's outputs of each rank */
  const hm_step_inputs *in[LC_SETS];     /* [set]: the chain's entry (x, res, post, comb, pre) */
  const uint32_t *order;
  uint32_t replays;
  bool keep_inputs; /* one set: nothing to write between replays */
  tl_stage st[4];
  uint32_t epoch[4][4]; /* [rank][layer]: the epoch word after the last launch */
} lc_replay_ctx;

bool lc_same_outputs(const hm_layer_outputs *a, const hm_layer_outputs *b, uint32_t S, uint32_t D);
/* hm_layer_group_replay's check: the epochs one on, the outputs the set's, the next set's inputs in */
int lc_replay_check(void *ctx, uint32_t n, uint32_t r, const hm_layer_outputs *o);
void lc_replay_ctx_init(lc_replay_ctx *c, hm_runtime *rt, hm_layer_group *g, uint32_t tp, uint32_t S, uint32_t D,
                        uint32_t layers, uint32_t sets);
void lc_replay_ctx_free(lc_replay_ctx *c);
void lc_last_outputs_alloc(hm_layer_outputs *o, uint32_t tp, uint32_t S, uint32_t D);
void lc_last_outputs_free(hm_layer_outputs *o, uint32_t tp);
/* LC_SETS checked steps of tiny `layer` (S rows, TP tp, arch's layouts), then its recorded step
 * replayed over the sets: `launches` in all (chaos_launches under chaos, where the agent is slower) */
void lc_replays_of(hm_arch arch, uint32_t tp, int32_t layer, uint32_t S, uint32_t launches, uint32_t chaos_launches);

#endif /* HM_TESTS_LAYER_CASE_H */
