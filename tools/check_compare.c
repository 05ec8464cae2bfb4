/* tools/check_compare.c: the per-output comparison hsa-mono-check's launch commands (ffn, k1)
 * print against the fp32 reference (check.h). */
#include <math.h>
#include <stdio.h>

#include "check.h"

int check_compare(const char *name, const float *a, const float *ref, uint64_t n, double rel_tol, double cos_tol) {
  double maxabs = 0, num = 0, den = 0, dot = 0, na = 0, nb = 0;
  for (uint64_t i = 0; i < n; i++) {
    double d = (double)a[i] - ref[i];
    /* a NaN anywhere is infinitely wrong, whatever the sums make of it */
    if (fabs(d) > maxabs || d != d) maxabs = d != d ? INFINITY : fabs(d);
    num += d * d, den += (double)ref[i] * ref[i];
    dot += (double)a[i] * ref[i], na += (double)a[i] * a[i], nb += (double)ref[i] * ref[i];
  }
  /* an all-zero reference: the absolute L2 error; the cosine of two zero vectors is 1 when equal */
  double rel = den > 0 ? sqrt(num / den) : sqrt(num), cos = na > 0 && nb > 0 ? dot / sqrt(na * nb) : (num == 0);
  int ok = rel <= rel_tol && cos >= cos_tol && maxabs != INFINITY;
  printf("  %-8s max_abs %-11.4g rel %-11.4g cos %-12.9f %s (tolerance rel %g, cos %.9g)\n", name, maxabs, rel, cos,
         ok ? "ok  " : "FAIL", rel_tol, cos_tol);
  return ok;
}
