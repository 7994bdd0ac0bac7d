/* Data bindings: the IDX reader and batch gathering (lua/ddplua/data builds
 * the datasets and the loader on these).
 *
 *   _idx_load(path)                               -> uint8 tensor
 *   _gather_rows(src, indices [, dtype [, div]])  -> src rows at the 1-based
 *       positions of the Lua array `indices`, as dtype (default src's),
 *       divided by div (default 1)
 * and, from l_data_tokens.c and l_data_workers.c, the token files and the
 * DataLoader's worker processes. */
#include <stdlib.h>

#include "data/gather.h"
#include "data/idx.h"
#include "lua/l_data.h"
#include "lua/l_util.h"

/* _idx_load(path [, cache_dir]) */
static int l_idx_load(lua_State *L) {
  return lt_push(L, dp_idx_load_cached(lt_check_path(L, 1, "IDX file"), lt_opt_path(L, 2, NULL, "IDX cache dir")));
}

static int l_gather_rows(lua_State *L) {
  dp_tensor *src = lt_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  dp_dtype dt = lua_isnoneornil(L, 3) ? src->dtype : lt_check_dtype(L, 3);
  double div = luaL_optnumber(L, 4, 1.0);
  lua_Integer n = lt_list_len(L, 2, "gather: indices");
  if (n < 1) return luaL_error(L, "gather: the batch has no indices");
  /* a userdata as scratch: freed by the GC even if an entry raises */
  int64_t *idx = lua_newuserdatauv(L, (size_t)n * sizeof *idx, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    int ok = lua_geti(L, 2, i) == LUA_TNUMBER;
    if (ok) idx[i - 1] = lua_tointegerx(L, -1, &ok);
    if (!ok)
      return luaL_error(L, "gather: index at batch position %d is a %s, expected an integer position", (int)i,
                        luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  return lt_push(L, dp_gather_rows(src, idx, n, 1, dt, div));
}

void lt_open_data(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"_idx_load", l_idx_load}, {"_gather_rows", l_gather_rows}, {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
  lt_open_token_file(L, module);
  lt_open_data_workers(L, module);
}
