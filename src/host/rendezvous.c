/* The nodes' hosts talking to each other through the store that node 0's
 * host serves (keys under "host/", apart from the ranks' keys); which
 * nodes take part in each generation is membership.c's.
 *
 * Protocol (node id r, --nnodes MIN:MAX or N):
 *   1. connect to MASTER_ADDR:MASTER_PORT with the job token (retrying until the deadline: node 0 may
 *      start later); add("host/claim/<r>", 1) must return 1, else two hosts were given the same
 *      --node_rank (unless that node was lost: a host may take its place);
 *   2. node r (r > 0) leaves host/lost/<r> behind its connection (dp_store_on_close): if the connection
 *      drops without saying goodbye (the host was killed, its machine or network died: TCP keepalive
 *      notices that in seconds), the store sets it;
 *   3. each generation g (0; one more per restart) the nodes agree on who takes part (membership.c);
 *      its keys are under host/<gp>, gp = "" for g = 0 and "g<g>/" after, so nothing of an ended
 *      generation is mistaken for the next one's;
 *   4. while the workers run, a watcher thread waits (WAIT_ANY) for the next message in node r's
 *      mailbox, host/<gp>mail/<r>/<1, 2, ...> (a sender numbers it with add("host/<gp>mailseq/<r>")),
 *      for another member's host/lost key, or (node 0 of a MIN:MAX job with room) for a node waiting
 *      to join the next generation, and hands each to the supervisor through a pipe. Messages:
 *        "V <code> <flags> <text>"     the generation's verdict: stop, exit with <code> or restart,
 *                                      <text> names the cause; flags: 1 final (no restart), 2 a restart
 *                                      to take in a node that joins
 *        "A <rank> <victim> <text>"    rank <victim> elsewhere failed because of <rank>, one of yours
 *        "R <run> <text>"              --watch: start run <run>, <text> changed;
 *      anything else in a mailbox is skipped. The watcher also waits for host/<gp>end/<r>, which its
 *      own host sets when it is done with the generation (not a mail: mail another host numbered
 *      wrongly must not keep the watcher from seeing it);
 *      the first host to claim the verdict (add("host/<gp>verdict") returns 1) sends it to every other
 *      node, so every node names the same cause and exits (or restarts) alike;
 *   5. at the end each host sets host/<gp>done/<r> = "<exit code>", clears its on-close key and sets
 *      its end key; node 0 waits (up to --timeout) for every member's done key, or its lost key, before
 *      it stops serving, so the store outlives all workers. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "host/rdzv.h"

enum { STOPPING_WAIT_MS = 8000, WAIT_SLICE_MS = 500 };

int64_t rdzv_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool stop_signal_pending(void) {
  sigset_t p;
  sigpending(&p);
  return sigismember(&p, SIGINT) || sigismember(&p, SIGTERM) || sigismember(&p, SIGHUP) || sigismember(&p, SIGQUIT);
}

void rdzv_key(const dp_rdzv *r, char *out, size_t n, const char *what, int node) {
  snprintf(out, n, "host/%s%s/%d", r->gp, what, node);
}

void rdzv_lost_key(char *out, size_t n, int node) { snprintf(out, n, "host/lost/%d", node); }

static void push(dp_rdzv *r, const dp_rdzv_msg *m) {
  rdzv_msg *e = dp_xcalloc(1, sizeof *e);
  e->m = *m;
  pthread_mutex_lock(&r->mu);
  if (r->tail) r->tail->next = e;
  else r->head = e;
  r->tail = e;
  pthread_mutex_unlock(&r->mu);
  if (write(r->wake[1], "x", 1) < 0) { /* the supervisor also drains the queue at the end */
  }
}

static void clear_queue(dp_rdzv *r) {
  pthread_mutex_lock(&r->mu);
  for (rdzv_msg *e = r->head; e;) {
    rdzv_msg *next = e->next;
    free(e);
    e = next;
  }
  r->head = r->tail = NULL;
  pthread_mutex_unlock(&r->mu);
  char buf[256];
  while (read(r->wake[0], buf, sizeof buf) > 0) {}
}

