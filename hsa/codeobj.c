/* hsa/codeobj.c: the code-object reader behind hm_codeobj.h: libelf walks the ELF, msgpack-c
 * decodes the NT_AMDGPU_METADATA note; every field is range-checked, every failure one line. */
#include "hm_codeobj.h"
#include "codeobj_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef EM_AMDGPU
#define EM_AMDGPU 224
#endif
#define ELFOSABI_AMDGPU_HSA_ 64
#define NT_AMDGPU_METADATA_ 32
#define CO_MAX_KERNELS 4096
#define CO_MAX_FILE (1u << 30)

/* ---------------------------------------------------------------- msgpack helpers */

/* msgpack-c sizes its allocations from the container counts an input declares, so a forged
 * count asks for gigabytes before the data runs out. Walk the encoding first: every container
 * may declare at most as many elements as bytes remain, and nesting stays shallow. */
#define MSGPACK_MAX_DEPTH 32

static uint64_t be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

bool hm_msgpack_sane(const unsigned char *p, size_t len) {
  uint64_t pending[MSGPACK_MAX_DEPTH + 1]; /* elements still to read at each level */
  int depth = 0;
  pending[0] = 1; /* one top-level object */
  size_t i = 0;
  while (depth >= 0) {
    if (pending[depth] == 0) {
      depth--;
      continue;
    }
    pending[depth]--;
    if (i >= len) return false;
    unsigned b = p[i++];
    uint64_t skip = 0, children = 0;
    int lenbytes = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
      /* fixint, nil, bool */
    } else if (b >= 0x80 && b <= 0x8f) {
      children = 2 * (uint64_t)(b & 0x0f);
    } else if (b >= 0x90 && b <= 0x9f) {
      children = b & 0x0f;
    } else if (b >= 0xa0 && b <= 0xbf) {
      skip = b & 0x1f;
    } else {
      switch (b) {
      case 0xc4: case 0xd9: lenbytes = 1; break; /* bin8, str8 */
      case 0xc5: case 0xda: lenbytes = 2; break;
      case 0xc6: case 0xdb: lenbytes = 4; break;
      case 0xc7: lenbytes = 1, skip = 1; break;  /* ext: + type byte */
      case 0xc8: lenbytes = 2, skip = 1; break;
      case 0xc9: lenbytes = 4, skip = 1; break;
      case 0xca: skip = 4; break;                /* float32 */
      case 0xcb: skip = 8; break;
      case 0xcc: case 0xd0: skip = 1; break;     /* (u)int8 */
      case 0xcd: case 0xd1: skip = 2; break;
      case 0xce: case 0xd2: skip = 4; break;
      case 0xcf: case 0xd3: skip = 8; break;
      case 0xd4: skip = 2; break;                /* fixext 1..16, + type byte */
      case 0xd5: skip = 3; break;
      case 0xd6: skip = 5; break;
      case 0xd7: skip = 9; break;
      case 0xd8: skip = 17; break;
      case 0xdc: case 0xdd: /* array16/32 */
      case 0xde: case 0xdf: { /* map16/32 */
        int nb = (b == 0xdc || b == 0xde) ? 2 : 4;
        if (len - i < (size_t)nb) return false;
        children = be(p + i, nb) * ((b >= 0xde) ? 2 : 1);
        i += (size_t)nb;
        break;
      }
      default: return false; /* 0xc1 is never used */
      }
    }
    if (lenbytes) {
      if (len - i < (size_t)lenbytes) return false;
      skip += be(p + i, lenbytes);
      i += (size_t)lenbytes;
    }
    if (skip > len - i) return false;
    i += skip;
    if (children) {
      if (children > len - i || depth == MSGPACK_MAX_DEPTH) return false;
      pending[++depth] = children;
    }
  }
  return true;
}

static const msgpack_object *map_get(const msgpack_object *map, const char *key) {
  if (!map || map->type != MSGPACK_OBJECT_MAP) return NULL;
  size_t klen = strlen(key);
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
        memcmp(k->via.str.ptr, key, klen) == 0)
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

