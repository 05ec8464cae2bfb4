/* tools/model/model.c: the timing model's replay: each traced stage a node, its CTA's previous stage and
 * the stages whose stores its waits read its edges, times from the part's figures; the critical path back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_model.h"

struct node {
  const hm_trace_stage *st;
  uint32_t wbeg, wend; /* its waits in t->waits */
  int state;           /* 0 not yet, 1 in progress (a cycle if met again), 2 done */
  double end;
  int32_t pred;        /* the node its gate came from: -1 none (launch start at 0) */
  double lat;          /* the hand-off latency on that edge (0: its CTA's previous stage or the launch before) */
  double pred_t;       /* when the edge left pred: its end, or its store's time (writer_time) */
  double from;         /* pred_t + lat: where its piece of a critical path begins (0 with no pred) */
  double share;        /* its CTA's share of HBM, B/s */
};

struct ctx {
  const hm_trace *t;
  const hm_part *p;
  struct node *n;
  uint32_t agents;
  char *err;
  unsigned cap;
};

/* When something could happen and what set it: the stage whose end it follows (-1: the launch's start
 * at 0) and the hand-off latency on that edge (0: its CTA's previous stage or the launch before). */
struct src {
  double t;
  int32_t pred;
  double lat;
  double pt; /* when the edge left pred (t - lat) */
};

