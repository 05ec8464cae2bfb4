/* tests/test_info.c: runs the hsa-mono-info tool as a user would: the embedded kernels pass its
 * checks, a spilling kernel fails them (exit 1), a damaged file is a one-line error (exit 2); the
 * agents and the GPU-to-NUMA-node map. */
#include <check.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Run the tool with argv; return its exit status, stdout and stderr (caller frees). */
static int run_tool(const char *const *args, char **out, char **err) {
  const char *bin = getenv("HSAMONO_INFO_BIN");
  ck_assert_msg(bin != NULL, "HSAMONO_INFO_BIN not set");
  char outp[] = "/tmp/hm-info-out-XXXXXX", errp[] = "/tmp/hm-info-err-XXXXXX";
  int fo = mkstemp(outp), fe = mkstemp(errp);
  ck_assert(fo >= 0 && fe >= 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fo, 1);
  posix_spawn_file_actions_adddup2(&fa, fe, 2);
  char *argv[16];
  int n = 0;
  argv[n++] = (char *)bin;
  for (; args[n - 1]; n++) argv[n] = (char *)args[n - 1];
  argv[n] = NULL;
  pid_t pid;
  ck_assert_int_eq(posix_spawn(&pid, bin, &fa, NULL, argv, environ), 0);
  int st;
  waitpid(pid, &st, 0);
  posix_spawn_file_actions_destroy(&fa);
  char **dst[2] = {out, err};
  int fds[2] = {fo, fe};
  for (int i = 0; i < 2; i++) {
    off_t len = lseek(fds[i], 0, SEEK_END);
    char *buf = calloc(1, (size_t)len + 1);
    ck_assert(pread(fds[i], buf, (size_t)len, 0) == len);
    *dst[i] = buf;
    close(fds[i]);
  }
  unlink(outp);
  unlink(errp);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

START_TEST(embedded_kernels_pass) {
  char *out, *err;
  const char *args[] = {"--kernels", NULL};
  int rc = run_tool(args, &out, &err);
  ck_assert_msg(rc == 0, "exit %d\n%s%s", rc, out, err);
  ck_assert_ptr_nonnull(strstr(out, "embedded gfx950"));
  ck_assert_ptr_nonnull(strstr(out, "embedded gfx942"));
  ck_assert_ptr_nonnull(strstr(out, "st_barrier"));
  /* the FFN launch, K1, keylist and K2 are built for gfx942 too (issue 13), their resources within
   * the rules (no FAIL line below) */
  const char *g942 = strstr(out, "embedded gfx942"), *next = strstr(g942 + 1, "embedded ");
  const char *const built[] = {"\n  ffn ", "\n  k1 ", "\n  keylist ", "\n  k2 "};
  for (unsigned i = 0; i < 4; i++) {
    const char *k = strstr(g942, built[i]);
    ck_assert_msg(k && (!next || k < next), "no%s kernel for gfx942", built[i] + 3);
  }
  ck_assert_ptr_null(strstr(out, "FAIL"));
  free(out), free(err);
}
END_TEST

START_TEST(spilling_kernel_fails) {
  char *out, *err;
  const char *args[] = {"--kernels", "--code-object", getenv("HSAMONO_SPILL_CO"), NULL};
  int rc = run_tool(args, &out, &err);
  ck_assert_msg(rc == 1, "exit %d\n%s%s", rc, out, err);
  ck_assert_ptr_nonnull(strstr(out, "FAIL: spills spills registers"));
  ck_assert_ptr_nonnull(strstr(out, "FAIL: spills uses scratch"));
  free(out), free(err);
}
END_TEST

START_TEST(damaged_file_is_one_line_error) {
  /* the spill fixture cut in half */
  FILE *f = fopen(getenv("HSAMONO_SPILL_CO"), "rb");
  ck_assert_ptr_nonnull(f);
  char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  char path[] = "/tmp/hm-info-bad-XXXXXX";
  int fd = mkstemp(path);
  ck_assert(write(fd, buf, n / 2) == (ssize_t)(n / 2));
  close(fd);
  char *out, *err;
  const char *args[] = {"--kernels", "--code-object", path, NULL};
  int rc = run_tool(args, &out, &err);
  unlink(path);
  ck_assert_msg(rc == 2, "exit %d\n%s%s", rc, out, err);
  ck_assert_ptr_nonnull(strstr(err, "code object"));
  ck_assert_msg(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);
  free(out), free(err);
  /* no such file, and bad usage */
  const char *args2[] = {"--kernels", "--code-object", "/nonexistent.co", NULL};
  ck_assert_int_eq(run_tool(args2, &out, &err), 2);
  free(out), free(err);
  const char *args3[] = {"--bogus", NULL};
  ck_assert_int_eq(run_tool(args3, &out, &err), 2);
  free(out), free(err);
}
END_TEST

START_TEST(agents_listing) {
  char *out, *err;
  const char *args[] = {NULL};
  int rc = run_tool(args, &out, &err);
  ck_assert_msg(rc == 0, "exit %d\n%s%s", rc, out, err);
  ck_assert_ptr_nonnull(strstr(out, "GPU agent 0: amdgcn-amd-amdhsa--gfx9"));
  ck_assert_ptr_nonnull(strstr(out, "pools: coarse"));
  ck_assert_ptr_nonnull(strstr(out, "uncached"));
  ck_assert_ptr_nonnull(strstr(out, "CUs x 4 SIMDs, wave64"));
  free(out), free(err);
}
END_TEST

/* The GPU-to-NUMA-node map on a software agent of 4 GPUs over 2 nodes: GPUs 0 and 1 beside CPU
 * agent 0 (node 0), GPUs 2 and 3 beside CPU agent 1 (node 1), each one PCIe hop (distance 20). */
START_TEST(numa_map) {
  setenv("HSAMONO_RUNTIME", "sim", 1);
  setenv("HSAMONO_SIM_AGENTS", "4", 1);
  setenv("HSAMONO_SIM_NUMA_NODES", "2", 1);
  char *out, *err;
  const char *args[] = {NULL};
  int rc = run_tool(args, &out, &err);
  ck_assert_msg(rc == 0, "exit %d\n%s%s", rc, out, err);
  const char *want[] = {"CPU agents: 2\n", "CPU agent 0: cpu, NUMA node 0\n", "CPU agent 1: cpu, NUMA node 1\n",
                        "GPU -> NUMA node", "  GPU 0 -> node 0 (CPU agent 0, distance 20)\n",
                        "  GPU 1 -> node 0 (CPU agent 0, distance 20)\n",
                        "  GPU 2 -> node 1 (CPU agent 1, distance 20)\n",
                        "  GPU 3 -> node 1 (CPU agent 1, distance 20)\n"};
  for (unsigned i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(out, want[i]), "no \"%s\" in:\n%s", want[i], out);
  free(out), free(err);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("info");
  TCase *tc = tcase_create("hsa-mono-info");
  tcase_add_test(tc, embedded_kernels_pass);
  tcase_add_test(tc, spilling_kernel_fails);
  tcase_add_test(tc, damaged_file_is_one_line_error);
  tcase_add_test(tc, agents_listing);
  tcase_add_test(tc, numa_map);
  suite_add_tcase(s, tc);
  return s;
}
