/* tools/bench/layer.c: hsa-mono-bench layer: µs a whole layer step (K1 -> [select -> keylist] -> K2) of
 * a TP group on rank 0, the bytes a rank must read and the floor at the part's HBM; the timing bench model shares. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ffn_tool.h"
#include "../launch_tool.h"
#include "../layer_tool.h"
#include "bench.h"
#include "timeline.h"
#include "tmodel.h"

#define MAX_ROWS_LIST 8
/* The generated steps' context: past the 128-slot window, so every row attends a full window (and a
 * ratio-2 layer 512 compressed entries, a ratio-1 layer more than the 512 it picks) */
#define BENCH_CTX 1024

int bench_layer_time(hm_runtime *rt, const hm_layer_config *cfg, bool reduced, uint32_t tp, hm_arch arch,
                     const uint32_t *rows, unsigned nrows, uint32_t steps, uint64_t seed, long ctas, bench_tl *tl,
                     bench_layer_row *out) {
  return bench_layer_time_model(rt, cfg, reduced, tp, arch, rows, nrows, steps, seed, ctas, tl, out, NULL, NULL);
}

struct layer_step_arg {
  hm_layer_group *g;
  const hm_gen_step *step;
};
static hm_status layer_step_once(void *arg) {
  const struct layer_step_arg *a = arg;
  return hm_layer_group_step(a->g, &a->step->in, 1, NULL, NULL);
}

int bench_layer_time_model(hm_runtime *rt, const hm_layer_config *cfg, bool reduced, uint32_t tp, hm_arch arch,
                           const uint32_t *rows, unsigned nrows, uint32_t steps, uint64_t seed, long ctas, bench_tl *tl, bench_layer_row *out,
                           const hm_part *part, bench_tm_row *mrows) {
  layer_tool L;
  hm_ffn_config run = ffn_tool_launch(rt, reduced, ctas);
  run.timeline = tl != NULL || part; /* --model names the trace's stages from the timelines' */
  if (layer_tool_open(&L, rt, cfg, tp, seed, NULL, 0, arch, &run, NULL) != HM_OK) {
    fprintf(stderr, "hsa-mono-bench: layer %d: %s\n", cfg->layer, hm_errmsg());
    return 1;
  }
  hm_layer *l0 = hm_layer_group_rank(L.g, 0);
  hm_k2 *k2 = hm_layer_k2(l0);
  int rc = 0;
  for (unsigned i = 0; i < nrows && !rc; i++) {
    const uint32_t S = rows[i];
    hm_gen_step step;
    hm_status st = hm_gen_step_make(cfg, S, 1, BENCH_CTX, seed, &step);
    if (st) {
      rc = 1;
      break;
    }
    if (hm_config_has(cfg, HM_ROLE_FIRST)) step.in.res = NULL; /* the embedding in x */
    layer_tool_step_arch(&step, arch);
    step.in.engram_table = &L.table;
    /* an index source's indexer keys of the entries before the step, as the serving stack holds them */
    for (uint32_t r = 0; r < tp && !st && hm_config_has(cfg, HM_ROLE_INDEX_SOURCE); r++)
      st = hm_gen_step_seed_select(&step, cfg, hm_layer_group_select_state(L.g, r), seed);
    /* rank 0's klen: the keys the attention back reads */
    int32_t *klen = malloc(sizeof(int32_t) * 2 * S);
    hm_layer_outputs o[HM_LAYER_MAX_TP];
    memset(o, 0, sizeof o);
    o[0].klen = klen;
    double ns = 0;
    if (!st && !klen) st = hm_fail(HM_ERR_NO_MEMORY, "klen");
    /* warm-up: the width's mailboxes; then every step from the same inputs and caches */
    if (!st) st = hm_layer_group_step(L.g, &step.in, 1, NULL, NULL);
    if (!st) st = hm_layer_group_step(L.g, &step.in, steps, o, &ns);
    uint64_t ffn = 0;
    uint32_t ne = 0;
    if (!st) st = hm_ffn_step_bytes(k2, S, &ffn, &ne);
    if (!st && part) {
      struct layer_step_arg a = {L.g, &step};
      bench_tm_row *m = &mrows[i];
      hm_timeline v1, v2;
      if (bench_tm_step(rt, part, layer_step_once, &a, S, m)) st = HM_ERR_RUNTIME;
      else if (!(st = hm_k1_timeline(hm_layer_k1(l0), &v1)) && !(st = hm_ffn_timeline(k2, &v2)))
        bench_tm_name(m, v1.kernel, v1.names, v1.slots), bench_tm_name(m, v2.kernel, v2.names, v2.slots);
    }
    for (uint32_t r = 0; !st && tl && r < tp; r++) { /* K1's timeline, then K2's (or the FFN launch's) */
      hm_layer *l = hm_layer_group_rank(L.g, r);
      hm_timeline view;
      char name[40];
      snprintf(name, sizeof name, "layer%d/rows=%u", cfg->layer, S);
      if (!(st = hm_k1_timeline(hm_layer_k1(l), &view))) st = bench_tl_add(tl, name, r, &view);
      if (!st && !(st = hm_ffn_timeline(hm_layer_k2(l), &view))) st = bench_tl_add(tl, name, r, &view);
    }
    if (!st) {
      uint64_t bytes = hm_k1_step_bytes(hm_layer_k1(l0), S) + ffn + hm_k2_back_bytes(k2, S, klen);
      out[i] = (bench_layer_row){S, ns / 1e3, bytes, ne};
    }
    free(klen);
    hm_gen_step_free(&step);
    rc = st != HM_OK;
  }
  if (rc) fprintf(stderr, "hsa-mono-bench: layer %d: %s\n", cfg->layer, hm_errmsg());
  layer_tool_close(&L);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-bench layer [--layer L] [--tp N] [--rows R[,R...]] [--config v41-flash|tiny]\n"
          "                            [--experts E] [--steps N] [--seed S] [--ctas G] [--arch A] " BENCH_TL_USAGE "\n"
          "                            " BENCH_TM_USAGE "\n"
          "\n"
          "Runs whole steps of layer L (default 3, a ratio-2 REUSE layer; any of 0..42: K1, on an index source\n"
          "the select step and keylist launch, K2) for a TP group (default 4) in this process, each rank on its\n"
          "own agent, `steps` steps (default 100 on a GPU, 2 on the software agent, after one warm-up) of a\n"
          "generated step for each row count (default 1,8), and prints µs a step on rank 0, the distinct\n"
          "experts it chose, the bytes a step must read on a rank (K1's weights and I/O, the attention back's\n"
          "wo_a, wo_b and the step's keys, the FFN half's experts, shared expert, router and seam) and the\n"
          "floor those bytes take at MI355X's 8.0 TB/s peak (7.2 TB/s measured). On the software agent the\n"
          "routed experts of v41-flash are cut to 32 (top-6) so a step takes seconds (--experts E: another\n"
          "count; every line says the run is reduced), its times are CPU times, printed for the record, not\n"
          "GPU figures, and its grid is 8 CTAs a rank (--ctas G: another grid; a GPU's default is one CTA a CU).\n"
          BENCH_TL_HELP LAUNCH_TOOL_ARCH_LAYER_HELP BENCH_TM_HELP);
}

