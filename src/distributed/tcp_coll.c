/* Between nodes: a TCP mesh among the group's ranks on different nodes
 * (addresses exchanged through the store) and the collectives among node
 * leaders: ring all-reduce (reduce-scatter then all-gather, each rank
 * sending and receiving at once), ring all-gather with per-node blocks, and
 * a pipelined chain broadcast. Sockets are non-blocking and every wait
 * goes through poll with the op's deadline.
 *
 * A rank's listening socket is reachable by anyone: a peer proves it is one
 * of the group's by sending, in its hello, the group's mesh key (random,
 * published in the store, which only the job can read), and a connection
 * that does not say hello in time is closed without delaying the others. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "distributed/keepalive.h"
#include "distributed/pg_cpu.h"
#include "distributed/reduce_kern.h"

#define HELLO_MAGIC 0x6c6c6568706464ull /* "ddphell" */
#define PIECE ((size_t)4 << 20)         /* ring pieces: bounded temporary memory */
#define HELLO_WAIT_MS 2000              /* for a connected peer's hello */

int64_t pg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tune(int fd) {
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  dp_tcp_keepalive(fd); /* a peer node that vanished is noticed in seconds */
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int peer_error(coll_ctx *c, int peer, const char *what) {
  char ctx[256];
  cpu_op_ctx(c->op, ctx, sizeof ctx);
  cpu_pg *g = c->g;
  dp_pg_blame(g->granks[peer]);
  if (strcmp(what, "timeout") == 0)
    return dp_error("%s timed out after %.1f s on rank %d waiting for rank %d (node %d)", ctx,
                    g->base.timeout_ms / 1000.0, g->base.global_rank, g->granks[peer], g->node_of[peer]);
  return dp_error("%s failed on rank %d: the connection to rank %d (node %d) %s", ctx, g->base.global_rank,
                  g->granks[peer], g->node_of[peer], what);
}

/* Sends sn bytes to group rank sp and receives rn bytes from rp at once
 * (either may be 0 bytes / -1 rank). */
static int xfer(coll_ctx *c, int sp, const void *sbuf, size_t sn, int rp, void *rbuf, size_t rn) {
  cpu_pg *g = c->g;
  const uint8_t *s = sbuf;
  uint8_t *r = rbuf;
  size_t sd = 0, rd = 0;
  if (sp < 0) sn = 0;
  if (rp < 0) rn = 0;
  while (sd < sn || rd < rn) {
    struct pollfd pf[2];
    int np = 0, si = -1, ri = -1;
    if (sd < sn) {
      si = np;
      pf[np++] = (struct pollfd){g->fds[sp], POLLOUT, 0};
    }
    if (rd < rn) {
      if (si >= 0 && rp == sp) {
        pf[si].events |= POLLIN;
        ri = si;
      } else {
        ri = np;
        pf[np++] = (struct pollfd){g->fds[rp], POLLIN, 0};
      }
    }
    int64_t left = c->deadline_ms - pg_now_ms();
    if (left <= 0) return peer_error(c, rd < rn ? rp : sp, "timeout");
    int k = poll(pf, (nfds_t)np, left < 1000 ? (int)left : 1000);
    if (k < 0 && errno != EINTR) return dp_error("poll: %s", strerror(errno));
    if (atomic_load(&g->broken)) return dp_error("%s", g->broken_msg);
    if (k <= 0) continue;
    if (si >= 0 && (pf[si].revents & (POLLOUT | POLLERR | POLLHUP)) && sd < sn) {
      ssize_t w = send(g->fds[sp], s + sd, sn - sd, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR)
        return peer_error(c, sp, "was closed (the peer failed or exited)");
      if (w > 0) sd += (size_t)w;
    }
    if (ri >= 0 && (pf[ri].revents & (POLLIN | POLLERR | POLLHUP)) && rd < rn) {
      ssize_t w = recv(g->fds[rp], r + rd, rn - rd, 0);
      if (w == 0 || (w < 0 && errno != EAGAIN && errno != EINTR))
        return peer_error(c, rp, "was closed (the peer failed or exited)");
      if (w > 0) rd += (size_t)w;
    }
  }
  return 0;
}

/* ---- mesh ---- */

typedef struct {
  uint64_t magic;
  int32_t grank; /* sender's group rank */
  int32_t group_id;
  char key[33]; /* the group's mesh key */
  char pad[7];
} hello_msg;

/* The group's mesh key: made by group rank 0, read by the others. */
static int mesh_key(cpu_pg *g, char *key, size_t n, int64_t deadline) {
  char k[128];
  snprintf(k, sizeof k, "%s/mesh_key", g->base.prefix);
  if (g->base.rank == 0) {
    dp_store_make_token(key, n);
    return dp_store_set(g->base.store, k, key, strlen(key));
  }
  void *val;
  size_t len;
  int64_t left = deadline - pg_now_ms();
  if (dp_store_get(g->base.store, k, &val, &len, left > 0 ? (int)left : 1)) return -1;
  snprintf(key, n, "%s", (char *)val);
  free(val);
  return 0;
}

static int connect_to(const char *addr, int64_t deadline) {
  char host[128];
  snprintf(host, sizeof host, "%s", addr);
  char *colon = strrchr(host, ':');
  if (!colon) return dp_error("malformed peer address '%s'", addr);
  *colon = 0;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return dp_error("malformed peer address '%s'", addr);
  for (int delay = 2;; delay = delay < 100 ? delay * 2 : 100) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return dp_error("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    int e = errno;
    close(fd);
    if (pg_now_ms() >= deadline) return dp_error("cannot connect to %s: %s", addr, strerror(e));
    struct timespec ts = {0, delay * 1000000L};
    nanosleep(&ts, NULL);
  }
}

static int blocking_io(int fd, void *buf, size_t n, bool out, int64_t deadline) {
  uint8_t *p = buf;
  while (n) {
    struct pollfd pf = {fd, out ? POLLOUT : POLLIN, 0};
    int64_t left = deadline - pg_now_ms();
    if (left <= 0 || poll(&pf, 1, (int)left) <= 0) return -1;
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return -1;
    if (k > 0) {
      p += k;
      n -= (size_t)k;
    }
  }
  return 0;
}

int tcp_mesh_build(cpu_pg *g) {
  int n = g->base.size, me = g->base.rank;
  g->fds = dp_xmalloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) g->fds[i] = -1;
  if (g->nnodes <= 1) return 0;
  int64_t deadline = pg_now_ms() + g->base.timeout_ms;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t sl = sizeof sa;
  char ip[64], addr[96], key[128];
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 256) < 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0) {
    if (lfd >= 0) close(lfd);
    return dp_error("cannot open a listening socket for the process group: %s", strerror(errno));
  }
  if (dp_store_local_addr(g->base.store, ip, sizeof ip)) {
    close(lfd);
    return -1;
  }
  char key_text[33];
  if (mesh_key(g, key_text, sizeof key_text, deadline)) {
    close(lfd);
    return -1;
  }
  snprintf(addr, sizeof addr, "%s:%d", ip, ntohs(sa.sin_port));
  snprintf(key, sizeof key, "%s/addr/%d", g->base.prefix, me);
  if (dp_store_set(g->base.store, key, addr, strlen(addr))) goto fail;
  int expect_accepts = 0;
  for (int j = 0; j < n; j++) {
    if (g->node_of[j] == g->my_node) continue;
    if (j > me) {
      expect_accepts++;
      continue;
    }
    void *val;
    size_t len;
    snprintf(key, sizeof key, "%s/addr/%d", g->base.prefix, j);
    if (dp_store_get(g->base.store, key, &val, &len, (int)(deadline - pg_now_ms()))) goto fail;
    int fd = connect_to(val, deadline);
    if (fd < 0) {
      dp_error_prefix("process group: ");
      free(val);
      goto fail;
    }
    free(val);
    tune(fd);
    hello_msg h = {HELLO_MAGIC, me, g->group_id, "", ""};
    memcpy(h.key, key_text, sizeof h.key);
    if (blocking_io(fd, &h, sizeof h, true, deadline)) {
      close(fd);
      dp_error("process group: cannot greet rank %d", g->granks[j]);
      goto fail;
    }
    g->fds[j] = fd;
  }
  while (expect_accepts > 0) {
    struct pollfd pf = {lfd, POLLIN, 0};
    int64_t left = deadline - pg_now_ms();
    if (left <= 0 || poll(&pf, 1, (int)left) <= 0) {
      dp_error("process group: timed out waiting for %d rank(s) on other nodes to connect", expect_accepts);
      goto fail;
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune(fd);
    hello_msg h;
    int64_t hello_by = pg_now_ms() + HELLO_WAIT_MS; /* a silent stranger cannot hold up the others */
    if (blocking_io(fd, &h, sizeof h, false, hello_by < deadline ? hello_by : deadline) || h.magic != HELLO_MAGIC ||
        h.group_id != g->group_id || memcmp(h.key, key_text, sizeof h.key) != 0 || h.grank <= me || h.grank >= n ||
        g->fds[h.grank] >= 0 || g->node_of[h.grank] == g->my_node) {
      close(fd); /* not one of ours: ignore it */
      continue;
    }
    g->fds[h.grank] = fd;
    expect_accepts--;
  }
  close(lfd);
  return 0;
fail:
  close(lfd);
  return -1;
}

