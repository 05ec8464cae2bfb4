/* tools/bench/timeline.c: hsa-mono-bench's --timeline FILE: the launches' per-CTA timelines gathered
 * in memory, then written as CSV or JSON and drawn as SVG (one lane a CTA, a colour a stage). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeline.h"

/* One CTA's stage of one rank's launch: the stage ran from the CTA's stamp before it to its own. */
struct tl_rec {
  uint32_t group, cta, tasks;
  const char *stage; /* the library's static name */
  uint64_t start, end;
};

/* One rank's launch: its records are recs[first .. first + n) */
struct tl_group {
  char launch[48];
  const char *kernel;
  const char *const *names; /* the kernel's stages in program order */
  uint32_t rank, ctas, slots;
  size_t first, n;
};

struct bench_tl {
  char *path;
  struct tl_rec *recs;
  size_t nrecs, caprecs;
  struct tl_group *groups;
  uint32_t ngroups, capgroups;
  int event_order; /* -1 before the first launch */
};

static const char *const endings[] = {".csv", ".json", NULL};

int bench_tl_arg(cli *c, const char **path) { return cli_out_path(c, endings, path); }

bench_tl *bench_tl_new(const char *path) {
  bench_tl *t = calloc(1, sizeof *t);
  if (t && !(t->path = strdup(path))) {
    free(t);
    return NULL;
  }
  if (t) t->event_order = -1;
  return t;
}

void bench_tl_free(bench_tl *t) {
  if (!t) return;
  free(t->path), free(t->recs), free(t->groups), free(t);
}

static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 1;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *q = realloc(*p, n * size);
  if (!q) return 0;
  *p = q, *cap = n;
  return 1;
}

hm_status bench_tl_add(bench_tl *t, const char *launch, uint32_t rank, const hm_timeline *tl) {
  hm_status s = hm_timeline_check(tl);
  if (s) return s;
  size_t capg = t->capgroups;
  if (!grow((void **)&t->groups, &capg, t->ngroups + 1u, sizeof *t->groups))
    return hm_fail(HM_ERR_NO_MEMORY, "--timeline: %u launches", t->ngroups + 1u);
  t->capgroups = (uint32_t)capg;
  struct tl_group *g = &t->groups[t->ngroups];
  snprintf(g->launch, sizeof g->launch, "%s", launch);
  g->kernel = tl->kernel, g->names = tl->names, g->rank = rank, g->ctas = tl->ctas, g->slots = tl->slots;
  g->first = t->nrecs, g->n = 0;
  for (uint32_t c = 0; c < tl->ctas; c++)
    for (uint32_t k = 1; k < tl->slots; k++) {
      uint32_t tasks = hm_timeline_tasks(tl, c, k);
      if (!tasks) continue;
      if (!grow((void **)&t->recs, &t->caprecs, t->nrecs + 1, sizeof *t->recs))
        return hm_fail(HM_ERR_NO_MEMORY, "--timeline: %zu records", t->nrecs + 1);
      const hm_timeline_stamp *p = &tl->stamps[(size_t)c * tl->stride + k];
      t->recs[t->nrecs++] = (struct tl_rec){t->ngroups, c, tasks, tl->names[k], p[-1].t, p->t};
      g->n++;
    }
  t->ngroups++;
  t->event_order = tl->event_order;
  return HM_OK;
}

static const char *clock_name(const bench_tl *t) {
  return t->event_order ? "event order" : "s_memrealtime ticks (100 MHz)";
}
static const char *clock_note(const bench_tl *t) {
  return t->event_order ? "software agent: start and end are the agent's event order, not time"
                        : "GPU: start and end are s_memrealtime ticks, 10 ns each";
}

static int write_csv(const bench_tl *t, FILE *f) {
  fprintf(f, "launch,kernel,rank,cta,stage,tasks,start,end,clock\n");
  for (size_t i = 0; i < t->nrecs; i++) {
    const struct tl_rec *r = &t->recs[i];
    const struct tl_group *g = &t->groups[r->group];
    fprintf(f, "%s,%s,%u,%u,%s,%u,%llu,%llu,%s\n", g->launch, g->kernel, g->rank, r->cta, r->stage, r->tasks,
            (unsigned long long)r->start, (unsigned long long)r->end, t->event_order ? "event" : "100MHz");
  }
  return 0;
}

static int write_json(const bench_tl *t, FILE *f) {
  fprintf(f, "{\"clock\": \"%s\", \"note\": \"%s\", \"records\": [", clock_name(t), clock_note(t));
  for (size_t i = 0; i < t->nrecs; i++) {
    const struct tl_rec *r = &t->recs[i];
    const struct tl_group *g = &t->groups[r->group];
    fprintf(f,
            "%s\n  {\"launch\": \"%s\", \"kernel\": \"%s\", \"rank\": %u, \"cta\": %u, \"stage\": \"%s\", \"tasks\": %u, "
            "\"start\": %llu, \"end\": %llu}",
            i ? "," : "", g->launch, g->kernel, g->rank, r->cta, r->stage, r->tasks, (unsigned long long)r->start,
            (unsigned long long)r->end);
  }
  fprintf(f, "\n]}\n");
  return 0;
}

/* ---------------------------------------------------------------- the picture */

#define SVG_W 1200
#define SVG_LABEL 120 /* the lanes' labels on the left */
#define SVG_LANE 12   /* a lane's height, 2 of it a gap */
#define SVG_HEAD 18   /* a launch's header line */

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                      "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
                                      "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
                                      "#756bb1", "#636363", "#fdae6b", "#a1d99b", "#9ecae1", "#fa9fb5"};
