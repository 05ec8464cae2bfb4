/* tools/bench/allreduce.c: hsa-mono-bench allreduce: µs a step of the standalone peer all-reduce by
 * message size and protocol, TP ranks as threads on agents 0 .. tp-1, beside its floor from the xGMI figures and,
 * with --model, the timing model's replay of a traced step. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "formats.h"
#include "hm_collectives.h"
#include "tmodel.h"

#define MAX_SIZES 16
/* the bench's own bounds: rows of a message, values a row, CTAs a rank */
#define MAX_ROWS 4096
#define MAX_WIDTH 65536
#define MAX_CTAS 1024

struct opts {
  unsigned tp, steps, warmup, ctas;
  uint32_t width, rows[MAX_SIZES];
  unsigned nrows;
  hm_ar_protocol proto;  /* this run's */
  const hm_part *mpart;  /* --model: the part a traced step of each size is replayed on */
};

struct rank {
  const struct opts *o;
  hm_runtime *rt;
  unsigned rank;
  hm_bootstrap boot;
  pthread_barrier_t *bar;
  double us[MAX_SIZES]; /* per step */
  int wrong[MAX_SIZES];
  bench_tm_row *model; /* rank 0: a modelled row a size (--model) */
  unsigned nmodel;
  char err[512];
};

/* Every rank contributes 1.0 at every position of size step's input plus its rank, so the sum is
 * checkable without a reference: tp + tp (tp - 1) / 2 (exact in bf16 for these tp). */
static uint16_t input_value(unsigned rank) { return fmt_bf16_from_f32(1.0f + (f32)rank); }

