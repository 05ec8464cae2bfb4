/* device/selftest/st_cvt.cl: the dialect's number conversions over a table of inputs, so a
 * test can compare hardware (or the agent's model of it) with the format tables. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_cvt, struct st_cvt_args, 256) {
  __global const u32 *in = (__global const u32 *)args.in;
  __global u32 *out = (__global u32 *)args.out;
  u32 n = args.n, op = args.op;
  for (u32 i = dev_cta() * dev_cta_size() + dev_lid(); i < n; i += dev_ncta() * dev_cta_size()) {
    u32 r = 0;
    if (op == ST_CVT_PK_FP8) r = dev_cvt_pk_fp8_f32(dev_f32_bits(in[2 * i]), dev_f32_bits(in[2 * i + 1]), 0u, 0);
    else if (op == ST_CVT_PK_BF8) r = dev_cvt_pk_bf8_f32(dev_f32_bits(in[2 * i]), dev_f32_bits(in[2 * i + 1]), 0u, 0);
    else if (op == ST_CVT_FP8_F32) r = dev_bits_f32(dev_cvt_f32_fp8(in[i], 0));
    else if (op == ST_CVT_BF8_F32) r = dev_bits_f32(dev_cvt_f32_bf8(in[i], 0));
    else if (op == ST_CVT_BF16) r = fmt_bf16_from_f32(dev_f32_bits(in[i]));
    out[i] = r;
  }
}
