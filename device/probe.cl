/* device/probe.cl: compiled at configure time to check that the device compiler knows each
 * requested GPU target. */
__attribute__((amdgpu_kernel)) void hm_probe(__global int *p) { p[0] = 1; }
