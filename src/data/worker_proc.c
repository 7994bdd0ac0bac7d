/* DataLoader worker processes (see worker_proc.h).
 *
 * Payload layout (one memfd):
 *   header {magic, text length, tensor count} | tensor table (dtype, ndim,
 *   shape, offset, bytes per tensor) | text | tensor data, each 64-byte
 *   aligned.
 * The parent checks every field against the file's size before it makes a
 * tensor: a worker is the same program, but a message is still input. */
#include "data/worker_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "ops/ops.h"

#define PACK_MAGIC 0x3157415055504444ull /* "DDPUPAW1" */

typedef struct {
  uint64_t magic;
  uint64_t text_len;
  uint32_t nt, pad;
} pack_header;

typedef struct {
  int32_t dtype, ndim;
  int64_t shape[DP_MAXDIM];
  uint64_t offset, nbytes;
} pack_tensor;

typedef struct {
  uint32_t kind, has_fd;
  int64_t seq, item;
} wire_header;

/* Parent-side ends of every live worker socket: a new child closes them
 * all, so that each worker sees EOF when its parent closes or dies. */
static int *parent_ends;
static int n_parent_ends, cap_parent_ends;

static void remember_parent_end(int fd) {
  if (n_parent_ends == cap_parent_ends) {
    cap_parent_ends = cap_parent_ends ? cap_parent_ends * 2 : 16;
    parent_ends = dp_xrealloc(parent_ends, sizeof *parent_ends * (size_t)cap_parent_ends);
  }
  parent_ends[n_parent_ends++] = fd;
}

void dp_worker_close(int sock) {
  for (int i = 0; i < n_parent_ends; i++)
    if (parent_ends[i] == sock) {
      parent_ends[i] = parent_ends[--n_parent_ends];
      break;
    }
  close(sock);
}

