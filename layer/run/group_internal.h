/* layer/run/group_internal.h: what the in-process TP groups (hm_ffn_group, hm_k1_group) share: a thread
 * a rank with its outcome kept, the bf16 conversions of host arrays, a clock. */
#ifndef HM_GROUP_INTERNAL_H
#define HM_GROUP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hm_hsa.h"
#include "hm_k1.h"
#include "hm_ref.h"
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
 * result_off and whose GPU agent, an hm_agent *, at byte agent_off) in its own thread, bound to
 * that agent's NUMA node when the machine has it (hm_agent_bind_thread; not binding is logged at
 * debug level, never fatal), waits for all, and returns the first failure in rank order. */
hm_status hm_on_ranks(void *ranks, size_t stride, size_t result_off, size_t agent_off, uint32_t tp,
                      void *(*fn)(void *));

void hm_group_to_bf16(const float *x, uint64_t n, uint16_t *out);
void hm_group_from_bf16(const uint16_t *x, uint64_t n, float *out);
double hm_group_now_ns(void);

/* Host <-> device copies through a rank's host-visible staging buffer (stage, stage_bytes): src
 * (dst) may be the stage itself (bytes <= stage_bytes) or any host memory, copied in pieces. */
typedef struct hm_group_stage {
  hm_runtime *rt;
  void *buf;
  size_t bytes;
} hm_group_stage;
hm_status hm_group_put(const hm_group_stage *st, void *dst, const void *src, size_t bytes);
hm_status hm_group_get(const hm_group_stage *st, void *dst, const void *src, size_t bytes);

/* A step's decode metadata in host-visible memory of one agent (what K1 and the layers read):
 * the per-row arrays for up to `rows` rows, and a block table grown as calls need. */
enum { HM_GM_POS, HM_GM_SLOT, HM_GM_SWA_IDX, HM_GM_SWA_LENS, HM_GM_T2R, HM_GM_TOPK, HM_GM_COUNT };
typedef struct hm_group_meta {
  void *arr[HM_GM_COUNT];
  int32_t *bt;
  size_t bt_bytes;
} hm_group_meta;
hm_status hm_group_meta_alloc(hm_agent *a, uint32_t rows, hm_group_meta *m);
void hm_group_meta_free(hm_runtime *rt, hm_group_meta *m);
/* in's metadata copied in, *out pointing at it (an array in leaves NULL stays NULL, for the runner
 * to judge); requests = max(token_to_req) + 1. */
hm_status hm_group_meta_upload(hm_agent *a, hm_group_meta *m, const hm_step_inputs *in, hm_k1_meta *out);

#endif /* HM_GROUP_INTERNAL_H */
