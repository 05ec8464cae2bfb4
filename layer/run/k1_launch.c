/* layer/run/k1_launch.c: K1's runner: creation (checks, weights, kernels, epoch), the per-width
 * mailboxes, the checks of a step's tensors and metadata, a step, a recorded step, the keylist. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bind_internal.h"
#include "dev_persist.h"
#include "epoch.h"
#include "k1_internal.h"
#include "seam_needs.h"

static hm_status teardown(hm_k1 *k, hm_status s) {
  if (!k) return s;
  for (int i = 0; i < K1_T_COUNT; i++)
    if (k->w[i]) hm_mem_free(k->rt, k->w[i]);
  for (uint32_t r = 0; r <= K1_MAX_ROWS; r++)
    if (k->width[r].scratch) hm_mem_free(k->rt, k->width[r].scratch);
  for (uint32_t i = 0; i < k->nrecorded; i++) hm_mem_free(k->rt, k->recorded[i]);
  free(k->recorded);
  if (k->kernarg) hm_mem_free(k->rt, k->kernarg);
  if (k->kl_kernarg) hm_mem_free(k->rt, k->kl_kernarg);
  if (k->own_epoch) hm_mem_free(k->rt, k->own_epoch);
  if (k->persist) hm_mem_free(k->rt, k->persist);
  hm_tl_free(k->rt, &k->tl);
  if (k->done.handle) hm_signal_destroy(k->rt, k->done);
  if (k->prog) hm_program_unload(k->prog);
  free(k);
  return s;
}

hm_status hm_k1_create(hm_agent *a, const hm_layer_weights *w, const hm_k1_config *cfg, hm_k1 **out) {
  if (!a || !w || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_create: NULL argument");
  *out = NULL;
  hm_status s;
  const hm_arch arch = hm_bind_arch(a);
  if ((s = hm_k1_check_agent(a, cfg)) || (s = hm_k1_check_layer(w, arch))) return s;
  /* the shared epoch buffer: the agent's memory of DEV_EPOCH_BYTES (a K2's, hm_k2_epoch) */
  const hm_mem_need ep = {"the shared epoch buffer", cfg ? cfg->epoch : NULL, DEV_EPOCH_BYTES, HM_MEM_DEVICE};
  if (cfg && cfg->epoch && (s = hm_mem_check(a, "K1", &ep, 1))) return s;
  hm_k1 *k = calloc(1, sizeof *k);
  if (!k) return hm_fail(HM_ERR_NO_MEMORY, "hm_k1_create");
  k->agent = a, k->rt = hm_agent_runtime(a);
  k->cfg = w->cfg, k->dims = w->dims, k->rank = w->rank, k->tp = w->dims.tp;
  /* gfx942: its own weight copies (hm_k1_bind_weights refuses the other arch's); its LDS caps a
   * step at 42 rows (§5.3.1) */
  k->arch = arch;
  k->max_rows = arch == HM_ARCH_GFX942 ? K1_MAX_ROWS_GFX942 : K1_MAX_ROWS;
  k->rope_rows = w->rope_positions;
  k->index_build = hm_config_has(&w->cfg, HM_ROLE_INDEX_SOURCE);
  /* K1 waits on nothing outside its own launch, so the bound is the whole step's: on the
   * software agent a full-size step on loaded CPUs takes minutes, hence 600 s there */
  k->step_timeout_ns = cfg && cfg->step_timeout_ns ? cfg->step_timeout_ns
                       : hm_runtime_is_sim(k->rt)   ? 600000000000ull
                                                    : 10000000000ull;
  k->arrival_timeout_ns = cfg ? cfg->arrival_timeout_ns : 0;
  if ((s = hm_program_load(a, &k->prog)) || (s = hm_kernel_get(k->prog, "k1", &k->kernel)) ||
      (s = hm_kernel_get(k->prog, "keylist", &k->keylist)) ||
      (s = hm_persistent_grid(k->kernel, a, cfg && cfg->ctas ? cfg->ctas : hm_agent_info_of(a)->cus, 0, &k->grid)))
    return teardown(k, hm_fail_prefix(s, "K1"));
  /* every CTA leaves its mark in the epoch buffer, which has room for so many */
  if (k->grid > DEV_EPOCH_MAX_CTAS)
    return teardown(k, hm_fail(HM_ERR_REFUSED, "K1: a grid of %u CTAs (the epoch buffer marks at most %u)", k->grid,
                               DEV_EPOCH_MAX_CTAS));
  if ((s = hm_k1_bind_weights(k, w))) return teardown(k, s);
  if (cfg && cfg->epoch) {
    k->epoch = cfg->epoch;
  } else {
    if ((s = hm_mem_alloc(a, HM_POOL_COARSE, DEV_EPOCH_BYTES, 0, (void **)&k->own_epoch)) ||
        (s = hm_mem_fill(k->rt, k->own_epoch, 0, DEV_EPOCH_WORDS)))
      return teardown(k, hm_fail_prefix(s, "K1: epoch buffer"));
    k->epoch = k->own_epoch;
  }
  struct k1_args zero = {0};
  struct keylist_args kl_zero = {0};
  if ((s = hm_persist_new(a, &k->persist)) || (s = hm_kernarg_new(a, &zero, sizeof zero, &k->kernarg)) ||
      (s = hm_kernarg_new(a, &kl_zero, sizeof kl_zero, &k->kl_kernarg)) || (s = hm_signal_create(k->rt, 0, &k->done)) ||
      (cfg && cfg->timeline && (s = hm_tl_alloc(a, k->grid, "K1", &k->tl))))
    return teardown(k, hm_fail_prefix(s, "K1"));
  /* last, so a failure above undoes nothing: the shared epoch's owner (K2) may not free it while
   * this K1 steps on it, nor may the runtime close under it */
  if (cfg && cfg->epoch && (s = hm_mem_hold(k->rt, cfg->epoch))) return teardown(k, hm_fail_prefix(s, "K1"));
  hm_runtime_retain(k->rt);
  *out = k;
  return HM_OK;
}

