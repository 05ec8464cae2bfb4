/* tests/device/test_memseq.c: the GPU build checked at the instruction level: the gfx950 and gfx942
 * code objects disassembled, every hand-off primitive's fences, waits and scope bits held to the
 * sequences of LLVM AMDGPUUsage's GFX942 memory model (docs/memory-model-isa.md has the table).
 *
 * Why: the software agent runs the kernels with its own barrier and scopes, so a fence missing from
 * the GPU build passes every other test. Two checks:
 *  - per primitive: tests/device/memseq.cl has one tiny kernel a primitive; its instructions must
 *    contain the prescribed sequence, in order (the table `patterns` below);
 *  - whole kernels: every function of the project's own code objects (and of memseq's) obeys rules
 *    no correct compile breaks whatever the scheduler did (rules_check).
 * The broken build of memseq.cl (-DMEMSEQ_BROKEN: one fence, wait or scope dropped a kernel) must be
 * rejected kernel by kernel, so neither check passes by being unable to fail.
 *
 * Environment (tests/device/meson.build sets it): MEMSEQ_OBJDUMP, MEMSEQ_TARGETS ("gfx950,gfx942"),
 * MEMSEQ_PROBE_DIR (memseq-<t>.co, memseq-broken-<t>.co), MEMSEQ_DEVICE_DIR (hsamono-<t>.co);
 * MEMSEQ_STRICT=1 demands the wait after every write-back even from a compiler that drops it.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the disassembly */

enum { CP_SC0 = 1u, CP_SC1 = 2u, CP_NT = 4u };

struct insn {
  uint64_t addr;
  char mn[48];    /* mnemonic */
  char ops[224];  /* operands and modifiers as printed */
  unsigned cp;    /* CP_*: the cache-policy modifiers */
  int vm, lgkm;   /* s_waitcnt: the vmcnt / lgkmcnt it waits down to, -1 if it does not */
  uint64_t target; /* s_branch / s_cbranch_*: the destination */
};
struct func {
  char name[96];
  struct insn *in;
  size_t n, cap;
};
struct dis {
  struct func *f;
  size_t n, cap;
};

static void dis_free(struct dis *d) {
  for (size_t i = 0; i < d->n; i++) free(d->f[i].in);
  free(d->f);
  memset(d, 0, sizeof *d);
}

static const char *env_or_fail(const char *name) {
  const char *v = getenv(name);
  ck_assert_msg(v && *v, "%s is not set (meson test sets it)", name);
  return v;
}

static int has_token(const char *ops, const char *tok) {
  size_t n = strlen(tok);
  for (const char *p = ops; (p = strstr(p, tok)) != NULL; p += n) {
    int before = p == ops || p[-1] == ' ' || p[-1] == ',';
    int after = p[n] == '\0' || p[n] == ' ' || p[n] == ',';
    if (before && after) return 1;
  }
  return 0;
}

/* the count a s_waitcnt waits down to for `field` ("vmcnt" / "lgkmcnt"), -1 if it does not wait on
 * it; a bare immediate is decoded as gfx9's encoding (vmcnt in bits 3:0 and 15:14, lgkmcnt 11:8) */
static int waitcnt_field(const char *ops, const char *field) {
  char key[16];
  snprintf(key, sizeof key, "%s(", field);
  const char *p = strstr(ops, key);
  if (p && (p == ops || p[-1] == ' ')) return atoi(p + strlen(key));
  if (*ops >= '0' && *ops <= '9') {
    unsigned imm = (unsigned)strtoul(ops, NULL, 0);
    if (strcmp(field, "vmcnt") == 0) {
      unsigned vm = (imm & 0xfu) | ((imm >> 14) & 3u) << 4;
      return vm == 63u ? -1 : (int)vm;
    }
    unsigned lgkm = (imm >> 8) & 0xfu;
    return lgkm == 15u ? -1 : (int)lgkm;
  }
  return -1;
}

static int is_branch(const struct insn *x) {
  return strcmp(x->mn, "s_branch") == 0 || strncmp(x->mn, "s_cbranch_", 10) == 0;
}

/* One line of `llvm-objdump -d` into d: a function header "<addr> <name>:" or an instruction
 * "\t<mnemonic> <operands> // <addr>: <encoding> [<target symbol>]". */
static void dis_line(struct dis *d, char *line) {
  size_t len = strlen(line);
  while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
  char *lt = strchr(line, '<');
  if (line[0] != '\t' && lt && len > 2 && strcmp(line + len - 2, ">:") == 0) {
    if (d->n == d->cap) {
      d->cap = d->cap ? 2 * d->cap : 64;
      d->f = realloc(d->f, d->cap * sizeof *d->f);
      ck_assert_ptr_nonnull(d->f);
    }
    struct func *f = &d->f[d->n++];
    memset(f, 0, sizeof *f);
    size_t nl = (size_t)(line + len - 2 - (lt + 1));
    ck_assert_msg(nl < sizeof f->name, "symbol name too long: %s", line);
    memcpy(f->name, lt + 1, nl);
    f->name[nl] = '\0';
    return;
  }
  if (line[0] != '\t' || d->n == 0) return;
  char *s = line;
  while (*s == '\t' || *s == ' ') s++;
  char *comment = strstr(s, "//");
  if (*s == '\0' || strncmp(s, "...", 3) == 0 || !comment) return; /* padding */
  struct insn x;
  memset(&x, 0, sizeof x);
  x.addr = strtoull(comment + 2, NULL, 16);
  *comment = '\0';
  size_t tl = strlen(s);
  while (tl && (s[tl - 1] == ' ' || s[tl - 1] == '\t')) s[--tl] = '\0';
  size_t ml = strcspn(s, " \t");
  ck_assert_msg(ml < sizeof x.mn, "mnemonic too long: %s", s);
  memcpy(x.mn, s, ml);
  /* an undecoded word could be a memory access the rules would not see */
  ck_assert_msg(strcmp(x.mn, "<unknown>") != 0, "%s: undecodable instruction at %llx", d->f[d->n - 1].name,
                (unsigned long long)x.addr);
  const char *ops = s + ml;
  while (*ops == ' ' || *ops == '\t') ops++;
  ck_assert_msg(strlen(ops) < sizeof x.ops, "operands too long: %s", s);
  strcpy(x.ops, ops);
  x.cp = (has_token(x.ops, "sc0") ? CP_SC0 : 0u) | (has_token(x.ops, "sc1") ? CP_SC1 : 0u) |
         (has_token(x.ops, "nt") ? CP_NT : 0u);
  x.vm = x.lgkm = -1;
  if (strcmp(x.mn, "s_waitcnt") == 0) {
    x.vm = waitcnt_field(x.ops, "vmcnt");
    x.lgkm = waitcnt_field(x.ops, "lgkmcnt");
  }
  if (is_branch(&x)) {
    /* SOPP: a signed 16-bit count of dwords from the next instruction (printed unsigned) */
    int16_t simm = (int16_t)(uint16_t)strtoul(x.ops, NULL, 0);
    x.target = x.addr + 4u + (uint64_t)(int64_t)(4 * (int)simm);
  }
  struct func *f = &d->f[d->n - 1];
  if (f->n == f->cap) {
    f->cap = f->cap ? 2 * f->cap : 256;
    f->in = realloc(f->in, f->cap * sizeof *f->in);
    ck_assert_ptr_nonnull(f->in);
  }
  f->in[f->n++] = x;
}

