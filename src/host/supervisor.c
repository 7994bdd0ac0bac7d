/* Spawning and supervising the workers of this node.
 *
 * Each worker is a posix_spawn (fork + exec) of this same binary (a fresh
 * process: no inherited threads, store sockets or CUDA state) with the
 * original command line, the rank's environment and DDPLUA_WORKER_OF set, so
 * it runs the script in-process exactly as `--nproc 1` does. Its stdout and
 * stderr are pipes the host relays line by line; stdin is /dev/null.
 *
 * The workers share one process group (led by the first worker), so that
 * stopping the job also reaches any process a script started. A worker's
 * exit is noticed with waitid(WNOWAIT) and the zombie is kept until the end:
 * the group id then cannot be reused while the host may still signal it.
 * Waiting is event-driven: ppoll on the pipes, a signalfd (SIGCHLD and the
 * stop signals), the workers' failure reports and the rendezvous
 * watcher's pipe; the timeouts are the grace period between SIGTERM and
 * SIGKILL and the waits blame.c asks for.
 *
 * How a failure ends (the culprit, one verdict across nodes, the summary)
 * is verdict.c's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "host/supervisor.h"

extern char **environ;

int64_t sup_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *sup_signame(int sig, char *buf, size_t n) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev) snprintf(buf, n, "SIG%s", abbrev);
  else snprintf(buf, n, "signal %d", sig);
  return buf;
}

void dp_remove_job_shm(const char *token) {
  char prefix[128];
  int k = snprintf(prefix, sizeof prefix, "ddplua-%s-", token);
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));)
    if (strncmp(e->d_name, prefix, (size_t)k) == 0) unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
}

/* "NAME=value" -> does it set a variable named like entry `set`? */
static bool same_name(const char *env_entry, const char *set) {
  size_t n = strcspn(set, "=");
  return strncmp(env_entry, set, n) == 0 && env_entry[n] == '=';
}

/* The worker's environment: ours, minus what the job sets, plus the job's
 * variables and the rank's own. */
static char **worker_env(const dp_supervise_args *a, int rank, int local_rank) {
  enum { N_OWN = 4 };
  char own[N_OWN][64];
  snprintf(own[0], sizeof own[0], "RANK=%d", rank);
  snprintf(own[1], sizeof own[1], "LOCAL_RANK=%d", local_rank);
  snprintf(own[2], sizeof own[2], "%s=%d", DP_WORKER_ENV, (int)getpid());
  snprintf(own[3], sizeof own[3], "%s=%d", DP_REPORT_ENV, DP_REPORT_FD);
  size_t n_env = 0, n_extra = 0;
  while (environ[n_env]) n_env++;
  while (a->job_env[n_extra]) n_extra++;
  char **env = dp_xcalloc(n_env + n_extra + N_OWN + 1, sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n_env; i++) {
    bool drop = false;
    for (size_t j = 0; j < n_extra && !drop; j++) drop = same_name(environ[i], a->job_env[j]);
    for (int j = 0; j < N_OWN && !drop; j++) drop = same_name(environ[i], own[j]);
    if (!drop) env[k++] = dp_xstrdup(environ[i]);
  }
  for (size_t j = 0; j < n_extra; j++) env[k++] = dp_xstrdup(a->job_env[j]);
  for (int j = 0; j < N_OWN; j++) env[k++] = dp_xstrdup(own[j]);
  env[k] = NULL;
  return env;
}

static void free_env(char **env) {
  if (!env) return;
  for (char **p = env; *p; p++) free(*p);
  free(env);
}

/* posix_spawn: glibc creates the child with CLONE_VM|CLONE_VFORK (no copy
 * of the host's page tables) and runs exactly these steps before exec. The
 * worker sets its parent-death signal itself (see dp_host_main). */
static int spawn_one(sup *s, worker *w, int out_w, int err_w, int report_w) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w, 1); /* dup2 clears O_CLOEXEC on 1 and 2 */
  posix_spawn_file_actions_adddup2(&fa, err_w, 2);
  posix_spawn_file_actions_adddup2(&fa, report_w, DP_REPORT_FD); /* its failure report (main.c) */
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGPIPE); /* the host ignores it for itself */
  /* the stop signals are only blocked in the host; one that the host's
   * parent made ignored (nohup, a shell's background job) stays ignored */
  int stop_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (size_t i = 0; i < sizeof stop_sigs / sizeof *stop_sigs; i++) {
    struct sigaction old;
    if (sigaction(stop_sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaddset(&dfl, stop_sigs[i]);
  }
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &dfl);
  posix_spawnattr_setpgroup(&at, s->pgid); /* 0 for the first: it leads the group */
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  int rc = posix_spawn(&w->pid, s->a->self_exe, &fa, &at, s->a->argv, w->envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) return dp_error("cannot start rank %d: %s: %s", w->rank, s->a->self_exe, strerror(rc));
  return 0;
}

