/* Lua values -> YAML with libyaml's emitter (see lua_value.h). The emitter
 * handles indentation and escaping; this file decides the styles so that
 * the text reads back through yaml_lua.c as the same values and types. */
#include <lauxlib.h>
#include <string.h>
#include <yaml.h>

#include "io/lua_value.h"
#include "io/yaml_lua.h"

typedef struct {
  yaml_emitter_t em;
  dp_sbuf *out;
  dp_sbuf path;
  lua_State *L;
} emitter;

static int write_handler(void *data, unsigned char *buffer, size_t size) {
  dp_sbuf_add(data, buffer, size);
  return 1;
}

static int emit(emitter *e, yaml_event_t *ev) {
  if (!yaml_emitter_emit(&e->em, ev))
    return dp_error("%s: YAML emitter: %s", e->path.p, e->em.problem ? e->em.problem : "failed");
  return 0;
}

static int scalar(emitter *e, const char *s, size_t n, yaml_scalar_style_t style) {
  yaml_event_t ev;
  if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)n, 1, 1, style))
    return dp_error("%s: cannot build a YAML scalar", e->path.p);
  return emit(e, &ev);
}

/* Plain style when the plain text reads back as this very string; quoted
 * otherwise ("3", "true", "null", "" would change type). libyaml itself
 * falls back to quoting when plain style cannot hold the text (": ", "#"). */
static int string_scalar(emitter *e, const char *s, size_t n) {
  lua_State *L = e->L;
  int plain = 0;
  if (n && strlen(s) == n && !strpbrk(s, "\n\r\t")) { /* line breaks read best as "\n" */
    dp_yaml_push_scalar(L, s);
    plain = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), s) == 0;
    lua_pop(L, 1);
  }
  return scalar(e, s, n, plain ? YAML_PLAIN_SCALAR_STYLE : YAML_DOUBLE_QUOTED_SCALAR_STYLE);
}

static int is_scalar_value(lua_State *L, int idx) { return lua_type(L, idx) != LUA_TTABLE; }

static int node(emitter *e, int idx, int depth) {
  lua_State *L = e->L;
  char buf[48];
  switch (lua_type(L, idx)) {
  case LUA_TNIL: return scalar(e, "null", 4, YAML_PLAIN_SCALAR_STYLE);
  case LUA_TBOOLEAN:
    return lua_toboolean(L, idx) ? scalar(e, "true", 4, YAML_PLAIN_SCALAR_STYLE)
                                 : scalar(e, "false", 5, YAML_PLAIN_SCALAR_STYLE);
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) snprintf(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, idx));
    else dp_format_float(buf, sizeof buf, lua_tonumber(L, idx), 1);
    return scalar(e, buf, strlen(buf), YAML_PLAIN_SCALAR_STYLE);
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    return string_scalar(e, s, n);
  }
  case LUA_TTABLE: break;
  default: return dp_error("%s: cannot write a %s as YAML", e->path.p, luaL_typename(L, idx));
  }
  if (depth >= DP_YAML_MAX_DEPTH)
    return dp_error("%s: nested more than %d tables deep (a cycle?)", e->path.p, DP_YAML_MAX_DEPTH);
  luaL_checkstack(L, 6, "YAML nesting");
  idx = lua_absindex(L, idx);
  size_t n, mark = e->path.len;
  int kind = dp_lua_table_kind(L, idx, e->path.p, &n);
  if (kind < 0) return -1;
  yaml_event_t ev;
  if (kind == 1) {
    int flow = 1; /* [1, 2, 3] reads better than one line per number */
    for (size_t i = 1; i <= n && flow; i++) {
      lua_rawgeti(L, idx, (lua_Integer)i);
      flow = is_scalar_value(L, -1);
      lua_pop(L, 1);
    }
    yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                         flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
    if (emit(e, &ev)) return -1;
    for (size_t i = 1; i <= n; i++) {
      dp_sbuf_printf(&e->path, "[%zu]", i);
      lua_rawgeti(L, idx, (lua_Integer)i);
      int rc = node(e, lua_gettop(L), depth + 1);
      lua_pop(L, 1);
      if (rc) return -1;
      e->path.len = mark;
      e->path.p[mark] = 0;
    }
    yaml_sequence_end_event_initialize(&ev);
    return emit(e, &ev);
  }
  yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, n ? YAML_BLOCK_MAPPING_STYLE : YAML_FLOW_MAPPING_STYLE);
  if (emit(e, &ev)) return -1;
  dp_lua_sorted_keys(L, idx);
  int keys = lua_gettop(L);
  for (size_t i = 1; i <= n; i++) {
    lua_rawgeti(L, keys, (lua_Integer)i);
    size_t kn;
    const char *k = lua_tolstring(L, -1, &kn);
    dp_sbuf_printf(&e->path, ".%s", k);
    int rc = string_scalar(e, k, kn);
    if (!rc) {
      lua_rawget(L, idx);
      rc = node(e, lua_gettop(L), depth + 1);
    }
    lua_pop(L, 1);
    if (rc) return -1;
    e->path.len = mark;
    e->path.p[mark] = 0;
  }
  lua_pop(L, 1);
  yaml_mapping_end_event_initialize(&ev);
  return emit(e, &ev);
}

int dp_yaml_dump_lua(lua_State *L, int idx, const char *root, dp_sbuf *out) {
  idx = lua_absindex(L, idx);
  emitter e = {.out = out, .L = L};
  dp_sbuf_puts(&e.path, root);
  if (!yaml_emitter_initialize(&e.em)) {
    dp_sbuf_free(&e.path);
    return dp_error("%s: cannot initialise the YAML emitter", root);
  }
  yaml_emitter_set_output(&e.em, write_handler, out);
  yaml_emitter_set_unicode(&e.em, 1);
  yaml_emitter_set_width(&e.em, 1000); /* no folding of long values */
  yaml_emitter_set_indent(&e.em, 2);
  int top = lua_gettop(L);
  yaml_event_t ev;
  int rc = -1;
  yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
  if (emit(&e, &ev)) goto done;
  yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
  if (emit(&e, &ev)) goto done;
  if (node(&e, idx, 0)) goto done;
  yaml_document_end_event_initialize(&ev, 1);
  if (emit(&e, &ev)) goto done;
  yaml_stream_end_event_initialize(&ev);
  if (emit(&e, &ev)) goto done;
  if (!yaml_emitter_flush(&e.em)) {
    dp_error("%s: YAML emitter: cannot flush", root);
    goto done;
  }
  rc = 0;
done:
  lua_settop(L, top);
  yaml_emitter_delete(&e.em);
  dp_sbuf_free(&e.path);
  return rc;
}
