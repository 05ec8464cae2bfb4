/* device/ffn/routed.h: the routed experts (spec/mono.md §2.4, §3.1, §4.2): the route table, the
 * MXFP4 x MXFP8 gate/up units over the step's union of experts, and down + combine + push. */
#ifndef HM_FFN_ROUTED_H
#define HM_FFN_ROUTED_H

#include "shared.h"

/* ---------------------------------------------------------------- the route table */

/* Every CTA, after the route stage: the S x K picks (tagged pairs) -> LDS table (struct
 * ffn_route), the same on every CTA whatever order the pairs arrived in. */
DEV_INLINE void ffn_route_table(const struct ffn_ctx *c, __local struct ffn_lds *lds) {
  __local struct ffn_route *R = &lds->rt;
  const u32 S = c->a->S, E = c->a->E, K = c->a->topk, NP = S * K, lid = dev_lid();
  __global const u64 *ids = ffn_pairs(c, c->a->L.ids), *wts = ffn_pairs(c, c->a->L.wts);
  if (lid < NP) {
    u32 v[FFN_BATCH];
    ffn_get_batch(c, ids, lid, 0, 1u, &v[0]);
    ffn_get_batch(c, wts, lid, 0, 1u, &v[1]);
    R->ids[lid / K][lid % K] = (i32)v[0];
    R->wts[lid / K][lid % K] = dev_f32_bits(v[1]);
  }
  dev_barrier();
  /* picks of each expert */
  for (u32 e = lid; e < E; e += FFN_CTA) {
    u32 n = 0;
    for (u32 p = 0; p < NP; p++) n += R->ids[p / K][p % K] == (i32)e;
    R->count[e] = (u16)n;
  }
  dev_barrier();
  /* slots in ascending expert order, their first positions, their tiles of 16 picks */
  if (lid == 0) {
    u32 pos = 0, nt = 0;
    for (u32 e = 0; e < E; e++) {
      u32 n = R->count[e];
      R->first[e] = (u16)pos;
      for (u32 k = 0; k < n; k += FFN_PICK_TILE) {
        R->tile_expert[nt] = (u16)e;
        R->tile_first[nt] = (u16)(pos + k);
        R->tile_n[nt] = (u8)(n - k < FFN_PICK_TILE ? n - k : FFN_PICK_TILE);
        nt++;
      }
      pos += n;
    }
    R->ntiles = nt;
  }
  dev_barrier();
  /* each slot's picks by token */
  for (u32 e = lid; e < E; e += FFN_CTA) {
    if (!R->count[e]) continue;
    u32 pos = R->first[e];
    for (u32 t = 0; t < S; t++)
      for (u32 k = 0; k < K; k++)
        if (R->ids[t][k] == (i32)e) {
          R->pos[t][k] = (u16)pos;
          R->pick_tok[pos] = (u8)t;
          pos++;
        }
  }
  dev_barrier();
}

/* ---------------------------------------------------------------- gate / up */

/* The routed epilogue (hm_ref_routed_act): bf16((gc * rcp(1 + exp2(gc * -LOG2E))) * uc). */
DEV_INLINE f32 ffn_routed_act(f32 g, f32 u, f32 limit) {
  f32 gc = ffn_min(g, limit), uc = ffn_min(ffn_max(u, -limit), limit);
  f32 sig = dev_rcp(1.0f + dev_exp2(gc * -FFN_LOG2E));
  return fmt_round_bf16((gc * sig) * uc);
}

/* The K slice (chain) of 128-wide step s of the gate/up GEMV (hm_ref_ug_slice): ug_groups 2,
 * two slices (whole 16-step rounds: 0-7 | 8-15, a last partial round split in halves);
 * ug_groups 1, four slices (steps 8i+2k, 8i+2k+1 to slice k). */
DEV_INLINE u32 ffn_ug_slice(u32 s, u32 steps, u32 ug_groups) {
  if (ug_groups == 1u) return (s % 8u) / 2u;
  u32 full = steps / 16u * 16u;
  if (s < full) return (s % 16u) / 8u;
  return (s - full) < (steps - full + 1u) / 2u ? 0u : 1u;
}

/* E8M0 code of (row, K block) of a matrix in shuffle_scale order (codes at s, this expert's). */
DEV_INLINE u32 ffn_shuffled_scale(__global const u8 *s, u32 row, u32 block, u32 cols) {
  u32 i = (u32)hm_scale_shuffle_index(row, block, cols);
  u32 w = dev_ld_u32((__global const u32 *)(s + (i & ~3u)), DEV_CP_NT);
  return (w >> (8u * (i & 3u))) & 0xffu;
}

