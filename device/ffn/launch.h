/* device/ffn/launch.h: the FFN launch's body, shared by the FFN launch and K2 (which reaches it after
 * the attention back): the step's begin (epoch, tag, deadline), the stages in program order, the end. */
#ifndef HM_FFN_LAUNCH_H
#define HM_FFN_LAUNCH_H

#include "../dev.h"
#include "../epoch.h"
#include "router.h"
#include "routed.h"
#include "seam.h"

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

/* The stages from the attention output's all-reduce to the layer's outputs. push: this rank's
 * wo_b part goes out first (the FFN launch; K2's wo_b tasks have pushed their rows already).
 * tl_slot: the timeline slot of the first stage run here (the push, else the slice). */
DEV_INLINE void ffn_stages(struct ffn_ctx *c_, __local struct ffn_lds *lds, u32 push, u32 tl_slot) {
  struct ffn_ctx c = *c_;
  /* each stage's end stamped into the timeline slot after the one before (dev_timeline.h) */
#define FFN_TL(n, ran) dev_tl_stamp(c.a->timeline, tl_slot++, (n), (ran))
#define FFN_TL_EVERY() dev_tl_stamp(c.a->timeline, tl_slot++, DEV_TL_EVERY, 1u)
  /* Stages in program order (placements: spec/mono.md §3.1; place: handoff.h's ho_place). Each stage
   * and each task starts with ffn_next_stage, which keeps the argument loads it makes inside it (see
   * ffn.h); the stage's task count and placement are computed there too, not held from the kernel's
   * start. FFN_STAGE_LOOP is the loop (loop: its for-head over n_), a task (or `tasks` of them, as
   * the down stage's pairs) an iteration on a fresh context t_, counted for the timeline's stamp. */
#define FFN_STAGE_LOOP(loop, tasks, call)  \
  {                                        \
    u32 ran_ = dev_in_vgpr(0u);            \
    loop {                                 \
      struct ffn_ctx t_ = c;               \
      ffn_next_stage(&t_);                 \
      call;                                \
      c.ok = t_.ok;                        \
      ran_ = dev_in_vgpr(ran_ + (tasks));  \
    }                                      \
    FFN_TL(n_, ran_);                      \
  }
#define FFN_STAGE_PLACED(task, count, place, call)        \
  {                                                       \
    ffn_next_stage(&c);                                   \
    const u32 n_ = (count);                               \
    const struct ho_place p_ = (place);                   \
    FFN_STAGE_LOOP(HO_FOR_PLACED(task, n_, p_), 1u, call) \
  }
#define FFN_STAGE(task, count, base, call) FFN_STAGE_PLACED(task, count, ho_plain(base), call)
#define S_ (c.a->S)
#define NS_ ffn_ns(&c)
#define ROUTER0 (S_ > 8u ? S_ : 8u)
#define ROUTE0 (ROUTER0 + ffn_router_tasks(&c))
#define SHARED0 (ROUTE0 + (S_ > 8u ? S_ : 8u))
#define UG0 (SHARED0 + ffn_shared_tasks(&c))
  /* the down stage's first CTA (routed.h's ffn_ug_place), computed where it is used and kept in a
   * VGPR: held in SGPRs through the stage before it, K2 spilled two on gfx950 */
#define ffn_down_base(c_, lds_) dev_in_vgpr(UG0 + ffn_down_first((c_), (lds_)))
  /* the attention output's all-reduce and the FFN seam */
  if (push) {
    struct ffn_ctx t_ = c;
    ffn_next_stage(&t_);
    ffn_push_parts(&t_);
    FFN_TL_EVERY();
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
  FFN_TL_EVERY();
  FFN_STAGE_PLACED(u, ffn_ug_tasks(&c, lds), ffn_ug_place(&c, lds, UG0, &(u32){0u}), ffn_ug_task(&t_, lds, u))
  /* the down tasks go on round the grid from the CTA after the last gate/up unit, or from the first
   * of the CTAs the units' placement kept lighter: those past the grid's end (320 tasks of 16 rows on
   * 256 CTAs) land on the CTAs that ran the fewest pieces before (at one row, none), not on CTAs 0-63
   * whatever they ran */
  {
    /* two at a time (routed.h's ffn_down_task): a pair counts as its two tasks in the timeline */
    ffn_next_stage(&c);
    const u32 n_ = ffn_down_tasks(&c);
    FFN_STAGE_LOOP(HO_FOR_TASK_PAIRS(rt, n_, ffn_down_base(&c, lds)), rt + dev_ncta() < n_ ? 2u : 1u,
                   ffn_down_task(&t_, lds, rt))
  }
  /* the MoE output's all-reduce */
  FFN_STAGE(j, NS_, 0u, ffn_reduce(&t_, j))
#undef FFN_STAGE
#undef FFN_STAGE_PLACED
#undef FFN_STAGE_LOOP
#undef FFN_TL
#undef FFN_TL_EVERY
#undef S_
#undef NS_
#undef ROUTER0
#undef ROUTE0
#undef SHARED0
#undef UG0
#undef ffn_down_base
  *c_ = c;
}

/* The end: CTA 0 advances the epoch once every CTA has read it (device/epoch.h). */
DEV_INLINE void ffn_end(const struct ffn_ctx *c, __local struct ffn_lds *lds) {
  dev_epoch_end_as((__global u32 *)c->a->epoch, dev_readfirstlane_u32(lds->word[1]),
                   dev_readfirstlane_u32(lds->word[2]) == 0);
}

#endif /* HM_FFN_LAUNCH_H */
