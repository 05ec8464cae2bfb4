/* hsa/sim/fiber.h: user-space contexts for work-items: a switch saves the callee-saved registers
 * and the stack pointer of one fiber and resumes another, with no system call. */
#ifndef HM_SIM_FIBER_H
#define HM_SIM_FIBER_H

#include <stddef.h>

/* Under AddressSanitizer the switch tells it which stack runs next (fiber.c); the plain build's
 * fiber and switch are untouched. */
#if defined(__SANITIZE_ADDRESS__)
#define SIM_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_FIBER_ASAN 1
#endif
#endif

#ifdef SIM_FIBER_ASAN
/* ASan's view of a fiber: its stack (the thread's own for a context that was never
 * sim_fiber_init'ed, learnt at its first switch), its fake stack while switched out, the lowest
 * frame it left (sim_fiber_forget), and the entry it starts in. */
#define SIM_FIBER_ASAN_FIELDS                                                                             \
  const void *asan_stack;                                                                                 \
  size_t asan_size;                                                                                       \
  void *asan_fake;                                                                                        \
  void *asan_low;                                                                                         \
  void (*asan_entry)(void *);                                                                             \
  void *asan_arg;
#define sim_fiber_switch sim_fiber_switch_asan
#else
#define SIM_FIBER_ASAN_FIELDS
#endif

#if defined(__x86_64__)
struct sim_fiber {
  void *sp;
  SIM_FIBER_ASAN_FIELDS
};
#else
#include <ucontext.h>
struct sim_fiber {
  ucontext_t uc;
  SIM_FIBER_ASAN_FIELDS
};
#endif

/* Prepare f to run entry(arg) on [stack, stack + size) at its first switch. entry must never
 * return: it switches away for the last time when it is done. */
void sim_fiber_init(struct sim_fiber *f, void *stack, size_t size, void (*entry)(void *), void *arg);
/* Save the current context in from and resume to. */
void sim_fiber_switch(struct sim_fiber *from, struct sim_fiber *to);

/* f will not be resumed (its work-item ended or was abandoned) and its stack is about to be
 * reused. Under ASan the redzones its unfinished frames left on the stack are cleared, or the
 * next fiber there would trip on them; otherwise nothing. */
#ifdef SIM_FIBER_ASAN
void sim_fiber_forget(struct sim_fiber *f);
#else
static inline void sim_fiber_forget(struct sim_fiber *f) { (void)f; }
#endif

#endif /* HM_SIM_FIBER_H */
