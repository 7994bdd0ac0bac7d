/* The generations of a job's workers on this node (host.h, "elastic.c").
 *
 * A job normally has one generation: the workers start, the supervisor
 * (supervisor.c) runs them to the end, and its verdict is the job's. Three
 * things start another:
 *   --max_restarts N   a failure (a rank that crashed or failed, a node lost) while fewer than N
 *                      restarts were made: the summary becomes one line, "restart k of N", the host
 *                      waits --restart_delay and starts every rank again (the nodes meet again, so
 *                      the world may be smaller under --nnodes MIN:MAX, never below MIN);
 *   --nnodes MIN:MAX   a node asking to join a job with fewer than MAX nodes: the job restarts to take
 *                      it in (not counted as a failure);
 *   --watch            a run that could not be stopped in the workers (watch_runs.c): fresh workers
 *                      for the next run, with the same placement.
 * Each generation's ranks see DDPLUA_RESTART_COUNT (the generation: 0, 1, ...), and resume from the
 * last checkpoint with ddp.resume(). Every restart is one line on stderr and one in restarts.log in
 * --log_dir and in the run directory of rank 0's script (ddp.config / ddp.checkpoint_every tell the
 * host where it is). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "host/host.h"

static void append_log(const char *dir, const char *line) {
  if (!dir || !*dir) return;
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/restarts.log", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return; /* the console line is what the user sees; the log is a record */
  if (write(fd, line, strlen(line)) < 0) {}
  close(fd);
}

/* Waits the restart delay; a stop signal ends the job instead (its number). */
static int restart_delay(double seconds) {
  if (seconds <= 0) return 0;
  sigset_t set;
  sigemptyset(&set);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaddset(&set, sigs[i]);
  struct timespec end, now;
  clock_gettime(CLOCK_MONOTONIC, &end);
  end.tv_sec += (time_t)seconds;
  end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
  if (end.tv_nsec >= 1000000000L) end.tv_sec++, end.tv_nsec -= 1000000000L;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t left_ns = (int64_t)(end.tv_sec - now.tv_sec) * 1000000000L + (end.tv_nsec - now.tv_nsec);
    if (left_ns <= 0) return 0;
    struct timespec ts = {(time_t)(left_ns / 1000000000L), (long)(left_ns % 1000000000L)};
    int sig = sigtimedwait(&set, NULL, &ts);
    if (sig > 0) return sig;
    if (errno != EINTR) return 0;
  }
}

/* "restart 1 of 3 (world size 4 -> 2): <cause>", on the console and in the logs. */
static void announce(const dp_host_opts *o, const char *run_dir, int restarts, bool membership, int gen, int old_world,
                     int new_world, const char *cause) {
  char what[96], sizes[64];
  if (membership) snprintf(what, sizeof what, "restart for a joining node (not counted)");
  else snprintf(what, sizeof what, "restart %d of %d", restarts, o->max_restarts);
  if (old_world == new_world) snprintf(sizes, sizeof sizes, "world size %d", new_world);
  else snprintf(sizes, sizeof sizes, "new world size %d, was %d", new_world, old_world);
  fprintf(stderr, "ddplua: %s (%s): %s\n", what, sizes, cause);
  fflush(stderr);
  char stamp[64], line[1600];
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(line, sizeof line, "%s generation %d: %s (%s): %s\n", stamp, gen, what, sizes, cause);
  append_log(o->log_dir, line);
  if (!o->log_dir || strcmp(o->log_dir, run_dir) != 0) append_log(run_dir, line);
}

int dp_run_generations(const dp_host_opts *o, char **argv, dp_placement *p, int n_workers, dp_rdzv *rdzv,
                       int timeout_ms) {
  char exe[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k <= 0) {
    fprintf(stderr, "ddplua: cannot find its own executable: %s\n", strerror(errno));
    return 1;
  }
  exe[k] = 0;
  dp_watch_runs *watch = NULL;
  if (o->watch && !(watch = dp_watch_runs_new(o, p->node_rank == 0))) return 2;
  int restarts = 0, gen = p->restart_count, code = 0, old_world = p->world_size;
  bool meet = false, pending = false, membership = false;
  char run_dir[1024] = "", cause[1200] = "";
  for (;;) {
    if (meet) {
      dp_rdzv_place pl;
      if (dp_rdzv_generation(rdzv, gen, timeout_ms, &pl)) {
        fprintf(stderr, "ddplua: %s\nddplua: cannot restart: %s\n", cause, dp_errmsg());
        break; /* code: the failure's */
      }
      gen = pl.gen;
      p->rank = pl.rank_offset;
      p->world_size = pl.world;
      p->node_rank = pl.node_pos;
      p->nnodes = pl.n_nodes;
      meet = false;
    }
    if (pending) announce(o, run_dir, restarts, membership, gen, old_world, p->world_size, cause);
    pending = false;
    p->restart_count = gen;
    char **env = dp_host_job_env(o, p);
    dp_supervise_args a = {.opts = o,
                           .argv = argv,
                           .self_exe = exe,
                           .n_workers = n_workers,
                           .first_rank = p->rank,
                           .first_local_rank = p->local_rank,
                           .node_rank = p->node_rank,
                           .nnodes = p->nnodes,
                           .job_env = env,
                           .rdzv = rdzv,
                           .watch = watch,
                           .may_restart = restarts < o->max_restarts};
    dp_gen_result res;
    code = dp_supervise(&a, &res);
    dp_host_env_free(env);
    if (res.run_dir[0]) snprintf(run_dir, sizeof run_dir, "%s", res.run_dir);
    if (res.cold) continue; /* --watch: the same placement, fresh workers */
    if (!res.restart) break;
    membership = res.membership;
    if (!membership) restarts++;
    snprintf(cause, sizeof cause, "%s", res.cause);
    old_world = p->world_size;
    pending = true;
    if (rdzv) dp_rdzv_end_generation(rdzv);
    int sig = restart_delay(o->restart_delay_s);
    if (sig) {
      char sn[32];
      fprintf(stderr, "ddplua: %s\nddplua: received %s before restarting; stopped\n", cause,
              sigabbrev_np(sig) ? (snprintf(sn, sizeof sn, "SIG%s", sigabbrev_np(sig)), sn) : "a signal");
      code = 128 + sig;
      break;
    }
    gen++;
    meet = rdzv != NULL;
  }
  dp_watch_runs_free(watch);
  return code;
}
