/* device/kernels/k2.cl: K2 on gfx950 and gfx942 (spec/mono.md §2.2-§2.6, §3): one persistent kernel from K1's q,
 * key table and seam outputs through the attention back and the FFN launch's stages to the layer's. */
#define AR_POLL_TP 4u /* TP 2 or 4 only (layer/run/ffn_bind.c): device/ar.h */
#include "../attn/k2.h"
#include "../dev.h"
#include "../ffn/launch.h"

DEV_KERNEL(k2, struct k2_args, 512) {
  DEV_LDS(union k2_lds, lds);
  /* a replay of a recorded step finds the handshake's verdict GO from the launch before (it is
   * reset only by hm_persistent_launch): its grid was checked resident then */
  if (!dev_persist_arrive((__global struct hm_dev_persist *)DEV_ARGS_PTR(struct k2_args)->ffn.persist, &lds->f.word[0]))
    return;
  /* the FFN launch's context: the epoch (every CTA marks it, CTA 0 advances it at the end), the
   * tag 2e + 2 (K1 of this step tagged 2e + 1 on the same epoch buffer), the peers' deadline */
  struct ffn_ctx c;
  ffn_begin(&c, &DEV_ARGS_PTR(struct k2_args)->ffn, &lds->f);
  u32 tl_ = 0u; /* the timeline's slot (dev_timeline.h): 0 the start, then a stage each */
  dev_tl_stamp(c.a->timeline, tl_, DEV_TL_EVERY, 1u);

  /* The attention back's stages in program order (placements: spec/mono.md §3.1), each waiting
   * only on earlier ones, then the FFN launch's from the seam's slices on (wo_b has pushed). */
#define K2_STAGE(task, count, base, call) \
  {                                       \
    ffn_next_stage(&c);                   \
    const u32 n_ = (count), b_ = (base);  \
    u32 ran_ = dev_in_vgpr(0u);           \
    HO_FOR_TASKS(task, n_, b_) {          \
      struct ffn_ctx t_ = c;              \
      ffn_next_stage(&t_);                \
      call;                               \
      ran_ = dev_in_vgpr(ran_ + 1u);      \
    }                                     \
    dev_tl_stamp(c.a->timeline, ++tl_, n_, ran_); \
  }
#define NSPLIT_ k2_split_units(&c)
#define NCOMB_ k2_comb_units(&c)
  K2_STAGE(u, NSPLIT_, 0u, k2_split(&t_, lds, u))
  K2_STAGE(u, NCOMB_, NSPLIT_, k2_combine(&t_, u))
  struct k2_gemv_state g = {0u, 0u};
  K2_STAGE(task, k2_woa_tasks(&c), NSPLIT_ + NCOMB_, k2_wo_a(&t_, lds, task, &g))
  g.waited = 0;
  K2_STAGE(task, k2_wob_tasks(&c), NSPLIT_ + NCOMB_ + k2_woa_tasks(&c), k2_wo_b(&t_, lds, task, &g))
#undef K2_STAGE
#undef NSPLIT_
#undef NCOMB_
  /* the pushes out before the seam's first wait (device/ar.h's advice), and the last tile's reads
   * of the reduction buffers before the seam's use of the LDS */
  dev_wait_stores();
  dev_barrier();
  ffn_stages(&c, &lds->f, 0u, tl_ + 1u);
  ffn_end(&c, &lds->f);
}
