#include "lua/l_util.h"

#include <limits.h>
#include <string.h>

#include "ops/ops.h"

/* GC pacing. Lua does not see the bytes behind a tensor userdata, so
 * garbage tensors would pile up between collections, and the allocator
 * would grow to hold them; on a VM a first touch of a new page is dear
 * (about 15 us here, 4.5 ms per MiB), so a training loop whose footprint
 * grows for its first 30 steps runs those steps at half speed. ddplua runs
 * the collector in generational mode (ddplua.core sets it when it loads):
 * a young collection frees the last few steps' tensors for the cost of the
 * young objects alone, and one runs after every YOUNG_WINDOW bytes of
 * tensor storage. A full collection still runs once the bytes allocated
 * since the last one exceed the bytes live after it (at least 16 MiB), for
 * tensors that grew old before they became garbage. Memory then stays
 * within about 2x the live set, and usually within live + a few steps.
 * A full collection the program asks for (collectgarbage(), which
 * ddplua.core wraps; the DDP reducer's) counts as the pacer's own: a full
 * collection walks the whole Lua heap (1.3-2.7 ms in the examples, their
 * 1.4-3.7 MB of heap out of the cache after a step), so one right after
 * another is waste. */
#define YOUNG_WINDOW ((size_t)4 << 20)
#define FULL_MIN ((size_t)16 << 20)
static size_t since_young, since_full, live_after_full;
static int64_t n_full, n_young; /* the pacer's own collections (core._gc_counts) */

void lt_gc_counts(int64_t *full, int64_t *young) { *full = n_full, *young = n_young; }

void lt_gc_collected(void) {
  (void)dp_alloc_counter_take(); /* bytes allocated before it: they were seen */
  since_full = since_young = 0;
  live_after_full = dp_cpu_mem_stats().live_bytes;
}

void lt_gc_full(lua_State *L) {
  lua_gc(L, LUA_GCCOLLECT);
  lt_gc_collected();
}

void lt_gc_pace(lua_State *L) {
  size_t n = dp_alloc_counter_take();
  since_young += n;
  since_full += n;
  if (since_full > (live_after_full > FULL_MIN ? live_after_full : FULL_MIN)) {
    lt_gc_full(L);
    n_full++;
  } else if (since_young > YOUNG_WINDOW) {
    lua_gc(L, LUA_GCSTEP, 0); /* generational: a young collection */
    n_young++;
    since_young = 0;
  }
}

int lt_error(lua_State *L) { return luaL_error(L, "%s", dp_errmsg()); }

int lt_push(lua_State *L, dp_tensor *t) {
  if (!t) return lt_error(L);
  lt_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->t = t;
  b->freed_by = NULL;
  luaL_setmetatable(L, DP_TENSOR_MT);
  lt_gc_pace(L);
  return 1;
}

void lt_push_or_nil(lua_State *L, dp_tensor *t) {
  if (t) lt_push(L, t);
  else lua_pushnil(L);
}

static void freed_error(lua_State *L, int idx, const lt_box *b) {
  luaL_argerror(L, idx,
                lua_pushfstring(L, "the tensor was freed (by %s) and cannot be used any more",
                                b->freed_by ? b->freed_by : "its owner"));
}

dp_tensor *lt_test(lua_State *L, int idx) {
  lt_box *b = luaL_testudata(L, idx, DP_TENSOR_MT);
  if (b && !b->t) freed_error(L, idx, b);
  return b ? b->t : NULL;
}

dp_tensor *lt_check(lua_State *L, int idx) {
  lt_box *b = luaL_checkudata(L, idx, DP_TENSOR_MT);
  if (!b->t) freed_error(L, idx, b);
  return b->t;
}

void lt_box_free(lua_State *L, int idx, const char *by) {
  lt_box *b = luaL_checkudata(L, idx, DP_TENSOR_MT);
  if (b->t && by) b->freed_by = by;
  dp_clear(&b->t);
}

/* the name the running C function was called by ("norm" for x:norm(...)),
 * as luaL_argerror finds it, or "" */
static const char *called_as(lua_State *L) {
  lua_Debug ar;
  if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "n", &ar) || !ar.name) return "";
  return ar.name;
}

int lt_dim_value(lua_State *L, lua_Integer d, int ndim, int extra) {
  int n = ndim + extra;
  if (d >= 1 && d <= n) return (int)d - 1;
  if (d < 0 && d >= -n) return (int)(d + n);
  const char *who = called_as(L), *sep = *who ? ": " : "";
  if (d == 0)
    return luaL_error(L, "%s%sdimension 0 is not valid: dimensions count from 1 (1..%d), or from the end (-1..-%d)",
                      who, sep, n, n);
  if (n == 0)
    return luaL_error(L, "%s%sdimension %I out of range: the tensor is 0-dimensional", who, sep, (lua_Integer)d);
  return luaL_error(L, "%s%sdimension %I out of range for a %d-dimensional tensor (expected 1..%d or -%d..-1)", who,
                    sep, (lua_Integer)d, ndim, n, n);
}

