/* tests/layer/test_misuse.c: the step entry points and destroy calls used as a careless client would
 * (issue 16): bad pointers for every tensor of every step kind, and teardown out of order. */
#include <check.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "hm_collectives.h"
#include "hm_layer.h"
#include "hm_layer_group.h"
#include "kernels/k1_args.h"
#include "group_case.h"
#include "step_kinds.h"

#define SENTINEL SK_SENTINEL
#define PEER_NS 3000000000ull /* a step that is not refused fails within seconds, not minutes */

static const hm_ffn_config run_cfg = {.min_cus = 1, .peer_timeout_ns = PEER_NS, .step_timeout_ns = 2 * PEER_NS};

/* ---------------------------------------------------------------- memory helpers */

/* every word of n bytes at p (runtime memory of a, or plain memory) still SENTINEL */
static bool untouched(hm_runtime *rt, hm_agent *a, const void *p, uint64_t n, bool plain) {
  uint32_t *c = plain ? (uint32_t *)p : tl_fetch(rt, a, p, n);
  bool ok = true;
  for (uint64_t i = 0; i < n / 4; i++) ok &= c[i] == SENTINEL;
  if (!plain) free(c);
  return ok;
}

/* ---------------------------------------------------------------- a world: rank 0's runners */

/* A TP2 group of tiny layer 3 (REUSE, ratio 2: every tensor kind there is), rank 0's layer, its K1
 * and K2, a queue of agent 0, and a generated step's host data. Nothing here ever steps. */
typedef struct world {
  hm_runtime *rt;
  hm_agent *a0, *a1;
  hm_layer_weights w[2];
  hm_layer_group *g;
  hm_layer *l;
  hm_k1 *k1;
  hm_k2 *k2;
  hm_queue *q;
  hm_chain *c;
  hm_gen_step st;
  uint32_t S, D, H, Q;
  sk_target X; /* rank 0's layer, K1, K2, queue and chain, the step: what the kinds step on */
} world;

static void world_open(world *W) {
  memset(W, 0, sizeof *W);
  W->rt = tl_open_sim();
  W->a0 = hm_agent_get(W->rt, 0), W->a1 = hm_agent_get(W->rt, 1);
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  tl_build_group(&cfg, 2, 5, HM_WPART_ATTN | HM_WPART_FFN, W->w);
  ck_assert_msg(hm_layer_group_create(W->rt, W->w, 2, &run_cfg, NULL, &W->g) == HM_OK, "%s", hm_errmsg());
  W->l = hm_layer_group_rank(W->g, 0);
  W->k1 = hm_layer_k1(W->l), W->k2 = hm_layer_k2(W->l);
  W->S = 2, W->D = cfg.hidden, W->H = W->w[0].dims.heads, W->Q = cfg.q_lora;
  ck_assert_int_eq(hm_gen_step_make_block(&cfg, W->S, 1, 100, 64, 5, &W->st), HM_OK);
  ck_assert_int_eq(hm_queue_create(W->a0, 64, &W->q), HM_OK);
  ck_assert_int_eq(hm_chain_create(W->q, &W->c), HM_OK);
  /* recording needs the width's mailboxes (a record is refused before a step of its width) */
  ck_assert_int_eq(hm_ffn_prepare(W->k2, W->S), HM_OK);
  ck_assert_int_eq(hm_k1_prepare(W->k1, W->S), HM_OK);
  W->X = (sk_target){.rt = W->rt, .a = W->a0, .l = W->l, .k1 = W->k1, .k2 = W->k2, .q = W->q, .c = W->c,
                     .st = &W->st, .S = W->S, .D = W->D, .H = W->H};
}

static void world_close(world *W) {
  hm_chain_destroy(W->c);
  ck_assert_int_eq(hm_queue_destroy(W->q), HM_OK);
  hm_layer_group_destroy(W->g);
  hm_gen_step_free(&W->st);
  tl_free_group(W->w, 2);
  ck_assert_int_eq(hm_runtime_close(W->rt), HM_OK);
}

/* ---------------------------------------------------------------- bad pointers */

/* Every tensor of one step kind, each bad in every way, through its step and its record: refused
 * with HM_ERR_INVALID_ARG naming the tensor, nothing written (the bad memory and every output
 * still SENTINEL), nothing recorded. Returns the bad inputs tried. */
