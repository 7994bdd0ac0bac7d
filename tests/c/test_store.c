/* The rendezvous store: set/get/add/wait/check/delete, blocking get that is
 * satisfied later, timeouts naming the missing keys, token refusal, and a
 * server that survives garbage on its port; prefix deletion, wait_any and
 * on-close keys; and strangers on the port: connections that never
 * authenticate are closed at the deadline and capped, running out of file
 * descriptors does not make the server spin, and the memory that junk
 * connections took comes back (figures printed). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "distributed/store.h"
#include "test_util.h"

static int port;
static const char *token = "secret-token";

static int64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int raw_connect(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Milliseconds until the server closes fd (EOF), or -1 after limit_ms. */
static int64_t ms_until_closed(int fd, int limit_ms) {
  int64_t t0 = ms_now();
  for (;;) {
    int64_t left = limit_ms - (ms_now() - t0);
    struct pollfd pf = {fd, POLLIN, 0};
    if (left < 0 || poll(&pf, 1, (int)left) <= 0) return -1;
    char b[64];
    ssize_t k = recv(fd, b, sizeof b, 0);
    if (k <= 0) return ms_now() - t0;
  }
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

/* A child process that, once the parent writes a byte to *go, opens n
 * connections to the store (each sending one byte if `poke`) from its own
 * file-descriptor budget, writes one byte to *ready, and exits (closing
 * them) when the parent closes *go. */
static pid_t junk_child(int n, bool poke, int *ready, int *go) {
  int r[2], h[2];
  if (pipe(r) || pipe(h)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(r[0]);
    close(h[1]);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    char b;
    if (read(h[0], &b, 1) != 1) _exit(1);
    int opened = 0;
    for (int i = 0; i < n; i++) {
      int fd = raw_connect();
      if (fd < 0) break;
      opened++;
      if (poke && send(fd, "x", 1, MSG_NOSIGNAL) < 0) {}
    }
    b = opened == n ? 'y' : 'n';
    if (write(r[1], &b, 1) < 0 || read(h[0], &b, 1) < 0) {}
    _exit(0);
  }
  close(r[1]);
  close(h[0]);
  *ready = r[0];
  *go = h[1];
  return pid;
}

static bool start_child(int ready, int go) {
  char b = 'g';
  return write(go, &b, 1) == 1 && read(ready, &b, 1) == 1 && b == 'y';
}

static void end_child(pid_t pid, int ready, int hold) {
  close(hold);
  close(ready);
  waitpid(pid, NULL, 0);
}

static dp_store_server_stats stats_of(dp_store_server *srv) {
  dp_store_server_stats st;
  dp_store_server_get_stats(srv, &st);
  return st;
}

static void *late_setter(void *arg) {
  (void)arg;
  usleep(100000);
  dp_store *c = dp_store_connect("127.0.0.1", port, token, 5000);
  dp_store_set(c, "late", "here", 4);
  dp_store_close(c);
  return NULL;
}

static void send_garbage(const void *bytes, size_t n) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  if (send(fd, bytes, n, MSG_NOSIGNAL) < 0) { /* the server may already have closed it */
  }
  usleep(20000);
  close(fd);
}

static void basics(void) {
  dp_store_server *srv = dp_store_server_start("127.0.0.1", 0, token, &port);
  CHECK(srv != NULL);
  CHECK(port > 0);

  dp_store *c = dp_store_connect("127.0.0.1", port, token, 5000);
  CHECK(c != NULL);
  CHECK(dp_store_set(c, "a", "hello", 5) == 0);
  void *v;
  size_t n;
  CHECK(dp_store_get(c, "a", &v, &n, 1000) == 0);
  CHECK(n == 5 && memcmp(v, "hello", 5) == 0);
  free(v);

  int64_t r;
  CHECK(dp_store_add(c, "cnt", 3, &r) == 0 && r == 3);
  CHECK(dp_store_add(c, "cnt", -1, &r) == 0 && r == 2);

  int ok;
  const char *keys[] = {"a", "cnt", "nope"};
  CHECK(dp_store_check(c, keys, 2, &ok) == 0 && ok == 1);
  CHECK(dp_store_check(c, keys, 3, &ok) == 0 && ok == 0);

  /* a timeout names the missing key */
  CHECK(dp_store_wait(c, keys, 3, 100) != 0);
  CHECK(strstr(dp_errmsg(), "nope") != NULL);
  CHECK(strstr(dp_errmsg(), "cnt") == NULL);

  /* a get satisfied by another client later */
  pthread_t th;
  pthread_create(&th, NULL, late_setter, NULL);
  CHECK(dp_store_get(c, "late", &v, &n, 5000) == 0);
  CHECK(n == 4 && memcmp(v, "here", 4) == 0);
  free(v);
  pthread_join(th, NULL);

  CHECK(dp_store_delete(c, "a") == 0);
  CHECK(dp_store_check(c, keys, 1, &ok) == 0 && ok == 0);

  /* wrong token: refused at once, not retried until the timeout */
  int64_t t0 = ms_now();
  CHECK(dp_store_connect("127.0.0.1", port, "wrong", 5000) == NULL);
  CHECK(strstr(dp_errmsg(), "refused the job token") != NULL);
  CHECK(ms_now() - t0 < 2000);

  /* garbage: huge length, unauthenticated command, random bytes */
  send_garbage("\xff\xff\xff\xff\x02", 5);
  send_garbage("\x05\x00\x00\x00\x02zzzz", 9);
  send_garbage("GET / HTTP/1.1\r\n\r\n", 18);
  uint8_t rnd[512];
  for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (uint8_t)(i * 37 + 11);
  send_garbage(rnd, sizeof rnd);

  /* still serving the good client */
  CHECK(dp_store_set(c, "after", "1", 1) == 0);
  CHECK(dp_store_get(c, "after", &v, &n, 1000) == 0 && n == 1);
  free(v);

  /* a busy port is a clear error */
  int p2;
  CHECK(dp_store_server_start("127.0.0.1", port, token, &p2) == NULL);
  CHECK(strstr(dp_errmsg(), "already in use") != NULL);

  dp_store_close(c);
  dp_store_server_stop(srv);
}

