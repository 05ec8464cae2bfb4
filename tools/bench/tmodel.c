/* tools/bench/tmodel.c: --model PART of the launch benches: trace one step, replay it with the timing
 * model, print the modelled time beside the HBM floor and the critical path, each line marked a model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_trace.h"
#include "tmodel.h"

const char *const bench_tm_parts[] = {"mi355x", "mi300x", NULL};

/* --trace's file: open while the bench runs its traced steps (a CLI's one output, so a static) */
static struct {
  FILE *f;
  const char *path;
} csv;

int bench_tm_trace_arg(cli *c, const char **path) {
  static const char *const endings[] = {".csv", NULL};
  return cli_out_path(c, endings, path);
}

void bench_tm_trace_to(const char *path) { csv.path = path; }

/* The file, opened with its header at the first traced step: 0, or 1 with why on stderr. */
static int trace_open(void) {
  if (csv.f) return 0;
  if (!(csv.f = fopen(csv.path, "w"))) {
    fprintf(stderr, "--trace %s: %s\n", csv.path, strerror(errno));
    return 1;
  }
  fprintf(csv.f, "record,rows,agent,launch,kernel,cta,slot,weight_bytes");
  for (unsigned k = 0; k < HM_TRACE_LEVELS; k++) fprintf(csv.f, ",level%u_bytes", k);
  fprintf(csv.f, ",handoff_bytes,dev_store_bytes,sys_store_bytes,peer_store_bytes,w_agent,w_launch,w_cta,w_slot,"
                 "words,level,w_rest\n");
  return 0;
}

int bench_tm_trace_close(void) {
  if (!csv.f) return 0;
  int bad = ferror(csv.f) | fclose(csv.f);
  csv.f = NULL;
  if (bad) fprintf(stderr, "--trace %s: writing failed\n", csv.path);
  return bad ? 1 : 0;
}

static const char *launch_kernel(const hm_trace *t, uint32_t agent, uint32_t launch) {
  for (uint32_t i = 0; i < t->nlaunches; i++)
    if (t->launches[i].agent == agent && t->launches[i].launch == launch) return t->launches[i].kernel;
  return "";
}

/* One traced step's records: its stages (the wait columns empty), then its waits (the stage columns
 * empty), each kernel named, slots as the trace numbers them (docs/timing_model.md). */
static void trace_csv(const hm_trace *t, uint32_t rows) {
  for (uint32_t i = 0; i < t->nstages; i++) {
    const hm_trace_stage *s = &t->stages[i];
    fprintf(csv.f, "stage,%u,%u,%u,%s,%u,%u,%llu", rows, s->agent, s->launch, launch_kernel(t, s->agent, s->launch),
            s->cta, s->slot, (unsigned long long)s->weight_bytes);
    for (unsigned k = 0; k < HM_TRACE_LEVELS; k++) fprintf(csv.f, ",%llu", (unsigned long long)s->weight_level_bytes[k]);
    fprintf(csv.f, ",%llu,%llu,%llu,%llu,,,,,,,\n", (unsigned long long)s->handoff_bytes,
            (unsigned long long)s->dev_store_bytes, (unsigned long long)s->sys_store_bytes,
            (unsigned long long)s->peer_store_bytes);
  }
  for (uint32_t i = 0; i < t->nwaits; i++) {
    const hm_trace_wait *w = &t->waits[i];
    fprintf(csv.f, "wait,%u,%u,%u,%s,%u,%u,", rows, w->agent, w->launch, launch_kernel(t, w->agent, w->launch), w->cta,
            w->slot);
    for (unsigned k = 0; k < HM_TRACE_LEVELS; k++) fputc(',', csv.f);
    fprintf(csv.f, ",,,,,%u,%u,%u,%u,%u,%u,%llu\n", w->w_agent, w->w_launch, w->w_cta, w->w_slot, w->words, w->level,
            (unsigned long long)w->w_rest);
  }
}

int bench_tm_step(hm_runtime *rt, const hm_part *p, hm_status (*step)(void *arg), void *arg, uint32_t rows,
                  bench_tm_row *row) {
  hm_status s = hm_runtime_trace_begin(rt);
  if (s) {
    memset(row, 0, sizeof *row);
    fprintf(stderr, "--model: %s\n", hm_errmsg());
    return 1;
  }
  return bench_tm_end(rt, p, step(arg), rows, row);
}

