/* tools/check_layer.c: hsa-mono-check layer: one whole layer (K1 -> [select -> keylist] -> K2) of a TP
 * group against the fp32 reference: errors per output, the route, the key table; non-zero exit past tolerance. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "ffn_tool.h"
#include "hm_ref.h"
#include "hm_safetensors.h"
#include "launch_tool.h"
#include "layer_tool.h"

/* Tolerances, for a GPU as for the software agent (tests/layer/test_layer.c holds the agent to
 * tighter, stage-by-stage checks where it follows the reference's order). The layer's outputs pass
 * through K1's GEMVs, the attention, wo_a and wo_b before the FFN seam, each of which flips an
 * occasional bf16 or e4m3 rounding against the reference's one-by-one f32 model:
 *  - res (the FFN seam's fold of the attention output into K1's streams) and normed (the FFN seam's
 *    RMSNorm, the router's input): the attention output enters as a term beside streams of rms ~4,
 *    so its flipped roundings move a stream element by ~2^-8 now and then (2e-4 relative measured on
 *    the software agent): relative L2 4e-3, cosine 0.99999 (K1's res budget, room for a GPU's ulps);
 *  - post, comb, pre: the mixes of that residual (the mix GEMV, sigmoid, 20 Sinkhorn rounds) move
 *    with its flipped elements (9e-5 relative measured): 1e-3 relative L2 (test_layer.c holds the
 *    agent to 1e-3 absolute on the kernel's own inputs), cosine 0.999999;
 *  - x against the reference's MoE run on the kernel's own normed rows (x.own) and the route there:
 *    the MoE budget and the tie rule of check_moe.c, free of the earlier stages' drift;
 *  - x against the whole chain, token by token: the MoE amplifies its input's error (a flipped bf16
 *    element of a normed row can move its 32-group's e4m3 scale and requantise the group): tokens
 *    whose normed rows are within 1.3e-3 of the reference's came out up to 2.6e-2 off on the
 *    software agent (576 tokens of layers 3 and 21, TP2 and TP4), so a token keeping the reference's
 *    route is held to 0.1. A token whose route flips at a near tie of its biased scores changes as a
 *    whole (0.37 measured), so those are counted instead: at most TOL_FLIPS(S) (1 in the 576 above);
 *    x.own and the route line hold the MoE itself to its budget;
 *  - the top-k of an index source: exact while a row's compressed entries fit the 512 picked (every
 *    entry is picked); past that the indexer's scores from the kernel's q latent (K1's GEMV budget)
 *    may reorder a near tie: 2 % of those rows' entries;
 *  - the key table and klen (K1's, or keylist's on the kernel's own top-k): exact, integers from the
 *    metadata alone. */
#define TOL_RES_REL 4e-3
#define TOL_RES_COS 0.99999
#define TOL_MIX_REL 1e-3
#define TOL_MIX_COS 0.999999
#define TOL_X_TOKEN 0.1
#define TOL_FLIPS(S) (1 + (S) / 16)
#define TOL_TOPK_PCT 2

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-check layer --layer L --tp N --rows R [--config v41-flash|tiny] [--experts E]\n"
          "                            [--ctx C] [--reqs Q] [--block B] [--seed S] [--ctas G] [--ckpt PATH]\n"
          "                            [--arch A]\n"
          "\n"
          "Runs one whole layer L (0..42, any kind: K1, the select and keylist launch on an index source,\n"
          "K2; the embedding on layer 0, the Engram block on 1 and 14) on a TP group of N ranks (2 or 4) in\n"
          "this process, each rank on its own agent (HSAMONO_RUNTIME: a GPU, or the software agent), on\n"
          "generated weights and a generated step of R rows in Q requests (default 1) at context C (default\n"
          "300) with SWA blocks of B slots (default 64), and the fp32 reference on a copy of the same step.\n"
          "Prints per output (x, res, post, comb, pre) the max-abs and relative error and the cosine against\n"
          "the reference; x token by token (a token whose route flipped at a near tie differs as a whole) and\n"
          "against the reference's MoE on the kernel's own normed rows, with its route; an index source's\n"
          "top-k; the key table's and klen's differing entries; whether every rank holds rank 0's outputs.\n"
          "Exits 1 past tolerance, 2 on misuse or a failed run. On the software agent the routed experts\n"
          "of v41-flash are cut to 32 (--experts E: another count; every line then says the run is reduced)\n"
          "and the grid is 8 CTAs a rank (CPU threads), on a GPU one CTA a CU; --ctas G sets another.\n"
          "--ckpt PATH takes the weights and the Engram table from a DeepSeek-V4.1 safetensors checkpoint (a\n"
          "directory of shards; with --experts E its first E experts). Either way the group builds the ranks'\n"
          "weights one at a time and keeps on the host only what a step's host work reads; the reference\n"
          "builds each rank's again in turn: one rank's whole weights in memory at once.\n"
          LAUNCH_TOOL_ARCH_LAYER_HELP);
}

