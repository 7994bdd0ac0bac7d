/* The host program's parts:
 *   main.c        the Lua state and the in-process script runner
 *   options.c     command line and the `ddplua:` section of --config
 *   launcher.c    picks the mode (in-process, scheduler rank, supervised workers) and builds the environment
 *   sched_env.c   Slurm and Open MPI environments -> one rank's placement
 *   token.c       the job token of a job started across nodes or by a scheduler
 *   rendezvous.c  the nodes' hosts: their store connection, messages between them, the end
 *   membership.c  which nodes take part in each generation (fixed --nnodes, MIN:MAX)
 *                 (rdzv.h: what these two share)
 *   blame.c       which rank failed first, from the ranks' failure reports and exits
 *   elastic.c     the generations of a node's workers: --max_restarts, MIN:MAX, restarts.log
 *   supervisor.c  spawning the workers (fork + exec), their output, signals, the event loop
 *   verdict.c     how a failure ends: the culprit, one verdict across nodes, the summary
 *   watch_runs.c  --watch on the host: which run starts when, interrupts, fresh workers
 *                 (supervisor.h: what these three share)
 *   watch.c       the files a --watch job watches (inotify, or polling)
 *   rerun.c       a --watch worker: the script run again and again in one Lua state
 *   output.c      whole-line, rank-prefixed relay of the workers' output, logs and last lines */
#ifndef DP_HOST_H
#define DP_HOST_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "distributed/store.h"

#define DDPLUA_VERSION "0.1"
/* Set in the environment of a worker the host exec'ed (value: the host's
 * pid). The worker removes it at once, so a `ddplua` the script starts is a
 * host of its own again. */
#define DP_WORKER_ENV "DDPLUA_WORKER_OF"

/* ---- main.c ---- */

/* A Lua state with the standard libraries, package.path pointing at the
 * ddplua Lua library and ddplua.core preloaded. */
lua_State *dp_host_new_state(void);
/* Opens those libraries (and sets package.path, the preload) into L's
 * current globals and package.loaded (rerun.c gives each run fresh ones). */
void dp_host_open_libs(lua_State *L);
/* The directory holding the ddplua Lua library (its parent of ddplua/). */
void dp_host_lua_dir(char *out, size_t n);
/* Runs script with `arg` and `...` set like lua5.4 does: arg[-n_pre..-1] =
 * pre[0..n_pre) (the interpreter and its options), arg[0] = script,
 * arg[1..n_args] = args. Prints the error with a traceback and returns 1 on
 * failure. */
int dp_host_run_script(lua_State *L, const char *script, char **pre, int n_pre, char **args, int n_args);
/* The same; *load_failed (may be NULL) tells a script that did not load
 * (a syntax error, a missing file) from one that failed while running. */
int dp_host_run_script_ex(lua_State *L, const char *script, char **pre, int n_pre, char **args, int n_args,
                          bool *load_failed);
/* In a worker: where dp_host_run_script reports a failure to the host (see
 * main.c) and this worker's rank. */
void dp_host_set_report(int fd, int rank);
/* Off: a failed script is not reported as the job's failure (--watch). */
void dp_host_report_failures(bool on);
/* The descriptor a worker finds its report pipe on, named to it by
 * DDPLUA_REPORT_FD. */
#define DP_REPORT_FD 3
#define DP_REPORT_ENV "DDPLUA_REPORT_FD"
int dp_host_main(int argc, char **argv);

/* ---- chunk_cache.c ---- */

/* Replaces package.searchers[2] (Lua files) with one that loads a file's
 * bytecode instead of parsing it while the file has the bytes the
 * bytecode was made from: the build's (bin/lua_bytecode.bin, read once per
 * process) and, with keep_parsed (a --watch worker), what it parsed
 * before. */
void dp_host_cache_lua_chunks(lua_State *L, bool keep_parsed);
/* require("ddplua.host").chunk_stats() -> {bundled=, from_bytecode=, parsed=} (this process's loads) */
int dp_host_chunk_stats(lua_State *L);

