/* device/dev.h: the device dialect (DESIGN §3): every primitive a kernel may use, once for
 * the GPU (OpenCL C for amdgcn) and once for the software agent (host C); nothing else differs.
 *
 * Rules that keep the two compiles honest:
 *  - kernel arguments are one struct by value (device addresses as u64), declared in a header
 *    shared with the host (see dev_types.h);
 *  - no recursion, no function pointers, no program-scope variables except DEV_CONST tables;
 *  - wave operations (shuffles, ballot, readfirstlane, reductions, MFMA) only in wave-uniform
 *    control flow;
 *  - memory another CTA or agent reads goes through the dev_ld / dev_st / dev_buf / atomic
 *    helpers below (the software agent models visibility there, nowhere else);
 *  - every spin loop is DEV_POLL_UNTIL or uses dev_poll_wait: it backs off on the GPU and lets
 *    the software agent run other work-items (and notice a hang) on the host;
 *  - one LDS struct per kernel, declared once with DEV_LDS at the kernel's top level.
 */
#ifndef HM_DEV_H
#define HM_DEV_H

#include "dev_persist.h"
#include "dev_timeline.h"
#include "dev_types.h"
#include "formats.h"

/* ---------------------------------------------------------------- target selection */

#if defined(__AMDGCN__)
#define DEV_GPU 1
#if defined(__gfx950__)
#define DEV_ARCH_GFX950 1
#elif defined(__gfx942__)
#define DEV_ARCH_GFX942 1
#else
#error "device/dev.h: unsupported AMDGPU target (gfx950 and gfx942 only)"
#endif
#else
#define DEV_HOST_BUILD 1
#include "dev_host.h"
#include <math.h>
/* The host kernel object is built once per architecture (-DDEV_ARCH_GFX950=1 or
 * -DDEV_ARCH_GFX942=1), so arch-specific code paths select the same way on both sides. */
#if !defined(DEV_ARCH_GFX950) && !defined(DEV_ARCH_GFX942)
#error "device/dev.h: host build needs -DDEV_ARCH_GFX950=1 or -DDEV_ARCH_GFX942=1"
#endif
#define __global
#define __local
#define __constant const
#endif

#ifndef DEV_ARCH_GFX950
#define DEV_ARCH_GFX950 0
#endif
#ifndef DEV_ARCH_GFX942
#define DEV_ARCH_GFX942 0
#endif
/* The gfx950-only instructions: scaled f8f6f4 MFMA, 16x16x32 bf16 MFMA, OCP fp8. */
#define DEV_HAS_SCALED_MFMA DEV_ARCH_GFX950

#define DEV_WAVE 64
#define DEV_INLINE static inline __attribute__((always_inline))

/* Read-only tables at program scope. */
#if defined(DEV_GPU)
#define DEV_CONST __constant
#else
#define DEV_CONST static const
#endif

/* ---------------------------------------------------------------- vector types */

typedef f32 f32x2 __attribute__((ext_vector_type(2)));
typedef f32 f32x4 __attribute__((ext_vector_type(4)));
typedef f32 f32x16 __attribute__((ext_vector_type(16)));
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
typedef i32 i32x8 __attribute__((ext_vector_type(8)));
typedef u16 u16x4 __attribute__((ext_vector_type(4)));
typedef u16 u16x8 __attribute__((ext_vector_type(8)));

#define dev_bits_f32(x) __builtin_bit_cast(u32, (f32)(x))
#define dev_f32_bits(x) __builtin_bit_cast(f32, (u32)(x))

/* ---------------------------------------------------------------- kernels and LDS */

/* DEV_KERNEL(name, struct args_type, work-group size) { body using `args` }
 * The GPU entry is an amdgpu_kernel (no OpenCL enqueue stub, so LDS stays a kernel's own);
 * the host entry takes the kernarg segment's address and is found by the agent by name. */
#if defined(DEV_GPU)
#define DEV_KERNEL(name, args_type, wg_size)                                                \
  __attribute__((amdgpu_kernel, reqd_work_group_size(wg_size, 1, 1))) void name(            \
      args_type args)
#define DEV_LDS(type, name)                                                                 \
  __local type name##_lds_storage;                                                          \
  __local type *const name = &name##_lds_storage
#else
#define DEV_KERNEL(name, args_type, wg_size)                                                \
  static void name##_body(args_type args);                                                  \
  __attribute__((visibility("default"))) const u32 hm_host_kernel_wg_##name = (wg_size);   \
  __attribute__((visibility("default"))) void hm_host_kernel_##name(const void *kernarg) { \
    args_type args;                                                                         \
    __builtin_memcpy(&args, kernarg, sizeof(args));                                         \
    name##_body(args);                                                                      \
  }                                                                                         \
  static void name##_body(args_type args)
#define DEV_LDS(type, name) type *const name = (type *)dev_host->lds((u32)sizeof(type))
#endif

/* The kernel's arguments read in place, for a kernel too large to keep every argument in
 * registers from its first instruction: DEV_ARGS_PTR(type) points at `args` in the kernarg
 * segment (each field an s_load where it is used), DEV_ARGSPACE qualifies such pointers. */
#if defined(DEV_GPU)
#define DEV_ARGSPACE __constant
#define DEV_ARGS_PTR(args_type) ((__constant const args_type *)__builtin_amdgcn_kernarg_segment_ptr())
#else
#define DEV_ARGSPACE
#define DEV_ARGS_PTR(args_type) ((const args_type *)&args)
#endif

/* ---------------------------------------------------------------- ids and counts */

#if defined(DEV_GPU)
/* The AQL dispatch packet (hsa.h): workgroup_size_x at byte 4, grid_size_x at byte 12.
 * Read from the packet, not from hidden kernel arguments, so kernels declare none. */
