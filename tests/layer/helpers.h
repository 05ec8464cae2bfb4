/* tests/layer/helpers.h: what the layer tests share: weights for a whole TP group from the generator,
 * generated step inputs, error measures, the software agent, device copies, replays' input sets. */
#ifndef TL_HELPERS_H
#define TL_HELPERS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_ffn_group.h"
#include "hm_hsa.h"
#include "hm_timeline.h"
#include "hm_ref.h"
#include "hm_weights.h"

/* layer `layer` of `model`, experts/topk overridden when nonzero */
hm_layer_config tl_config(const char *model, int32_t layer, uint32_t experts, uint32_t topk);
/* every rank of tp from one seeded generator (parts: HM_WPART_*) */
/* RoPE rows every test build carries: the generator's long contexts (HM_GEN_LONG at ratio 2)
 * reach positions past 1200. A test that builds another way must use the same count. */
#define TL_ROPE_POSITIONS 2048

void tl_build_group(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts, hm_layer_weights *w);
/* the same in the layouts of `arch` (gfx942: tp 4) */
void tl_build_group_arch(const hm_layer_config *cfg, uint32_t tp, uint64_t seed, uint32_t parts, hm_arch arch,
                         hm_layer_weights *w);
void tl_free_group(hm_layer_weights *w, uint32_t tp);
/* The seeded generator's tensors of cfg (all but Engram's table) as a checkpoint of `shards` files in
 * dir (model-0000k-of-0000n.safetensors, tensor i in shard i % shards), as a released one is laid out. */
void tl_write_ckpt(const hm_layer_config *cfg, uint64_t seed, const char *dir, uint32_t shards);
/* Overwrites the first `from` in a safetensors file's header with `to` (the same length). */
void tl_patch_header(const char *path, const char *from, const char *to);

/* FFN-launch inputs: the attention output a [S,D] (bf16) split into tp parts that reduce to it
 * exactly (part 0 = a, the rest zero), res [S,4,D] (bf16, rms ~ `res_rms`), and seam mixes
 * made by the gate from random mixes (so post in (0,2), comb doubly stochastic). */
typedef struct tl_ffn_inputs {
  uint32_t S, D, tp;
  float *a, *parts[HM_LAYER_MAX_TP], *res, *post, *comb, *pre;
} tl_ffn_inputs;
void tl_ffn_inputs_make(const hm_layer_config *cfg, uint32_t S, uint32_t tp, uint64_t seed, tl_ffn_inputs *in);
void tl_ffn_inputs_free(tl_ffn_inputs *in);
/* The FFN launch's outputs of S rows for tp ranks (o[0..tp), zeroed), and their free. */
void tl_ffn_outputs_alloc(hm_ffn_outputs *o, uint32_t tp, uint32_t S, uint32_t D);
void tl_ffn_outputs_free(hm_ffn_outputs *o, uint32_t tp);

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

/* ---------------------------------------------------------------- replays with changing inputs */

/* Device memory of agent a for a test's own recorded steps: n bytes (COARSE, 256-aligned), zeroed. */
void *tl_dev_alloc(hm_agent *a, size_t n);
/* Host-visible memory of agent a (metadata the runners read from the host side), zeroed. */
void *tl_host_alloc(hm_agent *a, size_t n);

/* A host-visible staging buffer of agent a: copies between host arrays and a's device memory as a
 * GPU needs them (fails the test on error). bf16 tensors go as their bit patterns; the host arrays
 * are f32 holding bf16 values, as the reference takes them. */
typedef struct tl_stage {
  hm_runtime *rt;
  void *buf;
  size_t bytes;
} tl_stage;
void tl_stage_init(tl_stage *s, hm_runtime *rt, hm_agent *a, size_t bytes);
void tl_stage_free(tl_stage *s);
void tl_put(const tl_stage *s, void *dev, const void *src, size_t n);
void tl_get(const tl_stage *s, void *dst, const void *dev, size_t n);
void tl_put_bf16(const tl_stage *s, void *dev, const float *src, uint64_t n);
void tl_get_bf16(const tl_stage *s, float *dst, const void *dev, uint64_t n);
/* a u32 of device memory (a tag, an epoch word) */
uint32_t tl_get_u32(const tl_stage *s, const void *dev);

/* The order of n replays over `sets` input sets (sets >= 2): pseudo-random from seed, never the
 * same set twice in a row, and the first not `last` (the set the device ran just before), so a
 * launch that hands on the previous step's values never finds them equal to its own. */