static unsigned bad_pointers(const char *which) {
  world W;
  world_open(&W);
  sk_kind k;
  sk_kind_make(&W.X, which, &k);
  unsigned tried = 0;
  void *io = malloc(k.io_bytes);
  ck_assert_ptr_nonnull(io);
  for (unsigned i = 0; i < k.n; i++)
    for (int b = 0; b < SK_BAD_KINDS; b++) {
      const sk_tensor *t = &k.t[i];
      memcpy(io, k.io, k.io_bytes);
      sk_bad_ptr p;
      sk_bad_make(W.a0, W.a1, (enum sk_bad)b, t->bytes, t->host, &p);
      *sk_field(io, t->off) = p.use;
      char want[64];
      snprintf(want, sizeof want, ": %s ", t->name);
      for (int rec = 0; rec < 2; rec++) {
        hm_status s = rec ? k.record(&W.X, io) : k.step(&W.X, io);
        ck_assert_msg(s == HM_ERR_INVALID_ARG && strstr(hm_errmsg(), want) && !strchr(hm_errmsg(), '\n'),
                      "%s %s, %s %s: %s: %s", which, rec ? "record" : "step", sk_bad_name[b], t->name, hm_status_name(s),
                      hm_errmsg());
        tried++;
      }
      if (p.mem)
        ck_assert_msg(untouched(W.rt, p.on, p.mem, p.mem_bytes, p.plain), "%s: %s %s was written", which,
                      sk_bad_name[b], t->name);
      sk_bad_free(W.rt, &p);
    }
  for (unsigned i = 0; i < k.n; i++)
    if (k.t[i].out)
      ck_assert_msg(untouched(W.rt, W.a0, *sk_field(k.io, k.t[i].off), k.t[i].bytes, false), "%s: %s was written", which,
                    k.t[i].name);
  /* nothing went into the chain: a refused record leaves it empty */
  ck_assert_int_eq(hm_chain_replay(W.c), HM_ERR_INVALID_ARG);
  free(io);
  sk_kind_free(&W.X, &k);
  world_close(&W);
  return tried;
}

START_TEST(bad_pointers_ffn) { ck_assert_uint_eq(bad_pointers("FFN"), 10 * SK_BAD_KINDS * 2); }
END_TEST
START_TEST(bad_pointers_k2) { ck_assert_uint_eq(bad_pointers("K2"), 15 * SK_BAD_KINDS * 2); }
END_TEST
START_TEST(bad_pointers_k1) { ck_assert_uint_eq(bad_pointers("K1"), 20 * SK_BAD_KINDS * 2); }
END_TEST
START_TEST(bad_pointers_layer) { ck_assert_uint_eq(bad_pointers("layer"), 19 * SK_BAD_KINDS * 2); }
END_TEST

/* ---------------------------------------------------------------- the findings */

struct rank_step {
  hm_k2 *k2;
  hm_queue *q;
  hm_ffn_io io;
  hm_status st;
  char msg[256];
};

static void *rank_step(void *p) {
  struct rank_step *r = p;
  r->st = hm_layer_ffn(r->k2, r->q, &r->io);
  snprintf(r->msg, sizeof r->msg, "%s", hm_errmsg());
  return NULL;
}

/* Issue 16, finding 1: a 4-row FFN step given a 2 KiB out (8 KiB needed), on every rank at once as
 * a serving stack calls it, overwrote the allocation after it and returned HM_OK; a malloc'd out
 * was taken too. Each must be refused on every rank, naming out, with the neighbour intact. */
