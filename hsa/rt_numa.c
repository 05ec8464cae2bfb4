/* hsa/rt_numa.c: binding a thread to the CPUs of a GPU agent's NUMA node with libnuma, so a rank's
 * host work runs on the node whose memory holds its kernel arguments and staging buffers. */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <string.h>

#include "rt_internal.h"

/* At open: the node's CPUs this process may use, or why the agent's threads cannot be bound.
 * The group steps bind their rank threads every step, so libnuma's mask allocations and sysfs
 * reads happen here once, not there. */
void hm_rt_numa_prepare(hm_agent *a) {
  const unsigned g = a->index, node = a->info.numa_node;
  CPU_ZERO(&a->numa_cpus);
  a->numa_ncpus = 0;
  a->numa_st = HM_OK;
  a->numa_why[0] = 0;
  /* numa_available first: no other libnuma call is defined without it */
  if (numa_available() < 0) {
    a->numa_st = HM_ERR_UNSUPPORTED;
    snprintf(a->numa_why, sizeof a->numa_why, "GPU agent %u: this system has no NUMA support (libnuma)", g);
    return;
  }
  if (node > (unsigned)numa_max_node() || !numa_bitmask_isbitset(numa_all_nodes_ptr, node)) {
    /* the CPU agent's KFD node id is taken as the Linux node number; a node this process may
     * not use (or that is not there, as the software agent's further nodes) is not bound to */
    a->numa_st = HM_ERR_NOT_FOUND;
    snprintf(a->numa_why, sizeof a->numa_why, "GPU agent %u: NUMA node %u does not exist here (nodes 0..%d)", g,
             node, numa_max_node());
    return;
  }
  struct bitmask *cpus = numa_allocate_cpumask();
  if (!cpus) {
    a->numa_st = HM_ERR_NO_MEMORY;
    snprintf(a->numa_why, sizeof a->numa_why, "GPU agent %u: out of memory for a CPU mask", g);
    return;
  }
  if (numa_node_to_cpus((int)node, cpus) < 0) {
    a->numa_st = HM_ERR_NOT_FOUND;
    snprintf(a->numa_why, sizeof a->numa_why, "GPU agent %u: NUMA node %u: no CPU list (%s)", g, node,
             strerror(errno));
  } else {
    /* only the CPUs this process may run on (its cpuset); a cpu_set_t holds CPU_SETSIZE (1,024) */
    for (unsigned c = 0; c < cpus->size && c < CPU_SETSIZE; c++)
      if (numa_bitmask_isbitset(cpus, c) && numa_bitmask_isbitset(numa_all_cpus_ptr, c)) {
        CPU_SET(c, &a->numa_cpus);
        a->numa_ncpus++;
      }
    if (a->numa_ncpus == 0) {
      a->numa_st = HM_ERR_NOT_FOUND;
      snprintf(a->numa_why, sizeof a->numa_why, "GPU agent %u: NUMA node %u has no CPU this process may use", g, node);
    }
  }
  numa_free_cpumask(cpus);
}

hm_status hm_agent_bind_thread(hm_agent *a) {
  if (!a || !hm_rt_owns_agent(a->rt, a)) return hm_fail(HM_ERR_INVALID_ARG, "hm_agent_bind_thread: unknown agent");
  if (a->numa_st != HM_OK) return hm_fail(a->numa_st, "%s; thread not bound", a->numa_why);
  /* pid 0: the calling thread alone; the kernel changes nothing when it refuses */
  if (sched_setaffinity(0, sizeof a->numa_cpus, &a->numa_cpus) < 0)
    return hm_fail(HM_ERR_RUNTIME, "GPU agent %u: binding to NUMA node %u's %u CPUs: %s", a->index,
                   a->info.numa_node, a->numa_ncpus, strerror(errno));
  hm_log(HM_LOG_DEBUG, "thread bound to NUMA node %u (%u CPUs), beside GPU agent %u", a->info.numa_node,
         a->numa_ncpus, a->index);
  return HM_OK; /* a failure is in the debug log already: hm_fail logs every one there */
}
