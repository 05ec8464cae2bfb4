/* layer/group_internal.h: what the in-process TP groups (hm_ffn_group, hm_k1_group) share: a thread
 * a rank with its outcome kept, the bf16 conversions of host arrays, a clock. */
#ifndef HM_GROUP_INTERNAL_H
#define HM_GROUP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hm_status.h"

#define HM_GROUP_MAX_TP 8

/* A rank thread's outcome, with its message (hm_errmsg is per thread, so it is copied). */
typedef struct hm_rank_result {
  hm_status st;
  char err[512];
} hm_rank_result;

/* Records s (and, on failure, "rank r: " + the thread's message) in res; returns NULL, so a rank
 * thread's body can end with `return hm_rank_keep(...)`. */
void *hm_rank_keep(hm_rank_result *res, uint32_t r, hm_status s);

/* Runs fn on each of tp rank structs (ranks + r * stride, whose hm_rank_result lies at byte
 * result_off) in its own thread, waits for all, and returns the first failure in rank order. */
hm_status hm_on_ranks(void *ranks, size_t stride, size_t result_off, uint32_t tp, void *(*fn)(void *));

void hm_group_to_bf16(const float *x, uint64_t n, uint16_t *out);
void hm_group_from_bf16(const uint16_t *x, uint64_t n, float *out);
double hm_group_now_ns(void);

#endif /* HM_GROUP_INTERNAL_H */
