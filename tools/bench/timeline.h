/* tools/bench/timeline.h: hsa-mono-bench's --timeline FILE: the per-CTA timelines of the launches a
 * bench ran, as CSV or JSON (by FILE's ending) and as a picture, FILE.svg, one lane a CTA. */
#ifndef HM_BENCH_TIMELINE_H
#define HM_BENCH_TIMELINE_H

#include <stdint.h>

#include "../cli.h"
#include "hm_timeline.h"

typedef struct bench_tl bench_tl;

/* The option's line in a bench's usage, and what it does. */
#define BENCH_TL_USAGE "[--timeline FILE.csv|FILE.json]"
#define BENCH_TL_HELP                                                                                          \
  "--timeline FILE: every CTA stamps its start and each stage's end (off by default, and then the\n"          \
  "kernels stamp nothing); each rank's last step of each width goes to FILE (CSV or JSON: launch, kernel,\n" \
  "rank, CTA, stage, tasks, start, end) and FILE.svg (one lane a CTA, a colour a stage). On a GPU the\n"     \
  "stamps are s_memrealtime ticks (100 MHz); on the software agent its event order, not time.\n"

/* --timeline FILE: FILE ends in .csv or .json and its directory exists and is writable (nothing
 * is created until bench_tl_write). 1, or 0 with c refused. */
int bench_tl_arg(cli *c, const char **path);

/* Records of launches, written to path and path.svg by bench_tl_write. NULL: out of memory. */
bench_tl *bench_tl_new(const char *path);
/* Appends one rank's timeline of the launch named `launch` (e.g. "ffn/rows=8", no commas or
 * quotes): a record a CTA and stage it ran (tasks > 0). Refuses (HM_ERR_INVALID_ARG, hm_errmsg)
 * a timeline that hm_timeline_check refuses. */
hm_status bench_tl_add(bench_tl *t, const char *launch, uint32_t rank, const hm_timeline *tl);
/* Writes FILE and FILE.svg; prints where on stdout, with what the clock is. 0, or 1 with the reason
 * on stderr. */
int bench_tl_write(bench_tl *t, const char *prog);
void bench_tl_free(bench_tl *t);

#endif /* HM_BENCH_TIMELINE_H */
