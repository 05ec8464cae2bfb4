/* hsa/hm_embedded.h: the device objects built into the library: one code object per GPU
 * target and one host kernel object per architecture (for the software agent). */
#ifndef HM_EMBEDDED_H
#define HM_EMBEDDED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hm_blob_kind { HM_BLOB_CODE_OBJECT = 1, HM_BLOB_HOST_OBJECT = 2 } hm_blob_kind;

struct hm_embedded_blob {
  const char *target; /* "gfx950", "gfx942" */
  hm_blob_kind kind;
  const unsigned char *data;
  const unsigned long long *size;
};

/* The i-th embedded object (NULL past the end) and its size. */
const struct hm_embedded_blob *hm_embedded_at(unsigned i);
size_t hm_embedded_size(const struct hm_embedded_blob *b);
/* The object of `kind` for processor `target`, or NULL when the build did not include it. */
const struct hm_embedded_blob *hm_embedded_find(const char *target, hm_blob_kind kind);

#ifdef __cplusplus
}
#endif
#endif /* HM_EMBEDDED_H */
