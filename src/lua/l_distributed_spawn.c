/* dist.spawn(fn, nprocs, ...): the mp.spawn analogue for scripts run
 * without the launcher. The parent serves the rendezvous store, forks
 * nprocs children that each run fn(rank, ...) with the environment the
 * launcher would set (so init_process_group() works as env://), and waits.
 * Children die with the parent (parent-death signal). The first child that
 * fails stops the others, and spawn raises an error naming its rank and its
 * error (sent back through a pipe).
 *
 * A process that has started CUDA cannot fork workers: the driver's state
 * does not survive fork, so every CUDA and NCCL call in the children would
 * fail. The ranks run a Lua function of the parent's state, which no fresh
 * process could be handed, so spawn refuses, saying what to do instead
 * (spawn first, or `ddplua --nproc N`, whose workers are exec'ed before
 * anything touches CUDA). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "lua/l_distributed.h"

#define MAX_ERR 16384

static bool in_child;
/* dist._simulate_cuda_initialised(true): tests on machines without a GPU
 * see spawn's answer to a parent that has started CUDA */
static bool simulate_cuda;

static bool cuda_started(void) { return simulate_cuda || dp_backend_get(DP_CUDA) != NULL; }

static void set_env_int(const char *k, int v) {
  char b[32];
  snprintf(b, sizeof b, "%d", v);
  setenv(k, b, 1);
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  /* assertion libraries throw tables: use their __tostring or message */
  if (!msg && luaL_callmeta(L, 1, "__tostring")) msg = lua_tostring(L, -1);
  if (!msg && lua_istable(L, 1) && lua_getfield(L, 1, "message") == LUA_TSTRING) msg = lua_tostring(L, -1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static void write_all(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t k = write(fd, s, n);
    if (k <= 0 && errno != EINTR) return;
    if (k > 0) {
      s += k;
      n -= (size_t)k;
    }
  }
}

/* In the child: never returns. */
static void child_main(lua_State *L, int nargs, int rank, int n, int port, const char *token, int err_fd, pid_t parent,
                       int listen_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  close(listen_fd);
  if (getppid() != parent) _exit(1); /* the parent died before prctl */
  in_child = true;
  lt_dist_forget();
  set_env_int("RANK", rank);
  set_env_int("LOCAL_RANK", rank);
  set_env_int("WORLD_SIZE", n);
  set_env_int("LOCAL_WORLD_SIZE", n);
  set_env_int("NODE_RANK", 0);
  set_env_int("DDPLUA_NNODES", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  set_env_int("MASTER_PORT", port);
  setenv("DDPLUA_JOB_TOKEN", token, 1);
  setenv("DDPLUA_LAUNCHED", "1", 1);
  lua_pushcfunction(L, traceback);
  lua_pushvalue(L, 1);
  lua_pushinteger(L, rank);
  for (int i = 0; i < nargs; i++) lua_pushvalue(L, 3 + i);
  int rc = lua_pcall(L, nargs + 1, 0, -(nargs + 3));
  if (rc != LUA_OK) {
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    write_all(err_fd, msg, len < MAX_ERR ? len : MAX_ERR);
  }
  fflush(NULL);
  _exit(rc == LUA_OK ? 0 : 1);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const char *status_str(int status, char *buf, size_t n) {
  if (WIFSIGNALED(status))
    snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else snprintf(buf, n, "exited with code %d", WEXITSTATUS(status));
  return buf;
}

static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_Integer n = luaL_checkinteger(L, 2);
  if (n < 1 || n > 1024) return luaL_error(L, "spawn: nprocs must be 1..1024, got %I", n);
  if (in_child) return luaL_error(L, "spawn: cannot spawn from inside a spawned process");
  if (lt_dist.world)
    return luaL_error(L, "spawn: call it before init_process_group (the children create their own process group)");
  if (cuda_started())
    return luaL_error(L,
                      "spawn: CUDA is already initialised in this process (a CUDA tensor, ddp.device() or "
                      "cuda_is_available() came before spawn), and forked children cannot use it: call dist.spawn "
                      "before anything touches CUDA, or start the ranks as fresh processes with `ddplua --nproc %d "
                      "script.lua`",
                      (int)n);
  char token[40];
  dp_store_make_token(token, sizeof token);
  /* the store's thread starts after the forks: a child must not inherit
   * a lock some thread of ours holds (allocators differ in how they survive
   * fork); the children's connections wait in the listen queue meanwhile */
  int port = 0, lfd = dp_store_listen("127.0.0.1", 0, &port);
  if (lfd < 0) return luaL_error(L, "spawn: %s", dp_errmsg());
  int nargs = lua_gettop(L) - 2;
  pid_t *pids = lua_newuserdatauv(L, sizeof(pid_t) * (size_t)n, 0);
  int *fds = lua_newuserdatauv(L, sizeof(int) * (size_t)n, 0);
  int *status = lua_newuserdatauv(L, sizeof(int) * (size_t)n, 0);
  pid_t parent = getpid();
  fflush(NULL); /* nothing buffered may be written twice */
  int started = 0;
  for (; started < n; started++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) break;
    pid_t pid = fork();
    if (pid < 0) {
      close(p[0]);
      close(p[1]);
      break;
    }
    if (pid == 0) {
      close(p[0]);
      for (int i = 0; i < started; i++) close(fds[i]);
      child_main(L, nargs, started, (int)n, port, token, p[1], parent, lfd);
    }
    close(p[1]);
    pids[started] = pid;
    fds[started] = p[0];
    status[started] = -1;
  }
  int failed = started < n ? -2 : -1; /* -2: fork failed; else the first failing rank */
  dp_store_server *srv = dp_store_server_start_fd(lfd, token);
  char srv_err[256] = "";
  if (!srv) {
    snprintf(srv_err, sizeof srv_err, "%s", dp_errmsg());
    for (int r = 0; r < started; r++) kill(pids[r], SIGKILL);
    failed = -3;
  }
  int left = started;
  int64_t kill_at = -1;
  int64_t t = 0;
  while (left > 0) {
    for (int r = 0; r < started; r++) {
      if (status[r] != -1) continue;
      int st;
      if (waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      status[r] = st;
      left--;
      if (failed == -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) failed = r;
    }
    if (failed != -1 && kill_at < 0) {
      /* stop the others: TERM now, KILL after a grace period */
      for (int r = 0; r < started; r++)
        if (status[r] == -1) kill(pids[r], SIGTERM);
      kill_at = t + 2000;
    }
    if (kill_at >= 0 && t >= kill_at) {
      for (int r = 0; r < started; r++)
        if (status[r] == -1) kill(pids[r], SIGKILL);
      kill_at = t + 1000000;
    }
    if (left > 0) {
      sleep_ms(5);
      t += 5;
    }
  }
  if (srv) dp_store_server_stop(srv);
  char msg[MAX_ERR + 1] = "";
  if (failed >= 0) {
    ssize_t k = read(fds[failed], msg, MAX_ERR);
    msg[k > 0 ? k : 0] = 0;
  }
  for (int r = 0; r < started; r++) close(fds[r]);
  if (failed == -3) return luaL_error(L, "spawn: cannot serve the rendezvous store: %s", srv_err);
  if (failed == -2)
    return luaL_error(L, "spawn: could only start %d of %d processes: %s", started, (int)n, strerror(errno));
  if (failed >= 0) {
    if (msg[0]) return luaL_error(L, "spawn: rank %d failed: %s", failed, msg);
    char how[128];
    return luaL_error(L, "spawn: rank %d %s", failed, status_str(status[failed], how, sizeof how));
  }
  return 0;
}

/* find_free_port() -> a TCP port free on 127.0.0.1 right now (for
 * tcp:// init in scripts and tests; another process may take it later). */
static int l_find_free_port(lua_State *L) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return luaL_error(L, "find_free_port: %s", strerror(e));
  }
  close(fd);
  lua_pushinteger(L, ntohs(sa.sin_port));
  return 1;
}

static int l_simulate_cuda(lua_State *L) {
  simulate_cuda = lua_toboolean(L, 1);
  return 0;
}

void lt_open_dist_spawn(lua_State *L, int dist) {
  lua_pushcfunction(L, l_spawn);
  lua_setfield(L, dist, "spawn");
  lua_pushcfunction(L, l_simulate_cuda);
  lua_setfield(L, dist, "_simulate_cuda_initialised");
  lua_pushcfunction(L, l_find_free_port);
  lua_setfield(L, dist, "find_free_port");
}
