/* Tensor userdata: creation, properties, views, conversion, autograd. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "lua/l_util.h"
#include "ops/ops.h"

/* ---- metamethods and properties ---- */
static int l_gc(lua_State *L) {
  lt_box_free(L, 1, NULL);
  return 0;
}
static int l_close(lua_State *L) {
  lt_box_free(L, 1, "a <close> variable going out of scope");
  return 0;
}

static int l_tostring(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  char *s = dp_tensor_format(t);
  if (!s) return lt_error(L);
  lua_pushstring(L, s);
  free(s);
  return 1;
}

static int l_len(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (t->ndim == 0) return luaL_error(L, "len() of a 0-dimensional tensor");
  lua_pushinteger(L, t->shape[0]);
  return 1;
}

static int l_size(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (!lua_isnoneornil(L, 2)) {
    int d = lt_check_dim(L, 2, t->ndim, 0);
    lua_pushinteger(L, t->shape[d]);
    return 1;
  }
  lua_createtable(L, t->ndim, 0);
  for (int d = 0; d < t->ndim; d++) {
    lua_pushinteger(L, t->shape[d]);
    lua_rawseti(L, -2, d + 1);
  }
  return 1;
}

static int l_stride(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (!lua_isnoneornil(L, 2)) {
    lua_pushinteger(L, t->stride[lt_check_dim(L, 2, t->ndim, 0)]);
    return 1;
  }
  lua_createtable(L, t->ndim, 0);
  for (int d = 0; d < t->ndim; d++) {
    lua_pushinteger(L, t->stride[d]);
    lua_rawseti(L, -2, d + 1);
  }
  return 1;
}

static int l_dim(lua_State *L) {
  lua_pushinteger(L, lt_check(L, 1)->ndim);
  return 1;
}
static int l_numel(lua_State *L) {
  lua_pushinteger(L, dp_numel(lt_check(L, 1)));
  return 1;
}
static int l_dtype(lua_State *L) {
  lua_pushstring(L, dp_dtype_name(lt_check(L, 1)->dtype));
  return 1;
}
static int l_device(lua_State *L) {
  char buf[16];
  lua_pushstring(L, dp_device_str(dp_dev(lt_check(L, 1)), buf, sizeof buf));
  return 1;
}
static int l_is_contiguous(lua_State *L) {
  lua_pushboolean(L, dp_is_contiguous(lt_check(L, 1)));
  return 1;
}
static int l_element_size(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)dp_elsize(lt_check(L, 1)));
  return 1;
}
static int l_data_ptr(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)(intptr_t)dp_data(lt_check(L, 1)));
  return 1;
}

/* t:to("cuda:0") t:to("float64") t:to{dtype=, device=} t:to(other_tensor) */
static int l_to(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  dp_dtype dt = t->dtype;
  dp_device dev = dp_dev(t);
  for (int i = 2; i <= lua_gettop(L); i++) {
    if (lua_type(L, i) == LUA_TSTRING) {
      const char *s = lua_tostring(L, i);
      dp_dtype d2;
      dp_device v2;
      if (dp_dtype_parse(s, &d2) == 0) dt = d2;
      else if (dp_device_parse(s, &v2) == 0) dev = v2;
      else return luaL_error(L, "to(): '%s' is neither a dtype nor a device", s);
    } else if (lua_istable(L, i)) {
      lt_opts o;
      lt_read_opts(L, i, &o, dt);
      dt = o.dtype;
      if (o.has_device) dev = o.device;
    } else if (lt_test(L, i)) {
      dp_tensor *u = lt_test(L, i);
      dt = u->dtype;
      dev = dp_dev(u);
    } else if (!lua_isnil(L, i)) {
      return luaL_argerror(L, i, "expected a dtype or device string, an options table or a tensor");
    }
  }
  dp_tensor *r = dp_to(t, dt, dev);
  if (r == t) { /* PyTorch returns self when nothing changes */
    dp_release(r);
    lua_pushvalue(L, 1);
    return 1;
  }
  return lt_push(L, r);
}

