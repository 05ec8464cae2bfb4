/* layer/weights/hm_config.h: one decoder layer's configuration as data: DeepSeek-V4.1-Flash dims and
 * its 43-layer schedule (spec/mono.md §1.2-1.3, spec/model.md §1.1), small test configs, per-rank dims. */
#ifndef HM_CONFIG_H
#define HM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel-structure constants the configs keep (spec/mono.md §1.1). */
#define HM_HC 4               /* hc_mult: residual streams */
#define HM_MIX 24             /* (2 + hc) * hc mix projections */
#define HM_HEAD_DIM 512       /* one KV head: 448 nope + 64 rope */
#define HM_NOPE_DIM 448
#define HM_ROPE_DIM 64
#define HM_HEADS_PER_GROUP 8  /* o_groups: 8 heads a group, wo_a K = 4096 */
#define HM_RECORD 584         /* fp8_ds_mla record: 576 data + 8 scale bytes (§4.5) */
#define HM_RECORD_DATA 576
#define HM_WINDOW 128         /* SWA_WIDTH */
#define HM_TOPK_ATTN 512      /* compressed rows a token at most */
#define HM_KEYS 640           /* key-table row width */
#define HM_MAX_ROWS 48        /* rows a step (gfx950) */
#define HM_MAX_ROWS_GFX942 42
#define HM_LAYER_MAX_TP 4
#define HM_MAX_LAYERS 43      /* 40 backbone + 3 DSpark draft layers */

/* What a layer does beyond the standard whole layer, from the schedule (spec/mono.md §1.3). */
typedef enum hm_layer_role {
  HM_ROLE_FIRST = 1u << 0,      /* layer 0: residual = embedding x4, pre = e0, no fold */
  HM_ROLE_ENGRAM = 1u << 1,     /* Engram block before the mixes (model.md §8) */
  HM_ROLE_KV_SOURCE = 1u << 2,  /* owns a compressor (kv_source_layer_ids) */
  HM_ROLE_INDEX_SOURCE = 1u << 3, /* runs an indexer (index_source_layer_ids) */
  HM_ROLE_CANDIDATE = 1u << 4,  /* candidate_source_layer_id: produces the block mask */
  HM_ROLE_DRAFT = 1u << 5       /* DSpark draft layer (ids >= layers): 128/3 routing */
} hm_layer_role;

typedef struct hm_layer_config {
  const char *model;     /* "v41-flash", "tiny" */
  int32_t layer;         /* layer id, 0 .. n_layers + n_draft - 1 */
  uint32_t n_layers;     /* backbone layers (40) */
  uint32_t n_draft;      /* draft layers after them (3) */
  uint32_t roles;        /* hm_layer_role bits */

  uint32_t hidden;       /* D */
  uint32_t hc;           /* hc_mult = HM_HC */
  uint32_t heads;        /* attention heads (all ranks) */
  uint32_t head_dim, nope_dim, rope_dim;
  uint32_t q_lora;       /* q latent (wq_a rows) */
  uint32_t kv_dim;       /* window kv latent = head_dim */
  uint32_t o_lora;       /* wo_a rows a group */
  uint32_t o_groups;     /* G (all ranks) */

  uint32_t experts;      /* routed experts of this layer (384 target, 128 draft) */
  uint32_t topk;         /* picks (6 target, 3 draft) */
  uint32_t moe_inter;    /* routed intermediate (all ranks) */
  uint32_t shared_inter; /* shared expert intermediate (all ranks) */
  float route_scale;     /* 1.5 */
  float swiglu_limit;    /* 10 */
  float eps;             /* rms_norm_eps 1e-20 */
  float hc_eps;          /* 1e-6 */
  uint32_t sinkhorn_iters; /* 20 */
  float post_mult;       /* 2 */
  uint32_t ug_groups;    /* FP4 groups (32 cols) a routed gate/up task: 2 target, 1 draft */

  uint32_t window;       /* SWA window (128) */
  uint32_t index_topk;   /* 512 */
  uint32_t index_heads, index_head_dim; /* 32, 128 */
  uint32_t compress_ratio; /* 0, 1 or 2 */
  int32_t kv_source;     /* layer whose compressed cache this layer reads (-1: none) */
  int32_t index_source;  /* layer whose top-k this layer reads (-1: none) */
  int32_t candidate_source; /* layer 20 */
  uint32_t candidate_topk_blocks, candidate_block_size; /* 2048, 8 */

  float rope_theta, compress_rope_theta; /* 10000, 160000 */
  float yarn_factor;     /* 16 */
  uint32_t yarn_orig;    /* 65536 */
  float yarn_beta_fast, yarn_beta_slow; /* 32, 1 */

  /* Engram (model.md §8) */
  uint32_t engram_heads, engram_ngram, engram_head_dim; /* 8, 4 (n-grams 2..4: 3), 256 */
  uint32_t engram_index;  /* 0 for layer 1, 1 for layer 14 */
} hm_layer_config;

