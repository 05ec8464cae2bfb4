/* tools/bench/ffn.c: hsa-mono-bench ffn: µs a step of the FFN launch (a TP group in this process,
 * a rank an agent), the bytes the step has to read, and the floor at the part's HBM bandwidth. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ffn_tool.h"
#include "../launch_tool.h"
#include "bench.h"
#include "timeline.h"
#include "tmodel.h"
#include "hm_config.h"
#include "hm_ffn_group.h"
#include "hm_ref.h"

#define MAX_ROWS_LIST 8

struct ffn_step_arg {
  hm_ffn_group *g;
  const hm_ffn_inputs *in;
};
static hm_status ffn_step_once(void *arg) {
  const struct ffn_step_arg *a = arg;
  return hm_ffn_group_step(a->g, a->in, 1, NULL, NULL);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-bench ffn [--tp N] [--rows R[,R...]] [--config v41-flash|tiny] [--layer L]\n"
          "                          [--experts E --topk K] [--steps N] [--seed S] [--ctas G] [--arch A]\n"
          "                          [--protocol word|pair]\n"
          "                          " BENCH_TL_USAGE " " BENCH_TM_USAGE "\n"
          "\n"
          "Runs the FFN launch of layer L (default 3) for a TP group (default 4) in this process, each rank\n"
          "on its own agent, `steps` steps (default 100 on a GPU, 2 on the software agent, after one\n"
          "warm-up) of generated inputs for each row count (default 1,8), and prints µs a step on rank 0,\n"
          "the bytes the step has to read on a rank (the chosen experts' weights, the shared expert, the\n"
          "router, the seam, the step's I/O) and the floor those bytes take at MI355X's 8.0 TB/s peak\n"
          "(7.2 TB/s measured). On the software agent the default build cuts the routed experts to 32\n"
          "(top-6) so a step takes seconds, not minutes; its times are CPU times, printed for the record,\n"
          "not GPU figures, and its grid is 8 CTAs a rank (--ctas G: another grid; a GPU's default is one\n"
          "CTA a CU).\n"
          "--arch gfx942 (MI300X/MI325X): the gfx942 weight copies on gfx942 agents (the software agent made one\n"
          "unless HSAMONO_SIM_ARCH says otherwise), TP 4 and at most 42 rows, the floor at MI300X's 5.3 TB/s\n"
          "peak (4.2 TB/s measured). Default gfx950.\n"
          "--protocol: the group's heap's all-reduce protocol (device/ar.h; default word, the library's).\n"
          BENCH_TL_HELP BENCH_TM_HELP);
}

int bench_ffn(int argc, char **argv) {
  const char *model = "v41-flash", *tlpath = NULL, *arch_word = "gfx950", *part_word = NULL, *proto_word = "word";
  const char *trace_path = NULL;
  static const char *const proto_words[] = {"word", "pair", NULL};
  long layer = 3, tp = 4, steps = 0, experts = -1, topk = 0, ctas = 0;
  unsigned long long seed = 1;
  uint32_t rows[MAX_ROWS_LIST] = {1, 8};
  unsigned nrows = 2;
  static const struct option opts[] = {{"tp", required_argument, 0, 't'},      {"rows", required_argument, 0, 'r'},
                                       {"config", required_argument, 0, 'c'},  {"layer", required_argument, 0, 'l'},
                                       {"experts", required_argument, 0, 'e'}, {"topk", required_argument, 0, 'k'},
                                       {"steps", required_argument, 0, 'n'},   {"seed", required_argument, 0, 's'},
                                       {"ctas", required_argument, 0, 'g'},    {"timeline", required_argument, 0, 'T'},
                                       {"arch", required_argument, 0, 'a'},    {"help", no_argument, 0, 'h'},
                                       {"model", required_argument, 0, 'M'}, {"trace", required_argument, 0, 'R'},   {"protocol", required_argument, 0, 'p'},
                                       {0, 0, 0, 0}};
  cli c = {.prog = "hsa-mono-bench ffn", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 't': cli_long_of(&c, launch_tool_tps, 2, &tp); break;
      case 'r': bench_rows(&c, rows, MAX_ROWS_LIST, &nrows); break;
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'l': cli_long(&c, 0, HM_MAX_LAYERS - 1, &layer); break;
      case 'e': cli_long(&c, 1, LAUNCH_TOOL_MAX_EXPERTS, &experts); break;
      case 'k': cli_long(&c, 1, LAUNCH_TOOL_MAX_TOPK, &topk); break;
      case 'n': cli_long(&c, 1, LAUNCH_TOOL_MAX_STEPS, &steps); break;
      case 's': cli_u64(&c, &seed); break;
      case 'g': cli_long(&c, 1, LAUNCH_TOOL_MAX_CTAS, &ctas); break;
      case 'T': bench_tl_arg(&c, &tlpath); break;
      case 'a': cli_word(&c, launch_tool_arches, &arch_word); break;
      case 'M': cli_word(&c, bench_tm_parts, &part_word); break;
      case 'R': bench_tm_trace_arg(&c, &trace_path); break;
      case 'p': cli_word(&c, proto_words, &proto_word); break;
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
  /* a part replays its own arch's kernels: MI300X's has no gfx950 instruction, MI355X's no gfx942 code */
  if (part_word && (arch == HM_ARCH_GFX942) != !strcmp(part_word, "mi300x"))
    return cli_refuse(&c, "--model %s: the part of --arch %s is %s", part_word, arch_word,
                      arch == HM_ARCH_GFX942 ? "mi300x" : "mi355x");
  hm_layer_config cfg;
  bool reduced;
  if (ffn_tool_layer(model, layer, experts > 0 ? experts : 0, topk, &cfg, &reduced) != HM_OK)
    return cli_refuse(&c, "%s", hm_errmsg());
  launch_tool_arch_select(arch);
  const hm_part *mpart = part_word ? hm_part_find(part_word) : NULL;
  hm_runtime *rt = bench_open();
  if (mpart && !hm_runtime_is_sim(rt)) {
    fprintf(stderr, "hsa-mono-bench ffn: --model needs the software agent's trace (HSAMONO_RUNTIME=sim)\n");
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
  if (!steps) steps = hm_runtime_is_sim(rt) ? 2 : 100;
  /* the software agent's default: 32 experts of V4.1-Flash's 384, so a step takes seconds */
  if (experts < 0) experts = hm_runtime_is_sim(rt) && !strcmp(model, "v41-flash") ? 32 : 0;
  if (ffn_tool_layer(model, layer, experts, topk, &cfg, &reduced) != HM_OK) {
    fprintf(stderr, "hsa-mono-bench ffn: %s\n", hm_errmsg());
    hm_runtime_close(rt);
    return CLI_EXIT_MISUSE;
  }
  printf("# FFN launch: %s layer %ld, hidden %u, %u experts top-%u%s, TP%ld, %s (%s, HBM %.1f TB/s peak), %ld steps a "
         "width, the %s all-reduce protocol\n",
         model, layer, cfg.hidden, cfg.experts, cfg.topk, reduced ? " (REDUCED expert count)" : "", tp, arch_word,
         part.name, peak / 1e12, steps, proto_word);
  int rc = CLI_EXIT_NOT_RUN;
  hm_ffn_group *g = NULL;
  bench_tl *tl = NULL;
  launch_tool_source ws;
  bool ws_open = false;
  if (tlpath && !(tl = bench_tl_new(tlpath))) goto fail;
  if (launch_tool_source_open(&ws, NULL, &cfg, seed) != HM_OK) goto fail;
  ws_open = true;
  hm_ffn_config fc = ffn_tool_launch(rt, reduced, ctas);
  fc.timeline = tl != NULL || mpart; /* --model names the trace's stages from the timeline's */
  fc.ar_protocol = !strcmp(proto_word, "pair") ? HM_AR_PROTOCOL_PAIR : HM_AR_PROTOCOL_WORD;
  /* the group builds, uploads and trims one rank's weights at a time: the host never holds every
   * rank's at once (at TP 4 that was most of the bench's peak memory) */
  const hm_build_opts bo = {.parts = HM_WPART_FFN, .arch = arch};
  if (hm_ffn_group_create_source(rt, &cfg, (uint32_t)tp, &ws.src, &bo, &fc, &g) != HM_OK) goto fail;
  printf("# grid %u CTAs x 512 work-items a rank\n", hm_ffn_grid(hm_ffn_group_rank(g, 0)));
  char fpeak[24], freal[24];
  snprintf(fpeak, sizeof fpeak, "floor_us@%.1f", peak / 1e12);
  snprintf(freal, sizeof freal, "floor_us@%.1f", real / 1e12);
  printf("%6s %12s %10s %12s %12s %12s %9s\n", "rows", "us/step", "experts", "bytes/rank", fpeak, freal, "x_floor");
  for (unsigned i = 0; i < nrows; i++) {
    const uint32_t S = rows[i], D = cfg.hidden;
    float *parts[4] = {0}, *res = malloc(sizeof(float) * S * 4 * D), *post = malloc(sizeof(float) * S * 4);
    float *comb = malloc(sizeof(float) * S * 16), *pre = malloc(sizeof(float) * S * 4);
    hm_ffn_inputs in = {.rows = S, .res = res, .post = post, .comb = comb, .pre = pre};
    int ok = res && post && comb && pre;
    for (uint32_t r = 0; ok && r < (uint32_t)tp; r++) {
      char n[32];
      snprintf(n, sizeof n, "bench.part%u", r);
      ok = (parts[r] = malloc(sizeof(float) * S * D)) != NULL;
      if (ok) hm_gen_normal(seed, n, (uint64_t)S * D, 0.0f, 0.5f, true, parts[r]);
      in.parts[r] = parts[r];
    }
    if (ok) {
      hm_gen_normal(seed, "bench.res", (uint64_t)S * 4 * D, 0.0f, 4.0f, true, res);
      for (uint32_t t = 0; t < S; t++)
        for (int k = 0; k < 4; k++) {
          post[t * 4 + k] = 1.0f, pre[t * 4 + k] = 0.25f;
          for (int m = 0; m < 4; m++) comb[t * 16 + 4 * k + m] = k == m ? 1.0f : 0.0f;
        }
    }
    double ns = 0;
    uint64_t bytes = 0;
    uint32_t ne = 0;
    hm_status st = ok ? hm_ffn_group_step(g, &in, 1, NULL, NULL) : HM_ERR_NO_MEMORY; /* warm-up: the width's mailboxes */
    if (!st) st = hm_ffn_group_step(g, &in, (uint32_t)steps, NULL, &ns);
    if (!st) st = hm_ffn_step_bytes(hm_ffn_group_rank(g, 0), S, &bytes, &ne);
    if (!st && mpart) {
      struct ffn_step_arg a = {g, &in};
      hm_timeline view;
      bench_tm_row *m = &mrows[nm];
      if (bench_tm_step(rt, mpart, ffn_step_once, &a, S, m)) st = HM_ERR_RUNTIME;
      else if (nm++, !(st = hm_ffn_timeline(hm_ffn_group_rank(g, 0), &view))) bench_tm_name(m, view.kernel, view.names, view.slots);
    }
    for (uint32_t r = 0; !st && tl && r < (uint32_t)tp; r++) {
      hm_timeline view;
      char name[32];
      snprintf(name, sizeof name, "ffn/rows=%u", S);
      if (!(st = hm_ffn_timeline(hm_ffn_group_rank(g, r), &view))) st = bench_tl_add(tl, name, r, &view);
    }
    for (uint32_t r = 0; r < 4; r++) free(parts[r]);
    free(res), free(post), free(comb), free(pre);
    if (st) goto fail;
    double f8 = (double)bytes / peak * 1e6, f7 = (double)bytes / real * 1e6;
    printf("%6u %12.1f %10u %12llu %12.2f %12.2f %9.1f  %s%s\n", S, ns / 1e3, ne, (unsigned long long)bytes, f8, f7,
           ns / 1e3 / f8, arch_word, hm_runtime_is_sim(rt) ? "  (software agent: CPU time)" : "");
  }
  if (mpart) bench_tm_print(mpart, "the FFN launch", mrows, nm), nm = 0;
  rc = tl && bench_tl_write(tl, "hsa-mono-bench ffn") ? CLI_EXIT_NOT_RUN : 0;
  goto done;
fail:
  fprintf(stderr, "hsa-mono-bench ffn: %s\n", hm_errmsg());
done:
  for (unsigned i = 0; i < nm; i++) bench_tm_row_free(&mrows[i]);
  bench_tl_free(tl);
  hm_ffn_group_destroy(g);
  if (ws_open) launch_tool_source_close(&ws);
  if (bench_tm_trace_close() && !rc) rc = CLI_EXIT_NOT_RUN;
  hm_runtime_close(rt);
  return rc;
}
