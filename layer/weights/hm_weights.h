/* layer/weights/hm_weights.h: one layer's weights for one TP rank in the layouts the gfx950 or gfx942
 * kernels read (spec/mono.md §4), built from a checkpoint-format source: a seeded generator or a safetensors file. */
#ifndef HM_WEIGHTS_H
#define HM_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_status.h"
#include "hm_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- checkpoint schema */

/* One tensor of a layer as the DeepSeek-V4.1 checkpoint stores it (spec/model.md §1.3): full
 * name with the layer prefix, stored dtype (packed FP4 is "I8"), [out, in] shape. */
typedef struct hm_ckpt_entry {
  char name[HM_TENSOR_NAME];
  hm_dtype dtype;
  uint32_t ndim;
  uint64_t shape[2];
  uint32_t part;  /* the HM_WPART_* it belongs to */
  bool huge;      /* Engram's embedding table: read by row ids, never whole */
} hm_ckpt_entry;

/* Which groups of tensors a build loads. */
enum {
  HM_WPART_FFN = 1u << 0,    /* hc_ffn_*, ffn_norm, router, routed and shared experts */
  HM_WPART_ATTN = 1u << 1,   /* hc_attn_*, attn_norm, wqkv, norms, wq_b, wo_a, wo_b, sink, RoPE */
  HM_WPART_SELECT = 1u << 2, /* compressor and indexer (index-source layers) */
  HM_WPART_ENGRAM = 1u << 3, /* Engram projections (Engram layers) */
  HM_WPART_ALL = 0xfu
};

/* Every checkpoint tensor of the layer, in a stable order (experts by index, w1 w2 w3). The
 * caller frees *list. */
hm_status hm_ckpt_schema(const hm_layer_config *cfg, hm_ckpt_entry **list, uint32_t *count);

/* ---------------------------------------------------------------- sources */

/* Where checkpoint-format tensors come from. read() returns rows [r0, r0+nr) x columns
 * [c0, c0+nc) of a 1-D or 2-D tensor as stored (a 1-D tensor is one row; columns count stored
 * elements, so bytes for packed FP4), row-major into out. */
typedef struct hm_source {
  void *ctx;
  hm_status (*info)(void *ctx, const char *name, hm_dtype *dt, uint32_t *ndim, uint64_t shape[2]);
  hm_status (*read)(void *ctx, const char *name, uint64_t r0, uint64_t nr, uint64_t c0,
                    uint64_t nc, void *out);
} hm_source;

/* The seeded generator (weights_gen.c). Every element is a function of (seed, tensor name,
 * position in the checkpoint tensor) only, so any slice, any TP split and any read order give
 * the same layer. Statistics (docs/decisions.md "Reference"): normal elements (exact normal
 * quantiles from a 64K table) with per-tensor std 1/sqrt(fan-in); MX tensors as quantised
 * normals under a per-block E8M0 scale that varies by +-1 around the tensor's level; norm weights
 * near 1; mHC fn at 1/sqrt(4D) and a comb base that favours the identity. */
typedef struct hm_gen {
  hm_layer_config cfg;
  uint64_t seed;
  char prefix[32]; /* "layers.L." */
  hm_ckpt_entry *schema;
  uint32_t count;
} hm_gen;
hm_status hm_gen_init(hm_gen *g, const hm_layer_config *cfg, uint64_t seed);
void hm_gen_free(hm_gen *g);
hm_source hm_gen_source(hm_gen *g);

/* n normal samples mean + sigma * z for activations and other step inputs, a function of (seed,
 * stream name, index) like the weights; rounded to bf16 when `bf16`. */
void hm_gen_normal(uint64_t seed, const char *stream, uint64_t n, float mean, float sigma, bool bf16, float *out);

/* ---------------------------------------------------------------- built weights */

/* The GPU whose kernels read the weights: the layouts differ (spec/mono.md §4.4). */
typedef enum hm_arch {
  HM_ARCH_GFX950 = 0, /* MI355X: the layouts of §4.1-§4.3 (the default) */
  HM_ARCH_GFX942 = 1  /* MI300X / MI325X: the gfx942 copies of §4.4, TP4 only */
} hm_arch;

