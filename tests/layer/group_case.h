/* tests/layer/group_case.h: what the group-failure tests share: a TP group's heaps made over the
 * threads bootstrap, a rank's FFN step buffers, and a monotonic clock for "told within". */
#ifndef HM_TEST_GROUP_CASE_H
#define HM_TEST_GROUP_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "hm_collectives.h"
#include "hm_ffn.h"
#include "hm_hsa.h"

/* seconds on CLOCK_MONOTONIC */
double gc_now_s(void);

/* The FFN step's 10 tensors in gc_bufs order: its name, its field of hm_ffn_io, and the bytes a
 * row of it takes at hidden size D (gc_row_bytes). */
typedef struct gc_tensor {
  const char *name;
  size_t off;
  uint32_t per_d, fixed;
} gc_tensor;
extern const gc_tensor gc_tensors[10];
static inline uint64_t gc_row_bytes(const gc_tensor *t, uint32_t D) { return (uint64_t)t->per_d * D + t->fixed; }

/* One rank's FFN step buffers on agent a (every tensor zeroed, room for 2 rows; io.rows 1). */
typedef struct gc_bufs {
  hm_ffn_io io;
  void *buf[10];
} gc_bufs;
void gc_bufs_make(hm_runtime *rt, hm_agent *a, uint32_t D, gc_bufs *b);

/* The heaps of a TP group of tp ranks on agents 0 .. tp-1, each made in its own thread over one
 * threads bootstrap (heap creation is collective), half_bytes a half; asserts that all were made. */
void gc_heaps_create(hm_runtime *rt, unsigned tp, size_t half_bytes, hm_heap **h);

#endif /* HM_TEST_GROUP_CASE_H */
