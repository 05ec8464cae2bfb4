/* tools/bench/model.c: hsa-mono-bench model: µs a whole layer of each kind (a TP group a layer, in turn)
 * and their sum as µs a decode step of the model, the bytes a rank must read and the floor at the part's HBM. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ffn_tool.h"
#include "../launch_tool.h"
#include "../layer_tool.h"
#include "bench.h"

#define MAX_ROWS_LIST 8
/* One layer of each kind of the schedule (spec/mono.md §1.3): the first layer, the Engram window
 * layer, a ratio-2 kv + index source, a ratio-2 REUSE layer, the ratio-1 kv + index source with the
 * candidates, a ratio-1 REUSE layer, a ratio-1 index source reading layer 20's cache, a draft layer */
static const long kinds[] = {0, 1, 2, 3, 20, 21, 24, 40};

/* A layer's kind for the sum: its roles but Engram, and its compress ratio (layer 14, a ratio-2 kv +
 * index source with Engram, counts as layer 2's kind: its Engram block is host work the bench of
 * layer 1 times) */
static uint32_t kind_key(const hm_layer_config *c) {
  return (c->roles & ~(uint32_t)HM_ROLE_ENGRAM) | c->compress_ratio << 16;
}

/* --layers "A-B" or "L,L,...": at most max layers of the schedule, in any order */
static int parse_layers(cli *c, long *out, unsigned max, unsigned *n) {
  long a, b;
  if (!strchr(optarg, '-') || strchr(optarg, ',')) return cli_list(c, 0, HM_MAX_LAYERS - 1, out, max, n);
  if (!cli_range(c, 0, HM_MAX_LAYERS - 1, &a, &b)) return 0;
  for (*n = 0; a <= b; a++) out[(*n)++] = a;
  return 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-bench model [--tp N] [--rows R[,R...]] [--layers A-B|L,L,...] [--config v41-flash|tiny]\n"
          "                            [--experts E] [--steps N] [--seed S] [--ctas G] [--arch A]\n"
          "\n"
          "Times whole layer steps (as hsa-mono-bench layer: K1, the select step and keylist launch on an index\n"
          "source, K2) of each layer given, one TP group (default 4) at a time, for each row count (default\n"
          "1,8): µs a layer on rank 0, the bytes a rank must read and their floor at MI355X's 8.0 TB/s (7.2\n"
          "measured), then their sum as a step. By default one layer of each kind (0, 1, 2, 3, 20, 21, 24, 40)\n"
          "each counted as often as the model has its kind (roles and compress ratio; 14 as 2), so the sum is\n"
          "a decode step of all 43 layers (40 + 3 draft); with --layers each layer given counts once. `steps`\n"
          "steps a width (default 100 on a GPU, 1 on the software agent) after a warm-up. On the software\n"
          "agent the routed experts of v41-flash are cut to 32 (--experts E: another count), every line says\n"
          "so and that its times are CPU times, and the grid is 8 CTAs a rank (--ctas G: another grid).\n"
          LAUNCH_TOOL_ARCH_LAYER_HELP);
}

