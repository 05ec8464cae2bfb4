/* device/dev_host.c: the one definition the host kernel object adds to the kernel sources:
 * the slot where the software agent installs its primitives, and the table's version. */
#include "dev_host.h"

__attribute__((visibility("default"))) const struct dev_host_ops *dev_host;
__attribute__((visibility("default"))) const u32 dev_host_abi = DEV_HOST_ABI;
