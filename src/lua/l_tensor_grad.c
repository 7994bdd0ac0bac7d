/* Bindings the Lua nn and optim libraries build on: the keep_grad_buf flag,
 * zeroing many gradients in one call, swapping a parameter's data in
 * place (Module:to keeps the parameter objects an optimizer or DDP already
 * holds, as PyTorch's param.data = ... does), and autograd.grad's engine call. */
#include <stdbool.h>

#include "autograd/autograd.h"
#include "lua/l_util.h"
#include "ops/ops.h"

/* core.keep_grad_buf(t, on) sets the flag and returns t;
 * core.keep_grad_buf(t) returns it. With the flag set, zero_grad zeroes .grad
 * in place instead of dropping it (DDP points .grad into its bucket memory).
 * A function of the core, not a tensor method: users never need it. */
static int l_keep_grad_buf(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (lua_isnone(L, 2)) {
    lua_pushboolean(L, t->keep_grad_buf);
    return 1;
  }
  luaL_checktype(L, 2, LUA_TBOOLEAN);
  t->keep_grad_buf = lua_toboolean(L, 2);
  lua_settop(L, 1);
  return 1;
}

/* _zero_grads(list_of_tensors, set_to_none): one call for a whole module or
 * parameter group. A gradient is dropped when set_to_none is true, or zeroed
 * in place otherwise. A kept gradient buffer (DDP's bucket view) dropped
 * stays in memory, only marked zero-pending: it reads as no gradient (nil)
 * and optimizers skip it, as PyTorch's None, and the next backward
 * overwrites it instead of adding, so dropping it costs no pass over memory. */
static int l_zero_grads(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  bool set_to_none = lua_isnoneornil(L, 2) ? true : lua_toboolean(L, 2);
  lua_Integer n = luaL_len(L, 1);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    dp_tensor *t = lt_test(L, -1);
    if (!t)
      return luaL_error(L, "zero_grad: element %I is a %s, expected a tensor", (lua_Integer)i, luaL_typename(L, -1));
    lua_pop(L, 1);
    if (!t->grad) continue;
    if (t->keep_grad_buf && set_to_none) t->grad_zero_pending = true; /* None, the memory kept */
    else if (set_to_none) dp_clear(&t->grad);
    else {
      LT_CHECK(L, dp_fill_(t->grad, 0));
      t->grad_zero_pending = false;
    }
  }
  return 0;
}

/* _set_data(t, u): t becomes a view of u's storage, shape and dtype (u is
 * not changed). t must be a leaf; an existing gradient is converted along
 * (a zero-pending one is no gradient: dropped where it would be converted). */
static int l_set_data(lua_State *L) {
  dp_tensor *t = lt_check(L, 1), *u = lt_check(L, 2);
  if (!dp_is_leaf(t)) return luaL_error(L, "_set_data: the target must be a leaf tensor");
  if (t->requires_grad && !dp_dtype_is_float(u->dtype))
    return luaL_error(L, "_set_data: a tensor that requires grad cannot take %s data", dp_dtype_name(u->dtype));
  if (t->grad && (t->grad->dtype != u->dtype || !dp_device_eq(dp_dev(t->grad), dp_dev(u)) || !dp_same_shape(t, u))) {
    if (!dp_same_shape(t, u) || t->grad_zero_pending) {
      t->grad_zero_pending = false;
      dp_clear(&t->grad);
    } else {
      dp_tensor *g = dp_to(t->grad, u->dtype, dp_dev(u));
      if (!g) return lt_error(L);
      dp_release(t->grad);
      t->grad = g;
    }
  }
  dp_storage_retain(u->storage);
  dp_storage_release(t->storage);
  t->storage = u->storage;
  t->offset = u->offset;
  t->ndim = u->ndim;
  for (int d = 0; d < u->ndim; d++) {
    t->shape[d] = u->shape[d];
    t->stride[d] = u->stride[d];
  }
  t->dtype = u->dtype;
  lua_settop(L, 1);
  return 1;
}

/* the tensors of list argument idx (what names it in errors), at most 4096; with holes, exactly n of them (n >= 0:
 * nil entries allowed, none past n) */
static int tensor_list(lua_State *L, int idx, const char *what, dp_tensor **out, bool holes, lua_Integer n) {
  luaL_checktype(L, idx, LUA_TTABLE);
  if (!holes) n = luaL_len(L, idx);
  if (n < 0 || n > 4096) return luaL_error(L, "autograd.grad: %s: %I tensors (expected 0 to 4096)", what, n);
  if (holes && lua_geti(L, idx, n + 1) != LUA_TNIL)
    return luaL_error(L, "autograd.grad: more grad_outputs than the %I outputs (expected one each, nil for 1)", n);
  if (holes) lua_pop(L, 1);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, idx, i);
    out[i - 1] = holes && lua_isnil(L, -1) ? NULL : lt_test(L, -1);
    if (!out[i - 1] && !(holes && lua_isnil(L, -1)))
      return luaL_error(L, "autograd.grad: %s[%I] is a %s, expected a tensor", what, i, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  return (int)n;
}

/* core._autograd_grad(outputs, inputs, grad_outputs | nil, retain_graph) -> a list of #inputs gradients, false for
 * an input the outputs do not depend on (nn/autograd.lua's ddp.autograd.grad checks the rest) */
static int l_autograd_grad(lua_State *L) {
  static dp_tensor *outs[4096], *ins[4096], *gouts[4096], *res[4096]; /* one Lua state runs autograd at a time */
  int n_out = tensor_list(L, 1, "outputs", outs, false, 0), n_in = tensor_list(L, 2, "inputs", ins, false, 0);
  bool given = !lua_isnoneornil(L, 3);
  if (given) tensor_list(L, 3, "grad_outputs", gouts, true, n_out);
  lua_State *prev = lt_engine_state(L);
  int rc = dp_autograd_grad(n_out, outs, given ? gouts : NULL, n_in, ins, res, lua_toboolean(L, 4));
  lt_engine_state(prev);
  LT_CHECK(L, rc);
  lua_createtable(L, n_in, 0);
  for (int k = 0; k < n_in; k++) {
    if (res[k]) lt_push(L, res[k]);
    else lua_pushboolean(L, false);
    lua_rawseti(L, -2, k + 1);
  }
  return 1;
}

void lt_open_nn_support(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"_zero_grads", l_zero_grads},
                                   {"_set_data", l_set_data},
                                   {"keep_grad_buf", l_keep_grad_buf},
                                   {"_autograd_grad", l_autograd_grad},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