/* Widths one TP rank sees (spec/mono.md §1.2 "Per-rank widths"). */
typedef struct hm_rank_dims {
  uint32_t tp;
  uint32_t heads;          /* heads / tp */
  uint32_t groups;         /* o_groups / tp */
  uint32_t q_rows;         /* heads * 512 (wq_b rows) */
  uint32_t o_rows;         /* groups * o_lora (wo_a rows; wo_b K) */
  uint32_t inter;          /* routed intermediate, real: moe_inter / tp */
  uint32_t inter_pad;      /* padded to a multiple of 128 (576 -> 640) */
  uint32_t w2_scale_cols;  /* inter_pad / 32 rounded up to a multiple of 8 */
  uint32_t shared_inter;   /* shared_inter / tp */
} hm_rank_dims;

/* Layer L of DeepSeek-V4.1-Flash (0..42; 40..42 are the DSpark draft layers). */
hm_status hm_config_v41_flash(int32_t layer, hm_layer_config *out);

/* The same schedule at test size: hidden 1024, 64 experts top-6 (draft: 32 top-3), routed and
 * shared intermediate 256 (TP4 rank 64 -> padded 128, the 576 -> 640 case in small), q_lora
 * 256, o_lora 256; head dims, 64 heads in 8 groups, window, top-k and key widths as the real
 * model so every tile of the kernels stays whole. */
hm_status hm_config_tiny(int32_t layer, hm_layer_config *out);

/* By model name ("v41-flash", "tiny"). */
hm_status hm_config_by_name(const char *model, int32_t layer, hm_layer_config *out);

/* The layer with another routed expert count (tests and the bench build full-dims layers with
 * fewer experts); topk must stay <= experts. */
hm_status hm_config_set_experts(hm_layer_config *cfg, uint32_t experts, uint32_t topk);

/* Checks the structural properties every kernel relies on (multiples of 128/32/16, head
 * dims, hc = 4, topk <= experts <= 1024 ...). */
hm_status hm_config_check(const hm_layer_config *cfg);

/* Per-rank widths for tp in {1, 2, 4}; HM_ERR_INVALID_ARG if the layer does not split. */
hm_status hm_rank_dims_for(const hm_layer_config *cfg, uint32_t tp, hm_rank_dims *out);

static inline bool hm_config_has(const hm_layer_config *c, hm_layer_role r) {
  return (c->roles & (uint32_t)r) != 0;
}
static inline bool hm_config_is_draft(const hm_layer_config *c) { return hm_config_has(c, HM_ROLE_DRAFT); }

/* Attention chunk keys for S rows at this tp (spec/mono.md §1.2): 64 if tp == 2 and S <= 25,
 * else 128; gfx942 always 64. */
uint32_t hm_attn_chunk_keys(uint32_t tp, uint32_t rows, bool gfx942);

/* How mono runs a layer on one GPU (spec/mono.md §1.3, §5.2). */
typedef enum hm_layer_path {
  HM_PATH_VLLM = 0,    /* vLLM runs the whole layer (gfx950's draft layers) */
  HM_PATH_FFN,         /* vLLM's attention, then the FFN launch (K2's FFN half alone) */
  HM_PATH_WHOLE,       /* K1 then K2: the whole layer */
  HM_PATH_WINDOW_SEAM, /* gfx942's window layers (ratio 0): the whole layer through the window seam
                        * (zero x, zero post, identity comb); on an Engram layer vLLM's mHC post and
                        * Engram first */
  HM_PATH_INDEX        /* gfx942's index layers: K1's index build, vLLM's compressor (a kv source's)
                        * and indexer, keylist, then K2 (an Engram layer: Engram first) */
} hm_layer_path;
/* The path of cfg's layer on gfx950 or gfx942, from its roles as §5.2 decides: gfx950 runs the
 * whole layer where it has no Engram, compressor or indexer and a ratio of 1 or 2, the FFN launch
 * otherwise, and leaves draft layers to vLLM; gfx942 runs draft layers' FFN launch (128/3), index
 * layers by the index path, window layers (ratio 0, no compressor or indexer) through the window
 * seam, and otherwise as gfx950. */
hm_layer_path hm_layer_path_for(const hm_layer_config *cfg, bool gfx942);
/* "vllm", "ffn", "whole", "window seam", "index" */
const char *hm_layer_path_name(hm_layer_path p);

/* The layer's checkpoint tensor prefix: "layers.L." for the backbone, "mtp.(L-40)." for the
 * draft layers, as the released checkpoint stores them (docs/checkpoint.md). */
void hm_config_prefix(const hm_layer_config *cfg, char *buf, uint32_t size);

#ifdef __cplusplus
}
#endif
#endif /* HM_CONFIG_H */
