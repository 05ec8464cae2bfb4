/* tests/layer/test_st_corpus.c: replays the safetensors fuzzing corpus (tests/fuzz/corpus-safetensors)
 * through the reader; built once normally and once with AddressSanitizer and UBSan. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_safetensors.h"

/* Every file opens to an index whose tensors all read back inside the mapping, or is refused with
 * a one-line message and no object; the seeds must open and the regressions (inputs that once
 * got through, or that name a refusal this reader must keep making) must not. */
START_TEST(replay_corpus) {
  const char *dir = getenv("HSAMONO_ST_CORPUS");
  ck_assert_msg(dir != NULL, "HSAMONO_ST_CORPUS not set");
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  struct dirent *e;
  int files = 0, opened = 0, seeds = 0, regressions = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    hm_st_file *f = NULL;
    hm_status s = hm_st_open(path, &f);
    files++;
    if (s == HM_OK) {
      opened++;
      for (uint32_t i = 0; i < hm_st_count(f); i++) {
        const void *p;
        uint64_t nbytes;
        if (hm_st_get(f, hm_st_name(f, i), NULL, NULL, NULL, &p, &nbytes) != HM_OK) continue;
        volatile uint8_t sink = 0; /* ASan: the first and last byte lie inside the mapping */
        if (nbytes) sink ^= ((const uint8_t *)p)[0] ^ ((const uint8_t *)p)[nbytes - 1];
        (void)sink;
      }
      hm_st_close(f);
    } else {
      ck_assert_msg(hm_errmsg()[0] && !strchr(hm_errmsg(), '\n'), "%s: bad message", e->d_name);
      ck_assert_ptr_null(f);
    }
    if (strncmp(e->d_name, "seed-", 5) == 0) seeds++, ck_assert_msg(s == HM_OK, "%s: %s", e->d_name, hm_errmsg());
    if (strncmp(e->d_name, "regress-", 8) == 0) regressions++, ck_assert_msg(s != HM_OK, "%s opened", e->d_name);
  }
  closedir(d);
  ck_assert_int_ge(seeds, 3);
  ck_assert_int_ge(regressions, 3);
  ck_assert_int_gt(files, opened);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("st-corpus");
  TCase *tc = tcase_create("replay");
  tcase_add_test(tc, replay_corpus);
  suite_add_tcase(s, tc);
  return s;
}
