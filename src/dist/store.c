/* TCP rendezvous store: server (one poll-loop thread) and client. See
 * store.h for the protocol. */
#include "dist/store.h"

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

#include "core/error.h"

enum { CMD_HELLO = 1, CMD_SET, CMD_GET, CMD_ADD, CMD_WAIT, CMD_CHECK, CMD_DELETE };
enum { ST_OK = 0, ST_TIMEOUT = 1, ST_ERROR = 2 };
#define MAX_MSG (64u << 20)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

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

/* ======================= server ======================= */

typedef struct kv {
  char *key;
  uint8_t *val;
  size_t len;
  struct kv *next;
} kv;

typedef struct {
  int fd;
  bool authed;
  uint8_t *in;
  size_t in_len, in_cap;
  uint8_t *out;
  size_t out_len, out_off, out_cap;
  /* a parked GET/WAIT */
  bool waiting;
  uint8_t wait_cmd;
  int64_t deadline;
  char **wait_keys;
  int n_wait_keys;
} conn;

struct dp_store_server {
  int listen_fd, wake[2];
  char token[128];
  pthread_t thread;
  kv *table[256];
  conn *conns;
  int n_conns, cap_conns;
};

static unsigned hash_key(const char *k) {
  unsigned h = 2166136261u;
  for (; *k; k++) h = (h ^ (uint8_t)*k) * 16777619u;
  return h & 255;
}

static kv *kv_find(dp_store_server *s, const char *key) {
  for (kv *e = s->table[hash_key(key)]; e; e = e->next)
    if (strcmp(e->key, key) == 0) return e;
  return NULL;
}

static kv *kv_put(dp_store_server *s, const char *key, const uint8_t *val, size_t len) {
  kv *e = kv_find(s, key);
  if (!e) {
    e = dp_xcalloc(1, sizeof *e);
    e->key = dp_xstrdup(key);
    unsigned h = hash_key(key);
    e->next = s->table[h];
    s->table[h] = e;
  }
  free(e->val);
  e->val = dp_xmalloc(len + 1);
  if (len) memcpy(e->val, val, len);
  e->val[len] = 0;
  e->len = len;
  return e;
}

static void kv_delete(dp_store_server *s, const char *key) {
  for (kv **pp = &s->table[hash_key(key)]; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->key, key) == 0) {
      kv *e = *pp;
      *pp = e->next;
      free(e->key);
      free(e->val);
      free(e);
      return;
    }
}

static void reply(conn *c, uint8_t status, const void *body, size_t len) {
  size_t need = c->out_len + 5 + len;
  if (need > c->out_cap) {
    c->out_cap = need * 2;
    c->out = dp_xrealloc(c->out, c->out_cap);
  }
  put_u32(c->out + c->out_len, (uint32_t)(1 + len));
  c->out[c->out_len + 4] = status;
  if (len) memcpy(c->out + c->out_len + 5, body, len);
  c->out_len += 5 + len;
}

static void clear_wait(conn *c) {
  for (int i = 0; i < c->n_wait_keys; i++) free(c->wait_keys[i]);
  free(c->wait_keys);
  c->wait_keys = NULL;
  c->n_wait_keys = 0;
  c->waiting = false;
}

/* Answers a parked request if it can be answered now (or has expired). */
static void try_wait(dp_store_server *s, conn *c, int64_t now) {
  if (!c->waiting) return;
  bool all = true;
  for (int i = 0; i < c->n_wait_keys && all; i++) all = kv_find(s, c->wait_keys[i]) != NULL;
  if (all) {
    if (c->wait_cmd == CMD_GET) {
      kv *e = kv_find(s, c->wait_keys[0]);
      reply(c, ST_OK, e->val, e->len);
    } else {
      reply(c, ST_OK, NULL, 0);
    }
    clear_wait(c);
  } else if (c->deadline >= 0 && now >= c->deadline) {
    /* body: the keys still missing, newline-separated */
    size_t len = 0;
    for (int i = 0; i < c->n_wait_keys; i++)
      if (!kv_find(s, c->wait_keys[i])) len += strlen(c->wait_keys[i]) + 1;
    char *body = dp_xmalloc(len + 1), *p = body;
    for (int i = 0; i < c->n_wait_keys; i++)
      if (!kv_find(s, c->wait_keys[i])) p += sprintf(p, "%s\n", c->wait_keys[i]);
    reply(c, ST_TIMEOUT, body, len);
    free(body);
    clear_wait(c);
  }
}