unsigned hm_k1_recorded_held(const hm_k1 *k) { return hm_mem_held(k->rt, k->recorded, k->nrecorded); }

hm_status hm_k1_destroy(hm_k1 *k) {
  if (!k) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_destroy: NULL runner");
  unsigned held = hm_k1_recorded_held(k);
  if (k->owners)
    return hm_fail(HM_ERR_BUSY, "hm_k1_destroy: layer %d's K1 belongs to %u layer(s): hm_layer_destroy destroys it",
                   k->cfg.layer, k->owners);
  if (held)
    return hm_fail(HM_ERR_BUSY, "hm_k1_destroy: %u recorded step(s) of layer %d's K1 are still in chains: "
                   "hm_chain_destroy first", held, k->cfg.layer);
  if (!k->own_epoch) hm_mem_unhold(k->rt, k->epoch);
  hm_runtime_release(k->rt);
  return teardown(k, HM_OK);
}

uint32_t hm_k1_grid(const hm_k1 *k) { return k ? k->grid : 0; }
const hm_layer_config *hm_k1_layer(const hm_k1 *k) { return k ? &k->cfg : NULL; }
bool hm_k1_index_build(const hm_k1 *k) { return k && k->index_build; }

/* ---------------------------------------------------------------- the checks of a step */

/* §5.3.1 and §5.3.4: the step's shape, a refusal (the caller falls back), not an error */
static hm_status check_rows(const hm_k1 *k, const char *who, const hm_k1_io *io) {
  if (io->rows < 1 || io->rows > k->max_rows)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.3.1: %u rows (K1 takes 1..%u%s)", who, io->rows, k->max_rows,
                   k->arch == HM_ARCH_GFX942 ? " on gfx942" : "");
  if (io->prefills)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.3.4: %u prefill tokens (K1 is decode-only)", who,
                   io->prefills);
  return HM_OK;
}

/* Every index the launch follows, against the table it indexes, before anything is written: the
 * kernels trust them (device/attn/kt.h), so one bad id would read or write outside a buffer.
 * keys: the key table is built (a step that is not the index build, or the keylist launch).
 * hold (a record's chain, else NULL): the checked arrays are held by it. */