DEV_INLINE u32 dev_cta_size(void) {
  __constant u16 *p = (__constant u16 *)__builtin_amdgcn_dispatch_ptr();
  return p[2];
}
DEV_INLINE u32 dev_grid_items(void) {
  __constant u32 *p = (__constant u32 *)__builtin_amdgcn_dispatch_ptr();
  return p[3];
}
DEV_INLINE u32 dev_lid(void) { return __builtin_amdgcn_workitem_id_x(); }
DEV_INLINE u32 dev_cta(void) { return __builtin_amdgcn_workgroup_id_x(); }
DEV_INLINE u32 dev_ncta(void) {
  u32 wg = dev_cta_size();
  return (dev_grid_items() + wg - 1) / wg;
}
DEV_INLINE u32 dev_lane(void) {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}
#else
DEV_INLINE u32 dev_cta_size(void) { return dev_host->cta_size(); }
DEV_INLINE u32 dev_lid(void) { return dev_host->lid(); }
DEV_INLINE u32 dev_cta(void) { return dev_host->cta(); }
DEV_INLINE u32 dev_ncta(void) { return dev_host->ncta(); }
DEV_INLINE u32 dev_lane(void) { return dev_host->lid() & (DEV_WAVE - 1); }
#endif
DEV_INLINE u32 dev_nwaves(void) { return (dev_cta_size() + DEV_WAVE - 1) / DEV_WAVE; }

/* ---------------------------------------------------------------- wave operations */

#if defined(DEV_GPU)
/* value of lane src (taken mod 64) */
DEV_INLINE u32 dev_shfl_u32(u32 v, u32 src) {
  return (u32)__builtin_amdgcn_ds_bpermute((i32)(src << 2), (i32)v);
}
DEV_INLINE u64 dev_ballot(int pred) { return __builtin_amdgcn_ballot_w64(pred != 0); }
DEV_INLINE u32 dev_readfirstlane_u32(u32 v) { return __builtin_amdgcn_readfirstlane(v); }
#else
DEV_INLINE u32 dev_shfl_u32(u32 v, u32 src) { return dev_host->wave_shfl(v, src & 63u); }
DEV_INLINE u64 dev_ballot(int pred) { return dev_host->wave_ballot(pred != 0); }
DEV_INLINE u32 dev_readfirstlane_u32(u32 v) { return dev_host->wave_first(v); }
#endif
/* A value the compiler is to keep in a VGPR (a wave-uniform value it would otherwise hold in an
 * SGPR across a stage, where SGPRs are short). */
DEV_INLINE u32 dev_in_vgpr(u32 v) {
#if defined(DEV_GPU)
  __asm__ volatile("" : "+v"(v));
#endif
  return v;
}
#if defined(DEV_GPU)
DEV_INLINE u32 dev_wave(void) { return dev_readfirstlane_u32(dev_lid() / DEV_WAVE); }
#else
DEV_INLINE u32 dev_wave(void) { return dev_lid() / DEV_WAVE; }
#endif
DEV_INLINE u32 dev_shfl_xor_u32(u32 v, u32 mask) { return dev_shfl_u32(v, dev_lane() ^ mask); }
DEV_INLINE f32 dev_shfl_f32(f32 v, u32 src) { return dev_f32_bits(dev_shfl_u32(dev_bits_f32(v), src)); }
DEV_INLINE f32 dev_shfl_xor_f32(f32 v, u32 mask) {
  return dev_f32_bits(dev_shfl_xor_u32(dev_bits_f32(v), mask));
}

/* Butterfly reductions. The order of the xor offsets is part of the numerics (the
 * reference names the order at each site); IEEE addition is commutative, so every lane
 * ends with the same value. */
DEV_INLINE f32 dev_wave_sum_f32_32to1(f32 v) {
  for (u32 off = 32; off >= 1; off >>= 1) v = v + dev_shfl_xor_f32(v, off);
  return v;
}
DEV_INLINE f32 dev_wave_sum_f32_1to32(f32 v) {
  for (u32 off = 1; off <= 32; off <<= 1) v = v + dev_shfl_xor_f32(v, off);
  return v;
}
/* sum over aligned groups of `width` lanes (a power of two <= 64), offsets 1, 2, ... */
DEV_INLINE f32 dev_group_sum_f32_up(f32 v, u32 width) {
  for (u32 off = 1; off < width; off <<= 1) v = v + dev_shfl_xor_f32(v, off);
  return v;
}
DEV_INLINE f32 dev_wave_max_f32(f32 v) {
  for (u32 off = 32; off >= 1; off >>= 1) v = __builtin_fmaxf(v, dev_shfl_xor_f32(v, off));
  return v;
}
DEV_INLINE u32 dev_wave_sum_u32(u32 v) {
  for (u32 off = 32; off >= 1; off >>= 1) v += dev_shfl_xor_u32(v, off);
  return v;
}
DEV_INLINE u32 dev_wave_max_u32(u32 v) {
  for (u32 off = 32; off >= 1; off >>= 1) {
    u32 o = dev_shfl_xor_u32(v, off);
    v = o > v ? o : v;
  }
  return v;
}

/* ---------------------------------------------------------------- CTA barrier */

#if defined(DEV_GPU)
/* s_barrier between workgroup-scope release and acquire fences: LDS and the CTA's own
 * global stores are visible to the CTA's other work-items afterwards. The release fence should
 * bring s_waitcnt lgkmcnt(0) (LDS done) before the barrier, and does almost everywhere, but clang
 * 22 dropped it on one path: the FFN down stage's round wait, reached from the previous round's
 * LDS writes through ho_flags_wait's no-poll branch (work-items past the flags), on gfx950 and
 * gfx942 (device:memseq's barrier rule caught it). So the wait is explicit: 0xC07F is lgkmcnt(0)
 * with vmcnt and expcnt at their maxima (no wait) in gfx9's encoding; where the compiler already
 * waited, it costs one instruction. */
