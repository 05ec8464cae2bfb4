/* tests/layer/step_kinds.h: every step entry point's tensors as a table (name, field, bytes), with a
 * good io of fresh runtime memory, for the tests that make each tensor bad in turn (misuse, sweep). */
#ifndef HM_TEST_STEP_KINDS_H
#define HM_TEST_STEP_KINDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hm_ffn.h"
#include "hm_ref.h"
#include "hm_hsa.h"
#include "hm_k1.h"
#include "hm_k2.h"
#include "hm_layer.h"

#define SK_SENTINEL 0xa5a5a5a5u

/* runtime memory of `bytes` on a (host: its host pool), every word SK_SENTINEL */
void *sk_mem(hm_agent *a, uint64_t bytes, bool host);
/* the same holding a copy of src */
void *sk_mem_of(hm_agent *a, const void *src, uint64_t bytes, bool host);

/* What a kind steps on: one rank's layer and its parts, a queue and a chain of its agent, and the
 * generated step whose metadata the good io carries (S rows, hidden D, H heads). */
typedef struct sk_target {
  hm_runtime *rt;
  hm_agent *a;
  hm_layer *l;
  hm_k1 *k1;
  hm_k2 *k2;
  hm_queue *q;
  hm_chain *c;
  const hm_gen_step *st;
  uint32_t S, D, H;
} sk_target;

/* A pointer field of a step's io: its offset, the bytes the step touches from it, whether the
 * host reads it (metadata) and whether the step writes it. */
typedef struct sk_tensor {
  const char *name;
  size_t off;
  uint64_t bytes;
  bool host, out;
} sk_tensor;

/* One step kind ("FFN", "K2", "K1", "layer"): its good io (every tensor exact, SK_SENTINEL-filled or
 * valid metadata) and how to check, step and record it. io points into the kind itself: do not
 * copy a made kind. */
typedef struct sk_kind {
  const char *name;
  union {
    hm_ffn_io ffn;
    hm_k2_io k2;
    hm_k1_io k1;
    hm_layer_io layer;
  } store;
  void *io;
  size_t io_bytes;
  sk_tensor t[24];
  unsigned n;
  hm_status (*accepts)(const sk_target *X, const void *io);
  hm_status (*step)(const sk_target *X, const void *io);
  hm_status (*record)(const sk_target *X, const void *io);
} sk_kind;

/* The kind `name` on X, its good io accepted (asserted); sk_kind_free frees its tensors. */
void sk_kind_make(const sk_target *X, const char *name, sk_kind *k);
void sk_kind_free(const sk_target *X, sk_kind *k);

/* a generated cache's bytes, and the io's view of it with no base yet */
uint64_t sk_cache_bytes(const hm_kv_cache *c);
hm_k1_cache sk_cache_of(const hm_kv_cache *c);

static inline void **sk_field(void *io, size_t off) { return (void **)((char *)io + off); }

/* The ways a step's tensor can be bad, each of which a step must refuse naming the tensor. */
enum sk_bad { SK_BAD_NULL, SK_BAD_SHORT, SK_BAD_MISALIGNED, SK_BAD_AGENT, SK_BAD_MALLOC, SK_BAD_FREED, SK_BAD_KINDS };
extern const char *const sk_bad_name[SK_BAD_KINDS];

/* A bad tensor where a step needs `bytes` of agent a's memory (host: its host pool): `use` is what
 * the step is given; `mem` (mem_bytes, on agent `on`, plain: malloc'd) the memory behind it that a
 * refused step must leave SK_SENTINEL, NULL for a NULL or freed tensor. */
typedef struct sk_bad_ptr {
  void *use, *mem;
  uint64_t mem_bytes;
  hm_agent *on;
  bool plain;
} sk_bad_ptr;
/* the bad tensor of kind b (SK_BAD_AGENT: on agent other) */
void sk_bad_make(hm_agent *a, hm_agent *other, enum sk_bad b, uint64_t bytes, bool host, sk_bad_ptr *p);
void sk_bad_free(hm_runtime *rt, sk_bad_ptr *p);

#endif /* HM_TEST_STEP_KINDS_H */
