/* tests/layer/test_check_tool.c: `hsa-mono-check ref` as a user runs it: the files it writes read back
 * with the library's reader; ffn, k1, layer and model on the software agent; their refusals. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"
#include "hm_safetensors.h"

static char dir[256];

static int run(const char *args) {
  const char *bin = getenv("HSAMONO_CHECK_BIN");
  ck_assert_msg(bin != NULL, "HSAMONO_CHECK_BIN not set");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>&1", bin, args);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Runs `HSAMONO_RUNTIME=sim [env] hsa-mono-check args` (env: more assignments, or NULL), its output
 * (stdout and stderr) into the log and into out (caller frees); the exit status. */
static int run_sim_env(const char *env, const char *args, char **out) {
  const char *bin = getenv("HSAMONO_CHECK_BIN");
  ck_assert_msg(bin != NULL, "HSAMONO_CHECK_BIN not set");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "HSAMONO_RUNTIME=sim %s %s %s 2>&1", env ? env : "", bin, args);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t r; (r = fread(buf + n, 1, cap - 1 - n, p)) > 0;) {
    n += r;
    if (n + 1 == cap) buf = realloc(buf, cap *= 2);
  }
  buf[n] = 0;
  fputs(buf, stderr); /* the log shows what the tool printed */
  int rc = pclose(p);
  *out = buf;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int run_sim(const char *args, char **out) { return run_sim_env(NULL, args, out); }

/* How many lines of out start with "  name " and hold " ok ". */
static unsigned ok_lines(const char *out, const char *name) {
  unsigned n = 0;
  size_t k = strlen(name);
  for (const char *l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
    if (!strncmp(l, "  ", 2) && !strncmp(l + 2, name, k) && l[2 + k] == ' ') {
      const char *e = strchr(l, '\n');
      const char *ok = strstr(l, " ok ");
      n += ok && (!e || ok < e);
    }
  return n;
}

static hm_st_file *open_in(const char *sub, const char *file) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s/%s.safetensors", dir, sub, file);
  hm_st_file *f;
  ck_assert_msg(hm_st_open(p, &f) == HM_OK, "%s: %s", p, hm_errmsg());
  return f;
}