static uint64_t count_diff_i32(const int32_t *a, const int32_t *b, uint64_t n) {
  uint64_t d = 0;
  for (uint64_t i = 0; i < n; i++) d += a[i] != b[i];
  return d;
}

int check_layer(int argc, char **argv) {
  const char *model = "v41-flash", *ckpt = NULL;
  long layer = -1, tp = 0, rows = 0, ctx = 300, reqs = 1, block = 64, ctas = 0, experts = -1;
  unsigned long long seed = 1;
  const char *arch_word = "gfx950";
  static const struct option opts[] = {{"layer", required_argument, 0, 'l'},  {"tp", required_argument, 0, 't'},
                                       {"rows", required_argument, 0, 'r'},   {"config", required_argument, 0, 'c'},
                                       {"experts", required_argument, 0, 'e'}, {"ctx", required_argument, 0, 'x'},
                                       {"reqs", required_argument, 0, 'q'},   {"block", required_argument, 0, 'b'},
                                       {"seed", required_argument, 0, 's'},   {"ctas", required_argument, 0, 'g'},
                                       {"ckpt", required_argument, 0, 'C'},   {"arch", required_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  cli c = {.prog = "hsa-mono-check layer", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 'l': cli_long(&c, 0, HM_MAX_LAYERS - 1, &layer); break;
      case 't': cli_long_of(&c, launch_tool_tps, 2, &tp); break;
      case 'r': cli_long(&c, 1, HM_MAX_ROWS, &rows); break;
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'e': cli_long(&c, 1, LAUNCH_TOOL_MAX_EXPERTS, &experts); break;
      case 'x': cli_long(&c, 0, LAUNCH_TOOL_SLOTS - 1, &ctx); break;
      case 'q': cli_long(&c, 1, HM_MAX_ROWS, &reqs); break;
      case 'b': cli_long(&c, 2, LAUNCH_TOOL_SLOTS, &block); break;
      case 's': cli_u64(&c, &seed); break;
      case 'g': cli_long(&c, 1, LAUNCH_TOOL_MAX_CTAS, &ctas); break;
      case 'C': ckpt = optarg; break;
      case 'a': cli_word(&c, launch_tool_arches, &arch_word); break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&c, argc, argv)) return CLI_EXIT_MISUSE;
  if (layer < 0) return cli_refuse(&c, "--layer is required");
  if (!tp) return cli_refuse(&c, "--tp is required");
  if (!rows) return cli_refuse(&c, "--rows is required");
  const hm_arch arch = launch_tool_arch(arch_word);
  if (launch_tool_arch_shape(&c, arch, tp, rows)) return CLI_EXIT_MISUSE;
  if (launch_tool_step_shape(&c, rows, reqs, ctx, block)) return CLI_EXIT_MISUSE;
  hm_layer_config cfg, named;
  bool reduced;
  if (ffn_tool_layer(model, layer, experts > 0 ? experts : 0, 0, &cfg, &reduced) != HM_OK)
    return cli_refuse(&c, "%s", hm_errmsg());
  launch_tool_arch_select(arch);
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt) != HM_OK) {
    fprintf(stderr, "hsa-mono-check layer: %s\n", hm_errmsg());
    return CLI_EXIT_NOT_RUN;
  }
  if (launch_tool_arch_agents(c.prog, rt, (uint32_t)tp, arch)) {
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  /* the software agent's default: 32 of V4.1-Flash's routed experts, so a step takes seconds */
  if (experts < 0) experts = hm_runtime_is_sim(rt) && !strcmp(model, "v41-flash") ? 32 : 0;
  if (ffn_tool_layer(model, layer, experts, 0, &cfg, &reduced) != HM_OK ||
      hm_config_by_name(model, (int32_t)layer, &named) != HM_OK) {
    fprintf(stderr, "hsa-mono-check layer: %s\n", hm_errmsg());
    hm_runtime_close(rt);
    return 2;
  }
  /* a checkpoint holds the named layer's experts; a reduced run reads its first cfg.experts */
  hm_ckpt *ck = NULL;
  hm_source cks = {0};
  if (ckpt) {
    if (hm_ckpt_open(ckpt, &ck) != HM_OK) {
      fprintf(stderr, "hsa-mono-check layer: %s\n", hm_errmsg());
      hm_runtime_close(rt);
      return CLI_EXIT_NOT_RUN;
    }
    cks = hm_ckpt_source(ck);
  }
  char kind[64], note[64];
  snprintf(note, sizeof note, "  [REDUCED: %u of %u experts]", cfg.experts, named.experts);
  if (reduced) check_note(note);
  printf("hsa-mono-check layer: %s layer %ld (%s), %u experts top-%u%s, TP%ld, %ld rows in %ld requests at context "
         "%ld, SWA blocks of %ld, %s, seed %llu, weights from %s, on %s\n",
         model, layer, layer_tool_kind(&cfg, kind, sizeof kind), cfg.experts, cfg.topk, reduced ? " (REDUCED)" : "", tp,
         rows, reqs, ctx, block, arch_word, seed, ckpt ? ckpt : "the generator", hm_runtime_describe(rt));
  const uint32_t S = (uint32_t)rows, D = cfg.hidden, T = (uint32_t)tp, K = cfg.topk;
  const bool index = hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE), first = hm_config_has(&cfg, HM_ROLE_FIRST);
  int rc = 2, pass = 1;
  layer_tool L;
  memset(&L, 0, sizeof L);
  hm_gen_step step, refs;
  memset(&step, 0, sizeof step), memset(&refs, 0, sizeof refs);
  hm_select_state *rsel = NULL;
  hm_tensor_set ref;
  hm_tset_init(&ref);
  hm_layer_outputs out[4];
  memset(out, 0, sizeof out);
  float *normed = malloc(sizeof(float) * S * D);
  int32_t *ids = malloc(sizeof(int32_t) * S * K), *kt_want = NULL, *klen_want = NULL;
  if (!normed || !ids) goto oom;
  hm_ffn_config run = ffn_tool_launch(rt, reduced, ctas);
  if (layer_tool_open(&L, rt, &cfg, T, seed, ck ? &cks : NULL, ck ? named.experts : 0, arch, &run, NULL) != HM_OK) goto done;
  /* the group's step and the reference's own copy: each writes its records (and a kv source's
   * compressed entries) into its caches; layer 0 enters with the embedding in x and no residual */
  if (hm_gen_step_make_block(&cfg, S, (uint32_t)reqs, (uint32_t)ctx, (uint32_t)block, seed, &step) != HM_OK) goto done;
  if (first) step.in.res = NULL;
  step.in.engram_table = &L.table;
  layer_tool_step_arch(&step, arch);
  if (hm_gen_step_copy(&step, &refs) != HM_OK) goto done;
  refs.in.engram_table = &L.table;
  if (index) {
    /* the indexer keys of the entries made before this step, alike in every state */
    if (hm_select_state_new(&rsel) != HM_OK || hm_gen_step_seed_select(&step, &cfg, rsel, seed) != HM_OK) goto done;
    for (uint32_t r = 0; r < T; r++)
      if (hm_gen_step_seed_select(&step, &cfg, hm_layer_group_select_state(L.g, r), seed) != HM_OK) goto done;
  }
  for (uint32_t r = 0; r < T; r++)
    if (!layer_tool_outputs(&out[r], S, D, true)) goto oom;
  if (hm_layer_group_step(L.g, &step.in, 1, out, NULL) != HM_OK) goto done;
  if (hm_ref_layer_step_source(&cfg, T, &L.src, &L.bopts, &refs.in, NULL, rsel, &ref) != HM_OK) goto done;
  /* the FFN half's own normed rows and route (the MoE is checked on them: free of the earlier drift) */
  if (layer_tool_route(rt, L.g, S, normed, ids) != HM_OK) goto done;
  /* an index source's key table: keylist's on the kernel's own top-k, against the reference's table of the same */
  const int32_t *kt_ref, *klen_ref;
  if (index) {
    if (!(kt_want = malloc(4 * (size_t)S * HM_KEYS)) || !(klen_want = malloc(8 * (size_t)S))) goto oom;
    hm_key_args ka = {S, cfg.compress_ratio, step.pos, step.slot, step.swa_idx, step.swa_len, step.t2r,
                      out[0].topk, step.bt, step.in.bt_stride, step.in.comp.block_size};
    if (hm_ref_key_table(&ka, kt_want, klen_want) != HM_OK) goto done;
    kt_ref = kt_want, klen_ref = klen_want;
  } else {
    kt_ref = hm_tset_data(&ref, "k1.kt", HM_DT_I32, (uint64_t)S * HM_KEYS);
    klen_ref = hm_tset_data(&ref, "k1.klen", HM_DT_I32, 2 * (uint64_t)S);
  }
  /* the reference's outputs; a missing one is a failed run, not a failed check */
  const float *rx = hm_tset_data(&ref, "out.x", HM_DT_F32, (uint64_t)S * D);
  const float *rres = hm_tset_data(&ref, "out.res", HM_DT_F32, (uint64_t)S * 4 * D);
  const float *rpost = hm_tset_data(&ref, "out.post", HM_DT_F32, (uint64_t)S * 4);
  const float *rcomb = hm_tset_data(&ref, "out.comb", HM_DT_F32, (uint64_t)S * 16);
  const float *rpre = hm_tset_data(&ref, "out.pre", HM_DT_F32, (uint64_t)S * 4);
  const float *rnormed = hm_tset_data(&ref, "ffn.seam.normed", HM_DT_F32, (uint64_t)S * D);
  const int32_t *rids = hm_tset_data(&ref, "router.ids", HM_DT_I32, (uint64_t)S * K);
  const int32_t *rtopk = index ? hm_tset_data(&ref, "k1.topk", HM_DT_I32, (uint64_t)S * HM_TOPK_ATTN) : NULL;
  if (!rx || !rres || !rpost || !rcomb || !rpre || !rnormed || !rids || (index && !rtopk) || !kt_ref || !klen_ref)
    goto done;
  rc = 0;
  printf("rank 0 against the reference:%s\n", reduced ? note : "");
  /* x token by token against the whole chain: far off only with another route */
  uint32_t beyond = 0, flipped = 0;
  for (uint32_t t = 0; t < S; t++) {
    int other = !check_same_route(ids + (size_t)t * K, rids + (size_t)t * K, K);
    flipped += other;
    beyond += !other && !(check_rel(out[0].x + (size_t)t * D, rx + (size_t)t * D, D) <= TOL_X_TOKEN);
  }
  pass &= check_show("x", out[0].x, rx, (uint64_t)S * D, "the whole chain: held token by token");
  char what[96];
  snprintf(what, sizeof what, "tokens with the reference's route beyond rel L2 %g", TOL_X_TOKEN);
  pass &= check_count("x.tokens", beyond, S, what, 0, "the MoE's amplification of its input's error");
  pass &= check_count("x.route", flipped, S, "tokens with another route than the reference's", TOL_FLIPS(S),
                      "a near tie of the biased scores flips");
  int moe = check_moe_own(&cfg, T, &L.src, &L.bopts, S, normed, ids, out[0].x);
  if (moe < 0) {
    rc = 2;
    goto done;
  }
  pass &= moe;
  pass &= check_compare("normed", normed, rnormed, (uint64_t)S * D, TOL_RES_REL, TOL_RES_COS);
  pass &= check_compare("res", out[0].res, rres, (uint64_t)S * 4 * D, TOL_RES_REL, TOL_RES_COS);
  pass &= check_compare("post", out[0].post, rpost, (uint64_t)S * 4, TOL_MIX_REL, TOL_MIX_COS);
  pass &= check_compare("comb", out[0].comb, rcomb, (uint64_t)S * 16, TOL_MIX_REL, TOL_MIX_COS);
  pass &= check_compare("pre", out[0].pre, rpre, (uint64_t)S * 4, TOL_MIX_REL, TOL_MIX_COS);
  if (index) {
    pass &= check_topk(out[0].topk, rtopk, S, step.pos, step.slot, cfg.compress_ratio, TOL_TOPK_PCT);
    printf("key table: keylist's of the kernel's own top-k%s\n", reduced ? note : "");
  }
  pass &= check_count("kt", count_diff_i32(out[0].kt, kt_ref, (uint64_t)S * HM_KEYS), (uint64_t)S * HM_KEYS, "entries",
                      0, "exact, from the metadata alone");
  pass &= check_count("klen", count_diff_i32(out[0].klen, klen_ref, 2 * (uint64_t)S), 2 * (uint64_t)S, "entries", 0,
                      "exact, from the metadata alone");
  /* replicated work: every rank ends the layer with rank 0's bits */
  for (uint32_t r = 1; r < T; r++) {
    int same = !memcmp(out[r].x, out[0].x, sizeof(float) * S * D) &&
               !memcmp(out[r].res, out[0].res, sizeof(float) * S * 4 * D) &&
               !memcmp(out[r].post, out[0].post, 16 * (size_t)S) && !memcmp(out[r].comb, out[0].comb, 64 * (size_t)S) &&
               !memcmp(out[r].pre, out[0].pre, 16 * (size_t)S) &&
               !memcmp(out[r].kt, out[0].kt, 4 * (size_t)S * HM_KEYS) &&
               !memcmp(out[r].klen, out[0].klen, 8 * (size_t)S) &&
               (!index || !memcmp(out[r].topk, out[0].topk, 4 * (size_t)S * HM_TOPK_ATTN));
    printf("  rank %u: %s rank 0's bits (x, res, post, comb, pre, key table%s)%s\n", r,
           same ? "holds" : "DOES NOT hold", index ? ", top-k" : "", reduced ? note : "");
    pass &= same;
  }
  rc = pass ? 0 : 1;
  printf("%s%s\n", pass ? "PASS" : "FAIL", reduced ? note : "");
  goto done;
oom:
  hm_fail(HM_ERR_NO_MEMORY, "layer check");
done:
  if (rc == 2) fprintf(stderr, "hsa-mono-check layer: %s\n", hm_errmsg());
  for (uint32_t r = 0; r < 4; r++) layer_tool_outputs_free(&out[r]);
  free(normed), free(ids), free(kt_want), free(klen_want);
  hm_tset_free(&ref);
  hm_select_state_free(rsel);
  hm_gen_step_free(&step), hm_gen_step_free(&refs);
  layer_tool_close(&L);
  hm_ckpt_close(ck);
  hm_runtime_close(rt);
  return rc;
}
