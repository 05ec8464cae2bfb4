/* layer/weights/safetensors.c: safetensors reading (mmap + json-c header parse with every entry checked),
 * writing (header built with json-c, atomic rename), and sharded checkpoints as a weight source. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hm_safetensors.h"

/* The released checkpoints' headers are a few MB; the safetensors reference reader refuses
 * headers over 100 MB, and so does this one (a 200 MB header once cost 274 MB resident). */
#define MAX_HEADER 100000000u

typedef struct st_entry {
  char *name;
  const char *dtype_name; /* the header's own string (in root) */
  hm_dtype dt; /* HM_DT_COUNT: not a dtype the layer reads */
  uint32_t ndim;
  uint64_t shape[HM_TENSOR_MAXDIM];
  uint64_t begin, end;
} st_entry;

struct hm_st_file {
  char *path;
  void *map;
  uint64_t size, data_off;
  st_entry *e; /* sorted by name */
  uint32_t n;
  json_object *meta;
  json_object *root;
};

static int cmp_entry(const void *a, const void *b) { return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name); }

static size_t st_elem_size(const char *dt) {
  static const struct {
    const char *n;
    size_t s;
  } t[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
           {"U8", 1},  {"U16", 2}, {"U32", 4}, {"U64", 8},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
           {"F8_E8M0", 1}};
  for (unsigned i = 0; i < sizeof t / sizeof *t; i++)
    if (!strcmp(dt, t[i].n)) return t[i].s;
  return 0;
}

void hm_st_close(hm_st_file *f) {
  if (!f) return;
  if (f->map && f->map != MAP_FAILED) munmap(f->map, f->size);
  for (uint32_t i = 0; i < f->n; i++) free(f->e[i].name);
  free(f->e);
  if (f->root) json_object_put(f->root);
  free(f->path);
  free(f);
}

static hm_status parse_entry(hm_st_file *f, const char *name, json_object *v, uint64_t data_size, st_entry *e) {
  json_object *dt, *sh, *off;
  if (!json_object_is_type(v, json_type_object) || !json_object_object_get_ex(v, "dtype", &dt) ||
      !json_object_object_get_ex(v, "shape", &sh) || !json_object_object_get_ex(v, "data_offsets", &off) ||
      !json_object_is_type(dt, json_type_string) || !json_object_is_type(sh, json_type_array) ||
      !json_object_is_type(off, json_type_array) || json_object_array_length(off) != 2)
    return hm_fail(HM_ERR_FORMAT, "%s: entry '%s' lacks dtype, shape or data_offsets", f->path, name);
  /* a dtype with no size here (safetensors' newer 'F4', a future one) is listed, not refused: its
   * offsets are checked like any other's, only its byte count cannot be (es 0) */
  const char *d = json_object_get_string(dt);
  size_t es = st_elem_size(d);
  e->dtype_name = d;
  if (hm_dtype_from_st_name(d, &e->dt) != HM_OK) e->dt = HM_DT_COUNT;
  size_t nd = json_object_array_length(sh);
  if (nd > HM_TENSOR_MAXDIM) return hm_fail(HM_ERR_FORMAT, "%s: '%s' has %zu dimensions", f->path, name, nd);
  e->ndim = (uint32_t)nd;
  uint64_t numel = 1;
  for (size_t i = 0; i < nd; i++) {
    json_object *x = json_object_array_get_idx(sh, i);
    if (!json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0)
      return hm_fail(HM_ERR_FORMAT, "%s: '%s' shape[%zu] is not a size", f->path, name, i);
    e->shape[i] = (uint64_t)json_object_get_int64(x);
    if (e->shape[i] && numel > UINT64_MAX / 16 / e->shape[i])
      return hm_fail(HM_ERR_FORMAT, "%s: '%s' is too large", f->path, name);
    numel *= e->shape[i];
  }
  json_object *b = json_object_array_get_idx(off, 0), *en = json_object_array_get_idx(off, 1);
  if (!json_object_is_type(b, json_type_int) || !json_object_is_type(en, json_type_int) || json_object_get_int64(b) < 0 ||
      json_object_get_int64(en) < json_object_get_int64(b))
    return hm_fail(HM_ERR_FORMAT, "%s: '%s' has bad data_offsets", f->path, name);
  e->begin = (uint64_t)json_object_get_int64(b);
  e->end = (uint64_t)json_object_get_int64(en);
  if (e->end > data_size) return hm_fail(HM_ERR_FORMAT, "%s: '%s' ends past the file", f->path, name);
  if (es && e->end - e->begin != numel * es)
    return hm_fail(HM_ERR_FORMAT, "%s: '%s' holds %llu bytes for %llu elements of %s", f->path, name,
                   (unsigned long long)(e->end - e->begin), (unsigned long long)numel, d);
  e->name = strdup(name);
  return e->name ? HM_OK : hm_fail(HM_ERR_NO_MEMORY, "tensor name");
}