/* Disassemble a code object: every function symbol of .text with its instructions. */
static void dis_load(const char *path, struct dis *d) {
  memset(d, 0, sizeof *d);
  const char *objdump = env_or_fail("MEMSEQ_OBJDUMP");
  ck_assert_msg(!strchr(path, '\'') && !strchr(objdump, '\''), "quote in a path");
  FILE *t = fopen(path, "rb");
  ck_assert_msg(t != NULL, "%s: not built", path);
  fclose(t);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' -d --no-show-raw-insn '%s'", objdump, path);
  FILE *p = popen(cmd, "r");
  ck_assert_msg(p != NULL, "cannot run %s", cmd);
  char line[1024];
  while (fgets(line, sizeof line, p)) dis_line(d, line);
  int rc = pclose(p);
  ck_assert_msg(rc == 0, "%s failed (%d)", cmd, rc);
  ck_assert_msg(d->n > 0, "%s: no functions disassembled", path);
}

static const struct func *dis_find(const struct dis *d, const char *name) {
  for (size_t i = 0; i < d->n; i++)
    if (strcmp(d->f[i].name, name) == 0) return &d->f[i];
  return NULL;
}

/* ---------------------------------------------------------------- instruction classes */

/* a vector memory access: counted by vmcnt, ordered by the release / acquire waits (scratch is
 * private to the work-item and outside the model's "global/generic") */
static int is_vmem(const struct insn *x) {
  if (strncmp(x->mn, "global_", 7) == 0 || strncmp(x->mn, "flat_", 5) == 0) return 1;
  return strncmp(x->mn, "buffer_", 7) == 0 && strncmp(x->mn, "buffer_wb", 9) != 0 &&
         strncmp(x->mn, "buffer_inv", 10) != 0 && strncmp(x->mn, "buffer_gl", 9) != 0;
}
static int is_vstore(const struct insn *x) { return is_vmem(x) && strstr(x->mn, "_store") != NULL; }
static int is_vload(const struct insn *x) { return is_vmem(x) && strstr(x->mn, "_load") != NULL; }
static int is_vatomic(const struct insn *x) { return is_vmem(x) && strstr(x->mn, "_atomic") != NULL; }
/* an LDS access (a flat access may be one); the cross-lane DS instructions touch no memory */
static int is_lds(const struct insn *x) {
  if (strncmp(x->mn, "flat_", 5) == 0) return 1;
  return strncmp(x->mn, "ds_", 3) == 0 && strncmp(x->mn, "ds_bpermute", 11) != 0 &&
         strncmp(x->mn, "ds_permute", 10) != 0 && strncmp(x->mn, "ds_swizzle", 10) != 0 &&
         strcmp(x->mn, "ds_nop") != 0;
}
static int is_wbl2(const struct insn *x) { return strcmp(x->mn, "buffer_wbl2") == 0; }
static int is_inv(const struct insn *x) { return strcmp(x->mn, "buffer_inv") == 0; }
static int is_waitcnt(const struct insn *x) { return strcmp(x->mn, "s_waitcnt") == 0; }
static int is_terminator(const struct insn *x) {
  return is_branch(x) || strcmp(x->mn, "s_endpgm") == 0 || strcmp(x->mn, "s_setpc_b64") == 0 ||
         strcmp(x->mn, "s_code_end") == 0;
}

/* ---------------------------------------------------------------- basic blocks and what is outstanding */

/* What a wave may still have in flight: vector memory accesses (vmcnt), an L2 write-back (counted
 * by vmcnt too: llvm/llvm-project#178316), LDS accesses (lgkmcnt). */
enum { ST_VM = 1u, ST_WB = 2u, ST_LDS = 4u };

static unsigned st_step(unsigned s, const struct insn *x) {
  if (is_waitcnt(x)) {
    if (x->vm == 0) s &= ~(ST_VM | ST_WB);
    if (x->lgkm == 0) s &= ~ST_LDS;
  } else if (is_wbl2(x)) {
    s |= ST_WB;
  } else if (is_vmem(x)) {
    s |= ST_VM | (strncmp(x->mn, "flat_", 5) == 0 ? ST_LDS : 0u);
  } else if (is_lds(x)) {
    s |= ST_LDS;
  }
  return s;
}

struct cfg {
  size_t nb;
  size_t *start, *end; /* block b: instructions [start, end) */
  size_t *blk;         /* the block of instruction i */
  long (*succ)[2];     /* a block's successors, unused slots -1 */
  unsigned *in;        /* what may be outstanding on entry (fixpoint over all paths) */
};

static size_t insn_at(const struct func *f, uint64_t addr, int *found) {
  for (size_t i = 0; i < f->n; i++)
    if (f->in[i].addr == addr) {
      *found = 1;
      return i;
    }
  *found = 0;
  return 0;
}

/* Blocks, edges and the entry states of f; returns 0 or a message in err. A function whose code
 * leaves by s_setpc (a call or return) is refused: the rules would not see its callee. */
static int cfg_build(const struct func *f, struct cfg **out, char *err, size_t errn) {
  struct cfg *c = calloc(1, sizeof *c);
  ck_assert_ptr_nonnull(c);
  unsigned char *leader = calloc(f->n + 1, 1);
  ck_assert_ptr_nonnull(leader);
  if (f->n) leader[0] = 1;
  for (size_t i = 0; i < f->n; i++) {
    const struct insn *x = &f->in[i];
    if (strcmp(x->mn, "s_setpc_b64") == 0 || strcmp(x->mn, "s_swappc_b64") == 0) {
      snprintf(err, errn, "%s: %s at %llx: calls are not analysed", f->name, x->mn,
               (unsigned long long)x->addr);
      free(leader);
      free(c);
      return 1;
    }
    if (is_branch(x)) {
      int found;
      size_t t = insn_at(f, x->target, &found);
      if (!found) {
        snprintf(err, errn, "%s: branch at %llx leaves the function", f->name, (unsigned long long)x->addr);
        free(leader);
        free(c);
        return 1;
      }
      leader[t] = 1;
    }
    if (is_terminator(x)) leader[i + 1] = 1;
  }
  c->start = calloc(f->n + 1, sizeof *c->start);
  c->end = calloc(f->n + 1, sizeof *c->end);
  c->blk = calloc(f->n + 1, sizeof *c->blk);
  ck_assert(c->start && c->end && c->blk);
  for (size_t i = 0; i < f->n; i++) {
    if (leader[i]) {
      if (c->nb) c->end[c->nb - 1] = i;
      c->start[c->nb++] = i;
    }
    c->blk[i] = c->nb - 1;
  }
  if (c->nb) c->end[c->nb - 1] = f->n;
  free(leader);
  c->succ = calloc(c->nb ? c->nb : 1, sizeof *c->succ);
  ck_assert_ptr_nonnull(c->succ);
  for (size_t b = 0; b < c->nb; b++) {
    const struct insn *last = &f->in[c->end[b] - 1];
    int found;
    c->succ[b][0] = c->succ[b][1] = -1;
    if (strcmp(last->mn, "s_branch") == 0) {
      c->succ[b][0] = (long)c->blk[insn_at(f, last->target, &found)];
    } else if (strncmp(last->mn, "s_cbranch_", 10) == 0) {
      c->succ[b][0] = (long)c->blk[insn_at(f, last->target, &found)];
      if (b + 1 < c->nb) c->succ[b][1] = (long)(b + 1);
    } else if (!is_terminator(last) && b + 1 < c->nb) {
      c->succ[b][0] = (long)(b + 1);
    }
  }
  /* forward: a block's entry state is the union over its predecessors' exit states; a kernel
   * starts with nothing outstanding */
  c->in = calloc(c->nb ? c->nb : 1, sizeof *c->in);
  ck_assert_ptr_nonnull(c->in);
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t b = 0; b < c->nb; b++) {
      unsigned s = c->in[b];
      for (size_t i = c->start[b]; i < c->end[b]; i++) s = st_step(s, &f->in[i]);
      for (int k = 0; k < 2; k++) {
        long t = c->succ[b][k];
        if (t >= 0 && (s & ~c->in[t])) {
          c->in[t] |= s;
          changed = 1;
        }
      }
    }
  }
  *out = c;
  return 0;
}

