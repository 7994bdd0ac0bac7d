/* Token-file bindings (lua/ddplua/data/token_file.lua builds data.TokenFile
 * on them):
 *
 *   _token_file(path, "uint16" | "uint8")     -> a mapped file, with
 *     f:len()                                 tokens in the file
 *     f:windows(starts, block)                -> x, y int64 [n, block] for the
 *         1-based starts (a Lua array or an int64 tensor)
 *     f:sample(n, block [, generator])        -> x, y for n random starts in
 *         1..len - block; the generator {seed=, offset=} advances by n (the
 *         global generator when none)
 *     f:close()                               (also at garbage collection)
 *   _token_file_write(path, ids, dtype)       ids: an int64 tensor of 1-based ids */
#include <string.h>

#include "data/token_file.h"
#include "lua/l_data.h"
#include "lua/l_util.h"
#include "ops/ops.h"

#define TOKEN_FILE_MT "ddplua.TokenFile"

typedef struct {
  dp_token_file *f;
} tf_box;

static dp_token_file *check_tf(lua_State *L) {
  tf_box *b = luaL_checkudata(L, 1, TOKEN_FILE_MT);
  if (!b->f) luaL_error(L, "TokenFile: the file is closed");
  return b->f;
}

static int elsize_of(lua_State *L, int idx) {
  const char *dt = luaL_checkstring(L, idx);
  if (strcmp(dt, "uint16") == 0) return 2;
  if (strcmp(dt, "uint8") == 0) return 1;
  return luaL_error(L, "TokenFile: dtype must be \"uint16\" or \"uint8\", got \"%s\"", dt);
}

static int l_open(lua_State *L) {
  const char *path = lt_check_path(L, 1, "TokenFile");
  int es = elsize_of(L, 2);
  tf_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->f = NULL;
  luaL_setmetatable(L, TOKEN_FILE_MT);
  b->f = dp_token_file_open(path, es);
  if (!b->f) return lt_error(L);
  return 1;
}

static int l_len(lua_State *L) {
  lua_pushinteger(L, dp_token_file_len(check_tf(L)));
  return 1;
}

/* x, y [n, block] filled from 0-based starts */
static int push_windows(lua_State *L, dp_token_file *f, const int64_t *starts, int64_t n, int64_t block) {
  int64_t shape[2] = {n, block};
  dp_tensor *x = dp_empty(DP_I64, 2, shape, dp_cpu());
  if (!x) return lt_error(L);
  lt_push(L, x);
  dp_tensor *y = dp_empty(DP_I64, 2, shape, dp_cpu());
  if (!y) return lt_error(L);
  lt_push(L, y);
  LT_CHECK(L, dp_token_file_windows(f, starts, n, block, dp_data(x), dp_data(y)));
  return 2;
}

static int64_t check_block(lua_State *L, int idx) {
  lua_Integer block = luaL_checkinteger(L, idx);
  if (block < 1) luaL_error(L, "TokenFile: block_size must be a positive integer, got %I", block);
  return (int64_t)block;
}

/* A 1-based window start as 0-based; starts below 1 (math.mininteger
 * included, whose - 1 would overflow) are an error naming it. */
static int64_t start0(lua_State *L, lua_Integer s, int64_t i) {
  if (s < 1)
    luaL_error(L, "TokenFile: window start %I (batch position %I) is out of range: starts are 1-based positions", s,
               (lua_Integer)i + 1);
  return (int64_t)s - 1;
}