static int spawn_worker(sup *s, int i, int report_w) {
  worker *w = &s->w[i];
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) < 0) return dp_error("pipe: %s", strerror(errno));
  if (pipe2(err, O_CLOEXEC) < 0) {
    close(out[0]);
    close(out[1]);
    return dp_error("pipe: %s", strerror(errno));
  }
  w->envp = worker_env(s->a, w->rank, s->a->first_local_rank + i);
  int rc = spawn_one(s, w, out[1], err[1], report_w);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return -1;
  }
  if (s->pgid == 0) s->pgid = w->pid;
  w->fd[0] = out[0];
  w->fd[1] = err[0];
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  s->alive++;
  return 0;
}

static int spawn_all(sup *s) {
  int rep[2];
  if (pipe2(rep, O_CLOEXEC) < 0) return dp_error("pipe: %s", strerror(errno));
  s->report_fd = rep[0];
  fcntl(rep[0], F_SETFL, O_NONBLOCK);
  int rc = 0;
  for (int i = 0; i < s->n && !rc; i++) rc = spawn_worker(s, i, rep[1]);
  close(rep[1]); /* the workers hold the write end: the host sees EOF once they are all gone */
  return rc;
}

void sup_signal_group(sup *s, int sig) {
  if (s->pgid > 0) kill(-s->pgid, sig);
}

void sup_begin_stop(sup *s, stop_kind why) {
  if (s->stop != RUNNING) return;
  s->stop = why;
  sup_signal_group(s, SIGTERM);
  sup_signal_group(s, SIGCONT); /* a stopped (frozen) rank gets its SIGTERM now, not after the grace period */
  s->kill_at_ms = sup_now_ms() + GRACE_MS;
}

/* Notes workers that have exited (keeping their zombies). */
static void check_exits(sup *s) {
  for (int i = 0; i < s->n; i++) {
    worker *w = &s->w[i];
    if (w->exited) continue;
    siginfo_t si = {0};
    if (waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != w->pid) continue;
    w->exited = true;
    s->alive--;
    if (si.si_code == CLD_EXITED) w->code = si.si_status;
    else w->sig = si.si_status;
    dp_blame_exit(s->blame, w->rank, w->code, w->sig, s->stop != RUNNING);
  }
  verdict_decide(s);
}

/* Relays what one pipe holds now (at most one chunk, so that a chatty rank
 * does not starve the others); closes it at EOF. */
static void pump(worker *w, int stream) {
  static char buf[READ_CHUNK];
  int fd = w->fd[stream - 1];
  ssize_t k = read(fd, buf, sizeof buf);
  if (k > 0) {
    dp_relay_feed(w->relay, stream, buf, (size_t)k);
    return;
  }
  if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
  dp_relay_close(w->relay, stream);
  close(fd);
  w->fd[stream - 1] = -1;
}

static void handle_signals(sup *s, int sfd) {
  struct signalfd_siginfo si;
  bool chld = false;
  while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
    int sig = (int)si.ssi_signo;
    if (sig == SIGCHLD) {
      chld = true;
    } else if (s->stop == RUNNING) {
      s->host_signal = sig;
      char sn[32], line[200];
      snprintf(line, sizeof line, "node %d's host received %s", s->a->node_rank, sup_signame(sig, sn, sizeof sn));
      verdict_settle(s, STOP_SIGNAL, 128 + sig, line, -1);
    } else {
      /* a second Ctrl-C: no more grace */
      sup_signal_group(s, SIGKILL);
      s->kill_at_ms = -1;
    }
  }
  if (chld) check_exits(s);
}

/* Polls the open pipes (+ signalfd, report pipe, remote messages) once:
 * reports before exits, so that a rank's report counts before its death. */
static void poll_once(sup *s, int sfd, int timeout_ms) {
  int n = 0, at_sfd = -1, at_rfd = -1, at_rep = -1;
  struct pollfd pf[3 + 2 * s->n];
  int who[3 + 2 * s->n];
  int rfd = s->a->rdzv ? dp_rdzv_fd(s->a->rdzv) : -1;
  if (s->report_fd >= 0) {
    at_rep = n;
    pf[n++] = (struct pollfd){s->report_fd, POLLIN, 0};
  }
  if (sfd >= 0) {
    at_sfd = n;
    pf[n++] = (struct pollfd){sfd, POLLIN, 0};
  }
  if (rfd >= 0) {
    at_rfd = n;
    pf[n++] = (struct pollfd){rfd, POLLIN, 0};
  }
  int first_pipe = n;
  for (int i = 0; i < s->n; i++)
    for (int j = 0; j < 2; j++)
      if (s->w[i].fd[j] >= 0) {
        who[n] = i * 2 + j;
        pf[n++] = (struct pollfd){s->w[i].fd[j], POLLIN, 0};
      }
  struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
  int r = ppoll(pf, (nfds_t)n, timeout_ms < 0 ? NULL : &ts, NULL);
  if (r <= 0) return;
  for (int k = first_pipe; k < n; k++)
    if (pf[k].revents) pump(&s->w[who[k] / 2], who[k] % 2 + 1);
  if (at_rep >= 0 && pf[at_rep].revents) verdict_read_reports(s);
  if (at_rfd >= 0 && pf[at_rfd].revents) verdict_handle_remote(s);
  if (at_sfd >= 0 && pf[at_sfd].revents) handle_signals(s, sfd);
}

