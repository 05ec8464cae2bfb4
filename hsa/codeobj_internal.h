/* hsa/codeobj_internal.h: pieces of the code-object reader exposed to its tests only. */
#ifndef HM_CODEOBJ_INTERNAL_H
#define HM_CODEOBJ_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

/* Whether `len` bytes hold one msgpack object whose containers never declare more elements
 * than bytes remain and nest at most 32 deep (checked before msgpack-c allocates). */
bool hm_msgpack_sane(const unsigned char *p, size_t len);

#endif /* HM_CODEOBJ_INTERNAL_H */
