/* The ddplua host: the Lua state and the in-process script runner that
 * every rank uses (the launcher and supervisor are in launcher.c and
 * supervisor.c). */
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distributed/pg.h"
#include "host/host.h"

int luaopen_ddplua_core(lua_State *L);

static int report_fd = -1, report_rank = -1;
static bool report_failures = true;

void dp_host_set_report(int fd, int rank) {
  report_fd = fd;
  report_rank = rank;
}

void dp_host_report_failures(bool on) { report_failures = on; }

/* Tells the host, before anything slow (printing, freeing the heap at
 * exit), that this rank's script failed and whom the process groups blame
 * (-1: nobody, the failure is this rank's own): "<rank> <blamed> <first
 * line of the error>\n", one write of less than PIPE_BUF, so it arrives
 * whole and before this process's exit. */
static void report_failure(const char *msg) {
  if (report_fd < 0 || !report_failures) return;
  char line[1200];
  int k = snprintf(line, sizeof line, "%d %d ", report_rank, dp_pg_culprit());
  size_t first = strcspn(msg, "\n");
  if (first > sizeof line - (size_t)k - 2) first = sizeof line - (size_t)k - 2;
  memcpy(line + k, msg, first);
  line[k + (int)first] = '\n';
  if (write(report_fd, line, (size_t)k + first + 1) < 0) { /* the host is gone: nobody to tell */
  }
}

/* <dir of the executable>/../../lua (build tree), <prefix>/share/ddplua/lua
 * (installed) or the source tree. */
void dp_host_lua_dir(char *out, size_t n) {
  char exe[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k > 0) {
    exe[k] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      snprintf(out, n, "%s/../../lua/ddplua/init.lua", exe);
      if (access(out, R_OK) == 0) {
        snprintf(out, n, "%s/../../lua", exe);
        return;
      }
      snprintf(out, n, "%s/../share/ddplua/lua/ddplua/init.lua", exe);
      if (access(out, R_OK) == 0) {
        snprintf(out, n, "%s/../share/ddplua/lua", exe);
        return;
      }
    }
  }
  snprintf(out, n, "%s/lua", DDPLUA_SOURCE_DIR);
}

/* require "ddplua.host" (only under the ddplua host; the library looks
 * for it in package.preload): what a script's libraries tell the host.
 *   note_run_dir(path)   the run directory (rank 0's counts): the host
 *                        writes restarts.log there (elastic.c)
 *   chunk_stats()        {bundled=, from_bytecode=, parsed=}: the Lua
 *                        files this process loaded (chunk_cache.c) */
static int l_note_run_dir(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  char abs[PATH_MAX], line[PATH_MAX + 64];
  if (report_fd < 0 || !realpath(dir, abs)) return 0;
  int k = snprintf(line, sizeof line, "D %d %s\n", report_rank, abs);
  if (k > 0 && k < (int)sizeof line && k < 4000 && write(report_fd, line, (size_t)k) < 0) { /* the host is gone */
  }
  return 0;
}

static int open_host_module(lua_State *L) {
  static const luaL_Reg fs[] = {{"note_run_dir", l_note_run_dir}, {"chunk_stats", dp_host_chunk_stats}, {NULL, NULL}};
  luaL_newlib(L, fs);
  return 1;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

void dp_host_open_libs(lua_State *L) {
  luaL_openlibs(L);
  char dir[PATH_MAX + 64];
  dp_host_lua_dir(dir, sizeof dir);
  /* package.path = <lua dir>/?.lua;<lua dir>/?/init.lua;<default> */
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_ddplua_core);
  lua_setfield(L, -2, "ddplua.core");
  lua_pushcfunction(L, open_host_module);
  lua_setfield(L, -2, "ddplua.host");
  lua_pop(L, 2);
  dp_host_cache_lua_chunks(L, false);
}

lua_State *dp_host_new_state(void) {
  lua_State *L = luaL_newstate();
  if (!L) return NULL;
  dp_host_open_libs(L);
  return L;
}

int dp_host_run_script(lua_State *L, const char *script, char **pre, int n_pre, char **args, int n_args) {
  return dp_host_run_script_ex(L, script, pre, n_pre, args, n_args, NULL);
}

int dp_host_run_script_ex(lua_State *L, const char *script, char **pre, int n_pre, char **args, int n_args,
                          bool *load_failed) {
  /* arg as lua5.4 builds it: arg[-n_pre..-1] = interpreter and options,
   * arg[0] = script, arg[1..] = the script's arguments */
  lua_createtable(L, n_args, n_pre + 1);
  for (int i = 0; i < n_pre; i++) {
    lua_pushstring(L, pre[i]);
    lua_rawseti(L, -2, i - n_pre);
  }
  lua_pushstring(L, script);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < n_args; i++) {
    lua_pushstring(L, args[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  lua_pushcfunction(L, traceback);
  int rc = luaL_loadfile(L, script);
  if (load_failed) *load_failed = rc != LUA_OK;
  if (rc == LUA_OK) {
    luaL_checkstack(L, n_args + 2, "too many arguments");
    for (int i = 0; i < n_args; i++) lua_pushstring(L, args[i]);
    rc = lua_pcall(L, n_args, 0, -2 - n_args);
  }
  if (rc != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    report_failure(msg ? msg : "(error object is not a string)");
    fprintf(stderr, "ddplua: %s\n", msg ? msg : "(error object is not a string)");
    fflush(stderr);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) { return dp_host_main(argc, argv); }