static int l_float(lua_State *L) { return lt_push(L, dp_to(lt_check(L, 1), DP_F32, dp_dev(lt_check(L, 1)))); }
static int l_double(lua_State *L) { return lt_push(L, dp_to(lt_check(L, 1), DP_F64, dp_dev(lt_check(L, 1)))); }
static int l_long(lua_State *L) { return lt_push(L, dp_to(lt_check(L, 1), DP_I64, dp_dev(lt_check(L, 1)))); }
static int l_byte(lua_State *L) { return lt_push(L, dp_to(lt_check(L, 1), DP_U8, dp_dev(lt_check(L, 1)))); }
static int l_cpu(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (dp_dev(t).type == DP_CPU) {
    lua_pushvalue(L, 1);
    return 1;
  }
  return lt_push(L, dp_to(t, t->dtype, dp_cpu()));
}
static int l_cuda(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  dp_device d = {DP_CUDA, (int8_t)luaL_optinteger(L, 2, 0)};
  return lt_push(L, dp_to(t, t->dtype, d));
}
static int l_clone(lua_State *L) { return lt_push(L, dp_clone(lt_check(L, 1))); }
static int l_contiguous(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (dp_is_contiguous(t)) {
    lua_pushvalue(L, 1);
    return 1;
  }
  return lt_push(L, dp_contiguous(t));
}
static int l_detach(lua_State *L) { return lt_push(L, dp_detach(lt_check(L, 1))); }

/* ---- views ---- */
static int l_view(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int64_t shape[DP_MAXDIM];
  int nd = lt_read_shape(L, 2, shape, NULL);
  return lt_push(L, dp_view(t, nd, shape));
}
static int l_reshape(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int64_t shape[DP_MAXDIM];
  int nd = lt_read_shape(L, 2, shape, NULL);
  return lt_push(L, dp_reshape(t, nd, shape));
}
static int l_view_as(lua_State *L) {
  dp_tensor *t = lt_check(L, 1), *u = lt_check(L, 2);
  return lt_push(L, dp_view(t, u->ndim, u->shape));
}
static int l_expand(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int64_t shape[DP_MAXDIM];
  int nd = lt_read_shape(L, 2, shape, NULL);
  return lt_push(L, dp_expand(t, nd, shape));
}
static int l_expand_as(lua_State *L) {
  dp_tensor *t = lt_check(L, 1), *u = lt_check(L, 2);
  return lt_push(L, dp_expand(t, u->ndim, u->shape));
}
static int l_transpose(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int a = lt_check_dim(L, 2, t->ndim, 0), b = lt_check_dim(L, 3, t->ndim, 0);
  return lt_push(L, dp_transpose(t, a, b));
}
static int l_t(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (t->ndim > 2) return luaL_error(L, "t() expects a tensor with at most 2 dimensions, got %d", t->ndim);
  if (t->ndim < 2) {
    lua_pushvalue(L, 1);
    return 1;
  }
  return lt_push(L, dp_transpose(t, 0, 1));
}
static int l_permute(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int perm[DP_MAXDIM];
  int n;
  if (lua_istable(L, 2)) {
    n = (int)luaL_len(L, 2);
    for (int i = 0; i < n && i < DP_MAXDIM; i++) {
      lua_geti(L, 2, i + 1);
      perm[i] = lt_dim_value(L, luaL_checkinteger(L, -1), t->ndim, 0);
      lua_pop(L, 1);
    }
  } else {
    n = lua_gettop(L) - 1;
    for (int i = 0; i < n && i < DP_MAXDIM; i++) perm[i] = lt_check_dim(L, i + 2, t->ndim, 0);
  }
  if (n != t->ndim)
    return luaL_error(L, "permute: expected %d dims for a %d-dimensional tensor, got %d", t->ndim, t->ndim, n);
  return lt_push(L, dp_permute(t, perm));
}
static int l_narrow(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int d = lt_check_dim(L, 2, t->ndim, 0);
  lua_Integer start = luaL_checkinteger(L, 3), len = luaL_checkinteger(L, 4);
  if (start < 1 || start > t->shape[d] + 1)
    return luaL_error(L, "narrow: start %I out of range for dimension %d of size %I (positions are 1-based)",
                      (lua_Integer)start, d + 1, (lua_Integer)t->shape[d]);
  return lt_push(L, dp_narrow(t, d, start - 1, len));
}
static int l_select(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int d = lt_check_dim(L, 2, t->ndim, 0);
  lua_Integer i = luaL_checkinteger(L, 3);
  if (i == 0 || i > t->shape[d] || i < -t->shape[d])
    return luaL_error(L,
                      "select: index %I out of range for dimension %d of size %I (positions are 1..%I or "
                      "negative from the end)",
                      (lua_Integer)i, d + 1, (lua_Integer)t->shape[d], (lua_Integer)t->shape[d]);
  return lt_push(L, dp_select(t, d, i > 0 ? i - 1 : t->shape[d] + i));
}
static int l_flatten(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int s = lua_isnoneornil(L, 2) ? 0 : lt_check_dim(L, 2, t->ndim, 0);
  int e = lua_isnoneornil(L, 3) ? t->ndim - 1 : lt_check_dim(L, 3, t->ndim, 0);
  if (t->ndim == 0) s = e = 0;
  return lt_push(L, dp_flatten(t, s, e));
}
static int l_unsqueeze(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  return lt_push(L, dp_unsqueeze(t, lt_check_dim(L, 2, t->ndim, 1)));
}
static int l_squeeze(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  return lt_push(L, dp_squeeze(t, lua_isnoneornil(L, 2) ? -1 : lt_check_dim(L, 2, t->ndim, 0)));
}

