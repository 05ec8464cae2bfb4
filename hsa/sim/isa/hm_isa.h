/* hsa/sim/isa/hm_isa.h: the software agent's models of AMD hardware operations: matrix
 * instructions (MFMA, scaled MFMA) in AMD's register layouts, and the fp8 conversions.
 *
 * OPERAND LAYOUTS (register <-> matrix element; "lane L holds ..."; r is the row of A / column
 * of B, i.e. A[r][k] or B[k][r]; element e of a lane is bits [w*e, w*e+w) of its registers
 * a[0..7] / b[0..7] read as one little-endian bit string, w the element width):
 *   CDNA3 (AMD Matrix Instruction Calculator, the tables in tests/data/mfma/cdna3):
 *     16x16x4 f32      A/B: lane 16k + r, element 0       (k < 4)
 *     16x16x16 f16/bf16 A/B: lane 16(k/4) + r, element k%4
 *     32x32x8 bf16     A/B: lane 32(k/4) + r, element k%4
 *     16x16x32 fp8     A/B: lane 16(k/8) + r, element k%8
 *     32x32x16 fp8     A/B: lane 32(k/8) + r, element k%8
 *   CDNA4 (gfx950; derivation and sources in tests/sim/test_isa_layouts.c):
 *     16x16x32 bf16    A/B: lane 16(k/8) + r, element k%8
 *     scaled 16x16x128, 8-bit formats: lane 16((k/16)%4) + r, element 16(k/64) + k%16
 *                       fp4:           lane 16(k/32) + r,     element k%32 (a nibble, even k low)
 *     scaled 32x32x64,  8-bit formats: lane 32((k/16)%2) + r, element 16(k/32) + k%16
 *                       fp4:           lane 32(k/32) + r,     element k%32
 *     scales: the E8M0 code of (row or column r, K block kb of 32) is byte opsel of the scale
 *     register of lane M*kb + r (M = 16 or 32), for A and for B alike.
 *   C/D, every form: 16x16: D[i][j] in lane 16(i/4) + j, register i%4;
 *                    32x32: D[i][j] in lane 32((i/4)%2) + j, register 4(i/8) + i%4.
 *
 * NUMERICS MODEL (the hardware's internal order and width are undocumented): every product
 * (times its block's two scales) is formed exactly, all of them and C are summed EXACTLY, and
 * the sum is rounded to f32 ONCE, to nearest even, with gradual underflow and overflow to
 * inf. The result is therefore independent of any summation order. An exact zero sum is -0
 * only when C and every product are -0. Any NaN operand or scale (E8M0 code 255), inf * 0 or
 * inf - inf gives NaN; otherwise an infinite operand gives the infinity of its products' sum.
 * Real hardware may round or truncate partial sums; kernel tests allow for that with
 * tolerances, and the layout tests use values whose sums are exact.
 *
 * Operand formats: fp8 MFMAs read FNUZ e4m3 on gfx942 and OCP e4m3 on gfx950. The scaled
 * forms read fp8 (OCP e4m3), bf8 (OCP e5m2) and fp4 (e2m1) per side; fp6 and bf6 are refused
 * (hm_isa_mfma returns false), as are formats, opsel or scale fields that differ between
 * lanes (on hardware they are instruction fields, so a difference is an agent bug).
 *
 * CONVERSIONS: v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32 round to nearest even (e4m3/e5m2: OCP on
 * gfx950, FNUZ on gfx942). Beyond the largest finite value the model is IEEE overflow without
 * saturation (the clamp bit clear, as the kernels issue them): a value whose RNE rounding
 * exceeds the maximum (|x| > 464 for OCP e4m3, >= 248 for FNUZ e4m3, >= 61440 for both e5m2)
 * and any infinity become inf for OCP e5m2 (0x7c | sign) and NaN otherwise (OCP e4m3
 * 0x7f | sign, FNUZ 0x80). NaN inputs give 0x7f | sign (OCP e4m3), 0x7e | sign (OCP e5m2),
 * 0x80 (FNUZ). FNUZ has no -0: negative values rounding to zero give 0x00. The kernels clamp
 * before converting (spec/mono.md §2.0), so only the in-range part is load-bearing.
 */
#ifndef HM_ISA_H
#define HM_ISA_H

#include <stdbool.h>

#include "dev_host.h"

enum hm_isa_arch { HM_ISA_GFX942, HM_ISA_GFX950 };

/* whether the architecture has the instruction (gfx942 lacks 16x16x32 bf16 and the scaled
 * f8f6f4 forms) */
bool hm_isa_mfma_supported(enum hm_isa_arch arch, enum dev_mfma_op op);

/* The D registers of lane `lane` (d[0..3] for 16x16 forms, d[0..15] for 32x32) from all 64
 * lanes' A and B registers (and the scaled forms' fmt / scale / opsel fields) and this lane's
 * C (lanes[lane].c). False, with d untouched, for an instruction the architecture lacks, an
 * unsupported operand format (fp6, bf6, or a code above DEV_FMT_FP4), an opsel above 3,
 * instruction fields that differ between lanes, lane >= 64 or a NULL pointer. Thread-safe:
 * each thread keeps the last instruction's decoded operands (reused only while all 64 lanes'
 * A and B registers, the instruction and the formats are unchanged), so the 64 calls of one
 * instruction decode once. */
bool hm_isa_mfma(enum hm_isa_arch arch, enum dev_mfma_op op, const struct dev_mfma_lane lanes[64],
                 unsigned lane, f32 d[16]);

/* The same for all 64 lanes at once (d[lane]), the operands decoded once: what the agent calls
 * when a wave's last lane has deposited its registers. False as hm_isa_mfma for any lane. */
bool hm_isa_mfma_wave(enum hm_isa_arch arch, enum dev_mfma_op op, const struct dev_mfma_lane lanes[64],
                      f32 d[64][16]);

/* Whether hm_isa_mfma may sum narrow operands (e4m3, FNUZ e4m3, e2m1) as integers a 32-wide
 * block (on by default; the result is the same exact sum, computed faster). Off: the general
 * path, for tests that compare the two. Takes effect at the next instruction a thread decodes. */
void hm_isa_mfma_fast_path(bool on);

/* v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32: a into byte 0 and b into byte 1 of the low (sel == 0)
 * or high (sel != 0) half of old, the other half kept. v_cvt_f32_fp8 / v_cvt_f32_bf8: byte
 * (sel & 3) of old decoded; returns the f32's bits. a and b are ignored by the decodes. An
 * op outside enum dev_cvt_op returns the f32 quiet NaN's bits. */
u32 hm_isa_cvt(enum hm_isa_arch arch, enum dev_cvt_op op, f32 a, f32 b, u32 old, u32 sel);

#endif /* HM_ISA_H */
