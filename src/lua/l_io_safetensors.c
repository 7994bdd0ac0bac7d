/* ddp.save / ddp.load: safetensors files (src/io/safetensors.c).
 *
 *   ddp.save(tensors, path [, {metadata = {k = "v"}}])
 *   local tensors, metadata, names = ddp.load(path [, {device = "cuda:0", mmap = false}])
 *
 * `tensors` is a map name -> tensor, written sorted by name (Lua tables have
 * no order; sorting makes the file deterministic, as PyTorch's and Hugging
 * Face's writers do), or, to choose the order, an array of {name, tensor}
 * pairs or a table whose metatable has __pairs (an ordered dictionary).
 * load returns the header's names in order as a third value. It reads the
 * file into memory: a file truncated or rewritten in place afterwards
 * cannot touch the tensors. {mmap = true} maps it instead (no copy; the
 * CPU tensors alias a private mapping), at the price that truncating the
 * file in place while they live kills the process with SIGBUS on the next
 * read, as with any mapped file. */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "io/lua_value.h"
#include "io/safetensors.h"
#include "lua/l_io.h"
#include "lua/l_util.h"

/* Appends {name, tensor} for the key/value at -2/-1 to the pairs array at
 * `pairs` (which anchors the strings and tensors while C holds pointers). */
static void add_pair(lua_State *L, int pairs, int key, int value) {
  if (lua_type(L, key) != LUA_TSTRING)
    luaL_error(L, "save: tensor names must be strings, got the %s key %s", luaL_typename(L, key),
               luaL_tolstring(L, key, NULL));
  size_t n;
  const char *name = lua_tolstring(L, key, &n);
  if (strlen(name) != n) luaL_error(L, "save: tensor name '%s...' contains a NUL byte", name);
  if (!lt_test(L, value))
    luaL_error(L, "save: the value of '%s' is a %s, expected a tensor", name, luaL_typename(L, value));
  lua_createtable(L, 2, 0);
  lua_pushvalue(L, key);
  lua_rawseti(L, -2, 1);
  lua_pushvalue(L, value);
  lua_rawseti(L, -2, 2);
  lua_rawseti(L, pairs, (lua_Integer)lua_rawlen(L, pairs) + 1);
}

static int pair_name_cmp(const void *a, const void *b) {
  return strcmp(((const dp_st_tensor *)a)->name, ((const dp_st_tensor *)b)->name);
}

/* Builds the array of {name, tensor} pairs for the table at 1 and pushes
 * it; *sort says whether the order is still to be chosen (sorted). */
static int collect_pairs(lua_State *L, int *sort) {
  lua_newtable(L);
  int pairs = lua_gettop(L);
  *sort = 0;
  if (lua_rawlen(L, 1) > 0 && lua_rawgeti(L, 1, 1) == LUA_TTABLE) { /* {{name, tensor}, ...} */
    lua_pop(L, 1);
    size_t n;
    if (dp_lua_table_kind(L, 1, "save: tensors", &n) != 1)
      return luaL_error(L, "save: an array of {name, tensor} pairs must have no other keys");
    for (size_t i = 1; i <= n; i++) {
      if (lua_rawgeti(L, 1, (lua_Integer)i) != LUA_TTABLE)
        return luaL_error(L, "save: entry %I of the pairs array is a %s, expected {name, tensor}", (lua_Integer)i,
                          luaL_typename(L, -1));
      int entry = lua_gettop(L);
      lua_rawgeti(L, entry, 1);
      lua_rawgeti(L, entry, 2);
      add_pair(L, pairs, entry + 1, entry + 2);
      lua_settop(L, pairs);
    }
    return pairs;
  }
  lua_settop(L, pairs);
  if (luaL_getmetafield(L, 1, "__pairs") != LUA_TNIL) { /* ordered dictionary: its own iteration order */
    lua_pushvalue(L, 1);
    lua_call(L, 1, 3);
    int iter = lua_gettop(L) - 2;
    for (;;) {
      lua_pushvalue(L, iter);
      lua_pushvalue(L, iter + 1);
      lua_pushvalue(L, iter + 2);
      lua_call(L, 2, 2);
      if (lua_isnil(L, -2)) break;
      add_pair(L, pairs, lua_gettop(L) - 1, lua_gettop(L));
      lua_pop(L, 1);
      lua_replace(L, iter + 2); /* the key just read is the next call's control value */
    }
    lua_settop(L, pairs);
    return pairs;
  }
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    int top = lua_gettop(L);
    add_pair(L, pairs, top - 1, top);
    lua_pop(L, 1);
  }
  *sort = 1;
  return pairs;
}

