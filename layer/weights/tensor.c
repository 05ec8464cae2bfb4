/* layer/weights/tensor.c: named host tensors and sets of them (hm_tensor.h), with the dtype names
 * safetensors files use. */
#include <stdlib.h>
#include <string.h>

#include "hm_tensor.h"

static const struct {
  const char *st;
  size_t size;
} dtypes[HM_DT_COUNT] = {
    [HM_DT_F32] = {"F32", 4},     [HM_DT_BF16] = {"BF16", 2},   [HM_DT_E4M3] = {"F8_E4M3", 1},
    [HM_DT_E8M0] = {"F8_E8M0", 1}, [HM_DT_FP4X2] = {"I8", 1},   [HM_DT_U8] = {"U8", 1},
    [HM_DT_I8] = {"I8", 1},       [HM_DT_I32] = {"I32", 4},    [HM_DT_I64] = {"I64", 8},
};

size_t hm_dtype_size(hm_dtype dt) { return (unsigned)dt < HM_DT_COUNT ? dtypes[dt].size : 0; }

const char *hm_dtype_st_name(hm_dtype dt) { return (unsigned)dt < HM_DT_COUNT ? dtypes[dt].st : "?"; }

hm_status hm_dtype_from_st_name(const char *s, hm_dtype *out) {
  if (!s || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_dtype_from_st_name: null argument");
  /* "I8" maps to I8; the checkpoint reader reinterprets packed FP4 itself */
  for (int i = 0; i < HM_DT_COUNT; i++) {
    if (i == HM_DT_FP4X2) continue;
    if (!strcmp(s, dtypes[i].st)) {
      *out = (hm_dtype)i;
      return HM_OK;
    }
  }
  return hm_fail(HM_ERR_UNSUPPORTED, "dtype '%s' is not one the layer reads", s);
}

uint64_t hm_tensor_numel(const hm_tensor *t) {
  uint64_t n = 1;
  for (uint32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

void hm_tset_init(hm_tensor_set *s) { memset(s, 0, sizeof *s); }

void hm_tset_free(hm_tensor_set *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->count; i++) free(s->t[i].data);
  free(s->t);
  memset(s, 0, sizeof *s);
}

void hm_tset_truncate(hm_tensor_set *s, uint32_t count) {
  if (!s) return;
  while (s->count > count) {
    s->count--;
    free(s->t[s->count].data);
  }
}

hm_tensor *hm_tset_find(const hm_tensor_set *s, const char *name) {
  if (!s || !name) return NULL;
  for (uint32_t i = 0; i < s->count; i++)
    if (!strcmp(s->t[i].name, name)) return &s->t[i];
  return NULL;
}

hm_status hm_tset_add(hm_tensor_set *s, const char *name, hm_dtype dt, uint32_t ndim,
                      const uint64_t *shape, hm_tensor **out) {
  if (!s || !name || !shape || ndim < 1 || ndim > HM_TENSOR_MAXDIM || (unsigned)dt >= HM_DT_COUNT)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_tset_add: bad argument");
  if (strlen(name) >= HM_TENSOR_NAME)
    return hm_fail(HM_ERR_INVALID_ARG, "tensor name '%s' longer than %d bytes", name, HM_TENSOR_NAME - 1);
  if (hm_tset_find(s, name)) return hm_fail(HM_ERR_INVALID_ARG, "tensor '%s' twice in one set", name);
  uint64_t n = 1;
  for (uint32_t i = 0; i < ndim; i++) {
    if (shape[i] == 0 || n > (UINT64_MAX >> 8) / shape[i])
      return hm_fail(HM_ERR_INVALID_ARG, "tensor '%s': dimension %u is %llu", name, i,
                     (unsigned long long)shape[i]);
    n *= shape[i];
  }
  if (s->count == s->cap) {
    uint32_t cap = s->cap ? 2 * s->cap : 16;
    hm_tensor *t = realloc(s->t, cap * sizeof *t);
    if (!t) return hm_fail(HM_ERR_NO_MEMORY, "tensor set of %u", cap);
    s->t = t;
    s->cap = cap;
  }
  hm_tensor *t = &s->t[s->count];
  memset(t, 0, sizeof *t);
  strcpy(t->name, name);
  t->dtype = dt;
  t->ndim = ndim;
  for (uint32_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->nbytes = n * hm_dtype_size(dt);
  t->data = calloc(1, t->nbytes);
  if (!t->data)
    return hm_fail(HM_ERR_NO_MEMORY, "tensor '%s': %llu bytes", name, (unsigned long long)t->nbytes);
  s->count++;
  if (out) *out = t;
  return HM_OK;
}

void *hm_tset_new(hm_tensor_set *s, const char *name, hm_dtype dt, uint64_t d0, uint64_t d1,
                  uint64_t d2, uint64_t d3) {
  uint64_t shape[4] = {d0, d1, d2, d3};
  uint32_t nd = 4;
  while (nd > 1 && shape[nd - 1] == 0) nd--;
  hm_tensor *t;
  if (hm_tset_add(s, name, dt, nd, shape, &t) != HM_OK) return NULL;
  return t->data;
}

void *hm_tset_data(const hm_tensor_set *s, const char *name, hm_dtype dt, uint64_t numel) {
  hm_tensor *t = hm_tset_find(s, name);
  if (!t || t->dtype != dt || hm_tensor_numel(t) != numel) return NULL;
  return t->data;
}
