/* Plain Lua values (nil, booleans, integers, floats, strings, tables of
 * them) to and from JSON and YAML text: checkpoint state, metrics records
 * and the saved run configuration.
 *
 * A table is written as a sequence when its keys are exactly 1..n (n >= 1)
 * and as a mapping when every key is a string (an empty table is an empty
 * mapping); mapping keys are written sorted, so the text is deterministic.
 * Anything else (mixed or sparse integer keys, functions, userdata such as
 * tensors, cycles) is an error naming the value's path ("optimizer.lr",
 * "config.layers[2]"): callers that store such data transform it first. */
#ifndef DP_LUA_VALUE_H
#define DP_LUA_VALUE_H

#include <lua.h>

#include "io/json.h"

/* Appends the value at idx as JSON. Returns 0, or -1 after dp_error
 * ("<root>.<path>: ..."). */
int dp_json_encode_lua(lua_State *L, int idx, const char *root, dp_sbuf *out);
/* Pushes the tree as a Lua value (null -> nil). */
void dp_json_push(lua_State *L, const dp_json *v);

/* Appends the value at idx as a YAML document (block mappings, flow
 * sequences of scalars); strings whose plain form would read back as
 * another type ("3", "true", "", "null") are quoted. */
int dp_yaml_dump_lua(lua_State *L, int idx, const char *root, dp_sbuf *out);

/* Shared by both writers: 1 for a sequence (*n = its length), 0 for a
 * mapping (*n = its key count), -1 after dp_error naming path. */
int dp_lua_table_kind(lua_State *L, int idx, const char *path, size_t *n);
/* Pushes a new array of the table's string keys, sorted bytewise. */
void dp_lua_sorted_keys(lua_State *L, int idx);

#endif
