/* Functional bindings for the layer ops (ddp.nn.F and the nn modules build
 * on these): convolution, pooling, batch and layer norm, dropout,
 * embedding. Module-level functions:
 *
 *   ddp.conv2d(x, w [, b [, stride [, padding [, dilation [, groups]]]]])   pairs: n or {h, w}; 1 / 0 / 1 / 1
 *   ddp.conv_transpose2d(x, w [, b [, stride [, padding [, output_padding [, groups [, dilation]]]]]])  1/0/0/1/1
 *   ddp.core.conv3d_direct(x, w, b, stride, padding, dilation, groups)  {d, h, w} triples; nil: declined
 *   ddp.core.conv_transpose3d_direct(x, w, b, stride, padding, output_padding, dilation, groups)  likewise
 *   ddp.max_pool2d(x, kernel [, stride [, padding [, dilation [, ceil_mode]]]])  stride defaults to kernel
 *   ddp.avg_pool2d(x, kernel [, stride [, padding [, ceil_mode]]])  padding counted in the mean
 *   (PyTorch's positional order; max_pool2d's dilation must be 1)
 *   ddp.batch_norm(x, running_mean, running_var, weight, bias [, training [, momentum [, eps [, act]]]])
 *       tensors may be nil; training false, momentum 0.1, eps 1e-5 (PyTorch's F.batch_norm);
 *       act "relu": relu(batch_norm(...)) fused (nn.Sequential's BatchNorm + ReLU)
 *   ddp.core.batch_norm_relu_max_pool2d(x, running_mean, running_var, weight, bias, training, momentum, eps,
 *       kernel [, stride [, padding [, ceil_mode]]])  max_pool2d(relu(batch_norm(...))) fused (nn.Sequential's
 *       BatchNorm2d + ReLU + MaxPool2d)
 *   ddp.layer_norm(x, normalized_shape [, weight [, bias [, eps]]])  shape: n or {d1, ...}
 *   ddp.dropout(x [, p [, training]])                  p 0.5, training true
 *   ddp.embedding(ids, weight)                         ids int64, 1-based
 *
 * The batch-norm pieces SyncBatchNorm is assembled from (no autograd; see
 * dp_batch_norm_* in ops/ops.h). Forward: each rank computes
 *   mean, var, count = ddp.batch_norm_stats(x)           -- biased var, count = values per channel
 * the ranks all-gather them, then
 *   mean, var, total = ddp.batch_norm_gather_stats(means [R, C], vars [R, C], counts)
 *   ddp.batch_norm_update_stats(running_mean, running_var, mean, var, total, momentum)
 *   invstd = ddp.batch_norm_invstd(var, eps)
 *   y = ddp.batch_norm_elemt(x, mean, invstd, weight, bias)
 * Backward: each rank computes
 *   sum_dy, sum_dy_xhat = ddp.batch_norm_backward_reduce(gy, x, mean, invstd)
 * (the local bias and weight gradients), all-reduces both sums, then
 *   gx = ddp.batch_norm_backward_elemt(gy, x, mean, invstd, weight, sum_dy, sum_dy_xhat, total) */
#include <string.h>

#include "lua/l_util.h"
#include "ops/ops.h"

static dp_tensor *opt_tensor(lua_State *L, int idx) { return lua_isnoneornil(L, idx) ? NULL : lt_check(L, idx); }

static bool opt_bool(lua_State *L, int idx, bool dflt) {
  if (lua_isnoneornil(L, idx)) return dflt;
  luaL_checktype(L, idx, LUA_TBOOLEAN);
  return lua_toboolean(L, idx);
}

/* An integer or a table {h, w} at idx into out[2]; nil gives dflt (both
 * entries); `what` names the argument in errors. */
static void read_pair(lua_State *L, int idx, const char *op, const char *what, const int64_t *dflt, int64_t *out) {
  if (lua_isnoneornil(L, idx)) {
    out[0] = dflt[0], out[1] = dflt[1];
    return;
  }
  if (lua_type(L, idx) == LUA_TNUMBER) {
    int ok;
    lua_Integer v = lua_tointegerx(L, idx, &ok);
    if (!ok) luaL_error(L, "%s: %s must be an integer or a table {h, w}, got %s", op, what, lua_tostring(L, idx));
    out[0] = out[1] = v;
    return;
  }
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: %s must be an integer or a table {h, w}, got %s", op, what, luaL_typename(L, idx));
  if (luaL_len(L, idx) != 2)
    luaL_error(L, "%s: %s table must have 2 entries {h, w}, got %I", op, what, (lua_Integer)luaL_len(L, idx));
  for (int i = 0; i < 2; i++) {
    lua_geti(L, idx, i + 1);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "%s: %s entry %d must be an integer, got %s", op, what, i + 1, luaL_typename(L, -1));
    out[i] = v;
    lua_pop(L, 1);
  }
}

