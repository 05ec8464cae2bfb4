/* tests/device/memseq.cl: one tiny kernel per memory-ordering primitive of device/, compiled for
 * each GPU target only to be disassembled: test_memseq.c checks each kernel's instruction sequence.
 *
 * Why: the software agent runs these primitives with its own barrier and scopes, so it cannot see
 * whether the GPU build carries the cache write-backs, invalidates and waits AMDGPUUsage's memory
 * model prescribes. Each kernel here isolates one primitive between plain accesses whose order
 * against it the prescribed sequence constrains; the expected sequences and where they come from
 * are in test_memseq.c and docs/memory-model-isa.md.
 *
 * Built twice: as is, and with -DMEMSEQ_BROKEN, where the kernels marked BROKEN below drop or
 * narrow one fence, wait or scope each (same names, same shapes). The test demands that the
 * checker rejects every one of those, so a checker that cannot fail would fail the test.
 */
#include "ar.h"
#include "dev.h"
#include "epoch.h"
#include "handoff.h"

/* every kernel takes the same arguments: a few device addresses and values */
struct ms_args {
  u64 a; /* the word the primitive orders (a flag, a pair slot, the epoch buffer) */
  u64 d; /* data the primitive publishes or consumes */
  u64 o; /* out: results, so no load is dead */
  u32 v, n;
};
struct ms_lds {
  u32 w[64];
};

#define MS_A ((__global u32 *)args.a)
#define MS_A64 ((__global u64 *)args.a)
#define MS_D ((__global u32 *)args.d)
#define MS_O ((__global u32 *)args.o)

/* ---------------------------------------------------------------- dev_atomic_store / load */

/* A store is preceded by a plain data store, so a release has something outstanding to wait for
 * (with nothing outstanding the compiler may drop the wait: see ms_canary_wbl2). A load is
 * followed by a plain load of data, which an acquire must not let run ahead of it. */
#define MS_STORE(name, order, scope)                                                        \
  DEV_KERNEL(name, struct ms_args, 64) {                                                    \
    MS_D[0] = args.n;                                                                       \
    dev_atomic_store_u32(MS_A, args.v, order, scope);                                       \
  }
#define MS_LOAD(name, order, scope)                                                         \
  DEV_KERNEL(name, struct ms_args, 64) {                                                    \
    u32 f = dev_atomic_load_u32(MS_A, order, scope);                                        \
    MS_O[0] = f + MS_D[1];                                                                  \
  }
/* read-modify-write: data store before, data load after (both sides of an acq_rel) */
#define MS_RMW(name, order, scope)                                                          \
  DEV_KERNEL(name, struct ms_args, 64) {                                                    \
    MS_D[0] = args.n;                                                                       \
    u32 f = dev_atomic_add_u32(MS_A, args.v, order, scope);                                 \
    MS_O[0] = f + MS_D[1];                                                                  \
  }

MS_STORE(ms_st_rlx_wg, DEV_RELAXED, DEV_SCOPE_WG)
MS_STORE(ms_st_rlx_agent, DEV_RELAXED, DEV_SCOPE_AGENT)
MS_STORE(ms_st_rlx_sys, DEV_RELAXED, DEV_SCOPE_SYSTEM)
MS_STORE(ms_st_rel_wg, DEV_RELEASE, DEV_SCOPE_WG)
#if defined(MEMSEQ_BROKEN) /* BROKEN: the release relaxed (no write-back, no wait) */
MS_STORE(ms_st_rel_agent, DEV_RELAXED, DEV_SCOPE_AGENT)
#else
MS_STORE(ms_st_rel_agent, DEV_RELEASE, DEV_SCOPE_AGENT)
#endif
#if defined(MEMSEQ_BROKEN) /* BROKEN: a system release narrowed to agent scope */
MS_STORE(ms_st_rel_sys, DEV_RELEASE, DEV_SCOPE_AGENT)
#else
MS_STORE(ms_st_rel_sys, DEV_RELEASE, DEV_SCOPE_SYSTEM)
#endif
MS_STORE(ms_st_sc_wg, DEV_SEQ_CST, DEV_SCOPE_WG)
MS_STORE(ms_st_sc_agent, DEV_SEQ_CST, DEV_SCOPE_AGENT)
MS_STORE(ms_st_sc_sys, DEV_SEQ_CST, DEV_SCOPE_SYSTEM)

