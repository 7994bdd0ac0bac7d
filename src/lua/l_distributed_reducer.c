/* Bindings of the DDP reducer: core.ddp_reducer(group, params, names, opts)
 * returns a reducer object used by lua/ddplua/distributed_data_parallel.lua;
 * also SyncBatchNorm's op and a collective counter for their tests. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "backends/backend.h"
#include "distributed/ddp_reducer.h"
#include "distributed/sync_bn.h"
#include "lua/l_util.h"

#define REDUCER_MT "ddplua.Reducer"

typedef struct {
  dp_reducer *r;
} reducer_box;

static dp_reducer *check_reducer(lua_State *L, int idx) {
  reducer_box *b = luaL_checkudata(L, idx, REDUCER_MT);
  if (!b->r) luaL_error(L, "the DDP reducer was already released");
  return b->r;
}

/* core.ddp_reducer(group_or_nil, params{}, names{}, {bucket_cap_mb=, first_bucket_mb=, find_unused=}) */
static int l_reducer_new(lua_State *L) {
  dp_pg *pg = lt_check_pg(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TTABLE);
  int n = lt_list_len(L, 2, "ddp_reducer: params");
  if (lt_list_len(L, 3, "ddp_reducer: names") != n)
    return luaL_error(L, "ddp_reducer: params and names differ in length");
  double cap_mb = 25, first_mb = 1;
  bool find_unused = false;
  if (lua_istable(L, 4)) {
    if (lua_getfield(L, 4, "bucket_cap_mb") != LUA_TNIL) cap_mb = luaL_checknumber(L, -1);
    if (lua_getfield(L, 4, "first_bucket_mb") != LUA_TNIL) first_mb = luaL_checknumber(L, -1);
    lua_getfield(L, 4, "find_unused_parameters");
    find_unused = lua_toboolean(L, -1);
    lua_pop(L, 3);
  }
  if (!(cap_mb > 0) || !(first_mb > 0)) return luaL_error(L, "DistributedDataParallel: bucket_cap_mb must be > 0");
  dp_tensor **ps = lua_newuserdatauv(L, sizeof(dp_tensor *) * (size_t)(n ? n : 1), 0);
  const char **names = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    lua_geti(L, 2, i + 1);
    ps[i] = lt_test(L, -1);
    if (!ps[i]) return luaL_error(L, "ddp_reducer: params[%d] is a %s, expected a tensor", i + 1, luaL_typename(L, -1));
    lua_pop(L, 1);
    lua_geti(L, 3, i + 1);
    names[i] = lua_tostring(L, -1);
    if (!names[i]) return luaL_error(L, "ddp_reducer: names[%d] must be a string", i + 1);
    lua_pop(L, 1); /* the string stays alive in the names table */
  }
  /* a cap past 2^40 MB is one bucket for everything (a cast of 1e300 or
   * inf to size_t is undefined: x86 made it 0, a bucket per parameter) */
  size_t cap = cap_mb >= 0x1p40 ? (size_t)1 << 60 : (size_t)(cap_mb * 1024 * 1024);
  size_t first = first_mb >= 0x1p40 ? (size_t)1 << 60 : (size_t)(first_mb * 1024 * 1024);
  /* A reducer lives until its wrapper is collected: dropped DDP instances
   * may still hold the 16 post-backward hook slots. Collect them first, as
   * a program that wraps models in a loop expects (PyTorch frees by
   * reference count). */
  if (dp_post_backward_hooks_free() == 0) lt_gc_full(L);
  dp_reducer *r = dp_reducer_new(pg, ps, names, n, cap, first < cap ? first : cap, find_unused);
  if (!r) return lt_error(L);
  reducer_box *b = lua_newuserdatauv(L, sizeof *b, 1);
  b->r = r;
  lua_pushvalue(L, 1); /* keep the group object alive as long as the reducer */
  lua_setiuservalue(L, -2, 1);
  luaL_setmetatable(L, REDUCER_MT);
  return 1;
}

static int l_reducer_gc(lua_State *L) {
  reducer_box *b = luaL_checkudata(L, 1, REDUCER_MT);
  dp_reducer_free(b->r);
  b->r = NULL;
  return 0;
}

static int l_set_sync(lua_State *L) {
  dp_reducer *r = check_reducer(L, 1);
  lua_pushboolean(L, dp_reducer_get_sync(r));
  dp_reducer_set_sync(r, lua_toboolean(L, 2));
  return 1;
}

