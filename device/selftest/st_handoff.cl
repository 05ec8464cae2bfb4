/* device/selftest/st_handoff.cl: a producer-consumer hand-off between two CTAs (data, then a
 * flag), with each step of the protocol switchable so tests can drop one and watch it fail. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_handoff, struct st_handoff_args, 64) {
  __global u32 *data = (__global u32 *)args.data;
  __global u32 *flag = (__global u32 *)args.flag;
  __global u32 *out = (__global u32 *)args.out;
  u32 lid = dev_lid(), n = args.n, mode = args.mode, tag = args.tag;
  __global u32 *ack = (__global u32 *)args.ack;
  if (dev_cta() == 0) {
    if (mode & ST_HANDOFF_PREREAD) {
      /* produce only after the consumer has read the old data into its cache */
      if (lid == 0) {
        dev_poll_t p;
        dev_poll_init(&p);
        while (dev_atomic_load_u32(ack, DEV_ACQUIRE, DEV_SCOPE_AGENT) != tag + 1u && dev_poll_elapsed(&p) < args.ticks)
          dev_poll_wait(&p);
        dev_poll_done(&p);
      }
      dev_barrier();
    }
    for (u32 i = lid; i < n; i += dev_cta_size()) {
      if (mode & ST_HANDOFF_DEVSTORE) dev_st_u32(&data[i], i * 3u + tag, DEV_CP_DEV);
      else dev_st_u32(&data[i], i * 3u + tag, DEV_CP_PLAIN);
    }
    if (mode & ST_HANDOFF_BARRIER) dev_barrier(); /* every work-item has stored before the flag */
    if (mode & ST_HANDOFF_FENCE) {
      dev_wait_stores();
      dev_barrier();
      if (lid == 0) dev_fence(DEV_RELEASE, DEV_SCOPE_AGENT);
    }
    if (lid == 0) {
      dev_atomic_store_u32(flag, tag, DEV_RELAXED, DEV_SCOPE_AGENT);
      /* stay until the consumer has read (bounded: a consumer that never acknowledges cannot
       * hang the test) */
      dev_poll_t p;
      dev_poll_init(&p);
      while (dev_atomic_load_u32(ack, DEV_RELAXED, DEV_SCOPE_AGENT) != tag &&
             dev_poll_elapsed(&p) < args.ticks)
        dev_poll_wait(&p);
      dev_poll_done(&p);
    }
  } else if (dev_cta() == 1) {
    u32 warm = 0;
    if (mode & ST_HANDOFF_PREREAD) {
      for (u32 i = lid; i < n; i += dev_cta_size()) warm += dev_ld_u32(&data[i], DEV_CP_PLAIN);
      dev_barrier();
      if (lid == 0) dev_atomic_store_u32(ack, tag + 1u, DEV_RELEASE, DEV_SCOPE_AGENT);
    }
    if (mode & ST_HANDOFF_WAIT)
      DEV_POLL_UNTIL(dev_atomic_load_u32(flag, DEV_RELAXED, DEV_SCOPE_AGENT) == tag);
    if (mode & ST_HANDOFF_ACQUIRE) dev_fence(DEV_ACQUIRE, DEV_SCOPE_AGENT);
    for (u32 i = lid; i < n; i += dev_cta_size()) out[i] = dev_ld_u32(&data[i], DEV_CP_PLAIN);
    dev_barrier();
    if (lid == 0) {
      out[n] = warm;
      dev_atomic_store_u32(ack, tag, DEV_RELEASE, DEV_SCOPE_AGENT);
    }
  }
}