static void cfg_free(struct cfg *c) {
  if (!c) return;
  free(c->start);
  free(c->end);
  free(c->blk);
  free(c->succ);
  free(c->in);
  free(c);
}

/* ---------------------------------------------------------------- whole-kernel rules */

/* What rules_check found in one function (or summed over a code object). */
struct verdict {
  unsigned releases; /* (write-back, released store or atomic) pairs */
  unsigned gaps;     /* of those (and of invalidates): a write-back not waited for, nothing else was */
  unsigned acquires; /* buffer_inv */
  unsigned barriers; /* s_barrier */
  unsigned sys_st, sys_ld, sys_rmw; /* system-scope stores, loads (sc0 sc1), atomics (sc1) */
  unsigned failures;
  char msg[3072];
};

/* one line of v->msg: what is wrong at x (in function fn), and at y when given */
static void verdict_note(struct verdict *v, const char *fn, const struct insn *x, const char *what,
                         const struct insn *y) {
  size_t used = strlen(v->msg);
  if (used + 600 >= sizeof v->msg) return;
  char at[320] = "";
  if (y) snprintf(at, sizeof at, " at %llx %s %s", (unsigned long long)y->addr, y->mn, y->ops);
  snprintf(v->msg + used, sizeof v->msg - used, "%s: %llx %s %s: %s%s\n", fn, (unsigned long long)x->addr,
           x->mn, x->ops, what, at);
}

static void verdict_add(struct verdict *sum, const struct verdict *v) {
  sum->releases += v->releases, sum->gaps += v->gaps, sum->acquires += v->acquires;
  sum->barriers += v->barriers, sum->sys_st += v->sys_st, sum->sys_ld += v->sys_ld;
  sum->sys_rmw += v->sys_rmw, sum->failures += v->failures;
  size_t used = strlen(sum->msg);
  snprintf(sum->msg + used, sizeof sum->msg - used, "%s", v->msg);
}

/* The release rules from one write-back W (instruction w): along every path from W to the first
 * store or atomic M after it (the access the release orders before; loads in between are passed),
 *  - every vector memory access issued before W has been waited for (vmcnt(0)) before M:
 *    AMDGPUUsage's "s_waitcnt vmcnt(0) must happen after any preceding global/generic
 *    load/store/load atomic/store atomic/atomicrmw ... must happen before the following store";
 *  - W itself has been waited for before M ("ensures that all memory operations ... and the L2
 *    writeback have completed before performing the store that is being released"); a compile that
 *    misses only this is counted as a gap (the compiler bug of llvm/llvm-project#178316), a failure
 *    when strict;
 *  - M carries W's scope: a scoped store sc1 after `buffer_wbl2 sc1`, sc0 sc1 after `buffer_wbl2 sc0
 *    sc1`; an atomic sc1 after a system write-back (atomics take sc0 for "return the old value"). A
 *    plain store (no scope bits) is not judged: after a release fence it is data, and the fence's
 *    atomic comes later (the per-primitive sequences check that pairing).
 * Accesses between W and M do not count as outstanding: they are after the release. */
static void release_walk(const struct func *f, const struct cfg *c, size_t w, int strict, struct verdict *v) {
  const struct insn *W = &f->in[w];
  size_t b0 = c->blk[w];
  unsigned s = c->in[b0];
  for (size_t i = c->start[b0]; i < w; i++) s = st_step(s, &f->in[i]);
  s = (s & ST_VM) | ST_WB;
  /* depth-first over (instruction, state) from just after W; a block is walked again only with a
   * state it has not seen (states only lose bits along a path, so this ends) */
  enum { SEEN = 0x100u };
  unsigned *seen = calloc(c->nb, sizeof *seen);
  size_t cap = 2 * c->nb + 2, sp = 0;
  size_t *stack_i = malloc(cap * sizeof *stack_i);
  unsigned *stack_s = malloc(cap * sizeof *stack_s);
  ck_assert(seen && stack_i && stack_s);
  stack_i[sp] = w + 1, stack_s[sp] = s, sp++;
  while (sp) {
    sp--;
    size_t i = stack_i[sp];
    unsigned st = stack_s[sp];
    if (i >= f->n) continue;
    size_t b = c->blk[i];
    if (i == c->start[b]) {
      if ((seen[b] & SEEN) && (st & ~seen[b]) == 0) continue; /* nothing new along this path */
      seen[b] |= st | SEEN;
    }
    int done = 0;
    for (; i < c->end[b]; i++) {
      const struct insn *x = &f->in[i];
      if (is_waitcnt(x) && x->vm == 0) st &= ~(ST_VM | ST_WB);
      if (!(is_vstore(x) || is_vatomic(x))) continue;
      v->releases++;
      if (st & ST_VM) {
        v->failures++;
        verdict_note(v, f->name, W, "release: an access before it is not waited for", x);
      } else if (st & ST_WB) {
        if (strict) {
          v->failures++;
          verdict_note(v, f->name, W, "release: the write-back is not waited for", x);
        } else {
          v->gaps++;
          verdict_note(v, f->name, W, "gap (lenient): the write-back is not waited for", x);
        }
      }
      unsigned need = W->cp & (CP_SC0 | CP_SC1), has = x->cp & (CP_SC0 | CP_SC1);
      int ok = is_vatomic(x) ? (need != (CP_SC0 | CP_SC1) || (has & CP_SC1)) : (!has || (has & need) == need);
      if (!ok) {
        v->failures++;
        verdict_note(v, f->name, W, "release: the released access has a narrower scope", x);
      }
      done = 1;
      break;
    }
    if (done) continue;
    for (int k = 0; k < 2; k++) {
      if (c->succ[b][k] < 0) continue;
      if (sp == cap) {
        cap *= 2;
        stack_i = realloc(stack_i, cap * sizeof *stack_i);
        stack_s = realloc(stack_s, cap * sizeof *stack_s);
        ck_assert(stack_i && stack_s);
      }
      stack_i[sp] = c->start[c->succ[b][k]], stack_s[sp] = st, sp++;
    }
  }
  free(seen);
  free(stack_i);
  free(stack_s);
}