MS_LOAD(ms_ld_rlx_wg, DEV_RELAXED, DEV_SCOPE_WG)
MS_LOAD(ms_ld_rlx_agent, DEV_RELAXED, DEV_SCOPE_AGENT)
MS_LOAD(ms_ld_rlx_sys, DEV_RELAXED, DEV_SCOPE_SYSTEM)
MS_LOAD(ms_ld_acq_wg, DEV_ACQUIRE, DEV_SCOPE_WG)
#if defined(MEMSEQ_BROKEN) /* BROKEN: the acquire relaxed (no wait, no invalidate) */
MS_LOAD(ms_ld_acq_agent, DEV_RELAXED, DEV_SCOPE_AGENT)
#else
MS_LOAD(ms_ld_acq_agent, DEV_ACQUIRE, DEV_SCOPE_AGENT)
#endif
MS_LOAD(ms_ld_acq_sys, DEV_ACQUIRE, DEV_SCOPE_SYSTEM)
MS_LOAD(ms_ld_sc_wg, DEV_SEQ_CST, DEV_SCOPE_WG)
MS_LOAD(ms_ld_sc_agent, DEV_SEQ_CST, DEV_SCOPE_AGENT)
MS_LOAD(ms_ld_sc_sys, DEV_SEQ_CST, DEV_SCOPE_SYSTEM)

MS_RMW(ms_add_rlx_agent, DEV_RELAXED, DEV_SCOPE_AGENT)
MS_RMW(ms_add_rlx_sys, DEV_RELAXED, DEV_SCOPE_SYSTEM)
MS_RMW(ms_add_acq_agent, DEV_ACQUIRE, DEV_SCOPE_AGENT)
MS_RMW(ms_add_acq_sys, DEV_ACQUIRE, DEV_SCOPE_SYSTEM)
MS_RMW(ms_add_rel_agent, DEV_RELEASE, DEV_SCOPE_AGENT)
MS_RMW(ms_add_rel_sys, DEV_RELEASE, DEV_SCOPE_SYSTEM)
MS_RMW(ms_add_ar_agent, DEV_ACQ_REL, DEV_SCOPE_AGENT)
MS_RMW(ms_add_ar_sys, DEV_ACQ_REL, DEV_SCOPE_SYSTEM)

/* compare-and-swap, as ar_fail and dev_persist_arrive use it (relaxed, system scope, old value
 * returned) */
DEV_KERNEL(ms_cas_rlx_sys, struct ms_args, 64) {
  MS_O[0] = dev_atomic_cas_u32(MS_A, 0u, args.v, DEV_RELAXED, DEV_SCOPE_SYSTEM);
}

/* ---------------------------------------------------------------- dev_fence */

/* release: data store, fence, relaxed flag store at the fence's scope; acquire: relaxed flag load
 * at the fence's scope, fence, data load; acq_rel and seq_cst: both around one fence. */
#define MS_FENCE_REL(name, order, scope)                                                    \
  DEV_KERNEL(name, struct ms_args, 64) {                                                    \
    MS_D[0] = args.n;                                                                       \
    dev_fence(order, scope);                                                                \
    dev_atomic_store_u32(MS_A, args.v, DEV_RELAXED, scope);                                 \
  }
#define MS_FENCE_ACQ(name, order, scope)                                                    \
  DEV_KERNEL(name, struct ms_args, 64) {                                                    \
    u32 f = dev_atomic_load_u32(MS_A, DEV_RELAXED, scope);                                  \
    dev_fence(order, scope);                                                                \
    MS_O[0] = f + MS_D[1];                                                                  \
  }
