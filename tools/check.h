/* tools/check.h: hsa-mono-check's commands beyond `ref` (each in its own file), called from its
 * main with argv[0] the command's name. */
#ifndef HM_TOOLS_CHECK_H
#define HM_TOOLS_CHECK_H

int check_ffn(int argc, char **argv);

#endif /* HM_TOOLS_CHECK_H */