/* "V <code> <flags> <text>", "A <rank> <victim> <text>", "R <run> <text>" -> m; false for junk. */
static bool parse_mail(const char *v, dp_rdzv_msg *m) {
  int code = 0, flags = 0, rank = -1, victim = -1, n = 0;
  memset(m, 0, sizeof *m);
  if (sscanf(v, "V %d %d %n", &code, &flags, &n) == 2 && n > 0) {
    m->kind = DP_MSG_VERDICT;
    m->code = code ? code : 1;
    m->final = flags & 1;
    m->membership = flags & 2;
  } else if (sscanf(v, "A %d %d %n", &rank, &victim, &n) == 2 && n > 0) {
    m->kind = DP_MSG_ACCUSE;
    m->rank = rank;
    m->victim = victim;
  } else if (sscanf(v, "R %d %n", &code, &n) == 1 && n > 0 && code >= 1 && code < INT_MAX) { /* one more must fit */
    m->kind = DP_MSG_RERUN;
    m->code = code;
  } else {
    return false;
  }
  snprintf(m->text, sizeof m->text, "%s", v + n);
  return true;
}

/* keys[0] is the mailbox (its number advances), keys[1] the end key, the
 * others lost keys (key_node >= 0) or joiners' keys (key_node = -1 -
 * node), each once. */
static void *watch(void *arg) {
  dp_rdzv *r = arg;
  int seq = 1;
  for (;;) {
    snprintf(r->keys[0], 64, "host/%smail/%d/%d", r->gp, r->id, seq);
    int which = -1;
    dp_rdzv_msg m = {0};
    if (dp_store_wait_any(r->watch_store, (const char *const *)r->keys, r->n_keys, -1, &which) != 0) {
      m.kind = DP_MSG_STORE_LOST;
      snprintf(m.text, sizeof m.text, "lost node 0's host, which serves the rendezvous store (%s)", dp_errmsg());
      push(r, &m);
      break;
    }
    void *val = NULL;
    size_t len = 0;
    if (dp_store_get(r->watch_store, r->keys[which], &val, &len, 1000) != 0) continue;
    if (which == 1) {
      free(val);
      break;
    }
    if (which == 0) {
      seq++;
      if (parse_mail(val, &m)) push(r, &m);
      free(val);
      continue;
    }
    int node = r->key_node[which];
    if (node >= 0) {
      m.kind = DP_MSG_LOST;
      m.node = node;
      snprintf(m.text, sizeof m.text, "%s", (char *)val);
    } else {
      m.kind = DP_MSG_JOIN;
      m.node = -1 - node;
      snprintf(m.text, sizeof m.text, "node %d's host asks to join the job", m.node);
    }
    free(val);
    push(r, &m);
    free(r->keys[which]); /* each happens once */
    r->keys[which] = r->keys[r->n_keys - 1];
    r->key_node[which] = r->key_node[r->n_keys - 1];
    r->n_keys--;
  }
  return NULL;
}

static void free_keys(dp_rdzv *r) {
  for (int i = 0; i < r->n_keys; i++) free(r->keys[i]);
  free(r->keys);
  free(r->key_node);
  r->keys = NULL;
  r->key_node = NULL;
  r->n_keys = 0;
}

