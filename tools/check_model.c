/* tools/check_model.c: hsa-mono-check model: layers A..B of a TP group chained over decode steps (each
 * layer's outputs the next one's inputs, the KV caches kept), against the fp32 reference chained alike. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ffn_tool.h"
#include "hm_ref.h"
#include "launch_tool.h"
#include "layer_tool.h"

/* Budgets. Each chain carries its own outputs forward, so a layer's error is its own (the budgets of
 * hsa-mono-check layer) plus what the layers and steps before it hand on; and a token whose route
 * flips at a near tie of its biased scores changes as a whole from that layer's x on, in every later
 * output of the step. So:
 *  - a token whose route differs between the chains at a layer is counted there (a flip) and left
 *    out of that layer's x and of every later layer's outputs in that step (its records still reach
 *    the later rows' attention, within the budgets below); at most TOL_FLIPS(S) a step (hsa-mono-check
 *    layer: 1 flip in 576 tokens);
 *  - the other tokens' outputs: relative L2 and cosine budgets that grow with the chain position d
 *    (0 for layer A) and the step s, ((1 + d + s) times a single layer's): measured on the software
 *    agent, a tiny chain's res drifts by ~1.5e-4 relative a layer and x (the MoE amplifying its
 *    input's error) by ~7e-3, with no sign of growth beyond linear over 8 layers and 2 steps;
 *    a single layer's budget is hsa-mono-check layer's res budget (4e-3, cosine 0.99999) for res,
 *    its mix budget (1e-3, 0.999999) for post, comb, pre, and its MoE budget (1e-2, 0.9999) for x
 *    (its x.own: the chain has no reference of the kernel's own rows);
 *  - an index source's top-k: as hsa-mono-check layer's (exact while every entry is picked);
 *  - every rank holds rank 0's bits, at every layer and step. */
#define TOL_RES_REL 4e-3
#define TOL_RES_COS (1 - 1e-5)
#define TOL_MIX_REL 1e-3
#define TOL_MIX_COS (1 - 1e-6)
#define TOL_X_REL 1e-2
#define TOL_X_COS (1 - 1e-4)
#define TOL_FLIPS(S) (1 + (S) / 16)
#define TOL_TOPK_PCT 2
/* the KV caches and RoPE table hold 4096 positions a request */
#define MAX_POS 4096

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-check model --layers A-B --tp N --rows R [--steps T] [--config v41-flash|tiny]\n"
          "                            [--experts E] [--ctx C] [--reqs Q] [--block B] [--seed S] [--ctas G]\n"
          "\n"
          "Runs layers A..B (0..42) chained on a TP group of N ranks (2 or 4) in this process, each rank on its\n"
          "own agent (HSAMONO_RUNTIME: a GPU, or the software agent), over T decode steps (default 2) of R rows\n"
          "in Q requests (default 1) at context C (default 300; a step later each request's positions one on)\n"
          "with SWA blocks of B slots (default 64), on generated weights, and the fp32 reference chained the\n"
          "same way: each layer's outputs (x, res, post, comb, pre) are the next one's inputs, the KV caches a\n"
          "step writes are the next step's, a REUSE layer reads its index source's top-k and a layer its kv\n"
          "source's compressed cache when those layers are in the chain (else generated ones), the index\n"
          "sources share one select state a rank. Layer A's inputs are generated (on layer 0, the embedding).\n"
          "Prints per step, layer and output the max-abs and relative error and the cosine against the\n"
          "reference chain, the tokens whose route flipped, an index source's top-k, and whether every rank\n"
          "holds rank 0's outputs; exits 1 past the budgets (which grow with depth and step), 2 on bad usage\n"
          "or a failed run. Every layer's group stays alive for the run: a full-size layer at TP4 holds ~2 GB\n"
          "on the software agent, a tiny one ~0.1 GB (--config tiny, or a few layers at full size). On the\n"
          "software agent the routed experts of v41-flash are cut to 32 (--experts E: another count; every\n"
          "line then says the run is reduced) and the grid is 8 CTAs a rank; --ctas G sets another.\n");
}

