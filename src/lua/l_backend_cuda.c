/* Bindings for the CUDA device (memory statistics, cache, options, device
 * names) and for mixed precision (the autocast flag, gradient unscaling for
 * GradScaler). lua/ddplua/amp.lua builds the user-facing API on these. */
#include <string.h>

#include "backends/backend.h"
#include "lua/l_util.h"
#include "ops/autocast.h"

static const dp_backend *cuda_or_error(lua_State *L) {
  const dp_backend *b = dp_backend_require(DP_CUDA);
  if (!b) lt_error(L);
  return b;
}

static int device_arg(lua_State *L, int idx) {
  lua_Integer d = luaL_optinteger(L, idx, 0);
  if (d < 0) luaL_argerror(L, idx, "a CUDA device index is >= 0");
  return (int)d;
}

/* cuda_memory_stats([device]) -> {live_bytes=, peak_bytes=, cached_bytes=, ...} */
static int l_cuda_memory_stats(lua_State *L) {
  const dp_backend *b = cuda_or_error(L);
  dp_device_mem_stats s;
  LT_CHECK(L, b->memory_stats(device_arg(L, 1), &s));
  lua_createtable(L, 0, 8);
  const struct {
    const char *k;
    size_t v;
  } f[] = {{"live_bytes", s.live_bytes},     {"peak_bytes", s.peak_bytes},
           {"cached_bytes", s.cached_bytes}, {"allocs", s.allocs},
           {"cache_hits", s.cache_hits},     {"device_mallocs", s.device_mallocs},
           {"device_total", s.device_total}, {"device_free", s.device_free}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    lua_pushinteger(L, (lua_Integer)f[i].v);
    lua_setfield(L, -2, f[i].k);
  }
  return 1;
}

static int l_cuda_empty_cache(lua_State *L) {
  const dp_backend *b = dp_backend_get(DP_CUDA); /* nothing cached if CUDA was never used */
  if (b) LT_CHECK(L, b->empty_cache());
  return 0;
}

static int l_cuda_device_name(lua_State *L) {
  const dp_backend *b = cuda_or_error(L);
  const char *name = b->device_name(device_arg(L, 1));
  if (!name) return lt_error(L);
  lua_pushstring(L, name);
  return 1;
}

/* cuda_set_option("tf32" | "sync", boolean) */
static int l_cuda_set_option(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luaL_checkany(L, 2);
  const dp_backend *b = cuda_or_error(L);
  LT_CHECK(L, b->set_option(name, lua_toboolean(L, 2) ? 1.0 : 0.0));
  return 0;
}

static int l_cuda_get_option(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const dp_backend *b = cuda_or_error(L);
  double v;
  LT_CHECK(L, b->get_option(name, &v));
  lua_pushboolean(L, v != 0);
  return 1;
}

/* set_autocast("bfloat16" | "float16" | false | nil) -> previous (dtype name or false) */
static int l_set_autocast(lua_State *L) {
  dp_autocast_state s = {false, DP_BF16}, prev;
  if (lua_type(L, 1) == LUA_TSTRING) {
    const char *name = lua_tostring(L, 1);
    dp_dtype dt;
    if (dp_dtype_parse(name, &dt) || (dt != DP_BF16 && dt != DP_F16))
      return luaL_error(L, "autocast: dtype must be \"bfloat16\" or \"float16\", got '%s'", name);
    s.enabled = true;
    s.dtype = dt;
  } else if (!lua_isnoneornil(L, 1) && !(lua_isboolean(L, 1) && !lua_toboolean(L, 1))) {
    return luaL_argerror(L, 1, "expected \"bfloat16\", \"float16\" or false");
  }
  LT_CHECK(L, dp_autocast_set(s, &prev));
  if (prev.enabled) lua_pushstring(L, dp_dtype_name(prev.dtype));
  else lua_pushboolean(L, 0);
  return 1;
}

static int l_get_autocast(lua_State *L) {
  dp_autocast_state s = dp_autocast_get();
  if (s.enabled) lua_pushstring(L, dp_dtype_name(s.dtype));
  else lua_pushboolean(L, 0);
  return 1;
}

/* amp_unscale_(grads, inv_scale) -> found_inf: every gradient *= inv_scale
 * in place; true when any result is inf or NaN. CUDA gradients go through
 * the backend's unscale_list (one device wait for the whole list). */
static int l_amp_unscale(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  double inv = luaL_checknumber(L, 2);
  int n = (int)luaL_len(L, 1);
  dp_tensor **cuda = lua_newuserdatauv(L, sizeof(dp_tensor *) * (size_t)(n > 0 ? n : 1), 0);
  int ncuda = 0, found = 0;
  for (int i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    dp_tensor *g = lt_test(L, -1);
    if (!g)
      return luaL_error(L, "unscale: element %d of the gradient list is a %s, expected a tensor", i,
                        luaL_typename(L, -1));
    lua_pop(L, 1); /* the list keeps it alive */
    if (!dp_dtype_is_float(g->dtype))
      return luaL_error(L, "unscale: gradient %d has dtype %s, expected a floating point dtype", i,
                        dp_dtype_name(g->dtype));
    if (!dp_is_contiguous(g)) return luaL_error(L, "unscale: gradient %d is not contiguous", i);
    if (dp_dev(g).type == DP_CUDA) {
      cuda[ncuda++] = g;
    } else {
      LT_CHECK(L, dp_cpu_backend.unscale(g, inv, &found));
      dp_bump_version(g);
    }
  }
  if (ncuda) {
    const dp_backend *b = cuda_or_error(L);
    if (b->unscale_list) {
      LT_CHECK(L, b->unscale_list(cuda, ncuda, inv, &found));
    } else {
      for (int i = 0; i < ncuda; i++) LT_CHECK(L, b->unscale(cuda[i], inv, &found));
    }
    for (int i = 0; i < ncuda; i++) dp_bump_version(cuda[i]);
  }
  lua_pushboolean(L, found);
  return 1;
}

void lt_open_cuda(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"cuda_memory_stats", l_cuda_memory_stats},
                                   {"cuda_empty_cache", l_cuda_empty_cache},
                                   {"cuda_device_name", l_cuda_device_name},
                                   {"cuda_set_option", l_cuda_set_option},
                                   {"cuda_get_option", l_cuda_get_option},
                                   {"set_autocast", l_set_autocast},
                                   {"get_autocast", l_get_autocast},
                                   {"amp_unscale_", l_amp_unscale},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