/* Reads keys (u32 n, then n x (u32 len, bytes)). Returns -1 if malformed. */
static int parse_keys(const uint8_t *p, size_t len, char ***keys, int *n) {
  if (len < 4) return -1;
  uint32_t cnt = get_u32(p);
  if (cnt == 0 || cnt > 65536) return -1;
  p += 4, len -= 4;
  char **ks = dp_xcalloc(cnt, sizeof *ks);
  for (uint32_t i = 0; i < cnt; i++) {
    if (len < 4) goto bad;
    uint32_t kl = get_u32(p);
    p += 4, len -= 4;
    if (kl > len || kl == 0 || kl > 4096 || memchr(p, 0, kl)) goto bad;
    ks[i] = dp_xmalloc(kl + 1);
    memcpy(ks[i], p, kl);
    ks[i][kl] = 0;
    p += kl, len -= kl;
  }
  if (len != 0) goto bad;
  *keys = ks;
  *n = (int)cnt;
  return 0;
bad:
  for (uint32_t i = 0; i < cnt; i++) free(ks[i]);
  free(ks);
  return -1;
}

/* Handles one complete message; returns -1 to drop the connection. */
static int handle(dp_store_server *s, conn *c, const uint8_t *msg, size_t len) {
  if (len < 1) return -1;
  uint8_t cmd = msg[0];
  const uint8_t *b = msg + 1;
  size_t bl = len - 1;
  if (!c->authed) {
    if (cmd != CMD_HELLO || bl != strlen(s->token) || memcmp(b, s->token, bl) != 0) return -1;
    c->authed = true;
    reply(c, ST_OK, NULL, 0);
    return 0;
  }
  if (c->waiting) return -1; /* one request at a time */
  switch (cmd) {
  case CMD_SET: {
    if (bl < 4) return -1;
    uint32_t kl = get_u32(b);
    if (kl == 0 || kl > 4096 || kl > bl - 4 || memchr(b + 4, 0, kl)) return -1;
    char key[4097];
    memcpy(key, b + 4, kl);
    key[kl] = 0;
    kv_put(s, key, b + 4 + kl, bl - 4 - kl);
    reply(c, ST_OK, NULL, 0);
    return 1; /* a key changed: re-check waiters */
  }
  case CMD_ADD: {
    if (bl < 9 || bl - 8 > 4096 || memchr(b + 8, 0, bl - 8)) return -1;
    int64_t delta = (int64_t)get_u64(b);
    char key[4097];
    memcpy(key, b + 8, bl - 8);
    key[bl - 8] = 0;
    kv *e = kv_find(s, key);
    int64_t v = 0;
    if (e) {
      char *end;
      v = strtoll((const char *)e->val, &end, 10);
    }
    v += delta;
    char num[32];
    int k = snprintf(num, sizeof num, "%lld", (long long)v);
    kv_put(s, key, (const uint8_t *)num, (size_t)k);
    uint8_t out[8];
    put_u64(out, (uint64_t)v);
    reply(c, ST_OK, out, 8);
    return 1;
  }
  case CMD_GET:
  case CMD_WAIT: {
    if (bl < 4) return -1;
    int32_t tmo = (int32_t)get_u32(b);
    char **keys;
    int n;
    if (parse_keys(b + 4, bl - 4, &keys, &n)) return -1;
    if (cmd == CMD_GET && n != 1) {
      for (int i = 0; i < n; i++) free(keys[i]);
      free(keys);
      return -1;
    }
    c->waiting = true;
    c->wait_cmd = cmd;
    c->wait_keys = keys;
    c->n_wait_keys = n;
    c->deadline = tmo < 0 ? -1 : now_ms() + tmo;
    try_wait(s, c, now_ms());
    return 0;
  }
  case CMD_CHECK: {
    char **keys;
    int n;
    if (parse_keys(b, bl, &keys, &n)) return -1;
    uint8_t ok = 1;
    for (int i = 0; i < n; i++) {
      if (!kv_find(s, keys[i])) ok = 0;
      free(keys[i]);
    }
    free(keys);
    reply(c, ST_OK, &ok, 1);
    return 0;
  }
  case CMD_DELETE: {
    if (bl == 0 || bl > 4096 || memchr(b, 0, bl)) return -1;
    char key[4097];
    memcpy(key, b, bl);
    key[bl] = 0;
    kv_delete(s, key);
    reply(c, ST_OK, NULL, 0);
    return 0;
  }
  default: return -1;
  }
}