/* Units of the gate/up stage: slot tiles x groups of 32 columns. A unit is one task, or two (its
 * halves, ffn_ug_task) when the grid has a CTA for every half: then CTAs would sit idle while the
 * path waits on one unit's stream (at one row, TP 4: 108 units of 164 KB for 256 CTAs). Where units
 * outnumber half the grid, CTAs run several pieces anyway, and halves would add a hand-off each.
 * The choice is the same on every CTA (the route table and the grid are). */
DEV_INLINE u32 ffn_ug_units(const struct ffn_ctx *c, __local const struct ffn_lds *lds) {
  return lds->rt.ntiles * ffn_ngroups(c);
}
DEV_INLINE u32 ffn_ug_split(const struct ffn_ctx *c, __local const struct ffn_lds *lds) {
  return 2u * ffn_ug_units(c, lds) <= dev_ncta();
}
DEV_INLINE u32 ffn_ug_tasks(const struct ffn_ctx *c, __local const struct ffn_lds *lds) {
  return ffn_ug_split(c, lds) ? 2u * ffn_ug_units(c, lds) : ffn_ug_units(c, lds);
}

/* One task: a unit (intermediate columns i0..i0+31 of the tile's picks (<= 16) of one expert), or
 * half h of one (columns i0 + 16h .. i0 + 16h + 15: task = h units + unit). The unit's w13 rows are 4
 * row tiles (GUGU: 16 gate rows, 16 up rows, twice; gfx942: rows 2i gate, 2i + 1 up), half h's
 * columns in row tiles 2h and 2h + 1; each row tile's K steps go to 4 / ug chains (ffn_ug_slice), in
 * ascending order in each: a (row tile, chain) item a wave (and a second: a whole unit at ug 1 has
 * 16; a half at ug 2 has 4, waves 4..7 idle). g and u are the chains added in order (f32), then the
 * activation. A whole unit, or half 1 once it has taken half 0's 16 activations a pick from their
 * tagged pairs (UGV, waiting for each pair's tag), finishes the unit: rule A over the 32 columns ->
 * MID rows (pick positions) and codes, then the unit's flag. The numbers are the whole unit's either
 * way: each column's sums are its own, whichever task makes them, and the amax is a max (the shared
 * expert's tasks split the same way, device/ffn/shared.h). Every half 0 comes before every half 1:
 * a CTA never waits on a task it runs later (a stage's tasks run in ascending order on every CTA),
 * and the down stage, placed from the CTA after the last half, puts its extra tasks (the pairs, past
 * the grid's end) on the CTAs past the halves, then on half 0's, not on a half 1's, which finish last
 * (a pair there streamed both tasks after the step's last unit: at one row, TP 4, the path). */
