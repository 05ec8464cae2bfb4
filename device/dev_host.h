/* device/dev_host.h: the table of primitives the software HSA agent (hsa/sim/) provides to
 * device code compiled as host C; device/dev.h's host side calls nothing else. */
#ifndef HM_DEV_HOST_H
#define HM_DEV_HOST_H

#include "dev_types.h"

/* Bumped whenever the table below changes; the agent refuses a kernel object built
 * against another version (the object exports dev_host_abi). */
#define DEV_HOST_ABI 3

/* Memory scopes and orders, numbered the same on both sides of the table. */
enum dev_scope { DEV_HOST_SCOPE_WG = 1, DEV_HOST_SCOPE_AGENT = 2, DEV_HOST_SCOPE_SYSTEM = 3 };
enum dev_order {
  DEV_HOST_RELAXED = 0,
  DEV_HOST_ACQUIRE = 2,
  DEV_HOST_RELEASE = 3,
  DEV_HOST_ACQ_REL = 4,
  DEV_HOST_SEQ_CST = 5
};

/* Cache policies of loads and stores: the gfx940-family CPol bits (SC0 = 1, NT = 2,
 * SC1 = 16), the values the GPU side passes to the buffer instructions. */
enum dev_cache_policy {
  DEV_HOST_CP_PLAIN = 0, /* cached; another CTA sees it only after a release/acquire pair */
  DEV_HOST_CP_NT = 2,    /* non-temporal hint: cached like plain for visibility */
  DEV_HOST_CP_DEV = 16,  /* SC1: coherent at device (agent) scope once it completes */
  DEV_HOST_CP_SYS = 17   /* SC0|SC1: coherent at system scope once it completes */
};

enum dev_atomic_op {
  DEV_ATOMIC_LOAD,
  DEV_ATOMIC_STORE,
  DEV_ATOMIC_ADD,
  DEV_ATOMIC_MAX,
  DEV_ATOMIC_MIN,
  DEV_ATOMIC_AND,
  DEV_ATOMIC_OR,
  DEV_ATOMIC_XCHG,
  DEV_ATOMIC_CAS
};

/* Matrix instructions the agent executes, with AMD's per-lane operand layouts. */
enum dev_mfma_op {
  DEV_MFMA_F32_16X16X4_F32,    /* v_mfma_f32_16x16x4_f32 (gfx942, gfx950) */
  DEV_MFMA_F32_16X16X16_F16,   /* v_mfma_f32_16x16x16_f16 */
  DEV_MFMA_F32_16X16X16_BF16,  /* v_mfma_f32_16x16x16_bf16 (the "_1k" form) */
  DEV_MFMA_F32_32X32X8_BF16,   /* v_mfma_f32_32x32x8_bf16 */
  DEV_MFMA_F32_16X16X32_BF16,  /* v_mfma_f32_16x16x32_bf16 (gfx950 only) */
  DEV_MFMA_F32_16X16X32_FP8,   /* v_mfma_f32_16x16x32_fp8_fp8: FNUZ on gfx942, OCP on gfx950 */
  DEV_MFMA_F32_32X32X16_FP8,   /* v_mfma_f32_32x32x16_fp8_fp8 */
  DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, /* gfx950 only */
  DEV_MFMA_SCALE_F32_32X32X64_F8F6F4,  /* gfx950 only */
  DEV_MFMA_OP_COUNT
};

/* Formats of the f8f6f4 operands (the instruction's cbsz / blgp fields). */
enum dev_f8f6f4_fmt {
  DEV_FMT_FP8 = 0, /* e4m3 */
  DEV_FMT_BF8 = 1, /* e5m2 */
  DEV_FMT_FP6 = 2, /* e2m3 */
  DEV_FMT_BF6 = 3, /* e3m2 */
  DEV_FMT_FP4 = 4  /* e2m1 */
};

/* One lane's operands of a matrix instruction, in register order: A and B in up to 8
 * dwords, C in up to 16 floats; the scaled forms add a format and an E8M0 scale per side
 * (opsel picks the scale register's byte). */
struct dev_mfma_lane {
  u32 a[8];
  u32 b[8];
  f32 c[16];
  u32 fmt_a, fmt_b;
  u32 scale_a, scale_b;
  u32 opsel_a, opsel_b;
};

/* Hardware number conversions the agent models for the agent's architecture. */
enum dev_cvt_op {
  DEV_CVT_PK_FP8_F32, /* v_cvt_pk_fp8_f32: e4m3 (OCP on gfx950, FNUZ on gfx942) */
  DEV_CVT_PK_BF8_F32, /* v_cvt_pk_bf8_f32: e5m2 (OCP on gfx950, FNUZ on gfx942) */
  DEV_CVT_F32_FP8,    /* v_cvt_f32_fp8 of one byte */
  DEV_CVT_F32_BF8     /* v_cvt_f32_bf8 of one byte */
};

/* A poll round of a wait on a peer rank, which its own deadline bounds (device/ar.h): the software
 * agent's watchdog leaves such a kernel to that deadline, which names the peer, instead of failing
 * it as a kernel without progress (dev_poll_wait_peer). */
#define DEV_POLL_PEER 0x80000000u

struct dev_host_ops {
  u32 abi;
  /* ids and counts of the calling work-item, read from the dispatch */
  u32 (*lid)(void);
  u32 (*cta)(void);
  u32 (*ncta)(void);
  u32 (*cta_size)(void);
  /* the CTA's group segment (LDS); traps when bytes exceed the dispatch's size */
  void *(*lds)(u32 bytes);
  /* CTA barrier; wave operations (every active lane of the wave must call them) */
  void (*barrier)(void);
  u32 (*wave_shfl)(u32 value, u32 src_lane);
  u64 (*wave_ballot)(int pred);
  u32 (*wave_first)(u32 value);
  void (*mfma)(enum dev_mfma_op op, const struct dev_mfma_lane *in, f32 *d);
  u32 (*cvt)(enum dev_cvt_op op, f32 a, f32 b, u32 old, u32 sel);
  /* memory through the dialect: the agent applies its visibility model here */
  void (*load)(const void *p, void *out, u32 bytes, enum dev_cache_policy cp);
  void (*store)(void *p, const void *in, u32 bytes, enum dev_cache_policy cp);
  u64 (*atomic)(void *p, enum dev_atomic_op op, u32 bytes, u64 value, u64 compare,
                enum dev_order order, enum dev_scope scope);
  void (*fence)(enum dev_order order, enum dev_scope scope);
  void (*wait_stores)(void);
  /* polling and time; a round with DEV_POLL_PEER is one of a wait on a peer rank */
  void (*poll_wait)(u32 round);
  void (*poll_done)(void);
  u64 (*realtime)(void);
  /* the agent's event counter: each call returns a larger number than any before it (the
   * timeline's clock, dev_timeline.h) */
  u64 (*event)(void);
  void (*sleep)(u32 units);
  /* ends the dispatch with an error naming the kernel and the work-item */
  void (*trap)(const char *why);
  /* the calling work-item ended the stage of timeline slot `slot` (dev_tl_stamp, whether or not the
   * launch keeps a timeline): the agent's trace counts its next events in the next stage */
  void (*stage)(u32 slot);
};

/* Set by the agent in every kernel object it loads, before the first dispatch. */
extern const struct dev_host_ops *dev_host;

#endif /* HM_DEV_HOST_H */
