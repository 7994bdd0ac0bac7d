#include "io/yaml_lua.h"

#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/error.h"

static int is_int(const char *s, lua_Integer *out) {
  const char *p = s;
  int base = 10, neg = *p == '-';
  if (*p == '+' || *p == '-') p++;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) base = 16, p += 2;
  else if (p[0] == '0' && p[1] == 'o') base = 8, p += 2;
  if (!*p) return 0;
  for (const char *q = p; *q; q++) {
    int ok = base == 16  ? (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f') || (*q >= 'A' && *q <= 'F')
             : base == 8 ? (*q >= '0' && *q <= '7')
                         : (*q >= '0' && *q <= '9');
    if (!ok) return 0;
  }
  /* The magnitude as unsigned, so that -9223372036854775808 is an integer. */
  errno = 0;
  unsigned long long m = strtoull(p, NULL, base);
  if (errno || m > (unsigned long long)LLONG_MAX + (neg ? 1u : 0u)) return 0;
  *out = neg ? (lua_Integer)(0ull - m) : (lua_Integer)m;
  return 1;
}

static int is_float(const char *s, double *out) {
  if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, ".INF") || !strcmp(s, "+.inf")) {
    *out = INFINITY;
    return 1;
  }
  if (!strcmp(s, "-.inf") || !strcmp(s, "-.Inf") || !strcmp(s, "-.INF")) {
    *out = -INFINITY;
    return 1;
  }
  if (!strcmp(s, ".nan") || !strcmp(s, ".NaN") || !strcmp(s, ".NAN")) {
    *out = NAN;
    return 1;
  }
  /* [-+]? (digits [.digits] | .digits) ([eE][-+]?digits)? */
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  int digits = 0;
  while (*p >= '0' && *p <= '9') p++, digits++;
  if (*p == '.') {
    p++;
    while (*p >= '0' && *p <= '9') p++, digits++;
  }
  if (!digits) return 0;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!(*p >= '0' && *p <= '9')) return 0;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p) return 0;
  *out = strtod(s, NULL);
  return 1;
}

void dp_yaml_push_scalar(lua_State *L, const char *s) {
  lua_Integer i;
  double d;
  if (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")) lua_pushnil(L);
  else if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) lua_pushboolean(L, 1);
  else if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) lua_pushboolean(L, 0);
  else if (is_int(s, &i)) lua_pushinteger(L, i);
  else if (is_float(s, &d)) lua_pushnumber(L, d);
  else lua_pushstring(L, s);
}

typedef struct {
  lua_State *L;
  yaml_parser_t parser;
  const char *name;
  int anchors; /* stack index of the anchor table */
  int failed;
} ctx;

static int fail_parser(ctx *c) {
  yaml_parser_t *p = &c->parser;
  const yaml_mark_t *m = p->context ? &p->context_mark : &p->problem_mark;
  if (p->problem)
    dp_error("%s:%zu:%zu: %s%s%s", c->name, p->problem_mark.line + 1, p->problem_mark.column + 1, p->problem,
             p->context ? " " : "", p->context ? p->context : "");
  else dp_error("%s:%zu:%zu: invalid YAML", c->name, m->line + 1, m->column + 1);
  c->failed = 1;
  return -1;
}

static int parse_node(ctx *c, yaml_event_t *ev);