/* ---- values ---- */
static int push_element(lua_State *L, const dp_tensor *t, const char *p) {
  switch (t->dtype) {
  case DP_I64: lua_pushinteger(L, *(const int64_t *)p); break;
  case DP_U8: lua_pushinteger(L, *(const uint8_t *)p); break;
  default: lua_pushnumber(L, dp_load_d(p, t->dtype)); break;
  }
  return 1;
}

static int l_item(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (dp_numel(t) != 1) LT_CHECK(L, dp_item_d(t, &(double){0}));
  dp_tensor *c = dp_dev(t).type == DP_CPU ? (dp_retain(t), t) : dp_to(t, t->dtype, dp_cpu());
  if (!c) return lt_error(L);
  int64_t idx[DP_MAXDIM] = {0};
  int64_t off = c->offset;
  (void)idx;
  push_element(L, c, (const char *)c->storage->data + (size_t)off * dp_elsize(c));
  dp_release(c);
  return 1;
}

static void push_table(lua_State *L, const dp_tensor *t, int d, const char *p) {
  if (d == t->ndim) {
    push_element(L, t, p);
    return;
  }
  lua_createtable(L, (int)t->shape[d], 0);
  size_t es = dp_elsize(t);
  for (int64_t i = 0; i < t->shape[d]; i++) {
    push_table(L, t, d + 1, p + (size_t)(i * t->stride[d]) * es);
    lua_rawseti(L, -2, i + 1);
  }
}

static int l_totable(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  dp_tensor *c = dp_dev(t).type == DP_CPU ? (dp_retain(t), t) : dp_to(t, t->dtype, dp_cpu());
  if (!c) return lt_error(L);
  luaL_checkstack(L, t->ndim + 4, "totable");
  push_table(L, c, 0, (const char *)c->storage->data + (size_t)c->offset * dp_elsize(c));
  dp_release(c);
  return 1;
}

/* fill_ / zero_ / copy_ / t[i] = v go through ops/inplace.c: overlap and
 * dtype checks, refusal on a leaf that requires grad, autograd recording */
static int l_fill_(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  luaL_checknumber(L, 2);
  dp_number v = LT_NUMBER(L, 2);
  LT_CHECK(L, dp_inplace_fill_(t, &v));
  lua_settop(L, 1);
  return 1;
}
static int l_zero_(lua_State *L) {
  lua_settop(L, 1);
  lua_pushinteger(L, 0);
  return l_fill_(L);
}
static int l_copy_(lua_State *L) {
  dp_tensor *t = lt_check(L, 1), *u = lt_check(L, 2);
  LT_CHECK(L, dp_inplace_copy_(t, u));
  lua_settop(L, 1);
  return 1;
}

/* ---- autograd ---- */
static int l_requires_grad_(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  bool on = lua_isnoneornil(L, 2) ? true : lua_toboolean(L, 2);
  if (on && !dp_dtype_is_float(t->dtype))
    return luaL_error(L, "requires_grad_: only floating point tensors can require gradients (dtype %s)",
                      dp_dtype_name(t->dtype));
  if (!on && !dp_is_leaf(t))
    return luaL_error(L, "requires_grad_: cannot turn off gradients of a non-leaf tensor (use detach())");
  t->requires_grad = on;
  lua_settop(L, 1);
  return 1;
}

/* t[mask], t[positions] (and = v): the Lua function that tensor_index.lua registered under `name` (core.
 * _set_tensor_indexers) with this call's n arguments */
