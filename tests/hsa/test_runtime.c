/* tests/hsa/test_runtime.c: the runtime on whatever HSA library HSAMONO_RUNTIME selects (the
 * software agent here, ROCr on a GPU machine): agents, memory, signals, the self-test kernels
 * of every primitive family against host-computed results, and every validation error path. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats.h"
#include "hm_hsa.h"
#include "rt_helpers.h"
#include "selftest/selftest.h"

/* ---------------------------------------------------------------- opening and agents */

START_TEST(open_and_agents) {
  hm_runtime *rt = t_open();
  ck_assert(hm_runtime_backend(rt)[0]);
  ck_assert(hm_runtime_describe(rt)[0]);
  for (unsigned i = 0; i < hm_agent_count(rt); i++) {
    const hm_agent_info *in = hm_agent_info_of(hm_agent_get(rt, i));
    ck_assert_msg(strcmp(in->tid.processor, "gfx950") == 0 || strcmp(in->tid.processor, "gfx942") == 0, "%s",
                  in->isa);
    ck_assert_str_eq(in->name, in->tid.processor);
    ck_assert_uint_gt(in->cus, 0);
    ck_assert_uint_eq(in->wave_size, 64);
    ck_assert_uint_eq(in->simds_per_cu, 4);
    ck_assert_uint_eq(in->lds_bytes, in->limits.lds_bytes);
    for (int k = 0; k < HM_POOL_KINDS; k++) ck_assert_msg(in->pool_present[k], "agent %u lacks pool %d", i, k);
    ck_assert_uint_eq(hm_agent_index(hm_agent_get(rt, i)), i);
  }
  ck_assert_uint_ge(hm_cpu_agent_count(rt), 1);
  ck_assert_ptr_null(hm_agent_get(rt, hm_agent_count(rt)));
  hm_runtime_close(rt);
}
END_TEST

START_TEST(open_errors) {
  hm_runtime *rt = (hm_runtime *)1;
  ck_assert_int_eq(hm_runtime_open("/nonexistent/libhsa.so", &rt), HM_ERR_RUNTIME);
  ck_assert_ptr_null(rt);
  ck_assert_ptr_nonnull(strstr(hm_errmsg(), "/nonexistent/libhsa.so"));
  ck_assert_int_eq(hm_runtime_open("sim", NULL), HM_ERR_INVALID_ARG);
  /* ROCr without a GPU: an error that says how to use the software agent */
  if (hm_runtime_open("rocr", &rt) == HM_OK) {
    hm_runtime_close(rt); /* a GPU machine */
  } else {
    ck_assert_msg(strstr(hm_errmsg(), "HSAMONO_RUNTIME=sim") != NULL, "%s", hm_errmsg());
  }
  /* the runtime can be opened and closed repeatedly */
  for (int i = 0; i < 3; i++) hm_runtime_close(t_open());
}
END_TEST

/* ---------------------------------------------------------------- silence (issue 14) */

/* hm_runtime_open("auto") with this process's stderr sent to a scratch file: what it wrote there
 * (the caller frees) and whether it chose the software agent. Check runs each test in its own
 * child, so HSAMONO_LOG (read once a process) and the once-a-process notice start fresh. */
static char *stderr_of_auto_open(bool *sim) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  fflush(stderr);
  int saved = dup(2);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_eq(dup2(fileno(f), 2), 2);
  hm_runtime *rt = NULL;
  hm_status s = hm_runtime_open("auto", &rt);
  if (s == HM_OK) {
    *sim = hm_runtime_is_sim(rt);
    hm_runtime_close(rt);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ck_assert_msg(s == HM_OK, "hm_runtime_open(auto): %s", hm_errmsg());
  /* the writes went through descriptor 2, which shares f's file offset */
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  char *text = calloc(1, (size_t)n + 1);
  ck_assert_ptr_nonnull(text);
  rewind(f);
  ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return text;
}

/* Under auto the library says nothing on stderr unless HSAMONO_LOG asks, the fallback to the
 * software agent included (tools print where they run themselves). */
START_TEST(auto_is_silent) {
  unsetenv("HSAMONO_LOG");
  bool sim = false;
  char *err = stderr_of_auto_open(&sim);
  ck_assert_msg(err[0] == 0, "hm_runtime_open(auto) wrote to stderr with HSAMONO_LOG unset: %s", err);
  free(err);
}
END_TEST