DEV_INLINE void dev_barrier(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_waitcnt(0xC07F);
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#else
DEV_INLINE void dev_barrier(void) { dev_host->barrier(); }
#endif

/* ---------------------------------------------------------------- scopes, orders, fences */

#define DEV_RELAXED 0
#define DEV_ACQUIRE 2
#define DEV_RELEASE 3
#define DEV_ACQ_REL 4
#define DEV_SEQ_CST 5
#define DEV_SCOPE_WG 1
#define DEV_SCOPE_AGENT 2
#define DEV_SCOPE_SYSTEM 3

#if defined(DEV_GPU)
#define DEV_GPU_ORDER(o)                                                                    \
  ((o) == DEV_RELAXED   ? __ATOMIC_RELAXED                                                  \
   : (o) == DEV_ACQUIRE ? __ATOMIC_ACQUIRE                                                  \
   : (o) == DEV_RELEASE ? __ATOMIC_RELEASE                                                  \
   : (o) == DEV_ACQ_REL ? __ATOMIC_ACQ_REL                                                  \
                        : __ATOMIC_SEQ_CST)
#define DEV_GPU_SCOPE(s)                                                                    \
  ((s) == DEV_SCOPE_WG ? __MEMORY_SCOPE_WRKGRP                                              \
   : (s) == DEV_SCOPE_AGENT ? __MEMORY_SCOPE_DEVICE                                         \
                            : __MEMORY_SCOPE_SYSTEM)
/* __builtin_amdgcn_fence takes its order and scope as constants: order and scope must be
 * constant expressions here too. */
#define DEV_FENCE_AT(o, s)                                                                  \
  do {                                                                                      \
    if ((s) == DEV_SCOPE_WG) __builtin_amdgcn_fence(o, "workgroup");                        \
    else if ((s) == DEV_SCOPE_AGENT) __builtin_amdgcn_fence(o, "agent");                     \
    else __builtin_amdgcn_fence(o, "");                                                     \
  } while (0)
#define dev_fence(order, scope)                                                             \
  do {                                                                                      \
    if ((order) == DEV_ACQUIRE) DEV_FENCE_AT(__ATOMIC_ACQUIRE, scope);                       \
    else if ((order) == DEV_RELEASE) DEV_FENCE_AT(__ATOMIC_RELEASE, scope);                  \
    else if ((order) == DEV_ACQ_REL) DEV_FENCE_AT(__ATOMIC_ACQ_REL, scope);                  \
    else DEV_FENCE_AT(__ATOMIC_SEQ_CST, scope);                                             \
  } while (0)
/* s_waitcnt vmcnt(0): every global load and store of this work-item has completed. A
 * workgroup-scope release does not wait for stores outside tgsplit mode, so the
 * "data, wait, barrier, flag" hand-off needs this explicitly (spec/mono.md §3.3). */
DEV_INLINE void dev_wait_stores(void) { __builtin_amdgcn_s_waitcnt(0x0F70); }
#else
#define dev_fence(order, scope) dev_host->fence((enum dev_order)(order), (enum dev_scope)(scope))
DEV_INLINE void dev_wait_stores(void) { dev_host->wait_stores(); }
#endif

/* ---------------------------------------------------------------- scoped atomics */

#if defined(DEV_GPU)
#define DEV_ATOMIC_RMW(builtin, p, v, o, s) builtin(p, v, DEV_GPU_ORDER(o), DEV_GPU_SCOPE(s))
#define dev_atomic_load_u32(p, o, s) __scoped_atomic_load_n(p, DEV_GPU_ORDER(o), DEV_GPU_SCOPE(s))
#define dev_atomic_load_u64(p, o, s) __scoped_atomic_load_n(p, DEV_GPU_ORDER(o), DEV_GPU_SCOPE(s))
#define dev_atomic_store_u32(p, v, o, s)                                                    \
  __scoped_atomic_store_n(p, (u32)(v), DEV_GPU_ORDER(o), DEV_GPU_SCOPE(s))
#define dev_atomic_store_u64(p, v, o, s)                                                    \
  __scoped_atomic_store_n(p, (u64)(v), DEV_GPU_ORDER(o), DEV_GPU_SCOPE(s))
#define dev_atomic_add_u32(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_fetch_add, p, (u32)(v), o, s)
#define dev_atomic_add_u64(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_fetch_add, p, (u64)(v), o, s)
#define dev_atomic_max_u32(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_fetch_max, p, (u32)(v), o, s)
#define dev_atomic_max_u64(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_fetch_max, p, (u64)(v), o, s)
#define dev_atomic_min_u32(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_fetch_min, p, (u32)(v), o, s)
#define dev_atomic_or_u32(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_fetch_or, p, (u32)(v), o, s)
#define dev_atomic_and_u32(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_fetch_and, p, (u32)(v), o, s)
#define dev_atomic_xchg_u32(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_exchange_n, p, (u32)(v), o, s)
#define dev_atomic_xchg_u64(p, v, o, s) DEV_ATOMIC_RMW(__scoped_atomic_exchange_n, p, (u64)(v), o, s)
/* compare-and-swap: returns the old value (the swap happened iff it equals `expected`) */
DEV_INLINE u32 dev_atomic_cas_u32_impl(__global u32 *p, u32 expected, u32 desired, int o, int s) {
  u32 e = expected;
  if (s == DEV_SCOPE_WG)
    __scoped_atomic_compare_exchange_n(p, &e, desired, 0, DEV_GPU_ORDER(o), __ATOMIC_RELAXED,
                                       __MEMORY_SCOPE_WRKGRP);
  else if (s == DEV_SCOPE_AGENT)
    __scoped_atomic_compare_exchange_n(p, &e, desired, 0, DEV_GPU_ORDER(o), __ATOMIC_RELAXED,
                                       __MEMORY_SCOPE_DEVICE);
  else
    __scoped_atomic_compare_exchange_n(p, &e, desired, 0, DEV_GPU_ORDER(o), __ATOMIC_RELAXED,
                                       __MEMORY_SCOPE_SYSTEM);
  return e;
}
DEV_INLINE u64 dev_atomic_cas_u64_impl(__global u64 *p, u64 expected, u64 desired, int o, int s) {
  u64 e = expected;
  if (s == DEV_SCOPE_WG)
    __scoped_atomic_compare_exchange_n(p, &e, desired, 0, DEV_GPU_ORDER(o), __ATOMIC_RELAXED,
                                       __MEMORY_SCOPE_WRKGRP);
  else if (s == DEV_SCOPE_AGENT)
    __scoped_atomic_compare_exchange_n(p, &e, desired, 0, DEV_GPU_ORDER(o), __ATOMIC_RELAXED,
                                       __MEMORY_SCOPE_DEVICE);
  else
    __scoped_atomic_compare_exchange_n(p, &e, desired, 0, DEV_GPU_ORDER(o), __ATOMIC_RELAXED,
                                       __MEMORY_SCOPE_SYSTEM);
  return e;
}
#else
#define DEV_HOST_ATOMIC(p, op, bytes, v, cmp, o, s)                                         \
  dev_host->atomic((void *)(p), op, bytes, (u64)(v), (u64)(cmp), (enum dev_order)(o),       \
                   (enum dev_scope)(s))
#define dev_atomic_load_u32(p, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_LOAD, 4, 0, 0, o, s))
#define dev_atomic_load_u64(p, o, s) ((u64)DEV_HOST_ATOMIC(p, DEV_ATOMIC_LOAD, 8, 0, 0, o, s))
#define dev_atomic_store_u32(p, v, o, s) ((void)DEV_HOST_ATOMIC(p, DEV_ATOMIC_STORE, 4, v, 0, o, s))
#define dev_atomic_store_u64(p, v, o, s) ((void)DEV_HOST_ATOMIC(p, DEV_ATOMIC_STORE, 8, v, 0, o, s))
#define dev_atomic_add_u32(p, v, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_ADD, 4, (u32)(v), 0, o, s))
#define dev_atomic_add_u64(p, v, o, s) ((u64)DEV_HOST_ATOMIC(p, DEV_ATOMIC_ADD, 8, v, 0, o, s))
#define dev_atomic_max_u32(p, v, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_MAX, 4, (u32)(v), 0, o, s))
#define dev_atomic_max_u64(p, v, o, s) ((u64)DEV_HOST_ATOMIC(p, DEV_ATOMIC_MAX, 8, v, 0, o, s))
#define dev_atomic_min_u32(p, v, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_MIN, 4, (u32)(v), 0, o, s))
#define dev_atomic_or_u32(p, v, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_OR, 4, (u32)(v), 0, o, s))
#define dev_atomic_and_u32(p, v, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_AND, 4, (u32)(v), 0, o, s))
#define dev_atomic_xchg_u32(p, v, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_XCHG, 4, (u32)(v), 0, o, s))
#define dev_atomic_xchg_u64(p, v, o, s) ((u64)DEV_HOST_ATOMIC(p, DEV_ATOMIC_XCHG, 8, v, 0, o, s))
#define dev_atomic_cas_u32_impl(p, e, d, o, s) ((u32)DEV_HOST_ATOMIC(p, DEV_ATOMIC_CAS, 4, d, e, o, s))
#define dev_atomic_cas_u64_impl(p, e, d, o, s) ((u64)DEV_HOST_ATOMIC(p, DEV_ATOMIC_CAS, 8, d, e, o, s))
#endif
#define dev_atomic_cas_u32(p, expected, desired, o, s) dev_atomic_cas_u32_impl(p, expected, desired, o, s)
#define dev_atomic_cas_u64(p, expected, desired, o, s) dev_atomic_cas_u64_impl(p, expected, desired, o, s)

/* ---------------------------------------------------------------- loads and stores with cache policy */

/* Policies (gfx940-family CPol bits, spec/mono.md §1.1): */
#define DEV_CP_PLAIN 0 /* cached: visible to other CTAs only through release / acquire */
#define DEV_CP_NT 2    /* non-temporal hint (streaming weights); cached for visibility */
#define DEV_CP_DEV 16  /* SC1: device-coherent (past the per-XCD L2) once complete */
#define DEV_CP_SYS 17  /* SC0|SC1: system-coherent (peer GPUs, host) once complete */

/* Scalar loads and stores through a per-lane pointer. The policy must be a constant.
 * DEV and SYS map to relaxed atomics at agent / system scope, which the compiler lowers to
 * global_load/store with sc1 / sc0 sc1 on gfx942 and gfx950 (AMDGPUUsage memory model). */
#if defined(DEV_GPU)
#define DEV_LDST_GPU(T)                                                                     \
  DEV_INLINE T dev_ld_##T(__global const T *p, const int cp) {                              \
    if (cp == DEV_CP_DEV) return __scoped_atomic_load_n(p, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE); \
    if (cp == DEV_CP_SYS) return __scoped_atomic_load_n(p, __ATOMIC_RELAXED, __MEMORY_SCOPE_SYSTEM); \
    if (cp == DEV_CP_NT) return __builtin_nontemporal_load(p);                              \
    return *p;                                                                              \
  }                                                                                         \
  DEV_INLINE void dev_st_##T(__global T *p, T v, const int cp) {                            \
    if (cp == DEV_CP_DEV) __scoped_atomic_store_n(p, v, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE); \
    else if (cp == DEV_CP_SYS) __scoped_atomic_store_n(p, v, __ATOMIC_RELAXED, __MEMORY_SCOPE_SYSTEM); \
    else if (cp == DEV_CP_NT) __builtin_nontemporal_store(v, p);                             \
    else *p = v;                                                                            \
  }
