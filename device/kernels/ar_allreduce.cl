/* device/kernels/ar_allreduce.cl: the standalone peer all-reduce (hm_allreduce): one step a launch,
 * bf16 in, bf16 out, through device/ar.h's protocol on the symmetric heap; errors in the status word. */
#include "../ar.h"
#include "../epoch.h"
#include "ar_args.h"

struct ar_allreduce_lds {
  u32 word;
};

DEV_KERNEL(ar_allreduce, struct ar_allreduce_args, AR_CTA) {
  DEV_LDS(struct ar_allreduce_lds, lds);
  struct hm_ar_link link = args.link;
  u32 n = args.rows * args.pairs;
  u32 batch = args.batch;
  if (link.tp < 1u || link.tp > AR_MAX_TP || link.rank >= link.tp || batch < 1u || batch > AR_MAX_BATCH ||
      n == 0u || dev_ncta() > DEV_EPOCH_MAX_CTAS) {
    /* the host checks all of this; a launch built another way must not write out of bounds (not
     * even an epoch mark), only say what was wrong */
    if (dev_lid() == 0)
      dev_atomic_cas_u32((__global u32 *)link.status, 0u, AR_STATUS(AR_ERR_ARGS, 0u, AR_WHERE_STANDALONE),
                         DEV_RELAXED, DEV_SCOPE_SYSTEM);
    return;
  }
  __global u32 *ep = (__global u32 *)args.epoch;
  u32 e = dev_epoch_begin(ep, &lds->word, 1u);
  struct ar_view v;
  ar_view_init(&v, link, args.region, args.rows, args.pairs, dev_epoch_tag_k2(e), dev_epoch_parity(e),
               dev_realtime() + link.deadline_ticks, AR_WHERE_STANDALONE);
  u32 a = ar_aborted(&v);
  if (a) {
    /* the group failed in an earlier step: nothing is pushed, the host reads why */
    if (dev_lid() == 0) ar_note(&v, a);
  } else {
    /* stage stamps: nothing on a GPU without a timeline buffer (tl 0); on the software agent they
     * split the trace into the push and the reduce, the stages the timing model replays (a reduce
     * waits on the peers' pushes, not on their whole launch) */
    dev_tl_stamp(0u, 0u, DEV_TL_EVERY, 1u);
    __global const u32 *in = (__global const u32 *)args.in;
    __global u32 *out = (__global u32 *)args.out;
    u32 grid = dev_ncta() * dev_cta_size();
    u32 g = dev_cta() * dev_cta_size() + dev_lid();
    /* push everything first: a work-item's reduce then waits only on the peers */
    for (u32 f = g; f < n; f += grid) ar_push(&v, f, dev_ld_u32(&in[f], DEV_CP_PLAIN));
    /* not needed for correctness (ar.h): the pushes are on their way; this lets the peers'
     * pushes arrive meanwhile, and on the software agent it lands the whole burst at once */
    dev_wait_stores();
    dev_tl_stamp(0u, 1u, DEV_TL_EVERY, 1u);
    /* the same pairs back, `batch` of them a poll round; a work-item writes its outputs only
     * after its own pushes were issued, and reads no one else's input, so out may alias in */
    for (u32 f = g; f < n; f += grid * batch) {
      u32 left = (n - f + grid - 1u) / grid;
      u32 m = left < batch ? left : batch;
      u32 sum[AR_MAX_BATCH];
      if (ar_reduce(&v, f, grid, m, sum) != AR_OK) break;
#pragma unroll
      for (u32 i = 0; i < AR_MAX_BATCH; i++)
        if (i < m) dev_st_u32(&out[f + i * grid], sum[i], DEV_CP_PLAIN);
    }
    dev_tl_stamp(0u, 2u, DEV_TL_EVERY, 1u);
  }
  dev_epoch_end(ep, e);
}
