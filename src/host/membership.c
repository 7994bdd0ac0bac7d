/* Which nodes take part in a generation of the job (rdzv.h; the protocol
 * around it is in rendezvous.c). Each host sets host/<gp>node/<id> =
 * "<nproc> <max> <min> <max_restarts>" for the generation, then:
 *
 * A fixed --nnodes N: every node takes part. Each host waits for all N
 * entries (generation 0: up to --timeout, the error naming the nodes that
 * never came; later generations: a node whose host was lost fails the
 * restart at once, since the job cannot go on without it). Node i's ranks
 * follow node i-1's (2 + 4 GPUs give ranks 0-1 and 2-5).
 *
 * --nnodes MIN:MAX: node 0's host decides and publishes the list as
 * host/<gp>members = "<n> <id>:<nproc> ..." (ids ascending), and host/gen =
 * the generation. Generation 0 takes the nodes that have come when MAX have,
 * or LAST_CALL_MS after MIN have (up to --timeout); a later generation waits
 * for every node of the last one whose host was not lost, and takes in any
 * other that asked to join, up to MAX, as long as MIN remain. The other
 * hosts wait for the list; one that is not on it (it came too late, or the
 * job had MAX nodes) asks for the next generation, which node 0 starts as
 * soon as there is room (rendezvous.c's watcher sees the request).
 *
 * What another host wrote is checked before it is used (a host of another
 * version, or a token holder's junk, must not crash or wedge this one):
 * nproc in 1..DP_HOST_MAX_NPROC, node ids below MAX and ascending, the
 * world size an int, the generation a non-negative int. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "host/rdzv.h"

enum { LAST_CALL_MS = 3000, POLL_MS = 20 };

typedef struct {
  int nproc, max, min, max_restarts;
} entry;

static void set_gen(dp_rdzv *r, int gen) {
  r->gen = gen;
  if (gen == 0) r->gp[0] = 0;
  else snprintf(r->gp, sizeof r->gp, "g%d/", gen);
}

static int publish_mine(dp_rdzv *r) {
  char k[64], v[96];
  rdzv_key(r, k, sizeof k, "node", r->id);
  snprintf(v, sizeof v, "%d %d %d %d", r->nproc, r->max, r->min, r->max_restarts);
  return dp_store_set(r->store, k, v, strlen(v));
}

/* "N" or "MIN:MAX" */
static void nnodes_text(int min, int max, char *buf, size_t n) {
  if (min == max) snprintf(buf, n, "%d", max);
  else snprintf(buf, n, "%d:%d", min, max);
}

/* Reads node id's entry and checks that it was started like this one. */
static int read_entry(dp_rdzv *r, int id, entry *e, int timeout_ms) {
  char k[64];
  void *val = NULL;
  size_t len;
  rdzv_key(r, k, sizeof k, "node", id);
  if (dp_store_get(r->store, k, &val, &len, timeout_ms)) return -1;
  *e = (entry){0, 0, 0, 0};
  int got = sscanf(val, "%d %d %d %d", &e->nproc, &e->max, &e->min, &e->max_restarts);
  free(val);
  if (got < 2 || e->nproc < 1 || e->nproc > DP_HOST_MAX_NPROC)
    return dp_error("bad entry %s from node %d's host (expected \"<nproc 1..%d> <max> <min> <max_restarts>\")", k, id,
                    DP_HOST_MAX_NPROC);
  if (got < 4) e->min = e->max;
  if (e->max != r->max || e->min != r->min) {
    char theirs[32], ours[32];
    nnodes_text(e->min, e->max, theirs, sizeof theirs);
    nnodes_text(r->min, r->max, ours, sizeof ours);
    return dp_error("node %d's host was started with --nnodes %s, this one (node %d) with --nnodes %s", id, theirs,
                    r->id, ours);
  }
  if (got == 4 && e->max_restarts != r->max_restarts)
    return dp_error("node %d's host was started with --max_restarts %d, this one (node %d) with %d", id,
                    e->max_restarts, r->id, r->max_restarts);
  return 0;
}