int bench_model(int argc, char **argv) {
  const char *model = "v41-flash";
  long tp = 4, steps = 0, experts = -1, ctas = 0, layers[HM_MAX_LAYERS];
  unsigned long long seed = 1;
  uint32_t rows[MAX_ROWS_LIST] = {1, 8};
  unsigned nrows = 2, nl = sizeof kinds / sizeof *kinds;
  memcpy(layers, kinds, sizeof kinds);
  bool whole = true; /* the default list: each kind counted as often as the model has it */
  const char *arch_word = "gfx950";
  static const struct option opts[] = {{"tp", required_argument, 0, 't'},      {"rows", required_argument, 0, 'r'},
                                       {"layers", required_argument, 0, 'l'},  {"config", required_argument, 0, 'c'},
                                       {"experts", required_argument, 0, 'e'}, {"steps", required_argument, 0, 'n'},
                                       {"seed", required_argument, 0, 's'},    {"ctas", required_argument, 0, 'g'},
                                       {"arch", required_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  cli c = {.prog = "hsa-mono-bench model", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 't': cli_long_of(&c, launch_tool_tps, 2, &tp); break;
      case 'r': bench_rows(&c, rows, MAX_ROWS_LIST, &nrows); break;
      case 'l': whole = !parse_layers(&c, layers, HM_MAX_LAYERS, &nl); break;
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'e': cli_long(&c, 1, LAUNCH_TOOL_MAX_EXPERTS, &experts); break;
      case 'n': cli_long(&c, 1, LAUNCH_TOOL_MAX_STEPS, &steps); break;
      case 's': cli_u64(&c, &seed); break;
      case 'g': cli_long(&c, 1, LAUNCH_TOOL_MAX_CTAS, &ctas); break;
      case 'a': cli_word(&c, launch_tool_arches, &arch_word); break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&c, argc, argv)) return CLI_EXIT_MISUSE;
  const hm_arch arch = launch_tool_arch(arch_word);
  uint32_t most = 0;
  for (unsigned i = 0; i < nrows; i++) most = rows[i] > most ? rows[i] : most;
  if (launch_tool_arch_shape(&c, arch, tp, most)) return CLI_EXIT_MISUSE;
  /* every layer given takes --experts (a count below a layer's top-k does not) */
  for (unsigned i = 0; i < nl; i++) {
    hm_layer_config probe;
    bool red;
    if (ffn_tool_layer(model, layers[i], experts > 0 ? experts : 0, 0, &probe, &red) != HM_OK)
      return cli_refuse(&c, "%s", hm_errmsg());
  }
  launch_tool_arch_select(arch);
  hm_runtime *rt = bench_open();
  if (launch_tool_arch_agents(c.prog, rt, (uint32_t)tp, arch)) {
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  /* the part's HBM: the floor a step's bytes are set against */
  const bench_part part = bench_part_of(arch);
  char fpeak[24], freal[24];
  snprintf(fpeak, sizeof fpeak, "floor_us@%.1f", part.peak / 1e12);
  snprintf(freal, sizeof freal, "floor_us@%.1f", part.real / 1e12);
  const bool sim = hm_runtime_is_sim(rt);
  if (!steps) steps = sim ? 1 : 100;
  if (experts < 0) experts = sim && !strcmp(model, "v41-flash") ? 32 : 0;
  /* how many of the model's layers each one given stands for */
  uint32_t count[HM_MAX_LAYERS], total = 0;
  for (unsigned i = 0; i < nl; i++) count[i] = whole ? 0 : 1;
  for (int32_t m = 0; whole && m < HM_MAX_LAYERS; m++) {
    hm_layer_config c, k;
    hm_config_by_name(model, m, &c);
    for (unsigned i = 0; i < nl; i++) {
      hm_config_by_name(model, (int32_t)layers[i], &k);
      if (kind_key(&k) == kind_key(&c)) {
        count[i]++;
        break;
      }
    }
  }
  for (unsigned i = 0; i < nl; i++) total += count[i];
  bench_layer_row *out = calloc((size_t)nl * nrows, sizeof *out);
  double *us = calloc(nrows, sizeof *us), *bytes = calloc(nrows, sizeof *bytes);
  int rc = CLI_EXIT_NOT_RUN, reduced_any = 0;
  char note[96] = "";
  if (!out || !us || !bytes) goto done;
  printf("# whole layers of %s, TP%ld, %s (%s, HBM %.1f TB/s peak), %ld steps a width; the step: %s\n", model, tp,
         arch_word, part.name, part.peak / 1e12, steps,
         whole ? "the model's 43 layers, each kind's time counted as often as the model has it"
               : "the layers given, each once");
  printf("%6s %6s %12s %10s %12s %12s %12s %9s %6s  %s\n", "layer", "rows", "us/layer", "experts", "bytes/rank",
         fpeak, freal, "x_floor", "count", "kind");
  for (unsigned i = 0; i < nl; i++) {
    hm_layer_config cfg;
    bool reduced;
    if (ffn_tool_layer(model, layers[i], experts, 0, &cfg, &reduced) != HM_OK) {
      fprintf(stderr, "hsa-mono-bench model: %s\n", hm_errmsg());
      goto done;
    }
    reduced_any |= reduced;
    snprintf(note, sizeof note, "%s%s%s", sim || reduced ? "  (" : "", sim ? "software agent: CPU time" : "",
             reduced ? (sim ? "; REDUCED experts)" : "REDUCED experts)") : sim ? ")" : "");
    bench_layer_row *r = out + (size_t)i * nrows;
    if (bench_layer_time(rt, &cfg, reduced, (uint32_t)tp, arch, rows, nrows, (uint32_t)steps, seed, ctas, NULL, r))
      goto done;
    char kind[64];
    layer_tool_kind(&cfg, kind, sizeof kind);
    for (unsigned j = 0; j < nrows; j++) {
      double f8 = (double)r[j].bytes / part.peak * 1e6, f7 = (double)r[j].bytes / part.real * 1e6;
      printf("%6ld %6u %12.1f %10u %12llu %12.2f %12.2f %9.1f %6u  %s%s\n", layers[i], r[j].rows, r[j].us,
             r[j].experts, (unsigned long long)r[j].bytes, f8, f7, r[j].us / f8, count[i], kind, note);
      us[j] += count[i] * r[j].us, bytes[j] += (double)count[i] * (double)r[j].bytes;
    }
    fflush(stdout);
  }
  /* the sum is reduced when any of its layers is */
  snprintf(note, sizeof note, "%s%s%s", sim || reduced_any ? "  (" : "", sim ? "software agent: CPU time" : "",
           reduced_any ? (sim ? "; REDUCED experts)" : "REDUCED experts)") : sim ? ")" : "");
  for (unsigned j = 0; j < nrows; j++) {
    double f8 = bytes[j] / part.peak * 1e6, f7 = bytes[j] / part.real * 1e6;
    printf("%6s %6u %12.1f %10s %12.0f %12.2f %12.2f %9.1f %6u  %s%s\n", "step", rows[j], us[j], "-", bytes[j], f8, f7,
           us[j] / f8, total, "the sum", note);
  }
  rc = 0;
done:
  free(out), free(us), free(bytes);
  hm_runtime_close(rt);
  return rc;
}
