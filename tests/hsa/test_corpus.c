/* tests/test_corpus.c: replays the fuzzing corpus (tests/fuzz/corpus) through the code-object
 * reader; built once normally and once with AddressSanitizer and UBSan. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_codeobj.h"

START_TEST(replay_corpus) {
  const char *dir = getenv("HSAMONO_FUZZ_CORPUS");
  ck_assert_msg(dir != NULL, "HSAMONO_FUZZ_CORPUS not set");
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  struct dirent *e;
  int files = 0, parsed = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    hm_codeobj *co = NULL;
    hm_status s = hm_codeobj_read_file(path, &co, NULL, NULL);
    files++;
    if (s == HM_OK) {
      parsed++;
      hm_codeobj_free(co);
    } else {
      ck_assert_msg(hm_errmsg()[0] && !strchr(hm_errmsg(), '\n'), "%s: bad message", e->d_name);
      ck_assert_ptr_null(co);
    }
    /* the seeds are valid code objects, the regressions are not */
    if (strncmp(e->d_name, "seed-", 5) == 0) ck_assert_msg(s == HM_OK, "%s: %s", e->d_name, hm_errmsg());
    if (strncmp(e->d_name, "regress-", 8) == 0) ck_assert_msg(s != HM_OK, "%s parsed", e->d_name);
  }
  closedir(d);
  ck_assert_int_gt(files, 2);
  ck_assert_int_gt(parsed, 0);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("corpus");
  TCase *tc = tcase_create("replay");
  tcase_add_test(tc, replay_corpus);
  suite_add_tcase(s, tc);
  return s;
}
