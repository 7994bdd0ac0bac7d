/* io bindings: YAML and JSON <-> Lua values, directories, terminals, the
 * state of Lua's own math.random generator, and tensors <-> raw bytes. The
 * Lua library (lua/ddplua/config.lua, checkpoint.lua, metrics.lua,
 * progress.lua) builds the user-facing helpers on these. */
#include "lua/l_io.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/lua_value.h"
#include "io/yaml_lua.h"
#include "lua/l_util.h"
#include "ops/ops.h"

/* ---- YAML ---- */

static int l_yaml_load(lua_State *L) {
  const char *path = lt_check_path(L, 1, "yaml load");
  LT_CHECK(L, dp_yaml_push_file(L, path));
  return 1;
}

static int l_yaml_parse(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  const char *name = luaL_optstring(L, 2, "<string>");
  LT_CHECK(L, dp_yaml_push_string(L, s, n, name));
  return 1;
}

static int l_yaml_scalar(lua_State *L) {
  dp_yaml_push_scalar(L, luaL_checkstring(L, 1));
  return 1;
}

/* yaml_dump(value [, name]) -> text; name prefixes the path in errors. */
static int l_yaml_dump(lua_State *L) {
  luaL_checkany(L, 1);
  const char *root = luaL_optstring(L, 2, "value");
  dp_sbuf out = {0};
  if (dp_yaml_dump_lua(L, 1, root, &out)) {
    dp_sbuf_free(&out);
    return lt_error(L);
  }
  lua_pushlstring(L, out.p ? out.p : "", out.len);
  dp_sbuf_free(&out);
  return 1;
}

/* ---- JSON ---- */

static int l_json_encode(lua_State *L) {
  luaL_checkany(L, 1);
  const char *root = luaL_optstring(L, 2, "value");
  dp_sbuf out = {0};
  if (dp_json_encode_lua(L, 1, root, &out)) {
    dp_sbuf_free(&out);
    return lt_error(L);
  }
  lua_pushlstring(L, out.p ? out.p : "", out.len);
  dp_sbuf_free(&out);
  return 1;
}

static int l_json_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  const char *name = luaL_optstring(L, 2, "<string>");
  dp_json *v = dp_json_parse(s, n, name, 0);
  if (!v) return lt_error(L);
  dp_json_push(L, v);
  dp_json_free(v);
  return 1;
}

/* ---- files and processes ---- */

/* mkdir(path): creates path and its missing parents (mkdir -p). */
static int l_mkdir(lua_State *L) {
  const char *path = lt_check_path(L, 1, "mkdir");
  if (!*path) return luaL_argerror(L, 1, "empty directory name");
  char *p = dp_xstrdup(path);
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != 0) continue;
    char saved = *c;
    *c = 0;
    struct stat st;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      lua_pushfstring(L, "cannot create directory %s: %s", p, strerror(errno));
      free(p);
      return lua_error(L);
    }
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
      lua_pushfstring(L, "cannot create directory %s: %s exists and is not a directory", path, p);
      free(p);
      return lua_error(L);
    }
    *c = saved;
    if (!saved) break;
  }
  free(p);
  return 0;
}

/* file_type(path) -> "file", "directory", "other", or nil when nothing is
 * there (or it cannot be looked at). */
static int l_file_type(lua_State *L) {
  struct stat st;
  if (stat(lt_check_path(L, 1, "file_type"), &st) != 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : "other");
  return 1;
}

static int l_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
  return 1;
}

static int l_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

/* ---- Lua's math.random state ----
 * Lua 5.4 keeps its xoshiro256** state (4 x 64 bits) in a userdata that is
 * the first upvalue of math.random. Reading it is the only way to capture
 * the generator without reseeding it; anything that does not look like that
 * userdata (another Lua version, a replaced math.random) is reported as
 * "not available" instead of guessed at. */
#define LUA_RNG_WORDS 4

static uint64_t *lua_rng_words(lua_State *L) {
  uint64_t *words = NULL;
  int top = lua_gettop(L);
  if (lua_getglobal(L, "math") == LUA_TTABLE && lua_getfield(L, -1, "random") == LUA_TFUNCTION &&
      lua_iscfunction(L, -1) && lua_getupvalue(L, -1, 1) && lua_type(L, -1) == LUA_TUSERDATA &&
      lua_rawlen(L, -1) == LUA_RNG_WORDS * sizeof(uint64_t))
    words = lua_touserdata(L, -1); /* stays alive as math.random's upvalue */
  lua_settop(L, top);
  return words;
}

