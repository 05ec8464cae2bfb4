/* include/hsamono.h: the umbrella header a client includes as <hsamono/hsamono.h>: every public
 * header of libhsamono (installed beside it in include/hsamono/), nothing internal. */
#ifndef HM_HSAMONO_H
#define HM_HSAMONO_H

#include "hm_version.h"
#include "hm_status.h"
#include "hm_codeobj.h"
#include "hm_occupancy.h"
#include "hm_embedded.h"
#include "hm_hsa.h"
#include "hm_trace.h"
#include "hm_collectives.h"
#include "hm_config.h"
#include "hm_tensor.h"
#include "hm_weights.h"
#include "hm_safetensors.h"
#include "hm_ref.h"
#include "hm_timeline.h"
#include "hm_ffn.h"
#include "hm_ffn_group.h"
#include "hm_k1.h"
#include "hm_k1_group.h"
#include "hm_k2.h"
#include "hm_layer.h"
#include "hm_layer_group.h"

#endif /* HM_HSAMONO_H */