static hm_status check_meta(const hm_k1 *k, const hm_k1_io *io, const char *who, bool keys, hm_chain *hold) {
  const hm_k1_meta *m = &io->meta;
  const hm_k1_cache *c = &io->swa;
  const uint32_t ratio = k->cfg.compress_ratio, S = io->rows;
  /* the arrays the host reads below and the kernel after it, sized for the step, before any is
   * read: a short array would be read past here already */
  const hm_mem_need t[] = {
      {"positions", m->positions, (uint64_t)S * 8, HM_MEM_HOST},
      {"slot_mapping", m->slot_mapping, (uint64_t)S * 8, HM_MEM_HOST},
      {"the SWA cache", c->base, (uint64_t)c->blocks * c->block_stride, HM_MEM_DEVICE},
      {"swa_indices", m->swa_indices, (uint64_t)S * K1_WINDOW * 4, HM_MEM_HOST},
      {"swa_lens", m->swa_lens, (uint64_t)S * 4, HM_MEM_HOST},
      {"token_to_req", m->token_to_req, (uint64_t)S * 4, HM_MEM_HOST},
      {"topk", m->topk, (uint64_t)S * K1_TOPK * 4, HM_MEM_HOST},
      {"block_table", m->block_table, (uint64_t)m->requests * m->bt_stride * 4, HM_MEM_HOST},
  };
  const unsigned n = keys ? (ratio ? 8 : 6) : 3;
  hm_status s = hm_mem_check(k->agent, who, t, n);
  if (s || (hold && (s = hm_chain_hold(hold, t, n)))) return s;
  if (c->block_size < 1) return hm_fail(HM_ERR_INVALID_ARG, "%s: the SWA cache's block size is 0", who);
  if (c->block_stride < (uint64_t)c->block_size * K1_RECORD || c->block_stride % 4)
    return hm_fail(HM_ERR_INVALID_ARG,
                   "%s: the SWA cache's block stride is %" PRIu64 " bytes (at least %u records of %u bytes, a "
                   "multiple of 4)",
                   who, c->block_stride, c->block_size, K1_RECORD);
  if (keys && ratio && (m->comp_block < 1 || m->bt_stride < 1))
    return hm_fail(HM_ERR_INVALID_ARG, "%s: compressed rows a block %u and block-table stride %u (both >= 1)", who,
                   m->comp_block, m->bt_stride);
  const uint64_t slots = (uint64_t)c->blocks * c->block_size;
  for (uint32_t t = 0; t < S; t++) {
    const int64_t pos = m->positions[t], slot = m->slot_mapping[t];
    if (pos < 0 || pos >= (int64_t)k->rope_rows)
      return hm_fail(HM_ERR_INVALID_ARG, "%s: row %u: position %" PRId64 " is outside the RoPE table's %u rows", who,
                     t, pos, k->rope_rows);
    if (slot < -1 || (slot >= 0 && (uint64_t)slot >= slots))
      return hm_fail(HM_ERR_INVALID_ARG,
                     "%s: row %u: slot_mapping %" PRId64 " is outside the SWA cache's %" PRIu64 " slots (-1: padding)",
                     who, t, slot, slots);
    if (!keys) continue;
    const int32_t len = m->swa_lens[t], req = m->token_to_req[t];
    if (len < 0 || len > (int32_t)K1_WINDOW)
      return hm_fail(HM_ERR_INVALID_ARG, "%s: row %u: swa_lens %d (a window holds 0..%u slots)", who, t, len,
                     K1_WINDOW);
    if (req < 0 || (uint32_t)req >= m->requests)
      return hm_fail(HM_ERR_INVALID_ARG, "%s: row %u: token_to_req %d is outside the block table's %u requests", who,
                     t, req, m->requests);
    if (slot < 0) continue; /* a padding row has no keys: the kernel reads nothing more of it */
    const int32_t *win = m->swa_indices + (uint64_t)t * K1_WINDOW;
    for (int32_t i = 0; i < len; i++)
      if (win[i] < 0 || (uint64_t)win[i] >= slots)
        return hm_fail(HM_ERR_INVALID_ARG,
                       "%s: row %u: window index %d (swa_indices[%u][%d]) is outside the SWA cache's %" PRIu64
                       " slots",
                       who, t, win[i], t, i, slots);
    if (!ratio) continue;
    const int64_t nt = (pos + 1) / ratio;
    const uint32_t ntopk = nt < (int64_t)K1_TOPK ? (uint32_t)nt : K1_TOPK;
    const int32_t *tk = m->topk + (uint64_t)t * K1_TOPK;
    const int32_t *bt = m->block_table + (uint64_t)req * m->bt_stride;
    for (uint32_t i = 0; i < ntopk; i++) {
      const int32_t id = tk[i];
      if (id == -1) continue;
      if (id < 0)
        return hm_fail(HM_ERR_INVALID_ARG, "%s: row %u: top-k id %d (topk[%u][%u]; a row id or -1)", who, t, id, t,
                       i);
      const uint32_t col = (uint32_t)id / m->comp_block;
      if (col >= m->bt_stride)
        return hm_fail(HM_ERR_INVALID_ARG,
                       "%s: row %u: top-k id %d (topk[%u][%u]) is in block %u, past the block table's %u columns",
                       who, t, id, t, i, col, m->bt_stride);
      const int32_t blk = bt[col];
      if (blk < 0 || (uint32_t)blk >= m->comp_blocks)
        return hm_fail(HM_ERR_INVALID_ARG,
                       "%s: row %u: top-k id %d (topk[%u][%u]) maps to compressed block %d, outside the cache's %u "
                       "blocks",
                       who, t, id, t, i, blk, m->comp_blocks);
      /* bit 31 of a key-table entry marks the compressed cache, so the slot must stay below it */
      const uint64_t cs = (uint64_t)blk * m->comp_block + (uint32_t)id % m->comp_block;
      if (cs >= (1ull << 31))
        return hm_fail(HM_ERR_INVALID_ARG,
                       "%s: row %u: top-k id %d (topk[%u][%u]) maps to compressed slot %" PRIu64
                       " (the key table holds slots below 2^31)",
                       who, t, id, t, i, cs);
    }
  }
  return HM_OK;
}

