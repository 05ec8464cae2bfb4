/* collectives/coll_internal.h: what the collectives module's files share: the heap's structure,
 * clocks and deadlines. */
#ifndef HM_COLL_INTERNAL_H
#define HM_COLL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "hm_collectives.h"

struct hm_heap {
  hm_runtime *rt;
  hm_agent *a;
  unsigned rank, tp;
  size_t half_bytes, arena_bytes;
  uint8_t *arena;                 /* this rank's arena */
  uint8_t *peer[HM_MAX_TP];       /* every rank's arena as mapped here (peer[rank] == arena) */
  uint32_t *stage;                /* host-visible scratch for the copy engine (a page) */
  size_t reserved;                /* bytes of each half handed out by hm_heap_reserve */
  pthread_mutex_t lock;
  unsigned users;                 /* hm_heap_retain: all-reduces, FFN/K2 runners on this heap */
  bool failed;                    /* this rank's reason is in its arena (hm_heap_fail) */
  uint64_t header;                /* this rank's step header (hm_heap_step_begin), 0 before any */
  hm_signal copies;               /* counts down the header's copies into every arena */
};

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


#endif /* HM_COLL_INTERNAL_H */
