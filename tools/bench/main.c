/* tools/bench/main.c: hsa-mono-bench, the benchmark tool: one subcommand a part of the project;
 * every figure says whether it was taken on a GPU or on the software agent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static const struct bench_cmd cmds[] = {
    {"host", "host-side cost of a dispatch and of a replayed chain: ns and instructions", bench_host},
    {"sim", "the software agent's speed: 256 CTAs x 512 work-items with 10 barriers", bench_sim},
    {"ffn", "µs a step of the FFN launch, the bytes it must read and the HBM floor (--tp N --rows R)", bench_ffn},
    {"k1", "µs a step of K1 (attention seam + front), the bytes it must read and the HBM floor", bench_k1},
    {"layer", "µs a whole layer step (K1 -> [select -> keylist] -> K2), the bytes it must read and the HBM floor",
     bench_layer},
    {"model", "µs a layer of each kind and their sum as a model step, bytes and the HBM floor", bench_model},
    {"allreduce", "µs a step of the peer all-reduce by size, beside the xGMI floor (--tp N --rows R)", bench_allreduce},
};

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int bench_under_valgrind(void) {
  const char *p = getenv("LD_PRELOAD");
  return (p && strstr(p, "valgrind")) || getenv("HSAMONO_BENCH_IN_CALLGRIND") != NULL;
}

hm_runtime *bench_open(void) {
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt) != HM_OK) {
    fprintf(stderr, "hsa-mono-bench: %s\n", hm_errmsg());
    exit(CLI_EXIT_NOT_RUN);
  }
  if (hm_runtime_is_sim(rt))
    printf("# on the SOFTWARE AGENT (%s): times are CPU times, not GPU times\n", hm_runtime_describe(rt));
  else
    printf("# on %s\n", hm_runtime_describe(rt));
  return rt;
}

int bench_rows(cli *c, uint32_t *rows, unsigned max, unsigned *n) {
  long v[16];
  unsigned k;
  if (!cli_list(c, 1, HM_MAX_ROWS, v, max < 16 ? max : 16, &k)) return 0;
  for (unsigned i = 0; i < k; i++) rows[i] = (uint32_t)v[i];
  *n = k;
  return 1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: hsa-mono-bench <command> [options]   (command --help for its options)\n\n");
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "%s: a command is required\n", "hsa-mono-bench");
    usage(stderr);
    return CLI_EXIT_MISUSE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
    if (!strcmp(argv[1], cmds[i].name)) return cmds[i].main(argc - 1, argv + 1);
  fprintf(stderr, "hsa-mono-bench: no command '%s'\n", argv[1]);
  usage(stderr);
  return CLI_EXIT_MISUSE;
}