static int l_stats(lua_State *L) {
  dp_reducer_stats s = dp_reducer_get_stats(check_reducer(L, 1));
  lua_createtable(L, 0, 9);
  lua_pushinteger(L, s.n_buckets);
  lua_setfield(L, -2, "buckets");
  lua_pushinteger(L, s.n_params);
  lua_setfield(L, -2, "params");
  lua_pushinteger(L, (lua_Integer)s.bucket_bytes_total);
  lua_setfield(L, -2, "bucket_bytes");
  lua_pushinteger(L, s.launched_in_backward);
  lua_setfield(L, -2, "launched_in_backward");
  lua_pushinteger(L, s.launched_after);
  lua_setfield(L, -2, "launched_after_backward");
  lua_pushnumber(L, s.first_launch_before_end_ms);
  lua_setfield(L, -2, "first_launch_before_end_ms");
  lua_pushinteger(L, (lua_Integer)s.backward_passes);
  lua_setfield(L, -2, "backward_passes");
  lua_pushinteger(L, (lua_Integer)s.synced_passes);
  lua_setfield(L, -2, "synced_passes");
  lua_pushboolean(L, s.shared_buckets);
  lua_setfield(L, -2, "shared_buckets");
  lua_pushnumber(L, s.finalize_ms_total);
  lua_setfield(L, -2, "finalize_ms_total");
  lua_pushnumber(L, s.backward_ms_total);
  lua_setfield(L, -2, "backward_ms_total");
  return 1;
}

static int l_bucket_of(lua_State *L) {
  dp_reducer *r = check_reducer(L, 1);
  lua_Integer i = luaL_checkinteger(L, 2);
  int b = i < 1 || i > INT_MAX ? -1 : dp_reducer_bucket_of(r, (int)i - 1);
  if (b < 0) lua_pushnil(L);
  else lua_pushinteger(L, b + 1);
  return 1;
}

static dp_tensor *opt_tensor(lua_State *L, int idx) { return lua_isnoneornil(L, idx) ? NULL : lt_check(L, idx); }

/* core.sync_batch_norm(x, running_mean, running_var, weight, bias, training,
 * momentum, eps, group_or_nil) */
static int l_sync_batch_norm(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4),
            *b = opt_tensor(L, 5);
  bool training = lua_toboolean(L, 6);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  dp_pg *pg = lt_check_pg(L, 9);
  return lt_push(L, dp_sync_batch_norm(x, rm, rv, w, b, training, momentum, eps, pg));
}

/* core.sync_batch_norm_relu_max_pool2d(x, running_mean, running_var, weight,
 * bias, training, momentum, eps, group_or_nil, kernel_size, stride, padding,
 * ceil_mode): max_pool2d(relu(sync_batch_norm(...))), fused where it can be */
static int l_sync_batch_norm_relu_max_pool2d(lua_State *L) {
  const char *op = "sync_batch_norm_relu_max_pool2d";
  dp_tensor *x = lt_check(L, 1), *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4),
            *b = opt_tensor(L, 5);
  bool training = lua_toboolean(L, 6);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  dp_pg *pg = lt_check_pg(L, 9);
  dp_pool2d_args a = {0};
  lt_read_pool2d(L, 10, op, &a);
  return lt_push(L, dp_sync_batch_norm_relu_max_pool2d(x, rm, rv, w, b, training, momentum, eps, &a, pg));
}

/* core._collectives_issued(group_or_nil) -> how many collectives the group
 * has issued (its sequence number): tests see whether DDP's reducer and
 * SyncBatchNorm reached the group (DDPLUA_FORCE_COLLECTIVES at one rank). */
static int l_collectives_issued(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lt_check_pg(L, 1)->seq);
  return 1;
}

void lt_open_ddp(lua_State *L, int module) {
  lua_pushcfunction(L, l_sync_batch_norm);
  lua_setfield(L, module, "sync_batch_norm");
  lua_pushcfunction(L, l_sync_batch_norm_relu_max_pool2d);
  lua_setfield(L, module, "sync_batch_norm_relu_max_pool2d");
  lua_pushcfunction(L, l_collectives_issued);
  lua_setfield(L, module, "_collectives_issued");
  luaL_newmetatable(L, REDUCER_MT);
  static const luaL_Reg meths[] = {{"set_sync", l_set_sync},
                                   {"stats", l_stats},
                                   {"bucket_of", l_bucket_of},
                                   {"release", l_reducer_gc},
                                   {NULL, NULL}};
  lua_newtable(L);
  luaL_setfuncs(L, meths, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_reducer_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_reducer_new);
  lua_setfield(L, module, "ddp_reducer");
}