DEV_LDST_GPU(u32)
DEV_LDST_GPU(u64)
#else
#define DEV_LDST_HOST(T)                                                                    \
  DEV_INLINE T dev_ld_##T(const T *p, const int cp) {                                       \
    T v;                                                                                    \
    dev_host->load(p, &v, (u32)sizeof(T), (enum dev_cache_policy)cp);                       \
    return v;                                                                               \
  }                                                                                         \
  DEV_INLINE void dev_st_##T(T *p, T v, const int cp) {                                     \
    dev_host->store(p, &v, (u32)sizeof(T), (enum dev_cache_policy)cp);                      \
  }
DEV_LDST_HOST(u32)
DEV_LDST_HOST(u64)
#endif

/* Buffer access: a wave-uniform base and size, per-lane byte offsets, any policy, up to
 * 16 bytes an access. Out-of-range dwords read as 0 and are not stored, on the GPU (raw buffer
 * range checking) and in the software agent alike. */
#if defined(DEV_GPU)
typedef struct { __amdgpu_buffer_rsrc_t rsrc; } dev_buf_t;
/* gfx9 buffer descriptor word 3 for raw dword access (as composable_kernel uses on
 * gfx90a/gfx94x/gfx950). */
#define DEV_BUF_WORD3 0x00020000
DEV_INLINE dev_buf_t dev_buf(__global const void *base, u32 bytes) {
  u64 a = (u64)base;
  u32 lo = __builtin_amdgcn_readfirstlane((u32)a), hi = __builtin_amdgcn_readfirstlane((u32)(a >> 32));
  dev_buf_t b;
  b.rsrc = __builtin_amdgcn_make_buffer_rsrc((__global void *)(((u64)hi << 32) | lo), 0,
                                             (i32)__builtin_amdgcn_readfirstlane(bytes), DEV_BUF_WORD3);
  return b;
}
#define dev_buf_ld_u32(b, off, cp) __builtin_amdgcn_raw_buffer_load_b32((b).rsrc, (i32)(off), 0, cp)
#define dev_buf_ld_u32x2(b, off, cp) __builtin_amdgcn_raw_buffer_load_b64((b).rsrc, (i32)(off), 0, cp)
#define dev_buf_ld_u32x4(b, off, cp) __builtin_amdgcn_raw_buffer_load_b128((b).rsrc, (i32)(off), 0, cp)
#define dev_buf_st_u32(b, off, v, cp) __builtin_amdgcn_raw_buffer_store_b32(v, (b).rsrc, (i32)(off), 0, cp)
#define dev_buf_st_u32x2(b, off, v, cp) __builtin_amdgcn_raw_buffer_store_b64(v, (b).rsrc, (i32)(off), 0, cp)
#define dev_buf_st_u32x4(b, off, v, cp) __builtin_amdgcn_raw_buffer_store_b128(v, (b).rsrc, (i32)(off), 0, cp)
#else
typedef struct { u8 *base; u32 bytes; } dev_buf_t;
DEV_INLINE dev_buf_t dev_buf(const void *base, u32 bytes) {
  dev_buf_t b = {(u8 *)base, bytes};
  return b;
}
/* The range check is per dword, as the hardware's for raw buffer accesses: a 16-byte access
 * that straddles the end keeps the dwords before it. */
