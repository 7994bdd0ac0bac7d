/* The host's modes:
 *   worker      DDPLUA_WORKER_OF is set: a host exec'ed this process as one rank; run the script.
 *   scheduler   Slurm/Open MPI started this process as one rank (sched_env.c): set the torchrun
 *               variables, rank 0 serves the store in a thread, run the script in-process.
 *   single      --nproc 1 on one node (the default): a job of one rank, in-process, with the same
 *               environment a worker gets and a store served in a thread, so init_process_group{} works.
 *   launcher    --nproc N > 1 or --nnodes > 1 (or --log_dir, which needs the output relayed): serve the
 *               store (node 0), agree on ranks with the other nodes (rendezvous.c), fork/exec the workers
 *               and supervise them (supervisor.c).
 * Nothing here loads CUDA or BLAS: the workers are exec'ed before anything could. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "host/host.h"

enum { MULTI_NODE_DEFAULT_PORT = 29500 };

typedef struct {
  char **v;
  int n, cap;
} strlist;

static void env_add(strlist *l, const char *name, const char *fmt, ...) DP_PRINTF(3, 4);
static void env_add(strlist *l, const char *name, const char *fmt, ...) {
  char val[PATH_MAX + 64], entry[PATH_MAX + 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(val, sizeof val, fmt, ap);
  va_end(ap);
  snprintf(entry, sizeof entry, "%s=%s", name, val);
  if (l->n + 2 > l->cap) {
    l->cap = l->cap ? l->cap * 2 : 32;
    l->v = dp_xrealloc(l->v, sizeof *l->v * (size_t)l->cap);
  }
  l->v[l->n++] = dp_xstrdup(entry);
  l->v[l->n] = NULL;
}

static void env_free(strlist *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

/* The variables every rank of this node gets (RANK and LOCAL_RANK apart). */
static void job_env(strlist *l, const dp_host_opts *o, const dp_placement *p) {
  char tmo[32];
  dp_host_format_seconds(o->timeout_s, tmo, sizeof tmo);
  env_add(l, "WORLD_SIZE", "%d", p->world_size);
  env_add(l, "LOCAL_WORLD_SIZE", "%d", p->local_world_size);
  env_add(l, "NODE_RANK", "%d", p->node_rank);
  env_add(l, "MASTER_ADDR", "%s", p->master_addr);
  env_add(l, "MASTER_PORT", "%d", p->master_port);
  env_add(l, "DDPLUA_JOB_TOKEN", "%s", p->token);
  env_add(l, "DDPLUA_TIMEOUT", "%s", tmo);
  env_add(l, "DDPLUA_BACKEND", "%s", o->backend);
  env_add(l, "DDPLUA_NNODES", "%d", p->nnodes);
  env_add(l, "DDPLUA_LAUNCHED", "1");
  if (o->config) env_add(l, "DDPLUA_CONFIG", "%s", o->config);
  /* as torchrun: one BLAS/OpenMP thread per rank when the ranks fill the cores */
  if (p->local_world_size >= dp_host_cores()) {
    if (!getenv("OMP_NUM_THREADS")) env_add(l, "OMP_NUM_THREADS", "1");
    if (!getenv("OPENBLAS_NUM_THREADS")) env_add(l, "OPENBLAS_NUM_THREADS", "1");
  }
}

static void apply_env(const strlist *l) {
  for (int i = 0; i < l->n; i++) {
    char *eq = strchr(l->v[i], '=');
    *eq = 0;
    setenv(l->v[i], eq + 1, 1);
    *eq = '=';
  }
}

/* Starts the store with every signal blocked in its thread, so that
 * signals keep going to the main thread (or to the supervisor's signalfd). */
static dp_store_server *serve_store(const char *bind_addr, int port, const char *token, int *port_out) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  dp_store_server *s = dp_store_server_start(bind_addr, port, token, port_out);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return s;
}

/* Where node 0 listens for the other nodes: a numeric address is bound as
 * given; a host name may resolve differently on the node itself (Debian
 * maps it to 127.0.1.1), so then every interface. */