/* delete_prefix, wait_any, and keys a dropped connection leaves behind. */
static void new_commands(void) {
  dp_store_server *srv = dp_store_server_start("127.0.0.1", 0, token, &port);
  CHECK(srv != NULL);
  dp_store *a = dp_store_connect("127.0.0.1", port, token, 5000), *b = dp_store_connect("127.0.0.1", port, token, 5000);
  CHECK(a && b);
  CHECK(dp_store_set(a, "pg1/x", "1", 1) == 0 && dp_store_set(a, "pg1/g1/y", "2", 1) == 0);
  CHECK(dp_store_set(a, "pg10/x", "3", 1) == 0);
  uint64_t n = 0;
  CHECK(dp_store_delete_prefix(a, "pg1/", &n) == 0 && n == 2);
  int ok;
  const char *gone[] = {"pg1/x", "pg1/g1/y"}, *kept[] = {"pg10/x"};
  CHECK(dp_store_check(a, gone, 1, &ok) == 0 && ok == 0);
  CHECK(dp_store_check(a, gone + 1, 1, &ok) == 0 && ok == 0);
  CHECK(dp_store_check(a, kept, 1, &ok) == 0 && ok == 1);
  /* wait_any: the first existing key, in the order given; a timeout lists them */
  const char *any[] = {"nope", "pg10/x"};
  int which = -1;
  CHECK(dp_store_wait_any(b, any, 2, 1000, &which) == 0 && which == 1);
  CHECK(dp_store_wait_any(b, any, 1, 100, &which) != 0 && strstr(dp_errmsg(), "nope"));
  /* on-close keys: set when the connection drops, not after it cleared them */
  dp_store *c = dp_store_connect("127.0.0.1", port, token, 5000);
  const char *k[] = {"lost/c"}, *v[] = {"c vanished"};
  size_t len[] = {10};
  CHECK(dp_store_on_close(c, k, v, len, 1) == 0);
  const char *waits[] = {"lost/c"};
  CHECK(dp_store_check(b, waits, 1, &ok) == 0 && ok == 0);
  int64_t t0 = ms_now();
  dp_store_close(c);
  CHECK(dp_store_wait_any(b, waits, 1, 2000, &which) == 0 && which == 0 && ms_now() - t0 < 1000);
  void *val;
  size_t vl;
  CHECK(dp_store_get(b, "lost/c", &val, &vl, 100) == 0 && vl == 10 && memcmp(val, "c vanished", 10) == 0);
  free(val);
  c = dp_store_connect("127.0.0.1", port, token, 5000);
  const char *k2[] = {"lost/c2"};
  CHECK(dp_store_on_close(c, k2, v, len, 1) == 0 && dp_store_on_close(c, NULL, NULL, NULL, 0) == 0);
  dp_store_close(c);
  usleep(200000);
  CHECK(dp_store_check(b, k2, 1, &ok) == 0 && ok == 0);
  dp_store_close(a);
  dp_store_close(b);
  dp_store_server_stop(srv);
}

/* Connections that never authenticate are closed at the deadline (also
 * one that sent half a HELLO), and capped. */