/* ... and with HSAMONO_LOG=warn the fallback is told, once, through the log. */
START_TEST(auto_fallback_logged) {
  setenv("HSAMONO_LOG", "warn", 1);
  bool sim = false;
  char *err = stderr_of_auto_open(&sim);
  if (sim)
    ck_assert_msg(strstr(err, "hsa-mono:") && strstr(err, "running on the software HSA agent"),
                  "HSAMONO_LOG=warn: no fallback notice in \"%s\"", err);
  else
    ck_assert_msg(strstr(err, "software HSA agent") == NULL, "ROCr chosen, yet: %s", err);
  free(err);
}
END_TEST

/* ---------------------------------------------------------------- memory */

START_TEST(memory_pools) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  void *p[HM_POOL_KINDS];
  for (int k = 0; k < HM_POOL_KINDS; k++) {
    ck_assert_int_eq(hm_mem_alloc(a, (hm_pool_kind)k, 10000, 256, &p[k]), HM_OK);
    ck_assert_uint_eq((uintptr_t)p[k] % 256, 0);
    ck_assert_uint_ge(hm_mem_size(rt, p[k]), 10000);
    ck_assert_uint_ge(hm_mem_size(rt, (char *)p[k] + 9999), 10000);
  }
  /* fill device memory, copy it to host memory, read it there */
  uint32_t *host = p[HM_POOL_HOST];
  ck_assert_int_eq(hm_mem_fill(rt, p[HM_POOL_COARSE], 0xa5a5f00d, 2500), HM_OK);
  hm_signal none = {0};
  ck_assert_int_eq(hm_mem_copy(rt, host, p[HM_POOL_COARSE], 10000, none), HM_OK);
  for (int i = 0; i < 2500; i++) ck_assert_uint_eq(host[i], 0xa5a5f00d);
  /* an asynchronous copy with a completion signal */
  hm_signal done;
  ck_assert_int_eq(hm_signal_create(rt, 1, &done), HM_OK);
  ck_assert_int_eq(hm_mem_fill(rt, p[HM_POOL_UNCACHED], 7, 2500), HM_OK);
  ck_assert_int_eq(hm_mem_copy(rt, host, p[HM_POOL_UNCACHED], 10000, done), HM_OK);
  ck_assert_int_eq(hm_signal_wait(rt, done, HM_WAIT_EQ, 0, RUN_TIMEOUT_NS, false, NULL), HM_OK);
  ck_assert_uint_eq(host[2499], 7);
  /* peers and the host */
  hm_agent *all[16];
  unsigned n = hm_agent_count(rt) < 16 ? hm_agent_count(rt) : 16;
  for (unsigned i = 0; i < n; i++) all[i] = hm_agent_get(rt, i);
  ck_assert_int_eq(hm_mem_allow(rt, p[HM_POOL_COARSE], all, n, true), HM_OK);
  for (int k = 0; k < HM_POOL_KINDS; k++) ck_assert_int_eq(hm_mem_free(rt, p[k]), HM_OK);
  ck_assert_uint_eq(hm_mem_size(rt, p[0]), 0);
  /* leave some allocated: close frees them */
  void *q;
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_UNCACHED, 1 << 20, 0, &q), HM_OK);
  hm_runtime_close(rt);
}
END_TEST

