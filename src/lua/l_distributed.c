/* core.dist: process-group setup for lua/ddplua/distributed.lua.
 *
 * distributed.lua reads the options and the launcher's environment and
 * calls core.dist._init with plain values; this file connects to (or
 * serves) the store, works out which ranks share a node, creates the group
 * and keeps the Lua-visible group objects. Collectives are in
 * l_distributed_coll.c, spawn in l_distributed_spawn.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "distributed/auto_seat.h"
#include "lua/l_distributed.h"

ldist_state lt_dist;

/* ---- group objects ---- */

static lgroup *group_new(dp_pg *pg, const int *ranks, int n, bool member) {
  lgroup *g = dp_xcalloc(1, sizeof *g);
  g->pg = pg;
  g->ranks = dp_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  memcpy(g->ranks, ranks, sizeof(int) * (size_t)n);
  g->n = n;
  g->member = member;
  g->refs = 1; /* the list of live groups */
  g->next = lt_dist.groups;
  lt_dist.groups = g;
  return g;
}

static void group_unref(lgroup *g) {
  if (--g->refs > 0) return;
  free(g->ranks);
  free(g);
}

/* Destroys g's process group and takes it off the live list. C code may
 * still hold the group (a DDP reducer on the default group holds no Lua
 * reference): it is then shut down, failing every later call, and freed
 * when that code lets go (dp_pg_retire). */
void lt_dist_group_destroy(lgroup *g) {
  if (g->destroyed) return;
  if (g->pg) dp_pg_retire(g->pg);
  g->pg = NULL;
  g->destroyed = true;
  for (lgroup **pp = &lt_dist.groups; *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      break;
    }
  group_unref(g);
}

static void push_group(lua_State *L, lgroup *g) {
  lgroup **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = g;
  g->refs++;
  luaL_setmetatable(L, DP_GROUP_MT);
}

static lgroup *check_group_obj(lua_State *L, int idx) { return *(lgroup **)luaL_checkudata(L, idx, DP_GROUP_MT); }

