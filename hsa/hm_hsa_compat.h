/* hsa/hm_hsa_compat.h: HSA/ROCr constants newer than the headers Debian ships (ROCm 5.2,
 * hsa_ext_amd.h interface 1.0), with their values from later ROCr releases. */
#ifndef HM_HSA_COMPAT_H
#define HM_HSA_COMPAT_H

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

/* hsa_amd_memory_pool_global_flag_t: extended-scope fine-grained (interface 1.3): device-scope
 * atomics are promoted to system scope; HIP's hipDeviceMallocUncached (spec/runtime.md §1.2). */
#define HM_POOL_FLAG_KERNARG_INIT 1u
#define HM_POOL_FLAG_FINE_GRAINED 2u
#define HM_POOL_FLAG_COARSE_GRAINED 4u
#define HM_POOL_FLAG_EXTENDED_SCOPE_FINE_GRAINED 8u

/* hsa_amd_agent_info_t additions */
#define HM_AMD_AGENT_INFO_NUM_XCC ((hsa_agent_info_t)0xA111)

/* AQL packet header fields (hsa.h enums, restated as shifts and widths) */
#define HM_AQL_HEADER_TYPE_SHIFT 0
#define HM_AQL_HEADER_BARRIER_SHIFT 8
#define HM_AQL_HEADER_ACQUIRE_SHIFT 9
#define HM_AQL_HEADER_RELEASE_SHIFT 11

#endif /* HM_HSA_COMPAT_H */
