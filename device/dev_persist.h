/* device/dev_persist.h: the persistent-launch handshake word shared by kernels and the runtime:
 * every CTA counts itself in; the host checks all arrived in time, or tells them to give up. */
#ifndef HM_DEV_PERSIST_H
#define HM_DEV_PERSIST_H

#include "dev_types.h"

/* One 128-byte line in host-visible fine-grained memory, zeroed by the runtime before each
 * hm_persistent_launch. Every CTA adds 1 to `arrived`. The verdict is one word both sides race
 * for with compare-and-swap, so they always agree: the CTA whose arrival completes the grid sets
 * `state` from 0 to GO; the host, when the grid has not arrived in time, sets it from 0 to ABORT.
 * CTAs wait until `state` is set and run only on GO. */
#define DEV_PERSIST_GO 1u
#define DEV_PERSIST_ABORT 2u
struct hm_dev_persist {
  u32 arrived;
  u32 state;
  u32 pad[30];
};
DEV_ARGS_CHECK(hm_dev_persist, 128);

#endif /* HM_DEV_PERSIST_H */
