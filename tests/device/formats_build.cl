/* tests/device/formats_build.cl: calls every function of device/formats.h, compiled at build
 * time for each GPU target (OpenCL C, amdgcn backend) and as the agent's host C. */
#include "formats.h"

#if defined(__OPENCL_C_VERSION__)
#define FB_KERNEL __attribute__((amdgpu_kernel)) void
#else
#define FB_KERNEL __attribute__((visibility("default"))) void
#define __global
#endif

/* the back end must lower every helper (u64 division among them) for the target, so the
 * kernel makes each result depend on its inputs and stores it */
FB_KERNEL formats_build_check(__global const f32 *in, __global u32 *out, __global u8 *bytes) {
  f32 x = in[0], y = in[1];
  u8 c = (u8)fmt_bits(in[2]);
  u32 i = 0;
  out[i++] = fmt_bits(fmt_float(fmt_bits(x)));
  out[i++] = fmt_bf16_from_f32(x);
  out[i++] = fmt_bits(fmt_bf16_to_f32((u16)c));
  out[i++] = fmt_bits(fmt_round_bf16(y));
  out[i++] = fmt_bits(fmt_e4m3_decode(c)) ^ fmt_e4m3_encode(x);
  out[i++] = fmt_bits(fmt_e4m3fnuz_decode(c)) ^ fmt_e4m3fnuz_encode(x);
  out[i++] = fmt_bits(fmt_e5m2_decode(c)) ^ fmt_e5m2_encode(x);
  out[i++] = fmt_bits(fmt_e5m2fnuz_decode(c)) ^ fmt_e5m2fnuz_encode(x);
  out[i++] = fmt_bits(fmt_e2m1_decode(c)) ^ fmt_e2m1_encode(x);
  out[i++] = fmt_e2m1_pack(c, (u8)fmt_bits(y)) ^ fmt_e2m1_nibble(c, (int)(c & 1));
  out[i++] = fmt_bits(fmt_e8m0_decode(c)) ^ fmt_bits(fmt_e8m0_mul(c)) ^ fmt_ceilexp(x);
  out[i++] = fmt_mx_code_v(x) ^ fmt_mx_code_a(x) ^ fmt_mx_code_r(x) ^ fmt_mx_code((int)c, y);
  out[i++] = fmt_bits(fmt_mx_quotient((int)c, x)) ^ fmt_mx_e4m3(y, c);
  out[i++] = fmt_bits(fmt_div_rn(x, y));
  out[i++] = fmt_e4m3_ocp_to_fnuz(c) ^ fmt_e2m1_to_e4m3fnuz(c);
  out[i++] = (u32)fmt_isnan(x) ^ fmt_bits(fmt_absf(y)) ^ fmt_bits(fmt_pow2((i32)(c & 63)));
  fmt_mxfp8_quant(in + 4, 32, (int)(c % 3), bytes, bytes + 32);
  fmt_mxfp4_quant(in + 36, 32, bytes + 64, bytes + 80);
}