#define MS_FENCE_BOTH(name, order, scope)                                                   \
  DEV_KERNEL(name, struct ms_args, 64) {                                                    \
    MS_D[0] = args.n;                                                                       \
    u32 f = dev_atomic_load_u32(MS_A, DEV_RELAXED, scope);                                  \
    dev_fence(order, scope);                                                                \
    MS_O[0] = f + MS_D[1];                                                                  \
    dev_atomic_store_u32(MS_A + 1, args.v, DEV_RELAXED, scope);                             \
  }

MS_FENCE_REL(ms_fence_rel_wg, DEV_RELEASE, DEV_SCOPE_WG)
#if defined(MEMSEQ_BROKEN) /* BROKEN: the fence left out */
DEV_KERNEL(ms_fence_rel_agent, struct ms_args, 64) {
  MS_D[0] = args.n;
  dev_atomic_store_u32(MS_A, args.v, DEV_RELAXED, DEV_SCOPE_AGENT);
}
#else
MS_FENCE_REL(ms_fence_rel_agent, DEV_RELEASE, DEV_SCOPE_AGENT)
#endif
MS_FENCE_REL(ms_fence_rel_sys, DEV_RELEASE, DEV_SCOPE_SYSTEM)
MS_FENCE_ACQ(ms_fence_acq_wg, DEV_ACQUIRE, DEV_SCOPE_WG)
MS_FENCE_ACQ(ms_fence_acq_agent, DEV_ACQUIRE, DEV_SCOPE_AGENT)
#if defined(MEMSEQ_BROKEN) /* BROKEN: a system acquire narrowed to agent scope (the load keeps
                              system scope, the invalidate does not) */
DEV_KERNEL(ms_fence_acq_sys, struct ms_args, 64) {
  u32 f = dev_atomic_load_u32(MS_A, DEV_RELAXED, DEV_SCOPE_SYSTEM);
  dev_fence(DEV_ACQUIRE, DEV_SCOPE_AGENT);
  MS_O[0] = f + MS_D[1];
}
#else
MS_FENCE_ACQ(ms_fence_acq_sys, DEV_ACQUIRE, DEV_SCOPE_SYSTEM)
#endif
MS_FENCE_BOTH(ms_fence_ar_wg, DEV_ACQ_REL, DEV_SCOPE_WG)
MS_FENCE_BOTH(ms_fence_ar_agent, DEV_ACQ_REL, DEV_SCOPE_AGENT)
MS_FENCE_BOTH(ms_fence_ar_sys, DEV_ACQ_REL, DEV_SCOPE_SYSTEM)
MS_FENCE_BOTH(ms_fence_sc_wg, DEV_SEQ_CST, DEV_SCOPE_WG)
MS_FENCE_BOTH(ms_fence_sc_agent, DEV_SEQ_CST, DEV_SCOPE_AGENT)
MS_FENCE_BOTH(ms_fence_sc_sys, DEV_SEQ_CST, DEV_SCOPE_SYSTEM)

/* A release fence the compiler did not place: a write-back written by hand with no wait after it
 * although a data store is outstanding. Only the broken build has it; the whole-kernel rules (not
 * only this kernel's sequence) must reject it. */
#if defined(MEMSEQ_BROKEN) /* BROKEN: write-back without the wait */
DEV_KERNEL(ms_asm_release, struct ms_args, 64) {
  MS_D[0] = args.n;
  __asm__ volatile("buffer_wbl2 sc1" ::: "memory");
  dev_atomic_store_u32(MS_A, args.v, DEV_RELAXED, DEV_SCOPE_AGENT);
}
#else
MS_FENCE_REL(ms_asm_release, DEV_RELEASE, DEV_SCOPE_AGENT)
#endif

/* ---------------------------------------------------------------- the CTA barrier, the store drain */

/* An LDS word written before the barrier and another wave's word read after it. The written value
 * comes from a global load, so every scalar load has long completed when the LDS store issues:
 * the only wait on the LDS counter before the barrier is then dev_barrier's own. */
DEV_KERNEL(ms_barrier, struct ms_args, 256) {
  DEV_LDS(struct ms_lds, lds);
  u32 l = dev_lid();
  lds->w[l & 63u] = MS_D[l];
#if defined(MEMSEQ_BROKEN) /* BROKEN: the bare s_barrier, without dev_barrier's fences */
  __builtin_amdgcn_s_barrier();
#else
  dev_barrier();
#endif
  MS_O[l] = lds->w[(l + 1u) & 63u];
}

