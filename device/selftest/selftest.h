/* device/selftest/selftest.h: argument structs of the dialect's self-test kernels, one per
 * primitive family; shared by the kernels and the runtime / agent tests that launch them. */
#ifndef HM_SELFTEST_H
#define HM_SELFTEST_H

#include "../dev_types.h"
#include "../formats.h"
#include "../kernels/ar_args.h"

/* st_ids: out[8*global_id + k] = lid, cta, ncta, cta_size, lane, wave, nwaves, global id */
struct st_ids_args { u64 out; };
DEV_ARGS_CHECK(st_ids_args, 8);

/* st_barrier: `rounds` LDS exchanges between barriers; out[global id] = checksum */
struct st_barrier_args { u64 out; u32 rounds; u32 pad; };
DEV_ARGS_CHECK(st_barrier_args, 16);
#define ST_BARRIER_LDS_WORDS 1024

/* st_wave: per work-item, from in[global id] (u32): out[8*gid + k] = shfl(lane+1),
 * shfl_xor 5, ballot(v&1) low and high words, readfirstlane, f32 sum 32->1, f32 sum 1->32
 * (in read as f32), max u32 */
struct st_wave_args { u64 in; u64 out; };
DEV_ARGS_CHECK(st_wave_args, 16);

/* st_atomic: every work-item hits counters[0..9]: see st_atomic.cl for each slot */
struct st_atomic_args { u64 counters; };
DEV_ARGS_CHECK(st_atomic_args, 8);

/* st_handoff: CTA 0 produces n words into data and raises flag to `tag`; CTA 1 waits (or
 * not) and copies data to out. The mode bits choose which parts of the protocol run, so
 * tests can show that dropping one fails on the software agent. */
#define ST_HANDOFF_FENCE 1u    /* producer: wait for stores, barrier, release fence */
#define ST_HANDOFF_WAIT 2u     /* consumer: poll the flag before reading */
#define ST_HANDOFF_ACQUIRE 4u  /* consumer: acquire fence after the poll */
#define ST_HANDOFF_PREREAD 8u  /* consumer: read the data once before polling (warm cache); the
                                  producer waits for that (ack == tag + 1) before producing */
#define ST_HANDOFF_DEVSTORE 16u /* producer: device-scope (SC1) data stores, else plain */
#define ST_HANDOFF_BARRIER 32u /* producer: a CTA barrier before the flag (no wait, no fence) */
/* The producer stays until the consumer acknowledges (ack == tag) or `ticks` pass, so its
 * unpublished stores cannot land early by the producer simply ending. */
struct st_handoff_args { u64 data; u64 flag; u64 out; u64 ack; u64 ticks; u32 n; u32 mode; u32 tag; u32 pad; };
DEV_ARGS_CHECK(st_handoff_args, 56);

/* st_count: lane 0 of every CTA adds 1 to counter[0] (dispatch-count tests) and, when ticket
 * is not 0, stores the value it got in ticket[cta] (the order CTAs started in) */
struct st_count_args { u64 counter; u64 ticket; };
DEV_ARGS_CHECK(st_count_args, 16);

/* st_trace: CTAs 0, 1 and 3 raise their flag (flags[32 cta] = tag); CTA 2 loads lines of `weights`
 * before, between and after its waits on them (st_trace.cl says which at what level), and stores a
 * sum of what it loaded in out[lid] */
struct st_trace_args { u64 weights; u64 flags; u64 out; u32 tag; u32 pad; };
DEV_ARGS_CHECK(st_trace_args, 32);

/* st_hold: every CTA (1024 work-items, so two fill a CU's wave slots) waits until flag != 0 or
 * `ticks` pass: a kernel that occupies CUs for as long as a test needs; `started` (0: none) counts
 * the CTAs that have begun to wait */
struct st_hold_args { u64 flag; u64 ticks; u64 started; };
DEV_ARGS_CHECK(st_hold_args, 24);