#define DEV_BUF_HOST(T)                                                                     \
  DEV_INLINE T dev_buf_ld_##T##_h(dev_buf_t b, u32 off, int cp) {                           \
    T v;                                                                                    \
    u32 w[sizeof(T) / 4];                                                                   \
    for (u32 i = 0; i < sizeof(T) / 4; i++) {                                               \
      w[i] = 0;                                                                             \
      if ((u64)off + 4 * i + 4 <= b.bytes)                                                  \
        dev_host->load(b.base + off + 4 * i, &w[i], 4, (enum dev_cache_policy)cp);          \
    }                                                                                       \
    __builtin_memcpy(&v, w, sizeof(T));                                                     \
    return v;                                                                               \
  }                                                                                         \
  DEV_INLINE void dev_buf_st_##T##_h(dev_buf_t b, u32 off, T v, int cp) {                   \
    u32 w[sizeof(T) / 4];                                                                   \
    __builtin_memcpy(w, &v, sizeof(T));                                                     \
    for (u32 i = 0; i < sizeof(T) / 4; i++)                                                 \
      if ((u64)off + 4 * i + 4 <= b.bytes)                                                  \
        dev_host->store(b.base + off + 4 * i, &w[i], 4, (enum dev_cache_policy)cp);         \
  }
DEV_BUF_HOST(u32)
DEV_BUF_HOST(u32x2)
DEV_BUF_HOST(u32x4)
#define dev_buf_ld_u32(b, off, cp) dev_buf_ld_u32_h(b, off, cp)
#define dev_buf_ld_u32x2(b, off, cp) dev_buf_ld_u32x2_h(b, off, cp)
#define dev_buf_ld_u32x4(b, off, cp) dev_buf_ld_u32x4_h(b, off, cp)
#define dev_buf_st_u32(b, off, v, cp) dev_buf_st_u32_h(b, off, v, cp)
#define dev_buf_st_u32x2(b, off, v, cp) dev_buf_st_u32x2_h(b, off, v, cp)
#define dev_buf_st_u32x4(b, off, v, cp) dev_buf_st_u32x4_h(b, off, v, cp)
#endif

/* ---------------------------------------------------------------- time, sleep, polling */

/* A constant 100 MHz clock on gfx942 / gfx950 (s_memrealtime). */
#define DEV_REALTIME_HZ 100000000ull

#if defined(DEV_GPU)
DEV_INLINE u64 dev_realtime(void) { return __builtin_amdgcn_s_memrealtime(); }
#define dev_sleep(units) __builtin_amdgcn_s_sleep(units)
DEV_INLINE void dev_trap(void) { __builtin_trap(); }
#else
DEV_INLINE u64 dev_realtime(void) { return dev_host->realtime(); }
#define dev_sleep(units) dev_host->sleep(units)
#define DEV_STR2(x) #x
#define DEV_STR(x) DEV_STR2(x)
#define dev_trap() dev_host->trap(__FILE__ ":" DEV_STR(__LINE__))
#endif

/* One polling loop: dev_poll_wait between tries (s_sleep back-off on the GPU; on the host
 * the agent runs other work-items and counts the round toward its watchdog), and
 * dev_poll_done when the condition held. */
