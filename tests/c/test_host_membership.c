/* The nodes' rendezvous (src/host/rendezvous.c, membership.c) against what
 * another host may have written to the store: a forger holding the job
 * token sets junk where node 0's host publishes the members of a
 * generation (host/members, host/gen) or where a node publishes its entry
 * (host/node/<id>). Each must be refused with an error naming the key, not
 * taken as a world of overflowing ranks, unknown node ids or a list out of
 * order. The well-formed entries next to them are accepted with the ranks
 * they describe; a job of 1000 nodes gets all 1000 into the list node 0
 * publishes; junk in a node's mailbox is skipped by its watcher, which
 * still delivers the next real message (its text cut to fit). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "distributed/store.h"
#include "host/host.h"
#include "test_util.h"

static const char *token = "membership-test-token-0123456789";

typedef struct {
  dp_store_server *server;
  dp_store *forger;
  int port;
} job;

static job start_job(void) {
  job j = {0};
  j.server = dp_store_server_start("127.0.0.1", 0, token, &j.port);
  CHECK(j.server != NULL);
  j.forger = dp_store_connect("127.0.0.1", j.port, token, 5000);
  CHECK(j.forger != NULL);
  return j;
}

static void end_job(job *j) {
  dp_store_close(j->forger);
  dp_store_server_stop(j->server);
}

static void put(job *j, const char *key, const char *val) {
  CHECK(dp_store_set(j->forger, key, val, strlen(val)) == 0);
}

/* Node `id` of a MIN:MAX job (one rank) meets generation 0; the result, and
 * dp_errmsg() containing `want` when it fails. */
static int meet(job *j, int id, int min, int max, const char *want, dp_rdzv_place *pl) {
  dp_rdzv *r = dp_rdzv_join("127.0.0.1", j->port, token, id, min, max, 1, 0, 5000);
  CHECK(r != NULL);
  if (!r) return -1;
  int rc = dp_rdzv_generation(r, 0, 2000, pl);
  if (rc != 0 && want && !strstr(dp_errmsg(), want)) {
    fprintf(stderr, "expected an error with \"%s\", got \"%s\"\n", want, dp_errmsg());
    test_failures++;
  }
  dp_rdzv_finish(r, rc ? 1 : 0, 100);
  return rc;
}

/* Node 1 of a 1:2 job reads the members node 0's host published. */
static void follower_refuses(const char *members) {
  job j = start_job();
  put(&j, "host/members", members);
  dp_rdzv_place pl;
  int rc = meet(&j, 1, 1, 2, "bad entry host/members", &pl);
  if (rc == 0) fprintf(stderr, "members \"%s\" were accepted (world %d)\n", members, pl.world);
  CHECK(rc != 0);
  end_job(&j);
}

static void follower_accepts(const char *members, int rank_offset, int world, int n_nodes) {
  job j = start_job();
  put(&j, "host/members", members);
  dp_rdzv_place pl = {0};
  CHECK(meet(&j, 1, 1, 2, NULL, &pl) == 0);
  CHECK(pl.rank_offset == rank_offset);
  CHECK(pl.world == world);
  CHECK(pl.n_nodes == n_nodes);
  end_job(&j);
}

/* Node 0 reads node 1's entry (a MIN:MAX job, and a fixed one). */
static void node0_refuses(int min, int max, const char *entry) {
  job j = start_job();
  put(&j, "host/node/1", entry);
  dp_rdzv_place pl;
  int rc = meet(&j, 0, min, max, "bad entry host/node/1", &pl);
  if (rc == 0) fprintf(stderr, "entry \"%s\" was accepted (world %d)\n", entry, pl.world);
  CHECK(rc != 0);
  end_job(&j);
}

/* Node 0 of a 1:1000 job whose other 999 nodes have published entries:
 * every one of them is in the member list (it once went through a fixed
 * 4 KiB buffer and lost the nodes past it). */