int dp_worker_fork(pid_t *pid, int *sock) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return dp_error("DataLoader: cannot create a worker socket: %s", strerror(errno));
  pid_t parent = getpid();
  fflush(NULL); /* nothing buffered is written twice */
  pid_t p = fork();
  if (p < 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    return dp_error("DataLoader: cannot fork a worker: %s", strerror(e));
  }
  if (p == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1); /* the parent is already gone */
    signal(SIGINT, SIG_IGN);
    /* The other workers' parent ends become /dev/null: their peers see EOF
     * when the parent goes, and the numbers stay taken, so the Lua objects
     * that still hold them in this copy close /dev/null, never a reused fd. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int i = 0; i < n_parent_ends; i++) {
      if (null >= 0) dup2(null, parent_ends[i]);
      else close(parent_ends[i]);
    }
    if (null >= 0) close(null);
    n_parent_ends = 0;
    close(sv[0]);
    *sock = sv[1];
    return 1;
  }
  close(sv[1]);
  remember_parent_end(sv[0]);
  *pid = p;
  *sock = sv[0];
  return 0;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

int dp_worker_pack(const char *text, size_t len, dp_tensor *const *ts, int nt) {
  for (int i = 0; i < nt; i++) {
    if (dp_dev(ts[i]).type != DP_CPU)
      return dp_error("DataLoader worker: tensor %d of the batch is on a GPU; workers produce CPU tensors (move "
                      "the batch to the device in the training loop)",
                      i + 1);
  }
  size_t head = sizeof(pack_header) + (size_t)nt * sizeof(pack_tensor) + len;
  size_t total = align64(head);
  pack_tensor *tab = dp_xcalloc((size_t)(nt ? nt : 1), sizeof *tab);
  for (int i = 0; i < nt; i++) {
    tab[i].dtype = (int32_t)ts[i]->dtype;
    tab[i].ndim = ts[i]->ndim;
    for (int d = 0; d < ts[i]->ndim; d++) tab[i].shape[d] = ts[i]->shape[d];
    tab[i].offset = total;
    tab[i].nbytes = (uint64_t)dp_numel(ts[i]) * dp_elsize(ts[i]);
    total = align64(total + tab[i].nbytes);
  }
  int fd = memfd_create("ddplua-batch", MFD_CLOEXEC);
  if (fd < 0) {
    free(tab);
    return dp_error("DataLoader worker: memfd_create: %s", strerror(errno));
  }
  char *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)(total ? total : 64)) == 0)
    p = mmap(NULL, total ? total : 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int rc = dp_error("DataLoader worker: cannot allocate %zu bytes of shared memory for a batch: %s", total,
                      strerror(errno));
    close(fd);
    free(tab);
    return rc;
  }
  pack_header h = {PACK_MAGIC, len, (uint32_t)nt, 0};
  memcpy(p, &h, sizeof h);
  memcpy(p + sizeof h, tab, (size_t)nt * sizeof *tab);
  if (len) memcpy(p + sizeof h + (size_t)nt * sizeof *tab, text, len);
  int rc = 0;
  for (int i = 0; i < nt && !rc; i++) {
    dp_tensor *c = dp_contiguous(ts[i]);
    if (!c) {
      rc = -1;
      break;
    }
    if (tab[i].nbytes) memcpy(p + tab[i].offset, dp_data(c), tab[i].nbytes);
    dp_release(c);
  }
  munmap(p, total ? total : 64);
  free(tab);
  if (rc) {
    close(fd);
    return -1;
  }
  return fd;
}

int dp_worker_send(int sock, int kind, int64_t seq, int64_t item, int fd) {
  wire_header h = {(uint32_t)kind, fd >= 0, seq, item};
  struct iovec iov = {&h, sizeof h};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  for (;;) {
    ssize_t w = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (w == (ssize_t)sizeof h) return 0;
    if (w < 0 && errno == EINTR) continue;
    return dp_error("DataLoader: the worker connection is closed (%s)", w < 0 ? strerror(errno) : "short write");
  }
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int dp_worker_recv(int sock, int timeout_ms, dp_wmsg *m) {
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  for (;;) {
    struct pollfd pf = {sock, POLLIN, 0};
    int wait = deadline < 0 ? -1 : (int)(deadline - now_ms() > 0 ? deadline - now_ms() : 0);
    int r = poll(&pf, 1, wait);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return dp_error("DataLoader: poll: %s", strerror(errno));
    if (r == 0) return 0;
    break;
  }
  wire_header h;
  struct iovec iov = {&h, sizeof h};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof ctl.buf;
  ssize_t got;
  do got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got == 0 || (got < 0 && (errno == ECONNRESET || errno == EPIPE))) return dp_error("closed");
  if (got < 0) return dp_error("DataLoader: reading from a worker: %s", strerror(errno));
  int fd = -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof fd);
  if (got != (ssize_t)sizeof h || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (h.has_fd && fd < 0)) {
    if (fd >= 0) close(fd);
    return dp_error("DataLoader: a malformed message from a worker");
  }
  m->kind = (int)h.kind;
  m->seq = h.seq;
  m->item = h.item;
  m->fd = fd;
  return 1;
}

static void unmap_storage(dp_storage *s) { munmap(s->data, s->nbytes); }

int dp_worker_unpack(int fd, const char **text, size_t *len, dp_tensor ***ts, int *nt, dp_storage **map) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(pack_header)) {
    close(fd);
    return dp_error("DataLoader: a worker's batch is truncated");
  }
  size_t size = (size_t)st.st_size;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return dp_error("DataLoader: cannot map a worker's batch: %s", strerror(errno));
  dp_storage *s = dp_storage_wrap(p, size, dp_cpu(), unmap_storage, NULL);
  pack_header h;
  memcpy(&h, p, sizeof h);
  const char *base = p;
  size_t tab_end = sizeof h + (size_t)h.nt * sizeof(pack_tensor);
  if (h.magic != PACK_MAGIC || h.nt > 1u << 20 || tab_end > size || h.text_len > size - tab_end) {
    dp_storage_release(s);
    return dp_error("DataLoader: a malformed batch from a worker");
  }
  dp_tensor **out = dp_xcalloc(h.nt ? h.nt : 1, sizeof *out);
  for (uint32_t i = 0; i < h.nt; i++) {
    pack_tensor t;
    memcpy(&t, base + sizeof h + i * sizeof t, sizeof t);
    int ok = t.dtype >= 0 && t.dtype < DP_NDTYPES && t.ndim >= 0 && t.ndim <= DP_MAXDIM && t.offset % 64 == 0 &&
             t.offset <= size && t.nbytes <= size - t.offset;
    uint64_t numel = 1;
    for (int d = 0; ok && d < t.ndim; d++) {
      ok = t.shape[d] >= 0 && (t.shape[d] == 0 || numel <= UINT64_MAX / (uint64_t)t.shape[d]);
      if (ok) numel *= (uint64_t)t.shape[d];
    }
    ok = ok && numel * dp_dtype_size((dp_dtype)t.dtype) == t.nbytes;
    if (ok)
      out[i] = dp_from_storage(s, (dp_dtype)t.dtype, t.ndim, t.shape, NULL,
                               (int64_t)(t.offset / dp_dtype_size((dp_dtype)t.dtype)));
    if (!ok || !out[i]) {
      for (uint32_t j = 0; j < i; j++) dp_release(out[j]);
      free(out);
      dp_storage_release(s);
      return dp_error("DataLoader: a malformed tensor in a worker's batch");
    }
  }
  *text = base + tab_end;
  *len = (size_t)h.text_len;
  *ts = out;
  *nt = (int)h.nt;
  *map = s; /* the caller's reference; the tensors hold their own */
  return 0;
}

