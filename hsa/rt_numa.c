/* hsa/rt_numa.c: binding a thread to the CPUs of a GPU agent's NUMA node with libnuma, so a rank's
 * host work runs on the node whose memory holds its kernel arguments and staging buffers. */
#include <errno.h>
#include <numa.h>
#include <string.h>

#include "rt_internal.h"

hm_status hm_agent_bind_thread(hm_agent *a) {
  if (!a || !hm_rt_owns_agent(a->rt, a)) return hm_fail(HM_ERR_INVALID_ARG, "hm_agent_bind_thread: unknown agent");
  const unsigned g = a->index, node = a->info.numa_node;
  hm_status st = HM_OK;
  /* numa_available first: no other libnuma call is defined without it */
  if (numa_available() < 0) {
    st = hm_fail(HM_ERR_UNSUPPORTED, "GPU agent %u: this system has no NUMA support (libnuma); thread not bound", g);
  } else if (node > (unsigned)numa_max_node() || !numa_bitmask_isbitset(numa_all_nodes_ptr, node)) {
    /* the CPU agent's KFD node id is taken as the Linux node number; a node this process may
     * not use (or that is not there, as the software agent's further nodes) is not bound to */
    st = hm_fail(HM_ERR_NOT_FOUND, "GPU agent %u: NUMA node %u does not exist here (nodes 0..%d); thread not bound", g,
                 node, numa_max_node());
  } else {
    struct bitmask *cpus = numa_allocate_cpumask();
    if (!cpus) return hm_fail(HM_ERR_NO_MEMORY, "GPU agent %u: out of memory for a CPU mask", g);
    if (numa_node_to_cpus((int)node, cpus) < 0) {
      st = hm_fail(HM_ERR_NOT_FOUND, "GPU agent %u: NUMA node %u: no CPU list (%s); thread not bound", g, node,
                   strerror(errno));
    } else {
      /* only the CPUs this process may run on (its cpuset): a node with none of them is not here */
      unsigned usable = 0;
      for (unsigned c = 0; c < cpus->size; c++) {
        if (numa_bitmask_isbitset(cpus, c) && !numa_bitmask_isbitset(numa_all_cpus_ptr, c)) numa_bitmask_clearbit(cpus, c);
        usable += numa_bitmask_isbitset(cpus, c) != 0;
      }
      if (usable == 0)
        st = hm_fail(HM_ERR_NOT_FOUND, "GPU agent %u: NUMA node %u has no CPU this process may use; thread not bound", g,
                     node);
      /* pid 0: the calling thread alone; the kernel changes nothing when it refuses */
      else if (numa_sched_setaffinity(0, cpus) < 0)
        st = hm_fail(HM_ERR_RUNTIME, "GPU agent %u: binding to NUMA node %u's %u CPUs: %s", g, node, usable,
                     strerror(errno));
      else
        hm_log(HM_LOG_DEBUG, "thread bound to NUMA node %u (%u CPUs), beside GPU agent %u", node, usable, g);
    }
    numa_free_cpumask(cpus);
  }
  return st; /* a failure is in the debug log already: hm_fail logs every one there */
}