/* A raw key of the header text: where it starts and its length. */
typedef struct st_key {
  const char *s;
  size_t len;
} st_key;

static int cmp_key(const void *a, const void *b) {
  const st_key *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return memcmp(x->s, y->s, x->len);
}

/* json-c keeps the last of two equal keys, silently: count the root object's keys in the text
 * itself (a scan of strings and nesting, the parse having succeeded) and refuse a header whose
 * object holds fewer. Equal raw keys are named (found by sorting, so a hostile header of a
 * million keys costs n log n, not n^2); keys equal only after unescaping are counted. */
static hm_status check_keys_unique(const char *path, const char *h, uint64_t n, size_t parsed) {
  size_t keys = 0, cap = 0;
  st_key *k = NULL;
  int depth = 0;
  for (uint64_t i = 0; i < n; i++) {
    char ch = h[i];
    if (ch == '{' || ch == '[') depth++;
    else if (ch == '}' || ch == ']') depth--;
    else if (ch == '"') {
      uint64_t b = ++i;
      while (i < n && h[i] != '"') i += h[i] == '\\' ? 2 : 1;
      uint64_t j = i + 1;
      while (j < n && (h[j] == ' ' || h[j] == '\t' || h[j] == '\n' || h[j] == '\r')) j++;
      if (depth == 1 && j < n && h[j] == ':') {
        if (keys == cap) {
          cap = cap ? 2 * cap : 64;
          void *nk = realloc(k, cap * sizeof *k);
          if (!nk) {
            free(k);
            return hm_fail(HM_ERR_NO_MEMORY, "safetensors header keys");
          }
          k = nk;
        }
        k[keys].s = h + b, k[keys].len = i - b, keys++;
      }
    }
  }
  hm_status st = HM_OK;
  if (keys != parsed) {
    qsort(k, keys, sizeof *k, cmp_key);
    for (size_t a = 1; a < keys && st == HM_OK; a++)
      if (!cmp_key(&k[a - 1], &k[a]))
        st = hm_fail(HM_ERR_FORMAT, "%s: the header names '%.*s' twice", path, (int)k[a].len, k[a].s);
    if (st == HM_OK)
      st = hm_fail(HM_ERR_FORMAT, "%s: the header names a tensor twice (%zu keys, %zu distinct once unescaped)", path,
                   keys, parsed);
  }
  free(k);
  return st;
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

/* The format indexes the data buffer exactly once: tensors in offset order, each beginning where
 * the one before ends, the last ending at the end of the file. Overlaps (two tensors sharing
 * bytes) and unindexed bytes (a hole, or a tail no tensor holds) are refused. */
static hm_status check_buffer_indexed(const hm_st_file *f) {
  const st_entry **by = malloc((f->n ? f->n : 1) * sizeof *by);
  if (!by) return hm_fail(HM_ERR_NO_MEMORY, "safetensors offsets");
  for (uint32_t i = 0; i < f->n; i++) by[i] = &f->e[i];
  qsort(by, f->n, sizeof *by, cmp_begin);
  hm_status st = HM_OK;
  uint64_t at = 0, data = f->size - f->data_off;
  for (uint32_t i = 0; i < f->n && st == HM_OK; i++) {
    if (by[i]->begin < at)
      st = hm_fail(HM_ERR_FORMAT, "%s: '%s' (bytes %llu..%llu) and '%s' overlap", f->path, by[i]->name,
                   (unsigned long long)by[i]->begin, (unsigned long long)by[i]->end, by[i - 1]->name);
    else if (by[i]->begin > at)
      st = hm_fail(HM_ERR_FORMAT, "%s: data bytes %llu..%llu belong to no tensor", f->path, (unsigned long long)at,
                   (unsigned long long)by[i]->begin);
    at = by[i]->end;
  }
  if (st == HM_OK && at != data)
    st = hm_fail(HM_ERR_FORMAT, "%s: data bytes %llu..%llu belong to no tensor", f->path, (unsigned long long)at,
                 (unsigned long long)data);
  free(by);
  return st;
}

hm_status hm_st_open(const char *path, hm_st_file **out) {
  if (!path || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_st_open: null argument");
  hm_st_file *f = calloc(1, sizeof *f);
  if (!f) return hm_fail(HM_ERR_NO_MEMORY, "safetensors file");
  f->path = strdup(path);
  hm_status st = HM_OK;
  /* O_NONBLOCK: opening a FIFO named *.safetensors must not wait for a writer; only a regular
   * file is read (mmap of a FIFO, device or directory has no meaning here) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    st = hm_fail(errno == ENOENT ? HM_ERR_NOT_FOUND : HM_ERR_IO, "%s: %s", path, strerror(errno));
    goto fail;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = hm_fail(HM_ERR_IO, "%s: not a regular file", path);
    goto fail;
  }
  f->size = (uint64_t)sb.st_size;
  if (f->size < 8) {
    st = hm_fail(HM_ERR_FORMAT, "%s: %llu bytes, not a safetensors file", path, (unsigned long long)f->size);
    goto fail;
  }
  f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (f->map == MAP_FAILED) {
    st = hm_fail(HM_ERR_IO, "%s: mmap: %s", path, strerror(errno));
    goto fail;
  }
  const uint8_t *p = f->map;
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | p[i]; /* little endian */
  if (hl > MAX_HEADER) {
    st = hm_fail(HM_ERR_FORMAT, "%s: header of %llu bytes, past the %u-byte limit", path, (unsigned long long)hl,
                 MAX_HEADER);
    goto fail;
  }
  if (hl > f->size - 8) {
    st = hm_fail(HM_ERR_FORMAT, "%s: header of %llu bytes in a file of %llu", path, (unsigned long long)hl,
                 (unsigned long long)f->size);
    goto fail;
  }
  f->data_off = 8 + hl;
  json_tokener *tok = json_tokener_new_ex(64);
  if (!tok) {
    st = hm_fail(HM_ERR_NO_MEMORY, "JSON parser");
    goto fail;
  }
  f->root = json_tokener_parse_ex(tok, (const char *)p + 8, (int)hl);
  enum json_tokener_error je = json_tokener_get_error(tok);
  json_tokener_free(tok);
  if (!f->root || je != json_tokener_success || !json_object_is_type(f->root, json_type_object)) {
    st = hm_fail(HM_ERR_FORMAT, "%s: the header is not a JSON object (%s)", path, json_tokener_error_desc(je));
    goto fail;
  }
  uint32_t cap = (uint32_t)json_object_object_length(f->root);
  f->e = calloc(cap ? cap : 1, sizeof *f->e);
  if (!f->e) {
    st = hm_fail(HM_ERR_NO_MEMORY, "safetensors index");
    goto fail;
  }
  json_object_object_foreach(f->root, key, val) {
    if (!strcmp(key, "__metadata__")) {
      if (!json_object_is_type(val, json_type_object)) {
        st = hm_fail(HM_ERR_FORMAT, "%s: __metadata__ is not an object", path);
        goto fail;
      }
      f->meta = val;
      continue;
    }
    if ((st = parse_entry(f, key, val, f->size - f->data_off, &f->e[f->n])) != HM_OK) goto fail;
    f->n++;
  }
  if ((st = check_keys_unique(path, (const char *)p + 8, hl, json_object_object_length(f->root))) != HM_OK ||
      (st = check_buffer_indexed(f)) != HM_OK)
    goto fail;
  qsort(f->e, f->n, sizeof *f->e, cmp_entry);
  close(fd);
  *out = f;
  return HM_OK;
fail:
  if (fd >= 0) close(fd);
  hm_st_close(f);
  return st;
}

uint32_t hm_st_count(const hm_st_file *f) { return f ? f->n : 0; }
const char *hm_st_name(const hm_st_file *f, uint32_t i) { return f && i < f->n ? f->e[i].name : NULL; }

/* a tensor of a dtype the layer does not read, refused when asked for (listed at open) */
static hm_status refuse_dtype(const hm_st_file *f, const st_entry *e) {
  return hm_fail(HM_ERR_UNSUPPORTED, "%s: '%s' has dtype '%.40s', which the layer does not read", f->path, e->name,
                 e->dtype_name);
}

static const st_entry *find(const hm_st_file *f, const char *name) {
  st_entry key = {0};
  key.name = (char *)name;
  return bsearch(&key, f->e, f->n, sizeof *f->e, cmp_entry);
}

hm_status hm_st_get(const hm_st_file *f, const char *name, hm_dtype *dt, uint32_t *ndim, uint64_t shape[HM_TENSOR_MAXDIM],
                    const void **data, uint64_t *nbytes) {
  if (!f || !name) return hm_fail(HM_ERR_INVALID_ARG, "hm_st_get: null argument");
  const st_entry *e = find(f, name);
  if (!e) return hm_fail(HM_ERR_NOT_FOUND, "%s: no tensor '%s'", f->path, name);
  if (e->dt == HM_DT_COUNT) return refuse_dtype(f, e);
  if (dt) *dt = e->dt;
  if (ndim) *ndim = e->ndim;
  if (shape)
    for (uint32_t i = 0; i < HM_TENSOR_MAXDIM; i++) shape[i] = i < e->ndim ? e->shape[i] : 0;
  if (data) *data = (const uint8_t *)f->map + f->data_off + e->begin;
  if (nbytes) *nbytes = e->end - e->begin;
  return HM_OK;
}

const char *hm_st_meta(const hm_st_file *f, const char *key) {
  json_object *v;
  if (!f || !f->meta || !key || !json_object_object_get_ex(f->meta, key, &v)) return NULL;
  return json_object_get_string(v);
}

/* ---------------------------------------------------------------- writing */

hm_status hm_st_write(const char *path, const hm_tensor_set *set, const char *const *keys, const char *const *values,
                      uint32_t nmeta) {
  if (!path || !set) return hm_fail(HM_ERR_INVALID_ARG, "hm_st_write: null argument");
  json_object *root = json_object_new_object();
  if (!root) return hm_fail(HM_ERR_NO_MEMORY, "JSON header");
  if (nmeta) {
    json_object *m = json_object_new_object();
    for (uint32_t i = 0; i < nmeta; i++) json_object_object_add(m, keys[i], json_object_new_string(values[i]));
    json_object_object_add(root, "__metadata__", m);
  }
  uint64_t off = 0;
  for (uint32_t i = 0; i < set->count; i++) {
    const hm_tensor *t = &set->t[i];
    json_object *e = json_object_new_object(), *sh = json_object_new_array(), *o = json_object_new_array();
    json_object_object_add(e, "dtype", json_object_new_string(hm_dtype_st_name(t->dtype)));
    for (uint32_t d = 0; d < t->ndim; d++) json_object_array_add(sh, json_object_new_int64((int64_t)t->shape[d]));
    json_object_object_add(e, "shape", sh);
    json_object_array_add(o, json_object_new_int64((int64_t)off));
    json_object_array_add(o, json_object_new_int64((int64_t)(off + t->nbytes)));
    json_object_object_add(e, "data_offsets", o);
    json_object_object_add(root, t->name, e);
    off += t->nbytes;
  }
  const char *js = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
  size_t jl = strlen(js), hl = (jl + 7) / 8 * 8; /* data 8-byte aligned: pad with spaces */
  char tmp[4096];
  hm_status st = HM_OK;
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    json_object_put(root);
    return hm_fail(HM_ERR_INVALID_ARG, "path too long: %s", path);
  }
  FILE *fp = fopen(tmp, "wb");
  if (!fp) {
    json_object_put(root);
    return hm_fail(HM_ERR_IO, "%s: %s", tmp, strerror(errno));
  }
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  int ok = fwrite(len, 1, 8, fp) == 8 && fwrite(js, 1, jl, fp) == jl;
  for (size_t i = jl; ok && i < hl; i++) ok = fputc(' ', fp) != EOF;
  for (uint32_t i = 0; ok && i < set->count; i++) ok = fwrite(set->t[i].data, 1, set->t[i].nbytes, fp) == set->t[i].nbytes;
  json_object_put(root);
  if (fclose(fp) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    st = hm_fail(HM_ERR_IO, "%s: %s", path, strerror(errno ? errno : EIO));
    unlink(tmp);
  }
  return st;
}

/* ---------------------------------------------------------------- checkpoints */

typedef struct ck_name {
  const char *name;
  uint32_t file;
} ck_name;

struct hm_ckpt {
  hm_st_file **files;
  uint32_t nfiles;
  ck_name *names; /* sorted */
  uint32_t nnames;
  char *path;
  char hint[512]; /* opened as one file: what a missing tensor's message adds */
};

static int cmp_name(const void *a, const void *b) { return strcmp(((const ck_name *)a)->name, ((const ck_name *)b)->name); }

void hm_ckpt_close(hm_ckpt *c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->nfiles; i++) hm_st_close(c->files[i]);
  free(c->files);
  free(c->names);
  free(c->path);
  free(c);
}