static void list_ranks(const lgroup *g, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < g->n && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? ", " : "", g->ranks[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

static lgroup *usable(lua_State *L, lgroup *g, const char *what) {
  if (g && g->destroyed) luaL_error(L, "%s: the process group was destroyed", what);
  if (!g) luaL_error(L, "%s: the default process group is not initialized; call dist.init_process_group() first", what);
  if (!g->member) {
    char rs[256];
    list_ranks(g, rs, sizeof rs);
    luaL_error(L, "%s: rank %d is not a member of the group of ranks %s", what,
               lt_dist.world ? lt_dist.world->pg->global_rank : -1, rs);
  }
  return g;
}

lgroup *lt_dist_group_opt(lua_State *L, int idx, const char *what) {
  lgroup *g = lt_dist.world;
  if (lua_istable(L, idx)) {
    lua_getfield(L, idx, "group");
    if (!lua_isnil(L, -1)) g = check_group_obj(L, lua_gettop(L));
    lua_pop(L, 1);
  } else if (luaL_testudata(L, idx, DP_GROUP_MT)) {
    g = check_group_obj(L, idx);
  }
  return usable(L, g, what);
}

struct dp_pg *lt_check_pg(lua_State *L, int idx) {
  lgroup *g = lua_isnoneornil(L, idx) ? lt_dist.world : check_group_obj(L, idx);
  return usable(L, g, "process group")->pg;
}

int lt_dist_group_rank(lua_State *L, lgroup *g, lua_Integer r, const char *what) {
  int world = lt_dist.world ? lt_dist.world->n : 0;
  if (r < 0 || r >= world) return luaL_error(L, "%s %I is out of range: ranks are 0..%d", what, r, world - 1);
  for (int i = 0; i < g->n; i++)
    if (g->ranks[i] == r) return i;
  char rs[256];
  list_ranks(g, rs, sizeof rs);
  return luaL_error(L, "%s %I is not in the group of ranks %s", what, r, rs);
}

/* ---- init / destroy ---- */

/* An int option; a value beyond int's range is an error (a cast would make
 * world_size 2^32 + 1 a world of 1 and master_port 2^32 + p port p). */
static int get_int_field(lua_State *L, int t, const char *k, int dflt) {
  lua_getfield(L, t, k);
  lua_Integer v = lua_isnil(L, -1) ? dflt : luaL_checkinteger(L, -1);
  if (v < INT_MIN || v > INT_MAX)
    luaL_error(L, "init_process_group: %s = %I is out of range (expected at most %d)", k, v, INT_MAX);
  lua_pop(L, 1);
  return (int)v;
}

static const char *get_str_field(lua_State *L, int t, const char *k) {
  lua_getfield(L, t, k);
  const char *v = lua_tostring(L, -1); /* stays alive in the table */
  lua_pop(L, 1);
  return v;
}

static void close_store(void) {
  if (lt_dist.store) dp_store_close(lt_dist.store);
  if (lt_dist.server) dp_store_server_stop(lt_dist.server);
  lt_dist.store = NULL;
  lt_dist.server = NULL;
}

/* Which ranks share this host: node_rank by first appearance, local rank
 * and count among the ranks of this host. */
static int exchange_hosts(int rank, int size, int timeout_ms) {
  char host[256] = "", key[96];
  gethostname(host, sizeof host - 1);
  snprintf(key, sizeof key, "%s/host/%d", lt_dist.prefix, rank);
  if (dp_store_set(lt_dist.store, key, host, strlen(host))) return -1;
  char **hosts = dp_xcalloc((size_t)size, sizeof(char *));
  int rc = 0;
  for (int r = 0; r < size && !rc; r++) {
    size_t len;
    snprintf(key, sizeof key, "%s/host/%d", lt_dist.prefix, r);
    if (dp_store_get(lt_dist.store, key, (void **)&hosts[r], &len, timeout_ms)) {
      dp_pg_blame(r);
      rc = dp_error("init_process_group: rank %d of %d never joined within %.1f s", r, size, timeout_ms / 1000.0);
    }
  }
  if (!rc) {
    int nodes = 0;
    lt_dist.local_rank = lt_dist.local_size = 0;
    for (int r = 0; r < size; r++) {
      int first = 0;
      while (strcmp(hosts[first], hosts[r]) != 0) first++;
      if (first == r) nodes++;
      if (strcmp(hosts[r], hosts[rank]) == 0) {
        if (r < rank) lt_dist.local_rank++;
        lt_dist.local_size++;
      }
      if (r == rank) lt_dist.node_rank = nodes - 1;
    }
    lt_dist.nnodes = nodes;
  }
  for (int r = 0; r < size; r++) free(hosts[r]);
  free(hosts);
  return rc;
}

/* backend "auto": every rank says whether it could use nccl (auto_nccl,
 * decided in lua/ddplua/distributed.lua from its own node) and which GPU it
 * would take, its seat (distributed/auto_seat.h). The group is nccl only if
 * all of them can and no two seats are the same, so that nodes that differ
 * still agree and two "nodes" on one machine do not both take its GPU 0.
 * A clash is named in *clash. */
static int agree_on_auto(int rank, int size, bool mine, int timeout_ms, bool *all, char *clash, size_t clash_n) {
  char key[96], vote[192] = "0";
  if (mine) {
    vote[0] = '1';
    dp_auto_seat(lt_dist.local_rank, vote + 1, sizeof vote - 1);
  }
  snprintf(key, sizeof key, "%s/auto/%d", lt_dist.prefix, rank);
  if (dp_store_set(lt_dist.store, key, vote, strlen(vote))) return -1;
  *all = true;
  clash[0] = 0;
  char **seats = dp_xmalloc(sizeof(char *) * (size_t)size);
  int rc = 0;
  for (int r = 0; r < size; r++) {
    void *v = NULL;
    size_t len;
    snprintf(key, sizeof key, "%s/auto/%d", lt_dist.prefix, r);
    seats[r] = NULL;
    if (rc || dp_store_get(lt_dist.store, key, &v, &len, timeout_ms)) {
      if (!rc)
        rc = dp_error("init_process_group: rank %d of %d never joined within %.1f s", r, size, timeout_ms / 1000.0);
      continue;
    }
    if (len < 1 || *(char *)v != '1') *all = false;
    seats[r] = dp_xmalloc(len + 1);
    memcpy(seats[r], v, len);
    seats[r][len] = 0;
    free(v);
  }
  if (!rc && *all) { /* every vote is "1<seat>" */
    const char **after = dp_xmalloc(sizeof(char *) * (size_t)size);
    for (int r = 0; r < size; r++) after[r] = seats[r] + 1;
    if (dp_auto_seats_clash(after, size, clash, clash_n)) *all = false;
    free(after);
  }
  for (int r = 0; r < size; r++) free(seats[r]);
  free(seats);
  return rc;
}

/* core.dist._auto_seat(local_rank): the seat this process would vote with (for tests). */
static int l_auto_seat(lua_State *L) {
  char buf[160];
  dp_auto_seat((int)luaL_checkinteger(L, 1), buf, sizeof buf);
  lua_pushstring(L, buf);
  return 1;
}

/* core.dist._init{backend=, rank=, world_size=, master_addr=, master_port=,
 * token=, serve=, bind=, timeout=, node_rank=, local_rank=, local_size=,
 * nnodes=, debug=, auto_nccl=} (backend "auto": see agree_on_auto); returns
 * nothing, or under "auto" the line saying why two ranks' shared GPU made
 * it cpu */
static int l_init(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  char clash[320] = "";
  if (lt_dist.world)
    return luaL_error(L, "init_process_group: the default process group is already initialized (call "
                         "dist.destroy_process_group() first)");
  int rank = get_int_field(L, 1, "rank", -1), size = get_int_field(L, 1, "world_size", -1);
  int port = get_int_field(L, 1, "master_port", -1);
  lua_getfield(L, 1, "timeout");
  double timeout_s = lua_isnil(L, -1) ? 300 : luaL_checknumber(L, -1);
  lua_pop(L, 1);
  if (!(timeout_s > 0))
    return luaL_error(L, "init_process_group: timeout must be a positive number of seconds, got %f", timeout_s);
  int timeout_ms = timeout_s * 1000 >= INT_MAX ? INT_MAX : (int)(timeout_s * 1000);
  const char *addr = get_str_field(L, 1, "master_addr"), *token = get_str_field(L, 1, "token");
  const char *bind = get_str_field(L, 1, "bind"), *backend = get_str_field(L, 1, "backend");
  if (!backend) backend = "cpu";
  lua_getfield(L, 1, "serve");
  bool serve = lua_toboolean(L, -1);
  lua_getfield(L, 1, "debug");
  bool debug = lua_toboolean(L, -1);
  lua_pop(L, 2);
  if (size < 1 || rank < 0 || rank >= size)
    return luaL_error(L, "init_process_group: rank %d is out of range for world_size %d (expected 0..%d)", rank, size,
                      size - 1);
  if (!addr || port < 0 || port > 65535 || !token) return luaL_error(L, "init_process_group: incomplete rendezvous");
  if (serve) {
    int got;
    lt_dist.server = dp_store_server_start(bind, port, token, &got);
    if (!lt_dist.server) return luaL_error(L, "init_process_group: %s", dp_errmsg());
  }
  if (!lt_dist.store) lt_dist.store = dp_store_connect(addr, port, token, timeout_ms); /* kept under --watch */
  if (!lt_dist.store) {
    close_store();
    return luaL_error(L, "init_process_group: rank %d: %s", rank, dp_errmsg());
  }
  if (lt_dist.watch) {
    int adopted = lt_dist_watch_adopt(rank, size, backend, debug, timeout_ms);
    if (adopted < 0) return lt_error(L);
    if (adopted) return 0;
  }
  /* a restarted job (--max_restarts) must not meet the keys its last
   * generation left in the host's store */
  const char *restart = getenv("DDPLUA_RESTART_COUNT");
  if (restart && atoi(restart) > 0)
    snprintf(lt_dist.prefix, sizeof lt_dist.prefix, "r%d.pg%d", atoi(restart), ++lt_dist.generation);
  else snprintf(lt_dist.prefix, sizeof lt_dist.prefix, "pg%d", ++lt_dist.generation);
  lt_dist.node_rank = get_int_field(L, 1, "node_rank", -1);
  lt_dist.local_rank = get_int_field(L, 1, "local_rank", -1);
  lt_dist.local_size = get_int_field(L, 1, "local_size", -1);
  lt_dist.nnodes = get_int_field(L, 1, "nnodes", -1);
  if ((lt_dist.node_rank < 0 || lt_dist.local_rank < 0 || lt_dist.local_size < 1) &&
      exchange_hosts(rank, size, timeout_ms)) {
    close_store();
    return lt_error(L);
  }
  if (strcmp(backend, "auto") == 0) {
    lua_getfield(L, 1, "auto_nccl");
    bool mine = lua_toboolean(L, -1), all = false;
    lua_pop(L, 1);
    if (agree_on_auto(rank, size, mine, timeout_ms, &all, clash, sizeof clash)) {
      close_store();
      return lt_error(L);
    }
    backend = all ? "nccl" : "cpu";
  }
  dp_pg_init init = {.store = lt_dist.store,
                     .rank = rank,
                     .size = size,
                     .local_rank = lt_dist.local_rank,
                     .local_size = lt_dist.local_size,
                     .node_rank = lt_dist.node_rank,
                     .nnodes = lt_dist.nnodes,
                     .timeout_ms = timeout_ms,
                     .debug = debug,
                     .job_token = token,
                     .prefix = lt_dist.prefix};
  dp_pg *pg = strcmp(backend, "nccl") == 0 ? dp_pg_nccl_new(&init) : dp_pg_cpu_new(&init);
  if (!pg) {
    close_store();
    return lt_error(L);
  }
  int *ranks = dp_xmalloc(sizeof(int) * (size_t)size);
  for (int r = 0; r < size; r++) ranks[r] = r;
  lt_dist.world = group_new(pg, ranks, size, true);
  lt_dist.world->is_default = true;
  free(ranks);
  if (!clash[0]) return 0;
  lua_pushstring(L, clash); /* why auto took the cpu group (distributed.lua prints it) */
  return 1;
}

/* Every rank says goodbye to this generation's keys; the last one deletes
 * them all (every rank is done with them), so a store that outlives many
 * init/destroy cycles (the host's) holds one generation at a time. Rank 0
 * serving the store itself keeps it up until every rank has said goodbye
 * (bounded), so a slower rank's last store use does not fail. */
void lt_dist_goodbye(const lgroup *g) {
  if (!lt_dist.store || !g || !g->pg) return;
  char key[64], prefix[48];
  snprintf(key, sizeof key, "%s/bye", lt_dist.prefix);
  snprintf(prefix, sizeof prefix, "%s/", lt_dist.prefix);
  int64_t n = 0;
  int world = g->n;
  if (dp_store_add(lt_dist.store, key, 1, &n)) return;
  if (n >= world) {
    dp_store_delete_prefix(lt_dist.store, prefix, NULL);
    return;
  }
  if (!lt_dist.server) return;
  int timeout_ms = g->pg->timeout_ms < 10000 ? g->pg->timeout_ms : 10000;
  const char *keys[] = {key};
  for (int waited = 0, here = 1; here && waited < timeout_ms; waited += 5) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    if (dp_store_check(lt_dist.store, keys, 1, &here)) return; /* gone once the last one left */
  }
}

static void destroy_all(void) {
  lt_dist_goodbye(lt_dist.world);
  while (lt_dist.groups) lt_dist_group_destroy(lt_dist.groups);
  lt_dist.world = NULL;
  close_store();
}

/* destroy_process_group([group]) */
static int l_destroy(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) {
    lgroup *g = check_group_obj(L, 1);
    if (!g->is_default) {
      lt_dist_group_destroy(g);
      return 0;
    }
  }
  if (lt_dist.watch) { /* --watch: kept for the next run's init_process_group (l_distributed_watch.c) */
    lt_dist_watch_stash();
    return 0;
  }
  destroy_all();
  return 0;
}