static void many_nodes_listed(void) {
  enum { NODES = 1000 };
  job j = start_job();
  char k[64], v[64];
  for (int id = 1; id < NODES; id++) {
    snprintf(k, sizeof k, "host/node/%d", id);
    snprintf(v, sizeof v, "1 %d 1 0", NODES);
    put(&j, k, v);
    snprintf(k, sizeof k, "host/done/%d", id);
    put(&j, k, "0");
  }
  dp_rdzv *r = dp_rdzv_join("127.0.0.1", j.port, token, 0, 1, NODES, 1, 0, 5000);
  CHECK(r != NULL);
  dp_rdzv_place pl = {0};
  CHECK(dp_rdzv_generation(r, 0, 5000, &pl) == 0);
  CHECK(pl.world == NODES && pl.n_nodes == NODES && pl.rank_offset == 0);
  void *val = NULL;
  size_t len = 0;
  CHECK(dp_store_get(j.forger, "host/members", &val, &len, 1000) == 0);
  int n = 0, used = 0, listed = 0, id = -1, nproc = 0;
  const char *p = val;
  CHECK(val && sscanf(p, "%d%n", &n, &used) == 1 && n == NODES);
  for (p += used; val && sscanf(p, " %d:%d%n", &id, &nproc, &used) == 2; p += used)
    listed += id == listed && nproc == 1;
  if (listed != NODES) fprintf(stderr, "host/members lists %d of the %d nodes in order\n", listed, NODES);
  CHECK(listed == NODES);
  free(val);
  CHECK(dp_rdzv_finish(r, 0, 2000) == 0);
  end_job(&j);
}

/* Node 0 of a one-node job: its watcher reads junk mail, then a verdict
 * whose text is longer than a message holds. */
static void watcher_skips_junk(void) {
  job j = start_job();
  dp_rdzv *r = dp_rdzv_join("127.0.0.1", j.port, token, 0, 1, 1, 1, 0, 5000);
  CHECK(r != NULL);
  dp_rdzv_place pl = {0};
  CHECK(dp_rdzv_generation(r, 0, 2000, &pl) == 0);
  const char *junk[] = {"junk", "V", "V x y", "A 1", "R", "R 0 x", "R 2147483647 x", "", "E", "E!"};
  int seq = 1;
  char k[64];
  for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
    snprintf(k, sizeof k, "host/mail/0/%d", seq++);
    put(&j, k, junk[i]);
  }
  char *big = malloc(8000);
  memset(big, 'x', 7999);
  big[7999] = 0;
  memcpy(big, "V 7 1 ", 6);
  snprintf(k, sizeof k, "host/mail/0/%d", seq++);
  put(&j, k, big);
  free(big);
  struct pollfd pf = {.fd = dp_rdzv_fd(r), .events = POLLIN};
  CHECK(poll(&pf, 1, 5000) == 1);
  dp_rdzv_msg m;
  CHECK(dp_rdzv_next(r, &m));
  CHECK(m.kind == DP_MSG_VERDICT && m.code == 7 && m.final && !m.membership);
  CHECK(strlen(m.text) == sizeof m.text - 1 && m.text[0] == 'x');
  CHECK(!dp_rdzv_next(r, &m)); /* the junk was no message */
  CHECK(dp_rdzv_finish(r, 0, 100) == 0);
  end_job(&j);
}

int main(void) {
  /* a rank count past any int once added up, a node id the job cannot have, ids out of order
   * or repeated, a node count above MAX, none, or more than listed, and plain junk */
  follower_refuses("2 0:1 1:2147483647");
  follower_refuses("2 0:70000 1:1");
  follower_refuses("2 0:0 1:1");
  follower_refuses("2 0:1 5:1");
  follower_refuses("2 0:1 -1:1");
  follower_refuses("2 1:1 0:1");
  follower_refuses("2 1:1 1:1");
  follower_refuses("3 0:1 1:1 2:1");
  follower_refuses("2147483647 0:1 1:1");
  follower_refuses("0");
  follower_refuses("2 0:1");
  follower_refuses("two");
  follower_accepts("2 0:3 1:1", 3, 4, 2);
  follower_accepts("1 1:1", 0, 1, 1);

  /* a generation number that cannot be moved on from */
  job j = start_job();
  put(&j, "host/gen", "2147483647");
  dp_rdzv_place pl;
  CHECK(meet(&j, 1, 1, 2, "bad entry host/gen", &pl) != 0);
  end_job(&j);
  /* the last generation there is, and this node not in it */
  j = start_job();
  put(&j, "host/gen", "2147483646");
  put(&j, "host/g2147483647/members", "1 0:1");
  CHECK(meet(&j, 1, 1, 2, "in none of the job's generations", &pl) != 0);
  end_job(&j);

  /* node entries: too many ranks, none, junk; in a MIN:MAX job and in a fixed one */
  node0_refuses(1, 2, "2147483647 2 1 0");
  node0_refuses(1, 2, "70000 2 1 0");
  node0_refuses(2, 2, "2147483647 2 2 0");
  node0_refuses(2, 2, "0 2 2 0");
  node0_refuses(2, 2, "x");

  many_nodes_listed();
  watcher_skips_junk();
  TEST_DONE();
}