/* Every rule over one function:
 *  - write-backs and invalidates are agent or system scope (sc1, or sc0 sc1): the bare and sc0
 *    forms are the workgroup / tgsplit ones, which these non-tgsplit kernels never need;
 *  - the release rules of release_walk from every buffer_wbl2;
 *  - at every buffer_inv, no vector memory access is outstanding (AMDGPUUsage: the acquiring load
 *    "has completed before invalidating the cache");
 *  - at every s_barrier, no LDS access is outstanding (dev_barrier's workgroup release: "s_waitcnt
 *    lgkmcnt(0) must happen after any preceding local/generic load/store...");
 *  - a census of system-scope accesses (counted, not judged here).
 * Not checked here: which acquire pairs with which load (the per-primitive sequences do that),
 * vmcnt at a barrier (a workgroup release does not wait for global stores outside tgsplit mode,
 * which is why ho_flag_raise drains its stores itself), scalar loads (only of memory constant in a
 * dispatch), anything in a callee (calls are refused). */
static void rules_check(const struct func *f, int strict, struct verdict *v) {
  memset(v, 0, sizeof *v);
  struct cfg *c = NULL;
  char err[256];
  if (cfg_build(f, &c, err, sizeof err)) {
    v->failures++;
    snprintf(v->msg, sizeof v->msg, "%s\n", err);
    return;
  }
  for (size_t b = 0; b < c->nb; b++) {
    unsigned s = c->in[b];
    for (size_t i = c->start[b]; i < c->end[b]; i++) {
      const struct insn *x = &f->in[i];
      if ((is_wbl2(x) || is_inv(x)) && !(x->cp & CP_SC1)) {
        v->failures++;
        verdict_note(v, f->name, x, "not agent or system scope", NULL);
      }
      if (is_wbl2(x)) release_walk(f, c, i, strict, v);
      if (is_inv(x)) {
        v->acquires++;
        if (s & ST_VM) {
          v->failures++;
          verdict_note(v, f->name, x, "acquire: an access before the invalidate is not waited for", NULL);
        } else if (s & ST_WB) {
          if (strict) {
            v->failures++;
            verdict_note(v, f->name, x, "a write-back before the invalidate is not waited for", NULL);
          } else {
            v->gaps++;
            verdict_note(v, f->name, x, "gap (lenient): a write-back before the invalidate is not waited for", NULL);
          }
        }
      }
      if (strcmp(x->mn, "s_barrier") == 0) {
        v->barriers++;
        if (s & ST_LDS) {
          v->failures++;
          verdict_note(v, f->name, x, "an LDS access before the barrier is not waited for", NULL);
        }
      }
      if (is_vstore(x) && (x->cp & (CP_SC0 | CP_SC1)) == (CP_SC0 | CP_SC1)) v->sys_st++;
      if (is_vload(x) && (x->cp & (CP_SC0 | CP_SC1)) == (CP_SC0 | CP_SC1)) v->sys_ld++;
      if (is_vatomic(x) && (x->cp & CP_SC1)) v->sys_rmw++;
      s = st_step(s, x);
    }
  }
  cfg_free(c);
}

/* ---------------------------------------------------------------- per-primitive sequences */

/* A sequence is steps separated by ';', matched in order as a subsequence of the kernel's
 * instructions (other instructions may come between). A step:
 *   mnemonic{bits}   that mnemonic with exactly those cache-policy bits ({} none; sc0 sc1 nt);
 *                    a mnemonic ending in '*' matches any mnemonic it begins;
 *   mnemonic         that mnemonic, any bits;
 *   s_waitcnt vmcnt(0) / s_waitcnt lgkmcnt(0)   a wait down to 0 on that counter;
 *   ?step            prescribed, but dropped by compilers without llvm/llvm-project#178316:
 *                    required only when strict;
 *   @step            every instruction with that mnemonic in the kernel has those bits (there
 *                    is at least one); does not move the position.
 * Sequences are AMDGPUUsage's for GFX942 (GFX950 takes the same code, docs/memory-model-isa.md),
 * in non-tgsplit mode, with the plain accesses memseq.cl puts around each primitive. */
struct pattern {
  const char *kernel;
  const char *seq;
};

#define D_ST "global_store_dword{}"   /* the data store before a release */
#define D_LD "global_load_dword{}"    /* the data load after an acquire */
#define REL_A "buffer_wbl2{sc1}; s_waitcnt vmcnt(0)"
#define REL_S "buffer_wbl2{sc0 sc1}; s_waitcnt vmcnt(0)"
#define ACQ_A "s_waitcnt vmcnt(0); buffer_inv{sc1}"
#define ACQ_S "s_waitcnt vmcnt(0); buffer_inv{sc0 sc1}"

