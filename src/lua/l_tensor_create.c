/* Tensor creation from Lua: ddp.tensor (nested tables, scalars, tensors),
 * zeros/ones/empty/full, rand/randn, arange, randperm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lua/l_util.h"
#include "ops/ops.h"

/* Walks a nested Lua table to find its shape and whether every leaf is an
 * integer (so ddp.tensor{1, 2} is int64 as in PyTorch). */
static void table_shape(lua_State *L, int idx, int depth, int *ndim, int64_t *shape, bool *all_int, bool *any_bool) {
  if (depth >= DP_MAXDIM) luaL_error(L, "tensor(): nested tables deeper than %d", DP_MAXDIM);
  int64_t n = (int64_t)luaL_len(L, idx);
  if (depth == *ndim) {
    shape[depth] = n;
    (*ndim)++;
  } else if (depth < *ndim && shape[depth] != n) {
    luaL_error(L, "tensor(): ragged nested table: expected %I elements at depth %d, got %I", (lua_Integer)shape[depth],
               depth + 1, (lua_Integer)n);
  }
  for (int64_t i = 1; i <= n; i++) {
    int ty = lua_geti(L, idx, i);
    if (ty == LUA_TTABLE) {
      if (*ndim == depth + 1 && i > 1) luaL_error(L, "tensor(): ragged nested table at depth %d", depth + 1);
      table_shape(L, lua_gettop(L), depth + 1, ndim, shape, all_int, any_bool);
    } else if (ty == LUA_TNUMBER) {
      if (*ndim > depth + 1) luaL_error(L, "tensor(): ragged nested table at depth %d", depth + 1);
      if (!lua_isinteger(L, -1)) *all_int = false;
    } else if (ty == LUA_TBOOLEAN) {
      *any_bool = true;
    } else {
      luaL_error(L, "tensor(): expected numbers or nested tables, got %s at position %I", luaL_typename(L, -1),
                 (lua_Integer)i);
    }
    lua_pop(L, 1);
  }
}

/* An integer dtype takes a number only when it fits (PyTorch's "value cannot be converted to type int64 without
 * overflow"; storing 1e300 or NaN saturated, a float -> integer conversion C leaves undefined); checked for the
 * whole table before the tensor is made, so an error leaves nothing behind. */
static void check_value(lua_State *L, int idx, dp_dtype dt) {
  if ((dt != DP_I64 && dt != DP_U8) || lua_isboolean(L, idx)) return;
  bool ok;
  if (lua_isinteger(L, idx)) {
    lua_Integer v = lua_tointeger(L, idx);
    ok = dt == DP_I64 || (v >= 0 && v <= 255);
  } else {
    double v = lua_tonumber(L, idx);
    ok = dt == DP_I64 ? v >= -9223372036854775808.0 && v < 9223372036854775808.0 : v > -1.0 && v < 256.0;
  }
  if (!ok)
    luaL_error(L, "tensor(): value %s cannot be converted to type %s without overflow", lua_tostring(L, idx),
               dp_dtype_name(dt));
}

static void table_check(lua_State *L, int idx, int depth, int ndim, dp_dtype dt) {
  int64_t n = (int64_t)luaL_len(L, idx);
  for (int64_t i = 1; i <= n; i++) {
    lua_geti(L, idx, i);
    if (depth + 1 < ndim) table_check(L, lua_gettop(L), depth + 1, ndim, dt);
    else check_value(L, -1, dt);
    lua_pop(L, 1);
  }
}

static void table_fill(lua_State *L, int idx, int depth, int ndim, char **p, dp_dtype dt) {
  int64_t n = (int64_t)luaL_len(L, idx);
  size_t es = dp_dtype_size(dt);
  for (int64_t i = 1; i <= n; i++) {
    int ty = lua_geti(L, idx, i);
    if (depth + 1 < ndim) {
      if (ty != LUA_TTABLE) luaL_error(L, "tensor(): ragged nested table at depth %d", depth + 1);
      table_fill(L, lua_gettop(L), depth + 1, ndim, p, dt);
    } else {
      if (ty == LUA_TTABLE) luaL_error(L, "tensor(): ragged nested table at depth %d", depth + 2);
      if (dt == DP_I64 && lua_isinteger(L, -1)) *(int64_t *)*p = lua_tointeger(L, -1);
      else if (ty == LUA_TBOOLEAN) dp_store_d(*p, dt, lua_toboolean(L, -1));
      else dp_store_d(*p, dt, lua_tonumber(L, -1));
      *p += es;
    }
    lua_pop(L, 1);
  }
}

