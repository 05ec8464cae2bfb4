/* layer/run/ffn_launch.c: the FFN launch's runner, and the runner K2 shares with it: creation (checks,
 * weights, heap regions, kernel), the per-width mailboxes, a step (persistent launch, wait, status)
 * and a recorded step. */
#include <stdlib.h>
#include <string.h>

#include "dev_persist.h"
#include "epoch.h"
#include "bind_internal.h"
#include "ffn_internal.h"
#include "seam_needs.h"

static hm_status teardown(hm_ffn *f, hm_status s) {
  if (!f) return s;
  for (int i = 0; i < FFN_T_COUNT; i++)
    if (f->w[i]) hm_mem_free(f->rt, f->w[i]);
  for (int i = 0; i < K2_T_COUNT; i++)
    if (f->back_w[i]) hm_mem_free(f->rt, f->back_w[i]);
  for (uint32_t r = 0; r <= FFN_MAX_ROWS; r++)
    if (f->width[r].scratch) hm_mem_free(f->rt, f->width[r].scratch);
  for (uint32_t i = 0; i < f->nrecorded; i++) hm_mem_free(f->rt, f->recorded[i]);
  free(f->recorded);
  if (f->kernarg) hm_mem_free(f->rt, f->kernarg);
  if (f->epoch) hm_mem_free(f->rt, f->epoch);
  if (f->status) hm_mem_free(f->rt, f->status);
  if (f->persist) hm_mem_free(f->rt, f->persist);
  hm_tl_free(f->rt, &f->tl);
  if (f->done.handle) hm_signal_destroy(f->rt, f->done);
  free(f);
  return s;
}

/* A step's arguments in either mode (struct ffn_args is the head of both). */
union ffn_any_args {
  struct ffn_args ffn;
  struct k2_args k2;
};

