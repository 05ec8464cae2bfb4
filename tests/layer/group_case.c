/* tests/layer/group_case.c: a TP group's heaps over the threads bootstrap, a rank's FFN step
 * buffers and the clock, for the group-failure tests (group_case.h). */
#include "group_case.h"

#include <check.h>
#include <pthread.h>
#include <time.h>

double gc_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define T(name, per_d, fixed) {#name, offsetof(hm_ffn_io, name), per_d, fixed}
const gc_tensor gc_tensors[10] = {T(part, 2, 0),    T(res_in, 8, 0),  T(post_in, 0, 16),  T(comb_in, 0, 64),
                                  T(pre_in, 0, 16), T(out, 2, 0),     T(res_out, 8, 0),   T(post_out, 0, 16),
                                  T(comb_out, 0, 64), T(pre_out, 0, 16)};
#undef T

/* Room for 2 rows: a test steps 2 rows on one rank (ranks that disagree on rows), and every step's
 * tensors are checked against their allocations before the launch, so a 1-row buffer would
 * refuse that step on its host rather than let the group find the disagreement. */
void gc_bufs_make(hm_runtime *rt, hm_agent *a, uint32_t D, gc_bufs *b) {
  b->io = (hm_ffn_io){.rows = 1};
  for (int i = 0; i < 10; i++) {
    size_t bytes = 2 * gc_row_bytes(&gc_tensors[i], D);
    ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, bytes, 0, &b->buf[i]), HM_OK);
    ck_assert_int_eq(hm_mem_fill(rt, b->buf[i], 0, bytes / 4), HM_OK);
    *(void **)((char *)&b->io + gc_tensors[i].off) = b->buf[i];
  }
}

typedef struct {
  hm_runtime *rt;
  unsigned rank, tp;
  size_t half_bytes;
  hm_bootstrap boot;
  hm_heap *h;
  hm_status st;
} heap_rank;

static void *heap_main(void *p) {
  heap_rank *r = p;
  hm_heap_config c = {.rank = r->rank, .tp = r->tp, .half_bytes = r->half_bytes};
  r->st = hm_heap_create(hm_agent_get(r->rt, r->rank), &c, &r->boot, &r->h);
  return NULL;
}

void gc_heaps_create(hm_runtime *rt, unsigned tp, size_t half_bytes, hm_heap **h) {
  ck_assert_uint_le(tp, HM_MAX_TP);
  hm_boot_group *g;
  ck_assert_int_eq(hm_boot_group_create(tp, &g), HM_OK);
  heap_rank hr[HM_MAX_TP];
  pthread_t th[HM_MAX_TP];
  for (unsigned r = 0; r < tp; r++) {
    hr[r] = (heap_rank){.rt = rt, .rank = r, .tp = tp, .half_bytes = half_bytes};
    ck_assert_int_eq(hm_bootstrap_threads(g, &hr[r].boot), HM_OK);
    ck_assert_int_eq(pthread_create(&th[r], NULL, heap_main, &hr[r]), 0);
  }
  for (unsigned r = 0; r < tp; r++) pthread_join(th[r], NULL);
  hm_boot_group_destroy(g);
  for (unsigned r = 0; r < tp; r++) {
    ck_assert_msg(hr[r].st == HM_OK, "rank %u's heap failed", r);
    h[r] = hr[r].h;
  }
}
