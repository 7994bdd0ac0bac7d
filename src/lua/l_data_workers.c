/* Worker-process bindings for the DataLoader (lua/ddplua/data/worker_pool.lua
 * runs the pool on these; src/data/worker_proc.h describes the processes):
 *
 *   _worker_fork()                  -> "parent", pid, sock  |  "child", sock
 *   sock:send(kind, seq, item [, text [, tensors]])   kind: "task" | "result" |
 *                                      "error" | "stop"; text and the list of
 *                                      tensors travel in shared memory
 *   sock:recv([timeout_s])          -> kind, seq, item, text, tensors; nil on
 *                                      timeout; "closed" when the peer is gone
 *   sock:close()                    (also at garbage collection)
 *   _worker_poll(socks, timeout_s)  -> the 1-based position of a socket with
 *                                      something to read, or nil
 *   _worker_alive(pid)              -> true | false, "exited with code 0"
 *   _worker_reap(pid, grace_s)      -> how it ended (SIGKILL after grace_s)
 *   _worker_exit(code)              ends a worker (_exit, after flushing) */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/worker_proc.h"
#include "lua/l_data.h"
#include "lua/l_util.h"

#define WORKER_SOCK_MT "ddplua.WorkerSocket"

typedef struct {
  int fd;
  int parent_side;
} sock_box;

static const char *const kinds[] = {NULL, "task", "result", "error", "stop"};

static sock_box *check_sock(lua_State *L, int idx) {
  sock_box *b = luaL_checkudata(L, idx, WORKER_SOCK_MT);
  if (b->fd < 0) luaL_error(L, "DataLoader: the worker socket is closed");
  return b;
}

static void push_sock(lua_State *L, int fd, int parent_side) {
  sock_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->fd = fd;
  b->parent_side = parent_side;
  luaL_setmetatable(L, WORKER_SOCK_MT);
}

static int l_fork(lua_State *L) {
  pid_t pid = 0;
  int sock = -1;
  int r = dp_worker_fork(&pid, &sock);
  if (r < 0) return lt_error(L);
  if (r == 1) {
    lua_pushliteral(L, "child");
    push_sock(L, sock, 0);
    return 2;
  }
  lua_pushliteral(L, "parent");
  lua_pushinteger(L, pid);
  push_sock(L, sock, 1);
  return 3;
}

static int l_send(lua_State *L) {
  sock_box *b = check_sock(L, 1);
  int kind = luaL_checkoption(L, 2, NULL, kinds + 1) + 1;
  lua_Integer seq = luaL_checkinteger(L, 3), item = luaL_optinteger(L, 4, -1);
  size_t len = 0;
  const char *text = luaL_optlstring(L, 5, NULL, &len);
  int nt = 0;
  dp_tensor **ts = NULL;
  if (!lua_isnoneornil(L, 6)) {
    luaL_checktype(L, 6, LUA_TTABLE);
    nt = lt_list_len(L, 6, "DataLoader: batch tensors");
    ts = lua_newuserdatauv(L, sizeof *ts * (size_t)(nt ? nt : 1), 0);
    for (int i = 0; i < nt; i++) {
      lua_geti(L, 6, i + 1);
      ts[i] = lt_test(L, -1);
      if (!ts[i]) return luaL_error(L, "DataLoader: batch tensor %d is not a tensor", i + 1);
      lua_pop(L, 1);
    }
  }
  int fd = -1;
  if (text || nt) {
    fd = dp_worker_pack(text ? text : "", len, ts, nt);
    if (fd < 0) return lt_error(L);
  }
  int rc = dp_worker_send(b->fd, kind, seq, item, fd);
  if (fd >= 0) close(fd);
  if (rc) return lt_error(L);
  return 0;
}

