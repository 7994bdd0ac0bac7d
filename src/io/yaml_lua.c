/* YAML text -> Lua values (see yaml_lua.h): libyaml's event parser, one
 * recursive call per collection, bounded in depth, size and values. */
#include "io/yaml_lua.h"

#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/error.h"
#include "io/regular_file.h"

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
  int anchors;      /* stack index of the anchor table: name -> value */
  int anchor_sizes; /* stack index of name -> values the anchored node holds */
  int64_t values;   /* values so far, aliases counted as what they stand for */
  /* file input: bytes read, and whether the limit stopped the reading */
  FILE *file;
  size_t bytes;
  bool too_big;
} ctx;

static int fail_at(ctx *c, const yaml_mark_t *m, const char *problem) {
  return dp_error("%s:%zu:%zu: %s", c->name, m->line + 1, m->column + 1, problem);
}

static int fail_parser(ctx *c) {
  yaml_parser_t *p = &c->parser;
  if (c->too_big) {
    char msg[96];
    snprintf(msg, sizeof msg, "the file is larger than %d MiB (the limit for a YAML file)", DP_YAML_MAX_BYTES >> 20);
    return fail_at(c, &p->mark, msg);
  }
  const yaml_mark_t *m = p->context ? &p->context_mark : &p->problem_mark;
  if (p->problem)
    return dp_error("%s:%zu:%zu: %s%s%s", c->name, p->problem_mark.line + 1, p->problem_mark.column + 1, p->problem,
                    p->context ? " " : "", p->context ? p->context : "");
  return fail_at(c, m, "invalid YAML");
}

/* Counts n more values; an error at m once the document holds too many. */
static int count_values(ctx *c, int64_t n, const yaml_mark_t *m) {
  c->values += n;
  if (c->values <= DP_YAML_MAX_VALUES) return 0;
  char msg[128];
  snprintf(msg, sizeof msg, "the document holds more than %d values (aliases counted as the values they repeat)",
           DP_YAML_MAX_VALUES);
  return fail_at(c, m, msg);
}

static int parse_node(ctx *c, yaml_event_t *ev, int depth);

/* The items of a sequence or mapping whose start event was just read,
 * into the table at t; keys alternate with values in a mapping. */
static int parse_items(ctx *c, int t, bool mapping, int depth) {
  lua_State *L = c->L;
  lua_Integer i = 1;
  for (;;) {
    yaml_event_t k;
    if (!yaml_parser_parse(&c->parser, &k)) return fail_parser(c);
    if (k.type == YAML_SEQUENCE_END_EVENT || k.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&k);
      return 0;
    }
    if (!mapping) {
      int rc = parse_node(c, &k, depth + 1);
      yaml_event_delete(&k);
      if (rc) return -1;
      lua_rawseti(L, t, i++);
      continue;
    }
    if (k.type != YAML_SCALAR_EVENT) {
      fail_at(c, &k.start_mark, "mapping keys must be plain scalars");
      yaml_event_delete(&k);
      return -1;
    }
    yaml_mark_t kmark = k.start_mark;
    lua_pushlstring(L, (const char *)k.data.scalar.value, k.data.scalar.length);
    yaml_event_delete(&k);
    if (count_values(c, 1, &kmark)) return -1;
    lua_pushvalue(L, -1);
    if (lua_rawget(L, t) != LUA_TNIL) {
      lua_pop(L, 2);
      return fail_at(c, &kmark, "duplicate key");
    }
    lua_pop(L, 1);
    yaml_event_t v;
    if (!yaml_parser_parse(&c->parser, &v)) return fail_parser(c);
    int rc = parse_node(c, &v, depth + 1);
    yaml_event_delete(&v);
    if (rc) return -1;
    lua_rawset(L, t); /* t[key] = value */
  }
}

/* Parses the value following an already-read start event and pushes it;
 * depth counts the collections around it. */
