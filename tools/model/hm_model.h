/* tools/model/hm_model.h: a timing model of a launch (issue 15 item 2): the software agent's trace
 * (hm_trace.h) replayed as a dependency graph with a part's parameters (docs/timing_model.md). */
#ifndef HM_MODEL_H
#define HM_MODEL_H

#include <stdint.h>

#include "hm_trace.h"

/* A part: every figure the model uses, each sourced in docs/timing_model.md (parts.c holds them). */
typedef struct hm_part {
  const char *name, *id;  /* "MI355X", "mi355x" */
  double clock_hz;        /* the compute clock */
  uint32_t cus;           /* CUs an agent */
  double hbm_bw;          /* B/s streamed from HBM by the whole GPU */
  double cu_bw;           /* B/s one CU can pull (its share of HBM is at most this) */
  double load_lat_s;      /* a load phase's latency to HBM (first bytes back) */
  double dev_handoff_s;   /* a device-scope store until a poll on the same GPU sees it */
  double sys_handoff_s;   /* a system-scope store until a poll on a peer GPU sees it (one xGMI hop) */
  double xgmi_bw;         /* B/s one direction of one xGMI link */
  double mfma_flops_clk[HM_TRACE_MFMA_KINDS]; /* a CU's FLOPs a clock by matrix kind (0: not on the part) */
  uint32_t mfma_flops[HM_TRACE_MFMA_KINDS];   /* one wave instruction's FLOPs (2 M N K) */
} hm_part;

/* "mi355x" or "mi300x" (case as given); NULL otherwise. */
const hm_part *hm_part_find(const char *id);

/* One piece of the critical path: a stage of a CTA (the time from when it could go on until its end),
 * or the hand-off latency of a wait from a writer stage to it. */
typedef struct hm_model_seg {
  enum { HM_SEG_STAGE, HM_SEG_WAIT } kind;
  uint32_t agent, launch, cta, slot;          /* the stage, or the waiting stage */
  uint32_t w_agent, w_launch, w_cta, w_slot;  /* a wait's writer */
  double s;
} hm_model_seg;

typedef struct hm_model_result {
  double total_s;          /* the last stage's end over every agent */
  hm_model_seg *path;      /* the critical path, first to last (malloc'ed); its s sum to total_s */
  uint32_t npath;
  uint64_t weight_bytes;   /* the busiest agent's weight bytes */
  double floor_s;          /* those at the part's HBM bandwidth */
} hm_model_result;

/* Replays t on part p: 0, or -1 with why in err (a trace with no stages, a wait on a stage the trace
 * lacks, a matrix kind the part has not, out of memory). */
int hm_model_run(const hm_trace *t, const hm_part *p, hm_model_result *out, char *err, unsigned cap);
void hm_model_result_free(hm_model_result *r);

#endif /* HM_MODEL_H */