typedef struct { u32 round; u64 start; } dev_poll_t;
DEV_INLINE void dev_poll_init(dev_poll_t *p) {
  p->round = 0;
  p->start = dev_realtime();
}
#if defined(DEV_GPU)
DEV_INLINE void dev_poll_wait(dev_poll_t *p) {
  /* s_sleep n waits about 64*n clocks: short naps first, then longer ones so a long wait
   * does not flood the memory system with polls. */
  if (p->round < 64) __builtin_amdgcn_s_sleep(1);
  else __builtin_amdgcn_s_sleep(8);
  p->round++;
}
DEV_INLINE void dev_poll_done(dev_poll_t *p) { (void)p; }
DEV_INLINE void dev_poll_wait_peer(dev_poll_t *p) { dev_poll_wait(p); }
#else
DEV_INLINE void dev_poll_wait(dev_poll_t *p) { dev_host->poll_wait(p->round++ & ~DEV_POLL_PEER); }
DEV_INLINE void dev_poll_done(dev_poll_t *p) {
  (void)p;
  dev_host->poll_done();
}
/* a round of a wait on a peer rank (device/ar.h), which its own deadline bounds (dev_host.h) */
DEV_INLINE void dev_poll_wait_peer(dev_poll_t *p) { dev_host->poll_wait((p->round++ & ~DEV_POLL_PEER) | DEV_POLL_PEER); }
#endif
/* ticks of DEV_REALTIME_HZ since dev_poll_init */
DEV_INLINE u64 dev_poll_elapsed(const dev_poll_t *p) { return dev_realtime() - p->start; }

/* Spin until cond holds (an intra-launch wait that cannot fail: its producer is an earlier
 * stage of a fully resident grid). Waits on peers use a bounded loop with dev_poll_elapsed. */
#define DEV_POLL_UNTIL(cond)                                                                \
  do {                                                                                      \
    dev_poll_t dev_poll_;                                                                   \
    dev_poll_init(&dev_poll_);                                                              \
    while (!(cond)) dev_poll_wait(&dev_poll_);                                              \
    dev_poll_done(&dev_poll_);                                                              \
  } while (0)

/* ---------------------------------------------------------------- persistent launches */

/* The first thing a persistent kernel does (hm_persistent_launch on the host): count this CTA in
 * and wait for the verdict (device/dev_persist.h). Returns 1 when the whole grid arrived, 0 when
 * the host gave up first (the grid is not resident); every work-item of the CTA gets the answer
 * through `slot`, a word of the kernel's LDS struct. */
DEV_INLINE u32 dev_persist_arrive(__global struct hm_dev_persist *p, __local u32 *slot) {
  if (dev_lid() == 0) {
    u32 n = dev_ncta();
    if (dev_atomic_add_u32(&p->arrived, 1u, DEV_RELAXED, DEV_SCOPE_SYSTEM) + 1u == n) {
      if (DEV_PERSIST_SKIP & DEV_PERSIST_SKIP_CAS)
        dev_atomic_xchg_u32(&p->state, DEV_PERSIST_GO, DEV_RELAXED, DEV_SCOPE_SYSTEM);
      else
        dev_atomic_cas_u32(&p->state, 0u, DEV_PERSIST_GO, DEV_RELAXED, DEV_SCOPE_SYSTEM);
    }
    if (!(DEV_PERSIST_SKIP & DEV_PERSIST_SKIP_WAIT))
      DEV_POLL_UNTIL(dev_atomic_load_u32(&p->state, DEV_RELAXED, DEV_SCOPE_SYSTEM) != 0u);
    *slot = dev_atomic_load_u32(&p->state, DEV_RELAXED, DEV_SCOPE_SYSTEM) == DEV_PERSIST_GO;
  }
  if (!(DEV_PERSIST_SKIP & DEV_PERSIST_SKIP_BARRIER)) dev_barrier();
  return *slot;
}

/* The timeline's stamp (dev_timeline.h): the clock is s_memrealtime on a GPU and, on the software
 * agent, its global event counter, which orders the stamps of every CTA but measures no time. `tl`
 * is the launch's argument, re-read at every stamp rather than held in registers through the launch,
 * so with it 0 (the default) a stamp costs a scalar load and a branch. */
#if defined(DEV_GPU)
DEV_INLINE u64 dev_tl_clock(void) { return __builtin_amdgcn_s_memrealtime(); }
#else
DEV_INLINE u64 dev_tl_clock(void) { return dev_host->event(); }
#endif
DEV_INLINE void dev_tl_stamp(u64 tl, u32 slot, u32 n, u32 ran) {
#if !defined(DEV_GPU)
  /* the software agent's trace (hsa/sim/trace.c) takes its stage boundaries from here, every work-item
   * at its own stamp; nothing of it reaches a GPU build */
  dev_host->stage(slot);
#endif
  if (tl == 0) return;
  u32 lid = dev_lid();
#if defined(DEV_GPU) && DEV_ARCH_GFX942
  /* the test made again at each stamp: hoisted, its lane mask held two SGPRs through the whole
   * kernel, which gfx942's K1 spilled (gfx942 leaves a kernel fewer SGPRs than gfx950: XNACK's
   * mask); on gfx950 the hoisted mask is K2's better allocation */
  __asm__ volatile("" : "+v"(lid));
#endif
  if (lid == 0) {
    __global struct hm_tl_stamp *p = (__global struct hm_tl_stamp *)tl + (u64)dev_cta() * DEV_TL_SLOTS + slot;
    p->n = n;
    p->ran = ran;
    p->t = dev_tl_clock();
  }
}

/* ---------------------------------------------------------------- hardware math */

/* v_exp_f32, v_log_f32, v_rcp_f32, v_rsq_f32 (about 1 ulp on the GPU; libm on the host,
 * which the reference's tolerances cover: DESIGN §6). */