static hm_status open_runner(hm_heap *heap, const hm_layer_weights *w, const hm_ffn_config *cfg, enum ffn_mode mode,
                             hm_ffn **out) {
  const bool k2 = mode == FFN_MODE_K2;
  const char *launch = k2 ? "K2" : "FFN launch";
  const char *fn = k2 ? "hm_k2_create" : "hm_ffn_create";
  if (!heap || !w || !out) return hm_fail(HM_ERR_INVALID_ARG, "%s: NULL argument", fn);
  *out = NULL;
  hm_agent *a = hm_heap_agent(heap);
  uint32_t tp = hm_heap_tp(heap), rank = hm_heap_rank(heap);
  hm_status s;
  const hm_arch arch = hm_bind_arch(a);
  if (k2 ? ((s = hm_k2_check_agent(a, cfg)) || (s = hm_k2_check_layer(w, cfg, tp, arch)))
         : ((s = hm_ffn_check_agent(a, cfg)) || (s = hm_ffn_check_layer(w, cfg, tp, arch, launch))))
    return s;
  if (w->rank != rank)
    return hm_fail(HM_ERR_INVALID_ARG, "%s: the weights are rank %u's, this heap is rank %u", launch, w->rank, rank);
  hm_ffn *f = calloc(1, sizeof *f);
  if (!f) return hm_fail(HM_ERR_NO_MEMORY, "%s", fn);
  f->mode = mode, f->name = k2 ? "K2" : "FFN", f->launch = launch;
  f->heap = heap, f->agent = a, f->rt = hm_agent_runtime(a);
  f->cfg = w->cfg, f->dims = w->dims, f->rank = rank, f->tp = tp, f->rope_rows = w->rope_positions;
  /* gfx942's copies keep only the real routed columns (§4.4); its LDS caps a step at 42 rows */
  f->arch = arch;
  f->mid_cols = arch == HM_ARCH_GFX942 ? w->dims.inter : w->dims.inter_pad;
  f->max_rows = arch == HM_ARCH_GFX942 ? FFN_MAX_ROWS_GFX942 : FFN_MAX_ROWS;
  bool sim = hm_runtime_is_sim(f->rt);
  /* The bound counts from the step's start, so on the software agent it must cover a whole step
   * on loaded CPUs (a full-size step under chaos takes over a minute): 600 s there. A dead peer is
   * then usually caught first by the agent's watchdog (no progress for 60 s), an error too; tests
   * of the peer bound itself set a short one. */
  f->peer_timeout_ns = cfg && cfg->peer_timeout_ns ? cfg->peer_timeout_ns : sim ? 600000000000ull : 10000000000ull;
  f->step_timeout_ns = cfg && cfg->step_timeout_ns ? cfg->step_timeout_ns : f->peer_timeout_ns + 10000000000ull;
  /* a grid that never arrives must be named before its peers' waits on it expire */
  const uint64_t arrival = hm_arrival_default_ns(f->rt);
  f->arrival_timeout_ns = cfg && cfg->arrival_timeout_ns ? cfg->arrival_timeout_ns
                          : f->peer_timeout_ns / 2 < arrival ? f->peer_timeout_ns / 2
                                                             : arrival;
  if (f->arrival_timeout_ns >= f->peer_timeout_ns || f->step_timeout_ns <= f->peer_timeout_ns) {
    hm_status b = hm_fail(HM_ERR_INVALID_ARG,
                          "%s: bounds out of order: arrival %.3f s < peer %.3f s < step %.3f s is needed (the first "
                          "to expire must name the root cause)",
                          launch, f->arrival_timeout_ns / 1e9, f->peer_timeout_ns / 1e9, f->step_timeout_ns / 1e9);
    free(f);
    return b;
  }
  /* the grid the mode's own kernel gets; in K2 mode the FFN launch (the FFN-only steps) must fit the
   * same grid */
  const uint32_t ctas = cfg && cfg->ctas ? cfg->ctas : hm_agent_info_of(a)->cus;
  uint32_t ffn_grid = 0;
  if ((s = hm_program_load(a, &f->prog)) || (s = hm_kernel_get(f->prog, "ffn", &f->kernel[FFN_STEP_FFN])) ||
      (k2 && (s = hm_kernel_get(f->prog, "k2", &f->kernel[FFN_STEP_K2]))) ||
      (s = hm_persistent_grid(f->kernel[k2 ? FFN_STEP_K2 : FFN_STEP_FFN], a, ctas, 0, &f->grid)) ||
      (k2 && (s = hm_persistent_grid(f->kernel[FFN_STEP_FFN], a, f->grid, 0, &ffn_grid))))
    return teardown(f, hm_fail_prefix(s, "%s", launch));
  /* every CTA leaves its mark in the epoch buffer (device/epoch.h), which has room for so many */
  if (f->grid > DEV_EPOCH_MAX_CTAS)
    return teardown(f, hm_fail(HM_ERR_REFUSED, "%s: a grid of %u CTAs (the epoch buffer marks at most %u)", launch,
                               f->grid, DEV_EPOCH_MAX_CTAS));
  if ((s = hm_ffn_bind_weights(f, w)) || (k2 && (s = hm_k2_bind_weights(f, w)))) return teardown(f, s);
  /* the two all-reduces' inboxes, sized for the widest step */
  size_t region = hm_allreduce_region_bytes(tp, FFN_MAX_ROWS, f->cfg.hidden);
  if ((s = hm_heap_reserve(heap, region, &f->region_attn)) || (s = hm_heap_reserve(heap, region, &f->region_ffn)))
    return teardown(f, hm_fail_prefix(s, "%s: heap regions", launch));
  union ffn_any_args zero = {0};
  if ((s = hm_mem_alloc(a, HM_POOL_COARSE, DEV_EPOCH_BYTES, 0, (void **)&f->epoch)) ||
      (s = hm_mem_fill(f->rt, f->epoch, 0, DEV_EPOCH_WORDS)) ||
      (s = hm_mem_alloc(a, HM_POOL_HOST, 64, 0, (void **)&f->status)) || (s = hm_persist_new(a, &f->persist)) ||
      (s = hm_kernarg_new(a, &zero, sizeof zero, &f->kernarg)) || (s = hm_signal_create(f->rt, 0, &f->done)) ||
      (cfg && cfg->timeline && (s = hm_tl_alloc(a, f->grid, launch, &f->tl))))
    return teardown(f, s);
  *f->status = 0;
  hm_heap_retain(heap); /* its regions and arena table are the heap's */
  *out = f;
  return HM_OK;
}

hm_status hm_ffn_open(hm_heap *heap, const hm_layer_weights *w, const hm_ffn_config *cfg, enum ffn_mode mode,
                      hm_ffn **out) {
  hm_status s = open_runner(heap, w, cfg, mode, out);
  /* A refusal names a rule of the layer's config, which every rank reads alike: the group stays
   * up for the caller's own path. Anything else is this rank's alone (its weights, its agent, its
   * memory), and its peers would wait for it at their next step: stop the group now, with why. */
  if (s && s != HM_ERR_REFUSED && s != HM_ERR_PEER) hm_heap_fail(heap, s, NULL);
  return s;
}

