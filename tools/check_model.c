/* tools/check_model.c: hsa-mono-check model: layers A..B of a TP group chained over decode steps (each
 * layer's outputs the next one's inputs, the KV caches kept), against the fp32 reference chained alike. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "check_chain.h"
#include "ffn_tool.h"
#include "hm_ref.h"
#include "launch_tool.h"

/* Budgets. Each chain carries its own outputs forward, so a layer's difference from the reference
 * chain is its own error plus what the layers and steps before it hand on, and the MoE amplifies its
 * input's error (a flipped bf16 element of a normed row can move its 32-group's e4m3 scale and
 * requantise the group: a token ~3e-2 off from one flip, hsa-mono-check layer). Measured on the
 * software agent (tiny layers 0-5, 2-9, 12-19, 18-25, 20-27, 36-42 at TP2 and TP4, 1-16 rows, 2-4
 * steps), the chains' difference grows about linearly with the chain position d (0 for layer A) and
 * the step s: up to 0.087 relative for x at d + s = 7 (~1.9e-2 a layer or step), 0.041 for res at 7
 * (~6e-3), 0.033 for post, comb and pre at 6-7 (~5e-3). An output's budget is its single-layer
 * budget plus a slope times d + s, the slope about twice the growth measured (a GPU's ulps flip
 * more roundings than the agent, which is exact in most places):
 *  - x: 5e-2 (2x the largest one-token amplification seen, 2.6e-2) + 2.5e-2 a layer or step;
 *  - res: 4e-3 (hsa-mono-check layer's) + 1.2e-2 a layer or step;
 *  - post, comb, pre: 1e-3 (hsa-mono-check layer's) + 1e-2 a layer or step;
 *  - cosine at least 1 - rel^2 (uncorrelated errors give 1 - rel^2/2; a bias shows in rel);
 *  - the SWA records the run wrote, as values: 5e-2 + 3.5e-2 a layer or step (e4m3 records of the
 *    drifted rows amplify their error as the MoE's quantisation does, and a step's records stay in
 *    the window: 0.20 measured at d + s = 9 with one row); the rest of the cache exactly as generated
 *    (no other slot is written);
 *  - an index source's top-k: exact while a row's entries fit the 512 picked; past that its picks
 *    come from drifted keys and queries: 2 % of them may move at d + s = 0, 2 % more a layer or step
 *    (2.7 % measured at d + s = 5);
 *  - the key table and klen: exact on every row whose top-k agreed between the chains (integers from
 *    the metadata and the top-k).
 * A token whose route differs between the chains (a near tie its drift tips) changes as a whole
 * from that layer's x on: it is counted and left out of that x and of every later output of the step.
 * What the drift cannot hide is held without growth at every layer and step: x against the
 * reference's MoE on the kernel's own normed rows and its route (check_moe.c), and every rank holding
 * rank 0's bits. Tried against perturbations of the GPU chain at layer 2 of tiny 0-5 (TP2, 4 rows, 2
 * steps): x 3 % too large, two streams of res swapped, res 3 % too large, the SWA cache not kept
 * across steps, a REUSE layer reading a generated top-k, a wrong key-table entry all fail; res 1 %
 * too large and post 2 % off pass (within the drift: hsa-mono-check layer holds one layer tighter). */