#define INDEX_BY_TENSOR "ddplua.index_by_tensor"
#define NEWINDEX_BY_TENSOR "ddplua.newindex_by_tensor"
static int by_tensor(lua_State *L, const char *name, int n) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, name) != LUA_TFUNCTION)
    return luaL_error(L, "indexing by a tensor needs the Lua library (require \"ddplua\")");
  lua_insert(L, 1);
  lua_call(L, n, n == 2 ? 1 : 0);
  return n == 2 ? 1 : 0;
}

static int l_index(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *k = lua_tostring(L, 2);
    /* methods first (the method table is upvalue 1) */
    if (lua_getfield(L, lua_upvalueindex(1), k) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    if (strcmp(k, "grad") == 0) {
      /* a zero-pending gradient (zero_grad on DDP's bucket view) is
       * PyTorch's None: the memory stays for the next backward */
      if (t->grad && !t->grad_zero_pending) {
        dp_retain(t->grad);
        return lt_push(L, t->grad);
      }
      lua_pushnil(L);
      return 1;
    }
    dp_autograd_refresh(t); /* a view whose base an in-place write changed */
    if (strcmp(k, "requires_grad") == 0) {
      lua_pushboolean(L, t->requires_grad);
      return 1;
    }
    if (strcmp(k, "retains_grad") == 0) {
      lua_pushboolean(L, !dp_is_leaf(t) && lt_retains_grad(L, 1));
      return 1;
    }
    if (strcmp(k, "is_leaf") == 0) {
      lua_pushboolean(L, dp_is_leaf(t));
      return 1;
    }
    if (strcmp(k, "grad_fn") == 0) {
      if (t->grad_fn) lua_pushstring(L, t->grad_fn->name);
      else lua_pushnil(L);
      return 1;
    }
    if (strcmp(k, "shape") == 0) {
      lua_settop(L, 1); /* t.shape is t:size(), not t:size("shape") */
      return l_size(L);
    }
    if (strcmp(k, "ndim") == 0) return l_dim(L);
    if (strcmp(k, "data") == 0) return lt_push(L, dp_detach(t));
    lua_pushnil(L);
    return 1;
  }
  if (lua_isinteger(L, 2)) { /* t[i]: select along dim 1 */
    if (t->ndim == 0) return luaL_error(L, "cannot index a 0-dimensional tensor");
    lua_Integer i = lua_tointeger(L, 2);
    if (i == 0 || i > t->shape[0] || i < -t->shape[0])
      return luaL_error(L, "index %I out of range for dimension 1 of size %I (positions are 1-based)", (lua_Integer)i,
                        (lua_Integer)t->shape[0]);
    return lt_push(L, dp_select(t, 0, i > 0 ? i - 1 : t->shape[0] + i));
  }
  if (lt_test(L, 2)) return by_tensor(L, INDEX_BY_TENSOR, 2);
  return luaL_error(L, "tensors are indexed by integer positions, tensors of them, masks or method names, got %s",
                    luaL_typename(L, 2));
}

static int l_newindex(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *k = lua_tostring(L, 2);
    if (strcmp(k, "grad") == 0) {
      dp_tensor *g = lua_isnil(L, 3) ? NULL : lt_check(L, 3);
      if (g && !dp_same_shape(g, t)) {
        char a[128], b[128];
        return luaL_error(L, "assigned grad has shape %s but the tensor has shape %s", dp_shape_str(g, a, sizeof a),
                          dp_shape_str(t, b, sizeof b));
      }
      /* as PyTorch: a gradient of another dtype or device would be summed into or stepped with as if it were not */
      if (g && g->dtype != t->dtype)
        return luaL_error(L, "assigned grad is %s but the tensor is %s", dp_dtype_name(g->dtype),
                          dp_dtype_name(t->dtype));
      if (g && !dp_device_eq(dp_dev(g), dp_dev(t))) {
        char a[32], b[32];
        return luaL_error(L, "assigned grad is on %s but the tensor is on %s", dp_device_str(dp_dev(g), a, sizeof a),
                          dp_device_str(dp_dev(t), b, sizeof b));
      }
      if (g) dp_retain(g);
      dp_release(t->grad);
      t->grad = g;
      t->grad_zero_pending = false;
      return 0;
    }
    if (strcmp(k, "requires_grad") == 0) {
      lua_settop(L, 1);
      lua_pushboolean(L, lua_toboolean(L, 3));
      return l_requires_grad_(L);
    }
    return luaL_error(L, "cannot set field '%s' of a tensor", k);
  }
  if (lua_isinteger(L, 2)) { /* t[i] = v: a write through the view t[i] (recorded as PyTorch's CopySlices) */
    lua_Integer i = lua_tointeger(L, 2);
    if (t->ndim == 0) return luaL_error(L, "cannot index a 0-dimensional tensor");
    if (i == 0 || i > t->shape[0] || i < -t->shape[0])
      return luaL_error(L, "index %I out of range for dimension 1 of size %I (positions are 1-based)", (lua_Integer)i,
                        (lua_Integer)t->shape[0]);
    dp_tensor *u = lua_type(L, 3) == LUA_TNUMBER ? NULL : lt_check(L, 3);
    dp_tensor *v = dp_select(t, 0, i > 0 ? i - 1 : t->shape[0] + i);
    if (!v) return lt_error(L);
    int rc;
    if (!u) {
      dp_number n = LT_NUMBER(L, 3);
      rc = dp_inplace_fill_(v, &n);
    } else {
      rc = dp_inplace_copy_(v, u);
    }
    dp_release(v);
    LT_CHECK(L, rc);
    return 0;
  }
  if (lt_test(L, 2)) return by_tensor(L, NEWINDEX_BY_TENSOR, 3);
  return luaL_error(L, "tensors are indexed by integer positions, tensors of them or masks, got %s",
                    luaL_typename(L, 2));
}

