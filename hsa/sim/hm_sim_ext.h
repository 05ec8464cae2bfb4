/* hsa/sim/hm_sim_ext.h: the few entry points the software agent adds to the HSA API, which the
 * runtime finds with dlsym (ROCr has none of them, so their presence also means "software agent"). */
#ifndef HM_SIM_EXT_H
#define HM_SIM_EXT_H

#include <stddef.h>
#include <stdint.h>
#include <hsa/hsa.h>

#include "hm_trace.h"

/* Hands the host kernel object (device code built as host C, see device/dev.h) to an executable
 * before hsa_executable_load_agent_code_object: the agent runs these functions and takes the
 * resources (registers, LDS, waves) from the gfx code object. */
#define HM_SIM_SET_HOST_OBJECT "hm_sim_executable_set_host_object"
typedef hsa_status_t (*hm_sim_set_host_object_fn)(hsa_executable_t exe, const void *image, size_t size);

/* The text of a queue's last error (the watchdog's report, a trap's location, why a packet was
 * malformed); returns its length, 0 when the queue has none. The error callback gets the status
 * (HSA_STATUS_ERROR_EXCEPTION for a failed dispatch, _INVALID_PACKET_FORMAT for a malformed
 * packet); a failed dispatch's text names it and says why: "kernel NAME (packet ID of queue QID;
 * grid ...): REASON; resident limit ...; N CTAs never started[: ids]; N still running", REASON
 * being "no progress for S s (watchdog, HSAMONO_SIM_WATCHDOG_S)", "work-item W of CTA C: trap at
 * FILE:LINE", or another of the agent's checks. */
#define HM_SIM_QUEUE_ERROR "hm_sim_queue_error"
typedef size_t (*hm_sim_queue_error_fn)(const hsa_queue_t *queue, char *buf, size_t cap);

/* How many CTAs of the queue's packets the agent cannot start now (no room on the CUs, held back,
 * or a packet waiting on its barrier bit or dependencies); 0 when it is only behind (a loaded host):
 * on the software agent a placed CTA is resident, whenever its thread gets a core. */
#define HM_SIM_QUEUE_UNPLACED "hm_sim_queue_unplaced"
typedef uint32_t (*hm_sim_queue_unplaced_fn)(const hsa_queue_t *queue);

/* A one-line description of the agent's configuration (arch, agents, CUs, modes). */
#define HM_SIM_DESCRIBE "hm_sim_describe"
typedef const char *(*hm_sim_describe_fn)(void);

/* The CTA start order of the seq-th dispatch since hsa_init under chaos seed `seed` (n CTAs):
 * what HSAMONO_SIM_CHAOS=<seed> will do, for tests that need to know it. */
#define HM_SIM_CHAOS_START_ORDER "hm_sim_chaos_start_order"
typedef void (*hm_sim_chaos_start_order_fn)(uint64_t seed, uint64_t seq, uint32_t n, uint32_t *order);

/* The trace (hm_trace.h): begin clears it and records every dispatch started from then on; end stops
 * recording, waits for nothing (call it once the traced dispatches have completed) and hands over the
 * records in malloc'ed arrays (free each); 0, or -1 out of memory. Off until begun, and then each
 * dispatch decides once, at its start, whether it is traced. */
#define HM_SIM_TRACE_BEGIN "hm_sim_trace_begin"
typedef void (*hm_sim_trace_begin_fn)(void);
#define HM_SIM_TRACE_END "hm_sim_trace_end"
typedef int (*hm_sim_trace_end_fn)(hm_trace *out);

#endif /* HM_SIM_EXT_H */
