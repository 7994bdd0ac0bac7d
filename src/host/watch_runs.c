/* The runs of a `ddplua --watch` job, as the host sees them (host.h,
 * supervisor.h). The workers (rerun.c) wait for "run <n>" on their control
 * pipes and say when run n ended; this file decides when the next run
 * starts and tells the user, one line each:
 *
 *   ddplua: --watch: run 1 of train.lua on 2 ranks; saving it or a file it requires reruns it (inotify) ...
 *   ddplua: --watch: run 1 done (2.41 s); waiting for a change
 *   ddplua: --watch: rerun 1: model.lua changed
 *   ddplua: --watch: rerun 1 failed on rank 0, 1 (the error is above); waiting for a change
 *
 * A change while a run is in progress interrupts it (DP_INTERRUPT_SIGNAL
 * to every rank still running) and the next run starts when all have
 * stopped. A rank that has not stopped INTERRUPT_GRACE_MS later (blocked
 * in C code or in a collective its peers left) is not waited for: the
 * generation is stopped and the next run starts in fresh workers (a
 * "cold" rerun: what ddp.keep held is made again), said in its header.
 *
 * Across nodes node 0's host watches the files and tells the other hosts
 * which run to start (rendezvous.c); each node runs its own copy of the
 * files, and the ranks meet in init_process_group as in any run. */
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "host/supervisor.h"

enum { INTERRUPT_GRACE_MS = 3000 };

struct dp_watch_runs {
  dp_watch *files; /* node 0's; NULL elsewhere */
  const char *script;
  int run;    /* the run in progress or last started; 0 before the first */
  bool busy;  /* `run` has not ended on every rank */
  bool *done; /* per local worker, for `run` */
  bool *failed;
  int n;
  int64_t started_ms;
  int next;             /* > 0: start this run once `run` has ended */
  char what[600];       /* why: the files that changed */
  int64_t interrupt_by; /* -1: no interrupt pending */
  bool cold;            /* the next generation starts `next` in fresh workers */
  char cold_why[200];
};

dp_watch_runs *dp_watch_runs_new(const dp_host_opts *o, bool leader) {
  dp_watch_runs *wr = dp_xcalloc(1, sizeof *wr);
  wr->script = o->script;
  wr->interrupt_by = -1;
  if (leader) {
    wr->files = dp_watch_new();
    if (dp_watch_add(wr->files, o->script) || (o->config && dp_watch_add(wr->files, o->config))) {
      fprintf(stderr, "ddplua: --watch: %s\n", dp_errmsg());
      dp_watch_runs_free(wr);
      return NULL;
    }
  }
  return wr;
}

void dp_watch_runs_free(dp_watch_runs *wr) {
  if (!wr) return;
  dp_watch_free(wr->files);
  free(wr->done);
  free(wr->failed);
  free(wr);
}

static const char *run_name(int run, char *buf, size_t n) {
  if (run == 1) snprintf(buf, n, "run 1");
  else snprintf(buf, n, "rerun %d", run - 1);
  return buf;
}

static void say(const char *fmt, ...) DP_PRINTF(1, 2);
static void say(const char *fmt, ...) {
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "ddplua: --watch: %s\n", line);
  fflush(stderr);
}

/* The script as the user would name it: relative to the current directory when below it. */
static const char *shown(const char *path) {
  static char cwd[PATH_MAX];
  size_t n = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
  if (n > 1 && strncmp(path, cwd, n) == 0 && path[n] == '/') return path + n + 1;
  return path;
}

static void start_run(sup *s, int run) {
  dp_watch_runs *wr = s->a->watch;
  if (wr->n != s->n) {
    free(wr->done);
    free(wr->failed);
    wr->n = s->n;
    wr->done = dp_xcalloc((size_t)s->n, sizeof *wr->done);
    wr->failed = dp_xcalloc((size_t)s->n, sizeof *wr->failed);
  }
  memset(wr->done, 0, sizeof *wr->done * (size_t)s->n);
  memset(wr->failed, 0, sizeof *wr->failed * (size_t)s->n);
  char name[32];
  if (run == 1) {
    if (wr->files)
      say("run 1 of %s on %d rank%s; saving it, a file it requires or the --config file reruns it (%s); Ctrl-C "
          "ends the watch",
          shown(wr->script), s->n, s->n == 1 ? "" : "s", dp_watch_method(wr->files));
    else
      say("run 1 of %s on %d rank%s; node 0's host says when to rerun it", shown(wr->script), s->n,
          s->n == 1 ? "" : "s");
  } else if (wr->cold) {
    say("%s: %s changed (in fresh ranks: %s)", run_name(run, name, sizeof name), wr->what, wr->cold_why);
  } else {
    say("%s: %s changed", run_name(run, name, sizeof name), wr->what);
  }
  wr->cold = false;
  wr->run = run;
  wr->next = 0;
  wr->busy = true;
  wr->interrupt_by = -1;
  wr->started_ms = sup_now_ms();
  if (wr->files && s->a->rdzv) dp_rdzv_rerun(s->a->rdzv, run, run == 1 ? "" : wr->what);
  char cmd[32];
  int k = snprintf(cmd, sizeof cmd, "run %d\n", run);
  for (int i = 0; i < s->n; i++)
    if (s->w[i].ctl >= 0 && write(s->w[i].ctl, cmd, (size_t)k) != k) { /* gone: its exit is being noticed */
    }
}

