/* hsa/rt_program.c: loading code objects through the HSA loader (reader, executable, freeze),
 * refusing one built for another target, and reading each kernel's symbol and resources. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_embedded.h"
#include "rt_internal.h"

static hm_status read_kernel(hm_program *p, const hm_co_kernel *m, hm_kernel *k) {
  hm_agent *a = p->agent;
  const struct hm_hsa_api *api = &a->rt->api;
  hsa_executable_symbol_t sym;
  hsa_status_t s = api->hsa_executable_get_symbol_by_name(p->exe, m->symbol, &a->h, &sym);
  if (s != HSA_STATUS_SUCCESS) return hm_hsa_fail(a->rt, s, "kernel %s: symbol %s", m->name, m->symbol);
  hm_kernel_info *in = &k->info;
  in->name = m->name;
  in->meta = m;
  if ((s = api->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &in->object)) ||
      (s = api->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                                               &in->kernarg_size)) ||
      (s = api->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT,
                                               &in->kernarg_align)) ||
      (s = api->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                                               &in->group_bytes)) ||
      (s = api->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                                               &in->private_bytes)))
    return hm_hsa_fail(a->rt, s, "kernel %s: symbol info", m->name);
  in->cta_size = m->reqd_workgroup_size[0];
  in->max_cta_size = m->max_flat_workgroup_size ? m->max_flat_workgroup_size : 1024;
  if (in->kernarg_align == 0) in->kernarg_align = m->kernarg_align;
  hm_kernel_resources res;
  if (hm_kernel_resources_of(m, 0, 0, &res) == HM_OK) hm_residency_compute(&a->info.limits, &res, &in->residency);
  /* Hidden arguments would have to be filled at each dispatch; the project's kernels read the
   * dispatch packet instead, so a kernel declaring any is refused (docs/decisions.md). */
  for (uint32_t i = 0; i < m->nargs && !k->refused[0]; i++)
    if (m->args[i].hidden && strcmp(m->args[i].value_kind, "hidden_none") != 0)
      snprintf(k->refused, sizeof k->refused,
               "kernel %s declares the hidden argument %s (the runtime fills none: read the dispatch packet through "
               "device/dev.h instead)",
               m->name, m->args[i].value_kind);
  k->prog = p;
  return HM_OK;
}

