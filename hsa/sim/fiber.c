/* hsa/sim/fiber.c: setting up a fiber's first frame (x86-64: a stack the switch can "return"
 * into the trampoline from; elsewhere: ucontext, slower but portable); under ASan, telling it. */
#include "fiber.h"

#include <stdint.h>

#ifdef SIM_FIBER_ASAN
#undef sim_fiber_switch
void sim_fiber_switch(struct sim_fiber *from, struct sim_fiber *to); /* the raw switch below */
static void asan_init(struct sim_fiber *f, void *stack, size_t size, void (**entry)(void *), void **arg);
#endif

#if defined(__x86_64__)
void sim_fiber_trampoline(void);

void sim_fiber_init(struct sim_fiber *f, void *stack, size_t size, void (*entry)(void *), void *arg) {
#ifdef SIM_FIBER_ASAN
  asan_init(f, stack, size, &entry, &arg);
#endif
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
#ifdef SIM_FIBER_ASAN
  asan_init(f, stack, size, &entry, &arg);
#endif
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

#ifdef SIM_FIBER_ASAN
/* AddressSanitizer must know which stack runs: a report names the right stack, a noreturn call
 * unpoisons the right one, and a fiber's frames are not taken for an overflow of the thread's. */
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>

static __thread struct sim_fiber *asan_from; /* the fiber that switched to the running one */

/* The switch has landed: finish it and learn the stack of the context it came from if that was a
 * thread's own (its bounds are known only now). */
static void asan_arrived(void *fake) {
  const void *bottom;
  size_t size;
  __sanitizer_finish_switch_fiber(fake, &bottom, &size);
  if (!asan_from->asan_size) {
    asan_from->asan_stack = bottom;
    asan_from->asan_size = size;
  }
}

static void asan_entry(void *arg) {
  struct sim_fiber *f = arg;
  asan_arrived(NULL);
  f->asan_entry(f->asan_arg);
}

/* The fiber starts in asan_entry, which finishes its first switch, then calls the real entry. */
static void asan_init(struct sim_fiber *f, void *stack, size_t size, void (**entry)(void *), void **arg) {
  f->asan_stack = stack;
  f->asan_size = size;
  f->asan_fake = NULL;
  f->asan_low = NULL;
  f->asan_entry = *entry;
  f->asan_arg = *arg;
  *entry = asan_entry;
  *arg = f;
}

void sim_fiber_switch_asan(struct sim_fiber *from, struct sim_fiber *to) {
  from->asan_low = __builtin_frame_address(0);
  __sanitizer_start_switch_fiber(&from->asan_fake, to->asan_stack, to->asan_size);
  asan_from = from;
  sim_fiber_switch(from, to);
  asan_arrived(from->asan_fake);
}

void sim_fiber_forget(struct sim_fiber *f) {
  /* asan_low is the switch's frame pointer; its locals' redzones lie below it (then only the raw
   * switch's saved registers). Everything below the fiber's last frame is dead, so a generous
   * margin under it costs nothing but a little shadow. */
  char *low = f->asan_low, *bottom = (char *)f->asan_stack, *top = bottom + f->asan_size;
  if (!low || low <= bottom || low >= top) return;
  low = low - bottom > 4096 ? low - 4096 : bottom;
  __asan_unpoison_memory_region(low, (size_t)(top - low));
  f->asan_low = NULL;
}
#endif
