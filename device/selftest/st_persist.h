/* device/selftest/st_persist.h: the body of the st_persist kernels (selftest.h): every CTA through
 * dev_persist_arrive (device/dev.h), compiled once per DEV_PERSIST_SKIP variant. */
#include "../dev.h"
#include "selftest.h"

#ifndef ST_PERSIST_NAME
#error "define ST_PERSIST_NAME (the kernel's name) before including st_persist.h"
#endif

/* one level more, so ST_PERSIST_NAME expands before DEV_KERNEL pastes it into its symbols */
#define ST_PERSIST_KERNEL(name) DEV_KERNEL(name, struct st_persist_args, ST_PERSIST_CTA)
ST_PERSIST_KERNEL(ST_PERSIST_NAME) {
  DEV_LDS(u32, slot);
  u32 go = dev_persist_arrive((__global struct hm_dev_persist *)args.persist, slot);
  ((__global u32 *)args.out)[dev_cta() * ST_PERSIST_CTA + dev_lid()] = go + 1u;
}