static void *rank_main(void *p) {
  struct rank *r = p;
  const struct opts *o = r->o;
  hm_agent *a = hm_agent_get(r->rt, r->rank);
  /* beside its GPU, as the library's own rank threads run; not binding (no NUMA) is no error */
  (void)hm_agent_bind_thread(a);
  uint32_t max_rows = 0;
  for (unsigned i = 0; i < o->nrows; i++) max_rows = o->rows[i] > max_rows ? o->rows[i] : max_rows;
  size_t n = (size_t)max_rows * o->width;
  hm_queue *q = NULL;
  hm_heap *h = NULL;
  hm_ar *ar = NULL;
  uint16_t *host = NULL, *in = NULL, *out = NULL;
  hm_heap_config hc = {.rank = r->rank, .tp = o->tp, .half_bytes = hm_allreduce_region_bytes(o->tp, max_rows, o->width),
                       .protocol = o->proto};
  hm_ar_config ac = {.width = o->width, .max_rows = max_rows, .max_ctas = o->ctas, .timeout_ns = 600000000000ull};
  hm_signal none = {0};
  int setup_ok = 0;
  if (!a) snprintf(r->err, sizeof r->err, "no agent %u (HSAMONO_SIM_AGENTS on the software agent)", r->rank);
  else if (hm_queue_create(a, 1024, &q) || hm_heap_create(a, &hc, &r->boot, &h) || hm_ar_create(h, &ac, &ar) ||
           hm_mem_alloc(a, HM_POOL_HOST, 2 * n, 0, (void **)&host) ||
           hm_mem_alloc(a, HM_POOL_COARSE, 2 * n, 0, (void **)&in) ||
           hm_mem_alloc(a, HM_POOL_COARSE, 2 * n, 0, (void **)&out))
    snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
  else {
    for (size_t i = 0; i < n; i++) host[i] = input_value(r->rank);
    if (hm_mem_copy(r->rt, in, host, 2 * n, none)) snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
    else setup_ok = 1;
  }
  /* every rank takes part in every barrier, failed or not, so none waits forever */
  for (unsigned s = 0; s < o->nrows; s++) {
    uint32_t rows = o->rows[s];
    for (unsigned i = 0; setup_ok && !r->err[0] && i < o->warmup; i++)
      if (hm_allreduce(ar, q, in, out, rows)) snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
    if (setup_ok && !r->err[0] && hm_ar_wait(ar, 600ull * 1000000000ull))
      snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
    pthread_barrier_wait(r->bar); /* start the timed steps together */
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; setup_ok && !r->err[0] && i < o->steps; i++)
      if (hm_allreduce(ar, q, in, out, rows)) snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
    if (setup_ok && !r->err[0] && hm_ar_wait(ar, 600ull * 1000000000ull))
      snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
    r->us[s] = (double)(bench_now_ns() - t0) / 1e3 / o->steps;
    if (setup_ok && !r->err[0]) {
      /* the result, checked: a fast wrong all-reduce is not a result */
      f32 want = 0.0f;
      for (unsigned k = 0; k < o->tp; k++) want = want + fmt_bf16_to_f32(input_value(k));
      if (hm_mem_copy(r->rt, host, out, 2 * (size_t)rows * o->width, none)) {
        snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
      } else {
        for (size_t i = 0; i < (size_t)rows * o->width; i++) r->wrong[s] += host[i] != fmt_bf16_from_f32(want);
      }
    }
    pthread_barrier_wait(r->bar);
    if (o->mpart) {
      /* one more step, traced by rank 0 around every rank's (the trace is the runtime's) */
      hm_status began = r->rank == 0 ? hm_runtime_trace_begin(r->rt) : HM_OK;
      pthread_barrier_wait(r->bar);
      hm_status ran = setup_ok && !r->err[0] ? hm_allreduce(ar, q, in, out, rows) : HM_ERR_RUNTIME;
      if (!ran) ran = hm_ar_wait(ar, 600ull * 1000000000ull);
      if (ran && !r->err[0]) snprintf(r->err, sizeof r->err, "rank %u: %s", r->rank, hm_errmsg());
      pthread_barrier_wait(r->bar);
      if (r->rank == 0) {
        if (began) snprintf(r->err, sizeof r->err, "--model: %s", hm_errmsg());
        else if (bench_tm_end(r->rt, o->mpart, ran, rows, &r->model[r->nmodel]) == 0) {
          static const char *const names[] = {"start", "push", "reduce"};
          bench_tm_name(&r->model[r->nmodel++], "ar_allreduce", names, 3);
        } else if (!r->err[0]) snprintf(r->err, sizeof r->err, "--model: the trace of %u rows could not be replayed", rows);
      }
      pthread_barrier_wait(r->bar);
    }
  }
  if (ar) hm_ar_destroy(ar);
  if (h) hm_heap_destroy(h);
  if (q) hm_queue_destroy(q);
  return NULL;
}

/* Link and memory figures for the agent's part (performance.md §1.1-1.2). */
struct figures {
  const char *part;
  double link_gbs;  /* xGMI, one direction of one link */
  double hbm_tbs;   /* measured streaming HBM */
  const char *link_src, *hbm_src;
};

static struct figures figures_for(const char *name) {
  if (!strcmp(name, "gfx942"))
    return (struct figures){"MI300X", 64.0, 4.0, "128 GB/s bidirectional a link (performance.md §1.2)",
                            "~3.9-4.2 TB/s measured (performance.md §1.1)"};
  return (struct figures){"MI355X", 76.8, 7.0, "153.6 GB/s bidirectional a link, vLLM PR #39080 (performance.md §1.2)",
                          "6.9-7.2 TB/s measured on MI350X (performance.md §1.1)"};
}

#define HOP_US 0.8 /* RCCL's LL per-hop latency on 8 x MI300X xGMI (runtime.md §6, ROCm/rccl tuning.cc) */

/* The floor of one protocol (device/ar.h) for a message of `bytes`: each rank pushes its whole message
 * to every peer over that peer's own link (pair: 8-byte (pair, tag) slots, twice the message; word:
 * the pairs alone), one hop for the last push to land, then its own inbox read (8-byte slots in both)
 * and, for the word protocol, every slot read emptied again (4 bytes each), at the measured HBM rate. */
