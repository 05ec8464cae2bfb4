/* examples/serve_procs.c: the same deployment a process a rank, as a stack with one worker process a GPU
 * runs it: each rank opens its own runtime and bootstraps the heap over the library's Unix socket. */
#define _POSIX_C_SOURCE 200809L /* posix_spawn, mkdtemp, waitpid under -std=c11 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "serve_rank.h"

extern char **environ;

/* the same plan on every rank: layers 3-5 of the tiny config (REUSE layers: recordable) */
static const serve_plan plan = {.tp = 2, .first_layer = 3, .layers = 3, .steps = 3, .replays = 2, .rows = 4,
                                .reqs = 2, .ctx = 300, .seed = 1};

/* A rank: its own runtime (one a process), the rendezvous at path, the deployment. */
static int rank_main(uint32_t rank, uint32_t tp, const char *path) {
  serve_plan p = plan;
  p.tp = tp;
  hm_runtime *rt;
  hm_status s = hm_runtime_open(NULL, &rt);
  if (s) {
    fprintf(stderr, "serve rank %u: runtime: %s: %s\n", rank, hm_status_name(s), hm_errmsg());
    return SERVE_FAIL;
  }
  if (rank == 0) printf("serve: libhsamono %s on %s, TP%u as processes\n", hm_version(), hm_runtime_describe(rt), tp);
  hm_bootstrap b;
  if ((s = hm_bootstrap_unix(path, &b))) {
    fprintf(stderr, "serve rank %u: bootstrap at %s: %s: %s\n", rank, path, hm_status_name(s), hm_errmsg());
    hm_runtime_close(rt);
    return SERVE_FAIL;
  }
  int rc = serve_rank(&p, rt, rank, &b, NULL);
  hm_runtime_close(rt);
  if (rc == SERVE_OK && rank == 0) printf("serve: rank 0 PASS\n");
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "--rank"))
    return rank_main((uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[3]), argv[4]);
  uint32_t tp = plan.tp;
  if (argc > 1) tp = (uint32_t)atoi(argv[1]);
  if (argc > 2 || tp < 1 || tp > HM_LAYER_MAX_TP) {
    fprintf(stderr, "usage: serve_procs [TP (1-%d, default %u)]\n", HM_LAYER_MAX_TP, plan.tp);
    return 2;
  }
  /* the launcher opens no runtime: it only starts the ranks (posix_spawn, since an HSA library does
   * not survive fork) and waits for them; the socket lives in a private directory */
  const char *tmp = getenv("TMPDIR");
  char dir[256], path[300], tps[16];
  snprintf(dir, sizeof dir, "%s/serve-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "serve: mkdtemp %s: %s\n", dir, strerror(errno));
    return 1;
  }
  snprintf(path, sizeof path, "%s/rendezvous", dir);
  snprintf(tps, sizeof tps, "%u", tp);
  pid_t pid[HM_LAYER_MAX_TP];
  uint32_t started = 0;
  for (; started < tp; started++) {
    char rs[16];
    snprintf(rs, sizeof rs, "%u", started);
    char *args[] = {argv[0], "--rank", rs, tps, path, NULL};
    int e = posix_spawn(&pid[started], "/proc/self/exe", NULL, NULL, args, environ);
    if (e) {
      fprintf(stderr, "serve: cannot start rank %u: %s\n", started, strerror(e));
      break;
    }
  }
  /* a rank that never starts is named by the others' bootstrap within its bound */
  int fail = started < tp, skip = 0;
  for (uint32_t r = 0; r < started; r++) {
    int st;
    if (waitpid(pid[r], &st, 0) < 0) {
      fprintf(stderr, "serve: waitpid rank %u: %s\n", r, strerror(errno));
      fail = 1;
      continue;
    }
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (code == SERVE_SKIP) skip = 1;
    else if (code) {
      fprintf(stderr, "serve: rank %u exited with %d\n", r, code);
      fail = 1;
    }
  }
  unlink(path); /* rank 0 removes it once every rank connected; not if the rendezvous failed */
  if (rmdir(dir)) fprintf(stderr, "serve: rmdir %s: %s\n", dir, strerror(errno));
  if (fail) return 1;
  if (skip) return SERVE_SKIP;
  printf("serve: PASS (%u ranks as processes)\n", tp);
  return 0;
}
