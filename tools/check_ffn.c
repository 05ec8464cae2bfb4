/* tools/check_ffn.c: hsa-mono-check ffn: the FFN launch of a TP group against the fp32 reference,
 * per output the max-abs and relative error and the cosine, non-zero exit past tolerance. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "ffn_tool.h"
#include "formats.h"
#include "hm_ffn_group.h"
#include "hm_ref.h"
#include "hm_safetensors.h"
#include "launch_tool.h"

/* Tolerances, for a GPU as for the software agent (tests/layer/test_ffn.c holds the agent to
 * tighter, bit-level checks where it follows the reference's order):
 *  - x, the MoE output: the matrix instructions' internal summation differs from the reference's
 *    one-by-one f32 model, which flips an occasional bf16 or e4m3 rounding of one of the ~10^3
 *    terms of an output: relative L2 error 1e-2, cosine 0.9999;
 *  - res: bf16 of a fold whose mixes carry the GPU's ~1 ulp v_exp / v_rcp: a flipped rounding is
 *    2^-8 of one element: relative L2 4e-3, cosine 0.99999;
 *  - post, comb, pre: f32 after sigmoid and 20 Sinkhorn rounds of ~1 ulp operations: 1e-4. */
struct tol {
  const char *name;
  double rel, cos;
};
static const struct tol tols[] = {
    {"x", 1e-2, 0.9999}, {"res", 4e-3, 0.99999}, {"post", 1e-4, 0.9999999}, {"comb", 1e-4, 0.9999999},
    {"pre", 1e-4, 0.9999999}};

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-check ffn --tp N --rows R [--config v41-flash|tiny] [--layer L] [--experts E --topk K]\n"
          "                          [--seed S] [--ctas G] [--ckpt PATH] [--arch gfx950|gfx942]\n"
          "\n"
          "Runs the FFN launch of layer L (default 3) on a TP group of N ranks (2 or 4) in this process, each\n"
          "rank on its own agent (HSAMONO_RUNTIME: a GPU, or the software agent), on generated weights and\n"
          "inputs, and the fp32 reference on the same; prints per output (x, res, post, comb, pre) the\n"
          "max-abs and relative error and the cosine against the reference, checks that every rank holds the\n"
          "same bits, and exits 1 past tolerance (2 on misuse or a run that could not be done). On the software agent the\n"
          "grid is 8 CTAs a rank (CPU threads), on a GPU one CTA a CU; --ctas G sets another. A run with fewer\n"
          "experts or another top-k than the layer's (--experts, --topk) says so on every line ([REDUCED: ...]).\n"
          "--ckpt PATH takes the weights from a DeepSeek-V4.1 safetensors checkpoint (a directory of shards;\n"
          "with --experts E its first E experts). Either way the group builds the ranks' FFN weights one at a\n"
          "time, keeping on the host only what its device copies leave, and the reference builds each rank's\n"
          "again in turn: one rank's FFN weights in memory at once.\n"
          "--arch gfx942 (MI300X/MI325X): the gfx942 weight copies (spec/mono.md §4.4) on gfx942 agents against\n"
          "the reference's gfx942 mode (§2.6), TP 4 and at most 42 rows; on the software agent the tool makes\n"
          "its agents gfx942 itself (HSAMONO_SIM_ARCH, unless set otherwise). Default gfx950.\n");
}

