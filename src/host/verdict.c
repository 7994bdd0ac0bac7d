/* How a failure ends (supervisor.h): the culprit from the workers'
 * reports and exits (blame.c decides; this file acts), one verdict per job
 * (across nodes the first host to claim it in the store sends it to the
 * others, rendezvous.c), and the summary the host prints. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/supervisor.h"

/* "rank R (pid P[ on node N])" for a local rank, "rank R (on node N)" for another node's. */
static void name_rank(sup *s, int rank, char *buf, size_t n) {
  int i = rank - s->a->first_rank;
  int node = s->a->rdzv ? dp_rdzv_node_of(s->a->rdzv, rank) : s->a->node_rank;
  if (i >= 0 && i < s->n) {
    size_t k = (size_t)snprintf(buf, n, "rank %d (pid %d", rank, (int)s->w[i].pid);
    if (s->a->nnodes > 1) k += (size_t)snprintf(buf + k, n - k, " on node %d", node);
    snprintf(buf + k, n - k, ")");
  } else {
    snprintf(buf, n, "rank %d (on node %d)", rank, node);
  }
}

/* A host that lost the claim keeps its own verdict only until the
 * winner's arrives. */
void verdict_settle(sup *s, stop_kind why, int code, const char *text, int culprit) {
  if (s->v.set) return;
  s->v = (verdict){.set = true, .code = code, .culprit = culprit};
  snprintf(s->v.text, sizeof s->v.text, "%s", text);
  if (s->a->rdzv && why != STOP_REMOTE) {
    int won = dp_rdzv_claim(s->a->rdzv);
    if (won == 1) dp_rdzv_publish(s->a->rdzv, code, text);
    if (won == 0) {
      s->v.provisional = true;
      s->v.remote_by = sup_now_ms() + VERDICT_WAIT_MS;
    }
  }
  if (why == STOP_LAUNCH) {
    s->stop = STOP_LAUNCH;
    sup_signal_group(s, SIGKILL);
  } else {
    sup_begin_stop(s, why);
  }
}

void verdict_decide(sup *s) {
  s->decide_at_ms = -1;
  if (s->v.set) return;
  dp_blame_verdict bv;
  int64_t now = sup_now_ms();
  dp_blame_resolve(s->blame, now, &bv);
  char who[160], line[1200];
  switch (bv.state) {
  case DP_BLAME_NONE: return;
  case DP_BLAME_WAIT: s->decide_at_ms = bv.until_ms; return;
  case DP_BLAME_LOCAL:
    if (bv.exiting) { /* let it end with its own exit code */
      s->decide_at_ms = bv.until_ms;
      return;
    }
    name_rank(s, bv.rank, who, sizeof who);
    snprintf(line, sizeof line, "%s %s", who, bv.why);
    verdict_settle(s, STOP_FAILURE, bv.code, line, bv.rank - s->a->first_rank);
    return;
  case DP_BLAME_REMOTE:
    /* another node's rank: its host judges; ours only if it says nothing */
    if (!s->accused && s->a->rdzv) {
      s->accused = true;
      s->v.remote_by = now + VERDICT_WAIT_MS;
      dp_rdzv_accuse(s->a->rdzv, bv.rank, s->a->first_rank, bv.why);
    }
    if (s->a->rdzv && now < s->v.remote_by) {
      s->decide_at_ms = s->v.remote_by;
      return;
    }
    name_rank(s, bv.rank, who, sizeof who);
    snprintf(line, sizeof line, "%s %s", who, bv.why);
    verdict_settle(s, STOP_FAILURE, bv.code, line, -1);
    return;
  }
}

/* Reads the workers' failure reports ("<rank> <blamed> <text>" lines). */
void verdict_read_reports(sup *s) {
  for (;;) {
    ssize_t k = read(s->report_fd, s->report_buf + s->report_len, sizeof s->report_buf - 1 - s->report_len);
    if (k <= 0) {
      if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(s->report_fd); /* every worker is gone */
        s->report_fd = -1;
      }
      break;
    }
    s->report_len += (size_t)k;
    s->report_buf[s->report_len] = 0;
    char *line = s->report_buf, *nl;
    while ((nl = strchr(line, '\n'))) {
      *nl = 0;
      int rank, blamed, n = 0;
      if (sscanf(line, "%d %d %n", &rank, &blamed, &n) == 2 && n > 0)
        dp_blame_report(s->blame, rank, blamed, line + n, sup_now_ms());
      line = nl + 1;
    }
    s->report_len = strlen(line);
    memmove(s->report_buf, line, s->report_len);
    if (s->report_len == sizeof s->report_buf - 1) s->report_len = 0; /* no newline in 4 KiB: junk */
  }
  verdict_decide(s);
}

void verdict_handle_remote(sup *s) {
  dp_rdzv_msg m;
  while (dp_rdzv_next(s->a->rdzv, &m)) {
    switch (m.kind) {
    case DP_MSG_VERDICT:
      if (s->v.set && !s->v.provisional) break;
      s->v = (verdict){.set = true, .code = m.code, .culprit = -1};
      snprintf(s->v.text, sizeof s->v.text, "stopped because another node failed: %s", m.text);
      if (s->stop == RUNNING) sup_begin_stop(s, STOP_REMOTE);
      else s->stop = STOP_REMOTE;
      break;
    case DP_MSG_ACCUSE:
      dp_blame_accused(s->blame, m.rank, m.victim, m.text, sup_now_ms());
      verdict_decide(s);
      break;
    case DP_MSG_LOST:
    case DP_MSG_STORE_LOST:
      if (!s->v.set) verdict_settle(s, STOP_FAILURE, 1, m.text, -1); /* else: a consequence of the failure */
      break;
    }
  }
}

/* Whether another node's verdict is still due. */
bool verdict_due(sup *s) {
  bool want_remote = s->v.provisional || (!s->v.set && s->accused);
  return want_remote && s->a->rdzv && sup_now_ms() < s->v.remote_by;
}

int verdict_finish(sup *s) {
  if (s->stop == RUNNING && !s->v.set) {
    /* every worker exited: a failure still unjudged (an accused rank that
     * exited, a remote culprit whose node said nothing) is judged now */
    s->v.remote_by = 0;
    verdict_decide(s);
  }
  if (!s->v.set) return 0;
  char sn[32];
  if (s->stop == STOP_SIGNAL) {
    fprintf(stderr, "ddplua: received %s; stopped all %d ranks of this node\n",
            sup_signame(s->host_signal, sn, sizeof sn), s->n);
    return s->v.code;
  }
  if (s->stop == STOP_LAUNCH) return 1; /* the reason was printed when it happened */
  /* a culprit of ours that was still exiting when the verdict was made:
   * say how it ended */
  if (s->v.culprit >= 0 && s->stop != STOP_REMOTE) {
    dp_blame_verdict bv;
    dp_blame_resolve(s->blame, INT64_MAX, &bv);
    if (bv.state == DP_BLAME_LOCAL && bv.rank == s->w[s->v.culprit].rank) {
      char who[160];
      name_rank(s, bv.rank, who, sizeof who);
      snprintf(s->v.text, sizeof s->v.text, "%s %s", who, bv.why);
    }
  }
  fprintf(stderr, "ddplua: %s\n", s->v.text);
  fflush(stderr);
  if (s->v.culprit >= 0) dp_relay_print_tail(s->w[s->v.culprit].relay, 2);
  return s->v.code;
}
