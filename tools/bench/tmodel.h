/* tools/bench/tmodel.h: hsa-mono-bench's --model PART: one step of a launch traced on the software agent
 * and replayed by the timing model (tools/model/), a row a row count and its critical path. */
#ifndef HM_BENCH_TMODEL_H
#define HM_BENCH_TMODEL_H

#include <stdint.h>

#include "../cli.h"
#include "hm_hsa.h"
#include "hm_model.h"

#define BENCH_TM_USAGE "[--model mi355x|mi300x [--trace FILE.csv]]"
#define BENCH_TM_HELP                                                                                         \
  "--model PART (mi355x or mi300x): one more step of each width traced on the software agent (what each\n"   \
  "CTA loaded, stored, multiplied and waited for) and replayed by the timing model with the part's figures\n" \
  "(docs/timing_model.md): modelled_us, floor_us (the busiest rank's weight bytes at the part's HBM\n"       \
  "bandwidth), their ratio and the critical path. A model, not a measurement: every such line says so.\n"   \
  "Without --ctas the launches then run the part's own grid, one CTA a CU (256 or 304 a rank), where the\n" \
  "software agent's agents have that many CUs (their default).\n"                                          \
  "--trace FILE.csv (with --model): the traced steps' records as CSV, a line a CTA's stage (its weight\n"   \
  "bytes by level, hand-off bytes, stores) and a line a wait (the writer stage, words, level), for\n"       \
  "reading a critical path's causes (docs/timing_model.md, \"The trace\").\n"

extern const char *const bench_tm_parts[];

/* A kernel's stage names by slot (a timeline's kernel, names and slots). */
typedef struct bench_tm_names {
  const char *kernel;
  const char *const *names;
  uint32_t n;
} bench_tm_names;

/* One width's replay: the model's result, the traced launches' kernels, and the names of their stages. */
#define BENCH_TM_KERNELS 4
typedef struct bench_tm_row {
  uint32_t rows;
  hm_model_result r;
  hm_trace_launch *launches;
  uint32_t nlaunches;
  bench_tm_names names[BENCH_TM_KERNELS];
  unsigned nnames;
} bench_tm_row;

/* --trace FILE.csv: the option's argument checked (cli_out_path); the file every traced step's records
 * go to once bench_tm_trace_to has named it (opened at the first step: a bench refused before it
 * leaves no file); bench_tm_trace_close closes it (0, or 1 with why on stderr). */
int bench_tm_trace_arg(cli *c, const char **path);
void bench_tm_trace_to(const char *path);
int bench_tm_trace_close(void);

/* The grid --model traces when the user gave none (ctas 0): the part's own, one CTA a CU (256 on MI355X,
 * 304 on MI300X), where rank 0's agent has that many CUs (the software agent's default), so the model
 * replays the GPU's grid and not a small one standing for it (docs/timing_model.md, "The GPU's own
 * grid"); otherwise ctas unchanged (the tools' 8 CTAs a rank on the software agent). */
long bench_tm_grid(hm_runtime *rt, const hm_part *p, long ctas);

/* Names the stages of `kernel` from a timeline (kernel, names, slots), once a kernel. */
void bench_tm_name(bench_tm_row *row, const char *kernel, const char *const *names, uint32_t n);

/* Runs step(arg) once inside a trace and replays it on p into row (cleared first, its width `rows`). 0, or
 * 1 with the reason in hm_errmsg()'s place on stderr. */
int bench_tm_step(hm_runtime *rt, const hm_part *p, hm_status (*step)(void *arg), void *arg, uint32_t rows,
                  bench_tm_row *row);
/* The second half of bench_tm_step for a step that other threads run too (the all-reduce's ranks): a
 * trace begun with hm_runtime_trace_begin, `ran` the step's status; ends it and replays it into row. */
int bench_tm_end(hm_runtime *rt, const hm_part *p, hm_status ran, uint32_t rows, bench_tm_row *row);
/* The table (rows, modelled_us, floor_us, ratio), then each width's critical path; frees the rows. */
void bench_tm_print(const hm_part *p, const char *launch, bench_tm_row *rows, unsigned n);
/* Only the critical paths (a launch with no weights has no floor to set a table against); frees the rows. */
void bench_tm_print_paths(const hm_part *p, const char *launch, bench_tm_row *rows, unsigned n);
void bench_tm_row_free(bench_tm_row *row);

#endif /* HM_BENCH_TMODEL_H */