/* hm_k1_accepts; hold (a record's chain, else NULL): the checked tensors are held by it */
static hm_status k1_accepts(const hm_k1 *k, const hm_k1_io *io, hm_chain *hold) {
  if (!k || !io) return hm_fail(HM_ERR_INVALID_ARG, "K1 step: NULL argument");
  hm_status s = check_rows(k, "K1 step", io);
  if (s) return s;
  /* every tensor against its allocation, sized for the step's rows; the index build writes
   * x_out and qr_out in place of the key table */
  static const char *const in[4] = {"res_in", "post_in", "comb_in", "pre_in"};
  static const char *const out[4] = {"res_out", "post_out", "comb_out", "pre_out"};
  const uint64_t S = io->rows, row = (uint64_t)k->cfg.hidden * 2;
  hm_mem_need t[12];
  t[0] = (hm_mem_need){"x", io->x, S * row, HM_MEM_DEVICE};
  hm_seam_needs(&t[1], io->rows, k->cfg.hidden, in, io->res_in, io->post_in, io->comb_in, io->pre_in);
  hm_seam_needs(&t[5], io->rows, k->cfg.hidden, out, io->res_out, io->post_out, io->comb_out, io->pre_out);
  t[9] = (hm_mem_need){"q", io->q, S * k->dims.heads * K1_HEAD * 2, HM_MEM_DEVICE};
  if (k->index_build) {
    t[10] = (hm_mem_need){"x_out", io->x_out, S * row, HM_MEM_DEVICE};
    t[11] = (hm_mem_need){"qr_out", io->qr_out, S * k->cfg.q_lora * 2, HM_MEM_DEVICE};
  } else {
    t[10] = (hm_mem_need){"kt", io->kt, S * K1_KEYS * 4, HM_MEM_DEVICE};
    t[11] = (hm_mem_need){"klen", io->klen, 2 * S * 4, HM_MEM_DEVICE};
  }
  if ((s = hm_mem_check(k->agent, "K1 step", t, sizeof t / sizeof t[0])) ||
      (hold && (s = hm_chain_hold(hold, t, sizeof t / sizeof t[0]))))
    return s;
  return check_meta(k, io, "K1 step", !k->index_build, hold);
}

hm_status hm_k1_accepts(const hm_k1 *k, const hm_k1_io *io) { return k1_accepts(k, io, NULL); }

/* ---------------------------------------------------------------- the mailboxes */

