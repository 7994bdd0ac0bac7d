/* Bindings of the model layers' ops (nn builds on them; only ddp.core
 * holds them):
 *
 *   core.scaled_dot_product_attention(q, k, v [, {attn_mask=, is_causal=, dropout_p=, scale=}])
 *   core.self_attention_qkv(qkv, n_head [, {is_causal=, dropout_p=, scale=}])   qkv [B, T, 3C] -> [B, T, C]
 *   core.adaptive_avg_pool2d(x, size)                 size: n or {h, w}
 *   core._rnn_layer(mode, xp, w_hh, b_hh, h0, c0, reverse) -> y, h_T, c_T   mode "RNN_TANH" | "RNN_RELU" | "LSTM" |
 * "GRU" core._clip_grad_norm(params, max_norm, norm_type, error_if_nonfinite) -> total norm (0-dim tensor)
 *   core._rmsprop_step(group, state)  core._adagrad_step(group, state)  core._adadelta_step(group, state)
 *
 * The two optimizer steps follow l_ops_optim.c's: one call per parameter
 * group per step, parameters without a gradient skipped, state tensors
 * created on first use in state[p] (PyTorch's names: square_avg,
 * momentum_buffer, grad_avg; sum), the update in C. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lua/l_optim.h"
#include "lua/l_util.h"
#include "ops/model_ops.h"

static dp_tensor *opt_tensor(lua_State *L, int idx) { return lua_isnoneornil(L, idx) ? NULL : lt_check(L, idx); }

static int l_sdpa(lua_State *L) {
  dp_tensor *q = lt_check(L, 1), *k = lt_check(L, 2), *v = lt_check(L, 3), *mask = NULL;
  bool causal = false;
  double p = 0, scale = -1;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    static const char *const valid[] = {"attn_mask", "is_causal", "dropout_p", "scale", NULL};
    lt_check_keys(L, 4, "scaled_dot_product_attention", valid);
    if (lua_getfield(L, 4, "attn_mask") != LUA_TNIL) mask = lt_check(L, -1);
    if (lua_getfield(L, 4, "is_causal") != LUA_TNIL) {
      if (!lua_isboolean(L, -1))
        return luaL_error(L, "scaled_dot_product_attention: is_causal must be a boolean, got %s", luaL_typename(L, -1));
      causal = lua_toboolean(L, -1);
    }
    if (lua_getfield(L, 4, "dropout_p") != LUA_TNIL) p = luaL_checknumber(L, -1);
    if (lua_getfield(L, 4, "scale") != LUA_TNIL) {
      scale = luaL_checknumber(L, -1);
      if (!(scale >= 0))
        return luaL_error(L, "scaled_dot_product_attention: scale must be a number >= 0, got %g", scale);
    }
  }
  return lt_push(L, dp_scaled_dot_product_attention(q, k, v, mask, causal, p, scale));
}

static int l_self_attention_qkv(lua_State *L) {
  dp_tensor *qkv = lt_check(L, 1);
  lua_Integer h = luaL_checkinteger(L, 2);
  bool causal = false;
  double p = 0, scale = -1;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const valid[] = {"is_causal", "dropout_p", "scale", NULL};
    lt_check_keys(L, 3, "self_attention_qkv", valid);
    if (lua_getfield(L, 3, "is_causal") != LUA_TNIL) {
      if (!lua_isboolean(L, -1))
        return luaL_error(L, "self_attention_qkv: is_causal must be a boolean, got %s", luaL_typename(L, -1));
      causal = lua_toboolean(L, -1);
    }
    if (lua_getfield(L, 3, "dropout_p") != LUA_TNIL) p = luaL_checknumber(L, -1);
    if (lua_getfield(L, 3, "scale") != LUA_TNIL) {
      scale = luaL_checknumber(L, -1);
      if (!(scale >= 0)) return luaL_error(L, "self_attention_qkv: scale must be a number >= 0, got %g", scale);
    }
  }
  return lt_push(L, dp_self_attention_qkv(qkv, (int64_t)h, causal, p, scale));
}

static int l_adaptive_avg_pool2d(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  int64_t hw[2];
  if (lua_istable(L, 2)) {
    if (luaL_len(L, 2) != 2) return luaL_error(L, "adaptive_avg_pool2d: output_size must be n or {h, w}");
    for (int i = 0; i < 2; i++) {
      lua_geti(L, 2, i + 1);
      hw[i] = luaL_checkinteger(L, -1);
      lua_pop(L, 1);
    }
  } else {
    hw[0] = hw[1] = luaL_checkinteger(L, 2);
  }
  return lt_push(L, dp_adaptive_avg_pool2d(x, hw[0], hw[1]));
}

static int l_rnn_layer(lua_State *L) {
  static const char *const modes[] = {"RNN_TANH", "RNN_RELU", "LSTM", "GRU", NULL};
  dp_rnn_mode mode = (dp_rnn_mode)luaL_checkoption(L, 1, NULL, modes);
  dp_tensor *xp = lt_check(L, 2), *w = lt_check(L, 3), *b = opt_tensor(L, 4), *h0 = opt_tensor(L, 5);
  dp_tensor *c0 = opt_tensor(L, 6);
  bool reverse = lua_toboolean(L, 7);
  dp_tensor *y = NULL, *h = NULL, *c = NULL;
  LT_CHECK(L, dp_rnn_layer(mode, xp, w, b, h0, c0, reverse, &y, &h, &c));
  lt_push(L, y);
  lt_push(L, h);
  lt_push_or_nil(L, c);
  return 3;
}

/* core._clip_grad_norm(params, ...): the gradients are read here, from the
 * parameters (those without one skipped), rather than handed over as
 * p.grad values: a Lua value of a gradient keeps its storage alive until
 * the collector finds it, after zero_grad has let go of it (the LSTM
 * example held ten 7 MB decoder gradients that way). */