/* Parses the value following an already-read start event. Pushes it. */
static int parse_node(ctx *c, yaml_event_t *ev) {
  lua_State *L = c->L;
  luaL_checkstack(L, 8, "yaml nesting");
  const char *anchor = NULL;
  switch (ev->type) {
  case YAML_ALIAS_EVENT:
    lua_getfield(L, c->anchors, (const char *)ev->data.alias.anchor);
    if (lua_isnil(L, -1) && !lua_toboolean(L, -1)) {
      lua_pop(L, 1);
      dp_error("%s:%zu:%zu: unknown alias '*%s'", c->name, ev->start_mark.line + 1, ev->start_mark.column + 1,
               ev->data.alias.anchor);
      return -1;
    }
    return 0;
  case YAML_SCALAR_EVENT: {
    const char *v = (const char *)ev->data.scalar.value;
    if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) dp_yaml_push_scalar(L, v);
    else lua_pushlstring(L, v, ev->data.scalar.length);
    anchor = (const char *)ev->data.scalar.anchor;
    break;
  }
  case YAML_SEQUENCE_START_EVENT: {
    anchor = (const char *)ev->data.sequence_start.anchor;
    lua_newtable(L);
    int t = lua_gettop(L);
    lua_Integer i = 1;
    for (;;) {
      yaml_event_t e;
      if (!yaml_parser_parse(&c->parser, &e)) return fail_parser(c);
      if (e.type == YAML_SEQUENCE_END_EVENT) {
        yaml_event_delete(&e);
        break;
      }
      int rc = parse_node(c, &e);
      yaml_event_delete(&e);
      if (rc) return -1;
      lua_rawseti(L, t, i++);
    }
    break;
  }
  case YAML_MAPPING_START_EVENT: {
    anchor = (const char *)ev->data.mapping_start.anchor;
    lua_newtable(L);
    int t = lua_gettop(L);
    for (;;) {
      yaml_event_t k;
      if (!yaml_parser_parse(&c->parser, &k)) return fail_parser(c);
      if (k.type == YAML_MAPPING_END_EVENT) {
        yaml_event_delete(&k);
        break;
      }
      if (k.type != YAML_SCALAR_EVENT) {
        dp_error("%s:%zu:%zu: mapping keys must be plain scalars", c->name, k.start_mark.line + 1,
                 k.start_mark.column + 1);
        yaml_event_delete(&k);
        return -1;
      }
      size_t kline = k.start_mark.line + 1, kcol = k.start_mark.column + 1;
      lua_pushlstring(L, (const char *)k.data.scalar.value, k.data.scalar.length);
      yaml_event_delete(&k);
      lua_pushvalue(L, -1);
      if (lua_rawget(L, t) != LUA_TNIL) {
        lua_pop(L, 2);
        dp_error("%s:%zu:%zu: duplicate key", c->name, kline, kcol);
        return -1;
      }
      lua_pop(L, 1);
      yaml_event_t v;
      if (!yaml_parser_parse(&c->parser, &v)) return fail_parser(c);
      int rc = parse_node(c, &v);
      yaml_event_delete(&v);
      if (rc) return -1;
      lua_rawset(L, t); /* t[key] = value */
    }
    break;
  }
  default:
    dp_error("%s:%zu:%zu: unexpected YAML event", c->name, ev->start_mark.line + 1, ev->start_mark.column + 1);
    return -1;
  }
  if (anchor) {
    lua_pushvalue(L, -1);
    lua_setfield(L, c->anchors, anchor);
  }
  return 0;
}

static int parse_stream(ctx *c) {
  lua_State *L = c->L;
  lua_newtable(L);
  c->anchors = lua_gettop(L);
  int pushed = 0, rc = 0;
  for (;;) {
    yaml_event_t e;
    if (!yaml_parser_parse(&c->parser, &e)) {
      rc = fail_parser(c);
      break;
    }
    yaml_event_type_t ty = e.type;
    if (ty == YAML_STREAM_END_EVENT) {
      yaml_event_delete(&e);
      break;
    }
    if (ty == YAML_STREAM_START_EVENT || ty == YAML_DOCUMENT_START_EVENT || ty == YAML_DOCUMENT_END_EVENT) {
      yaml_event_delete(&e);
      continue;
    }
    if (pushed) {
      dp_error("%s:%zu:%zu: only one YAML document per file is supported", c->name, e.start_mark.line + 1,
               e.start_mark.column + 1);
      yaml_event_delete(&e);
      rc = -1;
      break;
    }
    rc = parse_node(c, &e);
    yaml_event_delete(&e);
    if (rc) break;
    pushed = 1;
  }
  if (rc) {
    lua_settop(L, c->anchors - 1);
    return -1;
  }
  if (!pushed) lua_pushnil(L);
  lua_remove(L, c->anchors);
  return 0;
}

int dp_yaml_push_string(lua_State *L, const char *text, size_t len, const char *name) {
  ctx c = {.L = L, .name = name};
  if (!yaml_parser_initialize(&c.parser)) return dp_error("%s: cannot initialise the YAML parser", name);
  yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);
  int rc = parse_stream(&c);
  yaml_parser_delete(&c.parser);
  return rc;
}

int dp_yaml_push_file(lua_State *L, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return dp_error("%s: cannot open: %s", path, strerror(errno));
  ctx c = {.L = L, .name = path};
  if (!yaml_parser_initialize(&c.parser)) {
    fclose(f);
    return dp_error("%s: cannot initialise the YAML parser", path);
  }
  yaml_parser_set_input_file(&c.parser, f);
  int rc = parse_stream(&c);
  yaml_parser_delete(&c.parser);
  fclose(f);
  return rc;
}
