/* collectives/boot_unix.c: the bootstrap of ranks that are processes of one node: a rendezvous on
 * a Unix-domain socket (rank 0 serves, owner-only), then all-gathers through it with deadlines. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "coll_internal.h"

/* Every message: this header, then `bytes` of payload. */
#define FRAME_MAGIC 0x54424d48u /* "HMBT" */
enum { F_HELLO = 1, F_DATA = 2, F_RESULT = 3, F_ERROR = 4 };
struct frame {
  uint32_t magic, kind, rank, tp;
  uint64_t round, bytes;
};
#define MAX_PAYLOAD (64u << 20)
/* A client waits this much longer than its own bound for rank 0's answer: rank 0 is the one that
 * knows which rank is missing, and says so when its own bound (which may have started later) ends. */
#define ANSWER_GRACE_NS 5000000000ull

struct unix_ctx {
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  bool started, linked; /* connected; the socket file is still ours to remove */
  unsigned rank, tp;
  int listen_fd;
  int fd[HM_MAX_TP];    /* rank 0: each client's connection; others: fd[0] to rank 0 */
  uint64_t round;
  char broken[400];     /* once set, every call fails with it */
};

/* ---------------------------------------------------------------- bounded socket i/o */

/* Wait until fd is readable (or writable), at most until deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short ev, uint64_t deadline) {
  for (;;) {
    uint64_t left = hm_coll_left(deadline);
    if (!left) return 0;
    struct pollfd p = {.fd = fd, .events = ev};
    int ms = left / 1000000ull > 1000 ? 1000 : (int)(left / 1000000ull) + 1;
    int r = poll(&p, 1, ms);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

/* 1 done, 0 the peer closed, -1 timed out, -2 error */
static int read_full(int fd, void *buf, size_t n, uint64_t deadline) {
  uint8_t *p = buf;
  while (n) {
    int w = wait_fd(fd, POLLIN, deadline);
    if (w == 0) return -1;
    if (w < 0) return -2;
    ssize_t r = read(fd, p, n);
    if (r == 0) return 0;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno == ECONNRESET ? 0 : -2;
    }
    p += r, n -= (size_t)r;
  }
  return 1;
}

/* 1 done, 0 the peer closed, -1 timed out */
static int write_full(int fd, const void *buf, size_t n, uint64_t deadline) {
  const uint8_t *p = buf;
  while (n) {
    int w = wait_fd(fd, POLLOUT, deadline);
    if (w == 0) return -1;
    if (w < 0) return 0;
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL); /* a dead peer must not kill us with SIGPIPE */
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return 0;
    }
    p += r, n -= (size_t)r;
  }
  return 1;
}

static int send_frame(int fd, uint32_t kind, const struct unix_ctx *c, const void *payload, uint64_t bytes,
                      uint64_t deadline) {
  struct frame f = {FRAME_MAGIC, kind, c->rank, c->tp, c->round, bytes};
  int r = write_full(fd, &f, sizeof f, deadline);
  if (r == 1 && bytes) r = write_full(fd, payload, bytes, deadline);
  return r;
}

/* Read one frame's header and check it; the payload is the caller's. 1, 0 closed, -1 timeout, -2 bad. */
static int recv_header(int fd, struct frame *f, uint64_t deadline) {
  int r = read_full(fd, f, sizeof *f, deadline);
  if (r != 1) return r;
  return f->magic == FRAME_MAGIC && f->bytes <= MAX_PAYLOAD ? 1 : -2;
}

/* The socket's other end runs as this user (the rendezvous is owner-only). */
static bool same_user(int fd) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.uid == geteuid();
}

/* ---------------------------------------------------------------- failing */

static void close_all(struct unix_ctx *c) {
  for (unsigned i = 0; i < HM_MAX_TP; i++)
    if (c->fd[i] >= 0) close(c->fd[i]), c->fd[i] = -1;
  if (c->listen_fd >= 0) close(c->listen_fd), c->listen_fd = -1;
  if (c->linked) unlink(c->path), c->linked = false;
}