hm_status hm_ffn_create(hm_heap *heap, const hm_layer_weights *w, const hm_ffn_config *cfg, hm_ffn **out) {
  return hm_ffn_open(heap, w, cfg, FFN_MODE_FFN, out);
}

unsigned hm_ffn_recorded_held(const hm_ffn *f) { return hm_mem_held(f->rt, f->recorded, f->nrecorded); }

hm_status hm_ffn_destroy(hm_ffn *f) {
  if (!f) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_destroy: NULL runner");
  /* its users: the layer that owns it, chains replaying its recorded steps, K1 runners on its
   * epoch buffer; each would read or write what this frees */
  unsigned held = hm_ffn_recorded_held(f), epoch = hm_mem_holds(f->rt, f->epoch);
  if (f->owners)
    return hm_fail(HM_ERR_BUSY, "hm_ffn_destroy: layer %d's %s belongs to %u layer(s): hm_layer_destroy destroys it",
                   f->cfg.layer, f->launch, f->owners);
  if (held)
    return hm_fail(HM_ERR_BUSY, "hm_ffn_destroy: %u recorded step(s) of layer %d's %s are still in chains: "
                   "hm_chain_destroy first", held, f->cfg.layer, f->launch);
  if (epoch)
    return hm_fail(HM_ERR_BUSY, "hm_ffn_destroy: %u K1 runner(s) still share layer %d's %s epoch buffer: "
                   "hm_k1_destroy first", epoch, f->cfg.layer, f->launch);
  hm_heap_release(f->heap);
  return teardown(f, HM_OK);
}

uint32_t hm_ffn_grid(const hm_ffn *f) { return f ? f->grid : 0; }
const hm_layer_config *hm_ffn_layer(const hm_ffn *f) { return f ? &f->cfg : NULL; }

hm_status hm_ffn_check_mode(const hm_ffn *f, enum ffn_mode mode, const char *fn, const char *instead) {
  if (f->mode == mode) return HM_OK;
  return hm_fail(HM_ERR_INVALID_ARG, "%s: layer %d's runner is %s: use %s", fn, f->cfg.layer,
                 f->mode == FFN_MODE_K2 ? "a K2 runner (hm_k2_create)" : "an FFN runner (hm_ffn_create)", instead);
}

/* ---------------------------------------------------------------- a step */

hm_status hm_ffn_check_io(const hm_ffn *f, const hm_ffn_io *io, enum ffn_step step, hm_chain *hold) {
  const bool k2 = step == FFN_STEP_K2;
  const char *name = k2 ? "K2 step" : "FFN step";
  if (io->rows < 1 || io->rows > f->max_rows)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.3.1: %u rows (the launch takes 1..%u%s)", name, io->rows,
                   f->max_rows, f->arch == HM_ARCH_GFX942 ? " on gfx942" : "");
  if (io->prefills)
    return hm_fail(HM_ERR_REFUSED, "%s: spec/mono.md §5.3.4: %u prefill tokens (the launch is decode-only)", name,
                   io->prefills);
  /* K2's wo_b pushes its rows into the all-reduce itself: a part given to it would be ignored,
   * which a caller should hear rather than find out */
  if (k2 && io->part)
    return hm_fail(HM_ERR_INVALID_ARG, "K2 step: ffn.part must be NULL (K2's wo_b pushes its rows itself)");
  /* every tensor against the allocation it lies in, sized for this step's rows: the kernels
   * trust these addresses, so a short or foreign buffer would be written past on the device */
  static const char *const names[2][2][4] = {
      {{"res_in", "post_in", "comb_in", "pre_in"}, {"res_out", "post_out", "comb_out", "pre_out"}},
      {{"ffn.res_in", "ffn.post_in", "ffn.comb_in", "ffn.pre_in"},
       {"ffn.res_out", "ffn.post_out", "ffn.comb_out", "ffn.pre_out"}}};
  const uint64_t row = (uint64_t)io->rows * f->cfg.hidden * 2;
  hm_mem_need t[10];
  hm_seam_needs(&t[0], io->rows, f->cfg.hidden, names[k2][0], io->res_in, io->post_in, io->comb_in, io->pre_in);
  t[4] = (hm_mem_need){k2 ? "ffn.out" : "out", io->out, row, HM_MEM_DEVICE};
  hm_seam_needs(&t[5], io->rows, f->cfg.hidden, names[k2][1], io->res_out, io->post_out, io->comb_out, io->pre_out);
  t[9] = (hm_mem_need){"part", io->part, row, HM_MEM_DEVICE}; /* last: K2 has none */
  const unsigned n = k2 ? 9 : 10;
  hm_status s = hm_mem_check(f->agent, name, t, n);
  return s || !hold ? s : hm_chain_hold(hold, t, n);
}

