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

/* Test seam: DEV_PERSIST_SKIP, a mask of DEV_PERSIST_SKIP_* bits, removes one step of
 * dev_persist_arrive (device/dev.h). It is 0 in every real kernel (the branches fold away); only
 * device/selftest/st_persist_*.cl set it, so the software agent's tests can prove a verdict missing
 * that step goes wrong (tests/sim/test_weak_persist.c). */
#ifndef DEV_PERSIST_SKIP
#define DEV_PERSIST_SKIP 0u
#endif
#define DEV_PERSIST_SKIP_BARRIER 1u /* the verdict read from LDS with no barrier after lane 0 wrote it */
#define DEV_PERSIST_SKIP_WAIT 2u    /* the state read once, not polled until it is set */
#define DEV_PERSIST_SKIP_CAS 4u     /* the last arrival stores GO over whatever the host set */

#endif /* HM_DEV_PERSIST_H */