DEV_INLINE void ffn_ug_task(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 task) {
  __local struct ffn_lds_ug *L = &lds->u.ug;
  __local const struct ffn_route *R = &lds->rt;
  const u32 S = c->a->S, D = c->a->D, I = c->a->I, ug = c->a->ug_groups, steps = D / 128u, G = ffn_ngroups(c);
  const u32 split = ffn_ug_split(c, lds), U = ffn_ug_units(c, lds);
  const u32 unit = split ? task % U : task, h = split ? task / U : 0u;
  const u32 tile = unit / G, i0 = 32u * (unit % G), nr = split ? 2u : 4u;
  const u32 e = R->tile_expert[tile], p0 = R->tile_first[tile], n = R->tile_n[tile];
  const u32 nsl = ug == 1u ? 4u : 2u, lane = dev_lane(), wave = dev_wave();
  const u64 wbase = (u64)e * I * D; /* bytes of one expert's w13: 2I rows x D/2 */
  dev_buf_t W = dev_buf((__global const void *)(c->a->w13 + wbase), I * D);
  __global const u8 *WS = (__global const u8 *)c->a->w13_s + (u64)e * (2u * I) * (D / 32u);
  gemv_act x = gemv_act_of(ffn_scr(c, c->a->L.x8r), ffn_scr(c, c->a->L.x8rs), S, D);
  /* B columns: the tile's picks' tokens (absent picks read as token S: zero) */
  u32 tok = lane % 16u < n ? R->pick_tok[p0 + lane % 16u] : S;
#pragma unroll
  for (u32 k = 0; k < 2u; k++) {
    /* item it: the task's row tile it / nsl (row tile 2h + it / nsl of the unit), chain it % nsl */
    const u32 it = wave + 8u * k, r = 2u * h + it / nsl, chain = it % nsl;
    if (it >= nr * nsl) break;
    u32 row0 = 2u * i0 + 16u * r, row = row0 + lane % 16u;
    f32x4 acc = 0;
#if DEV_ARCH_GFX942
    /* gfx942 (spec/mono.md §2.6, §4.4): rows 2i gate, 2i + 1 up (I = Ir); a step's four K blocks
     * each one unscaled MFMA of the expanded FP4 (FNUZ, x 2^-7, even K first) against X8R stored to
     * match, added by fma with 2^(cw + 7 + cx - 254), cw the code of each of the lane's four rows */
    (void)row;
    for (u32 s = 0; s < steps; s++) {
      if (ffn_ug_slice(s, steps, ug) != chain) continue;
      u32x4 wq = gemv942_ld_fp4(W, (row0 / 16u) * 8u * D, D / 2u, s, lane);
      u32 cw[4];
      for (u32 q = 0; q < 4u; q++)
        cw[q] = dev_ld_u32((__global const u32 *)(WS + hm_codes942_index(row0 + 4u * (lane / 16u) + q, 4u * s, D / 32u)),
                           DEV_CP_NT);
      for (u32 b = 0; b < 4u; b++) {
        u32 blk = 4u * s + b;
        f32x4 d = gemv942_block(gemv942_fp4_expand(wq[b]), gemv942_ld_act(&x, tok, blk, lane));
        i32 cx = (i32)gemv942_act_code(&x, tok, blk);
        for (u32 q = 0; q < 4u; q++)
          acc[q] = dev_fma(d[q], gemv_pow2((i32)((cw[q] >> (8u * b)) & 0xffu) + 7 + cx - 254), acc[q]);
      }
    }
#else
    for (u32 s = 0; s < steps; s++) {
      if (ffn_ug_slice(s, steps, ug) != chain) continue;
      i32x8 a = gemv_ld_fp4(W, (row0 / 16u) * 8u * D, s, lane);
      u32 sa = ffn_shuffled_scale(WS, row, 4u * s + lane / 16u, D / 32u);
      i32x8 b = 0;
      u32 sb = GEMV_UNIT_SCALE;
      if (tok < S) {
        b = gemv_ld_fp8(x.x, tok * D, D, s, lane, DEV_CP_DEV);
        sb = gemv_byte(x.s, tok * (D / 32u) + 4u * s + lane / 16u, DEV_CP_DEV);
      }
      acc = gemv_mfma_fp4(a, b, acc, sa, sb);
    }
#endif
    for (u32 q = 0; q < 4u; q++) L->ch[it][lane][q] = acc[q];
  }
  dev_barrier();
  /* work-item (pick j = lid / 32, unit column i = lid % 32): its column of the task's row tiles, ic
   * (a half's work-items of the other half's columns make its own column i % 16 again, unused) */
  const u32 lid = dev_lid(), j = lid / 32u, i = lid % 32u, ic = split ? i % 16u : i;
#if DEV_ARCH_GFX942
  /* gate row 2ic and up row 2ic + 1: row tile ic / 8, rows 2(ic % 8) and 2(ic % 8) + 1 of it */
  u32 tg = ic / 8u, tu = tg, rgt = 2u * (ic % 8u), rup = rgt + 1u;
#else
  /* GUGU: gate rows in row tile 2(ic / 16), up rows in the next, row ic % 16 of each */
  u32 tg = 2u * (ic / 16u), tu = tg + 1u, rgt = ic % 16u, rup = rgt;
#endif
  u32 dg = 16u * (rgt / 4u) + j, du = 16u * (rup / 4u) + j;
  f32 gv = L->ch[tg * nsl][dg][rgt % 4u], uv = L->ch[tu * nsl][du][rup % 4u];
  for (u32 ch = 1; ch < nsl; ch++) {
    gv = gv + L->ch[tg * nsl + ch][dg][rgt % 4u];
    uv = uv + L->ch[tu * nsl + ch][du][rup % 4u];
  }
  f32 v = ffn_routed_act(gv, uv, c->a->swiglu_limit);
  const u32 pos = p0 + j;
  __global u64 *ugv = (__global u64 *)ffn_scr(c, c->a->L.ugv) + ((u64)pos * G + unit % G) * 16u + i % 16u;
  if (split && h == 0u) {
    if (j < n && i < 16u) ho_pair_put(ugv, dev_bits_f32(v), c->tag);
  } else {
    if (split && j < n && i < 16u) v = dev_f32_bits(ho_pair_get(ugv, c->tag));
    u32 code = ffn_act_code(FMT_RULE_A, ffn_amax32(v));
    u32 word = ffn_gather4(ffn_act_byte(v, code), DEV_ARCH_GFX942);
    u32 col = i0 + i;
    /* groups wholly in the padding are never run (their codes stay 0, the down stage masks them) */
    if (j < n) {
      if (i % 4u == 0) dev_st_u32((__global u32 *)ffn_scr(c, c->a->L.mid) + ((u64)pos * I + col) / 4u, word, DEV_CP_DEV);
      if (i == 0) dev_st_u32(ffn_words(c, c->a->L.mids) + (u64)pos * (I / 32u) + col / 32u, code, DEV_CP_DEV);
    }
    ho_flag_raise(ffn_words(c, c->a->L.ugf) + unit, c->tag);
  }
  dev_barrier();
}

