/* hm_timeline.h: a persistent launch's per-CTA timeline (the FFN launch, K1, K2): when its runner
 * was created with hm_ffn_config.timeline, every CTA stamps its start and each stage's end. */
#ifndef HM_TIMELINE_H
#define HM_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One stamp of a CTA: t, the clock when the CTA finished the slot's stage (0: never stamped); the
 * stage's task count n and how many of them this CTA ran (ran; the stages place their tasks each its
 * own way); n == HM_TIMELINE_EVERY (ran 1) for a step every CTA runs once (its start, the FFN
 * launch's push, the route table). */
typedef struct hm_timeline_stamp {
  uint64_t t;
  uint32_t n, ran;
} hm_timeline_stamp;
#define HM_TIMELINE_EVERY 0xffffffffu

/* The last launch's timeline of a runner: stamps[cta * stride + slot], slot 0 the CTA's start and
 * slot s >= 1 the end of stage names[s] (stage s began when slot s - 1 was stamped). On a GPU t
 * counts s_memrealtime's 100 MHz (hz); on the software agent it is the agent's event order
 * (event_order, hz 0): which stamp came first, not how long anything took. Valid until the
 * runner's next step or its destruction. */
typedef struct hm_timeline {
  const char *kernel;       /* "ffn", "k1" or "k2" */
  uint32_t ctas, slots, stride;
  const char *const *names; /* [slots] */
  const hm_timeline_stamp *stamps;
  bool event_order;
  uint64_t hz;
} hm_timeline;

/* Tasks of stage `slot` CTA `cta` ran (1 for a step every CTA runs); 0 for a slot out of range. */
uint32_t hm_timeline_tasks(const hm_timeline *tl, uint32_t cta, uint32_t slot);

/* HM_OK when every CTA stamped every slot, each CTA's stamps never go back in time, and each stage's
 * tasks ran once each (the CTAs agree on its count and their `ran` add up to it; a step every CTA
 * runs, once on each); otherwise HM_ERR_INVALID_ARG naming the first CTA and slot that do not. */
hm_status hm_timeline_check(const hm_timeline *tl);

#ifdef __cplusplus
}
#endif

#endif /* HM_TIMELINE_H */
