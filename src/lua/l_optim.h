/* Helpers the optimizer bindings share (l_ops_optim.c: SGD, Adam; l_ops_models.c:
 * RMSprop, Adagrad): reading a param group's numbers, the parameters that
 * have a gradient, and the per-parameter state tables. Errors are Lua
 * errors naming `who` (the optimizer) and the option or position. */
#ifndef DDPLUA_L_OPTIM_H
#define DDPLUA_L_OPTIM_H

#include <lua.h>

#include "tensor/tensor.h"

/* group[key] as a number, or an error naming the option */
double lo_group_number(lua_State *L, int group, const char *key, const char *who);
/* params[i] if it has a gradient (a zero-pending one materialised), NULL to skip it */
dp_tensor *lo_param_with_grad(lua_State *L, int params, lua_Integer i, const char *who);
/* pushes state[params[i]], an empty table created on first use */
void lo_push_param_state(lua_State *L, int state, lua_Integer i, int params);

#endif
