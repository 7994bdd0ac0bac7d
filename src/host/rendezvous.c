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
 *   5. node r (r > 0) leaves host/lost/<r> behind its connection (dp_store_on_close): if the connection
 *      drops without saying goodbye (the host was killed, its machine or network died: TCP keepalive
 *      notices that in seconds), the store sets it;
 *   6. while the workers run, a watcher thread waits (WAIT_ANY) for the next message in node r's
 *      mailbox, host/mail/<r>/<1, 2, ...> (a sender numbers it with add("host/mailseq/<r>")), or for
 *      another node's host/lost key, and hands each to the supervisor through a pipe. Messages:
 *        "V <code> <text>"             the job's verdict: stop, exit with <code>, <text> names the cause
 *        "A <rank> <victim> <text>"    rank <victim> elsewhere failed because of <rank>, one of yours
 *        "E"                           this host is done (releases its own watcher);
 *      the first host to claim the verdict (add("host/verdict") returns 1) sends it to every other node,
 *      so every node names the same cause and exits with the same code;
 *   7. each host then sets host/done/<r> = "<exit code>", clears its on-close key and says "E"; node 0
 *      waits (up to --timeout) for every node's done key, or its lost key, before it stops serving, so the
 *      store outlives all workers. */
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

typedef struct msg {
  dp_rdzv_msg m;
  struct msg *next;
} msg;

struct dp_rdzv {
  dp_store *store, *watch_store;
  pthread_t watcher;
  bool watching;
  int wake[2]; /* watcher -> supervisor loop: one byte per message */
  int node_rank, nnodes;
  int *first_rank; /* nnodes + 1 entries: node i's ranks are first_rank[i] .. first_rank[i+1]-1 */
  pthread_mutex_t mu;
  msg *head, *tail;
};

static void key(char *out, size_t n, const char *what, int node) { snprintf(out, n, "host/%s/%d", what, node); }

static void push(dp_rdzv *r, const dp_rdzv_msg *m) {
  msg *e = dp_xcalloc(1, sizeof *e);
  e->m = *m;
  pthread_mutex_lock(&r->mu);
  if (r->tail) r->tail->next = e;
  else r->head = e;
  r->tail = e;
  pthread_mutex_unlock(&r->mu);
  if (write(r->wake[1], "x", 1) < 0) { /* the supervisor also drains the queue at the end */
  }
}

/* "V <code> <text>", "A <rank> <victim> <text>" -> m; false for "E" or junk. */
static bool parse_mail(const char *v, dp_rdzv_msg *m) {
  int code = 0, rank = -1, victim = -1, n = 0;
  memset(m, 0, sizeof *m);
  if (sscanf(v, "V %d %n", &code, &n) == 1 && n > 0) {
    m->kind = DP_MSG_VERDICT;
    m->code = code ? code : 1;
  } else if (sscanf(v, "A %d %d %n", &rank, &victim, &n) == 2 && n > 0) {
    m->kind = DP_MSG_ACCUSE;
    m->rank = rank;
    m->victim = victim;
  } else {
    return false;
  }
  snprintf(m->text, sizeof m->text, "%s", v + n);
  return true;
}

static void *watch(void *arg) {
  dp_rdzv *r = arg;
  int n = r->nnodes, seq = 1;
  char **keys = dp_xcalloc((size_t)n, sizeof *keys);
  int *node_of_key = dp_xcalloc((size_t)n, sizeof *node_of_key);
  keys[0] = dp_xmalloc(64);
  int nk = 1;
  for (int i = 0; i < n; i++)
    if (i != r->node_rank) {
      keys[nk] = dp_xmalloc(64);
      key(keys[nk], 64, "lost", i);
      node_of_key[nk++] = i;
    }
  for (;;) {
    snprintf(keys[0], 64, "host/mail/%d/%d", r->node_rank, seq);
    int which = -1;
    dp_rdzv_msg m = {0};
    if (dp_store_wait_any(r->watch_store, (const char *const *)keys, nk, -1, &which) != 0) {
      m.kind = DP_MSG_STORE_LOST;
      snprintf(m.text, sizeof m.text, "lost node 0's host, which serves the rendezvous store (%s)", dp_errmsg());
      push(r, &m);
      break;
    }
    void *val = NULL;
    size_t len = 0;
    if (dp_store_get(r->watch_store, keys[which], &val, &len, 1000) != 0) continue;
    if (which == 0) {
      seq++;
      bool end = strcmp(val, "E") == 0;
      if (!end && parse_mail(val, &m)) push(r, &m);
      free(val);
      if (end) break;
      continue;
    }
    m.kind = DP_MSG_LOST;
    m.node = node_of_key[which];
    snprintf(m.text, sizeof m.text, "%s", (char *)val);
    free(val);
    push(r, &m);
    free(keys[which]); /* each node is lost once */
    keys[which] = keys[nk - 1];
    node_of_key[which] = node_of_key[nk - 1];
    nk--;
  }
  for (int i = 0; i < nk; i++) free(keys[i]);
  free(keys);
  free(node_of_key);
  return NULL;
}

