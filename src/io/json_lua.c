/* Lua values <-> JSON (see lua_value.h). */
#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/lua_value.h"

#define MAX_DEPTH 100

int dp_lua_table_kind(lua_State *L, int idx, const char *path, size_t *n) {
  idx = lua_absindex(L, idx);
  size_t count = 0, ints = 0, strings = 0;
  lua_Integer max_int = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    count++;
    if (lua_type(L, -1) == LUA_TSTRING) strings++;
    else if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1) {
      ints++;
      if (lua_tointeger(L, -1) > max_int) max_int = lua_tointeger(L, -1);
    } else {
      const char *k = luaL_tolstring(L, -1, NULL);
      dp_error("%s: key %s (a %s) is neither a string nor a position 1..n", path, k, luaL_typename(L, -2));
      lua_pop(L, 2); /* the key and its text: the traversal stops here */
      return -1;
    }
  }
  *n = count;
  if (ints == 0) return 0;
  if (strings == 0 && (size_t)max_int == count) return 1;
  if (strings) dp_error("%s: the table mixes string keys and positions", path);
  else dp_error("%s: the table has holes (%zu entries, highest position %lld)", path, count, (long long)max_int);
  return -1;
}

static int key_cmp(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  return strcmp(*x, *y);
}

void dp_lua_sorted_keys(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) n++;
  }
  /* The key strings stay alive in the table while they are sorted. */
  const char **keys = dp_xmalloc((n ? n : 1) * sizeof *keys);
  size_t k = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) keys[k++] = lua_tostring(L, -1);
  }
  qsort(keys, n, sizeof *keys, key_cmp);
  lua_createtable(L, (int)n, 0);
  for (k = 0; k < n; k++) {
    lua_pushstring(L, keys[k]);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  free(keys);
}

static int valid_utf8(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    if ((unsigned char)s[i] < 0x80) {
      i++;
      continue;
    }
    size_t k = dp_utf8_len((const unsigned char *)s + i, n - i);
    if (!k) return 0;
    i += k;
  }
  return 1;
}

static int encode(lua_State *L, int idx, dp_sbuf *path, dp_sbuf *out, int depth) {
  switch (lua_type(L, idx)) {
  case LUA_TNIL: dp_sbuf_puts(out, "null"); return 0;
  case LUA_TBOOLEAN: dp_sbuf_puts(out, lua_toboolean(L, idx) ? "true" : "false"); return 0;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) dp_sbuf_printf(out, "%lld", (long long)lua_tointeger(L, idx));
    else dp_json_put_float(out, lua_tonumber(L, idx));
    return 0;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (!valid_utf8(s, n)) return dp_error("%s: the string is not valid UTF-8 text, which JSON cannot hold", path->p);
    dp_json_put_string(out, s, n);
    return 0;
  }
  case LUA_TTABLE: break;
  default: return dp_error("%s: cannot store a %s as JSON", path->p, luaL_typename(L, idx));
  }
  if (depth >= MAX_DEPTH) return dp_error("%s: nested more than %d tables deep (a cycle?)", path->p, MAX_DEPTH);
  luaL_checkstack(L, 6, "JSON nesting");
  idx = lua_absindex(L, idx);
  size_t n, mark = path->len;
  int kind = dp_lua_table_kind(L, idx, path->p, &n);
  if (kind < 0) return -1;
  if (kind == 1) {
    dp_sbuf_putc(out, '[');
    for (size_t i = 1; i <= n; i++) {
      if (i > 1) dp_sbuf_putc(out, ',');
      dp_sbuf_printf(path, "[%zu]", i);
      lua_rawgeti(L, idx, (lua_Integer)i);
      int rc = encode(L, -1, path, out, depth + 1);
      lua_pop(L, 1);
      if (rc) return -1;
      path->len = mark;
      path->p[mark] = 0;
    }
    dp_sbuf_putc(out, ']');
    return 0;
  }
  dp_lua_sorted_keys(L, idx);
  int keys = lua_gettop(L);
  dp_sbuf_putc(out, '{');
  for (size_t i = 1; i <= n; i++) {
    if (i > 1) dp_sbuf_putc(out, ',');
    lua_rawgeti(L, keys, (lua_Integer)i);
    size_t kn;
    const char *k = lua_tolstring(L, -1, &kn);
    dp_sbuf_printf(path, ".%s", k);
    if (!valid_utf8(k, kn)) {
      lua_pop(L, 2);
      return dp_error("%s: the key is not valid UTF-8 text, which JSON cannot hold", path->p);
    }
    dp_json_put_string(out, k, kn);
    dp_sbuf_putc(out, ':');
    lua_rawget(L, idx);
    int rc = encode(L, -1, path, out, depth + 1);
    lua_pop(L, 1);
    if (rc) {
      lua_pop(L, 1);
      return -1;
    }
    path->len = mark;
    path->p[mark] = 0;
  }
  lua_pop(L, 1);
  dp_sbuf_putc(out, '}');
  return 0;
}

int dp_json_encode_lua(lua_State *L, int idx, const char *root, dp_sbuf *out) {
  dp_sbuf path = {0};
  dp_sbuf_puts(&path, root);
  int top = lua_gettop(L);
  int rc = encode(L, idx, &path, out, 0);
  lua_settop(L, top);
  dp_sbuf_free(&path);
  return rc;
}

void dp_json_push(lua_State *L, const dp_json *v) {
  luaL_checkstack(L, 4, "JSON nesting");
  switch (v->type) {
  case DP_JSON_NULL: lua_pushnil(L); break;
  case DP_JSON_BOOL: lua_pushboolean(L, v->b); break;
  case DP_JSON_INT: lua_pushinteger(L, (lua_Integer)v->i); break;
  case DP_JSON_FLOAT: lua_pushnumber(L, v->f); break;
  case DP_JSON_STRING: lua_pushlstring(L, v->str, v->len); break;
  case DP_JSON_ARRAY:
    lua_createtable(L, (int)v->n, 0);
    for (size_t i = 0; i < v->n; i++) {
      dp_json_push(L, &v->items[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    break;
  case DP_JSON_OBJECT:
    lua_createtable(L, 0, (int)v->n);
    for (size_t i = 0; i < v->n; i++) {
      lua_pushlstring(L, v->keys[i], v->key_lens[i]);
      dp_json_push(L, &v->items[i]);
      lua_rawset(L, -3);
    }
    break;
  }
}
