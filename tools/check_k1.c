/* tools/check_k1.c: hsa-mono-check k1: K1 (the attention seam and front) of a TP group against the
 * fp32 reference: errors per output, the KV records, the key table; non-zero exit past tolerance. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "hm_k1_group.h"
#include "hm_ref.h"
#include "hm_safetensors.h"
#include "launch_tool.h"

/* Tolerances, for a GPU as for the software agent (tests/layer/test_k1.c holds the agent to
 * tighter, stage-by-stage checks where it follows the reference's order):
 *  - res: bf16 of a fold whose mixes carry the GPU's ~1 ulp v_exp / v_rcp: a flipped rounding is
 *    2^-8 of one element: relative L2 4e-3, cosine 0.99999 (as hsa-mono-check ffn);
 *  - post, comb, pre: f32 after sigmoid and 20 Sinkhorn rounds of ~1 ulp operations: 1e-4;
 *  - x_out (the index build's normed row): the RMSNorm of res's collapse, bf16: res's budget;
 *  - q, and qr_out (the index build's normed q latent): the GEMV's matrix instructions sum in an
 *    order other than the reference's model, which flips an occasional bf16 rounding of wqkv's
 *    output, and q has the q latent's MXFP8 quantisation between that and wq_b (a flipped value
 *    can move its whole 32-group's scale): relative L2 1e-2, cosine 0.9999;
 *  - the records at the step's slots: the same flips reach a record as a moved e4m3 byte or scale
 *    code: at most 2 % of the step's record bytes may differ (test_k1 measures 0 to a few a step);
 *    every other byte of the cache: none (K1 writes the step's slots and nothing else);
 *  - the key table and klen: integers from the metadata alone: exact. */
#define TOL_RES_REL 4e-3
#define TOL_RES_COS 0.99999
#define TOL_MIX_REL 1e-4
#define TOL_MIX_COS 0.9999999
#define TOL_GEMV_REL 1e-2
#define TOL_GEMV_COS 0.9999
#define TOL_RECORD_PCT 2

/* The layer a ratio names when --layer is not given: a window layer (0), and REUSE layers of
 * ratio 1 (21) and 2 (3), in both configs. */
static const long default_layer[3] = {0, 21, 3};

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-check k1 --tp N --rows R --ratio {0,1,2} [--config v41-flash|tiny] [--layer L]\n"
          "                         [--ctx C] [--reqs Q] [--block B] [--seed S] [--ctas G] [--ckpt PATH]\n"
          "                         [--arch A]\n"
          "\n"
          "Runs K1 (the attention seam and front) of a layer of compress ratio 0, 1 or 2 (layer 0, 21 or 3;\n"
          "--layer L picks another, whose ratio must then be --ratio's if both are given) on a TP group of N\n"
          "ranks (2 or 4) in this process, each rank on its own agent (HSAMONO_RUNTIME: a GPU, or the\n"
          "software agent), on generated weights and a generated step of R rows in Q requests (default 1)\n"
          "at context C (default 300) with SWA blocks of B slots (default 64), and the fp32 reference on a\n"
          "copy of the same step. Prints per output (res, post, comb, pre, every rank's q; x_out and\n"
          "qr_out on an index-source layer) the max-abs and relative error and the cosine against the\n"
          "reference, the record bytes that differ at the step's slots and outside them, the key table's\n"
          "and klen's differing entries (an index-source layer's from the keylist launch on the generated\n"
          "top-k), and whether every rank holds rank 0's res, comb, records and key table. Exits 1 past\n"
          "tolerance, 2 on misuse or a run that could not be done. On the software agent the grid is 8 CTAs a rank (CPU\n"
          "threads), on a GPU one CTA a CU; --ctas G sets another.\n"
          "--ckpt PATH takes the weights from a DeepSeek-V4.1 safetensors checkpoint (a directory of shards).\n"
          "Either way the group builds the ranks' attention weights one at a time, keeping on the host only\n"
          "what its device copies leave, and the reference builds each rank's again in turn.\n"
          "--arch gfx942 (MI300X/MI325X): the gfx942 weight copies (spec/mono.md §4.4) on gfx942 agents against\n"
          "the reference's gfx942 mode (§2.6), TP 4 and at most 42 rows; on the software agent the tool makes\n"
          "its agents gfx942 itself (HSAMONO_SIM_ARCH, unless set otherwise). Default gfx950.\n");
}

static uint64_t count_diff_i32(const int32_t *a, const int32_t *b, uint64_t n) {
  uint64_t d = 0;
  for (uint64_t i = 0; i < n; i++) d += a[i] != b[i];
  return d;
}

