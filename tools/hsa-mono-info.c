/* tools/hsa-mono-info.c: what this build and this machine offer: the embedded kernels'
 * resources and residency per target (--kernels), or any code object file (--code-object). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hm_codeobj.h"
#include "hm_embedded.h"
#include "hm_hsa.h"
#include "hm_occupancy.h"
#include "hm_status.h"

static const char usage_text[] =
    "usage: hsa-mono-info                 the HSA library's agents and their memory pools\n"
    "       hsa-mono-info --kernels [--target gfx950|gfx942] [--code-object FILE]...\n"
    "\n"
    "  (no option)         open the HSA library HSAMONO_RUNTIME selects (rocr, sim, auto, a path)\n"
    "                      and list every GPU agent: ISA, CUs, waves, LDS, queues, pools; the CPU\n"
    "                      agents and each GPU's NUMA node (its nearest CPU agent and distance)\n"
    "  --kernels           list every kernel of the embedded code objects (or of each FILE):\n"
    "                      registers, LDS, scratch, spills, resident CTAs a CU and the binding\n"
    "                      limit, and whether one CTA a CU fits. Exit status 1 when any kernel\n"
    "                      has scratch, spills, a dynamic stack or TG_SPLIT; 2 on a bad file.\n"
    "  --target T          only the code object for processor T\n"
    "  --code-object FILE  check FILE instead of the embedded code objects (repeatable)\n";

static void usage(FILE *f) { fputs(usage_text, f); }

/* Print one code object's kernel table; returns how many kernels break the rules. */
static int report(const char *label, const hm_codeobj *co) {
  hm_cu_limits cu;
  int cu_known = hm_cu_limits_for(co->tid.processor, &cu) == HM_OK;
  printf("%s: %s, code object v%u, %u kernel%s\n", label, co->target, co->abi_version + 2, co->nkernels,
         co->nkernels == 1 ? "" : "s");
  printf("  %-24s %5s %5s %5s %5s %7s %7s %7s %4s %8s %-8s %4s\n", "kernel", "cta", "vgpr", "agpr", "sgpr",
         "lds", "scratch", "spill", "hid", "ctas/CU", "limit", "1/CU");
  int bad = 0;
  for (uint32_t i = 0; i < co->nkernels; i++) {
    const hm_co_kernel *k = &co->kernels[i];
    hm_kernel_resources res;
    hm_residency r;
    char ctas[16] = "?", limit[16] = "?", one[8] = "?";
    uint32_t cta = 0;
    if (hm_kernel_resources_of(k, 0, 0, &res) == HM_OK) {
      cta = res.cta_size;
      if (cu_known && hm_residency_compute(&cu, &res, &r) == HM_OK) {
        snprintf(ctas, sizeof ctas, "%u", r.ctas_per_cu);
        snprintf(limit, sizeof limit, "%s", hm_limit_name(r.binding));
        snprintf(one, sizeof one, "%s", r.ctas_per_cu >= 1 ? "yes" : "NO");
      }
    }
    char spill[16];
    snprintf(spill, sizeof spill, "%u/%u", k->vgpr_spill_count, k->sgpr_spill_count);
    printf("  %-24s %5u %5u %5u %5u %7u %7u %7s %4u %8s %-8s %4s\n", k->name, cta, k->vgpr_count, k->agpr_count,
           k->sgpr_count, k->group_segment_fixed_size, k->private_segment_fixed_size, spill, k->nhidden, ctas,
           limit, one);
    const char *why[5];
    int n = 0;
    if (k->private_segment_fixed_size || k->kd.private_segment_enabled) why[n++] = "uses scratch";
    if (k->vgpr_spill_count || k->sgpr_spill_count) why[n++] = "spills registers";
    if (k->uses_dynamic_stack || k->kd.dynamic_stack) why[n++] = "has a dynamic stack";
    if (k->kd.tg_split) why[n++] = "is built with TG_SPLIT";
    if (strcmp(one, "NO") == 0) why[n++] = "cannot hold one CTA a CU";
    for (int j = 0; j < n; j++) printf("  FAIL: %s %s on %s\n", k->name, why[j], co->tid.processor);
    bad += n > 0;
  }
  return bad;
}

