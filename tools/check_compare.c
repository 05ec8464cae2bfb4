/* tools/check_compare.c: the per-output comparisons hsa-mono-check's launch commands (ffn, k1,
 * layer, model) print against the fp32 reference (check.h). */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "hm_config.h"

static const char *note;

void check_note(const char *n) { note = n; }

static const char *suffix(void) { return note ? note : ""; }

/* max-abs, relative L2 error and cosine of a against ref (a NaN: max-abs infinite) */
static void stats(const float *a, const float *ref, uint64_t n, double *maxabs, double *rel, double *cos) {
  double m = 0, num = 0, den = 0, dot = 0, na = 0, nb = 0;
  for (uint64_t i = 0; i < n; i++) {
    double d = (double)a[i] - ref[i];
    /* a NaN anywhere is infinitely wrong, whatever the sums make of it */
    if (fabs(d) > m || d != d) m = d != d ? INFINITY : fabs(d);
    num += d * d, den += (double)ref[i] * ref[i];
    dot += (double)a[i] * ref[i], na += (double)a[i] * a[i], nb += (double)ref[i] * ref[i];
  }
  /* an all-zero reference: the absolute L2 error; the cosine of two zero vectors is 1 when equal */
  *maxabs = m, *rel = den > 0 ? sqrt(num / den) : sqrt(num), *cos = na > 0 && nb > 0 ? dot / sqrt(na * nb) : (num == 0);
}

int check_compare(const char *name, const float *a, const float *ref, uint64_t n, double rel_tol, double cos_tol) {
  double maxabs, rel, cos;
  stats(a, ref, n, &maxabs, &rel, &cos);
  int ok = rel <= rel_tol && cos >= cos_tol && maxabs != INFINITY;
  printf("  %-8s max_abs %-11.4g rel %-11.4g cos %-12.9f %s (tolerance rel %g, cos %.9g)%s\n", name, maxabs, rel, cos,
         ok ? "ok  " : "FAIL", rel_tol, cos_tol, suffix());
  return ok;
}

int check_show(const char *name, const float *a, const float *ref, uint64_t n, const char *held) {
  double maxabs, rel, cos;
  stats(a, ref, n, &maxabs, &rel, &cos);
  int ok = maxabs != INFINITY;
  printf("  %-8s max_abs %-11.4g rel %-11.4g cos %-12.9f %s (%s)%s\n", name, maxabs, rel, cos, ok ? "    " : "FAIL",
         ok ? held : "NaN", suffix());
  return ok;
}

int check_count(const char *name, uint64_t diff, uint64_t n, const char *what, uint64_t tol, const char *why) {
  int ok = diff <= tol;
  printf("  %-8s differ %llu of %llu %s %s (tolerance %llu: %s)%s\n", name, (unsigned long long)diff,
         (unsigned long long)n, what, ok ? "ok  " : "FAIL", (unsigned long long)tol, why, suffix());
  return ok;
}

int check_topk(const int32_t *a, const int32_t *ref, uint32_t S, const int64_t *pos, const int64_t *slot,
               uint32_t ratio, double crowded_pct) {
  /* a row's picks, ascending and -1 padded: the ids of a missing from ref's row, by a merge */
  uint64_t moved = 0, picked = 0, crowded = 0;
  for (uint32_t t = 0; t < S; t++) {
    const int32_t *x = a + (uint64_t)t * HM_TOPK_ATTN, *y = ref + (uint64_t)t * HM_TOPK_ATTN;
    uint32_t i = 0, j = 0;
    for (; i < HM_TOPK_ATTN && x[i] >= 0; i++) {
      while (j < HM_TOPK_ATTN && y[j] >= 0 && y[j] < x[i]) j++;
      moved += !(j < HM_TOPK_ATTN && y[j] == x[i]);
    }
    /* and the count of picks itself: a shorter or longer list is a difference too */
    for (j = 0; j < HM_TOPK_ATTN && y[j] >= 0; j++) {}
    moved += j > i ? j - i : 0;
    picked += i;
    if (slot[t] >= 0 && (uint64_t)(pos[t] + 1) / ratio > HM_TOPK_ATTN) crowded += HM_TOPK_ATTN;
  }
  char what[64];
  snprintf(what, sizeof what, "picks of the select step (%llu picked)", (unsigned long long)picked);
  return check_count("topk", moved, picked, what, (uint64_t)(crowded * crowded_pct / 100),
                     "exact where every entry is picked; a near tie may move one past 512 entries");
}

double check_rel(const float *a, const float *ref, uint64_t n) {
  double num = 0, den = 0;
  for (uint64_t i = 0; i < n; i++) {
    double d = (double)a[i] - ref[i];
    if (d != d) return INFINITY;
    num += d * d, den += (double)ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}
