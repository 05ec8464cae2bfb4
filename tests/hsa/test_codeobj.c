/* tests/test_codeobj.c: the code-object reader on the embedded objects (every field the loader
 * and resource checks use) and on damaged input: truncated, bit-flipped, foreign, edited. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "selftest/selftest.h"
#include "codeobj_internal.h"
#include "hm_codeobj.h"
#include "hm_embedded.h"

static const struct hm_embedded_blob *blob(const char *target) {
  const struct hm_embedded_blob *b = hm_embedded_find(target, HM_BLOB_CODE_OBJECT);
  ck_assert_msg(b != NULL, "no embedded code object for %s", target);
  return b;
}

static hm_codeobj *parse_target(const char *target) {
  const struct hm_embedded_blob *b = blob(target);
  hm_codeobj *co = NULL;
  ck_assert_msg(hm_codeobj_parse(b->data, hm_embedded_size(b), &co) == HM_OK, "%s: %s", target, hm_errmsg());
  return co;
}

/* A failure must carry a one-line, non-empty message. */
static void assert_one_line_error(hm_status s) {
  ck_assert_int_ne(s, HM_OK);
  const char *m = hm_errmsg();
  ck_assert_msg(m[0] != 0, "empty error message");
  ck_assert_msg(strchr(m, '\n') == NULL, "multi-line error message: %s", m);
}

static void check_kernels(const char *target) {
  hm_codeobj *co = parse_target(target);
  ck_assert_str_eq(co->tid.processor, target);
  ck_assert_uint_eq(co->abi_version, 3); /* code object v5 */
  ck_assert_uint_eq(co->version[0], 1);
  ck_assert_uint_ge(co->nkernels, 10);

  const hm_co_kernel *k = hm_codeobj_find(co, "st_ids");
  ck_assert_ptr_nonnull(k);
  ck_assert_str_eq(k->symbol, "st_ids.kd");
  ck_assert_uint_eq(k->kernarg_size, sizeof(struct st_ids_args));
  ck_assert_uint_eq(k->kernarg_align, 8);
  ck_assert_uint_eq(k->wavefront_size, 64);
  ck_assert_uint_eq(k->reqd_workgroup_size[0], 256);
  ck_assert_uint_eq(k->reqd_workgroup_size[1], 1);
  ck_assert_uint_eq(k->nargs, 1);
  ck_assert_str_eq(k->args[0].value_kind, "by_value");
  ck_assert_uint_eq(k->args[0].size, sizeof(struct st_ids_args));
  ck_assert_uint_eq(k->nhidden, 0); /* the dialect reads the dispatch packet, not hidden args */
  ck_assert(k->has_kd);
  ck_assert_uint_eq(k->kd.kernarg_size, sizeof(struct st_ids_args));
  ck_assert_uint_ge(k->kd.vgprs_allocated, k->vgpr_count);
  ck_assert_uint_eq(k->kd.vgprs_allocated % 8, 0);
  ck_assert(!k->kd.tg_split && !k->kd.wave32 && !k->kd.dynamic_stack && !k->uses_dynamic_stack);
  ck_assert_uint_eq(k->private_segment_fixed_size, 0);

  const hm_co_kernel *b = hm_codeobj_find(co, "st_barrier");
  ck_assert_ptr_nonnull(b);
  ck_assert_uint_eq(b->group_segment_fixed_size, ST_BARRIER_LDS_WORDS * 4);
  ck_assert_uint_eq(b->kd.group_segment_fixed_size, ST_BARRIER_LDS_WORDS * 4);
  ck_assert_uint_eq(b->reqd_workgroup_size[0], 512);

  const hm_co_kernel *m = hm_codeobj_find(co, "st_mfma");
  ck_assert_ptr_nonnull(m);
  ck_assert_uint_eq(m->kernarg_size, sizeof(struct st_mfma_args));
  ck_assert_ptr_null(hm_codeobj_find(co, "no_such_kernel"));
  ck_assert_ptr_null(hm_codeobj_find(co, "st_ids.kd"));
  hm_codeobj_free(co);
}

START_TEST(embedded_gfx950) { check_kernels("gfx950"); }
END_TEST

START_TEST(embedded_gfx942) { check_kernels("gfx942"); }
END_TEST

START_TEST(bad_arguments) {
  hm_codeobj *co = (hm_codeobj *)1;
  assert_one_line_error(hm_codeobj_parse(NULL, 100, &co));
  ck_assert_ptr_null(co);
  assert_one_line_error(hm_codeobj_parse("x", 1, NULL));
  ck_assert_int_eq(hm_codeobj_read_file("/nonexistent/file.co", &co, NULL, NULL), HM_ERR_NOT_FOUND);
  ck_assert_int_eq(hm_codeobj_read_file("/", &co, NULL, NULL), HM_ERR_IO);
  ck_assert_ptr_null(hm_codeobj_find(NULL, "x"));
}
END_TEST