#if defined(DEV_GPU)
DEV_INLINE f32 dev_exp2(f32 x) { return __builtin_amdgcn_exp2f(x); }
DEV_INLINE f32 dev_log2(f32 x) { return __builtin_amdgcn_logf(x); }
DEV_INLINE f32 dev_rcp(f32 x) { return __builtin_amdgcn_rcpf(x); }
DEV_INLINE f32 dev_rsq(f32 x) { return __builtin_amdgcn_rsqf(x); }
DEV_INLINE f32 dev_sqrt(f32 x) { return __builtin_sqrtf(x); }
/* e^x where a kernel models a library expf (the reference's ocml expf): x log2(e) as a head and
 * an fma-exact tail, so the rounding of the product does not cost the result |x| ulps; v_exp_f32
 * of each part. Within about 2 ulp of expf (the GPU tolerance of its callers). */
DEV_INLINE f32 dev_expf(f32 x) {
  f32 h = x * 1.44269502f;
  f32 l = __builtin_fmaf(x, 1.44269502f, -h) + x * 1.92596299e-8f; /* log2(e) - f32(log2(e)) */
  return __builtin_amdgcn_exp2f(h) * __builtin_amdgcn_exp2f(l);
}
#else
DEV_INLINE f32 dev_exp2(f32 x) { return exp2f(x); }
DEV_INLINE f32 dev_log2(f32 x) { return log2f(x); }
DEV_INLINE f32 dev_rcp(f32 x) { return 1.0f / x; }
DEV_INLINE f32 dev_rsq(f32 x) { return 1.0f / sqrtf(x); }
DEV_INLINE f32 dev_sqrt(f32 x) { return sqrtf(x); }
DEV_INLINE f32 dev_expf(f32 x) { return expf(x); }
#endif
DEV_INLINE f32 dev_fma(f32 a, f32 b, f32 c) { return __builtin_fmaf(a, b, c); }

/* ---------------------------------------------------------------- number conversions */

/* Software number formats (bf16, fp8, fp4, E8M0, the MX rules) are in formats.h, written once
 * for the GPU, the agent and the library; below are the hardware's own conversions. */

/* v_cvt_pk_fp8_f32: a and b to e4m3 (OCP on gfx950, FNUZ on gfx942), round to nearest
 * even, into the low (hi = 0) or high (hi = 1) 16 bits of old. Inputs beyond the format's
 * largest value are outside the contract: callers clamp first (spec/mono.md §2.0). */
#if defined(DEV_GPU)
#define dev_cvt_pk_fp8_f32(a, b, old, hi) ((u32)__builtin_amdgcn_cvt_pk_fp8_f32(a, b, (i32)(old), (hi) != 0))
#define dev_cvt_pk_bf8_f32(a, b, old, hi) ((u32)__builtin_amdgcn_cvt_pk_bf8_f32(a, b, (i32)(old), (hi) != 0))
/* byte `sel` (0..3) of w, decoded */
#define dev_cvt_f32_fp8(w, sel) __builtin_amdgcn_cvt_f32_fp8((i32)(w), sel)
#define dev_cvt_f32_bf8(w, sel) __builtin_amdgcn_cvt_f32_bf8((i32)(w), sel)
#else
#define dev_cvt_pk_fp8_f32(a, b, old, hi) dev_host->cvt(DEV_CVT_PK_FP8_F32, a, b, old, hi)
#define dev_cvt_pk_bf8_f32(a, b, old, hi) dev_host->cvt(DEV_CVT_PK_BF8_F32, a, b, old, hi)
#define dev_cvt_f32_fp8(w, sel) dev_f32_bits(dev_host->cvt(DEV_CVT_F32_FP8, 0, 0, w, sel))
#define dev_cvt_f32_bf8(w, sel) dev_f32_bits(dev_host->cvt(DEV_CVT_F32_BF8, 0, 0, w, sel))
#endif

/* ---------------------------------------------------------------- matrix instructions */

/* Operands are per lane, in the register layouts AMD documents (the CDNA3 ISA and the
 * Matrix Instruction Calculator; the CDNA4 ISA for gfx950). The software agent implements
 * the same layouts and its tests check them against those tables (hsa/sim/). */
#if defined(DEV_GPU)
typedef short i16x4_gpu __attribute__((ext_vector_type(4)));
DEV_INLINE f32x4 dev_mfma_f32_16x16x4_f32(f32 a, f32 b, f32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x4f32(a, b, c, 0, 0, 0);
}
DEV_INLINE f32x4 dev_mfma_f32_16x16x16_bf16(u16x4 a, u16x4 b, f32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(i16x4_gpu, a),
                                                   __builtin_bit_cast(i16x4_gpu, b), c, 0, 0, 0);
}
DEV_INLINE f32x16 dev_mfma_f32_32x32x8_bf16(u16x4 a, u16x4 b, f32x16 c) {
  return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(__builtin_bit_cast(i16x4_gpu, a),
                                                  __builtin_bit_cast(i16x4_gpu, b), c, 0, 0, 0);
}
DEV_INLINE f32x4 dev_mfma_f32_16x16x32_fp8(u64 a, u64 b, f32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8((i64)a, (i64)b, c, 0, 0, 0);
}
DEV_INLINE f32x16 dev_mfma_f32_32x32x16_fp8(u64 a, u64 b, f32x16 c) {
  return __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8((i64)a, (i64)b, c, 0, 0, 0);
}
#if DEV_ARCH_GFX950
typedef __bf16 bf16x8_gpu __attribute__((ext_vector_type(8)));
DEV_INLINE f32x4 dev_mfma_f32_16x16x32_bf16(u16x8 a, u16x8 b, f32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x32_bf16(__builtin_bit_cast(bf16x8_gpu, a),
                                                 __builtin_bit_cast(bf16x8_gpu, b), c, 0, 0, 0);
}
/* The scaled f8f6f4 forms: fmt_a / fmt_b are DEV_FMT_* constants; scale_a / scale_b
 * hold E8M0 codes, byte opsel of each register (constants too). */
