/* device/selftest/st_gridbar.cl: a persistent kernel's grid barrier (one word: arrivals in
 * the low 16 bits, generation above, as ockl's software grid sync), run `epochs` times; it can
 * also report each CTA's arrival verdict and trap on request (tests of failed launches). */
#include "../dev.h"
#include "selftest.h"

struct st_gridbar_lds { u32 ok; };

DEV_KERNEL(st_gridbar, struct st_gridbar_args, 256) {
  DEV_LDS(struct st_gridbar_lds, lds);
  __global u32 *bar = (__global u32 *)args.bar;
  __global u32 *out = (__global u32 *)args.out;
  u32 ncta = dev_ncta(), cta = dev_cta();
  u32 go = dev_persist_arrive((__global struct hm_dev_persist *)args.persist, &lds->ok);
  if (args.verdict && dev_lid() == 0)
    ((__global u32 *)args.verdict)[cta] = go ? DEV_PERSIST_GO : DEV_PERSIST_ABORT;
  if (args.trap == cta + 1u && dev_lid() == 0) dev_trap();
  if (!go) return;
  for (u32 e = 0; e < args.epochs; e++) {
    dev_barrier();
    if (dev_lid() == 0) {
      u32 old = dev_atomic_add_u32(bar, 1u, DEV_ACQ_REL, DEV_SCOPE_AGENT);
      u32 gen = old >> 16;
      if ((old & 0xffffu) + 1u == ncta) {
        /* last arrival: reset the count and bump the generation in one atomic */
        dev_atomic_add_u32(bar, 0x10000u - ncta, DEV_RELEASE, DEV_SCOPE_AGENT);
      } else {
        DEV_POLL_UNTIL((dev_atomic_load_u32(bar, DEV_ACQUIRE, DEV_SCOPE_AGENT) >> 16) != gen);
      }
      out[cta] = out[cta] + 1u;
    }
    dev_barrier();
  }
}
