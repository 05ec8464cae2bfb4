/* hsa/sim/executable.c: code-object readers, executables and kernel symbols. The gfx code object
 * gives each kernel's resources; the host kernel object (same sources built as C) gives the code. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hm_sim_ext.h"
#include "sim.h"

/* Valid kernel objects, so a packet naming anything else is reported, not followed. */
static pthread_mutex_t kreg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_kernel **kreg;
static unsigned nkreg, kreg_cap;

static void kreg_add(struct sim_kernel *k) {
  pthread_mutex_lock(&kreg_lock);
  if (nkreg == kreg_cap) {
    unsigned cap = kreg_cap ? 2 * kreg_cap : 64;
    struct sim_kernel **n = realloc(kreg, cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&kreg_lock);
      return;
    }
    kreg = n, kreg_cap = cap;
  }
  kreg[nkreg++] = k;
  pthread_mutex_unlock(&kreg_lock);
}

static void kreg_remove(struct sim_kernel *k) {
  pthread_mutex_lock(&kreg_lock);
  for (unsigned i = 0; i < nkreg; i++)
    if (kreg[i] == k) {
      kreg[i] = kreg[--nkreg];
      break;
    }
  pthread_mutex_unlock(&kreg_lock);
}

struct sim_kernel *sim_kernel_lookup(uint64_t kernel_object) {
  struct sim_kernel *found = NULL;
  pthread_mutex_lock(&kreg_lock);
  for (unsigned i = 0; i < nkreg; i++)
    if ((uint64_t)(uintptr_t)kreg[i] == kernel_object) found = kreg[i];
  pthread_mutex_unlock(&kreg_lock);
  return found;
}

/* ---------------------------------------------------------------- readers */

SIM_API hsa_status_t hsa_code_object_reader_create_from_memory(const void *code_object, size_t size,
                                                               hsa_code_object_reader_t *reader) {
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!code_object || size == 0 || !reader) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_reader *r = calloc(1, sizeof *r);
  if (!r || !(r->image = malloc(size))) {
    free(r);
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  memcpy(r->image, code_object, size);
  r->size = size;
  r->magic = SIM_READER_MAGIC;
  reader->handle = (uint64_t)(uintptr_t)r;
  return HSA_STATUS_SUCCESS;
}

static struct sim_reader *reader_of(hsa_code_object_reader_t r) {
  struct sim_reader *p = (struct sim_reader *)(uintptr_t)r.handle;
  return p && p->magic == SIM_READER_MAGIC ? p : NULL;
}