static int is_safetensors(const char *name) {
  size_t l = strlen(name);
  return l > 12 && !strcmp(name + l - 12, ".safetensors");
}

/* A checkpoint given as one file: a layer's tensors may be in the other shards beside it (the
 * released one is 48 files; its Engram tables sit in the last). Counted once here, said when a
 * tensor is not found. */
static void ckpt_hint(hm_ckpt *c, const char *path) {
  char d[4096];
  snprintf(d, sizeof d, "%s", path);
  char *slash = strrchr(d, '/');
  if (slash) *(slash == d ? slash + 1 : slash) = 0;
  else snprintf(d, sizeof d, ".");
  uint32_t n = 0;
  DIR *dir = opendir(d);
  for (struct dirent *e; dir && (e = readdir(dir));) n += is_safetensors(e->d_name);
  if (dir) closedir(dir);
  if (n > 1)
    snprintf(c->hint, sizeof c->hint, "; %.200s is one of %u .safetensors files in %.200s: a checkpoint is a "
             "directory of shards, give the directory", path, n, d);
  else
    snprintf(c->hint, sizeof c->hint, "; a checkpoint may be a directory of shards (a layer's tensors spread over "
             "them): give the directory, not one file");
}

static hm_status ckpt_add(hm_ckpt *c, const char *path) {
  hm_st_file *f;
  hm_status st = hm_st_open(path, &f);
  if (st != HM_OK) return st;
  hm_st_file **nf = realloc(c->files, (c->nfiles + 1) * sizeof *nf);
  ck_name *nn = nf ? realloc(c->names, (c->nnames + f->n) * sizeof *nn) : NULL;
  if (nf) c->files = nf;
  if (!nf || (!nn && f->n)) {
    hm_st_close(f);
    return hm_fail(HM_ERR_NO_MEMORY, "checkpoint index");
  }
  if (nn) c->names = nn;
  for (uint32_t i = 0; i < f->n; i++) c->names[c->nnames + i] = (ck_name){f->e[i].name, c->nfiles};
  c->nnames += f->n;
  c->files[c->nfiles++] = f;
  return HM_OK;
}

