/* t:backward and what it watches besides the leaves: t:retain_grad() (a non-leaf's gradient kept in its .grad) and
 * t:register_hook's functions (core._grad_hooks(): tensor_hooks.lua keeps them), run through dp_backward_watch
 * (src/autograd/engine.c); the engine's Lua state recorded for custom Functions (l_autograd_fn.c). */
#include <stdint.h>
#include <string.h>

#include "autograd/autograd.h"
#include "lua/l_util.h"
#include "ops/ops.h"

/* t:retain_grad(): a non-leaf tensor keeps the gradient backward computes for it in t.grad (accumulating, as a
 * leaf's); on a leaf it does nothing (a leaf keeps its gradient anyway), as PyTorch. The tensors are the keys of a
 * weak table in the registry: a collected tensor leaves it by itself. */
#define RETAINED "ddplua.retained"
#define MAX_RETAINED 4096
static void push_weak_table(lua_State *L, const char *key);
int lt_retain_grad(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  dp_autograd_refresh(t);
  if (!t->requires_grad) return luaL_error(L, "retain_grad: the tensor does not require grad");
  lua_settop(L, 1);
  if (dp_is_leaf(t)) return 1;
  push_weak_table(L, RETAINED);
  lua_pushvalue(L, 1);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_settop(L, 1);
  return 1;
}

/* whether t:retain_grad() was called on the tensor at idx */
bool lt_retains_grad(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  bool on = lua_getfield(L, LUA_REGISTRYINDEX, RETAINED) == LUA_TTABLE && (lua_pushvalue(L, idx), lua_rawget(L, -2)),
       r = on && lua_toboolean(L, -1);
  lua_settop(L, idx);
  return r;
}

/* t:register_hook's functions: a weak-keyed table in the registry, tensor -> list of functions (core._grad_hooks()
 * gives it to tensor_hooks.lua, which adds and removes them) */
#define GRAD_HOOKS "ddplua.grad_hooks"
static void push_weak_table(lua_State *L, const char *key) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, key);
}
int lt_grad_hooks(lua_State *L) {
  push_weak_table(L, GRAD_HOOKS);
  return 1;
}

/* the tensors a backward watches: [k] = {box, hooks list or false} on the Lua stack at `idx`, ts and flags beside */
typedef struct {
  lua_State *L;
  int idx;
} watch_ctx;

/* in a protected call: hooks[i](gradient) -> the gradient to go on with (arguments: the hook, the gradient as a
 * light userdata, retained for the box made here) */
static int call_hook_protected(lua_State *L) {
  dp_tensor *g = lua_touserdata(L, 2);
  lua_settop(L, 1);
  lt_push(L, g);
  lua_call(L, 1, 1);
  return 1;
}

static int run_hooks(void *vctx, int k, dp_tensor **g) {
  watch_ctx *c = vctx;
  lua_State *L = c->L;
  int top = lua_gettop(L), rc = 0;
  lua_rawgeti(L, c->idx, k + 1);
  lua_rawgeti(L, -1, 2); /* the hooks list */
  int hooks = lua_gettop(L);
  lua_Integer n = lua_istable(L, hooks) ? (lua_Integer)lua_rawlen(L, hooks) : 0;
  for (lua_Integer i = 1; i <= n && !rc; i++) {
    lua_pushcfunction(L, call_hook_protected);
    lua_rawgeti(L, hooks, i);
    dp_retain(*g);
    lua_pushlightuserdata(L, *g);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
      rc = dp_error("gradient hook: %s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(an error object)");
    } else if (!lua_isnil(L, -1)) {
      lt_box *b = luaL_testudata(L, -1, DP_TENSOR_MT);
      if (!b || !b->t) {
        rc = dp_error("gradient hook: must return nil or a tensor, got a %s", luaL_typename(L, -1));
      } else if (!dp_same_shape(b->t, *g) || b->t->dtype != (*g)->dtype) {
        char a[128], e[128];
        rc = dp_error("gradient hook: returned a %s %s tensor for a %s %s gradient", dp_dtype_name(b->t->dtype),
                      dp_shape_str(b->t, a, sizeof a), dp_dtype_name((*g)->dtype), dp_shape_str(*g, e, sizeof e));
      } else {
        dp_retain(b->t);
        dp_release(*g);
        *g = b->t;
      }
    }
    lua_settop(L, hooks);
  }
  lua_settop(L, top);
  return rc;
}