START_TEST(memory_errors) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  void *p = (void *)1;
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, 0, 0, &p), HM_ERR_INVALID_ARG);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, 64, 3, &p), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, 64, 1 << 20, &p), HM_ERR_UNSUPPORTED);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_KINDS, 64, 0, &p), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_alloc(NULL, HM_POOL_COARSE, 64, 0, &p), HM_ERR_INVALID_ARG);
  char junk[256] = {0}; /* not an agent of this runtime */
  ck_assert_int_eq(hm_mem_alloc((hm_agent *)junk, HM_POOL_COARSE, 64, 0, &p), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, 64, 0, NULL), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, 8192, 0, &p), HM_OK);
  ck_assert_int_eq(hm_mem_free(rt, (char *)p + 8), HM_ERR_INVALID_ARG); /* not the start */
  int local;
  ck_assert_int_eq(hm_mem_free(rt, &local), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_fill(rt, (char *)p + 2, 0, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_fill(rt, p, 0, 8192 / 4 + 1), HM_ERR_INVALID_ARG);
  hm_signal none = {0};
  ck_assert_int_eq(hm_mem_copy(rt, p, &local, 4, none), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_copy(rt, p, p, 0, none), HM_ERR_INVALID_ARG);
  /* plain host memory is refused, clearly, on either side (docs/api.md "Memory a caller passes") */
  char *plain = malloc(8192);
  ck_assert_ptr_nonnull(plain);
  ck_assert_int_eq(hm_mem_copy(rt, p, plain, 64, none), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "the source") && strstr(hm_errmsg(), "HM_POOL_HOST"), "%s", hm_errmsg());
  ck_assert_int_eq(hm_mem_copy(rt, plain, p, 64, none), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "the destination") && strstr(hm_errmsg(), "not malloc"), "%s", hm_errmsg());
  free(plain);
  ck_assert_int_eq(hm_mem_copy(rt, p, p, 8193, none), HM_ERR_INVALID_ARG);
  ck_assert_msg(strstr(hm_errmsg(), "run past the end"), "%s", hm_errmsg());
  ck_assert_int_eq(hm_mem_allow(rt, &local, &a, 1, false), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_allow(rt, p, NULL, 0, false), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_mem_free(rt, p), HM_OK);
  ck_assert_int_eq(hm_mem_free(rt, p), HM_ERR_INVALID_ARG); /* twice */
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- signals */

START_TEST(signals) {
  hm_runtime *rt = t_open();
  hm_signal s;
  ck_assert_int_eq(hm_signal_create(rt, 5, &s), HM_OK);
  ck_assert_int_eq(hm_signal_load(rt, s), 5);
  int64_t seen = 0;
  ck_assert_int_eq(hm_signal_wait(rt, s, HM_WAIT_EQ, 5, 1000000, false, &seen), HM_OK);
  ck_assert_int_eq(hm_signal_wait(rt, s, HM_WAIT_GTE, 5, 1000000, true, &seen), HM_OK);
  ck_assert_int_eq(hm_signal_wait(rt, s, HM_WAIT_NE, 4, 1000000, false, &seen), HM_OK);
  uint64_t t0 = hm_now_test_ns();
  ck_assert_int_eq(hm_signal_wait(rt, s, HM_WAIT_LT, 5, 30000000, false, &seen), HM_ERR_TIMEOUT);
  ck_assert_uint_ge(hm_now_test_ns() - t0, 30000000);
  ck_assert_int_eq(seen, 5);
  hm_signal_store(rt, s, 2);
  ck_assert_int_eq(hm_signal_wait(rt, s, HM_WAIT_LT, 5, 1000000, false, &seen), HM_OK);
  ck_assert_int_eq(seen, 2);
  ck_assert_int_eq(hm_signal_wait(rt, s, (hm_wait_cond)9, 0, 1, false, NULL), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_signal_destroy(rt, s), HM_OK);
  ck_assert_int_eq(hm_signal_destroy(rt, s), HM_ERR_INVALID_ARG);
  hm_signal zero = {0};
  ck_assert_int_eq(hm_signal_wait(rt, zero, HM_WAIT_EQ, 0, 1, false, NULL), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_signal_create(rt, 0, NULL), HM_ERR_INVALID_ARG);
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- programs and kernels */

START_TEST(programs) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_program *p = t_program(a);
  const hm_kernel *k = t_kernel(p, "st_barrier");
  const hm_kernel_info *in = hm_kernel_info_of(k);
  ck_assert_str_eq(in->name, "st_barrier");
  ck_assert_uint_ne(in->object, 0);
  ck_assert_uint_eq(in->kernarg_size, sizeof(struct st_barrier_args));
  ck_assert_uint_eq(in->group_bytes, ST_BARRIER_LDS_WORDS * 4);
  ck_assert_uint_eq(in->private_bytes, 0);
  ck_assert_uint_eq(in->cta_size, 512);
  ck_assert_uint_eq(in->residency.ctas_per_cu, 4);
  const hm_kernel *none = (const hm_kernel *)1;
  ck_assert_int_eq(hm_kernel_get(p, "no_such_kernel", &none), HM_ERR_NOT_FOUND);
  ck_assert_ptr_null(none);
  ck_assert_int_eq(hm_kernel_get(p, NULL, &none), HM_ERR_INVALID_ARG);
  /* a second program on the same agent, then unload both */
  hm_program *p2 = t_program(a);
  hm_program_unload(p2);
  hm_program_unload(p);
  /* a code object for the other target is refused, naming both target ids */
  const char *other = strcmp(hm_agent_info_of(a)->tid.processor, "gfx950") == 0 ? "gfx942" : "gfx950";
  char path[512];
  snprintf(path, sizeof path, "%s/device/hsamono-%s.co", getenv("HSAMONO_BUILD_DIR"), other);
  char host[512];
  snprintf(host, sizeof host, "%s/device/hsamono-host-%s.so", getenv("HSAMONO_BUILD_DIR"), other);
  hm_program *bad = (hm_program *)1;
  ck_assert_int_eq(hm_program_load_file(a, path, host, &bad), HM_ERR_UNSUPPORTED);
  ck_assert_ptr_null(bad);
  ck_assert_msg(strstr(hm_errmsg(), other) && strstr(hm_errmsg(), hm_agent_info_of(a)->isa), "%s", hm_errmsg());
  /* the right one from files works too */
  snprintf(path, sizeof path, "%s/device/hsamono-%s.co", getenv("HSAMONO_BUILD_DIR"), hm_agent_info_of(a)->tid.processor);
  snprintf(host, sizeof host, "%s/device/hsamono-host-%s.so", getenv("HSAMONO_BUILD_DIR"), hm_agent_info_of(a)->tid.processor);
  ck_assert_msg(hm_program_load_file(a, path, host, &p) == HM_OK, "%s", hm_errmsg());
  /* corrupt input and missing files */
  ck_assert_int_eq(hm_program_load_file(a, "/nonexistent.co", NULL, &bad), HM_ERR_NOT_FOUND);
  ck_assert_int_eq(hm_program_load_image(a, "garbage", 7, "x", 1, &bad), HM_ERR_FORMAT);
  ck_assert_int_eq(hm_program_load(NULL, &bad), HM_ERR_INVALID_ARG);
  hm_runtime_close(rt); /* unloads p */
}
END_TEST