static void short_out(bool use_malloc) {
  world W;
  world_open(&W);
  const uint32_t S = 4;
  struct rank_step r[2];
  void *neighbour[2], *bufs[2][10];
  for (uint32_t k = 0; k < 2; k++) {
    hm_agent *a = hm_layer_group_agent(W.g, k);
    memset(&r[k], 0, sizeof r[k]);
    r[k].k2 = hm_layer_k2(hm_layer_group_rank(W.g, k));
    ck_assert_int_eq(hm_queue_create(a, 64, &r[k].q), HM_OK);
    hm_ffn_io *io = &r[k].io;
    io->rows = S;
    /* every tensor S rows, but out (gc_tensors[5]) 2 KiB, or malloc'd */
    for (int i = 0; i < 10; i++) {
      const uint64_t need = S * gc_row_bytes(&gc_tensors[i], W.D);
      if (i != 5) bufs[k][i] = sk_mem(a, need, false);
      else if (use_malloc) bufs[k][i] = aligned_alloc(64, need);
      else bufs[k][i] = sk_mem(a, 2048, false);
      *(void **)((char *)io + gc_tensors[i].off) = bufs[k][i];
    }
    neighbour[k] = sk_mem(a, 8192, false);
  }
  pthread_t th[2];
  for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, rank_step, &r[k]);
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  for (uint32_t k = 0; k < 2; k++) {
    hm_agent *a = hm_layer_group_agent(W.g, k);
    ck_assert_msg(r[k].st == HM_ERR_INVALID_ARG && strstr(r[k].msg, ": out "), "rank %u: %s: %s", k,
                  hm_status_name(r[k].st), r[k].msg);
    ck_assert_msg(untouched(W.rt, a, neighbour[k], 8192, false), "rank %u: the allocation after out was written", k);
    for (int i = 0; i < 10; i++)
      if (i == 5 && use_malloc) free(bufs[k][i]);
      else hm_mem_free(W.rt, bufs[k][i]);
    hm_mem_free(W.rt, neighbour[k]);
    ck_assert_int_eq(hm_queue_destroy(r[k].q), HM_OK);
  }
  world_close(&W);
}

START_TEST(finding_short_out) { short_out(false); }
END_TEST
START_TEST(finding_malloc_out) { short_out(true); }
END_TEST

/* ---------------------------------------------------------------- teardown out of order */

struct heap_arg {
  hm_agent *a;
  hm_boot_group *bg;
  unsigned rank;
  hm_heap *h;
};

static void *make_heap(void *p) {
  struct heap_arg *h = p;
  hm_bootstrap b;
  ck_assert_int_eq(hm_bootstrap_threads(h->bg, &b), HM_OK);
  hm_heap_config hc = {.rank = h->rank, .tp = 2, .half_bytes = 16 * hm_allreduce_region_bytes(2, 48, 1024)};
  hm_status s = hm_heap_create(h->a, &hc, &b, &h->h);
  ck_assert_msg(s == HM_OK, "heap: %s", hm_errmsg());
  hm_bootstrap_release(&b);
  return NULL;
}

/* A fresh runtime, a TP2 heap pair, rank 0's weights (tiny layer 3), a queue: each pair of objects
 * starts from here. */
typedef struct base {
  hm_runtime *rt;
  hm_agent *a;
  hm_heap *h[2];
  hm_layer_weights w[2];
  hm_queue *q;
} base;

static void base_open(base *B) {
  memset(B, 0, sizeof *B);
  B->rt = tl_open_sim();
  B->a = hm_agent_get(B->rt, 0);
  struct heap_arg ha[2];
  hm_boot_group *bg;
  ck_assert_int_eq(hm_boot_group_create(2, &bg), HM_OK);
  pthread_t th[2];
  for (unsigned r = 0; r < 2; r++) {
    ha[r] = (struct heap_arg){hm_agent_get(B->rt, r), bg, r, NULL};
    pthread_create(&th[r], NULL, make_heap, &ha[r]);
  }
  for (unsigned r = 0; r < 2; r++) pthread_join(th[r], NULL), B->h[r] = ha[r].h;
  hm_boot_group_destroy(bg);
  hm_layer_config cfg = tl_config("tiny", 3, 0, 0);
  tl_build_group(&cfg, 2, 5, HM_WPART_ATTN | HM_WPART_FFN, B->w);
  ck_assert_int_eq(hm_queue_create(B->a, 64, &B->q), HM_OK);
}

static void base_close(base *B) {
  ck_assert_int_eq(hm_queue_destroy(B->q), HM_OK);
  for (unsigned r = 0; r < 2; r++) ck_assert_msg(hm_heap_destroy(B->h[r]) == HM_OK, "%s", hm_errmsg());
  tl_free_group(B->w, 2);
  ck_assert_msg(hm_runtime_close(B->rt) == HM_OK, "%s", hm_errmsg());
}

/* The objects of a pair: each made on the base, destroyed by one call, and checked alive. */
enum obj { O_RUNTIME, O_HEAP, O_QUEUE, O_WEIGHTS, O_AR, O_FFN, O_K2, O_K1, O_LAYER, O_CHAIN, O_COUNT };
static const char *const obj_name[] = {"runtime", "heap",  "queue", "weights", "all-reduce",
                                       "FFN runner", "K2 runner", "K1 runner", "layer", "chain"};

