/* collectives/coll_internal.h: what the collectives module's files share: the heap's structure,
 * clocks and deadlines. */
#ifndef HM_COLL_INTERNAL_H
#define HM_COLL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "hm_collectives.h"
#include "kernels/ar_args.h"

struct hm_heap {
  hm_runtime *rt;
  hm_agent *a;
  unsigned rank, tp;
  size_t half_bytes, arena_bytes;
  hm_ar_protocol protocol;        /* pair or word (device/ar.h), the same on every rank */
  uint8_t *arena;                 /* this rank's arena */
  uint8_t *peer[HM_MAX_TP];       /* every rank's arena as mapped here (peer[rank] == arena) */
  uint32_t *stage;                /* host-visible scratch for the copy engine (a page) */
  size_t reserved;                /* bytes of each half handed out by hm_heap_reserve */
  pthread_mutex_t lock;
  unsigned users;                 /* hm_heap_retain: all-reduces, FFN/K2 runners on this heap */
  bool failed;                    /* this rank's reason is in its arena (hm_heap_fail) */
  uint64_t header;                /* this rank's latest step header (hm_heap_step_begin), 0 before any */
  uint64_t mine[AR_HEADER_RING];  /* its latest steps' headers, step n at n % AR_HEADER_RING */
  hm_signal copies;               /* counts down the header's copies into every arena */
};

/* A step's header without its number (the kind, layer and rows a record keeps). */
uint64_t hm_heap_shape(hm_step_kind kind, int32_t layer, uint32_t rows);
/* The next n steps of this rank (a replay's recorded steps, in order) take the next numbers, the
 * first of them *first, and their headers (shapes[i], numbered) go into every arena at once. */
hm_status hm_heap_steps_begin(hm_heap *h, const uint64_t *shapes, unsigned n, uint32_t *first);
/* Compare this rank's steps numbered first .. its latest (at most AR_HEADER_RING of them) with
 * the peers' headers of the same numbers: a disagreement stops the group (*stopped) naming both. */
hm_status hm_heap_compare_steps(hm_heap *h, uint32_t first, bool *stopped);

/* The number of this rank's latest step (0 before any). */
uint32_t hm_heap_step_number(hm_heap *h);
/* hm_heap_wait_step comparing every step numbered first .. the latest (the ring's last
 * AR_HEADER_RING at most), not only the latest: for a wait on one launch of several in flight
 * (hm_ar_wait), whose earlier steps a peer may have made otherwise. first 0: none. */
hm_status hm_heap_wait_steps(hm_heap *h, hm_queue *q, hm_signal done, uint32_t first, uint64_t timeout_ns);

/* This rank's abort word (0: the group is up), read through the copy engine. */
hm_status hm_heap_read_abort(hm_heap *h, uint32_t *code);

static inline uint64_t hm_coll_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns left until deadline (0 once past it) */
static inline uint64_t hm_coll_left(uint64_t deadline) {
  uint64_t now = hm_coll_now_ns();
  return now < deadline ? deadline - now : 0;
}


_Static_assert(AR_HEADERS_OFF + 8u * AR_MAX_TP * AR_HEADER_RING <= AR_REASON_OFF,
               "the header rings fit the control page");

#endif /* HM_COLL_INTERNAL_H */