/* ---------------------------------------------------------------- down, combine, push */

/* Down tasks: 16 hidden rows each. */
DEV_INLINE u32 ffn_down_tasks(const struct ffn_ctx *c) { return c->a->D / 16u; }

/* Where the gate/up and the down tasks run. Round the grid (handoff.h's ho_plain from the CTA after
 * the shared expert's half-tasks, the down stage from the CTA after the last unit), two sets of CTAs
 * stream more than the rest: the X = down tasks % grid that run one down task more (64 of 256 at
 * V4.1-Flash's 320 tasks), and the shared expert's CTAs, just before the units' first (a half-task
 * streams as many bytes as a unit: 16 rows of gate and of up, D fp8 bytes each, against a unit's 64
 * rows of D/2). At eight rows and 384 experts on MI355X, TP 4 (44 slot tiles, 792 units of 160 KiB,
 * down tasks of 228 KiB), a CTA of the first set streams 3 units and 2 down tasks (936 KiB) where
 * most stream 4 and 1 (868).
 *
 * The lean placement: every CTA takes q - 1 units round the grid (q = units / grid), the rest go
 * round the first W = grid - X - shared CTAs only (handoff.h's ho_place, width W), and the down
 * stage starts at CTA W (from the units' first), so the X CTAs after the W run two down tasks and
 * the shared ones one, each with q - 1 units. It is taken when a down task outweighs a unit (d > u:
 * w2's 16 rows of I/2 bytes a slot tile and sw2's 16 of Sh, against w13's 64 rows of D/2) and the
 * rest fits twice round the W (the W then run q + 1 units at most): then the busiest CTA streams
 * less than round the grid, whose CTAs with two down tasks run q units or more (q u + (qd + 1) d
 * beats both (q + 1) u + qd d and (q - 1) u + (qd + 1) d when d > u; qd = down tasks / grid).
 * 936 -> 868 KiB above (MI300X at six rows: a down task, 32 tiles of 576 real columns, is lighter
 * than a unit, and the placement stays round the grid). Never with halves
 * (there every half has its own CTA). The same on every CTA (the route table and the grid are).
 * *down_first: the down stage's first CTA from the placement's base. */
DEV_INLINE struct ho_place ffn_ug_place(const struct ffn_ctx *c, __local const struct ffn_lds *lds, u32 base,
                                        u32 *down_first) {
  const u32 N = dev_ncta(), U = ffn_ug_tasks(c, lds), X = ffn_down_tasks(c) % N, q = U / N, SH = ffn_shared_tasks(c);
  struct ho_place p = ho_plain(base);
  *down_first = U;
  if (ffn_ug_split(c, lds) || X == 0u || q == 0u || X + SH >= N) return p;
  const u32 W = N - X - SH, rest = U - (q - 1u) * N;
  const u32 u = 32u * c->a->D, d = 8u * c->a->I * lds->rt.ntiles + 16u * c->a->Sh;
  if (d <= u || rest > 2u * W) return p;
  p.full = (q - 1u) * N, p.width = W;
  *down_first = W;
  return p;
}
DEV_INLINE u32 ffn_down_first(const struct ffn_ctx *c, __local const struct ffn_lds *lds) {
  u32 first;
  (void)ffn_ug_place(c, lds, 0u, &first);
  return first;
}

/* 128-wide K steps of the shared down matrix (gemv_mx8_wave's count on each arch). */
DEV_INLINE u32 ffn_sw2_steps(const gemv_mx8 *m) {
#if DEV_ARCH_GFX942
  return m->Kp / 128u;
#else
  return (m->K + 127u) / 128u;
#endif
}

