/* tools/check_chain.h: one layer of hsa-mono-check model's chains (check_model.c runs them) and the
 * comparisons its step is held to against the reference chain (check_chain.c). */
#ifndef HM_TOOLS_CHECK_CHAIN_H
#define HM_TOOLS_CHECK_CHAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "layer_tool.h"

/* One layer of the chain: its group and both chains' state of it (index 0 the GPU chain, 1 the
 * reference chain). */
typedef struct chain_link {
  layer_tool t;
  uint64_t seed;
  bool index, kv;          /* an index source; a kv source (its select writes its compressed cache) */
  int topk_from, comp_from; /* the chain position of its index source and kv source, or -1: generated */
  hm_gen_step meta;        /* this step's generated step: the metadata, a generated top-k and cache */
  uint8_t *swa[2], *comp[2]; /* the GPU chain's [0] and the reference chain's [1] SWA cache, and a kv
                              * source's compressed cache */
  uint8_t *swa_out, *comp_out; /* rank 0's caches after the step */
  hm_layer_outputs o[HM_LAYER_MAX_TP]; /* the GPU chain's outputs of this step */
  float *rx, *rres, *rpost, *rcomb, *rpre; /* the reference chain's */
  int32_t *rtopk, *ids[2];  /* the reference's top-k; the routes of both chains */
  int32_t *rkt, *rklen;     /* the reference's key table */
  uint8_t *written;         /* [slots]: the SWA slots the run has written */
  float *normed;            /* the GPU's FFN normed rows (the route's read-back) */
} chain_link;

/* The rows `keep` marks of a and ref ([S][w]) gathered into the scratch sa, sr and compared as one
 * output (check_compare); a line saying so, and 1, when no row is kept. */
int chain_compare_rows(const char *name, const float *a, const float *ref, uint32_t S, uint64_t w, const uint8_t *keep,
                       float *sa, float *sr, double rel, double cos);

/* Chain layer i's key table and klen against the reference chain's: exact on every row whose top-k
 * agreed between the chains (an index source's own, a REUSE layer's index source's in the chain; a
 * window layer's and a generated top-k's always), as one line; 1 within. */
int chain_check_keys(const chain_link *c, uint32_t i, uint32_t S);

/* The layer's SWA caches of both chains after the step: the records of the slots the run has
 * written (this step's marked now), decoded into va, vr (room for every one), within rel (they come
 * from the drifted input rows, quantised to e4m3); no byte elsewhere may differ. Two lines; 1
 * within, 0 past it or when a record cannot be read. */
int chain_check_cache(chain_link *l, uint32_t S, float *va, float *vr, double rel);

/* Whether every rank holds rank 0's outputs of the step (a line for the first that does not). */
int chain_ranks_hold(const chain_link *l, uint32_t T, uint32_t S, uint32_t D);

#endif /* HM_TOOLS_CHECK_CHAIN_H */
