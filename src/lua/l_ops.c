/* Tensor math bindings: operators, the unary ops of the op table (one
 * closure per op, registered from ops/op_table.h: a new op needs nothing
 * here), binary ops and comparisons, reductions, matmul, cat / stack.
 * Positions are 1-based (dims, argmax results). */
#include <string.h>

#include "autograd/autograd.h"
#include "lua/l_util.h"
#include "ops/ops.h"

/* t (op) u where either side may be a number (exact for integers) */
static int binary(lua_State *L, dp_binary_op op) {
  /* a third argument is not ignored: torch.mul(a, b, out=c) ported as ddp.mul(a, b, {out = c}) would leave c as it
   * was and go on with a wrong value */
  if (!lua_isnoneornil(L, 3))
    return luaL_error(L,
                      "%s: expected 2 operands, got a %s as argument 3 (out= and other options are not taken: "
                      "use the result, or c:copy_(result))",
                      dp_binary_name(op), luaL_typename(L, 3));
  dp_tensor *a = lt_test(L, 1), *b = lt_test(L, 2);
  if (a && b) return lt_push(L, dp_binary(op, a, b));
  if (a && lua_type(L, 2) == LUA_TNUMBER) {
    dp_number s = LT_NUMBER(L, 2);
    return lt_push(L, dp_binary_number(op, a, &s, false));
  }
  if (b && lua_type(L, 1) == LUA_TNUMBER) {
    dp_number s = LT_NUMBER(L, 1);
    return lt_push(L, dp_binary_number(op, b, &s, true));
  }
  if (!a && !b)
    return luaL_error(L, "expected a tensor operand, got %s and %s", luaL_typename(L, 1), luaL_typename(L, 2));
  return luaL_error(L, "cannot combine a tensor with a %s (expected a tensor or a number)",
                    luaL_typename(L, a ? 2 : 1));
}

/* t:add(u, alpha) / t:sub(u, alpha) as PyTorch: t + alpha * u, alpha
 * applied after promotion */
static int add_sub(lua_State *L, bool sub) {
  if (lua_isnoneornil(L, 3)) return binary(L, sub ? DP_B_SUB : DP_B_ADD);
  dp_tensor *a = lt_check(L, 1), *b = lt_check(L, 2);
  luaL_checknumber(L, 3);
  dp_number alpha = LT_NUMBER(L, 3);
  if (sub) alpha = alpha.is_int ? dp_number_int((int64_t)(0u - (uint64_t)alpha.i)) : dp_number_float(-alpha.d);
  return lt_push(L, dp_add_scaled(a, b, &alpha));
}
static int l_add(lua_State *L) { return add_sub(L, false); }
static int l_sub(lua_State *L) { return add_sub(L, true); }
static int l_mul(lua_State *L) { return binary(L, DP_B_MUL); }
static int l_div(lua_State *L) { return binary(L, DP_B_DIV); }
static int l_pow(lua_State *L) { return binary(L, DP_B_POW); }
static int l_maximum(lua_State *L) { return binary(L, DP_B_MAX); }
static int l_minimum(lua_State *L) { return binary(L, DP_B_MIN); }
static int l_bce_logits(lua_State *L) { return binary(L, DP_B_BCE_LOGITS); } /* core._bce_logits (internal) */
static int l_eq(lua_State *L) { return binary(L, DP_B_EQ); }
static int l_ne(lua_State *L) { return binary(L, DP_B_NE); }
static int l_lt(lua_State *L) { return binary(L, DP_B_LT); }
static int l_le(lua_State *L) { return binary(L, DP_B_LE); }
static int l_gt(lua_State *L) { return binary(L, DP_B_GT); }
static int l_ge(lua_State *L) { return binary(L, DP_B_GE); }

static int l_unm(lua_State *L) { return lt_push(L, dp_neg(lt_check(L, 1))); }

/* The unary ops of the op table, each a closure over its op: t:name(...)
 * and ddp.name(t, ...), the op's parameters after the tensor in the
 * table's order, nil or absent for the default. */