/* st_gridbar: a persistent kernel: the arrival handshake (persist: a struct hm_dev_persist), then a
 * grid barrier run `epochs` times. bar[0] = arrivals in the low 16 bits and a generation above
 * them (never reset); out[cta] counts the epochs each CTA saw complete. For the tests of failed
 * launches: verdict (0: none) gets each CTA's verdict (DEV_PERSIST_GO or _ABORT; 0 stays for a
 * CTA that never ran), and trap (0: none) makes CTA trap - 1 trap once it has its verdict. */
struct st_gridbar_args { u64 bar; u64 out; u64 persist; u64 verdict; u32 epochs; u32 trap; };
DEV_ARGS_CHECK(st_gridbar_args, 40);

/* st_mfma: one wave runs matrix instruction `op` (ST_MFMA_*) on per-lane registers:
 * a, b: 8 dwords a lane; c, d: 16 floats a lane; fmt_a is DEV_FMT_FP8 or DEV_FMT_FP4 for the
 * scaled forms (B is fp8), scale_a / scale_b their E8M0 codes. */
#define ST_MFMA_F32_16X16X4_F32 0
#define ST_MFMA_F32_16X16X16_BF16 1
#define ST_MFMA_F32_32X32X8_BF16 2
#define ST_MFMA_F32_16X16X32_FP8 3
#define ST_MFMA_F32_32X32X16_FP8 4
#define ST_MFMA_F32_16X16X32_BF16 5          /* gfx950 */
#define ST_MFMA_SCALE_F32_16X16X128_F8F6F4 6 /* gfx950 */
#define ST_MFMA_SCALE_F32_32X32X64_F8F6F4 7  /* gfx950 */
struct st_mfma_args { u64 a; u64 b; u64 c; u64 d; u32 op; u32 fmt_a; u32 fmt_b; u32 scale_a; u32 scale_b; u32 pad; };
DEV_ARGS_CHECK(st_mfma_args, 56);

/* st_cvt: out[i] = conversion `op` (ST_CVT_*) of in[i] for i < n */
#define ST_CVT_PK_FP8 0    /* in f32 pairs -> out u32 of two bytes (low word) */
#define ST_CVT_PK_BF8 1
#define ST_CVT_FP8_F32 2   /* in: u32 code (low byte) -> f32 bits */
#define ST_CVT_BF8_F32 3
#define ST_CVT_BF16 4      /* in f32 -> bf16 bits */
struct st_cvt_args { u64 in; u64 out; u32 n; u32 op; };
DEV_ARGS_CHECK(st_cvt_args, 24);

/* st_memory: copies in -> out (n words) through the policy `cp` (DEV_CP_*) by dev_ld/dev_st
 * (u32), and through dev_buf (u32x4) into out2; buffer reads past `n` words return 0. */
struct st_memory_args { u64 in; u64 out; u64 out2; u32 n; u32 cp; };
DEV_ARGS_CHECK(st_memory_args, 32);

/* st_poll: CTA 0 waits up to `ticks` (DEV_REALTIME_HZ) for flag == 1; out[0] = 1 if it saw
 * it, 2 if it timed out; out[1] = poll rounds */
struct st_poll_args { u64 flag; u64 out; u64 ticks; };
DEV_ARGS_CHECK(st_poll_args, 24);

/* st_pair: CTA 1 raises `ready` and reads the 8-byte `slot` (system scope) until its high word is
 * 1 (or 50 x ticks pass); CTA 0 stores (1, 1) there in one 8-byte system-scope store once ready is
 * up, then keeps running `ticks` with no scheduling point. out[0] = high word seen, out[1] = the
 * low word read with it (1 unless the pair tore). */
struct st_pair_args { u64 slot; u64 ready; u64 out; u64 ticks; };
DEV_ARGS_CHECK(st_pair_args, 32);