static int cmp4(const uint32_t *a, const uint32_t *b) {
  for (int i = 0; i < 4; i++)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/* the stage (agent, launch, cta, slot): its index, or -1 */
static int32_t find_stage(const hm_trace *t, uint32_t agent, uint32_t launch, uint32_t cta, uint32_t slot) {
  const uint32_t key[4] = {agent, launch, cta, slot};
  uint32_t lo = 0, hi = t->nstages;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    int c = cmp4(&t->stages[mid].agent, key);
    if (!c) return (int32_t)mid;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

static uint32_t launch_ctas(const hm_trace *t, uint32_t agent, uint32_t launch) {
  for (uint32_t i = 0; i < t->nlaunches; i++)
    if (t->launches[i].agent == agent && t->launches[i].launch == launch) return t->launches[i].ctas;
  uint32_t n = 0; /* a trace without its launch records: the CTAs it has */
  for (uint32_t i = 0; i < t->nstages; i++)
    if (t->stages[i].agent == agent && t->stages[i].launch == launch && t->stages[i].cta + 1 > n) n = t->stages[i].cta + 1;
  return n;
}

static int fail(struct ctx *c, const char *msg, const hm_trace_stage *s) {
  snprintf(c->err, c->cap, "%s (agent %u launch %u CTA %u slot %u)", msg, s->agent, s->launch, s->cta, s->slot);
  return -1;
}

static int eval(struct ctx *c, uint32_t i);

/* When writer stage j made a store it still had `rest` weight bytes to load after (hm_trace_wait.w_rest):
 * its end less the time those take at its share, not before the start of its piece of the path (its
 * gate's source). A wait on a store made early in a long stage is gated there, not at the stage's end. */
static double writer_time(const struct ctx *c, int32_t j, uint64_t rest) {
  const struct node *w = &c->n[j];
  if (!rest) return w->end;
  const double t = w->end - (double)rest / w->share;
  return t > w->from ? t : w->from;
}

/* The end of launch `launch` on `agent` (its last stage's end) and that stage, for the next launch's start. */
static int launch_end(struct ctx *c, uint32_t agent, uint32_t launch, double *end, int32_t *who) {
  *end = 0, *who = -1;
  for (uint32_t j = 0; j < c->t->nstages; j++) {
    const hm_trace_stage *s = &c->t->stages[j];
    if (s->agent != agent || s->launch != launch) continue;
    if (eval(c, j)) return -1;
    if (*who < 0 || c->n[j].end > *end) *end = c->n[j].end, *who = (int32_t)j;
  }
  return 0;
}

static int eval(struct ctx *c, uint32_t i) {
  struct node *n = &c->n[i];
  if (n->state == 2) return 0;
  if (n->state == 1) return fail(c, "the trace's waits form a cycle", n->st);
  n->state = 1;
  const hm_trace_stage *s = n->st;
  const hm_part *p = c->p;
  const uint32_t ctas = launch_ctas(c->t, s->agent, s->launch);
  if (!ctas) return fail(c, "a stage of a launch with no CTAs", s);
  /* a CTA of a grid smaller than the part stands for cus/ctas CUs (the software agent's grids are), so a
   * CTA's share of HBM is the GPU's split over the grid, each CU at most cu_bw */
  const double cu_scale = (double)p->cus / ctas > 1.0 ? (double)p->cus / ctas : 1.0;
  const double share = (p->hbm_bw < p->cu_bw * p->cus ? p->hbm_bw : p->cu_bw * p->cus) / ctas;
  /* its start: its CTA's previous stage, or the agent's launch before it, or 0 */
  double start = 0;
  n->pred = -1, n->lat = 0, n->share = share;
  if (i > 0 && s->slot > 0 && c->t->stages[i - 1].agent == s->agent && c->t->stages[i - 1].launch == s->launch &&
      c->t->stages[i - 1].cta == s->cta) {
    if (eval(c, i - 1)) return -1;
    start = c->n[i - 1].end, n->pred = (int32_t)i - 1;
  } else if (s->launch > 0) {
    int32_t who;
    if (launch_end(c, s->agent, s->launch - 1, &start, &who)) return -1;
    n->pred = who;
  }
  /* its waits by level: gate[k] is when the weight lines of level k could be issued, the latest end plus
   * hand-off latency of the writers its waits below level k read (gate[0] its start); gate[LEVELS] over
   * every wait, for the lines of the top level (k >= LEVELS - 1), its hand-off reads, stores and matrix
   * work. Each keeps its source for the critical path. */
  enum { L = HM_TRACE_LEVELS };
  const int32_t start_pred = n->pred;
  struct src gate[L + 1];
  for (uint32_t k = 0; k <= L; k++) gate[k] = (struct src){start, start_pred, 0, start};
  for (uint32_t k = n->wbeg; k < n->wend; k++) {
    const hm_trace_wait *w = &c->t->waits[k];
    int32_t j = find_stage(c->t, w->w_agent, w->w_launch, w->w_cta, w->w_slot);
    if (j < 0) return fail(c, "a wait on a stage the trace lacks", s);
    if (eval(c, (uint32_t)j)) return -1;
    const double lat = w->w_agent == s->agent ? p->dev_handoff_s : p->sys_handoff_s;
    if (w->w_rest > c->t->stages[j].weight_bytes) return fail(c, "a wait on a store after more bytes than its writer loads", s);
    const double wt = writer_time(c, j, w->w_rest);
    const struct src g = {wt + lat, j, lat, wt};
    for (uint32_t lv = (w->level < L ? w->level : L - 1) + 1; lv <= L; lv++)
      if (g.t > gate[lv].t) gate[lv] = g;
  }
  gate[L - 1] = gate[L]; /* the top level: gated by every wait (its lines may come after any) */
  uint64_t levels = 0;
  for (uint32_t k = 0; k < L; k++) levels += s->weight_level_bytes[k];
  if (levels != s->weight_bytes) return fail(c, "a stage whose weight levels do not sum to its weight bytes", s);
  /* one stream from its start: each level's lines join it, or start it again (paying the load latency
   * again) when their gate comes after the stream has drained; then the hand-off reads and local stores
   * after every wait. A stage that loads and stores nothing ends at its last gate. */
  const uint64_t local = s->sys_store_bytes - s->peer_store_bytes + s->dev_store_bytes;
  const uint64_t rest = s->handoff_bytes + local;
  struct src e = gate[L];
  if (s->weight_bytes + rest) {
    e = (struct src){start + p->load_lat_s + (double)s->weight_level_bytes[0] / share, start_pred, 0, start};
    for (uint32_t k = 1; k <= L; k++) {
      const uint64_t b = k < L ? s->weight_level_bytes[k] : rest;
      if (!b) continue;
      const double joined = e.t + (double)b / share, again = gate[k].t + p->load_lat_s + (double)b / share;
      if (again > joined) e = gate[k], e.t = again;
      else e.t = joined;
    }
  }
  /* its matrix work after every wait, overlapped with its loads */
  double mma = 0;
  for (int k = 0; k < HM_TRACE_MFMA_KINDS; k++) {
    if (!s->mfma[k]) continue;
    if (p->mfma_flops_clk[k] <= 0) return fail(c, "a matrix instruction the part has not", s);
    mma += (double)s->mfma[k] * p->mfma_flops[k] / (p->mfma_flops_clk[k] * p->clock_hz * cu_scale);
  }
  if (gate[L].t + mma > e.t) e = gate[L], e.t += mma;
  /* pushes to peers: the grid shares the agent's links to its peers */
  double push = 0;
  if (s->peer_store_bytes) {
    const double links = c->agents > 1 ? c->agents - 1 : 1;
    push = (double)s->peer_store_bytes / (p->xgmi_bw * links / ctas);
  }
  /* its source on the critical path: the gate (a writer's end and its latency, or its start) that set
   * its end */
  n->end = e.t + push, n->pred = e.pred, n->lat = e.lat, n->pred_t = e.pt;
  n->from = e.pred >= 0 ? e.pt + e.lat : 0;
  n->state = 2;
  return 0;
}

int hm_model_run(const hm_trace *t, const hm_part *p, hm_model_result *out, char *err, unsigned cap) {
  memset(out, 0, sizeof *out);
  struct ctx c = {.t = t, .p = p, .err = err, .cap = cap};
  if (!t || !t->nstages) {
    snprintf(err, cap, "the trace has no stages");
    return -1;
  }
  if (!(c.n = calloc(t->nstages, sizeof *c.n))) {
    snprintf(err, cap, "out of memory");
    return -1;
  }
  uint32_t k = 0;
  for (uint32_t i = 0; i < t->nstages; i++) {
    c.n[i].st = &t->stages[i];
    if (t->stages[i].agent + 1 > c.agents) c.agents = t->stages[i].agent + 1;
    while (k < t->nwaits && cmp4(&t->waits[k].agent, &t->stages[i].agent) < 0) k++;
    c.n[i].wbeg = k;
    while (k < t->nwaits && !cmp4(&t->waits[k].agent, &t->stages[i].agent)) k++;
    c.n[i].wend = k;
  }
  int rc = 0;
  int32_t last = -1;
  uint64_t wb[64] = {0};
  for (uint32_t i = 0; i < t->nstages && !rc; i++) {
    rc = eval(&c, i);
    if (!rc && (last < 0 || c.n[i].end > c.n[last].end)) last = (int32_t)i;
    if (t->stages[i].agent < 64) wb[t->stages[i].agent] += t->stages[i].weight_bytes;
  }
  if (!rc) {
    out->total_s = c.n[last].end;
    for (uint32_t a = 0; a < 64; a++) out->weight_bytes = wb[a] > out->weight_bytes ? wb[a] : out->weight_bytes;
    out->floor_s = (double)out->weight_bytes / p->hbm_bw;
    /* the path back from the last stage: each stage from its gate's source until the edge left it (the
     * last one's end, a writer's store), a wait's latency */
    uint32_t cap_path = 2 * t->nstages + 2, m = 0;
    hm_model_seg *path = malloc(cap_path * sizeof *path);
    if (!path) rc = -1, snprintf(err, cap, "out of memory");
    double until = rc ? 0 : c.n[last].end;
    for (int32_t i = last; !rc && i >= 0 && m + 2 <= cap_path;) {
      const struct node *n = &c.n[i];
      const hm_trace_stage *s = n->st;
      path[m++] = (hm_model_seg){.kind = HM_SEG_STAGE, .agent = s->agent, .launch = s->launch, .cta = s->cta,
                                 .slot = s->slot, .s = until - n->from};
      until = n->pred_t;
      if (n->pred >= 0 && n->lat > 0) {
        const hm_trace_stage *w = c.n[n->pred].st;
        path[m++] = (hm_model_seg){HM_SEG_WAIT, s->agent, s->launch, s->cta, s->slot, w->agent, w->launch, w->cta,
                                   w->slot, n->lat};
      }
      i = n->pred;
    }
    if (!rc) {
      for (uint32_t a = 0, b = m ? m - 1 : 0; a < b; a++, b--) {
        hm_model_seg x = path[a];
        path[a] = path[b], path[b] = x;
      }
      out->path = path, out->npath = m;
    }
  }
  free(c.n);
  return rc;
}

void hm_model_result_free(hm_model_result *r) {
  if (!r) return;
  free(r->path);
  memset(r, 0, sizeof *r);
}
