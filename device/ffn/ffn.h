/* device/ffn/ffn.h: the FFN launch's shared pieces: its context (arguments, scratch regions, the
 * step's tag, the two all-reduces), its one LDS struct (a union of the stages'), the route table. */
#ifndef HM_FFN_H
#define HM_FFN_H

#include "../ar.h"
#include "../dev.h"
#include "../epoch.h"
#include "../formats.h"
#include "../gemv.h"
#include "../handoff.h"
#include "../kernels/ffn_args.h"
#include "../layouts.h"
#include "../seam.h"

#define FFN_LOG2E 1.44269502f /* f32(log2 e), as the reference's HM_LOG2E */
#define FFN_LN2 0.693147182f  /* f32(ln 2) */
#define FFN_MAX_PICKS (FFN_MAX_ROWS * FFN_MAX_TOPK)
#define FFN_MAX_SLOT_TILES (FFN_MAX_PICKS + FFN_MAX_PICKS / FFN_PICK_TILE)

struct ffn_ctx {
  DEV_ARGSPACE const struct ffn_args *a; /* the arguments, read where used */
  u32 tag;   /* 2e + 2: every mailbox of this step carries it */
  __local const u64 *deadline; /* dev_realtime() past which a wait on a peer gives up (in LDS) */
  u32 ok;    /* 0 once a wait on a peer gave up (this work-item's view; the status word says why) */
};

DEV_INLINE __global u8 *ffn_scr(const struct ffn_ctx *c, u64 off) { return (__global u8 *)(c->a->scratch + off); }
DEV_INLINE __global u64 *ffn_pairs(const struct ffn_ctx *c, u64 off) { return (__global u64 *)(c->a->scratch + off); }
DEV_INLINE __global u32 *ffn_words(const struct ffn_ctx *c, u64 off) { return (__global u32 *)(c->a->scratch + off); }

/* Shapes derived from the arguments where used (a context field would be one more scalar
 * register held through the whole kernel). */
DEV_INLINE u32 ffn_ns(const struct ffn_ctx *c) { return seam_slices(&c->a->seam); } /* slices */
DEV_INLINE u32 ffn_ntiles(const struct ffn_ctx *c) { return ffn_tiles(c->a->S); }   /* token tiles */
DEV_INLINE u32 ffn_ngroups(const struct ffn_ctx *c) { return ffn_ug_groups_of(c->a->Ir); } /* ug units a tile */

/* The step's epoch e, from its tag 2e + 2 (not kept apart: one scalar register fewer for the
 * whole kernel, which would otherwise be spilled). */
DEV_INLINE u32 ffn_epoch(const struct ffn_ctx *c) { return (c->tag - 2u) / 2u; }

/* Between stages: the arguments' address hidden from the optimiser, so the loads of arguments a
 * stage makes stay in that stage. Argument loads are invariant, and the optimiser would otherwise
 * hoist them all to the kernel's entry and keep every argument in scalar registers through the
 * whole kernel, more than there are. */
DEV_INLINE void ffn_next_stage(struct ffn_ctx *c) {
#if defined(DEV_GPU)
  __asm__ volatile("" : "+s"(c->a));
#else
  __asm__ volatile("" : "+r"(c->a));
#endif
}

/* The view of one of the launch's two all-reduces (built where used: a view is some 40 scalar
 * registers, too many to keep through the whole kernel). */
DEV_INLINE void ffn_view(const struct ffn_ctx *c, struct ar_view *v, u32 site) {
  ar_view_init(v, c->a->link, site == FFN_SITE_ATTN ? c->a->region_attn : c->a->region_ffn, c->a->S, c->a->D / 2u,
               c->tag, dev_epoch_parity(ffn_epoch(c)), *c->deadline, site);
}

/* A tagged pair of this step (device/handoff.h), and one awaited. */
DEV_INLINE void ffn_put(const struct ffn_ctx *c, __global u64 *slot, u32 value) { ho_pair_put(slot, value, c->tag); }
DEV_INLINE u32 ffn_get(const struct ffn_ctx *c, __global const u64 *slot) { return ho_pair_get(slot, c->tag); }

