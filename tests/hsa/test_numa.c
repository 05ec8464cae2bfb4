/* tests/hsa/test_numa.c: NUMA placement on the software agent with HSAMONO_SIM_NUMA_NODES: each GPU's
 * nearest CPU agent, its kernarg and host memory from that agent's pools, threads bound to its node. */
#include <check.h>
#include <dlfcn.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <numa.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group_internal.h"
#include "hm_hsa.h"

/* The software agent with `nodes` NUMA nodes (NULL: the variable unset) and `agents` GPUs; these
 * tests configure the software agent itself, so they always open it. Check runs each test in a
 * child of its own, so the environment set here ends with the test. */
static hm_runtime *open_sim(const char *agents, const char *nodes) {
  setenv("HSAMONO_SIM_AGENTS", agents, 1);
  if (nodes) setenv("HSAMONO_SIM_NUMA_NODES", nodes, 1);
  else unsetenv("HSAMONO_SIM_NUMA_NODES");
  hm_runtime *rt = NULL;
  ck_assert_msg(hm_runtime_open("sim", &rt) == HM_OK, "hm_runtime_open(sim): %s", hm_errmsg());
  return rt;
}

static const hm_agent_info *info(hm_runtime *rt, unsigned g) { return hm_agent_info_of(hm_agent_get(rt, g)); }

/* ---------------------------------------------------------------- the GPU-to-node map */

START_TEST(two_nodes_map) {
  hm_runtime *rt = open_sim("4", "2");
  ck_assert_uint_eq(hm_agent_count(rt), 4);
  ck_assert_uint_eq(hm_cpu_agent_count(rt), 2);
  ck_assert_uint_eq(hm_cpu_agent_node(rt, 0), 0);
  ck_assert_uint_eq(hm_cpu_agent_node(rt, 1), 1);
  ck_assert_uint_eq(hm_cpu_agent_node(rt, 2), UINT32_MAX);
  /* GPU g on node g * 2 / 4, one PCIe hop (distance 20) from its own node's CPU agent; the other
   * node is two hops (52) away and must lose */
  for (unsigned g = 0; g < 4; g++) {
    const hm_agent_info *in = info(rt, g);
    ck_assert_msg(in->cpu_agent == g / 2 && in->numa_node == g / 2, "GPU %u: CPU agent %u, node %u", g, in->cpu_agent,
                  in->numa_node);
    ck_assert_uint_eq(in->numa_distance, 20);
  }
  ck_assert_ptr_nonnull(strstr(hm_runtime_describe(rt), "2 NUMA nodes"));
  hm_runtime_close(rt);
}
END_TEST

START_TEST(one_node_default) {
  hm_runtime *rt = open_sim("4", NULL);
  ck_assert_uint_eq(hm_cpu_agent_count(rt), 1);
  ck_assert_uint_eq(hm_cpu_agent_node(rt, 0), 0);
  for (unsigned g = 0; g < 4; g++) {
    ck_assert_uint_eq(info(rt, g)->cpu_agent, 0);
    ck_assert_uint_eq(info(rt, g)->numa_node, 0);
    ck_assert_uint_eq(info(rt, g)->numa_distance, 20);
  }
  ck_assert_ptr_null(strstr(hm_runtime_describe(rt), "NUMA"));
  hm_runtime_close(rt);
}
END_TEST

/* ---------------------------------------------------------------- where the memory comes from */

/* The agent the HSA library itself says owns p (hsa_amd_pointer_info from the loaded software
 * agent, not the runtime's bookkeeping), as its position among the library's CPU agents (-1: not
 * a CPU agent). */
struct cpu_list {
  hsa_agent_t cpu[8];
  unsigned n;
  hsa_status_t (*get_info)(hsa_agent_t, hsa_agent_info_t, void *);
};
static hsa_status_t collect_cpu(hsa_agent_t a, void *data) {
  struct cpu_list *l = data;
  hsa_device_type_t t;
  if (l->get_info(a, HSA_AGENT_INFO_DEVICE, &t) == HSA_STATUS_SUCCESS && t == HSA_DEVICE_TYPE_CPU && l->n < 8)
    l->cpu[l->n++] = a;
  return HSA_STATUS_SUCCESS;
}

