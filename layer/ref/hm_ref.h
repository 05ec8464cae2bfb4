/* layer/ref/hm_ref.h: the fp32 CPU reference of one DeepSeek-V4.1 layer's decode step for a whole TP
 * group, stage by stage, with the rounding points of spec/mono.md §2 (the oracle for every kernel). */
#ifndef HM_REF_H
#define HM_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_status.h"
#include "hm_tensor.h"
#include "hm_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Conventions. Tensors are row-major float arrays; a value at a bf16 rounding point is exactly
 * bf16-representable. Quantised activations are u8 arrays: e4m3 bytes [rows][n] and E8M0 codes
 * [rows][n/32]. S = rows of the step (1..48), D = hidden, E = experts, k = top-k, I = the rank's
 * padded routed intermediate, Sh = the rank's shared intermediate. Streams of the residual are
 * [S][4][D]; mixes are post [S][4], comb [S][4 src][4 dst], pre [S][4].
 *
 * Summation orders follow spec/mono.md where it gives them. A matrix instruction's internal
 * order over one K step is not published (§7.2 q2): the reference sums a step's products in
 * ascending K from the first product, then adds the step to its chain's accumulator. Hardware
 * transcendentals (v_exp_f32, v_rcp_f32, v_rsq_f32, v_log_f32) are modelled by libm exp2f,
 * IEEE 1/x, 1/sqrtf, log2f (§2.0); tests carry tolerances for that.
 *
 * gfx942 mode (§2.6). Weights built with hm_build_opts.arch = HM_ARCH_GFX942 (hm_layer_weights.arch;
 * TP4, the copies of §4.4) make every stage compute as gfx942's kernels do; the entry points and
 * trace names are the same, and all ranks must hold the same arch:
 *  - Quantised activations are FNUZ with max 224 (hm_ref_act_quant): u8 bytes (dtype U8 in the
 *    trace, FNUZ having no safetensors dtype) under codes = the OCP rule's + 1 over the same bytes
 *    (but for subnormal quotients); X8R (moe.x8r) and MID (rank<r>.routed.midq) store each 8-byte
 *    chunk even elements first, then odd, matching the in-kernel FP4 -> FNUZ expansion. Every
 *    stage that takes quantised activations (hm_ref_qkv, _wq_b, _wo_a, _wo_b, _shared_expert,
 *    _routed_experts) takes them in this form.
 *  - Narrow GEMVs (dense MXFP8 and routed FP4) keep gfx950's decomposition: the same 128-wide K
 *    steps on the same chains (waves w, w+8, ...; wo_a's K quarters; the ug slices; down's A/B),
 *    but a step is its 32-wide K blocks in K order, each one unscaled 16x16x32 fp8 MFMA from a zero
 *    accumulator added into the step's chain as acc = fma(block, 2^(ca + cb - 254), acc) (FP4:
 *    bytes e2m1 x 2^-7, factor 2^(cw + 7 + cx - 254)): one rounding a 32-block. The block's own
 *    sum is modelled as a step's is (ascending K from the first product). The kernel must
 *    issue the blocks of a step in this order into that chain. The routed down GEMV runs over the
 *    real Ir columns (576: 4.5 steps, the last two blocks on chain A).
 *  - bf16 16x16x32 MFMAs (the router, attention's QK) are two 16x16x16, each added to the chain.
 *  - Attention chunks are 64 keys at every width (hm_attn_chunk_keys); K1 writes the SWA record as
 *    FNUZ (hm_ref_kv_record_fnuz) and attention reads SWA records as FNUZ, compressed ones as OCP
 *    (the compressor and its cache stay OCP); a caller's SWA cache must hold FNUZ records
 *    (hm_ref_kv_cache_to_fnuz rewrites an OCP one, as hm_gen_step_make makes).
 *  - The down stage's bf16(contrib x w) each pick stores is traced as rank<r>.routed.cw.
 *  - Engram is vLLM's op on either GPU: it reads wkv's gfx942 copy back to the same values and
 *    computes as on gfx950 (ref_linear_fp8). So does the select step (hm_ref_select): the indexer's
 *    wq_b goes through ref_dense, which reads either arch's copy back to the same values. */

#define HM_LOG2E 1.44269502f /* f32(log2 e), bits 0x3fb8aa3b */
#define HM_LN2 0.693147182f  /* f32(ln 2), bits 0x3f317218 */

/* ---------------------------------------------------------------- numerics (§2.0) */

float hm_ref_rcp(float x);     /* v_rcp_f32 modelled as 1.0f / x */
float hm_ref_rsq(float x);     /* v_rsq_f32 modelled as 1.0f / sqrtf(x) */
float hm_ref_sigmoid(float z); /* 1 / (1 + exp2(z * -LOG2E)), IEEE division (§2.1 K1.2) */
float hm_ref_sqrtsoftplus(float x); /* sqrt(x > 20 ? x : log2(1 + exp2(x*LOG2E)) * LN2) (§2.4) */

/* MXFP8 quantisation of rows [rows][n] in groups of g (32; 64 for rule R), rule FMT_RULE_*:
 * bytes [rows][n], codes [rows][n/g]. */
void hm_ref_mx8_quant(const float *x, uint32_t rows, uint32_t n, uint32_t g, int rule, uint8_t *bytes,
                      uint8_t *codes);
/* values back: e4m3 * 2^(code-127) */
void hm_ref_mx8_dequant(const uint8_t *bytes, const uint8_t *codes, uint32_t rows, uint32_t n, uint32_t g,
                        float *out);

/* One dense GEMV row in the §2.0 K order: 128-wide K steps (K padded with zeros to a whole step),
 * wave w takes steps w, w+8, ...; the 8 wave partials added in wave order. */
float hm_ref_dot_waves(const float *w, const float *x, uint32_t K);

/* Activation MXFP8 as `arch`'s kernels store it (§2.6). gfx950: hm_ref_mx8_quant. gfx942: FNUZ
 * with max 224: the rule's quotient against 224 (rule A: times RN(1/224)), ceilexp, the rule's
 * clamp, bytes FNUZ(clamp(x * mul(code), +-224)). Where the quotient is a normal f32 that is the
 * OCP code + 1 over the OCP bytes (OCP -0 as 0x00, FNUZ having no -0); below (rule V, amax under
 * 224 x 2^-126, an all-zero group among them) the code is 1, as against 224 directly. With
 * even_odd (gfx942 only: the routed experts' X8R and MID) each 8-byte chunk holds its even
 * elements first, then its odd. */
void hm_ref_act_quant(hm_arch arch, bool even_odd, const float *x, uint32_t rows, uint32_t n, uint32_t g, int rule,
                      uint8_t *bytes, uint8_t *codes);
/* values back (the same as the OCP bytes' on either arch) */
void hm_ref_act_dequant(hm_arch arch, bool even_odd, const uint8_t *bytes, const uint8_t *codes, uint32_t rows,
                        uint32_t n, uint32_t g, float *out);

/* ---------------------------------------------------------------- seam (§2.1 K1.1-K1.3, §2.3) */

/* K1.1 fold: R_new[t,o,c] = bf16(fma(comb[t,3,o], r[t,3,c], ((post[t,o]*x[t,c] +
 * comb[t,0,o]*r[t,0,c]) + comb[t,1,o]*r[t,1,c]) + comb[t,2,o]*r[t,2,c])). x [S,D], res/res_out
 * [S,4,D]. */
void hm_ref_seam_fold(uint32_t S, uint32_t D, const float *x, const float *res, const float *post,
                      const float *comb, float *res_out);
/* The identity seam of a settled residual (first layer, after Engram): the fold with x = 0,
 * post = 0, comb = I, as gfx942's window seam computes it. */
void hm_ref_seam_settled(uint32_t S, uint32_t D, const float *res, float *res_out);
/* K1.1 collapse: lin[t,c] = bf16((((0 + pre0*R0) + pre1*R1) + pre2*R2) + pre3*R3), no fma. */
void hm_ref_seam_collapse(uint32_t S, uint32_t D, const float *res, const float *pre, float *lin);
/* K1.1 mix partials + K1.2 sums: mix [S,24] = fn_eff . R (fn_eff = bf16(fn) + bf16(fn - bf16(fn))),
 * sq [S] = sum of R^2, both in the slice / wave / butterfly / 8-slice-group orders of §2.1.
 * fn [24, 4D] (column h*D + c). */
hm_status hm_ref_seam_mix(uint32_t S, uint32_t D, const float *res, const float *fn, float *mix, float *sq);
/* K1.2 gate: pre/post/comb from mix and sq (rsq, sigmoid, 20-round Sinkhorn). scale [3], base [24]. */
void hm_ref_seam_gate(const hm_layer_config *cfg, uint32_t S, const float *mix, const float *sq,
                      const float *scale, const float *base, float *pre, float *post, float *comb);
/* K1.2 Sinkhorn on one token's comb logits z [4][4] -> comb [4 src][4 dst]. */
void hm_ref_sinkhorn(const float *z, uint32_t iters, float hc_eps, float *comb);
/* K1.3 RMSNorm in the norm task's order: y = bf16((x * rsq(fma(ss, RN(1/D), eps))) * w). w bf16 bits. */
void hm_ref_seam_norm(uint32_t S, uint32_t D, const float *lin, const uint16_t *w, float eps, float *normed);

/* A whole seam: fold (or the settled identity seam when x is NULL), mixes, gate, collapse with
 * pre_in, norm. Outputs res [S,4,D], post [S,4], comb [S,4,4], pre [S,4], lin [S,D], normed [S,D];
 * mix [S,24] and sq [S] if non-NULL. */
typedef struct hm_ref_seam_out {
  float *res, *post, *comb, *pre, *lin, *normed, *mix, *sq;
} hm_ref_seam_out;
hm_status hm_ref_seam(const hm_layer_config *cfg, uint32_t S, const float *x, const float *res_in,
                      const float *post_in, const float *comb_in, const float *pre_in, const float *fn,
                      const float *scale, const float *base, const uint16_t *norm_w, const hm_ref_seam_out *out);

/* ---------------------------------------------------------------- reductions (§2.4, §3.7) */

/* out[i] = bf16(((p0[i] + p1[i]) + p2[i]) + p3[i]) in f32, ranks in order (tp 1..4). */
void hm_ref_reduce_rank_order(uint32_t tp, const float *const *parts, uint64_t n, float *out);

/* ---------------------------------------------------------------- router (§2.4) */

/* logits [S,E] = gate_w (bf16 [E,D]) . x (bf16 values [S,D]): K quarters, in quarter p wave w
 * takes 32-wide steps w, w+8, ...; wave partials in order; logit = ((p0+p1)+p2)+p3. */
hm_status hm_ref_router_logits(uint32_t S, uint32_t D, uint32_t E, const uint16_t *gate_w, const float *x,
                               float *logits);
/* The same for `arch`: on gfx942 each 32-wide step is two 16x16x16 bf16 MFMAs, two 16-wide
 * steps in K order into the wave's chain (§2.6). */
hm_status hm_ref_router_logits_arch(hm_arch arch, uint32_t S, uint32_t D, uint32_t E, const uint16_t *gate_w,
                                    const float *x, float *logits);
/* route: score = sqrtsoftplus(logit), val = max(score + bias, -inf); top-k by val, ties to the
 * lower lane (expert % 64), then the lower index (the wave network of §2.4); weights = unbiased
 * scores (NaN -> 0) * (route_scale / max(total, 1e-20)), total summed in pick order.
 * ids [S,k] i32 and weights [S,k] in pick order; scores [S,E] if non-NULL. */
hm_status hm_ref_route(uint32_t S, uint32_t E, uint32_t k, float route_scale, const float *logits,
                       const float *bias, int32_t *ids, float *weights, float *scores);

/* ---------------------------------------------------------------- experts (§2.4) */

/* Shared expert of one rank: x8/x8s = rule V of the normed rows. gate/up [S,Sh] (bf16 GEMV
 * outputs), smid [S,Sh], smq/smc (rule V of smid), shared [S,D] (bf16 of sw2 . SMQ); any of
 * gate/up may be NULL. */
hm_status hm_ref_shared_expert(const hm_layer_weights *w, uint32_t S, const uint8_t *x8, const uint8_t *x8s,
                               float *gate, float *up, float *smid, uint8_t *smq, uint8_t *smc, float *shared);
/* Routed experts of one rank: x8r/x8rs = rule A of the normed rows; ids [S,k] from the router.
 * mid [S,k,I] (bf16 epilogue outputs, zero in the padding), midq/midc (rule A of mid),
 * contrib [S,k,D] (f32 down sums A + B). Every pick, in pick order. */
hm_status hm_ref_routed_experts(const hm_layer_weights *w, uint32_t S, const uint8_t *x8r, const uint8_t *x8rs,
                                const int32_t *ids, float *mid, uint8_t *midq, uint8_t *midc, float *contrib);
/* The chain (K slice) that 128-wide step s of `steps` belongs to in the routed gate/up GEMV
 * (§2.4 ug): ug_groups 2 -> 0..1 (40 steps: 0-7,16-23,32-35 | 8-15,24-31,36-39), ug_groups 1 ->
 * 0..3 (steps 8i+2k, 8i+2k+1 to k). The chains are added in order. */
uint32_t hm_ref_ug_slice(uint32_t s, uint32_t steps, uint32_t ug_groups);
/* The down-stage combine: routed = bf16(routed + bf16(contrib_k * w_k)) over picks in order,
 * partial = bf16(routed + shared). routed (may be NULL) and partial [S,D]. */
void hm_ref_moe_combine(uint32_t S, uint32_t D, uint32_t k, const float *contrib, const float *weights,
                        const float *shared, float *routed, float *partial);
/* The routed epilogue on f32 gate/up (§2.4 ug): mid = bf16((gc * rcp(1 + exp2(gc*-LOG2E))) * uc). */
float hm_ref_routed_act(float g, float u, float limit);
/* The shared activation (§2.4): bf16(min(g,L) / (1 + expf(-min(g,L)))) then bf16(act * clamp(u,+-L)). */
float hm_ref_shared_act(float g, float u, float limit);

/* ---------------------------------------------------------------- KV records (§2.1 K1.6, §4.5) */

/* A paged fp8_ds_mla cache: per block of block_size records, block_size data rows of 576 B (448
 * e4m3 nope, 64 bf16 rope little-endian), then block_size scale rows of 8 B (7 UE8M0 codes, a
 * zero pad), then padding up to block_stride. Slot s = block s / block_size, row s % block_size. */
typedef struct hm_kv_cache {
  uint8_t *base;
  uint64_t block_stride; /* bytes, >= block_size * 584 */
  uint32_t block_size;
  uint32_t blocks;
} hm_kv_cache;

/* One 512-dim kv (bf16 values; nope 0..447, roped 448..511) as a record: rule R per 64 nope dims. */
void hm_ref_kv_record(const float *kv, uint8_t data[HM_RECORD_DATA], uint8_t scale[8]);
/* The SWA record gfx942's K1 writes (§2.6): FNUZ, i.e. rule R against 224: hm_ref_kv_record's
 * bytes (OCP -0 as 0x00) under its codes + 1. The compressed cache stays OCP on gfx942. */
void hm_ref_kv_record_fnuz(const float *kv, uint8_t data[HM_RECORD_DATA], uint8_t scale[8]);
/* Rewrites every record of an OCP cache as FNUZ (vLLM's ocp_to_fnuz: bytes as above, the 7
 * codes + 1), e.g. an SWA cache generated for gfx950 (hm_gen_step_make) made a gfx942 one. */
void hm_ref_kv_cache_to_fnuz(const hm_kv_cache *c);
/* hm_ref_kv_read of a FNUZ record: FNUZ e4m3 * 2^(code-127), rope bf16 */
hm_status hm_ref_kv_read_fnuz(const hm_kv_cache *c, int64_t slot, float *out);
/* Byte offsets from c->base of slot's data row and scale row (HM_ERR_INVALID_ARG outside it). */
hm_status hm_ref_kv_offsets(const hm_kv_cache *c, int64_t slot, uint64_t *data, uint64_t *scale);
/* Writes a record at slot (HM_ERR_INVALID_ARG outside the cache). */
hm_status hm_ref_kv_insert(const hm_kv_cache *c, int64_t slot, const uint8_t *data, const uint8_t *scale);
/* A record's 512 values: nope e4m3 * 2^(code-127) (exact in bf16), rope bf16. */
hm_status hm_ref_kv_read(const hm_kv_cache *c, int64_t slot, float *out);

/* ---------------------------------------------------------------- K1 attention front (§2.1) */

/* qkv [S, Q+512] = bf16(half0 + half1): rows of wqkv over each K half in the §2.0 K order. x8/x8s
 * rule V of the seam's normed rows. */
hm_status hm_ref_qkv(const hm_layer_weights *w, uint32_t S, const uint8_t *x8, const uint8_t *x8s, float *qkv);
/* K1.6 q latent: qn [S,Q] = bf16((q * rsq(div_rn(ssq, Q) + eps)) * q_norm), q = qkv[:, :Q]. */
void hm_ref_q_norm(uint32_t S, uint32_t Q, const float *qkv, const uint16_t *q_norm, float eps, float *qn);
/* K1.6 kv: kn [S,512] = bf16((kv * rsq(div_rn(ssk, 512) + eps)) * kv_norm), then RoPE on dims
 * 448..511 at positions[t] (bf16 after each rotated pair; unfused). kv = qkv[:, Q:]. */
void hm_ref_kv_norm_rope(uint32_t S, uint32_t Q, const float *qkv, const uint16_t *kv_norm, float eps,
                         const float *cos_sin, const int64_t *positions, float *kn);
/* K1.7: q [S, Hr, 512] = rope(bf16(wq_b . QX8)) per head on dims >= 448 (f32, unfused, bf16). */
hm_status hm_ref_wq_b(const hm_layer_weights *w, uint32_t S, const uint8_t *qx8, const uint8_t *qx8s,
                      const int64_t *positions, float *q);

/* K1.4 key table: kt [S,640], klen [2S] (kv_len, then ntopk). Compressed keys first (the slot
 * from the block table with bit 31 set; -1 for a -1 top-k entry), then the window's slots,
 * then -1. A dead row (slot -1) has no keys. ratio 0: window only; topk may be NULL then. */
typedef struct hm_key_args {
  uint32_t S, ratio;
  const int64_t *positions, *slot_mapping;
  const int32_t *swa_indices; /* [S,128] */
  const int32_t *swa_lens;    /* [S] */
  const int32_t *token_to_req;
  const int32_t *topk;        /* [S,512] local compressed ids, -1 none */
  const int32_t *block_table; /* [reqs, bt_stride] compressed blocks */
  uint32_t bt_stride, rows_per_block;
} hm_key_args;
hm_status hm_ref_key_table(const hm_key_args *a, int32_t *kt, int32_t *klen);

/* ---------------------------------------------------------------- K2 attention back (§2.2) */

/* Sparse attention with the sink for one rank: chunks of ck keys (64 or 128,
 * hm_attn_chunk_keys), QK over bf16 q and record keys in 32-dim steps, p = exp2(s - m_c), PV
 * with bf16(p), chunk partials bf16, combined with the sink (o bf16), then inverse RoPE (y f32).
 * q [S,Hr,512]; o, y [S,Hr,512]; chunk stats m, l [S, 640/ck, Hr] and partials oc [S, 640/ck,
 * Hr, 512] if non-NULL (dead chunks stay 0). */
typedef struct hm_attn_out {
  float *o, *y, *m, *l, *oc;
} hm_attn_out;
hm_status hm_ref_attention(const hm_layer_weights *w, uint32_t S, const float *q, const int32_t *kt,
                           const int32_t *klen, const hm_kv_cache *swa, const hm_kv_cache *comp,
                           const int64_t *positions, uint32_t ck, const hm_attn_out *out);
/* The combine alone (K2's stage after split, for checking it on a kernel's own chunk partials):
 * m, l [S, 640/ck, Hr], oc [S, 640/ck, Hr, 512] (the live chunks of klen[t], chunks past them
 * unread); o, y [S, Hr, 512] as hm_ref_attention's. */
hm_status hm_ref_attn_combine(const hm_layer_weights *w, uint32_t S, const int32_t *klen, const int64_t *positions,
                              uint32_t ck, const float *m, const float *l, const float *oc, float *o, float *y);
/* wo_a: z [S, o_rows] = bf16 of each group's rows over its 8 heads' XO (4 waves of 8 contiguous
 * steps, added in order); x8b/x8bs = rule V over each 32-row task. */
hm_status hm_ref_wo_a(const hm_layer_weights *w, uint32_t S, const uint8_t *xo, const uint8_t *xos, float *z,
                      uint8_t *x8b, uint8_t *x8bs);
/* wo_b: part [S,D] = bf16 of the §2.0 GEMV over this rank's o_rows. */
hm_status hm_ref_wo_b(const hm_layer_weights *w, uint32_t S, const uint8_t *x8b, const uint8_t *x8bs, float *part);

/* ---------------------------------------------------------------- the whole layer */

/* Arguments of the select step between K1 and K2 on index-source layers (§3.9): K1's index
 * build outputs and the step's metadata. The callback writes topk [S,512] (local compressed
 * ids of the layer's kv source, ascending, -1 padded). */
typedef struct hm_select_args {
  const hm_layer_config *cfg;
  const hm_layer_weights *w; /* rank 0's weights (HM_WPART_SELECT; the indexer is replicated) */
  uint32_t S;
  const float *normed;   /* [S,D] bf16 values: K1's normed input row (x_out) */
  const float *qr;       /* [S,Q] bf16 values: the normed q latent (qr_out) */
  const int64_t *positions, *slot_mapping;
  const int32_t *token_to_req;
  hm_kv_cache comp;      /* the compressed cache the layer attends (written by a kv source) */
  const int32_t *block_table;
  uint32_t bt_stride, rows_per_block;
  /* NULL, or where the reference select puts what it made (hm_ref_select: select.*) */
  hm_tensor_set *trace;
} hm_select_args;
typedef hm_status (*hm_select_fn)(void *ctx, const hm_select_args *a, int32_t *topk);

/* The reference select (§3.9, model.md §7.2): the library's default callback. Its state spans
 * layers and steps: per kv-source layer and request, the compressor's pending first token of a
 * ratio-2 group and the indexer keys of every compressed entry; per step, layer 20's candidate
 * block masks for the later index sources. ctx is an hm_select_state. */
typedef struct hm_select_state hm_select_state;
hm_status hm_select_state_new(hm_select_state **out);
void hm_select_state_free(hm_select_state *s);
/* Seeds request req's indexer keys 0..n-1 of kv source `kv_layer` with generated keys (entries the
 * state did not see being made, as after a prefill elsewhere): QDQ'd MXFP4 normals, replacing
 * any the state holds. */
hm_status hm_select_state_seed(hm_select_state *s, const hm_layer_config *cfg, int32_t kv_layer, int32_t req,
                               uint32_t n, uint64_t seed);
/* Seeds the compressor's pending first token of request req on ratio-2 kv source cfg->layer: the
 * token at (even) position pos whose group the request's next row (pos + 1) ends, as a prefill
 * elsewhere or an earlier step left it: its f32 kv and gate projections kv, gate [512]
 * (fp32(normed row) . cmp_wkv^T and . cmp_wgate^T). Replaces the request's pending token. */
hm_status hm_select_state_pend(hm_select_state *s, const hm_layer_config *cfg, int32_t req, int64_t pos,
                               const float *kv, const float *gate);
/* A call is checked whole before anything is written, so a refused one changes nothing (the
 * state, the cache, topk) and can be repeated once the state is seeded: every live row's indexer
 * keys 0..n-1 held or made by the step (else refused naming the request and key), and every
 * ratio-2 group a live row ends has its first token, from an earlier live row of the step or the
 * state (a step before, or hm_select_state_pend; else refused naming the request and position:
 * the second token alone is no compressed entry). With a->trace, the step's select outputs as select.*: first
 * [S] i32 (the row holding the first token of the group the row ends, -1 the state, -2 none),
 * pending_kv/pending_gate [S,512] (the state's first token a row used), entry [S] i32 (the
 * compressed entry the row wrote, -1 none), records [S,584] u8 (its bytes as inserted), keys
 * [S,H] (its indexer key); index_keys [R,N,H] (the keys the scores read, R requests, N the
 * step's most entries, zeros where unseen), scores [S,N] (-inf past a row's entries and where
 * masked), candidates [S,N] u8 (layer 20: its kept ids; a later index source: the mask it
 * applied). */
hm_status hm_ref_select(void *state, const hm_select_args *a, int32_t *topk);
/* Layer 20's candidate filter (model.md §7.2): block scores = max of I over `block` ids (a
 * partial last block too), the newest id's block forced in, the top `keep` blocks with a finite
 * score kept (ties: the lower block); keep_id [n] = 1 for ids in kept blocks. */
hm_status hm_ref_candidate_blocks(const float *I, uint32_t n, uint32_t block, uint32_t keep, uint8_t *keep_id);
/* The indexer's top-k: the k largest finite scores (ties: the lower id), ascending ids, -1 padded
 * to `width`; returns the count picked. */
uint32_t hm_ref_index_topk(const float *I, uint32_t n, uint32_t k, uint32_t width, int32_t *out);

/* REF's Linear with an FP8 weight (model.md §2): activation quantised per 32 (rule A's
 * multiply-by-RN(1/448) code), per-32-block f32 partials added in K order, bf16 output.
 * x [K] (bf16 values), y [N]. */
hm_status hm_ref_linear_fp8(const uint8_t *w, const uint8_t *ws, uint32_t N, uint32_t K, const float *x, float *y);

/* One decode step's inputs of a layer (spec/mono.md §5.4 forward). The caches are written (the
 * step's records; a kv source's compressed entries through select). */
typedef struct hm_step_inputs {
  uint32_t S;
  const float *x;        /* [S,D] the previous layer's output; the embedding [S,D] on layer 0 */
  const float *res;      /* [S,4,D] residual streams; NULL on layer 0 (the embedding x4) */
  const float *post, *comb, *pre; /* the previous FFN seam's mixes (unused on layer 0) */
  bool settled;          /* the residual arrives settled (after Engram): identity seam, no fold */
  const int64_t *positions, *slot_mapping;
  const int32_t *swa_indices, *swa_lens, *token_to_req;
  hm_kv_cache swa;
  const int32_t *topk;   /* [S,512] for ratio > 0 layers that are not index sources */
  hm_kv_cache comp;
  const int32_t *block_table;
  uint32_t bt_stride;
  const int64_t *engram_hashes; /* [S,24] row ids (Engram layers) */
  const uint8_t *engram_mask;   /* [S] 1 = text token; NULL: all text */
  const hm_source *engram_table; /* the checkpoint's engram.embed.{weight,scale}, read by row */
} hm_step_inputs;

/* vLLM's standalone mHC post (model.md §4 hc_post): X'[k] = bf16(post[k]*x + sum_j comb[j][k]*X[j]),
 * products rounded, sums in j order, no fma (docs/decisions.md "Reference"). */
void hm_ref_mhc_post(uint32_t S, uint32_t D, const float *x, const float *res, const float *post, const float *comb,
                     float *out);
/* The Engram block (model.md §8) on the residual res [S,4,D] (updated in place): rows of the
 * layer's table for hashes [S,24] (fp8 x E8M0 per 32 -> bf16), kv = Linear_fp8(rows, wkv) [5D]
 * (bf16), gate per stream from the normalised key dot, X = bf16(X + gate * val). mask [S]
 * (NULL: all text) zeroes the gate. e [S,24*hd] and gates [S,4] if non-NULL. */
hm_status hm_ref_engram(const hm_layer_weights *w, uint32_t S, const hm_source *table, const int64_t *hashes,
                        const uint8_t *mask, float *res, float *e, float *gates);

/* K1 then (select) then K2 for the TP group: every stage's output in `trace` (k1.*, rank<r>.*,
 * ffn.*, moe.*, router.*, out.*). The first layer folds nothing (pre = e0); an Engram layer
 * applies vLLM's mHC post and the Engram block first and runs a settled seam (§2.7). select may
 * be NULL: the reference compressor + indexer (hm_ref_select) with `select_ctx` an
 * hm_select_state. */
hm_status hm_ref_layer_step(const hm_layer_weights *w, uint32_t tp, const hm_step_inputs *in, hm_select_fn select,
                            void *select_ctx, hm_tensor_set *trace);

/* hm_ref_layer_step with the weights built from src (hm_weights_build of cfg, tp, opts; its parts
 * ignored) a rank at a time, as a machine that holds one rank's experts can afford: every rank's
 * attention weights (tens of MB at V4.1-Flash) are held for the step; each rank's FFN weights
 * (its routed experts: ~2 GB at V4.1-Flash TP4) are built, used and freed before the next rank's.
 * The trace is hm_ref_layer_step's on the same weights, bit for bit. */
hm_status hm_ref_layer_step_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src,
                                   const hm_build_opts *opts, const hm_step_inputs *in, hm_select_fn select,
                                   void *select_ctx, hm_tensor_set *trace);

