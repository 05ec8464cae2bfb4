/* tools/bench/bench.h: what hsa-mono-bench's subcommands share: the table they register in,
 * opening the runtime with the notice of what was measured, and a few timing helpers. */
#ifndef HM_BENCH_H
#define HM_BENCH_H

#include <stdint.h>

#include "hm_hsa.h"

/* One subcommand: name, one-line summary, and its main (argv[0] is the subcommand's name). */
struct bench_cmd {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv);
};

int bench_host(int argc, char **argv);
int bench_sim(int argc, char **argv);
int bench_allreduce(int argc, char **argv);
int bench_ffn(int argc, char **argv);
int bench_k1(int argc, char **argv);

/* Open the runtime HSAMONO_RUNTIME selects and print one line saying which, so no software-agent
 * figure is read as a GPU figure. Exits the process with a message on failure. */
hm_runtime *bench_open(void);
uint64_t bench_now_ns(void);
/* Whether this process runs under valgrind (callgrind counts instead of nanoseconds). */
int bench_under_valgrind(void);

#endif /* HM_BENCH_H */
