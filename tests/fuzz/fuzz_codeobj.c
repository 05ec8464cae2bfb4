/* tests/fuzz/fuzz_codeobj.c: libFuzzer entry for the code-object reader: any input must give
 * either a parsed object or a one-line error, never a crash, leak or hang. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hm_codeobj.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hm_codeobj *co = NULL;
  hm_status s = hm_codeobj_parse(data, size, &co);
  if (s == HM_OK) {
    for (uint32_t i = 0; i < co->nkernels; i++) (void)hm_codeobj_find(co, co->kernels[i].name);
    hm_codeobj_free(co);
  } else if (co != NULL || hm_errmsg()[0] == 0 || strchr(hm_errmsg(), '\n')) {
    abort();
  }
  return 0;
}