START_TEST(ref_layer_files) {
  snprintf(dir, sizeof dir, "/tmp/hm_check_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char args[512];
  snprintf(args, sizeof args, "ref --config tiny --layer 5 --rows 4 --reqs 2 --tp 2 --seed 9 --dump-weights --out %s/l5",
           dir);
  ck_assert_int_eq(run(args), 0);
  hm_st_file *f = open_in("l5", "out");
  ck_assert_str_eq(hm_st_meta(f, "model"), "tiny");
  ck_assert_str_eq(hm_st_meta(f, "tp"), "2");
  uint64_t sh[4];
  hm_dtype dt;
  const void *x;
  ck_assert_int_eq(hm_st_get(f, "out.x", &dt, NULL, sh, &x, NULL), HM_OK);
  ck_assert_int_eq(dt, HM_DT_F32);
  ck_assert_uint_eq(sh[0], 4);
  ck_assert_uint_eq(sh[1], 1024);
  hm_st_close(f);
  /* --dump-weights: rank 1's weights in the kernel layouts, as a build of that rank (packed FP4
   * written as "I8", checkpoint style) */
  f = open_in("l5", "weights.rank1");
  const void *d13;
  uint64_t n13;
  ck_assert_int_eq(hm_st_get(f, "w13", &dt, NULL, sh, &d13, &n13), HM_OK);
  ck_assert_int_eq(dt, HM_DT_I8);
  ck_assert_uint_eq(sh[1], 256);
  hm_layer_config c5 = tl_config("tiny", 5, 0, 0);
  hm_layer_weights w5[2];
  tl_build_group(&c5, 2, 9, 0, w5);
  const hm_tensor *b13 = hm_weights_get(&w5[1], "w13");
  ck_assert_uint_eq(b13->nbytes, n13);
  ck_assert_msg(!memcmp(b13->data, d13, n13), "weights.rank1 w13 is not rank 1's build");
  tl_free_group(w5, 2);
  hm_st_close(f);
  const char *stages[] = {"inputs", "k1.seam", "k1", "rank0.attn", "rank1.wo_b", "ffn.seam", "router", "rank1.routed"};
  for (unsigned i = 0; i < sizeof stages / sizeof *stages; i++) hm_st_close(open_in("l5", stages[i]));
  /* the FFN launch alone, full V4.1 dims with 4 experts */
  snprintf(args, sizeof args,
           "ref --config v41-flash --layer 3 --rows 2 --tp 4 --seed 1 --experts 4 --topk 2 --launch ffn --out %s/ffn", dir);
  ck_assert_int_eq(run(args), 0);
  f = open_in("ffn", "rank3.routed");
  ck_assert_int_eq(hm_st_get(f, "rank3.routed.mid", NULL, NULL, sh, NULL, NULL), HM_OK);
  ck_assert_uint_eq(sh[2], 640);
  hm_st_close(f);
  /* without --dump-weights only the dumps asked for: no copy of the weights */
  char p[512];
  struct stat sb;
  for (unsigned r = 0; r < 4; r++) {
    snprintf(p, sizeof p, "%s/ffn/weights.rank%u.safetensors", dir, r);
    ck_assert_msg(stat(p, &sb) != 0, "%s written without --dump-weights", p);
  }
  /* refusals: bad tp (misuse: 2, as ffn's; it was 1), missing arguments, unknown command */
  snprintf(args, sizeof args, "ref --config tiny --layer 5 --rows 4 --tp 3 --seed 9 --out %s/x", dir);
  ck_assert_int_eq(run(args), 2);
  ck_assert_int_eq(run("ref --config tiny --layer 5"), 2);
  ck_assert_int_eq(run("frob"), 2);
  snprintf(args, sizeof args, "rm -rf %s", dir);
  ck_assert_int_eq(system(args), 0);
}
END_TEST

/* `ref --arch gfx942`: the reference's gfx942 mode on the gfx942 copies (TP 4), the SWA cache FNUZ:
 * every file says the arch, quantised activations are U8 (FNUZ bytes), and out.x is an in-process
 * run's on the same generator, step and FNUZ cache, to the bit; without --arch, gfx950's. */
START_TEST(ref_gfx942_files) {
  snprintf(dir, sizeof dir, "/tmp/hm_check_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char args[512];
  for (int arch = 0; arch < 2; arch++) {
    snprintf(args, sizeof args, "ref --config tiny --layer 3 --rows 3 --tp 4 --seed 9 %s--out %s/a%d",
             arch ? "--arch gfx942 " : "", dir, arch);
    ck_assert_int_eq(run(args), 0);
    char sub[8];
    snprintf(sub, sizeof sub, "a%d", arch);
    hm_st_file *f = open_in(sub, "k1");
    ck_assert_str_eq(hm_st_meta(f, "arch"), arch ? "gfx942" : "gfx950");
    hm_dtype dt;
    ck_assert_int_eq(hm_st_get(f, "k1.x8", &dt, NULL, NULL, NULL, NULL), HM_OK);
    ck_assert_int_eq(dt, arch ? HM_DT_U8 : HM_DT_E4M3);
    hm_st_close(f);
  }
  hm_layer_config c = tl_config("tiny", 3, 0, 0);
  hm_layer_weights w[4];
  tl_build_group_arch(&c, 4, 9, HM_WPART_ATTN | HM_WPART_FFN, HM_ARCH_GFX942, w);
  hm_gen_step st;
  ck_assert_int_eq(hm_gen_step_make(&c, 3, 1, 300, 9, &st), HM_OK);
  hm_ref_kv_cache_to_fnuz(&st.in.swa);
  hm_tensor_set tr;
  hm_tset_init(&tr);
  ck_assert_msg(hm_ref_layer_step(w, 4, &st.in, NULL, NULL, &tr) == HM_OK, "%s", hm_errmsg());
  hm_st_file *f = open_in("a1", "out");
  const void *x;
  uint64_t n;
  ck_assert_int_eq(hm_st_get(f, "out.x", NULL, NULL, NULL, &x, &n), HM_OK);
  ck_assert_uint_eq(n, 3 * 1024 * sizeof(float));
  ck_assert_msg(!memcmp(x, tl_f32(&tr, "out.x"), n), "out.x is not the gfx942 reference's");
  hm_st_close(f);
  hm_tset_free(&tr);
  hm_gen_step_free(&st);
  tl_free_group(w, 4);
  snprintf(args, sizeof args, "rm -rf %s", dir);
  ck_assert_int_eq(system(args), 0);
}
END_TEST

/* `ref --cases` (the generator's hard cases) and the select step's dump (select.safetensors): on
 * layer 20 past 512 entries with a padding row, every live row's picks are the top 512 of its
 * dumped scores; on layer 2 with groups begun before the step, the first token the state held and
 * the records written; a bad case list refused naming --cases. */
START_TEST(ref_select_dump) {
  snprintf(dir, sizeof dir, "/tmp/hm_check_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char args[512];
  snprintf(args, sizeof args, "ref --config tiny --layer 20 --rows 3 --tp 2 --seed 4 --cases long,pad --out %s/l20",
           dir);
  ck_assert_int_eq(run(args), 0);
  hm_st_file *f = open_in("l20", "select"), *k = open_in("l20", "k1"), *in = open_in("l20", "inputs");
  ck_assert_str_eq(hm_st_meta(f, "cases"), "long,pad");
  uint64_t sh[4], shk[4];
  const float *I;
  const int32_t *tk;
  const int64_t *slot, *pos;
  const uint8_t *cand;
  ck_assert_int_eq(hm_st_get(f, "select.scores", NULL, NULL, sh, (const void **)&I, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(f, "select.candidates", NULL, NULL, NULL, (const void **)&cand, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(f, "select.index_keys", NULL, NULL, shk, NULL, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(k, "k1.topk", NULL, NULL, NULL, (const void **)&tk, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(in, "in.slot_mapping", NULL, NULL, NULL, (const void **)&slot, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(in, "in.positions", NULL, NULL, NULL, (const void **)&pos, NULL), HM_OK);
  ck_assert_uint_eq(sh[0], 3);
  ck_assert_uint_gt(sh[1], 512);
  ck_assert_uint_eq(shk[1], sh[1]);
  ck_assert_uint_eq(shk[2], 128);
  ck_assert_int_eq(slot[2], -1); /* the padding row */
  for (uint32_t t = 0; t < 2; t++) {
    int32_t want[512];
    const uint32_t n = (uint32_t)pos[t] + 1;
    ck_assert_uint_eq(hm_ref_index_topk(I + t * sh[1], n, 512, 512, want), 512);
    ck_assert_mem_eq(tk + t * 512, want, sizeof want);
    ck_assert_uint_eq(cand[t * sh[1] + n - 1], 1);
  }
  for (uint32_t j = 0; j < sh[1]; j++) ck_assert(isinf(I[2 * sh[1] + j])); /* nothing scored */
  hm_st_close(f), hm_st_close(k), hm_st_close(in);
  snprintf(args, sizeof args, "ref --config tiny --layer 2 --rows 4 --reqs 2 --tp 2 --seed 4 --cases straddle --out %s/l2",
           dir);
  ck_assert_int_eq(run(args), 0);
  f = open_in("l2", "select");
  const int32_t *first, *entry;
  const float *pk;
  const uint8_t *rec;
  ck_assert_int_eq(hm_st_get(f, "select.first", NULL, NULL, NULL, (const void **)&first, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(f, "select.entry", NULL, NULL, NULL, (const void **)&entry, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(f, "select.pending_kv", NULL, NULL, NULL, (const void **)&pk, NULL), HM_OK);
  ck_assert_int_eq(hm_st_get(f, "select.records", NULL, NULL, sh, (const void **)&rec, NULL), HM_OK);
  ck_assert_uint_eq(sh[1], 584);
  ck_assert_int_eq(first[0], -1); /* both requests' first rows */
  ck_assert_int_eq(first[2], -1);
  ck_assert_int_eq(entry[0], 150); /* 301 ends entry 150; 302 begins one */
  ck_assert_int_eq(entry[1], -1);
  ck_assert(pk[0] != 0.0f && pk[512] == 0.0f);
  uint32_t nz = 0;
  for (uint32_t i = 0; i < 584; i++) nz += rec[i] != 0;
  ck_assert_uint_gt(nz, 100);
  hm_st_close(f);
  char *out;
  snprintf(args, sizeof args, "ref --config tiny --layer 2 --rows 4 --tp 2 --seed 4 --cases pad,later --out %s/x", dir);
  ck_assert_int_eq(run_sim(args, &out), 2);
  ck_assert_msg(!strncmp(out, "hsa-mono-check ref: --cases 'pad,later': case 'later': not one of", 65), "%s", out);
  free(out);
  snprintf(args, sizeof args, "ref --config tiny --layer 2 --rows 1 --tp 2 --seed 4 --cases pad --out %s/x", dir);
  ck_assert_int_eq(run(args), 2);
  snprintf(args, sizeof args, "rm -rf %s", dir);
  ck_assert_int_eq(system(args), 0);
}
END_TEST

/* Every line of out holds `what`. */
static int every_line_has(const char *out, const char *what) {
  for (const char *l = out; *l;) {
    const char *e = strchr(l, '\n');
    size_t n = e ? (size_t)(e - l) : strlen(l);
    char line[1024];
    snprintf(line, sizeof line, "%.*s", (int)n, l);
    if (n && !strstr(line, what)) return 0;
    l += n + (e != NULL);
  }
  return 1;
}

/* `ref --experts E --ckpt DIR` on a checkpoint of the layer's full expert count (issue 18 item 1): the
 * first E experts, the gate's and bias's first E rows, the run called reduced on every line and in
 * every file. The generator's elements do not depend on the expert count, so the reduced run on the
 * generator's full checkpoint must give the reduced generator run's output to the bit. A draft layer
 * (mtp.0.), 32 experts cut to 4, in three shards. */
START_TEST(ref_reduced_from_checkpoint) {
  snprintf(dir, sizeof dir, "/tmp/hm_check_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char ck[300], args[1024];
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  ck_assert_int_eq(mkdir(ck, 0700), 0);
  hm_layer_config full = tl_config("tiny", 40, 0, 0);
  ck_assert_uint_eq(full.experts, 32);
  tl_write_ckpt(&full, 7, ck, 3);
  const char *base = "ref --config tiny --layer 40 --rows 2 --tp 2 --seed 7 --experts 4 --topk 2";
  char *out;
  snprintf(args, sizeof args, "%s --ckpt %s --out %s/c", base, ck, dir);
  ck_assert_int_eq(run_sim(args, &out), 0);
  ck_assert_msg(every_line_has(out, "[REDUCED: 4 of 32 experts, top-2 of 3]"), "%s", out);
  free(out);
  snprintf(args, sizeof args, "%s --out %s/g", base, dir);
  ck_assert_int_eq(run_sim(args, &out), 0);
  ck_assert_msg(every_line_has(out, "[REDUCED: 4 of 32 experts, top-2 of 3]"), "%s", out);
  free(out);
  /* one shard given for the directory: exit 2, the missing tensors and the shards named, still reduced */
  snprintf(args, sizeof args, "%s --ckpt %s/model-00002-of-00003.safetensors --out %s/s", base, ck, dir);
  ck_assert_int_eq(run_sim(args, &out), 2);
  ck_assert_msg(strstr(out, "tensors it reads are missing: 'mtp.0.") && strstr(out, "one of 3 .safetensors files") &&
                    every_line_has(out, "[REDUCED: 4 of 32 experts, top-2 of 3]"),
                "%s", out);
  free(out);
  hm_st_file *c = open_in("c", "out"), *g = open_in("g", "out");
  ck_assert_str_eq(hm_st_meta(c, "reduced"), "4 of 32 experts");
  ck_assert_str_eq(hm_st_meta(c, "weights"), ck);
  const void *xc, *xg;
  uint64_t nc, ng;
  ck_assert_int_eq(hm_st_get(c, "out.x", NULL, NULL, NULL, &xc, &nc), HM_OK);
  ck_assert_int_eq(hm_st_get(g, "out.x", NULL, NULL, NULL, &xg, &ng), HM_OK);
  ck_assert_uint_eq(nc, ng);
  ck_assert_msg(!memcmp(xc, xg, nc), "the reduced checkpoint run's out.x is not the reduced generator run's");
  hm_st_close(c), hm_st_close(g);
  snprintf(args, sizeof args, "rm -rf %s", dir);
  ck_assert_int_eq(system(args), 0);
}
END_TEST

/* The FFN harness on the software agent (the tool's own default grid, the agent's default parts):
 * a tiny layer at TP2 passes, every output reported, every rank holding the same bits; bad usage
 * is exit status 2. */
START_TEST(ffn_harness) {
  const char *bin = getenv("HSAMONO_CHECK_BIN");
  ck_assert_msg(bin != NULL, "HSAMONO_CHECK_BIN not set");
  char cmd[1024], line[512];
  snprintf(cmd, sizeof cmd, "HSAMONO_RUNTIME=sim %s ffn --config tiny --tp 2 --rows 7 --seed 3 2>&1", bin);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  unsigned oks = 0, pass = 0, same = 0;
  while (fgets(line, sizeof line, p)) {
    fputs(line, stderr); /* the log shows what the tool printed */
    if (strstr(line, "max_abs") && strstr(line, " ok ")) oks++;
    if (strstr(line, "rank 1: holds rank 0's bits")) same++;
    if (!strcmp(line, "PASS\n")) pass++;
  }
  int rc = pclose(p);
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "hsa-mono-check ffn exited %d", rc);
  ck_assert_uint_eq(oks, 5); /* x, res, post, comb, pre */
  ck_assert_uint_eq(same, 1);
  ck_assert_uint_eq(pass, 1);
  ck_assert_int_eq(run("ffn --config tiny --tp 3 --rows 7"), 2);
  ck_assert_int_eq(run("ffn --config tiny --tp 2 --rows 49"), 2);
  ck_assert_int_eq(run("ffn --config tiny --tp 2 --rows 7 --ctas -1"), 2);
}
END_TEST

/* The relative error the line "  name max_abs A rel R ..." of out prints (R), or -1 without one. */
static double line_rel(const char *out, const char *name) {
  char head[32];
  snprintf(head, sizeof head, "\n  %-8s max_abs ", name);
  const char *l = strstr(out, head);
  double a, r;
  return l && sscanf(l + strlen(head), "%lf rel %lf", &a, &r) == 2 ? r : -1;
}

/* `ffn --arch gfx942` (issue 13 item 4): with HSAMONO_SIM_ARCH unset the tool makes the software
 * agent a gfx942 itself, runs the gfx942 copies there at TP4 (a tiny layer, 7 rows: one token tile of
 * 6 and one) and checks them against the reference's gfx942 mode: every output within tolerance,
 * ranks 1-3 holding rank 0's bits. The seam is the same f32 code on both sides (exact, as
 * test_ffn942's expect_seam_exact); x differs from the gfx942 mode only where the agent's MFMA
 * rounds a 32-product block once (test_ffn942: under 1e-3, measured 0), so 1e-3 here, a tenth of the
 * tool's own budget. Then the refusals: each exit 2 with one line saying why, nothing run. */
START_TEST(ffn_harness_gfx942) {
  char *out;
  ck_assert_int_eq(
      run_sim_env("env -u HSAMONO_SIM_ARCH", "ffn --config tiny --tp 4 --rows 7 --seed 3 --arch gfx942", &out), 0);
  ck_assert_ptr_nonnull(strstr(out, "TP4, 7 rows, gfx942, seed 3"));
  ck_assert_ptr_nonnull(strstr(out, "rank 0 against the reference (its gfx942 mode):"));
  static const char *const outputs[] = {"x", "res", "post", "comb", "pre"};
  for (unsigned i = 0; i < 5; i++)
    ck_assert_msg(ok_lines(out, outputs[i]) == 1, "no single ok line for %s", outputs[i]);
  for (unsigned i = 1; i < 5; i++) ck_assert_msg(line_rel(out, outputs[i]) == 0, "%s is not exact", outputs[i]);
  const double rx = line_rel(out, "x");
  ck_assert_msg(rx >= 0 && rx < 1e-3, "x: rel %g", rx);
  for (unsigned r = 1; r < 4; r++) {
    char held[40];
    snprintf(held, sizeof held, "rank %u: holds rank 0's bits", r);
    ck_assert_ptr_nonnull(strstr(out, held));
  }
  ck_assert_ptr_nonnull(strstr(out, "\nPASS\n"));
  free(out);
  static const struct {
    const char *env, *args, *says;
  } bad[] = {
      {NULL, "ffn --config tiny --tp 2 --rows 7 --arch gfx942",
       "hsa-mono-check ffn: --tp 2: --arch gfx942 is TP 4 only (spec/mono.md §5.1.3)\n"},
      {NULL, "ffn --config tiny --tp 4 --rows 43 --arch gfx942",
       "hsa-mono-check ffn: --rows 43: --arch gfx942 takes at most 42 rows (spec/mono.md §5.3.1)\n"},
      {NULL, "k1 --config tiny --tp 4 --rows 43 --ratio 2 --arch gfx942",
       "hsa-mono-check k1: --rows 43: --arch gfx942 takes at most 42 rows (spec/mono.md §5.3.1)\n"},
      {NULL, "layer --config tiny --layer 3 --tp 4 --rows 43 --arch gfx942",
       "hsa-mono-check layer: --rows 43: --arch gfx942 takes at most 42 rows (spec/mono.md §5.3.1)\n"},
      {NULL, "model --config tiny --layers 3-4 --tp 2 --rows 2 --arch gfx942",
       "hsa-mono-check model: --tp 2: --arch gfx942 is TP 4 only (spec/mono.md §5.1.3)\n"},
      /* the user's HSAMONO_SIM_ARCH kept, and named as the conflict */
      {"HSAMONO_SIM_ARCH=gfx950", "ffn --config tiny --tp 4 --rows 7 --arch gfx942",
       "hsa-mono-check ffn: --arch gfx942: agent 0 is a gfx950 (the software agent as HSAMONO_SIM_ARCH=gfx950 "
       "makes it: unset it or set it to gfx942)\n"},
  };
  /* K1 on gfx942 (a REUSE layer's records and key table), against the reference's gfx942 mode:
   * every figure exact, as test k1_942 finds it */
  ck_assert_msg(run_sim_env(NULL, "k1 --config tiny --tp 4 --rows 2 --ratio 2 --arch gfx942", &out) == 0, "k1: %s",
                out);
  ck_assert_msg(strstr(out, ", gfx942, seed 1,") && strstr(out, "4 x gfx942"), "k1: not on gfx942: %s", out);
  ck_assert_msg(strstr(out, "records  differ 0 of") && strstr(out, "kt       differ 0 of") && strstr(out, "\nPASS\n"),
                "k1: %s", out);
  for (unsigned r = 1; r < 4; r++) {
    char held[40];
    snprintf(held, sizeof held, "rank %u: holds rank 0's bits", r);
    ck_assert_ptr_nonnull(strstr(out, held));
  }
  free(out);
  /* the whole layer on gfx942 (K1, K2: two token passes of a REUSE layer): every figure exact against
   * the reference's gfx942 mode, as test layer_942 finds it */
  ck_assert_msg(run_sim_env(NULL, "layer --config tiny --layer 3 --tp 4 --rows 7 --arch gfx942", &out) == 0,
                "layer: %s", out);
  ck_assert_msg(strstr(out, ", gfx942, seed 1,") && strstr(out, "4 x gfx942"), "layer: not on gfx942: %s", out);
  static const char *const exact[] = {"  x        max_abs 0 ", "  res      max_abs 0 ", "  normed   max_abs 0 ",
                                      "  kt       differ 0 of", "\nPASS\n"};
  for (unsigned i = 0; i < sizeof exact / sizeof *exact; i++)
    ck_assert_msg(strstr(out, exact[i]), "layer: no \"%s\": %s", exact[i], out);
  free(out);
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    ck_assert_msg(run_sim_env(bad[i].env, bad[i].args, &out) == 2, "%s: not exit status 2", bad[i].args);
    ck_assert_msg(strstr(out, bad[i].says) != NULL, "%s: the reason is not \"%s\"", bad[i].args, bad[i].says);
    ck_assert_msg(!strstr(out, "rank 0 against the reference"), "%s: ran anyway", bad[i].args);
    free(out);
  }
}
END_TEST

/* The K1 harness on the software agent: a tiny REUSE layer (ratio 2) at TP2 passes, a line for
 * every output within its tolerance, every rank holding rank 0's bits; a ratio K1 has no layer of
 * and a layer whose ratio is not --ratio's are usage errors (exit status 2). */
START_TEST(k1_harness) {
  const char *bin = getenv("HSAMONO_CHECK_BIN");
  ck_assert_msg(bin != NULL, "HSAMONO_CHECK_BIN not set");
  char cmd[1024], line[512];
  snprintf(cmd, sizeof cmd, "HSAMONO_RUNTIME=sim %s k1 --config tiny --tp 2 --rows 2 --ratio 2 2>&1", bin);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  /* the float outputs (max-abs, error, cosine), then the records, the cache and the key table */
  static const char *const outputs[] = {"res", "post", "comb", "pre", "q.rank0", "q.rank1",
                                        "records", "cache", "kt", "klen"};
  const unsigned nout = sizeof outputs / sizeof *outputs;
  unsigned seen[sizeof outputs / sizeof *outputs] = {0}, floats = 0, pass = 0, same = 0;
  while (fgets(line, sizeof line, p)) {
    fputs(line, stderr); /* the log shows what the tool printed */
    for (unsigned i = 0; i < nout; i++) {
      size_t n = strlen(outputs[i]);
      if (!strncmp(line, "  ", 2) && !strncmp(line + 2, outputs[i], n) && line[2 + n] == ' ' && strstr(line, " ok "))
        seen[i]++;
    }
    if (strstr(line, "max_abs")) floats++;
    if (strstr(line, "rank 1: holds rank 0's bits")) same++;
    if (!strcmp(line, "PASS\n")) pass++;
  }
  int rc = pclose(p);
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "hsa-mono-check k1 exited %d", rc);
  for (unsigned i = 0; i < nout; i++) ck_assert_msg(seen[i] == 1, "no single ok line for %s", outputs[i]);
  ck_assert_uint_eq(floats, 6); /* no x_out / qr_out: layer 3 is not an index source */
  ck_assert_uint_eq(same, 1);
  ck_assert_uint_eq(pass, 1);
  ck_assert_int_eq(run("k1 --config tiny --tp 2 --rows 2 --ratio 3"), 2);
  ck_assert_int_eq(run("k1 --config tiny --tp 2 --rows 2 --layer 3 --ratio 1"), 2);
}
END_TEST

/* The whole-layer harness on the software agent, a line a check: a tiny REUSE layer (ratio 2), an
 * index source (the select step and keylist launch) and layer 0 (the embedding) pass, every output
 * within its tolerance and every rank holding rank 0's bits. */
START_TEST(layer_harness) {
  static const struct {
    const char *args;
    bool index;
  } runs[] = {{"layer --config tiny --layer 3 --tp 2 --rows 3", false},
              {"layer --config tiny --layer 2 --tp 2 --rows 4 --reqs 2 --ctx 90", true},
              {"layer --config tiny --layer 0 --tp 4 --rows 2", false}};
  static const char *const checks[] = {"x.tokens", "x.route", "x.own", "route", "normed", "res", "post",
                                       "comb",     "pre",     "kt",    "klen"};
  for (unsigned i = 0; i < sizeof runs / sizeof *runs; i++) {
    char *out;
    ck_assert_msg(run_sim(runs[i].args, &out) == 0, "hsa-mono-check %s failed", runs[i].args);
    for (unsigned j = 0; j < sizeof checks / sizeof *checks; j++)
      ck_assert_msg(ok_lines(out, checks[j]) == 1, "%s: no single ok line for %s", runs[i].args, checks[j]);
    ck_assert_uint_eq(ok_lines(out, "topk"), runs[i].index);
    ck_assert_ptr_nonnull(strstr(out, "  x        max_abs")); /* the whole chain's figures */
    ck_assert_ptr_nonnull(strstr(out, "rank 1: holds rank 0's bits"));
    ck_assert_ptr_nonnull(strstr(out, "\nPASS\n"));
    free(out);
  }
}
END_TEST

/* Layers 2-4 chained over two steps (a kv + index source whose top-k and compressed cache the REUSE
 * layers after it read, caches kept across the steps): every step and layer reported, within budget. */
START_TEST(model_chain) {
  char *out;
  ck_assert_int_eq(run_sim("model --config tiny --layers 2-4 --tp 2 --rows 2 --steps 2", &out), 0);
  for (unsigned s = 0; s < 2; s++)
    for (unsigned l = 2; l <= 4; l++) {
      char head[64];
      snprintf(head, sizeof head, "step %u, layer %u (", s, l);
      ck_assert_msg(strstr(out, head) != NULL, "no report of %s", head);
    }
  /* a layer's x, x.own, route, res, post, comb, pre, key table and SWA cache in each of the 6 (steps x
   * layers); the index source's top-k in each step */
  static const char *const checks[] = {"x", "x.own", "route", "res", "post", "comb", "pre", "keys", "records",
                                       "cache"};
  for (unsigned j = 0; j < sizeof checks / sizeof *checks; j++)
    ck_assert_msg(ok_lines(out, checks[j]) == 6, "%s: %u ok lines, not 6", checks[j], ok_lines(out, checks[j]));
  ck_assert_uint_eq(ok_lines(out, "topk"), 2);
  ck_assert_ptr_nonnull(strstr(out, "\nPASS: 2 steps of layers 2-4"));
  free(out);
}
END_TEST

/* The text of out from its first line holding `from` (the figures after the run's header). */
static const char *after(const char *out, const char *from) {
  const char *p = strstr(out, from);
  ck_assert_msg(p != NULL, "no '%s' in the output", from);
  return p;
}

/* `layer --ckpt DIR --experts E` (issue 18 item 2): the group builds the ranks' weights from the
 * checkpoint one at a time, the reference each rank's in turn; on the generator's full checkpoint of
 * the layer the reduced run's figures are the reduced generator run's, line for line (the
 * generator's elements do not depend on the expert count), and the header names the checkpoint. */
START_TEST(layer_from_checkpoint) {
  snprintf(dir, sizeof dir, "/tmp/hm_check_tool_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  hm_layer_config full = tl_config("tiny", 3, 0, 0);
  tl_write_ckpt(&full, 7, dir, 2);
  char args[512], *a, *b;
  snprintf(args, sizeof args, "layer --config tiny --layer 3 --tp 2 --rows 3 --experts 16 --seed 7 --ckpt %s", dir);
  ck_assert_msg(run_sim(args, &a) == 0, "hsa-mono-check %s failed", args);
  ck_assert_int_eq(run_sim("layer --config tiny --layer 3 --tp 2 --rows 3 --experts 16 --seed 7", &b), 0);
  char from[300];
  snprintf(from, sizeof from, "weights from %s,", dir);
  ck_assert_msg(strstr(a, from) != NULL, "the header does not name the checkpoint");
  ck_assert_ptr_nonnull(strstr(b, "weights from the generator,"));
  ck_assert_str_eq(after(a, "rank 0 against the reference"), after(b, "rank 0 against the reference"));
  ck_assert_ptr_nonnull(strstr(a, "\nPASS"));
  free(a), free(b);
  snprintf(args, sizeof args, "rm -rf %s", dir);
  ck_assert_int_eq(system(args), 0);
}
END_TEST

/* `ffn --ckpt DIR` and `k1 --ckpt DIR` (issue 18 item 2): the groups build the ranks' weights from the
 * checkpoint one at a time, the reference each rank's in turn; on the generator's checkpoint of the
 * layer the figures are the generator run's line for line (ffn reduced to 16 of its experts: the
 * generator's elements do not depend on the expert count, and every line says the run is reduced),
 * each header names where the weights came from. */
START_TEST(launches_from_checkpoint) {
  snprintf(dir, sizeof dir, "/tmp/hm_check_tool_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  hm_layer_config full = tl_config("tiny", 3, 0, 0);
  tl_write_ckpt(&full, 7, dir, 2);
  static const char *const runs[] = {"ffn --config tiny --layer 3 --tp 2 --rows 3 --experts 16 --seed 7",
                                     "k1 --config tiny --layer 3 --ratio 2 --tp 2 --rows 2 --seed 7"};
  for (unsigned i = 0; i < 2; i++) {
    char args[512], *a, *b;
    snprintf(args, sizeof args, "%s --ckpt %s", runs[i], dir);
    ck_assert_msg(run_sim(args, &a) == 0, "hsa-mono-check %s failed", args);
    ck_assert_msg(run_sim(runs[i], &b) == 0, "hsa-mono-check %s failed", runs[i]);
    char from[300];
    snprintf(from, sizeof from, "weights from %s,", dir);
    ck_assert_msg(strstr(a, from) != NULL, "%s: the header does not name the checkpoint", runs[i]);
    ck_assert_ptr_nonnull(strstr(b, "weights from the generator,"));
    ck_assert_str_eq(after(a, "rank 0 against the reference"), after(b, "rank 0 against the reference"));
    ck_assert_ptr_nonnull(strstr(a, i == 0 ? "\nPASS  [REDUCED" : "\nPASS\n"));
    /* ffn's reduced run says so in its header and on every line after it (issue 18 item 1) */
    if (i == 0) {
      ck_assert_ptr_nonnull(strstr(a, "16 experts top-6 (REDUCED)"));
      unsigned lines = 0;
      for (const char *l = strstr(a, "rank 0 against the reference"); l && *l; lines++) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        static const char note[] = "  [REDUCED: 16 of 64 experts, top-6 of 6]";
        ck_assert_msg(n >= sizeof note - 1 && !memcmp(l + n - (sizeof note - 1), note, sizeof note - 1),
                      "a line of the reduced run does not say so: %.*s", (int)n, l);
        l = end ? end + 1 : l + n;
      }
      ck_assert_uint_ge(lines, 8); /* the heading, 5 outputs, rank 1, PASS */
    }
    free(a), free(b);
  }
  char rm[300];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  ck_assert_int_eq(system(rm), 0);
}
END_TEST

/* Bad usage of layer and model: exit status 2 and a line saying why (the usage or the reason). */
START_TEST(layer_model_refusals) {
  static const char *const bad[] = {
      "layer --config tiny --tp 2 --rows 2",                    /* no layer */
      "layer --config tiny --layer 3 --tp 3 --rows 2",          /* TP 3 */
      "layer --config tiny --layer 3 --tp 2 --rows 49",         /* rows past 48 */
      "layer --config tiny --layer 3 --tp 2 --rows 2x",         /* not a number */
      "layer --config tiny --layer 43 --tp 2 --rows 2",         /* no layer 43 */
      "layer --config tiny --layer 3 --tp 2 --rows 3 --reqs 2", /* rows not in whole requests */
      "model --config tiny --layers 4-2 --tp 2 --rows 2",       /* a backward range */
      "model --config tiny --layers 2 --tp 2 --rows 2",         /* not a range */
      "model --config tiny --layers 2-4 --tp 2 --rows 2 --steps 0",
      "model --config tiny --layers 2-4 --tp 2 --rows 2 --ctx 4090 --steps 8", /* past the caches */
      "model --config big --layers 2-4 --tp 2 --rows 2"};       /* no such config */
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *out;
    ck_assert_msg(run_sim(bad[i], &out) == 2, "%s: not exit status 2", bad[i]);
    ck_assert_msg(strstr(out, "usage: hsa-mono-check") || strstr(out, "hsa-mono-check layer: ") ||
                      strstr(out, "hsa-mono-check model: "),
                  "%s: no message", bad[i]);
    free(out);
  }
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {{"ref_layer_files", ref_layer_files},
                           {"ref_select_dump", ref_select_dump},
                           {"ref_reduced_from_checkpoint", ref_reduced_from_checkpoint},
                           {"ref_gfx942_files", ref_gfx942_files},
                           {"ffn_harness", ffn_harness},
                           {"ffn_harness_gfx942", ffn_harness_gfx942},
                           {"k1_harness", k1_harness},
                           {"layer_harness", layer_harness},
                           {"layer_from_checkpoint", layer_from_checkpoint},
                           {"launches_from_checkpoint", launches_from_checkpoint},
                           {"model_chain", model_chain},
                           {"layer_model_refusals", layer_model_refusals}};
  return TL_SUITE("layer-check-tool", tests, 300);
}