void lt_dist_forget(void) {
  /* the parent's groups, threads and server are not ours: drop the
   * pointers (the mappings go with the process) */
  memset(&lt_dist, 0, sizeof lt_dist);
}

/* new_group(ranks) -> group object (every rank calls it) */
static int l_new_group(lua_State *L) {
  lgroup *w = usable(L, lt_dist.world, "new_group");
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = lt_list_len(L, 1, "new_group: ranks");
  if (n < 1) return luaL_error(L, "new_group: the list of ranks is empty");
  int *ranks = lua_newuserdatauv(L, sizeof(int) * (size_t)n, 0);
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    int ok;
    lua_Integer r = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok) return luaL_error(L, "new_group: ranks[%d] is not an integer rank", i + 1);
    if (r < 0 || r >= w->n) return luaL_error(L, "new_group: rank %I is out of range: ranks are 0..%d", r, w->n - 1);
    ranks[i] = (int)r;
  }
  /* ascending, as PyTorch sorts them */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && ranks[j] < ranks[j - 1]; j--) {
      int t = ranks[j];
      ranks[j] = ranks[j - 1];
      ranks[j - 1] = t;
    }
  for (int i = 1; i < n; i++)
    if (ranks[i] == ranks[i - 1]) return luaL_error(L, "new_group: rank %d is listed twice", ranks[i]);
  dp_pg *sub = NULL;
  if (w->pg->ops->new_group(w->pg, ranks, n, &sub)) return lt_error(L);
  lgroup *g = group_new(sub, ranks, n, sub != NULL);
  push_group(L, g);
  return 1;
}

