/* tools/bench/tmodel.c: --model PART of the launch benches: trace one step, replay it with the timing
 * model, print the modelled time beside the HBM floor and the critical path, each line marked a model. */
#include <stdio.h>
#include <string.h>

#include "hm_trace.h"
#include "tmodel.h"

const char *const bench_tm_parts[] = {"mi355x", "mi300x", NULL};

int bench_tm_step(hm_runtime *rt, const hm_part *p, hm_status (*step)(void *arg), void *arg, bench_tm_row *row) {
  hm_trace t;
  hm_status s = hm_runtime_trace_begin(rt);
  hm_status s2 = s ? s : step(arg);
  if (!s) s = hm_runtime_trace_end(rt, &t);
  if (s || s2) {
    fprintf(stderr, "--model: %s\n", hm_errmsg());
    if (!s) hm_trace_free(&t);
    return 1;
  }
  char err[256];
  int rc = hm_model_run(&t, p, &row->r, err, sizeof err);
  hm_trace_free(&t);
  if (rc) fprintf(stderr, "--model: the trace of %u rows: %s\n", row->rows, err);
  return rc ? 1 : 0;
}

static const char *slot_name(const bench_tm_row *w, uint32_t slot) {
  return slot < w->nnames ? w->names[slot] : "tail";
}

void bench_tm_print(const hm_part *p, const char *launch, bench_tm_row *rows, unsigned n) {
  printf("# %s on %s, modelled (docs/timing_model.md): a timing model replaying the software agent's trace,\n"
         "# not a measurement; floor_us: the busiest rank's weight bytes at the model's HBM %.1f TB/s\n",
         launch, p->name, p->hbm_bw / 1e12);
  printf("%6s %12s %10s %7s\n", "rows", "modelled_us", "floor_us", "ratio");
  for (unsigned i = 0; i < n; i++) {
    const hm_model_result *r = &rows[i].r;
    printf("%6u %12.2f %10.2f %7.2f  %s (model)\n", rows[i].rows, r->total_s * 1e6, r->floor_s * 1e6,
           r->floor_s > 0 ? r->total_s / r->floor_s : 0.0, p->name);
  }
  for (unsigned i = 0; i < n; i++) {
    const bench_tm_row *w = &rows[i];
    printf("# critical path of %s, %u rows on %s (model): %u pieces, %.2f us\n", launch, w->rows, p->name,
           w->r.npath, w->r.total_s * 1e6);
    for (uint32_t k = 0; k < w->r.npath; k++) {
      const hm_model_seg *g = &w->r.path[k];
      if (g->kind == HM_SEG_STAGE)
        printf("#   %8.3f us  stage %-12s rank %u launch %u CTA %u (model)\n", g->s * 1e6, slot_name(w, g->slot),
               g->agent, g->launch, g->cta);
      else
        printf("#   %8.3f us  wait  %-12s rank %u CTA %u on %s of rank %u CTA %u, %s hand-off (model)\n", g->s * 1e6,
               slot_name(w, g->slot), g->agent, g->cta, slot_name(w, g->w_slot), g->w_agent, g->w_cta,
               g->w_agent == g->agent ? "device-scope" : "system-scope");
    }
    hm_model_result_free(&rows[i].r);
  }
}