static int owner_cpu(const void *p) {
  void *dl = dlopen("libhsamono-sim.so", RTLD_NOW | RTLD_NOLOAD);
  ck_assert_msg(dl != NULL, "the software agent is not loaded: %s", dlerror());
  hsa_status_t (*pointer_info)(const void *, hsa_amd_pointer_info_t *, void *(*)(size_t), uint32_t *, hsa_agent_t **);
  hsa_status_t (*iterate)(hsa_status_t (*)(hsa_agent_t, void *), void *);
  struct cpu_list l = {.n = 0};
  *(void **)&pointer_info = dlsym(dl, "hsa_amd_pointer_info");
  *(void **)&iterate = dlsym(dl, "hsa_iterate_agents");
  *(void **)&l.get_info = dlsym(dl, "hsa_agent_get_info");
  ck_assert(pointer_info && iterate && l.get_info);
  ck_assert_int_eq(iterate(collect_cpu, &l), HSA_STATUS_SUCCESS);
  hsa_amd_pointer_info_t pi = {.size = sizeof pi};
  ck_assert_int_eq(pointer_info(p, &pi, NULL, NULL, NULL), HSA_STATUS_SUCCESS);
  ck_assert_int_eq(pi.type, HSA_EXT_POINTER_TYPE_HSA);
  dlclose(dl);
  for (unsigned i = 0; i < l.n; i++)
    if (l.cpu[i].handle == pi.agentOwner.handle) return (int)i;
  return -1;
}

START_TEST(two_nodes_pools) {
  hm_runtime *rt = open_sim("4", "2");
  for (unsigned g = 0; g < 4; g++) {
    hm_agent *a = hm_agent_get(rt, g);
    void *k, *h, *d;
    ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_KERNARG, 4096, 0, &k), HM_OK);
    ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_HOST, 8192, 0, &h), HM_OK);
    ck_assert_int_eq(hm_kernarg_new(a, "args", 4, &d), HM_OK);
    ck_assert_msg(owner_cpu(k) == (int)g / 2, "GPU %u's kernarg memory is CPU agent %d's", g, owner_cpu(k));
    ck_assert_msg(owner_cpu(h) == (int)g / 2, "GPU %u's host memory is CPU agent %d's", g, owner_cpu(h));
    ck_assert_int_eq(owner_cpu(d), (int)g / 2);
    /* the copy engine takes memory of the far node as of the near one */
    void *dev;
    ck_assert_int_eq(hm_mem_alloc(a, HM_POOL_COARSE, 8192, 0, &dev), HM_OK);
    hm_signal none = {0};
    memset(h, 0x5a, 8192);
    ck_assert_int_eq(hm_mem_copy(rt, dev, h, 8192, none), HM_OK);
    memset(h, 0, 8192);
    ck_assert_int_eq(hm_mem_copy(rt, h, dev, 8192, none), HM_OK);
    ck_assert_uint_eq(((unsigned char *)h)[8191], 0x5a);
  }
  hm_runtime_close(rt);
}
END_TEST

/* A value that is not 1..agents is told through the log and means one node. */
START_TEST(bad_numa_nodes) {
  setenv("HSAMONO_LOG", "warn", 1);
  const char *bad[] = {"0", "x", "5", "-1", "2x"};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_eq(dup2(fileno(f), 2), 2);
    hm_runtime *rt = open_sim("4", bad[i]);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[2048] = "";
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    ck_assert_msg(strstr(text, "HSAMONO_SIM_NUMA_NODES") && strstr(text, bad[i]), "%s: logged \"%s\"", bad[i], text);
    ck_assert_uint_eq(hm_cpu_agent_count(rt), 1);
    for (unsigned g = 0; g < 4; g++) ck_assert_uint_eq(info(rt, g)->numa_node, 0);
    hm_runtime_close(rt);
  }
}
END_TEST

/* ---------------------------------------------------------------- binding threads */

static void get_affinity(cpu_set_t *s) {
  CPU_ZERO(s);
  ck_assert_int_eq(sched_getaffinity(0, sizeof *s, s), 0);
}

/* node's CPUs this process may use (what a bound thread's affinity becomes) */
static void node_cpus(unsigned node, cpu_set_t *s) {
  CPU_ZERO(s);
  struct bitmask *m = numa_allocate_cpumask();
  ck_assert_int_eq(numa_node_to_cpus((int)node, m), 0);
  for (unsigned c = 0; c < m->size && c < CPU_SETSIZE; c++)
    if (numa_bitmask_isbitset(m, c) && numa_bitmask_isbitset(numa_all_cpus_ptr, c)) CPU_SET(c, s);
  numa_free_cpumask(m);
}

/* Pin the calling thread to one CPU of node 0 (its last), so a binding shows as a change; false
 * when node 0 has a single CPU here (nothing to tell apart). */
static bool pin_to_one_cpu(void) {
  cpu_set_t n0, one;
  node_cpus(0, &n0);
  if (CPU_COUNT(&n0) < 2) return false;
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &n0)) last = c;
  CPU_ZERO(&one);
  CPU_SET(last, &one);
  ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
  return true;
}