/* dp_backward, with the retained tensors' gradients added to their .grad and the gradient hooks run */
static int run_backward(lua_State *L, dp_tensor *t, dp_tensor *g, bool retain) {
  static dp_tensor *ts[MAX_RETAINED], *res[MAX_RETAINED]; /* one backward at a time (the engine refuses more) */
  static uint8_t flags[MAX_RETAINED];
  int n = 0, top = lua_gettop(L);
  lua_newtable(L); /* [k] = {box, hooks or false}: keeps each watched tensor alive through the hooks' collections */
  int watch = lua_gettop(L);
  for (int pass = 0; pass < 2; pass++) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, pass ? GRAD_HOOKS : RETAINED) != LUA_TTABLE) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      lt_box *b = luaL_testudata(L, -2, DP_TENSOR_MT);
      bool hooked = pass && lua_istable(L, -1) && lua_rawlen(L, -1) > 0;
      if (b && b->t && (hooked || (!pass && !dp_is_leaf(b->t)))) {
        int k = 0;
        while (k < n && ts[k] != b->t) k++;
        if (k == n) {
          if (n == MAX_RETAINED)
            return luaL_error(L, "backward: more than %d tensors retain their gradients or have hooks", MAX_RETAINED);
          ts[n] = b->t, flags[n] = 0, n++;
          lua_createtable(L, 2, 0);
          lua_pushvalue(L, -3);
          lua_rawseti(L, -2, 1);
          lua_pushboolean(L, 0);
          lua_rawseti(L, -2, 2);
          lua_rawseti(L, watch, k + 1);
        }
        flags[k] |= pass ? DP_WATCH_HOOK : DP_WATCH_RETAIN;
        if (hooked) { /* a copy of the list: a hook that adds or removes hooks changes the next backward */
          lua_rawgeti(L, watch, k + 1);
          lua_newtable(L);
          for (lua_Integer i = 1, m = (lua_Integer)lua_rawlen(L, -3); i <= m; i++) {
            lua_rawgeti(L, -3, i);
            lua_rawseti(L, -2, i);
          }
          lua_rawseti(L, -2, 2);
          lua_pop(L, 1);
        }
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  watch_ctx ctx = {L, watch};
  lua_State *prev = lt_engine_state(L);
  int brc = dp_backward_watch(t, g, retain, n, ts, flags, run_hooks, &ctx, res);
  lt_engine_state(prev);
  LT_CHECK(L, brc);
  int rc = 0;
  for (int k = 0; k < n; k++) {
    if (res[k] && !rc) rc = dp_accumulate_grad(ts[k], res[k]);
    dp_release(res[k]);
  }
  lua_settop(L, top);
  LT_CHECK(L, rc);
  return 0;
}

/* t:backward([gradient [, retain_graph | {retain_graph=}]]), or PyTorch's
 * keywords as one table: t:backward{gradient=, retain_graph=}. */
int lt_backward(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (lua_type(L, 2) == LUA_TTABLE) {
    if (!lua_isnone(L, 3)) return luaL_error(L, "backward: after an options table, expected no more arguments");
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      if (lua_type(L, -2) != LUA_TSTRING)
        return luaL_error(L, "backward: options are named (gradient=, retain_graph=), got a %s key",
                          luaL_typename(L, -2));
      const char *k = lua_tostring(L, -2);
      if (strcmp(k, "gradient") != 0 && strcmp(k, "retain_graph") != 0)
        return luaL_error(L, "backward: unknown option '%s' (expected gradient, retain_graph)", k);
      lua_pop(L, 1);
    }
    lua_getfield(L, 2, "gradient");
    dp_tensor *g = lua_isnil(L, -1) ? NULL : lt_test(L, -1);
    if (!g && !lua_isnil(L, -1))
      return luaL_error(L, "backward: option gradient must be a tensor, got %s", luaL_typename(L, -1));
    lua_getfield(L, 2, "retain_graph");
    bool retain = lua_toboolean(L, -1);
    return run_backward(L, t, g, retain);
  }
  dp_tensor *g = lua_isnoneornil(L, 2) ? NULL : lt_check(L, 2);
  bool retain = false;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "retain_graph");
    retain = lua_toboolean(L, -1);
    lua_pop(L, 1);
  } else if (lua_isboolean(L, 3)) {
    retain = lua_toboolean(L, 3);
  }
  return run_backward(L, t, g, retain);
}
