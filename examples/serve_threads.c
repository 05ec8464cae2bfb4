/* examples/serve_threads.c: a TP group served from one process, a thread a rank (heap bootstrapped over
 * threads): decode steps of three layers, a recorded chain replayed; ranks, replays and the fp32 reference must agree. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_rank.h"

#define MAX_STEPS 8

typedef struct rank_arg {
  const serve_plan *p;
  hm_runtime *rt;
  hm_boot_group *bg;
  uint32_t rank;
  serve_out *trace;
  int rc;
} rank_arg;

static void *rank_main(void *v) {
  rank_arg *a = v;
  hm_bootstrap b;
  hm_status s = hm_bootstrap_threads(a->bg, &b);
  if (s) {
    fprintf(stderr, "serve rank %u: bootstrap: %s: %s\n", a->rank, hm_status_name(s), hm_errmsg());
    a->rc = SERVE_FAIL;
    return NULL;
  }
  a->rc = serve_rank(a->p, a->rt, a->rank, &b, a->trace);
  return NULL;
}

/* relative RMS error of a against r, and their cosine */
static void compare(const float *a, const float *r, size_t n, double *rel, double *cos) {
  double e = 0, rr = 0, aa = 0, ar = 0;
  for (size_t i = 0; i < n; i++) {
    e += ((double)a[i] - r[i]) * ((double)a[i] - r[i]);
    rr += (double)r[i] * r[i], aa += (double)a[i] * a[i], ar += (double)a[i] * r[i];
  }
  *rel = rr > 0 ? sqrt(e / rr) : sqrt(e);
  *cos = aa > 0 && rr > 0 ? ar / sqrt(aa * rr) : 0;
}

/* Rank 0's outputs of every layer and step against the library's fp32 reference run as the same
 * chain: the same generated weights and inputs, each reference layer fed the reference's own outputs
 * of the layer before, its own SWA cache kept across steps. Budgets (relative RMS error; cosine at
 * least 1 - rel^2) are hsa-mono-check model's (tools/check_model.c): a single layer's (x 5e-2, res
 * 4e-3, the mixes 1e-3), growing with the chain position plus the step, since each chain carries its
 * own rounding forward (x 2.5e-2, res 1.2e-2, the mixes 1e-2 a layer or step). Layer-major order:
 * layer i of step t needs only layer i - 1 of step t and layer i's own cache, so one layer's weights
 * are built at a time. Returns 0 within every budget. */