static int l_unary(lua_State *L) {
  dp_unary_args a = dp_unary_args_of((dp_unary_op)lua_tointeger(L, lua_upvalueindex(1)));
  dp_tensor *x = lt_check(L, 1);
  if (a.op == DP_U_CLAMP) { /* bounds as numbers: exact for int64 (dp_clamp_number) */
    dp_number b[2];
    for (int i = 0; i < 2; i++)
      if (!lua_isnoneornil(L, 2 + i)) {
        if (lua_type(L, 2 + i) != LUA_TNUMBER)
          return luaL_error(L, "clamp: %s (argument %d) must be a number, got %s", i ? "max" : "min", 2 + i,
                            luaL_typename(L, 2 + i));
        b[i] = LT_NUMBER(L, 2 + i);
      }
    if (!lua_isnone(L, 4)) return luaL_error(L, "clamp: expected at most 2 arguments after the tensor");
    return lt_push(L, dp_clamp_number(x, lua_isnoneornil(L, 2) ? NULL : &b[0], lua_isnoneornil(L, 3) ? NULL : &b[1]));
  }
  int arg = 2;
  for (size_t k = 0; k < DP_UNARY_NPARAMS; k++) {
    const dp_param_info *pi = &dp_unary_param_list[k];
    if (pi->op != a.op) continue;
    int i = arg++;
    if (lua_isnoneornil(L, i)) continue;
    if (lua_type(L, i) != LUA_TNUMBER)
      return luaL_error(L, "%s: %s (argument %d) must be a number, got %s", dp_unary_name(a.op), pi->name, i,
                        luaL_typename(L, i));
    double v = lua_tonumber(L, i);
    memcpy((char *)&a.p + pi->offset, &v, sizeof v);
  }
  if (!lua_isnone(L, arg))
    return luaL_error(L, "%s: expected at most %d argument(s) after the tensor, got %d", dp_unary_name(a.op), arg - 2,
                      lua_gettop(L) - 1);
  return lt_push(L, dp_unary_with(&a, x));
}

/* t[name] = core[name] = the op's closure, for every op of the table (core
 * only for a name with a leading _); and
 * core._unary_params = {name = {{param, default}, ...}} for the ops that
 * take parameters (the nn activation modules read their defaults there). */
static void open_unary_ops(lua_State *L, int module, int methods) {
  lua_newtable(L);
  for (int op = 0; op < DP_U_COUNT; op++) {
    lua_pushinteger(L, op);
    lua_pushcclosure(L, l_unary, 1);
    if (dp_unary_ops[op].name[0] != '_') { /* internal ops (a leading _) are core._name only, no method */
      lua_pushvalue(L, -1);
      lua_setfield(L, methods, dp_unary_ops[op].name);
    }
    lua_setfield(L, module, dp_unary_ops[op].name);
    int n = 0;
    for (size_t k = 0; k < DP_UNARY_NPARAMS; k++) {
      const dp_param_info *pi = &dp_unary_param_list[k];
      if ((int)pi->op != op) continue;
      if (n == 0) {
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, dp_unary_ops[op].name);
      }
      lua_createtable(L, 2, 0);
      lua_pushstring(L, pi->name);
      lua_rawseti(L, -2, 1);
      lua_pushnumber(L, pi->dflt);
      lua_rawseti(L, -2, 2);
      lua_rawseti(L, -2, ++n);
    }
    if (n) lua_pop(L, 1);
  }
  lua_setfield(L, module, "_unary_params");
}

/* in place: t:add_(u [, alpha]) / t:mul_(s) ...: ops/inplace.c checks the
 * result's dtype and overlaps, refuses a leaf that requires grad and
 * records the write for autograd */
static int inplace(lua_State *L, dp_binary_op op) {
  dp_tensor *a = lt_check(L, 1);
  int rc;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    dp_number s = LT_NUMBER(L, 2);
    rc = dp_inplace_binary_number_(op, a, &s);
  } else {
    dp_tensor *b = lt_check(L, 2);
    if (!lua_isnoneornil(L, 3)) { /* alpha * b in the promoted dtype, then the in-place op */
      luaL_checknumber(L, 3);
      dp_number alpha = LT_NUMBER(L, 3);
      dp_dtype rt = dp_result_type(a, b);
      if (!dp_dtype_is_float(rt) && !alpha.is_int)
        return luaL_error(L, "for integral input tensors, argument alpha must not be a floating point number");
      dp_tensor *bc = b->dtype == rt ? (dp_retain(b), b) : dp_to(b, rt, dp_dev(b));
      dp_tensor *s = bc ? dp_binary_number(DP_B_MUL, bc, &alpha, false) : NULL;
      dp_release(bc);
      if (!s) return lt_error(L);
      rc = dp_inplace_binary_(op, a, s);
      dp_release(s);
    } else {
      rc = dp_inplace_binary_(op, a, b);
    }
  }
  LT_CHECK(L, rc);
  lua_settop(L, 1);
  return 1;
}
static int l_add_(lua_State *L) { return inplace(L, DP_B_ADD); }
static int l_sub_(lua_State *L) { return inplace(L, DP_B_SUB); }
static int l_mul_(lua_State *L) { return inplace(L, DP_B_MUL); }
static int l_div_(lua_State *L) { return inplace(L, DP_B_DIV); }