static const struct pattern patterns[] = {
    /* store atomic: monotonic / release / seq_cst (= release) at each scope */
    {"ms_st_rlx_wg", D_ST "; global_store_dword{sc0}"},
    {"ms_st_rlx_agent", D_ST "; global_store_dword{sc1}"},
    {"ms_st_rlx_sys", D_ST "; global_store_dword{sc0 sc1}"},
    {"ms_st_rel_wg", D_ST "; global_store_dword{sc0}"},
    {"ms_st_rel_agent", D_ST "; " REL_A "; global_store_dword{sc1}"},
    {"ms_st_rel_sys", D_ST "; " REL_S "; global_store_dword{sc0 sc1}"},
    {"ms_st_sc_wg", D_ST "; global_store_dword{sc0}"},
    {"ms_st_sc_agent", D_ST "; " REL_A "; global_store_dword{sc1}"},
    {"ms_st_sc_sys", D_ST "; " REL_S "; global_store_dword{sc0 sc1}"},
    /* load atomic: monotonic / acquire / seq_cst (= acquire, nothing seq_cst before it) */
    {"ms_ld_rlx_wg", "global_load_dword{sc0}"},
    {"ms_ld_rlx_agent", "global_load_dword{sc1}"},
    {"ms_ld_rlx_sys", "global_load_dword{sc0 sc1}"},
    {"ms_ld_acq_wg", "global_load_dword{sc0}; " D_LD},
    {"ms_ld_acq_agent", "global_load_dword{sc1}; " ACQ_A "; " D_LD},
    {"ms_ld_acq_sys", "global_load_dword{sc0 sc1}; " ACQ_S "; " D_LD},
    {"ms_ld_sc_wg", "global_load_dword{sc0}; " D_LD},
    {"ms_ld_sc_agent", "global_load_dword{sc1}; " ACQ_A "; " D_LD},
    {"ms_ld_sc_sys", "global_load_dword{sc0 sc1}; " ACQ_S "; " D_LD},
    /* atomicrmw (returning: sc0 is "return the old value"; sc1 is system scope) */
    {"ms_add_rlx_agent", D_ST "; global_atomic_add{sc0}"},
    {"ms_add_rlx_sys", D_ST "; global_atomic_add{sc0 sc1}"},
    {"ms_add_acq_agent", D_ST "; global_atomic_add{sc0}; " ACQ_A "; " D_LD},
    {"ms_add_acq_sys", D_ST "; global_atomic_add{sc0 sc1}; " ACQ_S "; " D_LD},
    {"ms_add_rel_agent", D_ST "; " REL_A "; global_atomic_add{sc0}"},
    {"ms_add_rel_sys", D_ST "; " REL_S "; global_atomic_add{sc0 sc1}"},
    {"ms_add_ar_agent", D_ST "; " REL_A "; global_atomic_add{sc0}; " ACQ_A "; " D_LD},
    {"ms_add_ar_sys", D_ST "; " REL_S "; global_atomic_add{sc0 sc1}; " ACQ_S "; " D_LD},
    {"ms_cas_rlx_sys", "global_atomic_cmpswap{sc0 sc1}"},
    /* fences: release / acquire / acq_rel / seq_cst (= acq_rel) at each scope; workgroup fences
     * emit no cache maintenance outside tgsplit mode */
    {"ms_fence_rel_wg", D_ST "; global_store_dword{sc0}"},
    {"ms_fence_rel_agent", D_ST "; " REL_A "; global_store_dword{sc1}"},
    {"ms_fence_rel_sys", D_ST "; " REL_S "; global_store_dword{sc0 sc1}"},
    {"ms_fence_acq_wg", "global_load_dword{sc0}; " D_LD},
    {"ms_fence_acq_agent", "global_load_dword{sc1}; " ACQ_A "; " D_LD},
    {"ms_fence_acq_sys", "global_load_dword{sc0 sc1}; " ACQ_S "; " D_LD},
    {"ms_fence_ar_wg", D_ST "; global_load_dword{sc0}; " D_LD "; global_store_dword{sc0}"},
    {"ms_fence_ar_agent",
     D_ST "; global_load_dword{sc1}; buffer_wbl2{sc1}; s_waitcnt vmcnt(0); buffer_inv{sc1}; " D_LD
          "; global_store_dword{sc1}"},
    {"ms_fence_ar_sys",
     D_ST "; global_load_dword{sc0 sc1}; buffer_wbl2{sc0 sc1}; s_waitcnt vmcnt(0); buffer_inv{sc0 sc1}; " D_LD
          "; global_store_dword{sc0 sc1}"},
    {"ms_fence_sc_wg", D_ST "; global_load_dword{sc0}; " D_LD "; global_store_dword{sc0}"},
    {"ms_fence_sc_agent",
     D_ST "; global_load_dword{sc1}; buffer_wbl2{sc1}; s_waitcnt vmcnt(0); buffer_inv{sc1}; " D_LD
          "; global_store_dword{sc1}"},
    {"ms_fence_sc_sys",
     D_ST "; global_load_dword{sc0 sc1}; buffer_wbl2{sc0 sc1}; s_waitcnt vmcnt(0); buffer_inv{sc0 sc1}; " D_LD
          "; global_store_dword{sc0 sc1}"},
    {"ms_asm_release", D_ST "; " REL_A "; global_store_dword{sc1}"},
    /* dev_barrier: workgroup release (lgkmcnt(0)), s_barrier, workgroup acquire (nothing) */
    {"ms_barrier", "s_waitcnt vmcnt(0); ds_write_b32; s_waitcnt lgkmcnt(0); s_barrier; ds_read_b32"},
    /* dev_wait_stores: the drain itself */
    {"ms_wait_stores", D_ST "; s_waitcnt vmcnt(0); global_store_dword{}"},
    /* dev_st / dev_ld / dev_buf with DEV_CP_PLAIN, NT, DEV (monotonic agent), SYS (monotonic system) */
    {"ms_st32_plain", "global_store_dword{}"},
    {"ms_st32_nt", "global_store_dword{nt}"},
    {"ms_st32_dev", "global_store_dword{sc1}"},
    {"ms_st32_sys", "global_store_dword{sc0 sc1}"},
    {"ms_st64_plain", "global_store_dwordx2{}"},
    {"ms_st64_nt", "global_store_dwordx2{nt}"},
    {"ms_st64_dev", "global_store_dwordx2{sc1}"},
    {"ms_st64_sys", "global_store_dwordx2{sc0 sc1}"},
    {"ms_ld32_plain", "global_load_dword{}"},
    {"ms_ld32_nt", "global_load_dword{nt}"},
    {"ms_ld32_dev", "global_load_dword{sc1}"},
    {"ms_ld32_sys", "global_load_dword{sc0 sc1}"},
    {"ms_ld64_plain", "global_load_dwordx2{}"},
    {"ms_ld64_nt", "global_load_dwordx2{nt}"},
    {"ms_ld64_dev", "global_load_dwordx2{sc1}"},
    {"ms_ld64_sys", "global_load_dwordx2{sc0 sc1}"},
    {"ms_bufst_plain", "buffer_store_dword{}"},
    {"ms_bufst_nt", "buffer_store_dword{nt}"},
    {"ms_bufst_dev", "buffer_store_dword{sc1}"},
    {"ms_bufst_sys", "buffer_store_dword{sc0 sc1}"},
    {"ms_bufld_plain", "buffer_load_dword{}"},
    {"ms_bufld_nt", "buffer_load_dword{nt}"},
    {"ms_bufld_dev", "buffer_load_dword{sc1}"},
    {"ms_bufld_sys", "buffer_load_dword{sc0 sc1}"},
    /* hand-offs: a tagged pair is one device-scope 8-byte access each way, no fence */
    {"ms_pair_put", "@global_store_dwordx2{sc1}"},
    {"ms_pair_get", "@global_load_dwordx2{sc1}"},
    {"ms_get_batch", "@global_load_dwordx2{sc1}"},
    /* ho_flag_raise: the data drained by every wave before the barrier, then the agent release */
    {"ms_flag_raise", "global_store_dword{sc1}; s_waitcnt vmcnt(0); s_barrier; buffer_wbl2{sc1}; "
                      "?s_waitcnt vmcnt(0); global_store_dword{sc1}"},
    /* ho_flags_wait: acquire loads polled, the barrier, then the data at device scope */
    {"ms_flags_wait", "global_load_dword{sc1}; " ACQ_A "; s_barrier; global_load_dword{sc1}"},
    /* dev_epoch_begin: acquire e, mark (relaxed agent), e through LDS between two barriers */
    {"ms_epoch_begin", "global_load_dword{sc1}; " ACQ_A "; global_store_dword{sc1}; ds_write_b32; "
                       "s_waitcnt lgkmcnt(0); s_barrier; ds_read_b32; s_waitcnt lgkmcnt(0); s_barrier"},
    /* dev_epoch_end: marks polled (relaxed agent), barrier, counters zeroed, release of e + 1 */
    {"ms_epoch_end", "global_load_dword{sc1}; s_barrier; global_store_dword{sc1}; global_store_dword{sc1}; " REL_A
                     "; global_store_dword{sc1}"},
    /* ar_push: every push one system-scope store, 8 bytes under the pair protocol, 4 under the word
     * protocol (device/ar.h); ar_reduce: system-scope polls of the slots and the abort word; ar_fail:
     * system compare-and-swaps (sc1; sc0: old value returned) */
    {"ms_ar_push", "@global_store_dwordx2{sc0 sc1}; @global_store_dword{sc0 sc1}"},
    {"ms_ar_reduce", "global_load_dwordx2{sc0 sc1}; global_load_dword{sc0 sc1}; global_atomic_cmpswap{sc0 sc1}; "
                     "global_atomic_cmpswap{sc1}"},
    /* dev_persist_arrive: relaxed system RMWs and polls, the verdict through LDS and a barrier */
    {"ms_persist_arrive", "global_atomic_add{sc0 sc1}; global_atomic_cmpswap{sc1}; global_load_dword{sc0 sc1}; "
                          "ds_write_b32; s_waitcnt lgkmcnt(0); s_barrier; ds_read_b32"},
    /* the canary: an agent release with nothing else outstanding */
    {"ms_canary_wbl2", "buffer_wbl2{sc1}; ?s_waitcnt vmcnt(0); global_store_dword{sc1}"},
};
#define NPATTERNS (sizeof patterns / sizeof patterns[0])

