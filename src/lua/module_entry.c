/* Entry point of lib/ddplua/core.so: `require "ddplua.core"` from stock
 * lua5.4 finds luaopen_ddplua_core here. The host links the same function
 * and preloads it instead. */
#include <lua.h>

int luaopen_ddplua_core(lua_State *L);

/* keep the symbol exported from the module even though it is defined in the
 * static runtime library */
int (*const ddplua_core_entry)(lua_State *) = luaopen_ddplua_core;
