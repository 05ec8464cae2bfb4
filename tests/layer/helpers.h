/* tests/layer/helpers.h: what the layer tests share: weights for a whole TP group from the
 * generator, generated step inputs, error measures, the software agent and device read-back. */
#ifndef TL_HELPERS_H
#define TL_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_hsa.h"
#include "hm_ref.h"
#include "hm_weights.h"

/* layer `layer` of `model`, experts/topk overridden when nonzero */
hm_layer_config tl_config(const char *model, int32_t layer, uint32_t experts, uint32_t topk);
/* every rank of tp from one seeded generator (parts: HM_WPART_*) */
void tl_build_group(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts, hm_layer_weights *w);
void tl_free_group(hm_layer_weights *w, uint32_t tp);

/* FFN-launch inputs: the attention output a [S,D] (bf16) split into tp parts that reduce to it
 * exactly (part 0 = a, the rest zero), res [S,4,D] (bf16, rms ~ `res_rms`), and seam mixes
 * made by the gate from random mixes (so post in (0,2), comb doubly stochastic). */
typedef struct tl_ffn_inputs {
  uint32_t S, D, tp;
  float *a, *parts[HM_LAYER_MAX_TP], *res, *post, *comb, *pre;
} tl_ffn_inputs;
void tl_ffn_inputs_make(const hm_layer_config *cfg, uint32_t S, uint32_t tp, uint64_t seed, tl_ffn_inputs *in);
void tl_ffn_inputs_free(tl_ffn_inputs *in);

/* error measures */
double tl_max_abs(const float *a, const float *b, uint64_t n);
double tl_rel_l2(const float *a, const float *ref, uint64_t n);
double tl_cosine(const float *a, const float *b, uint64_t n);
uint64_t tl_count_diff(const float *a, const float *b, uint64_t n);

/* a trace tensor's f32 data (fails the test if absent) */
float *tl_f32(const hm_tensor_set *s, const char *name);
int32_t *tl_i32(const hm_tensor_set *s, const char *name);
uint8_t *tl_u8(const hm_tensor_set *s, const char *name);

/* the software agent's runtime (fails the test if it cannot open) */
hm_runtime *tl_open_sim(void);
/* a malloc'd copy of n bytes of agent a's device memory, through host-visible staging as on a GPU */
void *tl_fetch(hm_runtime *rt, hm_agent *a, const void *dev, size_t n);

/* is x exactly bf16-representable */
int tl_is_bf16(float x);

#endif