/* the kernels the broken build changes (memseq.cl's BROKEN marks); each must fail its sequence */
static const char *const broken_kernels[] = {
    "ms_st_rel_agent", "ms_st_rel_sys", "ms_ld_acq_agent", "ms_fence_rel_agent", "ms_fence_acq_sys",
    "ms_asm_release",  "ms_barrier",    "ms_wait_stores",  "ms_st64_sys",        "ms_flag_raise",
};
/* ... and of those, the ones the whole-kernel rules must reject too (the others are correct code
 * of a weaker primitive: only the sequence shows what is missing) */
static const char *const broken_by_rules[] = {"ms_asm_release", "ms_barrier"};

struct step {
  char mn[48];
  int prefix;     /* mnemonic ends in '*' */
  int bits;       /* -1: any; else the exact CP_* set */
  int wait;       /* 0, or 'v' / 'l': s_waitcnt down to 0 on vmcnt / lgkmcnt */
  int optional;   /* '?' */
  int all;        /* '@' */
};

static void step_parse(const char *text, struct step *st) {
  memset(st, 0, sizeof *st);
  while (*text == ' ') text++;
  if (*text == '?') st->optional = 1, text++;
  if (*text == '@') st->all = 1, text++;
  st->bits = -1;
  if (strncmp(text, "s_waitcnt ", 10) == 0) {
    strcpy(st->mn, "s_waitcnt");
    st->wait = strstr(text, "vmcnt(0)") ? 'v' : 'l';
    return;
  }
  size_t n = strcspn(text, "{; ");
  ck_assert(n > 0 && n < sizeof st->mn);
  memcpy(st->mn, text, n);
  if (st->mn[n - 1] == '*') st->prefix = 1, st->mn[n - 1] = '\0';
  const char *br = text + n;
  if (*br == '{') {
    const char *end = strchr(br, '}');
    ck_assert(end != NULL);
    char bits[32];
    ck_assert((size_t)(end - br) < sizeof bits);
    memcpy(bits, br + 1, (size_t)(end - br - 1));
    bits[end - br - 1] = '\0';
    st->bits = (int)((has_token(bits, "sc0") ? CP_SC0 : 0u) | (has_token(bits, "sc1") ? CP_SC1 : 0u) |
                     (has_token(bits, "nt") ? CP_NT : 0u));
  }
}

static int step_match(const struct step *st, const struct insn *x) {
  if (st->prefix ? strncmp(x->mn, st->mn, strlen(st->mn)) != 0 : strcmp(x->mn, st->mn) != 0) return 0;
  if (st->wait == 'v') return x->vm == 0;
  if (st->wait == 'l') return x->lgkm == 0;
  return st->bits < 0 || (int)x->cp == st->bits;
}

/* 0 if f's instructions hold seq (strict: the '?' steps too); else 1 with the first step that
 * failed in why */
static int seq_check(const struct func *f, const char *seq, int strict, char *why, size_t whyn) {
  size_t pos = 0, k = 0;
  for (const char *p = seq; *p; k++) {
    const char *semi = strchr(p, ';');
    size_t len = semi ? (size_t)(semi - p) : strlen(p);
    while (len && *p == ' ') p++, len--;
    char text[128];
    ck_assert(len < sizeof text);
    memcpy(text, p, len);
    text[len] = '\0';
    p = semi ? semi + 1 : p + len;
    struct step st;
    step_parse(text, &st);
    if (st.optional && !strict) continue;
    if (st.all) {
      unsigned seen = 0;
      for (size_t i = 0; i < f->n; i++) {
        const struct insn *x = &f->in[i];
        if (strcmp(x->mn, st.mn) != 0) continue;
        seen++;
        if ((int)x->cp != st.bits) {
          snprintf(why, whyn, "step %zu '%s': %llx %s %s", k + 1, text, (unsigned long long)x->addr, x->mn, x->ops);
          return 1;
        }
      }
      if (!seen) {
        snprintf(why, whyn, "step %zu '%s': no such instruction", k + 1, text);
        return 1;
      }
      continue;
    }
    size_t i = pos;
    while (i < f->n && !step_match(&st, &f->in[i])) i++;
    if (i == f->n) {
      snprintf(why, whyn, "step %zu '%s' not found after %llx", k + 1, text,
               pos < f->n ? (unsigned long long)f->in[pos].addr : 0ull);
      return 1;
    }
    pos = i + 1;
  }
  return 0;
}

static const struct pattern *pattern_of(const char *kernel) {
  for (size_t i = 0; i < NPATTERNS; i++)
    if (strcmp(patterns[i].kernel, kernel) == 0) return &patterns[i];
  return NULL;
}
static int listed(const char *name, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(list[i], name) == 0) return 1;
  return 0;
}

/* ---------------------------------------------------------------- targets and modes */

static char targets[4][16];
static int ntargets;

static void targets_load(void) {
  const char *t = getenv("MEMSEQ_TARGETS");
  ntargets = 0;
  if (!t) return;
  while (*t && ntargets < 4) {
    size_t n = strcspn(t, ",");
    if (n && n < sizeof targets[0]) {
      memcpy(targets[ntargets], t, n);
      targets[ntargets][n] = '\0';
      ntargets++;
    }
    t += n;
    if (*t == ',') t++;
  }
}

static void co_path(char *out, size_t n, const char *dirvar, const char *stem, const char *t) {
  snprintf(out, n, "%s/%s-%s.co", env_or_fail(dirvar), stem, t);
}

/* Strict (the wait after every write-back demanded) when MEMSEQ_STRICT=1, or when the compiler
 * emits it in the canary (then it has llvm/llvm-project#178316 and a missing one is a regression). */