/* ---- reductions ---- */
/* dims: an integer, a table of integers, or nothing (all) */
static int read_dims(lua_State *L, int idx, const dp_tensor *t, int *dims) {
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_istable(L, idx)) {
    int n = (int)luaL_len(L, idx);
    if (n > DP_MAXDIM) luaL_error(L, "too many dims");
    for (int i = 0; i < n; i++) {
      lua_geti(L, idx, i + 1);
      dims[i] = lt_dim_value(L, luaL_checkinteger(L, -1), t->ndim, 0);
      lua_pop(L, 1);
    }
    return n;
  }
  dims[0] = lt_check_dim(L, idx, t->ndim, 0);
  return 1;
}

static int sum_mean(lua_State *L, bool mean) {
  dp_tensor *t = lt_check(L, 1);
  int dims[DP_MAXDIM];
  int n = read_dims(L, 2, t, dims);
  bool keep = lua_toboolean(L, 3);
  if (t->ndim == 0 && n) return luaL_error(L, "cannot reduce a 0-dimensional tensor over a dimension");
  return lt_push(L, mean ? dp_mean(t, n, dims, keep) : dp_sum(t, n, dims, keep));
}
static int l_sum(lua_State *L) { return sum_mean(L, false); }
static int l_mean(lua_State *L) { return sum_mean(L, true); }

/* max() -> value; max(dim [, keepdim]) -> values, indices (1-based) */
static int extreme(lua_State *L, bool is_max) {
  dp_tensor *t = lt_check(L, 1);
  if (lua_isnoneornil(L, 2)) return lt_push(L, is_max ? dp_max(t, -1, false, NULL) : dp_min(t, -1, false, NULL));
  if (lt_test(L, 2)) return binary(L, is_max ? DP_B_MAX : DP_B_MIN); /* elementwise, as torch.max(a, b) */
  int d = lt_check_dim(L, 2, t->ndim, 0);
  bool keep = lua_toboolean(L, 3);
  dp_tensor *idx = NULL;
  dp_tensor *v = is_max ? dp_max(t, d, keep, &idx) : dp_min(t, d, keep, &idx);
  if (!v) return lt_error(L);
  lt_push(L, v);
  /* 1-based positions as a new tensor: idx shares storage with the
   * positions the backward node saved, so it must not change in place */
  dp_tensor *pos = dp_binary_scalar(DP_B_ADD, idx, 1, false);
  dp_release(idx);
  return lt_push(L, pos) + 1;
}
static int l_max(lua_State *L) { return extreme(L, true); }
static int l_min(lua_State *L) { return extreme(L, false); }

static int arg_extreme(lua_State *L, bool is_max) {
  dp_tensor *t = lt_check(L, 1);
  int d = lua_isnoneornil(L, 2) ? -1 : lt_check_dim(L, 2, t->ndim, 0);
  bool keep = lua_toboolean(L, 3);
  return lt_push(L, is_max ? dp_argmax(t, d, keep, 1) : dp_argmin(t, d, keep, 1));
}
static int l_argmax(lua_State *L) { return arg_extreme(L, true); }
static int l_argmin(lua_State *L) { return arg_extreme(L, false); }

/* t:index_select(dim, idx): idx a 1-d int64 tensor or a Lua array of
 * 1-based positions */
static int l_index_select(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int d = lt_check_dim(L, 2, t->ndim, 0);
  dp_tensor *idx = lt_test(L, 3);
  if (idx) return lt_push(L, dp_index_select(t, d, idx, 1));
  luaL_checktype(L, 3, LUA_TTABLE);
  int64_t n = (int64_t)luaL_len(L, 3);
  dp_tensor *it = dp_empty(DP_I64, 1, &n, dp_dev(t).type == DP_CPU ? dp_cpu() : dp_cpu());
  if (!it) return lt_error(L);
  int64_t *p = dp_data(it);
  for (int64_t i = 0; i < n; i++) {
    lua_geti(L, 3, i + 1);
    int ok;
    p[i] = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok) {
      dp_release(it);
      return luaL_error(L, "index_select: position %I of the index list is not an integer", (lua_Integer)(i + 1));
    }
  }
  dp_tensor *itd = dp_to(it, DP_I64, dp_dev(t));
  dp_release(it);
  if (!itd) return lt_error(L);
  dp_tensor *r = dp_index_select(t, d, itd, 1);
  dp_release(itd);
  return lt_push(L, r);
}

static int l_matmul(lua_State *L) { return lt_push(L, dp_matmul(lt_check(L, 1), lt_check(L, 2))); }

