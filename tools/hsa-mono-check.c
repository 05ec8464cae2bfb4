/* tools/hsa-mono-check.c: the correctness harness: `ref` writes the fp32 reference of a layer step as
 * safetensors; ffn, k1, layer and model (check_*.c) check launches, a whole layer, chained layers. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "cli.h"
#include "ffn_tool.h"
#include "launch_tool.h"
#include "hm_config.h"
#include "hm_ref.h"
#include "hm_safetensors.h"
#include "hm_weights.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-check ffn --tp N --rows R [options]   (ffn --help: the FFN launch against the reference)\n"
          "       hsa-mono-check k1 --tp N --rows R --ratio {0,1,2} [options]   (k1 --help: K1 against the reference)\n"
          "       hsa-mono-check layer --layer L --tp N --rows R [options]   (layer --help: a whole layer against the reference)\n"
          "       hsa-mono-check model --layers A-B --tp N --rows R [options]   (model --help: layers A..B chained over steps)\n"
          "       hsa-mono-check ref --config tiny|v41-flash --layer L --rows R --tp N --seed S --out DIR\n"
          "                          [--launch layer|ffn] [--experts E --topk K] [--ckpt PATH]\n"
          "                          [--context C] [--reqs Q] [--cases LIST] [--dump-weights]\n"
          "                          [--arch gfx950|gfx942]\n"
          "\n"
          "Runs the fp32 reference of one decode step of layer L for a TP group of N ranks (1, 2, 4) and\n"
          "writes DIR/inputs.safetensors and one file a stage (DIR/<stage>.safetensors, e.g. k1.seam,\n"
          "rank0.attn, router, out); --dump-weights also DIR/weights.rank<r>.safetensors (the kernels'\n"
          "layouts). Weights come from the seeded generator, or with --ckpt from a DeepSeek-V4.1\n"
          "safetensors checkpoint (its directory of shards, docs/checkpoint.md), built a rank at a time:\n"
          "the attention's of every rank, the FFN's one rank's at once (a V4.1-Flash layer at TP 4: ~2 GB,\n"
          "not ~8). --launch ffn runs the FFN launch alone on generated wo_b parts.\n"
          "--cases makes the step's hard cases, a comma-separated list of: pad (the last row padding, slot\n"
          "-1), dead-chunk (top-k lists a whole key chunk short), straddle (requests begin at odd positions:\n"
          "a ratio-2 group's first token pending from the prefill), start (requests at positions 0 and 1),\n"
          "long (over 512 compressed entries a row, so the indexer's scores decide its top-k), neg-zero (-0,\n"
          "OCP byte 0x80, in the compressed records: FNUZ's NaN, which gfx942 must not read so).\n"
          "On an index source DIR/select.safetensors holds the select step's outputs: the compressed\n"
          "records and indexer keys the step made, the keys and scores the indexer read, the candidate masks.\n"
          "--experts/--topk shrink the routed experts (full dims with fewer experts; with --ckpt the first E\n"
          "of the checkpoint's experts and the gate's and bias's first E rows); the line printed, any refusal\n"
          "and every file's metadata (\"reduced\") then say the run is reduced.\n"
          "--arch gfx942: the gfx942 weight copies and the reference's gfx942 mode (spec/mono.md §2.6: FNUZ\n"
          "activations, one rounding a 32-wide K block, 64-key chunks; the SWA cache FNUZ), TP 4 and at most\n"
          "42 rows; quantised activations are written as U8 (FNUZ bytes). Default gfx950.\n");
}

/* a reduced run's note, on every line ref prints (empty for a full run) */
static char ref_note[64];

static int fail(const char *what) {
  fprintf(stderr, "hsa-mono-check ref: %s: %s%s\n", what, hm_errmsg(), ref_note);
  return CLI_EXIT_NOT_RUN;
}