typedef struct hm_build_opts {
  uint32_t parts;          /* HM_WPART_* (0: what the layer has) */
  uint32_t rope_positions; /* rows of cos_sin (0: 4096) */
  /* The routed experts the source holds (0: cfg->experts). More than cfg->experts builds a reduced
   * layer from a full checkpoint: experts 0..E-1 and the first E rows of the gate and its bias
   * (E = cfg->experts); the source's gate must hold exactly this many rows. */
  uint32_t source_experts;
  hm_arch arch;            /* the layouts to build (0: gfx950) */
} hm_build_opts;

typedef struct hm_layer_weights {
  hm_layer_config cfg;
  hm_rank_dims dims;
  hm_arch arch;
  uint32_t rank;
  uint32_t parts;
  uint32_t rope_positions;
  hm_tensor_set set; /* kernel-side names below */
  uint32_t users;    /* layers reading them (their select and Engram callbacks): hm_weights_free refuses while any */
} hm_layer_weights;

/* Builds rank `rank` of tp's weights from src. Kernel-side tensors (D hidden, E experts, I =
 * dims.inter_pad, Sh = dims.shared_inter, Q = q_lora, Hr = dims.heads, Or = dims.o_rows):
 *  FFN:   hc_ffn_fn f32[24,4D], hc_ffn_scale f32[3], hc_ffn_base f32[24], ffn_norm bf16[D],
 *         gate_w bf16[E,D], bias f32[E],
 *         w13 fp4x2[E, 2I, D/2] (gate/up 16-row interleave, aiter (16,16) shuffle, §4.2),
 *         w13_s e8m0[E, 2I*D/32] (shuffle_scale order, cols D/32),
 *         w2 fp4x2[E, D, I/2] (shuffled), w2_s e8m0[E, D*w2_scale_cols] (shuffle_scale order),
 *         sgu e4m3[2Sh, D] (gate rows then up rows) + sgu_s e8m0[2Sh/32, D/32],
 *         sw2 e4m3[D, Sh] + sw2_s e8m0[D/32, Sh/32]                           (§4.1, §4.3)
 *  ATTN:  hc_attn_fn/scale/base, attn_norm bf16[D], wqkv e4m3[Q+512, D] (wq_a rows, then wkv)
 *         + wqkv_s, q_norm bf16[Q], kv_norm bf16[512], wq_b e4m3[Hr*512, Q] + wq_b_s,
 *         wo_a e4m3[Or, 4096] + wo_a_s, wo_b e4m3[D, Or] + wo_b_s, attn_sink f32[Hr],
 *         cos_sin f32[positions, 64] (32 cos | 32 sin; YaRN for ratio > 0, model.md §2)
 *  SELECT (index-source layers): cmp_wkv bf16[512, D], cmp_wgate bf16[512, D] (ratio 2),
 *         cmp_norm bf16[512] (kv sources), idx_wq_b e4m3[32*128, Q] + idx_wq_b_s,
 *         idx_weights_proj bf16[32, D], idx_wk bf16[128, 512] + idx_k_norm bf16[128] (kv sources)
 *  ENGRAM: engram_wkv e4m3[5D, 24*hd] + engram_wkv_s, engram_q bf16[4, D], engram_k bf16[4, D]
 * Replicated tensors are whole on every rank; sharded ones hold this rank's slice, routed
 * intermediates padded with zero bytes (scale code 0) to I. Nothing is left allocated on error.
 *
 * opts->arch HM_ARCH_GFX942 builds the gfx942 copies instead (§4.4; tp must be 4), under the same
 * names; every other tensor is as above. Ir = dims.inter (the real 576 of V4.1, not padded):
 *  every MXFP8 linear above: u8[N, Kp] FNUZ e4m3 bytes, Kp = K padded to x128 with zero bytes,
 *         in tile-major order (hm_dense942_offset), + `_s` e8m0[N/32, Kp/32] FNUZ codes (the OCP
 *         code + 1; padded blocks 128). The source's `.weight` may be F8_E4M3 or BF16 (a checkpoint
 *         dequantised at load: value = e4m3 x 2^(code-127), recovered exactly or refused) and its
 *         `.scale` [N/32, K/32] or repeated over each block's rows [N, K/32] (rows must agree);
 *         codes must be below 250.
 *  w13 fp4x2[E, 2Ir, D/2] (gate row i at 2i, up at 2i+1, hm_w13_942_row; hm_fp4_942_offset order),
 *         w13_s e8m0[E, 2Ir*D/32] (hm_codes942_index order), w2 fp4x2[E, D, Ir/2]
 *         (hm_fp4_942_offset), w2_s e8m0[E, D*Ir/32] row-major; every -0 nibble rewritten to +0. */
