/* tools/bench/k1.c: hsa-mono-bench k1: µs a step of K1 (the attention seam and front; a TP group in
 * this process, a rank an agent), the bytes a rank must read, and the floor at the part's HBM. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../launch_tool.h"
#include "bench.h"
#include "timeline.h"
#include "tmodel.h"
#include "hm_config.h"
#include "hm_k1_group.h"
#include "hm_ref.h"

#define MAX_ROWS_LIST 8
/* The generated steps' context: past the 128-slot window, so every row attends a full window */
#define BENCH_CTX 1024

struct k1_step_arg {
  hm_k1_group *g;
  const hm_gen_step *step;
};
static hm_status k1_step_once(void *arg) {
  const struct k1_step_arg *a = arg;
  return hm_k1_group_step(a->g, &a->step->in, 1, NULL, NULL);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-bench k1 [--tp N] [--rows R[,R...]] [--config v41-flash|tiny] [--layer L]\n"
          "                         [--steps N] [--seed S] [--ctas G] [--arch A] " BENCH_TL_USAGE "\n"
          "                         " BENCH_TM_USAGE "\n"
          "\n"
          "Runs K1 (the attention seam and front) of layer L (default 3, a ratio-2 REUSE layer) for a TP\n"
          "group (default 4) in this process, each rank on its own agent, `steps` steps (default 100 on a\n"
          "GPU, 2 on the software agent, after one warm-up) of a generated step for each row count\n"
          "(default 1,8), and prints µs a step on rank 0, the bytes a step must move on a rank (wqkv,\n"
          "wq_b, the seam's weights, the norms, the RoPE rows, the step's inputs, records and outputs) and\n"
          "the floor those bytes take at MI355X's 8.0 TB/s peak (7.2 TB/s measured). On the software\n"
          "agent its times are CPU times, printed for the record, not GPU figures, and its grid is 8 CTAs\n"
          "a rank (--ctas G: another grid; a GPU's default is one CTA a CU).\n" BENCH_TL_HELP
          "--arch gfx942 (MI300X/MI325X): the gfx942 weight copies on gfx942 agents (the software agent made one\n"
          "unless HSAMONO_SIM_ARCH says otherwise), TP 4 and at most 42 rows, the floor at MI300X's 5.3 TB/s\n"
          "peak (4.2 measured). Default gfx950.\n" BENCH_TM_HELP);
}

