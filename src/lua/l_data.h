/* The data bindings' registration, split by file (l_data.c calls these). */
#ifndef DP_L_DATA_H
#define DP_L_DATA_H

#include <lua.h>

void lt_open_token_file(lua_State *L, int module);   /* l_data_tokens.c */
void lt_open_data_workers(lua_State *L, int module); /* l_data_workers.c */

#endif
