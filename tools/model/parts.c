/* tools/model/parts.c: the parts the timing model knows, every figure from docs/timing_model.md's table
 * (which gives each one's public source, or says it is a guess). */
#include <stddef.h>
#include <strings.h>

#include "hm_model.h"

/* one wave instruction's FLOPs (2 M N K), in dev_host.h's enum dev_mfma_op order */
#define MFMA_FLOPS {2 * 16 * 16 * 4, 2 * 16 * 16 * 16, 2 * 16 * 16 * 16, 2 * 32 * 32 * 8, 2 * 16 * 16 * 32, \
                    2 * 16 * 16 * 32, 2 * 32 * 32 * 16, 2 * 16 * 16 * 128, 2 * 32 * 32 * 64}

static const hm_part parts[] = {
    {
        .name = "MI355X",
        .id = "mi355x",
        .clock_hz = 2.4e9,
        .cus = 256,
        .hbm_bw = 7.2e12,
        .cu_bw = 64 * 2.4e9,
        .load_lat_s = 0.5e-6,
        .dev_handoff_s = 0.45e-6,
        .sys_handoff_s = 0.8e-6,
        .xgmi_bw = 76.8e9,
        /* f32, f16, bf16 16x16x16, bf16 32x32x8, bf16 16x16x32, fp8 16x16x32, fp8 32x32x16, scaled 16x16x128,
         * scaled 32x32x64 */
        .mfma_flops_clk = {256, 4096, 4096, 4096, 4096, 8192, 8192, 8192, 8192},
        .mfma_flops = MFMA_FLOPS,
    },
    {
        .name = "MI300X",
        .id = "mi300x",
        .clock_hz = 2.1e9,
        .cus = 304,
        .hbm_bw = 4.2e12,
        .cu_bw = 64 * 2.1e9,
        .load_lat_s = 0.5e-6,
        .dev_handoff_s = 0.45e-6,
        .sys_handoff_s = 0.8e-6,
        .xgmi_bw = 64e9,
        .mfma_flops_clk = {256, 2048, 2048, 2048, 0, 4096, 4096, 0, 0},
        .mfma_flops = MFMA_FLOPS,
    },
};

const hm_part *hm_part_find(const char *id) {
  for (unsigned i = 0; id && i < sizeof parts / sizeof *parts; i++)
    if (!strcasecmp(parts[i].id, id)) return &parts[i];
  return NULL;
}