/* core.conv3d_direct(x, w, b, {sd, sh, sw}, {pd, ph, pw}, {dd, dh, dw}, groups): the backend's direct 3-d
 * convolution, or nil where it declines the case (nn/conv3d.lua then composes it from 2-d convolutions) */
static void read_triple(lua_State *L, int idx, const char *op, const char *what, int64_t *out) {
  luaL_checktype(L, idx, LUA_TTABLE);
  if (luaL_len(L, idx) != 3)
    luaL_error(L, "%s: %s must be a table of 3 integers {d, h, w}, got %I entries", op, what,
               (lua_Integer)luaL_len(L, idx));
  for (int i = 0; i < 3; i++) {
    lua_geti(L, idx, i + 1);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "%s: %s entry %d must be an integer, got %s", op, what, i + 1, luaL_typename(L, -1));
    out[i] = v;
    lua_pop(L, 1);
  }
}

/* a direct kernel's result: the tensor, nil where the backend declined the case, or its error */
static int push_direct(lua_State *L, dp_tensor *y, bool declined) {
  if (!y && declined) {
    lua_pushnil(L);
    return 1;
  }
  return lt_push(L, y);
}

static int l_conv3d_direct(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *w = lt_check(L, 2), *b = opt_tensor(L, 3);
  dp_conv3d_args a;
  read_triple(L, 4, "conv3d", "stride", a.stride);
  read_triple(L, 5, "conv3d", "padding", a.padding);
  read_triple(L, 6, "conv3d", "dilation", a.dilation);
  a.groups = luaL_checkinteger(L, 7);
  bool declined;
  dp_tensor *y = dp_conv3d_direct(x, w, b, &a, &declined);
  return push_direct(L, y, declined);
}

/* core.conv_transpose3d_direct(x, w, b, stride, padding, output_padding, dilation, groups): triples; nil: declined */
static int l_conv_transpose3d_direct(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *w = lt_check(L, 2), *b = opt_tensor(L, 3);
  dp_conv_transpose3d_args a;
  read_triple(L, 4, "conv_transpose3d", "stride", a.stride);
  read_triple(L, 5, "conv_transpose3d", "padding", a.padding);
  read_triple(L, 6, "conv_transpose3d", "output_padding", a.output_padding);
  read_triple(L, 7, "conv_transpose3d", "dilation", a.dilation);
  a.groups = luaL_checkinteger(L, 8);
  bool declined;
  dp_tensor *y = dp_conv_transpose3d_direct(x, w, b, &a, &declined);
  return push_direct(L, y, declined);
}

static int l_conv2d(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *w = lt_check(L, 2), *b = opt_tensor(L, 3);
  dp_conv2d_args a;
  read_pair(L, 4, "conv2d", "stride", (int64_t[]){1, 1}, a.stride);
  read_pair(L, 5, "conv2d", "padding", (int64_t[]){0, 0}, a.padding);
  read_pair(L, 6, "conv2d", "dilation", (int64_t[]){1, 1}, a.dilation);
  a.groups = luaL_optinteger(L, 7, 1);
  return lt_push(L, dp_conv2d(x, w, b, &a));
}

/* PyTorch's order: groups before dilation */
static int l_conv_transpose2d(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *w = lt_check(L, 2), *b = opt_tensor(L, 3);
  dp_conv_transpose2d_args a;
  read_pair(L, 4, "conv_transpose2d", "stride", (int64_t[]){1, 1}, a.stride);
  read_pair(L, 5, "conv_transpose2d", "padding", (int64_t[]){0, 0}, a.padding);
  read_pair(L, 6, "conv_transpose2d", "output_padding", (int64_t[]){0, 0}, a.output_padding);
  a.groups = luaL_optinteger(L, 7, 1);
  read_pair(L, 8, "conv_transpose2d", "dilation", (int64_t[]){1, 1}, a.dilation);
  return lt_push(L, dp_conv_transpose2d(x, w, b, &a));
}

