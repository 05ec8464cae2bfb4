/* tests/check_main.c: the main() every Check suite shares: runs the suite the test file
 * builds (hm_test_suite) and exits non-zero on any failure. */
#include <check.h>
#include <stdlib.h>

Suite *hm_test_suite(void);

int main(void) {
  SRunner *sr = srunner_create(hm_test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
