/* collectives/boot_threads.c: the bootstrap of ranks that are threads of one process (an all-gather
 * through shared memory, in rounds, with a deadline), and the wrapping of a caller's own all-gather. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"

struct hm_boot_group {
  pthread_mutex_t lock;
  pthread_cond_t cv;
  unsigned tp;
  uint64_t round;                 /* the all-gather in progress: 1, 2, ... */
  uint64_t entered[HM_MAX_TP];    /* all-gathers each rank has entered */
  bool filled[HM_MAX_TP];         /* contributions to the round in progress */
  unsigned arrived, copied;
  size_t bytes;
  uint8_t *buf;                   /* tp * bytes */
  char broken[400];               /* once set, every call fails with it */
};

hm_status hm_boot_group_create(unsigned tp, hm_boot_group **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_boot_group_create: out is NULL");
  *out = NULL;
  if (tp < 1 || tp > HM_MAX_TP)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_boot_group_create: tp %u is not 1 .. %d", tp, HM_MAX_TP);
  hm_boot_group *g = calloc(1, sizeof *g);
  if (!g) return hm_fail(HM_ERR_NO_MEMORY, "hm_boot_group_create: out of memory");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  g->tp = tp;
  g->round = 1;
  *out = g;
  return HM_OK;
}

void hm_boot_group_destroy(hm_boot_group *g) {
  if (!g) return;
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->lock);
  free(g->buf);
  free(g);
}

/* Wait on the group's condition until `deadline`; false once it has passed. Caller holds the lock. */
static bool wait_until(hm_boot_group *g, uint64_t deadline) {
  if (hm_coll_now_ns() >= deadline) return false;
  struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
  int r = pthread_cond_timedwait(&g->cv, &g->lock, &ts);
  return r == 0 || r == EINTR || hm_coll_now_ns() < deadline;
}

/* The ranks that have not contributed to the round in progress, as "2, 3". */
static void missing_ranks(const hm_boot_group *g, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (unsigned r = 0; r < g->tp && n < cap; r++)
    if (!g->filled[r]) n += (size_t)snprintf(buf + n, cap - n, "%s%u", n ? ", " : "", r);
}

/* Give up: every rank waiting now or calling later fails with this reason. Caller holds the lock. */
static hm_status break_group(hm_boot_group *g, const char *reason) {
  if (!g->broken[0]) snprintf(g->broken, sizeof g->broken, "%s", reason);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->lock);
  return hm_fail(HM_ERR_PEER, "%s", reason);
}

static hm_status threads_allgather(void *ctx, unsigned rank, unsigned tp, const void *mine, size_t bytes, void *all,
                                   uint64_t timeout_ns) {
  hm_boot_group *g = ctx;
  if (!g || !mine || !all || bytes == 0)
    return hm_fail(HM_ERR_INVALID_ARG, "thread bootstrap: NULL argument or zero bytes");
  uint64_t deadline = hm_coll_now_ns() + timeout_ns;
  char why[400];
  pthread_mutex_lock(&g->lock);
  if (tp != g->tp || rank >= tp) {
    /* the others would wait for this rank until their bound: the group is broken now */
    snprintf(why, sizeof why, "thread bootstrap: rank %u of %u, but the group has %u ranks", rank, tp, g->tp);
    break_group(g, why);
    return hm_fail(HM_ERR_INVALID_ARG, "%s", why);
  }
  if (g->broken[0]) {
    snprintf(why, sizeof why, "%s", g->broken);
    pthread_mutex_unlock(&g->lock);
    return hm_fail(HM_ERR_PEER, "%s", why);
  }
  uint64_t k = ++g->entered[rank];
  /* the previous round ends when every rank has taken its result */
  while (g->round != k && !g->broken[0])
    if (!wait_until(g, deadline)) {
      snprintf(why, sizeof why, "rank %u gave up: ranks were still taking set-up step %llu's result after %.1f s",
               rank, (unsigned long long)(k - 1), timeout_ns / 1e9);
      return break_group(g, why);
    }
  if (g->broken[0]) {
    snprintf(why, sizeof why, "%s", g->broken);
    pthread_mutex_unlock(&g->lock);
    return hm_fail(HM_ERR_PEER, "%s", why);
  }
  if (g->arrived == 0) {
    if (g->bytes != bytes) {
      uint8_t *b = realloc(g->buf, tp * bytes);
      if (!b) return break_group(g, "thread bootstrap: out of memory");
      g->buf = b, g->bytes = bytes;
    }
  } else if (g->bytes != bytes) {
    snprintf(why, sizeof why, "rank %u contributed %zu bytes to set-up step %llu, another rank %zu", rank, bytes,
             (unsigned long long)k, g->bytes);
    return break_group(g, why);
  }
  memcpy(g->buf + (size_t)rank * bytes, mine, bytes);
  g->filled[rank] = true;
  if (++g->arrived == tp) pthread_cond_broadcast(&g->cv);
  while (g->arrived < tp && !g->broken[0])
    if (!wait_until(g, deadline)) {
      char miss[64];
      missing_ranks(g, miss, sizeof miss);
      snprintf(why, sizeof why, "rank%s %s never arrived at set-up step %llu (rank %u waited %.1f s)",
               strchr(miss, ',') ? "s" : "", miss, (unsigned long long)k, rank, timeout_ns / 1e9);
      return break_group(g, why);
    }
  if (g->broken[0]) {
    snprintf(why, sizeof why, "%s", g->broken);
    pthread_mutex_unlock(&g->lock);
    return hm_fail(HM_ERR_PEER, "%s", why);
  }
  memcpy(all, g->buf, tp * bytes);
  if (++g->copied == tp) {
    g->round++;
    g->arrived = g->copied = 0;
    memset(g->filled, 0, sizeof g->filled);
    pthread_cond_broadcast(&g->cv);
  }
  pthread_mutex_unlock(&g->lock);
  return HM_OK;
}

hm_status hm_bootstrap_threads(hm_boot_group *g, hm_bootstrap *out) {
  if (!g || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_bootstrap_threads: NULL argument");
  *out = (hm_bootstrap){.allgather = threads_allgather, .release = NULL, .ctx = g};
  return HM_OK;
}

hm_status hm_bootstrap_allgather(hm_status (*fn)(void *ctx, unsigned rank, unsigned tp, const void *mine,
                                                 size_t bytes, void *all, uint64_t timeout_ns),
                                 void *ctx, hm_bootstrap *out) {
  if (!fn || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_bootstrap_allgather: NULL function or out");
  *out = (hm_bootstrap){.allgather = fn, .release = NULL, .ctx = ctx};
  return HM_OK;
}

void hm_bootstrap_release(hm_bootstrap *b) {
  if (!b) return;
  if (b->release) b->release(b->ctx);
  *b = (hm_bootstrap){0};
}