/* Every prefix of a real code object: the reader never crashes, never succeeds on a file whose
 * section headers are cut off, and always explains itself in one line. */
START_TEST(truncated_every_length) {
  const struct hm_embedded_blob *b = blob("gfx950");
  size_t n = hm_embedded_size(b);
  unsigned char *buf = malloc(n);
  int ok = 0;
  for (size_t len = 0; len < n; len += (len < 4096 ? 1 : 7)) {
    memcpy(buf, b->data, len);
    hm_codeobj *co = NULL;
    hm_status s = hm_codeobj_parse(buf, len, &co);
    if (s == HM_OK) {
      ok++;
      hm_codeobj_free(co);
    } else {
      assert_one_line_error(s);
      ck_assert_ptr_null(co);
    }
  }
  ck_assert_int_eq(ok, 0);
  free(buf);
}
END_TEST

/* Seeded random damage: single bit flips and small overwrites anywhere in the file. */
START_TEST(bit_flips) {
  const struct hm_embedded_blob *b = blob("gfx942");
  size_t n = hm_embedded_size(b);
  unsigned char *buf = malloc(n);
  unsigned seed = 12345;
  int failures = 0;
  for (int i = 0; i < 3000; i++) {
    memcpy(buf, b->data, n);
    int edits = 1 + (int)(rand_r(&seed) % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = (size_t)rand_r(&seed) % n;
      if (rand_r(&seed) & 1) buf[at] ^= (unsigned char)(1u << (rand_r(&seed) % 8));
      else buf[at] = (unsigned char)rand_r(&seed);
    }
    hm_codeobj *co = NULL;
    hm_status s = hm_codeobj_parse(buf, n, &co);
    if (s == HM_OK) hm_codeobj_free(co);
    else {
      assert_one_line_error(s);
      failures++;
    }
  }
  ck_assert_int_gt(failures, 0);
  free(buf);
}
END_TEST

START_TEST(foreign_files) {
  hm_codeobj *co = NULL;
  /* this test program itself: an x86-64 ELF */
  ck_assert_int_eq(hm_codeobj_read_file("/proc/self/exe", &co, NULL, NULL), HM_ERR_FORMAT);
  ck_assert_msg(strstr(hm_errmsg(), "not an AMDGPU ELF") != NULL, "%s", hm_errmsg());
  const char text[] = "this is not a code object, just some text long enough to pass the size check......";
  ck_assert_int_eq(hm_codeobj_parse(text, sizeof text, &co), HM_ERR_FORMAT);
  ck_assert_msg(strstr(hm_errmsg(), "not an ELF") != NULL, "%s", hm_errmsg());
  ck_assert_int_eq(hm_codeobj_parse(text, 3, &co), HM_ERR_FORMAT);
  ck_assert_msg(strstr(hm_errmsg(), "truncated") != NULL, "%s", hm_errmsg());
}
END_TEST

/* Replace every occurrence of `from` with `to` (same length) in a copy of the object. */
static unsigned char *edited(const char *target, const char *from, const char *to, size_t *n) {
  const struct hm_embedded_blob *b = blob(target);
  *n = hm_embedded_size(b);
  unsigned char *buf = malloc(*n);
  memcpy(buf, b->data, *n);
  size_t fl = strlen(from);
  int hits = 0;
  for (size_t i = 0; i + fl <= *n; i++)
    if (memcmp(buf + i, from, fl) == 0) memcpy(buf + i, to, fl), hits++;
  ck_assert_int_gt(hits, 0);
  return buf;
}

START_TEST(edited_metadata) {
  size_t n;
  hm_codeobj *co = NULL;
  unsigned char *buf = edited("gfx950", "amdhsa.kernels", "amdhsa.kernelz", &n);
  ck_assert_int_eq(hm_codeobj_parse(buf, n, &co), HM_ERR_FORMAT);
  ck_assert_msg(strstr(hm_errmsg(), "amdhsa.kernels") != NULL, "%s", hm_errmsg());
  free(buf);
  buf = edited("gfx950", "amdhsa.target", "amdhsa.targex", &n);
  ck_assert_int_eq(hm_codeobj_parse(buf, n, &co), HM_ERR_FORMAT);
  ck_assert_ptr_null(co);
  free(buf);
}
END_TEST