/* core._set_tensor_indexers(read, write): the functions t[tensor] and t[tensor] = v call (tensor_index.lua) */
static int l_set_tensor_indexers(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, INDEX_BY_TENSOR);
  lua_pushvalue(L, 2);
  lua_setfield(L, LUA_REGISTRYINDEX, NEWINDEX_BY_TENSOR);
  return 0;
}

static int l_is_tensor(lua_State *L) {
  lua_pushboolean(L, luaL_testudata(L, 1, DP_TENSOR_MT) != NULL);
  return 1;
}

static int l_free(lua_State *L) { /* releases memory now instead of at GC */
  lt_box_free(L, 1, "t:free()");
  return 0;
}

void lt_open_tensor(lua_State *L, int module, int methods) {
  static const luaL_Reg funcs[] = {{"is_tensor", l_is_tensor},
                                   {"_set_tensor_indexers", l_set_tensor_indexers},
                                   {"_grad_hooks", lt_grad_hooks},
                                   {NULL, NULL}};
  static const luaL_Reg meths[] = {{"size", l_size},
                                   {"stride", l_stride},
                                   {"dim", l_dim},
                                   {"numel", l_numel},
                                   {"nelement", l_numel},
                                   {"dtype", l_dtype},
                                   {"device", l_device},
                                   {"is_contiguous", l_is_contiguous},
                                   {"element_size", l_element_size},
                                   {"data_ptr", l_data_ptr},
                                   {"to", l_to},
                                   {"float", l_float},
                                   {"double", l_double},
                                   {"long", l_long},
                                   {"byte", l_byte},
                                   {"cpu", l_cpu},
                                   {"cuda", l_cuda},
                                   {"clone", l_clone},
                                   {"contiguous", l_contiguous},
                                   {"detach", l_detach},
                                   {"view", l_view},
                                   {"reshape", l_reshape},
                                   {"view_as", l_view_as},
                                   {"expand", l_expand},
                                   {"expand_as", l_expand_as},
                                   {"transpose", l_transpose},
                                   {"t", l_t},
                                   {"permute", l_permute},
                                   {"narrow", l_narrow},
                                   {"select", l_select},
                                   {"flatten", l_flatten},
                                   {"unsqueeze", l_unsqueeze},
                                   {"squeeze", l_squeeze},
                                   {"item", l_item},
                                   {"totable", l_totable},
                                   {"tolist", l_totable},
                                   {"fill_", l_fill_},
                                   {"zero_", l_zero_},
                                   {"copy_", l_copy_},
                                   {"requires_grad_", l_requires_grad_},
                                   {"backward", lt_backward},
                                   {"retain_grad", lt_retain_grad},
                                   {"free", l_free},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
  lt_open_tensor_create(L, module);
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, meths, 0);
  lua_pop(L, 1);
  /* the metatable: __index looks up methods (upvalue) then properties */
  luaL_newmetatable(L, DP_TENSOR_MT);
  lua_pushvalue(L, methods);
  lua_pushcclosure(L, l_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushcfunction(L, l_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, l_len);
  lua_setfield(L, -2, "__len");
  lua_pushstring(L, "Tensor");
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
}