int dp_worker_poll(const int *socks, int n, int timeout_ms) {
  struct pollfd *pf = dp_xcalloc((size_t)(n ? n : 1), sizeof *pf);
  for (int i = 0; i < n; i++) pf[i] = (struct pollfd){socks[i], POLLIN, 0};
  int r;
  do r = poll(pf, (nfds_t)n, timeout_ms);
  while (r < 0 && errno == EINTR);
  int found = -1;
  for (int i = 0; r > 0 && i < n; i++)
    if (pf[i].revents) {
      found = i;
      break;
    }
  free(pf);
  return found;
}

static void describe(int st, char *out, size_t n) {
  if (WIFEXITED(st)) snprintf(out, n, "exited with code %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    const char *name = sig == SIGKILL   ? "SIGKILL"
                       : sig == SIGSEGV ? "SIGSEGV"
                       : sig == SIGTERM ? "SIGTERM"
                       : sig == SIGBUS  ? "SIGBUS"
                       : sig == SIGABRT ? "SIGABRT"
                                        : "a signal";
    snprintf(out, n, "was killed by signal %d (%s)", sig, name);
  } else snprintf(out, n, "ended (status %d)", st);
}

int dp_worker_alive(pid_t pid, char *out, size_t n) {
  if (pid <= 0) { /* a process group or every child: never a worker */
    snprintf(out, n, "is not a child of this process");
    return -1;
  }
  int st;
  pid_t r;
  do r = waitpid(pid, &st, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return 1;
  if (r < 0) {
    snprintf(out, n, "is not a child of this process");
    return -1;
  }
  describe(st, out, n);
  return 0;
}

int dp_worker_reap(pid_t pid, int grace_ms, char *out, size_t n) {
  if (pid <= 0) { /* kill(0 or -1, ...) would signal a process group or every process */
    snprintf(out, n, "is not a child of this process");
    return -1;
  }
  int64_t deadline = now_ms() + grace_ms;
  for (;;) {
    int a = dp_worker_alive(pid, out, n);
    if (a <= 0) return a;
    if (now_ms() >= deadline) break;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  int st;
  pid_t r;
  do r = waitpid(pid, &st, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0) {
    snprintf(out, n, "is not a child of this process");
    return -1;
  }
  describe(st, out, n);
  return 0;
}