/* a non-negative integer that fits 32 bits */
static bool obj_u32(const msgpack_object *o, uint32_t *out) {
  if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > UINT32_MAX) return false;
  *out = (uint32_t)o->via.u64;
  return true;
}

static bool obj_str(const msgpack_object *o, char *out, size_t cap) {
  if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap) return false;
  memcpy(out, o->via.str.ptr, o->via.str.size);
  out[o->via.str.size] = 0;
  /* names are printed and compared as C strings: no embedded NULs */
  return memchr(out, 0, o->via.str.size) == NULL;
}

/* required u32 field of a kernel map */
static hm_status need_u32(const msgpack_object *k, const char *key, uint32_t *out, uint32_t idx) {
  if (!obj_u32(map_get(k, key), out))
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %u: missing or invalid %s", idx, key);
  return HM_OK;
}

static void opt_u32(const msgpack_object *k, const char *key, uint32_t *out) {
  if (!obj_u32(map_get(k, key), out)) *out = 0;
}

static hm_status parse_args(const msgpack_object *arr, hm_co_kernel *kn) {
  if (!arr) return HM_OK; /* a kernel without arguments may omit .args */
  if (arr->type != MSGPACK_OBJECT_ARRAY)
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: .args is not an array", kn->name);
  if (arr->via.array.size > HM_CO_MAX_ARGS)
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: %u arguments (at most %d)", kn->name,
                   arr->via.array.size, HM_CO_MAX_ARGS);
  for (uint32_t i = 0; i < arr->via.array.size; i++) {
    const msgpack_object *a = &arr->via.array.ptr[i];
    hm_co_arg *ar = &kn->args[i];
    if (a->type != MSGPACK_OBJECT_MAP)
      return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: argument %u is not a map", kn->name, i);
    if (!obj_u32(map_get(a, ".offset"), &ar->offset) || !obj_u32(map_get(a, ".size"), &ar->size) ||
        !obj_str(map_get(a, ".value_kind"), ar->value_kind, sizeof ar->value_kind))
      return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: argument %u lacks .offset, .size or .value_kind",
                     kn->name, i);
    if (!obj_str(map_get(a, ".name"), ar->name, sizeof ar->name)) ar->name[0] = 0;
    if ((uint64_t)ar->offset + ar->size > kn->kernarg_size)
      return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: argument %u (%u+%u) outside the %u-byte kernarg segment",
                     kn->name, i, ar->offset, ar->size, kn->kernarg_size);
    ar->hidden = strncmp(ar->value_kind, "hidden_", 7) == 0;
    kn->nhidden += ar->hidden;
  }
  kn->nargs = arr->via.array.size;
  return HM_OK;
}

