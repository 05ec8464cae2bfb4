/* device/selftest/st_ar.h: the body of the st_ar kernels (selftest.h): one hand-off of device/ar.h's
 * push / reduce from rank 1 to rank 0 over the heap, compiled once per AR_SKIP variant. */
#include "../ar.h"
#include "../dev.h"
#include "selftest.h"
#include "st_wait.h"

#ifndef ST_AR_NAME
#error "define ST_AR_NAME (the kernel's name) before including st_ar.h"
#endif

/* one level more, so ST_AR_NAME expands before DEV_KERNEL pastes it into its symbols */
#define ST_AR_KERNEL(name) DEV_KERNEL(name, struct st_ar_args, ST_AR_CTA)
ST_AR_KERNEL(ST_AR_NAME) {
  DEV_LDS(u32, word);
  __global u32 *ack = (__global u32 *)args.ack;
  __global u32 *out = (__global u32 *)args.out;
  const u32 lid = dev_lid(), n = args.n, tag = args.tag, rank = args.link.rank;
  struct ar_view v;
  ar_view_init(&v, args.link, args.region, 1u, n, tag, 0u, dev_realtime() + args.link.deadline_ticks, 1u);
  if (rank == 1u) {
    st_await(&ack[0], tag, DEV_SCOPE_SYSTEM, args.ticks);
    for (u32 f = lid; f < n; f += ST_AR_CTA) ar_push(&v, f, st_ar_value(1u, f, tag));
    /* no dev_wait_stores: ar.h needs none after a push. Stay running until rank 0 is done */
    st_linger(&ack[1], tag, DEV_SCOPE_SYSTEM, args.ticks, word);
  } else if (rank == 0u) {
    /* source 1's old pairs into this CTA's cache first, as a consumer that read them last step has */
    u32 warm = 0;
    for (u32 f = lid; f < n; f += ST_AR_CTA)
      warm += (u32)dev_ld_u64((__global const u64 *)(v.own + v.src_bytes + (u64)f * AR_SLOT_BYTES), DEV_CP_PLAIN);
    out[n + lid] = warm;
    dev_barrier();
    if (lid == 0) dev_atomic_store_u32(&ack[0], tag, DEV_RELEASE, DEV_SCOPE_SYSTEM);
    for (u32 f = lid; f < n; f += ST_AR_CTA) ar_push(&v, f, st_ar_value(0u, f, tag));
    for (u32 f = lid; f < n; f += ST_AR_CTA) {
      u32 sum[1];
      if (ar_reduce(&v, f, ST_AR_CTA, 1u, sum) != AR_OK) break;
      out[f] = sum[0];
    }
    dev_barrier();
    if (lid == 0) dev_atomic_store_u32(&ack[1], tag, DEV_RELEASE, DEV_SCOPE_SYSTEM);
  }
}
