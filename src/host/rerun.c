/* A worker of `ddplua --watch` (host.h, "rerun.c"): it runs the script
 * whenever the host says so, in the same process and the same Lua state,
 * so that what is expensive to make stays: the process group and its
 * shared memory (l_distributed_watch.c), CUDA contexts and NCCL
 * communicators, the loaded libraries, and the values the script marks
 * with ddp.keep (kept in the registry).
 *
 * Each run gets a fresh Lua environment: new globals and a new
 * package.loaded, into which the standard libraries and ddplua's preload
 * are opened again, so every module, model, optimizer and metric is made
 * anew; and the C runtime is put back as the process started (the
 * generator, grad mode, autocast, threads: lt_rerun_reset), so a rerun
 * gives bit for bit what a cold run with the same seed gives.
 *
 * A run that fails prints its traceback (with the rank's prefix, through
 * the host) and the worker waits for the next command instead of exiting;
 * its process groups are aborted so that peers blocked in a collective
 * with it fail at once. The host interrupts a run that a save overtook with
 * DP_INTERRUPT_SIGNAL: the handler sets a Lua hook (as lua.c does for
 * Ctrl-C) that raises an error at the next Lua instruction. Files the
 * script requires are reported to the host, which watches them too. */
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "host/host.h"
#include "lua/l_rerun.h"

static lua_State *run_state;
static volatile sig_atomic_t in_run, interrupted;
static int report_to = -1, my_rank = -1;

static void stop_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted: a watched file changed (ddplua --watch reruns the script)");
}

/* lua_sethook is the one Lua call that is safe in a signal handler. */
static void on_interrupt(int sig) {
  (void)sig;
  if (!in_run) return;
  interrupted = 1;
  lua_sethook(run_state, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* One line to the host, in one write (shorter than PIPE_BUF: whole). */
static void report(const char *fmt, ...) DP_PRINTF(1, 2);
static void report(const char *fmt, ...) {
  if (report_to < 0) return;
  char line[4000];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (k < 0 || k >= (int)sizeof line - 1) return; /* too long to be whole: the host does without */
  line[k++] = '\n';
  if (write(report_to, line, (size_t)k) < 0) { /* the host is gone: the control pipe ends us */
  }
}

/* package.searchers[2] (Lua files), reporting each file it finds. */
static int traced_searcher(lua_State *L) {
  int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  if (lua_gettop(L) >= 2 && lua_isfunction(L, 1) && lua_type(L, 2) == LUA_TSTRING) {
    char abs[PATH_MAX];
    if (realpath(lua_tostring(L, 2), abs)) report("F %d %s", my_rank, abs);
  }
  return lua_gettop(L);
}

static void trace_requires(lua_State *L) {
  lua_getglobal(L, "package");
  if (lua_getfield(L, -1, "searchers") == LUA_TTABLE && lua_rawgeti(L, -1, 2) == LUA_TFUNCTION) {
    lua_pushcclosure(L, traced_searcher, 1);
    lua_rawseti(L, -2, 2);
  } else {
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}

/* Drops the last run's globals and modules (what ddp.keep holds stays). */
static void clear_env(lua_State *L) {
  lua_settop(L, 0);
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_newtable(L);
  lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_gc(L, LUA_GCCOLLECT);
  lua_gc(L, LUA_GCCOLLECT); /* finalizers of the first pass free more */
}

/* "run <n>" from the control pipe; 0 at EOF (the host is done with us). */
static int next_command(char *buf, size_t cap, size_t *len) {
  for (;;) {
    char *nl = memchr(buf, '\n', *len);
    if (nl) {
      *nl = 0;
      int run = 0;
      int ok = sscanf(buf, "run %d", &run) == 1 && run > 0;
      size_t used = (size_t)(nl - buf) + 1;
      memmove(buf, nl + 1, *len - used);
      *len -= used;
      if (ok) return run;
      continue; /* not ours: ignored */
    }
    if (*len == cap) *len = 0; /* a line longer than the buffer: junk */
    ssize_t k = read(DP_CONTROL_FD, buf + *len, cap - *len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    *len += (size_t)k;
  }
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int dp_rerun_serve(const dp_host_opts *o, char **argv, int argc, int report_fd, int rank) {
  report_to = report_fd;
  my_rank = rank;
  dp_host_report_failures(false); /* a failed run is not the job's failure: no blame report */
  lt_rerun_snapshot();
  lua_State *L = dp_host_new_state();
  if (!L) {
    fprintf(stderr, "ddplua: cannot create a Lua state\n");
    return 1;
  }
  run_state = L;
  struct sigaction sa = {.sa_handler = on_interrupt};
  sigemptyset(&sa.sa_mask);
  sigaction(DP_INTERRUPT_SIGNAL, &sa, NULL);
  char buf[256];
  size_t len = 0;
  bool fresh = true; /* dp_host_new_state opened the libraries already */
  for (int run; (run = next_command(buf, sizeof buf, &len)) > 0;) {
    if (!fresh) dp_host_open_libs(L);
    fresh = false;
    dp_host_cache_lua_chunks(L, true);
    trace_requires(L);
    lt_rerun_reset();
    lt_dist_watch_begin(run);
    int64_t t0 = now_ms();
    bool load_failed = false;
    interrupted = 0;
    in_run = 1;
    int rc = dp_host_run_script_ex(L, o->script, argv, o->n_pre, argv + o->args_pos, argc - o->args_pos, &load_failed);
    in_run = 0;
    lua_sethook(L, NULL, 0, 0);
    const char *status = rc == 0 ? "ok" : interrupted ? "interrupted" : load_failed ? "load" : "error";
    char why[96];
    snprintf(why, sizeof why, "rank %d's run of the script %s (ddplua --watch)", rank,
             interrupted ? "was interrupted" : "failed");
    lt_dist_watch_end(rc == 0, why);
    clear_env(L);
    fflush(stdout);
    fflush(stderr);
    report("W %d %d %s %lld", rank, run, status, (long long)(now_ms() - t0));
  }
  lua_close(L);
  return 0;
}