#define BASE_X 5e-2
#define SLOPE_X 2.5e-2
#define BASE_RES 4e-3
#define SLOPE_RES 1.2e-2
#define BASE_MIX 1e-3
#define SLOPE_MIX 1e-2
#define BASE_REC 5e-2
#define SLOPE_REC 3.5e-2
#define TOPK_PCT 2.0
/* the KV caches and RoPE table hold 4096 positions a request */
#define MAX_POS 4096

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-check model --layers A-B --tp N --rows R [--steps T] [--config v41-flash|tiny]\n"
          "                            [--experts E] [--ctx C] [--reqs Q] [--block B] [--seed S] [--ctas G]\n"
          "                            [--arch A]\n"
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
          "reference chain, x and the route against the reference's MoE on the layer's own normed rows, an\n"
          "index source's top-k, the key table, the SWA records, the tokens whose route flipped (left out\n"
          "from then on), and whether every rank holds rank 0's outputs; exits 1 past the budgets (they\n"
          "grow with depth and step: see check_model.c), 2 on misuse or a failed run. Every layer's group\n"
          "stays alive for the run: on the software agent a tiny layer at TP4 holds ~0.2 GB, a full-size one\n"
          "with 32 experts ~2 GB (so: --config tiny, or a few layers at full size). On the\n"
          "software agent the routed experts of v41-flash are cut to 32 (--experts E: another count; every\n"
          "line then says the run is reduced) and the grid is 8 CTAs a rank; --ctas G sets another.\n"
          LAUNCH_TOOL_ARCH_LAYER_HELP);
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
  const char *arch_word = "gfx950";
  static const struct option opts[] = {{"layers", required_argument, 0, 'l'}, {"tp", required_argument, 0, 't'},
                                       {"rows", required_argument, 0, 'r'},   {"steps", required_argument, 0, 'n'},
                                       {"config", required_argument, 0, 'c'}, {"experts", required_argument, 0, 'e'},
                                       {"ctx", required_argument, 0, 'x'},    {"reqs", required_argument, 0, 'q'},
                                       {"block", required_argument, 0, 'b'},  {"seed", required_argument, 0, 's'},
                                       {"ctas", required_argument, 0, 'g'},   {"arch", required_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  cli cl = {.prog = "hsa-mono-check model", .usage = usage};
  int o;
  optind = 1;
  while ((o = cli_next(&cl, argc, argv, opts)) != -1) {
    switch (o) {
      case 'l': cli_range(&cl, 0, HM_MAX_LAYERS - 1, &a, &b); break;
      case 't': cli_long_of(&cl, launch_tool_tps, 2, &tp); break;
      case 'r': cli_long(&cl, 1, HM_MAX_ROWS, &rows); break;
      case 'n': cli_long(&cl, 1, MAX_POS, &steps); break;
      case 'c': cli_word(&cl, launch_tool_configs, &model); break;
      case 'e': cli_long(&cl, 1, LAUNCH_TOOL_MAX_EXPERTS, &experts); break;
      case 'x': cli_long(&cl, 0, LAUNCH_TOOL_SLOTS - 1, &ctx); break;
      case 'q': cli_long(&cl, 1, HM_MAX_ROWS, &reqs); break;
      case 'b': cli_long(&cl, 2, LAUNCH_TOOL_SLOTS, &block); break;
      case 's': cli_u64(&cl, &seed); break;
      case 'g': cli_long(&cl, 1, LAUNCH_TOOL_MAX_CTAS, &ctas); break;
      case 'a': cli_word(&cl, launch_tool_arches, &arch_word); break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&cl, argc, argv)) return CLI_EXIT_MISUSE;
  if (a < 0) return cli_refuse(&cl, "--layers is required");
  if (!tp) return cli_refuse(&cl, "--tp is required");
  if (!rows) return cli_refuse(&cl, "--rows is required");
  const hm_arch arch = launch_tool_arch(arch_word);
  if (launch_tool_arch_shape(&cl, arch, tp, rows)) return CLI_EXIT_MISUSE;
  if (launch_tool_step_shape(&cl, rows, reqs, ctx, block)) return CLI_EXIT_MISUSE;
  /* the last step's rows must fit the caches: positions ctx + steps - 1 + 7 (reqs - 1) + rows / reqs */
  if (ctx + steps - 1 + 7 * (reqs - 1) + rows / reqs >= MAX_POS)
    return cli_refuse(&cl, "context %ld over %ld steps passes the caches' %d positions", ctx, steps, MAX_POS);
  /* every layer of the chain takes --experts (a count below a layer's top-k does not) */
  for (long l = a; l <= b; l++) {
    hm_layer_config probe;
    bool red;
    if (ffn_tool_layer(model, l, experts > 0 ? experts : 0, 0, &probe, &red) != HM_OK)
      return cli_refuse(&cl, "%s", hm_errmsg());
  }
  launch_tool_arch_select(arch);
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt) != HM_OK) {
    fprintf(stderr, "hsa-mono-check model: %s\n", hm_errmsg());
    return 2;
  }
  if (launch_tool_arch_agents(cl.prog, rt, (uint32_t)tp, arch)) {
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  /* the software agent's default: 32 of V4.1-Flash's routed experts, so a step takes seconds */
  if (experts < 0) experts = hm_runtime_is_sim(rt) && !strcmp(model, "v41-flash") ? 32 : 0;
  const uint32_t n = (uint32_t)(b - a + 1), S = (uint32_t)rows, T = (uint32_t)tp;
  chain_link *c = calloc(n, sizeof *c);
  hm_select_state *gsel[HM_LAYER_MAX_TP] = {0}, *rsel = NULL;
  hm_gen_step first_in;
  memset(&first_in, 0, sizeof first_in);
  hm_tensor_set tr;
  hm_tset_init(&tr);
  float *sa = NULL, *sr = NULL, *rva = NULL, *rvr = NULL; /* scratch: rows compared, records decoded */
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
    chain_link *l = &c[i];
    hm_layer_config cfg, named;
    bool red;
    if (ffn_tool_layer(model, a + i, experts, 0, &cfg, &red) != HM_OK ||
        hm_config_by_name(model, (int32_t)(a + i), &named) != HM_OK)
      goto done;
    if (red && !reduced) snprintf(note, sizeof note, "  [REDUCED: %u of %u experts]", cfg.experts, named.experts);
    reduced |= red;
    if (i == 0) {
      printf("hsa-mono-check model: %s layers %ld-%ld, %u experts top-%u%s, TP%ld, %ld rows in %ld requests at "
             "context %ld, %ld steps, SWA blocks of %ld, %s, seed %llu, on %s\n",
             model, a, b, cfg.experts, cfg.topk, red ? " (REDUCED)" : "", tp, rows, reqs, ctx, steps, block, arch_word,
             seed,
             hm_runtime_describe(rt));
      D = cfg.hidden;
    }
    l->seed = seed + 4096ull * (uint64_t)(a + i);
    l->index = hm_config_has(&cfg, HM_ROLE_INDEX_SOURCE), l->kv = hm_config_has(&cfg, HM_ROLE_KV_SOURCE);
    l->topk_from = cfg.compress_ratio && !l->index && cfg.index_source >= a ? (int)(cfg.index_source - a) : -1;
    l->comp_from = cfg.compress_ratio && !l->kv && cfg.kv_source >= a ? (int)(cfg.kv_source - a) : -1;
    hm_ffn_config run = ffn_tool_launch(rt, red, ctas);
    if (layer_tool_open(&l->t, rt, &cfg, T, l->seed, NULL, 0, arch, &run, gsel) != HM_OK) goto done;
    for (uint32_t r = 0; r < T; r++)
      if (!layer_tool_outputs(&l->o[r], S, D, true)) goto oom;
    l->rx = malloc(sizeof(float) * S * D), l->rres = malloc(sizeof(float) * S * 4 * D);
    l->rpost = malloc(16 * (size_t)S), l->rcomb = malloc(64 * (size_t)S), l->rpre = malloc(16 * (size_t)S);
    l->rtopk = malloc(4 * (size_t)S * HM_TOPK_ATTN), l->normed = malloc(sizeof(float) * S * D);
    l->ids[0] = malloc(4 * (size_t)S * cfg.topk), l->ids[1] = malloc(4 * (size_t)S * cfg.topk);
    l->rkt = malloc(4 * (size_t)S * HM_KEYS), l->rklen = malloc(8 * (size_t)S);
    l->written = calloc((size_t)reqs * MAX_POS, 1);
    if (!l->rx || !l->rres || !l->rpost || !l->rcomb || !l->rpre || !l->rtopk || !l->normed || !l->ids[0] ||
        !l->ids[1] || !l->rkt || !l->rklen || !l->written)
      goto oom;
  }
  if (reduced) check_note(note);
  if (!(sa = malloc(sizeof(float) * S * 4 * D)) || !(sr = malloc(sizeof(float) * S * 4 * D)) ||
      !(settled = malloc(S)))
    goto oom;
  /* every slot a step writes, over the steps: steps + rows of a request (positions one on a step) */
  const size_t recs = (size_t)reqs * (size_t)(steps + rows / reqs) * HM_HEAD_DIM;
  if (!(rva = malloc(sizeof(float) * recs)) || !(rvr = malloc(sizeof(float) * recs))) goto oom;
  for (uint32_t s = 0; s < (uint32_t)steps; s++) {
    /* this step's metadata: positions one on; the caches kept from the step before */
    for (uint32_t i = 0; i < n; i++) {
      chain_link *l = &c[i];
      hm_gen_step_free(&l->meta);
      if (hm_gen_step_make_block(&l->t.cfg, S, (uint32_t)reqs, (uint32_t)(ctx + s), (uint32_t)block, l->seed,
                                 &l->meta) != HM_OK)
        goto fail;
      layer_tool_step_arch(&l->meta, arch);
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
      chain_link *l = &c[i];
      const hm_layer_config *cfg = &l->t.cfg;
      const chain_link *p = i ? &c[i - 1] : NULL;
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
      if (hm_ref_layer_step_source(cfg, T, &l->t.src, &l->t.bopts, &in[1], NULL, rsel, &tr) != HM_OK) goto fail;
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
                  {"k1.kt", l->rkt, HM_DT_I32, (uint64_t)S * HM_KEYS},
                  {"k1.klen", l->rklen, HM_DT_I32, 2 * (uint64_t)S},
                  {"k1.topk", l->rtopk, HM_DT_I32, (uint64_t)S * HM_TOPK_ATTN}};
      for (unsigned j = 0; j < sizeof take / sizeof *take - !l->index; j++) {
        const void *src = hm_tset_data(&tr, take[j].name, take[j].dt, take[j].n);
        if (!src) goto fail;
        memcpy(take[j].dst, src, take[j].n * 4);
      }
      /* the comparison: res and the mixes over the tokens alike so far, x over those whose route agrees */
      char kind[64];
      const double g = (double)(i + s), tx = BASE_X + SLOPE_X * g, tres = BASE_RES + SLOPE_RES * g,
                   tm = BASE_MIX + SLOPE_MIX * g;
      uint32_t flips = 0, alike = 0;
      uint8_t keep_x[HM_MAX_ROWS];
      for (uint32_t t = 0; t < S; t++) {
        keep_x[t] = settled[t] && check_same_route(l->ids[0] + t * cfg->topk, l->ids[1] + t * cfg->topk, cfg->topk);
        flips += settled[t] && !keep_x[t];
        alike += settled[t];
      }
      printf("step %u, layer %ld (%s): %u of %u tokens alike so far%s\n", s, a + i,
             layer_tool_kind(cfg, kind, sizeof kind), alike, S, note);
      pass &= chain_compare_rows("x", l->o[0].x, l->rx, S, D, keep_x, sa, sr, tx, 1 - tx * tx);
      int moe = check_moe_own(cfg, T, &l->t.src, &l->t.bopts, S, l->normed, l->ids[0], l->o[0].x);
      if (moe < 0) goto fail;
      pass &= moe;
      pass &= chain_compare_rows("res", l->o[0].res, l->rres, S, 4ull * D, settled, sa, sr, tres, 1 - tres * tres);
      pass &= chain_compare_rows("post", l->o[0].post, l->rpost, S, 4, settled, sa, sr, tm, 1 - tm * tm);
      pass &= chain_compare_rows("comb", l->o[0].comb, l->rcomb, S, 16, settled, sa, sr, tm, 1 - tm * tm);
      pass &= chain_compare_rows("pre", l->o[0].pre, l->rpre, S, 4, settled, sa, sr, tm, 1 - tm * tm);
      if (l->index)
        pass &= check_topk(l->o[0].topk, l->rtopk, S, l->meta.pos, l->meta.slot, cfg->compress_ratio,
                           TOPK_PCT * (1 + g));
      pass &= chain_check_keys(c, i, S);
      pass &= chain_check_cache(l, S, rva, rvr, BASE_REC + SLOPE_REC * g);
      if (flips) printf("  route    flipped for %u token(s) here: left out from this x on\n", flips);
      for (uint32_t t = 0; t < S; t++) settled[t] = keep_x[t];
      flips_step += flips;
      pass &= chain_ranks_hold(l, T, S, D);
    }
    printf("step %u: %u of %u tokens' routes flipped between the chains%s\n", s, flips_step, S, note);
    flips_total += flips_step;
  }
  rc = pass ? 0 : 1;
  printf("%s: %ld steps of layers %ld-%ld, %u route flip(s)%s\n", pass ? "PASS" : "FAIL", steps, a, b, flips_total,
         note);
  goto done;