/* K steps of a down task's first slot tile loaded before its waits, and step s of them: selected by
 * constant indices (a register array indexed by a variable would go to scratch). */
#define FFN_DOWN_PRE 4u
#define ffn_down_pre(arr, s) ((s) == 0u ? (arr)[0] : (s) == 1u ? (arr)[1] : (s) == 2u ? (arr)[2] : (arr)[3])
struct ffn_down_pre {
#if DEV_ARCH_GFX942
  u32x4 wq[FFN_DOWN_PRE];
#else
  i32x8 a[FFN_DOWN_PRE];
  u32 sa[FFN_DOWN_PRE];
#endif
};

/* *a if k is 0, else *b: register by register, so both stay in registers */
DEV_INLINE struct ffn_down_pre ffn_down_pre_of(const struct ffn_down_pre *a, const struct ffn_down_pre *b, u32 k) {
  struct ffn_down_pre r;
#pragma unroll
  for (u32 s = 0; s < FFN_DOWN_PRE; s++) {
#if DEV_ARCH_GFX942
    r.wq[s] = k ? b->wq[s] : a->wq[s];
#else
    r.a[s] = k ? b->a[s] : a->a[s];
    r.sa[s] = k ? b->sa[s] : a->sa[s];
#endif
  }
  return r;
}

/* The first FFN_DOWN_PRE K steps of the wave's first slot tile (V4.1-Flash: 4 of its 5 at TP 4, 4 of 9
 * at TP 2) for hidden rows 16rt.., in flight before the task's waits on MID and SMQ (the route table,
 * in LDS since the route stage, names its expert): most of a task's routed weights stream while the
 * gate/up units finish, not after them (spec/mono.md §3.1). */
DEV_INLINE void ffn_down_prefetch(const struct ffn_ctx *c, __local const struct ffn_route *R, u32 rt, u32 on,
                                  struct ffn_down_pre *pre) {
  const u32 D = c->a->D, I = c->a->I, lane = dev_lane(), wave = dev_wave();
#pragma unroll
  for (u32 s = 0; s < FFN_DOWN_PRE; s++) {
#if DEV_ARCH_GFX942
    pre->wq[s] = 0;
    if (on && wave < R->ntiles && 4u * s < I / 32u) {
      const u32 e = R->tile_expert[wave];
      dev_buf_t W = dev_buf((__global const void *)(c->a->w2 + (u64)e * D * (I / 2u)), D * (I / 2u));
      pre->wq[s] = gemv942_ld_fp4(W, rt * 8u * I, I / 2u, s, lane);
    }
#else
    pre->a[s] = 0, pre->sa[s] = 0;
    if (on && wave < R->ntiles && s < I / 128u) {
      const u32 e = R->tile_expert[wave];
      dev_buf_t W = dev_buf((__global const void *)(c->a->w2 + (u64)e * D * (I / 2u)), D * (I / 2u));
      __global const u8 *WS = (__global const u8 *)c->a->w2_s + (u64)e * D * c->a->w2_cols;
      pre->a[s] = gemv_ld_fp4(W, rt * 8u * I, s, lane);
      pre->sa[s] = ffn_shuffled_scale(WS, 16u * rt + lane % 16u, 4u * s + lane / 16u, c->a->w2_cols);
    }
#endif
  }
}

/* The wave's steps of the shared down rows 16rt.. (K = Sh: its whole share when the wave's steps fit
 * gemv_wtile, K <= 4096; a larger Sh streams them in ffn_down_shared), kept across token tiles; the matrix
 * made from arguments read here (ffn_next_stage), or LLVM keeps them through the task and spills
 * SGPRs (32 on gfx942). */
DEV_INLINE void ffn_down_shared_load(const struct ffn_ctx *c, u32 rt, gemv_wtile *sw) {
  struct ffn_ctx cp = *c;
  ffn_next_stage(&cp);
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)cp.a->sw2, (__global const u8 *)cp.a->sw2_s, cp.a->D, cp.a->Sh);
  const u32 shs = ffn_sw2_steps(&m);
  gemv_wtile_load(sw, &m, 16u * rt, 0u, shs <= 8u * GEMV_MAX_WSTEPS ? shs : 0u, dev_wave(), dev_lane());
}

/* Slot tile `tile` (one wave) of down task rt into con: w2 x MID over K = I, even steps on chain A,
 * odd on B, contrib = A + B (gfx942: bf16(contrib x w)). pre: the wave's first tile, whose first
 * FFN_DOWN_PRE steps are in *pre. */
