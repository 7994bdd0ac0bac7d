/* Inside the supervisor (host.h has its interface): the workers and the
 * supervisor's state, shared by supervisor.c (processes: spawning, signals,
 * pipes, the event loop) and verdict.c (how a failure ends: who is blamed,
 * the verdict across nodes, the summary). */
#ifndef DP_HOST_SUPERVISOR_H
#define DP_HOST_SUPERVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "host/host.h"

enum { GRACE_MS = 3000, DRAIN_MS = 500, READ_CHUNK = 65536, VERDICT_WAIT_MS = 5000, REPORT_LINE_MAX = 4096 };

typedef struct {
  int rank;
  pid_t pid;
  int fd[2]; /* read ends of its stdout, stderr pipes; -1 once closed */
  int log_fd;
  dp_relay *relay;
  bool exited;
  int code, sig; /* exit code, or the signal that killed it */
  char **envp;
} worker;

/* How the job ends (the summary line and code are in the verdict). */
typedef enum { RUNNING, STOP_FAILURE, STOP_SIGNAL, STOP_REMOTE, STOP_LAUNCH } stop_kind;

typedef struct {
  bool set;
  int code;
  char text[1200];   /* the summary line, after "ddplua: " */
  int culprit;       /* index of the local worker whose last lines follow it, -1 */
  bool provisional;  /* another node claimed the verdict first: its own is on the way */
  int64_t remote_by; /* REMOTE culprit or provisional: wait for the other node's verdict until then */
} verdict;

typedef struct {
  const dp_supervise_args *a;
  worker *w;
  int n, alive;
  pid_t pgid;
  stop_kind stop;
  int host_signal;      /* the signal that stopped the host */
  int64_t kill_at_ms;   /* SIGKILL the group at this time; -1: not pending */
  int64_t decide_at_ms; /* resolve the blame again at this time; -1: not pending */
  dp_blame *blame;
  verdict v;
  bool accused; /* asked another node to judge its rank */
  int report_fd;
  char report_buf[REPORT_LINE_MAX];
  size_t report_len;
} sup;

int64_t sup_now_ms(void);
/* "SIGKILL", or "signal 40" */
const char *sup_signame(int sig, char *buf, size_t n);
void sup_signal_group(sup *s, int sig);
/* SIGTERM (and SIGCONT) to the group, SIGKILL after the grace period. */
void sup_begin_stop(sup *s, stop_kind why);

/* ---- verdict.c ---- */
/* Fixes the job's verdict (the first one counts; across nodes the first
 * host to claim it tells the others) and begins stopping the job. */
void verdict_settle(sup *s, stop_kind why, int code, const char *text, int culprit);
/* Asks blame.c who failed, after an event, and acts on the answer. */
void verdict_decide(sup *s);
/* The workers' failure reports waiting on the report pipe. */
void verdict_read_reports(sup *s);
/* Messages from other nodes' hosts. */
void verdict_handle_remote(sup *s);
/* Whether another node's verdict is still due (the loop waits for it). */
bool verdict_due(sup *s);
/* Prints the summary; returns the host's exit code. */
int verdict_finish(sup *s);

#endif
