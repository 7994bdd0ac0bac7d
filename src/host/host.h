/* The host program's parts: main.c (Lua state and script runner) and
 * launcher.c (arguments, spawning and supervising workers). */
#ifndef DP_HOST_H
#define DP_HOST_H

#include <lua.h>

/* A Lua state with the standard libraries, package.path pointing at the
 * ddplua Lua library and ddplua.core preloaded. */
lua_State *dp_host_new_state(void);
/* Runs script with `arg` and `...` set like lua5.4 does; prints the error
 * with a traceback and returns 1 on failure. */
int dp_host_run_script(lua_State *L, const char *script, int argc, char **argv, const char *exe);
/* Parses the command line and runs in-process or launches workers. */
int dp_host_main(int argc, char **argv);

#endif