/* 24: K2's 14 stages and K1's 7 each get their own */
#define NPALETTE (sizeof palette / sizeof *palette)

/* A stage's colour: the stages in the kernels' order, a colour each (the names repeat across the
 * kernels: K2's FFN stages are coloured as the FFN launch's). */
static uint32_t stage_colour(const char **seen, uint32_t *nseen, const char *stage) {
  for (uint32_t i = 0; i < *nseen; i++)
    if (!strcmp(seen[i], stage)) return i;
  if (*nseen < 2 * NPALETTE) seen[(*nseen)++] = stage;
  return *nseen - 1;
}

static int write_svg(const bench_tl *t, FILE *f) {
  const char *seen[2 * NPALETTE];
  uint32_t nseen = 0;
  for (uint32_t g = 0; g < t->ngroups; g++)
    for (uint32_t k = 1; k < t->groups[g].slots; k++) stage_colour(seen, &nseen, t->groups[g].names[k]);
  const uint32_t legend_rows = (nseen + 7) / 8;
  uint64_t lanes = 0;
  for (uint32_t g = 0; g < t->ngroups; g++) lanes += t->groups[g].ctas;
  const uint64_t top = 30 + 16 * legend_rows + 10;
  const uint64_t height = top + t->ngroups * (uint64_t)SVG_HEAD + lanes * SVG_LANE + 10;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%llu\" font-family=\"sans-serif\" "
          "font-size=\"10\">\n",
          SVG_W, (unsigned long long)height);
  fprintf(f, "<text x=\"4\" y=\"14\" font-size=\"13\">hsa-mono per-CTA timeline: %s (%s)</text>\n", clock_note(t),
          "each launch scaled to the width");
  for (uint32_t i = 0; i < nseen; i++) {
    const unsigned x = 4 + (i % 8) * 148, y = 30 + (i / 8) * 16;
    fprintf(f, "<g class=\"legend\"><rect x=\"%u\" y=\"%u\" width=\"12\" height=\"10\" fill=\"%s\"/>", x, y,
            palette[i % NPALETTE]);
    fprintf(f, "<text x=\"%u\" y=\"%u\">%s</text></g>\n", x + 16, y + 9, seen[i]);
  }
  uint64_t y = top;
  for (uint32_t gi = 0; gi < t->ngroups; gi++) {
    const struct tl_group *g = &t->groups[gi];
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (size_t i = g->first; i < g->first + g->n; i++) {
      if (t->recs[i].start < t0) t0 = t->recs[i].start;
      if (t->recs[i].end > t1) t1 = t->recs[i].end;
    }
    if (t1 <= t0) t1 = t0 + 1;
    const double scale = (double)(SVG_W - SVG_LABEL - 8) / (double)(t1 - t0);
    fprintf(f, "<text x=\"4\" y=\"%llu\" font-weight=\"bold\">%s rank %u (%s, %u CTAs, %s %llu..%llu)</text>\n",
            (unsigned long long)(y + 13), g->launch, g->rank, g->kernel, g->ctas, clock_name(t),
            (unsigned long long)t0, (unsigned long long)t1);
    y += SVG_HEAD;
    size_t i = g->first;
    for (uint32_t c = 0; c < g->ctas; c++, y += SVG_LANE) {
      fprintf(f, "<g class=\"lane\" data-launch=\"%s\" data-rank=\"%u\" data-cta=\"%u\">", g->launch, g->rank, c);
      fprintf(f, "<text x=\"4\" y=\"%llu\">r%u cta %u</text>", (unsigned long long)(y + 9), g->rank, c);
      for (; i < g->first + g->n && t->recs[i].cta == c; i++) {
        const struct tl_rec *r = &t->recs[i];
        double x = SVG_LABEL + (double)(r->start - t0) * scale, w = (double)(r->end - r->start) * scale;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%llu\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%s: %u task(s), "
                "%llu..%llu</title></rect>",
                x, (unsigned long long)y, w < 0.5 ? 0.5 : w, SVG_LANE - 2,
                palette[stage_colour(seen, &nseen, r->stage) % NPALETTE], r->stage, r->tasks,
                (unsigned long long)r->start, (unsigned long long)r->end);
      }
      fprintf(f, "</g>\n");
    }
  }
  fprintf(f, "</svg>\n");
  return 0;
}

static int write_file(const char *prog, const char *path, const bench_tl *t, int (*fn)(const bench_tl *, FILE *)) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "%s: --timeline: cannot write '%s'\n", prog, path);
    return 1;
  }
  fn(t, f);
  if (fclose(f) != 0) {
    fprintf(stderr, "%s: --timeline: writing '%s' failed\n", prog, path);
    remove(path);
    return 1;
  }
  return 0;
}

int bench_tl_write(bench_tl *t, const char *prog) {
  const size_t len = strlen(t->path);
  const int json = len > 5 && !strcmp(t->path + len - 5, ".json");
  char *svg = malloc(len + 5);
  if (!svg) {
    fprintf(stderr, "%s: --timeline: out of memory\n", prog);
    return 1;
  }
  snprintf(svg, len + 5, "%s.svg", t->path);
  int rc = write_file(prog, t->path, t, json ? write_json : write_csv);
  if (!rc) rc = write_file(prog, svg, t, write_svg);
  if (!rc)
    printf("# timeline: %zu records of %u launch(es) in %s, drawn in %s; %s\n", t->nrecs, t->ngroups, t->path, svg,
           clock_note(t));
  free(svg);
  return rc;
}