/* ---- options.c ---- */

/* The most processes on one node (--nproc) and nodes in a job (--nnodes);
 * membership.c holds other hosts' entries to the same. */
#define DP_HOST_MAX_NPROC 65536
#define DP_HOST_MAX_NNODES 65536

typedef struct {
  int nproc;              /* processes on this node, >= 1 (auto resolved) */
  int nnodes, node_rank;  /* 1, 0; nnodes is MAX of --nnodes MIN:MAX */
  int nnodes_min;         /* MIN of --nnodes MIN:MAX (== nnodes unless elastic) */
  char *master_addr;      /* NULL: not given */
  int master_port;        /* 0: not given */
  char *backend;          /* "auto" | "nccl" | "cpu" */
  double timeout_s;       /* 300 */
  char *config;           /* absolute path of --config, or NULL */
  char *log_dir;          /* NULL: no logs */
  char *token_file;       /* --token_file, or NULL */
  bool insecure;          /* --insecure: a job of independently started processes may run without a secret */
  bool watch;             /* --watch: rerun the script in the same workers whenever its files change */
  int max_restarts;       /* --max_restarts: new generations of workers after failures (0) */
  double restart_delay_s; /* --restart_delay: seconds before each (1) */
  bool nproc_given, nnodes_given;
  /* what to run */
  char *script; /* path of the script (or of the tool) */
  int n_pre;    /* argv[0..n_pre) are the host's own arguments (arg[-n_pre..-1]) */
  int args_pos; /* argv[args_pos..argc) are the script's arguments */
} dp_host_opts;

/* Parses argv (and the --config file's `ddplua:` and `script:`). Returns 0
 * when o is ready to run; otherwise the process exit code after printing
 * the error (2) or --help / --version (0), with *done set. Either way o is
 * released with dp_host_opts_free. */
int dp_host_parse(int argc, char **argv, dp_host_opts *o, bool *done);
void dp_host_opts_free(dp_host_opts *o);
/* Cores this process may run on (its affinity mask). */
int dp_host_cores(void);
/* GPUs a worker could see: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN
 * (the host never loads CUDA). */
int dp_host_visible_gpus(void);
/* "%g"-like text for a timeout that the process group can parse ("300"). */
void dp_host_format_seconds(double s, char *out, size_t n);

/* ---- sched_env.c ---- */

/* One rank's place in a job (also what the supervisor gives each worker). */
typedef struct {
  int rank, world_size;
  int local_rank, local_world_size;
  int node_rank, nnodes;
  char master_addr[256];
  int master_port;
  char token[80];
  const char *scheduler; /* "Slurm", "Open MPI" */
  char public_seed[400]; /* scheduler: what every task knows alike (for --insecure) */
  int restart_count;     /* the job's generation: DDPLUA_RESTART_COUNT (elastic.c) */
} dp_placement;

/* 1 and fills p (all but the token: see dp_job_token) when this process is
 * one rank started by Slurm (srun) or Open MPI (mpirun); 0 when neither; -1
 * + dp_error on an inconsistent environment. */
int dp_sched_detect(dp_placement *p);

/* ---- launcher.c ---- */

/* The variables every worker of this node gets (RANK and LOCAL_RANK apart),
 * "NAME=value", NULL-terminated; dp_host_env_free releases them. */
char **dp_host_job_env(const dp_host_opts *o, const dp_placement *p);
void dp_host_env_free(char **env);

/* ---- token.c ---- */

/* The job token (the store's password) of a job whose processes are
 * started apart (the hosts of several nodes, the tasks of a scheduler),
 * which therefore cannot hand each other a random one: DDPLUA_JOB_TOKEN, or
 * the first line of --token_file. Without either the start is refused (-1 +
 * dp_error saying how to give one; `who` names the kind of job), unless
 * --insecure: then the token is derived from `public_seed` (addresses,
 * ports, job ids: what anyone can know) and a warning says so on stderr when
 * `warn`. 0 and the token in out on success. */