static int l_windows(lua_State *L) {
  dp_token_file *f = check_tf(L);
  int64_t block = check_block(L, 3);
  int64_t n;
  int64_t *starts;
  dp_tensor *t = lt_test(L, 2);
  if (t) {
    if (t->dtype != DP_I64 || t->ndim != 1 || dp_dev(t).type != DP_CPU)
      return luaL_error(L, "TokenFile: window starts must be a Lua array or a 1-d int64 cpu tensor");
    n = t->shape[0];
    starts = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *starts, 0);
    const int64_t *src = dp_data(t);
    for (int64_t i = 0; i < n; i++) starts[i] = start0(L, src[i * t->stride[0]], i);
  } else {
    luaL_checktype(L, 2, LUA_TTABLE);
    n = lt_list_len(L, 2, "TokenFile: window starts");
    starts = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *starts, 0);
    for (int64_t i = 0; i < n; i++) {
      int ok;
      lua_geti(L, 2, i + 1);
      lua_Integer s = lua_tointegerx(L, -1, &ok);
      if (!ok)
        return luaL_error(L, "TokenFile: window start %d must be an integer position, got %s", (int)i + 1,
                          luaL_typename(L, -1));
      starts[i] = start0(L, s, i);
      lua_pop(L, 1);
    }
  }
  if (n < 1) return luaL_error(L, "TokenFile: a batch needs at least one window");
  return push_windows(L, f, starts, n, block);
}

static int l_sample(lua_State *L) {
  dp_token_file *f = check_tf(L);
  lua_Integer n = luaL_checkinteger(L, 2);
  if (n < 1) return luaL_error(L, "TokenFile: batch_size must be a positive integer, got %I", n);
  int64_t block = check_block(L, 3);
  int64_t range = dp_token_file_len(f) - block;
  if (range < 1)
    return luaL_error(L, "TokenFile: the file has %I tokens, fewer than block_size %I + 1",
                      (lua_Integer)dp_token_file_len(f), (lua_Integer)block);
  /* the batch's shape before the starts are sized from n (n * 8 bytes
   * could wrap) and before the generator advances */
  int64_t shape[2] = {n, block};
  if (dp_check_shape(2, shape))
    return luaL_error(L, "TokenFile: batch_size %I x block_size %I: %s", n, (lua_Integer)block, dp_errmsg());
  uint64_t seed, off;
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "seed");
    lua_getfield(L, 4, "offset");
    int ok1, ok2;
    seed = (uint64_t)lua_tointegerx(L, -2, &ok1);
    off = (uint64_t)lua_tointegerx(L, -1, &ok2);
    if (!ok1 || !ok2) return luaL_error(L, "TokenFile: generator must have integer seed and offset");
    lua_pop(L, 2);
    lua_pushinteger(L, (lua_Integer)(off + (uint64_t)n));
    lua_setfield(L, 4, "offset");
  } else {
    seed = dp_rng_seed();
    off = dp_rng_reserve((uint64_t)n);
  }
  int64_t *starts = lua_newuserdatauv(L, (size_t)n * sizeof *starts, 0);
  dp_token_file_random_starts(range, seed, off, n, starts);
  return push_windows(L, f, starts, n, block);
}

static int l_close(lua_State *L) {
  tf_box *b = luaL_checkudata(L, 1, TOKEN_FILE_MT);
  dp_token_file_close(b->f);
  b->f = NULL;
  return 0;
}

static int l_write(lua_State *L) {
  const char *path = lt_check_path(L, 1, "token file write");
  dp_tensor *t = lt_check(L, 2);
  int es = elsize_of(L, 3);
  if (t->dtype != DP_I64 || dp_dev(t).type != DP_CPU)
    return luaL_error(L, "TokenFile.write: ids must be an int64 cpu tensor, got %s", dp_dtype_name(t->dtype));
  dp_tensor *c = dp_contiguous(t);
  if (!c) return lt_error(L);
  int rc = dp_token_file_write(path, dp_data(c), dp_numel(c), es);
  dp_release(c);
  if (rc) return lt_error(L);
  return 0;
}

void lt_open_token_file(lua_State *L, int module) {
  static const luaL_Reg methods[] = {
      {"len", l_len}, {"windows", l_windows}, {"sample", l_sample}, {"close", l_close}, {NULL, NULL}};
  luaL_newmetatable(L, TOKEN_FILE_MT);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_close);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {{"_token_file", l_open}, {"_token_file_write", l_write}, {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
