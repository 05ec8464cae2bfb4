/* tools/check.h: hsa-mono-check's commands beyond `ref` (each in its own file), called from its
 * main with argv[0] the command's name, and the comparison they print. */
#ifndef HM_TOOLS_CHECK_H
#define HM_TOOLS_CHECK_H

#include <stdint.h>

int check_ffn(int argc, char **argv);
int check_k1(int argc, char **argv);

/* One output of n floats against the reference's (check_compare.c): prints a line with its name,
 * the max-abs and relative L2 error, the cosine, ok or FAIL, and the tolerance; 1 when the relative
 * error is at most `rel`, the cosine at least `cos` and nothing is NaN, else 0. */
int check_compare(const char *name, const float *a, const float *ref, uint64_t n, double rel, double cos);

#endif /* HM_TOOLS_CHECK_H */