static void strangers(void) {
  dp_store_server *srv = dp_store_server_start("127.0.0.1", 0, token, &port);
  CHECK(srv != NULL);
  dp_store_server_set_limits(srv, 300, 16);
  int idle = raw_connect(), half = raw_connect();
  CHECK(idle >= 0 && half >= 0);
  CHECK(send(half, "\x11\x00\x00\x00\x01sec", 8, MSG_NOSIGNAL) == 8);
  int64_t a = ms_until_closed(idle, 3000), b = ms_until_closed(half, 3000);
  CHECK(a >= 200 && a < 2000);
  CHECK(b >= 0 && b < 2000);
  close(idle);
  close(half);
  CHECK(stats_of(srv).expired >= 2);
  /* 40 strangers at once: the oldest go, the job's client gets in at once */
  dp_store_server_set_limits(srv, 10000, 16);
  int fds[40];
  for (int i = 0; i < 40; i++) fds[i] = raw_connect();
  usleep(100000);
  int64_t t0 = ms_now();
  dp_store *c = dp_store_connect("127.0.0.1", port, token, 5000);
  CHECK(c != NULL && ms_now() - t0 < 1000);
  CHECK(c && dp_store_set(c, "k", "v", 1) == 0);
  dp_store_server_stats st = stats_of(srv);
  CHECK(st.unauthed <= 16);
  CHECK(st.evicted >= 24);
  int closed = 0;
  for (int i = 0; i < 40; i++) {
    if (fds[i] >= 0 && ms_until_closed(fds[i], 0) >= 0) closed++;
    close(fds[i]);
  }
  CHECK(closed >= 24);
  dp_store_close(c);
  dp_store_server_stop(srv);
}

/* 1500 one-byte junk connections: what they cost while open, and what
 * stays after they close (the server process's RSS). */
static void junk_memory(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  int n = rl.rlim_cur > 1700 ? 1500 : (int)rl.rlim_cur - 200;
  dp_store_server *srv = dp_store_server_start("127.0.0.1", 0, token, &port);
  CHECK(srv != NULL);
  dp_store_server_set_limits(srv, 30000, 100000);
  long before = rss_kb();
  int ready, hold;
  pid_t pid = junk_child(n, true, &ready, &hold);
  CHECK(start_child(ready, hold));
  for (int i = 0; i < 1000 && stats_of(srv).unauthed < n; i++) usleep(10000);
  CHECK(stats_of(srv).unauthed == n);
  long peak = rss_kb();
  end_child(pid, ready, hold);
  for (int i = 0; i < 1000 && stats_of(srv).unauthed > 0; i++) usleep(10000);
  CHECK(stats_of(srv).unauthed == 0);
  long after = rss_kb();
  printf("store RSS: %ld KiB before, %ld KiB with %d junk connections (+%ld), %ld KiB after they closed (+%ld)\n",
         before, peak, n, peak - before, after, after - before);
  CHECK(peak - before < 16 * 1024);
  CHECK(after - before < 4 * 1024);
  dp_store_server_stop(srv);
}

/* Out of file descriptors with every one held by the job's own clients:
 * the server rests instead of spinning on accept, and keeps serving. */
static void fd_exhaustion(void) {
  struct rlimit rl, saved;
  getrlimit(RLIMIT_NOFILE, &saved);
  rl = saved;
  rl.rlim_cur = 64;
  CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  dp_store_server *srv = dp_store_server_start("127.0.0.1", 0, token, &port);
  CHECK(srv != NULL);
  dp_store_server_set_limits(srv, 300, 128);
  int ready, hold;
  pid_t pid = junk_child(30, false, &ready, &hold); /* its pipes before the descriptors run out */
  dp_store *clients[64];
  int nc = 0;
  while (nc < 64 && (clients[nc] = dp_store_connect("127.0.0.1", port, token, 300))) nc++;
  CHECK(nc >= 10);
  CHECK(start_child(ready, hold));
  usleep(100000);
  double c0 = cpu_s();
  int64_t t0 = ms_now();
  usleep(1000000);
  double cpu = cpu_s() - c0, wall = (double)(ms_now() - t0) / 1000;
  printf("store CPU with accept() out of descriptors: %.3f s in %.2f s\n", cpu, wall);
  CHECK(cpu < 0.25 * wall);
  CHECK(stats_of(srv).fd_exhausted > 0);
  /* the job's clients are served throughout */
  void *v;
  size_t vl;
  CHECK(dp_store_set(clients[0], "still", "here", 4) == 0);
  CHECK(dp_store_get(clients[nc - 1], "still", &v, &vl, 1000) == 0 && vl == 4);
  free(v);
  /* room again: the strangers are accepted, and every one of them closed
   * (at its deadline, or for the next one's descriptor) */
  for (int i = nc / 2; i < nc; i++) dp_store_close(clients[i]);
  nc /= 2;
  dp_store_server_stats st = stats_of(srv);
  for (int i = 0; i < 300 && (st.expired + st.evicted < 30 || st.unauthed > 0); i++) {
    usleep(10000);
    st = stats_of(srv);
  }
  CHECK(st.expired + st.evicted >= 30);
  CHECK(st.unauthed == 0);
  dp_store *late = dp_store_connect("127.0.0.1", port, token, 5000);
  CHECK(late != NULL);
  dp_store_close(late);
  end_child(pid, ready, hold);
  for (int i = 0; i < nc; i++) dp_store_close(clients[i]);
  dp_store_server_stop(srv);
  setrlimit(RLIMIT_NOFILE, &saved);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  basics();
  new_commands();
  strangers();
  junk_memory();
  fd_exhaustion();
  TEST_DONE();
}