/* The generation's nodes; -1 + dp_error when their ranks would not fit an int. */
static int set_nodes(dp_rdzv *r, int n, const int *ids, const int *nprocs) {
  int64_t world = 0;
  for (int p = 0; p < n; p++) world += nprocs[p];
  if (world > INT_MAX) return dp_error("the generation's %d nodes would run %lld ranks, too many", n, (long long)world);
  free(r->ids);
  free(r->first_rank);
  r->n = n;
  r->ids = dp_xmalloc(sizeof *r->ids * (size_t)(n ? n : 1));
  r->first_rank = dp_xcalloc((size_t)n + 1, sizeof *r->first_rank);
  r->pos = -1;
  for (int p = 0; p < n; p++) {
    r->ids[p] = ids[p];
    r->first_rank[p + 1] = r->first_rank[p] + nprocs[p];
    if (ids[p] == r->id) r->pos = p;
  }
  return 0;
}

static int fixed_members(dp_rdzv *r, int timeout_ms) {
  int n = r->max, rc = 0;
  char k[64];
  if (r->gen == 0) { /* all at once: a timeout names every node missing */
    char **keys = dp_xcalloc((size_t)n, sizeof *keys);
    for (int i = 0; i < n; i++) {
      keys[i] = dp_xmalloc(64);
      rdzv_key(r, keys[i], 64, "node", i);
    }
    rc = dp_store_wait(r->store, (const char *const *)keys, n, timeout_ms);
    for (int i = 0; i < n; i++) free(keys[i]);
    free(keys);
    if (rc && strstr(dp_errmsg(), "timed out")) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", dp_errmsg());
      return dp_error("the hosts of all %d nodes did not join within the timeout (%s)", n, msg);
    }
  } else { /* a restart: a lost node will not come back, and this job needs it */
    int64_t deadline = rdzv_now_ms() + timeout_ms;
    for (int i = 0; i < n && !rc; i++) {
      char lost[64];
      rdzv_key(r, k, sizeof k, "node", i);
      rdzv_lost_key(lost, sizeof lost, i);
      const char *keys[] = {k, lost};
      int which = -1;
      int64_t left = deadline - rdzv_now_ms();
      rc = dp_store_wait_any(r->store, keys, 2, left > 0 ? (int)left : 0, &which);
      if (!rc && which == 1)
        rc = dp_error("node %d's host was lost, and a job of --nnodes %d cannot go on without it (--nnodes MIN:%d "
                      "can)",
                      i, n, n);
    }
  }
  if (rc) return -1;
  int *ids = dp_xmalloc(sizeof(int) * (size_t)n), *nprocs = dp_xmalloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n && !rc; i++) {
    entry e;
    ids[i] = i;
    rc = read_entry(r, i, &e, timeout_ms);
    nprocs[i] = e.nproc;
  }
  if (!rc) rc = set_nodes(r, n, ids, nprocs);
  free(ids);
  free(nprocs);
  return rc;
}