static void drop_conn(dp_store_server *s, int i) {
  conn *c = &s->conns[i];
  close(c->fd);
  clear_wait(c);
  free(c->in);
  free(c->out);
  s->conns[i] = s->conns[--s->n_conns];
}

static void *serve(void *arg) {
  dp_store_server *s = arg;
  struct pollfd *pfd = NULL;
  int cap = 0;
  for (;;) {
    int n = s->n_conns + 2;
    if (n > cap) {
      cap = n * 2;
      pfd = dp_xrealloc(pfd, sizeof *pfd * (size_t)cap);
    }
    pfd[0] = (struct pollfd){s->listen_fd, POLLIN, 0};
    pfd[1] = (struct pollfd){s->wake[0], POLLIN, 0};
    int64_t now = now_ms(), next = -1;
    for (int i = 0; i < s->n_conns; i++) {
      conn *c = &s->conns[i];
      pfd[i + 2] = (struct pollfd){c->fd, (short)(POLLIN | (c->out_len > c->out_off ? POLLOUT : 0)), 0};
      if (c->waiting && c->deadline >= 0 && (next < 0 || c->deadline < next)) next = c->deadline;
    }
    int tmo = next < 0 ? -1 : (int)(next > now ? next - now : 0);
    if (poll(pfd, (nfds_t)n, tmo) < 0 && errno != EINTR) break;
    if (pfd[1].revents) break; /* stop requested */
    if (pfd[0].revents & POLLIN) {
      int fd = accept(s->listen_fd, NULL, NULL);
      if (fd >= 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (s->n_conns == s->cap_conns) {
          s->cap_conns = s->cap_conns ? s->cap_conns * 2 : 16;
          s->conns = dp_xrealloc(s->conns, sizeof *s->conns * (size_t)s->cap_conns);
        }
        s->conns[s->n_conns++] = (conn){.fd = fd};
      }
    }
    /* walk connections backwards so drop_conn's swap is safe */
    bool changed = false;
    for (int i = n - 3; i >= 0; i--) {
      if (i >= s->n_conns) continue;
      conn *c = &s->conns[i];
      short re = pfd[i + 2].revents;
      bool dead = re & (POLLERR | POLLNVAL);
      if (!dead && (re & (POLLIN | POLLHUP))) {
        for (;;) {
          if (c->in_cap - c->in_len < 65536) {
            c->in_cap = c->in_cap * 2 + 65536;
            c->in = dp_xrealloc(c->in, c->in_cap);
          }
          ssize_t k = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
          if (k > 0) {
            c->in_len += (size_t)k;
            continue;
          }
          if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) dead = true;
          break;
        }
        /* complete messages */
        size_t off = 0;
        while (!dead && c->in_len - off >= 4) {
          uint32_t ml = get_u32(c->in + off);
          if (ml == 0 || ml > MAX_MSG) {
            dead = true;
            break;
          }
          if (c->in_len - off - 4 < ml) break;
          int r = handle(s, c, c->in + off + 4, ml);
          if (r < 0) dead = true;
          if (r > 0) changed = true;
          off += 4 + ml;
        }
        if (!dead && !c->authed && c->in_len - off > 4096) dead = true;
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
      }
      if (!dead && c->out_len > c->out_off) {
        ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (k > 0) c->out_off += (size_t)k;
        else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) dead = true;
        if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
      }
      if (dead) drop_conn(s, i);
    }
    now = now_ms();
    for (int i = 0; i < s->n_conns; i++) {
      if (changed || s->conns[i].waiting) try_wait(s, &s->conns[i], now);
      conn *c = &s->conns[i];
      if (c->out_len > c->out_off) { /* flush replies produced by waiters */
        ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (k > 0) c->out_off += (size_t)k;
        if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
      }
    }
  }
  free(pfd);
  return NULL;
}

