/* tests/install/client.c: a client built only from the installed headers and pkg-config, as a
 * serving stack would be: version, the runtime, its agents, a copy through GPU memory, a config. */
#include <hsamono/hsamono.h>

#include <stdio.h>
#include <string.h>

/* A client's own short names must not collide with anything the headers declare (the library's
 * internal dev_types.h once put u8..u64, i8..i64 and f32 into this namespace). */
typedef unsigned long long u64;
typedef int i32;
typedef double f32;
typedef struct { int x; } ar_link;

static int fail(const char *what, hm_status s) {
  printf("FAIL %s: %s: %s\n", what, hm_status_name(s), hm_errmsg());
  return 1;
}

int main(void) {
  if (strcmp(hm_version(), HM_VERSION) != 0) {
    printf("FAIL library %s, headers %s\n", hm_version(), HM_VERSION);
    return 1;
  }
  printf("version %s\n", hm_version());
  hm_runtime *rt;
  hm_status s = hm_runtime_open(NULL, &rt);
  if (s) return fail("hm_runtime_open", s);
  printf("backend %s\n", hm_runtime_backend(rt));
  unsigned n = hm_agent_count(rt);
  printf("agents %u\n", n);
  for (unsigned i = 0; i < n; i++) {
    const hm_agent_info *in = hm_agent_info_of(hm_agent_get(rt, i));
    printf("agent %u %s cus %u\n", i, in->name, (unsigned)in->cus);
  }
  /* host -> GPU -> host through the copy engine, both ends allocated by the runtime */
  enum { WORDS = 1024 };
  hm_agent *a = hm_agent_get(rt, 0);
  uint32_t *host, *back;
  void *dev;
  if ((s = hm_mem_alloc(a, HM_POOL_HOST, WORDS * 4, 0, (void **)&host)) ||
      (s = hm_mem_alloc(a, HM_POOL_HOST, WORDS * 4, 0, (void **)&back)) ||
      (s = hm_mem_alloc(a, HM_POOL_COARSE, WORDS * 4, 0, &dev)))
    return fail("hm_mem_alloc", s);
  for (uint32_t i = 0; i < WORDS; i++) host[i] = i * 2654435761u;
  hm_signal none = {0};
  if ((s = hm_mem_copy(rt, dev, host, WORDS * 4, none)) || (s = hm_mem_copy(rt, back, dev, WORDS * 4, none)))
    return fail("hm_mem_copy", s);
  printf("copy %s\n", memcmp(host, back, WORDS * 4) == 0 ? "ok" : "differs");
  hm_runtime_close(rt);
  /* the layer module: DeepSeek-V4.1-Flash's layer 3 as data */
  hm_layer_config cfg;
  if ((s = hm_config_v41_flash(3, &cfg))) return fail("hm_config_v41_flash", s);
  printf("layer 3 hidden %u experts %u\n", (unsigned)cfg.hidden, (unsigned)cfg.experts);
  return 0;
}
