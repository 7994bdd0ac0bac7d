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
 * weak table in the registry (a collected tensor leaves it by itself), each with where its copy is taken among the
 * hooks: PyTorch 1.13 runs all of a tensor's Python hooks as one hook, placed where the first was registered, so
 * the gradient kept is the one before every hook when retain_grad came first, else the one after every hook
 * (0 or LUA_MAXINTEGER hooks before the copy). */
#define RETAINED "ddplua.retained"
#define GRAD_HOOKS "ddplua.grad_hooks"
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
  if (lua_rawget(L, -2) == LUA_TNIL) { /* a second call keeps the first place */
    push_weak_table(L, GRAD_HOOKS);
    lua_pushvalue(L, 1);
    lua_Integer before = lua_rawget(L, -2) == LUA_TTABLE && lua_rawlen(L, -1) > 0 ? LUA_MAXINTEGER : 0;
    lua_pushvalue(L, 1);
    lua_pushinteger(L, before);
    lua_rawset(L, 2);
  }
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

/* t:register_hook's functions: a weak-keyed table in the registry (GRAD_HOOKS), tensor -> list of functions
 * (core._grad_hooks() gives it to tensor_hooks.lua, which adds and removes them) */
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

/* the tensors a backward watches: [k] = {box, hooks list or false} on the Lua stack at `idx`, ts and flags beside;
 * in a hooks list, `true` marks where retain_grad takes its copy (into res[k]) */
typedef struct {
  lua_State *L;
  int idx;
  dp_tensor **res;
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

/* *dst += g (g consumed) */
static int add_into_res(dp_tensor **dst, dp_tensor *g) {
  if (!*dst) {
    *dst = g;
    return 0;
  }
  dp_tensor *s = dp_add(*dst, g);
  dp_release(g);
  if (!s) return -1;
  dp_release(*dst);
  *dst = s;
  return 0;
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
    if (lua_rawgeti(L, hooks, i) == LUA_TBOOLEAN) { /* retain_grad's place */
      dp_tensor *copy = dp_clone(*g);
      if (!copy) rc = -1;
      else rc = add_into_res(&c->res[k], copy);
      lua_settop(L, hooks);
      continue;
    }
    lua_pop(L, 1);
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
  static lua_Integer retain_at[MAX_RETAINED]; /* hooks before retain_grad's copy, -1: not retained */
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
      if (b && b->t && b->t->grad_fn && b->t->grad_fn->released) {
        /* a tensor of a graph a backward already went through (a training loop's earlier step): it cannot get a
         * gradient again, so it leaves the table now rather than at the collection that frees it (a loop that
         * retains a tensor each step would otherwise hold thousands here between full collections) */
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushnil(L);
        lua_rawset(L, -4);
        continue;
      }
      bool hooked = pass && lua_istable(L, -1) && lua_rawlen(L, -1) > 0;
      if (b && b->t && (hooked || (!pass && !dp_is_leaf(b->t)))) {
        int k = 0;
        while (k < n && ts[k] != b->t) k++;
        if (k == n) {
          if (n == MAX_RETAINED)
            return luaL_error(L, "backward: more than %d tensors retain their gradients or have hooks", MAX_RETAINED);
          ts[n] = b->t, flags[n] = 0, retain_at[n] = -1, n++;
          lua_createtable(L, 2, 0);
          lua_pushvalue(L, -3);
          lua_rawseti(L, -2, 1);
          lua_pushboolean(L, 0);
          lua_rawseti(L, -2, 2);
          lua_rawseti(L, watch, k + 1);
        }
        if (!pass) retain_at[k] = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        flags[k] |= pass ? DP_WATCH_HOOK : DP_WATCH_RETAIN;
        if (hooked) { /* a copy of the list (a hook that adds or removes hooks changes the next backward), with
                         retain_grad's place in it: then the engine takes no copy of its own */
          lua_rawgeti(L, watch, k + 1);
          lua_newtable(L);
          lua_Integer m = (lua_Integer)lua_rawlen(L, -3), j = 0;
          for (lua_Integer i = 1; i <= m + 1; i++) {
            if (retain_at[k] >= 0 && (i - 1 == retain_at[k] || (i == m + 1 && retain_at[k] >= m))) {
              lua_pushboolean(L, 1);
              lua_rawseti(L, -2, ++j);
            }
            if (i > m) break;
            lua_rawgeti(L, -3, i);
            lua_rawseti(L, -2, ++j);
          }
          lua_rawseti(L, -2, 2);
          lua_pop(L, 1);
          if (retain_at[k] >= 0) flags[k] &= (uint8_t)~DP_WATCH_RETAIN;
        }
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  for (int k = 0; k < n; k++) res[k] = NULL; /* run_hooks adds retain_grad's copies here too */
  watch_ctx ctx = {L, watch, res};
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