static int l_clip_grad_norm(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  double max_norm = luaL_checknumber(L, 2), p = luaL_optnumber(L, 3, 2.0);
  bool err = lua_toboolean(L, 4);
  int n = (int)luaL_len(L, 1), ng = 0;
  lua_settop(L, 4);
  dp_tensor **gs = lua_newuserdatauv(L, sizeof(dp_tensor *) * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    dp_tensor *param = lo_param_with_grad(L, 1, i + 1, "clip_grad_norm_");
    if (param) gs[ng++] = param->grad;
  }
  return lt_push(L, dp_clip_grad_norm_(gs, ng, max_norm, p, err));
}

/* ---- RMSprop / Adagrad / Adadelta ---- */
/* field key of the state table on top, or a new tensor like p filled with
 * fill stored there (the op layer checks an existing one matches p) */
static dp_tensor *state_tensor(lua_State *L, dp_tensor *p, const char *key, double fill, const char *who) {
  lua_getfield(L, -1, key);
  dp_tensor *s = lt_test(L, -1);
  if (!s && !lua_isnil(L, -1))
    luaL_error(L, "%s: state '%s' is a %s, expected a tensor", who, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  if (s) return s;
  s = dp_full(p->dtype, p->ndim, p->shape, fill, dp_dev(p));
  lt_push(L, s);
  lua_setfield(L, -2, key);
  return s;
}

/* state.step += 1 on the state table on top; returns the new step */
static lua_Integer bump_step(lua_State *L) {
  lua_getfield(L, -1, "step");
  lua_Integer step = lua_isnil(L, -1) ? 0 : lua_tointeger(L, -1);
  lua_pop(L, 1);
  lua_pushinteger(L, ++step);
  lua_setfield(L, -2, "step");
  return step;
}

/* One parameter's update: its state table is on top of the stack (step
 * already bumped to `step`); name is "<who>: parameter <i>" for errors. */
typedef void (*param_update_fn)(lua_State *L, dp_tensor *p, const char *name, lua_Integer step, void *ctx);

/* The loop each of these optimizers runs over its group (argument 1) and
 * state (argument 2): every parameter with a gradient, its state table
 * made on first use and its step counted, then update. */
static int each_param(lua_State *L, const char *who, param_update_fn update, void *ctx) {
  if (lua_getfield(L, 1, "params") != LUA_TTABLE) return luaL_error(L, "%s: group has no params list", who);
  int params = lua_gettop(L);
  for (lua_Integer i = 1, n = luaL_len(L, params); i <= n; i++) {
    dp_tensor *p = lo_param_with_grad(L, params, i, who);
    if (!p) continue;
    lo_push_param_state(L, 2, i, params);
    lua_Integer step = bump_step(L);
    char name[64];
    snprintf(name, sizeof name, "%s: parameter %d", who, (int)i);
    update(L, p, name, step, ctx);
    lua_pop(L, 1);
  }
  return 0;
}

static void rmsprop_update(lua_State *L, dp_tensor *p, const char *name, lua_Integer step, void *ctx) {
  const dp_rmsprop_args *a = ctx;
  (void)step;
  dp_tensor *sq = state_tensor(L, p, "square_avg", 0, "RMSprop");
  dp_tensor *buf = a->momentum > 0 ? state_tensor(L, p, "momentum_buffer", 0, "RMSprop") : NULL;
  dp_tensor *gavg = a->centered ? state_tensor(L, p, "grad_avg", 0, "RMSprop") : NULL;
  LT_CHECK(L, dp_rmsprop_step_(name, p, p->grad, sq, gavg, buf, a));
}

static int l_rmsprop_step(lua_State *L) {
  const char *who = "RMSprop";
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  dp_rmsprop_args a = {.lr = lo_group_number(L, 1, "lr", who),
                       .alpha = lo_group_number(L, 1, "alpha", who),
                       .eps = lo_group_number(L, 1, "eps", who),
                       .weight_decay = lo_group_number(L, 1, "weight_decay", who),
                       .momentum = lo_group_number(L, 1, "momentum", who)};
  lua_getfield(L, 1, "centered");
  a.centered = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return each_param(L, who, rmsprop_update, &a);
}

typedef struct {
  dp_adagrad_args a;
  double lr, lr_decay, init;
} adagrad_ctx;

static void adagrad_update(lua_State *L, dp_tensor *p, const char *name, lua_Integer step, void *ctx) {
  adagrad_ctx *k = ctx;
  dp_tensor *sum = state_tensor(L, p, "sum", k->init, "Adagrad");
  k->a.clr = k->lr / (1 + (double)(step - 1) * k->lr_decay);
  LT_CHECK(L, dp_adagrad_step_(name, p, p->grad, sum, &k->a));
}

static int l_adagrad_step(lua_State *L) {
  const char *who = "Adagrad";
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  adagrad_ctx k = {
      .a = {.eps = lo_group_number(L, 1, "eps", who), .weight_decay = lo_group_number(L, 1, "weight_decay", who)},
      .lr = lo_group_number(L, 1, "lr", who),
      .lr_decay = lo_group_number(L, 1, "lr_decay", who),
      .init = lo_group_number(L, 1, "initial_accumulator_value", who)};
  return each_param(L, who, adagrad_update, &k);
}

static void adadelta_update(lua_State *L, dp_tensor *p, const char *name, lua_Integer step, void *ctx) {
  (void)step;
  dp_tensor *sq = state_tensor(L, p, "square_avg", 0, "Adadelta");
  dp_tensor *acc = state_tensor(L, p, "acc_delta", 0, "Adadelta");
  LT_CHECK(L, dp_adadelta_step_(name, p, p->grad, sq, acc, ctx));
}

static int l_adadelta_step(lua_State *L) {
  const char *who = "Adadelta";
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  dp_adadelta_args a = {.lr = lo_group_number(L, 1, "lr", who),
                        .rho = lo_group_number(L, 1, "rho", who),
                        .eps = lo_group_number(L, 1, "eps", who),
                        .weight_decay = lo_group_number(L, 1, "weight_decay", who)};
  return each_param(L, who, adadelta_update, &a);
}

void lt_open_model_layers(lua_State *L, int module, int methods) {
  (void)methods;
  static const luaL_Reg funcs[] = {{"scaled_dot_product_attention", l_sdpa},
                                   {"self_attention_qkv", l_self_attention_qkv},
                                   {"adaptive_avg_pool2d", l_adaptive_avg_pool2d},
                                   {"_rnn_layer", l_rnn_layer},
                                   {"_clip_grad_norm", l_clip_grad_norm},
                                   {"_rmsprop_step", l_rmsprop_step},
                                   {"_adagrad_step", l_adagrad_step},
                                   {"_adadelta_step", l_adadelta_step},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