static int parse_node(ctx *c, yaml_event_t *ev, int depth) {
  lua_State *L = c->L;
  luaL_checkstack(L, 8, "yaml nesting");
  const char *anchor = NULL;
  int64_t before = c->values;
  switch (ev->type) {
  case YAML_ALIAS_EVENT: {
    const char *name = (const char *)ev->data.alias.anchor;
    if (lua_getfield(L, c->anchor_sizes, name) == LUA_TNIL) {
      lua_pop(L, 1);
      dp_error("%s:%zu:%zu: unknown alias '*%s'", c->name, ev->start_mark.line + 1, ev->start_mark.column + 1, name);
      return -1;
    }
    int64_t n = (int64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (count_values(c, n, &ev->start_mark)) return -1;
    lua_getfield(L, c->anchors, name);
    return 0;
  }
  case YAML_SCALAR_EVENT: {
    if (count_values(c, 1, &ev->start_mark)) return -1;
    const char *v = (const char *)ev->data.scalar.value;
    if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) dp_yaml_push_scalar(L, v);
    else lua_pushlstring(L, v, ev->data.scalar.length);
    anchor = (const char *)ev->data.scalar.anchor;
    break;
  }
  case YAML_SEQUENCE_START_EVENT:
  case YAML_MAPPING_START_EVENT: {
    /* each level is a C stack frame here: bound them before the stack is */
    if (depth >= DP_YAML_MAX_DEPTH) {
      char msg[96];
      snprintf(msg, sizeof msg, "nested more than %d levels deep (the limit for a YAML document)", DP_YAML_MAX_DEPTH);
      return fail_at(c, &ev->start_mark, msg);
    }
    if (count_values(c, 1, &ev->start_mark)) return -1;
    bool mapping = ev->type == YAML_MAPPING_START_EVENT;
    anchor = (const char *)(mapping ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor);
    lua_newtable(L);
    if (parse_items(c, lua_gettop(L), mapping, depth)) return -1;
    break;
  }
  default: return fail_at(c, &ev->start_mark, "unexpected YAML event");
  }
  if (anchor) {
    lua_pushvalue(L, -1);
    lua_setfield(L, c->anchors, anchor);
    lua_pushinteger(L, (lua_Integer)(c->values - before));
    lua_setfield(L, c->anchor_sizes, anchor);
  }
  return 0;
}

static int parse_stream(ctx *c) {
  lua_State *L = c->L;
  int base = lua_gettop(L);
  lua_newtable(L);
  c->anchors = lua_gettop(L);
  lua_newtable(L);
  c->anchor_sizes = lua_gettop(L);
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
      rc = fail_at(c, &e.start_mark, "only one YAML document per file is supported");
      yaml_event_delete(&e);
      break;
    }
    rc = parse_node(c, &e, 0);
    yaml_event_delete(&e);
    if (rc) break;
    pushed = 1;
  }
  if (rc) {
    lua_settop(L, base);
    return -1;
  }
  if (!pushed) lua_pushnil(L);
  lua_replace(L, base + 1); /* the value where the anchor table was */
  lua_settop(L, base + 1);
  return 0;
}

int dp_yaml_push_string(lua_State *L, const char *text, size_t len, const char *name) {
  if (len > DP_YAML_MAX_BYTES)
    return dp_error("%s: the text is larger than %d MiB (the limit for a YAML document)", name,
                    DP_YAML_MAX_BYTES >> 20);
  ctx c = {.L = L, .name = name};
  if (!yaml_parser_initialize(&c.parser)) return dp_error("%s: cannot initialise the YAML parser", name);
  yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);
  int rc = parse_stream(&c);
  yaml_parser_delete(&c.parser);
  return rc;
}

/* libyaml's read handler for files: stops at the size limit (a file may
 * grow while it is read, so its size at open is not enough). */
static int read_bounded(void *data, unsigned char *buf, size_t size, size_t *size_read) {
  ctx *c = data;
  size_t room = DP_YAML_MAX_BYTES + (size_t)1 - c->bytes;
  size_t k = fread(buf, 1, size < room ? size : room, c->file);
  c->bytes += k;
  *size_read = k;
  if (c->bytes > DP_YAML_MAX_BYTES) {
    c->too_big = true;
    return 0;
  }
  return !ferror(c->file);
}

int dp_yaml_push_file(lua_State *L, const char *path) {
  FILE *f = dp_fopen_regular(path, NULL);
  if (!f) {
    char why[256];
    snprintf(why, sizeof why, "%s", dp_errmsg());
    return dp_error("%s: %s", path, why);
  }
  ctx c = {.L = L, .name = path, .file = f};
  if (!yaml_parser_initialize(&c.parser)) {
    fclose(f);
    return dp_error("%s: cannot initialise the YAML parser", path);
  }
  yaml_parser_set_input(&c.parser, read_bounded, &c);
  int rc = parse_stream(&c);
  yaml_parser_delete(&c.parser);
  fclose(f);
  return rc;
}