static const char *multi_node_bind_addr(const char *addr) {
  struct in_addr ia;
  return inet_pton(AF_INET, addr, &ia) == 1 ? addr : "0.0.0.0";
}

static int run_script(const dp_host_opts *o, char **argv, int argc) {
  lua_State *L = dp_host_new_state();
  if (!L) {
    fprintf(stderr, "ddplua: cannot create a Lua state\n");
    return 1;
  }
  int rc = dp_host_run_script(L, o->script, argv, o->n_pre, argv + o->args_pos, argc - o->args_pos);
  lua_close(L);
  return rc;
}

static char shm_token[80]; /* the in-process job's token, for the exit handler */
static void remove_shm_at_exit(void) { dp_remove_job_shm(shm_token); }

/* In-process rank (single, or one rank of a scheduler's job). */
static int run_in_process(const dp_host_opts *o, const dp_placement *p, bool serve, const char *bind_addr, int argc,
                          char **argv) {
  dp_placement place = *p;
  dp_store_server *srv = NULL;
  if (serve) {
    srv = serve_store(bind_addr, place.master_port, place.token, &place.master_port);
    if (!srv) {
      fprintf(stderr, "ddplua: %s\n", dp_errmsg());
      return 1;
    }
  }
  strlist env = {0};
  job_env(&env, o, &place);
  env_add(&env, "RANK", "%d", place.rank);
  env_add(&env, "LOCAL_RANK", "%d", place.local_rank);
  apply_env(&env);
  env_free(&env);
  /* the only rank on this node: its segments are ours to remove, also
   * when the script ends with os.exit */
  if (place.local_world_size == 1) {
    snprintf(shm_token, sizeof shm_token, "%s", place.token);
    atexit(remove_shm_at_exit);
  }
  int rc = run_script(o, argv, argc);
  dp_store_server_stop(srv);
  return rc;
}

static int mkdir_p(const char *path) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      *p = c;
      if (!c) break;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* Blocks the signals the supervisor takes from a signalfd. The threads
 * started before (store server, rendezvous watcher) block every signal
 * themselves; until here a Ctrl-C simply ends the host (no worker yet). */
static void block_supervisor_signals(void) {
  sigset_t set;
  sigemptyset(&set);
  int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaddset(&set, sigs[i]);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the host before it stops the workers */
}

/* Fork/exec and supervise this node's workers. `p` describes the first of
 * them (rank, local_rank) and the job; `n_workers` follow it. */
static int supervise(const dp_host_opts *o, dp_placement *p, int n_workers, char **argv, dp_rdzv *rdzv) {
  char exe[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k <= 0) {
    fprintf(stderr, "ddplua: cannot find its own executable: %s\n", strerror(errno));
    return 1;
  }
  exe[k] = 0;
  strlist env = {0};
  job_env(&env, o, p);
  env_add(&env, "DDPLUA_RANK_PREFIX", "1");
  dp_supervise_args a = {.opts = o,
                         .argv = argv,
                         .self_exe = exe,
                         .n_workers = n_workers,
                         .first_rank = p->rank,
                         .first_local_rank = p->local_rank,
                         .node_rank = p->node_rank,
                         .nnodes = p->nnodes,
                         .job_env = env.v,
                         .rdzv = rdzv};
  block_supervisor_signals();
  int rc = dp_supervise(&a);
  env_free(&env);
  return rc;
}