static int strict_for(const struct dis *probe) {
  const char *e = getenv("MEMSEQ_STRICT");
  if (e && strcmp(e, "1") == 0) return 1;
  const struct func *f = dis_find(probe, "ms_canary_wbl2");
  ck_assert_msg(f != NULL, "the probe has no ms_canary_wbl2");
  char why[256];
  return seq_check(f, pattern_of("ms_canary_wbl2")->seq, 1, why, sizeof why) == 0;
}

/* ---------------------------------------------------------------- tests */

/* Every memseq kernel holds its sequence and the whole-kernel rules, on each target; every kernel
 * has a sequence and every sequence a kernel. */
START_TEST(primitives) {
  ck_assert_int_lt(_i, ntargets);
  const char *t = targets[_i];
  char path[1024];
  co_path(path, sizeof path, "MEMSEQ_PROBE_DIR", "memseq", t);
  struct dis d;
  dis_load(path, &d);
  int strict = strict_for(&d);
  unsigned checked = 0;
  struct verdict sum;
  memset(&sum, 0, sizeof sum);
  for (size_t i = 0; i < d.n; i++) {
    const struct func *f = &d.f[i];
    const struct pattern *p = pattern_of(f->name);
    ck_assert_msg(p != NULL, "%s: kernel %s has no sequence in test_memseq.c", t, f->name);
    char why[512];
    ck_assert_msg(seq_check(f, p->seq, strict, why, sizeof why) == 0, "%s: %s: %s\n  wanted: %s", t,
                  f->name, why, p->seq);
    struct verdict v;
    rules_check(f, strict, &v);
    ck_assert_msg(v.failures == 0, "%s: %s", t, v.msg);
    verdict_add(&sum, &v);
    checked++;
  }
  for (size_t i = 0; i < NPATTERNS; i++)
    ck_assert_msg(dis_find(&d, patterns[i].kernel) != NULL, "%s: no kernel %s in %s", t, patterns[i].kernel, path);
  fprintf(stderr, "memseq %s: %u kernels hold their sequences (%s); %u releases, %u acquires, %u barriers, "
                  "%u write-backs not waited for with nothing else outstanding\n",
          t, checked, strict ? "strict" : "lenient: compiler without llvm#178316", sum.releases, sum.acquires,
          sum.barriers, sum.gaps);
  dis_free(&d);
}
END_TEST

/* The broken build: each changed kernel fails its sequence (and the rules where the code itself is
 * wrong, not only weaker); every other kernel still passes, so each failure is the change's. */
START_TEST(broken_rejected) {
  ck_assert_int_lt(_i, ntargets);
  const char *t = targets[_i];
  char path[1024];
  co_path(path, sizeof path, "MEMSEQ_PROBE_DIR", "memseq", t);
  struct dis good;
  dis_load(path, &good);
  int strict = strict_for(&good);
  dis_free(&good);
  co_path(path, sizeof path, "MEMSEQ_PROBE_DIR", "memseq-broken", t);
  struct dis d;
  dis_load(path, &d);
  unsigned rejected = 0;
  for (size_t i = 0; i < d.n; i++) {
    const struct func *f = &d.f[i];
    const struct pattern *p = pattern_of(f->name);
    ck_assert_msg(p != NULL, "%s: broken kernel %s has no sequence", t, f->name);
    char why[512];
    int seq_bad = seq_check(f, p->seq, strict, why, sizeof why);
    struct verdict v;
    rules_check(f, strict, &v);
    int is_broken = listed(f->name, broken_kernels, sizeof broken_kernels / sizeof broken_kernels[0]);
    int by_rules = listed(f->name, broken_by_rules, sizeof broken_by_rules / sizeof broken_by_rules[0]);
    if (is_broken) {
      ck_assert_msg(seq_bad, "%s: broken %s passed its sequence: %s", t, f->name, p->seq);
      fprintf(stderr, "memseq %s: broken %s rejected: %s\n", t, f->name, why);
      rejected++;
    } else {
      ck_assert_msg(!seq_bad, "%s: unchanged %s failed in the broken build: %s", t, f->name, why);
    }
    if (by_rules) {
      ck_assert_msg(v.failures > 0, "%s: broken %s passed the whole-kernel rules", t, f->name);
      fprintf(stderr, "memseq %s: broken %s rejected by the rules: %s", t, f->name, v.msg);
    } else if (!is_broken) {
      ck_assert_msg(v.failures == 0, "%s: %s", t, v.msg);
    }
  }
  ck_assert_uint_eq(rejected, sizeof broken_kernels / sizeof broken_kernels[0]);
  dis_free(&d);
}
END_TEST

/* The project's own code object for the target: every function obeys the rules; the kernels that
 * run the all-reduce keep system scope on their pushes and polls; the kernels that raise and wait
 * for flags carry releases and acquires at all. */
START_TEST(build_kernels) {
  ck_assert_int_lt(_i, ntargets);
  const char *t = targets[_i];
  char path[1024];
  co_path(path, sizeof path, "MEMSEQ_PROBE_DIR", "memseq", t);
  struct dis probe;
  dis_load(path, &probe);
  int strict = strict_for(&probe);
  dis_free(&probe);
  co_path(path, sizeof path, "MEMSEQ_DEVICE_DIR", "hsamono", t);
  struct dis d;
  dis_load(path, &d);
  struct verdict sum;
  memset(&sum, 0, sizeof sum);
  for (size_t i = 0; i < d.n; i++) {
    const struct func *f = &d.f[i];
    struct verdict v;
    rules_check(f, strict, &v);
    ck_assert_msg(v.failures == 0, "%s: %s", t, v.msg);
    fprintf(stderr, "memseq %s: %-14s %5zu insns: %3u releases (%u write-backs not waited for), %3u acquires, "
                    "%3u barriers; system scope: %u stores, %u loads, %u atomics\n",
            t, f->name, f->n, v.releases, v.gaps, v.acquires, v.barriers, v.sys_st, v.sys_ld, v.sys_rmw);
    if (v.gaps) fprintf(stderr, "%s", v.msg); /* where: for the day the compiler is fixed or worked around */
    /* ar_push / ar_reduce (device/ar.h): one-shot pairs at system scope */
    if (strcmp(f->name, "ar_allreduce") == 0 || strcmp(f->name, "ffn") == 0 || strcmp(f->name, "k2") == 0) {
      struct step push, poll;
      step_parse("global_store_dwordx2{sc0 sc1}", &push);
      step_parse("global_load_dwordx2{sc0 sc1}", &poll);
      unsigned np = 0, nl = 0;
      for (size_t k = 0; k < f->n; k++) np += step_match(&push, &f->in[k]), nl += step_match(&poll, &f->in[k]);
      ck_assert_msg(np > 0 && nl > 0, "%s: %s: %u system-scope pair stores, %u pair loads", t, f->name, np, nl);
    }
    /* ho_flag_raise / ho_flags_wait / the epoch: agent releases and acquires */
    if (strcmp(f->name, "ffn") == 0 || strcmp(f->name, "k1") == 0 || strcmp(f->name, "k2") == 0 ||
        strcmp(f->name, "ar_allreduce") == 0)
      ck_assert_msg(v.releases > 0 && v.acquires > 0, "%s: %s: %u releases, %u acquires", t, f->name, v.releases,
                    v.acquires);
    verdict_add(&sum, &v);
  }
  fprintf(stderr, "memseq %s: hsamono-%s.co: %zu functions, %u releases, %u acquires, %u barriers, %u write-backs "
                  "not waited for with nothing else outstanding (%s)\n",
          t, t, d.n, sum.releases, sum.acquires, sum.barriers, sum.gaps,
          strict ? "strict" : "lenient: the compiler lacks llvm/llvm-project#178316");
  dis_free(&d);
}
END_TEST

