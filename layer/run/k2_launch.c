/* layer/run/k2_launch.c: K2's entry points on the FFN launch's runner (ffn_launch.c): creation in K2
 * mode, the checks of a step's back, the back's arguments, a step, a recorded step, the numbers. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ffn_internal.h"
#include "hm_k2.h"

/* A cache record: 576 data bytes, then its block's 8-byte scale row (K1's 584-byte record). */
#define K2_RECORD (K2_RECORD_DATA + 8u)

hm_status hm_k2_create(hm_heap *heap, const hm_layer_weights *w, const hm_ffn_config *cfg, hm_k2 **out) {
  return hm_ffn_open(heap, w, cfg, FFN_MODE_K2, out);
}

/* ---------------------------------------------------------------- the checks of a step */

/* The kernel follows every key of the table into the cache (device/attn/k2.h k2_split): the
 * addressing must be K1's, a block holding block_size records and their scale rows. */
static hm_status check_cache(const char *name, const hm_k1_cache *c) {
  if (c->block_size < 1) return hm_fail(HM_ERR_INVALID_ARG, "K2 step: the %s cache's block size is 0", name);
  if (c->block_stride < (uint64_t)c->block_size * K2_RECORD || c->block_stride % 4)
    return hm_fail(HM_ERR_INVALID_ARG,
                   "K2 step: the %s cache's block stride is %" PRIu64 " bytes (at least %u records of %u bytes, a "
                   "multiple of 4)",
                   name, c->block_stride, c->block_size, K2_RECORD);
  return HM_OK;
}

/* The combine's inverse RoPE reads row positions[t] of cos_sin: the one index K2 follows that K1
 * or keylist did not check for it (positions is host-visible, so it is read here). */
static hm_status check_positions(const hm_k2 *k, const int64_t *positions, uint32_t rows, const char *who) {
  for (uint32_t t = 0; t < rows; t++) {
    const int64_t pos = positions[t];
    if (pos < 0 || pos >= (int64_t)k->rope_rows)
      return hm_fail(HM_ERR_INVALID_ARG, "%s: row %u: position %" PRId64 " is outside the RoPE table's %u rows", who, t,
                     pos, k->rope_rows);
  }
  return HM_OK;
}

/* hm_k2_accepts; hold (a record's chain, else NULL): the checked tensors are held by it */
static hm_status k2_accepts(const hm_k2 *k, const hm_k2_io *io, hm_chain *hold) {
  if (!k || !io) return hm_fail(HM_ERR_INVALID_ARG, "K2 step: NULL argument");
  hm_status s;
  if ((s = hm_ffn_check_mode(k, FFN_MODE_K2, "hm_k2_accepts", "hm_ffn_accepts")) ||
      (s = hm_ffn_check_io(k, &io->ffn, FFN_STEP_K2, hold)))
    return s;
  /* the back's tensors, then the caches' whole extent (blocks x stride: K1 checked every key
   * against it); positions is host memory, read below */
  const uint64_t S = io->ffn.rows;
  const bool comp = k->cfg.compress_ratio != 0;
  const hm_mem_need t[] = {
      {"q", io->q, S * k->dims.heads * K2_HEAD * 2, HM_MEM_DEVICE},
      {"kt", io->kt, S * K2_KEYS * 4, HM_MEM_DEVICE},
      {"klen", io->klen, 2 * S * 4, HM_MEM_DEVICE},
      {"positions", io->positions, S * 8, HM_MEM_HOST},
      {"the SWA cache", io->swa.base, (uint64_t)io->swa.blocks * io->swa.block_stride, HM_MEM_DEVICE},
      {"the compressed cache", io->comp.base, (uint64_t)io->comp.blocks * io->comp.block_stride, HM_MEM_DEVICE},
  };
  if ((s = hm_mem_check(k->agent, "K2 step", t, comp ? 6 : 5))) return s;
  if ((s = check_cache("SWA", &io->swa))) return s;
  if (comp && (s = check_cache("compressed", &io->comp))) return s;
  if (hold && (s = hm_chain_hold(hold, t, comp ? 6 : 5))) return s;
  return check_positions(k, io->positions, io->ffn.rows, "K2 step");
}

/* A recorded step's positions checked again before each replay: a replay reads the same host
 * array, which the caller rewrites between replays (the next decode step's positions). */
struct replay_positions {
  const hm_k2 *k;
  const int64_t *positions;
  uint32_t rows;
};
static hm_status replay_positions_check(void *ctx) {
  const struct replay_positions *r = ctx;
  return check_positions(r->k, r->positions, r->rows, "K2 replay");
}
static const hm_chain_hooks replay_positions_hooks = {.replay = replay_positions_check, .release = free};

hm_status hm_k2_accepts(const hm_k2 *k, const hm_k2_io *io) { return k2_accepts(k, io, NULL); }

/* ---------------------------------------------------------------- arguments */

/* f32(512^-0.5 * log2 e) as layer/ref/ref_attn.c computes it: the scores come out in the log2 domain */
static uint32_t qk_scale_bits(void) {
  const float s = (float)(1.0 / sqrt((double)K2_HEAD) * 1.4426950408889634);
  uint32_t u;
  memcpy(&u, &s, sizeof u);
  return u;
}

