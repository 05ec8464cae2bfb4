/* tests/layer/st_sparse.h: a sparse copy of the released DeepSeek-V4.1-Flash checkpoint's headers for a few
 * layers (data as file holes), and real bytes poked into it where a test reads them. */
#ifndef TL_ST_SPARSE_H
#define TL_ST_SPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One tensor as the released shards store it. */
typedef struct sp_tensor {
  char name[96];
  const char *dtype; /* the safetensors string */
  uint32_t ndim;
  uint64_t shape[2];
  uint64_t nbytes;
  uint32_t shard;    /* 1..48: model-000NN-of-00048.safetensors */
  uint64_t begin;    /* data_offsets[0] */
} sp_tensor;

typedef struct st_sparse st_sparse;

/* The layers st_sparse_write lays out (V4.1-Flash numbering; 40 is mtp.0.). */
extern const int32_t sp_layers[];
extern const unsigned sp_nlayers;

/* Writes the shards holding sp_layers' tensors (and the embedding, head and final norm) into the
 * existing directory dir: headers whole, data as holes. NULL (the reason on stderr) on failure. */
st_sparse *st_sparse_write(const char *dir);
/* the tensor named so, or NULL */
const sp_tensor *st_sparse_find(const st_sparse *s, const char *name);
/* Writes n bytes at byte `at` of the named tensor's data; false if it has no such bytes. */
bool st_sparse_poke(const st_sparse *s, const char *name, uint64_t at, const void *src, size_t n);
/* the shard file's path (1..48) into buf */
void st_sparse_path(const st_sparse *s, uint32_t shard, char *buf, size_t size);
/* the shards written, ascending, into out[48]; returns how many */
unsigned st_sparse_shards(const st_sparse *s, uint32_t *out);
void st_sparse_free(st_sparse *s);

#endif