static bool pipes_open(sup *s) {
  for (int i = 0; i < s->n; i++)
    if (s->w[i].fd[0] >= 0 || s->w[i].fd[1] >= 0) return true;
  return false;
}

/* Whether the loop still has something to wait for: a worker, or another
 * node's verdict that is due. */
static bool waiting(sup *s) { return s->alive > 0 || verdict_due(s); }

static int next_timeout(sup *s) {
  int64_t now = sup_now_ms(), at = -1;
  int64_t cand[] = {s->kill_at_ms, s->decide_at_ms, waiting(s) && s->alive == 0 ? s->v.remote_by : -1};
  for (size_t i = 0; i < sizeof cand / sizeof *cand; i++)
    if (cand[i] >= 0 && (at < 0 || cand[i] < at)) at = cand[i];
  if (at < 0) return -1;
  return at > now ? (int)(at - now) : 0;
}

int dp_supervise(const dp_supervise_args *a) {
  sup s = {.a = a, .n = a->n_workers, .kill_at_ms = -1, .decide_at_ms = -1, .report_fd = -1};
  s.w = dp_xcalloc((size_t)s.n, sizeof *s.w);
  s.blame = dp_blame_new(a->first_rank, s.n);
  s.v.culprit = -1;
  int code = 1;
  sigset_t mask;
  sigemptyset(&mask);
  int stop_sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (size_t i = 0; i < sizeof stop_sigs / sizeof *stop_sigs; i++) sigaddset(&mask, stop_sigs[i]);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    fprintf(stderr, "ddplua: signalfd: %s\n", strerror(errno));
    goto out;
  }
  for (int i = 0; i < s.n; i++) {
    worker *w = &s.w[i];
    w->rank = a->first_rank + i;
    w->fd[0] = w->fd[1] = w->log_fd = -1;
    if (a->opts->log_dir) {
      char path[4200];
      snprintf(path, sizeof path, "%s/rank_%d.log", a->opts->log_dir, w->rank);
      w->log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (w->log_fd < 0) {
        fprintf(stderr, "ddplua: --log_dir: cannot create %s: %s\n", path, strerror(errno));
        goto out;
      }
    }
    w->relay = dp_relay_new(w->rank, w->log_fd);
  }
  if (spawn_all(&s) != 0) {
    char line[600];
    fprintf(stderr, "ddplua: %s\n", dp_errmsg());
    snprintf(line, sizeof line, "node %d's host could not start its ranks (%s)", a->node_rank, dp_errmsg());
    verdict_settle(&s, STOP_LAUNCH, 1, line, -1); /* and stop what was started */
  }
  check_exits(&s); /* a SIGCHLD that came before the signalfd existed */
  while (waiting(&s)) {
    int64_t now = sup_now_ms();
    if (s.kill_at_ms >= 0 && now >= s.kill_at_ms) {
      sup_signal_group(&s, SIGKILL);
      s.kill_at_ms = -1;
    }
    if (s.decide_at_ms >= 0 && now >= s.decide_at_ms) verdict_decide(&s);
    poll_once(&s, sfd, next_timeout(&s));
  }
  /* every worker has exited: end whatever the scripts left in the group,
   * then relay the output still in the pipes */
  sup_signal_group(&s, SIGKILL);
  int64_t drain_end = sup_now_ms() + DRAIN_MS;
  while (pipes_open(&s)) {
    int64_t left = drain_end - sup_now_ms();
    if (left <= 0) break;
    poll_once(&s, -1, (int)left);
  }
  if (s.report_fd >= 0) verdict_read_reports(&s);
  for (int i = 0; i < s.n; i++) {
    for (int j = 0; j < 2; j++)
      if (s.w[i].fd[j] >= 0) {
        dp_relay_close(s.w[i].relay, j + 1);
        close(s.w[i].fd[j]);
      }
    if (s.w[i].pid > 0) waitpid(s.w[i].pid, NULL, 0);
  }
  /* a signal that came while the last workers exited still stops the host */
  if (s.stop == RUNNING) handle_signals(&s, sfd);
  code = verdict_finish(&s);
out:
  for (int i = 0; i < s.n; i++) {
    dp_relay_free(s.w[i].relay);
    free_env(s.w[i].envp);
    if (s.w[i].log_fd >= 0) close(s.w[i].log_fd);
  }
  if (s.report_fd >= 0) close(s.report_fd);
  dp_blame_free(s.blame);
  free(s.w);
  if (sfd >= 0) close(sfd);
  return code;
}