/* ---------------------------------------------------------------- the self-test kernels */

START_TEST(kernel_ids) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_ids");
  const uint32_t ctas = 3, size = 256;
  uint32_t *out = t_host(a, ctas * size * 32);
  struct st_ids_args args = {.out = (uint64_t)(uintptr_t)out};
  t_run(q, k, ctas, &args, sizeof args);
  for (uint32_t g = 0; g < ctas * size; g++) {
    const uint32_t *o = out + 8 * g;
    ck_assert_uint_eq(o[0], g % size);
    ck_assert_uint_eq(o[1], g / size);
    ck_assert_uint_eq(o[2], ctas);
    ck_assert_uint_eq(o[3], size);
    ck_assert_uint_eq(o[4], g % 64);
    ck_assert_uint_eq(o[5], (g % size) / 64);
    ck_assert_uint_eq(o[6], size / 64);
    ck_assert_uint_eq(o[7], g);
  }
  hm_runtime_close(rt);
}
END_TEST

START_TEST(kernel_barrier) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_barrier");
  const uint32_t ctas = 4, n = 512, rounds = 10;
  uint32_t *out = t_host(a, ctas * n * 4);
  struct st_barrier_args args = {.out = (uint64_t)(uintptr_t)out, .rounds = rounds};
  t_run(q, k, ctas, &args, sizeof args);
  for (uint32_t c = 0; c < ctas; c++)
    for (uint32_t l = 0; l < n; l++) {
      uint32_t acc = 0;
      for (uint32_t r = 0; r < rounds; r++) {
        uint32_t src = (l * 7u + r + 1u) % n;
        acc = acc * 3u + (src * 31u + r * 7u + c);
      }
      ck_assert_uint_eq(out[c * n + l], acc);
    }
  hm_runtime_close(rt);
}
END_TEST

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