int bench_layer(int argc, char **argv) {
  const char *model = "v41-flash", *tlpath = NULL;
  long layer = 3, tp = 4, steps = 0, experts = -1, ctas = 0;
  unsigned long long seed = 1;
  uint32_t rows[MAX_ROWS_LIST] = {1, 8};
  unsigned nrows = 2;
  const char *arch_word = "gfx950", *part_word = NULL, *trace_path = NULL;
  static const struct option opts[] = {{"model", required_argument, 0, 'M'}, {"trace", required_argument, 0, 'R'}, {"layer", required_argument, 0, 'l'},   {"tp", required_argument, 0, 't'},
                                       {"rows", required_argument, 0, 'r'},    {"config", required_argument, 0, 'c'},
                                       {"experts", required_argument, 0, 'e'}, {"steps", required_argument, 0, 'n'},
                                       {"seed", required_argument, 0, 's'},    {"ctas", required_argument, 0, 'g'},
                                       {"timeline", required_argument, 0, 'T'}, {"arch", required_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  cli c = {.prog = "hsa-mono-bench layer", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 'l': cli_long(&c, 0, HM_MAX_LAYERS - 1, &layer); break;
      case 't': cli_long_of(&c, launch_tool_tps, 2, &tp); break;
      case 'r': bench_rows(&c, rows, MAX_ROWS_LIST, &nrows); break;
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'e': cli_long(&c, 1, LAUNCH_TOOL_MAX_EXPERTS, &experts); break;
      case 'n': cli_long(&c, 1, LAUNCH_TOOL_MAX_STEPS, &steps); break;
      case 's': cli_u64(&c, &seed); break;
      case 'g': cli_long(&c, 1, LAUNCH_TOOL_MAX_CTAS, &ctas); break;
      case 'T': bench_tl_arg(&c, &tlpath); break;
      case 'a': cli_word(&c, launch_tool_arches, &arch_word); break;
      case 'M': cli_word(&c, bench_tm_parts, &part_word); break;
      case 'R': bench_tm_trace_arg(&c, &trace_path); break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&c, argc, argv)) return CLI_EXIT_MISUSE;
  if (trace_path && !part_word) return cli_refuse(&c, "--trace writes the trace --model replays: give --model too");
  bench_tm_trace_to(trace_path);
  const hm_arch arch = launch_tool_arch(arch_word);
  uint32_t most = 0;
  for (unsigned i = 0; i < nrows; i++) most = rows[i] > most ? rows[i] : most;
  if (launch_tool_arch_shape(&c, arch, tp, most)) return CLI_EXIT_MISUSE;
  /* --model's part is the arch's: MI355X for gfx950, MI300X for gfx942 */
  const char *arch_part = arch == HM_ARCH_GFX942 ? "mi300x" : "mi355x";
  if (part_word && strcmp(part_word, arch_part))
    return cli_refuse(&c, "--model %s: the part of --arch %s is %s", part_word, arch_word, arch_part);
  hm_layer_config named;
  bool red;
  if (ffn_tool_layer(model, layer, experts > 0 ? experts : 0, 0, &named, &red) != HM_OK)
    return cli_refuse(&c, "%s", hm_errmsg());
  launch_tool_arch_select(arch);
  const hm_part *mpart = part_word ? hm_part_find(part_word) : NULL;
  hm_runtime *rt = bench_open();
  if (launch_tool_arch_agents(c.prog, rt, (uint32_t)tp, arch)) {
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  /* the part's HBM: the floor a step's bytes are set against */
  const bench_part part = bench_part_of(arch);
  const bool sim = hm_runtime_is_sim(rt);
  if (mpart && !sim) {
    fprintf(stderr, "hsa-mono-bench layer: --model needs the software agent's trace (HSAMONO_RUNTIME=sim)\n");
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  ctas = bench_tm_grid(rt, mpart, ctas);
  bench_tm_row mrows[MAX_ROWS_LIST];
  memset(mrows, 0, sizeof mrows);
  if (!steps) steps = sim ? 2 : 100;
  /* the software agent's default: 32 of V4.1-Flash's routed experts, so a step takes seconds */
  if (experts < 0) experts = sim && !strcmp(model, "v41-flash") ? 32 : 0;
  hm_layer_config cfg;
  bool reduced;
  if (ffn_tool_layer(model, layer, experts, 0, &cfg, &reduced) != HM_OK) {
    fprintf(stderr, "hsa-mono-bench layer: %s\n", hm_errmsg());
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  char kind[64], note[96];
  snprintf(note, sizeof note, "%s%s%s", sim || reduced ? "  (" : "", sim ? "software agent: CPU time" : "",
           reduced ? (sim ? "; REDUCED experts)" : "REDUCED experts)") : sim ? ")" : "");
  printf("# whole layer: %s layer %ld (%s), hidden %u, %u heads, %u experts top-%u%s, TP%ld, %s (%s, HBM %.1f TB/s "
         "peak), %ld steps a width\n",
         model, layer, layer_tool_kind(&cfg, kind, sizeof kind), cfg.hidden, cfg.heads, cfg.experts, cfg.topk,
         reduced ? " (REDUCED expert count)" : "", tp, arch_word, part.name, part.peak / 1e12, steps);
  bench_layer_row out[MAX_ROWS_LIST];
  bench_tl *tl = tlpath ? bench_tl_new(tlpath) : NULL;
  int rc = tlpath && !tl;
  if (rc) fprintf(stderr, "hsa-mono-bench layer: --timeline: out of memory\n");
  if (!rc)
    rc = bench_layer_time_model(rt, &cfg, reduced, (uint32_t)tp, arch, rows, nrows, (uint32_t)steps, seed, ctas, tl, out,
                                mpart, mrows);
  if (!rc) {
    char fpeak[24], freal[24];
    snprintf(fpeak, sizeof fpeak, "floor_us@%.1f", part.peak / 1e12);
    snprintf(freal, sizeof freal, "floor_us@%.1f", part.real / 1e12);
    printf("%6s %12s %10s %12s %12s %12s %9s\n", "rows", "us/step", "experts", "bytes/rank", fpeak, freal, "x_floor");
    for (unsigned i = 0; i < nrows; i++) {
      double f8 = (double)out[i].bytes / part.peak * 1e6, f7 = (double)out[i].bytes / part.real * 1e6;
      printf("%6u %12.1f %10u %12llu %12.2f %12.2f %9.1f%s\n", out[i].rows, out[i].us, out[i].experts,
             (unsigned long long)out[i].bytes, f8, f7, out[i].us / f8, note);
    }
  }
  if (!rc && mpart) bench_tm_print(mpart, "the whole layer (K1, then K2)", mrows, nrows);
  else
    for (unsigned i = 0; i < nrows; i++) bench_tm_row_free(&mrows[i]);
  if (!rc && tl) rc = bench_tl_write(tl, "hsa-mono-bench layer");
  bench_tl_free(tl);
  if (bench_tm_trace_close()) rc = 1;
  hm_runtime_close(rt);
  return rc ? CLI_EXIT_NOT_RUN : CLI_EXIT_OK;
}
