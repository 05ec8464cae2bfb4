/* hsa/embedded.c: lookups over the table tools/embed.py generates at build time. */
#include "hm_embedded.h"

#include <string.h>

extern const struct hm_embedded_blob hm_embedded_blobs[];
extern const unsigned hm_embedded_blob_count;

const struct hm_embedded_blob *hm_embedded_at(unsigned i) {
  return i < hm_embedded_blob_count ? &hm_embedded_blobs[i] : NULL;
}

size_t hm_embedded_size(const struct hm_embedded_blob *b) { return b ? (size_t)*b->size : 0; }

const struct hm_embedded_blob *hm_embedded_find(const char *target, hm_blob_kind kind) {
  if (!target) return NULL;
  for (unsigned i = 0; i < hm_embedded_blob_count; i++)
    if (hm_embedded_blobs[i].kind == kind && strcmp(hm_embedded_blobs[i].target, target) == 0)
      return &hm_embedded_blobs[i];
  return NULL;
}