static int l_mm(lua_State *L) {
  dp_tensor *a = lt_check(L, 1), *b = lt_check(L, 2);
  if (a->ndim != 2 || b->ndim != 2)
    return luaL_error(L, "mm expects two 2-dimensional tensors, got %d and %d dimensions (use matmul)", a->ndim,
                      b->ndim);
  return lt_push(L, dp_matmul(a, b));
}

static int l_cat(lua_State *L) {
  lua_settop(L, 2); /* the scratch userdata below must not land on the dim argument's slot */
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2); /* the scratch userdata below must not land where the optional dim is read */
  int n = (int)luaL_len(L, 1);
  if (n < 1) return luaL_error(L, "cat: expected a non-empty list of tensors");
  dp_tensor **ts = lua_newuserdatauv(L, sizeof(dp_tensor *) * (size_t)n, 0);
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    ts[i] = lt_test(L, -1);
    if (!ts[i]) return luaL_error(L, "cat: element %d is a %s, expected a tensor", i + 1, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  int d = lua_isnoneornil(L, 2) ? 0 : lt_check_dim(L, 2, ts[0]->ndim, 0);
  return lt_push(L, dp_cat(n, ts, d));
}

static int l_stack(lua_State *L) {
  lua_settop(L, 2); /* the scratch userdata below must not land on the dim argument's slot */
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2); /* as in l_cat */
  int n = (int)luaL_len(L, 1);
  if (n < 1) return luaL_error(L, "stack: expected a non-empty list of tensors");
  dp_tensor **ts = lua_newuserdatauv(L, sizeof(dp_tensor *) * (size_t)n, 0);
  int nd0 = -1;
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    dp_tensor *t = lt_test(L, -1);
    if (!t) return luaL_error(L, "stack: element %d is a %s, expected a tensor", i + 1, luaL_typename(L, -1));
    lua_pop(L, 1);
    if (nd0 < 0) nd0 = t->ndim;
    ts[i] = NULL;
  }
  int d = lua_isnoneornil(L, 2) ? 0 : lt_check_dim(L, 2, nd0, 1);
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    ts[i] = dp_unsqueeze(lt_test(L, -1), d);
    lua_pop(L, 1);
    if (!ts[i]) {
      for (int k = 0; k < i; k++) dp_release(ts[k]);
      return lt_error(L);
    }
  }
  dp_tensor *r = dp_cat(n, ts, d);
  for (int k = 0; k < n; k++) dp_release(ts[k]);
  return lt_push(L, r);
}

void lt_open_tensor_ops(lua_State *L, int module, int methods) {
  module = lua_absindex(L, module), methods = lua_absindex(L, methods);
  open_unary_ops(L, module, methods);
  static const luaL_Reg meths[] = {{"add", l_add},
                                   {"sub", l_sub},
                                   {"mul", l_mul},
                                   {"div", l_div},
                                   {"pow", l_pow},
                                   {"maximum", l_maximum},
                                   {"minimum", l_minimum},
                                   {"eq", l_eq},
                                   {"ne", l_ne},
                                   {"lt", l_lt},
                                   {"le", l_le},
                                   {"gt", l_gt},
                                   {"ge", l_ge},
                                   {"add_", l_add_},
                                   {"sub_", l_sub_},
                                   {"mul_", l_mul_},
                                   {"div_", l_div_},
                                   {"sum", l_sum},
                                   {"mean", l_mean},
                                   {"max", l_max},
                                   {"min", l_min},
                                   {"argmax", l_argmax},
                                   {"argmin", l_argmin},
                                   {"matmul", l_matmul},
                                   {"index_select", l_index_select},
                                   {"mm", l_mm},
                                   {NULL, NULL}};
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, meths, 0);
  lua_pop(L, 1);
  /* module-level functional forms: ddp.add(a, b), ddp.cat{...}, ... */
  lua_pushvalue(L, module);
  luaL_setfuncs(L, meths, 0);
  lua_pushcfunction(L, l_bce_logits); /* internal: core only */
  lua_setfield(L, -2, "_bce_logits");
  static const luaL_Reg funcs[] = {{"cat", l_cat}, {"stack", l_stack}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
  luaL_getmetatable(L, DP_TENSOR_MT);
  static const luaL_Reg ops[] = {{"__add", l_add}, {"__sub", l_sub}, {"__mul", l_mul}, {"__div", l_div},
                                 {"__pow", l_pow}, {"__unm", l_unm}, {NULL, NULL}};
  luaL_setfuncs(L, ops, 0);
  lua_pop(L, 1);
}