int bench_tm_end(hm_runtime *rt, const hm_part *p, hm_status ran, uint32_t rows, bench_tm_row *row) {
  memset(row, 0, sizeof *row);
  row->rows = rows;
  hm_trace t;
  hm_status s = hm_runtime_trace_end(rt, &t);
  if (s || ran) {
    fprintf(stderr, "--model: %s\n", hm_errmsg());
    if (!s) hm_trace_free(&t);
    return 1;
  }
  char err[256];
  if (csv.path) {
    if (trace_open()) {
      hm_trace_free(&t);
      return 1;
    }
    trace_csv(&t, rows);
  }
  int rc = hm_model_run(&t, p, &row->r, err, sizeof err);
  /* the launches' kernels stay with the row, to name the path's stages */
  row->launches = t.launches, row->nlaunches = t.nlaunches;
  t.launches = NULL, t.nlaunches = 0;
  hm_trace_free(&t);
  if (rc) {
    fprintf(stderr, "--model: the trace of %u rows: %s\n", row->rows, err);
    bench_tm_row_free(row);
  }
  return rc ? 1 : 0;
}

void bench_tm_name(bench_tm_row *row, const char *kernel, const char *const *names, uint32_t n) {
  for (unsigned i = 0; i < row->nnames; i++)
    if (!strcmp(row->names[i].kernel, kernel)) return;
  if (row->nnames < BENCH_TM_KERNELS) row->names[row->nnames++] = (bench_tm_names){kernel, names, n};
}

void bench_tm_row_free(bench_tm_row *row) {
  hm_model_result_free(&row->r);
  free(row->launches);
  row->launches = NULL, row->nlaunches = 0;
}

/* The stage name of a slot of the launch (agent, launch): its kernel's timeline name, "tail" past them. */
static const char *slot_name(const bench_tm_row *w, uint32_t agent, uint32_t launch, uint32_t slot, char *buf,
                             size_t cap) {
  const char *kernel = "?";
  for (uint32_t i = 0; i < w->nlaunches; i++)
    if (w->launches[i].agent == agent && w->launches[i].launch == launch) kernel = w->launches[i].kernel;
  for (unsigned i = 0; i < w->nnames; i++)
    if (!strcmp(w->names[i].kernel, kernel)) {
      /* a name longer than buf is cut (the return value checked: GCC's truncation warning) */
      if (snprintf(buf, cap, "%s.%s", kernel, slot < w->names[i].n ? w->names[i].names[slot] : "tail") < 0) buf[0] = 0;
      return buf;
    }
  if (snprintf(buf, cap, "%s.slot%u", kernel, slot) < 0) buf[0] = 0;
  return buf;
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
  bench_tm_print_paths(p, launch, rows, n);
}

void bench_tm_print_paths(const hm_part *p, const char *launch, bench_tm_row *rows, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    const bench_tm_row *w = &rows[i];
    printf("# critical path of %s, %u rows on %s (model): %u pieces, %.2f us\n", launch, w->rows, p->name,
           w->r.npath, w->r.total_s * 1e6);
    for (uint32_t k = 0; k < w->r.npath; k++) {
      const hm_model_seg *g = &w->r.path[k];
      char a[48], b[48];
      if (g->kind == HM_SEG_STAGE)
        printf("#   %8.3f us  stage %-16s rank %u CTA %u (model)\n", g->s * 1e6,
               slot_name(w, g->agent, g->launch, g->slot, a, sizeof a), g->agent, g->cta);
      else
        printf("#   %8.3f us  wait  %-16s rank %u CTA %u on %s of rank %u CTA %u, %s hand-off (model)\n", g->s * 1e6,
               slot_name(w, g->agent, g->launch, g->slot, a, sizeof a), g->agent, g->cta,
               slot_name(w, g->w_agent, g->w_launch, g->w_slot, b, sizeof b), g->w_agent, g->w_cta,
               g->w_agent == g->agent ? "device-scope" : "system-scope");
    }
    bench_tm_row_free(&rows[i]);
  }
}

long bench_tm_grid(hm_runtime *rt, const hm_part *p, long ctas) {
  if (ctas || !p || !hm_agent_count(rt)) return ctas;
  const hm_agent_info *ai = hm_agent_info_of(hm_agent_get(rt, 0));
  return ai && ai->cus >= p->cus ? (long)p->cus : ctas;
}