void tl_replay_order(uint32_t sets, uint32_t last, uint64_t seed, uint32_t n, uint32_t *order);

/* Another seam state for a generated step: x (bf16, rms 1), res (bf16, rms 4) and gate-made
 * mixes from `seed`, written over s's (its metadata and caches unchanged), so several input sets
 * share one recorded step's addresses and caches. */
void tl_step_new_seam(hm_gen_step *s, const hm_layer_config *cfg, uint64_t seed);

/* The generator's hard cases (HM_GEN_*) a step holds, judged from its arrays alone: a padding row
 * (slot -1); on ratio 2 a request whose first live row is at an odd position (a group begun
 * before the step); live first rows at positions 0 and 1; a live row with more than 512
 * compressed entries. (dead-chunk is judged on a key table: tl_dead_chunk.) */
uint32_t tl_cases_seen(const hm_gen_step *g, const hm_layer_config *cfg);
/* The assertion that every case in `want` is in g's step (tl_cases_seen), naming a missing one. */
void tl_expect_cases(const hm_gen_step *g, const hm_layer_config *cfg, uint32_t want);
/* true if a row of the key table kt [S][640] (kv_len in klen[t]) has a whole aligned chunk of ck
 * keys, inside its kv_len, all -1 */
bool tl_dead_chunk(const int32_t *kt, const int32_t *klen, uint32_t S, uint32_t ck);

/* A Check suite of one test case a test, named as the test, so CK_RUN_CASE picks one (the
 * mutation harness and the README run single cases so); each case may take `timeout_s`. */
typedef struct tl_case {
  const char *name;
  const TTest *t;
} tl_case;
Suite *tl_suite(const char *name, const tl_case *cases, unsigned n, double timeout_s);
#define TL_SUITE(name, cases, timeout_s) tl_suite(name, cases, sizeof cases / sizeof *cases, timeout_s)

/* A refusal: status `want` and a one-line message containing `words` (hm_errmsg). */
void tl_expect_status(hm_status st, hm_status want, const char *words);

/* The FFN launch's gate/up halves (device/ffn/routed.h ffn_ug_task) in a rank's fetched scratch
 * `scr` (layout L) after a step of S rows on `grid` CTAs, against the reference trace's "rank<r>.routed
 * .mid" of that rank: whether the grid split the step's units (slot tiles of the scratch's picks x
 * groups) in halves, and if it did, every pick's even-half activations in UGV with the step's tag,
 * exactly the reference's; if not, no UGV pair with that tag. Returns whether it split. */
struct hm_ffn_scratch_layout;
bool tl_expect_ug_halves(const uint8_t *scr, const struct hm_ffn_scratch_layout *L, const hm_tensor_set *ref,
                         uint32_t rank, const hm_layer_config *cfg, uint32_t tp, uint32_t S, uint32_t grid);

/* The slot tiles of the picks in a rank's fetched scratch (device/ffn/routed.h ffn_route_table: an
 * expert's picks in tiles of FFN_PICK_TILE). */
uint32_t tl_slot_tiles(const uint8_t *scr, const struct hm_ffn_scratch_layout *L, const hm_layer_config *cfg,
                       uint32_t S);

/* Where the FFN launch runs its gate/up and down tasks (device/ffn/routed.h ffn_ug_place), worked out
 * again by handing the tasks out one at a time: round the grid, or the lean placement (the CTAs
 * with a second down task or a shared half-task run a unit fewer) when its rule holds, and then
 * checked to lower the busiest CTA's bytes. Fills ug_ran[grid] and down_ran[grid] with each CTA's
 * tasks; returns whether the lean placement is the launch's. gfx942: the rank's MID columns are
 * its real intermediate, not the padded one. */
bool tl_ffn_placement(const hm_layer_config *cfg, const hm_rank_dims *d, bool gfx942, uint32_t S, uint32_t tiles,
                      uint32_t grid, uint32_t *ug_ran, uint32_t *down_ran);

/* A rank's FFN timeline (gate/up at slot ug_slot, down after it) against tl_ffn_placement: every
 * CTA ran the tasks the placement gives it. Returns whether it was the lean one. */

bool tl_expect_ffn_placement(const hm_timeline *tl, const hm_layer_config *cfg, const hm_rank_dims *d, bool gfx942,
                             uint32_t S, uint32_t tiles, uint32_t ug_slot);

#endif
