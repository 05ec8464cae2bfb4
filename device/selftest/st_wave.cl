/* device/selftest/st_wave.cl: wave cross-lane operations (shuffles, ballot, readfirstlane,
 * the butterfly reductions) on per-lane inputs. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_wave, struct st_wave_args, 256) {
  u32 gid = dev_cta() * dev_cta_size() + dev_lid();
  u32 v = ((__global const u32 *)args.in)[gid];
  __global u32 *o = (__global u32 *)args.out + 8 * (u64)gid;
  u64 b = dev_ballot(v & 1u);
  o[0] = dev_shfl_u32(v, dev_lane() + 1u);
  o[1] = dev_shfl_xor_u32(v, 5u);
  o[2] = (u32)b;
  o[3] = (u32)(b >> 32);
  o[4] = dev_readfirstlane_u32(v);
  o[5] = dev_bits_f32(dev_wave_sum_f32_32to1(dev_f32_bits(v)));
  o[6] = dev_bits_f32(dev_wave_sum_f32_1to32(dev_f32_bits(v)));
  o[7] = dev_wave_max_u32(v);
}