/* ---------------------------------------------------------------- K1 (§2.1) */

/* K1's inputs: x [S,D] (NULL: a settled residual, the identity seam), res [S,4,D], the previous
 * seam's post/comb/pre; the step's metadata and SWA cache from `meta` (its x/res/mixes unused). */
typedef struct hm_ref_k1_in {
  uint32_t S;
  const float *x, *res, *post, *comb, *pre;
  const struct hm_step_inputs *meta;
} hm_ref_k1_in;
/* K1 for the TP group: the seam (k1.seam.{res,post,comb,pre,lin,mix,sq,normed}), k1.x8/x8_s,
 * k1.qkv, k1.qn, k1.qx8/qx8_s, k1.kv, k1.record [S,584] (inserted into meta->swa at the live
 * slots), the key table k1.kt/k1.klen (not in the index build), and rank<r>.q for every rank. */
hm_status hm_ref_k1(const hm_layer_weights *w, uint32_t tp, const hm_ref_k1_in *in, bool index_build,
                    hm_tensor_set *trace);
/* hm_ref_k1 with each rank's attention weights built from src (hm_weights_build of cfg, tp, opts;
 * its parts HM_WPART_ATTN whatever opts says), rank 0's first, used and freed before the next
 * rank's; the same trace bit for bit. */
