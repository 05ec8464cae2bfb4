/* tools/bench/host.c: hsa-mono-bench host: the host-side cost of writing one dispatch packet and of
 * replaying a recorded chain, and of a step's pointer checks, in nanoseconds and, under callgrind,
 * in instructions, allocations and system calls (goal: under 200 ns, nothing but the doorbell
 * store beyond plain stores). */
#include <getopt.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "selftest/selftest.h"

struct setup {
  hm_runtime *rt;
  hm_agent *a;
  const hm_kernel *k;
  void *kernarg;
  uint32_t *counter;
};

static void die(const char *what) {
  fprintf(stderr, "hsa-mono-bench host: %s: %s\n", what, hm_errmsg());
  exit(CLI_EXIT_NOT_RUN);
}

static void setup(struct setup *s) {
  s->rt = bench_open();
  s->a = hm_agent_get(s->rt, 0);
  hm_program *p;
  if (!s->a || hm_program_load(s->a, &p) || hm_kernel_get(p, "st_count", &s->k)) die("loading st_count");
  if (hm_mem_alloc(s->a, HM_POOL_HOST, 64, 0, (void **)&s->counter)) die("allocating");
  s->counter[0] = 0;
  struct st_count_args args = {.counter = (uint64_t)(uintptr_t)s->counter};
  if (hm_kernarg_new(s->a, &args, sizeof args, &s->kernarg)) die("kernel arguments");
}

/* N single-packet dispatches behind a barrier packet that holds the queue, so the agent executes
 * nothing while they are written: the time is the host's alone. */
static double time_dispatch(struct setup *s, unsigned n) {
  hm_queue *q;
  if (hm_queue_create(s->a, 131072, &q)) die("queue");
  hm_signal gate;
  if (hm_signal_create(s->rt, 1, &gate)) die("signal");
  hm_barrier_pkt hold = {.deps = {gate}};
  if (hm_queue_barrier(q, &hold)) die("barrier");
  hm_dispatch d = {.kernel = s->k, .ctas = 1, .kernarg = s->kernarg, .acquire = HM_FENCE_AGENT,
                   .release = HM_FENCE_AGENT};
  uint64_t t0 = bench_now_ns();
  for (unsigned i = 0; i < n; i++)
    if (hm_queue_dispatch(q, &d, 1)) die("dispatch");
  uint64_t t1 = bench_now_ns();
  hm_signal_store(s->rt, gate, 0);
  if (hm_queue_wait_idle(q, 600ull * 1000000000ull)) die("waiting for the dispatches");
  if (s->counter[0] < n) {
    fprintf(stderr, "hsa-mono-bench host: only %u of %u dispatches ran\n", s->counter[0], n);
    exit(CLI_EXIT_FAILED);
  }
  hm_queue_destroy(q);
  return (double)(t1 - t0) / n;
}

/* A chain of 8 dispatches on a 64-packet queue, replayed R times; each replay is timed alone
 * with the agent idle (the chain is waited for between replays), and after 8 replays every one
 * rewrites headers only. */
static double time_chain(struct setup *s, unsigned r, unsigned *full_writes) {
  hm_queue *q;
  hm_chain *c;
  if (hm_queue_create(s->a, 64, &q) || hm_chain_create(q, &c)) die("queue");
  hm_dispatch d = {.kernel = s->k, .ctas = 1, .kernarg = s->kernarg, .barrier = true};
  for (int i = 0; i < 8; i++)
    if (hm_chain_add_dispatch(c, &d)) die("chain");
  uint64_t total = 0;
  *full_writes = 0;
  for (unsigned i = 0; i < r + 8; i++) {
    uint64_t t0 = bench_now_ns();
    if (hm_chain_replay(c)) die("replay");
    uint64_t t1 = bench_now_ns();
    if (i >= 8) total += t1 - t0, *full_writes += hm_chain_last_full_writes(c);
    if (hm_chain_wait(c, 600ull * 1000000000ull)) die("chain wait");
  }
  hm_chain_destroy(c);
  hm_queue_destroy(q);
  return (double)total / r;
}

/* A step's pointer checks (hm_mem_check, as every step entry point makes them before its launch):
 * 12 tensors of 4 KiB, among `table` allocations of the runtime (a deployment's weights, buffers
 * and caches), checked n times. */
