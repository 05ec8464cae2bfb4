/* device/kernels/seam_prep.cl: the first layer's residual (spec/mono.md §1.3, §2.7): the embedding
 * broadcast to the 4 streams, so K1's identity seam can start from it. No hand-offs. */
#include "../dev.h"
#include "seam_prep_args.h"

/* Work-item i of the grid: bf16 pairs i, i + items, ... of x, each stored to the 4 streams. */
DEV_KERNEL(res_broadcast, struct res_broadcast_args, 256) {
  DEV_ARGSPACE const struct res_broadcast_args *a = DEV_ARGS_PTR(struct res_broadcast_args);
  const u32 P = a->D / 2u, n = a->S * P;
  __global const u32 *x = (__global const u32 *)a->x;
  __global u32 *res = (__global u32 *)a->res;
  for (u32 i = dev_cta() * dev_cta_size() + dev_lid(); i < n; i += dev_ncta() * dev_cta_size()) {
    u32 t = i / P, c = i % P, w = x[i];
    for (u32 h = 0; h < 4u; h++) res[((u64)t * 4u + h) * P + c] = w;
  }
}