static int meta_cmp(const void *a, const void *b) {
  return strcmp(((const dp_st_meta *)a)->key, ((const dp_st_meta *)b)->key);
}

/* Reads opts.metadata (string keys; string or number values) into meta,
 * sorted by key. The strings are anchored in a table pushed on the stack. */
static size_t read_metadata(lua_State *L, int opts, dp_st_meta **meta) {
  *meta = NULL;
  lua_newtable(L);
  int anchor = lua_gettop(L);
  if (lua_isnoneornil(L, opts)) return 0;
  luaL_checktype(L, opts, LUA_TTABLE);
  static const char *const valid[] = {"metadata", NULL};
  lt_check_keys(L, opts, "save", valid);
  if (lua_getfield(L, opts, "metadata") == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1))
    return (size_t)luaL_error(L, "save: metadata must be a table of strings, got a %s", luaL_typename(L, -1));
  int m = lua_gettop(L);
  size_t n = 0, cap = 8;
  *meta = dp_xmalloc(cap * sizeof **meta);
  lua_pushnil(L);
  while (lua_next(L, m)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      free(*meta);
      return (size_t)luaL_error(L, "save: metadata keys must be strings, got a %s", luaL_typename(L, -2));
    }
    const char *k = lua_tostring(L, -2);
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER) {
      free(*meta);
      return (size_t)luaL_error(L, "save: metadata '%s' is a %s, expected a string", k, luaL_typename(L, -1));
    }
    size_t vn;
    const char *v = luaL_tolstring(L, -1, &vn); /* numbers as Lua writes them */
    lua_rawseti(L, anchor, (lua_Integer)lua_rawlen(L, anchor) + 1);
    if (n == cap) *meta = dp_xrealloc(*meta, (cap *= 2) * sizeof **meta);
    (*meta)[n++] = (dp_st_meta){(char *)k, (char *)v, vn};
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  qsort(*meta, n, sizeof **meta, meta_cmp);
  return n;
}

static int l_save(lua_State *L) {
  lua_settop(L, 3);
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *path = lt_check_path(L, 2, "save");
  int sort;
  int pairs = collect_pairs(L, &sort);
  size_t n = lua_rawlen(L, pairs);
  dp_st_meta *meta;
  size_t nmeta = read_metadata(L, 3, &meta);
  dp_st_tensor *ts = dp_xmalloc((n ? n : 1) * sizeof *ts);
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, pairs, (lua_Integer)i + 1);
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    ts[i] = (dp_st_tensor){(char *)lua_tostring(L, -2), lt_test(L, -1)};
    lua_pop(L, 3); /* the pairs array keeps them alive */
  }
  if (sort) qsort(ts, n, sizeof *ts, pair_name_cmp);
  int rc = dp_safetensors_save(path, ts, n, meta, nmeta);
  free(ts);
  free(meta);
  if (rc) return lt_error(L);
  return 0;
}

static int l_load(lua_State *L) {
  const char *path = lt_check_path(L, 1, "load");
  dp_device dev = dp_cpu();
  int use_mmap = 0; /* safe by default; mapping is the documented opt-in */
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const valid[] = {"device", "mmap", NULL};
    lt_check_keys(L, 2, "load", valid);
    if (lua_getfield(L, 2, "device") != LUA_TNIL) dev = lt_check_device(L, -1);
    if (lua_getfield(L, 2, "mmap") != LUA_TNIL) use_mmap = lua_toboolean(L, -1);
    lua_pop(L, 2);
  }
  dp_st_contents c;
  if (dp_safetensors_load(path, dev, use_mmap, &c)) return lt_error(L);
  lua_createtable(L, 0, (int)c.n);
  lua_createtable(L, 0, (int)c.nmeta);
  lua_createtable(L, (int)c.n, 0);
  for (size_t i = 0; i < c.n; i++) {
    lua_pushstring(L, c.tensors[i].name);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
    dp_tensor *t = c.tensors[i].t;
    c.tensors[i].t = NULL; /* the userdata takes over the reference */
    lt_push(L, t);
    lua_setfield(L, -4, c.tensors[i].name);
  }
  for (size_t i = 0; i < c.nmeta; i++) {
    lua_pushlstring(L, c.meta[i].value, c.meta[i].value_len);
    lua_setfield(L, -3, c.meta[i].key);
  }
  dp_st_contents_free(&c);
  return 3;
}

void lt_open_safetensors(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"save", l_save}, {"load", l_load}, {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