int dp_store_listen(const char *bind_addr, int port, int *port_out) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (!bind_addr || !*bind_addr || strcmp(bind_addr, "0.0.0.0") == 0) sa.sin_addr.s_addr = htonl(INADDR_ANY);
  else if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(bind_addr, NULL, &hints, &res) != 0) {
      dp_error("store: cannot resolve address '%s'", bind_addr);
      return -1;
    }
    sa.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    dp_error("store: socket: %s", strerror(errno));
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE)
      dp_error("store: port %d on %s is already in use (pick another --master_port, or omit it to get a free one)",
               port, bind_addr ? bind_addr : "0.0.0.0");
    else dp_error("store: cannot bind %s:%d: %s", bind_addr ? bind_addr : "0.0.0.0", port, strerror(e));
    return -1;
  }
  if (listen(fd, 1024) < 0) {
    dp_error("store: listen: %s", strerror(errno));
    close(fd);
    return -1;
  }
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  if (port_out) *port_out = ntohs(sa.sin_port);
  return fd;
}

dp_store_server *dp_store_server_start(const char *bind_addr, int port, const char *token, int *port_out) {
  if (strlen(token) >= sizeof(((dp_store_server *)0)->token)) {
    dp_error("store: token too long");
    return NULL;
  }
  int fd = dp_store_listen(bind_addr, port, port_out);
  return fd < 0 ? NULL : dp_store_server_start_fd(fd, token);
}

dp_store_server *dp_store_server_start_fd(int fd, const char *token) {
  if (strlen(token) >= sizeof(((dp_store_server *)0)->token)) {
    close(fd);
    dp_error("store: token too long");
    return NULL;
  }
  dp_store_server *s = dp_xcalloc(1, sizeof *s);
  s->listen_fd = fd;
  snprintf(s->token, sizeof s->token, "%s", token);
  if (pipe2(s->wake, O_CLOEXEC) < 0) {
    dp_error("store: pipe: %s", strerror(errno));
    close(fd);
    free(s);
    return NULL;
  }
  if (pthread_create(&s->thread, NULL, serve, s) != 0) {
    dp_error("store: cannot start the server thread");
    close(fd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
    return NULL;
  }
  return s;
}

void dp_store_server_stop(dp_store_server *s) {
  if (!s) return;
  char b = 1;
  if (write(s->wake[1], &b, 1) < 0) { /* the thread also exits on close below */
  }
  pthread_join(s->thread, NULL);
  while (s->n_conns) drop_conn(s, 0);
  free(s->conns);
  close(s->listen_fd);
  close(s->wake[0]);
  close(s->wake[1]);
  for (int i = 0; i < 256; i++) {
    kv *e = s->table[i];
    while (e) {
      kv *n = e->next;
      free(e->key);
      free(e->val);
      free(e);
      e = n;
    }
  }
  free(s);
}

/* ======================= client ======================= */

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
  /* the server answers parked requests at their deadline; allow a margin
   * for it before declaring the server dead */
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms + 10000;
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

dp_store *dp_store_connect(const char *host, int port, const char *token, int timeout_ms) {
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", port);
  int64_t deadline = now_ms() + (timeout_ms < 0 ? 300000 : timeout_ms);
  int fd = -1, last_err = 0;
  int delay = 2;
  while (fd < 0) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gr = getaddrinfo(host, portstr, &hints, &res);
    if (gr == 0) {
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
        last_err = errno;
        close(fd);
        fd = -1;
      }
      freeaddrinfo(res);
    } else {
      last_err = EHOSTUNREACH;
    }
    if (fd >= 0) break;
    if (now_ms() >= deadline) {
      dp_error("store: cannot connect to %s:%d within %d ms (%s)", host, port, timeout_ms,
               gr ? gai_strerror(gr) : strerror(last_err));
      return NULL;
    }
    struct timespec ts = {0, (long)delay * 1000000L};
    nanosleep(&ts, NULL);
    if (delay < 100) delay *= 2;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  dp_store *s = dp_xcalloc(1, sizeof *s);
  s->fd = fd;
  pthread_mutex_init(&s->mu, NULL);
  snprintf(s->where, sizeof s->where, "the store at %s:%d", host, port);
  uint8_t st;
  if (roundtrip(s, CMD_HELLO, (const uint8_t *)token, strlen(token), 10000, &st, NULL, NULL) || st != ST_OK) {
    dp_error("store: %s refused the connection (wrong job token?)", s->where);
    dp_store_close(s);
    return NULL;
  }
  return s;
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

int dp_store_local_addr(dp_store *s, char *buf, size_t n) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  if (getsockname(s->fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sin_family != AF_INET ||
      !inet_ntop(AF_INET, &sa.sin_addr, buf, (socklen_t)n))
    return dp_error("store: cannot read the local address of the store connection: %s", strerror(errno));
  return 0;
}
