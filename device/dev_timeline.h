/* device/dev_timeline.h: a persistent launch's per-CTA timeline (issue 15): with the launch's `timeline`
 * argument set, lane 0 of every CTA stamps its start and the end of each stage into a host buffer; dev.h's dev_tl_stamp writes it. */
#ifndef HM_DEV_TIMELINE_H
#define HM_DEV_TIMELINE_H

#include "dev_types.h"

/* One stamp: the clock when the CTA finished the slot's stage, and the stage's task count and
 * first CTA (task i runs on CTA (base + i) % grid), from which the reader knows which tasks this
 * CTA ran. n == DEV_TL_EVERY: a step every CTA runs once (the begin, the push, the route table).
 * The clock is s_memrealtime (100 MHz) on a GPU and the software agent's event counter there
 * (dev_host.h: an order of events, not a time). A slot never stamped keeps t == 0. */
struct hm_tl_stamp {
  u64 t;
  u32 n;
  u32 base;
};
DEV_ARGS_CHECK(hm_tl_stamp, 16);

/* Slots a CTA: 0 is the CTA's start (after the handshake and the epoch), 1.. its stages in
 * program order (layer/run/timeline.c names them a kernel). The buffer is [grid][DEV_TL_SLOTS]. */
#define DEV_TL_SLOTS 16u
#define DEV_TL_EVERY 0xffffffffu

#endif /* HM_DEV_TIMELINE_H */