oom:
  hm_fail(HM_ERR_NO_MEMORY, "model check");
fail:
  rc = 2;
done:
  if (rc == 2) fprintf(stderr, "hsa-mono-check model: %s\n", hm_errmsg());
  free(sa), free(sr), free(settled), free(rva), free(rvr);
  hm_tset_free(&tr);
  hm_gen_step_free(&first_in);
  for (uint32_t i = 0; c && i < n; i++) {
    chain_link *l = &c[i];
    layer_tool_close(&l->t);
    hm_gen_step_free(&l->meta);
    for (uint32_t r = 0; r < HM_LAYER_MAX_TP; r++) layer_tool_outputs_free(&l->o[r]);
    for (int k = 0; k < 2; k++) free(l->swa[k]), free(l->comp[k]), free(l->ids[k]);
    free(l->swa_out), free(l->comp_out), free(l->rx), free(l->rres), free(l->rpost), free(l->rcomb), free(l->rpre);
    free(l->rtopk), free(l->normed), free(l->rkt), free(l->rklen), free(l->written);
  }
  free(c);
  for (uint32_t r = 0; r < HM_LAYER_MAX_TP; r++) hm_select_state_free(gsel[r]);
  hm_select_state_free(rsel);
  hm_runtime_close(rt);
  return rc;
}
