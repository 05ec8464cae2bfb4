/* device/dev_host.c: the one definition the host kernel object adds to the kernel sources:
 * the slot where the software agent installs its primitives, the table's version and the
 * architecture this object was built for. */
#include "dev_host.h"

__attribute__((visibility("default"))) const struct dev_host_ops *dev_host;
__attribute__((visibility("default"))) const u32 dev_host_abi = DEV_HOST_ABI;
#if defined(DEV_ARCH_GFX950)
__attribute__((visibility("default"))) const char dev_host_arch[] = "gfx950";
#elif defined(DEV_ARCH_GFX942)
__attribute__((visibility("default"))) const char dev_host_arch[] = "gfx942";
#else
#error "device/dev_host.c: build with -DDEV_ARCH_GFX950=1 or -DDEV_ARCH_GFX942=1"
#endif