static int pool(lua_State *L, bool is_max) {
  const char *op = is_max ? "max_pool2d" : "avg_pool2d";
  dp_tensor *x = lt_check(L, 1);
  dp_pool2d_args a = {0};
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "%s: kernel_size is required", op);
  read_pair(L, 2, op, "kernel_size", NULL, a.kernel);
  read_pair(L, 3, op, "stride", a.kernel, a.stride);
  read_pair(L, 4, op, "padding", (int64_t[]){0, 0}, a.padding);
  int ceil_arg = 5;
  if (is_max) { /* F.max_pool2d(x, k, stride, padding, dilation, ceil_mode) */
    int64_t dil[2];
    read_pair(L, 5, op, "dilation", (int64_t[]){1, 1}, dil);
    if (dil[0] != 1 || dil[1] != 1)
      return luaL_error(L, "max_pool2d: dilation %I x %I is not supported (only 1)", (lua_Integer)dil[0],
                        (lua_Integer)dil[1]);
    ceil_arg = 6;
  }
  a.ceil_mode = opt_bool(L, ceil_arg, false);
  if (!is_max) { /* F.avg_pool2d(x, k, stride, padding, ceil_mode, count_include_pad, divisor_override) */
    a.exclude_pad = !opt_bool(L, 6, true);
    if (!lua_isnoneornil(L, 7)) {
      int ok;
      lua_Integer d = lua_tointegerx(L, 7, &ok);
      if (!ok || d < 1)
        return luaL_error(L, "avg_pool2d: divisor_override must be a positive integer, got %s",
                          luaL_tolstring(L, 7, NULL));
      a.divisor_override = (int64_t)d;
    }
  }
  return lt_push(L, is_max ? dp_max_pool2d(x, &a) : dp_avg_pool2d(x, &a));
}
static int l_max_pool2d(lua_State *L) { return pool(L, true); }
static int l_avg_pool2d(lua_State *L) { return pool(L, false); }

/* core.unfold2d(x, kernel_size [, dilation [, padding [, stride]]]) and core.fold2d(cols, output_size,
 * kernel_size [, dilation [, padding [, stride]]]): F.unfold and F.fold, PyTorch's order; pairs n or {h, w} */
static void read_unfold(lua_State *L, int idx, const char *op, dp_unfold_args *a) {
  if (lua_isnoneornil(L, idx)) luaL_error(L, "%s: kernel_size is required", op);
  read_pair(L, idx, op, "kernel_size", NULL, a->kernel);
  read_pair(L, idx + 1, op, "dilation", (int64_t[]){1, 1}, a->dilation);
  read_pair(L, idx + 2, op, "padding", (int64_t[]){0, 0}, a->padding);
  read_pair(L, idx + 3, op, "stride", (int64_t[]){1, 1}, a->stride);
}
static int l_unfold2d(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  dp_unfold_args a;
  read_unfold(L, 2, "unfold", &a);
  return lt_push(L, dp_unfold2d(x, &a));
}
static int l_fold2d(lua_State *L) {
  dp_tensor *cols = lt_check(L, 1);
  int64_t out[2];
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "fold: output_size is required");
  read_pair(L, 2, "fold", "output_size", NULL, out);
  dp_unfold_args a;
  read_unfold(L, 3, "fold", &a);
  return lt_push(L, dp_fold2d(cols, out, &a));
}

static int l_batch_norm(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4);
  dp_tensor *b = opt_tensor(L, 5);
  bool training = opt_bool(L, 6, false);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  const char *act = luaL_optstring(L, 9, NULL);
  if (act && strcmp(act, "relu") != 0)
    return luaL_error(L, "batch_norm: the fused activation must be \"relu\" or nil, got \"%s\"", act);
  if (act) return lt_push(L, dp_batch_norm_relu(x, rm, rv, w, b, training, momentum, eps));
  return lt_push(L, dp_batch_norm(x, rm, rv, w, b, training, momentum, eps));
}

/* batch_norm_relu_max_pool2d(x, running_mean, running_var, weight, bias, training, momentum, eps, kernel
 * [, stride [, padding [, ceil_mode]]]) */
