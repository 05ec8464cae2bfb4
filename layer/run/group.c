/* layer/run/group.c: the in-process TP groups' shared pieces (group_internal.h): rank threads and their
 * outcomes, bf16 host conversions, staged copies, the step's metadata, the clock. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "formats.h"
#include "group_internal.h"

void *hm_rank_keep(hm_rank_result *res, uint32_t r, hm_status s) {
  res->st = s;
  if (s) snprintf(res->err, sizeof res->err, "rank %u: %s", r, hm_errmsg());
  return NULL;
}

static hm_rank_result *result_of(void *ranks, size_t stride, size_t off, uint32_t r) {
  return (hm_rank_result *)((char *)ranks + r * stride + off);
}

/* A rank thread's start: bound to its GPU's NUMA node first, then the rank's body. */
struct rank_start {
  void *(*fn)(void *);
  void *rank;
  hm_agent *agent;
};

static void *rank_thread(void *arg) {
  const struct rank_start *rs = arg;
  /* a machine without NUMA (or without the node) runs the rank wherever it is: the binding's
   * failure was logged at debug level by hm_agent_bind_thread */
  if (rs->agent) (void)hm_agent_bind_thread(rs->agent);
  return rs->fn(rs->rank);
}

hm_status hm_on_ranks(void *ranks, size_t stride, size_t result_off, size_t agent_off, uint32_t tp,
                      void *(*fn)(void *)) {
  if (tp > HM_GROUP_MAX_TP) return hm_fail(HM_ERR_INVALID_ARG, "group: TP %u (at most %d)", tp, HM_GROUP_MAX_TP);
  pthread_t th[HM_GROUP_MAX_TP];
  struct rank_start rs[HM_GROUP_MAX_TP];
  uint32_t started = 0;
  for (uint32_t r = 0; r < tp; r++) {
    hm_rank_result *res = result_of(ranks, stride, result_off, r);
    res->st = HM_OK, res->err[0] = 0;
    void *rank = (char *)ranks + r * stride;
    rs[r] = (struct rank_start){fn, rank, *(hm_agent **)((char *)rank + agent_off)};
    if (pthread_create(&th[r], NULL, rank_thread, &rs[r]) != 0) {
      res->st = HM_ERR_RUNTIME;
      snprintf(res->err, sizeof res->err, "rank %u: cannot start its thread", r);
      break;
    }
    started++;
  }
  for (uint32_t r = 0; r < started; r++) pthread_join(th[r], NULL);
  for (uint32_t r = 0; r < tp; r++) {
    hm_rank_result *res = result_of(ranks, stride, result_off, r);
    if (res->st) return hm_fail(res->st, "%s", res->err);
  }
  return HM_OK;
}

void hm_group_to_bf16(const float *x, uint64_t n, uint16_t *out) {
  for (uint64_t i = 0; i < n; i++) out[i] = fmt_bf16_from_f32(x[i]);
}
void hm_group_from_bf16(const uint16_t *x, uint64_t n, float *out) {
  for (uint64_t i = 0; i < n; i++) out[i] = fmt_bf16_to_f32(x[i]);
}

double hm_group_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

/* ---------------------------------------------------------------- staged copies */

hm_status hm_group_put(const hm_group_stage *st, void *dst, const void *src, size_t bytes) {
  hm_signal none = {0};
  if (src == st->buf) return hm_mem_copy(st->rt, dst, st->buf, bytes, none);
  for (size_t o = 0; o < bytes; o += st->bytes) {
    size_t n = bytes - o < st->bytes ? bytes - o : st->bytes;
    memcpy(st->buf, (const char *)src + o, n);
    hm_status s = hm_mem_copy(st->rt, (char *)dst + o, st->buf, n, none);
    if (s) return s;
  }
  return HM_OK;
}

