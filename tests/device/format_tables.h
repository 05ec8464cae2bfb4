/* tests/device/format_tables.h: reads the independent number-format tables of
 * tests/data/formats (HSAMONO_TEST_DATA, set by meson test) at run time, for the format and cvt tests.
 *
 * The tables are byte-identical copies of the project's shared reference data (provenance and
 * sha256 sums in tests/data/PROVENANCE.md). Tests fail (not skip) when they are missing, so a
 * green run always means "checked".
 */
#ifndef HM_TEST_FORMAT_TABLES_H
#define HM_TEST_FORMAT_TABLES_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FT_FINITE = 0, FT_NAN = 1, FT_INF = 2 };

/* NAME.decode.csv: code, value, float32_hex, special ("nan", "inf" or empty) */
struct ft_decode {
  unsigned n;           /* rows: 256, or 16 for e2m1 */
  uint32_t bits[256];   /* float32 bits of a finite code's value */
  unsigned kind[256];   /* FT_FINITE, FT_NAN, FT_INF (the sign of an inf is the code's) */
};

/* NAME.encode_rne_sat.csv: input_float32_hex, input, code */
struct ft_encode {
  unsigned n;
  uint32_t *in; /* float32 bits */
  unsigned *code;
};

static inline FILE *ft_open(const char *sub, const char *name) {
  const char *dir = getenv("HSAMONO_TEST_DATA");
  ck_assert_msg(dir && *dir, "HSAMONO_TEST_DATA is not set (meson test sets it to tests/data)");
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  return f;
}

static inline void ft_load_decode(const char *fmt, struct ft_decode *t) {
  char name[128], line[256];
  snprintf(name, sizeof name, "%s.decode.csv", fmt);
  FILE *f = ft_open("formats", name);
  memset(t, 0, sizeof *t);
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f)); /* header */
  ck_assert_msg(strncmp(line, "code,value,float32_hex,special", 30) == 0, "%s: header %s", name, line);
  while (fgets(line, sizeof line, f)) {
    char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    ck_assert_msg(c2 != NULL, "%s: bad row %s", name, line);
    unsigned code = (unsigned)strtoul(line, NULL, 10);
    ck_assert_uint_eq(code, t->n); /* rows are every code, in order */
    ck_assert_uint_lt(code, 256);
    if (strncmp(c2 + 1, ",nan", 4) == 0) {
      t->kind[code] = FT_NAN;
    } else if (strncmp(c2 + 1, ",inf", 4) == 0) {
      t->kind[code] = FT_INF;
    } else {
      char *end;
      t->bits[code] = (uint32_t)strtoul(c2 + 1, &end, 16);
      ck_assert_msg(end != c2 + 1, "%s: no hex in %s", name, line);
      t->kind[code] = FT_FINITE;
    }
    t->n++;
  }
  fclose(f);
}

static inline void ft_load_encode(const char *fmt, struct ft_encode *t) {
  char name[128], line[256];
  snprintf(name, sizeof name, "%s.encode_rne_sat.csv", fmt);
  FILE *f = ft_open("formats", name);
  unsigned cap = 4096;
  t->n = 0;
  t->in = malloc(cap * sizeof *t->in);
  t->code = malloc(cap * sizeof *t->code);
  ck_assert(t->in && t->code);
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_msg(strncmp(line, "input_float32_hex,input,code", 28) == 0, "%s: header %s", name, line);
  while (fgets(line, sizeof line, f)) {
    char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    ck_assert_msg(c2 != NULL, "%s: bad row %s", name, line);
    ck_assert_uint_lt(t->n, cap);
    t->in[t->n] = (uint32_t)strtoul(line, NULL, 16);
    t->code[t->n] = (unsigned)strtoul(c2 + 1, NULL, 10);
    t->n++;
  }
  fclose(f);
  ck_assert_uint_gt(t->n, 50); /* every table has well over 50 rows: a truncated read fails */
}

static inline void ft_free_encode(struct ft_encode *t) {
  free(t->in);
  free(t->code);
}

static inline float ft_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t ft_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

#endif /* HM_TEST_FORMAT_TABLES_H */
