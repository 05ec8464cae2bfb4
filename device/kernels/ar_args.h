/* device/kernels/ar_args.h: what the peer all-reduce's device side and its host side share: the
 * symmetric arena's layout, the status / abort word's encoding, a kernel's link to the heap, the standalone launch. */
#ifndef HM_AR_ARGS_H
#define HM_AR_ARGS_H

#include "../dev_types.h"

/* ---------------------------------------------------------------- the arena (DESIGN §5, mono.md §3.7)
 *
 * Every rank owns one arena of uncached (extended fine-grained) memory and maps every peer's:
 *   [0, AR_CTRL_BYTES)                        control page
 *     AR_ABORT_OFF   u32: the owner's abort word: 0 while healthy, else a status code (below),
 *                    written by whichever rank gave up first; every poll on a peer watches it
 *     AR_PEERS_OFF   u64 [AR_MAX_TP]: the arena table: every rank's arena as the owner maps it,
 *                    its own included (hm_ar_link.peers points here, in the owner's own arena)
 *     AR_HEADERS_OFF u64 [AR_MAX_TP][AR_HEADER_RING]: step headers: row r is rank r's latest
 *                    steps through the heap, step n in slot n % AR_HEADER_RING, numbered, with its
 *                    kind, layer and rows, written by rank r into every arena (hm_heap_step_begin,
 *                    a chain's replay); the owner's host compares them with its own
 *     AR_REASON_OFF  char [AR_REASON_BYTES]: why the owner's host stopped the group (one line,
 *                    written before it sets any abort word to AR_ERR_FAILED; peers read it)
 *   [AR_CTRL_BYTES, + half)                   half 0: inboxes of even epochs
 *   [AR_CTRL_BYTES + half, + 2 half)          half 1: inboxes of odd epochs
 * A region is a byte range at the same offset in both halves of every arena (hm_heap_reserve). An
 * all-reduce of S rows of P bf16 pairs uses tp * S * P slots of 8 bytes: the pair from source rank
 * `src` for flat pair index f = t * P + p lives at slot (src * S + t) * P + p = src * S * P + f
 * (spec/mono.md §3.7). What a slot holds depends on the heap's protocol (device/ar.h):
 *   AR_PROTO_PAIR  (value, tag): the bf16 pair in the low word, the tag in the high word (8 bytes);
 *   AR_PROTO_WORD  the bf16 pair alone in the slot's first 4 bytes, AR_EMPTY while none is there
 *                  (the reducer writes AR_EMPTY back once it has read it); the last 4 bytes unused.
 * The slot stays 8 bytes in both, so regions are the same size and sit at the same offsets: only the
 * bytes on the links and the inbox reads halve. The halves start filled with AR_EMPTY (no tag is
 * AR_EMPTY: tags are even) and the control page with zeros (hm_heap_create). */
#define AR_MAX_TP 8u
#define AR_CTRL_BYTES 4096u
#define AR_ABORT_OFF 0u
#define AR_PEERS_OFF 128u
#define AR_SLOT_BYTES 8u
#define AR_WORD_BYTES 4u         /* AR_PROTO_WORD: a slot's payload */
#define AR_EMPTY 0xffffffffu     /* AR_PROTO_WORD: no pair yet (two negative NaNs with every payload bit set) */
#define AR_EMPTY_SUB 0xffbfffffu /* what a push sends for a pair that is AR_EMPTY (ar_push) */
#define AR_PROTO_PAIR 0u
#define AR_PROTO_WORD 1u
#define AR_HEADERS_OFF 256u
#define AR_HEADER_RING 8u /* a replay of up to 8 steps keeps every header */
#define AR_REASON_OFF 1024u
#define AR_REASON_BYTES 512u

/* ---------------------------------------------------------------- status and abort words
 *
 * One u32 encoding for a rank's abort word and for a launch's sticky status word (host-visible):
 * 0 = healthy, else (code, peer + 1, where). A rank whose wait on peer q times out writes
 * AR_STATUS(AR_ERR_TIMEOUT, q + 1, where) into its own abort word, its status word and every
 * peer's abort word; a rank that finds its abort word set copies that code into its status. Each
 * word keeps its first code (compare-and-swap from 0), so every rank reports the root cause —
 * which rank was waited for in vain, at which site — not the echo. */
