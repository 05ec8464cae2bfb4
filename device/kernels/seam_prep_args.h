/* device/kernels/seam_prep_args.h: the first layer's residual broadcast's arguments, for the kernel
 * (seam_prep.cl) and the layer runner. */
#ifndef HM_SEAM_PREP_ARGS_H
#define HM_SEAM_PREP_ARGS_H

#include "../dev_types.h"

struct res_broadcast_args {
  u64 x;    /* bf16 [S][D]: the embedding */
  u64 res;  /* out bf16 [S][4][D] */
  u32 S, D; /* D even */
};
DEV_ARGS_CHECK(res_broadcast_args, 24);

#endif /* HM_SEAM_PREP_ARGS_H */
