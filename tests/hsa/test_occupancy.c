/* tests/test_occupancy.c: the resident-CTA calculator on worked examples, one for each limit
 * being the one that binds, on gfx942 and gfx950 (spec/runtime.md §2.2). */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "hm_codeobj.h"
#include "hm_occupancy.h"

static hm_cu_limits cu(const char *arch) {
  hm_cu_limits c;
  ck_assert_int_eq(hm_cu_limits_for(arch, &c), HM_OK);
  return c;
}

static hm_residency run(const hm_cu_limits *c, uint32_t vgprs, uint32_t sgprs, uint32_t lds, uint32_t cta) {
  hm_kernel_resources k = {.vgprs = vgprs, .sgprs = sgprs, .lds_bytes = lds, .cta_size = cta};
  hm_residency r;
  ck_assert_int_eq(hm_residency_compute(c, &k, &r), HM_OK);
  return r;
}

#define BIT(l) (1u << (l))

START_TEST(part_figures) {
  hm_cu_limits a = cu("gfx942"), b = cu("gfx950");
  ck_assert_uint_eq(a.lds_bytes, 65536);
  ck_assert_uint_eq(a.lds_granule, 512);
  ck_assert_uint_eq(b.lds_bytes, 163840);
  ck_assert_uint_eq(b.lds_granule, 1280);
  ck_assert_uint_eq(b.vgprs_per_lane, 512);
  hm_cu_limits x;
  ck_assert_int_eq(hm_cu_limits_for("gfx90a", &x), HM_ERR_UNSUPPORTED);
  ck_assert_int_eq(hm_cu_limits_for(NULL, &x), HM_ERR_INVALID_ARG);
}
END_TEST

/* The persistent kernels' shape: 512 work-items = 8 waves = 2 a SIMD. 256 VGPRs (arch + acc)
 * is the most that still fits one CTA a CU: 512 / 256 = 2 waves a SIMD. */
START_TEST(vgpr_binds) {
  hm_cu_limits c = cu("gfx950");
  hm_residency r = run(&c, 256, 64, 0, 512);
  ck_assert_uint_eq(r.waves_per_cta, 8);
  ck_assert_uint_eq(r.waves_per_simd_vgpr, 2);
  ck_assert_uint_eq(r.by_vgpr, 1);
  ck_assert_uint_eq(r.by_waves, 4);
  ck_assert_uint_eq(r.ctas_per_cu, 1);
  ck_assert_int_eq(r.binding, HM_LIMIT_VGPR);
  ck_assert_uint_eq(r.binding_mask, BIT(HM_LIMIT_VGPR));
  /* one more register rounds up to 264: one wave a SIMD, and the CTA needs two there */
  r = run(&c, 257, 64, 0, 512);
  ck_assert_uint_eq(r.by_vgpr, 0);
  ck_assert_uint_eq(r.ctas_per_cu, 0);
  /* 128 registers: 4 waves a SIMD, two CTAs */
  r = run(&c, 128, 64, 0, 512);
  ck_assert_uint_eq(r.ctas_per_cu, 2);
  ck_assert_int_eq(r.binding, HM_LIMIT_VGPR);
  /* the granule: 130 rounds to 136, 512/136 = 3 waves a SIMD, 12 waves: one 8-wave CTA */
  r = run(&c, 130, 64, 0, 512);
  ck_assert_uint_eq(r.waves_per_simd_vgpr, 3);
  ck_assert_uint_eq(r.ctas_per_cu, 1);
}
END_TEST

/* SGPRs: 112 -> 800 / 112 = 7 waves a SIMD; a one-wave CTA: 28 CTAs against 32 wave slots. */
START_TEST(sgpr_binds) {
  hm_cu_limits c = cu("gfx942");
  hm_residency r = run(&c, 16, 112, 0, 64);
  ck_assert_uint_eq(r.waves_per_simd_sgpr, 7);
  ck_assert_uint_eq(r.by_sgpr, 28);
  ck_assert_uint_eq(r.by_waves, 32);
  ck_assert_uint_eq(r.ctas_per_cu, 28);
  ck_assert_uint_eq(r.binding_mask, BIT(HM_LIMIT_SGPR));
  /* 100 SGPRs align to 112: same answer */
  ck_assert_uint_eq(run(&c, 16, 100, 0, 64).ctas_per_cu, 28);
}
END_TEST

/* Few registers, no LDS: the 8 wave slots of each SIMD bind. */
START_TEST(waves_bind) {
  hm_cu_limits c = cu("gfx950");
  hm_residency r = run(&c, 10, 15, 0, 256);
  ck_assert_uint_eq(r.by_waves, 8);
  ck_assert_uint_eq(r.ctas_per_cu, 8);
  ck_assert_uint_eq(r.binding_mask, BIT(HM_LIMIT_WAVES));
  /* 1024 work-items: 16 waves, 2 CTAs */
  ck_assert_uint_eq(run(&c, 10, 15, 0, 1024).ctas_per_cu, 2);
  /* a partial wave counts whole: 65 work-items are 2 waves */
  ck_assert_uint_eq(run(&c, 10, 15, 0, 65).waves_per_cta, 2);
}
END_TEST

/* LDS in granules: gfx950 allocates 1280 B at a time, so 5121 B take 6400 B: 163840 / 6400 =
 * 25 CTAs (31 without the granule). gfx942: 20000 B -> 20480 B -> 3 CTAs. */