int check_k1(int argc, char **argv) {
  const char *model = "v41-flash", *ckpt = NULL;
  long layer = -1, ratio = -1, tp = 0, rows = 0, ctx = 300, reqs = 1, block = 64, ctas = 0;
  unsigned long long seed = 1;
  const char *arch_word = "gfx950";
  static const struct option opts[] = {{"tp", required_argument, 0, 't'},     {"rows", required_argument, 0, 'r'},
                                       {"ratio", required_argument, 0, 'R'},  {"config", required_argument, 0, 'c'},
                                       {"layer", required_argument, 0, 'l'},  {"ctx", required_argument, 0, 'x'},
                                       {"reqs", required_argument, 0, 'q'},   {"block", required_argument, 0, 'b'},
                                       {"seed", required_argument, 0, 's'},   {"ctas", required_argument, 0, 'g'},
                                       {"ckpt", required_argument, 0, 'C'},   {"arch", required_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
  cli c = {.prog = "hsa-mono-check k1", .usage = usage};
  static const long ratios[] = {0, 1, 2};
  int o;
  optind = 1;
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
      case 't': cli_long_of(&c, launch_tool_tps, 2, &tp); break;
      case 'r': cli_long(&c, 1, HM_MAX_ROWS, &rows); break;
      case 'R': cli_long_of(&c, ratios, 3, &ratio); break;
      case 'c': cli_word(&c, launch_tool_configs, &model); break;
      case 'l': cli_long(&c, 0, HM_MAX_LAYERS - 1, &layer); break;
      case 'x': cli_long(&c, 0, LAUNCH_TOOL_SLOTS - 1, &ctx); break;
      case 'q': cli_long(&c, 1, HM_MAX_ROWS, &reqs); break;
      case 'b': cli_long(&c, 2, LAUNCH_TOOL_SLOTS, &block); break;
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
  if (ratio < 0 && layer < 0) return cli_refuse(&c, "--ratio or --layer is required");
  if (launch_tool_step_shape(&c, rows, reqs, ctx, block)) return CLI_EXIT_MISUSE;
  if (layer < 0) layer = default_layer[ratio];
  hm_layer_config cfg;
  if (hm_config_by_name(model, (int32_t)layer, &cfg) != HM_OK) return cli_refuse(&c, "%s", hm_errmsg());
  if (ratio >= 0 && cfg.compress_ratio != (uint32_t)ratio)
    return cli_refuse(&c, "%s layer %ld has compress ratio %u, not --ratio %ld", model, layer, cfg.compress_ratio,
                      ratio);
  launch_tool_arch_select(arch);
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt) != HM_OK) {
    fprintf(stderr, "hsa-mono-check k1: %s\n", hm_errmsg());
    return 2;
  }
  if (launch_tool_arch_agents(c.prog, rt, (uint32_t)tp, arch)) {
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  /* the weights' source: the seeded generator, or a checkpoint */
  launch_tool_source ws;
  hm_rank_dims dims;
  if (launch_tool_source_open(&ws, ckpt, &cfg, seed) != HM_OK) {
    fprintf(stderr, "hsa-mono-check k1: %s\n", hm_errmsg());
    hm_runtime_close(rt);
    return 2;
  }
  const hm_build_opts bo = {.parts = HM_WPART_ATTN, .arch = arch};
  const bool index = hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE);
  printf("hsa-mono-check k1: %s layer %ld (ratio %u%s), TP%ld, %ld rows in %ld requests at context %ld, SWA "
         "blocks of %ld, %s, seed %llu, weights from %s, on %s\n",
         model, layer, cfg.compress_ratio, index ? ", index build" : "", tp, rows, reqs, ctx, block, arch_word, seed,
         ckpt ? ckpt : "the generator", hm_runtime_describe(rt));
  const uint32_t S = (uint32_t)rows, D = cfg.hidden, Q = cfg.q_lora, T = (uint32_t)tp;
  int rc = 2, pass = 1;
  hm_k1_group *g = NULL;
  hm_gen_step step, refs;
  memset(&step, 0, sizeof step), memset(&refs, 0, sizeof refs);
  hm_tensor_set ref;
  hm_tset_init(&ref);
  hm_k1_outputs out[4];
  memset(out, 0, sizeof out);
  uint8_t *before = NULL, *mask = NULL;
  int32_t *kt_want = NULL, *klen_want = NULL;
  if (hm_rank_dims_for(&cfg, T, &dims) != HM_OK) goto done;
  const uint32_t H = dims.heads; /* every rank's */
  /* the device's step and the reference's own copy: each writes its records into its cache */
  if (hm_gen_step_make_block(&cfg, S, (uint32_t)reqs, (uint32_t)ctx, (uint32_t)block, seed, &step) != HM_OK ||
      hm_gen_step_copy(&step, &refs) != HM_OK)
    goto done;
  const uint64_t cache = step.swa_bytes;
  /* the cache as it was, to see what K1 wrote (a step starts from the caller's cache) */
  if (!(before = malloc(cache)) || !(mask = calloc(cache, 1))) goto done;
  memcpy(before, step.swa_buf, cache);
  for (uint32_t r = 0; r < T; r++) {
    hm_k1_outputs *p = &out[r];
    p->res = malloc(sizeof(float) * S * 4 * D), p->post = malloc(16 * S), p->comb = malloc(64 * S);
    p->pre = malloc(16 * S), p->q = malloc(sizeof(float) * S * H * HM_HEAD_DIM);
    p->kt = malloc(4 * (size_t)S * HM_KEYS), p->klen = malloc(8 * S), p->swa = malloc(cache);
    if (index) p->x_out = malloc(sizeof(float) * S * D), p->qr_out = malloc(sizeof(float) * S * Q);
    if (!p->res || !p->post || !p->comb || !p->pre || !p->q || !p->kt || !p->klen || !p->swa ||
        (index && (!p->x_out || !p->qr_out)))
      goto done;
  }
  hm_k1_config kc = {0};
  launch_tool_grid(rt, ctas, &kc.min_cus, &kc.ctas);
  /* the group builds, uploads and trims one rank's weights at a time; the reference builds each again */
  if (hm_k1_group_create_source(rt, &cfg, T, &ws.src, &bo, &kc, &g) != HM_OK ||
      hm_k1_group_step(g, &step.in, 1, out, NULL) != HM_OK)
    goto done;
  if (hm_k1_index_build(hm_k1_group_rank(g, 0)) != index) {
    fprintf(stderr, "hsa-mono-check k1: the runner's index build disagrees with layer %ld's roles\n", layer);
    goto done;
  }
  hm_ref_k1_in rin = {S, refs.in.settled ? NULL : refs.x, refs.res, refs.post, refs.comb, refs.pre, &refs.in};
  if (hm_ref_k1_source(&cfg, T, &ws.src, &bo, &rin, index, &ref) != HM_OK) goto done;
  /* the key table: K1's own, or on an index-source layer the keylist launch's on the generated
   * top-k (the select step's stand-in) against the reference's table of the same */
  const bool keys = !index || cfg.compress_ratio;
  const int32_t *kt_ref = NULL, *klen_ref = NULL;
  if (!index) {
    kt_ref = hm_tset_data(&ref, "k1.kt", HM_DT_I32, (uint64_t)S * HM_KEYS);
    klen_ref = hm_tset_data(&ref, "k1.klen", HM_DT_I32, 2 * (uint64_t)S);
  } else if (keys) {
    if (hm_k1_group_keylist(g, &step.in, out) != HM_OK) goto done;
    if (!(kt_want = malloc(4 * (size_t)S * HM_KEYS)) || !(klen_want = malloc(8 * S))) goto done;
    hm_key_args ka = {S, cfg.compress_ratio, step.pos, step.slot, step.swa_idx, step.swa_len, step.t2r,
                      step.topk, step.bt, step.in.bt_stride, step.in.comp.block_size};
    if (hm_ref_key_table(&ka, kt_want, klen_want) != HM_OK) goto done;
    kt_ref = kt_want, klen_ref = klen_want;
  }
  /* the reference's outputs; a missing one is a failed run, not a failed check */
  const char *names[6] = {"res", "post", "comb", "pre", "x_out", "qr_out"};
  const char *trace[6] = {"k1.seam.res", "k1.seam.post", "k1.seam.comb", "k1.seam.pre", "k1.seam.normed", "k1.qn"};
  const float *mine[6] = {out[0].res, out[0].post, out[0].comb, out[0].pre, out[0].x_out, out[0].qr_out};
  const uint64_t n[6] = {(uint64_t)S * 4 * D, (uint64_t)S * 4, (uint64_t)S * 16, (uint64_t)S * 4, (uint64_t)S * D,
                         (uint64_t)S * Q};
  const double rel[6] = {TOL_RES_REL, TOL_MIX_REL, TOL_MIX_REL, TOL_MIX_REL, TOL_RES_REL, TOL_GEMV_REL};
  const double cosv[6] = {TOL_RES_COS, TOL_MIX_COS, TOL_MIX_COS, TOL_MIX_COS, TOL_RES_COS, TOL_GEMV_COS};
  const float *rv[6], *qv[4];
  const unsigned nout = index ? 6 : 4;
  for (unsigned i = 0; i < nout; i++)
    if (!(rv[i] = hm_tset_data(&ref, trace[i], HM_DT_F32, n[i]))) goto done;
  for (uint32_t r = 0; r < T; r++) {
    char name[32];
    snprintf(name, sizeof name, "rank%u.q", r);
    if (!(qv[r] = hm_tset_data(&ref, name, HM_DT_F32, (uint64_t)S * H * HM_HEAD_DIM))) goto done;
  }
  if (keys && (!kt_ref || !klen_ref)) goto done;
  rc = 0;
  printf("rank 0 against the reference (q: every rank's):\n");
  for (unsigned i = 0; i < nout; i++) pass &= check_compare(names[i], mine[i], rv[i], n[i], rel[i], cosv[i]);
  for (uint32_t r = 0; r < T; r++) {
    char name[32];
    snprintf(name, sizeof name, "q.rank%u", r);
    pass &= check_compare(name, out[r].q, qv[r], (uint64_t)S * H * HM_HEAD_DIM, TOL_GEMV_REL,
                          TOL_GEMV_COS);
  }
  /* the records: rank 0's cache against the reference's at the step's live slots (a padding row,
   * slot -1, writes none), and against the cache as it was everywhere else */
  uint64_t rec_diff = 0, rec_n = 0, live = 0, rest_diff = 0, rest_n = 0;
  for (uint32_t t = 0; t < S; t++) {
    if (step.slot[t] < 0) continue;
    uint64_t d, s;
    hm_ref_kv_offsets(&step.in.swa, step.slot[t], &d, &s); /* a live slot: in the cache */
    memset(mask + d, 1, HM_RECORD_DATA), memset(mask + s, 1, 8);
    live++;
  }
  for (uint64_t i = 0; i < cache; i++) {
    if (mask[i]) rec_diff += out[0].swa[i] != refs.swa_buf[i], rec_n++;
    else rest_diff += out[0].swa[i] != before[i], rest_n++;
  }
  char what[64];
  snprintf(what, sizeof what, "bytes at the step's %llu live slots", (unsigned long long)live);
  pass &= check_count("records", rec_diff, rec_n, what, rec_n * TOL_RECORD_PCT / 100,
                       "2 % of the record bytes: flipped roundings reach a record");
  pass &= check_count("cache", rest_diff, rest_n, "bytes outside the step's slots", 0, "K1 writes nothing else");
  if (keys) {
    if (index)
      printf("key table (K1 writes none on an index-source layer): the keylist launch's of the generated top-k\n");
    pass &= check_count("kt", count_diff_i32(out[0].kt, kt_ref, (uint64_t)S * HM_KEYS), (uint64_t)S * HM_KEYS,
                         "entries", 0, "exact, from the metadata alone");
    pass &= check_count("klen", count_diff_i32(out[0].klen, klen_ref, 2 * (uint64_t)S), 2 * (uint64_t)S, "entries",
                         0, "exact, from the metadata alone");
  } else {
    printf("key table: none (an index-source layer without compressed keys)\n");
  }
  /* replicated work: every rank's seam, records and key table are rank 0's bits */
  for (uint32_t r = 1; r < T; r++) {
    int same = !memcmp(out[r].res, out[0].res, sizeof(float) * S * 4 * D) &&
               !memcmp(out[r].comb, out[0].comb, 64 * (size_t)S) && !memcmp(out[r].swa, out[0].swa, cache) &&
               (!keys || (!memcmp(out[r].kt, out[0].kt, 4 * (size_t)S * HM_KEYS) &&
                          !memcmp(out[r].klen, out[0].klen, 8 * (size_t)S)));
    printf("  rank %u: %s rank 0's bits (res, comb, records%s)\n", r, same ? "holds" : "DOES NOT hold",
           keys ? ", key table" : "");
    pass &= same;
  }
  rc = pass ? 0 : 1;
  printf("%s\n", pass ? "PASS" : "FAIL");
done:
  if (rc == 2) fprintf(stderr, "hsa-mono-check k1: %s\n", hm_errmsg());
  hm_k1_group_destroy(g);
  for (uint32_t r = 0; r < T && r < 4; r++) {
    hm_k1_outputs *p = &out[r];
    free(p->res), free(p->post), free(p->comb), free(p->pre), free(p->q), free(p->kt), free(p->klen);
    free(p->x_out), free(p->qr_out), free(p->swa);
  }
  free(before), free(mask), free(kt_want), free(klen_want);
  hm_tset_free(&ref);
  hm_gen_step_free(&step), hm_gen_step_free(&refs);
  launch_tool_source_close(&ws);
  hm_runtime_close(rt);
  return rc;
}
