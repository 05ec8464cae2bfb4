/* tests/fuzz/fuzz_safetensors.c: libFuzzer entry for the safetensors reader: any file must give
 * either an index whose every tensor reads back inside the mapping, or a one-line error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hm_safetensors.h"

/* The reader opens paths (it maps the file), so the input becomes an anonymous in-memory file
 * opened through /proc: the very path a checkpoint's shard takes, with no disk traffic. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) abort();
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  hm_st_file *f = NULL;
  hm_status s = hm_st_open(path, &f);
  if (s == HM_OK) {
    (void)hm_st_meta(f, "format");
    for (uint32_t i = 0; i < hm_st_count(f); i++) {
      hm_dtype dt;
      uint32_t nd;
      uint64_t shape[HM_TENSOR_MAXDIM], nbytes;
      const void *p;
      if (hm_st_get(f, hm_st_name(f, i), &dt, &nd, shape, &p, &nbytes) == HM_OK) {
        /* touch the tensor's first and last byte: both must lie inside the mapping */
        volatile uint8_t sink = 0;
        if (nbytes) sink ^= ((const uint8_t *)p)[0] ^ ((const uint8_t *)p)[nbytes - 1];
        (void)sink;
      }
    }
    hm_st_close(f);
  } else if (f != NULL || hm_errmsg()[0] == 0 || strchr(hm_errmsg(), '\n')) {
    abort();
  }
  close(fd);
  return 0;
}