static int run_launcher(const dp_host_opts *o, char **argv) {
  bool multi = o->nnodes > 1;
  dp_placement p = {.nnodes = o->nnodes, .node_rank = o->node_rank, .local_world_size = o->nproc};
  snprintf(p.master_addr, sizeof p.master_addr, "%s", o->master_addr ? o->master_addr : "127.0.0.1");
  p.master_port = o->master_port ? o->master_port : multi ? MULTI_NODE_DEFAULT_PORT : 0;
  if (multi) {
    /* every node's host must hold the same secret */
    char who[64], seed[400];
    snprintf(who, sizeof who, "a job across %d nodes", p.nnodes);
    snprintf(seed, sizeof seed, "nodes of %s:%d", p.master_addr, p.master_port);
    if (dp_job_token(o, who, seed, true, p.token, sizeof p.token)) {
      fprintf(stderr, "ddplua: %s\n", dp_errmsg());
      return 2;
    }
  } else {
    dp_store_make_token(p.token, sizeof p.token);
  }
  if (o->log_dir && mkdir_p(o->log_dir) != 0) {
    fprintf(stderr, "ddplua: --log_dir: cannot create directory '%s': %s\n", o->log_dir, strerror(errno));
    return 1;
  }
  dp_store_server *srv = NULL;
  if (o->node_rank == 0) {
    const char *bind = multi ? multi_node_bind_addr(p.master_addr) : p.master_addr;
    srv = serve_store(bind, p.master_port, p.token, &p.master_port);
    if (!srv) {
      fprintf(stderr, "ddplua: %s\n", dp_errmsg());
      return 1;
    }
  }
  dp_rdzv *rdzv = NULL;
  int timeout_ms = o->timeout_s * 1000 > 2e9 ? 2000000000 : (int)(o->timeout_s * 1000);
  if (multi) {
    rdzv = dp_rdzv_join(p.master_addr, p.master_port, p.token, p.node_rank, p.nnodes, o->nproc, timeout_ms, &p.rank,
                        &p.world_size);
    if (!rdzv) {
      fprintf(stderr, "ddplua: node %d: rendezvous with the other nodes' hosts at %s:%d failed: %s\n", p.node_rank,
              p.master_addr, p.master_port, dp_errmsg());
      dp_store_server_stop(srv);
      return 1;
    }
  } else {
    p.rank = 0;
    p.world_size = o->nproc;
  }
  int rc = supervise(o, &p, o->nproc, argv, rdzv);
  if (rdzv) rc = dp_rdzv_finish(rdzv, rc, timeout_ms);
  dp_store_server_stop(srv);
  /* every rank of this node was ours: remove what a killed one left in
   * /dev/shm (on a multi-node job simulated on one machine, the nodes share
   * this name prefix: node 0 does this only once all nodes are done) */
  dp_remove_job_shm(p.token);
  return rc;
}

static int run_scheduled(const dp_host_opts *o, dp_placement *p, int argc, char **argv) {
  const char *bind = p->nnodes > 1 ? multi_node_bind_addr(p->master_addr) : p->master_addr;
  if (!o->log_dir) return run_in_process(o, p, p->rank == 0, bind, argc, argv);
  /* --log_dir needs the output relayed: this rank becomes one supervised
   * worker; other ranks of the node may still use the job's segments */
  if (mkdir_p(o->log_dir) != 0) {
    fprintf(stderr, "ddplua: --log_dir: cannot create directory '%s': %s\n", o->log_dir, strerror(errno));
    return 1;
  }
  dp_store_server *srv = NULL;
  if (p->rank == 0 && !(srv = serve_store(bind, p->master_port, p->token, &p->master_port))) {
    fprintf(stderr, "ddplua: %s\n", dp_errmsg());
    return 1;
  }
  int rc = supervise(o, p, 1, argv, NULL);
  dp_store_server_stop(srv);
  return rc;
}

/* The signal a worker gets when its host dies (PR_SET_PDEATHSIG). It is
 * caught, so that the worker takes down its whole process group (the
 * node's ranks and every process their scripts started, which the kernel
 * would otherwise leave running, reparented) and not only itself. */
#define HOST_DIED_SIGNAL (SIGRTMIN + 8)

static void host_died(int sig) {
  (void)sig;
  kill(0, SIGKILL); /* the group, this process included */
  _exit(128 + SIGKILL);
}

/* A worker dies with its host (however the host's thread that spawned it
 * ends). Set here rather than between fork and exec so that the host can
 * spawn with posix_spawn; the getppid check closes the window in which the
 * host may already have died. */
