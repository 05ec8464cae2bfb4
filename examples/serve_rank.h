/* examples/serve_rank.h: one TP rank of a serving stack's decode deployment, written against the
 * public API only; serve_threads.c runs it a thread a rank, serve_procs.c a process a rank. */
#ifndef SERVE_RANK_H
#define SERVE_RANK_H

#include <stdint.h>

#include <hsamono/hsamono.h>

/* What the deployment runs: consecutive layers of the tiny config (generated weights), decode
 * steps of `rows` tokens in `reqs` requests, then a recorded chain replayed. */
#define SERVE_MAX_LAYERS 8
typedef struct serve_plan {
  uint32_t tp;
  int32_t first_layer;
  uint32_t layers;
  uint32_t steps, replays;
  uint32_t rows, reqs, ctx;
  uint64_t seed;
} serve_plan;

/* What a rank hands back to its launcher. */
enum {
  SERVE_OK = 0,
  SERVE_FAIL = 1,    /* a call failed, or a check did */
  SERVE_SKIP = 77,   /* a layer was refused (HM_ERR_REFUSED): the stack would run it by its own path */
};

/* One layer's outputs of one step on a rank, as host f32 (bf16 values where the tensor is bf16),
 * for a caller that checks them against the fp32 reference. */
typedef struct serve_out {
  float *x, *res, *post, *comb, *pre;
} serve_out;

/* One rank's whole life: weights, heap (through boot, which it releases), layers, queue, steps,
 * the recorded chain, teardown. The runtime is the caller's (one a process). Every rank checks
 * that all ranks hold the same bits of the last layer's outputs, over the bootstrap's all-gather.
 * trace (NULL: not wanted) receives every layer's outputs of every step, layer i of step t at
 * trace[t * layers + i]. Returns SERVE_OK, SERVE_FAIL (the reason on stderr) or SERVE_SKIP. */
int serve_rank(const serve_plan *p, hm_runtime *rt, uint32_t rank, hm_bootstrap *boot, serve_out *trace);

/* The step inputs of plan layer i at step t as the deployment feeds them (exposed so that a
 * checker can rebuild step 0's inputs for the reference). */
hm_status serve_gen_meta(const serve_plan *p, uint32_t i, uint32_t t, hm_gen_step *out);
hm_status serve_gen_entry(const serve_plan *p, uint32_t t, hm_gen_step *out);
uint64_t serve_layer_seed(const serve_plan *p, uint32_t i);

#endif /* SERVE_RANK_H */