hm_status hm_k1_prepare(hm_k1 *k, uint32_t rows) {
  if (!k) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_prepare: NULL launch");
  if (rows < 1 || rows > k->max_rows)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_prepare: rows %u (1..%u)", rows, k->max_rows);
  struct k1_width *w = &k->width[rows];
  if (w->scratch) return HM_OK;
  k1_scratch_layout(rows, k->cfg.hidden, k->cfg.q_lora, &w->layout);
  hm_status s = hm_mem_alloc(k->agent, HM_POOL_COARSE, w->layout.bytes, 0, &w->scratch);
  if (s) return hm_fail_prefix(s, "K1: width %u's mailboxes", rows);
  if ((s = hm_mem_fill(k->rt, w->scratch, 0, w->layout.bytes / 4))) {
    hm_mem_free(k->rt, w->scratch);
    w->scratch = NULL;
  }
  return s;
}

const void *hm_k1_scratch(const hm_k1 *k, uint32_t rows, struct hm_k1_scratch_layout *layout) {
  if (!k || rows < 1 || rows > k->max_rows || !k->width[rows].scratch) return NULL;
  if (layout) *layout = k->width[rows].layout;
  return k->width[rows].scratch;
}

/* ---------------------------------------------------------------- arguments */

static void fill_kt(const hm_k1 *k, const hm_k1_io *io, struct kt_args *a) {
  const hm_k1_meta *m = &io->meta;
  a->positions = (uintptr_t)m->positions, a->slot_mapping = (uintptr_t)m->slot_mapping;
  a->swa_idx = (uintptr_t)m->swa_indices, a->swa_lens = (uintptr_t)m->swa_lens, a->t2r = (uintptr_t)m->token_to_req;
  a->topk = (uintptr_t)m->topk, a->comp_bt = (uintptr_t)m->block_table;
  a->kt = (uintptr_t)io->kt, a->klen = (uintptr_t)io->klen;
  a->S = io->rows, a->ratio = k->cfg.compress_ratio, a->comp_block = m->comp_block, a->bt_stride = m->bt_stride;
}

static void fill_args(const hm_k1 *k, const hm_k1_io *io, struct k1_args *a) {
  const hm_layer_config *c = &k->cfg;
  const struct k1_width *wd = &k->width[io->rows];
  const uint64_t scr = (uintptr_t)wd->scratch;
  memset(a, 0, sizeof *a);
  struct seam_args *sa = &a->seam;
  sa->x = (uintptr_t)io->x, sa->res_in = (uintptr_t)io->res_in, sa->post_in = (uintptr_t)io->post_in;
  sa->comb_in = (uintptr_t)io->comb_in, sa->pre_in = (uintptr_t)io->pre_in;
  sa->hc_fn = (uintptr_t)k->w[K1_T_HC_FN], sa->hc_scale = (uintptr_t)k->w[K1_T_HC_SCALE];
  sa->hc_base = (uintptr_t)k->w[K1_T_HC_BASE], sa->norm_w = (uintptr_t)k->w[K1_T_NORM];
  sa->res_out = (uintptr_t)io->res_out, sa->post_out = (uintptr_t)io->post_out;
  sa->comb_out = (uintptr_t)io->comb_out, sa->pre_out = (uintptr_t)io->pre_out;
  sa->lin = scr + wd->layout.lin, sa->pmix = scr + wd->layout.pmix;
  /* only the index build keeps the bf16 normed row (its indexer reads it); rule A is the FFN's */
  sa->normed = k->index_build ? (uintptr_t)io->x_out : 0;
  sa->x8a = 0, sa->x8as = 0;
  sa->x8 = scr + wd->layout.x8, sa->x8s = scr + wd->layout.x8s, sa->xrdy = scr + wd->layout.xrdy;
  sa->S = io->rows, sa->D = c->hidden, sa->sinkhorn_iters = c->sinkhorn_iters;
  sa->eps = c->eps, sa->hc_eps = c->hc_eps, sa->post_mult = c->post_mult;
  fill_kt(k, io, &a->kt);
  a->wqkv = (uintptr_t)k->w[K1_T_WQKV], a->wqkv_s = (uintptr_t)k->w[K1_T_WQKV_S];
  a->q_norm = (uintptr_t)k->w[K1_T_Q_NORM], a->kv_norm = (uintptr_t)k->w[K1_T_KV_NORM];
  a->wq_b = (uintptr_t)k->w[K1_T_WQ_B], a->wq_b_s = (uintptr_t)k->w[K1_T_WQ_B_S];
  a->cos_sin = (uintptr_t)k->w[K1_T_COS_SIN];
  a->swa = (uintptr_t)io->swa.base, a->swa_stride = io->swa.block_stride;
  a->q = (uintptr_t)io->q;
  a->qr_out = k->index_build ? (uintptr_t)io->qr_out : 0;
  a->scratch = scr;
  a->L = wd->layout;
  a->epoch = (uintptr_t)k->epoch, a->persist = (uintptr_t)k->persist, a->timeline = (uintptr_t)k->tl.stamps;
  a->Q = c->q_lora, a->H = k->dims.heads, a->swa_block = io->swa.block_size;
  a->index_build = k->index_build;
  /* with no K2 after it on this epoch buffer, nobody else would end the step's epoch */
  a->advance = k->own_epoch != NULL;
}