START_TEST(bind_existing_node) {
  hm_runtime *rt = open_sim("4", "2");
  hm_agent *a = hm_agent_get(rt, 1); /* node 0 */
  if (numa_available() < 0) {
    cpu_set_t before, after;
    get_affinity(&before);
    ck_assert_int_eq(hm_agent_bind_thread(a), HM_ERR_UNSUPPORTED);
    get_affinity(&after);
    ck_assert(CPU_EQUAL(&before, &after));
    hm_runtime_close(rt);
    return;
  }
  bool pinned = pin_to_one_cpu();
  ck_assert_msg(hm_agent_bind_thread(a) == HM_OK, "%s", hm_errmsg());
  cpu_set_t now, want;
  get_affinity(&now);
  node_cpus(0, &want);
  ck_assert_msg(CPU_EQUAL(&now, &want), "bound to %d CPUs, node 0 has %d", CPU_COUNT(&now), CPU_COUNT(&want));
  if (!pinned) fprintf(stderr, "bind_existing_node: node 0 has one CPU here; the binding shows no change\n");
  ck_assert_int_eq(hm_agent_bind_thread(NULL), HM_ERR_INVALID_ARG);
  hm_runtime_close(rt);
}
END_TEST

START_TEST(bind_missing_node) {
  /* GPU 3 of 4 on node 3 of 4; this machine must lack node 3 for the test to mean anything */
  hm_runtime *rt = open_sim("4", "4");
  hm_agent *a = hm_agent_get(rt, 3);
  ck_assert_uint_eq(hm_agent_info_of(a)->numa_node, 3);
  if (numa_available() >= 0 && numa_max_node() >= 3) {
    fprintf(stderr, "bind_missing_node: this machine has a node 3; nothing to test\n");
    hm_runtime_close(rt);
    return;
  }
  (void)pin_to_one_cpu();
  cpu_set_t before, after;
  get_affinity(&before);
  hm_status s = hm_agent_bind_thread(a);
  ck_assert_msg(s == (numa_available() < 0 ? HM_ERR_UNSUPPORTED : HM_ERR_NOT_FOUND), "%s: %s", hm_status_name(s),
                hm_errmsg());
  ck_assert_msg(strstr(hm_errmsg(), "node 3") && (numa_available() < 0 || strstr(hm_errmsg(), "does not exist")), "%s",
                hm_errmsg());
  get_affinity(&after);
  ck_assert(CPU_EQUAL(&before, &after));
  hm_runtime_close(rt);
}
END_TEST

/* The TP groups' rank threads (hm_on_ranks) bind themselves to their GPU's node before the rank's
 * body runs: with 2 nodes, ranks 0 and 1 run on node 0's CPUs; ranks 2 and 3 (node 1, missing on
 * this machine) still run, where their parent was. */
struct trank {
  hm_rank_result res;
  hm_agent *agent;
  uint32_t r;
  cpu_set_t seen;
};

static void *trank_main(void *arg) {
  struct trank *t = arg;
  CPU_ZERO(&t->seen);
  hm_status s = sched_getaffinity(0, sizeof t->seen, &t->seen) == 0 ? HM_OK : HM_ERR_RUNTIME;
  return hm_rank_keep(&t->res, t->r, s);
}

START_TEST(rank_threads_placed) {
  hm_runtime *rt = open_sim("4", "2");
  bool pinned = numa_available() >= 0 && pin_to_one_cpu();
  cpu_set_t parent, n0;
  get_affinity(&parent);
  struct trank t[4];
  memset(t, 0, sizeof t);
  for (uint32_t r = 0; r < 4; r++) t[r].r = r, t[r].agent = hm_agent_get(rt, r);
  ck_assert_msg(hm_on_ranks(t, sizeof t[0], offsetof(struct trank, res), offsetof(struct trank, agent), 4,
                            trank_main) == HM_OK,
                "%s", hm_errmsg());
  if (!pinned) {
    /* no NUMA, or a node 0 of one CPU: every rank ran, wherever its parent ran */
    for (uint32_t r = 0; r < 4; r++) ck_assert(CPU_COUNT(&t[r].seen) > 0);
    fprintf(stderr, "rank_threads_placed: no binding to observe here\n");
    hm_runtime_close(rt);
    return;
  }
  node_cpus(0, &n0);
  for (uint32_t r = 0; r < 4; r++) {
    const cpu_set_t *want = r < 2 ? &n0 : &parent;
    ck_assert_msg(CPU_EQUAL(&t[r].seen, want), "rank %u ran on %d CPUs, expected %s (%d)", r, CPU_COUNT(&t[r].seen),
                  r < 2 ? "node 0's" : "its parent's", CPU_COUNT(want));
  }
  ck_assert(!CPU_EQUAL(&n0, &parent));
  hm_runtime_close(rt);
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("numa");
  TCase *tc = tcase_create("numa");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, two_nodes_map);
  tcase_add_test(tc, one_node_default);
  tcase_add_test(tc, two_nodes_pools);
  tcase_add_test(tc, bad_numa_nodes);
  tcase_add_test(tc, bind_existing_node);
  tcase_add_test(tc, bind_missing_node);
  tcase_add_test(tc, rank_threads_placed);
  suite_add_tcase(s, tc);
  return s;
}
