/* hsa/hm_occupancy.h: the resident-CTA calculator (spec/runtime.md §2): how many CTAs of a
 * kernel one CU of gfx942 / gfx950 holds at once, which limit binds, and whether a grid fits. */
#ifndef HM_OCCUPANCY_H
#define HM_OCCUPANCY_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_codeobj.h"
#include "hm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one compute unit of an architecture offers. */
typedef struct hm_cu_limits {
  char arch[16];
  uint32_t simds_per_cu;       /* 4 */
  uint32_t max_waves_per_simd; /* 8 */
  uint32_t wave_size;          /* 64 */
  uint32_t vgprs_per_lane;     /* 512: unified arch + acc file of one SIMD lane */
  uint32_t vgpr_granule;       /* 8 */
  uint32_t sgprs_per_simd;     /* 800 */
  uint32_t sgpr_granule;       /* 16 */
  uint32_t lds_bytes;          /* 64 KiB (gfx942), 160 KiB (gfx950) */
  uint32_t lds_granule;        /* 512 B (gfx942), 1280 B (gfx950) */
  uint32_t max_barriers;       /* 16 workgroup barriers for multi-wave CTAs */
} hm_cu_limits;

/* gfx942 or gfx950 (other processors: HM_ERR_UNSUPPORTED). */
hm_status hm_cu_limits_for(const char *processor, hm_cu_limits *out);

/* What a kernel asks of a CU. */
typedef struct hm_kernel_resources {
  uint32_t vgprs;         /* per lane, arch + AGPRs (the metadata's .vgpr_count on gfx90a+) */
  uint32_t sgprs;
  uint32_t lds_bytes;     /* group segment: static + dynamic */
  uint32_t cta_size;      /* work-items a CTA */
  uint32_t private_bytes; /* scratch a work-item */
  bool dynamic_stack;
} hm_kernel_resources;

typedef enum hm_limit {
  HM_LIMIT_VGPR,
  HM_LIMIT_SGPR,
  HM_LIMIT_WAVES,
  HM_LIMIT_LDS,
  HM_LIMIT_BARRIERS
} hm_limit;

typedef struct hm_residency {
  uint32_t waves_per_cta;
  uint32_t waves_per_simd_vgpr; /* waves a SIMD's VGPR file holds (before the wave-slot cap) */
  uint32_t waves_per_simd_sgpr; /* waves a SIMD's SGPR file holds (before the wave-slot cap) */
  /* CTAs a CU holds under each limit alone; UINT32_MAX when that limit does not apply */
  uint32_t by_vgpr, by_sgpr, by_waves, by_lds, by_barriers;
  uint32_t ctas_per_cu;  /* the minimum: 0 when the kernel cannot run at all */
  hm_limit binding;      /* a limit that gives ctas_per_cu (the first such in enum order) */
  uint32_t binding_mask; /* every limit that gives it: bit (1 << hm_limit); ties are common */
} hm_residency;

const char *hm_limit_name(hm_limit l);

hm_status hm_residency_compute(const hm_cu_limits *cu, const hm_kernel_resources *k, hm_residency *out);

/* Whether a grid of `ctas` CTAs is resident all at once on `cus` CUs. */
bool hm_residency_fits(const hm_residency *r, uint64_t ctas, uint32_t cus);

/* A code object kernel's resources for a CTA of `cta_size` work-items (0: its required
 * work-group size, else its maximum flat size) with `dynamic_lds` extra group bytes. */
hm_status hm_kernel_resources_of(const hm_co_kernel *k, uint32_t cta_size, uint32_t dynamic_lds,
                                 hm_kernel_resources *out);

#ifdef __cplusplus
}
#endif
#endif /* HM_OCCUPANCY_H */