void tcp_mesh_shutdown(cpu_pg *g) {
  for (int i = 0; g->fds && i < g->base.size; i++)
    if (g->fds[i] >= 0) shutdown(g->fds[i], SHUT_RDWR);
}

void tcp_mesh_close(cpu_pg *g) {
  for (int i = 0; g->fds && i < g->base.size; i++)
    if (g->fds[i] >= 0) close(g->fds[i]);
  free(g->fds);
  g->fds = NULL;
}

/* ---- leaders ---- */

static int leader_of(const cpu_pg *g, int node) { return g->node_first[node]; }

static void split(size_t n, int parts, int k, size_t *off, size_t *len) {
  size_t q = n / (size_t)parts, r = n % (size_t)parts, kk = (size_t)k;
  *off = kk * q + (kk < r ? kk : r);
  *len = q + (kk < r ? 1 : 0);
}

int tcp_leaders_all_reduce(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op) {
  cpu_pg *g = c->g;
  int M = g->nnodes, me = g->my_node;
  int next = leader_of(g, (me + 1) % M), prev = leader_of(g, (me + M - 1) % M);
  size_t es = dp_dtype_size(dt), piece = PIECE / es;
  uint8_t *d = data;
  uint8_t *tmp = dp_xmalloc(PIECE);
  int rc = 0;
  /* reduce-scatter: after M-1 steps node k holds the total of segment k+1 */
  for (int s = 0; s < M - 1 && !rc; s++) {
    size_t so, sl, ro, rl;
    split(n, M, (me - s + M) % M, &so, &sl);
    split(n, M, (me - s - 1 + 2 * M) % M, &ro, &rl);
    for (size_t p = 0; (p < sl || p < rl) && !rc; p += piece) {
      size_t a = p < sl ? (sl - p < piece ? sl - p : piece) : 0, b = p < rl ? (rl - p < piece ? rl - p : piece) : 0;
      rc = xfer(c, next, d + (so + p) * es, a * es, prev, tmp, b * es);
      if (!rc && b) {
        const void *src[2] = {d + (ro + p) * es, tmp};
        dp_reduce_n(d + (ro + p) * es, src, 2, b, dt, op);
      }
    }
  }
  /* all-gather of the reduced segments */
  for (int s = 0; s < M - 1 && !rc; s++) {
    size_t so, sl, ro, rl;
    split(n, M, (me + 1 - s + M) % M, &so, &sl);
    split(n, M, (me - s + M) % M, &ro, &rl);
    rc = xfer(c, next, d + so * es, sl * es, prev, d + ro * es, rl * es);
  }
  free(tmp);
  return rc;
}

