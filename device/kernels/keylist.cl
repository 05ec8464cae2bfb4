/* device/kernels/keylist.cl: the keylist launch (spec/mono.md §3.9): K1's key table from a top-k made
 * between the launches, in exactly K1's format (device/attn/kt.h); a CTA a token, no hand-offs. */
#include "../attn/kt.h"
#include "../dev.h"

DEV_KERNEL(keylist, struct keylist_args, 512) {
  DEV_ARGSPACE const struct keylist_args *a = DEV_ARGS_PTR(struct keylist_args);
  for (u32 t = dev_cta(); t < a->kt.S; t += dev_ncta()) kt_token(&a->kt, t);
}