hm_status hm_ffn_accepts(const hm_ffn *f, const hm_ffn_io *io) {
  if (!f || !io) return hm_fail(HM_ERR_INVALID_ARG, "FFN step: NULL argument");
  return hm_ffn_check_io(f, io, FFN_STEP_FFN, NULL);
}

hm_status hm_ffn_prepare(hm_ffn *f, uint32_t rows) {
  if (!f) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_prepare: NULL launch");
  if (rows < 1 || rows > f->max_rows)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_prepare: rows %u (1..%u)", rows, f->max_rows);
  struct ffn_width *w = &f->width[rows];
  if (w->scratch) return HM_OK;
  ffn_scratch_layout(rows, f->cfg.hidden, f->cfg.experts, f->cfg.topk, f->mid_cols, f->dims.inter,
                     f->dims.shared_inter, &w->layout);
  uint64_t bytes = w->layout.bytes;
  if (f->mode == FFN_MODE_K2) {
    /* the split's chunk depends on the width (spec/mono.md §1.2), and the back's regions on it */
    w->ck = hm_attn_chunk_keys(f->tp, rows, f->arch == HM_ARCH_GFX942);
    k2_scratch_layout(w->layout.bytes, rows, f->dims.heads, f->cfg.o_lora, w->ck, &w->back);
    bytes = w->back.bytes;
  }
  hm_status s = hm_mem_alloc(f->agent, HM_POOL_COARSE, bytes, 0, &w->scratch);
  if (s) return hm_fail_prefix(s, "%s: width %u's mailboxes", f->launch, rows);
  if ((s = hm_mem_fill(f->rt, w->scratch, 0, bytes / 4))) {
    hm_mem_free(f->rt, w->scratch);
    w->scratch = NULL;
  }
  return s;
}

const void *hm_ffn_scratch(const hm_ffn *f, uint32_t rows, struct hm_ffn_scratch_layout *layout) {
  if (!f || rows < 1 || rows > FFN_MAX_ROWS || !f->width[rows].scratch) return NULL;
  if (layout) *layout = f->width[rows].layout;
  return f->width[rows].scratch;
}

