/* Multi-node agreement between the nodes' hosts, through the store that
 * node 0's host serves (keys under "host/", apart from the ranks' keys).
 *
 * Protocol (node r of N, with nproc_r processes):
 *   1. connect to MASTER_ADDR:MASTER_PORT with the job token (retrying until the deadline: node 0 may
 *      start later);
 *   2. add("host/claim/<r>", 1) must return 1, else two hosts were given the same --node_rank;
 *   3. set("host/node/<r>", "<nproc_r> <N>");
 *   4. wait for host/node/0 .. host/node/<N-1> (deadline --timeout; the error lists the nodes missing),
 *      read them all, check every node has the same N; then
 *      WORLD_SIZE = sum of nproc_i, and node r's ranks are offset_r = sum_{i<r} nproc_i .. + nproc_r - 1,
 *      so node r's ranks follow node r-1's (the seed's 2 + 4 GPUs give ranks 0-1 and 2-5);
 *   5. while the workers run, a watcher thread blocks on get("host/stop/<r>"): a host whose rank failed
 *      (or that was interrupted) sets host/stop/<i> = "<exit code> <reason>" for every other node i, which
 *      then stops its workers and exits with that code; a host that ends normally sets its own key to ""
 *      to release its watcher;
 *   6. each host then sets host/done/<r> = "<exit code>"; node 0 waits (up to --timeout) for every
 *      node's done key before it stops serving, so the store outlives all workers, and exits with the
 *      first non-zero code among the nodes. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "host/host.h"

enum { STOPPING_WAIT_MS = 8000, WAIT_SLICE_MS = 500 };

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool stop_signal_pending(void) {
  sigset_t p;
  sigpending(&p);
  return sigismember(&p, SIGINT) || sigismember(&p, SIGTERM) || sigismember(&p, SIGHUP) || sigismember(&p, SIGQUIT);
}

struct dp_rdzv {
  dp_store *store, *watch_store;
  pthread_t watcher;
  bool watching;
  int wake[2]; /* watcher -> supervisor loop */
  int node_rank, nnodes;
  pthread_mutex_t mu;
  int stop_code;
  char stop_msg[1024];
};

static void key(char *out, size_t n, const char *what, int node) { snprintf(out, n, "host/%s/%d", what, node); }

static void *watch(void *arg) {
  dp_rdzv *r = arg;
  char k[64];
  key(k, sizeof k, "stop", r->node_rank);
  void *val = NULL;
  size_t len = 0;
  int rc = dp_store_get(r->watch_store, k, &val, &len, -1);
  pthread_mutex_lock(&r->mu);
  if (rc != 0) {
    r->stop_code = 1;
    snprintf(r->stop_msg, sizeof r->stop_msg, "lost node 0's rendezvous store (%s)", dp_errmsg());
  } else if (len > 0) {
    char *sp = strchr(val, ' ');
    r->stop_code = atoi(val);
    if (r->stop_code == 0) r->stop_code = 1;
    snprintf(r->stop_msg, sizeof r->stop_msg, "%s", sp ? sp + 1 : "another node stopped the job");
  }
  pthread_mutex_unlock(&r->mu);
  free(val);
  if (write(r->wake[1], "x", 1) < 0) { /* the loop also sees the watcher's result at the end */
  }
  return NULL;
}