typedef struct objs {
  void *p[O_COUNT];
  hm_k1 *layer_k1;        /* a layer's own parts, for the (layer, part) pairs */
  hm_k2 *layer_k2;
  void *buf, *meta;       /* a chain's recorded step's tensors (meta: K1's host metadata) */
} objs;

static const hm_ffn_config small = {.min_cus = 1};

/* `user` made on `used` (made first when it is not one of the base's). */
static void make(base *B, objs *o, enum obj which, enum obj on) {
  hm_status s = HM_OK;
  switch (which) {
  case O_AR: {
    hm_ar_config c = {.width = 1024, .max_rows = 4};
    s = hm_ar_create(B->h[0], &c, (hm_ar **)&o->p[O_AR]);
    break;
  }
  case O_FFN: s = hm_ffn_create(B->h[0], &B->w[0], &small, (hm_ffn **)&o->p[O_FFN]); break;
  case O_K2: s = hm_k2_create(B->h[0], &B->w[0], &small, (hm_k2 **)&o->p[O_K2]); break;
  case O_LAYER: {
    hm_layer_options opt = {.run = small};
    s = hm_layer_create(B->h[0], &B->w[0], &opt, (hm_layer **)&o->p[O_LAYER]);
    break;
  }
  case O_K1: {
    /* on a K2's epoch buffer when its pair is the K2 */
    hm_k1_config c = {.min_cus = 1, .epoch = on == O_K2 ? hm_k2_epoch(o->p[O_K2]) : NULL};
    s = hm_k1_create(B->a, &B->w[0], &c, (hm_k1 **)&o->p[O_K1]);
    break;
  }
  case O_CHAIN: {
    s = hm_chain_create(B->q, (hm_chain **)&o->p[O_CHAIN]);
    if (s) break;
    hm_chain *c = o->p[O_CHAIN];
    /* a recorded launch of the object the chain is paired with */
    if (on == O_AR) {
      void *buf = o->buf = tl_dev_alloc(B->a, 4 * 1024 * 2);
      s = hm_ar_record(o->p[O_AR], c, buf, buf, 4);
    } else if (on == O_FFN || on == O_K2) {
      hm_ffn *f = o->p[on];
      void *buf = o->buf = tl_dev_alloc(B->a, 4 * 4 * 1024 * 2);
      hm_ffn_io io = {.rows = 1, .part = buf, .res_in = buf, .post_in = buf, .comb_in = buf, .pre_in = buf,
                      .out = buf, .res_out = buf, .post_out = buf, .comb_out = buf, .pre_out = buf};
      if (!(s = hm_ffn_prepare(f, 1))) s = hm_ffn_record(f, c, &io);
    } else if (on == O_K1) {
      hm_k1 *k = o->p[O_K1];
      hm_gen_step st;
      ck_assert_int_eq(hm_gen_step_make_block(&B->w[0].cfg, 1, 1, 10, 64, 5, &st), HM_OK);
      void *big = o->buf = tl_dev_alloc(B->a, 1 << 20);
      void *meta = o->meta = tl_host_alloc(B->a, 1 << 16);
      hm_k1_io io = {.rows = 1, .x = big, .res_in = big, .post_in = big, .comb_in = big, .pre_in = big,
                     .res_out = big, .post_out = big, .comb_out = big, .pre_out = big, .q = big, .kt = big,
                     .klen = big, .x_out = big, .qr_out = big};
      void *swa = tl_dev_alloc(B->a, sk_cache_bytes(&st.in.swa));
      io.swa = sk_cache_of(&st.in.swa), io.swa.base = swa;
      char *m = meta;
      memcpy(m, st.in.positions, 8), memcpy(m + 8, st.in.slot_mapping, 8);
      memcpy(m + 16, st.in.swa_indices, K1_WINDOW * 4), memcpy(m + 1024, st.in.swa_lens, 4);
      memcpy(m + 1028, st.in.token_to_req, 4), memcpy(m + 2048, st.in.topk, K1_TOPK * 4);
      memcpy(m + 8192, st.in.block_table, st.in.bt_stride * 4);
      io.meta = (hm_k1_meta){(int64_t *)m, (int64_t *)(m + 8), (int32_t *)(m + 16), (int32_t *)(m + 1024),
                             (int32_t *)(m + 1028), (int32_t *)(m + 2048), (int32_t *)(m + 8192), 1,
                             st.in.bt_stride, st.in.comp.block_size, st.in.comp.blocks};
      if (!(s = hm_k1_prepare(k, 1))) s = hm_k1_record(k, c, &io);
      hm_gen_step_free(&st);
    }
    break;
  }
  default: ck_abort_msg("no maker for %s", obj_name[which]);
  }
  ck_assert_msg(s == HM_OK, "making the %s: %s", obj_name[which], hm_errmsg());
  if (which == O_LAYER) o->layer_k1 = hm_layer_k1(o->p[O_LAYER]), o->layer_k2 = hm_layer_k2(o->p[O_LAYER]);
}