/* ---------------------------------------------------------------- launches */

static hm_status check_queue(const hm_k1 *k, hm_queue *q, const char *who) {
  if (!q) return hm_fail(HM_ERR_INVALID_ARG, "%s: NULL queue", who);
  if (hm_queue_agent(q) != k->agent)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: the queue is agent %u's, K1 is bound to agent %u", who,
                   hm_agent_index(hm_queue_agent(q)), hm_agent_index(k->agent));
  return HM_OK;
}

hm_status hm_k1_step(hm_k1 *k, hm_queue *q, const hm_k1_io *io) {
  hm_status s = hm_k1_accepts(k, io);
  if (s) return s;
  if ((s = check_queue(k, q, "K1 step")) || (s = hm_k1_prepare(k, io->rows))) return s;
  struct k1_args *a = k->kernarg;
  fill_args(k, io, a);
  hm_tl_arm(&k->tl, HM_TL_K1, true);
  hm_signal_store(k->rt, k->done, 1);
  hm_dispatch d = {.kernel = k->kernel, .ctas = k->grid, .kernarg = k->kernarg, .barrier = true, .completion = k->done};
  d.acquire = d.release = HM_FENCE_SYSTEM;
  if ((s = hm_persistent_launch(q, &d, k->persist, k->arrival_timeout_ns))) return s;
  if ((s = hm_signal_wait(k->rt, k->done, HM_WAIT_LT, 1, k->step_timeout_ns, false, NULL)))
    return hm_fail_prefix(s, "K1 step of %u rows", io->rows);
  return hm_queue_status(q);
}

/* A recorded step's metadata checked again before each replay: a replay reads the same host
 * arrays, whose contents the caller rewrites between replays (the next decode step's positions,
 * slots and top-k), and the kernel trusts every index in them. */
struct replay_meta {
  const hm_k1 *k;
  hm_k1_io io;
};
static hm_status replay_meta_check(void *ctx) {
  const struct replay_meta *r = ctx;
  return check_meta(r->k, &r->io, "K1 replay", !r->k->index_build, NULL);
}
static const hm_chain_hooks replay_meta_hooks = {.replay = replay_meta_check, .release = free};

hm_status hm_k1_record(hm_k1 *k, hm_chain *c, const hm_k1_io *io) {
  hm_status s = hm_k1_accepts(k, io);
  if (s) return s;
  if (!c) return hm_fail(HM_ERR_INVALID_ARG, "K1 record: NULL chain");
  /* a replay skips the residency handshake: a step of this width must have checked it */
  if (!k->width[io->rows].scratch)
    return hm_fail(HM_ERR_INVALID_ARG, "K1 record: width %u has not run a step yet (hm_k1_step first)", io->rows);
  if (k->nrecorded == k->caprecorded) {
    uint32_t cap = k->caprecorded ? 2 * k->caprecorded : 4;
    void **n = realloc(k->recorded, cap * sizeof *n);
    if (!n) return hm_fail(HM_ERR_NO_MEMORY, "K1 record");
    k->recorded = n, k->caprecorded = cap;
  }
  struct k1_args a;
  fill_args(k, io, &a);
  void *ka;
  if ((s = hm_kernarg_new(k->agent, &a, sizeof a, &ka))) return s;
  hm_dispatch d = {.kernel = k->kernel, .ctas = k->grid, .kernarg = ka, .barrier = true};
  d.acquire = d.release = HM_FENCE_SYSTEM;
  if ((s = hm_chain_add_dispatch(c, &d))) {
    hm_mem_free(k->rt, ka);
    return s;
  }
  k->recorded[k->nrecorded++] = ka;
  hm_tl_arm(&k->tl, HM_TL_K1, false); /* its replays stamp */
  /* every replay reads and writes the step's tensors again: the chain holds them, and checks
   * the metadata's indices before each replay as a step does */
  if ((s = k1_accepts(k, io, c))) return s;
  struct replay_meta *r = malloc(sizeof *r);
  if (!r) return hm_fail(HM_ERR_NO_MEMORY, "K1 record");
  *r = (struct replay_meta){k, *io};
  if ((s = hm_chain_watch(c, &replay_meta_hooks, ka, r))) free(r);
  return s;
}