#define dev_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, fmt_a, fmt_b, opsel_a, scale_a, opsel_b, scale_b) \
  __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, fmt_a, fmt_b, opsel_a, (i32)(scale_a),    \
                                                   opsel_b, (i32)(scale_b))
#define dev_mfma_scale_f32_32x32x64_f8f6f4(a, b, c, fmt_a, fmt_b, opsel_a, scale_a, opsel_b, scale_b) \
  __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a, b, c, fmt_a, fmt_b, opsel_a, (i32)(scale_a),     \
                                                  opsel_b, (i32)(scale_b))
#endif
#else /* host */
DEV_INLINE void dev_mfma_lane_clear(struct dev_mfma_lane *l) { __builtin_memset(l, 0, sizeof(*l)); }
DEV_INLINE f32x4 dev_mfma_run4(enum dev_mfma_op op, struct dev_mfma_lane *l, f32x4 c) {
  f32 d[16];
  for (int i = 0; i < 4; i++) l->c[i] = c[i];
  dev_host->mfma(op, l, d);
  f32x4 r = {d[0], d[1], d[2], d[3]};
  return r;
}
DEV_INLINE f32x16 dev_mfma_run16(enum dev_mfma_op op, struct dev_mfma_lane *l, f32x16 c) {
  f32 d[16];
  for (int i = 0; i < 16; i++) l->c[i] = c[i];
  dev_host->mfma(op, l, d);
  f32x16 r;
  for (int i = 0; i < 16; i++) r[i] = d[i];
  return r;
}
DEV_INLINE f32x4 dev_mfma_f32_16x16x4_f32(f32 a, f32 b, f32x4 c) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  l.a[0] = dev_bits_f32(a);
  l.b[0] = dev_bits_f32(b);
  return dev_mfma_run4(DEV_MFMA_F32_16X16X4_F32, &l, c);
}
DEV_INLINE f32x4 dev_mfma_f32_16x16x16_bf16(u16x4 a, u16x4 b, f32x4 c) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  __builtin_memcpy(l.a, &a, 8);
  __builtin_memcpy(l.b, &b, 8);
  return dev_mfma_run4(DEV_MFMA_F32_16X16X16_BF16, &l, c);
}
DEV_INLINE f32x16 dev_mfma_f32_32x32x8_bf16(u16x4 a, u16x4 b, f32x16 c) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  __builtin_memcpy(l.a, &a, 8);
  __builtin_memcpy(l.b, &b, 8);
  return dev_mfma_run16(DEV_MFMA_F32_32X32X8_BF16, &l, c);
}
DEV_INLINE f32x4 dev_mfma_f32_16x16x32_fp8(u64 a, u64 b, f32x4 c) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  __builtin_memcpy(l.a, &a, 8);
  __builtin_memcpy(l.b, &b, 8);
  return dev_mfma_run4(DEV_MFMA_F32_16X16X32_FP8, &l, c);
}
DEV_INLINE f32x16 dev_mfma_f32_32x32x16_fp8(u64 a, u64 b, f32x16 c) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  __builtin_memcpy(l.a, &a, 8);
  __builtin_memcpy(l.b, &b, 8);
  return dev_mfma_run16(DEV_MFMA_F32_32X32X16_FP8, &l, c);
}
#if DEV_ARCH_GFX950
DEV_INLINE f32x4 dev_mfma_f32_16x16x32_bf16(u16x8 a, u16x8 b, f32x4 c) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  __builtin_memcpy(l.a, &a, 16);
  __builtin_memcpy(l.b, &b, 16);
  return dev_mfma_run4(DEV_MFMA_F32_16X16X32_BF16, &l, c);
}
DEV_INLINE f32x4 dev_mfma_scale_16x16x128_h(i32x8 a, i32x8 b, f32x4 c, u32 fa, u32 fb, u32 oa,
                                            u32 sa, u32 ob, u32 sb) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  __builtin_memcpy(l.a, &a, 32);
  __builtin_memcpy(l.b, &b, 32);
  l.fmt_a = fa, l.fmt_b = fb, l.opsel_a = oa, l.scale_a = sa, l.opsel_b = ob, l.scale_b = sb;
  return dev_mfma_run4(DEV_MFMA_SCALE_F32_16X16X128_F8F6F4, &l, c);
}
DEV_INLINE f32x16 dev_mfma_scale_32x32x64_h(i32x8 a, i32x8 b, f32x16 c, u32 fa, u32 fb, u32 oa,
                                            u32 sa, u32 ob, u32 sb) {
  struct dev_mfma_lane l;
  dev_mfma_lane_clear(&l);
  __builtin_memcpy(l.a, &a, 32);
  __builtin_memcpy(l.b, &b, 32);
  l.fmt_a = fa, l.fmt_b = fb, l.opsel_a = oa, l.scale_a = sa, l.opsel_b = ob, l.scale_b = sb;
  return dev_mfma_run16(DEV_MFMA_SCALE_F32_32X32X64_F8F6F4, &l, c);
}
#define dev_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, fmt_a, fmt_b, opsel_a, scale_a, opsel_b, scale_b) \
  dev_mfma_scale_16x16x128_h(a, b, c, fmt_a, fmt_b, opsel_a, scale_a, opsel_b, scale_b)
#define dev_mfma_scale_f32_32x32x64_f8f6f4(a, b, c, fmt_a, fmt_b, opsel_a, scale_a, opsel_b, scale_b) \
  dev_mfma_scale_32x32x64_h(a, b, c, fmt_a, fmt_b, opsel_a, scale_a, opsel_b, scale_b)
#endif
#endif

#if defined(DEV_GPU) /* the host side has these from dev_host.h */
#define DEV_FMT_FP8 0
#define DEV_FMT_BF8 1
#define DEV_FMT_FP6 2
#define DEV_FMT_BF6 3
#define DEV_FMT_FP4 4
#endif

#endif /* HM_DEV_H */
