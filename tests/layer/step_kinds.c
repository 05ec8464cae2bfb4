/* tests/layer/step_kinds.c: the step entry points' tensor tables (step_kinds.h): each kind's fields,
 * the bytes a step of S rows touches in each, a good io of fresh runtime memory, and its calls. */
#include "step_kinds.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/k1_args.h"

void *sk_mem(hm_agent *a, uint64_t bytes, bool host) {
  void *p;
  hm_status s = hm_mem_alloc(a, host ? HM_POOL_HOST : HM_POOL_COARSE, bytes, 0, &p);
  ck_assert_msg(s == HM_OK, "%llu bytes: %s", (unsigned long long)bytes, hm_errmsg());
  ck_assert_int_eq(hm_mem_fill(hm_agent_runtime(a), p, SK_SENTINEL, bytes / 4), HM_OK);
  return p;
}

void *sk_mem_of(hm_agent *a, const void *src, uint64_t bytes, bool host) {
  void *p = sk_mem(a, bytes, host);
  if (host) {
    memcpy(p, src, bytes);
  } else {
    void *st = sk_mem(a, bytes, true);
    memcpy(st, src, bytes);
    hm_signal none = {0};
    ck_assert_int_eq(hm_mem_copy(hm_agent_runtime(a), p, st, bytes, none), HM_OK);
    hm_mem_free(hm_agent_runtime(a), st);
  }
  return p;
}

const char *const sk_bad_name[SK_BAD_KINDS] = {"NULL",     "4 bytes too small", "misaligned",
                                               "another agent's", "malloc'd", "freed"};

void sk_bad_make(hm_agent *a, hm_agent *other, enum sk_bad b, uint64_t bytes, bool host, sk_bad_ptr *p) {
  *p = (sk_bad_ptr){.mem_bytes = bytes, .on = a};
  switch (b) {
  case SK_BAD_NULL: break;
  case SK_BAD_SHORT: p->use = p->mem = sk_mem(a, p->mem_bytes = bytes - 4, host); break;
  case SK_BAD_MISALIGNED:
    p->mem = sk_mem(a, p->mem_bytes = bytes + 4, host);
    p->use = (char *)p->mem + 2;
    break;
  case SK_BAD_AGENT: p->use = p->mem = sk_mem(p->on = other, bytes, false); break;
  case SK_BAD_MALLOC:
    p->use = p->mem = aligned_alloc(64, (bytes + 63) / 64 * 64), p->plain = true;
    ck_assert_ptr_nonnull(p->mem);
    for (uint64_t i = 0; i < bytes / 4; i++) ((uint32_t *)p->mem)[i] = SK_SENTINEL;
    break;
  default: /* freed: never touched again */
    p->use = sk_mem(a, bytes, host);
    hm_mem_free(hm_agent_runtime(a), p->use);
    break;
  }
}

void sk_bad_free(hm_runtime *rt, sk_bad_ptr *p) {
  if (p->plain) free(p->mem);
  else if (p->mem) hm_mem_free(rt, p->mem);
  p->mem = p->use = NULL;
}

static void add(sk_kind *k, const char *name, size_t off, uint64_t bytes, bool host, bool out) {
  ck_assert_uint_lt(k->n, 24);
  ck_assert_uint_gt(bytes, 4); /* room for a buffer 4 bytes too small */
  k->t[k->n++] = (sk_tensor){name, off, bytes, host, out};
}

/* The good pointers: fresh runtime memory for each tensor (the metadata's contents copied in). */
static void fill_good(const sk_target *W, sk_kind *k, const void *const *src) {
  for (unsigned i = 0; i < k->n; i++)
    *sk_field(k->io, k->t[i].off) = src && src[i] ? sk_mem_of(W->a, src[i], k->t[i].bytes, k->t[i].host)
                                                  : sk_mem(W->a, k->t[i].bytes, k->t[i].host);
}

void sk_kind_free(const sk_target *W, sk_kind *k) {
  for (unsigned i = 0; i < k->n; i++) hm_mem_free(W->rt, *sk_field(k->io, k->t[i].off));
}

/* ---------------------------------------------------------------- the kinds */

static hm_status ffn_accepts(const sk_target *W, const void *io) { return hm_ffn_accepts(W->k2, io); }
static hm_status ffn_step(const sk_target *W, const void *io) { return hm_layer_ffn(W->k2, W->q, io); }
static hm_status ffn_record(const sk_target *W, const void *io) { return hm_ffn_record(W->k2, W->c, io); }
static hm_status k2_accepts(const sk_target *W, const void *io) { return hm_k2_accepts(W->k2, io); }
static hm_status k2_step(const sk_target *W, const void *io) { return hm_k2_step(W->k2, W->q, io); }
static hm_status k2_record(const sk_target *W, const void *io) { return hm_k2_record(W->k2, W->c, io); }
static hm_status k1_accepts(const sk_target *W, const void *io) { return hm_k1_accepts(W->k1, io); }
static hm_status k1_step(const sk_target *W, const void *io) { return hm_k1_step(W->k1, W->q, io); }
static hm_status k1_record(const sk_target *W, const void *io) { return hm_k1_record(W->k1, W->c, io); }
static hm_status layer_accepts(const sk_target *W, const void *io) { return hm_layer_accepts(W->l, io); }
static hm_status layer_step(const sk_target *W, const void *io) { return hm_layer_step(W->l, W->q, io); }
static hm_status layer_record(const sk_target *W, const void *io) { return hm_layer_record(W->l, W->c, io); }