#define AR_ERR_TIMEOUT 1u /* a wait on `peer` passed its deadline */
#define AR_ERR_ABORTED 2u /* the host of rank `peer` stopped the group (hm_heap_abort) */
#define AR_ERR_ARGS 3u    /* arguments out of range: the standalone launch's, or an ar_reduce batch */
#define AR_ERR_FAILED 4u  /* rank `peer`'s create or step failed on its host (hm_heap_fail); `where` is
                           * its hm_status, its reason is at AR_REASON_OFF in its arena */
#define AR_ERR_STEP 5u    /* rank `peer`'s host found a peer's step unlike its own (the same step number,
                           * another kind, layer or rows); its words are at AR_REASON_OFF */
#define AR_STATUS(code, peer1, where) ((u32)(code) | (u32)(peer1) << 8 | (u32)(where) << 16)
#define AR_STATUS_CODE(s) ((s) & 0xffu)
#define AR_STATUS_PEER1(s) (((s) >> 8) & 0xffu) /* the rank concerned, plus 1 (0: none) */
#define AR_STATUS_WHERE(s) ((s) >> 16)          /* the caller's site number */
#define AR_WHERE_HOST 0xffffu                   /* set by a host, not by a kernel's wait */
/* The sites of the project's kernels, one number each across kernels, so a status word names its
 * all-reduce wherever it is read (a chain replay's, the heap's): the standalone launch, and the FFN
 * launch's and K2's two (the attention output's and the MoE output's). */
#define AR_WHERE_STANDALONE 1u
#define AR_WHERE_ATTN 2u
#define AR_WHERE_MOE 3u

/* Results of the device calls (device/ar.h): AR_OK, AR_ERR_TIMEOUT (this work-item's wait passed
 * the deadline; the abort words are now set), AR_ERR_ABORTED (its abort word was set) or
 * AR_ERR_ARGS (a batch out of range; the group is stopped). */
#define AR_OK 0u

/* ---------------------------------------------------------------- a kernel's link to the heap */

/* Part of the arguments of any kernel that runs the protocol (48 bytes): hm_heap_link fills it. */
struct hm_ar_link {
  u64 peers;          /* u64 [tp]: the arena table (this rank's arena + AR_PEERS_OFF) */
  u64 status;         /* u32: the launch's sticky status word (host-visible; 0 = fine) */
  u64 half_bytes;     /* bytes of one parity half */
  u64 deadline_ticks; /* bound of a launch's waits on peers, in DEV_REALTIME_HZ ticks */
  u32 rank, tp;
  u32 proto; /* AR_PROTO_PAIR or AR_PROTO_WORD: the heap's, the same on every rank */
  u32 pad;
};
DEV_ARGS_CHECK(hm_ar_link, 48);

/* ---------------------------------------------------------------- the standalone launch */

/* ar_allreduce (device/kernels/ar_allreduce.cl): one all-reduce step a launch. Each CTA reads the
 * epoch e of the all-reduce's own epoch buffer (device/epoch.h; tag 2e + 2, half e & 1), pushes its
 * share of this rank's `in` to every rank, reduces the same share of its own inbox into `out`, and
 * CTA 0 advances the epoch once every CTA has read it. */
#define AR_CTA 256u /* work-items a CTA */
struct ar_allreduce_args {
  struct hm_ar_link link; /* the heap, the status word, the wait bound */
  u64 epoch;           /* u32 [DEV_EPOCH_WORDS]: this all-reduce's epoch buffer */
  u64 in;              /* bf16 [rows][2 * pairs]: this rank's contribution */
  u64 out;             /* bf16 [rows][2 * pairs]: the sum (may be `in`) */
  u64 region;          /* byte offset of the inboxes in a half */
  u32 rows;            /* S */
  u32 pairs;           /* P: bf16 pairs a row */
  u32 batch;           /* pairs a work-item reduces a poll round (1 .. AR_MAX_BATCH) */
  u32 pad;
};
DEV_ARGS_CHECK(ar_allreduce_args, 96);

#endif /* HM_AR_ARGS_H */
