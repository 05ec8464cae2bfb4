/* hsa/version.c: hm_version(), the version string the library was built with (meson's project
 * version, through the generated hm_version.h), for clients that check headers against library. */
#include "hm_version.h"

const char *hm_version(void) { return HM_VERSION; }