/* The seam's tensors of an io of type T whose fields are named as hm_ffn_io's. */
#define SEAM_IN(k, T, S, D)                                              \
  add(k, "res_in", offsetof(T, res_in), (S) * 4ull * (D) * 2, false, false); \
  add(k, "post_in", offsetof(T, post_in), (S) * 16ull, false, false);        \
  add(k, "comb_in", offsetof(T, comb_in), (S) * 64ull, false, false);        \
  add(k, "pre_in", offsetof(T, pre_in), (S) * 16ull, false, false)
#define SEAM_OUT(k, T, S, D)                                               \
  add(k, "res_out", offsetof(T, res_out), (S) * 4ull * (D) * 2, false, true); \
  add(k, "post_out", offsetof(T, post_out), (S) * 16ull, false, true);        \
  add(k, "comb_out", offsetof(T, comb_out), (S) * 64ull, false, true);        \
  add(k, "pre_out", offsetof(T, pre_out), (S) * 16ull, false, true)

/* metadata of the generated step as hm_k1_meta's fields, their host sources and sizes */
static void meta_fields(const sk_target *W, hm_k1_meta *m) {
  const hm_gen_step *g = W->st;
  m->requests = 1, m->bt_stride = g->in.bt_stride;
  m->comp_block = g->in.comp.block_size, m->comp_blocks = g->in.comp.blocks;
}

static void add_meta(const sk_target *W, sk_kind *k, size_t base, const void **src) {
  const uint64_t S = W->S;
  const hm_gen_step *g = W->st;
  const struct { const char *n; size_t off; uint64_t bytes; const void *src; } m[] = {
      {"positions", offsetof(hm_k1_meta, positions), S * 8, g->in.positions},
      {"slot_mapping", offsetof(hm_k1_meta, slot_mapping), S * 8, g->in.slot_mapping},
      {"swa_indices", offsetof(hm_k1_meta, swa_indices), S * K1_WINDOW * 4, g->in.swa_indices},
      {"swa_lens", offsetof(hm_k1_meta, swa_lens), S * 4, g->in.swa_lens},
      {"token_to_req", offsetof(hm_k1_meta, token_to_req), S * 4, g->in.token_to_req},
      {"topk", offsetof(hm_k1_meta, topk), S * K1_TOPK * 4, g->in.topk},
      {"block_table", offsetof(hm_k1_meta, block_table), (uint64_t)g->in.bt_stride * 4, g->in.block_table},
  };
  for (unsigned i = 0; i < sizeof m / sizeof *m; i++) {
    src[k->n] = m[i].src;
    add(k, m[i].n, base + m[i].off, m[i].bytes, true, false);
  }
}

uint64_t sk_cache_bytes(const hm_kv_cache *c) { return (uint64_t)c->blocks * c->block_stride; }
hm_k1_cache sk_cache_of(const hm_kv_cache *c) {
  return (hm_k1_cache){NULL, c->block_stride, c->block_size, c->blocks};
}