void hm_ffn_fill_args(const hm_ffn *f, const hm_ffn_io *io, struct ffn_args *a) {
  const hm_layer_config *c = &f->cfg;
  const struct ffn_width *wd = &f->width[io->rows];
  const uint64_t scr = (uintptr_t)wd->scratch;
  memset(a, 0, sizeof *a);
  a->part = (uintptr_t)io->part;
  struct seam_args *sa = &a->seam;
  sa->res_in = (uintptr_t)io->res_in, sa->post_in = (uintptr_t)io->post_in;
  sa->comb_in = (uintptr_t)io->comb_in, sa->pre_in = (uintptr_t)io->pre_in;
  sa->hc_fn = (uintptr_t)f->w[FFN_T_HC_FN], sa->hc_scale = (uintptr_t)f->w[FFN_T_HC_SCALE];
  sa->hc_base = (uintptr_t)f->w[FFN_T_HC_BASE], sa->norm_w = (uintptr_t)f->w[FFN_T_NORM];
  sa->res_out = (uintptr_t)io->res_out, sa->post_out = (uintptr_t)io->post_out;
  sa->comb_out = (uintptr_t)io->comb_out, sa->pre_out = (uintptr_t)io->pre_out;
  sa->lin = scr + wd->layout.lin, sa->pmix = scr + wd->layout.pmix, sa->normed = scr + wd->layout.normed;
  sa->x8a = scr + wd->layout.x8r, sa->x8as = scr + wd->layout.x8rs;
  sa->x8 = scr + wd->layout.x8, sa->x8s = scr + wd->layout.x8s, sa->xrdy = scr + wd->layout.xrdy;
  sa->S = io->rows, sa->D = c->hidden, sa->sinkhorn_iters = c->sinkhorn_iters;
  sa->eps = c->eps, sa->hc_eps = c->hc_eps, sa->post_mult = c->post_mult;
  a->gate_w = (uintptr_t)f->w[FFN_T_GATE_W], a->bias = (uintptr_t)f->w[FFN_T_BIAS];
  a->w13 = (uintptr_t)f->w[FFN_T_W13], a->w13_s = (uintptr_t)f->w[FFN_T_W13_S];
  a->w2 = (uintptr_t)f->w[FFN_T_W2], a->w2_s = (uintptr_t)f->w[FFN_T_W2_S];
  a->sgu = (uintptr_t)f->w[FFN_T_SGU], a->sgu_s = (uintptr_t)f->w[FFN_T_SGU_S];
  a->sw2 = (uintptr_t)f->w[FFN_T_SW2], a->sw2_s = (uintptr_t)f->w[FFN_T_SW2_S];
  a->out = (uintptr_t)io->out;
  a->scratch = scr;
  a->L = wd->layout;
  a->epoch = (uintptr_t)f->epoch, a->persist = (uintptr_t)f->persist, a->timeline = (uintptr_t)f->tl.stamps;
  a->region_attn = f->region_attn, a->region_ffn = f->region_ffn;
  a->S = io->rows, a->D = c->hidden, a->E = c->experts, a->topk = c->topk;
  a->I = f->mid_cols, a->Ir = f->dims.inter, a->Sh = f->dims.shared_inter;
  a->w2_cols = f->arch == HM_ARCH_GFX942 ? f->mid_cols / 32 : f->dims.w2_scale_cols;
  a->ug_groups = c->ug_groups, a->rank = f->rank, a->tp = f->tp;
  a->route_scale = c->route_scale, a->swiglu_limit = c->swiglu_limit;
}

static void fill_ffn(const hm_ffn *f, const void *io, void *args) { hm_ffn_fill_args(f, io, args); }

static hm_status link_args(hm_ffn *f, struct ffn_args *a) {
  return hm_heap_link(f->heap, f->status, f->peer_timeout_ns, &a->link);
}

/* What the launch left in its status word, as a status (kernels/ar_args.h's encoding). */
static hm_status launch_status(const hm_ffn *f) {
  uint32_t st = __atomic_load_n(f->status, __ATOMIC_ACQUIRE);
  if (!st) return HM_OK;
  uint32_t code = AR_STATUS_CODE(st), peer1 = AR_STATUS_PEER1(st), where = AR_STATUS_WHERE(st);
  const char *site = hm_heap_site_name(where) ? hm_heap_site_name(where) : "an all-reduce";
  if (code == AR_ERR_TIMEOUT && peer1)
    return hm_fail(HM_ERR_PEER, "%s (rank %u): rank %u's push in %s did not arrive within %.3f s", f->launch, f->rank,
                   peer1 - 1, site, (double)f->peer_timeout_ns / 1e9);
  /* a host stopped the group: the heap has its words (and a failed rank's reason) */
  char why[AR_REASON_BYTES + 200];
  hm_heap_describe(f->heap, st, why, sizeof why);
  return hm_fail(HM_ERR_PEER, "%s (rank %u): %s", f->launch, f->rank, why);
}

hm_status hm_ffn_status(const hm_ffn *f) {
  if (!f) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_status: NULL");
  return launch_status(f);
}

