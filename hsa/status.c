/* hsa/status.c: status names, the per-thread error message and the logger behind
 * hm_status.h. */
#include "hm_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* room for a layered message: a launch's reason around the agent's own (a watchdog's or trap's
 * report names the kernel, its packet, the grid and the CTAs) */
static _Thread_local char errmsg[1024];

const char *hm_status_name(hm_status s) {
  switch (s) {
  case HM_OK: return "HM_OK";
  case HM_ERR_INVALID_ARG: return "HM_ERR_INVALID_ARG";
  case HM_ERR_NOT_FOUND: return "HM_ERR_NOT_FOUND";
  case HM_ERR_FORMAT: return "HM_ERR_FORMAT";
  case HM_ERR_UNSUPPORTED: return "HM_ERR_UNSUPPORTED";
  case HM_ERR_NO_MEMORY: return "HM_ERR_NO_MEMORY";
  case HM_ERR_RUNTIME: return "HM_ERR_RUNTIME";
  case HM_ERR_TIMEOUT: return "HM_ERR_TIMEOUT";
  case HM_ERR_QUEUE_FAULT: return "HM_ERR_QUEUE_FAULT";
  case HM_ERR_REFUSED: return "HM_ERR_REFUSED";
  case HM_ERR_PEER: return "HM_ERR_PEER";
  case HM_ERR_IO: return "HM_ERR_IO";
  case HM_ERR_BUSY: return "HM_ERR_BUSY";
  }
  return "HM_ERR_(unknown)";
}

const char *hm_errmsg(void) { return errmsg; }

/* Messages are one line: a newline a caller passes in (say, from a peer's text) becomes a
 * space. */
static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r') *s = ' ';
}

hm_status hm_fail(hm_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errmsg, sizeof errmsg, fmt, ap);
  va_end(ap);
  one_line(errmsg);
  hm_log(HM_LOG_DEBUG, "%s: %s", hm_status_name(s), errmsg);
  return s;
}

hm_status hm_fail_prefix(hm_status s, const char *fmt, ...) {
  char line[2 * sizeof errmsg + 2];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof errmsg, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof errmsg) n = sizeof errmsg - 1;
  line[n++] = ':';
  line[n++] = ' ';
  memcpy(line + n, errmsg, sizeof errmsg); /* errmsg is NUL-terminated within its size */
  memcpy(errmsg, line, sizeof errmsg - 1);
  errmsg[sizeof errmsg - 1] = 0;
  one_line(errmsg);
  return s;
}

/* HSAMONO_LOG is read once; 0 = silent. */
static int log_level = -1;

static int current_level(void) {
  int lvl = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
  if (lvl >= 0) return lvl;
  const char *e = getenv("HSAMONO_LOG");
  lvl = 0;
  if (e) {
    if (!strcasecmp(e, "error")) lvl = HM_LOG_ERROR;
    else if (!strcasecmp(e, "warn")) lvl = HM_LOG_WARN;
    else if (!strcasecmp(e, "info")) lvl = HM_LOG_INFO;
    else if (!strcasecmp(e, "debug")) lvl = HM_LOG_DEBUG;
    else if (*e >= '0' && *e <= '4') lvl = *e - '0';
  }
  __atomic_store_n(&log_level, lvl, __ATOMIC_RELAXED);
  return lvl;
}

int hm_log_enabled(hm_log_level level) { return (int)level <= current_level(); }

void hm_log(hm_log_level level, const char *fmt, ...) {
  if (!hm_log_enabled(level)) return;
  static const char *names[] = {"", "error", "warn", "info", "debug"};
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "hsa-mono: %s: %s\n", names[level], line);
}
