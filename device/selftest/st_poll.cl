/* device/selftest/st_poll.cl: a bounded poll, the building block of every wait on a peer:
 * it ends when the flag is raised or the deadline passes, never hangs. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_poll, struct st_poll_args, 64) {
  if (dev_cta() != 0 || dev_lid() != 0) return;
  __global u32 *flag = (__global u32 *)args.flag;
  __global u32 *out = (__global u32 *)args.out;
  dev_poll_t p;
  dev_poll_init(&p);
  u32 result = 1;
  while (dev_atomic_load_u32(flag, DEV_RELAXED, DEV_SCOPE_SYSTEM) != 1u) {
    if (dev_poll_elapsed(&p) > args.ticks) {
      result = 2;
      break;
    }
    dev_poll_wait(&p);
  }
  dev_poll_done(&p);
  out[0] = result;
  out[1] = p.round;
}
