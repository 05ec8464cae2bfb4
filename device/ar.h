/* device/ar.h: the peer-memory all-reduce's device protocol (DESIGN §5, spec/mono.md §3.7), for the
 * standalone launch and as a stage of any kernel: one-shot pushes that carry their own readiness, bounded polls, rank-order sum.
 *
 * The protocol. Every rank holds an arena of uncached memory that every rank maps (collectives/,
 * layout in kernels/ar_args.h). For a step with tag T and parity h (device/epoch.h), each rank
 * pushes each bf16 pair of its contribution into slot [its rank][f] of half h of EVERY rank's
 * arena, itself included; then each rank polls its own half h for the tp sources of the pairs it
 * reduces until they are there, adds them in f32 in rank order 0, 1, ..., tp-1 (starting from rank
 * 0's value, no fma) and rounds to bf16. Every rank adds the same values in the same order, so every
 * rank holds bit-identical results. How a push says it is there is the heap's protocol (link.proto):
 *
 * AR_PROTO_PAIR: the push is one 8-byte system-scope store of (pair, T); the poll waits for the tag.
 *   The value travels with its tag in one single-copy-atomic store, at system scope (sc0 sc1:
 *   written through to the owner's memory, past every cache), and the poll is a system-scope load
 *   of the word itself: a reader that sees the tag sees the value. Nothing is cleared: the tag is
 *   unique to the step; half h is rewritten two epochs later (see "one step per launch" below), so
 *   a slot holds either this step's pair or one from two epochs ago with another tag. Half the
 *   bytes on the links are tags.
 *
 * AR_PROTO_WORD: the push is one 4-byte system-scope store of the pair alone; a slot holds AR_EMPTY
 *   until it arrives, and the poll waits for anything else. The data is its own flag, as in the
 *   "Lamport" one-shot all-reduces (spec/runtime.md §3.6), with a 4-byte store single-copy atomic:
 *   a reader sees AR_EMPTY or the whole pair. Two rules make it correct:
 *   - no push is AR_EMPTY: a pair that is (two negative NaNs with every payload bit set) is sent as
 *     AR_EMPTY_SUB, the same NaNs with the high one's quiet bit clear. The sum is unchanged to the
 *     bit: the f32 add quiets a signalling NaN, and fmt_bf16_from_f32 sets the quiet bit of any NaN;
 *   - the reducer empties every slot it read (a plain store of AR_EMPTY, after the loads that read
 *     it). The next push into that slot comes two epochs later, from a peer that has seen this
 *     rank's push of the next epoch, which this rank made after its launch ended; the launch's end
 *     is a system-scope release, so the empty word is in memory before that peer can even push.
 *     This is why every pushed pair must be reduced once a step on every rank (a one-shot
 *     all-reduce does: each rank reduces all of them), and why the halves start AR_EMPTY.
 *   The links carry half the pair protocol's bytes; the inbox reads halve too; the price is one
 *   local 4-byte store a slot read, which stays on the GPU.
 *
 * Bounded waiting: every poll round also reads this rank's abort word and the clock. Past the
 * deadline the work-item gives up: it records the cause (the rank it waited for in vain, at which
 * site) in its abort word, in the sticky status word, and in every peer's abort word, so the other
 * CTAs of the launch and the other ranks stop at their next poll instead of each waiting out its
 * own deadline. A set abort word ends every later wait at once, this launch or later ones: the
 * group stays failed until the host tears it down (kernels/ar_args.h has the encoding).
 *
 * How a kernel calls it:
 *  - Build one view per step with ar_view_init, from the same values in every work-item (wave
 *    uniform: the kernel's struct hm_ar_link argument, the epoch); the deadline is dev_realtime() at
 *    the launch's start plus link.deadline_ticks.
 *  - Pushes: every flat pair index f = t * pairs + p in [0, rows * pairs) must be pushed exactly
 *    once a step by each rank, by any work-item (ar_push). Nothing is needed before a push: the
 *    value is the store's own payload. (A value this work-item obtained from another CTA must of
 *    course have been read by that hand-off's rules first.) Nothing is needed after it either,
 *    but a work-item that pushed many pairs should dev_wait_stores() before it starts polling:
 *    on the GPU that costs about one store round trip, which the peers' pushes need to arrive
 *    anyway; on the software agent it lands the burst at once, where otherwise one pending store
 *    lands per scheduling point (a 48-row TP8 push is ~10^6 of them).
 *  - Reduces: every pair f in [0, rows * pairs) exactly once a step on every rank, by any work-item:
 *    ar_reduce for up to AR_MAX_BATCH pairs f, f + stride, ... a call, whose loads are all in flight
 *    in one poll round. (The pair protocol would allow reading again; the word protocol empties
 *    what it read, so a second read would wait for the next step's push.) `out` must be indexed
 *    with constants by the caller (an unrolled loop up to AR_MAX_BATCH), so it stays in registers.
 *    No wave operation is used: lanes may leave the poll at different times, and a lane that gets
 *    an error may simply stop reducing (the group is failed then, and stays so).
 *  - One step per launch: a rank's pushes of epoch e + 1 must come after all of its reads of
 *    epoch e (every CTA). Epochs advance at the end of a launch and launches of a queue run one
 *    after another (barrier bit), which gives exactly that; then rank r's pushes of epoch e + 2
 *    into half h need its epoch e + 1 reduce to have seen every peer's epoch e + 1 push, issued
 *    after that peer finished reading epoch e. Two regions (two all-reduces) in one launch are
 *    fine, in the same half and with the same tag.
 *  - rows, pairs and the sequence of steps must be the same on every rank (decided from
 *    TP-replicated data); the inbox region is laid out by the step's own rows, so a step may
 *    change rows without clearing anything (the word protocol leaves every slot it used empty).
 */