static void fill_k2(const hm_ffn *f, const void *iov, void *args) {
  const hm_k2_io *io = iov;
  struct k2_args *a = args;
  const struct ffn_width *wd = &f->width[io->ffn.rows];
  /* the FFN half exactly as the FFN launch's, less part (its wo_b pushes instead) */
  hm_ffn_fill_args(f, &io->ffn, &a->ffn);
  a->ffn.part = 0;
  struct k2_back_args *b = &a->back;
  memset(b, 0, sizeof *b);
  b->q = (uintptr_t)io->q, b->kt = (uintptr_t)io->kt, b->klen = (uintptr_t)io->klen;
  b->positions = (uintptr_t)io->positions;
  b->swa = (uintptr_t)io->swa.base, b->swa_stride = io->swa.block_stride, b->swa_block = io->swa.block_size;
  /* a ratio-0 layer's key table has no compressed key: whatever the caller passed is not read */
  if (f->cfg.compress_ratio)
    b->comp = (uintptr_t)io->comp.base, b->comp_stride = io->comp.block_stride, b->comp_block = io->comp.block_size;
  b->sink = (uintptr_t)f->back_w[K2_T_SINK], b->cos_sin = (uintptr_t)f->back_w[K2_T_COS_SIN];
  b->wo_a = (uintptr_t)f->back_w[K2_T_WO_A], b->wo_a_s = (uintptr_t)f->back_w[K2_T_WO_A_S];
  b->wo_b = (uintptr_t)f->back_w[K2_T_WO_B], b->wo_b_s = (uintptr_t)f->back_w[K2_T_WO_B_S];
  b->L = wd->back;
  b->H = f->dims.heads, b->o_lora = f->cfg.o_lora, b->ck = wd->ck;
  b->qk_scale = qk_scale_bits();
}

/* ---------------------------------------------------------------- steps */

hm_status hm_k2_step(hm_k2 *k, hm_queue *q, const hm_k2_io *io) {
  if (!k || !io) return hm_fail(HM_ERR_INVALID_ARG, "K2 step: NULL argument");
  hm_status s;
  if ((s = hm_ffn_check_mode(k, FFN_MODE_K2, "hm_k2_step", "hm_layer_ffn"))) return s;
  /* refused on this rank alone, the peers' launches would wait for it: they learn at once */
  if ((s = hm_k2_accepts(k, io))) return hm_heap_step_refused(k->heap, s);
  return hm_ffn_launch(k, q, FFN_STEP_K2, io->ffn.rows, fill_k2, io);
}

hm_status hm_k2_record(hm_k2 *k, hm_chain *c, const hm_k2_io *io) {
  if (!k || !io) return hm_fail(HM_ERR_INVALID_ARG, "K2 record: NULL argument");
  hm_status s;
  if ((s = hm_ffn_check_mode(k, FFN_MODE_K2, "hm_k2_record", "hm_ffn_record")) || (s = hm_k2_accepts(k, io)) ||
      (s = hm_ffn_append(k, c, FFN_STEP_K2, io->ffn.rows, fill_k2, io)))
    return s;
  /* every replay reads and writes the step's tensors again: the chain holds them, and checks the
   * positions before each replay as a step does */
  if ((s = k2_accepts(k, io, c))) return s;
  struct replay_positions *r = malloc(sizeof *r);
  if (!r) return hm_fail(HM_ERR_NO_MEMORY, "K2 record");
  *r = (struct replay_positions){k, io->positions, io->ffn.rows};
  if ((s = hm_chain_watch(c, &replay_positions_hooks, r, r))) free(r);
  return s;
}

/* ---------------------------------------------------------------- for K1, tools and tests */

void *hm_k2_epoch(hm_k2 *k) { return k && k->mode == FFN_MODE_K2 ? k->epoch : NULL; }
uint64_t hm_k2_arrival_timeout(const hm_k2 *k) { return k ? k->arrival_timeout_ns : 0; }

uint32_t hm_k2_chunk_keys(const hm_k2 *k, uint32_t rows) {
  if (!k || k->mode != FFN_MODE_K2) return 0;
  return hm_attn_chunk_keys(k->tp, rows, k->arch == HM_ARCH_GFX942);
}

uint64_t hm_k2_back_bytes(const hm_k2 *k, uint32_t rows, const int32_t *klen) {
  if (!k || k->mode != FFN_MODE_K2 || rows < 1 || rows > FFN_MAX_ROWS) return 0;
  const uint64_t S = rows, D = k->cfg.hidden, H = k->dims.heads, OR = H / K2_GROUP_HEADS * k->cfg.o_lora;
  uint64_t weights = OR * K2_GROUP_K + OR / 32 * (K2_GROUP_K / 32) /* wo_a */
                     + D * OR + D / 32 * (OR / 32)                  /* wo_b */
                     + H * 4;                                       /* the sink */
  uint64_t rope = S * HM_ROPE_DIM * 4;
  uint64_t in = S * H * K2_HEAD * 2 /* q */ + S * K2_KEYS * 4 + 2 * S * 4 /* the key table */;
  /* a live key's record is read once a token (kv_len, klen[t]; the table holds at most 640) */
  uint64_t keys = 0;
  for (uint32_t t = 0; klen && t < rows; t++)
    keys += klen[t] < 0 ? 0 : klen[t] > (int32_t)K2_KEYS ? K2_KEYS : (uint32_t)klen[t];
  return weights + rope + in + keys * K2_RECORD;
}

const void *hm_k2_scratch(const hm_k2 *k, uint32_t rows, struct hm_k2_scratch_layout *layout) {
  if (!k || k->mode != FFN_MODE_K2 || rows < 1 || rows > FFN_MAX_ROWS || !k->width[rows].scratch) return NULL;
  if (layout) *layout = k->width[rows].back;
  return k->width[rows].scratch;
}