static double time_check(struct setup *s, unsigned n, unsigned table) {
  void **p = calloc(table, sizeof *p);
  if (!p) die("out of memory");
  for (unsigned i = 0; i < table; i++)
    if (hm_mem_alloc(s->a, HM_POOL_COARSE, 4096, 0, &p[i])) die("allocating");
  hm_mem_need t[12];
  for (unsigned i = 0; i < 12; i++)
    t[i] = (hm_mem_need){"tensor", p[(i * 97u) % table], 4096, HM_MEM_DEVICE};
  uint64_t t0 = bench_now_ns();
  for (unsigned i = 0; i < n; i++)
    if (hm_mem_check(s->a, "bench", t, 12)) die("hm_mem_check");
  uint64_t t1 = bench_now_ns();
  for (unsigned i = 0; i < table; i++) hm_mem_free(s->rt, p[i]);
  free(p);
  return (double)(t1 - t0) / n;
}

/* ---------------------------------------------------------------- callgrind */

struct cg_result {
  unsigned long long ir;
  unsigned long long allocs;   /* calls to malloc, calloc, realloc, free */
  unsigned long long syscalls; /* calls to the syscall wrappers */
  char syscall_from[256];
};

/* Totals and call counts from a callgrind output file (collection was on only inside the
 * function measured, so everything recorded happened within it). */
static int parse_callgrind(const char *path, struct cg_result *r) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  memset(r, 0, sizeof *r);
  static char names[65536][64];
  char line[4096], cur_fn[64] = "", callee[64] = "";
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "summary:", 8) || !strncmp(line, "totals:", 7)) {
      unsigned long long v = strtoull(strchr(line, ':') + 1, NULL, 10);
      if (v > r->ir) r->ir = v;
    } else if (!strncmp(line, "fn=", 3) || !strncmp(line, "cfn=", 4)) {
      char *p = strchr(line, '=') + 1, *name = p;
      long id = -1;
      if (*p == '(') {
        id = strtol(p + 1, &name, 10);
        name = strchr(name, ')') + 1;
        while (*name == ' ') name++;
      }
      name[strcspn(name, "\n")] = 0;
      if (id >= 0 && id < 65536 && *name) snprintf(names[id], sizeof names[id], "%s", name);
      const char *n = (id >= 0 && id < 65536) ? names[id] : name;
      if (line[0] == 'f') snprintf(cur_fn, sizeof cur_fn, "%s", n);
      else snprintf(callee, sizeof callee, "%s", n);
    } else if (!strncmp(line, "calls=", 6) && callee[0]) {
      unsigned long long n = strtoull(line + 6, NULL, 10);
      if (!strcmp(callee, "malloc") || !strcmp(callee, "calloc") || !strcmp(callee, "realloc") ||
          !strcmp(callee, "free"))
        r->allocs += n;
      if (strstr(callee, "syscall") || strstr(callee, "futex") || !strcmp(callee, "write") || !strcmp(callee, "read")) {
        r->syscalls += n;
        if (!strstr(r->syscall_from, cur_fn) && strlen(r->syscall_from) + strlen(cur_fn) + 3 < sizeof r->syscall_from)
          strcat(strcat(r->syscall_from, r->syscall_from[0] ? ", " : ""), cur_fn);
      }
      callee[0] = 0;
    }
  }
  fclose(f);
  return r->ir ? 0 : -1;
}

/* Run this program's `host --inner WHAT N` under callgrind, collecting inside `fn` only: 0, -1
 * when valgrind cannot be started (not installed), -2 when its run failed (its own message, on
 * stderr, says why). */
static int callgrind(const char *self, const char *what, const char *fn, unsigned n, struct cg_result *r) {
  char out[64], toggle[128], count[32];
  snprintf(out, sizeof out, "/tmp/hsamono-callgrind.%d.%s", (int)getpid(), what);
  snprintf(toggle, sizeof toggle, "--toggle-collect=%s", fn);
  snprintf(count, sizeof count, "%u", n);
  char outarg[96];
  snprintf(outarg, sizeof outarg, "--callgrind-out-file=%s", out);
  char *argv[] = {"valgrind", "--tool=callgrind", "--collect-atstart=no", toggle, outarg, "-q",
                  (char *)self, "host", "--inner", (char *)what, count, NULL};
  extern char **environ;
  setenv("HSAMONO_BENCH_IN_CALLGRIND", "1", 1);
  pid_t pid;
  if (posix_spawnp(&pid, "valgrind", NULL, NULL, argv, environ) != 0) return -1;
  int st;
  waitpid(pid, &st, 0);
  int rc = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? parse_callgrind(out, r) : -1;
  unlink(out);
  return rc ? -2 : 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: hsa-mono-bench host [--packets N] [--replays N] [--no-callgrind]\n"
             "  ns to write N dispatch packets (default 20000, 1..100000) and to replay a recorded chain N times\n"
             "  (default 2000), and under callgrind their instructions, allocations and system calls\n");
}