START_TEST(kernel_wave) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_wave");
  const uint32_t n = 512;
  uint32_t *in = t_host(a, n * 4), *out = t_host(a, n * 32);
  /* floats with varied exponents, so the two butterfly orders can round differently */
  for (uint32_t i = 0; i < n; i++) in[i] = u_of((float)((i * 2654435761u) % 1000) * (i % 3 ? 0.001f : 10.0f) + 0.5f);
  struct st_wave_args args = {.in = (uint64_t)(uintptr_t)in, .out = (uint64_t)(uintptr_t)out};
  t_run(q, k, n / 256, &args, sizeof args);
  for (uint32_t w = 0; w < n / 64; w++) {
    const uint32_t *v = in + 64 * w;
    uint64_t ballot = 0;
    uint32_t mx = 0;
    for (int l = 0; l < 64; l++) {
      ballot |= (uint64_t)(v[l] & 1) << l;
      mx = v[l] > mx ? v[l] : mx;
    }
    /* the sums in the butterfly orders, lane 0's view (every lane must agree) */
    float down[64], up[64];
    for (int l = 0; l < 64; l++) down[l] = up[l] = f_of(v[l]);
    for (int off = 32; off >= 1; off >>= 1) {
      float t[64];
      for (int l = 0; l < 64; l++) t[l] = down[l] + down[l ^ off];
      memcpy(down, t, sizeof t);
    }
    for (int off = 1; off <= 32; off <<= 1) {
      float t[64];
      for (int l = 0; l < 64; l++) t[l] = up[l] + up[l ^ off];
      memcpy(up, t, sizeof t);
    }
    for (int l = 0; l < 64; l++) {
      const uint32_t *o = out + 8 * (64 * w + l);
      ck_assert_uint_eq(o[0], v[(l + 1) % 64]);
      ck_assert_uint_eq(o[1], v[l ^ 5]);
      ck_assert_uint_eq(o[2], (uint32_t)ballot);
      ck_assert_uint_eq(o[3], (uint32_t)(ballot >> 32));
      ck_assert_uint_eq(o[4], v[0]);
      ck_assert_uint_eq(o[5], u_of(down[0]));
      ck_assert_uint_eq(o[6], u_of(up[0]));
      ck_assert_uint_eq(o[7], mx);
    }
  }
  hm_runtime_close(rt);
}
END_TEST

START_TEST(kernel_atomics) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_atomic");
  const uint32_t ctas = 8, n = ctas * 256;
  uint32_t *c = t_host(a, 64);
  c[3] = 0xffffffffu;
  c[7] = 0xffffffffu;
  struct st_atomic_args args = {.counters = (uint64_t)(uintptr_t)c};
  t_run(q, k, ctas, &args, sizeof args);
  ck_assert_uint_eq(c[0], n);
  ck_assert_uint_eq(c[1], n * (n - 1) / 2);
  ck_assert_uint_eq(c[2], n - 1);
  ck_assert_uint_eq(c[3], 5);
  ck_assert_uint_eq(c[4], 0xffffffffu);
  ck_assert_uint_eq(c[5], 2 * n);
  ck_assert(c[6] >= 1 && c[6] <= n);
  uint64_t sum = 0;
  for (uint64_t g = 0; g < n; g++) sum += g << 20;
  uint64_t got;
  memcpy(&got, &c[8], 8);
  ck_assert_uint_eq(got, sum);
  ck_assert_uint_eq(c[7], 0);
  hm_runtime_close(rt);
}
END_TEST

START_TEST(kernel_memory_policies) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_memory");
  const uint32_t n = 1001; /* not a multiple of 4: the buffer copy's last vector is partly out of range */
  uint32_t *in = t_host(a, n * 4), *out = t_host(a, n * 4), *out2 = t_host(a, (n + 3) / 4 * 16);
  for (uint32_t i = 0; i < n; i++) in[i] = i * 0x9e3779b9u + 1;
  const uint32_t cps[] = {0, 2, 16, 17};
  for (int c = 0; c < 4; c++) {
    memset(out, 0, n * 4);
    memset(out2, 0xff, (n + 3) / 4 * 16);
    struct st_memory_args args = {.in = (uint64_t)(uintptr_t)in, .out = (uint64_t)(uintptr_t)out,
                                  .out2 = (uint64_t)(uintptr_t)out2, .n = n, .cp = cps[c]};
    t_run(q, k, 2, &args, sizeof args);
    for (uint32_t i = 0; i < n; i++) {
      ck_assert_uint_eq(out[i], in[i]);
      ck_assert_uint_eq(out2[i], in[i]);
    }
    for (uint32_t i = n; i < (n + 3) / 4 * 4; i++) ck_assert_uint_eq(out2[i], 0); /* buffer range check */
  }
  hm_runtime_close(rt);
}
END_TEST