int dp_job_token(const dp_host_opts *o, const char *who, const char *public_seed, bool warn, char *out, size_t n);
/* Shortest secret accepted. */
#define DP_TOKEN_MIN_CHARS 16
/* FNV-1a of s from h (also sched_env.c's port derivation). */
uint64_t dp_fnv1a(const char *s, uint64_t h);

/* ---- rendezvous.c, membership.c ---- */

typedef struct dp_rdzv dp_rdzv;
/* Connects this node's host to the store (node 0's) and claims its node id
 * (--node_rank); the nodes meet in dp_rdzv_generation. NULL + dp_error. */
dp_rdzv *dp_rdzv_join(const char *addr, int port, const char *token, int node_rank, int nnodes_min, int nnodes_max,
                      int nproc, int max_restarts, int timeout_ms);
/* Where this node's ranks are in one generation of the job. */
typedef struct {
  int gen;                /* the job's generation (0, then one more per restart): DDPLUA_RESTART_COUNT */
  int rank_offset, world; /* this node's first rank, WORLD_SIZE */
  int node_pos, n_nodes;  /* NODE_RANK (the position among the nodes taking part), DDPLUA_NNODES */
} dp_rdzv_place;
/* The nodes agree on generation `gen`: with a fixed --nnodes every node
 * takes part; with MIN:MAX node 0 decides which do (membership.c). Starts
 * watching for the generation's messages. 0, or -1 + dp_error (too few
 * nodes, a node lost that a fixed job needs, inconsistent options). */
int dp_rdzv_generation(dp_rdzv *r, int gen, int timeout_ms, dp_rdzv_place *pl);
/* Stops watching this generation's messages (before a restart). */
void dp_rdzv_end_generation(dp_rdzv *r);
/* What other nodes' hosts (or the store) tell this one while the job runs. */
typedef enum {
  DP_MSG_VERDICT,    /* the job's verdict: code, final, membership, text */
  DP_MSG_ACCUSE,     /* a rank elsewhere (victim) failed because of this node's `rank`: text is its error */
  DP_MSG_LOST,       /* node `node`'s host vanished: text */
  DP_MSG_STORE_LOST, /* the store (node 0's host) is gone: text */
  DP_MSG_RERUN,      /* --watch: start run `code`, because `text` changed */
  DP_MSG_JOIN        /* MIN:MAX, on node 0: node `node` waits to join */
} dp_rdzv_msg_kind;
typedef struct {
  dp_rdzv_msg_kind kind;
  int code, rank, victim, node;
  bool final, membership;
  char text[1024];
} dp_rdzv_msg;
/* Readable when a message is waiting; dp_rdzv_next takes one (false: none). */
int dp_rdzv_fd(dp_rdzv *r);
bool dp_rdzv_next(dp_rdzv *r, dp_rdzv_msg *m);
/* The node id that runs global rank `rank` (-1: none). */
int dp_rdzv_node_of(const dp_rdzv *r, int rank);
/* Claims the generation's verdict: 1 when this host is the first to (it
 * then publishes it), 0 when another was (its verdict is on the way), -1
 * when the store cannot be reached. */
int dp_rdzv_claim(dp_rdzv *r);
/* Sends the verdict to every other node: final (no restart may answer
 * it), membership (a restart for a node that joins, not a failure). */
void dp_rdzv_publish(dp_rdzv *r, int code, bool final, bool membership, const char *text);
/* Tells the node of `rank` that `victim` (here) failed because of it. */
void dp_rdzv_accuse(dp_rdzv *r, int rank, int victim, const char *text);
/* --watch on node 0: tells the other nodes to start run `run`. */
void dp_rdzv_rerun(dp_rdzv *r, int run, const char *what);
/* Reports this node's exit code; on node 0 waits for the other nodes'
 * reports (up to timeout_ms after a normal end, a few seconds after a
 * failure, not at all for a node known lost, less if SIGINT/SIGTERM/SIGHUP/
 * SIGQUIT is pending), so the store outlives every node's workers, and
 * returns the first non-zero code among them (or `code`). Frees r. */
