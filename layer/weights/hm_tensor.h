/* layer/weights/hm_tensor.h: named host tensors {name, dtype, shape, bytes} and sets of them: the form of
 * the layer weights, the reference's stage outputs, and what safetensors files hold. */
#ifndef HM_TENSOR_H
#define HM_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "hm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hm_dtype {
  HM_DT_F32 = 0,
  HM_DT_BF16,  /* raw bf16 bits (u16) */
  HM_DT_E4M3,  /* OCP e4m3fn bytes */
  HM_DT_E8M0,  /* OCP E8M0 scale bytes */
  HM_DT_FP4X2, /* e2m1 pairs, even element in the low nibble (checkpoint "I8") */
  HM_DT_U8,
  HM_DT_I8,
  HM_DT_I32,
  HM_DT_I64,
  HM_DT_COUNT
} hm_dtype;

#define HM_TENSOR_NAME 96
#define HM_TENSOR_MAXDIM 4

typedef struct hm_tensor {
  char name[HM_TENSOR_NAME];
  hm_dtype dtype;
  uint32_t ndim;
  uint64_t shape[HM_TENSOR_MAXDIM];
  uint64_t nbytes;
  void *data; /* owned by the set */
} hm_tensor;

typedef struct hm_tensor_set {
  uint32_t count, cap;
  hm_tensor *t;
} hm_tensor_set;

/* bytes of one element (FP4X2: one byte = two values) */
size_t hm_dtype_size(hm_dtype dt);
/* safetensors dtype string ("F32", "BF16", "F8_E4M3", "F8_E8M0", "I8", "U8", "I32", "I64") */
const char *hm_dtype_st_name(hm_dtype dt);
/* the reverse; HM_ERR_UNSUPPORTED for other strings */
hm_status hm_dtype_from_st_name(const char *s, hm_dtype *out);

uint64_t hm_tensor_numel(const hm_tensor *t);

void hm_tset_init(hm_tensor_set *s);
void hm_tset_free(hm_tensor_set *s);
/* Adds a zero-filled tensor (ndim 1..4, no zero dims); HM_ERR_INVALID_ARG on a duplicate name.
 * *out (if given) points into the set and stays valid until the next add. */
hm_status hm_tset_add(hm_tensor_set *s, const char *name, hm_dtype dt, uint32_t ndim,
                      const uint64_t *shape, hm_tensor **out);
/* Convenience: up to 4 dims given inline, trailing zeros ignored. Returns the data or NULL
 * (the failure recorded for hm_errmsg). */
void *hm_tset_new(hm_tensor_set *s, const char *name, hm_dtype dt, uint64_t d0, uint64_t d1,
                  uint64_t d2, uint64_t d3);
hm_tensor *hm_tset_find(const hm_tensor_set *s, const char *name);
/* drops the tensors added after the first `count` (undoing a failed producer's partial output) */
void hm_tset_truncate(hm_tensor_set *s, uint32_t count);
/* NULL unless present with exactly this dtype and element count */
void *hm_tset_data(const hm_tensor_set *s, const char *name, hm_dtype dt, uint64_t numel);

#ifdef __cplusplus
}
#endif
#endif /* HM_TENSOR_H */