int tcp_leaders_all_gather(coll_ctx *c, void *out, const size_t *off, const size_t *len) {
  cpu_pg *g = c->g;
  int M = g->nnodes, me = g->my_node;
  int next = leader_of(g, (me + 1) % M), prev = leader_of(g, (me + M - 1) % M);
  uint8_t *y = out;
  for (int s = 0; s < M - 1; s++) {
    int sb = (me - s + M) % M, rb = (me - s - 1 + 2 * M) % M;
    if (xfer(c, next, y + off[sb], len[sb], prev, y + off[rb], len[rb])) return -1;
  }
  return 0;
}

int tcp_leaders_broadcast(coll_ctx *c, void *data, size_t nbytes, int root_node) {
  cpu_pg *g = c->g;
  int M = g->nnodes, me = g->my_node, pos = (me - root_node + M) % M;
  int next = pos < M - 1 ? leader_of(g, (me + 1) % M) : -1, prev = pos > 0 ? leader_of(g, (me + M - 1) % M) : -1;
  uint8_t *d = data;
  /* pipelined: receive piece k while piece k-1 travels on */
  for (size_t p = 0; p < nbytes; p += PIECE) {
    size_t len = nbytes - p < PIECE ? nbytes - p : PIECE;
    if (prev >= 0 && xfer(c, -1, NULL, 0, prev, d + p, len)) return -1;
    if (next >= 0 && xfer(c, next, d + p, len, -1, NULL, 0)) return -1;
  }
  return 0;
}

/* ---- point to point ---- */

typedef struct {
  uint64_t nbytes;
  int64_t count;
  int32_t dtype, pad;
} p2p_hdr;

int tcp_send(coll_ctx *c, const void *data, size_t nbytes, int dst) {
  p2p_hdr h = {nbytes, c->op->d.count, c->op->d.dtype, 0};
  if (xfer(c, dst, &h, sizeof h, -1, NULL, 0)) return -1;
  return xfer(c, dst, data, nbytes, -1, NULL, 0);
}

int tcp_recv(coll_ctx *c, void *data, size_t nbytes, int src) {
  p2p_hdr h;
  if (xfer(c, -1, NULL, 0, src, &h, sizeof h)) return -1;
  if (h.nbytes != nbytes || h.dtype != c->op->d.dtype) {
    char ctx[256];
    cpu_op_ctx(c->op, ctx, sizeof ctx);
    return dp_error("%s: rank %d sent %lld %s elements but rank %d expected %lld %s elements", ctx, c->g->granks[src],
                    (long long)h.count, dp_dtype_name((dp_dtype)h.dtype), c->g->base.global_rank,
                    (long long)c->op->d.count, dp_dtype_name((dp_dtype)c->op->d.dtype));
  }
  return xfer(c, -1, NULL, 0, src, data, nbytes);
}