DEV_INLINE void ffn_down_tile(const struct ffn_ctx *c, __local const struct ffn_route *R, u32 rt, u32 tile,
                              const struct ffn_down_pre *pre, u32 use_pre, __local ffn_contrib (*con)[16]) {
  const u32 D = c->a->D, I = c->a->I, K = c->a->topk, lane = dev_lane(), isteps = I / 128u;
  const u32 real_blocks = (c->a->Ir + 31u) / 32u; /* MID blocks the gate/up stage writes */
  dev_buf_t MID = dev_buf(ffn_scr(c, c->a->L.mid), c->a->S * K * I);
  __global const u32 *MIDS = ffn_words(c, c->a->L.mids);
  const u32 e = R->tile_expert[tile], p0 = R->tile_first[tile], n = R->tile_n[tile];
  dev_buf_t W = dev_buf((__global const void *)(c->a->w2 + (u64)e * D * (I / 2u)), D * (I / 2u));
  __global const u8 *WS = (__global const u8 *)c->a->w2_s + (u64)e * D * c->a->w2_cols;
  const u32 goff = rt * 8u * I, row = 16u * rt + lane % 16u, pos = p0 + lane % 16u;
  f32x4 A = 0, B = 0;
#if DEV_ARCH_GFX942
  /* gfx942: w2 [D][Ir/2] in hm_fp4_942_offset order (I = Ir, a last step of two blocks when
   * Ir % 128 is 64), codes row-major [D][Ir/32]; each block one unscaled MFMA against MID (stored
   * even K first) added by fma with 2^(cw + 7 + cx - 254) to chain A (even steps) or B (odd) */
  (void)goff, (void)row, (void)WS, (void)isteps, (void)real_blocks;
  const u32 nblk = I / 32u, tok_ok = lane % 16u < n;
  __global const u8 *WC = (__global const u8 *)c->a->w2_s + (u64)e * D * nblk;
  for (u32 s = 0; 4u * s < nblk; s++) {
    u32x4 wq = use_pre && s < FFN_DOWN_PRE ? ffn_down_pre(pre->wq, s) : gemv942_ld_fp4(W, rt * 8u * I, I / 2u, s, lane);
    for (u32 b = 0; b < 4u && 4u * s + b < nblk; b++) {
      u32 blk = 4u * s + b;
      u64 xb = 0;
      i32 cx = (i32)GEMV_UNIT_SCALE;
      if (tok_ok) {
        u32x2 v = dev_buf_ld_u32x2(MID, pos * I + 32u * blk + 8u * (lane / 16u), DEV_CP_DEV);
        xb = v[0] | (u64)v[1] << 32;
        cx = (i32)(dev_ld_u32(&MIDS[pos * (I / 32u) + blk], DEV_CP_DEV) & 0xffu);
      }
      f32x4 d = gemv942_block(gemv942_fp4_expand(wq[b]), xb);
      f32x4 acc = s % 2u == 0 ? A : B;
      for (u32 q = 0; q < 4u; q++) {
        i32 cw = (i32)WC[(16u * rt + 4u * (lane / 16u) + q) * nblk + blk];
        acc[q] = dev_fma(d[q], gemv_pow2(cw + 7 + cx - 254), acc[q]);
      }
      if (s % 2u == 0) A = acc;
      else B = acc;
    }
  }
#else
  for (u32 s = 0; s < isteps; s++) {
    const u32 p = use_pre && s < FFN_DOWN_PRE;
    i32x8 a = p ? ffn_down_pre(pre->a, s) : gemv_ld_fp4(W, goff, s, lane);
    u32 sa = p ? ffn_down_pre(pre->sa, s) : ffn_shuffled_scale(WS, row, 4u * s + lane / 16u, c->a->w2_cols);
    i32x8 b = 0;
    u32 sb = GEMV_UNIT_SCALE;
    if (lane % 16u < n) {
      b = gemv_ld_fp8(MID, pos * I, I, s, lane, DEV_CP_DEV);
      /* bytes of blocks in the padding are masked (never written: zero, but not relied on) */
      u32 q = lane / 16u, blo = 4u * s + q / 2u, bhi = 4u * s + 2u + q / 2u;
      if (blo >= real_blocks) b[0] = b[1] = b[2] = b[3] = 0;
      if (bhi >= real_blocks) b[4] = b[5] = b[6] = b[7] = 0;
      u32 blk = 4u * s + q;
      if (blk < real_blocks) sb = dev_ld_u32(&MIDS[pos * (I / 32u) + blk], DEV_CP_DEV) & 0xffu;
    }
    if (s % 2u == 0) A = gemv_mfma_fp4(a, b, A, sa, sb);
    else B = gemv_mfma_fp4(a, b, B, sa, sb);
  }
#endif
  u32 j = lane % 16u;
#if DEV_ARCH_GFX942
  /* bf16(contrib x w), the value the combine adds (§2.6): the pick's weight found by its position */
  if (j < n) {
    u32 t = R->pick_tok[p0 + j];
    f32 w = 0.0f;
    for (u32 k = 0; k < K; k++)
      if (R->pos[t][k] == p0 + j) w = R->wts[t][k];
    for (u32 q = 0; q < 4u; q++) con[p0 + j][4u * (lane / 16u) + q] = fmt_bf16_from_f32((A[q] + B[q]) * w);
  }
#else
  if (j < n)
    for (u32 q = 0; q < 4u; q++) con[p0 + j][4u * (lane / 16u) + q] = A[q] + B[q];
#endif
}

