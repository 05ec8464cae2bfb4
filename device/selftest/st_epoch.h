/* device/selftest/st_epoch.h: the body of the st_epoch kernels (selftest.h): every CTA through
 * device/epoch.h's begin and end, compiled once per EP_SKIP variant. */
#include "../dev.h"
#include "../epoch.h"
#include "selftest.h"

#ifndef ST_EPOCH_NAME
#error "define ST_EPOCH_NAME (the kernel's name) before including st_epoch.h"
#endif

/* one level more, so ST_EPOCH_NAME expands before DEV_KERNEL pastes it into its symbols */
#define ST_EPOCH_KERNEL(name) DEV_KERNEL(name, struct st_epoch_args, ST_EPOCH_CTA)
ST_EPOCH_KERNEL(ST_EPOCH_NAME) {
  DEV_LDS(u32, word);
  __global u32 *ep = (__global u32 *)args.epoch;
  __global u32 *out = (__global u32 *)args.out;
  u32 e = dev_epoch_begin(ep, word, 1u);
  /* the word is free again: lane 0 takes it for something else at once, as a kernel's LDS may */
  if (dev_lid() == 0) *word = ~e;
  out[dev_cta() * ST_EPOCH_CTA + dev_lid()] = e;
  dev_barrier();
  dev_epoch_end(ep, e);
}
