/* device/selftest/st_wait.h: how the two CTAs (or ranks) of a weak-model proof (st_prim.h, st_ar.h)
 * wait for each other without giving the model a chance it would not have on a GPU. */
#ifndef HM_ST_WAIT_H
#define HM_ST_WAIT_H

#include "../dev.h"

/* Wait (lane 0, then the CTA) until *word == want, read with acquire at `scope`, or `ticks` pass. */
DEV_INLINE void st_await(__global u32 *word, u32 want, int scope, u64 ticks) {
  if (dev_lid() == 0) {
    dev_poll_t p;
    dev_poll_init(&p);
    while (dev_atomic_load_u32(word, DEV_ACQUIRE, scope) != want && dev_poll_elapsed(&p) < ticks) dev_poll_wait(&p);
    dev_poll_done(&p);
  }
  dev_barrier();
}

/* A producer stays running until *word == want (relaxed, at `scope`) or `ticks` pass: barrier
 * rounds, at whose scheduling points its pending stores land one at a time, newest or oldest
 * first, and never all at once as an idle CTA's do. `lds` is a free word of the kernel's LDS. */
DEV_INLINE void st_linger(__global u32 *word, u32 want, int scope, u64 ticks, __local u32 *lds) {
  u32 done = 0;
  dev_poll_t p;
  dev_poll_init(&p);
  while (!done) {
    dev_barrier();
    if (dev_lid() == 0) *lds = dev_atomic_load_u32(word, DEV_RELAXED, scope) == want || dev_poll_elapsed(&p) >= ticks;
    dev_barrier();
    done = *lds;
  }
  dev_poll_done(&p);
}

#endif /* HM_ST_WAIT_H */
