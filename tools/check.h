/* tools/check.h: hsa-mono-check's commands beyond `ref` (each in its own file), called from its
 * main with argv[0] the command's name, and the comparisons they print. */
#ifndef HM_TOOLS_CHECK_H
#define HM_TOOLS_CHECK_H

#include <stdint.h>

int check_ffn(int argc, char **argv);
int check_k1(int argc, char **argv);
int check_layer(int argc, char **argv);
int check_model(int argc, char **argv);

/* A note every comparison line ends with from now on (a reduced run says so on every line); NULL
 * for none. The string must outlive the lines. */
void check_note(const char *note);

/* One output of n floats against the reference's (check_compare.c): prints a line with its name,
 * the max-abs and relative L2 error, the cosine, ok or FAIL, and the tolerance; 1 when the relative
 * error is at most `rel`, the cosine at least `cos` and nothing is NaN, else 0. */
int check_compare(const char *name, const float *a, const float *ref, uint64_t n, double rel, double cos);

/* The same figures without a tolerance, for an output `held` says how it is held instead; 0 (and
 * FAIL) only when something is NaN. */
int check_show(const char *name, const float *a, const float *ref, uint64_t n, const char *held);

/* A count of differing items against its tolerance (why: the tolerance's reason), as one line; 1
 * within. */
int check_count(const char *name, uint64_t diff, uint64_t n, const char *what, uint64_t tol, const char *why);

/* The relative L2 error of a against ref over n floats (an all-zero reference: the absolute one; a
 * NaN: infinite). */
double check_rel(const float *a, const float *ref, uint64_t n);

#endif /* HM_TOOLS_CHECK_H */