/* The checker itself on hand-written disassembly: a release whose earlier store is still in flight
 * fails; the same with the wait passes; a write-back alone not waited for is a gap (lenient) or a
 * failure (strict); LDS in flight at a barrier fails. Independent of any compiler. */
START_TEST(checker_cases) {
  static const char *const good[] = {
      "0000000000001000 <k>:",
      "\tglobal_store_dword v0, v1, s[2:3] // 000000001000: 0",
      "\tbuffer_wbl2 sc1 // 000000001008: 0",
      "\ts_waitcnt vmcnt(0) // 000000001010: 0",
      "\tglobal_store_dword v0, v2, s[4:5] sc1 // 000000001014: 0",
      "\ts_endpgm // 00000000101C: 0",
  };
  static const char *const unwaited[] = {
      "0000000000001000 <k>:",
      "\tglobal_store_dword v0, v1, s[2:3] // 000000001000: 0",
      "\ts_cbranch_execz 2 // 000000001008: 0", /* to 0x1014, past the write-back */
      "\tbuffer_wbl2 sc1 // 00000000100C: 0",
      "\ts_nop 0 // 000000001010: 0",
      "\tglobal_store_dword v0, v2, s[4:5] sc1 // 000000001014: 0",
      "\ts_endpgm // 00000000101C: 0",
  };
  static const char *const gap[] = {
      "0000000000001000 <k>:",
      "\tglobal_store_dword v0, v1, s[2:3] // 000000001000: 0",
      "\ts_waitcnt 0 // 000000001008: 0", /* every counter down to 0, as a bare immediate */
      "\tbuffer_wbl2 sc1 // 00000000100C: 0",
      "\tglobal_store_dword v0, v2, s[4:5] sc1 // 000000001014: 0",
      "\ts_endpgm // 00000000101C: 0",
  };
  static const char *const narrow[] = {
      "0000000000001000 <k>:",
      "\tbuffer_wbl2 sc0 sc1 // 000000001000: 0",
      "\ts_waitcnt vmcnt(0) // 000000001008: 0",
      "\tglobal_store_dword v0, v2, s[4:5] sc1 // 00000000100C: 0",
      "\ts_endpgm // 000000001014: 0",
  };
  static const char *const lds[] = {
      "0000000000001000 <k>:",
      "\tds_write_b32 v1, v2 // 000000001000: 0",
      "\ts_waitcnt vmcnt(0) // 000000001008: 0",
      "\ts_barrier // 00000000100C: 0",
      "\ts_endpgm // 000000001010: 0",
  };
  static const char *const loop[] = {
      "0000000000001000 <k>:",
      "\tglobal_store_dword v0, v1, s[2:3] // 000000001000: 0",
      "\tbuffer_wbl2 sc1 // 000000001008: 0",
      "\ts_waitcnt vmcnt(0) // 000000001010: 0",
      "\tglobal_load_dword v1, v0, s[4:5] sc1 // 000000001014: 0", /* a poll loop between */
      "\ts_waitcnt vmcnt(0) // 00000000101C: 0",
      "\ts_cbranch_vccz 65532 // 000000001020: 0", /* back to 0x1014 */
      "\tglobal_store_dword v0, v2, s[4:5] sc1 // 000000001024: 0",
      "\ts_endpgm // 00000000102C: 0",
  };
  struct {
    const char *const *lines;
    size_t n;
    int strict;
    unsigned failures, gaps;
  } cases[] = {
      {good, sizeof good / sizeof *good, 1, 0, 0},
      {unwaited, sizeof unwaited / sizeof *unwaited, 0, 1, 0},
      {gap, sizeof gap / sizeof *gap, 0, 0, 1},
      {gap, sizeof gap / sizeof *gap, 1, 1, 0},
      {narrow, sizeof narrow / sizeof *narrow, 0, 1, 0},
      {lds, sizeof lds / sizeof *lds, 0, 1, 0},
      {loop, sizeof loop / sizeof *loop, 1, 0, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    struct dis d;
    memset(&d, 0, sizeof d);
    for (size_t i = 0; i < cases[c].n; i++) {
      char line[256];
      snprintf(line, sizeof line, "%s\n", cases[c].lines[i]);
      dis_line(&d, line);
    }
    ck_assert_uint_eq(d.n, 1);
    struct verdict v;
    rules_check(&d.f[0], cases[c].strict, &v);
    ck_assert_msg(v.failures == cases[c].failures && v.gaps == cases[c].gaps,
                  "case %zu: %u failures, %u gaps: %s", c, v.failures, v.gaps, v.msg);
    dis_free(&d);
  }
  /* sequences: order matters, exact bits matter, '?' only when strict */
  struct dis d;
  memset(&d, 0, sizeof d);
  for (size_t i = 0; i < sizeof gap / sizeof *gap; i++) {
    char line[256];
    snprintf(line, sizeof line, "%s\n", gap[i]);
    dis_line(&d, line);
  }
  char why[256];
  ck_assert_int_eq(seq_check(&d.f[0], "global_store_dword{}; buffer_wbl2{sc1}; global_store_dword{sc1}", 1, why,
                             sizeof why), 0);
  ck_assert_int_eq(seq_check(&d.f[0], "buffer_wbl2{sc1}; ?s_waitcnt vmcnt(0); global_store_dword{sc1}", 0, why,
                             sizeof why), 0);
  ck_assert_int_eq(seq_check(&d.f[0], "buffer_wbl2{sc1}; ?s_waitcnt vmcnt(0); global_store_dword{sc1}", 1, why,
                             sizeof why), 1);
  ck_assert_int_eq(seq_check(&d.f[0], "global_store_dword{sc1}; buffer_wbl2{sc1}", 0, why, sizeof why), 1);
  ck_assert_int_eq(seq_check(&d.f[0], "buffer_wbl2{sc0 sc1}", 0, why, sizeof why), 1);
  ck_assert_int_eq(seq_check(&d.f[0], "s_waitcnt vmcnt(0); buffer_wbl2", 0, why, sizeof why), 0);
  dis_free(&d);
}
END_TEST

Suite *hm_test_suite(void) {
  targets_load();
  Suite *s = suite_create("memseq");
  TCase *tc = tcase_create("checker");
  tcase_add_test(tc, checker_cases);
  suite_add_tcase(s, tc);
  tc = tcase_create("probe");
  tcase_add_loop_test(tc, primitives, 0, ntargets);
  tcase_add_loop_test(tc, broken_rejected, 0, ntargets);
  suite_add_tcase(s, tc);
  tc = tcase_create("build");
  tcase_add_loop_test(tc, build_kernels, 0, ntargets);
  suite_add_tcase(s, tc);
  return s;
}