SIM_API hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t reader) {
  struct sim_reader *r = reader_of(reader);
  if (!r) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
  r->magic = 0;
  free(r->image);
  free(r);
  return HSA_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- executables */

static struct sim_exe *exe_of(hsa_executable_t e) {
  struct sim_exe *p = (struct sim_exe *)(uintptr_t)e.handle;
  return p && p->magic == SIM_EXE_MAGIC ? p : NULL;
}

SIM_API hsa_status_t hsa_executable_create_alt(hsa_profile_t profile,
                                               hsa_default_float_rounding_mode_t rounding, const char *options,
                                               hsa_executable_t *executable) {
  (void)options;
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (!executable || (profile != HSA_PROFILE_BASE && profile != HSA_PROFILE_FULL) ||
      rounding > HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR)
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_exe *e = calloc(1, sizeof *e);
  if (!e) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  e->magic = SIM_EXE_MAGIC;
  e->memfd = -1;
  executable->handle = (uint64_t)(uintptr_t)e;
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hm_sim_executable_set_host_object(hsa_executable_t exe, const void *image, size_t size) {
  struct sim_exe *e = exe_of(exe);
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (!image || size == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (e->frozen || e->nkernels) return HSA_STATUS_ERROR_FROZEN_EXECUTABLE;
  void *copy = malloc(size);
  if (!copy) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  memcpy(copy, image, size);
  free(e->host_image);
  e->host_image = copy;
  e->host_size = size;
  return HSA_STATUS_SUCCESS;
}

/* dlopen the host kernel object from a memfd: it never touches the file system. */
static hsa_status_t open_host_object(struct sim_exe *e, struct sim_agent *a) {
  int fd = memfd_create("hsamono-host-kernels", MFD_CLOEXEC);
  if (fd < 0) return sim_error(HSA_STATUS_ERROR_OUT_OF_RESOURCES, "memfd_create: %s", strerror(errno));
  size_t off = 0;
  while (off < e->host_size) {
    ssize_t w = write(fd, (const char *)e->host_image + off, e->host_size - off);
    if (w <= 0) {
      close(fd);
      return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    off += (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    close(fd);
    return sim_error(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "host kernel object: %s", dlerror());
  }
  const u32 *abi = dlsym(dl, "dev_host_abi");
  const char *arch = dlsym(dl, "dev_host_arch");
  const struct dev_host_ops **slot = dlsym(dl, "dev_host");
  if (!abi || !slot || !arch || *abi != DEV_HOST_ABI || strcmp(arch, a->name) != 0) {
    dlclose(dl);
    close(fd);
    return sim_error(HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                     "host kernel object: not built for this agent (abi %u, arch %s; agent abi %u, arch %s)",
                     abi ? *abi : 0, arch ? arch : "?", DEV_HOST_ABI, a->name);
  }
  *slot = &sim_dev_ops;
  e->dl = dl;
  e->memfd = fd;
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_executable_load_agent_code_object(hsa_executable_t executable, hsa_agent_t agent,
                                                           hsa_code_object_reader_t code_object_reader,
                                                           const char *options,
                                                           hsa_loaded_code_object_t *loaded_code_object) {
  (void)options;
  if (sim.refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  struct sim_exe *e = exe_of(executable);
  struct sim_agent *a = sim_agent_of(agent);
  struct sim_reader *r = reader_of(code_object_reader);
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (!a || !a->gpu) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!r) return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
  if (e->frozen) return HSA_STATUS_ERROR_FROZEN_EXECUTABLE;
  if (e->nkernels) return sim_error(HSA_STATUS_ERROR_INVALID_ARGUMENT, "one code object an executable");
  hm_codeobj *co;
  if (hm_codeobj_parse(r->image, r->size, &co) != HM_OK)
    return sim_error(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "%s", hm_errmsg());
  hm_target_id agent_tid;
  hm_target_id_parse(a->isa, &agent_tid);
  hsa_status_t s = HSA_STATUS_SUCCESS;
  if (!hm_target_compatible(&co->tid, &agent_tid)) {
    s = sim_error(HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS, "code object for %s cannot run on %s", co->target, a->isa);
    goto out;
  }
  if (!e->host_image) {
    s = sim_error(HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                  "the software agent needs the host kernel object (" HM_SIM_SET_HOST_OBJECT ")");
    goto out;
  }
  if ((s = open_host_object(e, a))) goto out;
  e->kernels = calloc(co->nkernels ? co->nkernels : 1, sizeof *e->kernels);
  if (!e->kernels) {
    s = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    goto out;
  }
  for (uint32_t i = 0; i < co->nkernels; i++) {
    const hm_co_kernel *m = &co->kernels[i];
    struct sim_kernel *k = &e->kernels[i];
    char sym[HM_CO_NAME_MAX + 32];
    snprintf(sym, sizeof sym, "hm_host_kernel_%s", m->name);
    k->fn = (void (*)(const void *))dlsym(e->dl, sym);
    snprintf(sym, sizeof sym, "hm_host_kernel_wg_%s", m->name);
    const u32 *wg = dlsym(e->dl, sym);
    if (!k->fn || !wg) {
      s = sim_error(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "kernel %s has no host build in the kernel object", m->name);
      goto out;
    }
    if (m->reqd_workgroup_size[0] && *wg != m->reqd_workgroup_size[0]) {
      s = sim_error(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "kernel %s: host build is for %u work-items, gfx for %u",
                    m->name, *wg, m->reqd_workgroup_size[0]);
      goto out;
    }
    k->magic = SIM_KERNEL_MAGIC;
    snprintf(k->name, sizeof k->name, "%s", m->name);
    snprintf(k->symbol, sizeof k->symbol, "%s", m->symbol);
    k->meta = *m;
    k->agent = a;
    k->exe = e;
    if (hm_kernel_resources_of(m, 0, 0, &k->res) != HM_OK) {
      s = sim_error(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "kernel %s: %s", m->name, hm_errmsg());
      goto out;
    }
  }
  e->nkernels = co->nkernels;
  e->agent = a;
  for (unsigned i = 0; i < e->nkernels; i++) kreg_add(&e->kernels[i]);
  if (loaded_code_object) loaded_code_object->handle = (uint64_t)(uintptr_t)e;
out:
  hm_codeobj_free(co);
  if (s && e->kernels && !e->nkernels) {
    free(e->kernels);
    e->kernels = NULL;
  }
  return s;
}

SIM_API hsa_status_t hsa_executable_freeze(hsa_executable_t executable, const char *options) {
  (void)options;
  struct sim_exe *e = exe_of(executable);
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (e->frozen) return HSA_STATUS_ERROR_FROZEN_EXECUTABLE;
  e->frozen = true;
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_executable_destroy(hsa_executable_t executable) {
  struct sim_exe *e = exe_of(executable);
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  for (unsigned i = 0; i < e->nkernels; i++) kreg_remove(&e->kernels[i]);
  e->magic = 0;
  if (e->dl) dlclose(e->dl);
  if (e->memfd >= 0) close(e->memfd);
  free(e->kernels);
  free(e->host_image);
  free(e);
  return HSA_STATUS_SUCCESS;
}

SIM_API hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable, const char *symbol_name,
                                                       const hsa_agent_t *agent, hsa_executable_symbol_t *symbol) {
  struct sim_exe *e = exe_of(executable);
  if (!e) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (!symbol_name || !symbol) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (agent && sim_agent_of(*agent) != e->agent) return HSA_STATUS_ERROR_INVALID_AGENT;
  for (unsigned i = 0; i < e->nkernels; i++)
    if (strcmp(e->kernels[i].symbol, symbol_name) == 0) {
      symbol->handle = (uint64_t)(uintptr_t)&e->kernels[i];
      return HSA_STATUS_SUCCESS;
    }
  return HSA_STATUS_ERROR_INVALID_SYMBOL_NAME;
}

SIM_API hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t symbol,
                                                    hsa_executable_symbol_info_t attribute, void *value) {
  struct sim_kernel *k = sim_kernel_lookup(symbol.handle);
  if (!k) return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (attribute) {
  case HSA_EXECUTABLE_SYMBOL_INFO_TYPE: *(hsa_symbol_kind_t *)value = HSA_SYMBOL_KIND_KERNEL; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH: *(uint32_t *)value = (uint32_t)strlen(k->symbol); break;
  case HSA_EXECUTABLE_SYMBOL_INFO_NAME: memcpy(value, k->symbol, strlen(k->symbol)); break;
  case HSA_EXECUTABLE_SYMBOL_INFO_AGENT: ((hsa_agent_t *)value)->handle = (uint64_t)(uintptr_t)k->agent; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: *(uint64_t *)value = (uint64_t)(uintptr_t)k; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: *(uint32_t *)value = k->meta.kernarg_size; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT: *(uint32_t *)value = k->meta.kernarg_align; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: *(uint32_t *)value = k->meta.group_segment_fixed_size; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE:
    *(uint32_t *)value = k->meta.private_segment_fixed_size;
    break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK: *(bool *)value = k->meta.uses_dynamic_stack; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}