void sk_kind_make(const sk_target *W, const char *name, sk_kind *k) {
  memset(k, 0, sizeof *k);
  k->name = name;
  const uint64_t S = W->S, D = W->D, q = S * W->H * 512 * 2;
  const void *src[24] = {0};
  if (!strcmp(name, "FFN")) {
    memset(&k->store, 0, sizeof k->store);
    hm_ffn_io *io = &k->store.ffn;
    io->rows = W->S;
    k->io = io, k->io_bytes = sizeof *io;
    add(k, "part", offsetof(hm_ffn_io, part), S * D * 2, false, false);
    SEAM_IN(k, hm_ffn_io, S, D);
    add(k, "out", offsetof(hm_ffn_io, out), S * D * 2, false, true);
    SEAM_OUT(k, hm_ffn_io, S, D);
    k->accepts = ffn_accepts, k->step = ffn_step, k->record = ffn_record;
  } else if (!strcmp(name, "K2")) {
    memset(&k->store, 0, sizeof k->store);
    hm_k2_io *io = &k->store.k2;
    io->ffn.rows = W->S;
    io->swa = sk_cache_of(&W->st->in.swa), io->comp = sk_cache_of(&W->st->in.comp);
    k->io = io, k->io_bytes = sizeof *io;
    /* hm_k2_io's seam fields are ffn.*: its names say so */
    add(k, "ffn.res_in", offsetof(hm_k2_io, ffn.res_in), S * 4 * D * 2, false, false);
    add(k, "ffn.post_in", offsetof(hm_k2_io, ffn.post_in), S * 16, false, false);
    add(k, "ffn.comb_in", offsetof(hm_k2_io, ffn.comb_in), S * 64, false, false);
    add(k, "ffn.pre_in", offsetof(hm_k2_io, ffn.pre_in), S * 16, false, false);
    add(k, "ffn.out", offsetof(hm_k2_io, ffn.out), S * D * 2, false, true);
    add(k, "ffn.res_out", offsetof(hm_k2_io, ffn.res_out), S * 4 * D * 2, false, true);
    add(k, "ffn.post_out", offsetof(hm_k2_io, ffn.post_out), S * 16, false, true);
    add(k, "ffn.comb_out", offsetof(hm_k2_io, ffn.comb_out), S * 64, false, true);
    add(k, "ffn.pre_out", offsetof(hm_k2_io, ffn.pre_out), S * 16, false, true);
    add(k, "q", offsetof(hm_k2_io, q), q, false, false);
    add(k, "kt", offsetof(hm_k2_io, kt), S * K1_KEYS * 4, false, false);
    add(k, "klen", offsetof(hm_k2_io, klen), 2 * S * 4, false, false);
    src[k->n] = W->st->in.positions;
    add(k, "positions", offsetof(hm_k2_io, positions), S * 8, true, false);
    add(k, "the SWA cache", offsetof(hm_k2_io, swa.base), sk_cache_bytes(&W->st->in.swa), false, false);
    add(k, "the compressed cache", offsetof(hm_k2_io, comp.base), sk_cache_bytes(&W->st->in.comp), false, false);
    k->accepts = k2_accepts, k->step = k2_step, k->record = k2_record;
  } else if (!strcmp(name, "K1")) {
    memset(&k->store, 0, sizeof k->store);
    hm_k1_io *io = &k->store.k1;
    io->rows = W->S;
    io->swa = sk_cache_of(&W->st->in.swa);
    meta_fields(W, &io->meta);
    k->io = io, k->io_bytes = sizeof *io;
    add(k, "x", offsetof(hm_k1_io, x), S * D * 2, false, false);
    SEAM_IN(k, hm_k1_io, S, D);
    SEAM_OUT(k, hm_k1_io, S, D);
    add(k, "q", offsetof(hm_k1_io, q), q, false, true);
    add(k, "kt", offsetof(hm_k1_io, kt), S * K1_KEYS * 4, false, true);
    add(k, "klen", offsetof(hm_k1_io, klen), 2 * S * 4, false, true);
    add(k, "the SWA cache", offsetof(hm_k1_io, swa.base), sk_cache_bytes(&W->st->in.swa), false, true);
    add_meta(W, k, offsetof(hm_k1_io, meta), src);
    k->accepts = k1_accepts, k->step = k1_step, k->record = k1_record;
  } else {
    memset(&k->store, 0, sizeof k->store);
    hm_layer_io *io = &k->store.layer;
    io->rows = W->S;
    io->swa = sk_cache_of(&W->st->in.swa), io->comp = sk_cache_of(&W->st->in.comp);
    meta_fields(W, &io->meta);
    k->io = io, k->io_bytes = sizeof *io;
    add(k, "x", offsetof(hm_layer_io, x), S * D * 2, false, false);
    add(k, "res", offsetof(hm_layer_io, res), S * 4 * D * 2, false, false);
    add(k, "post", offsetof(hm_layer_io, post), S * 16, false, false);
    add(k, "comb", offsetof(hm_layer_io, comb), S * 64, false, false);
    add(k, "pre", offsetof(hm_layer_io, pre), S * 16, false, false);
    add(k, "x_out", offsetof(hm_layer_io, x_out), S * D * 2, false, true);
    add(k, "res_out", offsetof(hm_layer_io, res_out), S * 4 * D * 2, false, true);
    add(k, "post_out", offsetof(hm_layer_io, post_out), S * 16, false, true);
    add(k, "comb_out", offsetof(hm_layer_io, comb_out), S * 64, false, true);
    add(k, "pre_out", offsetof(hm_layer_io, pre_out), S * 16, false, true);
    add(k, "swa", offsetof(hm_layer_io, swa.base), sk_cache_bytes(&W->st->in.swa), false, true);
    add(k, "comp", offsetof(hm_layer_io, comp.base), sk_cache_bytes(&W->st->in.comp), false, false);
    add_meta(W, k, offsetof(hm_layer_io, meta), src);
    k->accepts = layer_accepts, k->step = layer_step, k->record = layer_record;
  }
  fill_good(W, k, src);
  ck_assert_msg(k->accepts(W, k->io) == HM_OK, "%s: the good step is refused: %s", name, hm_errmsg());
}

