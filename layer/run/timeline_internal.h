/* layer/run/timeline_internal.h: the timeline buffer a runner (FFN/K2, K1) holds when created with
 * hm_ffn_config.timeline: allocated once, armed (zeroed) before each launch, viewed after it. */
#ifndef HM_TIMELINE_INTERNAL_H
#define HM_TIMELINE_INTERNAL_H

#include <stddef.h>

#include "hm_hsa.h"
#include "hm_timeline.h"

enum hm_tl_kernel { HM_TL_FFN, HM_TL_K1, HM_TL_K2, HM_TL_KERNELS };

struct hm_tl_buf {
  hm_timeline_stamp *stamps; /* [ctas][DEV_TL_SLOTS], host memory; NULL: timeline off */
  size_t bytes;
  uint32_t ctas;
  enum hm_tl_kernel ran; /* the kernel of the last armed launch (HM_TL_KERNELS: none yet) */
};

hm_status hm_tl_alloc(hm_agent *a, uint32_t ctas, const char *who, struct hm_tl_buf *b);
void hm_tl_free(hm_runtime *rt, struct hm_tl_buf *b);
/* Before a launch (zero: a step's, its stamps cleared) or a recording of kernel k: the kernel whose
 * slots the view names. Nothing when off. */
void hm_tl_arm(struct hm_tl_buf *b, enum hm_tl_kernel k, bool zero);
/* The last launch's stamps as *out (who names the caller in refusals). */
hm_status hm_tl_view(const struct hm_tl_buf *b, bool sim, const char *who, hm_timeline *out);

#endif /* HM_TIMELINE_INTERNAL_H */