static hm_status destroy(base *B, objs *o, enum obj which) {
  switch (which) {
  case O_RUNTIME: return hm_runtime_close(B->rt);
  case O_HEAP: return hm_heap_destroy(B->h[0]);
  case O_QUEUE: return hm_queue_destroy(B->q);
  case O_WEIGHTS: return hm_weights_free(&B->w[0]);
  case O_AR: return hm_ar_destroy(o->p[O_AR]);
  case O_FFN: return hm_ffn_destroy(o->p[O_FFN]);
  case O_K2: return hm_ffn_destroy(o->p[O_K2]);
  case O_K1: return hm_k1_destroy(o->p[O_K1]);
  case O_LAYER: return hm_layer_destroy(o->p[O_LAYER]);
  case O_CHAIN: hm_chain_destroy(o->p[O_CHAIN]); return HM_OK;
  default: return HM_ERR_INVALID_ARG;
  }
}

/* The used object still works after a refused destroy. */
static void expect_alive(base *B, objs *o, enum obj which) {
  switch (which) {
  case O_RUNTIME: {
    void *p;
    ck_assert_int_eq(hm_mem_alloc(B->a, HM_POOL_HOST, 64, 0, &p), HM_OK);
    ck_assert_int_eq(hm_mem_free(B->rt, p), HM_OK);
    break;
  }
  case O_HEAP: ck_assert_msg(hm_heap_check(B->h[0]) == HM_OK, "%s", hm_errmsg()); break;
  case O_QUEUE: ck_assert_msg(hm_queue_wait_idle(B->q, 10000000000ull) == HM_OK, "%s", hm_errmsg()); break;
  case O_WEIGHTS: ck_assert_ptr_nonnull(hm_weights_get(&B->w[0], "w13")); break;
  case O_AR: ck_assert_int_eq(hm_ar_status(o->p[O_AR]), HM_OK); break;
  case O_FFN: case O_K2: ck_assert_int_eq(hm_ffn_status(o->p[which]), HM_OK); break;
  case O_K1: ck_assert_uint_gt(hm_k1_grid(o->p[O_K1]), 0); break;
  default: break;
  }
}

/* user uses used: destroying used first is HM_ERR_BUSY (naming its users) and leaves it working;
 * destroying user then used is HM_OK. The other order is HM_OK at once. */
typedef struct pair {
  enum obj user, used;
  unsigned users; /* the count the refusal names (the runtime's include the base's two heaps) */
} pair;

static const pair pairs[] = {
    {O_AR, O_HEAP, 1},     {O_FFN, O_HEAP, 1},     {O_K2, O_HEAP, 1},       {O_LAYER, O_HEAP, 1},
    {O_LAYER, O_WEIGHTS, 1}, {O_CHAIN, O_QUEUE, 1},  {O_CHAIN, O_AR, 1},      {O_CHAIN, O_FFN, 1},
    {O_CHAIN, O_K2, 1},    {O_CHAIN, O_K1, 1},     {O_K1, O_K2, 1},         {O_K1, O_RUNTIME, 3},
    {O_CHAIN, O_RUNTIME, 3}, {O_HEAP, O_RUNTIME, 2},
};

