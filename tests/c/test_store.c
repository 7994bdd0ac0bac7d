/* The rendezvous store: set/get/add/wait/check/delete, blocking get that is
 * satisfied later, timeouts naming the missing keys, token refusal, and a
 * server that survives garbage on its port. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"
#include "distributed/store.h"
#include "test_util.h"

static int port;
static const char *token = "secret-token";

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

int main(void) {
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

  /* wrong token: refused */
  CHECK(dp_store_connect("127.0.0.1", port, "wrong", 2000) == NULL);
  CHECK(strstr(dp_errmsg(), "refused") != NULL);

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
  TEST_DONE();
}