static void rdzv_free(dp_rdzv *r) {
  dp_store_close(r->store);
  dp_store_close(r->watch_store);
  if (r->wake[0] >= 0) close(r->wake[0]);
  if (r->wake[1] >= 0) close(r->wake[1]);
  for (msg *e = r->head; e;) {
    msg *next = e->next;
    free(e);
    e = next;
  }
  free(r->first_rank);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Sends text to node `to`'s mailbox. */
static int mail(dp_rdzv *r, int to, const char *text) {
  char k[64];
  int64_t seq;
  key(k, sizeof k, "mailseq", to);
  if (dp_store_add(r->store, k, 1, &seq)) return -1;
  snprintf(k, sizeof k, "host/mail/%d/%lld", to, (long long)seq);
  return dp_store_set(r->store, k, text, strlen(text));
}

dp_rdzv *dp_rdzv_join(const char *addr, int port, const char *token, int node_rank, int nnodes, int nproc,
                      int timeout_ms, int *rank_offset, int *world_size) {
  dp_rdzv *r = dp_xcalloc(1, sizeof *r);
  r->node_rank = node_rank;
  r->nnodes = nnodes;
  r->first_rank = dp_xcalloc((size_t)nnodes + 1, sizeof *r->first_rank);
  pthread_mutex_init(&r->mu, NULL);
  r->wake[0] = r->wake[1] = -1;
  char k[64], v[256];
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
    r->first_rank[i + 1] = r->first_rank[i] + their_nproc;
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
  if (node_rank > 0) { /* node 0 serves the store: its loss is the store's, which every watcher notices */
    key(k, sizeof k, "lost", node_rank);
    snprintf(v, sizeof v,
             "node %d's host was lost: its connection to the store dropped (its machine or network "
             "failed, or the host was killed)",
             node_rank);
    const char *ks[] = {k}, *vs[] = {v};
    size_t ls[] = {strlen(v)};
    if (dp_store_on_close(r->store, ks, vs, ls, 1)) goto fail;
  }
  r->watch_store = dp_store_connect(addr, port, token, timeout_ms);
  if (!r->watch_store || pipe2(r->wake, O_CLOEXEC) < 0) goto fail;
  fcntl(r->wake[0], F_SETFL, O_NONBLOCK);
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
  *rank_offset = r->first_rank[node_rank];
  *world_size = r->first_rank[nnodes];
  return r;
fail:
  rdzv_free(r);
  return NULL;
}

int dp_rdzv_fd(dp_rdzv *r) { return r->wake[0]; }

bool dp_rdzv_next(dp_rdzv *r, dp_rdzv_msg *m) {
  char b;
  if (read(r->wake[0], &b, 1) < 0) { /* a spurious wake-up: the queue decides */
  }
  pthread_mutex_lock(&r->mu);
  msg *e = r->head;
  if (e) {
    r->head = e->next;
    if (!r->head) r->tail = NULL;
  }
  pthread_mutex_unlock(&r->mu);
  if (!e) return false;
  *m = e->m;
  free(e);
  return true;
}

int dp_rdzv_node_of(const dp_rdzv *r, int rank) {
  for (int i = 0; i < r->nnodes; i++)
    if (rank >= r->first_rank[i] && rank < r->first_rank[i + 1]) return i;
  return -1;
}

int dp_rdzv_claim(dp_rdzv *r) {
  int64_t n = 0;
  if (dp_store_add(r->store, "host/verdict", 1, &n)) return -1;
  return n == 1;
}

void dp_rdzv_publish(dp_rdzv *r, int code, const char *text) {
  char v[1100];
  snprintf(v, sizeof v, "V %d %s", code, text);
  for (int i = 0; i < r->nnodes; i++)
    if (i != r->node_rank) mail(r, i, v); /* a node that is gone needs no telling */
}

void dp_rdzv_accuse(dp_rdzv *r, int rank, int victim, const char *text) {
  int node = dp_rdzv_node_of(r, rank);
  if (node < 0 || node == r->node_rank) return;
  char v[1100];
  snprintf(v, sizeof v, "A %d %d %s", rank, victim, text);
  mail(r, node, v);
}

/* Waits for node i's done key (or its lost key: it will never report);
 * returns its code, or -1 after printing why it is missing. */
static int wait_done(dp_rdzv *r, int i, int64_t deadline) {
  char done[64], lost[64];
  key(done, sizeof done, "done", i);
  key(lost, sizeof lost, "lost", i);
  const char *keys[] = {done, lost};
  int which = -1, rc;
  /* in slices, so that a Ctrl-C (blocked, for the supervisor's signalfd) still ends the wait */
  do {
    int64_t left = deadline - now_ms();
    rc = dp_store_wait_any(r->store, keys, 2, (int)(left < WAIT_SLICE_MS ? (left > 0 ? left : 0) : WAIT_SLICE_MS),
                           &which);
  } while (rc != 0 && strstr(dp_errmsg(), "timed out") && now_ms() < deadline && !stop_signal_pending());
  if (rc != 0) {
    fprintf(stderr, "ddplua: node %d's host did not report its end: %s\n", i, dp_errmsg());
    return -1;
  }
  if (which == 1) return -1; /* lost: the verdict said so already */
  void *val = NULL;
  size_t len;
  if (dp_store_get(r->store, done, &val, &len, 1000)) return -1;
  int code = atoi(val);
  free(val);
  return code;
}

int dp_rdzv_finish(dp_rdzv *r, int code, int timeout_ms) {
  char k[64], v[32];
  key(k, sizeof k, "done", r->node_rank);
  snprintf(v, sizeof v, "%d", code);
  dp_store_set(r->store, k, v, strlen(v));
  dp_store_on_close(r->store, NULL, NULL, NULL, 0); /* gone on purpose now */
  if (r->watching) {
    if (mail(r, r->node_rank, "E") != 0) {
      /* the store is gone: the watcher's wait fails and it returns by itself */
    }
    pthread_join(r->watcher, NULL);
  }
  if (r->node_rank == 0) {
    int64_t deadline = now_ms() + (code == 0 ? timeout_ms : STOPPING_WAIT_MS);
    for (int i = 1; i < r->nnodes; i++) {
      int theirs = wait_done(r, i, deadline);
      if (code == 0 && theirs != 0) code = theirs < 0 ? 1 : theirs;
    }
  }
  rdzv_free(r);
  return code;
}