static int l_batch_norm_relu_max_pool2d(lua_State *L) {
  const char *op = "batch_norm_relu_max_pool2d";
  dp_tensor *x = lt_check(L, 1), *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4);
  dp_tensor *b = opt_tensor(L, 5);
  bool training = opt_bool(L, 6, false);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  dp_pool2d_args a = {0};
  lt_read_pool2d(L, 9, op, &a);
  return lt_push(L, dp_batch_norm_relu_max_pool2d(x, rm, rv, w, b, training, momentum, eps, &a));
}

void lt_read_pool2d(lua_State *L, int idx, const char *op, dp_pool2d_args *a) {
  if (lua_isnoneornil(L, idx)) luaL_error(L, "%s: kernel_size is required", op);
  read_pair(L, idx, op, "kernel_size", NULL, a->kernel);
  read_pair(L, idx + 1, op, "stride", a->kernel, a->stride);
  read_pair(L, idx + 2, op, "padding", (int64_t[]){0, 0}, a->padding);
  a->ceil_mode = opt_bool(L, idx + 3, false);
}

static int l_batch_norm_stats(lua_State *L) {
  dp_tensor *mean, *var;
  int64_t count;
  LT_CHECK(L, dp_batch_norm_stats(lt_check(L, 1), &mean, &var, &count));
  lt_push(L, mean);
  lt_push(L, var);
  lua_pushinteger(L, count);
  return 3;
}

/* counts: a tensor [R] or a Lua array of R numbers */
static int l_batch_norm_gather_stats(lua_State *L) {
  dp_tensor *ma = lt_check(L, 1), *va = lt_check(L, 2), *counts = lt_test(L, 3), *owned = NULL;
  if (!counts) {
    if (!lua_istable(L, 3))
      return luaL_error(L, "batch_norm_gather_stats: counts must be a tensor or a table of numbers, got %s",
                        luaL_typename(L, 3));
    int64_t r = (int64_t)luaL_len(L, 3);
    owned = counts = dp_empty(DP_F64, 1, &r, dp_cpu());
    if (!owned) return lt_error(L);
    lt_push(L, owned); /* the userdata owns it, so an error below cannot leak it */
    for (int64_t i = 0; i < r; i++) {
      lua_geti(L, 3, i + 1);
      int ok;
      lua_Number v = lua_tonumberx(L, -1, &ok);
      if (!ok)
        return luaL_error(L, "batch_norm_gather_stats: count %I must be a number, got %s", (lua_Integer)(i + 1),
                          luaL_typename(L, -1));
      ((double *)dp_data(owned))[i] = v;
      lua_pop(L, 1);
    }
    if (dp_dev(ma).type != DP_CPU) {
      dp_tensor *moved = dp_to(owned, DP_F64, dp_dev(ma));
      if (!moved) return lt_error(L);
      lt_push(L, moved);
      counts = moved;
    }
  }
  dp_tensor *mean, *var;
  double total;
  LT_CHECK(L, dp_batch_norm_gather_stats(ma, va, counts, &mean, &var, &total));
  lt_push(L, mean);
  lt_push(L, var);
  lua_pushnumber(L, total);
  return 3;
}

static int l_batch_norm_update_stats(lua_State *L) {
  dp_tensor *rm = lt_check(L, 1), *rv = lt_check(L, 2), *mean = lt_check(L, 3), *var = lt_check(L, 4);
  double count = luaL_checknumber(L, 5), momentum = luaL_optnumber(L, 6, 0.1);
  LT_CHECK(L, dp_batch_norm_update_stats(rm, rv, mean, var, count, momentum));
  return 0;
}

static int l_batch_norm_invstd(lua_State *L) {
  return lt_push(L, dp_batch_norm_invstd(lt_check(L, 1), luaL_optnumber(L, 2, 1e-5)));
}

static int l_batch_norm_elemt(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *mean = lt_check(L, 2), *invstd = lt_check(L, 3);
  return lt_push(L, dp_batch_norm_elemt(x, mean, invstd, opt_tensor(L, 4), opt_tensor(L, 5)));
}

static int l_batch_norm_backward_reduce(lua_State *L) {
  dp_tensor *gy = lt_check(L, 1), *x = lt_check(L, 2), *mean = lt_check(L, 3), *invstd = lt_check(L, 4);
  dp_tensor *s1, *s2;
  LT_CHECK(L, dp_batch_norm_backward_reduce(gy, x, mean, invstd, &s1, &s2));
  lt_push(L, s1);
  lt_push(L, s2);
  return 2;
}

