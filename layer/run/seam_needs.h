/* layer/run/seam_needs.h: the mHC seam state's four tensors as the pointer checks take them
 * (hm_mem_check), shared by the FFN launch's, K1's and the layer's step checks. */
#ifndef HM_SEAM_NEEDS_H
#define HM_SEAM_NEEDS_H

#include "hm_config.h"
#include "hm_hsa.h"

/* res bf16 [S][4][D], post f32 [S][4], comb f32 [S][4][4], pre f32 [S][4], named names[0..3], into
 * t[0..4): device memory of the step's agent. */
static inline void hm_seam_needs(hm_mem_need *t, uint32_t S, uint32_t D, const char *const names[4], const void *res,
                                 const void *post, const void *comb, const void *pre) {
  t[0] = (hm_mem_need){names[0], res, (uint64_t)S * HM_HC * D * 2, HM_MEM_DEVICE};
  t[1] = (hm_mem_need){names[1], post, (uint64_t)S * HM_HC * 4, HM_MEM_DEVICE};
  t[2] = (hm_mem_need){names[2], comb, (uint64_t)S * HM_HC * HM_HC * 4, HM_MEM_DEVICE};
  t[3] = (hm_mem_need){names[3], pre, (uint64_t)S * HM_HC * 4, HM_MEM_DEVICE};
}

#endif /* HM_SEAM_NEEDS_H */