static hm_status parse_kernel(const msgpack_object *k, uint32_t idx, hm_co_kernel *kn) {
  if (k->type != MSGPACK_OBJECT_MAP)
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %u is not a map", idx);
  if (!obj_str(map_get(k, ".name"), kn->name, sizeof kn->name) || !kn->name[0])
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %u: missing or invalid .name", idx);
  if (!obj_str(map_get(k, ".symbol"), kn->symbol, sizeof kn->symbol) || !kn->symbol[0])
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: missing or invalid .symbol", kn->name);
  hm_status s;
  if ((s = need_u32(k, ".kernarg_segment_size", &kn->kernarg_size, idx)) ||
      (s = need_u32(k, ".kernarg_segment_align", &kn->kernarg_align, idx)) ||
      (s = need_u32(k, ".group_segment_fixed_size", &kn->group_segment_fixed_size, idx)) ||
      (s = need_u32(k, ".private_segment_fixed_size", &kn->private_segment_fixed_size, idx)) ||
      (s = need_u32(k, ".wavefront_size", &kn->wavefront_size, idx)) ||
      (s = need_u32(k, ".sgpr_count", &kn->sgpr_count, idx)) ||
      (s = need_u32(k, ".vgpr_count", &kn->vgpr_count, idx)))
    return s;
  if (kn->kernarg_align == 0 || (kn->kernarg_align & (kn->kernarg_align - 1)))
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: kernarg alignment %u is not a power of two",
                   kn->name, kn->kernarg_align);
  if (kn->wavefront_size != 32 && kn->wavefront_size != 64)
    return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: wavefront size %u", kn->name, kn->wavefront_size);
  opt_u32(k, ".agpr_count", &kn->agpr_count);
  opt_u32(k, ".vgpr_spill_count", &kn->vgpr_spill_count);
  opt_u32(k, ".sgpr_spill_count", &kn->sgpr_spill_count);
  opt_u32(k, ".max_flat_workgroup_size", &kn->max_flat_workgroup_size);
  const msgpack_object *reqd = map_get(k, ".reqd_workgroup_size");
  if (reqd) {
    if (reqd->type != MSGPACK_OBJECT_ARRAY || reqd->via.array.size != 3 ||
        !obj_u32(&reqd->via.array.ptr[0], &kn->reqd_workgroup_size[0]) ||
        !obj_u32(&reqd->via.array.ptr[1], &kn->reqd_workgroup_size[1]) ||
        !obj_u32(&reqd->via.array.ptr[2], &kn->reqd_workgroup_size[2]))
      return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: invalid .reqd_workgroup_size", kn->name);
  }
  const msgpack_object *dyn = map_get(k, ".uses_dynamic_stack");
  if (dyn) {
    if (dyn->type != MSGPACK_OBJECT_BOOLEAN)
      return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: invalid .uses_dynamic_stack", kn->name);
    kn->uses_dynamic_stack = dyn->via.boolean;
  }
  return parse_args(map_get(k, ".args"), kn);
}

static hm_status parse_metadata(const void *data, size_t len, hm_codeobj *co) {
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  size_t off = 0;
  hm_status s = HM_OK;
  if (!hm_msgpack_sane(data, len)) {
    s = hm_fail(HM_ERR_FORMAT, "code object: metadata note is not valid msgpack");
    goto out;
  }
  if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS) {
    s = hm_fail(HM_ERR_FORMAT, "code object: metadata note is not valid msgpack");
    goto out;
  }
  const msgpack_object *root = &up.data;
  if (root->type != MSGPACK_OBJECT_MAP) {
    s = hm_fail(HM_ERR_FORMAT, "code object: metadata is not a map");
    goto out;
  }
  if (!obj_str(map_get(root, "amdhsa.target"), co->target, sizeof co->target)) {
    s = hm_fail(HM_ERR_FORMAT, "code object: metadata lacks amdhsa.target");
    goto out;
  }
  if ((s = hm_target_id_parse(co->target, &co->tid))) goto out;
  const msgpack_object *ver = map_get(root, "amdhsa.version");
  if (!ver || ver->type != MSGPACK_OBJECT_ARRAY || ver->via.array.size < 2 ||
      !obj_u32(&ver->via.array.ptr[0], &co->version[0]) || !obj_u32(&ver->via.array.ptr[1], &co->version[1])) {
    s = hm_fail(HM_ERR_FORMAT, "code object: metadata lacks amdhsa.version");
    goto out;
  }
  if (co->version[0] != 1) {
    s = hm_fail(HM_ERR_UNSUPPORTED, "code object: metadata version %u.%u (expected 1.x)", co->version[0],
                co->version[1]);
    goto out;
  }
  const msgpack_object *ks = map_get(root, "amdhsa.kernels");
  if (!ks || ks->type != MSGPACK_OBJECT_ARRAY) {
    s = hm_fail(HM_ERR_FORMAT, "code object: metadata lacks amdhsa.kernels");
    goto out;
  }
  if (ks->via.array.size > CO_MAX_KERNELS) {
    s = hm_fail(HM_ERR_FORMAT, "code object: %u kernels (at most %d)", ks->via.array.size, CO_MAX_KERNELS);
    goto out;
  }
  co->nkernels = ks->via.array.size;
  co->kernels = calloc(co->nkernels ? co->nkernels : 1, sizeof *co->kernels);
  if (!co->kernels) {
    s = hm_fail(HM_ERR_NO_MEMORY, "code object: out of memory for %u kernels", co->nkernels);
    goto out;
  }
  for (uint32_t i = 0; i < co->nkernels && !s; i++) s = parse_kernel(&ks->via.array.ptr[i], i, &co->kernels[i]);