/* Record why the group failed; rank 0 tells every client still connected, so they fail with the
 * same reason rather than a bare "connection closed". */
static hm_status give_up(struct unix_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static hm_status give_up(struct unix_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->broken, sizeof c->broken, fmt, ap);
  va_end(ap);
  if (c->rank == 0) {
    uint64_t soon = hm_coll_now_ns() + 200000000ull;
    for (unsigned r = 1; r < c->tp; r++)
      if (c->fd[r] >= 0) send_frame(c->fd[r], F_ERROR, c, c->broken, strlen(c->broken), soon);
  }
  close_all(c);
  return hm_fail(HM_ERR_PEER, "%s", c->broken);
}

/* ---------------------------------------------------------------- rendezvous */

/* Rank 0: the listening socket at path, owner-only. A socket file nobody listens on (a crashed
 * rendezvous) is replaced; a live one, or anything that is not our socket, is an error. */
static hm_status serve(struct unix_ctx *c, uint64_t deadline) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return hm_fail(HM_ERR_IO, "rendezvous %s: socket: %s", c->path, strerror(errno));
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int err = errno;
    struct stat st;
    if (err == EADDRINUSE && lstat(c->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == geteuid()) {
      int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
      if (probe >= 0) close(probe);
      if (live) {
        close(fd);
        return hm_fail(HM_ERR_IO, "rendezvous %s: another group is being set up there", c->path);
      }
      unlink(c->path);
      if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0) err = 0;
      else err = errno;
    }
    if (err) {
      close(fd);
      return hm_fail(HM_ERR_IO, "rendezvous %s: bind: %s", c->path, strerror(err));
    }
  }
  c->linked = true;
  /* owner-only before anyone can connect (connect fails until listen) */
  if (chmod(c->path, 0600) != 0 || listen(fd, HM_MAX_TP) != 0) {
    int err = errno;
    close(fd);
    unlink(c->path), c->linked = false;
    return hm_fail(HM_ERR_IO, "rendezvous %s: %s", c->path, strerror(err));
  }
  c->listen_fd = fd;
  unsigned joined = 1;
  while (joined < c->tp) {
    int w = wait_fd(fd, POLLIN, deadline);
    if (w <= 0) {
      char miss[64] = "";
      size_t n = 0;
      for (unsigned r = 1; r < c->tp; r++)
        if (c->fd[r] < 0) n += (size_t)snprintf(miss + n, sizeof miss - n, "%s%u", n ? ", " : "", r);
      return give_up(c, "rank%s %s never arrived at the rendezvous %s (rank 0 waited)", strchr(miss, ',') ? "s" : "",
                     miss, c->path);
    }
    int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) continue;
    struct frame f;
    if (!same_user(cfd) || recv_header(cfd, &f, deadline) != 1 || f.kind != F_HELLO || f.bytes != 0) {
      close(cfd); /* not one of ours (or it died before saying who it is): keep waiting */
      continue;
    }
    if (f.tp != c->tp || f.rank == 0 || f.rank >= c->tp || c->fd[f.rank] >= 0) {
      char why[160];
      snprintf(why, sizeof why, "rendezvous %s: a process says it is rank %u of %u; the group is rank 0 of %u%s",
               c->path, f.rank, f.tp, c->tp, f.rank < c->tp && f.rank && c->fd[f.rank] >= 0 ? " and has it" : "");
      send_frame(cfd, F_ERROR, c, why, strlen(why), hm_coll_now_ns() + 200000000ull);
      close(cfd);
      return give_up(c, "%s", why);
    }
    c->fd[f.rank] = cfd;
    joined++;
  }
  /* everyone is connected: the file has done its job */
  close(fd), c->listen_fd = -1;
  unlink(c->path), c->linked = false;
  return HM_OK;
}

