/* Multi-tensor optimizer steps: one Lua->C call per parameter group per
 * step. Each walks the group's parameters, skips those without a gradient
 * (as PyTorch does), creates the per-parameter state tensors on first use
 * and runs the backend's fused update (cpu_optim.c, or the CUDA kernel).
 *
 *   _sgd_step(group, state)            group: {params=, lr=, momentum=, dampening=, weight_decay=, nesterov=}
 *   _adam_step(group, state, decoupled) group: {params=, lr=, betas={b1, b2}, eps=, weight_decay=, amsgrad=}
 *
 * state is the optimizer's table keyed by parameter tensor; state[p] is
 * {momentum_buffer=} (SGD) or {step=, exp_avg=, exp_avg_sq= [, max_exp_avg_sq=]} (Adam; the last with
 * amsgrad), PyTorch's keys. */
#include <stdbool.h>
#include <stdio.h>

#include "lua/l_optim.h"
#include "lua/l_util.h"
#include "ops/ops.h"

double lo_group_number(lua_State *L, int group, const char *key, const char *who) {
  lua_getfield(L, group, key);
  int ok;
  double v = lua_tonumberx(L, -1, &ok);
  if (!ok) luaL_error(L, "%s: option '%s' must be a number, got %s", who, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* The parameter at position i of the group's params if it has a gradient
 * (the op layer checks that it matches), or NULL to skip it. */
dp_tensor *lo_param_with_grad(lua_State *L, int params, lua_Integer i, const char *who) {
  lua_geti(L, params, i);
  dp_tensor *p = lt_test(L, -1);
  if (!p) luaL_error(L, "%s: parameter %I is a %s, expected a tensor", who, (lua_Integer)i, luaL_typename(L, -1));
  lua_pop(L, 1);
  /* a zero-pending gradient (zero_grad on a kept buffer, a parameter DDP
   * found unused on every rank) is PyTorch's None: skipped */
  return p->grad && !p->grad_zero_pending ? p : NULL;
}

/* Pushes state[p] (creating an empty table on first use). */
void lo_push_param_state(lua_State *L, int state, lua_Integer i, int params) {
  lua_geti(L, params, i);
  lua_pushvalue(L, -1);
  if (lua_rawget(L, state) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -2);
    lua_pushvalue(L, -2);
    lua_rawset(L, state); /* state[p] = {} */
  }
  lua_remove(L, -2);
}

/* state table at -1: field `key` (the op layer checks it matches p), or
 * a new zeroed tensor like p stored there. *created says whether it was
 * just made. */
static dp_tensor *state_tensor(lua_State *L, dp_tensor *p, const char *key, lua_Integer i, const char *who,
                               bool *created) {
  *created = false;
  lua_getfield(L, -1, key);
  dp_tensor *s = lt_test(L, -1);
  if (!s && !lua_isnil(L, -1))
    luaL_error(L, "%s: state '%s' of parameter %I is a %s, expected a tensor", who, key, (lua_Integer)i,
               luaL_typename(L, -1));
  lua_pop(L, 1);
  if (s) return s;
  s = dp_zeros(p->dtype, p->ndim, p->shape, dp_dev(p));
  lt_push(L, s); /* raises on NULL */
  lua_setfield(L, -2, key);
  *created = true;
  return s;
}

static int l_sgd_step(lua_State *L) {
  const char *who = "SGD";
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  double lr = lo_group_number(L, 1, "lr", who), momentum = lo_group_number(L, 1, "momentum", who);
  double dampening = lo_group_number(L, 1, "dampening", who), wd = lo_group_number(L, 1, "weight_decay", who);
  lua_getfield(L, 1, "nesterov");
  bool nesterov = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (lua_getfield(L, 1, "params") != LUA_TTABLE) return luaL_error(L, "%s: group has no params list", who);
  int params = lua_gettop(L);
  lua_Integer n = luaL_len(L, params);
  for (lua_Integer i = 1; i <= n; i++) {
    dp_tensor *p = lo_param_with_grad(L, params, i, who);
    if (!p) continue;
    dp_tensor *buf = NULL;
    bool first = false;
    if (momentum != 0) {
      lo_push_param_state(L, 2, i, params);
      buf = state_tensor(L, p, "momentum_buffer", i, who, &first);
      lua_pop(L, 1);
    }
    /* buf stays referenced by the state table */
    char name[64];
    snprintf(name, sizeof name, "%s: parameter %lld", who, (long long)i);
    dp_sgd_args a = {.lr = lr,
                     .momentum = momentum,
                     .dampening = dampening,
                     .weight_decay = wd,
                     .nesterov = nesterov,
                     .first_step = first};
    LT_CHECK(L, dp_sgd_step_(name, p, p->grad, buf, &a));
  }
  return 0;
}

static int l_adam_step(lua_State *L) {
  bool decoupled = lua_toboolean(L, 3);
  const char *who = decoupled ? "AdamW" : "Adam";
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  double lr = lo_group_number(L, 1, "lr", who), eps = lo_group_number(L, 1, "eps", who);
  double wd = lo_group_number(L, 1, "weight_decay", who);
  if (lua_getfield(L, 1, "betas") != LUA_TTABLE) return luaL_error(L, "%s: option 'betas' must be a table", who);
  lua_geti(L, -1, 1);
  lua_geti(L, -2, 2);
  int ok1, ok2;
  double b1 = lua_tonumberx(L, -2, &ok1), b2 = lua_tonumberx(L, -1, &ok2);
  if (!ok1 || !ok2) return luaL_error(L, "%s: option 'betas' must hold two numbers", who);
  lua_pop(L, 3);
  lua_getfield(L, 1, "amsgrad");
  bool amsgrad = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (lua_getfield(L, 1, "params") != LUA_TTABLE) return luaL_error(L, "%s: group has no params list", who);
  int params = lua_gettop(L);
  lua_Integer n = luaL_len(L, params);
  for (lua_Integer i = 1; i <= n; i++) {
    dp_tensor *p = lo_param_with_grad(L, params, i, who);
    if (!p) continue;
    lo_push_param_state(L, 2, i, params);
    bool created;
    dp_tensor *m = state_tensor(L, p, "exp_avg", i, who, &created);
    dp_tensor *v = state_tensor(L, p, "exp_avg_sq", i, who, &created);
    dp_tensor *vmax = amsgrad ? state_tensor(L, p, "max_exp_avg_sq", i, who, &created) : NULL;
    lua_getfield(L, -1, "step");
    lua_Integer step = lua_isnil(L, -1) ? 0 : lua_tointeger(L, -1);
    lua_pop(L, 1);
    step++;
    lua_pushinteger(L, step);
    lua_setfield(L, -2, "step");
    lua_pop(L, 1);
    char name[64];
    snprintf(name, sizeof name, "%s: parameter %lld", who, (long long)i);
    dp_adam_args a = {.lr = lr,
                      .beta1 = b1,
                      .beta2 = b2,
                      .eps = eps,
                      .weight_decay = wd,
                      .decoupled = decoupled,
                      .step = (int64_t)step,
                      .max_exp_avg_sq = vmax};
    LT_CHECK(L, dp_adam_step_(name, p, p->grad, m, v, &a));
  }
  return 0;
}

void lt_open_optim(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"_sgd_step", l_sgd_step}, {"_adam_step", l_adam_step}, {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