hm_status hm_ref_k1_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src, const hm_build_opts *opts,
                           const hm_ref_k1_in *in, bool index_build, hm_tensor_set *trace);

/* ---------------------------------------------------------------- whole launches */

/* Stage outputs go into `trace` under stage names (docs in hm_ref_trace_doc); existing names are
 * an error. A NULL trace entry pointer is never returned: the launch fails instead. */

/* The FFN launch (and K2's FFN half) for the whole TP group (§2.3-2.4, §2.7 steps 7-11):
 * w[tp] the ranks' weights (HM_WPART_FFN), parts[tp] each [S,D] bf16 values of wo_b's
 * unreduced output, res_mid [S,4,D], post_a/comb_a/pre_a the attention seam's mixes.
 * Trace: ffn.x (the reduced attention output), ffn.seam.{res,post,comb,pre,lin,mix,sq,normed},
 * moe.{x8r,x8r_s,x8,x8_s}, router.{logits,scores,ids,weights},
 * rank<r>.shared.{gate,up,smid,smq,smc,out}, rank<r>.routed.{mid,midq,midc,contrib,sum},
 * rank<r>.partial, out.{x,res,post,comb,pre}. */
hm_status hm_ref_ffn_launch(const hm_layer_weights *w, uint32_t tp, uint32_t S, const float *const *parts,
                            const float *res_mid, const float *post_a, const float *comb_a, const float *pre_a,
                            hm_tensor_set *trace);