static void die_with_host(const char *host_pid) {
  struct sigaction sa = {.sa_handler = host_died};
  sigemptyset(&sa.sa_mask);
  sigaction(HOST_DIED_SIGNAL, &sa, NULL);
  prctl(PR_SET_PDEATHSIG, HOST_DIED_SIGNAL);
  if (getppid() != (pid_t)atol(host_pid)) _exit(1);
}

/* A scheduler's rank: one random token when it is the only one, else the
 * job's secret. 1, or -1 + dp_error. */
static int scheduler_token(const dp_host_opts *o, dp_placement *p) {
  if (p->world_size == 1) {
    dp_store_make_token(p->token, sizeof p->token);
    return 1;
  }
  char who[96];
  snprintf(who, sizeof who, "a %s job of %d tasks", p->scheduler, p->world_size);
  return dp_job_token(o, who, p->public_seed, p->local_rank == 0, p->token, sizeof p->token) ? -1 : 1;
}

/* The soft limit on open files up to the hard one: the store holds one
 * descriptor per connection (a rank's, a host's, a stranger's until it is
 * closed), and a soft limit of 1024 is a common default well below what the
 * system allows. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int dp_host_main(int argc, char **argv) {
  /* started with stdin/stdout/stderr closed: keep 0-2 taken, so that no
   * pipe or socket of the host lands there */
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0) return 1;
  raise_fd_limit();
  const char *host_pid = getenv(DP_WORKER_ENV);
  bool worker = host_pid != NULL;
  if (worker) {
    die_with_host(host_pid);
    unsetenv(DP_WORKER_ENV); /* a ddplua the script starts is a host again */
    const char *rfd = getenv(DP_REPORT_ENV), *rank = getenv("RANK");
    if (rfd && atoi(rfd) == DP_REPORT_FD && rank) {
      fcntl(DP_REPORT_FD, F_SETFD, FD_CLOEXEC); /* not for the script's own children */
      dp_host_set_report(DP_REPORT_FD, atoi(rank));
    }
    unsetenv(DP_REPORT_ENV);
  }
  dp_host_opts o;
  bool done;
  int rc = dp_host_parse(argc, argv, &o, &done);
  if (done) {
    dp_host_opts_free(&o);
    return rc;
  }
  if (worker) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a pipe: let io.write lines reach the host as they end */
    rc = run_script(&o, argv, argc);
  } else {
    dp_placement p;
    int sched = 0;
    /* an explicit --nproc/--nnodes > 1 means this host launches (e.g. one
     * srun task per node), whatever the scheduler says */
    if (!(o.nproc_given && o.nproc > 1) && !(o.nnodes_given && o.nnodes > 1)) sched = dp_sched_detect(&p);
    if (sched > 0) sched = scheduler_token(&o, &p);
    if (sched < 0) {
      fprintf(stderr, "ddplua: %s\n", dp_errmsg());
      rc = 2;
    } else if (sched) {
      rc = run_scheduled(&o, &p, argc, argv);
    } else if (o.nproc == 1 && o.nnodes == 1 && !o.log_dir && getenv("RANK") && getenv("WORLD_SIZE") &&
               !getenv("DDPLUA_LAUNCHED")) {
      /* the ranks are managed outside (started by hand with RANK/WORLD_SIZE
       * set, as torchrun-style scripts do): leave the environment alone. A
       * ddplua started from inside a ddplua job (DDPLUA_LAUNCHED inherited)
       * is a new job of its own instead. */
      rc = run_script(&o, argv, argc);
    } else if (o.nproc == 1 && o.nnodes == 1 && !o.log_dir) {
      dp_placement single = {.world_size = 1, .local_world_size = 1, .nnodes = 1, .master_port = o.master_port};
      snprintf(single.master_addr, sizeof single.master_addr, "%s", o.master_addr ? o.master_addr : "127.0.0.1");
      dp_store_make_token(single.token, sizeof single.token);
      rc = run_in_process(&o, &single, true, single.master_addr, argc, argv);
    } else {
      rc = run_launcher(&o, argv);
    }
  }
  dp_host_opts_free(&o);
  return rc;
}
