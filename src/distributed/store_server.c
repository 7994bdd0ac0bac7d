/* The rendezvous store's server: one thread with a poll loop over every
 * connection (store.h has the protocol; store_commands.c the key table and
 * the commands).
 *
 * Strangers cannot starve it: a connection must authenticate (HELLO with
 * the job token) within the authentication deadline or it is closed; at
 * most max_unauthed unauthenticated connections exist at once (a new one
 * closes the oldest); an unauthenticated connection holds a buffer of a few
 * hundred bytes, not 64 KiB. When accept() fails for lack of descriptors
 * (EMFILE / ENFILE), the oldest unauthenticated connection is closed to make
 * room, or, with none to close, the listening socket rests from poll for a
 * growing pause (10 ms .. 1 s) instead of waking it at once again: the
 * thread never spins, and authenticated peers keep being served. */
#include "distributed/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"
#include "distributed/keepalive.h"
#include "distributed/store_commands.h"
#include "distributed/store_wire.h"

enum {
  UNAUTHED_BUF = 256,        /* HELLO is 5 bytes + a token of < 128 */
  READ_CHUNK = 65536,        /* authenticated reads grow the buffer by this */
  SHRINK_ABOVE = 1 << 20,    /* an idle connection's buffers above this are freed */
  ACCEPTS_PER_WAKE = 64,     /* then the connections get their turn */
  ACCEPT_PAUSE_MIN_MS = 10,  /* out of descriptors: rest the listening socket this long, */
  ACCEPT_PAUSE_MAX_MS = 1000 /* doubling up to this */
};

struct dp_store_server {
  int listen_fd, wake[2];
  char token[128];
  pthread_t thread;
  kv_table table;
  conn *conns;
  int n_conns, cap_conns, n_unauthed;
  _Atomic int auth_timeout_ms, max_unauthed;
  int64_t accept_resume_ms; /* the listening socket rests until then */
  int accept_pause_ms;
  _Atomic uint64_t accepted, expired, evicted, fd_exhausted;
  _Atomic int unauthed_now;
};

static void drop_conn(dp_store_server *s, int i, bool *changed) {
  conn *c = &s->conns[i];
  close(c->fd);
  store_clear_wait(c);
  if (c->on_close_len && store_run_on_close(&s->table, c)) *changed = true;
  free(c->on_close);
  free(c->in);
  free(c->out);
  if (!c->authed) s->n_unauthed--;
  s->conns[i] = s->conns[--s->n_conns];
  if (s->cap_conns > 64 && s->n_conns < s->cap_conns / 4) { /* a flood's worth of slots goes back */
    s->cap_conns /= 2;
    s->conns = dp_xrealloc(s->conns, sizeof *s->conns * (size_t)s->cap_conns);
  }
}

/* The unauthenticated connection accepted first, or -1. */
static int oldest_unauthed(dp_store_server *s) {
  int best = -1;
  for (int i = 0; i < s->n_conns; i++)
    if (!s->conns[i].authed && (best < 0 || s->conns[i].opened_ms < s->conns[best].opened_ms)) best = i;
  return best;
}

static bool evict_oldest_unauthed(dp_store_server *s, bool *changed) {
  int i = oldest_unauthed(s);
  if (i < 0) return false;
  atomic_fetch_add(&s->evicted, 1); /* counted before the peer can see the close */
  drop_conn(s, i, changed);
  return true;
}

/* Accepts what is waiting (a bounded number per wake-up). */
static void accept_some(dp_store_server *s, int64_t now, bool *changed) {
  for (int k = 0; k < ACCEPTS_PER_WAKE; k++) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        atomic_fetch_add(&s->fd_exhausted, 1);
        if (evict_oldest_unauthed(s, changed)) continue; /* a stranger's descriptor for the newcomer */
        s->accept_pause_ms = s->accept_pause_ms ? s->accept_pause_ms * 2 : ACCEPT_PAUSE_MIN_MS;
        if (s->accept_pause_ms > ACCEPT_PAUSE_MAX_MS) s->accept_pause_ms = ACCEPT_PAUSE_MAX_MS;
        s->accept_resume_ms = now + s->accept_pause_ms;
        return;
      }
      continue; /* ECONNABORTED, EPROTO, EINTR...: that connection is gone, the next may not be */
    }
    s->accept_pause_ms = 0;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    dp_tcp_keepalive(fd);
    if (s->n_unauthed >= atomic_load(&s->max_unauthed)) evict_oldest_unauthed(s, changed);
    if (s->n_conns == s->cap_conns) {
      s->cap_conns = s->cap_conns ? s->cap_conns * 2 : 16;
      s->conns = dp_xrealloc(s->conns, sizeof *s->conns * (size_t)s->cap_conns);
    }
    s->conns[s->n_conns++] = (conn){.fd = fd, .opened_ms = now};
    s->n_unauthed++;
    atomic_fetch_add(&s->accepted, 1);
  }
}

