/* Compiled Lua modules kept across the runs of a `ddplua --watch` worker
 * (host.h, "chunk_cache.c").
 *
 * Each rerun starts with an empty package.loaded, so `require "ddplua"`
 * and the modules it loads (84 files, 16k lines) are loaded again: parsing
 * them took 19 ms of a rerun's 30 ms to its first line on the 2026-12 VM,
 * loading the same functions as bytecode 4 ms. This searcher replaces
 * package.searchers[2] (Lua files on package.path) in the worker: the
 * first load of a file parses it as Lua's own searcher does and keeps its
 * bytecode (lua_dump, debug information included, so tracebacks and
 * line numbers are the source's), keyed by the file's path and the FNV-1a
 * hash of its bytes; a later load of the same path reads the file, and
 * when its bytes hash the same, loads the kept bytecode instead of
 * parsing. An edited library file is parsed again, as are files whose
 * load failed. The bytecode is what this process dumped, never read from
 * outside it. */
#include <lauxlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "host/host.h"

enum { MAX_SOURCE = 64 << 20 }; /* larger files are parsed every time */

typedef struct {
  char *path;
  uint64_t hash; /* of the source bytes the bytecode was made from */
  char *code;
  size_t len;
} cached_chunk;

static cached_chunk *chunks;
static int n_chunks, cap_chunks;

static uint64_t fnv1a(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h;
}

/* The file's bytes (malloc'ed), or NULL when it cannot be read whole. */
static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    if (cap >= MAX_SOURCE) {
      free(buf);
      buf = NULL;
      break;
    }
    char *more = realloc(buf, cap * 2);
    if (!more) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = more;
    cap *= 2;
  }
  if (buf && ferror(f)) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = n;
  return buf;
}

typedef struct {
  char *p;
  size_t n, cap;
} dump_buf;

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud) {
  (void)L;
  dump_buf *b = ud;
  if (b->n + sz > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + sz) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) return 1;
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, sz);
  b->n += sz;
  return 0;
}

static cached_chunk *find(const char *path) {
  for (int i = 0; i < n_chunks; i++)
    if (strcmp(chunks[i].path, path) == 0) return &chunks[i];
  return NULL;
}

/* Keeps the function on the top of the stack as path's bytecode. */
static void keep(lua_State *L, const char *path, uint64_t hash) {
  dump_buf b = {0};
  if (lua_dump(L, dump_writer, &b, 0) != 0) {
    free(b.p);
    return;
  }
  cached_chunk *c = find(path);
  if (!c) {
    if (n_chunks == cap_chunks) {
      int cap = cap_chunks ? 2 * cap_chunks : 64;
      cached_chunk *more = realloc(chunks, sizeof *chunks * (size_t)cap);
      if (!more) {
        free(b.p);
        return;
      }
      chunks = more;
      cap_chunks = cap;
    }
    c = &chunks[n_chunks++];
    *c = (cached_chunk){.path = dp_xstrdup(path)};
  }
  free(c->code);
  c->hash = hash;
  c->code = b.p;
  c->len = b.n;
}

/* package.searchers[2]'s contract: (name) -> loader, path | message. */
static int cached_lua_searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchpath");
  lua_pushstring(L, name);
  lua_getfield(L, -3, "path");
  if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "'package.path' must be a string");
  lua_call(L, 2, 2);
  if (lua_isnil(L, -2)) return 1; /* searchpath's "no file '...'" list, as Lua's own searcher returns it */
  const char *path = lua_tostring(L, -2);
  lua_pop(L, 1);
  size_t len = 0;
  char *src = read_all(path, &len);
  bool readable = src != NULL;
  uint64_t hash = readable ? fnv1a(src, len) : 0;
  free(src);
  cached_chunk *c = readable ? find(path) : NULL;
  char chunkname[4096];
  snprintf(chunkname, sizeof chunkname, "@%s", path);
  if (c && c->hash == hash && luaL_loadbufferx(L, c->code, c->len, chunkname, "b") == LUA_OK) {
    lua_pushstring(L, path);
    return 2;
  }
  if (luaL_loadfilex(L, path, NULL) != LUA_OK)
    return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, path, lua_tostring(L, -1));
  /* kept only if the file still holds the bytes hashed above (not edited
   * between the two reads) */
  size_t len2 = 0;
  char *again = readable ? read_all(path, &len2) : NULL;
  if (again && len2 == len && fnv1a(again, len2) == hash) keep(L, path, hash);
  free(again);
  lua_pushstring(L, path);
  return 2;
}

void dp_host_cache_lua_chunks(lua_State *L) {
  lua_getglobal(L, "package");
  if (lua_getfield(L, -1, "searchers") == LUA_TTABLE) {
    lua_pushcfunction(L, cached_lua_searcher);
    lua_rawseti(L, -2, 2);
  }
  lua_pop(L, 2);
}
