/* hsa/occupancy.c: resident CTAs a CU from registers, waves, LDS and barriers, with the
 * gfx942 / gfx950 figures of spec/runtime.md §2.1 (unified 512-entry VGPR file, granule 8). */
#include "hm_occupancy.h"

#include <string.h>

static uint32_t align_up(uint32_t v, uint32_t g) { return (v + g - 1) / g * g; }

hm_status hm_cu_limits_for(const char *processor, hm_cu_limits *out) {
  if (!processor || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_cu_limits_for: NULL argument");
  memset(out, 0, sizeof *out);
  out->simds_per_cu = 4;
  out->max_waves_per_simd = 8;
  out->wave_size = 64;
  out->vgprs_per_lane = 512;
  out->vgpr_granule = 8;
  out->sgprs_per_simd = 800;
  out->sgpr_granule = 16;
  out->max_barriers = 16;
  if (strcmp(processor, "gfx942") == 0) {
    out->lds_bytes = 64 * 1024;
    out->lds_granule = 512; /* 128 dwords */
  } else if (strcmp(processor, "gfx950") == 0) {
    out->lds_bytes = 160 * 1024;
    out->lds_granule = 1280; /* 320 dwords */
  } else {
    return hm_fail(HM_ERR_UNSUPPORTED, "no CU model for %s (gfx942 and gfx950 only)", processor);
  }
  strcpy(out->arch, processor);
  return HM_OK;
}

const char *hm_limit_name(hm_limit l) {
  switch (l) {
  case HM_LIMIT_VGPR: return "vgpr";
  case HM_LIMIT_SGPR: return "sgpr";
  case HM_LIMIT_WAVES: return "waves";
  case HM_LIMIT_LDS: return "lds";
  case HM_LIMIT_BARRIERS: return "barriers";
  }
  return "?";
}

hm_status hm_residency_compute(const hm_cu_limits *cu, const hm_kernel_resources *k, hm_residency *out) {
  if (!cu || !k || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_residency_compute: NULL argument");
  if (k->cta_size == 0 || k->cta_size > 1024)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_residency_compute: CTA size %u (1..1024)", k->cta_size);
  if (k->vgprs > cu->vgprs_per_lane)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_residency_compute: %u VGPRs exceed the %u-entry file", k->vgprs,
                   cu->vgprs_per_lane);
  memset(out, 0, sizeof *out);
  uint32_t w = (k->cta_size + cu->wave_size - 1) / cu->wave_size;
  out->waves_per_cta = w;

  /* registers: waves one SIMD's register files hold (the wave-slot cap of 8 is the separate
   * "waves" limit, so a kernel with few registers reports waves as what binds) */
  uint32_t v = align_up(k->vgprs ? k->vgprs : 1, cu->vgpr_granule);
  out->waves_per_simd_vgpr = cu->vgprs_per_lane / v;
  uint32_t sg = align_up(k->sgprs ? k->sgprs : 1, cu->sgpr_granule);
  out->waves_per_simd_sgpr = cu->sgprs_per_simd / sg;
  /* A CTA's waves are spread over the SIMDs: ceil(w / simds) of them land on one SIMD. */
  uint32_t per_simd = (w + cu->simds_per_cu - 1) / cu->simds_per_cu;
  out->by_vgpr = (cu->simds_per_cu * out->waves_per_simd_vgpr) / w;
  if (out->waves_per_simd_vgpr < per_simd) out->by_vgpr = 0;
  out->by_sgpr = (cu->simds_per_cu * out->waves_per_simd_sgpr) / w;
  if (out->waves_per_simd_sgpr < per_simd) out->by_sgpr = 0;
  out->by_waves = (cu->simds_per_cu * cu->max_waves_per_simd) / w;

  /* LDS in allocation granules */
  out->by_lds = k->lds_bytes ? cu->lds_bytes / align_up(k->lds_bytes, cu->lds_granule) : UINT32_MAX;
  /* a CTA of more than one wave holds one of the CU's barriers */
  out->by_barriers = w > 1 ? cu->max_barriers : UINT32_MAX;

  const uint32_t lim[5] = {out->by_vgpr, out->by_sgpr, out->by_waves, out->by_lds, out->by_barriers};
  out->ctas_per_cu = UINT32_MAX;
  for (int i = 0; i < 5; i++)
    if (lim[i] < out->ctas_per_cu) {
      out->ctas_per_cu = lim[i];
      out->binding = (hm_limit)i;
    }
  for (int i = 0; i < 5; i++)
    if (lim[i] == out->ctas_per_cu) out->binding_mask |= 1u << i;
  return HM_OK;
}

bool hm_residency_fits(const hm_residency *r, uint64_t ctas, uint32_t cus) {
  return r && (uint64_t)r->ctas_per_cu * cus >= ctas;
}

hm_status hm_kernel_resources_of(const hm_co_kernel *k, uint32_t cta_size, uint32_t dynamic_lds,
                                 hm_kernel_resources *out) {
  if (!k || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_kernel_resources_of: NULL argument");
  uint32_t reqd = k->reqd_workgroup_size[0] * (k->reqd_workgroup_size[1] ? k->reqd_workgroup_size[1] : 1) *
                  (k->reqd_workgroup_size[2] ? k->reqd_workgroup_size[2] : 1);
  if (cta_size == 0) cta_size = reqd ? reqd : k->max_flat_workgroup_size;
  if (cta_size == 0) return hm_fail(HM_ERR_INVALID_ARG, "kernel %s: no CTA size given or declared", k->name);
  if (reqd && cta_size != reqd)
    return hm_fail(HM_ERR_INVALID_ARG, "kernel %s: CTA size %u, but the kernel requires %u", k->name, cta_size, reqd);
  if (k->max_flat_workgroup_size && cta_size > k->max_flat_workgroup_size)
    return hm_fail(HM_ERR_INVALID_ARG, "kernel %s: CTA size %u exceeds its maximum %u", k->name, cta_size,
                   k->max_flat_workgroup_size);
  memset(out, 0, sizeof *out);
  /* .vgpr_count already counts AGPRs on gfx90a+; the descriptor's allocation is the same
   * number rounded to the granule, so take the larger if a producer disagrees. */
  out->vgprs = k->vgpr_count;
  if (k->has_kd && k->kd.vgprs_allocated > out->vgprs) out->vgprs = k->kd.vgprs_allocated;
  out->sgprs = k->sgpr_count;
  out->lds_bytes = k->group_segment_fixed_size + dynamic_lds;
  out->cta_size = cta_size;
  out->private_bytes = k->private_segment_fixed_size;
  out->dynamic_stack = k->uses_dynamic_stack || (k->has_kd && k->kd.dynamic_stack);
  return HM_OK;
}