/* hm_ref_ffn_launch with each rank's FFN weights built from src (hm_weights_build of cfg, tp,
 * opts; its parts ignored), used and freed before the next rank's (hm_ref_layer_step_source). */
hm_status hm_ref_ffn_launch_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src,
                                   const hm_build_opts *opts, uint32_t S, const float *const *parts,
                                   const float *res_mid, const float *post_a, const float *comb_a, const float *pre_a,
                                   hm_tensor_set *trace);

/* The MoE of one step on the FFN seam's normed rows, every rank (§2.4, §2.7 steps 9-11): from
 * `normed` [S,D] to out.x. Trace names as above (without ffn.* and out.res etc.). */
hm_status hm_ref_moe(const hm_layer_weights *w, uint32_t tp, uint32_t S, const float *normed, hm_tensor_set *trace);
/* hm_ref_moe with each rank's FFN weights built from src (hm_weights_build of cfg, tp, opts; its
 * parts ignored), used and freed before the next rank's; the same trace bit for bit. */
hm_status hm_ref_moe_source(const hm_layer_config *cfg, uint32_t tp, const hm_source *src, const hm_build_opts *opts,
                            uint32_t S, const float *normed, hm_tensor_set *trace);

/* ---------------------------------------------------------------- generated step inputs */

/* A whole-layer step's inputs for tests and hsa-mono-check: `reqs` requests of S/reqs
 * consecutive rows each, the first at position ctx + 7*request; a SWA cache (block 64) and a
 * compressed cache (64/ratio rows a block, a block table that reverses each request's blocks)
 * holding random records for the earlier positions (request r's slots r*4096 + position);
 * causal window indices; for ratio > 0 an ascending top-k (two of every three ids, -1 padded);
 * Engram hashes; x (bf16, rms 1), residual (bf16, rms 4) and mixes made by a seam gate from
 * random logits. Every array is owned by the struct. */