int lt_list_len(lua_State *L, int idx, const char *what) {
  lua_Integer n = luaL_len(L, idx); /* a __len metamethod can return anything */
  if (n < 0 || n > INT_MAX) return luaL_error(L, "%s: the list's length (#) is %I, expected 0..%d", what, n, INT_MAX);
  return (int)n;
}

int lt_timeout_ms(lua_State *L, int idx, double dflt_s, const char *what) {
  double s = luaL_optnumber(L, idx, dflt_s);
  if (s != s) return luaL_error(L, "%s: timeout must be a number of seconds, got nan", what);
  if (s < 0) return -1;
  return s * 1000 >= INT_MAX ? INT_MAX : (int)(s * 1000);
}

int lt_check_int_range(lua_State *L, lua_Integer v, lua_Integer lo, lua_Integer hi, const char *what) {
  if (v < lo || v > hi) return luaL_error(L, "%s must be %I..%I, got %I", what, lo, hi, v);
  return (int)v;
}

int lt_check_dim(lua_State *L, int idx, int ndim, int extra) {
  lua_Integer d = luaL_checkinteger(L, idx);
  return lt_dim_value(L, d, ndim, extra);
}

int lt_read_shape(lua_State *L, int idx, int64_t *shape, int *next) {
  int n = 0;
  if (lua_istable(L, idx)) {
    n = (int)luaL_len(L, idx);
    if (n > DP_MAXDIM) luaL_error(L, "shape has %d dimensions; at most %d are supported", n, DP_MAXDIM);
    for (int i = 0; i < n; i++) {
      lua_geti(L, idx, i + 1);
      int ok;
      lua_Integer v = lua_tointegerx(L, -1, &ok);
      if (!ok) luaL_error(L, "shape entry %d must be an integer, got %s", i + 1, luaL_typename(L, -1));
      shape[i] = v;
      lua_pop(L, 1);
    }
    if (next) *next = idx + 1;
    return n;
  }
  while (lua_type(L, idx + n) == LUA_TNUMBER) {
    if (n >= DP_MAXDIM) luaL_error(L, "at most %d dimensions are supported", DP_MAXDIM);
    int ok;
    lua_Integer v = lua_tointegerx(L, idx + n, &ok);
    if (!ok) luaL_argerror(L, idx + n, "size must be an integer");
    shape[n] = v;
    n++;
  }
  if (next) *next = idx + n;
  return n;
}

const char *lt_check_path(lua_State *L, int idx, const char *what) {
  size_t len;
  const char *s = luaL_checklstring(L, idx, &len);
  const char *nul = memchr(s, 0, len);
  if (nul) luaL_error(L, "%s: the path contains a NUL byte (at byte %d)", what, (int)(nul - s) + 1);
  return s;
}

const char *lt_opt_path(lua_State *L, int idx, const char *dflt, const char *what) {
  return lua_isnoneornil(L, idx) ? dflt : lt_check_path(L, idx, what);
}

dp_dtype lt_check_dtype(lua_State *L, int idx) {
  const char *s = luaL_checkstring(L, idx);
  dp_dtype t;
  if (dp_dtype_parse(s, &t))
    luaL_error(L, "unknown dtype '%s' (expected float32, float64, int64, uint8, bfloat16 or float16)", s);
  return t;
}

dp_device lt_check_device(lua_State *L, int idx) {
  const char *s = luaL_checkstring(L, idx);
  dp_device d;
  if (dp_device_parse(s, &d)) luaL_error(L, "unknown device '%s' (expected \"cpu\", \"cuda\" or \"cuda:N\")", s);
  return d;
}

void lt_check_keys(lua_State *L, int idx, const char *what, const char *const *valid) {
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    bool ok = false;
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -1);
      for (int i = 0; valid[i]; i++) ok |= strcmp(k, valid[i]) == 0;
    }
    if (!ok) {
      /* the key's text first (luaL_tolstring pushes it: key, text), then
       * the list (key, text, list); each read from its own slot */
      const char *key = luaL_tolstring(L, -1, NULL);
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (int i = 0; valid[i]; i++) {
        if (i) luaL_addstring(&b, ", ");
        luaL_addstring(&b, valid[i]);
      }
      luaL_pushresult(&b);
      luaL_error(L, "%s: unknown option '%s' (valid options: %s)", what, key, lua_tostring(L, -1));
    }
  }
}

void lt_read_opts(lua_State *L, int idx, lt_opts *o, dp_dtype default_dtype) {
  o->dtype = default_dtype;
  o->device = dp_cpu();
  o->requires_grad = 0;
  o->has_dtype = o->has_device = 0;
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  static const char *const valid[] = {"dtype", "device", "requires_grad", NULL};
  lt_check_keys(L, idx, "tensor options", valid);
  if (lua_getfield(L, idx, "dtype") != LUA_TNIL) {
    o->dtype = lt_check_dtype(L, -1);
    o->has_dtype = 1;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "device") != LUA_TNIL) {
    o->device = lt_check_device(L, -1);
    o->has_device = 1;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "requires_grad") != LUA_TNIL) o->requires_grad = lua_toboolean(L, -1);
  lua_pop(L, 1);
}