hm_status hm_ckpt_open(const char *path, hm_ckpt **out) {
  if (!path || !out) return hm_fail(HM_ERR_INVALID_ARG, "hm_ckpt_open: null argument");
  hm_ckpt *c = calloc(1, sizeof *c);
  if (!c || !(c->path = strdup(path))) {
    free(c);
    return hm_fail(HM_ERR_NO_MEMORY, "checkpoint");
  }
  struct stat sb;
  hm_status st = HM_OK;
  if (stat(path, &sb) != 0) {
    st = hm_fail(HM_ERR_NOT_FOUND, "%s: %s", path, strerror(errno));
  } else if (S_ISDIR(sb.st_mode)) {
    struct dirent **list;
    int n = scandir(path, &list, NULL, alphasort);
    if (n < 0) st = hm_fail(HM_ERR_IO, "%s: %s", path, strerror(errno));
    for (int i = 0; i < n; i++) {
      if (st == HM_OK && is_safetensors(list[i]->d_name)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, list[i]->d_name);
        st = ckpt_add(c, p);
      }
      free(list[i]);
    }
    if (n >= 0) free(list);
    if (st == HM_OK && c->nfiles == 0) st = hm_fail(HM_ERR_NOT_FOUND, "%s: no .safetensors files", path);
  } else {
    st = ckpt_add(c, path);
    ckpt_hint(c, path);
  }
  if (st == HM_OK) {
    qsort(c->names, c->nnames, sizeof *c->names, cmp_name);
    for (uint32_t i = 1; i < c->nnames; i++)
      if (!strcmp(c->names[i].name, c->names[i - 1].name)) {
        st = hm_fail(HM_ERR_FORMAT, "%s: tensor '%s' in two shards", path, c->names[i].name);
        break;
      }
  }
  if (st != HM_OK) {
    hm_ckpt_close(c);
    return st;
  }
  *out = c;
  return HM_OK;
}