#ifndef HM_AR_H
#define HM_AR_H

#include "dev.h"
#include "kernels/ar_args.h"

/* Pairs a work-item reduces in one call: tp loads each, all in flight in one poll round (mono
 * polls batches of up to about 12 pairs). Two keeps the unrolled poll within a GEMV kernel's
 * register budget even at TP8 (16 loads, 32 VGPRs of values). */
#define AR_MAX_BATCH 2u

/* Sources a poll round holds: a kernel that runs at most TP 4 (the FFN launch and K2: ffn_bind.c,
 * spec/mono.md §5.1.3) defines it 4 before any include, and its poll holds half the registers;
 * ar_reduce refuses a larger group (AR_ERR_ARGS). */
#ifndef AR_POLL_TP
#define AR_POLL_TP AR_MAX_TP
#endif

/* Test seam: AR_SKIP, a mask of AR_SKIP_* bits, removes one step of the push / reduce hand-off. It
 * is 0 in every real kernel (the branches fold away); only device/selftest/st_ar_*.cl set it, so
 * the software agent's tests can prove its model fails an all-reduce missing that step
 * (tests/sim/test_weak_ar.c). */
#ifndef AR_SKIP
#define AR_SKIP 0u
#endif
#define AR_SKIP_PAIR 1u   /* ar_push: value and tag as two 4-byte stores */
#define AR_SKIP_SYSTEM 2u /* ar_push: device-scope stores (sc1), not system scope */
#define AR_SKIP_POLL 4u   /* ar_reduce: plain polls (through the L1), not system-scope loads */
#define AR_SKIP_CLEAR 8u  /* ar_reduce, AR_PROTO_WORD: the slots read are not emptied */

struct ar_view {
  __global const u64 *peers; /* u64 [tp]: every rank's arena as this rank maps it */
  __global u32 *abort;       /* this rank's abort word */
  __global u32 *status;      /* the launch's sticky status word */
  u64 mine;                  /* this rank's slot [rank][0], as an offset in any rank's arena */
  u64 own;                   /* this rank's own inbox (slot [0][0]) for the step */
  u64 src_bytes;             /* bytes of a source's share of an inbox: rows * pairs * 8 */
  u64 deadline;              /* dev_realtime() past which a wait gives up */
  u32 rank, tp, rows, pairs;
  u32 tag, where; /* tag: AR_EMPTY under AR_PROTO_WORD, which sends none (no SGPR for the protocol) */
};

/* The heap's protocol is AR_PROTO_WORD. */
DEV_INLINE u32 ar_word(const struct ar_view *v) { return v->tag == AR_EMPTY; }

/* The view of one step: link from the kernel's arguments (tp <= AR_MAX_TP); region: the inboxes'
 * byte offset in a half; rows x pairs: the step's shape; tag and parity from the epoch
 * (device/epoch.h); deadline: absolute dev_realtime(); where: a number of the caller's choosing
 * (below 0xffff) that the status reports, to tell which all-reduce of a launch failed. */
DEV_INLINE void ar_view_init(struct ar_view *v, struct hm_ar_link link, u64 region, u32 rows, u32 pairs, u32 tag,
                             u32 parity, u64 deadline, u32 where) {
  u32 rank = link.rank, tp = link.tp;
  v->peers = (__global const u64 *)link.peers;
  v->status = (__global u32 *)link.status;
  v->rank = rank, v->tp = tp, v->rows = rows, v->pairs = pairs;
  v->tag = tag, v->where = where, v->deadline = deadline;
  v->tag = link.proto == AR_PROTO_WORD ? AR_EMPTY : tag;
  v->src_bytes = (u64)rows * pairs * AR_SLOT_BYTES;
  u64 mine = v->peers[rank];
  v->abort = (__global u32 *)(mine + AR_ABORT_OFF);
  u64 inbox = AR_CTRL_BYTES + (u64)parity * link.half_bytes + region;
  v->own = mine + inbox;
  v->mine = inbox + (u64)rank * v->src_bytes;
}