static double floor_us(const struct figures *fg, hm_ar_protocol proto, unsigned tp, double bytes) {
  double link = (proto == HM_AR_PROTOCOL_PAIR ? 2.0 : 1.0) * bytes / (fg->link_gbs * 1e9);
  double local = tp * 2.0 * bytes + (proto == HM_AR_PROTOCOL_WORD ? tp * bytes : 0.0);
  return (link + local / (fg->hbm_tbs * 1e12)) * 1e6 + HOP_US;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: hsa-mono-bench allreduce [--tp N] [--rows R[,R...]] [--width W] [--steps K] [--warmup K]\n"
          "                                [--ctas N] [--protocol word|pair|both] " BENCH_TM_USAGE "\n"
          "  µs a step of hm_allreduce (bf16, W values a row, default 5120) at TP N (2..8, default 4), ranks as\n"
          "  threads on agents 0..N-1, beside the floor modelled from the xGMI figures; K steps a size (default\n"
          "  1000 on a GPU, 5 on the software agent) after K warm-up steps (default 100 and 1; 0: none), at most\n"
          "  N CTAs a rank (default 64 on a GPU, 8 on the software agent). --protocol: the heap's (device/ar.h;\n"
          "  default word, the library's), or both one after the other.\n"
          "  --model PART (mi355x or mi300x; the software agent only): one more step of each size traced and\n"
          "  replayed by the timing model (docs/timing_model.md) on the part: modelled_us and its critical path.\n"
          "  A model, not a measurement: every such line says so.\n");
}

/* One protocol's run: the rank threads through every size. 0, or an exit code with the message printed. */
static int run_protocol(hm_runtime *rt, const struct opts *o, struct rank *ranks, bench_tm_row *model) {
  hm_boot_group *g;
  pthread_barrier_t bar;
  if (hm_boot_group_create(o->tp, &g)) {
    fprintf(stderr, "hsa-mono-bench allreduce: %s\n", hm_errmsg());
    return CLI_EXIT_NOT_RUN;
  }
  pthread_barrier_init(&bar, NULL, o->tp);
  pthread_t th[HM_MAX_TP];
  for (unsigned r = 0; r < o->tp; r++) {
    ranks[r] = (struct rank){.o = o, .rt = rt, .rank = r, .bar = &bar, .model = r == 0 ? model : NULL};
    hm_bootstrap_threads(g, &ranks[r].boot);
    pthread_create(&th[r], NULL, rank_main, &ranks[r]);
  }
  for (unsigned r = 0; r < o->tp; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&bar);
  hm_boot_group_destroy(g);
  int rc = 0;
  for (unsigned r = 0; r < o->tp; r++)
    if (ranks[r].err[0]) {
      fprintf(stderr, "hsa-mono-bench allreduce: %s\n", ranks[r].err);
      rc = CLI_EXIT_NOT_RUN;
    }
  return rc;
}