/* the trace grouped by stage (the name without its last component), one file each */
static hm_status write_stages(const char *dir, const hm_tensor_set *trace, const char *const *k, const char *const *v,
                              uint32_t nm, uint32_t *files) {
  uint8_t *done = calloc(trace->count ? trace->count : 1, 1);
  if (!done) return hm_fail(HM_ERR_NO_MEMORY, "stage list");
  hm_status st = HM_OK;
  *files = 0;
  for (uint32_t i = 0; i < trace->count && st == HM_OK; i++) {
    if (done[i]) continue;
    const char *n = trace->t[i].name, *dot = strrchr(n, '.');
    size_t pl = dot ? (size_t)(dot - n) : strlen(n);
    hm_tensor_set grp;
    hm_tset_init(&grp);
    for (uint32_t j = i; j < trace->count && st == HM_OK; j++) {
      const char *m = trace->t[j].name, *d2 = strrchr(m, '.');
      size_t ml = d2 ? (size_t)(d2 - m) : strlen(m);
      if (done[j] || ml != pl || strncmp(m, n, pl)) continue;
      hm_tensor *t;
      st = hm_tset_add(&grp, m, trace->t[j].dtype, trace->t[j].ndim, trace->t[j].shape, &t);
      if (st == HM_OK) memcpy(t->data, trace->t[j].data, t->nbytes);
      done[j] = 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%.*s.safetensors", dir, (int)pl, n);
    if (st == HM_OK) st = hm_st_write(path, &grp, k, v, nm);
    if (st == HM_OK) (*files)++;
    hm_tset_free(&grp);
  }
  free(done);
  return st;
}

static int cmd_ref(int argc, char **argv) {
  const char *model = NULL, *out = NULL, *launch = "layer", *ckpt = NULL, *arch = "gfx950";
  long layer = -1, rows = 0, tp = 0, experts = 0, topk = 0, context = 300, reqs = 1;
  uint32_t cases = 0;
  const char *cases_arg = "none";
  unsigned long long seed = 0;
  int have_seed = 0, dump_weights = 0;
  static const struct option opts[] = {{"config", required_argument, 0, 'c'},  {"layer", required_argument, 0, 'l'},
                                       {"rows", required_argument, 0, 'r'},    {"tp", required_argument, 0, 't'},
                                       {"seed", required_argument, 0, 's'},    {"out", required_argument, 0, 'o'},
                                       {"launch", required_argument, 0, 'L'},  {"experts", required_argument, 0, 'e'},
                                       {"topk", required_argument, 0, 'k'},    {"ckpt", required_argument, 0, 'C'},
                                       {"context", required_argument, 0, 'x'}, {"reqs", required_argument, 0, 'q'},
                                       {"dump-weights", no_argument, 0, 'W'},  {"help", no_argument, 0, 'h'},
                                       {"arch", required_argument, 0, 'a'},    {"cases", required_argument, 0, 'G'},
                                       {0, 0, 0, 0}};
  static const long tps[] = {1, 2, 4};
  static const char *const launches[] = {"layer", "ffn", NULL};
  cli c = {.prog = "hsa-mono-check ref", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'l': cli_long(&c, 0, HM_MAX_LAYERS - 1, &layer); break;
      case 'r': cli_long(&c, 1, HM_MAX_ROWS, &rows); break;
      case 't': cli_long_of(&c, tps, 3, &tp); break;
      case 's': have_seed = cli_u64(&c, &seed); break;
      case 'o': out = optarg; break;
      case 'L': cli_word(&c, launches, &launch); break;
      case 'e': cli_long(&c, 1, LAUNCH_TOOL_MAX_EXPERTS, &experts); break;
      case 'k': cli_long(&c, 1, LAUNCH_TOOL_MAX_TOPK, &topk); break;
      case 'C': ckpt = optarg; break;
      case 'x': cli_long(&c, 0, LAUNCH_TOOL_SLOTS - 1, &context); break;
      case 'q': cli_long(&c, 1, HM_MAX_ROWS, &reqs); break;
      case 'W': dump_weights = 1; break;
      case 'a': cli_word(&c, launch_tool_arches, &arch); break;
      case 'G':
        if (hm_gen_cases_parse(optarg, &cases) != HM_OK) return cli_refuse(&c, "--cases '%s': %s", optarg, hm_errmsg());
        cases_arg = optarg;
        break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&c, argc, argv)) return CLI_EXIT_MISUSE;
  /* the required options, in the usage's order */
  const char *missing = !model ? "--config" : layer < 0 ? "--layer" : !rows ? "--rows" : !tp ? "--tp"
                        : !have_seed ? "--seed" : !out ? "--out" : NULL;
  if (missing) return cli_refuse(&c, "%s is required", missing);
  const bool gfx942 = launch_tool_arch(arch) == HM_ARCH_GFX942;
  /* the gfx942 copies and kernels are TP4 only, at most 42 rows (spec/mono.md §5.1.3, §5.3.1) */
  if (launch_tool_arch_shape(&c, launch_tool_arch(arch), tp, rows)) return CLI_EXIT_MISUSE;
  if (launch_tool_step_shape(&c, rows, reqs, context, 0)) return CLI_EXIT_MISUSE;
  if ((cases & HM_GEN_PAD) && rows < 2) return cli_refuse(&c, "--cases pad: needs --rows 2 or more (one row padding)");
  hm_layer_config cfg;
  bool reduced;
  hm_layer_config named;
  if (ffn_tool_layer(model, layer, experts, topk, &cfg, &reduced) != HM_OK ||
      hm_config_by_name(model, (int32_t)layer, &named) != HM_OK)
    return cli_refuse(&c, "%s", hm_errmsg());
  ref_note[0] = 0;
  if (reduced && cfg.topk != named.topk)
    snprintf(ref_note, sizeof ref_note, "  [REDUCED: %u of %u experts, top-%u of %u]", cfg.experts, named.experts,
             cfg.topk, named.topk);
  else if (reduced)
    snprintf(ref_note, sizeof ref_note, "  [REDUCED: %u of %u experts]", cfg.experts, named.experts);
  hm_rank_dims dims;
  if (hm_rank_dims_for(&cfg, (uint32_t)tp, &dims) != HM_OK) return cli_refuse(&c, "%s", hm_errmsg());
  if (mkdir(out, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "hsa-mono-check ref: %s: %s\n", out, strerror(errno));
    return CLI_EXIT_NOT_RUN;
  }
  bool ffn = !strcmp(launch, "ffn");
  /* the weights: generator or checkpoint */
  hm_gen gen;
  hm_ckpt *ck = NULL;
  hm_source src;
  if (hm_gen_init(&gen, &cfg, seed) != HM_OK) return fail("generator");
  if (ckpt) {
    if (hm_ckpt_open(ckpt, &ck) != HM_OK) {
      int rc = fail("checkpoint");
      hm_gen_free(&gen); /* the generator's tables (64 KiB), made before the checkpoint was tried */
      return rc;
    }
    src = hm_ckpt_source(ck);
  } else {
    src = hm_gen_source(&gen);
  }
  uint32_t parts = ffn ? HM_WPART_FFN : 0;
  /* a checkpoint holds the named layer's experts; a reduced run reads the first cfg.experts */
  hm_build_opts bo = {.parts = parts, .rope_positions = (uint32_t)(context + rows + 64),
                      .source_experts = ckpt ? named.experts : 0, .arch = gfx942 ? HM_ARCH_GFX942 : HM_ARCH_GFX950};
  hm_gen_step step;
  int rc = CLI_EXIT_NOT_RUN;
  hm_tensor_set inputs, trace;
  hm_tset_init(&inputs);
  hm_tset_init(&trace);
  hm_gen_opts go = {.S = (uint32_t)rows, .reqs = (uint32_t)reqs, .ctx = (uint32_t)context, .seed = seed,
                    .cases = cases};
  if (hm_gen_step_make_opts(&cfg, &go, &step) != HM_OK) {
    fail("step inputs");
    goto done_w;
  }
  for (long t = 0; t < rows; t++) /* RoPE rows for the step's positions (long contexts raise them) */
    if (step.pos[t] + 64 > (int64_t)bo.rope_positions) bo.rope_positions = (uint32_t)(step.pos[t] + 64);
  step.in.engram_table = &src;
  if (gfx942) hm_ref_kv_cache_to_fnuz(&step.in.swa); /* gfx942's SWA cache holds FNUZ records (§2.6) */
  if (hm_gen_step_tensors(&step, &cfg, &inputs) != HM_OK) {
    fail("inputs");
    goto done;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  hm_status st;
  if (ffn) {
    /* wo_b's unreduced output of every rank: bf16 values, std 0.5 */
    float *p[HM_LAYER_MAX_TP];
    for (uint32_t r = 0; r < (uint32_t)tp; r++) {
      char n[32];
      snprintf(n, sizeof n, "in.part%u", r);
      p[r] = hm_tset_new(&inputs, n, HM_DT_F32, (uint64_t)rows, cfg.hidden, 0, 0);
      if (!p[r]) {
        fail("inputs");
        goto done;
      }
      hm_gen_normal(seed, n, (uint64_t)rows * cfg.hidden, 0.0f, 0.5f, true, p[r]);
    }
    st = hm_ref_ffn_launch_source(&cfg, (uint32_t)tp, &src, &bo, (uint32_t)rows, (const float *const *)p, step.res,
                                  step.post, step.comb, step.pre, &trace);
  } else {
    hm_select_state *sel = NULL;
    if (hm_select_state_new(&sel) != HM_OK || hm_gen_step_seed_select(&step, &cfg, sel, seed) != HM_OK) {
      hm_select_state_free(sel);
      fail("select state");
      goto done;
    }
    st = hm_ref_layer_step_source(&cfg, (uint32_t)tp, &src, &bo, &step.in, NULL, sel, &trace);
    hm_select_state_free(sel);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (st != HM_OK) {
    fail("reference");
    goto done;
  }
  /* the files, every one carrying the run's parameters */
  char lbuf[24], rbuf[24], tbuf[24], sbuf[32], ebuf[16], redbuf[48];
  snprintf(lbuf, sizeof lbuf, "%ld", layer);
  snprintf(rbuf, sizeof rbuf, "%ld", rows);
  snprintf(tbuf, sizeof tbuf, "%ld", tp);
  snprintf(sbuf, sizeof sbuf, "%llu", seed);
  snprintf(ebuf, sizeof ebuf, "%u", cfg.experts);
  snprintf(redbuf, sizeof redbuf, "%u of %u experts", cfg.experts, named.experts);
  const char *mk[] = {"model", "layer",   "rows",  "tp",    "seed",
                      "launch", "experts", "weights", "arch", "cases", "reduced"};
  const char *mv[] = {model, lbuf, rbuf, tbuf, sbuf, launch, ebuf, ckpt ? ckpt : "generator", arch, cases_arg, redbuf};
  const uint32_t nm = sizeof mk / sizeof *mk - !reduced; /* "reduced" only on a reduced run */
  char path[4096];
  snprintf(path, sizeof path, "%s/inputs.safetensors", out);
  if (hm_st_write(path, &inputs, mk, mv, nm) != HM_OK) {
    fail("write");
    goto done;
  }
  /* asked for: every rank's weights, built and written a rank at a time */
  for (uint32_t r = 0; dump_weights && r < (uint32_t)tp; r++) {
    hm_layer_weights w;
    if (hm_weights_build(&cfg, (uint32_t)tp, r, &src, &bo, &w) != HM_OK) {
      fail("weights");
      goto done;
    }
    snprintf(path, sizeof path, "%s/weights.rank%u.safetensors", out, r);
    hm_status ws = hm_st_write(path, &w.set, mk, mv, nm);
    hm_weights_free(&w);
    if (ws != HM_OK) {
      fail("write");
      goto done;
    }
  }
  uint32_t files = 0;
  if (write_stages(out, &trace, mk, mv, nm, &files) != HM_OK) {
    fail("write");
    goto done;
  }
  printf("hsa-mono-check ref: %s layer %ld (%s launch), %ld rows, TP%ld, %s, seed %llu: %u stage files, %u tensors, "
         "reference %.2f s (weights built a rank at a time) -> %s%s\n",
         model, layer, launch, rows, tp, arch, seed, files, trace.count,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), out, ref_note);
  rc = 0;
done:
  hm_gen_step_free(&step);
done_w:
  hm_tset_free(&inputs);
  hm_tset_free(&trace);
  hm_gen_free(&gen);
  hm_ckpt_close(ck);
  return rc;
}

int main(int argc, char **argv) {
  /* The commands build a rank's weights, hand them to its device and free them before the next rank's
   * (tensors of 1-100 MB, in the ranks' threads). glibc raises its mmap threshold to the size of each
   * mmap'd block freed, so the next rank's tensors would come from the arenas and stay in the process
   * once freed (K1 at V4.1-Flash TP 4: 471 MB peak either way); a fixed threshold keeps every tensor
   * its own mapping, returned on free (355 MB). */
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  if (argc < 2) {
    fprintf(stderr, "%s: a command is required\n", "hsa-mono-check");
    usage(stderr);
    return CLI_EXIT_MISUSE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "ref")) return cmd_ref(argc - 1, argv + 1);
  if (!strcmp(argv[1], "ffn")) return check_ffn(argc - 1, argv + 1);
  if (!strcmp(argv[1], "k1")) return check_k1(argc - 1, argv + 1);
  if (!strcmp(argv[1], "layer")) return check_layer(argc - 1, argv + 1);
  if (!strcmp(argv[1], "model")) return check_model(argc - 1, argv + 1);
  fprintf(stderr, "hsa-mono-check: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