/* The step itself, from the group's state to the launch's status. */
static hm_status launch(hm_ffn *f, hm_queue *q, enum ffn_step step, uint32_t rows, ffn_fill_fn *fill, const void *io) {
  if (!q) return hm_fail(HM_ERR_INVALID_ARG, "%s step: NULL queue", f->name);
  if (hm_queue_agent(q) != f->agent)
    return hm_fail(HM_ERR_INVALID_ARG, "%s step: the queue is on agent %u, the layer's heap on agent %u", f->name,
                   hm_agent_index(hm_queue_agent(q)), hm_agent_index(f->agent));
  hm_status s;
  if ((s = hm_heap_check(f->heap))) return s;
  if ((s = launch_status(f))) return s;
  if ((s = hm_ffn_prepare(f, rows))) return s;
  fill(f, io, f->kernarg);
  if ((s = link_args(f, f->kernarg))) return s;
  /* the step's header, which the peers compare with theirs while they wait */
  if ((s = hm_heap_step_begin(f->heap, step == FFN_STEP_K2 ? HM_STEP_K2 : HM_STEP_FFN, f->cfg.layer, rows))) return s;
  hm_tl_arm(&f->tl, step == FFN_STEP_K2 ? HM_TL_K2 : HM_TL_FFN, true);
  hm_signal_store(f->rt, f->done, 1);
  hm_dispatch d = {.kernel = f->kernel[step], .ctas = f->grid, .kernarg = f->kernarg, .barrier = true,
                   .completion = f->done};
  d.acquire = d.release = HM_FENCE_SYSTEM;
  if ((s = hm_persistent_launch(q, &d, f->persist, f->arrival_timeout_ns))) return s;
  if ((s = hm_heap_wait_step(f->heap, q, f->done, f->step_timeout_ns))) {
    /* the group stopped: what this launch saw (its status word names its sites) comes first */
    if (s == HM_ERR_PEER && __atomic_load_n(f->status, __ATOMIC_ACQUIRE)) return launch_status(f);
    return hm_fail_prefix(s, "%s step of %u rows", f->name, rows);
  }
  if ((s = hm_queue_status(q))) return s;
  return launch_status(f);
}

hm_status hm_ffn_launch(hm_ffn *f, hm_queue *q, enum ffn_step step, uint32_t rows, ffn_fill_fn *fill, const void *io) {
  hm_status s = launch(f, q, step, rows, fill, io);
  /* The step's inputs were checked alike on every rank before this; from here a failure is this
   * rank's (its queue, its launch's arrival, its kernel's fault or watchdog, its bound), and the
   * peers' kernels wait for its pushes: stop the group at once, with the reason, so they end at
   * their next poll instead of at the peer bound. HM_ERR_PEER: the group is stopped already. */
  if (s && s != HM_ERR_PEER) hm_heap_fail(f->heap, s, NULL);
  return s;
}

hm_status hm_ffn_append(hm_ffn *f, hm_chain *c, enum ffn_step step, uint32_t rows, ffn_fill_fn *fill, const void *io) {
  if (!c) return hm_fail(HM_ERR_INVALID_ARG, "%s record: NULL chain", f->name);
  /* a replay skips the residency handshake: a step of this width must have checked it */
  if (!f->width[rows].scratch)
    return hm_fail(HM_ERR_INVALID_ARG, "%s record: width %u has not run a step yet (%s first)", f->name, rows,
                   step == FFN_STEP_K2 ? "hm_k2_step" : "hm_layer_ffn");
  if (f->nrecorded == f->caprecorded) {
    uint32_t cap = f->caprecorded ? 2 * f->caprecorded : 4;
    void **n = realloc(f->recorded, cap * sizeof *n);
    if (!n) return hm_fail(HM_ERR_NO_MEMORY, "%s record", f->name);
    f->recorded = n, f->caprecorded = cap;
  }
  union ffn_any_args a;
  fill(f, io, &a);
  hm_status s;
  if ((s = link_args(f, &a.ffn))) return s;
  /* each replay is a step of the group: it fails together, as a step does */
  if ((s = hm_heap_record(f->heap, c, f->status, step == FFN_STEP_K2 ? HM_STEP_K2 : HM_STEP_FFN, f->cfg.layer, rows)))
    return s;
  void *k;
  if ((s = hm_kernarg_new(f->agent, &a, step == FFN_STEP_K2 ? sizeof a.k2 : sizeof a.ffn, &k))) return s;
  hm_dispatch d = {.kernel = f->kernel[step], .ctas = f->grid, .kernarg = k, .barrier = true};
  d.acquire = d.release = HM_FENCE_SYSTEM;
  if ((s = hm_chain_add_dispatch(c, &d))) {
    hm_mem_free(f->rt, k);
    return s;
  }
  f->recorded[f->nrecorded++] = k;
  hm_tl_arm(&f->tl, step == FFN_STEP_K2 ? HM_TL_K2 : HM_TL_FFN, false); /* its replays stamp */
  return HM_OK;
}

hm_status hm_ffn_timeline(hm_ffn *f, hm_timeline *out) {
  if (!f) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_timeline: NULL runner");
  return hm_tl_view(&f->tl, hm_runtime_is_sim(f->rt), "hm_ffn_timeline", out);
}

