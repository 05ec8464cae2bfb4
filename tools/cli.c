/* tools/cli.c: the tools' option parsing (cli.h): strict numbers, one-line reasons, usage on stderr.
 * strtol alone accepts "2x", " 2" and an overflow as numbers; every tool parses through here instead. */
#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static void vrefuse(cli *c, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void vrefuse(cli *c, const char *fmt, va_list ap) {
  fprintf(stderr, "%s: ", c->prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  c->refused = 1;
}

static void refuse(cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(cli *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vrefuse(c, fmt, ap);
  va_end(ap);
}

int cli_next(cli *c, int argc, char **argv, const struct option *opts) {
  if (c->refused) return -1;
  int li = -1;
  opterr = 0;
  /* the leading ':' makes a missing value ':' rather than '?' */
  int o = getopt_long(argc, argv, ":", opts, &li);
  const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
  if (o == ':') {
    refuse(c, "%s needs a value", arg);
    return -1;
  }
  if (o == '?') {
    /* a long option's name (or "--help=x") is the word itself; a short one is optopt */
    if (!strncmp(arg, "--", 2) || !optopt) refuse(c, "unknown option '%s'", arg);
    else refuse(c, "unknown option '-%c'", optopt);
    return -1;
  }
  if (o != -1 && li >= 0) snprintf(c->opt, sizeof c->opt, "--%s", opts[li].name);
  return o;
}

/* s as a whole decimal number: an optional '-' then digits, nothing else, no overflow */
static int whole_long(const char *s, long *out) {
  if (!s || !(*s == '-' || (*s >= '0' && *s <= '9'))) return 0;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end) return 0;
  *out = v;
  return 1;
}

int cli_long(cli *c, long lo, long hi, long *out) {
  long v;
  if (!whole_long(optarg, &v)) {
    refuse(c, "%s '%s' is not a number", c->opt, optarg);
    return 0;
  }
  if (v < lo || v > hi) {
    refuse(c, "%s %ld: must be %ld..%ld", c->opt, v, lo, hi);
    return 0;
  }
  *out = v;
  return 1;
}

int cli_long_of(cli *c, const long *set, unsigned n, long *out) {
  long v;
  if (!whole_long(optarg, &v)) {
    refuse(c, "%s '%s' is not a number", c->opt, optarg);
    return 0;
  }
  for (unsigned i = 0; i < n; i++)
    if (set[i] == v) {
      *out = v;
      return 1;
    }
  char list[128] = "";
  for (unsigned i = 0, k = 0; i < n && k < sizeof list; i++)
    k += (unsigned)snprintf(list + k, sizeof list - k, "%s%ld", i == 0 ? "" : i + 1 == n ? " or " : ", ", set[i]);
  refuse(c, "%s %ld: must be %s", c->opt, v, list);
  return 0;
}

int cli_u64(cli *c, unsigned long long *out) {
  const char *s = optarg;
  char *end;
  errno = 0;
  unsigned long long v = s && *s >= '0' && *s <= '9' ? strtoull(s, &end, 0) : 0;
  if (!s || !(*s >= '0' && *s <= '9') || errno || *end) {
    refuse(c, "%s '%s' is not an unsigned 64-bit number", c->opt, s ? s : "");
    return 0;
  }
  *out = v;
  return 1;
}

int cli_list(cli *c, long lo, long hi, long *out, unsigned max, unsigned *n) {
  char item[32];
  unsigned k = 0;
  for (const char *p = optarg;; k++) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    long v;
    if (len >= sizeof item) len = sizeof item - 1; /* too long for a number: refused below */
    memcpy(item, p, len), item[len] = 0;
    if (!whole_long(item, &v) || (comma && len == 0)) {
      refuse(c, "%s '%s' is not a comma-separated list of numbers", c->opt, optarg);
      return 0;
    }
    if (v < lo || v > hi) {
      refuse(c, "%s %ld: must be %ld..%ld", c->opt, v, lo, hi);
      return 0;
    }
    if (k == max) {
      refuse(c, "%s '%s': at most %u values", c->opt, optarg, max);
      return 0;
    }
    out[k] = v;
    if (!comma) break;
    p = comma + 1;
  }
  *n = k + 1;
  return 1;
}

int cli_range(cli *c, long lo, long hi, long *a, long *b) {
  const char *dash = optarg[0] ? strchr(optarg + 1, '-') : NULL;
  char first[32];
  long x, y;
  size_t k = dash ? (size_t)(dash - optarg) : 0;
  if (dash && k < sizeof first) memcpy(first, optarg, k), first[k] = 0;
  if (!dash || k >= sizeof first || !whole_long(first, &x) || !whole_long(dash + 1, &y)) {
    refuse(c, "%s '%s' is not a range A-B", c->opt, optarg);
    return 0;
  }
  if (x < lo || y > hi || x > y) {
    refuse(c, "%s %s: must be A-B with %ld <= A <= B <= %ld", c->opt, optarg, lo, hi);
    return 0;
  }
  *a = x, *b = y;
  return 1;
}

int cli_word(cli *c, const char *const *words, const char **out) {
  char list[128] = "";
  unsigned n = 0, k = 0;
  for (; words[n]; n++)
    if (!strcmp(optarg, words[n])) {
      *out = words[n];
      return 1;
    }
  for (unsigned i = 0; i < n && k < sizeof list; i++)
    k += (unsigned)snprintf(list + k, sizeof list - k, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ", words[i]);
  refuse(c, "%s '%s': must be %s", c->opt, optarg, list);
  return 0;
}

int cli_out_path(cli *c, const char *const *endings, const char **out) {
  const size_t len = strlen(optarg);
  const char *slash = strrchr(optarg, '/');
  const char *base = slash ? slash + 1 : optarg;
  bool ends = false;
  char list[128] = "";
  unsigned n = 0, k = 0;
  for (; endings[n]; n++) {
    size_t e = strlen(endings[n]);
    if (len > e && strlen(base) > e && !strcmp(optarg + len - e, endings[n])) ends = true;
  }
  for (unsigned i = 0; i < n && k < sizeof list; i++)
    k += (unsigned)snprintf(list + k, sizeof list - k, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ", endings[i]);
  if (!ends) {
    refuse(c, "%s '%s': must be a file name ending in %s", c->opt, optarg, list);
    return 0;
  }
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == optarg) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - optarg), optarg);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    refuse(c, "%s '%s': no directory '%s'", c->opt, optarg, dir);
    return 0;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    refuse(c, "%s '%s': directory '%s' is not writable", c->opt, optarg, dir);
    return 0;
  }
  *out = optarg;
  return 1;
}

int cli_end(cli *c, int argc, char **argv) {
  if (!c->refused && optind < argc) refuse(c, "unexpected argument '%s'", argv[optind]);
  if (c->refused && c->usage) c->usage(stderr);
  return c->refused;
}

int cli_refuse(cli *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vrefuse(c, fmt, ap);
  va_end(ap);
  if (c->usage) c->usage(stderr);
  return CLI_EXIT_MISUSE;
}