out:
  msgpack_unpacked_destroy(&up);
  return s;
}

/* ---------------------------------------------------------------- kernel descriptors */

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void decode_kd(hm_co_kd *kd) {
  const uint8_t *r = kd->raw;
  kd->group_segment_fixed_size = le32(r + 0);
  kd->private_segment_fixed_size = le32(r + 4);
  kd->kernarg_size = le32(r + 8);
  kd->entry_offset = (int64_t)((uint64_t)le32(r + 16) | (uint64_t)le32(r + 20) << 32);
  kd->rsrc3 = le32(r + 44);
  kd->rsrc1 = le32(r + 48);
  kd->rsrc2 = le32(r + 52);
  kd->code_properties = (uint16_t)(r[56] | r[57] << 8);
  kd->vgprs_allocated = ((kd->rsrc1 & 0x3f) + 1) * 8;
  kd->accum_offset = ((kd->rsrc3 & 0x3f) + 1) * 4;
  kd->tg_split = (kd->rsrc3 >> 16) & 1;
  kd->private_segment_enabled = kd->rsrc2 & 1;
  kd->wave32 = (kd->code_properties >> 10) & 1;
  kd->dynamic_stack = (kd->code_properties >> 11) & 1;
}

/* Copy 64 bytes at virtual address `va` out of the allocated section holding them. */
static bool read_va(Elf *e, uint64_t va, uint8_t out[64]) {
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(e, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC) || sh.sh_type == SHT_NOBITS) continue;
    if (va < sh.sh_addr || va - sh.sh_addr > sh.sh_size || sh.sh_size - (va - sh.sh_addr) < 64) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    uint64_t off = va - sh.sh_addr;
    if (!d || !d->d_buf || d->d_size < 64 || off > d->d_size - 64) return false;
    memcpy(out, (const uint8_t *)d->d_buf + off, 64);
    return true;
  }
  return false;
}

/* Walk the symbol tables for "<kernel>.kd" objects and attach their descriptors. */
static hm_status attach_descriptors(Elf *e, hm_codeobj *co) {
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(e, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    if (!d || sh.sh_entsize == 0) continue;
    size_t n = d->d_size / sh.sh_entsize;
    for (size_t i = 0; i < n; i++) {
      GElf_Sym sym;
      if (!gelf_getsym(d, (int)i, &sym)) break;
      const char *nm = elf_strptr(e, sh.sh_link, sym.st_name);
      if (!nm) continue;
      for (uint32_t k = 0; k < co->nkernels; k++) {
        hm_co_kernel *kn = &co->kernels[k];
        if (kn->has_kd || strcmp(nm, kn->symbol) != 0) continue;
        if (!read_va(e, sym.st_value, kn->kd.raw))
          return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: descriptor %s at 0x%llx is outside the file",
                         kn->name, kn->symbol, (unsigned long long)sym.st_value);
        kn->has_kd = true;
        kn->kd_vaddr = sym.st_value;
        decode_kd(&kn->kd);
      }
    }
  }
  for (uint32_t k = 0; k < co->nkernels; k++) {
    hm_co_kernel *kn = &co->kernels[k];
    if (!kn->has_kd)
      return hm_fail(HM_ERR_FORMAT, "code object: kernel %s: no descriptor symbol %s", kn->name, kn->symbol);
    /* The command processor reads the descriptor, the loader the metadata: they must agree. */
    if (kn->kd.group_segment_fixed_size != kn->group_segment_fixed_size ||
        kn->kd.private_segment_fixed_size != kn->private_segment_fixed_size)
      return hm_fail(HM_ERR_FORMAT,
                     "code object: kernel %s: descriptor and metadata disagree (group %u vs %u, private %u vs %u)",
                     kn->name, kn->kd.group_segment_fixed_size, kn->group_segment_fixed_size,
                     kn->kd.private_segment_fixed_size, kn->private_segment_fixed_size);
  }
  return HM_OK;
}