/* One layer of the chain, both chains' state of it. */
typedef struct link {
  layer_tool t;
  uint64_t seed;
  bool index, kv;          /* an index source; a kv source (its select writes its compressed cache) */
  int topk_from, comp_from; /* the chain position of its index source and kv source, or -1: generated */
  hm_gen_step meta;        /* this step's generated step: the metadata, a generated top-k and cache */
  uint8_t *swa[2], *comp[2]; /* the GPU chain's [0] and the reference chain's [1] SWA cache, and a kv
                              * source's compressed cache */
  uint8_t *swa_out, *comp_out; /* rank 0's caches after the step */
  hm_layer_outputs o[HM_LAYER_MAX_TP]; /* the GPU chain's outputs of this step */
  float *rx, *rres, *rpost, *rcomb, *rpre; /* the reference chain's */
  int32_t *rtopk, *ids[2];  /* the reference's top-k; the routes of both chains */
  float *normed;            /* the GPU's FFN normed rows (the route's read-back) */
} link;

/* "A-B" with A <= B, both layers of the schedule */
static int parse_range(const char *s, long *a, long *b) {
  const char *dash = strchr(s, '-');
  if (!dash || dash == s) return 0;
  char first[24];
  size_t n = (size_t)(dash - s);
  if (n >= sizeof first) return 0;
  memcpy(first, s, n), first[n] = 0;
  return launch_tool_num(first, a) && launch_tool_num(dash + 1, b) && *a >= 0 && *a <= *b && *b < HM_MAX_LAYERS;
}

/* The rows `keep` marks of a [S][w] and ref into scratch, compared as one output. */
static int compare_rows(const char *name, const float *a, const float *ref, uint32_t S, uint64_t w, const uint8_t *keep,
                        float *sa, float *sr, double rel, double cos) {
  uint64_t n = 0;
  for (uint32_t t = 0; t < S; t++)
    if (keep[t]) {
      memcpy(sa + n, a + t * w, w * sizeof(float)), memcpy(sr + n, ref + t * w, w * sizeof(float));
      n += w;
    }
  if (!n) {
    printf("  %-8s (every token's route flipped before it)\n", name);
    return 1;
  }
  return check_compare(name, sa, sr, n, rel, cos);
}

static int same_set(const int32_t *a, const int32_t *b, uint32_t k) {
  for (uint32_t i = 0; i < k; i++) {
    int found = 0;
    for (uint32_t j = 0; j < k && !found; j++) found = a[i] == b[j];
    if (!found) return 0;
  }
  return 1;
}

static int ranks_hold(const link *l, uint32_t T, uint32_t S, uint32_t D) {
  for (uint32_t r = 1; r < T; r++)
    if (memcmp(l->o[r].x, l->o[0].x, sizeof(float) * S * D) ||
        memcmp(l->o[r].res, l->o[0].res, sizeof(float) * S * 4 * D) ||
        memcmp(l->o[r].post, l->o[0].post, 16 * (size_t)S) || memcmp(l->o[r].comb, l->o[0].comb, 64 * (size_t)S) ||
        memcmp(l->o[r].pre, l->o[0].pre, 16 * (size_t)S) ||
        (l->index && memcmp(l->o[r].topk, l->o[0].topk, 4 * (size_t)S * HM_TOPK_ATTN))) {
      printf("  rank %u DOES NOT hold rank 0's bits\n", r);
      return 0;
    }
  return 1;
}

static void *dup(const void *p, size_t n) {
  void *q = malloc(n ? n : 1);
  if (q) memcpy(q, p, n);
  return q;
}

