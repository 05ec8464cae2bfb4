/* device/kernels/ffn.cl: the FFN launch on gfx950 (spec/mono.md §2.3, §2.4, §3): one persistent
 * kernel from wo_b's unreduced output to the layer's outputs, its stages in program order. */
#include "../dev.h"
#include "../epoch.h"
#include "../ffn/router.h"
#include "../ffn/routed.h"
#include "../ffn/seam.h"

/* The step's context: the epoch (every CTA marks it), its tag 2e + 2, and the two all-reduces'
 * views, whose deadline counts from here. */
DEV_INLINE void ffn_begin(struct ffn_ctx *c, DEV_ARGSPACE const struct ffn_args *a, __local struct ffn_lds *lds) {
  c->a = a;
  u32 e = dev_epoch_begin((__global u32 *)a->epoch, &lds->word[1], 1u);
  c->tag = dev_readfirstlane_u32(dev_epoch_tag_k2(e));
  /* the tag opaque from here: the kernel keeps it, not e, through its stages (e is read back at
   * the end from the LDS word dev_epoch_begin handed it out in) */
#if defined(DEV_GPU)
  __asm__ volatile("" : "+s"(c->tag));
#endif
  c->ok = 1;
  if (dev_lid() == 0) {
    lds->deadline = dev_realtime() + a->link.deadline_ticks;
    lds->word[2] = dev_cta(); /* for the end (see dev_epoch_end_as) */
  }
  c->deadline = &lds->deadline;
  dev_barrier();
}

DEV_KERNEL(ffn, struct ffn_args, 512) {
  DEV_LDS(struct ffn_lds, lds);
  /* a replay of a recorded step finds the handshake's verdict GO from the launch before (it is
   * reset only by hm_persistent_launch): its grid was checked resident then */
  if (!dev_persist_arrive((__global struct dev_persist *)DEV_ARGS_PTR(struct ffn_args)->persist, &lds->word[0])) return;
  struct ffn_ctx c;
  ffn_begin(&c, DEV_ARGS_PTR(struct ffn_args), lds);

  /* Stages in program order (placements: spec/mono.md §3.1). Each stage and each task starts with
   * ffn_next_stage, which keeps the argument loads it makes inside it (see ffn.h); the stage's
   * task count and first CTA are computed there too, not held from the kernel's start. */
#define FFN_STAGE(task, count, base, call) \
  {                                        \
    ffn_next_stage(&c);                    \
    const u32 n_ = (count), b_ = (base);   \
    FFN_FOR_TASKS(task, n_, b_) {          \
      struct ffn_ctx t_ = c;               \
      ffn_next_stage(&t_);                 \
      call;                                \
      c.ok = t_.ok;                        \
    }                                      \
  }
#define S_ (c.a->S)
#define NS_ ffn_ns(&c)
#define ROUTER0 (S_ > 8u ? S_ : 8u)
#define ROUTE0 (ROUTER0 + ffn_router_tasks(&c))
#define SHARED0 (ROUTE0 + (S_ > 8u ? S_ : 8u))
  /* the attention output's all-reduce and the FFN seam */
  {
    struct ffn_ctx t_ = c;
    ffn_next_stage(&t_);
    ffn_push_parts(&t_);
  }
  FFN_STAGE(j, NS_, 0u, ffn_slice(&t_, lds, j))
  FFN_STAGE(t, S_, NS_, ffn_gate(&t_, lds, t))
  FFN_STAGE(t, S_, NS_ + S_, ffn_norm(&t_, lds, t))
  /* the router and the route */
  FFN_STAGE(task, ffn_router_tasks(&c), ROUTER0, ffn_router_task(&t_, lds, task))
  FFN_STAGE(t, S_, ROUTE0, ffn_route(&t_, lds, t))
  /* the shared expert, then the routed experts over the step's union of chosen experts */
  FFN_STAGE(task, ffn_shared_tasks(&c), SHARED0, ffn_shared_task(&t_, lds, task))
  ffn_next_stage(&c);
  ffn_route_table(&c, lds);
  FFN_STAGE(u, ffn_ug_units(&c, lds), SHARED0 + ffn_shared_tasks(&c), ffn_ug_unit(&t_, lds, u))
  FFN_STAGE(rt, ffn_down_tasks(&c), 0u, ffn_down_task(&t_, lds, rt))
  /* the MoE output's all-reduce */
  FFN_STAGE(j, NS_, 0u, ffn_reduce(&t_, j))
#undef FFN_STAGE
#undef S_
#undef NS_
#undef ROUTER0
#undef ROUTE0
#undef SHARED0
  dev_epoch_end_as((__global u32 *)c.a->epoch, dev_readfirstlane_u32(lds->word[1]),
                   dev_readfirstlane_u32(lds->word[2]) == 0);
}