/* Down task rt's shared rows into out (bf16, [token][row]): sw2 x SMQ over K = Sh in the §2.0 order,
 * a token tile at a time. */
DEV_INLINE void ffn_down_shared(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 rt, const gemv_wtile *sw,
                                u32 use_sw, __local f32 (*out)[16]) {
  __local struct ffn_lds_down *L = &lds->u.down;
  const u32 S = c->a->S, lane = dev_lane(), wave = dev_wave();
  /* the matrix made again here from arguments read again (ffn_next_stage): its descriptors held
   * through the routed tiles spilled SGPRs */
  struct ffn_ctx cs = *c;
  ffn_next_stage(&cs);
  gemv_mx8 m = gemv_mx8_of((__global const u8 *)cs.a->sw2, (__global const u8 *)cs.a->sw2_s, cs.a->D, cs.a->Sh);
  gemv_act x = gemv_act_of_words(ffn_scr(c, c->a->L.smq), ffn_words(c, c->a->L.smc), S, cs.a->Sh);
  for (u32 tt = 0; tt < ffn_ntiles(c); tt++) {
    const u32 shs = ffn_sw2_steps(&m);
    f32x4 acc = use_sw && shs <= 8u * GEMV_MAX_WSTEPS ? gemv_wtile_run(sw, &x, FFN_TILE * tt, 0u, shs, wave, lane)
                                                      : gemv_mx8_wave(&m, &x, 16u * rt, FFN_TILE * tt, wave);
    gemv_red_put(&L->red, wave, acc);
    dev_barrier();
    u32 lid = dev_lid();
    if (lid < 256u) {
      u32 r = lid / 16u, j = lid % 16u, t = FFN_TILE * tt + j;
      if (t < S && j < FFN_TILE) out[t][r] = fmt_round_bf16(gemv_red_sum(&L->red, r, j));
    }
    dev_barrier();
  }
}

/* The combine of tasks rt0 and (nk = 2) rt0 + grid, once contrib[k] and shared[k] hold task k's picks'
 * contributions and shared rows: per token, routed = bf16(routed + bf16(contrib_k * w_k)) in pick
 * order, partial = bf16(routed + shared); the partials pushed to every rank. One pass for both
 * tasks, a work-item a (task, token, row pair): one view of the all-reduce (some 40 SGPRs) made once. */
DEV_INLINE void ffn_down_combine(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 rt0, u32 nk) {
  __local struct ffn_lds_down *L = &lds->u.down;
  __local const struct ffn_route *R = &lds->rt;
  const u32 S = c->a->S, D = c->a->D, K = c->a->topk;
  struct ar_view moe;
  ffn_view(c, &moe, FFN_SITE_MOE);
  for (u32 i = dev_lid(); i < nk * S * 8u; i += FFN_CTA) {
    const u32 k = i / (S * 8u), t = i % (S * 8u) / 8u, r = 2u * (i % 8u), rt = rt0 + k * dev_ncta();
    u32 v = 0;
    for (u32 h = 0; h < 2u; h++) {
      f32 a = 0.0f;
      for (u32 p = 0; p < K; p++)
#if DEV_ARCH_GFX942
        a = fmt_round_bf16(a + fmt_bf16_to_f32(L->contrib[k][R->pos[t][p]][r + h]));
#else
        a = fmt_round_bf16(a + fmt_round_bf16(L->contrib[k][R->pos[t][p]][r + h] * R->wts[t][p]));
#endif
      v |= (u32)fmt_bf16_from_f32(a + L->shared[k][t][r + h]) << (16u * h);
    }
    ar_push(&moe, t * (D / 2u) + 8u * rt + r / 2u, v);
  }
  dev_wait_stores();
  dev_barrier();
}