/* ---- queries ---- */

static int l_is_initialized(lua_State *L) {
  lua_pushboolean(L, lt_dist.world != NULL);
  return 1;
}

static lgroup *query_group(lua_State *L, const char *what) {
  if (lua_isnoneornil(L, 1)) {
    if (!lt_dist.world)
      luaL_error(L, "%s: the default process group is not initialized; call dist.init_process_group() first", what);
    return lt_dist.world;
  }
  return check_group_obj(L, 1);
}

/* get_rank([group]): rank within the group, -1 if not a member */
static int l_get_rank(lua_State *L) {
  lgroup *g = query_group(L, "get_rank");
  lua_pushinteger(L, g->member && g->pg ? g->pg->rank : -1);
  return 1;
}

static int l_get_world_size(lua_State *L) {
  lgroup *g = query_group(L, "get_world_size");
  lua_pushinteger(L, g->member ? g->n : -1);
  return 1;
}

static int l_get_local_rank(lua_State *L) {
  query_group(L, "get_local_rank");
  lua_pushinteger(L, lt_dist.local_rank);
  return 1;
}

static int l_get_local_world_size(lua_State *L) {
  query_group(L, "get_local_world_size");
  lua_pushinteger(L, lt_dist.local_size);
  return 1;
}

static int l_get_backend(lua_State *L) {
  lgroup *g = query_group(L, "get_backend");
  lua_pushstring(L, g->pg ? g->pg->ops->name : "cpu");
  return 1;
}