static void one_pair(const pair *p, bool used_first) {
  base B;
  base_open(&B);
  objs o = {0};
  if (p->used >= O_AR) make(&B, &o, p->used, p->used);
  /* the heap as a user of the runtime is the base's own (both ranks') */
  if (p->user != O_HEAP) make(&B, &o, p->user, p->used);
  hm_status s;
  if (used_first) {
    s = destroy(&B, &o, p->used);
    ck_assert_msg(s == HM_ERR_BUSY, "destroying the %s while a %s uses it: %s: %s", obj_name[p->used],
                  obj_name[p->user], hm_status_name(s), hm_errmsg());
    char count[16];
    snprintf(count, sizeof count, " %u ", p->users);
    ck_assert_msg(strstr(hm_errmsg(), count), "the refusal does not name its %u user(s): %s", p->users, hm_errmsg());
    expect_alive(&B, &o, p->used);
  }
  if (p->user == O_HEAP) {
    ck_assert_int_eq(hm_queue_destroy(B.q), HM_OK);
    for (unsigned r = 0; r < 2; r++) ck_assert_int_eq(hm_heap_destroy(B.h[r]), HM_OK);
    tl_free_group(B.w, 2);
    ck_assert_msg(hm_runtime_close(B.rt) == HM_OK, "%s", hm_errmsg());
    return;
  }
  ck_assert_msg(destroy(&B, &o, p->user) == HM_OK, "destroying the %s: %s", obj_name[p->user], hm_errmsg());
  if (p->used >= O_AR) ck_assert_msg(destroy(&B, &o, p->used) == HM_OK, "then the %s: %s", obj_name[p->used], hm_errmsg());
  if (p->used == O_RUNTIME) {
    /* closing the runtime was the pair's second destroy: the base goes without it */
    ck_assert_int_eq(hm_queue_destroy(B.q), HM_OK);
    for (unsigned r = 0; r < 2; r++) ck_assert_int_eq(hm_heap_destroy(B.h[r]), HM_OK);
    tl_free_group(B.w, 2);
    ck_assert_msg(hm_runtime_close(B.rt) == HM_OK, "%s", hm_errmsg());
    return;
  }
  base_close(&B);
}

START_TEST(teardown_pairs) {
  for (unsigned i = 0; i < sizeof pairs / sizeof *pairs; i++) {
    one_pair(&pairs[i], true);
    one_pair(&pairs[i], false);
  }
}
END_TEST

/* Issue 16, finding 2: hm_heap_destroy returned HM_OK while an FFN runner used the heap, and the
 * runner's next step read the freed heap. */
START_TEST(finding_heap_destroy_in_use) {
  base B;
  base_open(&B);
  hm_ffn *f;
  ck_assert_msg(hm_ffn_create(B.h[0], &B.w[0], &small, &f) == HM_OK, "%s", hm_errmsg());
  hm_status s = hm_heap_destroy(B.h[0]);
  ck_assert_msg(s == HM_ERR_BUSY && strstr(hm_errmsg(), "1 object"), "%s: %s", hm_status_name(s), hm_errmsg());
  ck_assert_int_eq(hm_heap_check(B.h[0]), HM_OK);
  ck_assert_int_eq(hm_ffn_destroy(f), HM_OK);
  base_close(&B);
}
END_TEST

/* A recorded step's tensors are read and written again by every replay: freeing one while the
 * chain lives is HM_ERR_BUSY (the replay would use freed memory); after hm_chain_destroy it frees. */
START_TEST(recorded_tensors_held) {
  static const enum obj on[] = {O_AR, O_FFN, O_K2, O_K1};
  for (unsigned i = 0; i < sizeof on / sizeof *on; i++) {
    base B;
    base_open(&B);
    objs o = {0};
    make(&B, &o, on[i], on[i]);
    make(&B, &o, O_CHAIN, on[i]);
    void *held[2] = {o.buf, o.meta};
    for (unsigned j = 0; j < 2 && held[j]; j++) {
      hm_status s = hm_mem_free(B.rt, held[j]);
      ck_assert_msg(s == HM_ERR_BUSY, "freeing a tensor of a recorded %s step: %s: %s", obj_name[on[i]],
                    hm_status_name(s), hm_errmsg());
    }
    hm_chain_destroy(o.p[O_CHAIN]);
    for (unsigned j = 0; j < 2 && held[j]; j++)
      ck_assert_msg(hm_mem_free(B.rt, held[j]) == HM_OK, "after the chain (%s): %s", obj_name[on[i]], hm_errmsg());
    ck_assert_msg(destroy(&B, &o, on[i]) == HM_OK, "%s", hm_errmsg());
    base_close(&B);
  }
}
END_TEST

/* A replay reads the recorded step's metadata again, which the caller rewrites between replays:
 * K1's indices are checked before each replay as before each step. A slot past the SWA cache is
 * refused, nothing replayed; the metadata mended, the chain replays. */