static int check_reference(const serve_plan *p, const serve_out *trace) {
  const size_t S = p->rows, D = 1024, T = p->steps;
  const size_t n_out[5] = {S * D, S * HM_HC * D, S * HM_HC, S * HM_HC * HM_HC, S * HM_HC};
  static const char *const names[5] = {"x", "res", "post", "comb", "pre"};
  static const double base[5] = {5e-2, 4e-3, 1e-3, 1e-3, 1e-3}, slope[5] = {2.5e-2, 1.2e-2, 1e-2, 1e-2, 1e-2};
  hm_layer_weights w[HM_LAYER_MAX_TP];
  uint32_t built = 0;
  hm_gen_step meta, entry, cache;
  memset(&meta, 0, sizeof meta), memset(&entry, 0, sizeof entry), memset(&cache, 0, sizeof cache);
  hm_tensor_set tr;
  hm_tset_init(&tr);
  /* the reference chain's outputs of the layer before ([t][output]) and of this one */
  float *prev[MAX_STEPS][5] = {{0}}, *cur[MAX_STEPS][5] = {{0}};
  int rc = 0;
  hm_status s = HM_OK;
  if (T > MAX_STEPS) {
    fprintf(stderr, "serve: the reference check holds %d steps at most\n", MAX_STEPS);
    return 1;
  }
  for (size_t t = 0; t < T; t++)
    for (int o = 0; o < 5; o++)
      if (!(prev[t][o] = malloc(4 * n_out[o])) || !(cur[t][o] = malloc(4 * n_out[o]))) {
        s = HM_ERR_NO_MEMORY;
        goto fail;
      }
  for (uint32_t i = 0; i < p->layers; i++) {
    hm_layer_config cfg;
    hm_gen gen;
    if ((s = hm_config_tiny(p->first_layer + (int32_t)i, &cfg)) || (s = hm_gen_init(&gen, &cfg, serve_layer_seed(p, i))))
      goto fail;
    hm_source src = hm_gen_source(&gen);
    for (built = 0; built < p->tp; built++)
      if ((s = hm_weights_build(&cfg, p->tp, built, &src, NULL, &w[built]))) break;
    hm_gen_free(&gen);
    if (s) goto fail;
    /* the layer's SWA cache as the deployment uploaded it at step 0, then kept */
    hm_gen_step_free(&cache);
    if ((s = serve_gen_meta(p, i, 0, &cache))) goto fail;
    for (uint32_t t = 0; t < T; t++) {
      hm_gen_step_free(&meta);
      if ((s = serve_gen_meta(p, i, t, &meta))) goto fail;
      hm_step_inputs in = meta.in;
      in.swa.base = cache.swa_buf;
      if (i == 0) {
        hm_gen_step_free(&entry);
        if ((s = serve_gen_entry(p, t, &entry))) goto fail;
        in.x = entry.x, in.res = entry.res, in.post = entry.post, in.comb = entry.comb, in.pre = entry.pre;
      } else {
        in.x = prev[t][0], in.res = prev[t][1], in.post = prev[t][2], in.comb = prev[t][3], in.pre = prev[t][4];
      }
      hm_tset_free(&tr);
      hm_tset_init(&tr);
      if ((s = hm_ref_layer_step(w, p->tp, &in, NULL, NULL, &tr))) goto fail;
      const serve_out *got = &trace[t * p->layers + i];
      const float *g[5] = {got->x, got->res, got->post, got->comb, got->pre};
      for (int o = 0; o < 5; o++) {
        char name[16];
        snprintf(name, sizeof name, "out.%s", names[o]);
        const float *ref = hm_tset_data(&tr, name, HM_DT_F32, n_out[o]);
        if (!ref) {
          s = HM_ERR_NOT_FOUND;
          goto fail;
        }
        memcpy(cur[t][o], ref, 4 * n_out[o]);
        double rel, cos;
        compare(g[o], ref, n_out[o], &rel, &cos);
        const double budget = base[o] + slope[o] * (double)(i + t);
        const int ok = rel <= budget && cos >= 1 - budget * budget;
        if (!ok || o == 0)
          printf("serve: step %u layer %d %-4s against the fp32 reference chain: rel %.3g cos %.9f (budget %.3g)%s\n",
                 t, cfg.layer, names[o], rel, cos, budget, ok ? "" : " FAIL");
        rc |= !ok;
      }
    }
    while (built) hm_weights_free(&w[--built]);
    for (size_t t = 0; t < T; t++)
      for (int o = 0; o < 5; o++) {
        float *x = prev[t][o];
        prev[t][o] = cur[t][o], cur[t][o] = x;
      }
  }
  goto done;
fail:
  fprintf(stderr, "serve: the reference: %s: %s\n", hm_status_name(s), hm_errmsg());
  rc = 1;
done:
  hm_tset_free(&tr);
  hm_gen_step_free(&meta), hm_gen_step_free(&entry), hm_gen_step_free(&cache);
  while (built) hm_weights_free(&w[--built]);
  for (size_t t = 0; t < T; t++)
    for (int o = 0; o < 5; o++) free(prev[t][o]), free(cur[t][o]);
  return rc;
}