static int list_agents(void) {
  hm_runtime *rt;
  if (hm_runtime_open(NULL, &rt) != HM_OK) {
    fprintf(stderr, "hsa-mono-info: %s\n", hm_errmsg());
    return CLI_EXIT_NOT_RUN;
  }
  printf("HSA library: %s (%s)\n", hm_runtime_backend(rt), hm_runtime_describe(rt));
  printf("CPU agents: %u\n", hm_cpu_agent_count(rt));
  for (unsigned c = 0; c < hm_cpu_agent_count(rt); c++)
    printf("CPU agent %u: %s, NUMA node %u\n", c, hm_cpu_agent_name(rt, c), hm_cpu_agent_node(rt, c));
  static const char *pools[] = {"coarse", "fine", "uncached", "kernarg", "host"};
  for (unsigned i = 0; i < hm_agent_count(rt); i++) {
    const hm_agent_info *in = hm_agent_info_of(hm_agent_get(rt, i));
    printf("GPU agent %u: %s  %s\n", i, in->isa, in->product);
    printf("  %u CUs x %u SIMDs, wave%u, %u waves a CU, %u XCCs, node %u, LDS %u KiB, queues %u..%u packets\n",
           in->cus, in->simds_per_cu, in->wave_size, in->max_waves_per_cu, in->xccs, in->node, in->lds_bytes / 1024,
           in->queue_min, in->queue_max);
    printf("  pools:");
    for (int k = 0; k < HM_POOL_KINDS; k++)
      if (in->pool_present[k]) {
        if (in->pool_size[k]) printf(" %s (%.0f GiB)", pools[k], (double)in->pool_size[k] / (1ull << 30));
        else printf(" %s", pools[k]);
      }
    printf("\n");
  }
  /* where each GPU's kernel arguments and host-visible words live, and where its rank runs */
  printf("GPU -> NUMA node (kernarg and host memory, rank threads):\n");
  for (unsigned i = 0; i < hm_agent_count(rt); i++) {
    const hm_agent_info *in = hm_agent_info_of(hm_agent_get(rt, i));
    printf("  GPU %u -> node %u (CPU agent %u, distance %u)\n", i, in->numa_node, in->cpu_agent, in->numa_distance);
  }
  hm_runtime_close(rt);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 1) return list_agents();
  static const struct option opts[] = {
      {"kernels", no_argument, 0, 'k'},
      {"target", required_argument, 0, 't'},
      {"code-object", required_argument, 0, 'c'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  int kernels = 0;
  const char *target = NULL;
  const char *files[64];
  int nfiles = 0, o;
  cli c = {.prog = "hsa-mono-info", .usage = usage};
  while ((o = cli_next(&c, argc, argv, opts)) != -1) {
    switch (o) {
    case 'k': kernels = 1; break;
    case 't': target = optarg; break;
    case 'c':
      if (nfiles == 64) return cli_refuse(&c, "at most 64 --code-object files");
      files[nfiles++] = optarg;
      break;
    case 'h': usage(stdout); return 0;
    }
  }
  if (cli_end(&c, argc, argv)) return CLI_EXIT_MISUSE;
  if (!kernels) return cli_refuse(&c, "%s needs --kernels", target ? "--target" : "--code-object");
  int bad = 0, shown = 0;
  if (nfiles) {
    for (int i = 0; i < nfiles; i++) {
      hm_codeobj *co;
      if (hm_codeobj_read_file(files[i], &co, NULL, NULL) != HM_OK) {
        fprintf(stderr, "hsa-mono-info: %s\n", hm_errmsg());
        return CLI_EXIT_NOT_RUN;
      }
      if (!target || strcmp(co->tid.processor, target) == 0) {
        bad += report(files[i], co);
        shown++;
      }
      hm_codeobj_free(co);
    }
  } else {
    const struct hm_embedded_blob *b;
    for (unsigned i = 0; (b = hm_embedded_at(i)); i++) {
      if (b->kind != HM_BLOB_CODE_OBJECT || (target && strcmp(b->target, target) != 0)) continue;
      hm_codeobj *co;
      if (hm_codeobj_parse(b->data, hm_embedded_size(b), &co) != HM_OK) {
        fprintf(stderr, "hsa-mono-info: embedded %s code object: %s\n", b->target, hm_errmsg());
        return CLI_EXIT_NOT_RUN;
      }
      char label[64];
      snprintf(label, sizeof label, "embedded %s", b->target);
      bad += report(label, co);
      shown++;
      hm_codeobj_free(co);
    }
  }
  if (!shown) {
    fprintf(stderr, "hsa-mono-info: no code object%s%s\n", target ? " for " : "", target ? target : "");
    return CLI_EXIT_NOT_RUN;
  }
  if (bad) printf("%d kernel%s break the persistent-kernel rules\n", bad, bad == 1 ? "" : "s");
  return bad ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
