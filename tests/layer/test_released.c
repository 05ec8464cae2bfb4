/* tests/layer/test_released.c: the reader against the released DeepSeek-V4.1-Flash checkpoint's layout (issue 18
 * item 5): a sparse copy opened as a directory, one TP 4 rank of six layers built, poked bytes decoded here. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"
#include "hm_safetensors.h"
#include "st_sparse.h"

#define TP 4u
#define RANK 2u /* not 0: every TP slice starts past the tensor's first row or column */
#define D 5120u
#define IR 576u /* a TP 4 rank's routed and shared intermediate: 2304 / 4 */
#define EXPERTS 8u

static char dir[256];

/* ---------------------------------------------------------------- the formats, decoded here (OCP MX v1.0) */

/* e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 subnormal; S.1111.111 NaN (never poked) */
static float e4m3(uint8_t b) {
  int e = (b >> 3) & 15, m = b & 7;
  float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
  return b & 0x80 ? -v : v;
}
/* e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 subnormal (0 or 0.5) */
static float e2m1(uint8_t n) {
  int e = (n >> 1) & 3, m = n & 1;
  float v = e ? ldexpf(1.0f + m / 2.0f, e - 1) : m * 0.5f;
  return n & 8 ? -v : v;
}
static float e8m0(uint8_t c) { return ldexpf(1.0f, c - 127); }

/* ---------------------------------------------------------------- poked bytes */