START_TEST(kernel_bounded_poll) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_poll");
  uint32_t *flag = t_host(a, 64), *out = t_host(a, 64);
  struct st_poll_args args = {.flag = (uint64_t)(uintptr_t)flag, .out = (uint64_t)(uintptr_t)out, .ticks = 2000000};
  t_run(q, k, 1, &args, sizeof args); /* 20 ms and nobody raises the flag */
  ck_assert_uint_eq(out[0], 2);
  ck_assert_uint_gt(out[1], 0);
  flag[0] = 1;
  t_run(q, k, 1, &args, sizeof args);
  ck_assert_uint_eq(out[0], 1);
  hm_runtime_close(rt);
}
END_TEST

/* v_mfma_f32_16x16x4_f32 through a kernel: A[i][k] sits in lane 16k + i, B[k][j] in lane 16k + j,
 * D[i][j] in lane 16(i/4) + j, register i%4 (CDNA3 ISA; Matrix Instruction Calculator). */
START_TEST(kernel_mfma) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_mfma");
  uint32_t *A = t_host(a, 64 * 32), *B = t_host(a, 64 * 32);
  float *C = t_host(a, 64 * 64), *D = t_host(a, 64 * 64);
  float am[16][4], bm[4][16];
  for (int i = 0; i < 16; i++)
    for (int kk = 0; kk < 4; kk++) am[i][kk] = (float)(i + 2 * kk - 7), bm[kk][i] = (float)(3 * kk - i + 1);
  for (int l = 0; l < 64; l++) {
    A[8 * l] = u_of(am[l % 16][l / 16]);
    B[8 * l] = u_of(bm[l / 16][l % 16]);
    for (int r = 0; r < 4; r++) C[16 * l + r] = (float)(l + r);
  }
  struct st_mfma_args args = {.a = (uint64_t)(uintptr_t)A, .b = (uint64_t)(uintptr_t)B, .c = (uint64_t)(uintptr_t)C,
                              .d = (uint64_t)(uintptr_t)D, .op = ST_MFMA_F32_16X16X4_F32};
  t_run(q, k, 1, &args, sizeof args);
  for (int l = 0; l < 64; l++)
    for (int r = 0; r < 4; r++) {
      int i = 4 * (l / 16) + r, j = l % 16;
      float want = (float)(l + r);
      for (int kk = 0; kk < 4; kk++) want += am[i][kk] * bm[kk][j];
      ck_assert_msg(D[16 * l + r] == want, "lane %d reg %d: %g != %g", l, r, D[16 * l + r], want);
    }
  hm_runtime_close(rt);
}
END_TEST

/* The dialect's hardware conversions through a kernel: every fp8 code decoded, and every decoded
 * value and midpoint in range encoded (OCP e4m3 on gfx950, FNUZ on gfx942), as formats.h
 * computes them; bf16 rounding likewise. */