static int l_batch_norm_backward_elemt(lua_State *L) {
  dp_tensor *gy = lt_check(L, 1), *x = lt_check(L, 2), *mean = lt_check(L, 3), *invstd = lt_check(L, 4);
  dp_tensor *w = opt_tensor(L, 5), *s1 = lt_check(L, 6), *s2 = lt_check(L, 7);
  double count = luaL_checknumber(L, 8);
  return lt_push(L, dp_batch_norm_backward_elemt(gy, x, mean, invstd, w, s1, s2, count));
}

/* normalized_shape: an integer or a table; it must equal x's last dims */
/* core.group_norm(x, groups, weight or nil, bias or nil, eps): the fused kernel (CPU; nn/norm_more.lua checks the
 * arguments and composes elsewhere) */
static int l_group_norm(lua_State *L) {
  return lt_push(
      L, dp_group_norm(lt_check(L, 1), luaL_checkinteger(L, 2), lt_test(L, 3), lt_test(L, 4), luaL_checknumber(L, 5)));
}

static int l_layer_norm(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  int64_t shape[DP_MAXDIM];
  int nd;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    nd = 1;
    shape[0] = luaL_checkinteger(L, 2);
  } else if (lua_istable(L, 2)) {
    nd = lt_read_shape(L, 2, shape, NULL);
  } else {
    return luaL_error(L, "layer_norm: normalized_shape must be an integer or a table of integers, got %s",
                      luaL_typename(L, 2));
  }
  bool match = nd >= 1 && nd <= x->ndim;
  for (int d = 0; match && d < nd; d++) match = shape[d] == x->shape[x->ndim - nd + d];
  if (!match) {
    char a[160], b[160];
    return luaL_error(L, "layer_norm: normalized_shape %s does not match the last dimensions of input shape %s",
                      dp_shape_str_n(nd, shape, a, sizeof a), dp_shape_str(x, b, sizeof b));
  }
  dp_tensor *w = opt_tensor(L, 3), *b = opt_tensor(L, 4);
  return lt_push(L, dp_layer_norm(x, nd, w, b, luaL_optnumber(L, 5, 1e-5)));
}

static int l_dropout(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  double p = luaL_optnumber(L, 2, 0.5);
  return lt_push(L, dp_dropout(x, p, opt_bool(L, 3, true)));
}

/* PyTorch's F.embedding(input, weight) order */
/* embedding(ids, weight [, padding_idx]): padding_idx 1-based, nil for none */
static int l_embedding(lua_State *L) {
  dp_tensor *ids = lt_check(L, 1), *w = lt_check(L, 2);
  lua_Integer pad = lua_isnoneornil(L, 3) ? 0 : luaL_checkinteger(L, 3);
  if (!lua_isnoneornil(L, 3) && w->ndim == 2 && (pad < 1 || pad > w->shape[0]))
    return luaL_error(L, "embedding: padding_idx must be in 1..%I (the weight's rows), got %I",
                      (lua_Integer)w->shape[0], pad);
  return lt_push(L, dp_embedding(w, ids, 1, pad - 1));
}

void lt_open_nn_layers(lua_State *L, int module, int methods) {
  (void)methods;
  static const luaL_Reg funcs[] = {{"conv2d", l_conv2d},
                                   {"conv3d_direct", l_conv3d_direct},
                                   {"conv_transpose3d_direct", l_conv_transpose3d_direct},
                                   {"conv_transpose2d", l_conv_transpose2d},
                                   {"max_pool2d", l_max_pool2d},
                                   {"avg_pool2d", l_avg_pool2d},
                                   {"batch_norm", l_batch_norm},
                                   {"batch_norm_relu_max_pool2d", l_batch_norm_relu_max_pool2d},
                                   {"batch_norm_stats", l_batch_norm_stats},
                                   {"batch_norm_gather_stats", l_batch_norm_gather_stats},
                                   {"batch_norm_update_stats", l_batch_norm_update_stats},
                                   {"batch_norm_invstd", l_batch_norm_invstd},
                                   {"batch_norm_elemt", l_batch_norm_elemt},
                                   {"batch_norm_backward_reduce", l_batch_norm_backward_reduce},
                                   {"batch_norm_backward_elemt", l_batch_norm_backward_elemt},
                                   {"layer_norm", l_layer_norm},
                                   {"group_norm", l_group_norm},
                                   {"dropout", l_dropout},
                                   {"embedding", l_embedding},
                                   {"unfold2d", l_unfold2d},
                                   {"fold2d", l_fold2d},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