int check_model(int argc, char **argv) {
  const char *model = "v41-flash";
  long a = -1, b = -1, tp = 0, rows = 0, steps = 2, ctx = 300, reqs = 1, block = 64, ctas = 0, experts = -1;
  unsigned long long seed = 1;
  static const struct option opts[] = {{"layers", required_argument, 0, 'l'}, {"tp", required_argument, 0, 't'},
                                       {"rows", required_argument, 0, 'r'},   {"steps", required_argument, 0, 'n'},
                                       {"config", required_argument, 0, 'c'}, {"experts", required_argument, 0, 'e'},
                                       {"ctx", required_argument, 0, 'x'},    {"reqs", required_argument, 0, 'q'},
                                       {"block", required_argument, 0, 'b'},  {"seed", required_argument, 0, 's'},
                                       {"ctas", required_argument, 0, 'g'},   {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int o, bad = 0;
  optind = 1;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
      case 'l': bad |= !parse_range(optarg, &a, &b); break;
      case 't': bad |= !launch_tool_num(optarg, &tp); break;
      case 'r': bad |= !launch_tool_num(optarg, &rows); break;
      case 'n': bad |= !launch_tool_num(optarg, &steps) || steps < 1; break;
      case 'c': model = optarg; break;
      case 'e': bad |= !launch_tool_num(optarg, &experts) || experts < 1; break;
      case 'x': bad |= !launch_tool_num(optarg, &ctx) || ctx < 0; break;
      case 'q': bad |= !launch_tool_num(optarg, &reqs); break;
      case 'b': bad |= !launch_tool_num(optarg, &block) || block < 2; break;
      case 's': {
        char *end;
        seed = strtoull(optarg, &end, 0);
        bad |= !*optarg || *end;
        break;
      }
      case 'g': bad |= !launch_tool_num(optarg, &ctas) || ctas < 0; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (bad || optind < argc || a < 0 || (tp != 2 && tp != 4) || rows < 1 || rows > HM_MAX_ROWS || reqs < 1 ||
      rows % reqs) {
    usage(stderr);
    return 2;
  }
  /* the last step's rows must fit the caches: positions ctx + steps - 1 + 7 (reqs - 1) + rows / reqs */
  if (ctx + steps - 1 + 7 * (reqs - 1) + rows / reqs >= MAX_POS) {
    fprintf(stderr, "hsa-mono-check model: context %ld over %ld steps passes the caches' %d positions\n", ctx, steps,
            MAX_POS);
    return 2;
  }
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt) != HM_OK) {
    fprintf(stderr, "hsa-mono-check model: %s\n", hm_errmsg());
    return 2;
  }
  /* the software agent's default: 32 of V4.1-Flash's routed experts, so a step takes seconds */
  if (experts < 0) experts = hm_runtime_is_sim(rt) && !strcmp(model, "v41-flash") ? 32 : 0;
  const uint32_t n = (uint32_t)(b - a + 1), S = (uint32_t)rows, T = (uint32_t)tp;
  link *c = calloc(n, sizeof *c);
  hm_select_state *gsel[HM_LAYER_MAX_TP] = {0}, *rsel = NULL;
  hm_gen_step first_in;
  memset(&first_in, 0, sizeof first_in);
  hm_tensor_set tr;
  hm_tset_init(&tr);
  float *sa = NULL, *sr = NULL;
  uint8_t *settled = NULL; /* 1 while a token's route has agreed between the chains in this step */
  uint32_t flips_total = 0, D = 0;
  int rc = 2, pass = 1;
  bool reduced = false;
  char note[64] = "";
  if (!c) goto done;
  if (hm_select_state_new(&rsel) != HM_OK) goto done;
  for (uint32_t r = 0; r < T; r++)
    if (hm_select_state_new(&gsel[r]) != HM_OK) goto done;
  /* the chain: a layer's config, weights and group, where its top-k and compressed cache come from */
  for (uint32_t i = 0; i < n; i++) {
    link *l = &c[i];
    hm_layer_config cfg, named;
    bool red;
    if (ffn_tool_layer(model, a + i, experts, 0, &cfg, &red) != HM_OK ||
        hm_config_by_name(model, (int32_t)(a + i), &named) != HM_OK) {
      fprintf(stderr, "hsa-mono-check model: %s\n", hm_errmsg());
      goto done;
    }
    if (red && !reduced) snprintf(note, sizeof note, "  [REDUCED: %u of %u experts]", cfg.experts, named.experts);
    reduced |= red;
    if (i == 0) {
      printf("hsa-mono-check model: %s layers %ld-%ld, %u experts top-%u%s, TP%ld, %ld rows in %ld requests at "
             "context %ld, %ld steps, SWA blocks of %ld, seed %llu, on %s\n",
             model, a, b, cfg.experts, cfg.topk, red ? " (REDUCED)" : "", tp, rows, reqs, ctx, steps, block, seed,
             hm_runtime_describe(rt));
      D = cfg.hidden;
    }
    l->seed = seed + 4096ull * (uint64_t)(a + i);
    l->index = hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE), l->kv = hm_config_has(&cfg, HM_ROLE_KV_SOURCE);
    l->topk_from = cfg.compress_ratio && !l->index && cfg.index_source >= a ? (int)(cfg.index_source - a) : -1;
    l->comp_from = cfg.compress_ratio && !l->kv && cfg.kv_source >= a ? (int)(cfg.kv_source - a) : -1;
    hm_ffn_config run = ffn_tool_launch(rt, red, ctas);
    if (layer_tool_open(&l->t, rt, &cfg, T, l->seed, &run, gsel) != HM_OK) goto done;
    for (uint32_t r = 0; r < T; r++)
      if (!layer_tool_outputs(&l->o[r], S, D, true)) goto oom;
    l->rx = malloc(sizeof(float) * S * D), l->rres = malloc(sizeof(float) * S * 4 * D);
    l->rpost = malloc(16 * (size_t)S), l->rcomb = malloc(64 * (size_t)S), l->rpre = malloc(16 * (size_t)S);
    l->rtopk = malloc(4 * (size_t)S * HM_TOPK_ATTN), l->normed = malloc(sizeof(float) * S * D);
    l->ids[0] = malloc(4 * (size_t)S * cfg.topk), l->ids[1] = malloc(4 * (size_t)S * cfg.topk);
    if (!l->rx || !l->rres || !l->rpost || !l->rcomb || !l->rpre || !l->rtopk || !l->normed || !l->ids[0] || !l->ids[1])
      goto oom;
  }
  if (reduced) check_note(note);
  if (!(sa = malloc(sizeof(float) * S * 4 * D)) || !(sr = malloc(sizeof(float) * S * 4 * D)) ||
      !(settled = malloc(S)))
    goto oom;
  for (uint32_t s = 0; s < (uint32_t)steps; s++) {
    /* this step's metadata: positions one on; the caches kept from the step before */
    for (uint32_t i = 0; i < n; i++) {
      link *l = &c[i];
      hm_gen_step_free(&l->meta);
      if (hm_gen_step_make_block(&l->t.cfg, S, (uint32_t)reqs, (uint32_t)(ctx + s), (uint32_t)block, l->seed,
                                 &l->meta) != HM_OK)
        goto fail;
      if (s == 0) {
        const hm_gen_step *m = &l->meta;
        for (int k = 0; k < 2; k++) {
          if (!(l->swa[k] = dup(m->swa_buf, m->swa_bytes))) goto oom;
          if (l->kv && !(l->comp[k] = dup(m->comp_buf, m->comp_bytes))) goto oom;
        }
        if (!(l->swa_out = malloc(m->swa_bytes)) || (l->kv && !(l->comp_out = malloc(m->comp_bytes)))) goto oom;
      }
      /* the indexer keys of the entries made before the chain's first step; an index source whose kv
       * source is outside the chain needs the new ones each step (nothing in the chain makes them) */
      if (l->index && (s == 0 || (!l->kv && l->t.cfg.kv_source < a))) {
        if (hm_gen_step_seed_select(&l->meta, &l->t.cfg, rsel, seed) != HM_OK) goto fail;
        for (uint32_t r = 0; r < T; r++)
          if (hm_gen_step_seed_select(&l->meta, &l->t.cfg, gsel[r], seed) != HM_OK) goto fail;
      }
    }
    /* layer A's inputs: a new token's each step (on layer 0, the embedding) */
    hm_gen_step_free(&first_in);
    if (hm_gen_step_make_block(&c[0].t.cfg, S, (uint32_t)reqs, (uint32_t)(ctx + s), (uint32_t)block, c[0].seed + s,
                               &first_in) != HM_OK)
      goto fail;
    memset(settled, 1, S);
    uint32_t flips_step = 0;
    for (uint32_t i = 0; i < n; i++) {
      link *l = &c[i];
      const hm_layer_config *cfg = &l->t.cfg;
      const link *p = i ? &c[i - 1] : NULL;
      hm_step_inputs in[2];
      for (int k = 0; k < 2; k++) {
        in[k] = l->meta.in;
        if (!p) {
          in[k].x = first_in.x, in[k].res = first_in.res;
          in[k].post = first_in.post, in[k].comb = first_in.comb, in[k].pre = first_in.pre;
        } else if (k == 0) {
          in[k].x = p->o[0].x, in[k].res = p->o[0].res;
          in[k].post = p->o[0].post, in[k].comb = p->o[0].comb, in[k].pre = p->o[0].pre;
        } else {
          in[k].x = p->rx, in[k].res = p->rres, in[k].post = p->rpost, in[k].comb = p->rcomb, in[k].pre = p->rpre;
        }
        if (hm_config_has(cfg, HM_ROLE_FIRST)) in[k].res = NULL;
        in[k].swa.base = l->swa[k];
        if (cfg->compress_ratio)
          in[k].comp.base = l->kv ? l->comp[k] : l->comp_from >= 0 ? c[l->comp_from].comp[k] : l->meta.comp_buf;
        if (l->topk_from >= 0) in[k].topk = k ? c[l->topk_from].rtopk : c[l->topk_from].o[0].topk;
        in[k].engram_table = &l->t.table;
      }
      /* the GPU chain */
      l->o[0].swa = l->swa_out, l->o[0].comp = l->kv ? l->comp_out : NULL;
      hm_status st = hm_layer_group_step(l->t.g, &in[0], 1, l->o, NULL);
      l->o[0].swa = NULL, l->o[0].comp = NULL;
      if (st != HM_OK || layer_tool_route(rt, l->t.g, S, l->normed, l->ids[0]) != HM_OK) goto fail;
      memcpy(l->swa[0], l->swa_out, l->meta.swa_bytes);
      if (l->kv) memcpy(l->comp[0], l->comp_out, l->meta.comp_bytes);
      /* the reference chain (its caches written in place) */
      hm_tset_free(&tr);
      hm_tset_init(&tr);
      if (hm_ref_layer_step(l->t.w, T, &in[1], NULL, rsel, &tr) != HM_OK) goto fail;
      const struct {
        const char *name;
        void *dst;
        hm_dtype dt;
        uint64_t n;
      } take[] = {{"out.x", l->rx, HM_DT_F32, (uint64_t)S * D},
                  {"out.res", l->rres, HM_DT_F32, (uint64_t)S * 4 * D},
                  {"out.post", l->rpost, HM_DT_F32, (uint64_t)S * 4},
                  {"out.comb", l->rcomb, HM_DT_F32, (uint64_t)S * 16},
                  {"out.pre", l->rpre, HM_DT_F32, (uint64_t)S * 4},
                  {"router.ids", l->ids[1], HM_DT_I32, (uint64_t)S * cfg->topk},
                  {"k1.topk", l->rtopk, HM_DT_I32, (uint64_t)S * HM_TOPK_ATTN}};
      for (unsigned j = 0; j < sizeof take / sizeof *take - !l->index; j++) {
        const void *src = hm_tset_data(&tr, take[j].name, take[j].dt, take[j].n);
        if (!src) goto fail;
        memcpy(take[j].dst, src, take[j].n * 4);
      }
      /* the comparison: res and the mixes over the tokens still alike, x over those whose route agrees */
      char kind[64];
      const double grow = 1.0 + i + s;
      uint32_t flips = 0, alike = 0;
      uint8_t keep_x[HM_MAX_ROWS];
      for (uint32_t t = 0; t < S; t++) {
        keep_x[t] = settled[t] && same_set(l->ids[0] + t * cfg->topk, l->ids[1] + t * cfg->topk, cfg->topk);
        flips += settled[t] && !keep_x[t];
        alike += settled[t];
      }
      printf("step %u, layer %ld (%s): %u of %u tokens alike so far%s\n", s, a + i,
             layer_tool_kind(cfg, kind, sizeof kind), alike, S, note);
      pass &= compare_rows("x", l->o[0].x, l->rx, S, D, keep_x, sa, sr, TOL_X_REL * grow, 1 - (1 - TOL_X_COS) * grow);
      pass &= compare_rows("res", l->o[0].res, l->rres, S, 4ull * D, settled, sa, sr, TOL_RES_REL * grow,
                           1 - (1 - TOL_RES_COS) * grow);
      pass &= compare_rows("post", l->o[0].post, l->rpost, S, 4, settled, sa, sr, TOL_MIX_REL * grow,
                           1 - (1 - TOL_MIX_COS) * grow);
      pass &= compare_rows("comb", l->o[0].comb, l->rcomb, S, 16, settled, sa, sr, TOL_MIX_REL * grow,
                           1 - (1 - TOL_MIX_COS) * grow);
      pass &= compare_rows("pre", l->o[0].pre, l->rpre, S, 4, settled, sa, sr, TOL_MIX_REL * grow,
                           1 - (1 - TOL_MIX_COS) * grow);
      if (l->index) {
        uint64_t crowded = 0, diff = 0;
        for (uint32_t t = 0; t < S; t++)
          if (l->meta.slot[t] >= 0 && (uint64_t)(l->meta.pos[t] + 1) / cfg->compress_ratio > HM_TOPK_ATTN)
            crowded += HM_TOPK_ATTN;
        for (uint64_t j = 0; j < (uint64_t)S * HM_TOPK_ATTN; j++) diff += l->o[0].topk[j] != l->rtopk[j];
        pass &= check_count("topk", diff, (uint64_t)S * HM_TOPK_ATTN, "entries of the select step",
                            crowded * TOL_TOPK_PCT / 100, "exact where every entry is picked, 2 % past 512");
      }
      if (flips) printf("  route    flipped for %u token(s) here: left out from this x on\n", flips);
      for (uint32_t t = 0; t < S; t++) settled[t] = keep_x[t];
      flips_step += flips;
      pass &= ranks_hold(l, T, S, D);
    }
    char what[64];
    snprintf(what, sizeof what, "tokens whose route flipped in step %u", s);
    pass &= check_count("flips", flips_step, S, what, TOL_FLIPS(S), "near ties of the biased scores");
    flips_total += flips_step;
  }
  rc = pass ? 0 : 1;
  printf("%s: %ld steps of layers %ld-%ld, %u route flip(s)%s\n", pass ? "PASS" : "FAIL", steps, a, b, flips_total, note);
  goto done;
oom:
  hm_fail(HM_ERR_NO_MEMORY, "model check");
fail:
  rc = 2;
done:
  if (rc == 2) fprintf(stderr, "hsa-mono-check model: %s\n", hm_errmsg());
  free(sa), free(sr), free(settled);
  hm_tset_free(&tr);
  hm_gen_step_free(&first_in);
  for (uint32_t i = 0; c && i < n; i++) {
    link *l = &c[i];
    layer_tool_close(&l->t);
    hm_gen_step_free(&l->meta);
    for (uint32_t r = 0; r < HM_LAYER_MAX_TP; r++) layer_tool_outputs_free(&l->o[r]);
    for (int k = 0; k < 2; k++) free(l->swa[k]), free(l->comp[k]), free(l->ids[k]);
    free(l->swa_out), free(l->comp_out), free(l->rx), free(l->rres), free(l->rpost), free(l->rcomb), free(l->rpre);
    free(l->rtopk), free(l->normed);
  }
  free(c);
  for (uint32_t r = 0; r < HM_LAYER_MAX_TP; r++) hm_select_state_free(gsel[r]);
  hm_select_state_free(rsel);
  hm_runtime_close(rt);
  return rc;
}