/* ---------------------------------------------------------------- ELF */

static hm_status find_metadata(Elf *e, const void **data, size_t *len) {
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(e, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    if (!d || !d->d_buf) continue;
    size_t off = 0, name_off, desc_off;
    GElf_Nhdr nh;
    while (off < d->d_size && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
      if (nh.n_type == NT_AMDGPU_METADATA_ && nh.n_namesz == 7 &&
          memcmp((const char *)d->d_buf + name_off, "AMDGPU", 7) == 0) {
        *data = (const char *)d->d_buf + desc_off;
        *len = nh.n_descsz;
        return HM_OK;
      }
    }
  }
  return hm_fail(HM_ERR_FORMAT, "code object: no AMDGPU metadata note (code object v2 and v3 are not supported)");
}

hm_status hm_codeobj_parse(const void *image, size_t size, hm_codeobj **out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_codeobj_parse: out is NULL");
  *out = NULL;
  if (!image) return hm_fail(HM_ERR_INVALID_ARG, "hm_codeobj_parse: image is NULL");
  const unsigned char *b = image;
  if (size < sizeof(Elf64_Ehdr)) return hm_fail(HM_ERR_FORMAT, "code object: truncated (%zu bytes)", size);
  if (memcmp(b, ELFMAG, SELFMAG) != 0) return hm_fail(HM_ERR_FORMAT, "code object: not an ELF file");
  if (b[EI_CLASS] != ELFCLASS64 || b[EI_DATA] != ELFDATA2LSB)
    return hm_fail(HM_ERR_FORMAT, "code object: not a 64-bit little-endian ELF");
  const Elf64_Ehdr *eh = image;
  if (eh->e_machine != EM_AMDGPU)
    return hm_fail(HM_ERR_FORMAT, "code object: not an AMDGPU ELF (e_machine %u)", eh->e_machine);
  if (b[EI_OSABI] != ELFOSABI_AMDGPU_HSA_)
    return hm_fail(HM_ERR_FORMAT, "code object: not an HSA code object (OS/ABI %u)", b[EI_OSABI]);
  if (b[EI_ABIVERSION] < 2 || b[EI_ABIVERSION] > 4)
    return hm_fail(HM_ERR_UNSUPPORTED, "code object: ABI version %u (code object v4, v5 or v6 expected)",
                   b[EI_ABIVERSION]);
  if (size > CO_MAX_FILE) return hm_fail(HM_ERR_FORMAT, "code object: %zu bytes is too large", size);

  /* libelf may keep pointers into the image and wants it writable: parse a private copy. */
  char *copy = malloc(size);
  if (!copy) return hm_fail(HM_ERR_NO_MEMORY, "code object: out of memory (%zu bytes)", size);
  memcpy(copy, image, size);
  hm_codeobj *co = calloc(1, sizeof *co);
  Elf *e = NULL;
  hm_status s = HM_OK;
  if (!co) {
    s = hm_fail(HM_ERR_NO_MEMORY, "code object: out of memory");
    goto out;
  }
  co->abi_version = b[EI_ABIVERSION];
  co->e_flags = eh->e_flags;
  elf_version(EV_CURRENT);
  e = elf_memory(copy, size);
  if (!e || elf_kind(e) != ELF_K_ELF) {
    s = hm_fail(HM_ERR_FORMAT, "code object: libelf: %s", elf_errmsg(-1));
    goto out;
  }
  size_t nsec;
  if (elf_getshdrnum(e, &nsec) != 0 || nsec == 0) {
    s = hm_fail(HM_ERR_FORMAT, "code object: no section headers");
    goto out;
  }
  const void *md = NULL;
  size_t mdlen = 0;
  if ((s = find_metadata(e, &md, &mdlen))) goto out;
  if ((s = parse_metadata(md, mdlen, co))) goto out;
  s = attach_descriptors(e, co);
out:
  if (e) elf_end(e);
  free(copy);
  if (s) {
    hm_codeobj_free(co);
    return s;
  }
  *out = co;
  return HM_OK;
}