/* st_prim (and its variants st_prim_nodrain, _nobarrier, _split, _noacquire, each built with one
 * step of device/handoff.h's primitives removed through HO_SKIP): CTA 0 produces n words through a
 * primitive, CTA 1 consumes them into out[0..n). mode ST_PRIM_FLAG: every work-item of CTA 0 stores
 * with device scope, ho_flag_raise; CTA 1 reads data once into its cache (plain loads), acknowledges,
 * ho_flags_wait, then plain loads. ST_PRIM_PAIR: ho_pair_put of every word, ho_pair_get. After its
 * hand-off the producer stays running (st_prim.h says how) until the consumer is done
 * or `ticks` pass, so its stores land only as the model lets them. ST_PRIM_AFTER, a broken
 * hand-off in any variant: the flag raised first, the data stored after it, the producer then
 * polling (idle) until the consumer is done; the consumer as in ST_PRIM_FLAG. */
#define ST_PRIM_FLAG 0u
#define ST_PRIM_PAIR 1u
#define ST_PRIM_AFTER 2u
#define ST_PRIM_CTA 256u
struct st_prim_args { u64 data; u64 flag; u64 out; u64 ack; u64 ticks; u32 n; u32 mode; u32 tag; u32 pad; };
DEV_ARGS_CHECK(st_prim_args, 56);

/* st_epoch (and st_epoch_nohand, _nofree, _nomarks, _noendbar, each built with one step of
 * device/epoch.h removed through EP_SKIP): every CTA (ST_EPOCH_CTA work-items) runs
 * dev_epoch_begin with a mark, reuses the LDS word at once (a kernel's LDS struct may: the word is
 * free again on return), stores the e each work-item got in out[global id], and dev_epoch_end. The
 * host checks every e and the epoch's advance by one. */
#define ST_EPOCH_CTA 256u
struct st_epoch_args { u64 epoch; u64 out; };
DEV_ARGS_CHECK(st_epoch_args, 16);

/* st_persist (and st_persist_nobarrier, _nowait, _nocas, each built with one step of
 * dev_persist_arrive removed through DEV_PERSIST_SKIP): every CTA (ST_PERSIST_CTA work-items) runs
 * the arrival handshake and each work-item stores its verdict plus one in out[global id] (0: never
 * ran, 1: abort, 2: go; anything else is a verdict no work-item should get). */
#define ST_PERSIST_CTA 256u
struct st_persist_args { u64 persist; u64 out; };
DEV_ARGS_CHECK(st_persist_args, 16);

/* st_ar (and st_ar_split, _devscope, _plainpoll, each built with one step of device/ar.h removed
 * through AR_SKIP): the all-reduce's push / reduce hand-off between two ranks, one CTA
 * (ST_AR_CTA work-items) each, on a heap (link, and region of n pairs in half 0), with `tag`. Rank 0
 * reads source 1's inbox once with plain loads (its cache now holds the old pairs), raises ack[0]
 * to tag, pushes its pairs and reduces all n into out[0..n) (st_ar_value gives every rank's pair);
 * then ack[1] = tag. Rank 1 waits for ack[0], pushes its pairs and stays running in barrier rounds
 * (at whose scheduling points its pending stores land one at a time, newest or oldest first) until
 * ack[1] says rank 0 is done or `ticks` pass. */
#define ST_AR_CTA 256u
struct st_ar_args { struct hm_ar_link link; u64 ack; u64 out; u64 region; u64 ticks; u32 n; u32 tag; u32 pad[2]; };
DEV_ARGS_CHECK(st_ar_args, 96);
/* The bf16 pair rank r pushes for pair f with `tag`: small integers (exact in bf16, and so is any
 * sum of two of them), different from one tag to the next, so a stale value shows. */
static inline u32 st_ar_value(u32 rank, u32 f, u32 tag) {
  u32 lo = 1u + ((f + tag) & 63u) + 64u * rank, hi = 2u * lo;
  return (u32)fmt_bf16_from_f32((f32)lo) | (u32)fmt_bf16_from_f32((f32)hi) << 16;
}

#endif /* HM_SELFTEST_H */
