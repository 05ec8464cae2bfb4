/* layer/run/bind_internal.h: what the launch runners share to bind a layer's weights (ffn_bind.c,
 * k1_bind.c): every tensor's dtype and shape checked by name, then one upload through staging. */
#ifndef HM_BIND_INTERNAL_H
#define HM_BIND_INTERNAL_H

#include "hm_hsa.h"
#include "hm_weights.h"

/* A tensor a launch reads: its kernel-side name, dtype and shape. */
struct hm_bind_want {
  const char *name;
  hm_dtype dt;
  uint32_t ndim;
  uint64_t shape[3];
};

/* Checks the n tensors of want[] in w, built for `arch` (the other architecture's copies are
 * refused naming both), a missing or mismatched one fails naming it and both shapes, as
 * "<who>: ...", and copies each to a new coarse allocation of a, in out[0..n) (which the caller
 * zeroed). On any failure nothing is left allocated and out[] is zero again. */
hm_status hm_bind_tensors(hm_agent *a, const hm_layer_weights *w, hm_arch arch, const char *who,
                          const struct hm_bind_want *want, unsigned n, void **out);

/* The agent rules of a launch: §5.1.2 (a gfx950 agent, or a gfx942 one when gfx942_why is NULL;
 * otherwise gfx942_why says why a gfx942 cannot run it) and §5.1.6 (at least min_cus CUs, 0: 256).
 * A refusal names the rule, as "<who>: ...". */
hm_status hm_bind_check_agent(hm_agent *a, uint32_t min_cus, const char *who, const char *gfx942_why);

/* The architecture of the agent's kernels (its name: gfx942 or gfx950). */
hm_arch hm_bind_arch(hm_agent *a);

#endif /* HM_BIND_INTERNAL_H */