static const st_entry *ck_find(const hm_ckpt *c, const char *name, const hm_st_file **f) {
  ck_name key = {name, 0};
  const ck_name *n = bsearch(&key, c->names, c->nnames, sizeof *c->names, cmp_name);
  if (!n) return NULL;
  *f = c->files[n->file];
  return find(*f, name);
}

static hm_status ck_missing(const hm_ckpt *c, const char *name) {
  return hm_fail(HM_ERR_NOT_FOUND, "checkpoint %s: no tensor '%s'%s", c->path, name, c->hint);
}

static hm_status ck_info(void *ctx, const char *name, hm_dtype *dt, uint32_t *ndim, uint64_t shape[2]) {
  const hm_st_file *f;
  const st_entry *e = ck_find(ctx, name, &f);
  if (!e) return ck_missing(ctx, name);
  if (e->dt == HM_DT_COUNT) return refuse_dtype(f, e);
  if (e->ndim < 1 || e->ndim > 2) return hm_fail(HM_ERR_FORMAT, "checkpoint: '%s' has %u dimensions", name, e->ndim);
  *dt = e->dt;
  *ndim = e->ndim;
  shape[0] = e->shape[0];
  shape[1] = e->ndim == 2 ? e->shape[1] : 0;
  return HM_OK;
}