hm_status hm_program_load_image(hm_agent *a, const void *image, size_t size, const void *host_object,
                                size_t host_size, hm_program **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_program_load: out is NULL");
  *out = NULL;
  if (!a || !hm_rt_owns_agent(a->rt, a)) return hm_fail(HM_ERR_INVALID_ARG, "hm_program_load: unknown agent");
  if (!image || size == 0) return hm_fail(HM_ERR_INVALID_ARG, "hm_program_load: no code object");
  hm_runtime *rt = a->rt;
  if (rt->sim && (!host_object || host_size == 0))
    return hm_fail(HM_ERR_INVALID_ARG,
                   "the software agent needs the host kernel object with the code object (hsamono-host-%s.so)",
                   a->info.tid.processor);
  hm_program *p = calloc(1, sizeof *p);
  if (!p) return hm_fail(HM_ERR_NO_MEMORY, "out of memory");
  p->agent = a;
  hm_status st = hm_codeobj_parse(image, size, &p->co);
  if (st) {
    free(p);
    return hm_fail_prefix(st, "agent %u", a->index);
  }
  if (!hm_target_compatible(&p->co->tid, &a->info.tid)) {
    st = hm_fail(HM_ERR_UNSUPPORTED, "a code object for %s cannot run on agent %u (%s)", p->co->target, a->index,
                 a->info.isa);
    hm_codeobj_free(p->co);
    free(p);
    return st;
  }
  const struct hm_hsa_api *api = &rt->api;
  hsa_profile_t profile = HSA_PROFILE_BASE;
  api->hsa_agent_get_info(a->h, HSA_AGENT_INFO_PROFILE, &profile);
  bool have_reader = false, have_exe = false;
  hsa_status_t s = api->hsa_code_object_reader_create_from_memory(image, size, &p->reader);
  if (s != HSA_STATUS_SUCCESS) {
    st = hm_hsa_fail(rt, s, "code object reader");
    goto fail;
  }
  have_reader = true;
  s = api->hsa_executable_create_alt(profile, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &p->exe);
  if (s != HSA_STATUS_SUCCESS) {
    st = hm_hsa_fail(rt, s, "hsa_executable_create_alt");
    goto fail;
  }
  have_exe = true;
  if (rt->sim && (s = api->sim_set_host_object(p->exe, host_object, host_size)) != HSA_STATUS_SUCCESS) {
    st = hm_hsa_fail(rt, s, "handing the host kernel object to the software agent");
    goto fail;
  }
  if ((s = api->hsa_executable_load_agent_code_object(p->exe, a->h, p->reader, NULL, NULL)) != HSA_STATUS_SUCCESS) {
    st = hm_hsa_fail(rt, s, "loading the %s code object on agent %u", p->co->tid.processor, a->index);
    goto fail;
  }
  if ((s = api->hsa_executable_freeze(p->exe, NULL)) != HSA_STATUS_SUCCESS) {
    st = hm_hsa_fail(rt, s, "hsa_executable_freeze");
    goto fail;
  }
  p->kernels = calloc(p->co->nkernels ? p->co->nkernels : 1, sizeof *p->kernels);
  if (!p->kernels) {
    st = hm_fail(HM_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  p->nkernels = p->co->nkernels;
  for (unsigned i = 0; i < p->nkernels; i++)
    if ((st = read_kernel(p, &p->co->kernels[i], &p->kernels[i]))) goto fail;
  pthread_mutex_lock(&rt->lock);
  p->next = rt->programs;
  rt->programs = p;
  pthread_mutex_unlock(&rt->lock);
  *out = p;
  return HM_OK;
fail:
  if (have_exe) api->hsa_executable_destroy(p->exe);
  if (have_reader) api->hsa_code_object_reader_destroy(p->reader);
  free(p->kernels);
  hm_codeobj_free(p->co);
  free(p);
  return st;
}

hm_status hm_program_load(hm_agent *a, hm_program **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_program_load: out is NULL");
  *out = NULL;
  if (!a || !hm_rt_owns_agent(a->rt, a)) return hm_fail(HM_ERR_INVALID_ARG, "hm_program_load: unknown agent");
  const char *proc = a->info.tid.processor;
  const struct hm_embedded_blob *co = hm_embedded_find(proc, HM_BLOB_CODE_OBJECT);
  if (!co) {
    char built[128] = "";
    const struct hm_embedded_blob *b;
    for (unsigned i = 0; (b = hm_embedded_at(i)); i++)
      if (b->kind == HM_BLOB_CODE_OBJECT && strlen(built) + strlen(b->target) + 3 < sizeof built)
        strcat(strcat(built, built[0] ? ", " : ""), b->target);
    return hm_fail(HM_ERR_UNSUPPORTED, "agent %u is a %s; this build has code objects for %s (meson -Dgpu_targets)",
                   a->index, proc, built[0] ? built : "no target");
  }
  const struct hm_embedded_blob *host = hm_embedded_find(proc, HM_BLOB_HOST_OBJECT);
  return hm_program_load_image(a, co->data, hm_embedded_size(co), host ? host->data : NULL, hm_embedded_size(host), out);
}

static hm_status read_whole(const char *path, void **buf, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return hm_fail(HM_ERR_NOT_FOUND, "%s: cannot open", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (len <= 0 || len > (1l << 30)) {
    fclose(f);
    return hm_fail(HM_ERR_IO, "%s: empty or larger than 1 GiB", path);
  }
  *buf = malloc((size_t)len);
  if (!*buf) {
    fclose(f);
    return hm_fail(HM_ERR_NO_MEMORY, "%s: out of memory", path);
  }
  size_t got = fread(*buf, 1, (size_t)len, f);
  fclose(f);
  if (got != (size_t)len) {
    free(*buf);
    return hm_fail(HM_ERR_IO, "%s: short read", path);
  }
  *n = (size_t)len;
  return HM_OK;
}

hm_status hm_program_load_file(hm_agent *a, const char *path, const char *host_object_path, hm_program **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_program_load_file: out is NULL");
  *out = NULL;
  if (!path) return hm_fail(HM_ERR_INVALID_ARG, "hm_program_load_file: no path");
  void *img = NULL, *host = NULL;
  size_t n = 0, hn = 0;
  hm_status s = read_whole(path, &img, &n);
  if (!s && host_object_path) s = read_whole(host_object_path, &host, &hn);
  if (!s) s = hm_program_load_image(a, img, n, host, hn, out);
  free(img);
  free(host);
  return s;
}

static void unload(hm_program *p) {
  const struct hm_hsa_api *api = &p->agent->rt->api;
  api->hsa_executable_destroy(p->exe);
  api->hsa_code_object_reader_destroy(p->reader);
  free(p->kernels);
  hm_codeobj_free(p->co);
  free(p);
}

void hm_program_unload(hm_program *p) {
  if (!p) return;
  hm_runtime *rt = p->agent->rt;
  pthread_mutex_lock(&rt->lock);
  for (hm_program **pp = &rt->programs; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  pthread_mutex_unlock(&rt->lock);
  unload(p);
}

void hm_program_unload_all(hm_runtime *rt) {
  while (rt->programs) {
    hm_program *p = rt->programs;
    rt->programs = p->next;
    unload(p);
  }
}

hm_status hm_kernel_get(hm_program *p, const char *name, const hm_kernel **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_kernel_get: out is NULL");
  *out = NULL;
  if (!p || !name) return hm_fail(HM_ERR_INVALID_ARG, "hm_kernel_get: NULL argument");
  for (unsigned i = 0; i < p->nkernels; i++)
    if (strcmp(p->kernels[i].info.name, name) == 0) {
      if (p->kernels[i].refused[0]) return hm_fail(HM_ERR_UNSUPPORTED, "%s", p->kernels[i].refused);
      *out = &p->kernels[i];
      return HM_OK;
    }
  return hm_fail(HM_ERR_NOT_FOUND, "no kernel %s in the %s code object", name, p->co->tid.processor);
}

const hm_kernel_info *hm_kernel_info_of(const hm_kernel *k) { return k ? &k->info : NULL; }