int check_ffn(int argc, char **argv) {
  const char *model = "v41-flash", *arch_word = "gfx950", *ckpt = NULL;
  long layer = 3, tp = 0, rows = 0, experts = 0, topk = 0, ctas = 0;
  unsigned long long seed = 1;
  static const struct option opts[] = {{"tp", required_argument, 0, 't'},      {"rows", required_argument, 0, 'r'},
                                       {"config", required_argument, 0, 'c'},  {"layer", required_argument, 0, 'l'},
                                       {"experts", required_argument, 0, 'e'}, {"topk", required_argument, 0, 'k'},
                                       {"seed", required_argument, 0, 's'},    {"ctas", required_argument, 0, 'g'},
                                       {"arch", required_argument, 0, 'a'},    {"ckpt", required_argument, 0, 'C'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  cli c = {.prog = "hsa-mono-check ffn", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 't': cli_long_of(&c, launch_tool_tps, 2, &tp); break;
      case 'r': cli_long(&c, 1, HM_MAX_ROWS, &rows); break;
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'l': cli_long(&c, 0, HM_MAX_LAYERS - 1, &layer); break;
      case 'e': cli_long(&c, 1, LAUNCH_TOOL_MAX_EXPERTS, &experts); break;
      case 'k': cli_long(&c, 1, LAUNCH_TOOL_MAX_TOPK, &topk); break;
      case 's': cli_u64(&c, &seed); break;
      case 'g': cli_long(&c, 1, LAUNCH_TOOL_MAX_CTAS, &ctas); break;
      case 'a': cli_word(&c, launch_tool_arches, &arch_word); break;
      case 'C': ckpt = optarg; break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&c, argc, argv)) return CLI_EXIT_MISUSE;
  if (!tp) return cli_refuse(&c, "--tp is required");
  if (!rows) return cli_refuse(&c, "--rows is required");
  const hm_arch arch = launch_tool_arch(arch_word);
  if (launch_tool_arch_shape(&c, arch, tp, rows)) return CLI_EXIT_MISUSE;
  hm_layer_config cfg, named;
  bool reduced;
  if (ffn_tool_layer(model, layer, experts, topk, &cfg, &reduced) != HM_OK ||
      hm_config_by_name(model, (int32_t)layer, &named) != HM_OK)
    return cli_refuse(&c, "%s", hm_errmsg());
  launch_tool_arch_select(arch);
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt) != HM_OK) {
    fprintf(stderr, "hsa-mono-check ffn: %s\n", hm_errmsg());
    return 2;
  }
  if (launch_tool_arch_agents(c.prog, rt, (uint32_t)tp, arch)) {
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  /* the weights' source: the seeded generator, or a checkpoint (a reduced run reads its first
   * cfg.experts of the named layer's) */
  launch_tool_source ws;
  if (launch_tool_source_open(&ws, ckpt, &cfg, seed) != HM_OK) {
    fprintf(stderr, "hsa-mono-check ffn: %s\n", hm_errmsg());
    hm_runtime_close(rt);
    return 2;
  }
  const hm_build_opts bo = {.parts = HM_WPART_FFN, .source_experts = ws.ck ? named.experts : 0, .arch = arch};
  /* a run with fewer experts or another top-k than the layer's says so on every line (issue 18) */
  char note[80];
  snprintf(note, sizeof note, "  [REDUCED: %u of %u experts, top-%u of %u]", cfg.experts, named.experts, cfg.topk,
           named.topk);
  if (reduced) check_note(note);
  printf("hsa-mono-check ffn: %s layer %ld, %u experts top-%u%s, TP%ld, %ld rows, %s, seed %llu, weights from %s, on "
         "%s\n",
         model, layer, cfg.experts, cfg.topk, reduced ? " (REDUCED)" : "", tp, rows, arch_word, seed,
         ckpt ? ckpt : "the generator", hm_runtime_describe(rt));
  const uint32_t S = (uint32_t)rows, D = cfg.hidden, T = (uint32_t)tp;
  int rc = 2, pass = 1;
  hm_ffn_group *g = NULL;
  hm_tensor_set ref;
  hm_tset_init(&ref);
  float *buf[4 + 5 * 4] = {0};
  hm_ffn_outputs out[4];
  memset(out, 0, sizeof out);
  /* inputs: every rank's wo_b part (std 0.5), residual streams (std 4), mixes of a mild seam */
  float *res = malloc(sizeof(float) * S * 4 * D), *post = malloc(16 * S), *comb = malloc(64 * S),
        *pre = malloc(16 * S);
  buf[0] = res, buf[1] = post, buf[2] = comb, buf[3] = pre;
  hm_ffn_inputs in = {.rows = S, .res = res, .post = post, .comb = comb, .pre = pre};
  for (uint32_t r = 0; r < T; r++) {
    char n[32];
    snprintf(n, sizeof n, "check.part%u", r);
    float *p = buf[4 + r] = malloc(sizeof(float) * S * D);
    if (!p) goto done;
    hm_gen_normal(seed, n, (uint64_t)S * D, 0.0f, 0.5f, true, p);
    in.parts[r] = p;
  }
  if (!res || !post || !comb || !pre) goto done;
  hm_gen_normal(seed, "check.res", (uint64_t)S * 4 * D, 0.0f, 4.0f, true, res);
  hm_gen_normal(seed, "check.post", (uint64_t)S * 4, 1.0f, 0.2f, false, post);
  hm_gen_normal(seed, "check.pre", (uint64_t)S * 4, 0.5f, 0.1f, false, pre);
  for (uint32_t t = 0; t < S; t++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) comb[t * 16 + 4 * i + j] = i == j ? 0.7f : 0.1f;
  for (uint32_t r = 0; r < T; r++) {
    out[r].x = buf[8 + 4 * r] = malloc(sizeof(float) * S * D);
    out[r].res = buf[9 + 4 * r] = malloc(sizeof(float) * S * 4 * D);
    out[r].post = malloc(16 * S), out[r].comb = malloc(64 * S), out[r].pre = malloc(16 * S);
    if (!out[r].x || !out[r].res || !out[r].post || !out[r].comb || !out[r].pre) goto done;
  }
  hm_ffn_config fc = ffn_tool_launch(rt, reduced, ctas);
  /* the group builds, uploads and trims one rank's weights at a time; the reference builds each again */
  if (hm_ffn_group_create_source(rt, &cfg, T, &ws.src, &bo, &fc, &g) != HM_OK ||
      hm_ffn_group_step(g, &in, 1, out, NULL) != HM_OK)
    goto done;
  if (hm_ref_ffn_launch_source(&cfg, T, &ws.src, &bo, S, in.parts, res, post, comb, pre, &ref) != HM_OK) goto done;
  rc = 0;
  const float *rv[5] = {hm_tset_data(&ref, "out.x", HM_DT_F32, (uint64_t)S * D),
                        hm_tset_data(&ref, "out.res", HM_DT_F32, (uint64_t)S * 4 * D),
                        hm_tset_data(&ref, "out.post", HM_DT_F32, (uint64_t)S * 4),
                        hm_tset_data(&ref, "out.comb", HM_DT_F32, (uint64_t)S * 16),
                        hm_tset_data(&ref, "out.pre", HM_DT_F32, (uint64_t)S * 4)};
  const float *mine[5] = {out[0].x, out[0].res, out[0].post, out[0].comb, out[0].pre};
  const uint64_t n[5] = {(uint64_t)S * D, (uint64_t)S * 4 * D, (uint64_t)S * 4, (uint64_t)S * 16, (uint64_t)S * 4};
  printf("rank 0 against the reference%s:%s\n", arch == HM_ARCH_GFX942 ? " (its gfx942 mode)" : "",
         reduced ? note : "");
  for (int i = 0; i < 5; i++) pass &= rv[i] && check_compare(tols[i].name, mine[i], rv[i], n[i], tols[i].rel, tols[i].cos);
  for (uint32_t r = 1; r < T; r++) {
    int same = !memcmp(out[r].x, out[0].x, sizeof(float) * S * D) &&
               !memcmp(out[r].res, out[0].res, sizeof(float) * S * 4 * D);
    printf("  rank %u: %s rank 0's bits%s\n", r, same ? "holds" : "DOES NOT hold", reduced ? note : "");
    pass &= same;
  }
  rc = pass ? 0 : 1;
  printf("%s%s\n", pass ? "PASS" : "FAIL", reduced ? note : "");
done:
  if (rc == 2) fprintf(stderr, "hsa-mono-check ffn: %s\n", hm_errmsg());
  hm_ffn_group_destroy(g);
  for (uint32_t r = 0; r < T && r < 4; r++) free(out[r].post), free(out[r].comb), free(out[r].pre);
  for (unsigned i = 0; i < sizeof buf / sizeof *buf; i++) free(buf[i]);
  hm_tset_free(&ref);
  launch_tool_source_close(&ws);
  hm_runtime_close(rt);
  return rc;
}