static void rdzv_free(dp_rdzv *r) {
  dp_store_close(r->store);
  dp_store_close(r->watch_store);
  close(r->wake[0]);
  close(r->wake[1]);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

dp_rdzv *dp_rdzv_join(const char *addr, int port, const char *token, int node_rank, int nnodes, int nproc,
                      int timeout_ms, int *rank_offset, int *world_size) {
  dp_rdzv *r = dp_xcalloc(1, sizeof *r);
  r->node_rank = node_rank;
  r->nnodes = nnodes;
  pthread_mutex_init(&r->mu, NULL);
  r->wake[0] = r->wake[1] = -1;
  char k[64], v[64];
  int64_t claims = 0;
  r->store = dp_store_connect(addr, port, token, timeout_ms);
  if (!r->store) goto fail;
  key(k, sizeof k, "claim", node_rank);
  if (dp_store_add(r->store, k, 1, &claims)) goto fail;
  if (claims != 1) {
    dp_error("another host already joined this job as --node_rank %d", node_rank);
    goto fail;
  }
  key(k, sizeof k, "node", node_rank);
  snprintf(v, sizeof v, "%d %d", nproc, nnodes);
  if (dp_store_set(r->store, k, v, strlen(v))) goto fail;
  char **keys = dp_xcalloc((size_t)nnodes, sizeof *keys);
  for (int i = 0; i < nnodes; i++) {
    keys[i] = dp_xmalloc(32);
    key(keys[i], 32, "node", i);
  }
  int rc = dp_store_wait(r->store, (const char *const *)keys, nnodes, timeout_ms);
  int offset = 0, world = 0;
  for (int i = 0; i < nnodes && rc == 0; i++) {
    void *val;
    size_t len;
    int their_nproc = 0, their_nnodes = 0;
    if ((rc = dp_store_get(r->store, keys[i], &val, &len, timeout_ms))) break;
    if (sscanf(val, "%d %d", &their_nproc, &their_nnodes) != 2 || their_nproc < 1)
      rc = dp_error("bad entry %s", keys[i]);
    else if (their_nnodes != nnodes)
      rc = dp_error("node %d's host was started with --nnodes %d, this one (node %d) with --nnodes %d", i, their_nnodes,
                    node_rank, nnodes);
    free(val);
    if (i < node_rank) offset += their_nproc;
    world += their_nproc;
  }
  for (int i = 0; i < nnodes; i++) free(keys[i]);
  free(keys);
  if (rc) {
    if (strstr(dp_errmsg(), "timed out")) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", dp_errmsg());
      dp_error("the hosts of all %d nodes did not join within the timeout (%s)", nnodes, msg);
    }
    goto fail;
  }
  r->watch_store = dp_store_connect(addr, port, token, timeout_ms);
  if (!r->watch_store || pipe2(r->wake, O_CLOEXEC) < 0) goto fail;
  /* the watcher takes no signals: they stay with the main thread */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int started = pthread_create(&r->watcher, NULL, watch, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (started != 0) {
    dp_error("cannot start a thread");
    goto fail;
  }
  r->watching = true;
  *rank_offset = offset;
  *world_size = world;
  return r;
fail:
  rdzv_free(r);
  return NULL;
}

int dp_rdzv_stop_fd(dp_rdzv *r) { return r->wake[0]; }

int dp_rdzv_stop_reason(dp_rdzv *r, char *msg, size_t n) {
  pthread_mutex_lock(&r->mu);
  int code = r->stop_code;
  snprintf(msg, n, "%s", r->stop_msg);
  pthread_mutex_unlock(&r->mu);
  return code;
}

void dp_rdzv_stop_others(dp_rdzv *r, int code, const char *msg) {
  char k[64], v[1100];
  snprintf(v, sizeof v, "%d %s", code, msg);
  for (int i = 0; i < r->nnodes; i++) {
    if (i == r->node_rank) continue;
    key(k, sizeof k, "stop", i);
    dp_store_set(r->store, k, v, strlen(v)); /* a node that is gone needs no telling */
  }
}

int dp_rdzv_finish(dp_rdzv *r, int code, int timeout_ms) {
  char k[64], v[32];
  if (r->watching) {
    key(k, sizeof k, "stop", r->node_rank);
    pthread_mutex_lock(&r->mu);
    bool stopped = r->stop_msg[0] != 0;
    pthread_mutex_unlock(&r->mu);
    if (!stopped && dp_store_set(r->store, k, "", 0) != 0) {
      /* the store is gone: the watcher's get fails and returns by itself */
    }
    pthread_join(r->watcher, NULL);
  }
  key(k, sizeof k, "done", r->node_rank);
  snprintf(v, sizeof v, "%d", code);
  dp_store_set(r->store, k, v, strlen(v));
  if (r->node_rank == 0) {
    int64_t deadline = now_ms() + (code == 0 ? timeout_ms : STOPPING_WAIT_MS);
    for (int i = 1; i < r->nnodes; i++) {
      key(k, sizeof k, "done", i);
      void *val = NULL;
      size_t len;
      int rc;
      /* in slices, so that a Ctrl-C (blocked, for the supervisor's
       * signalfd) still ends the wait */
      do {
        int64_t left = deadline - now_ms();
        rc = dp_store_get(r->store, k, &val, &len, (int)(left < WAIT_SLICE_MS ? (left > 0 ? left : 0) : WAIT_SLICE_MS));
      } while (rc != 0 && strstr(dp_errmsg(), "timed out") && now_ms() < deadline && !stop_signal_pending());
      if (rc != 0) {
        fprintf(stderr, "ddplua: node %d's host did not report its end: %s\n", i, dp_errmsg());
        if (code == 0) code = 1;
        continue;
      }
      int theirs = atoi(val);
      free(val);
      if (code == 0 && theirs != 0) code = theirs;
    }
  }
  rdzv_free(r);
  return code;
}