int bench_allreduce(int argc, char **argv) {
  struct opts o = {.tp = 4, .steps = 0, .warmup = 0, .ctas = 0, .width = 5120,
                   .rows = {1, 2, 4, 8, 12, 16, 32, 48}, .nrows = 8};
  static const struct option opts[] = {{"tp", required_argument, 0, 't'},    {"rows", required_argument, 0, 'r'},
                                       {"width", required_argument, 0, 'w'}, {"steps", required_argument, 0, 'n'},
                                       {"warmup", required_argument, 0, 'u'}, {"ctas", required_argument, 0, 'g'},
                                       {"protocol", required_argument, 0, 'p'}, {"model", required_argument, 0, 'M'}, {"trace", required_argument, 0, 'R'},
                                       {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
  static const char *const proto_words[] = {"word", "pair", "both", NULL};
  cli c = {.prog = "hsa-mono-bench allreduce", .usage = usage};
  long tp = o.tp, width = o.width, steps = -1, warmup = -1, ctas = 0, rows[MAX_SIZES];
  const char *proto_word = "word", *part_word = NULL, *trace_path = NULL;
  int opt;
  optind = 1;
  while ((opt = cli_next(&c, argc, argv, opts)) != -1) {
    switch (opt) {
      case 't': cli_long(&c, 2, HM_MAX_TP, &tp); break;
      case 'r':
        if (cli_list(&c, 1, MAX_ROWS, rows, MAX_SIZES, &o.nrows))
          for (unsigned i = 0; i < o.nrows; i++) o.rows[i] = (uint32_t)rows[i];
        break;
      case 'w':
        if (cli_long(&c, 2, MAX_WIDTH, &width) && width % 2) cli_refuse(&c, "--width %ld: must be even", width);
        break;
      case 'n': cli_long(&c, 1, 1000000, &steps); break;
      case 'u': cli_long(&c, 0, 1000000, &warmup); break;
      case 'g': cli_long(&c, 1, MAX_CTAS, &ctas); break;
      case 'p': cli_word(&c, proto_words, &proto_word); break;
      case 'M': cli_word(&c, bench_tm_parts, &part_word); break;
      case 'R': bench_tm_trace_arg(&c, &trace_path); break;
      case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&c, argc, argv)) return CLI_EXIT_MISUSE;
  if (trace_path && !part_word) return cli_refuse(&c, "--trace writes the trace --model replays: give --model too");
  bench_tm_trace_to(trace_path);
  o.tp = (unsigned)tp, o.width = (uint32_t)width, o.ctas = (unsigned)ctas;
  o.mpart = part_word ? hm_part_find(part_word) : NULL;
  /* the software agent offers 4 agents unless told otherwise: TP 8 needs 8; a part replays its own
   * arch's kernels (MI300X: gfx942) */
  char agents[16];
  snprintf(agents, sizeof agents, "%u", o.tp > 4 ? o.tp : 4);
  setenv("HSAMONO_SIM_AGENTS", agents, 0);
  if (o.mpart) setenv("HSAMONO_SIM_ARCH", !strcmp(part_word, "mi300x") ? "gfx942" : "gfx950", 0);
  hm_runtime *rt = bench_open();
  bool sim = hm_runtime_is_sim(rt);
  o.steps = steps > 0 ? (unsigned)steps : sim ? 5 : 1000;
  o.warmup = warmup >= 0 ? (unsigned)warmup : sim ? 1 : 100;
  if (!o.ctas && sim) o.ctas = 8; /* CTAs are CPU threads here */
  const char *arch = hm_agent_count(rt) ? hm_agent_info_of(hm_agent_get(rt, 0))->name : "none";
  const char *want = o.mpart && !strcmp(part_word, "mi300x") ? "gfx942" : "gfx950";
  if (o.mpart && (!sim || strcmp(arch, want))) {
    fprintf(stderr, "hsa-mono-bench allreduce: --model %s replays the software agent's trace of %s kernels (%s)\n",
            part_word, want, !sim ? "HSAMONO_RUNTIME=sim" : "HSAMONO_SIM_ARCH is set to another arch");
    hm_runtime_close(rt);
    return CLI_EXIT_MISUSE;
  }
  if (hm_agent_count(rt) < o.tp) {
    fprintf(stderr, "hsa-mono-bench allreduce: TP %u needs %u GPU agents, there are %u\n", o.tp, o.tp,
            hm_agent_count(rt));
    hm_runtime_close(rt);
    return CLI_EXIT_NOT_RUN;
  }
  struct figures fg = figures_for(arch);
  printf("# all-reduce, TP%u on %s, %u bf16 a row, %u steps a size after %u warm-up, at most %u CTAs a rank\n", o.tp,
         arch, o.width, o.steps, o.warmup, o.ctas ? o.ctas : 64);
  printf("# floor (modelled, %s): each rank pushes its whole message to every peer over that peer's own link,\n",
         fg.part);
  printf("#   pair protocol: 8-byte (bf16 pair, tag) slots, 2 x message bytes; word protocol: the pairs alone,\n"
         "#   1 x message bytes; at %.1f GB/s, one direction of a link (%s)\n", fg.link_gbs, fg.link_src);
  printf("#   + %.1f us, one xGMI hop for the push to land (RCCL's LL per-hop latency, runtime.md §6)\n", HOP_US);
  printf("#   + tp x 2 x message bytes read from the own inbox (8-byte slots), and for the word protocol tp x message\n"
         "#   bytes stored to empty them again, at %.1f TB/s (%s)\n", fg.hbm_tbs, fg.hbm_src);
  printf("# goal on MI355X: <= 3 us at <= 128 KB, TP4; library all-reduces today ~6-7 us (performance.md §1.3)\n");

  hm_ar_protocol protos[2];
  unsigned np = 0;
  if (strcmp(proto_word, "pair")) protos[np++] = HM_AR_PROTOCOL_WORD;
  if (strcmp(proto_word, "word")) protos[np++] = HM_AR_PROTOCOL_PAIR;
  struct rank ranks[HM_MAX_TP];
  bench_tm_row model[2][MAX_SIZES];
  unsigned nmodel[2] = {0, 0};
  double modelled[2][MAX_SIZES];
  int rc = 0;
  for (unsigned k = 0; k < np && !rc; k++) {
    o.proto = protos[k];
    if ((rc = run_protocol(rt, &o, ranks, model[k]))) break;
    nmodel[k] = ranks[0].nmodel;
    printf("# %s protocol\n", hm_ar_protocol_name(o.proto));
    printf("%6s %10s %16s %12s%s\n", "rows", "bytes", sim ? "sw-agent us" : "GPU us", "floor us",
           o.mpart ? "  modelled_us" : "");
    for (unsigned s = 0; s < o.nrows; s++) {
      double bytes = 2.0 * o.rows[s] * o.width, worst = 0;
      for (unsigned r = 0; r < o.tp; r++) {
        worst = ranks[r].us[s] > worst ? ranks[r].us[s] : worst;
        if (ranks[r].wrong[s]) {
          fprintf(stderr, "hsa-mono-bench allreduce: rank %u: %d wrong values at %u rows (%s protocol)\n", r,
                  ranks[r].wrong[s], o.rows[s], hm_ar_protocol_name(o.proto));
          rc = CLI_EXIT_FAILED;
        }
      }
      printf("%6u %10.0f %16.1f %12.2f", o.rows[s], bytes, worst, floor_us(&fg, o.proto, o.tp, bytes));
      if (o.mpart && s < nmodel[k]) {
        modelled[k][s] = model[k][s].r.total_s * 1e6;
        printf(" %13.2f  %s (model)", modelled[k][s], o.mpart->name);
      }
      printf("\n");
    }
  }
  if (!rc) {
    if (sim) printf("# sw-agent us: the software agent on CPU threads (slowest rank, checked results); not a GPU time\n");
    else printf("# GPU us: slowest rank, %u back-to-back launches on one queue each, results checked\n", o.steps);
  }
  if (!rc && o.mpart && np == 2 && nmodel[0] == o.nrows && nmodel[1] == o.nrows) {
    printf("# both protocols on %s, TP%u, modelled (a timing model replaying the software agent's trace, not a "
           "measurement)\n", o.mpart->name, o.tp);
    printf("%6s %10s %12s %12s %7s\n", "rows", "bytes", "word_us", "pair_us", "faster");
    for (unsigned s = 0; s < o.nrows; s++)
      printf("%6u %10.0f %12.2f %12.2f %7s  %s (model)\n", o.rows[s], 2.0 * o.rows[s] * o.width, modelled[0][s],
             modelled[1][s], modelled[0][s] <= modelled[1][s] ? "word" : "pair", o.mpart->name);
  }
  for (unsigned k = 0; k < np; k++) {
    if (!rc && o.mpart && nmodel[k]) {
      char what[64];
      snprintf(what, sizeof what, "the all-reduce (%s protocol)", hm_ar_protocol_name(protos[k]));
      bench_tm_print_paths(o.mpart, what, model[k], nmodel[k]);
    } else {
      for (unsigned s = 0; s < nmodel[k]; s++) bench_tm_row_free(&model[k][s]);
    }
  }
  if (bench_tm_trace_close() && !rc) rc = CLI_EXIT_NOT_RUN;
  hm_runtime_close(rt);
  return rc;
}
