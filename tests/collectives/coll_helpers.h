/* tests/collectives/coll_helpers.h: what the collectives tests share: deterministic bf16 inputs and
 * their CPU rank-order sum, ranks as threads of one process, ranks as processes (this binary again). */
#ifndef HM_TEST_COLL_HELPERS_H
#define HM_TEST_COLL_HELPERS_H

#include <check.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "formats.h"
#include "hm_collectives.h"
#include "hm_hsa.h"

#define WAIT_NS (300ull * 1000000000ull) /* bound of a test's waits: generous, a loaded 2-core box */

static inline uint64_t t_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void t_nap_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- inputs and the CPU sum */

static inline uint32_t t_hash(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca6bu ^ (c + 0x165667b1u) * 0xc2b2ae35u;
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12, h *= 0x297a2d39u, h ^= h >> 15;
  return h;
}

/* Rank r's bf16 value i at step k. Sums of a few bf16 values are nearly always exact in f32, so
 * random values alone cannot tell one summation order from another; hence two traps, the same on
 * every rank for a given (k, i): a third of the values are +B on rank 0, -B on rank 1 and small
 * elsewhere (B = 2^18 .. 2^23: in rank order B and -B cancel first and the small ones survive, in
 * any other order they are lost against B), and a seventh are -0 on every rank (a sum that starts
 * from 0.0 instead of rank 0's value gives +0). The rest: magnitudes 2^-9 .. 2^6 of both signs. */
static inline uint16_t t_input(unsigned rank, unsigned step, uint32_t i) {
  uint32_t g = t_hash(0xffffu, step, i), h = t_hash(rank, step, i);
  if (g % 7u == 1u) return 0x8000u;
  if (g % 3u == 0u && rank < 2) {
    uint16_t big = (uint16_t)((g & 0x8000u) | (145u + (g >> 16) % 6u) << 7 | ((g >> 4) & 0x7fu));
    return rank == 0 ? big : (uint16_t)(big ^ 0x8000u);
  }
  uint16_t sign = (uint16_t)(h & 0x8000u);
  if (g % 3u == 0u) return (uint16_t)(sign | (118u + (h >> 16) % 4u) << 7 | ((h >> 4) & 0x7fu));
  if ((h >> 24) == 0) return sign;
  return (uint16_t)(sign | (118u + (h >> 16) % 16u) << 7 | ((h >> 4) & 0x7fu));
}

/* The all-reduce's definition: f32 sum in rank order from rank 0's value, then bf16. */
static inline uint16_t t_expect(unsigned tp, unsigned step, uint32_t i) {
  f32 acc = fmt_bf16_to_f32(t_input(0, step, i));
  for (unsigned r = 1; r < tp; r++) acc = acc + fmt_bf16_to_f32(t_input(r, step, i));
  return fmt_bf16_from_f32(acc);
}

static inline void t_fill(uint16_t *p, unsigned rank, unsigned step, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = t_input(rank, step, (uint32_t)i);
}

/* The first index where out differs from the expected sum, or -1. */
static inline long t_check(const uint16_t *out, unsigned tp, unsigned step, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (out[i] != t_expect(tp, step, (uint32_t)i)) return (long)i;
  return -1;
}

/* ---------------------------------------------------------------- one rank's work */

/* A rank: its own queue, heap and all-reduce on agent `rank`; runs `steps` steps of rows[k % nrows]
 * rows each, enqueued back to back (inputs and outputs distinct a step, in host memory the agent
 * sees), then checks every output against the CPU sum. Errors go to err, not to Check (threads). */
struct t_rank {
  /* in */
  hm_runtime *rt;
  unsigned rank, tp;
  hm_bootstrap boot;
  uint32_t width, max_rows;
  const uint32_t *rows;
  unsigned nrows, steps;
  uint64_t timeout_ns;   /* the all-reduce's bound on waiting (0: default) */
  bool keep_outputs;     /* leave out[] for the caller (freed with the runtime) */
  hm_ar_protocol protocol; /* the heap's (0: the default) */
  /* other inputs and their expected sums than t_input / t_expect (NULL: those) */
  uint16_t (*input)(unsigned rank, unsigned step, uint32_t i);
  uint16_t (*expect)(unsigned tp, unsigned step, uint32_t i);
  /* out */
  hm_status st;
  char err[600];
  uint64_t took_ns;      /* from the first enqueue to the end of the wait */
  uint16_t *out;         /* the last step's output (keep_outputs) */
};

static inline void t_rank_fail(struct t_rank *r, hm_status s, const char *fmt, ...) {
  if (r->st) return;
  r->st = s ? s : HM_ERR_RUNTIME;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
  if (s && n > 0 && (size_t)n < sizeof r->err) snprintf(r->err + n, sizeof r->err - (size_t)n, ": %s", hm_errmsg());
}

