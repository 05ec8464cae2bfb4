/* hsa/hm_codeobj.h: reads an AMDGPU code object (ELF + the msgpack metadata note + the 64-byte
 * kernel descriptors) into plain structs: everything the loader and the resource checks need. */
#ifndef HM_CODEOBJ_H
#define HM_CODEOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HM_CO_NAME_MAX 128
#define HM_CO_KIND_MAX 40
#define HM_CO_MAX_ARGS 64

/* One kernel argument from the metadata's .args list. */
typedef struct hm_co_arg {
  char name[HM_CO_NAME_MAX];       /* .name, "" when absent */
  char value_kind[HM_CO_KIND_MAX]; /* .value_kind: by_value, global_buffer, hidden_... */
  uint32_t offset, size;
  bool hidden;                     /* value_kind starts with "hidden_" */
} hm_co_arg;

/* The 64-byte kernel descriptor (AMDGPUUsage, "Kernel Descriptor"), raw and decoded. */
typedef struct hm_co_kd {
  uint8_t raw[64];
  uint32_t group_segment_fixed_size;   /* byte 0 */
  uint32_t private_segment_fixed_size; /* byte 4 */
  uint32_t kernarg_size;               /* byte 8 */
  int64_t entry_offset;                /* byte 16: kernel_code_entry_byte_offset */
  uint32_t rsrc3, rsrc1, rsrc2;        /* bytes 44, 48, 52 */
  uint16_t code_properties;            /* byte 56 */
  /* decoded for gfx90a and later (gfx942, gfx950) */
  uint32_t vgprs_allocated;            /* (rsrc1[5:0] + 1) * 8: arch + acc, unified */
  uint32_t accum_offset;               /* (rsrc3[5:0] + 1) * 4: first AGPR */
  bool tg_split;                       /* rsrc3 bit 16 */
  bool private_segment_enabled;        /* rsrc2 bit 0 */
  bool wave32;                         /* code properties bit 10 */
  bool dynamic_stack;                  /* code properties bit 11 */
} hm_co_kd;

typedef struct hm_co_kernel {
  char name[HM_CO_NAME_MAX];   /* .name */
  char symbol[HM_CO_NAME_MAX]; /* .symbol, "<name>.kd" */
  uint32_t kernarg_size, kernarg_align;
  uint32_t group_segment_fixed_size, private_segment_fixed_size;
  uint32_t vgpr_count;         /* .vgpr_count: arch (rounded to 4) + AGPRs on gfx90a+ */
  uint32_t agpr_count;
  uint32_t sgpr_count;
  uint32_t vgpr_spill_count, sgpr_spill_count;
  uint32_t wavefront_size;
  uint32_t max_flat_workgroup_size; /* 0 when absent */
  uint32_t reqd_workgroup_size[3];  /* 0s when absent */
  bool uses_dynamic_stack;
  uint32_t nargs;
  hm_co_arg args[HM_CO_MAX_ARGS];
  uint32_t nhidden;            /* how many of args are hidden_* */
  bool has_kd;                 /* the .kd symbol was found and read */
  uint64_t kd_vaddr;           /* the descriptor's address in the code object */
  hm_co_kd kd;
} hm_co_kernel;

/* A target id "amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-", split. */
typedef enum hm_feature { HM_FEATURE_ANY = 0, HM_FEATURE_ON, HM_FEATURE_OFF } hm_feature;
typedef struct hm_target_id {
  char processor[32]; /* "gfx950" */
  hm_feature sramecc, xnack;
} hm_target_id;

typedef struct hm_codeobj {
  char target[96];          /* amdhsa.target */
  hm_target_id tid;
  uint32_t version[2];      /* amdhsa.version */
  uint32_t abi_version;     /* e_ident[EI_ABIVERSION]: 2 = v4, 3 = v5, 4 = v6 */
  uint32_t e_flags;
  uint32_t nkernels;
  hm_co_kernel *kernels;
} hm_codeobj;

/* Parse `size` bytes. On success *out is a new object (free with hm_codeobj_free). A
 * truncated, corrupted or foreign file is HM_ERR_FORMAT with a one-line reason; nothing is
 * allocated then. */
hm_status hm_codeobj_parse(const void *image, size_t size, hm_codeobj **out);
/* Read and parse a file. */
hm_status hm_codeobj_read_file(const char *path, hm_codeobj **out, void **image, size_t *size);
void hm_codeobj_free(hm_codeobj *co);

/* The kernel named `name` (without ".kd"), or NULL. */
const hm_co_kernel *hm_codeobj_find(const hm_codeobj *co, const char *name);

/* Target ids: parse "amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-" (the prefix is optional), and
 * decide whether code built for `code` runs on an agent whose ISA is `agent` (processors equal,
 * and each feature either unspecified in the code object or equal). */
hm_status hm_target_id_parse(const char *s, hm_target_id *out);
bool hm_target_compatible(const hm_target_id *code, const hm_target_id *agent);

#ifdef __cplusplus
}
#endif
#endif /* HM_CODEOBJ_H */
