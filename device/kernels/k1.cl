/* device/kernels/k1.cl: K1 on gfx950 and gfx942 (spec/mono.md §2.1, §2.6, §3): one persistent kernel from
 * the previous layer's output and seam state to res_mid, this seam's mixes, roped q, the KV records, the key table. */
#include "../attn/k1.h"
#include "../dev.h"
#include "../epoch.h"

DEV_KERNEL(k1, struct k1_args, 512) {
  DEV_LDS(struct k1_lds, lds);
  /* a replay of a recorded step finds the handshake's verdict GO from the launch before (it is
   * reset only by hm_persistent_launch): its grid was checked resident then */
  if (!dev_persist_arrive((__global struct hm_dev_persist *)DEV_ARGS_PTR(struct k1_args)->persist, &lds->word[0])) return;
  struct k1_ctx c;
  c.a = DEV_ARGS_PTR(struct k1_args);
  /* K1 tags 2e + 1 and only reads e, unless it runs alone on its epoch buffer (advance): then every
   * CTA marks e and CTA 0 ends the epoch, as K2 would */
  const u32 advance = c.a->advance;
  u32 e = dev_epoch_begin((__global u32 *)c.a->epoch, &lds->word[1], advance);
  c.tag = dev_readfirstlane_u32(dev_epoch_tag_k1(e));
#if defined(DEV_GPU)
  __asm__ volatile("" : "+s"(c.tag));
#endif
  if (dev_lid() == 0) lds->word[2] = dev_cta() | advance << 31; /* for the end */
  dev_barrier();
  u32 tl_ = 0u; /* the timeline's slot (dev_timeline.h): 0 the start, then a stage each */
  dev_tl_stamp(c.a->timeline, tl_, DEV_TL_EVERY, 1u);

  /* Stages in program order (placements: spec/mono.md §3.1); task i of a stage placed from CTA b
   * runs on CTA (b + i) % grid. Every wait is on an earlier stage, so a resident grid finishes. */
#define K1_STAGE(task, count, base, call) \
  {                                       \
    k1_next_stage(&c);                    \
    const u32 n_ = (count), b_ = (base);  \
    u32 ran_ = dev_in_vgpr(0u);           \
    HO_FOR_TASKS(task, n_, b_) {          \
      struct k1_ctx t_ = c;               \
      k1_next_stage(&t_);                 \
      call;                               \
      ran_ = dev_in_vgpr(ran_ + 1u);      \
    }                                     \
    dev_tl_stamp(c.a->timeline, ++tl_, n_, ran_); \
  }
#define S_ (c.a->seam.S)
#define NS_ seam_slices(&c.a->seam)
  /* the attention seam: x folded into the streams from the previous layer's output */
  K1_STAGE(j, NS_, 0u, seam_slice(&t_.a->seam, t_.tag, &lds->u.slice, j, (const struct ar_view *)0, &(u32){1u}))
  K1_STAGE(t, S_, NS_, seam_norm(&t_.a->seam, t_.tag, &lds->u.norm, t))
  K1_STAGE(t, S_, NS_ + S_, seam_gate(&t_.a->seam, t_.tag, &lds->u.gate, t))
  /* the key table on the CTAs without a wqkv unit (none in the index build: keylist writes it) */
  K1_STAGE(t, c.a->index_build ? 0u : S_, 224u, kt_token(&t_.a->kt, t); dev_barrier())
  /* the attention front */
  struct k1_gemv_state g = {0u, 0u};
  K1_STAGE(u, k1_wqkv_units(&c), 0u, k1_wqkv_unit(&t_, lds, u, &g))
  dev_barrier(); /* the last tile's reads of the reduction buffers before qkv's use of the LDS */
  K1_STAGE(t, S_, 0u, k1_qkv(&t_, lds, t))
  g.waited = 0;
  K1_STAGE(task, k1_wq_b_tasks(&c), 0u, k1_wq_b_task(&t_, lds, task, &g))
#undef K1_STAGE
#undef S_
#undef NS_
  u32 w2 = dev_readfirstlane_u32(lds->word[2]);
  /* through c.a, which the stages keep live, not the kernel's argument pointer: holding that one too
   * to the end costs two SGPRs, which gfx942 (fewer left to the kernel with XNACK) spilled */
  if (w2 >> 31) dev_epoch_end_as((__global u32 *)c.a->epoch, dev_readfirstlane_u32(lds->word[1]),
                                 (w2 & 0x7fffffffu) == 0);
}