START_TEST(kernel_conversions) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  bool fnuz = strcmp(hm_agent_info_of(a)->tid.processor, "gfx942") == 0;
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_cvt");
  uint32_t *in = t_host(a, 4096 * 8), *out = t_host(a, 4096 * 4);
  /* decode: byte c in the low byte */
  for (uint32_t c = 0; c < 256; c++) in[c] = c;
  struct st_cvt_args args = {.in = (uint64_t)(uintptr_t)in, .out = (uint64_t)(uintptr_t)out, .n = 256,
                             .op = ST_CVT_FP8_F32};
  t_run(q, k, 1, &args, sizeof args);
  for (uint32_t c = 0; c < 256; c++) {
    float want = fnuz ? fmt_e4m3fnuz_decode((u8)c) : fmt_e4m3_decode((u8)c);
    if (want != want) ck_assert_msg(f_of(out[c]) != f_of(out[c]), "code 0x%02x: not NaN", c);
    else ck_assert_msg(out[c] == u_of(want), "code 0x%02x: 0x%08x != 0x%08x", c, out[c], u_of(want));
  }
  /* encode: values and midpoints between neighbours, pairs packed into the low word */
  float vals[1024];
  uint32_t nv = 0;
  float maxv = fnuz ? FMT_E4M3FNUZ_MAX : FMT_E4M3_MAX;
  for (uint32_t c = 0; c < 128; c++) {
    float v = fnuz ? fmt_e4m3fnuz_decode((u8)c) : fmt_e4m3_decode((u8)c), nxt;
    if (v != v || v > maxv) continue;
    vals[nv++] = v, vals[nv++] = -v;
    nxt = fnuz ? fmt_e4m3fnuz_decode((u8)(c + 1)) : fmt_e4m3_decode((u8)(c + 1));
    if (c < 127 && nxt == nxt && nxt <= maxv) vals[nv++] = (v + nxt) / 2, vals[nv++] = -(v + nxt) / 2;
  }
  if (nv & 1) vals[nv++] = 0.0f;
  for (uint32_t i = 0; i < nv; i++) in[i] = u_of(vals[i]);
  args.n = nv / 2, args.op = ST_CVT_PK_FP8;
  t_run(q, k, 1, &args, sizeof args);
  for (uint32_t i = 0; i < nv; i++) {
    u8 want = fnuz ? fmt_e4m3fnuz_encode(vals[i]) : fmt_e4m3_encode(vals[i]);
    u8 got = (u8)(out[i / 2] >> (8 * (i % 2)));
    ck_assert_msg(got == want, "%g: 0x%02x != 0x%02x", (double)vals[i], got, want);
  }
  /* bf16: round to nearest even on a spread of values */
  for (uint32_t i = 0; i < 4096; i++) in[i] = i * 0x9e3779b1u;
  args.n = 4096, args.op = ST_CVT_BF16;
  t_run(q, k, 4, &args, sizeof args);
  for (uint32_t i = 0; i < 4096; i++)
    if (f_of(in[i]) == f_of(in[i])) ck_assert_uint_eq(out[i], fmt_bf16_from_f32(f_of(in[i])));
  hm_runtime_close(rt);
}
END_TEST

/* A kernel that traps fails its queue: the next call returns the fault with the reason, and the
 * queue refuses further work. */
START_TEST(kernel_trap_faults_queue) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q;
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  const hm_kernel *k = t_kernel(t_program(a), "st_mfma");
  void *buf = t_host(a, 64 * 64 * 4);
  struct st_mfma_args args = {.a = (uint64_t)(uintptr_t)buf, .b = (uint64_t)(uintptr_t)buf,
                              .c = (uint64_t)(uintptr_t)buf, .d = (uint64_t)(uintptr_t)buf, .op = 99};
  hm_status s = t_run_status(q, k, 1, &args, sizeof args);
  ck_assert_int_eq(s, HM_ERR_QUEUE_FAULT);
  if (hm_runtime_is_sim(rt)) ck_assert_msg(strstr(hm_errmsg(), "st_mfma") != NULL, "%s", hm_errmsg());
  ck_assert_int_eq(hm_queue_status(q), HM_ERR_QUEUE_FAULT);
  ck_assert_int_eq(t_run_status(q, k, 1, &args, sizeof args), HM_ERR_QUEUE_FAULT);
  /* another queue still works */
  hm_queue *q2;
  ck_assert_int_eq(hm_queue_create(a, 64, &q2), HM_OK);
  const hm_kernel *cnt = t_kernel(t_program(a), "st_count");
  uint32_t *c = t_host(a, 64);
  struct st_count_args ca = {.counter = (uint64_t)(uintptr_t)c};
  t_run(q2, cnt, 3, &ca, sizeof ca);
  ck_assert_uint_eq(c[0], 3);
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- validation */

