/* tools/bench/bench.h: what hsa-mono-bench's subcommands share: the table they register in,
 * opening the runtime with the notice of what was measured, and a few timing helpers. */
#ifndef HM_BENCH_H
#define HM_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "../cli.h"
#include "hm_config.h"
#include "hm_hsa.h"
#include "hm_weights.h"

/* MI355X (spec/performance.md): 8.0 TB/s peak HBM, ~7.2 TB/s measured streaming: the floors the
 * launch benches set a step's bytes against */
#define BENCH_HBM_PEAK 8.0e12
#define BENCH_HBM_REAL 7.2e12
/* MI300X (gfx942, the same file): 5.3 TB/s peak, ~3.9-4.2 TB/s measured streaming (the top of the
 * range, as 7.2 is MI355X's); issue 13's goal is 1.5x of the peak's floor */
#define BENCH_HBM_PEAK_GFX942 5.3e12
#define BENCH_HBM_REAL_GFX942 4.2e12

/* The part an arch's launches are set against: its name and HBM floors (B/s), one place for both
 * launch benches that take --arch. */
typedef struct bench_part {
  const char *name;
  double peak, real;
} bench_part;
static inline bench_part bench_part_of(hm_arch arch) {
  return arch == HM_ARCH_GFX942 ? (bench_part){"MI300X", BENCH_HBM_PEAK_GFX942, BENCH_HBM_REAL_GFX942}
                                : (bench_part){"MI355X", BENCH_HBM_PEAK, BENCH_HBM_REAL};
}

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
int bench_layer(int argc, char **argv);
int bench_model(int argc, char **argv);

/* Open the runtime HSAMONO_RUNTIME selects and print one line saying which, so no software-agent
 * figure is read as a GPU figure. Exits the process with a message on failure. */
hm_runtime *bench_open(void);
uint64_t bench_now_ns(void);
/* Whether this process runs under valgrind (callgrind counts instead of nanoseconds). */
int bench_under_valgrind(void);

/* --rows: a comma-separated list of at most max (16) row counts, each 1..HM_MAX_ROWS (cli_list): 1
 * and rows[0..*n), or 0 with c refused. */
int bench_rows(cli *c, uint32_t *rows, unsigned max, unsigned *n);

/* One whole layer's figures at one width (bench/layer.c): µs a step on rank 0, the bytes a rank must
 * read (K1's, the FFN half's of the experts it chose, the attention back's of the step's keys), the
 * distinct experts it chose. */
typedef struct bench_tl bench_tl; /* timeline.h */
typedef struct bench_layer_row {
  uint32_t rows;
  double us;
  uint64_t bytes;
  uint32_t experts;
} bench_layer_row;

/* Times whole steps of layer cfg (generated weights of seed, its kind's parts) on a TP group of tp on
 * rt in arch's layouts (gfx942: its copies and FNUZ SWA records): for each of rows[0..nrows), one warm-up step and `steps` timed ones of a generated step of that
 * many rows (one request, past the window) into out[]. reduced: cfg's routing is not the model's;
 * ctas: the grid (0: launch_tool_grid's). tl: NULL, or where each rank's last K1 and K2 timelines of
 * each width go (--timeline). 0, or 1 with the error printed. */
typedef struct bench_tm_row bench_tm_row; /* tmodel.h */
typedef struct hm_part hm_part;           /* hm_model.h */
int bench_layer_time(hm_runtime *rt, const hm_layer_config *cfg, bool reduced, uint32_t tp, hm_arch arch,
                     const uint32_t *rows, unsigned nrows, uint32_t steps, uint64_t seed, long ctas, bench_tl *tl, bench_layer_row *out);
/* The same, and with part non-NULL one more step of each width traced and replayed on it into mrows[i]
 * (--model; the rows' names from K1's and K2's timelines). */
int bench_layer_time_model(hm_runtime *rt, const hm_layer_config *cfg, bool reduced, uint32_t tp, hm_arch arch,
                           const uint32_t *rows, unsigned nrows, uint32_t steps, uint64_t seed, long ctas, bench_tl *tl, bench_layer_row *out,
                           const hm_part *part, bench_tm_row *mrows);

#endif /* HM_BENCH_H */