int dp_rdzv_finish(dp_rdzv *r, int code, int timeout_ms);

/* ---- output.c ---- */

typedef struct dp_relay dp_relay;
/* Lines of rank `rank` go to the host's stdout/stderr prefixed "[rank N] "
 * and, with log_fd >= 0, unprefixed to that file. */
dp_relay *dp_relay_new(int rank, int log_fd);
/* Feeds bytes read from the worker's stdout (stream 1) or stderr (2). */
void dp_relay_feed(dp_relay *r, int stream, const char *data, size_t n);
/* End of a stream: a partial last line is written with a newline. */
void dp_relay_close(dp_relay *r, int stream);
/* Writes the last lines of this rank (at most ~20) to fd, each indented. */
void dp_relay_print_tail(dp_relay *r, int fd);
void dp_relay_free(dp_relay *r);

/* ---- blame.c ---- */

/* The culprit of a failure among this node's ranks first_rank ..
 * first_rank+n-1, from their failure reports and exits (blame.c has the
 * rules). Events are given in the order the host saw them. */
typedef struct dp_blame dp_blame;
dp_blame *dp_blame_new(int first_rank, int n);
void dp_blame_free(dp_blame *b);
/* Rank `rank` reported that its script failed with `text`, its process
 * groups blaming global rank `blamed` (-1: nobody). */
void dp_blame_report(dp_blame *b, int rank, int blamed, const char *text, int64_t now_ms);
/* A rank of another node (victim) failed because of our `rank`. */
void dp_blame_accused(dp_blame *b, int rank, int victim, const char *text, int64_t now_ms);
/* Rank `rank` exited (code, or killed by sig); after_stop: the host had
 * already begun stopping the job. */
void dp_blame_exit(dp_blame *b, int rank, int code, int sig, bool after_stop);

typedef enum {
  DP_BLAME_NONE,   /* no failure */
  DP_BLAME_WAIT,   /* an accused rank may still report: resolve again at until_ms */
  DP_BLAME_LOCAL,  /* rank is the culprit */
  DP_BLAME_REMOTE, /* the culprit is rank, of another node: that node's host judges */
} dp_blame_state;
typedef struct {
  dp_blame_state state;
  int rank;
  int code;         /* the job's exit code */
  char why[900];    /* what the culprit did: "exited with code 3", "stopped making progress: ..." */
  bool exiting;     /* LOCAL: it reported its error and is still exiting: stop the others at its exit, */
  int64_t until_ms; /* or at this time (WAIT: resolve again then) */
} dp_blame_verdict;
void dp_blame_resolve(const dp_blame *b, int64_t now_ms, dp_blame_verdict *v);

/* ---- watch.c ---- */

/* The files of a --watch job: added one by one, watched with inotify
 * (polling without it, or with DDPLUA_WATCH_POLL=1); a change is reported
 * once it has settled and only when a file's bytes differ from the last
 * run's. */
typedef struct dp_watch dp_watch;
dp_watch *dp_watch_new(void);
void dp_watch_free(dp_watch *w);
/* 0, or -1 + dp_error (a file that does not exist, too many files). */
int dp_watch_add(dp_watch *w, const char *path);
const char *dp_watch_method(const dp_watch *w); /* "inotify" | "polling" */
int dp_watch_count(const dp_watch *w);
/* Readable when events are waiting (-1 when polling); the ms until the
 * next check is due (-1: none). */
int dp_watch_fd(const dp_watch *w);
int dp_watch_timeout(const dp_watch *w, int64_t now_ms);
/* Takes the events; true when a change has settled, with the changed
 * files named in `changed` (relative to the current directory when below
 * it). */