int bench_host(int argc, char **argv) {
  unsigned packets = 20000, replays = 2000;
  int use_cg = 1;
  if (argc >= 4 && !strcmp(argv[1], "--inner")) {
    /* the measured run inside callgrind */
    struct setup s;
    setup(&s);
    unsigned n = (unsigned)strtoul(argv[3], NULL, 10), full;
    if (!strcmp(argv[2], "dispatch")) time_dispatch(&s, n);
    else if (!strcmp(argv[2], "check")) time_check(&s, n, 1000);
    else time_chain(&s, n, &full);
    hm_runtime_close(s.rt);
    return 0;
  }
  static const struct option opts[] = {{"packets", required_argument, 0, 'p'},
                                       {"replays", required_argument, 0, 'r'},
                                       {"no-callgrind", no_argument, 0, 'n'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  cli cl = {.prog = "hsa-mono-bench host", .usage = usage};
  long np = packets, nr = replays;
  int c;
  optind = 1;
  while ((c = cli_next(&cl, argc, argv, opts)) != -1) {
    switch (c) {
      case 'p': cli_long(&cl, 1, 100000, &np); break;
      case 'r': cli_long(&cl, 1, 10000000, &nr); break;
      case 'n': use_cg = 0; break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&cl, argc, argv)) return CLI_EXIT_MISUSE;
  packets = (unsigned)np, replays = (unsigned)nr;
  struct setup s;
  setup(&s);
  double ns_d = time_dispatch(&s, packets);
  unsigned full = 0;
  double ns_c = time_chain(&s, replays, &full);
  double ns_k = time_check(&s, replays * 10, 1000);
  printf("dispatch packet (hm_queue_dispatch, 1 packet, 1 doorbell): %8.1f ns   (%u packets)\n", ns_d, packets);
  printf("chain replay (8 packets, headers only, 1 doorbell):       %8.1f ns = %.1f ns a packet   (%u replays, %u full rewrites)\n",
         ns_c, ns_c / 8, replays, full);
  printf("step pointer checks (hm_mem_check, 12 tensors, 1000 allocations): %8.1f ns = %.1f ns a tensor\n", ns_k,
         ns_k / 12);
  hm_runtime_close(s.rt);
  if (!use_cg) return 0;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 0;
  self[n] = 0;
  struct cg_result rd, rc, rk;
  unsigned cg_packets = 2000, cg_replays = 200, cg_checks = 2000;
  int cg = callgrind(self, "dispatch", "hm_queue_dispatch", cg_packets, &rd);
  if (!cg) cg = callgrind(self, "chain", "hm_chain_replay", cg_replays, &rc);
  if (!cg) cg = callgrind(self, "check", "hm_mem_check", cg_checks, &rk);
  if (cg == -1) {
    printf("# callgrind not available (apt-get install valgrind): no instruction counts\n");
    return 0;
  }
  if (cg) {
    printf("# the callgrind run failed (valgrind's message is on stderr): no instruction counts\n");
    return CLI_EXIT_NOT_RUN;
  }
  printf("callgrind, dispatch packet: %7.0f instructions, %.2f allocations, %.2f system calls a packet%s%s%s\n",
         (double)rd.ir / cg_packets, (double)rd.allocs / cg_packets, (double)rd.syscalls / cg_packets,
         rd.syscalls ? " (from " : "", rd.syscall_from, rd.syscalls ? ")" : "");
  printf("callgrind, chain replay:    %7.0f instructions (%.0f a packet), %.2f allocations, %.2f system calls a replay%s%s%s\n",
         (double)rc.ir / cg_replays, (double)rc.ir / cg_replays / 8, (double)rc.allocs / cg_replays,
         (double)rc.syscalls / cg_replays, rc.syscalls ? " (from " : "", rc.syscall_from, rc.syscalls ? ")" : "");
  printf("callgrind, step pointer checks: %7.0f instructions (%.0f a tensor), %.2f allocations, %.2f system calls a "
         "step\n",
         (double)rk.ir / cg_checks, (double)rk.ir / cg_checks / 12, (double)rk.allocs / cg_checks,
         (double)rk.syscalls / cg_checks);
  if (rd.syscalls || rc.syscalls)
    printf("# sim_signal_changed is the software agent's doorbell (and signal) store: it wakes its sleeping\n"
           "# packet processor with a futex. ROCr's doorbell is a store to the queue's doorbell page.\n");
  return 0;
}