static bool exists(dp_rdzv *r, const char *key) {
  const char *ks[] = {key};
  int ok = 0;
  return dp_store_check(r->store, ks, 1, &ok) == 0 && ok;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Node 0 of a MIN:MAX job: who takes part in r->gen. */
static int decide(dp_rdzv *r, int timeout_ms) {
  int max = r->max, cnt = 0, rc = 0;
  bool *joined = dp_xcalloc((size_t)max, sizeof *joined), *lost = dp_xcalloc((size_t)max, sizeof *lost);
  bool *expected = dp_xcalloc((size_t)max, sizeof *expected);
  for (int p = 0; r->gen > 0 && p < r->n; p++) expected[r->ids[p]] = true;
  int64_t deadline = rdzv_now_ms() + timeout_ms, min_at = -1;
  char k[64];
  for (;;) {
    cnt = 0;
    bool waiting_for_one = false;
    for (int id = 0; id < max; id++) {
      if (id > 0 && !lost[id]) {
        rdzv_lost_key(k, sizeof k, id);
        lost[id] = exists(r, k);
      }
      rdzv_key(r, k, sizeof k, "node", id);
      if (!joined[id]) joined[id] = exists(r, k);
      if (joined[id] && !lost[id]) cnt++;
      if (expected[id] && !joined[id] && !lost[id]) waiting_for_one = true;
    }
    int64_t now = rdzv_now_ms();
    if (cnt >= r->min && min_at < 0) min_at = now;
    bool ready = r->gen == 0 ? cnt == max || (min_at >= 0 && now - min_at >= LAST_CALL_MS) : !waiting_for_one;
    if (ready && cnt >= r->min) break;
    if (now >= deadline) {
      if (cnt >= r->min) break;
      rc = dp_error("only %d node%s of the %d that --nnodes %d:%d needs at least %s within the timeout", cnt,
                    cnt == 1 ? "" : "s", r->min, r->min, max, r->gen == 0 ? "joined" : "are left");
      break;
    }
    sleep_ms(POLL_MS);
  }
  int *ids = dp_xmalloc(sizeof(int) * (size_t)max), *nprocs = dp_xmalloc(sizeof(int) * (size_t)max), n = 0;
  for (int id = 0; id < max && !rc; id++) {
    if (!joined[id] || lost[id]) continue;
    entry e;
    rc = read_entry(r, id, &e, timeout_ms);
    ids[n] = id;
    nprocs[n++] = e.nproc;
  }
  if (!rc) rc = set_nodes(r, n, ids, nprocs);
  if (!rc) { /* " id:nproc" per node: at most 1 + 2 * 11 characters each */
    size_t cap = 16 + (size_t)n * 24, len;
    char *v = dp_xmalloc(cap), g[32];
    len = (size_t)snprintf(v, cap, "%d", n);
    for (int p = 0; p < n; p++) len += (size_t)snprintf(v + len, cap - len, " %d:%d", ids[p], nprocs[p]);
    snprintf(k, sizeof k, "host/%smembers", r->gp);
    snprintf(g, sizeof g, "%d", r->gen);
    rc = dp_store_set(r->store, k, v, len) || dp_store_set(r->store, "host/gen", g, strlen(g));
    free(v);
  }
  free(ids);
  free(nprocs);
  free(joined);
  free(lost);
  free(expected);
  return rc ? -1 : 0;
}

/* Another node of a MIN:MAX job: the list node 0 publishes; not on it,
 * the next generation's. */
static int follow(dp_rdzv *r, int timeout_ms) {
  void *val = NULL;
  size_t len;
  if (exists(r, "host/gen") && dp_store_get(r->store, "host/gen", &val, &len, 1000) == 0) {
    int current = -1; /* a host that starts while the job runs asks for the next one */
    bool ok = sscanf(val, "%d", &current) == 1 && current >= 0 && current < INT_MAX;
    free(val);
    if (!ok) return dp_error("bad entry host/gen (expected the job's generation, a non-negative integer)");
    if (current >= r->gen) set_gen(r, current + 1);
  }
  for (;;) {
    if (publish_mine(r)) return -1;
    char k[64];
    snprintf(k, sizeof k, "host/%smembers", r->gp);
    if (dp_store_get(r->store, k, &val, &len, timeout_ms)) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", dp_errmsg());
      return dp_error("node %d's host was not taken into generation %d of the job (%s)", r->id, r->gen, msg);
    }
    int n = 0, off = 0, used = 0;
    const char *p = val;
    if (sscanf(p, "%d%n", &n, &used) != 1 || n < 1 || n > r->max) n = 0; /* refused below */
    int *ids = dp_xcalloc((size_t)(n > 0 ? n : 1), sizeof *ids),
        *nprocs = dp_xcalloc((size_t)(n > 0 ? n : 1), sizeof *nprocs);
    bool in = false, ok = n > 0;
    off = used;
    for (int i = 0; i < n && ok; i++) {
      ok = sscanf(p + off, " %d:%d%n", &ids[i], &nprocs[i], &used) == 2 && ids[i] >= 0 && ids[i] < r->max &&
           (i == 0 || ids[i] > ids[i - 1]) && nprocs[i] >= 1 && nprocs[i] <= DP_HOST_MAX_NPROC;
      off += used;
      in = in || ids[i] == r->id;
    }
    free(val);
    int rc = ok && in ? set_nodes(r, n, ids, nprocs) : 0;
    free(ids);
    free(nprocs);
    if (!ok)
      return dp_error("bad entry %s from node 0's host (expected \"<n> <id>:<nproc> ...\": n of at most %d nodes, "
                      "ids ascending below %d, nproc 1..%d)",
                      k, r->max, r->max, DP_HOST_MAX_NPROC);
    if (rc) return -1;
    if (in) return 0;
    if (r->gen == INT_MAX) return dp_error("node %d's host was in none of the job's generations", r->id);
    set_gen(r, r->gen + 1);
  }
}

int rdzv_members(dp_rdzv *r, int timeout_ms) {
  if (r->min == r->max) return publish_mine(r) ? -1 : fixed_members(r, timeout_ms);
  if (r->id != 0) return follow(r, timeout_ms);
  return publish_mine(r) ? -1 : decide(r, timeout_ms);
}
