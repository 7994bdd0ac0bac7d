/* Compiled Lua modules: the library's bytecode from the build, and the
 * bytecode a `ddplua --watch` worker compiled kept across its runs (host.h,
 * "chunk_cache.c").
 *
 * Parsing the library (84 files, 16k lines) took 19 ms of every process's
 * start and of every --watch rerun's 30 ms to its first line on the
 * 2026-12 VM; loading the same functions as bytecode 4 ms. This searcher
 * replaces package.searchers[2] (Lua files on package.path). It finds the
 * file as Lua's own searcher does, reads it and hashes its bytes (FNV-1a);
 * when an entry for that path has the same hash, it loads the entry's
 * bytecode (made by lua_dump / string.dump with debug information, so
 * tracebacks and line numbers are the source's), else it parses the file
 * as Lua does. So an edited file is parsed, never a stale entry loaded.
 *
 * Entries come from two places. The build writes build/bin/lua_bytecode.bin
 * next to the host (tools/lua_bytecode.lua); each process reads it once,
 * and uses it only if its checksum holds and every entry is in bounds
 * (a damaged or foreign file is ignored whole; Lua's own loader checks
 * that the bytecode is this Lua's). DDPLUA_LUA_BYTECODE=off reads none,
 * another value names the file to read. And a --watch worker keeps the
 * bytecode of what it parsed, for its next runs. */
#include <lauxlib.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  uint64_t h = 14695981039346656037ull; /* FNV-1a 64: offset basis, prime */
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

/* A new entry for path (no bytecode yet), or NULL when out of memory. */
static cached_chunk *append(const char *path) {
  if (n_chunks == cap_chunks) {
    int cap = cap_chunks ? 2 * cap_chunks : 128;
    cached_chunk *more = realloc(chunks, sizeof *chunks * (size_t)cap);
    if (!more) return NULL;
    chunks = more;
    cap_chunks = cap;
  }
  cached_chunk *c = &chunks[n_chunks++];
  *c = (cached_chunk){.path = dp_xstrdup(path)};
  return c;
}

/* Keeps the function on the top of the stack as path's bytecode. */
static void keep(lua_State *L, const char *path, uint64_t hash) {
  dump_buf b = {0};
  cached_chunk *c = find(path);
  if (lua_dump(L, dump_writer, &b, 0) != 0 || (!c && !(c = append(path)))) {
    free(b.p);
    return;
  }
  free(c->code);
  c->hash = hash;
  c->code = b.p;
  c->len = b.n;
}

static int64_t n_from_bytecode, n_parsed; /* this process's loads (the host module's chunk_stats) */
static int n_bundled;

static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The entries of a bytecode file (format: tools/lua_bytecode.lua), all or
 * none: 0, or -1 when the file is damaged (nothing added). */
static int add_bundle(const unsigned char *b, size_t len) {
  if (len < 20 || memcmp(b, "DDPLUABC", 8) != 0 || get_u64(b + 8) != fnv1a((const char *)b + 16, len - 16)) return -1;
  size_t at = 16, n = get_u32(b + at);
  at += 4;
  const size_t first = (size_t)n_chunks;
  for (size_t i = 0; i < n; i++) { /* check every bound before keeping anything */
    if (len - at < 4) return -1;
    size_t plen = get_u32(b + at);
    if (plen == 0 || plen > 4096 || len - at - 4 < plen + 12) return -1;
    size_t clen = get_u32(b + at + 4 + plen + 8);
    if (len - at - 4 - plen - 12 < clen) return -1;
    at += 4 + plen + 12 + clen;
  }
  if (at != len) return -1;
  at = 20;
  for (size_t i = 0; i < n; i++) {
    size_t plen = get_u32(b + at);
    char path[4097];
    memcpy(path, b + at + 4, plen);
    path[plen] = 0;
    uint64_t hash = get_u64(b + at + 4 + plen);
    size_t clen = get_u32(b + at + 4 + plen + 8);
    const unsigned char *code = b + at + 4 + plen + 12;
    at += 4 + plen + 12 + clen;
    if (find(path)) continue;
    char *copy = malloc(clen ? clen : 1);
    cached_chunk *c = copy ? append(path) : NULL;
    if (!c) {
      free(copy);
      break;
    }
    memcpy(copy, code, clen);
    c->hash = hash;
    c->code = copy;
    c->len = clen;
  }
  n_bundled = n_chunks - (int)first;
  return 0;
}

/* The build's bytecode file, once per process. */
static void read_bundle(void) {
  static bool done;
  if (done) return;
  done = true;
  const char *env = getenv("DDPLUA_LUA_BYTECODE");
  if (env && strcmp(env, "off") == 0) return;
  char path[PATH_MAX];
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
    ssize_t k = readlink("/proc/self/exe", path, sizeof path - 32);
    if (k <= 0) return;
    path[k] = 0;
    char *slash = strrchr(path, '/');
    if (!slash) return;
    strcpy(slash + 1, "lua_bytecode.bin");
  }
  size_t len = 0;
  char *b = read_all(path, &len);
  if (b) add_bundle((const unsigned char *)b, len);
  free(b);
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
  if (c && c->hash == hash) {
    if (luaL_loadbufferx(L, c->code, c->len, chunkname, "b") == LUA_OK) {
      n_from_bytecode++;
      lua_pushstring(L, path);
      return 2;
    }
    lua_pop(L, 1); /* bytecode this Lua refuses (another version's): its message goes, the file is parsed */
  }
  if (luaL_loadfilex(L, path, NULL) != LUA_OK)
    return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, path, lua_tostring(L, -1));
  n_parsed++;
  /* kept (a --watch worker) only if the file still holds the bytes hashed
   * above (not edited between the two reads) */
  if (lua_toboolean(L, lua_upvalueindex(1))) {
    size_t len2 = 0;
    char *again = readable ? read_all(path, &len2) : NULL;
    if (again && len2 == len && fnv1a(again, len2) == hash) keep(L, path, hash);
    free(again);
  }
  lua_pushstring(L, path);
  return 2;
}

void dp_host_cache_lua_chunks(lua_State *L, bool keep_parsed) {
  read_bundle();
  lua_getglobal(L, "package");
  if (lua_getfield(L, -1, "searchers") == LUA_TTABLE) {
    lua_pushboolean(L, keep_parsed);
    lua_pushcclosure(L, cached_lua_searcher, 1);
    lua_rawseti(L, -2, 2);
  }
  lua_pop(L, 2);
}

int dp_host_chunk_stats(lua_State *L) {
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, n_bundled);
  lua_setfield(L, -2, "bundled");
  lua_pushinteger(L, (lua_Integer)n_from_bytecode);
  lua_setfield(L, -2, "from_bytecode");
  lua_pushinteger(L, (lua_Integer)n_parsed);
  lua_setfield(L, -2, "parsed");
  return 1;
}
