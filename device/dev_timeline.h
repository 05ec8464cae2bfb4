/* device/dev_timeline.h: a persistent launch's per-CTA timeline (issue 15): with the launch's `timeline`
 * argument set, lane 0 of every CTA stamps its start and the end of each stage into a host buffer; dev.h's dev_tl_stamp writes it. */
#ifndef HM_DEV_TIMELINE_H
#define HM_DEV_TIMELINE_H

#include "dev_types.h"

/* One stamp: the clock when the CTA finished the slot's stage, the stage's task count n and the
 * count of them this CTA ran (`ran`: the placement is the stage's own, handoff.h's ho_place, so the
 * stamp says what ran rather than the reader working it out). n == DEV_TL_EVERY (ran 1): a step every
 * CTA runs once (the begin, the push, the route table). The clock is s_memrealtime (100 MHz) on a
 * GPU and the software agent's event counter there (dev_host.h: an order of events, not a time). A
 * slot never stamped keeps t == 0. */
struct hm_tl_stamp {
  u64 t;
  u32 n;
  u32 ran;
};
DEV_ARGS_CHECK(hm_tl_stamp, 16);

/* Slots a CTA: 0 is the CTA's start (after the handshake and the epoch), 1.. its stages in
 * program order (layer/run/timeline.c names them a kernel). The buffer is [grid][DEV_TL_SLOTS]. */
#define DEV_TL_SLOTS 16u
#define DEV_TL_EVERY 0xffffffffu

#endif /* HM_DEV_TIMELINE_H */