int bench_k1(int argc, char **argv) {
  const char *model = "v41-flash", *tlpath = NULL;
  long layer = 3, tp = 4, steps = 0, ctas = 0;
  unsigned long long seed = 1;
  uint32_t rows[MAX_ROWS_LIST] = {1, 8};
  unsigned nrows = 2;
  const char *arch_word = "gfx950", *part_word = NULL, *trace_path = NULL;
  static const struct option opts[] = {{"tp", required_argument, 0, 't'},    {"rows", required_argument, 0, 'r'},
                                       {"config", required_argument, 0, 'c'}, {"layer", required_argument, 0, 'l'},
                                       {"steps", required_argument, 0, 'n'},  {"seed", required_argument, 0, 's'},
                                       {"ctas", required_argument, 0, 'g'},   {"arch", required_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'},        {"model", required_argument, 0, 'M'}, {"trace", required_argument, 0, 'R'},
                                       {"timeline", required_argument, 0, 'T'}, {0, 0, 0, 0}};
  cli c = {.prog = "hsa-mono-bench k1", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 't': cli_long_of(&c, launch_tool_tps, 2, &tp); break;
      case 'r': bench_rows(&c, rows, MAX_ROWS_LIST, &nrows); break;
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'l': cli_long(&c, 0, HM_MAX_LAYERS - 1, &layer); break;
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
  /* a part replays its own arch's kernels: MI300X's has no gfx950 instruction, MI355X's no gfx942 code */
  if (part_word && (arch == HM_ARCH_GFX942) != !strcmp(part_word, "mi300x"))
    return cli_refuse(&c, "--model %s: the part of --arch %s is %s", part_word, arch_word,
                      arch == HM_ARCH_GFX942 ? "mi300x" : "mi355x");
  uint32_t most = 0;
  for (unsigned i = 0; i < nrows; i++) most = rows[i] > most ? rows[i] : most;
  if (launch_tool_arch_shape(&c, arch, tp, most)) return CLI_EXIT_MISUSE;
  hm_layer_config cfg;
  if (hm_config_by_name(model, (int32_t)layer, &cfg) != HM_OK) return cli_refuse(&c, "%s", hm_errmsg());
  launch_tool_arch_select(arch);
  const hm_part *mpart = part_word ? hm_part_find(part_word) : NULL;
  hm_runtime *rt = bench_open();
  if (mpart && !hm_runtime_is_sim(rt)) {
    fprintf(stderr, "hsa-mono-bench k1: --model needs the software agent's trace (HSAMONO_RUNTIME=sim)\n");
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  ctas = bench_tm_grid(rt, mpart, ctas);
  bench_tm_row mrows[MAX_ROWS_LIST];
  unsigned nm = 0;
  if (launch_tool_arch_agents(c.prog, rt, (uint32_t)tp, arch)) {
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  /* the part's HBM: the floor a step's bytes are set against */
  const bench_part part = bench_part_of(arch);
  const double peak = part.peak, real = part.real;
  const bool sim = hm_runtime_is_sim(rt);
  if (!steps) steps = sim ? 2 : 100;
  printf("# K1 (attention seam + front): %s layer %ld, hidden %u, %u heads, q_lora %u, ratio %u%s, TP%ld, %s (%s, "
         "HBM %.1f TB/s peak), %ld steps a width\n",
         model, layer, cfg.hidden, cfg.heads, cfg.q_lora, cfg.compress_ratio,
         hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE) ? " (index build)" : "", tp, arch_word, part.name,
         peak / 1e12, steps);
  int rc = CLI_EXIT_NOT_RUN;
  hm_k1_group *g = NULL;
  bench_tl *tl = NULL;
  launch_tool_source ws;
  bool ws_open = false;
  if (tlpath && !(tl = bench_tl_new(tlpath))) goto fail;
  if (launch_tool_source_open(&ws, NULL, &cfg, seed) != HM_OK) goto fail;
  ws_open = true;
  hm_k1_config kc = {0};
  launch_tool_grid(rt, ctas, &kc.min_cus, &kc.ctas);
  kc.timeline = tl != NULL || mpart; /* --model names the trace's stages from the timeline's */
  /* the group builds, uploads and trims one rank's weights at a time: the host never holds every
   * rank's at once */
  const hm_build_opts bo = {.parts = HM_WPART_ATTN, .arch = arch};
  if (hm_k1_group_create_source(rt, &cfg, (uint32_t)tp, &ws.src, &bo, &kc, &g) != HM_OK) goto fail;
  printf("# grid %u CTAs x 512 work-items a rank\n", hm_k1_grid(hm_k1_group_rank(g, 0)));
  char fpeak[24], freal[24];
  snprintf(fpeak, sizeof fpeak, "floor_us@%.1f", peak / 1e12);
  snprintf(freal, sizeof freal, "floor_us@%.1f", real / 1e12);
  printf("%6s %12s %12s %12s %12s %9s\n", "rows", "us/step", "bytes/rank", fpeak, freal, "x_floor");
  for (unsigned i = 0; i < nrows; i++) {
    const uint32_t S = rows[i];
    hm_gen_step step;
    /* one request of S rows; K1 writes the step's records into the caller's cache each step, and
     * every step starts from the same cache, so the steps are alike */
    hm_status st = hm_gen_step_make(&cfg, S, 1, BENCH_CTX, seed, &step);
    if (st) goto fail;
    double ns = 0;
    st = hm_k1_group_step(g, &step.in, 1, NULL, NULL); /* warm-up: the width's mailboxes */
    if (!st) st = hm_k1_group_step(g, &step.in, (uint32_t)steps, NULL, &ns);
    if (!st && mpart) {
      struct k1_step_arg a = {g, &step};
      hm_timeline view;
      bench_tm_row *m = &mrows[nm];
      if (bench_tm_step(rt, mpart, k1_step_once, &a, S, m)) st = HM_ERR_RUNTIME;
      else if (nm++, !(st = hm_k1_timeline(hm_k1_group_rank(g, 0), &view))) bench_tm_name(m, view.kernel, view.names, view.slots);
    }
    hm_gen_step_free(&step);
    for (uint32_t r = 0; !st && tl && r < (uint32_t)tp; r++) {
      hm_timeline view;
      char name[32];
      snprintf(name, sizeof name, "k1/rows=%u", S);
      if (!(st = hm_k1_timeline(hm_k1_group_rank(g, r), &view))) st = bench_tl_add(tl, name, r, &view);
    }
    if (st) goto fail;
    uint64_t bytes = hm_k1_step_bytes(hm_k1_group_rank(g, 0), S);
    double f8 = (double)bytes / peak * 1e6, f7 = (double)bytes / real * 1e6;
    printf("%6u %12.1f %12llu %12.2f %12.2f %9.1f  %s%s\n", S, ns / 1e3, (unsigned long long)bytes, f8, f7,
           ns / 1e3 / f8, arch_word, sim ? "  (software agent: CPU time)" : "");
  }
  if (mpart) bench_tm_print(mpart, "K1", mrows, nm), nm = 0;
  rc = tl && bench_tl_write(tl, "hsa-mono-bench k1") ? CLI_EXIT_NOT_RUN : 0;
  goto done;
fail:
  fprintf(stderr, "hsa-mono-bench k1: %s\n", hm_errmsg());
done:
  for (unsigned i = 0; i < nm; i++) bench_tm_row_free(&mrows[i]);
  bench_tl_free(tl);
  hm_k1_group_destroy(g);
  if (ws_open) launch_tool_source_close(&ws);
  if (bench_tm_trace_close() && !rc) rc = CLI_EXIT_NOT_RUN;
  hm_runtime_close(rt);
  return rc;
}