DEV_KERNEL(ms_wait_stores, struct ms_args, 64) {
  MS_D[0] = args.n;
#if !defined(MEMSEQ_BROKEN) /* BROKEN: the drain left out */
  dev_wait_stores();
#endif
  MS_A[0] = args.v;
}

/* ---------------------------------------------------------------- dev_st / dev_ld, dev_buf, each policy */

#define MS_ST(name, T, cp)                                                                  \
  DEV_KERNEL(name, struct ms_args, 64) { dev_st_##T((__global T *)args.a, (T)args.v, cp); }
/* a load per lane: from one wave-uniform address the compiler may use a scalar load instead (it
 * does when it proves the word unchanged in the dispatch), which takes no cache policy; every bit
 * used, or a plain 8-byte load narrows to the half that is */
#define MS_LD(name, T, cp)                                                                  \
  DEV_KERNEL(name, struct ms_args, 64) {                                                    \
    u64 x = dev_ld_##T((__global const T *)args.a + dev_lid(), cp);                         \
    MS_O[dev_lid()] = (u32)x ^ (u32)(x >> 32);                                              \
  }
#define MS_BUF_ST(name, cp)                                                                 \
  DEV_KERNEL(name, struct ms_args, 64) { dev_buf_st_u32(dev_buf(MS_A, 64u), 4u * dev_lid(), args.v, cp); }
#define MS_BUF_LD(name, cp)                                                                 \
  DEV_KERNEL(name, struct ms_args, 64) { MS_O[dev_lid()] = dev_buf_ld_u32(dev_buf(MS_A, 64u), 4u * dev_lid(), cp); }

MS_ST(ms_st32_plain, u32, DEV_CP_PLAIN)
MS_ST(ms_st32_nt, u32, DEV_CP_NT)
MS_ST(ms_st32_dev, u32, DEV_CP_DEV)
MS_ST(ms_st32_sys, u32, DEV_CP_SYS)
MS_ST(ms_st64_plain, u64, DEV_CP_PLAIN)
MS_ST(ms_st64_nt, u64, DEV_CP_NT)
MS_ST(ms_st64_dev, u64, DEV_CP_DEV)
#if defined(MEMSEQ_BROKEN) /* BROKEN: a system-scope store (ar_push's) issued at device scope */
MS_ST(ms_st64_sys, u64, DEV_CP_DEV)
#else
MS_ST(ms_st64_sys, u64, DEV_CP_SYS)
#endif
MS_LD(ms_ld32_plain, u32, DEV_CP_PLAIN)
MS_LD(ms_ld32_nt, u32, DEV_CP_NT)
MS_LD(ms_ld32_dev, u32, DEV_CP_DEV)
MS_LD(ms_ld32_sys, u32, DEV_CP_SYS)
MS_LD(ms_ld64_plain, u64, DEV_CP_PLAIN)
MS_LD(ms_ld64_nt, u64, DEV_CP_NT)
MS_LD(ms_ld64_dev, u64, DEV_CP_DEV)
MS_LD(ms_ld64_sys, u64, DEV_CP_SYS)
MS_BUF_ST(ms_bufst_plain, DEV_CP_PLAIN)
MS_BUF_ST(ms_bufst_nt, DEV_CP_NT)
MS_BUF_ST(ms_bufst_dev, DEV_CP_DEV)
MS_BUF_ST(ms_bufst_sys, DEV_CP_SYS)
MS_BUF_LD(ms_bufld_plain, DEV_CP_PLAIN)
MS_BUF_LD(ms_bufld_nt, DEV_CP_NT)
MS_BUF_LD(ms_bufld_dev, DEV_CP_DEV)
MS_BUF_LD(ms_bufld_sys, DEV_CP_SYS)

/* ---------------------------------------------------------------- hand-offs (device/handoff.h) */

DEV_KERNEL(ms_pair_put, struct ms_args, 64) { ho_pair_put(MS_A64, args.v, args.n); }
DEV_KERNEL(ms_pair_get, struct ms_args, 64) { MS_O[0] = ho_pair_get(MS_A64, args.n); }
DEV_KERNEL(ms_get_batch, struct ms_args, 64) {
  u32 out[HO_GET_BATCH];
  ho_get_batch(args.n, MS_A64, dev_lid(), 64u, HO_GET_BATCH, out);
#pragma unroll
  for (u32 i = 0; i < HO_GET_BATCH; i++) MS_O[i * 64u + dev_lid()] = out[i];
}

/* Data stored by every work-item at device scope (as the stages do), then the flag. */
DEV_KERNEL(ms_flag_raise, struct ms_args, 256) {
  dev_st_u32(&MS_D[dev_lid()], args.v + dev_lid(), DEV_CP_DEV);
#if defined(MEMSEQ_BROKEN) /* BROKEN: ho_flag_raise without its drain: other waves' stores may still
                              be in flight when the flag's release writes back */
  dev_barrier();
  if (dev_lid() == 0) dev_atomic_store_u32(MS_A, args.n, DEV_RELEASE, DEV_SCOPE_AGENT);
#else
  ho_flag_raise(MS_A, args.n);
#endif
}

/* The flags, then the data they publish. */
DEV_KERNEL(ms_flags_wait, struct ms_args, 256) {
  ho_flags_wait(MS_A, 1u, args.n, args.v);
  MS_O[dev_lid()] = dev_ld_u32(&MS_D[dev_lid()], DEV_CP_DEV);
}

/* ---------------------------------------------------------------- the epoch (device/epoch.h) */

DEV_KERNEL(ms_epoch_begin, struct ms_args, 256) {
  DEV_LDS(struct ms_lds, lds);
  u32 e = dev_epoch_begin(MS_A, &lds->w[0], 1u);
  MS_O[dev_lid()] = e + MS_D[dev_lid()];
}
/* The data a launch wrote (plain stores), then the end that publishes e + 1 over it. */
DEV_KERNEL(ms_epoch_end, struct ms_args, 256) {
  MS_D[dev_cta() * 256u + dev_lid()] = args.v;
  dev_epoch_end(MS_A, args.n);
}

/* ---------------------------------------------------------------- the all-reduce (device/ar.h) */

DEV_KERNEL(ms_ar_push, struct ms_args, 256) {
  struct hm_ar_link link = *(__global const struct hm_ar_link *)args.a;
  struct ar_view v;
  ar_view_init(&v, link, 0u, 1u, args.n, args.v, 0u, 0u, 1u);
  ar_push(&v, dev_lid(), MS_D[dev_lid()]);
}
DEV_KERNEL(ms_ar_reduce, struct ms_args, 256) {
  struct hm_ar_link link = *(__global const struct hm_ar_link *)args.a;
  struct ar_view v;
  ar_view_init(&v, link, 0u, 1u, args.n, args.v, 0u, dev_realtime() + link.deadline_ticks, 1u);
  u32 out[AR_MAX_BATCH];
  if (ar_reduce(&v, dev_lid(), 256u, 1u, out) == AR_OK) MS_O[dev_lid()] = out[0];
}

/* ---------------------------------------------------------------- the persistent handshake */

DEV_KERNEL(ms_persist_arrive, struct ms_args, 256) {
  DEV_LDS(struct ms_lds, lds);
  if (dev_persist_arrive((__global struct hm_dev_persist *)args.a, &lds->w[0])) MS_O[dev_lid()] = MS_D[dev_lid()];
}

/* ---------------------------------------------------------------- the canary */

/* An agent release with nothing outstanding before it. AMDGPUUsage prescribes a wait between the
 * write-back and the store; LLVM before llvm/llvm-project#178316 did not count buffer_wbl2 as
 * outstanding and dropped that wait. test_memseq.c reads this kernel to tell which compiler it
 * has, and holds a compiler that emits the wait here to emitting it everywhere. */
DEV_KERNEL(ms_canary_wbl2, struct ms_args, 64) { dev_atomic_store_u32(MS_A, args.v, DEV_RELEASE, DEV_SCOPE_AGENT); }