hm_status hm_weights_build(const hm_layer_config *cfg, uint32_t tp, uint32_t rank,
                           const hm_source *src, const hm_build_opts *opts, hm_layer_weights *out);
/* HM_ERR_BUSY (nothing freed) while a layer still reads them (hm_layer_destroy first). */
hm_status hm_weights_free(hm_layer_weights *w);
/* Frees the host copies of the tensors a layer's launches copy to its device when it is created and
 * never read again (w13, w2, sgu, sw2, wqkv, wq_b, wo_a, wo_b and their scales, gate_w, hc_attn_fn,
 * hc_ffn_fn: all but ~1 % of a rank's bytes), keeping what a step's host work reads (the select's
 * and Engram's tensors, cos_sin, the norms, sink and bias) and cfg, dims, rank. A layer created on
 * them steps as before; hm_layer_create and the reference refuse them after (the tensors are gone,
 * named). Returns the bytes freed in *freed (may be NULL). */
hm_status hm_weights_drop_uploaded(hm_layer_weights *w, uint64_t *freed);
/* the tensor, or NULL (failure recorded) if absent */
const hm_tensor *hm_weights_get(const hm_layer_weights *w, const char *name);

/* ---------------------------------------------------------------- layouts (spec/mono.md §4.2) */

/* hm_w13_row, hm_fp4_shuffle_offset, hm_scale_shuffle_index live in device/layouts.h, shared
 * with the kernels that read these layouts; it is internal (not installed), so the library's own
 * code that needs them includes it directly. */

/* ---------------------------------------------------------------- decoders for the reference */

/* Value tables: e4m3 byte -> f32, e2m1 nibble -> f32 (built once, thread-safe). */
const float *hm_e4m3_table(void);
const float *hm_e2m1_table(void);

/* Dense MXFP8 [N, K] + [N/32, K/32]: rows r0..r0+nr-1 dequantised into out[nr][K]. */
void hm_mx8_decode_rows(const uint8_t *w, const uint8_t *s, uint32_t K, uint32_t r0, uint32_t nr,
                        float *out);
/* The same for a gfx942 dense copy (u8 FNUZ bytes [N, Kp] tile-major + codes [N/32, Kp/32]) of
 * logical K columns: the same values as the OCP tensor it was made from. */
void hm_mx8_942_decode_rows(const uint8_t *w, const uint8_t *s, uint32_t K, uint32_t r0, uint32_t nr,
                            float *out);
/* Routed expert e of w13: gate (up = false) or up rows i0..i0+n-1 of the padded intermediate,
 * dequantised into out[n][D]. Either arch's layout; gfx942's columns past Ir decode to zero. */
void hm_w13_decode(const hm_layer_weights *w, uint32_t e, bool up, uint32_t i0, uint32_t n, float *out);
/* Routed expert e of w2: hidden rows r0..r0+n-1 over the padded intermediate, into out[n][I]
 * (either arch; gfx942's columns past Ir are zero). */
void hm_w2_decode(const hm_layer_weights *w, uint32_t e, uint32_t r0, uint32_t n, float *out);

/* The RoPE table of a layer (model.md §2 RoPE): theta 10000 for ratio 0, 160000 with YaRN
 * (factor 16, original 65536, beta 32/1, no mscale) for ratio > 0; row p = [cos(p f_i) i<32 |
 * sin(p f_i)], f32, angle = f32(p) * f_i in f32. */
hm_status hm_rope_table(const hm_layer_config *cfg, uint32_t positions, float *out);

#ifdef __cplusplus
}
#endif
#endif /* HM_WEIGHTS_H */