/* Closes unauthenticated connections past their deadline; returns the
 * next deadline among those left (-1: none). */
static int64_t expire_unauthed(dp_store_server *s, int64_t now, bool *changed) {
  int64_t next = -1, tmo = atomic_load(&s->auth_timeout_ms);
  for (int i = s->n_conns - 1; i >= 0; i--) {
    conn *c = &s->conns[i];
    if (c->authed) continue;
    int64_t due = c->opened_ms + tmo;
    if (due <= now) {
      atomic_fetch_add(&s->expired, 1);
      drop_conn(s, i, changed);
    } else if (next < 0 || due < next) {
      next = due;
    }
  }
  return next;
}

/* Reads what the socket holds; false when the peer is gone or misbehaves. */
static bool read_in(conn *c) {
  for (;;) {
    size_t room;
    if (!c->authed) { /* a fixed small buffer: junk costs little */
      if (!c->in) c->in = dp_xmalloc(c->in_cap = UNAUTHED_BUF);
      room = c->in_cap - c->in_len;
      if (room == 0) return false; /* more than HELLO without a HELLO */
    } else {
      if (c->in_cap - c->in_len < READ_CHUNK) {
        c->in_cap = c->in_cap * 2 + READ_CHUNK;
        c->in = dp_xrealloc(c->in, c->in_cap);
      }
      room = c->in_cap - c->in_len;
    }
    ssize_t k = recv(c->fd, c->in + c->in_len, room, 0);
    if (k > 0) {
      c->in_len += (size_t)k;
      if (!c->authed) return true; /* parse before reading more */
      continue;
    }
    if (k == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

/* Handles the complete messages in c->in; false to drop the connection. */
static bool handle_messages(dp_store_server *s, conn *c, bool *changed) {
  size_t off = 0;
  bool ok = true;
  while (ok && !c->closing && c->in_len - off >= 4) {
    uint32_t ml = get_u32(c->in + off);
    if (ml == 0 || ml > MAX_MSG || (!c->authed && ml > UNAUTHED_BUF - 4)) {
      ok = false;
      break;
    }
    if (c->in_len - off - 4 < ml) break;
    bool was_authed = c->authed;
    int r = store_handle(&s->table, c, s->token, c->in + off + 4, ml);
    if (r < 0) ok = false;
    if (r > 0) *changed = true;
    off += 4 + ml;
    if (!was_authed && c->authed) {
      s->n_unauthed--;
      /* from now on the buffer grows with the messages */
      uint8_t *big = dp_xmalloc(READ_CHUNK);
      memcpy(big, c->in + off, c->in_len - off);
      free(c->in);
      c->in = big;
      c->in_cap = READ_CHUNK;
      c->in_len -= off;
      off = 0;
    }
  }
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
  if (c->authed && c->in_len == 0 && c->in_cap > SHRINK_ABOVE) {
    free(c->in);
    c->in = NULL;
    c->in_cap = 0;
  }
  return ok;
}

/* Sends what c has queued; false when the peer is gone. */
static bool flush_out(conn *c) {
  if (c->out_len > c->out_off) {
    ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (k > 0) c->out_off += (size_t)k;
    else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  if (c->out_off == c->out_len) {
    c->out_off = c->out_len = 0;
    if (c->out_cap > SHRINK_ABOVE) {
      free(c->out);
      c->out = NULL;
      c->out_cap = 0;
    }
    if (c->closing) return false; /* refused: the reply is out */
  }
  return true;
}

static void *serve(void *arg) {
  dp_store_server *s = arg;
  struct pollfd *pfd = NULL;
  int cap = 0;
  bool changed = false;
  for (;;) {
    int64_t now = now_ms();
    int64_t next = expire_unauthed(s, now, &changed);
    atomic_store(&s->unauthed_now, s->n_unauthed);
    int n = s->n_conns + 2;
    if (n > cap || (cap > 128 && n < cap / 4)) {
      cap = n * 2;
      pfd = dp_xrealloc(pfd, sizeof *pfd * (size_t)cap);
    }
    bool listening = now >= s->accept_resume_ms;
    pfd[0] = (struct pollfd){listening ? s->listen_fd : -1, POLLIN, 0};
    pfd[1] = (struct pollfd){s->wake[0], POLLIN, 0};
    if (!listening && (next < 0 || s->accept_resume_ms < next)) next = s->accept_resume_ms;
    for (int i = 0; i < s->n_conns; i++) {
      conn *c = &s->conns[i];
      pfd[i + 2] = (struct pollfd){c->fd, (short)(POLLIN | (c->out_len > c->out_off ? POLLOUT : 0)), 0};
      if (c->waiting && c->deadline >= 0 && (next < 0 || c->deadline < next)) next = c->deadline;
    }
    int tmo = next < 0 ? -1 : (int)(next > now ? next - now : 0);
    if (poll(pfd, (nfds_t)n, tmo) < 0 && errno != EINTR) break;
    if (pfd[1].revents) break; /* stop requested */
    /* connections polled this round, backwards so drop_conn's swap is safe */
    for (int i = n - 3; i >= 0; i--) {
      if (i >= s->n_conns) continue;
      conn *c = &s->conns[i];
      short re = pfd[i + 2].revents;
      bool alive = !(re & (POLLERR | POLLNVAL));
      if (alive && (re & (POLLIN | POLLHUP))) alive = read_in(c) && handle_messages(s, c, &changed);
      if (alive) alive = flush_out(c);
      if (!alive) drop_conn(s, i, &changed);
    }
    /* new connections after the polled ones: accepting may close some */
    if (pfd[0].revents & POLLIN) accept_some(s, now_ms(), &changed);
    now = now_ms();
    for (int i = s->n_conns - 1; i >= 0; i--) {
      conn *c = &s->conns[i];
      if (changed || c->waiting) store_try_wait(&s->table, c, now);
      if (c->out_len > c->out_off && !flush_out(c)) drop_conn(s, i, &changed);
    }
    changed = false;
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
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); /* accept until EAGAIN */
  dp_store_server *s = dp_xcalloc(1, sizeof *s);
  s->listen_fd = fd;
  atomic_store(&s->auth_timeout_ms, DP_STORE_AUTH_TIMEOUT_MS);
  atomic_store(&s->max_unauthed, DP_STORE_MAX_UNAUTHED);
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

void dp_store_server_set_limits(dp_store_server *s, int auth_timeout_ms, int max_unauthed) {
  atomic_store(&s->auth_timeout_ms, auth_timeout_ms);
  atomic_store(&s->max_unauthed, max_unauthed < 1 ? 1 : max_unauthed);
}

void dp_store_server_get_stats(dp_store_server *s, dp_store_server_stats *st) {
  st->accepted = atomic_load(&s->accepted);
  st->expired = atomic_load(&s->expired);
  st->evicted = atomic_load(&s->evicted);
  st->fd_exhausted = atomic_load(&s->fd_exhausted);
  st->unauthed = atomic_load(&s->unauthed_now);
}

void dp_store_server_stop(dp_store_server *s) {
  if (!s) return;
  char b = 1;
  if (write(s->wake[1], &b, 1) < 0) { /* the thread also exits on close below */
  }
  pthread_join(s->thread, NULL);
  for (int i = 0; i < s->n_conns; i++) { /* the store goes: no on-close keys */
    conn *c = &s->conns[i];
    close(c->fd);
    store_clear_wait(c);
    free(c->on_close);
    free(c->in);
    free(c->out);
  }
  free(s->conns);
  close(s->listen_fd);
  close(s->wake[0]);
  close(s->wake[1]);
  store_table_free(&s->table);
  free(s);
}