hm_status hm_layer_ffn(hm_ffn *f, hm_queue *q, const hm_ffn_io *io) {
  if (!f || !io) return hm_fail(HM_ERR_INVALID_ARG, "FFN step: NULL argument");
  hm_status s;
  /* refused on this rank alone, the peers' launches would wait for it: they learn at once */
  if ((s = hm_ffn_check_io(f, io, FFN_STEP_FFN, NULL))) return hm_heap_step_refused(f->heap, s);
  return hm_ffn_launch(f, q, FFN_STEP_FFN, io->rows, fill_ffn, io);
}

hm_status hm_ffn_record(hm_ffn *f, hm_chain *c, const hm_ffn_io *io) {
  if (!f || !io) return hm_fail(HM_ERR_INVALID_ARG, "FFN step: NULL argument");
  hm_status s;
  if ((s = hm_ffn_check_io(f, io, FFN_STEP_FFN, NULL)) || (s = hm_ffn_append(f, c, FFN_STEP_FFN, io->rows, fill_ffn, io)))
    return s;
  /* every replay reads and writes the step's tensors again: the chain holds them */
  return hm_ffn_check_io(f, io, FFN_STEP_FFN, c);
}

/* ---------------------------------------------------------------- the step's memory floor */

hm_status hm_ffn_step_bytes(const hm_ffn *f, uint32_t rows, uint64_t *bytes, uint32_t *experts) {
  if (!f || !bytes) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_step_bytes: NULL %s", f ? "bytes" : "launch");
  if (rows < 1 || rows > FFN_MAX_ROWS)
    return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_step_bytes: rows %u (1..%d)", rows, FFN_MAX_ROWS);
  if (!f->width[rows].scratch) return hm_fail(HM_ERR_INVALID_ARG, "hm_ffn_step_bytes: width %u has not run", rows);
  const struct ffn_width *w = &f->width[rows];
  const uint64_t S = rows, D = f->cfg.hidden, E = f->cfg.experts, K = f->cfg.topk;
  const uint64_t I = f->mid_cols, Ir = f->dims.inter, Sh = f->dims.shared_inter;
  const uint64_t w2c = f->arch == HM_ARCH_GFX942 ? I / 32 : f->dims.w2_scale_cols;
  uint64_t *ids;
  size_t n = (size_t)(S * K * 8);
  hm_status s = hm_mem_alloc(f->agent, HM_POOL_HOST, n, 0, (void **)&ids);
  if (s) return s;
  hm_signal none = {0};
  if ((s = hm_mem_copy(f->rt, ids, (const char *)w->scratch + w->layout.ids, n, none))) {
    hm_mem_free(f->rt, ids);
    return s;
  }
  uint8_t seen[FFN_MAX_E] = {0};
  uint32_t u = 0;
  for (uint64_t i = 0; i < S * K; i++) {
    uint32_t e = (uint32_t)ids[i];
    if (e < E && !seen[e]) seen[e] = 1, u++;
  }
  hm_mem_free(f->rt, ids);
  /* a chosen expert: the gate/up rows of its real columns (parts in the padding never run) with
   * their codes, and all of down (its K steps cover the padding) with its codes */
  uint64_t ug_cols = (uint64_t)ffn_ug_groups_of((uint32_t)Ir) * 32;
  if (ug_cols > I) ug_cols = I;
  uint64_t expert = 2 * ug_cols * D / 2 + 2 * ug_cols * D / 32 + D * I / 2 + D * w2c;
  uint64_t shared = 2 * Sh * D + 2 * Sh / 32 * (D / 32) + D * Sh + D / 32 * (Sh / 32);
  uint64_t router = E * D * 2 + E * 4;
  uint64_t seam = (uint64_t)HM_MIX * HM_HC * D * 4 + D * 2 + 27 * 4;
  /* K2 reads no part: its wo_b pushes the rows from registers (hm_k2_back_bytes counts the back) */
  uint64_t part = f->mode == FFN_MODE_K2 ? 0 : S * D * 2;
  uint64_t io = part + 2 * S * HM_HC * D * 2 /* res in, out */ + S * D * 2 /* out */ + S * 24 * 4 * 2;
  *bytes = u * expert + shared + router + seam + io;
  if (experts) *experts = u;
  return HM_OK;
}