/* Slot [s][f] of this rank's inbox, as a byte offset from v->own: 32 bits, as an inbox is at most
 * AR_MAX_TP x 48 rows x 2560 pairs x 8 bytes (8 MB); one 64-bit base and 32-bit offsets keep the
 * poll's addresses in few registers (a 64-bit address a slot spilled gfx942's K2 an SGPR). */
DEV_INLINE u32 ar_inbox_off(const struct ar_view *v, u32 s, u32 f) {
  return s * (u32)v->src_bytes + f * AR_SLOT_BYTES;
}

/* The abort word (0: healthy). */
DEV_INLINE u32 ar_aborted(const struct ar_view *v) {
  return dev_atomic_load_u32(v->abort, DEV_RELAXED, DEV_SCOPE_SYSTEM);
}

/* Record a code in the status word; the first one stays. */
DEV_INLINE void ar_note(const struct ar_view *v, u32 code) {
  dev_atomic_cas_u32(v->status, 0u, code, DEV_RELAXED, DEV_SCOPE_SYSTEM);
}

/* Give up: set this rank's abort word (the launch's other CTAs stop), the status word (the host
 * reads it) and every peer's abort word (the other ranks stop). Each word keeps its first code,
 * and the status takes the abort word's, so it names the root cause. */
DEV_INLINE void ar_fail(const struct ar_view *v, u32 code) {
  u32 old = dev_atomic_cas_u32(v->abort, 0u, code, DEV_RELAXED, DEV_SCOPE_SYSTEM);
  ar_note(v, old ? old : code);
  for (u32 q = 0; q < v->tp; q++)
    if (q != v->rank)
      dev_atomic_cas_u32((__global u32 *)(v->peers[q] + AR_ABORT_OFF), 0u, code, DEV_RELAXED, DEV_SCOPE_SYSTEM);
}

/* Push this rank's bf16 pair `value` (low half: the even column) of flat pair f to every rank. */
DEV_INLINE void ar_push(const struct ar_view *v, u32 f, u32 value) {
  /* never AR_EMPTY, in either protocol (ar_reduce takes no AR_EMPTY for a pair) */
  u32 word = value == AR_EMPTY ? AR_EMPTY_SUB : value;
  u64 pair = (u64)v->tag << 32 | word;
  /* peers first, this rank last: the remote stores are the slow ones. The destinations are
   * computed here, not kept in the view: tp 64-bit addresses held through a large kernel cost it
   * scalar registers it spills (the FFN launch did, with a table of 8). */
  for (u32 i = 1; i <= v->tp; i++) {
    u32 q = v->rank + i;
    q = q >= v->tp ? q - v->tp : q;
    __global u64 *slot = (__global u64 *)(v->peers[q] + v->mine + (u64)f * AR_SLOT_BYTES);
    if (ar_word(v)) {
      dev_st_u32((__global u32 *)slot, word, AR_SKIP & AR_SKIP_SYSTEM ? DEV_CP_DEV : DEV_CP_SYS);
    } else if (AR_SKIP & AR_SKIP_PAIR) {
      dev_st_u32((__global u32 *)slot, word, DEV_CP_SYS);
      dev_st_u32((__global u32 *)slot + 1, v->tag, DEV_CP_SYS);
    } else {
      dev_st_u64(slot, pair, AR_SKIP & AR_SKIP_SYSTEM ? DEV_CP_DEV : DEV_CP_SYS);
    }
  }
}

/* Reduce the n (1 .. AR_MAX_BATCH) flat pairs f, f + stride, ...: out[i] = the bf16 pair of the f32
 * sums in rank order. Returns AR_OK, or AR_ERR_TIMEOUT / AR_ERR_ABORTED (out is then unset). An n
 * out of range is a bug of the caller: it stops the group (AR_ERR_ARGS) rather than reduce part. */
