/* layer/group.c: the in-process TP groups' shared pieces (group_internal.h): rank threads and their
 * outcomes, bf16 host conversions, the clock the groups time steps with. */
#include <pthread.h>
#include <stdio.h>
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

hm_status hm_on_ranks(void *ranks, size_t stride, size_t result_off, uint32_t tp, void *(*fn)(void *)) {
  if (tp > HM_GROUP_MAX_TP) return hm_fail(HM_ERR_INVALID_ARG, "group: TP %u (at most %d)", tp, HM_GROUP_MAX_TP);
  pthread_t th[HM_GROUP_MAX_TP];
  uint32_t started = 0;
  for (uint32_t r = 0; r < tp; r++) {
    hm_rank_result *res = result_of(ranks, stride, result_off, r);
    res->st = HM_OK, res->err[0] = 0;
    if (pthread_create(&th[r], NULL, fn, (char *)ranks + r * stride) != 0) {
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
