/* tests/check_main.c: the main() every Check suite shares: runs the suite the test file builds
 * (hm_test_suite); `--child ...` runs the file's hm_test_child instead (a second process). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

Suite *hm_test_suite(void);
/* Tests that need a second, freshly started process (IPC) define this and re-run their own
 * binary with --child; HSA libraries do not survive fork() alone. */
__attribute__((weak)) int hm_test_child(int argc, char **argv);

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return hm_test_child ? hm_test_child(argc - 2, argv + 2) : 2;
  SRunner *sr = srunner_create(hm_test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
