/* Functional nn bindings (ddp.nn.F builds on these): linear, softmax,
 * losses. Convolution, pooling, normalisation, dropout and embedding are
 * in l_ops_layers.c. */
#include <stdio.h>
#include <string.h>

#include "lua/l_util.h"
#include "ops/ops.h"

static dp_tensor *opt_tensor(lua_State *L, int idx) { return lua_isnoneornil(L, idx) ? NULL : lt_check(L, idx); }

/* linear(x, w [, b [, act]]) act: the name of a unary op the op table
 * marks EPILOGUE ("relu", "tanh", "sigmoid") */
static int l_linear(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *w = lt_check(L, 2), *b = opt_tensor(L, 3);
  int act = -1;
  if (!lua_isnoneornil(L, 4)) {
    const char *a = luaL_checkstring(L, 4);
    char names[256] = "";
    for (int op = 0; op < DP_U_COUNT && act < 0; op++) {
      if (!dp_unary_ops[op].epilogue) continue;
      if (strcmp(a, dp_unary_ops[op].name) == 0) act = op;
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
               dp_unary_ops[op].name);
    }
    if (act < 0) return luaL_error(L, "linear: unknown fused activation '%s' (expected one of %s)", a, names);
  }
  return lt_push(L, dp_linear(x, w, b, act));
}

static int softmax(lua_State *L, bool log) {
  dp_tensor *x = lt_check(L, 1);
  int d = lua_isnoneornil(L, 2) ? (x->ndim ? x->ndim - 1 : 0) : lt_check_dim(L, 2, x->ndim, 0);
  return lt_push(L, log ? dp_log_softmax(x, d) : dp_softmax(x, d));
}
static int l_softmax(lua_State *L) { return softmax(L, false); }
static int l_log_softmax(lua_State *L) { return softmax(L, true); }

static dp_reduction read_reduction(lua_State *L, const char *s) {
  if (!s || strcmp(s, "mean") == 0) return DP_REDUCE_MEAN;
  if (strcmp(s, "sum") == 0) return DP_REDUCE_SUM;
  if (strcmp(s, "none") == 0) return DP_REDUCE_NONE;
  luaL_error(L, "unknown reduction '%s' (expected \"mean\", \"sum\" or \"none\")", s);
  return DP_REDUCE_MEAN;
}

/* {reduction=, label_smoothing=, ignore_index=, weight=} at idx (may be
 * none); `smoothing` says whether label_smoothing is an option of op */
static dp_loss_opts read_loss_opts(lua_State *L, int idx, const char *op, bool smoothing) {
  dp_loss_opts o = {.reduction = DP_REDUCE_MEAN, .ignore_index = -100, .base = 1}; /* -100: PyTorch's default */
  if (lua_isnoneornil(L, idx)) return o;
  luaL_checktype(L, idx, LUA_TTABLE);
  static const char *const with_smoothing[] = {"reduction", "label_smoothing", "ignore_index", "weight", NULL};
  static const char *const without[] = {"reduction", "ignore_index", "weight", NULL};
  lt_check_keys(L, idx, op, smoothing ? with_smoothing : without);
  if (lua_getfield(L, idx, "reduction") != LUA_TNIL) o.reduction = read_reduction(L, luaL_checkstring(L, -1));
  if (lua_getfield(L, idx, "label_smoothing") != LUA_TNIL) o.label_smoothing = luaL_checknumber(L, -1);
  if (lua_getfield(L, idx, "ignore_index") != LUA_TNIL) o.ignore_index = luaL_checkinteger(L, -1);
  if (lua_getfield(L, idx, "weight") != LUA_TNIL) o.weight = lt_check(L, -1); /* stays on the stack */
  return o;
}

/* cross_entropy(logits, target [, {reduction=, label_smoothing=, ignore_index=, weight=}]): target class
 * positions (int64) or class probabilities (float, the logits' shape) */
static int l_cross_entropy(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *t = lt_check(L, 2);
  dp_loss_opts o = read_loss_opts(L, 3, "cross_entropy", true);
  return lt_push(L, dp_cross_entropy_opts(x, t, &o));
}

/* nll_loss(log_probs, target [, {reduction=, ignore_index=, weight=}]) */
static int l_nll_loss(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *t = lt_check(L, 2);
  dp_loss_opts o = read_loss_opts(L, 3, "nll_loss", false);
  return lt_push(L, dp_nll_loss(x, t, &o));
}

/* mse_loss(input, target [, {reduction=}]): broadcasting with PyTorch's
 * warning (printed once per process) when the shapes differ */
static int l_mse_loss(lua_State *L) {
  dp_tensor *a = lt_check(L, 1), *b = lt_check(L, 2);
  const char *red = NULL;
  if (lua_istable(L, 3)) {
    static const char *const valid[] = {"reduction", NULL};
    lt_check_keys(L, 3, "mse_loss", valid);
    if (lua_getfield(L, 3, "reduction") != LUA_TNIL) red = luaL_checkstring(L, -1);
  }
  if (!dp_same_shape(a, b)) {
    static bool warned;
    char sa[160], sb[160];
    int nd;
    int64_t sh[DP_MAXDIM];
    if (dp_broadcast_shape(a, b, &nd, sh)) {
      dp_error_prefix("mse_loss: ");
      return lt_error(L);
    }
    if (!warned) {
      warned = true;
      fprintf(stderr,
              "ddplua: warning: mse_loss: using a target size (%s) that is different to the input size (%s). This "
              "will likely lead to incorrect results due to broadcasting. Please ensure they have the same size.\n",
              dp_shape_str(b, sb, sizeof sb), dp_shape_str(a, sa, sizeof sa));
    }
  }
  return lt_push(L, dp_mse_loss(a, b, read_reduction(L, red)));
}

/* core._ctc_loss(log_probs, targets, input_lengths, target_lengths, blank [, zero_infinity]): blank and the
 * labels 1-based; each sample's loss [N] (nn/loss_ctc.lua reduces it) */
static int l_ctc_loss(lua_State *L) {
  dp_tensor *lp = lt_check(L, 1), *tg = lt_check(L, 2), *il = lt_check(L, 3), *tl = lt_check(L, 4);
  lua_Integer blank = luaL_checkinteger(L, 5);
  if (blank < 1 || blank > ((lua_Integer)1 << 62))
    return luaL_error(L, "ctc_loss: blank must be a class (>= 1), got %I", blank);
  bool zi = lua_toboolean(L, 6);
  return lt_push(L, dp_ctc_loss(lp, tg, il, tl, (int64_t)blank - 1, 1, zi));
}

void lt_open_nn_ops(lua_State *L, int module, int methods) {
  static const luaL_Reg funcs[] = {{"linear", l_linear},           {"softmax", l_softmax},
                                   {"log_softmax", l_log_softmax}, {"cross_entropy", l_cross_entropy},
                                   {"mse_loss", l_mse_loss},       {"nll_loss", l_nll_loss},
                                   {"_ctc_loss", l_ctc_loss},      {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
  static const luaL_Reg meths[] = {{"softmax", l_softmax}, {"log_softmax", l_log_softmax}, {NULL, NULL}};
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, meths, 0);
  lua_pop(L, 1);
  lt_open_nn_layers(L, module, methods);
}