DEV_INLINE u32 ar_reduce(const struct ar_view *v, u32 f, u32 stride, u32 n, u32 *out) {
  const u32 word = ar_word(v);
  if (n - 1u >= AR_MAX_BATCH || v->tp > AR_POLL_TP) {
    ar_fail(v, AR_STATUS(AR_ERR_ARGS, 0u, v->where));
    return AR_ERR_ARGS;
  }
  /* w[i * AR_POLL_TP + s]: pair i from source s; bit k of `missing` while w[k] lacks the tag.
   * Every index is a constant once the loops are unrolled, so w stays in registers. */
  u64 w[AR_MAX_BATCH * AR_POLL_TP];
  u32 missing = 0;
#pragma unroll
  for (u32 i = 0; i < AR_MAX_BATCH; i++)
#pragma unroll
    for (u32 s = 0; s < AR_POLL_TP; s++) {
      w[i * AR_POLL_TP + s] = 0;
      if (i < n && s < v->tp) missing |= 1u << (i * AR_POLL_TP + s);
    }
  u32 own = 0; /* the bits of this rank's own pushes */
#pragma unroll
  for (u32 i = 0; i < AR_MAX_BATCH; i++) own |= 1u << (i * AR_POLL_TP + v->rank);
  dev_poll_t poll;
  u32 polling = 0;
  for (;;) {
    /* one round: the load of every missing pair in flight, then the tags checked */
#pragma unroll
    for (u32 i = 0; i < AR_MAX_BATCH; i++)
#pragma unroll
      for (u32 s = 0; s < AR_POLL_TP; s++) {
        u32 k = i * AR_POLL_TP + s;
        /* the slot's 8 bytes in either protocol (AR_PROTO_WORD's high word is never written): one
         * load for both keeps gfx942's K2 within its SGPRs, where a 4-byte load beside it spilled one */
        if (missing >> k & 1u)
          w[k] = dev_ld_u64((__global const u64 *)(v->own + ar_inbox_off(v, s, f + i * stride)),
                            AR_SKIP & AR_SKIP_POLL ? DEV_CP_PLAIN : DEV_CP_SYS);
      }
#pragma unroll
    for (u32 i = 0; i < AR_MAX_BATCH; i++)
#pragma unroll
      for (u32 s = 0; s < AR_POLL_TP; s++) {
        u32 k = i * AR_POLL_TP + s;
        /* arrived: the tag read and a pair that is not AR_EMPTY (no push is: ar_push). Under
         * AR_PROTO_WORD the view's tag is AR_EMPTY, as a slot's never written high word is, so the
         * one test serves both protocols (a test each cost gfx942's K2 a spilled SGPR) */
        if ((missing >> k & 1u) && (u32)(w[k] >> 32) == v->tag && (u32)w[k] != AR_EMPTY) {
          missing &= ~(1u << k);
          /* AR_PROTO_WORD: empty it for the push two epochs on (the launch's end publishes this):
           * here, where the load's address is at hand, and after the load by its data dependence */
          if (word && !(AR_SKIP & AR_SKIP_CLEAR))
            dev_st_u32((__global u32 *)(v->own + ar_inbox_off(v, s, f + i * stride)), AR_EMPTY, DEV_CP_PLAIN);
        }
      }
    if (!missing) break;
    if (!polling) {
      dev_poll_init(&poll);
      polling = 1;
    } else {
      u32 a = ar_aborted(v);
      if (a) {
        ar_note(v, a);
        dev_poll_done(&poll);
        return AR_ERR_ABORTED;
      }
      if (dev_realtime() > v->deadline) {
        u32 late = 0; /* the first source, in rank order, still missing */
#pragma unroll
        for (u32 s = AR_POLL_TP; s-- > 0;)
#pragma unroll
          for (u32 i = 0; i < AR_MAX_BATCH; i++)
            if (missing >> (i * AR_POLL_TP + s) & 1u) late = s;
        ar_fail(v, AR_STATUS(AR_ERR_TIMEOUT, late + 1u, v->where));
        dev_poll_done(&poll);
        return AR_ERR_TIMEOUT;
      }
    }
    /* a wait on this rank's own push is a wait on its own kernel, which the software agent's
     * watchdog judges; one only on peers' pushes is theirs to end, by the peer bound (dev.h) */
    if (missing & own) dev_poll_wait(&poll);
    else dev_poll_wait_peer(&poll);
  }
  if (polling) dev_poll_done(&poll);
#pragma unroll
  for (u32 i = 0; i < AR_MAX_BATCH; i++) {
    if (i >= n) continue;
    u32 x = (u32)w[i * AR_POLL_TP];
    f32 lo = fmt_bf16_to_f32((u16)x), hi = fmt_bf16_to_f32((u16)(x >> 16));
#pragma unroll
    for (u32 s = 1; s < AR_POLL_TP; s++)
      if (s < v->tp) {
        x = (u32)w[i * AR_POLL_TP + s];
        lo = lo + fmt_bf16_to_f32((u16)x);
        hi = hi + fmt_bf16_to_f32((u16)(x >> 16));
      }
    out[i] = (u32)fmt_bf16_from_f32(lo) | (u32)fmt_bf16_from_f32(hi) << 16;
  }
  return AR_OK;
}

#endif /* HM_AR_H */
