/* The rendezvous store's client (store.h has the protocol) and job tokens. */
#include "distributed/store.h"

#include "core/error.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "distributed/keepalive.h"
#include "distributed/store_wire.h"

void dp_store_make_token(char *buf, size_t n) {
  uint8_t r[16];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec;
    for (int i = 0; i < 16; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      r[i] = (uint8_t)(x >> 56);
    }
  }
  size_t k = 0;
  for (int i = 0; i < 16 && k + 2 < n; i++) k += (size_t)snprintf(buf + k, n - k, "%02x", r[i]);
}

struct dp_store {
  int fd;
  pthread_mutex_t mu;
  char where[300];
};

static int send_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* Reads exactly n bytes within deadline (ms since epoch of now_ms; -1 =
 * forever). Returns 0, -1 (closed / error) or -2 (timeout). */
static int recv_all(int fd, uint8_t *p, size_t n, int64_t deadline) {
  while (n) {
    int tmo = -1;
    if (deadline >= 0) {
      int64_t left = deadline - now_ms();
      if (left <= 0) return -2;
      tmo = (int)left;
    }
    struct pollfd pf = {fd, POLLIN, 0};
    int r = poll(&pf, 1, tmo);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return -2;
    if (r < 0) return -1;
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* One request/response. *body is malloc'ed. */
static int roundtrip(dp_store *s, uint8_t cmd, const uint8_t *body, size_t len, int timeout_ms, uint8_t *status,
                     uint8_t **rbody, size_t *rlen) {
  uint8_t hdr[5];
  put_u32(hdr, (uint32_t)(1 + len));
  hdr[4] = cmd;
  pthread_mutex_lock(&s->mu);
  int rc = -1;
  if (s->fd < 0) {
    dp_error("store: the connection to %s was lost earlier", s->where);
    goto out;
  }
  if (send_all(s->fd, hdr, 5) || (len && send_all(s->fd, body, len))) {
    dp_error("store: lost the connection to %s (is the job's host or rank 0 still running?)", s->where);
    goto fail;
  }
  /* the server answers parked requests (GET, WAIT) at their deadline;
   * allow a margin for it before declaring the server dead */
  bool parked = cmd == CMD_GET || cmd == CMD_WAIT || cmd == CMD_WAIT_ANY;
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms + (parked ? 10000 : 0);
  uint8_t rh[5];
  int r = recv_all(s->fd, rh, 5, deadline);
  uint32_t rl = r ? 0 : get_u32(rh);
  if (r == 0 && (rl < 1 || rl > MAX_MSG)) r = -1;
  uint8_t *rb = NULL;
  if (r == 0 && rl > 1) {
    rb = dp_xmalloc(rl);
    r = recv_all(s->fd, rb, rl - 1, deadline);
    rb[rl - 1] = 0;
  }
  if (r) {
    free(rb);
    if (r == -2) dp_error("store: %s did not answer in time", s->where);
    else dp_error("store: lost the connection to %s (is the job's host or rank 0 still running?)", s->where);
    goto fail;
  }
  *status = rh[4];
  if (rbody) {
    if (!rb) {
      rb = dp_xmalloc(1);
      rb[0] = 0;
    }
    *rbody = rb;
    *rlen = rl - 1;
  } else {
    free(rb);
  }
  rc = 0;
  goto out;
fail:
  close(s->fd);
  s->fd = -1;
out:
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* One TCP connection attempt; -1 with *err set when it fails. */
static int tcp_connect(const char *host, int port, int *err, int *gai) {
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", port);
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  *gai = getaddrinfo(host, portstr, &hints, &res);
  if (*gai != 0) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
    *err = errno;
    close(fd);
    fd = -1;
  } else if (fd < 0) {
    *err = errno;
  }
  freeaddrinfo(res);
  return fd;
}

dp_store *dp_store_connect(const char *host, int port, const char *token, int timeout_ms) {
  int64_t deadline = now_ms() + (timeout_ms < 0 ? 300000 : timeout_ms);
  int delay = 2, last_err = 0, gai = 0;
  const char *why = NULL;
  for (;;) {
    int fd = tcp_connect(host, port, &last_err, &gai);
    if (fd >= 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      dp_tcp_keepalive(fd);
      dp_store *s = dp_xcalloc(1, sizeof *s);
      s->fd = fd;
      pthread_mutex_init(&s->mu, NULL);
      snprintf(s->where, sizeof s->where, "the store at %s:%d", host, port);
      int64_t left = deadline - now_ms();
      uint8_t st;
      uint8_t *body = NULL;
      size_t blen = 0;
      int rc = roundtrip(s, CMD_HELLO, (const uint8_t *)token, strlen(token),
                         left < 10000 ? (int)(left > 0 ? left : 1) : 10000, &st, &body, &blen);
      free(body);
      if (rc == 0 && st == ST_OK) return s;
      dp_store_close(s);
      if (rc == 0) {
        dp_error("store: the store at %s:%d refused the job token (it serves another job, or this process was given "
                 "a different DDPLUA_JOB_TOKEN / --token_file)",
                 host, port);
        return NULL;
      }
      /* closed or silent before answering: a server busy closing strangers' connections, or still starting */
      why = "it closed the connection before answering the job token";
    } else {
      why = gai ? gai_strerror(gai) : strerror(last_err);
    }
    if (now_ms() >= deadline) {
      dp_error("store: cannot connect to %s:%d within %d ms (%s)", host, port, timeout_ms, why);
      return NULL;
    }
    struct timespec ts = {0, (long)delay * 1000000L};
    nanosleep(&ts, NULL);
    if (delay < 100) delay *= 2;
  }
}

void dp_store_close(dp_store *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static int check_key(const char *key) {
  size_t n = strlen(key);
  if (n == 0 || n > 4096) return dp_error("store: key length must be 1..4096 bytes");
  return 0;
}

int dp_store_set(dp_store *s, const char *key, const void *val, size_t len) {
  if (check_key(key)) return -1;
  size_t kl = strlen(key);
  uint8_t *b = dp_xmalloc(4 + kl + len);
  put_u32(b, (uint32_t)kl);
  memcpy(b + 4, key, kl);
  if (len) memcpy(b + 4 + kl, val, len);
  uint8_t st;
  int rc = roundtrip(s, CMD_SET, b, 4 + kl + len, 30000, &st, NULL, NULL);
  free(b);
  if (!rc && st != ST_OK) rc = dp_error("store: set '%s' failed", key);
  return rc;
}

static uint8_t *encode_keys(const char *const *keys, int n, size_t prefix, size_t *len) {
  size_t total = prefix + 4;
  for (int i = 0; i < n; i++) total += 4 + strlen(keys[i]);
  uint8_t *b = dp_xmalloc(total), *p = b + prefix;
  put_u32(p, (uint32_t)n);
  p += 4;
  for (int i = 0; i < n; i++) {
    size_t kl = strlen(keys[i]);
    put_u32(p, (uint32_t)kl);
    memcpy(p + 4, keys[i], kl);
    p += 4 + kl;
  }
  *len = total;
  return b;
}

static int wait_like(dp_store *s, uint8_t cmd, const char *const *keys, int n, int timeout_ms, void **val,
                     size_t *vlen) {
  for (int i = 0; i < n; i++)
    if (check_key(keys[i])) return -1;
  size_t len;
  uint8_t *b = encode_keys(keys, n, 4, &len);
  put_u32(b, (uint32_t)(int32_t)timeout_ms);
  uint8_t st, *rb = NULL;
  size_t rl = 0;
  int rc = roundtrip(s, cmd, b, len, timeout_ms, &st, &rb, &rl);
  free(b);
  if (rc) return -1;
  if (st == ST_TIMEOUT) {
    /* rb lists the missing keys, one per line */
    for (size_t i = 0; i + 1 < rl; i++)
      if (rb[i] == '\n') rb[i] = ' ';
    if (rl && rb[rl - 1] == '\n') rb[rl - 1] = 0;
    dp_error("store: timed out after %d ms waiting for key(s): %s", timeout_ms, (char *)rb);
    free(rb);
    return -1;
  }
  if (st != ST_OK) {
    free(rb);
    return dp_error("store: request failed");
  }
  if (val) {
    *val = rb;
    *vlen = rl;
  } else {
    free(rb);
  }
  return 0;
}

int dp_store_get(dp_store *s, const char *key, void **val, size_t *len, int timeout_ms) {
  return wait_like(s, CMD_GET, &key, 1, timeout_ms, val, len);
}

int dp_store_wait(dp_store *s, const char *const *keys, int n, int timeout_ms) {
  if (n <= 0) return 0;
  return wait_like(s, CMD_WAIT, keys, n, timeout_ms, NULL, NULL);
}

int dp_store_add(dp_store *s, const char *key, int64_t delta, int64_t *result) {
  if (check_key(key)) return -1;
  size_t kl = strlen(key);
  uint8_t *b = dp_xmalloc(8 + kl);
  put_u64(b, (uint64_t)delta);
  memcpy(b + 8, key, kl);
  uint8_t st, *rb = NULL;
  size_t rl = 0;
  int rc = roundtrip(s, CMD_ADD, b, 8 + kl, 30000, &st, &rb, &rl);
  free(b);
  if (!rc && (st != ST_OK || rl != 8)) rc = dp_error("store: add '%s' failed", key);
  if (!rc && result) *result = (int64_t)get_u64(rb);
  free(rb);
  return rc;
}

int dp_store_check(dp_store *s, const char *const *keys, int n, int *ok) {
  for (int i = 0; i < n; i++)
    if (check_key(keys[i])) return -1;
  size_t len;
  uint8_t *b = encode_keys(keys, n, 0, &len);
  uint8_t st, *rb = NULL;
  size_t rl = 0;
  int rc = roundtrip(s, CMD_CHECK, b, len, 30000, &st, &rb, &rl);
  free(b);
  if (!rc && (st != ST_OK || rl != 1)) rc = dp_error("store: check failed");
  if (!rc) *ok = rb[0];
  free(rb);
  return rc;
}

int dp_store_delete(dp_store *s, const char *key) {
  if (check_key(key)) return -1;
  uint8_t st;
  int rc = roundtrip(s, CMD_DELETE, (const uint8_t *)key, strlen(key), 30000, &st, NULL, NULL);
  if (!rc && st != ST_OK) rc = dp_error("store: delete '%s' failed", key);
  return rc;
}

int dp_store_delete_prefix(dp_store *s, const char *prefix, uint64_t *n) {
  if (check_key(prefix)) return -1;
  uint8_t st, *rb = NULL;
  size_t rl = 0;
  int rc = roundtrip(s, CMD_DELETE_PREFIX, (const uint8_t *)prefix, strlen(prefix), 30000, &st, &rb, &rl);
  if (!rc && (st != ST_OK || rl != 8)) rc = dp_error("store: deleting the keys under '%s' failed", prefix);
  if (!rc && n) *n = get_u64(rb);
  free(rb);
  return rc;
}

int dp_store_wait_any(dp_store *s, const char *const *keys, int n, int timeout_ms, int *which) {
  if (n <= 0) return dp_error("store: wait_any needs at least one key");
  void *val = NULL;
  size_t len = 0;
  if (wait_like(s, CMD_WAIT_ANY, keys, n, timeout_ms, &val, &len)) return -1;
  int rc = 0;
  if (len != 4 || get_u32(val) >= (uint32_t)n) rc = dp_error("store: malformed wait_any reply");
  else *which = (int)get_u32(val);
  free(val);
  return rc;
}

int dp_store_on_close(dp_store *s, const char *const *keys, const char *const *vals, const size_t *lens, int n) {
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (check_key(keys[i])) return -1;
    total += 8 + strlen(keys[i]) + lens[i];
  }
  if (total > MAX_ON_CLOSE) return dp_error("store: on-close keys exceed %u bytes", MAX_ON_CLOSE);
  uint8_t *b = dp_xmalloc(total + 1), *p = b;
  for (int i = 0; i < n; i++) {
    size_t kl = strlen(keys[i]);
    put_u32(p, (uint32_t)kl);
    memcpy(p + 4, keys[i], kl);
    p += 4 + kl;
    put_u32(p, (uint32_t)lens[i]);
    if (lens[i]) memcpy(p + 4, vals[i], lens[i]);
    p += 4 + lens[i];
  }
  uint8_t st;
  int rc = roundtrip(s, CMD_ON_CLOSE, b, total, 30000, &st, NULL, NULL);
  free(b);
  if (!rc && st != ST_OK) rc = dp_error("store: registering on-close keys failed");
  return rc;
}

int dp_store_local_addr(dp_store *s, char *buf, size_t n) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  if (getsockname(s->fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sin_family != AF_INET ||
      !inet_ntop(AF_INET, &sa.sin_addr, buf, (socklen_t)n))
    return dp_error("store: cannot read the local address of the store connection: %s", strerror(errno));
  return 0;
}