static int l_tensor(lua_State *L) {
  lt_opts o;
  if (lt_test(L, 1)) { /* tensor(t): a copy, like torch.tensor(t) */
    dp_tensor *src = lt_check(L, 1);
    lt_read_opts(L, 2, &o, src->dtype);
    dp_tensor *t = dp_empty(o.dtype, src->ndim, src->shape, o.has_device ? o.device : dp_dev(src));
    if (t && dp_copy_(t, src)) dp_clear(&t);
    if (t && o.requires_grad) t->requires_grad = true;
    return lt_push(L, t);
  }
  int64_t shape[DP_MAXDIM];
  int ndim = 0;
  bool all_int = true, any_bool = false;
  if (lua_type(L, 1) == LUA_TNUMBER || lua_type(L, 1) == LUA_TBOOLEAN) { /* a scalar */
    all_int = lua_isinteger(L, 1);
    any_bool = lua_isboolean(L, 1);
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    table_shape(L, 1, 0, &ndim, shape, &all_int, &any_bool);
  }
  lt_read_opts(L, 2, &o, any_bool ? DP_U8 : all_int ? DP_I64 : DP_F32);
  if (ndim == 0) check_value(L, 1, o.dtype);
  else table_check(L, 1, 0, ndim, o.dtype);
  dp_tensor *t = dp_empty(o.dtype, ndim, shape, dp_cpu());
  if (!t) return lt_error(L);
  char *p = dp_data(t);
  if (ndim == 0) {
    if (o.dtype == DP_I64 && lua_isinteger(L, 1)) *(int64_t *)p = lua_tointeger(L, 1);
    else dp_store_d(p, o.dtype, lua_isboolean(L, 1) ? lua_toboolean(L, 1) : lua_tonumber(L, 1));
  } else if (dp_numel(t) > 0) {
    table_fill(L, 1, 0, ndim, &p, o.dtype);
  }
  if (o.has_device && o.device.type != DP_CPU) {
    dp_tensor *m = dp_to(t, o.dtype, o.device);
    dp_release(t);
    t = m;
    if (!t) return lt_error(L);
  }
  if (o.requires_grad) {
    if (!dp_dtype_is_float(t->dtype)) {
      dp_release(t);
      return luaL_error(L, "tensor(): only floating point tensors can require gradients (dtype %s)",
                        dp_dtype_name(o.dtype));
    }
    t->requires_grad = true;
  }
  return lt_push(L, t);
}

/* zeros/ones/empty/rand/randn(2, 3 [, opts]) or ({2, 3} [, opts]) */
typedef enum { FILL_EMPTY, FILL_ZEROS, FILL_ONES, FILL_RAND, FILL_RANDN } fill_kind;

static int create_filled(lua_State *L, fill_kind k) {
  int64_t shape[DP_MAXDIM];
  int next;
  int nd = lt_read_shape(L, 1, shape, &next);
  lt_opts o;
  lt_read_opts(L, next, &o, DP_F32);
  if (o.device.type != DP_CPU && !dp_backend_require(o.device.type)) return lt_error(L);
  dp_tensor *t = NULL;
  switch (k) {
  case FILL_EMPTY: t = dp_empty(o.dtype, nd, shape, o.device); break;
  case FILL_ZEROS: t = dp_zeros(o.dtype, nd, shape, o.device); break;
  case FILL_ONES: t = dp_full(o.dtype, nd, shape, 1.0, o.device); break;
  case FILL_RAND: t = dp_rand(o.dtype, nd, shape, o.device); break;
  case FILL_RANDN: t = dp_randn(o.dtype, nd, shape, o.device); break;
  }
  if (t && o.requires_grad) {
    if (!dp_dtype_is_float(t->dtype)) {
      dp_release(t);
      return luaL_error(L, "only floating point tensors can require gradients (dtype %s)", dp_dtype_name(o.dtype));
    }
    t->requires_grad = true;
  }
  return lt_push(L, t);
}
static int l_empty(lua_State *L) { return create_filled(L, FILL_EMPTY); }
static int l_zeros(lua_State *L) { return create_filled(L, FILL_ZEROS); }
static int l_ones(lua_State *L) { return create_filled(L, FILL_ONES); }
static int l_rand(lua_State *L) { return create_filled(L, FILL_RAND); }
static int l_randn(lua_State *L) { return create_filled(L, FILL_RANDN); }