/* ---- group object methods ---- */

static int g_rank(lua_State *L) {
  lgroup *g = check_group_obj(L, 1);
  lua_pushinteger(L, g->member && g->pg ? g->pg->rank : -1);
  return 1;
}

static int g_size(lua_State *L) {
  lua_pushinteger(L, check_group_obj(L, 1)->n);
  return 1;
}

static int g_ranks(lua_State *L) {
  lgroup *g = check_group_obj(L, 1);
  lua_createtable(L, g->n, 0);
  for (int i = 0; i < g->n; i++) {
    lua_pushinteger(L, g->ranks[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int g_is_member(lua_State *L) {
  lua_pushboolean(L, check_group_obj(L, 1)->member);
  return 1;
}

static int g_tostring(lua_State *L) {
  lgroup *g = check_group_obj(L, 1);
  char rs[256];
  list_ranks(g, rs, sizeof rs);
  lua_pushfstring(L, "ProcessGroup(ranks=%s%s)", rs, g->destroyed ? ", destroyed" : g->member ? "" : ", not a member");
  return 1;
}

static int g_gc(lua_State *L) {
  lgroup **box = luaL_checkudata(L, 1, DP_GROUP_MT);
  if (*box) group_unref(*box);
  *box = NULL;
  return 0;
}

/* nccl_available() -> true, or false and why (no CUDA, no NCCL in the
 * plugin, no GPU visible). */
static int l_nccl_available(lua_State *L) {
  const dp_backend *b = dp_backend_require(DP_CUDA);
  const char *why = !b                      ? dp_errmsg()
                    : !b->pg_new            ? "the CUDA plugin was built without NCCL"
                    : b->device_count() < 1 ? "no GPU is visible"
                                            : NULL;
  lua_pushboolean(L, why == NULL);
  if (!why) return 1;
  lua_pushstring(L, why);
  return 2;
}

/* The default group as an object (for `{group = dist.group.WORLD}`). */
static int l_world(lua_State *L) {
  if (!lt_dist.world) return 0;
  push_group(L, lt_dist.world);
  return 1;
}

void lt_open_dist(lua_State *L, int module) {
  luaL_newmetatable(L, DP_GROUP_MT);
  static const luaL_Reg gm[] = {
      {"rank", g_rank}, {"size", g_size}, {"ranks", g_ranks}, {"is_member", g_is_member}, {NULL, NULL}};
  lua_newtable(L);
  luaL_setfuncs(L, gm, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, g_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, g_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

  static const luaL_Reg fs[] = {{"_init", l_init},
                                {"destroy_process_group", l_destroy},
                                {"new_group", l_new_group},
                                {"is_initialized", l_is_initialized},
                                {"get_rank", l_get_rank},
                                {"get_world_size", l_get_world_size},
                                {"get_local_rank", l_get_local_rank},
                                {"get_local_world_size", l_get_local_world_size},
                                {"get_backend", l_get_backend},
                                {"_world", l_world},
                                {"nccl_available", l_nccl_available},
                                {"_auto_seat", l_auto_seat},
                                {NULL, NULL}};
  lua_newtable(L);
  int dist = lua_gettop(L);
  luaL_setfuncs(L, fs, 0);
  lt_open_dist_coll(L, dist);
  lt_open_dist_spawn(L, dist);
  lua_setfield(L, module, "dist");
}