/* Up to FFN_BATCH pairs of this step, waited for together (device/handoff.h). */
#define FFN_BATCH HO_GET_BATCH
DEV_INLINE void ffn_get_batch(const struct ffn_ctx *c, __global const u64 *slots, u64 i0, u64 stride, u32 n,
                              u32 out[FFN_BATCH]) {
  ho_get_batch(c->tag, slots, i0, stride, n, out);
}

/* Stage placement (spec/mono.md §3.1): task i of a stage placed from CTA `base` runs on CTA
 * (base + i) % grid. */
#define FFN_FOR_TASKS(task, n, base) HO_FOR_TASKS(task, n, base)

/* ---------------------------------------------------------------- the route table */

/* Rebuilt in LDS by every CTA that needs it (spec/mono.md §3.1 load_route), identical on every
 * CTA: the union U of the chosen experts in ascending order ("slots"), each slot's picks ordered
 * by token; a pick's position in that order is its row of MID. Slot tiles: each slot's picks in
 * tiles of 16, the units of the routed GEMVs. */
struct ffn_route {
  i32 ids[FFN_MAX_ROWS][FFN_MAX_TOPK]; /* chosen experts, pick order */
  f32 wts[FFN_MAX_ROWS][FFN_MAX_TOPK]; /* their weights */
  u16 pos[FFN_MAX_ROWS][FFN_MAX_TOPK]; /* the pick's position in slot order */
  u16 count[FFN_MAX_E];                /* picks of each expert */
  u16 first[FFN_MAX_E];                /* position of each expert's first pick */
  u8 pick_tok[FFN_MAX_PICKS];          /* token of the pick at each position */
  u16 tile_expert[FFN_MAX_SLOT_TILES];
  u16 tile_first[FFN_MAX_SLOT_TILES];  /* first pick position of the tile */
  u8 tile_n[FFN_MAX_SLOT_TILES];       /* picks in the tile (1..16) */
  u32 ntiles;
};

/* ---------------------------------------------------------------- LDS */

struct ffn_lds_route { f32 logit[FFN_MAX_E][4]; f32 val[FFN_MAX_E]; f32 score[FFN_MAX_E]; };
struct ffn_lds_gemv { gemv_red red[4]; };
struct ffn_lds_ug { f32 ch[16][64][4]; };
/* gfx942 keeps each pick's contribution as bf16(contrib x w), the value the combine adds (§2.6,
 * its 64 KB of LDS); gfx950 the f32 contribution. Two tasks' worth: a CTA runs its down tasks in
 * pairs (routed.h's ffn_down_task). */
#if DEV_ARCH_GFX942
typedef u16 ffn_contrib;
#else
typedef f32 ffn_contrib;
#endif
struct ffn_lds_down { ffn_contrib contrib[2][FFN_MAX_PICKS][16]; f32 shared[2][FFN_MAX_ROWS][16]; gemv_red red; };

/* The broadcasts first: K2's LDS overlays the attention back's stages on everything after them
 * (device/attn/k2.h), so the epoch, the verdict and the deadline survive into the FFN stages. */
struct ffn_lds {
  u32 word[4]; /* broadcasts (the persistent verdict, the epoch) */
  u64 deadline; /* the launch's bound on waits on peers */
  struct ffn_route rt;
  union {
    struct seam_lds_slice slice;
    struct seam_lds_gate gate;
    struct seam_lds_norm norm;
    struct ffn_lds_route route;
    struct ffn_lds_gemv gemv;
    struct ffn_lds_ug ug;
    struct ffn_lds_down down;
  } u;
};

/* ---------------------------------------------------------------- small math */

/* IEEE division where the reference divides (the GPU's `/` is not correctly rounded). */
DEV_INLINE f32 ffn_div(f32 a, f32 b) { return seam_div(a, b); }

/* fmaxf / fminf as v_max_f32 / v_min_f32 (a NaN operand gives the other). */
DEV_INLINE f32 ffn_max(f32 a, f32 b) { return __builtin_fmaxf(a, b); }
DEV_INLINE f32 ffn_min(f32 a, f32 b) { return __builtin_fminf(a, b); }

#endif /* HM_FFN_H */
