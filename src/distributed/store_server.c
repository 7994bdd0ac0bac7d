/* The rendezvous store's server: one thread with a poll loop over every
 * connection (store.h has the protocol). */
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

#include "distributed/store_wire.h"

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
