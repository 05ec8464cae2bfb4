/* hsa/sim/fiber.h: user-space contexts for work-items: a switch saves the callee-saved registers
 * and the stack pointer of one fiber and resumes another, with no system call. */
#ifndef HM_SIM_FIBER_H
#define HM_SIM_FIBER_H

#include <stddef.h>

#if defined(__x86_64__)
struct sim_fiber {
  void *sp;
};
#else
#include <ucontext.h>
struct sim_fiber {
  ucontext_t uc;
};
#endif

/* Prepare f to run entry(arg) on [stack, stack + size) at its first switch. entry must never
 * return: it switches away for the last time when it is done. */
void sim_fiber_init(struct sim_fiber *f, void *stack, size_t size, void (*entry)(void *), void *arg);
/* Save the current context in from and resume to. */
void sim_fiber_switch(struct sim_fiber *from, struct sim_fiber *to);

#endif /* HM_SIM_FIBER_H */