static hm_status join(struct unix_ctx *c, uint64_t deadline) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return hm_fail(HM_ERR_IO, "rendezvous %s: socket: %s", c->path, strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
      if (!same_user(fd)) {
        close(fd);
        return give_up(c, "rendezvous %s is served by another user", c->path);
      }
      c->fd[0] = fd;
      break;
    }
    int err = errno;
    close(fd);
    if (err != ENOENT && err != ECONNREFUSED && err != EAGAIN)
      return give_up(c, "rendezvous %s: connect: %s", c->path, strerror(err));
    if (!hm_coll_left(deadline)) return give_up(c, "rank 0 never arrived at the rendezvous %s", c->path);
    struct timespec ts = {0, 10000000}; /* 10 ms between tries */
    nanosleep(&ts, NULL);
  }
  if (send_frame(c->fd[0], F_HELLO, c, NULL, 0, deadline) != 1)
    return give_up(c, "rank 0 (the rendezvous at %s) left during set-up", c->path);
  return HM_OK;
}

/* ---------------------------------------------------------------- the all-gather */

/* A client's reading of a frame from rank 0 that is not the expected result. */
static hm_status client_failure(struct unix_ctx *c, int r, const struct frame *f) {
  if (r == 1 && f->kind == F_ERROR) {
    char why[400];
    size_t n = f->bytes < sizeof why - 1 ? f->bytes : sizeof why - 1;
    if (read_full(c->fd[0], why, n, hm_coll_now_ns() + 200000000ull) != 1) n = 0;
    why[n] = 0;
    return give_up(c, "%s", n ? why : "rank 0 failed the set-up");
  }
  if (r == 0) return give_up(c, "rank 0 (the rendezvous at %s) left during set-up step %llu", c->path,
                             (unsigned long long)c->round);
  if (r == -1) return give_up(c, "rank 0 did not answer set-up step %llu in time", (unsigned long long)c->round);
  return give_up(c, "rendezvous %s: a malformed message from rank 0", c->path);
}