static int l_full(lua_State *L) {
  int64_t shape[DP_MAXDIM];
  luaL_checktype(L, 1, LUA_TTABLE);
  int nd = lt_read_shape(L, 1, shape, NULL);
  luaL_checknumber(L, 2);
  lt_opts o;
  lt_read_opts(L, 3, &o, lua_isinteger(L, 2) ? DP_I64 : DP_F32);
  if (o.device.type != DP_CPU && !dp_backend_require(o.device.type)) return lt_error(L);
  /* the value as fill_ takes it: an integer exact (a double lost 2^63 - 2), one the dtype cannot hold refused
   * (1e300 or NaN into int64 saturated, 300 into uint8 wrapped; PyTorch refuses them) */
  dp_number v = LT_NUMBER(L, 2);
  if (dp_number_check("full", &v, o.dtype)) return lt_error(L);
  dp_tensor *t = dp_empty(o.dtype, nd, shape, o.device);
  if (t && dp_inplace_fill_(t, &v)) dp_clear(&t);
  if (t && o.requires_grad) t->requires_grad = dp_dtype_is_float(t->dtype);
  return lt_push(L, t);
}

/* _rand_fill_(t [, normal]): t's elements drawn in place as rand (randn) draws them (the caller checks
 * autograd's rules: ddplua/tensor_forms.lua) */
static int l_rand_fill_(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (dp_rand_(t, lua_toboolean(L, 2))) return lt_error(L);
  lua_settop(L, 1);
  return 1;
}

/* arange(end) / arange(start, end [, step]) [, opts] */
static int l_arange(lua_State *L) {
  int nnum = 0;
  while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) nnum++;
  if (nnum == 0) return luaL_argerror(L, 1, "arange expects end, or start and end, and optionally step");
  double start = 0, end, step = 1;
  bool all_int = true;
  for (int i = 1; i <= nnum; i++) all_int &= lua_isinteger(L, i);
  if (nnum == 1) end = lua_tonumber(L, 1);
  else {
    start = lua_tonumber(L, 1);
    end = lua_tonumber(L, 2);
    if (nnum == 3) step = lua_tonumber(L, 3);
  }
  lt_opts o;
  lt_read_opts(L, nnum + 1, &o, all_int ? DP_I64 : DP_F32);
  if (o.device.type != DP_CPU && !dp_backend_require(o.device.type)) return lt_error(L);
  return lt_push(L, dp_arange(start, end, step, o.dtype, o.device));
}

/* randperm(n [, {generator=g}]): 1-based like every Lua position
 * (PyTorch's permutation + 1). g is a table {seed=, offset=} (ddp.Generator)
 * whose offset advances by n. */
static int l_randperm(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 0) return luaL_argerror(L, 1, "randperm: n must be >= 0");
  if (lua_istable(L, 2) && lua_getfield(L, 2, "generator") != LUA_TNIL) {
    luaL_checktype(L, -1, LUA_TTABLE);
    int g = lua_gettop(L);
    lua_getfield(L, g, "seed");
    lua_getfield(L, g, "offset");
    int ok1, ok2;
    lua_Integer seed = lua_tointegerx(L, -2, &ok1), off = lua_tointegerx(L, -1, &ok2);
    if (!ok1 || !ok2) return luaL_error(L, "randperm: generator must have integer seed and offset");
    lua_pushinteger(L, (lua_Integer)((uint64_t)off + (uint64_t)n)); /* the counter wraps, as Lua's integers do */
    lua_setfield(L, g, "offset");
    return lt_push(L, dp_randperm_with(n, 1, (uint64_t)seed, (uint64_t)off));
  }
  return lt_push(L, dp_randperm(n, 1));
}

void lt_open_tensor_create(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"tensor", l_tensor},
                                   {"zeros", l_zeros},
                                   {"ones", l_ones},
                                   {"empty", l_empty},
                                   {"full", l_full},
                                   {"rand", l_rand},
                                   {"randn", l_randn},
                                   {"arange", l_arange},
                                   {"randperm", l_randperm},
                                   {"_rand_fill_", l_rand_fill_},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