static int l_recv(lua_State *L) {
  sock_box *b = check_sock(L, 1);
  int timeout_ms = lt_timeout_ms(L, 2, -1, "DataLoader: worker socket recv");
  dp_wmsg m;
  int r = dp_worker_recv(b->fd, timeout_ms, &m);
  if (r == 0) return 0;
  if (r < 0) {
    if (strcmp(dp_errmsg(), "closed") == 0) {
      lua_pushliteral(L, "closed");
      return 1;
    }
    return lt_error(L);
  }
  if (m.kind < 1 || m.kind > 4) {
    if (m.fd >= 0) close(m.fd);
    return luaL_error(L, "DataLoader: a message of unknown kind %d from a worker", m.kind);
  }
  lua_pushstring(L, kinds[m.kind]);
  lua_pushinteger(L, m.seq);
  lua_pushinteger(L, m.item);
  if (m.fd < 0) return 3;
  const char *text;
  size_t len;
  dp_tensor **ts;
  int nt;
  dp_storage *map;
  if (dp_worker_unpack(m.fd, &text, &len, &ts, &nt, &map)) return lt_error(L);
  lua_pushlstring(L, text, len);
  lua_createtable(L, nt, 0);
  for (int i = 0; i < nt; i++) {
    lt_push(L, ts[i]); /* takes over the reference */
    lua_rawseti(L, -2, i + 1);
  }
  free(ts);
  dp_storage_release(map);
  return 5;
}

static int l_close(lua_State *L) {
  sock_box *b = luaL_checkudata(L, 1, WORKER_SOCK_MT);
  if (b->fd >= 0) {
    if (b->parent_side) dp_worker_close(b->fd);
    else close(b->fd);
  }
  b->fd = -1;
  return 0;
}

static int l_poll(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int timeout_ms = lt_timeout_ms(L, 2, -1, "DataLoader: worker poll");
  int n = lt_list_len(L, 1, "DataLoader: worker sockets");
  int *fds = lua_newuserdatauv(L, sizeof *fds * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    fds[i] = check_sock(L, -1)->fd;
    lua_pop(L, 1);
  }
  int r = dp_worker_poll(fds, n, timeout_ms);
  if (r < 0) return 0;
  lua_pushinteger(L, r + 1);
  return 1;
}

/* A worker's pid: a positive pid_t. 0, -1 and other negatives mean process
 * groups or every process to waitpid and kill, and a larger integer would
 * wrap to one of them (or to an unrelated pid). */
static pid_t check_pid(lua_State *L, int idx, const char *what) {
  lua_Integer pid = luaL_checkinteger(L, idx);
  if (pid < 1 || pid > INT_MAX)
    luaL_error(L, "%s: pid must be a worker's process id (1..%d), got %I", what, INT_MAX, pid);
  return (pid_t)pid;
}

static int l_alive(lua_State *L) {
  char why[96];
  int r = dp_worker_alive(check_pid(L, 1, "DataLoader: worker_alive"), why, sizeof why);
  lua_pushboolean(L, r == 1);
  if (r == 1) return 1;
  lua_pushstring(L, why);
  return 2;
}

static int l_reap(lua_State *L) {
  char why[96];
  pid_t pid = check_pid(L, 1, "DataLoader: worker_reap");
  int grace_ms = lt_timeout_ms(L, 2, 2.0, "DataLoader: worker_reap grace");
  dp_worker_reap(pid, grace_ms < 0 ? 0 : grace_ms, why, sizeof why);
  lua_pushstring(L, why);
  return 1;
}

static int l_exit(lua_State *L) {
  int code = (int)luaL_optinteger(L, 1, 0);
  fflush(NULL);
  _exit(code);
}

void lt_open_data_workers(lua_State *L, int module) {
  static const luaL_Reg methods[] = {{"send", l_send}, {"recv", l_recv}, {"close", l_close}, {NULL, NULL}};
  luaL_newmetatable(L, WORKER_SOCK_MT);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_close);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {{"_worker_fork", l_fork}, {"_worker_poll", l_poll}, {"_worker_alive", l_alive},
                                   {"_worker_reap", l_reap}, {"_worker_exit", l_exit}, {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
