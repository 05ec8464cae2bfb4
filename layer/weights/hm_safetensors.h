/* layer/weights/hm_safetensors.h: safetensors files (8-byte header length, JSON header, raw data): read a
 * file or a sharded checkpoint as a weight source, write a tensor set. */
#ifndef HM_SAFETENSORS_H
#define HM_SAFETENSORS_H

#include <stdint.h>

#include "hm_status.h"
#include "hm_tensor.h"
#include "hm_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One file, mapped read-only. Every entry's dtype, shape and offsets are checked at open
 * (offsets inside the data, the data indexed exactly once, no name twice, size = numel * element
 * size where the dtype's size is known); a dtype the layer does not read ("F16", "BOOL", "F4",
 * any other string) is listed and refused, naming the tensor and its dtype, only when that
 * tensor is asked for. */
typedef struct hm_st_file hm_st_file;
hm_status hm_st_open(const char *path, hm_st_file **out);
void hm_st_close(hm_st_file *f);
uint32_t hm_st_count(const hm_st_file *f);
const char *hm_st_name(const hm_st_file *f, uint32_t i);
/* a tensor's dtype, shape and bytes (inside the mapping) */
hm_status hm_st_get(const hm_st_file *f, const char *name, hm_dtype *dt, uint32_t *ndim, uint64_t shape[HM_TENSOR_MAXDIM],
                    const void **data, uint64_t *nbytes);
/* the header's "__metadata__" value for key, or NULL */
const char *hm_st_meta(const hm_st_file *f, const char *key);

/* Writes every tensor of the set (in set order) to path, with string metadata pairs
 * (keys[i], values[i]); the file appears whole or not at all (written beside, then renamed). */
hm_status hm_st_write(const char *path, const hm_tensor_set *set, const char *const *keys, const char *const *values,
                      uint32_t nmeta);

/* A checkpoint: one .safetensors file or a directory of them (every *.safetensors in it),
 * with one name index over all shards; as an hm_source for hm_weights_build. */
typedef struct hm_ckpt hm_ckpt;
hm_status hm_ckpt_open(const char *path, hm_ckpt **out);
void hm_ckpt_close(hm_ckpt *c);
hm_source hm_ckpt_source(hm_ckpt *c);

#ifdef __cplusplus
}
#endif
#endif /* HM_SAFETENSORS_H */
