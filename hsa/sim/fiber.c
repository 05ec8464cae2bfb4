/* hsa/sim/fiber.c: setting up a fiber's first frame (x86-64: a stack the switch can "return"
 * into the trampoline from; elsewhere: ucontext, slower but portable). */
#include "fiber.h"

#include <stdint.h>

#if defined(__x86_64__)
void sim_fiber_trampoline(void);

void sim_fiber_init(struct sim_fiber *f, void *stack, size_t size, void (*entry)(void *), void *arg) {
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)top;
  *--sp = (uint64_t)(uintptr_t)sim_fiber_trampoline; /* ret target; rsp = top afterwards */
  *--sp = 0;                                          /* rbp */
  *--sp = 0;                                          /* rbx */
  *--sp = (uint64_t)(uintptr_t)entry;                 /* r12 */
  *--sp = (uint64_t)(uintptr_t)arg;                   /* r13 */
  *--sp = 0;                                          /* r14 */
  *--sp = 0;                                          /* r15 */
  f->sp = sp;
}
#else
#include <ucontext.h>

void sim_fiber_init(struct sim_fiber *f, void *stack, size_t size, void (*entry)(void *), void *arg) {
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack;
  f->uc.uc_stack.ss_size = size;
  f->uc.uc_link = NULL;
  /* makecontext passes int arguments: split the pointer */
  uintptr_t a = (uintptr_t)arg;
  makecontext(&f->uc, (void (*)(void))entry, 1, a);
}

void sim_fiber_switch(struct sim_fiber *from, struct sim_fiber *to) { swapcontext(&from->uc, &to->uc); }
#endif