START_TEST(replay_rechecks_metadata) {
  base B;
  base_open(&B);
  objs o = {0};
  make(&B, &o, O_K1, O_K1);
  make(&B, &o, O_CHAIN, O_K1);
  int64_t *slot = (int64_t *)((char *)o.meta + 8), keep = *slot;
  *slot = (int64_t)1 << 40;
  hm_status s = hm_chain_replay(o.p[O_CHAIN]);
  ck_assert_msg(s == HM_ERR_INVALID_ARG && strstr(hm_errmsg(), "K1 replay: row 0: slot_mapping"), "%s: %s",
                hm_status_name(s), hm_errmsg());
  ck_assert_int_eq(hm_queue_wait_idle(B.q, 10000000000ull), HM_OK); /* nothing was launched */
  *slot = keep;
  ck_assert_msg(hm_chain_replay(o.p[O_CHAIN]) == HM_OK, "%s", hm_errmsg());
  ck_assert_msg(hm_chain_wait(o.p[O_CHAIN], 60000000000ull) == HM_OK, "%s", hm_errmsg());
  hm_chain_destroy(o.p[O_CHAIN]);
  ck_assert_msg(destroy(&B, &o, O_K1) == HM_OK, "%s", hm_errmsg());
  base_close(&B);
}
END_TEST

/* The same for a recorded K2 step's positions (the combine's RoPE rows): a position past the
 * table is refused before the replay, naming the row, and the group learns why (a K2 replay on
 * one rank would leave its peer waiting for its pushes). */
START_TEST(replay_rechecks_positions_k2) {
  world W;
  world_open(&W);
  sk_kind k;
  sk_kind_make(&W.X, "K2", &k);
  ck_assert_msg(k.record(&W.X, k.io) == HM_OK, "%s", hm_errmsg());
  int64_t *pos = (int64_t *)k.store.k2.positions;
  pos[1] = (int64_t)1 << 40;
  hm_status s = hm_chain_replay(W.c);
  ck_assert_msg(s == HM_ERR_INVALID_ARG && strstr(hm_errmsg(), "K2 replay: row 1: position 1099511627776"), "%s: %s",
                hm_status_name(s), hm_errmsg());
  ck_assert_int_eq(hm_queue_wait_idle(W.q, 10000000000ull), HM_OK); /* nothing was launched */
  s = hm_heap_check(hm_layer_group_heap(W.g, 0));
  ck_assert_msg(s == HM_ERR_PEER && strstr(hm_errmsg(), "K2 replay: row 1"), "the group was not told: %s: %s",
                hm_status_name(s), hm_errmsg());
  hm_chain_destroy(W.c), W.c = NULL;
  sk_kind_free(&W.X, &k);
  world_close(&W);
}
END_TEST

/* A layer's K1 and K2 are its own: destroying one directly is refused, the layer still works. */
START_TEST(layer_parts_owned) {
  base B;
  base_open(&B);
  hm_layer *l;
  hm_layer_options opt = {.run = small};
  ck_assert_msg(hm_layer_create(B.h[0], &B.w[0], &opt, &l) == HM_OK, "%s", hm_errmsg());
  ck_assert_int_eq(hm_k1_destroy(hm_layer_k1(l)), HM_ERR_BUSY);
  ck_assert_int_eq(hm_ffn_destroy(hm_layer_k2(l)), HM_ERR_BUSY);
  ck_assert_int_eq(hm_runtime_close(B.rt), HM_ERR_BUSY);
  ck_assert_int_eq(hm_weights_free(&B.w[0]), HM_ERR_BUSY);
  ck_assert_int_eq(hm_layer_destroy(l), HM_OK);
  base_close(&B);
}
END_TEST

Suite *hm_test_suite(void) {
  const tl_case tests[] = {
      {"finding_short_out", finding_short_out},
      {"finding_malloc_out", finding_malloc_out},
      {"finding_heap_destroy_in_use", finding_heap_destroy_in_use},
      {"bad_pointers_ffn", bad_pointers_ffn},
      {"bad_pointers_k2", bad_pointers_k2},
      {"bad_pointers_k1", bad_pointers_k1},
      {"bad_pointers_layer", bad_pointers_layer},
      {"teardown_pairs", teardown_pairs},
      {"layer_parts_owned", layer_parts_owned},
      {"recorded_tensors_held", recorded_tensors_held},
      {"replay_rechecks_metadata", replay_rechecks_metadata},
      {"replay_rechecks_positions_k2", replay_rechecks_positions_k2},
  };
  return TL_SUITE("misuse", tests, 600);
}