START_TEST(dispatch_errors) {
  hm_runtime *rt = t_open();
  hm_agent *a = hm_agent_get(rt, 0);
  hm_queue *q = (hm_queue *)1;
  ck_assert_int_eq(hm_queue_create(a, 100, &q), HM_ERR_INVALID_ARG); /* not a power of two */
  ck_assert_ptr_null(q);
  ck_assert_int_eq(hm_queue_create(a, 16, &q), HM_ERR_INVALID_ARG);  /* below the minimum */
  ck_assert_int_eq(hm_queue_create(NULL, 64, &q), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_queue_create(a, 64, &q), HM_OK);
  hm_program *p = t_program(a);
  const hm_kernel *k = t_kernel(p, "st_count");
  uint32_t *c = t_host(a, 64);
  struct st_count_args ca = {.counter = (uint64_t)(uintptr_t)c};
  void *ka = t_kernarg(a, &ca, sizeof ca);
  hm_dispatch ok = {.kernel = k, .ctas = 1, .kernarg = ka, .barrier = true};
  hm_dispatch d;
  d = ok, d.kernel = NULL;
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  d = ok, d.ctas = 0;
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  d = ok, d.cta_size = 128; /* the kernel requires 64 */
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  d = ok, d.kernarg = NULL;
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  d = ok, d.kernarg = (char *)ka + 4; /* unaligned */
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  d = ok, d.kernarg = &ca; /* not memory of the runtime */
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  {
    /* arguments that start inside an allocation but run past its end: st_memory's 32 bytes
     * placed 16 bytes before the end of a 4 KB kernarg allocation */
    void *page;
    ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_KERNARG, 4096, 0, &page), HM_OK);
    hm_dispatch m = {.kernel = t_kernel(p, "st_memory"), .ctas = 1, .kernarg = (char *)page + 4096 - 16};
    ck_assert_int_eq(hm_queue_dispatch(q, &m, 1), HM_ERR_INVALID_ARG);
    ck_assert_msg(strstr(hm_errmsg(), "are not") && strstr(hm_errmsg(), "bytes of this runtime's memory"), "%s",
                  hm_errmsg());
    ck_assert_int_eq(hm_mem_free(rt, page), HM_OK);
  }
  d = ok, d.dynamic_lds = 1u << 30;
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  d = ok, d.acquire = (hm_fence)3;
  ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_queue_dispatch(q, &ok, 0), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_queue_dispatch(q, &ok, 65), HM_ERR_INVALID_ARG);
  /* a kernel of another agent's program */
  if (hm_agent_count(rt) > 1) {
    const hm_kernel *k1 = t_kernel(t_program(hm_agent_get(rt, 1)), "st_count");
    d = ok, d.kernel = k1;
    ck_assert_int_eq(hm_queue_dispatch(q, &d, 1), HM_ERR_INVALID_ARG);
  }
  /* none of the refused packets was written: the queue is healthy and runs the good one */
  ck_assert_int_eq(hm_queue_dispatch(q, &ok, 1), HM_OK);
  ck_assert_int_eq(hm_queue_wait_idle(q, RUN_TIMEOUT_NS), HM_OK);
  ck_assert_uint_eq(c[0], 1);
  ck_assert_int_eq(hm_queue_status(q), HM_OK);
  hm_barrier_pkt b = {.acquire = (hm_fence)7};
  ck_assert_int_eq(hm_queue_barrier(q, &b), HM_ERR_INVALID_ARG);
  ck_assert_int_eq(hm_queue_barrier(NULL, &b), HM_ERR_INVALID_ARG);
  hm_runtime_close(rt);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("runtime");
  TCase *tc = tcase_create("runtime");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, open_and_agents);
  tcase_add_test(tc, open_errors);
  tcase_add_test(tc, auto_is_silent);
  tcase_add_test(tc, auto_fallback_logged);
  tcase_add_test(tc, memory_pools);
  tcase_add_test(tc, memory_errors);
  tcase_add_test(tc, signals);
  tcase_add_test(tc, programs);
  tcase_add_test(tc, kernel_ids);
  tcase_add_test(tc, kernel_barrier);
  tcase_add_test(tc, kernel_wave);
  tcase_add_test(tc, kernel_atomics);
  tcase_add_test(tc, kernel_memory_policies);
  tcase_add_test(tc, kernel_bounded_poll);
  tcase_add_test(tc, kernel_mfma);
  tcase_add_test(tc, kernel_conversions);
  tcase_add_test(tc, kernel_trap_faults_queue);
  tcase_add_test(tc, dispatch_errors);
  suite_add_tcase(s, tc);
  return s;
}
