/* tools/check.h: hsa-mono-check's commands beyond `ref` (each in its own file), called from its
 * main with argv[0] the command's name, and the comparisons they print. */
#ifndef HM_TOOLS_CHECK_H
#define HM_TOOLS_CHECK_H

#include <stdint.h>

#include "hm_weights.h"

int check_ffn(int argc, char **argv);
int check_k1(int argc, char **argv);
int check_layer(int argc, char **argv);
int check_model(int argc, char **argv);

/* A note every comparison line ends with from now on (a reduced run says so on every line); NULL
 * for none. The string must outlive the lines. */
void check_note(const char *note);

/* One output of n floats against the reference's (check_compare.c): prints a line with its name,
 * the max-abs and relative L2 error, the cosine, ok or FAIL, and the tolerance; 1 when the relative
 * error is at most `rel`, the cosine at least `cos` and nothing is NaN, else 0. */
int check_compare(const char *name, const float *a, const float *ref, uint64_t n, double rel, double cos);

/* The same figures without a tolerance, for an output `held` says how it is held instead; 0 (and
 * FAIL) only when something is NaN. */
int check_show(const char *name, const float *a, const float *ref, uint64_t n, const char *held);

/* A count of differing items against its tolerance (why: the tolerance's reason), as one line; 1
 * within. */
int check_count(const char *name, uint64_t diff, uint64_t n, const char *what, uint64_t tol, const char *why);

/* An index source's top-k ([S][512] ascending ids, -1 padded) against the reference's, as sets: the
 * picks not in the reference's row (and those short of its count), as one line. Exact where a row's
 * compressed entries ((pos + 1) / ratio, live rows) fit the 512 picked; crowded_pct % of the crowded
 * rows' 512 may move (a near tie of the indexer's scores). 1 within. */
int check_topk(const int32_t *a, const int32_t *ref, uint32_t S, const int64_t *pos, const int64_t *slot,
               uint32_t ratio, double crowded_pct);

/* The relative L2 error of a against ref over n floats (an all-zero reference: the absolute one; a
 * NaN: infinite). */
double check_rel(const float *a, const float *ref, uint64_t n);

/* Whether two picks of k experts are the same set (check_moe.c). */
int check_same_route(const int32_t *a, const int32_t *b, uint32_t k);

/* A layer's MoE of its last step against the reference's (tp ranks of cfg, each rank's FFN weights built
 * from src with opts in turn, as the group's were) on the kernel's own FFN normed rows of S rows (normed,
 * ids: layer_tool_route's; x: the layer's output): prints x.own (the MoE budget) and route (picks may
 * differ only at a tie of the reference's logits); 1 within tolerance, 0 past it, -1 on a failed run
 * (hm_errmsg says why). */
int check_moe_own(const hm_layer_config *cfg, uint32_t tp, const hm_source *src, const hm_build_opts *opts, uint32_t S,
                  const float *normed, const int32_t *ids, const float *x);

#endif /* HM_TOOLS_CHECK_H */