static inline void *t_rank_main(void *p) {
  struct t_rank *r = p;
  hm_agent *a = hm_agent_get(r->rt, r->rank);
  hm_queue *q = NULL;
  hm_heap *h = NULL;
  hm_ar *ar = NULL;
  hm_status s;
  hm_heap_config hc = {.rank = r->rank, .tp = r->tp,
                       .half_bytes = hm_allreduce_region_bytes(r->tp, r->max_rows, r->width), .timeout_ns = 60000000000ull,
                       .protocol = r->protocol};
  /* a rank without its agent still joins the set-up (as failed), so its peers fail at once */
  if ((s = hm_heap_create(a, &hc, &r->boot, &h))) {
    t_rank_fail(r, s, "rank %u: heap", r->rank);
    return NULL;
  }
  if ((s = hm_queue_create(a, 256, &q))) {
    t_rank_fail(r, s, "rank %u: queue", r->rank);
    hm_heap_destroy(h);
    return NULL;
  }
  hm_ar_config ac = {.width = r->width, .max_rows = r->max_rows, .max_ctas = 4, .timeout_ns = r->timeout_ns};
  if ((s = hm_ar_create(h, &ac, &ar))) {
    t_rank_fail(r, s, "rank %u: all-reduce", r->rank);
    hm_heap_destroy(h);
    hm_queue_destroy(q);
    return NULL;
  }
  size_t row = r->width, n_max = (size_t)r->max_rows * row;
  uint16_t *in = NULL, *out = NULL;
  size_t bytes = 2 * n_max * r->steps;
  if ((s = hm_mem_alloc(a, HM_POOL_HOST, bytes, 0, (void **)&in)) ||
      (s = hm_mem_alloc(a, HM_POOL_HOST, bytes, 0, (void **)&out))) {
    t_rank_fail(r, s, "rank %u: %zu bytes of buffers", r->rank, bytes);
  } else {
    for (unsigned k = 0; k < r->steps; k++) {
      uint32_t rows = r->rows[k % r->nrows];
      if (r->input)
        for (size_t i = 0; i < rows * row; i++) in[k * n_max + i] = r->input(r->rank, k, (uint32_t)i);
      else
        t_fill(in + k * n_max, r->rank, k, rows * row);
      memset(out + k * n_max, 0xff, 2 * rows * row);
    }
    uint64_t t0 = t_now_ns();
    unsigned k;
    for (k = 0; k < r->steps; k++) {
      if ((s = hm_allreduce(ar, q, in + k * n_max, out + k * n_max, r->rows[k % r->nrows]))) {
        t_rank_fail(r, s, "rank %u: step %u", r->rank, k);
        break;
      }
    }
    if ((s = hm_ar_wait(ar, WAIT_NS))) t_rank_fail(r, s, "rank %u: waiting after %u steps", r->rank, k);
    r->took_ns = t_now_ns() - t0;
    if (!r->st)
      for (k = 0; k < r->steps; k++) {
        uint32_t rows = r->rows[k % r->nrows];
        long bad = -1;
        if (r->expect) {
          for (size_t i = 0; i < rows * row && bad < 0; i++)
            if (out[k * n_max + i] != r->expect(r->tp, k, (uint32_t)i)) bad = (long)i;
        } else {
          bad = t_check(out + k * n_max, r->tp, k, rows * row);
        }
        if (bad >= 0) {
          uint16_t want = r->expect ? r->expect(r->tp, k, (uint32_t)bad) : t_expect(r->tp, k, (uint32_t)bad);
          t_rank_fail(r, HM_OK, "rank %u step %u (%u rows): value %ld is 0x%04x, the CPU's rank-order sum 0x%04x", r->rank,
                      k, rows, bad, out[k * n_max + (size_t)bad], want);
          break;
        }
      }
    if (r->keep_outputs) r->out = out + (r->steps - 1) * n_max;
  }
  hm_ar_destroy(ar);
  if ((s = hm_heap_destroy(h))) t_rank_fail(r, s, "rank %u: heap teardown", r->rank);
  hm_queue_destroy(q);
  return NULL;
}

/* tp ranks as threads of this process, on agents 0 .. tp-1 of one runtime; fills the runs'
 * shared fields from `proto`. Returns how many ranks failed; each one's reason is in runs[r].err. */
static inline unsigned t_run_threads(hm_runtime *rt, unsigned tp, const struct t_rank *proto, struct t_rank *runs) {
  hm_boot_group *g;
  ck_assert_int_eq(hm_boot_group_create(tp, &g), HM_OK);
  pthread_t th[HM_MAX_TP];
  for (unsigned r = 0; r < tp; r++) {
    runs[r] = *proto;
    runs[r].rt = rt, runs[r].rank = r, runs[r].tp = tp;
    ck_assert_int_eq(hm_bootstrap_threads(g, &runs[r].boot), HM_OK);
    ck_assert_int_eq(pthread_create(&th[r], NULL, t_rank_main, &runs[r]), 0);
  }
  unsigned failed = 0;
  for (unsigned r = 0; r < tp; r++) {
    pthread_join(th[r], NULL);
    failed += runs[r].st != HM_OK;
  }
  hm_boot_group_destroy(g);
  return failed;
}

/* ---------------------------------------------------------------- ranks as processes */

/* Start this test binary again as `--child` with the given arguments (NULL-terminated); its stdout
 * goes to *out_fd when out_fd is not NULL (else it is inherited). */
static inline pid_t t_spawn(int *out_fd, ...) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ck_assert(n > 0);
  self[n] = 0;
  char *argv[16] = {self, "--child"};
  int argc = 2;
  va_list ap;
  va_start(ap, out_fd);
  for (char *s; argc < 15 && (s = va_arg(ap, char *));) argv[argc++] = s;
  va_end(ap);
  argv[argc] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int pfd[2] = {-1, -1};
  if (out_fd) {
    ck_assert(pipe(pfd) == 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
  }
  extern char **environ;
  pid_t pid;
  ck_assert_int_eq(posix_spawn(&pid, self, &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  if (out_fd) {
    close(pfd[1]);
    *out_fd = pfd[0];
  }
  return pid;
}

/* A child's exit status (-1 if it did not exit normally), waiting at most WAIT_NS. */
static inline int t_reap(pid_t pid) {
  uint64_t end = t_now_ns() + WAIT_NS;
  for (;;) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (w < 0 || t_now_ns() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    t_nap_ms(5);
  }
}

/* A private directory for rendezvous sockets (removed by t_rmdir). */
static inline void t_tmpdir(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/hm-coll-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

#endif /* HM_TEST_COLL_HELPERS_H */
