/* device/kernels/ffn.cl: the FFN launch on gfx950 (spec/mono.md §2.3, §2.4, §3): one persistent
 * kernel from wo_b's unreduced output to the layer's outputs, its stages in program order. */
#define AR_POLL_TP 4u /* TP 2 or 4 only (layer/run/ffn_bind.c): device/ar.h */
#include "../dev.h"
#include "../ffn/launch.h"

DEV_KERNEL(ffn, struct ffn_args, 512) {
  DEV_LDS(struct ffn_lds, lds);
  /* a replay of a recorded step finds the handshake's verdict GO from the launch before (it is
   * reset only by hm_persistent_launch): its grid was checked resident then */
  if (!dev_persist_arrive((__global struct hm_dev_persist *)DEV_ARGS_PTR(struct ffn_args)->persist, &lds->word[0])) return;
  struct ffn_ctx c;
  ffn_begin(&c, DEV_ARGS_PTR(struct ffn_args), lds);
  dev_tl_stamp(c.a->timeline, 0u, DEV_TL_EVERY, 1u);
  ffn_stages(&c, lds, 1u, 1u);
  ffn_end(&c, lds);
}