static uint32_t rng;
static uint8_t next_byte(void) {
  rng = rng * 1664525u + 1013904223u;
  return (uint8_t)(rng >> 24);
}
/* e4m3 or packed e2m1 bytes (no e4m3 NaN), or scale codes 2^-9..2^9 */
static void fill(uint8_t *p, size_t n, int codes) {
  for (size_t i = 0; i < n; i++) {
    uint8_t b = next_byte();
    p[i] = codes ? (uint8_t)(118 + b % 19) : (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
  }
}
static void poke(const st_sparse *s, const char *name, uint64_t at, const void *src, size_t n) {
  ck_assert_msg(st_sparse_poke(s, name, at, src, n), "poke %s at %llu", name, (unsigned long long)at);
}
static const hm_tensor *get(const hm_layer_weights *w, const char *name) {
  const hm_tensor *t = hm_weights_get(w, name);
  ck_assert_msg(t != NULL, "%s", hm_errmsg());
  return t;
}

/* the process's resident file-backed pages (/proc/self/status RssFile), bytes */
static uint64_t rss_file(void) {
  FILE *f = fopen("/proc/self/status", "r");
  ck_assert_ptr_nonnull(f);
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "RssFile: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb << 10;
}

/* ---------------------------------------------------------------- probes: a poked row, then its check */

/* One row of an FP8 linear (its 32-row block's scale row with it) or of an FP4 expert matrix (its
 * scale row), K elements, poked whole with bytes made here. */
typedef struct probe {
  bool fp4;
  uint32_t K;
  uint8_t *b, *c; /* the row's bytes (K or K/2) and scale codes (K/32) */
} probe;

static probe poke_row(const st_sparse *s, const char *pfx, const char *base, uint64_t row, uint32_t K, bool fp4) {
  probe p = {fp4, K, malloc(fp4 ? K / 2 : K), malloc(K / 32)};
  ck_assert(p.b && p.c);
  uint32_t nb = fp4 ? K / 2 : K;
  fill(p.b, nb, 0), fill(p.c, K / 32, 1);
  char name[96];
  snprintf(name, sizeof name, "%s%s.weight", pfx, base);
  poke(s, name, row * nb, p.b, nb);
  snprintf(name, sizeof name, "%s%s.scale", pfx, base);
  poke(s, name, (fp4 ? row : row / 32) * (K / 32), p.c, K / 32);
  return p;
}
static void probe_free(probe *p) { free(p->b), free(p->c); }

/* elements k0..k0+n-1 of the probe's row: FP4 even element in the low nibble */
static void expect(const probe *p, uint32_t k0, uint32_t n, float *out) {
  for (uint32_t j = 0; j < n; j++) {
    uint32_t k = k0 + j;
    float v = p->fp4 ? e2m1(k % 2 ? p->b[k / 2] >> 4 : p->b[k / 2] & 15) : e4m3(p->b[k]);
    out[j] = v * e8m0(p->c[k / 32]);
  }
}

static void same_values(const float *got, const float *want, uint32_t n, const char *what) {
  for (uint32_t j = 0; j < n; j++)
    ck_assert_msg(got[j] == want[j], "%s: element %u is %g, the checkpoint's bytes say %g", what, j, got[j], want[j]);
}

/* An FP8 probe against the built kernel tensor `kname` ([N, kK] e4m3 + `kname`_s): its row `krow` holds the
 * probe's elements k0..k0+kK-1, byte for byte and by value. */
static void check_fp8(const hm_layer_weights *w, const char *kname, uint32_t krow, uint32_t kK, const probe *p,
                      uint32_t k0, const char *what) {
  char sn[64];
  snprintf(sn, sizeof sn, "%s_s", kname);
  const hm_tensor *t = get(w, kname), *ts = get(w, sn);
  ck_assert_msg(t->ndim == 2 && t->shape[1] == kK && krow < t->shape[0], "%s: %s is not [>%u, %u]", what, kname,
                krow, kK);
  const uint8_t *row = (const uint8_t *)t->data + (uint64_t)krow * kK;
  const uint8_t *codes = (const uint8_t *)ts->data + (uint64_t)(krow / 32) * (kK / 32);
  for (uint32_t j = 0; j < kK; j++)
    ck_assert_msg(row[j] == p->b[k0 + j], "%s: %s[%u][%u] is 0x%02x, the checkpoint's byte 0x%02x", what, kname, krow,
                  j, row[j], p->b[k0 + j]);
  for (uint32_t j = 0; j < kK / 32; j++)
    ck_assert_msg(codes[j] == p->c[(k0 / 32) + j], "%s: %s block %u's scale %u, the checkpoint's %u", what, sn, j,
                  codes[j], p->c[k0 / 32 + j]);
  float *got = malloc(kK * sizeof *got), *want = malloc(kK * sizeof *want);
  hm_mx8_decode_rows(t->data, ts->data, kK, krow, 1, got);
  expect(p, k0, kK, want);
  same_values(got, want, kK, what);
  free(got), free(want);
}

/* A raw row (BF16 / F32 as stored) poked and found in the built tensor `kname` at byte `kat`. */
typedef struct raw {
  uint8_t *b;
  size_t n;
} raw;
static raw poke_raw(const st_sparse *s, const char *pfx, const char *name, uint64_t at, size_t n) {
  raw r = {malloc(n), n};
  char full[96];
  snprintf(full, sizeof full, "%s%s", pfx, name);
  for (size_t i = 0; i < n; i++) r.b[i] = next_byte() & 0x3f; /* finite as bf16 and f32 */
  poke(s, full, at, r.b, n);
  return r;
}
static void check_raw(const hm_layer_weights *w, const char *kname, uint64_t kat, raw *r, const char *what) {
  const hm_tensor *t = get(w, kname);
  ck_assert_msg(kat + r->n <= t->nbytes && !memcmp((const uint8_t *)t->data + kat, r->b, r->n),
                "%s: %s's bytes at %llu are not the checkpoint's", what, kname, (unsigned long long)kat);
  free(r->b);
}

/* ---------------------------------------------------------------- one layer */

/* Pokes rows of every kind of tensor rank RANK reads (its TP slices at their real offsets), builds the
 * rank reduced to EXPERTS experts from the whole checkpoint (source_experts), and finds each row. */
static void check_layer(const st_sparse *s, const char *path, int32_t layer) {
  hm_layer_config c = tl_config("v41-flash", layer, EXPERTS, 2);
  bool draft = layer >= 40, kv = hm_config_has(&c, HM_ROLE_KV_SOURCE), idx = hm_config_has(&c, HM_ROLE_INDEX_SOURCE);
  bool engram = hm_config_has(&c, HM_ROLE_ENGRAM);
  char pfx[32], what[160];
  if (draft) snprintf(pfx, sizeof pfx, "mtp.%d.", layer - 40);
  else snprintf(pfx, sizeof pfx, "layers.%d.", layer);
  const uint32_t Q = 1280, QR = 16 * 512, OR = 2 * 1024; /* a TP 4 rank's wq_b rows (16 heads), wo_a rows */
  rng = 0x5eed0000u + (uint32_t)layer;

  /* routed experts: gate row 7 (w1), up row 9 (w3) of this rank's intermediate, hidden row 1000 (w2) */
  probe g = poke_row(s, pfx, "ffn.experts.5.w1", RANK * IR + 7, D, true);
  probe u = poke_row(s, pfx, "ffn.experts.6.w3", RANK * IR + 9, D, true);
  probe dn = poke_row(s, pfx, "ffn.experts.7.w2", 1000, 2304, true);
  /* FP8 linears: this rank's rows or columns */
  probe wqa = poke_row(s, pfx, "attn.wq_a", 100, D, false);
  probe wkv = poke_row(s, pfx, "attn.wkv", 37, D, false);
  probe wqb = poke_row(s, pfx, "attn.wq_b", RANK * QR + 33, Q, false);
  probe woa = poke_row(s, pfx, "attn.wo_a", RANK * OR + 67, 4096, false);
  probe wob = poke_row(s, pfx, "attn.wo_b", 100, 8192, false);
  probe sg = poke_row(s, pfx, "ffn.shared_experts.w1", RANK * IR + 11, D, false);
  probe su = poke_row(s, pfx, "ffn.shared_experts.w3", RANK * IR + 40, D, false);
  probe sd = poke_row(s, pfx, "ffn.shared_experts.w2", 2000, 2304, false);
  probe iq = {0}, ew = {0};
  if (idx) iq = poke_row(s, pfx, "attn.indexer.wq_b", 77, Q, false);
  if (engram) ew = poke_row(s, pfx, "engram.wkv", 20000, 6144, false);
  /* BF16 and F32 tensors: the gate's row 3 and the bias's first EXPERTS of the source's 384 (128) */
  raw gw = poke_raw(s, pfx, "ffn.gate.weight", 3ull * D * 2, D * 2);
  raw gb = poke_raw(s, pfx, "ffn.gate.bias", 0, EXPERTS * 4);
  raw sink = poke_raw(s, pfx, "attn.attn_sink", RANK * 16 * 4, 16 * 4);
  raw hc = poke_raw(s, pfx, "hc_ffn_fn", 5ull * 4 * D * 4, 4 * D * 4);
  raw cw = {0}, ik = {0}, eq = {0};
  if (kv) cw = poke_raw(s, pfx, "attn.compressor.wkv.weight", 3ull * D * 2, D * 2);
  if (kv) ik = poke_raw(s, pfx, "attn.indexer.wk.weight", 2ull * 512 * 2, 512 * 2);
  if (engram) eq = poke_raw(s, pfx, "engram.q_weight", 1ull * D * 2, D * 2);

  /* the checkpoint opened for this layer alone: the pages it maps (holes read as zeros) go with it */
  hm_ckpt *ck;
  ck_assert_msg(hm_ckpt_open(path, &ck) == HM_OK, "%s", hm_errmsg());
  hm_source src = hm_ckpt_source(ck);
  hm_build_opts o = {.rope_positions = 64, .source_experts = draft ? 128 : 384};
  hm_layer_weights w;
  uint64_t mapped = rss_file();
  hm_status st = hm_weights_build(&c, TP, RANK, &src, &o, &w);
  /* what the build read left the process's mapping: a rank's slices of a ~7 GB shard touch its
   * column-sliced tensors' every page (~170 MB at --experts 8), which stayed resident until close */
  uint64_t kept = rss_file() - mapped;
  hm_ckpt_close(ck);
  ck_assert_msg(st != HM_OK || kept < (8u << 20), "layer %d: %llu MB of the checkpoint stay mapped after the build",
                layer, (unsigned long long)(kept >> 20));
  ck_assert_msg(st == HM_OK, "layer %d rank %u/%u from the released layout: %s", layer, RANK, TP, hm_errmsg());

  float *got = calloc(D, sizeof *got), *want = calloc(D, sizeof *want);
  snprintf(what, sizeof what, "%sffn.experts.5.w1 row %u", pfx, RANK * IR + 7);
  hm_w13_decode(&w, 5, false, 7, 1, got), expect(&g, 0, D, want), same_values(got, want, D, what);
  snprintf(what, sizeof what, "%sffn.experts.6.w3 row %u", pfx, RANK * IR + 9);
  hm_w13_decode(&w, 6, true, 9, 1, got), expect(&u, 0, D, want), same_values(got, want, D, what);
  /* w2's row: this rank's IR columns, then zeros to the padded width */
  snprintf(what, sizeof what, "%sffn.experts.7.w2 row 1000 columns %u..", pfx, RANK * IR);
  hm_w2_decode(&w, 7, 1000, 1, got), expect(&dn, RANK * IR, IR, want), same_values(got, want, IR, what);
  for (uint32_t j = IR; j < w.dims.inter_pad; j++)
    ck_assert_msg(got[j] == 0.0f, "%s: padding %u is %g", what, j, got[j]);

  snprintf(what, sizeof what, "%sattn.wq_a row 100", pfx);
  check_fp8(&w, "wqkv", 100, D, &wqa, 0, what);
  snprintf(what, sizeof what, "%sattn.wkv row 37", pfx);
  check_fp8(&w, "wqkv", Q + 37, D, &wkv, 0, what);
  snprintf(what, sizeof what, "%sattn.wq_b row %u", pfx, RANK * QR + 33);
  check_fp8(&w, "wq_b", 33, Q, &wqb, 0, what);
  snprintf(what, sizeof what, "%sattn.wo_a row %u", pfx, RANK * OR + 67);
  check_fp8(&w, "wo_a", 67, 4096, &woa, 0, what);
  snprintf(what, sizeof what, "%sattn.wo_b row 100 columns %u..", pfx, RANK * OR);
  check_fp8(&w, "wo_b", 100, OR, &wob, RANK * OR, what);
  snprintf(what, sizeof what, "%sffn.shared_experts.w1 row %u", pfx, RANK * IR + 11);
  check_fp8(&w, "sgu", 11, D, &sg, 0, what);
  snprintf(what, sizeof what, "%sffn.shared_experts.w3 row %u", pfx, RANK * IR + 40);
  check_fp8(&w, "sgu", IR + 40, D, &su, 0, what);
  snprintf(what, sizeof what, "%sffn.shared_experts.w2 row 2000 columns %u..", pfx, RANK * IR);
  check_fp8(&w, "sw2", 2000, IR, &sd, RANK * IR, what);
  if (idx) {
    snprintf(what, sizeof what, "%sattn.indexer.wq_b row 77", pfx);
    check_fp8(&w, "idx_wq_b", 77, Q, &iq, 0, what);
    probe_free(&iq);
  }
  if (engram) {
    snprintf(what, sizeof what, "%sengram.wkv row 20000", pfx);
    check_fp8(&w, "engram_wkv", 20000, 6144, &ew, 0, what);
    probe_free(&ew);
  }
  snprintf(what, sizeof what, "%s BF16 and F32 rows", pfx);
  check_raw(&w, "gate_w", 3ull * D * 2, &gw, what);
  check_raw(&w, "bias", 0, &gb, what);
  check_raw(&w, "attn_sink", 0, &sink, what);
  check_raw(&w, "hc_ffn_fn", 5ull * 4 * D * 4, &hc, what);
  if (kv) check_raw(&w, "cmp_wkv", 3ull * D * 2, &cw, what), check_raw(&w, "idx_wk", 2ull * 512 * 2, &ik, what);
  if (engram) check_raw(&w, "engram_q", 1ull * D * 2, &eq, what);
  ck_assert_uint_eq(get(&w, "gate_w")->shape[0], EXPERTS);
  probe *all[] = {&g, &u, &dn, &wqa, &wkv, &wqb, &woa, &wob, &sg, &su, &sd};
  for (unsigned i = 0; i < sizeof all / sizeof *all; i++) probe_free(all[i]);
  free(got), free(want);
  ck_assert_int_eq(hm_weights_free(&w), HM_OK);
}

/* ---------------------------------------------------------------- the test */

/* The released layout (st_sparse.c says where each fact comes from) read as a user reads it: the
 * directory opened, rank 2 of TP 4 of a window layer (0), an Engram layer (1, its Engram tensors in
 * shard 47), a kv + index source (2, ratio 2), a REUSE layer (3), the ratio-1 source (20) and the first
 * draft layer (mtp.0.) built with --experts 8 from the whole checkpoint, each poked row found where
 * the format puts it. The copy costs its headers: every shard as long as the release's, its
 * blocks a few KB (what du counts). */
START_TEST(released_layout) {
  st_sparse *s = st_sparse_write(dir);
  ck_assert_ptr_nonnull(s);
  for (unsigned i = 0; i < sp_nlayers; i++) check_layer(s, dir, sp_layers[i]);

  /* the Engram table, read by row as the layer's lookup reads it: row 300,000,000 of shard 47 */
  uint8_t row[256], code[8], back[256], bcode[8];
  fill(row, sizeof row, 0), fill(code, sizeof code, 1);
  poke(s, "layers.1.engram.embed.weight", 300000000ull * 256, row, sizeof row);
  poke(s, "layers.1.engram.embed.scale", 300000000ull * 8, code, sizeof code);
  hm_ckpt *ck;
  ck_assert_msg(hm_ckpt_open(dir, &ck) == HM_OK, "%s", hm_errmsg());
  hm_source src = hm_ckpt_source(ck);
  ck_assert_int_eq(src.read(src.ctx, "layers.1.engram.embed.weight", 300000000ull, 1, 0, 256, back), HM_OK);
  ck_assert_int_eq(src.read(src.ctx, "layers.1.engram.embed.scale", 300000000ull, 1, 0, 8, bcode), HM_OK);
  ck_assert(!memcmp(row, back, sizeof row) && !memcmp(code, bcode, sizeof code));
  hm_ckpt_close(ck);

  /* the release's sizes, and no disk behind them */
  static const struct {
    uint32_t shard;
    uint64_t bytes;
  } released[] = {{3, 7389759032ull}, {5, 7405953784ull}, {6, 7389759032ull}};
  uint32_t shards[48];
  unsigned n = st_sparse_shards(s, shards);
  uint64_t blocks = 0;
  for (unsigned i = 0; i < n; i++) {
    char p[512];
    struct stat sb;
    st_sparse_path(s, shards[i], p, sizeof p);
    ck_assert_int_eq(stat(p, &sb), 0);
    for (unsigned k = 0; k < sizeof released / sizeof *released; k++)
      if (released[k].shard == shards[i])
        ck_assert_msg((uint64_t)sb.st_size == released[k].bytes, "%s: %lld bytes, the release's %llu", p,
                      (long long)sb.st_size, (unsigned long long)released[k].bytes);
    ck_assert_msg((uint64_t)sb.st_blocks * 512 < 2u << 20, "%s: %lld bytes on disk, not sparse", p,
                  (long long)sb.st_blocks * 512);
    blocks += (uint64_t)sb.st_blocks * 512;
  }
  ck_assert_msg(blocks < 8u << 20, "%llu bytes on disk", (unsigned long long)blocks);
  st_sparse_free(s);
}
END_TEST

/* the directory made and removed outside the test's process, so a failing check leaves no shards */
static void dir_make(void) {
  snprintf(dir, sizeof dir, "/tmp/hm_released_XXXXXX");
  if (!mkdtemp(dir)) abort();
}
static void dir_remove(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

Suite *hm_test_suite(void) {
  Suite *s = suite_create("layer-released");
  TCase *tc = tcase_create("released_layout");
  tcase_add_unchecked_fixture(tc, dir_make, dir_remove);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, released_layout);
  suite_add_tcase(s, tc);
  return s;
}