static int l_lua_rng_state(lua_State *L) {
  uint64_t *w = lua_rng_words(L);
  if (!w) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, LUA_RNG_WORDS, 0);
  for (int i = 0; i < LUA_RNG_WORDS; i++) {
    lua_pushinteger(L, (lua_Integer)w[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_set_lua_rng_state(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  uint64_t v[LUA_RNG_WORDS];
  for (int i = 0; i < LUA_RNG_WORDS; i++) {
    lua_rawgeti(L, 1, i + 1);
    int ok;
    v[i] = (uint64_t)lua_tointegerx(L, -1, &ok);
    if (!ok)
      return luaL_error(L, "set_lua_rng_state: expected %d integers, entry %d is a %s", LUA_RNG_WORDS, i + 1,
                        luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  if (!(v[0] | v[1] | v[2] | v[3])) return luaL_error(L, "set_lua_rng_state: an all-zero state is not valid");
  uint64_t *w = lua_rng_words(L);
  if (!w) return luaL_error(L, "set_lua_rng_state: math.random's state is not accessible in this Lua");
  memcpy(w, v, sizeof v);
  return 0;
}

/* ---- tensors <-> bytes ---- */

/* frombuffer(bytes, {dtype=, shape=}) -> a CPU tensor holding a copy of the
 * bytes (little-endian elements); shape defaults to 1-d. */
static int l_frombuffer(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  dp_dtype dt = DP_F32;
  int64_t shape[DP_MAXDIM];
  int ndim = -1;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const valid[] = {"dtype", "shape", NULL};
    lt_check_keys(L, 2, "frombuffer", valid);
    if (lua_getfield(L, 2, "dtype") != LUA_TNIL) dt = lt_check_dtype(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "shape") != LUA_TNIL) {
      luaL_checktype(L, -1, LUA_TTABLE);
      ndim = lt_read_shape(L, lua_gettop(L), shape, NULL);
      LT_CHECK(L, dp_check_shape(ndim, shape));
    }
    lua_pop(L, 1);
  }
  size_t es = dp_dtype_size(dt);
  if (ndim < 0) {
    if (n % es)
      return luaL_error(L, "frombuffer: %d bytes are not a whole number of %s elements (%d bytes each)", (int)n,
                        dp_dtype_name(dt), (int)es);
    ndim = 1;
    shape[0] = (int64_t)(n / es);
  }
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= shape[d];
  if ((size_t)numel * es != n) {
    char buf[96];
    return luaL_error(L, "frombuffer: shape %s of %s needs %d bytes, got %d",
                      dp_shape_str_n(ndim, shape, buf, sizeof buf), dp_dtype_name(dt), (int)((size_t)numel * es),
                      (int)n);
  }
  dp_tensor *t = dp_empty(dt, ndim, shape, dp_cpu());
  if (!t) return lt_error(L);
  if (n) memcpy(dp_data(t), s, n);
  return lt_push(L, t);
}

/* tobytes(t) -> the elements as a string, C-contiguous, little-endian. */
static int l_tobytes(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  dp_tensor *plain = dp_detach(t);
  dp_tensor *cpu = plain ? dp_to(plain, t->dtype, dp_cpu()) : NULL;
  dp_tensor *dense = cpu ? dp_contiguous(cpu) : NULL;
  dp_clear(&plain);
  dp_clear(&cpu);
  if (!dense) return lt_error(L);
  lua_pushlstring(L, dp_data(dense), (size_t)dp_numel(dense) * dp_elsize(dense));
  dp_release(dense);
  return 1;
}

void lt_open_io(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"yaml_load", l_yaml_load},
                                   {"yaml_parse", l_yaml_parse},
                                   {"yaml_scalar", l_yaml_scalar},
                                   {"yaml_dump", l_yaml_dump},
                                   {"json_encode", l_json_encode},
                                   {"json_decode", l_json_decode},
                                   {"mkdir", l_mkdir},
                                   {"file_type", l_file_type},
                                   {"isatty", l_isatty},
                                   {"getpid", l_getpid},
                                   {"lua_rng_state", l_lua_rng_state},
                                   {"set_lua_rng_state", l_set_lua_rng_state},
                                   {"frombuffer", l_frombuffer},
                                   {"tobytes", l_tobytes},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
  lt_open_safetensors(L, module);
}
