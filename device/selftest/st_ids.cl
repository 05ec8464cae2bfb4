/* device/selftest/st_ids.cl: ids and counts of the dialect, written out per work-item so a
 * test can check them against the dispatch's grid. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_ids, struct st_ids_args, 256) {
  __global u32 *out = (__global u32 *)args.out;
  u32 gid = dev_cta() * dev_cta_size() + dev_lid();
  __global u32 *o = out + 8 * (u64)gid;
  o[0] = dev_lid();
  o[1] = dev_cta();
  o[2] = dev_ncta();
  o[3] = dev_cta_size();
  o[4] = dev_lane();
  o[5] = dev_wave();
  o[6] = dev_nwaves();
  o[7] = gid;
}