/* Task rt: hidden rows 16rt..16rt+15, routed (ffn_down_tile over the slot tiles) and shared
 * (ffn_down_shared), then their combine; and with it task rt + grid where there is one (the stage's
 * loop, launch.h, steps a CTA's tasks two at a time). A pair streams each round of slot tiles for
 * both tasks before the next round's wait. Run one after the other, a CTA's second task would wait
 * for the step's last unit in the first's last round, then stream a whole task after the units end
 * (at eight rows, TP 4: 228 KiB, ~11 µs at a CU's share, on the 64 of 256 CTAs that run two); paired,
 * its rounds stream as their units finish, beside the first's. The second's shared rows go first,
 * right after their wait (they wait on no unit); the first's from the registers loaded before it. */
DEV_INLINE void ffn_down_task(const struct ffn_ctx *c, __local struct ffn_lds *lds, u32 rt) {
  const u32 N = dev_ncta();
  /* kept in VGPRs through the rounds (in SGPRs they spilled two) */
  const u32 rt2 = dev_in_vgpr(rt + N), two = dev_in_vgpr(rt + N < ffn_down_tasks(c));
  __local struct ffn_lds_down *L = &lds->u.down;
  __local const struct ffn_route *R = &lds->rt;
  const u32 wave = dev_wave();
  struct ffn_down_pre pre, pre2;
  ffn_down_prefetch(c, R, rt, 1u, &pre);
  ffn_down_prefetch(c, R, rt2, two, &pre2);
  gemv_wtile sw;
  ffn_down_shared_load(c, rt, &sw);
  ho_flags_wait(ffn_words(c, c->a->L.srdy), 1u, ffn_shared_groups(c), c->tag);
  if (dev_readfirstlane_u32(two)) ffn_down_shared(c, lds, rt2, &sw, 0u, L->shared[1]);
  /* A round of 8 slot tiles at a time, one a wave, each round waiting (the whole CTA) for its own
   * tiles' gate/up units only (units are tile-major: tile t's are t G .. t G + G - 1): a task
   * streams the w2 of tiles whose experts are done while later units still run, rather than
   * waiting for the step's last unit first. The rounds are uniform across the CTA (the wait's
   * barrier). */
  const u32 G = ffn_ngroups(c), ntiles = R->ntiles;
  for (u32 t0 = 0; t0 < ntiles; t0 += 8u) {
    const u32 tile = t0 + wave, tn = ntiles - t0 < 8u ? ntiles - t0 : 8u;
    ho_flags_wait(ffn_words(c, c->a->L.ugf) + t0 * G, 1u, tn * G, c->tag);
    if (tile >= ntiles) continue;
    /* one copy of the tile's code for both tasks (two spilled SGPRs); the pair's preloaded steps
     * picked by a select, never by a pointer (a register array behind a variable pointer goes to
     * scratch) */
#pragma unroll 1
    for (u32 k = 0; k <= two; k++) {
      const struct ffn_down_pre pk = ffn_down_pre_of(&pre, &pre2, k); /* task k's preloaded steps */
      ffn_down_tile(c, R, k ? rt2 : rt, tile, &pk, tile == wave, L->contrib[k]);
    }
  }
  ffn_down_shared(c, lds, rt, &sw, 1u, L->shared[0]);
  ffn_down_combine(c, lds, rt, 1u + two);
}

/* ---------------------------------------------------------------- reduce */

/* Slice j of the MoE output: the ranks' partials of columns 32j..32j+31, rank order, into out. */
DEV_INLINE void ffn_reduce(struct ffn_ctx *c, u32 j) {
  const u32 S = c->a->S, P = c->a->D / 2u, lid = dev_lid();
  __global u32 *out = (__global u32 *)c->a->out;
  u32 n = lid < S * 16u ? (lid + FFN_CTA < S * 16u ? 2u : 1u) : 0u;
  if (!n) return;
  u32 f = (lid / 16u) * P + 16u * j + lid % 16u, v[2] = {0, 0};
  struct ar_view moe;
  ffn_view(c, &moe, FFN_SITE_MOE);
  if (c->ok && ar_reduce(&moe, f, (FFN_CTA / 16u) * P, n, v) != AR_OK) c->ok = 0;
  out[f] = v[0];
  if (n > 1u) out[f + (FFN_CTA / 16u) * P] = v[1];
}

#endif /* HM_FFN_ROUTED_H */
