/* device/selftest/st_barrier.cl: CTA barriers around LDS exchanges; each round a work-item
 * reads a word another one wrote, so a missing or leaky barrier changes the checksum. */
#include "../dev.h"
#include "selftest.h"

struct st_barrier_lds { u32 w[ST_BARRIER_LDS_WORDS]; };

DEV_KERNEL(st_barrier, struct st_barrier_args, 512) {
  DEV_LDS(struct st_barrier_lds, lds);
  u32 lid = dev_lid(), n = dev_cta_size(), cta = dev_cta();
  u32 acc = 0;
  for (u32 r = 0; r < args.rounds; r++) {
    lds->w[lid] = lid * 31u + r * 7u + cta;
    dev_barrier();
    acc = acc * 3u + lds->w[(lid * 7u + r + 1u) % n];
    dev_barrier();
  }
  __global u32 *out = (__global u32 *)args.out;
  out[cta * n + lid] = acc;
}