START_TEST(missing_descriptor) {
  /* Rename the symbol only where it is NUL-terminated inside a string table (".kd\0"),
   * leaving the msgpack string (length-prefixed, no NUL) alone. */
  const struct hm_embedded_blob *b = blob("gfx942");
  size_t n = hm_embedded_size(b);
  unsigned char *buf = malloc(n);
  memcpy(buf, b->data, n);
  const char pat[] = "st_poll.kd"; /* with its NUL */
  int hits = 0;
  for (size_t i = 1; i + sizeof pat <= n; i++)
    if (memcmp(buf + i, pat, sizeof pat) == 0 && buf[i - 1] == 0) buf[i + 8] = 'x', hits++;
  ck_assert_int_gt(hits, 0);
  hm_codeobj *co = NULL;
  ck_assert_int_eq(hm_codeobj_parse(buf, n, &co), HM_ERR_FORMAT);
  ck_assert_msg(strstr(hm_errmsg(), "st_poll.kd") != NULL, "%s", hm_errmsg());
  free(buf);
}
END_TEST

START_TEST(target_ids) {
  hm_target_id a, b;
  ck_assert_int_eq(hm_target_id_parse("amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-", &a), HM_OK);
  ck_assert_str_eq(a.processor, "gfx950");
  ck_assert_int_eq(a.sramecc, HM_FEATURE_ON);
  ck_assert_int_eq(a.xnack, HM_FEATURE_OFF);
  ck_assert_int_eq(hm_target_id_parse("gfx950", &b), HM_OK);
  ck_assert_int_eq(b.sramecc, HM_FEATURE_ANY);
  ck_assert(hm_target_compatible(&b, &a));  /* unspecified features run anywhere */
  ck_assert(!hm_target_compatible(&a, &b)); /* sramecc+ needs an agent that has it on */
  ck_assert_int_eq(hm_target_id_parse("amdgcn-amd-amdhsa--gfx942:xnack+", &b), HM_OK);
  ck_assert(!hm_target_compatible(&b, &a)); /* other processor */
  ck_assert_int_eq(hm_target_id_parse("amdgcn-amd-amdhsa--gfx950:xnack+", &b), HM_OK);
  ck_assert(!hm_target_compatible(&b, &a)); /* xnack+ code on an xnack- agent */
  const char *bad[] = {"amdgcn-amd-amdhsa--", "amdgcn-amd-amdhsa", "gfx95z", "gfx950:foo+",
                       "gfx950:xnack", "gfx950:", "x86", "", "gfx950:sramecc+junk"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_one_line_error(hm_target_id_parse(bad[i], &b));
}
END_TEST

/* The pre-check that keeps msgpack-c from sizing allocations by forged counts (found by
 * fuzzing: an array32 claiming 2^31 elements made it ask for 128 GiB). */
START_TEST(msgpack_structure) {
  const unsigned char ok[] = {0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x92, 0xc3, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0};
  ck_assert(hm_msgpack_sane(ok, sizeof ok));
  ck_assert(!hm_msgpack_sane(ok, sizeof ok - 1)); /* truncated float64 */
  const unsigned char huge_array[] = {0xdd, 0x80, 0x00, 0x00, 0x00, 0x01};
  ck_assert(!hm_msgpack_sane(huge_array, sizeof huge_array));
  const unsigned char huge_map[] = {0xdf, 0x00, 0x01, 0x00, 0x00, 0x01, 0x02};
  ck_assert(!hm_msgpack_sane(huge_map, sizeof huge_map));
  const unsigned char huge_str[] = {0xdb, 0xff, 0xff, 0xff, 0xf0, 'x'};
  ck_assert(!hm_msgpack_sane(huge_str, sizeof huge_str));
  const unsigned char never_used[] = {0xc1};
  ck_assert(!hm_msgpack_sane(never_used, 1));
  unsigned char deep[40];
  memset(deep, 0x91, sizeof deep); /* 39 nested one-element arrays, then nil */
  deep[39] = 0xc0;
  ck_assert(!hm_msgpack_sane(deep, sizeof deep));
  ck_assert(hm_msgpack_sane(deep + 10, sizeof deep - 10)); /* 29 levels are fine */
  /* the fuzzer's find, in a whole code object: a format error, not an allocation */
  const char *dir = getenv("HSAMONO_FUZZ_CORPUS");
  if (dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/regress-msgpack-huge-array.co", dir);
    hm_codeobj *co = NULL;
    ck_assert_int_eq(hm_codeobj_read_file(path, &co, NULL, NULL), HM_ERR_FORMAT);
    ck_assert_msg(strstr(hm_errmsg(), "not valid msgpack") != NULL, "%s", hm_errmsg());
  }
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("codeobj");
  TCase *tc = tcase_create("reader");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, embedded_gfx950);
  tcase_add_test(tc, embedded_gfx942);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, truncated_every_length);
  tcase_add_test(tc, bit_flips);
  tcase_add_test(tc, foreign_files);
  tcase_add_test(tc, edited_metadata);
  tcase_add_test(tc, missing_descriptor);
  tcase_add_test(tc, target_ids);
  tcase_add_test(tc, msgpack_structure);
  suite_add_tcase(s, tc);
  return s;
}
