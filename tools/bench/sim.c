/* tools/bench/sim.c: hsa-mono-bench sim: how fast the software agent runs a full-size grid: 256
 * CTAs of 512 work-items through 10 CTA barriers (issue 4's bound: under 10 s on two cores). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "selftest/selftest.h"

static void usage(FILE *f) {
  fprintf(f, "usage: hsa-mono-bench sim [--ctas N] [--reps N]\n"
             "  seconds for N CTAs (default 256, 1..65536) x 512 work-items through 10 CTA barriers, best of\n"
             "  --reps runs (default 3, 1..1000), every work-item's result checked\n");
}

int bench_sim(int argc, char **argv) {
  static const struct option opts[] = {{"ctas", required_argument, 0, 'g'}, {"reps", required_argument, 0, 'n'},
                                       {"help", no_argument, 0, 'h'},      {0, 0, 0, 0}};
  cli cl = {.prog = "hsa-mono-bench sim", .usage = usage};
  long nc = 256, nr = 3;
  const unsigned rounds = 5;
  int o;
  optind = 1;
  while ((o = cli_next(&cl, argc, argv, opts)) != -1) {
    switch (o) {
      case 'g': cli_long(&cl, 1, 65536, &nc); break;
      case 'n': cli_long(&cl, 1, 1000, &nr); break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&cl, argc, argv)) return CLI_EXIT_MISUSE;
  const unsigned ctas = (unsigned)nc, reps = (unsigned)nr;
  hm_runtime *rt = bench_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_program *p;
  const hm_kernel *k;
  hm_queue *q;
  uint32_t *out;
  void *ka;
  hm_signal done;
  struct st_barrier_args args = {.rounds = rounds};
  if (!a || hm_program_load(a, &p) || hm_kernel_get(p, "st_barrier", &k) || hm_queue_create(a, 64, &q) ||
      hm_mem_alloc(a, HM_POOL_HOST, (size_t)ctas * 512 * 4, 0, (void **)&out) || hm_signal_create(rt, 1, &done)) {
    fprintf(stderr, "hsa-mono-bench sim: %s\n", hm_errmsg());
    return CLI_EXIT_NOT_RUN;
  }
  args.out = (uint64_t)(uintptr_t)out;
  if (hm_kernarg_new(a, &args, sizeof args, &ka)) return CLI_EXIT_NOT_RUN;
  hm_dispatch d = {.kernel = k, .ctas = ctas, .kernarg = ka, .completion = done, .barrier = true};
  printf("st_barrier: %u CTAs x 512 work-items, %u CTA barriers, on %s with %u CUs\n", ctas, 2 * rounds,
         hm_agent_info_of(a)->name, hm_agent_info_of(a)->cus);
  double best = 1e30;
  for (unsigned r = 0; r < reps; r++) {
    hm_signal_store(rt, done, 1);
    uint64_t t0 = bench_now_ns();
    if (hm_queue_dispatch(q, &d, 1) || hm_signal_wait(rt, done, HM_WAIT_EQ, 0, 600ull * 1000000000ull, false, NULL)) {
      fprintf(stderr, "hsa-mono-bench sim: %s\n", hm_errmsg());
      return CLI_EXIT_NOT_RUN;
    }
    double s = (double)(bench_now_ns() - t0) / 1e9;
    /* every work-item's checksum, recomputed on the host: a fast run must be a correct one */
    for (uint32_t c = 0; c < ctas; c++)
      for (uint32_t l = 0; l < 512; l++) {
        uint32_t acc = 0;
        for (uint32_t i = 0; i < rounds; i++) acc = acc * 3u + (((l * 7u + i + 1u) % 512u) * 31u + i * 7u + c);
        if (out[c * 512 + l] != acc) {
          fprintf(stderr, "hsa-mono-bench sim: wrong checksum at CTA %u work-item %u\n", c, l);
          return CLI_EXIT_FAILED;
        }
      }
    memset(out, 0, (size_t)ctas * 512 * 4);
    printf("  run %u: %.3f s (checked)\n", r + 1, s);
    if (s < best) best = s;
  }
  printf("best: %.3f s (%.1f M work-item barrier passes a second)\n", best, (double)ctas * 512 * 2 * rounds / best / 1e6);
  hm_runtime_close(rt);
  return 0;
}
