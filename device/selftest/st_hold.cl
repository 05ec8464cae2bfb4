/* device/selftest/st_hold.cl: a kernel that occupies CUs until the host raises a flag (or a
 * deadline passes): how tests make a grid that cannot become resident. Each CTA adds 1 to
 * `started` (0: none) as it begins to poll. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_hold, struct st_hold_args, 1024) {
  if (dev_lid() == 0) {
    if (args.started) dev_atomic_add_u32((__global u32 *)args.started, 1u, DEV_RELAXED, DEV_SCOPE_SYSTEM);
    dev_poll_t p;
    dev_poll_init(&p);
    while (dev_atomic_load_u32((__global u32 *)args.flag, DEV_RELAXED, DEV_SCOPE_SYSTEM) == 0 &&
           dev_poll_elapsed(&p) < args.ticks)
      dev_poll_wait(&p);
    dev_poll_done(&p);
  }
  dev_barrier();
}