static hm_status unix_allgather(void *ctx, unsigned rank, unsigned tp, const void *mine, size_t bytes, void *all,
                                uint64_t timeout_ns) {
  struct unix_ctx *c = ctx;
  if (!c || !mine || !all || bytes == 0 || bytes > MAX_PAYLOAD / HM_MAX_TP)
    return hm_fail(HM_ERR_INVALID_ARG, "unix bootstrap: NULL argument or %zu bytes", bytes);
  if (c->broken[0]) return hm_fail(HM_ERR_PEER, "%s", c->broken);
  if (tp < 1 || tp > HM_MAX_TP || rank >= tp || (c->started && (rank != c->rank || tp != c->tp)))
    return hm_fail(HM_ERR_INVALID_ARG, "unix bootstrap: rank %u of %u does not fit this rendezvous", rank, tp);
  uint64_t deadline = hm_coll_now_ns() + timeout_ns;
  if (!c->started) {
    c->rank = rank, c->tp = tp, c->started = true;
    hm_status s = tp == 1 ? HM_OK : rank == 0 ? serve(c, deadline) : join(c, deadline);
    if (s) {
      if (!c->broken[0]) snprintf(c->broken, sizeof c->broken, "%s", hm_errmsg());
      return s;
    }
  }
  c->round++;
  uint8_t *out = all;
  if (tp == 1) {
    memcpy(out, mine, bytes);
    return HM_OK;
  }
  struct frame f;
  if (rank != 0) {
    if (send_frame(c->fd[0], F_DATA, c, mine, bytes, deadline) != 1) {
      /* rank 0 may have failed the group and closed before this rank sent: its reason is waiting
       * in this end's receive queue, and it names the root cause (a bare "rank 0 left" would not) */
      int r = recv_header(c->fd[0], &f, hm_coll_now_ns() + 200000000ull);
      return client_failure(c, r == 1 && f.kind == F_ERROR ? 1 : 0, &f);
    }
    int r = recv_header(c->fd[0], &f, deadline + ANSWER_GRACE_NS);
    if (r != 1 || f.kind != F_RESULT) return client_failure(c, r, &f);
    if (f.round != c->round || f.bytes != (uint64_t)tp * bytes)
      return give_up(c, "set-up step %llu: rank 0 sent %llu bytes, expected %zu (ranks disagree on the set-up)",
                     (unsigned long long)c->round, (unsigned long long)f.bytes, tp * bytes);
    if (read_full(c->fd[0], out, tp * bytes, deadline + ANSWER_GRACE_NS) != 1) return client_failure(c, 0, &f);
    return HM_OK;
  }
  /* rank 0: collect every contribution, whichever order they come in */
  memcpy(out, mine, bytes);
  bool got[HM_MAX_TP] = {true};
  for (unsigned left = tp - 1; left > 0;) {
    struct pollfd p[HM_MAX_TP];
    unsigned who[HM_MAX_TP], n = 0;
    for (unsigned r = 1; r < tp; r++)
      if (!got[r]) p[n] = (struct pollfd){.fd = c->fd[r], .events = POLLIN}, who[n++] = r;
    uint64_t ms = hm_coll_left(deadline) / 1000000ull;
    int pr = ms ? poll(p, n, ms > 1000 ? 1000 : (int)ms + 1) : 0;
    if (pr < 0 && errno == EINTR) continue;
    if (!hm_coll_left(deadline) && pr <= 0) {
      char miss[64] = "";
      size_t k = 0;
      for (unsigned i = 0; i < n; i++) k += (size_t)snprintf(miss + k, sizeof miss - k, "%s%u", k ? ", " : "", who[i]);
      return give_up(c, "rank%s %s did not reach set-up step %llu (rank 0 waited)", n > 1 ? "s" : "", miss,
                     (unsigned long long)c->round);
    }
    for (unsigned i = 0; i < n; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      unsigned r = who[i];
      int rr = recv_header(c->fd[r], &f, deadline);
      if (rr == 1 && f.kind == F_DATA && f.round == c->round && f.rank == r && f.bytes == bytes)
        rr = read_full(c->fd[r], out + (size_t)r * bytes, bytes, deadline);
      else if (rr == 1)
        return give_up(c, "set-up step %llu: rank %u sent %llu bytes, rank 0 %zu (ranks disagree on the set-up)",
                       (unsigned long long)c->round, r, (unsigned long long)f.bytes, bytes);
      if (rr == 0) return give_up(c, "rank %u left during set-up step %llu", r, (unsigned long long)c->round);
      if (rr != 1) return give_up(c, "rank %u did not finish set-up step %llu in time", r, (unsigned long long)c->round);
      got[r] = true;
      left--;
    }
  }
  for (unsigned r = 1; r < tp; r++)
    if (send_frame(c->fd[r], F_RESULT, c, out, (uint64_t)tp * bytes, deadline) != 1)
      return give_up(c, "rank %u left during set-up step %llu", r, (unsigned long long)c->round);
  return HM_OK;
}

static void unix_release(void *ctx) {
  struct unix_ctx *c = ctx;
  if (!c) return;
  close_all(c);
  free(c);
}

hm_status hm_bootstrap_unix(const char *path, hm_bootstrap *out) {
  if (!out) return hm_fail(HM_ERR_INVALID_ARG, "hm_bootstrap_unix: out is NULL");
  *out = (hm_bootstrap){0};
  if (!path || !path[0]) return hm_fail(HM_ERR_INVALID_ARG, "hm_bootstrap_unix: no path");
  struct unix_ctx *c = calloc(1, sizeof *c);
  if (!c) return hm_fail(HM_ERR_NO_MEMORY, "hm_bootstrap_unix: out of memory");
  if (strlen(path) >= sizeof c->path) {
    free(c);
    return hm_fail(HM_ERR_INVALID_ARG, "hm_bootstrap_unix: path is %zu bytes, a Unix socket's is at most %zu",
                   strlen(path), sizeof c->path - 1);
  }
  memcpy(c->path, path, strlen(path) + 1);
  c->listen_fd = -1;
  for (unsigned i = 0; i < HM_MAX_TP; i++) c->fd[i] = -1;
  *out = (hm_bootstrap){.allgather = unix_allgather, .release = unix_release, .ctx = c};
  return HM_OK;
}
