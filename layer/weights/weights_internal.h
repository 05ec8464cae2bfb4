/* layer/weights/weights_internal.h: what the two layout builders share (weights.c: the gfx950 layouts;
 * weights942.c: gfx942's copies, spec/mono.md §4.4): the checkpoint source as a build reads it. */
#ifndef HM_WEIGHTS_INTERNAL_H
#define HM_WEIGHTS_INTERNAL_H

#include "hm_weights.h"

typedef struct hm_wbuild {
  const hm_layer_config *cfg;
  const hm_source *src;
  hm_ckpt_entry *schema;
  uint32_t count;
  char prefix[32];
  hm_tensor_set *set;
  hm_arch arch;
} hm_wbuild;

/* The schema entry of the layer's tensor `suffix` (its full name written to full[HM_TENSOR_NAME]),
 * or NULL with the failure recorded. */
const hm_ckpt_entry *hm_wb_entry(hm_wbuild *b, const char *suffix, char *full);
/* The same after checking that the source stores it with the schema's dtype and shape. */
hm_status hm_wb_expect(hm_wbuild *b, const char *suffix, char *full, const hm_ckpt_entry **out);
/* rows [r0, r0+nr) x cols [c0, c0+nc) of a checked tensor, as stored, into out */
hm_status hm_wb_read(hm_wbuild *b, const char *suffix, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc,
                     void *out);

/* Rank `rank`'s Ir columns of every routed expert as the checkpoint stores them, handed to `put`
 * one matrix at a time: the gate (w1) and up (w3) rows [Ir][D/2] with codes [Ir][D/32], then w2's
 * columns [D][Ir/2] with codes [D][Ir/32]. Each builder's `put` lays them out. */
enum { HM_EXPERT_GATE, HM_EXPERT_UP, HM_EXPERT_DOWN };
typedef void (*hm_expert_put)(void *ctx, uint32_t e, int which, const uint8_t *w, const uint8_t *codes);
hm_status hm_wb_experts(hm_wbuild *b, uint64_t Ir, uint32_t rank, hm_expert_put put, void *ctx);

/* gfx942 (weights942.c): the dense copy of rows [r0, r0+nr) x cols [c0, c0+nc) of the MXFP8 linear
 * `base` into kernel tensor `kname` (+ `kname`_s) of `total` rows, at row `at`; and the routed
 * experts of rank `rank` at TP4. */
hm_status hm_w942_dense(hm_wbuild *b, const char *base, const char *kname, uint64_t r0, uint64_t nr, uint64_t c0,
                        uint64_t nc, uint64_t at, uint64_t total);
hm_status hm_w942_experts(hm_wbuild *b, const hm_rank_dims *d, uint32_t rank);
/* the gfx942 routed decoders behind hm_w13_decode and hm_w2_decode */
void hm_w942_w13_decode(const hm_layer_weights *w, uint32_t e, bool up, uint32_t i0, uint32_t n, float *out);
void hm_w942_w2_decode(const hm_layer_weights *w, uint32_t e, uint32_t r0, uint32_t n, float *out);

#endif /* HM_WEIGHTS_INTERNAL_H */
