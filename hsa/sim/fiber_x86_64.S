/* hsa/sim/fiber_x86_64.S: the fiber switch for x86-64 (System V): push the callee-saved
 * registers, swap stack pointers, pop, return. */
#if defined(__x86_64__)
	.text
	.globl	sim_fiber_switch
	.hidden	sim_fiber_switch
	.type	sim_fiber_switch, @function
/* void sim_fiber_switch(struct sim_fiber *from (rdi), struct sim_fiber *to (rsi)) */
sim_fiber_switch:
	pushq	%rbp
	pushq	%rbx
	pushq	%r12
	pushq	%r13
	pushq	%r14
	pushq	%r15
	/* MXCSR and the x87 control word are not switched: nothing in the agent or a kernel changes
	 * them, so every fiber of a thread runs with the thread's. Saving them cost most of a switch
	 * (fnstcw/fldcw are microcoded: 80 % of the samples here) and the switch is the agent's
	 * hottest function (every wave operation and barrier passes through it twice a lane). */
	movq	%rsp, (%rdi)
	movq	(%rsi), %rsp
	popq	%r15
	popq	%r14
	popq	%r13
	popq	%r12
	popq	%rbx
	popq	%rbp
	ret
	.size	sim_fiber_switch, .-sim_fiber_switch

	.globl	sim_fiber_trampoline
	.hidden	sim_fiber_trampoline
	.type	sim_fiber_trampoline, @function
/* First return target of a new fiber: r12 = entry, r13 = arg (restored by the switch). The
 * stack is 16-byte aligned here, so the call leaves it as the ABI expects at entry. */
sim_fiber_trampoline:
	movq	%r13, %rdi
	callq	*%r12
	ud2
	.size	sim_fiber_trampoline, .-sim_fiber_trampoline
#endif
	.section	.note.GNU-stack,"",@progbits
