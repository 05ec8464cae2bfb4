/* hsa/hm_status.h: the one status type of the library and its messages: every public entry
 * point returns an hm_status and, on failure, leaves a one-line reason for hm_errmsg(). */
#ifndef HM_STATUS_H
#define HM_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hm_status {
  HM_OK = 0,
  HM_ERR_INVALID_ARG,  /* a null, zero, unaligned or out-of-range argument */
  HM_ERR_NOT_FOUND,    /* no such kernel, agent, pool, symbol or file */
  HM_ERR_FORMAT,       /* a malformed code object, table or file */
  HM_ERR_UNSUPPORTED,  /* well-formed but not supported here (target, feature) */
  HM_ERR_NO_MEMORY,    /* an allocation failed */
  HM_ERR_RUNTIME,      /* the HSA library is missing or one of its calls failed */
  HM_ERR_TIMEOUT,      /* a wait passed its bound */
  HM_ERR_QUEUE_FAULT,  /* the agent reported an error on a queue (a failed dispatch) */
  HM_ERR_REFUSED,      /* a launch or layer the rules refuse (residency, eligibility) */
  HM_ERR_PEER,         /* a peer rank failed, left or never arrived */
  HM_ERR_IO,           /* a system call on a file or socket failed */
  HM_ERR_BUSY          /* an object still in use by another (destroy its users first): nothing done */
} hm_status;

/* "HM_ERR_FORMAT" etc. */
const char *hm_status_name(hm_status s);

/* The calling thread's message for its last failed call ("" if none): one line, no
 * trailing newline, valid until the thread's next failing call. */
const char *hm_errmsg(void);

/* Record a failure for the calling thread and return `s` (for the library's own use and for
 * callers who build on it). The message is truncated at 1023 bytes. */
hm_status hm_fail(hm_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix the thread's current message with more context: "context: old message". */
hm_status hm_fail_prefix(hm_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logging through one function, levels from HSAMONO_LOG (error, warn, info, debug); silent
 * unless set. Lines go to stderr with an "hsa-mono:" prefix. */
typedef enum hm_log_level { HM_LOG_ERROR = 1, HM_LOG_WARN, HM_LOG_INFO, HM_LOG_DEBUG } hm_log_level;
void hm_log(hm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hm_log_enabled(hm_log_level level);

#ifdef __cplusplus
}
#endif
#endif /* HM_STATUS_H */
