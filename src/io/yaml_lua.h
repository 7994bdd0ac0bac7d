/* YAML -> Lua tables with libyaml. Mappings become tables with string keys,
 * sequences arrays, plain scalars are typed as YAML 1.2 core scalars (null,
 * true/false, integers, floats, .inf/.nan) and quoted scalars stay strings.
 * Anchors and aliases are supported.
 *
 * The reader is bounded, so that no file can crash or exhaust the process:
 * collections nested deeper than DP_YAML_MAX_DEPTH (the recursion that
 * builds them would overflow the C stack), texts over DP_YAML_MAX_BYTES and
 * documents of more than DP_YAML_MAX_VALUES values, counting each alias as
 * the values it stands for (so "billion laughs" alias chains, cheap here
 * because an alias shares its table, cannot blow up the code that walks the
 * result), are errors naming the file, line and column. A file must be a
 * regular file (a FIFO would block the reader). */
#ifndef DP_YAML_LUA_H
#define DP_YAML_LUA_H

#include <lua.h>
#include <stddef.h>

#define DP_YAML_MAX_DEPTH 100 /* also the writer's limit (yaml_emit.c) */
#define DP_YAML_MAX_BYTES (16 << 20)
#define DP_YAML_MAX_VALUES 1000000

/* Pushes the document in `path` as a Lua value (a table for a mapping, nil
 * for an empty file). On error pushes nothing, returns -1 and sets dp_error
 * to "<path>:<line>:<column>: <problem>". */
int dp_yaml_push_file(lua_State *L, const char *path);
/* Same for a string; `name` is used in error messages. */
int dp_yaml_push_string(lua_State *L, const char *text, size_t len, const char *name);
/* Pushes one plain scalar typed as YAML would type it ("3" -> 3, "1e-3" ->
 * 0.001, "true" -> true, "null" -> nil, "abc" -> "abc"): the key=value
 * overrides of the command line use it. */
void dp_yaml_push_scalar(lua_State *L, const char *s);

#endif