bool dp_watch_check(dp_watch *w, int64_t now_ms, char *changed, size_t n);

/* ---- watch_runs.c: the runs of a --watch job, across worker generations ---- */
typedef struct dp_watch_runs dp_watch_runs;
/* leader: this host watches the files (node 0); the others rerun when it
 * says so. NULL + message on stderr when the files cannot be watched. */
dp_watch_runs *dp_watch_runs_new(const dp_host_opts *o, bool leader);
void dp_watch_runs_free(dp_watch_runs *wr);

/* How one generation of workers ended (supervisor.c / verdict.c). */
typedef struct {
  int code;           /* the host's exit code if nothing follows */
  bool restart;       /* a failure that --max_restarts may answer: the summary was not printed */
  bool cold;          /* --watch: the workers were stopped to start the next run in fresh ones */
  bool membership;    /* the restart takes in a node that joins (not a failure: not counted) */
  int culprit_rank;   /* -1: none */
  char cause[1200];   /* the summary line (after "ddplua: ") */
  char run_dir[1024]; /* where rank 0's run keeps its files ("" unknown): restarts.log goes there */
} dp_gen_result;

/* ---- supervisor.c ---- */

typedef struct {
  const dp_host_opts *opts;
  char **argv;                      /* the host's own command line: each worker gets the same */
  const char *self_exe;             /* /proc/self/exe resolved */
  int n_workers;                    /* workers started by this host */
  int first_rank, first_local_rank; /* worker i gets RANK first_rank+i, LOCAL_RANK first_local_rank+i */
  int node_rank, nnodes;            /* for messages */
  char *const *job_env;             /* NULL-terminated "NAME=value" entries every worker gets */
  dp_rdzv *rdzv;                    /* multi-node: stop requests from other nodes; NULL otherwise */
  dp_watch_runs *watch;             /* --watch: the runs; NULL otherwise */
  bool may_restart;                 /* --max_restarts has restarts left: a failure is not summarised */
} dp_supervise_args;

/* Runs the workers to completion; returns the host's exit code (also in
 * res->code) and how they ended. Signals SIGINT/SIGTERM/SIGHUP/SIGQUIT/
 * SIGCHLD must be blocked by the caller (before any thread is started) so
 * that they arrive on the signalfd. */
int dp_supervise(const dp_supervise_args *a, dp_gen_result *res);
/* Removes /dev/shm/ddplua-<token>-* (segments a killed rank could leave). */
void dp_remove_job_shm(const char *token);

/* ---- elastic.c ---- */

/* Runs this node's `n_workers` workers, generation after generation
 * (--max_restarts, --nnodes MIN:MAX, --watch's fresh workers), p describing
 * the first of them (updated for each generation); rdzv: multi-node, its
 * generation 0 already agreed on. Returns the host's exit code. The
 * supervisor's signals must be blocked (dp_supervise). */
int dp_run_generations(const dp_host_opts *o, char **argv, dp_placement *p, int n_workers, dp_rdzv *rdzv,
                       int timeout_ms);

/* ---- rerun.c: a worker of `ddplua --watch` ---- */

/* A watched worker reads its commands ("run <n>\n"; EOF: exit) from this
 * descriptor, named to it by DDPLUA_CONTROL_FD, and reports on the report
 * pipe: "F <rank> <path>" for each file its script requires, "W <rank> <n>
 * <ok|load|error|interrupted> <ms>" when run n ends. The host interrupts a
 * run with DP_INTERRUPT_SIGNAL. */
#define DP_CONTROL_FD 4
#define DP_CONTROL_ENV "DDPLUA_CONTROL_FD"
#define DP_INTERRUPT_SIGNAL (SIGRTMIN + 9)
/* Serves runs until the host closes the control pipe; the exit code. */
int dp_rerun_serve(const dp_host_opts *o, char **argv, int argc, int report_fd, int rank);

#endif