static void rdzv_free(dp_rdzv *r) {
  dp_store_close(r->store);
  dp_store_close(r->watch_store);
  if (r->wake[0] >= 0) close(r->wake[0]);
  if (r->wake[1] >= 0) close(r->wake[1]);
  clear_queue(r);
  free_keys(r);
  free(r->ids);
  free(r->first_rank);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Sends text to node `to`'s mailbox of this generation. */
static int mail(dp_rdzv *r, int to, const char *text) {
  char k[64];
  int64_t seq;
  rdzv_key(r, k, sizeof k, "mailseq", to);
  if (dp_store_add(r->store, k, 1, &seq)) return -1;
  snprintf(k, sizeof k, "host/%smail/%d/%lld", r->gp, to, (long long)seq);
  return dp_store_set(r->store, k, text, strlen(text));
}

dp_rdzv *dp_rdzv_join(const char *addr, int port, const char *token, int node_rank, int nnodes_min, int nnodes_max,
                      int nproc, int max_restarts, int timeout_ms) {
  dp_rdzv *r = dp_xcalloc(1, sizeof *r);
  r->addr = addr;
  r->port = port;
  snprintf(r->token, sizeof r->token, "%s", token);
  r->id = node_rank;
  r->min = nnodes_min;
  r->max = nnodes_max;
  r->nproc = nproc;
  r->max_restarts = max_restarts;
  pthread_mutex_init(&r->mu, NULL);
  r->wake[0] = r->wake[1] = -1;
  char k[64], v[256];
  int64_t claims = 0;
  r->store = dp_store_connect(addr, port, token, timeout_ms);
  if (!r->store) goto fail;
  snprintf(k, sizeof k, "host/claim/%d", node_rank);
  if (dp_store_add(r->store, k, 1, &claims)) goto fail;
  if (claims != 1) {
    /* a node that was lost may come back (MIN:MAX): the lost key says its host is gone */
    char lost[64];
    const char *ks[] = {lost};
    int gone = 0;
    rdzv_lost_key(lost, sizeof lost, node_rank);
    if (r->min == r->max || dp_store_check(r->store, ks, 1, &gone) || !gone) {
      dp_error("another host already joined this job as --node_rank %d", node_rank);
      goto fail;
    }
    dp_store_delete(r->store, lost);
  }
  if (node_rank > 0) { /* node 0 serves the store: its loss is the store's, which every watcher notices */
    rdzv_lost_key(k, sizeof k, node_rank);
    snprintf(v, sizeof v,
             "node %d's host was lost: its connection to the store dropped (its machine or network "
             "failed, or the host was killed)",
             node_rank);
    const char *ks[] = {k}, *vs[] = {v};
    size_t ls[] = {strlen(v)};
    if (dp_store_on_close(r->store, ks, vs, ls, 1)) goto fail;
  }
  if (pipe2(r->wake, O_CLOEXEC) < 0) {
    dp_error("pipe: cannot make one");
    goto fail;
  }
  fcntl(r->wake[0], F_SETFL, O_NONBLOCK);
  return r;
fail:
  rdzv_free(r);
  return NULL;
}

static void add_key(dp_rdzv *r, int node_code, const char *text) {
  r->keys = dp_xrealloc(r->keys, sizeof *r->keys * (size_t)(r->n_keys + 1));
  r->key_node = dp_xrealloc(r->key_node, sizeof *r->key_node * (size_t)(r->n_keys + 1));
  r->keys[r->n_keys] = dp_xmalloc(64);
  snprintf(r->keys[r->n_keys], 64, "%s", text);
  r->key_node[r->n_keys++] = node_code;
}

int dp_rdzv_generation(dp_rdzv *r, int gen, int timeout_ms, dp_rdzv_place *pl) {
  r->gen = gen;
  if (gen == 0) r->gp[0] = 0;
  else snprintf(r->gp, sizeof r->gp, "g%d/", gen);
  if (rdzv_members(r, timeout_ms)) return -1; /* may move r->gen on (a node that joins later) */
  /* the watcher: the mailbox, the other members' lost keys, and on node 0 of a job with room, the
   * keys of nodes asking for the next generation */
  char k[64];
  add_key(r, 0, "");
  rdzv_key(r, k, sizeof k, "end", r->id);
  add_key(r, 0, k);
  for (int p = 0; p < r->n; p++)
    if (r->ids[p] != r->id) {
      rdzv_lost_key(k, sizeof k, r->ids[p]);
      add_key(r, r->ids[p], k);
    }
  if (r->id == 0 && r->min < r->max && r->n < r->max)
    for (int id = 1; id < r->max; id++) {
      bool member = false;
      for (int p = 0; p < r->n; p++) member = member || r->ids[p] == id;
      if (member) continue;
      snprintf(k, sizeof k, "host/g%d/node/%d", r->gen + 1, id);
      add_key(r, -1 - id, k);
    }
  if (!r->watch_store && !(r->watch_store = dp_store_connect(r->addr, r->port, r->token, timeout_ms))) return -1;
  sigset_t all, old; /* the watcher takes no signals: they stay with the main thread */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int started = pthread_create(&r->watcher, NULL, watch, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (started != 0) return dp_error("cannot start a thread");
  r->watching = true;
  pl->gen = r->gen;
  pl->rank_offset = r->first_rank[r->pos];
  pl->world = r->first_rank[r->n];
  pl->node_pos = r->pos;
  pl->n_nodes = r->n;
  return 0;
}

void dp_rdzv_end_generation(dp_rdzv *r) {
  if (r->watching) {
    char k[64];
    rdzv_key(r, k, sizeof k, "end", r->id);
    if (dp_store_set(r->store, k, "1", 1) != 0) {
      /* the store is gone: the watcher's wait fails and it returns by itself */
    }
    pthread_join(r->watcher, NULL);
    r->watching = false;
  }
  free_keys(r);
  clear_queue(r);
}

int dp_rdzv_fd(dp_rdzv *r) { return r->wake[0]; }

bool dp_rdzv_next(dp_rdzv *r, dp_rdzv_msg *m) {
  char b;
  if (read(r->wake[0], &b, 1) < 0) { /* a spurious wake-up: the queue decides */
  }
  pthread_mutex_lock(&r->mu);
  rdzv_msg *e = r->head;
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
  for (int p = 0; p < r->n; p++)
    if (rank >= r->first_rank[p] && rank < r->first_rank[p + 1]) return r->ids[p];
  return -1;
}

int dp_rdzv_claim(dp_rdzv *r) {
  int64_t n = 0;
  char k[48];
  snprintf(k, sizeof k, "host/%sverdict", r->gp);
  if (dp_store_add(r->store, k, 1, &n)) return -1;
  return n == 1;
}

static void mail_others(dp_rdzv *r, const char *text) {
  for (int p = 0; p < r->n; p++)
    if (r->ids[p] != r->id) mail(r, r->ids[p], text); /* a node that is gone needs no telling */
}

void dp_rdzv_publish(dp_rdzv *r, int code, bool final, bool membership, const char *text) {
  char v[1100];
  snprintf(v, sizeof v, "V %d %d %s", code, (final ? 1 : 0) | (membership ? 2 : 0), text);
  mail_others(r, v);
}

void dp_rdzv_accuse(dp_rdzv *r, int rank, int victim, const char *text) {
  int node = dp_rdzv_node_of(r, rank);
  if (node < 0 || node == r->id) return;
  char v[1100];
  snprintf(v, sizeof v, "A %d %d %s", rank, victim, text);
  mail(r, node, v);
}

void dp_rdzv_rerun(dp_rdzv *r, int run, const char *what) {
  char v[800];
  snprintf(v, sizeof v, "R %d %s", run, what);
  mail_others(r, v);
}

/* Waits for node i's done key (or its lost key: it will never report);
 * returns its code, or -1 after printing why it is missing. */
static int wait_done(dp_rdzv *r, int i, int64_t deadline) {
  char done[64], lost[64];
  rdzv_key(r, done, sizeof done, "done", i);
  rdzv_lost_key(lost, sizeof lost, i);
  const char *keys[] = {done, lost};
  int which = -1, rc;
  /* in slices, so that a Ctrl-C (blocked, for the supervisor's signalfd) still ends the wait */
  do {
    int64_t left = deadline - rdzv_now_ms();
    rc = dp_store_wait_any(r->store, keys, 2, (int)(left < WAIT_SLICE_MS ? (left > 0 ? left : 0) : WAIT_SLICE_MS),
                           &which);
  } while (rc != 0 && strstr(dp_errmsg(), "timed out") && rdzv_now_ms() < deadline && !stop_signal_pending());
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
  rdzv_key(r, k, sizeof k, "done", r->id);
  snprintf(v, sizeof v, "%d", code);
  dp_store_set(r->store, k, v, strlen(v));
  dp_store_on_close(r->store, NULL, NULL, NULL, 0); /* gone on purpose now */
  dp_rdzv_end_generation(r);
  if (r->id == 0) {
    int64_t deadline = rdzv_now_ms() + (code == 0 ? timeout_ms : STOPPING_WAIT_MS);
    for (int p = 0; p < r->n; p++) {
      if (r->ids[p] == r->id) continue;
      int theirs = wait_done(r, r->ids[p], deadline);
      if (code == 0 && theirs != 0) code = theirs < 0 ? 1 : theirs;
    }
  }
  rdzv_free(r);
  return code;
}
