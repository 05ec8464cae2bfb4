/* hsa/hm_trace.h: the software agent's trace of what each CTA of a launch did (issue 15 item 2): per
 * stage the bytes it loaded and stored, its matrix instructions, and which stage's stores its waits read. */
#ifndef HM_TRACE_H
#define HM_TRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Matrix instruction kinds, in device/dev_host.h's enum dev_mfma_op order (the sim checks it). */
#define HM_TRACE_MFMA_KINDS 9
/* Stage slots a CTA: the timeline's (device/dev_timeline.h, DEV_TL_SLOTS) and one for what a CTA does
 * after its last stamp. Slot 0 is the CTA's prologue (up to the timeline's start stamp), slot s the
 * stage the timeline's stamp s ends. */
#define HM_TRACE_SLOTS 17u
/* Levels of a stage's weight lines: level k holds the lines whose earliest reader had passed k runs of
 * waits in the stage (a work-item's waits on other CTAs' stages in its program order, those with no
 * weight load between them one run; the last level holds k >= HM_TRACE_LEVELS - 1). They say where in
 * its stream a stage waits, so the model gates only the loads after a wait on it. */
#define HM_TRACE_LEVELS 16u

/* One dispatch the trace saw: its agent (GPU index), its order among that agent's dispatches since the
 * trace began (launch), its kernel and grid. */
typedef struct hm_trace_launch {
  uint32_t agent, launch, ctas;
  char kernel[64];
} hm_trace_launch;

/* One CTA's stage. Loads are split by the dialect's cache policy: a load with the non-temporal policy
 * (DEV_CP_NT, which the kernels use for weight streams and nothing else) counts as weights, as the
 * distinct 128-byte lines the stage read (what HBM serves, however its work-items split a line); plain loads,
 * and the words of device- or system-scope and atomic loads that another CTA's traced store wrote (each
 * once a stage: polls repeat), as hand-off data. */
typedef struct hm_trace_stage {
  uint32_t agent, launch, cta, slot;
  uint64_t weight_bytes;
  uint64_t weight_level_bytes[HM_TRACE_LEVELS]; /* weight_bytes by level (their sum): [0] before any wait */
  uint64_t handoff_bytes;
  uint64_t dev_store_bytes;  /* stores not at system scope (plain, device-scope, atomics at agent scope) */
  uint64_t sys_store_bytes;  /* system-scope stores, this agent's memory or a peer's */
  uint64_t peer_store_bytes; /* of sys_store_bytes, those to another agent's memory (over xGMI) */
  uint64_t mfma[HM_TRACE_MFMA_KINDS]; /* wave instructions by kind */
} hm_trace_stage;

/* A wait: a CTA's stage read words another CTA's stage had stored (a device- or system-scope store
 * or atomic store, read with a device- or system-scope or atomic load that returned the stored
 * value), once a pair of stages and level, `words` distinct 4-byte words. Its level: the level the
 * work-items of the CTA made it at (capped at HM_TRACE_LEVELS - 1), so the weight lines of a level
 * above it may have been loaded after it, those at or below it were not. w_rest: the writer stage's
 * weight bytes it had still to load after the latest of those stores, counted from the end of the
 * writer's barrier interval the store was made in (its lines by then: what every work-item of it
 * had loaded, whatever their order), so a store made early in a long stage (a gate/up unit's flag
 * before the CTA's next unit) gates its readers there, not at the stage's end; 0 for a store in
 * the stage's last interval. */
typedef struct hm_trace_wait {
  uint32_t agent, launch, cta, slot;
  uint32_t w_agent, w_launch, w_cta, w_slot;
  uint32_t words;
  uint32_t level;
  uint64_t w_rest;
} hm_trace_wait;

/* A whole trace, each array sorted (agent, launch, cta, slot[, writer]): the same launch gives the
 * same bytes whatever the order its CTAs ran in. */
typedef struct hm_trace {
  hm_trace_launch *launches;
  uint32_t nlaunches;
  hm_trace_stage *stages;
  uint32_t nstages;
  hm_trace_wait *waits;
  uint32_t nwaits;
} hm_trace;

#ifdef __cplusplus
}
#endif

#endif /* HM_TRACE_H */