static hm_status ck_read(void *ctx, const char *name, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc, void *out) {
  const hm_st_file *f;
  const st_entry *e = ck_find(ctx, name, &f);
  if (!e) return ck_missing(ctx, name);
  if (e->dt == HM_DT_COUNT) return refuse_dtype(f, e);
  uint64_t rows = e->ndim == 2 ? e->shape[0] : 1, cols = e->ndim == 2 ? e->shape[1] : e->shape[0];
  if (e->ndim < 1 || e->ndim > 2 || nr == 0 || nc == 0 || r0 + nr > rows || c0 + nc > cols)
    return hm_fail(HM_ERR_INVALID_ARG, "checkpoint: '%s' [%llu+%llu, %llu+%llu] outside its shape", name,
                   (unsigned long long)r0, (unsigned long long)nr, (unsigned long long)c0, (unsigned long long)nc);
  size_t es = hm_dtype_size(e->dt);
  const uint8_t *base = (const uint8_t *)f->map + f->data_off + e->begin;
  for (uint64_t r = 0; r < nr; r++)
    memcpy((uint8_t *)out + r * nc * es, base + ((r0 + r) * cols + c0) * es, nc * es);
  /* The pages just read leave this process's mapping (they stay in the page cache): a rank's build
   * touches every page of a tensor it slices by columns, and a layer's shard is ~7 GB, so pages kept
   * mapped would count a whole layer as resident; a later read faults them back in. */
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)(base + (r0 * cols + c0) * es) & ~(pg - 1);
  uintptr_t hi = ((uintptr_t)(base + ((r0 + nr - 1) * cols + c0 + nc) * es) + pg - 1) & ~(pg - 1);
  madvise((void *)lo, hi - lo, MADV_DONTNEED);
  return HM_OK;
}

hm_source hm_ckpt_source(hm_ckpt *c) {
  hm_source s = {c, ck_info, ck_read};
  return s;
}
