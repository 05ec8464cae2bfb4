/* device/attn/kt.h: the key table of a token (spec/mono.md §2.1 K1.4): its compressed keys from the
 * top-k through the block table (bit 31), then its window's slots, then -1; KLEN = kv_len, ntopk.
 *
 * One implementation for K1's kt stage and the keylist launch (§3.9), which write the same format.
 * Every index it follows was checked by the host against its table before the launch; the loads
 * are plain (the metadata is the launch's input, ordered by the kernel boundary). */
#ifndef HM_ATTN_KT_H
#define HM_ATTN_KT_H

#include "../dev.h"
#include "../kernels/k1_args.h"

/* Token t's row of KT and its two KLEN words, by the whole CTA. */
DEV_INLINE void kt_token(DEV_ARGSPACE const struct kt_args *a, u32 t) {
  __global const i64 *pos = (__global const i64 *)a->positions;
  __global const i64 *slot = (__global const i64 *)a->slot_mapping;
  const u32 S = a->S, ratio = a->ratio;
  const i32 live = slot[t] >= 0;
  const i32 nswa = live ? ((__global const i32 *)a->swa_lens)[t] : 0;
  i64 nt = live && ratio ? (pos[t] + 1) / (i64)ratio : 0;
  const i32 ntopk = (i32)(nt < (i64)K1_TOPK ? nt : (i64)K1_TOPK);
  const i32 kv_len = ntopk + nswa;
  __global i32 *row = (__global i32 *)a->kt + (u64)t * K1_KEYS;
  __global const i32 *topk = (__global const i32 *)a->topk + (u64)t * K1_TOPK;
  __global const i32 *win = (__global const i32 *)a->swa_idx + (u64)t * K1_WINDOW;
  for (u32 k = dev_lid(); k < K1_KEYS; k += dev_cta_size()) {
    i32 v = -1;
    if ((i32)k < ntopk) {
      i32 id = topk[k]; /* the local compressed row */
      if (id >= 0) {
        i32 req = ((__global const i32 *)a->t2r)[t];
        u32 rpb = a->comp_block;
        i32 blk = ((__global const i32 *)a->comp_bt)[(u64)req * a->bt_stride + (u32)id / rpb];
        v = (i32)(((u32)blk * rpb + (u32)id % rpb) | 0x80000000u); /* bit 31: the compressed cache */
      }
    } else if ((i32)k < kv_len) {
      v = win[k - (u32)ntopk];
    }
    row[k] = v;
  }
  if (dev_lid() == 0) {
    ((__global i32 *)a->klen)[t] = kv_len;
    ((__global i32 *)a->klen)[S + t] = ntopk;
  }
}

#endif /* HM_ATTN_KT_H */
