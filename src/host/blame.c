/* Which rank failed first (see host.h, "blame.c").
 *
 * The rank that notices a failure is rarely the one that failed: a rank
 * whose peer dies, aborts the group, never arrives or closes its socket
 * fails too, and may well exit first (the failing one may be slow to exit:
 * a large heap to unmap). So the host does not blame whoever exits first.
 * Each worker whose script fails reports, before anything slow, its error
 * and the rank its process groups blamed (-1: nobody, it is its own
 * failure); see main.c. From these reports and the exits, in the order the
 * host saw them, the culprit is:
 *   1. the first rank whose failure is its own: a report that blames nobody,
 *      or a non-zero exit or a death by a signal before the host stopped the
 *      job, without a report blaming another;
 *   2. else the rank the first accusation points at, followed along the
 *      accusations of the accused (rank 0 blames 1, which blames 2: 2), a
 *      rank of another node being that node's to judge. Such a rank that
 *      neither reports nor exits within BLAME_WAIT_MS of the accusation
 *      stopped making progress (frozen, or in an endless loop) and is the
 *      culprit.
 * A culprit that reported its error but has not exited yet is given
 * EXIT_WAIT_MS before the others are stopped, so that it ends with its own
 * exit code rather than the host's SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "host/host.h"

enum { BLAME_WAIT_MS = 1000, EXIT_WAIT_MS = 3000 };

typedef struct {
  bool reported;
  int blamed; /* global rank its groups blamed, -1: none */
  char text[512];
  uint64_t report_seq;
  int64_t report_ms;
  bool exited, after_stop;
  int code, sig;
  uint64_t exit_seq;
} rank_state;

struct dp_blame {
  int first, n;
  rank_state *r;
  uint64_t seq;
  /* the first accusation seen (a local report blaming another rank, or a
   * remote rank's accusation of one of ours) */
  bool accused;
  int accused_rank, accuser;
  char accusation[512];
  int64_t accused_ms;
};

dp_blame *dp_blame_new(int first_rank, int n) {
  dp_blame *b = dp_xcalloc(1, sizeof *b);
  b->first = first_rank;
  b->n = n;
  b->r = dp_xcalloc((size_t)n, sizeof *b->r);
  return b;
}

void dp_blame_free(dp_blame *b) {
  if (!b) return;
  free(b->r);
  free(b);
}

static rank_state *local(const dp_blame *b, int rank) {
  return rank >= b->first && rank < b->first + b->n ? &b->r[rank - b->first] : NULL;
}

static void note_accusation(dp_blame *b, int accused, int accuser, const char *text, int64_t now) {
  if (b->accused) return;
  b->accused = true;
  b->accused_rank = accused;
  b->accuser = accuser;
  b->accused_ms = now;
  snprintf(b->accusation, sizeof b->accusation, "%s", text);
}

void dp_blame_report(dp_blame *b, int rank, int blamed, const char *text, int64_t now) {
  rank_state *s = local(b, rank);
  if (!s || s->reported) return;
  s->reported = true;
  s->blamed = blamed == rank ? -1 : blamed;
  s->report_seq = ++b->seq;
  s->report_ms = now;
  snprintf(s->text, sizeof s->text, "%s", text);
  if (s->blamed >= 0) note_accusation(b, s->blamed, rank, text, now);
}

void dp_blame_accused(dp_blame *b, int rank, int victim, const char *text, int64_t now) {
  if (local(b, rank)) note_accusation(b, rank, victim, text, now);
}

void dp_blame_exit(dp_blame *b, int rank, int code, int sig, bool after_stop) {
  rank_state *s = local(b, rank);
  if (!s || s->exited) return;
  s->exited = true;
  s->after_stop = after_stop;
  s->code = code;
  s->sig = sig;
  s->exit_seq = ++b->seq;
}

static bool own_failure(const rank_state *s) {
  if (s->reported) return s->blamed < 0;
  return s->exited && !s->after_stop && (s->code != 0 || s->sig != 0);
}

static uint64_t own_failure_seq(const rank_state *s) { return s->reported ? s->report_seq : s->exit_seq; }

static void signal_name(int sig, char *buf, size_t n) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev) snprintf(buf, n, "SIG%s", abbrev);
  else snprintf(buf, n, "signal %d", sig);
}

/* What a culprit of its own failure did, and the job's code. */
static void describe_own(const rank_state *s, int64_t now, dp_blame_verdict *v) {
  char sn[32];
  v->code = 1;
  if (s->exited && !s->after_stop && s->sig) {
    signal_name(s->sig, sn, sizeof sn);
    snprintf(v->why, sizeof v->why, "was killed by signal %d (%s)", s->sig, sn);
    v->code = 128 + s->sig;
  } else if (s->exited && !(s->after_stop && s->sig)) {
    snprintf(v->why, sizeof v->why, "exited with code %d", s->code);
    v->code = s->code ? s->code : 1;
  } else if (s->exited) {
    signal_name(s->sig, sn, sizeof sn);
    snprintf(v->why, sizeof v->why, "failed (%s) and was stopped (%s) while it exited", s->text, sn);
  } else {
    snprintf(v->why, sizeof v->why, "failed (%s)", s->text);
    v->exiting = true;
    v->until_ms = s->report_ms + EXIT_WAIT_MS;
    if (now >= v->until_ms) v->exiting = false;
  }
}

void dp_blame_resolve(const dp_blame *b, int64_t now, dp_blame_verdict *v) {
  memset(v, 0, sizeof *v);
  v->rank = -1;
  /* 1. the first own failure */
  int best = -1;
  for (int i = 0; i < b->n; i++)
    if (own_failure(&b->r[i]) && (best < 0 || own_failure_seq(&b->r[i]) < own_failure_seq(&b->r[best]))) best = i;
  if (best >= 0) {
    v->state = DP_BLAME_LOCAL;
    v->rank = b->first + best;
    describe_own(&b->r[best], now, v);
    return;
  }
  if (!b->accused) return; /* DP_BLAME_NONE */
  /* 2. along the accusations */
  int x = b->accused_rank, accuser = b->accuser;
  const char *why = b->accusation;
  for (int hops = 0; hops <= b->n; hops++) {
    rank_state *s = local(b, x);
    if (!s || !s->reported || s->blamed < 0 || s->blamed == accuser) break;
    accuser = x;
    why = s->text;
    x = s->blamed;
  }
  v->rank = x;
  v->code = 1;
  rank_state *s = local(b, x);
  if (!s) {
    v->state = DP_BLAME_REMOTE;
    snprintf(v->why, sizeof v->why, "was blamed by rank %d: %s", accuser, why);
    return;
  }
  if (!s->exited && now < b->accused_ms + BLAME_WAIT_MS) {
    v->state = DP_BLAME_WAIT;
    v->until_ms = b->accused_ms + BLAME_WAIT_MS;
    return;
  }
  v->state = DP_BLAME_LOCAL;
  if (s->exited && !s->after_stop)
    snprintf(v->why, sizeof v->why, "exited with code %d while rank %d was waiting for it (%s)", s->code, accuser, why);
  else snprintf(v->why, sizeof v->why, "stopped making progress: rank %d was waiting for it (%s)", accuser, why);
}