void hm_codeobj_free(hm_codeobj *co) {
  if (!co) return;
  free(co->kernels);
  free(co);
}

const hm_co_kernel *hm_codeobj_find(const hm_codeobj *co, const char *name) {
  if (!co || !name) return NULL;
  for (uint32_t i = 0; i < co->nkernels; i++)
    if (strcmp(co->kernels[i].name, name) == 0) return &co->kernels[i];
  return NULL;
}

hm_status hm_codeobj_read_file(const char *path, hm_codeobj **out, void **image, size_t *size) {
  if (!path || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_codeobj_read_file: NULL argument");
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return hm_fail(errno == ENOENT ? HM_ERR_NOT_FOUND : HM_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CO_MAX_FILE) {
    close(fd);
    return hm_fail(HM_ERR_IO, "%s: not a regular file of at most 1 GiB", path);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return hm_fail(HM_ERR_NO_MEMORY, "%s: out of memory", path);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) {
    free(buf);
    return hm_fail(HM_ERR_IO, "%s: short read", path);
  }
  hm_status s = hm_codeobj_parse(buf, n, out);
  if (s) {
    free(buf);
    return hm_fail_prefix(s, "%s", path);
  }
  if (image) {
    *image = buf;
    if (size) *size = n;
  } else {
    free(buf);
  }
  return HM_OK;
}

/* ---------------------------------------------------------------- target ids */

hm_status hm_target_id_parse(const char *s, hm_target_id *out) {
  if (!s || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_target_id_parse: NULL argument");
  memset(out, 0, sizeof *out);
  const char *p = strstr(s, "--");
  if (strncmp(s, "amdgcn-amd-amdhsa", 17) == 0) {
    if (!p) return hm_fail(HM_ERR_FORMAT, "target id '%s': expected amdgcn-amd-amdhsa--<processor>", s);
    p += 2;
  } else {
    p = s;
  }
  size_t n = strcspn(p, ":");
  if (n < 4 || n >= sizeof out->processor || strncmp(p, "gfx", 3) != 0)
    return hm_fail(HM_ERR_FORMAT, "target id '%s': no gfx processor", s);
  for (size_t i = 3; i < n; i++)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
      return hm_fail(HM_ERR_FORMAT, "target id '%s': bad processor name", s);
  memcpy(out->processor, p, n);
  p += n;
  while (*p == ':') {
    p++;
    size_t m = strcspn(p, ":");
    if (m < 2 || (p[m - 1] != '+' && p[m - 1] != '-'))
      return hm_fail(HM_ERR_FORMAT, "target id '%s': bad feature", s);
    hm_feature v = p[m - 1] == '+' ? HM_FEATURE_ON : HM_FEATURE_OFF;
    if (m - 1 == 7 && strncmp(p, "sramecc", 7) == 0) out->sramecc = v;
    else if (m - 1 == 5 && strncmp(p, "xnack", 5) == 0) out->xnack = v;
    else return hm_fail(HM_ERR_FORMAT, "target id '%s': unknown feature '%.*s'", s, (int)(m - 1), p);
    p += m;
  }
  if (*p) return hm_fail(HM_ERR_FORMAT, "target id '%s': trailing text", s);
  return HM_OK;
}

bool hm_target_compatible(const hm_target_id *code, const hm_target_id *agent) {
  if (!code || !agent || strcmp(code->processor, agent->processor) != 0) return false;
  if (code->sramecc != HM_FEATURE_ANY && code->sramecc != agent->sramecc) return false;
  if (code->xnack != HM_FEATURE_ANY && code->xnack != agent->xnack) return false;
  return true;
}