hm_status hm_k1_timeline(hm_k1 *k, hm_timeline *out) {
  if (!k) return hm_fail(HM_ERR_INVALID_ARG, "hm_k1_timeline: NULL runner");
  return hm_tl_view(&k->tl, hm_runtime_is_sim(k->rt), "hm_k1_timeline", out);
}

hm_status hm_k1_keylist(hm_k1 *k, hm_queue *q, const hm_k1_io *io) {
  if (!k || !io) return hm_fail(HM_ERR_INVALID_ARG, "K1 keylist: NULL argument");
  hm_status s = check_rows(k, "K1 keylist", io);
  if (s) return s;
  const hm_mem_need t[] = {{"kt", io->kt, (uint64_t)io->rows * K1_KEYS * 4, HM_MEM_DEVICE},
                           {"klen", io->klen, 2ull * io->rows * 4, HM_MEM_DEVICE}};
  if ((s = hm_mem_check(k->agent, "K1 keylist", t, 2)) || (s = check_meta(k, io, "K1 keylist", true, NULL)) ||
      (s = check_queue(k, q, "K1 keylist")))
    return s;
  struct keylist_args *a = k->kl_kernarg;
  memset(a, 0, sizeof *a);
  fill_kt(k, io, &a->kt);
  /* a plain launch: a CTA a token, so no more CTAs than rows (and no residency to check) */
  hm_signal_store(k->rt, k->done, 1);
  hm_dispatch d = {.kernel = k->keylist,
                   .ctas = io->rows < k->grid ? io->rows : k->grid,
                   .cta_size = K1_CTA,
                   .kernarg = k->kl_kernarg,
                   .barrier = true,
                   .completion = k->done};
  d.acquire = d.release = HM_FENCE_SYSTEM;
  if ((s = hm_queue_dispatch(q, &d, 1))) return s;
  if ((s = hm_signal_wait(k->rt, k->done, HM_WAIT_LT, 1, k->step_timeout_ns, false, NULL)))
    return hm_fail_prefix(s, "K1 keylist of %u rows", io->rows);
  return hm_queue_status(q);
}

/* ---------------------------------------------------------------- the step's memory floor */

uint64_t hm_k1_step_bytes(const hm_k1 *k, uint32_t rows) {
  if (!k || rows < 1 || rows > k->max_rows) return 0;
  const uint64_t S = rows, D = k->cfg.hidden, Q = k->cfg.q_lora, H = k->dims.heads, N = Q + K1_HEAD;
  uint64_t weights = N * D + N / 32 * (D / 32)                              /* wqkv */
                     + H * K1_HEAD * Q + H * K1_HEAD / 32 * (Q / 32)        /* wq_b */
                     + (uint64_t)HM_MIX * HM_HC * D * 4 + 3 * 4 + HM_MIX * 4 /* hc_attn */
                     + D * 2 + Q * 2 + K1_HEAD * 2;                          /* the norms */
  uint64_t rope = S * HM_ROPE_DIM * 4;
  uint64_t in = S * D * 2 + S * HM_HC * D * 2 + S * 24 * 4;
  uint64_t out = S * HM_HC * D * 2 + S * 24 * 4 + S * H * K1_HEAD * 2 + S * K1_RECORD;
  uint64_t meta = 0;
  if (k->index_build) {
    out += S * D * 2 + S * Q * 2;
  } else {
    /* the key table's metadata: the window's slots, and the top-k on a compressed layer */
    out += S * K1_KEYS * 4 + 2 * S * 4;
    meta = S * K1_WINDOW * 4 + (k->cfg.compress_ratio ? S * K1_TOPK * 4 : 0);
  }
  return weights + rope + in + out + meta;
}
