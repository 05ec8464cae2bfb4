/* device/selftest/st_memory.cl: loads and stores at one cache policy, through per-lane
 * pointers and through a buffer (whose out-of-range reads return zero). */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_memory, struct st_memory_args, 256) {
  __global const u32 *in = (__global const u32 *)args.in;
  __global u32 *out = (__global u32 *)args.out;
  u32 n = args.n, stride = dev_ncta() * dev_cta_size();
  u32 first = dev_cta() * dev_cta_size() + dev_lid();
  for (u32 i = first; i < n; i += stride) {
    switch (args.cp) {
    case DEV_CP_NT: dev_st_u32(&out[i], dev_ld_u32(&in[i], DEV_CP_NT), DEV_CP_NT); break;
    case DEV_CP_DEV: dev_st_u32(&out[i], dev_ld_u32(&in[i], DEV_CP_DEV), DEV_CP_DEV); break;
    case DEV_CP_SYS: dev_st_u32(&out[i], dev_ld_u32(&in[i], DEV_CP_SYS), DEV_CP_SYS); break;
    default: dev_st_u32(&out[i], dev_ld_u32(&in[i], DEV_CP_PLAIN), DEV_CP_PLAIN); break;
    }
  }
  /* 16-byte buffer copy of n words rounded up to 4: the source buffer is n words, so the
   * tail past n reads as zero */
  dev_buf_t src = dev_buf(in, n * 4u), dst = dev_buf((__global void *)args.out2, ((n + 3u) & ~3u) * 4u);
  for (u32 i = first; 4 * i < n; i += stride) {
    u32 off = 16u * i;
    switch (args.cp) {
    case DEV_CP_NT: dev_buf_st_u32x4(dst, off, dev_buf_ld_u32x4(src, off, DEV_CP_NT), DEV_CP_NT); break;
    case DEV_CP_DEV: dev_buf_st_u32x4(dst, off, dev_buf_ld_u32x4(src, off, DEV_CP_DEV), DEV_CP_DEV); break;
    case DEV_CP_SYS: dev_buf_st_u32x4(dst, off, dev_buf_ld_u32x4(src, off, DEV_CP_SYS), DEV_CP_SYS); break;
    default: dev_buf_st_u32x4(dst, off, dev_buf_ld_u32x4(src, off, DEV_CP_PLAIN), DEV_CP_PLAIN); break;
    }
  }
}
