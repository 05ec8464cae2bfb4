/* device/selftest/st_mfma.cl: one wave runs one matrix instruction on per-lane registers
 * loaded from memory, so tests can compare the result with AMD's documented layouts. */
#include "../dev.h"
#include "selftest.h"

DEV_KERNEL(st_mfma, struct st_mfma_args, 64) {
  u32 lane = dev_lane();
  __global const u32 *a = (__global const u32 *)args.a + 8 * lane;
  __global const u32 *b = (__global const u32 *)args.b + 8 * lane;
  __global const f32 *c = (__global const f32 *)args.c + 16 * lane;
  __global f32 *d = (__global f32 *)args.d + 16 * lane;
  f32x4 c4 = {c[0], c[1], c[2], c[3]};
  f32x16 c16;
  for (int i = 0; i < 16; i++) c16[i] = c[i];
  u16x4 a4 = {(u16)a[0], (u16)(a[0] >> 16), (u16)a[1], (u16)(a[1] >> 16)};
  u16x4 b4 = {(u16)b[0], (u16)(b[0] >> 16), (u16)b[1], (u16)(b[1] >> 16)};
  u64 a64 = a[0] | ((u64)a[1] << 32), b64 = b[0] | ((u64)b[1] << 32);
  f32x4 r4 = 0;
  f32x16 r16 = 0;
  int wide = 0;
  switch (args.op) {
  case ST_MFMA_F32_16X16X4_F32: r4 = dev_mfma_f32_16x16x4_f32(dev_f32_bits(a[0]), dev_f32_bits(b[0]), c4); break;
  case ST_MFMA_F32_16X16X16_BF16: r4 = dev_mfma_f32_16x16x16_bf16(a4, b4, c4); break;
  case ST_MFMA_F32_32X32X8_BF16: r16 = dev_mfma_f32_32x32x8_bf16(a4, b4, c16); wide = 1; break;
  case ST_MFMA_F32_16X16X32_FP8: r4 = dev_mfma_f32_16x16x32_fp8(a64, b64, c4); break;
  case ST_MFMA_F32_32X32X16_FP8: r16 = dev_mfma_f32_32x32x16_fp8(a64, b64, c16); wide = 1; break;
#if DEV_HAS_SCALED_MFMA
  case ST_MFMA_F32_16X16X32_BF16: {
    u16x8 a8, b8;
    for (int i = 0; i < 4; i++) {
      a8[2 * i] = (u16)a[i], a8[2 * i + 1] = (u16)(a[i] >> 16);
      b8[2 * i] = (u16)b[i], b8[2 * i + 1] = (u16)(b[i] >> 16);
    }
    r4 = dev_mfma_f32_16x16x32_bf16(a8, b8, c4);
    break;
  }
  case ST_MFMA_SCALE_F32_16X16X128_F8F6F4:
  case ST_MFMA_SCALE_F32_32X32X64_F8F6F4: {
    i32x8 a8, b8;
    for (int i = 0; i < 8; i++) a8[i] = (i32)a[i], b8[i] = (i32)b[i];
    /* formats and scale bytes are instruction fields: one case each for the formats the
     * kernels use (fp8 x fp8, fp4 x fp8) */
    u32 sa = args.scale_a, sb = args.scale_b;
    if (args.op == ST_MFMA_SCALE_F32_16X16X128_F8F6F4) {
      if (args.fmt_a == DEV_FMT_FP4) r4 = dev_mfma_scale_f32_16x16x128_f8f6f4(a8, b8, c4, DEV_FMT_FP4, DEV_FMT_FP8, 0, sa, 0, sb);
      else r4 = dev_mfma_scale_f32_16x16x128_f8f6f4(a8, b8, c4, DEV_FMT_FP8, DEV_FMT_FP8, 0, sa, 0, sb);
    } else {
      wide = 1;
      if (args.fmt_a == DEV_FMT_FP4) r16 = dev_mfma_scale_f32_32x32x64_f8f6f4(a8, b8, c16, DEV_FMT_FP4, DEV_FMT_FP8, 0, sa, 0, sb);
      else r16 = dev_mfma_scale_f32_32x32x64_f8f6f4(a8, b8, c16, DEV_FMT_FP8, DEV_FMT_FP8, 0, sa, 0, sb);
    }
    break;
  }
#endif
  default: dev_trap();
  }
  if (wide)
    for (int i = 0; i < 16; i++) d[i] = r16[i];
  else
    for (int i = 0; i < 4; i++) d[i] = r4[i];
}
