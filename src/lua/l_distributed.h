/* Shared state of the distributed bindings (l_distributed.c: init, groups,
 * queries; l_distributed_coll.c: collectives and work handles; l_distributed_spawn.c:
 * spawn). One process holds at most one default group. */
#ifndef DP_L_DIST_H
#define DP_L_DIST_H

#include <stdbool.h>

#include "distributed/pg.h"
#include "lua/l_util.h"

#define DP_GROUP_MT "ddplua.ProcessGroup"
#define DP_WORK_MT "ddplua.Work"

/* A group as Lua sees it. Members have pg; non-members of a new_group have
 * pg == NULL and member == false. Kept alive by the userdata that point at
 * it and by the list of live groups. */
typedef struct lgroup {
  dp_pg *pg;
  int *ranks; /* global ranks, ascending */
  int n;
  bool member, is_default, destroyed;
  int refs;
  struct lgroup *next;
} lgroup;

typedef struct {
  lgroup *world;  /* the default group, NULL before init */
  lgroup *groups; /* every live group, the default one included */
  dp_store *store;
  dp_store_server *server; /* when this process serves the store */
  int generation;          /* init_process_group calls so far: store key prefix */
  int local_rank, local_size, node_rank, nnodes;
  char prefix[32];
  /* `ddplua --watch` (l_distributed_watch.c): the default group of the
   * last run, hidden until the next init_process_group adopts it */
  bool watch, last_ok;
  int watch_run, watch_inits;
  lgroup *kept;
} ldist_state;

extern ldist_state lt_dist;

/* The group behind the `group` option at index idx (an options table with
 * a `group` field, or a group object, or nil for the default group). Raises
 * `what: ...` errors when nothing is initialised or this rank is not a
 * member. */
lgroup *lt_dist_group_opt(lua_State *L, int opts_idx, const char *what);
/* Group rank of global rank r in g, raising "what r is not in the group" /
 * "out of range" errors. */
int lt_dist_group_rank(lua_State *L, lgroup *g, lua_Integer r, const char *what);

void lt_open_dist_coll(lua_State *L, int dist);
void lt_open_dist_spawn(lua_State *L, int dist);
/* Called in a forked child: forget the parent's groups without touching
 * them (their threads do not exist here). */
void lt_dist_forget(void);
/* Destroys g's process group, taking it off the live list. */
void lt_dist_group_destroy(lgroup *g);
/* Every rank of g says goodbye to the keys under lt_dist.prefix; the last
 * one deletes them. */
void lt_dist_goodbye(const lgroup *g);
/* --watch (l_distributed_watch.c): destroy_process_group() of the default
 * group keeps it for the next run; init_process_group asks every rank
 * whether the kept group can serve again: 1 adopted (it is the default
 * group again), 0 create a new one (the kept one is gone), -1 + dp_error. */
void lt_dist_watch_stash(void);
int lt_dist_watch_adopt(int rank, int size, const char *backend, bool debug, int timeout_ms);

#endif
