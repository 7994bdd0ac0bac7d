/* Registration of the io bindings (l_io.c: YAML, JSON, files, terminal,
 * RNG state, raw bytes; l_io_safetensors.c: ddp.save / ddp.load). */
#ifndef DP_L_IO_H
#define DP_L_IO_H

#include <lua.h>

void lt_open_io(lua_State *L, int module);
void lt_open_safetensors(lua_State *L, int module);

#endif