void watch_runs_begin(sup *s) {
  dp_watch_runs *wr = s->a->watch;
  if (!wr) return;
  if (wr->run == 0) start_run(s, 1);
  else if (wr->next > 0) start_run(s, wr->next);
}

/* A change (or node 0's word): the next run, now or once this one ended. */
static void changed(sup *s, int run, const char *what) {
  dp_watch_runs *wr = s->a->watch;
  if (wr->next > 0 && strcmp(wr->what, what) != 0) { /* another save while waiting: both are news */
    size_t k = strlen(wr->what);
    if (!strstr(wr->what, what) && k + 2 < sizeof wr->what) snprintf(wr->what + k, sizeof wr->what - k, ", %s", what);
  } else {
    snprintf(wr->what, sizeof wr->what, "%s", what);
  }
  wr->next = run;
  if (!wr->busy) {
    start_run(s, run);
    return;
  }
  if (wr->interrupt_by >= 0) return;
  char name[32];
  say("%s changed: interrupting %s", what, run_name(wr->run, name, sizeof name));
  for (int i = 0; i < s->n; i++)
    if (!wr->done[i] && !s->w[i].exited) kill(s->w[i].pid, DP_INTERRUPT_SIGNAL);
  wr->interrupt_by = sup_now_ms() + INTERRUPT_GRACE_MS;
}

static void run_ended(sup *s) {
  dp_watch_runs *wr = s->a->watch;
  wr->busy = false;
  char name[32], ranks[300] = "";
  size_t k = 0;
  int n_failed = 0;
  for (int i = 0; i < s->n; i++)
    if (wr->failed[i] && k < sizeof ranks) {
      k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%d", n_failed ? ", " : "", s->w[i].rank);
      n_failed++;
    }
  double secs = (double)(sup_now_ms() - wr->started_ms) / 1000.0;
  if (wr->next > 0) {
    start_run(s, wr->next);
    return;
  }
  if (n_failed)
    say("%s failed on rank %s (the error is above); waiting for a change", run_name(wr->run, name, 32), ranks);
  else say("%s done (%.2f s); waiting for a change", run_name(wr->run, name, sizeof name), secs);
}

void watch_runs_line(sup *s, const char *line) {
  dp_watch_runs *wr = s->a->watch;
  if (!wr) return;
  int rank = -1, run = 0, n = 0;
  char status[16];
  if (line[0] == 'F' && sscanf(line, "F %d %n", &rank, &n) == 1 && n > 0) {
    if (wr->files && line[n] == '/') dp_watch_add(wr->files, line + n); /* a file that vanished is not watched */
    return;
  }
  if (sscanf(line, "W %d %d %15s", &rank, &run, status) != 3 || run != wr->run || !wr->busy) return;
  int i = rank - s->a->first_rank;
  if (i < 0 || i >= s->n || wr->done[i]) return;
  sup_drain(s, &s->w[i]); /* its last lines before the next header */
  wr->done[i] = true;
  wr->failed[i] = strcmp(status, "ok") != 0 && strcmp(status, "interrupted") != 0;
  for (int j = 0; j < s->n; j++)
    if (!wr->done[j]) return;
  run_ended(s);
}

int watch_runs_fd(sup *s) { return s->a->watch && s->a->watch->files ? dp_watch_fd(s->a->watch->files) : -1; }

int watch_runs_timeout(sup *s, int64_t now) {
  dp_watch_runs *wr = s->a->watch;
  if (!wr || s->stop != RUNNING) return -1;
  int t = wr->files ? dp_watch_timeout(wr->files, now) : -1;
  if (wr->interrupt_by >= 0) {
    int left = wr->interrupt_by > now ? (int)(wr->interrupt_by - now) : 0;
    if (t < 0 || left < t) t = left;
  }
  return t;
}

void watch_runs_tick(sup *s, int64_t now) {
  dp_watch_runs *wr = s->a->watch;
  if (!wr || s->stop != RUNNING) return;
  char what[600];
  if (wr->files && dp_watch_check(wr->files, now, what, sizeof what))
    changed(s, wr->next ? wr->next : wr->run + 1, what);
  if (wr->busy && wr->interrupt_by >= 0 && now >= wr->interrupt_by) {
    int still = -1;
    for (int i = 0; i < s->n && still < 0; i++)
      if (!wr->done[i]) still = s->w[i].rank;
    snprintf(wr->cold_why, sizeof wr->cold_why, "rank %d had not stopped %d s after the interrupt", still,
             INTERRUPT_GRACE_MS / 1000);
    wr->cold = true;
    wr->interrupt_by = -1;
    sup_begin_stop(s, STOP_COLD);
  }
}

void watch_runs_remote(sup *s, int run, const char *what) {
  dp_watch_runs *wr = s->a->watch;
  if (!wr || s->stop != RUNNING || run <= wr->run || run <= wr->next) return;
  if (run == 1) return; /* every host starts run 1 by itself */
  changed(s, run, what);
}

void watch_runs_exit(sup *s, worker *w) {
  if (!s->a->watch || s->stop != RUNNING || w->code != 0 || w->sig != 0) return;
  say("rank %d exited (os.exit?) during run %d: the watch ends", w->rank, s->a->watch->run);
  sup_begin_stop(s, STOP_ENDED);
}