typedef struct hm_gen_step {
  hm_step_inputs in;
  float *x, *res, *post, *comb, *pre;
  int64_t *pos, *slot, *hashes;
  int32_t *swa_idx, *swa_len, *t2r, *topk, *bt;
  uint8_t *swa_buf, *comp_buf;
  uint64_t swa_bytes, comp_bytes;
  uint32_t hidden, nhash, reqs;
} hm_gen_step;
hm_status hm_gen_step_make(const hm_layer_config *cfg, uint32_t S, uint32_t reqs, uint32_t ctx, uint64_t seed,
                           hm_gen_step *out);
/* The same with SWA blocks of `block` slots (the compressed cache: block / ratio rows a block). */
hm_status hm_gen_step_make_block(const hm_layer_config *cfg, uint32_t S, uint32_t reqs, uint32_t ctx, uint32_t block,
                                 uint64_t seed, hm_gen_step *out);
/* The hard cases a generated step holds on request (hm_gen_opts.cases; the tools take their names,
 * hm_gen_cases_parse). Positions: a request's first at ctx + 7*request, raised by long, made odd
 * by straddle, and for requests 0 and 1 replaced by start. */
enum {
  HM_GEN_PAD = 1u << 0,        /* "pad": the step's last row is padding (slot -1, position 0, no keys); S >= 2 */
  HM_GEN_DEAD_CHUNK = 1u << 1, /* "dead-chunk": generated top-k lists stop at a multiple of 128 at least
                                * 128 short of min(n, 512), so a whole key chunk is -1 (rows with n >= 128) */
  HM_GEN_STRADDLE = 1u << 2,   /* "straddle": every request's first row at an odd position: on a ratio-2
                                * kv source it ends a group the step before began (its first token
                                * pending in the state hm_gen_step_seed_select seeds) */
  HM_GEN_START = 1u << 3,      /* "start": request 0 at position 0, request 1 at position 1 */
  HM_GEN_LONG = 1u << 4,       /* "long": every request's first position at least HM_GEN_LONG_ENTRIES *
                                * ratio (+7 a request): more than 512 compressed entries, so the
                                * indexer's scores decide the top-k (older entries' keys seeded) */
  HM_GEN_NEG_ZERO = 1u << 5,   /* "neg-zero": the compressed records the step starts with hold -0 in nope
                                * dims 5, 21, 37, ... (OCP byte 0x80, which FNUZ reads as NaN: gfx942's
                                * K2 must read the compressed cache as OCP, spec/mono.md §2.6) */
};
#define HM_GEN_LONG_ENTRIES 600
typedef struct hm_gen_opts {
  uint32_t S, reqs, ctx;
  uint32_t block; /* SWA block size (0: 64) */
  uint64_t seed;
  uint32_t cases; /* HM_GEN_* */
} hm_gen_opts;
hm_status hm_gen_step_make_opts(const hm_layer_config *cfg, const hm_gen_opts *o, hm_gen_step *out);
/* "pad,long,..." into HM_GEN_* bits (HM_ERR_INVALID_ARG naming an unknown one; *cases untouched) */
hm_status hm_gen_cases_parse(const char *list, uint32_t *cases);
/* the name of case i (HM_GEN_* = 1 << i), NULL past the last */
const char *hm_gen_case_name(uint32_t i);
/* Seeds a select state with the indexer keys of the compressed entries made before this step
 * (all of them on a reindex layer; those before each request's first live row on a kv source,
 * whose compressor makes the step's own) and, on a ratio-2 kv source, the pending first token
 * (hm_select_state_pend: generated f32 projections, as a prefill left them) of every request
 * whose first live row is at an odd position. It replaces what the state holds for those
 * entries and tokens: a step that continues the state's own steps needs no seeding of them
 * (hm_select_state_seed the new requests only). No-op on layers without an indexer. */
hm_status hm_gen_step_seed_select(const hm_gen_step *s, const hm_layer_config *cfg, hm_select_state *st, uint64_t seed);
/* a deep copy (each run writes records into the caches) */
hm_status hm_gen_step_copy(const hm_gen_step *from, hm_gen_step *to);
void hm_gen_step_free(hm_gen_step *s);
/* the inputs as tensors named in.* (x, res, post, comb, pre, positions, slot_mapping,
 * swa_indices, swa_lens, token_to_req, topk, block_table, engram_hashes, swa_cache, comp_cache) */
hm_status hm_gen_step_tensors(const hm_gen_step *s, const hm_layer_config *cfg, hm_tensor_set *set);

#ifdef __cplusplus
}
#endif
#endif /* HM_REF_H */