int main(int argc, char **argv) {
  /* layers 3-5 of the tiny config: REUSE layers, packets only, so the chain can be recorded */
  serve_plan p = {.tp = 4, .first_layer = 3, .layers = 3, .steps = 3, .replays = 2, .rows = 4, .reqs = 2,
                  .ctx = 300, .seed = 1};
  if (argc > 1) p.tp = (uint32_t)atoi(argv[1]);
  if (argc > 2 || p.tp < 1 || p.tp > HM_LAYER_MAX_TP) {
    fprintf(stderr, "usage: serve_threads [TP (1-%d, default 4)]\n", HM_LAYER_MAX_TP);
    return 2;
  }
  hm_runtime *rt;
  hm_status s = hm_runtime_open(NULL, &rt); /* NULL: $HSAMONO_RUNTIME, else auto */
  if (s) {
    fprintf(stderr, "serve: runtime: %s: %s\n", hm_status_name(s), hm_errmsg());
    return 1;
  }
  printf("serve: libhsamono %s on %s, TP%u as threads\n", hm_version(), hm_runtime_describe(rt), p.tp);
  if (hm_agent_count(rt) < p.tp) {
    fprintf(stderr, "serve: TP%u needs %u GPU agents, the runtime has %u\n", p.tp, p.tp, hm_agent_count(rt));
    hm_runtime_close(rt);
    return 1;
  }
  /* rank 0's outputs of every layer and step, checked against the reference chain afterwards */
  const size_t S = p.rows, D = 1024, N = (size_t)p.steps * p.layers;
  serve_out *trace = calloc(N, sizeof *trace);
  int have = trace != NULL;
  for (size_t j = 0; have && j < N; j++) {
    serve_out *o = &trace[j];
    o->x = malloc(4 * S * D), o->res = malloc(4 * S * HM_HC * D), o->post = malloc(4 * S * HM_HC);
    o->comb = malloc(4 * S * HM_HC * HM_HC), o->pre = malloc(4 * S * HM_HC);
    have = o->x && o->res && o->post && o->comb && o->pre;
  }
  rank_arg ra[HM_LAYER_MAX_TP];
  pthread_t th[HM_LAYER_MAX_TP];
  hm_boot_group *bg = NULL;
  int rc = 1;
  uint32_t started = 0;
  hm_layer_config c0;
  if ((s = hm_config_tiny(p.first_layer, &c0)) || c0.hidden != D) {
    fprintf(stderr, "serve: the tiny config's hidden size is not %zu\n", D);
    goto done;
  }
  if (!have) {
    fprintf(stderr, "serve: out of host memory\n");
    goto done;
  }
  /* the thread bootstrap's group outlives every rank's use of it (it is used again at the end) */
  if ((s = hm_boot_group_create(p.tp, &bg))) {
    fprintf(stderr, "serve: boot group: %s: %s\n", hm_status_name(s), hm_errmsg());
    goto done;
  }
  for (; started < p.tp; started++) {
    ra[started] = (rank_arg){&p, rt, bg, started, started ? NULL : trace, SERVE_FAIL};
    if (pthread_create(&th[started], NULL, rank_main, &ra[started])) {
      fprintf(stderr, "serve: cannot start rank %u's thread\n", started);
      break;
    }
  }
  int skip = 0, fail = started < p.tp;
  for (uint32_t r = 0; r < started; r++) {
    pthread_join(th[r], NULL);
    skip |= ra[r].rc == SERVE_SKIP, fail |= ra[r].rc == SERVE_FAIL;
  }
  if (fail) goto done;
  if (skip) {
    rc = SERVE_SKIP;
    goto done;
  }
  rc = check_reference(&p, trace);
  if (!rc) printf("serve: PASS\n");
done:
  hm_boot_group_destroy(bg);
  for (size_t j = 0; trace && j < N; j++)
    free(trace[j].x), free(trace[j].res), free(trace[j].post), free(trace[j].comb), free(trace[j].pre);
  free(trace);
  /* every rank thread has returned: nothing else uses the runtime */
  hm_runtime_close(rt);
  return rc;
}
