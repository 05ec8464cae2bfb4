/* tools/check_chain.c: the comparisons a layer of hsa-mono-check model's GPU chain is held to against
 * the reference chain's (check_chain.h). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "check_chain.h"

int chain_compare_rows(const char *name, const float *a, const float *ref, uint32_t S, uint64_t w, const uint8_t *keep,
                       float *sa, float *sr, double rel, double cos) {
  uint64_t n = 0;
  for (uint32_t t = 0; t < S; t++)
    if (keep[t]) {
      memcpy(sa + n, a + t * w, w * sizeof(float)), memcpy(sr + n, ref + t * w, w * sizeof(float));
      n += w;
    }
  if (!n) {
    printf("  %-8s (every token's route flipped before it)\n", name);
    return 1;
  }
  return check_compare(name, sa, sr, n, rel, cos);
}

int chain_ranks_hold(const chain_link *l, uint32_t T, uint32_t S, uint32_t D) {
  for (uint32_t r = 1; r < T; r++)
    if (memcmp(l->o[r].x, l->o[0].x, sizeof(float) * S * D) ||
        memcmp(l->o[r].res, l->o[0].res, sizeof(float) * S * 4 * D) ||
        memcmp(l->o[r].post, l->o[0].post, 16 * (size_t)S) || memcmp(l->o[r].comb, l->o[0].comb, 64 * (size_t)S) ||
        memcmp(l->o[r].pre, l->o[0].pre, 16 * (size_t)S) ||
        (l->index && memcmp(l->o[r].topk, l->o[0].topk, 4 * (size_t)S * HM_TOPK_ATTN))) {
      printf("  rank %u DOES NOT hold rank 0's bits\n", r);
      return 0;
    }
  return 1;
}

/* whether row t of two top-k lists [S][512] agree */
static int row_same(const int32_t *a, const int32_t *b, uint32_t t) {
  return !memcmp(a + (size_t)t * HM_TOPK_ATTN, b + (size_t)t * HM_TOPK_ATTN, 4 * HM_TOPK_ATTN);
}

int chain_check_keys(const chain_link *c, uint32_t i, uint32_t S) {
  const chain_link *l = &c[i];
  const int32_t *ga = NULL, *ra = NULL;
  if (l->index) ga = l->o[0].topk, ra = l->rtopk;
  else if (l->topk_from >= 0) ga = c[l->topk_from].o[0].topk, ra = c[l->topk_from].rtopk;
  uint64_t diff = 0, n = 0;
  uint32_t rows = 0;
  for (uint32_t t = 0; t < S; t++) {
    if (ga && !row_same(ga, ra, t)) continue;
    rows++;
    const int32_t *kt = l->o[0].kt + (size_t)t * HM_KEYS, *rkt = l->rkt + (size_t)t * HM_KEYS;
    for (uint32_t k = 0; k < HM_KEYS; k++) diff += kt[k] != rkt[k];
    diff += (l->o[0].klen[t] != l->rklen[t]) + (l->o[0].klen[S + t] != l->rklen[S + t]);
    n += HM_KEYS + 2;
  }
  char what[80];
  snprintf(what, sizeof what, "entries of kt and klen (the %u rows whose top-k agreed)", rows);
  return check_count("keys", diff, n, what, 0, "exact, from the metadata and top-k alone");
}

int chain_check_cache(chain_link *l, uint32_t S, float *va, float *vr, double rel) {
  hm_kv_cache ca = l->meta.in.swa, cr = ca;
  ca.base = l->swa[0], cr.base = l->swa[1];
  for (uint32_t t = 0; t < S; t++)
    if (l->meta.slot[t] >= 0) l->written[l->meta.slot[t]] = 1;
  uint64_t all = 0, in = 0, bytes = 0, n = 0;
  for (uint64_t j = 0; j < l->meta.swa_bytes; j++) all += l->swa[0][j] != l->swa[1][j];
  for (uint64_t slot = 0; slot < (uint64_t)ca.blocks * ca.block_size; slot++) {
    uint64_t d, sc;
    if (!l->written[slot] || hm_ref_kv_offsets(&ca, (int64_t)slot, &d, &sc) != HM_OK) continue;
    for (uint32_t j = 0; j < HM_RECORD_DATA; j++) in += l->swa[0][d + j] != l->swa[1][d + j];
    for (uint32_t j = 0; j < 8; j++) in += l->swa[0][sc + j] != l->swa[1][sc + j];
    bytes += HM_RECORD;
    /* gfx942's SWA records are FNUZ (spec/mono.md §2.6) */
    hm_status (*read)(const hm_kv_cache *, int64_t, float *) =
        l->t.bopts.arch == HM_ARCH_GFX942 ? hm_ref_kv_read_fnuz : hm_ref_kv_read;
    if (read(&ca, (int64_t)slot, va + n) != HM_OK || read(&cr, (int64_t)slot, vr + n) != HM_OK) return 0;
    n += HM_HEAD_DIM;
  }
  int ok = check_compare("records", va, vr, n, rel, 1 - rel * rel);
  return ok & check_count("cache", all - in, l->meta.swa_bytes - bytes, "bytes outside the records the run wrote", 0,
                          "no slot but the step's is written");
}