hm_status hm_group_get(const hm_group_stage *st, void *dst, const void *src, size_t bytes) {
  hm_signal none = {0};
  if (dst == st->buf) return hm_mem_copy(st->rt, st->buf, src, bytes, none);
  for (size_t o = 0; o < bytes; o += st->bytes) {
    size_t n = bytes - o < st->bytes ? bytes - o : st->bytes;
    hm_status s = hm_mem_copy(st->rt, st->buf, (const char *)src + o, n, none);
    if (s) return s;
    memcpy((char *)dst + o, st->buf, n);
  }
  return HM_OK;
}

/* ---------------------------------------------------------------- the step's metadata */

static size_t meta_row_bytes(int m) {
  switch (m) {
  case HM_GM_POS: case HM_GM_SLOT: return 8;
  case HM_GM_SWA_IDX: return HM_WINDOW * 4;
  case HM_GM_SWA_LENS: case HM_GM_T2R: return 4;
  case HM_GM_TOPK: return HM_TOPK_ATTN * 4;
  default: return 0;
  }
}

hm_status hm_group_meta_alloc(hm_agent *a, uint32_t rows, hm_group_meta *m) {
  memset(m, 0, sizeof *m);
  for (int i = 0; i < HM_GM_COUNT; i++) {
    hm_status s = hm_mem_alloc(a, HM_POOL_HOST, (size_t)rows * meta_row_bytes(i), 0, &m->arr[i]);
    if (s) return s;
  }
  return HM_OK;
}

void hm_group_meta_free(hm_runtime *rt, hm_group_meta *m) {
  for (int i = 0; i < HM_GM_COUNT; i++)
    if (m->arr[i]) hm_mem_free(rt, m->arr[i]);
  if (m->bt) hm_mem_free(rt, m->bt);
  memset(m, 0, sizeof *m);
}

hm_status hm_group_meta_upload(hm_agent *a, hm_group_meta *m, const hm_step_inputs *in, hm_k1_meta *out) {
  const uint32_t S = in->S;
  memset(out, 0, sizeof *out);
  const void *src[HM_GM_COUNT] = {in->positions, in->slot_mapping, in->swa_indices, in->swa_lens, in->token_to_req,
                                  in->topk};
  for (int i = 0; i < HM_GM_COUNT; i++)
    if (src[i]) memcpy(m->arr[i], src[i], (size_t)S * meta_row_bytes(i));
  out->positions = in->positions ? m->arr[HM_GM_POS] : NULL;
  out->slot_mapping = in->slot_mapping ? m->arr[HM_GM_SLOT] : NULL;
  out->swa_indices = in->swa_indices ? m->arr[HM_GM_SWA_IDX] : NULL;
  out->swa_lens = in->swa_lens ? m->arr[HM_GM_SWA_LENS] : NULL;
  out->token_to_req = in->token_to_req ? m->arr[HM_GM_T2R] : NULL;
  out->topk = in->topk ? m->arr[HM_GM_TOPK] : NULL;
  int64_t reqs = 0;
  for (uint32_t t = 0; in->token_to_req && t < S; t++)
    if ((int64_t)in->token_to_req[t] + 1 > reqs) reqs = (int64_t)in->token_to_req[t] + 1;
  out->requests = (uint32_t)reqs, out->bt_stride = in->bt_stride;
  out->comp_block = in->comp.block_size, out->comp_blocks = in->comp.blocks;
  size_t bt = (size_t)out->requests * in->bt_stride * 4;
  if (in->block_table && bt) {
    if (bt > m->bt_bytes) {
      if (m->bt) hm_mem_free(hm_agent_runtime(a), m->bt), m->bt = NULL, m->bt_bytes = 0;
      hm_status s = hm_mem_alloc(a, HM_POOL_HOST, bt, 0, (void **)&m->bt);
      if (s) return hm_fail_prefix(s, "the block table of %zu bytes", bt);
      m->bt_bytes = bt;
    }
    memcpy(m->bt, in->block_table, bt);
    out->block_table = m->bt;
  }
  return HM_OK;
}