START_TEST(lds_binds) {
  hm_cu_limits b = cu("gfx950"), a = cu("gfx942");
  hm_residency r = run(&b, 16, 16, 5121, 64);
  ck_assert_uint_eq(r.by_lds, 25);
  ck_assert_uint_eq(r.ctas_per_cu, 25);
  ck_assert_uint_eq(r.binding_mask, BIT(HM_LIMIT_LDS));
  r = run(&a, 16, 16, 20000, 64);
  ck_assert_uint_eq(r.by_lds, 3);
  ck_assert_uint_eq(r.binding_mask, BIT(HM_LIMIT_LDS));
  /* the mono kernels' LDS on gfx950 (about 100 KiB) leaves one CTA a CU */
  r = run(&b, 128, 64, 100 * 1024, 512);
  ck_assert_uint_eq(r.ctas_per_cu, 1);
  ck_assert_int_eq(r.binding, HM_LIMIT_LDS);
  /* more LDS than the CU has: cannot run */
  ck_assert_uint_eq(run(&a, 16, 16, 65537, 64).ctas_per_cu, 0);
}
END_TEST

/* 16 barriers a CU, taken by CTAs of more than one wave. With 8 wave slots a SIMD, 2-wave
 * CTAs tie barriers with waves (16 each); on a part with fewer barriers they bind alone. */
START_TEST(barriers_bind) {
  hm_cu_limits c = cu("gfx942");
  hm_residency r = run(&c, 16, 16, 0, 128);
  ck_assert_uint_eq(r.by_barriers, 16);
  ck_assert_uint_eq(r.ctas_per_cu, 16);
  ck_assert_uint_eq(r.binding_mask, BIT(HM_LIMIT_WAVES) | BIT(HM_LIMIT_BARRIERS));
  /* a one-wave CTA holds no barrier */
  ck_assert_uint_eq(run(&c, 16, 16, 0, 64).by_barriers, UINT32_MAX);
  c.max_barriers = 8;
  r = run(&c, 16, 16, 0, 128);
  ck_assert_uint_eq(r.ctas_per_cu, 8);
  ck_assert_uint_eq(r.binding_mask, BIT(HM_LIMIT_BARRIERS));
  ck_assert_int_eq(r.binding, HM_LIMIT_BARRIERS);
}
END_TEST

START_TEST(grid_fits) {
  hm_cu_limits c = cu("gfx950");
  hm_residency r = run(&c, 200, 64, 64 * 1024, 512); /* one CTA a CU */
  ck_assert_uint_eq(r.ctas_per_cu, 1);
  ck_assert(hm_residency_fits(&r, 256, 256));
  ck_assert(!hm_residency_fits(&r, 257, 256));
  ck_assert(hm_residency_fits(&r, 8, 8));
  r = run(&c, 64, 64, 0, 512); /* four a CU */
  ck_assert(hm_residency_fits(&r, 1024, 256));
  ck_assert(!hm_residency_fits(&r, 1025, 256));
  ck_assert(!hm_residency_fits(NULL, 1, 1));
}
END_TEST

START_TEST(bad_input) {
  hm_cu_limits c = cu("gfx950");
  hm_kernel_resources k = {.vgprs = 16, .sgprs = 16, .cta_size = 0};
  hm_residency r;
  ck_assert_int_eq(hm_residency_compute(&c, &k, &r), HM_ERR_INVALID_ARG);
  k.cta_size = 2048;
  ck_assert_int_eq(hm_residency_compute(&c, &k, &r), HM_ERR_INVALID_ARG);
  k.cta_size = 64, k.vgprs = 513;
  ck_assert_int_eq(hm_residency_compute(&c, &k, &r), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_residency_compute(NULL, &k, &r), HM_ERR_INVALID_ARG);
}
END_TEST

/* From code-object metadata: the required work-group size is the default and the only one
 * accepted; dynamic LDS adds to the static size. */
START_TEST(from_metadata) {
  hm_co_kernel k;
  memset(&k, 0, sizeof k);
  strcpy(k.name, "k");
  k.vgpr_count = 90, k.sgpr_count = 30, k.group_segment_fixed_size = 1000;
  k.reqd_workgroup_size[0] = 512, k.reqd_workgroup_size[1] = 1, k.reqd_workgroup_size[2] = 1;
  k.max_flat_workgroup_size = 512;
  hm_kernel_resources res;
  ck_assert_int_eq(hm_kernel_resources_of(&k, 0, 0, &res), HM_OK);
  ck_assert_uint_eq(res.cta_size, 512);
  ck_assert_uint_eq(res.vgprs, 90);
  ck_assert_int_eq(hm_kernel_resources_of(&k, 256, 0, &res), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_kernel_resources_of(&k, 512, 24, &res), HM_OK);
  ck_assert_uint_eq(res.lds_bytes, 1024);
  /* the descriptor's granulated allocation counts when it is larger */
  k.has_kd = true, k.kd.vgprs_allocated = 96;
  ck_assert_int_eq(hm_kernel_resources_of(&k, 0, 0, &res), HM_OK);
  ck_assert_uint_eq(res.vgprs, 96);
  memset(k.reqd_workgroup_size, 0, sizeof k.reqd_workgroup_size);
  ck_assert_int_eq(hm_kernel_resources_of(&k, 1024, 0, &res), HM_ERR_INVALID_ARG);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("occupancy");
  TCase *tc = tcase_create("calculator");
  tcase_add_test(tc, part_figures);
  tcase_add_test(tc, vgpr_binds);
  tcase_add_test(tc, sgpr_binds);
  tcase_add_test(tc, waves_bind);
  tcase_add_test(tc, lds_binds);
  tcase_add_test(tc, barriers_bind);
  tcase_add_test(tc, grid_fits);
  tcase_add_test(tc, bad_input);
  tcase_add_test(tc, from_metadata);
  suite_add_tcase(s, tc);
  return s;
}
