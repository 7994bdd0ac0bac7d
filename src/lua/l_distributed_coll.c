/* Collectives for Lua: argument checks that name the argument, the rank
 * and what was expected; in place on the user's tensors (a non-contiguous
 * tensor goes through a contiguous copy that is copied back, at wait() for
 * async ops); global ranks translated to group ranks; work handles. */
#include <stdlib.h>
#include <string.h>

#include "lua/l_distributed.h"
#include "ops/ops.h"

/* ---- copy-backs and work handles ---- */

typedef struct {
  dp_tensor *dst, *src;
} copyback;

typedef struct {
  copyback *v;
  int n, cap;
} copybacks;

static void cb_add(copybacks *c, dp_tensor *dst, dp_tensor *src) {
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 4;
    c->v = dp_xrealloc(c->v, sizeof(copyback) * (size_t)c->cap);
  }
  dp_retain(dst);
  dp_retain(src);
  c->v[c->n++] = (copyback){dst, src};
}

static void cb_clear(copybacks *c) {
  for (int i = 0; i < c->n; i++) {
    dp_release(c->v[i].dst);
    dp_release(c->v[i].src);
  }
  free(c->v);
  *c = (copybacks){0};
}

static int cb_run(copybacks *c) {
  int rc = 0;
  for (int i = 0; i < c->n && !rc; i++) rc = dp_copy_(c->v[i].dst, c->v[i].src);
  cb_clear(c);
  return rc;
}

typedef struct {
  dp_work *w;
  copybacks cb;
  bool waited;
} lwork;

static int w_wait(lua_State *L) {
  lwork *lw = luaL_checkudata(L, 1, DP_WORK_MT);
  if (!lw->waited) {
    lw->waited = true;
    int rc = dp_work_wait(lw->w);
    if (!rc) rc = cb_run(&lw->cb);
    else cb_clear(&lw->cb);
    if (rc) return lt_error(L);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int w_is_completed(lua_State *L) {
  lwork *lw = luaL_checkudata(L, 1, DP_WORK_MT);
  lua_pushboolean(L, lw->waited || dp_work_is_completed(lw->w));
  return 1;
}

static int w_gc(lua_State *L) {
  lwork *lw = luaL_checkudata(L, 1, DP_WORK_MT);
  cb_clear(&lw->cb);
  dp_work_release(lw->w);
  lw->w = NULL;
  return 0;
}

/* Runs or returns the op: rc from the pg call; on async pushes a work. */
static int finish(lua_State *L, int rc, dp_work *w, copybacks *cb) {
  if (rc) {
    cb_clear(cb);
    return lt_error(L);
  }
  if (!w) {
    if (cb_run(cb)) return lt_error(L);
    return 0;
  }
  lwork *lw = lua_newuserdatauv(L, sizeof *lw, 0);
  lw->w = w;
  lw->cb = *cb;
  lw->waited = false;
  luaL_setmetatable(L, DP_WORK_MT);
  return 1;
}

/* ---- arguments ---- */

typedef struct {
  lgroup *g;
  bool async;
} copts;

static void read_opts(lua_State *L, int idx, const char *what, copts *o, bool async_ok) {
  static const char *const keys[] = {"async", "async_op", "group", NULL};
  o->async = false;
  if (lua_istable(L, idx)) {
    lt_check_keys(L, idx, what, keys);
    lua_getfield(L, idx, "async");
    lua_getfield(L, idx, "async_op");
    o->async = lua_toboolean(L, -1) || lua_toboolean(L, -2);
    lua_pop(L, 2);
    if (o->async && !async_ok) luaL_error(L, "%s: async is not supported for this operation", what);
  } else if (!lua_isnoneornil(L, idx) && !luaL_testudata(L, idx, DP_GROUP_MT)) {
    luaL_error(L, "%s: expected an options table ({async=, group=}) as argument %d, got %s", what, idx,
               luaL_typename(L, idx));
  }
  o->g = lt_dist_group_opt(L, idx, what);
}

static dp_tensor *check_tensor(lua_State *L, int idx, const char *what) {
  dp_tensor *t = lt_test(L, idx);
  if (!t) luaL_error(L, "%s: expected a tensor as argument %d, got %s", what, idx, luaL_typename(L, idx));
  return t;
}

static dp_redop check_redop(lua_State *L, int idx, const char *what) {
  static const char *const names[] = {"sum", "avg", "max", "min", "prod"};
  if (lua_isnoneornil(L, idx)) return DP_RED_SUM;
  const char *s = lua_tostring(L, idx);
  if (!s || lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s: expected a reduction name (sum, avg, max, min or prod) as argument %d, got %s", what, idx,
               luaL_typename(L, idx));
  for (int i = 0; i < 5; i++)
    if (strcasecmp(s, names[i]) == 0) return (dp_redop)i;
  luaL_error(L, "%s: unknown reduction '%s' (expected sum, avg, max, min or prod)", what, s);
  return DP_RED_SUM;
}

static int check_rank_arg(lua_State *L, int idx, lgroup *g, const char *what) {
  int ok;
  lua_Integer r = lua_tointegerx(L, idx, &ok);
  if (!ok) luaL_error(L, "%s: expected an integer rank as argument %d, got %s", what, idx, luaL_typename(L, idx));
  return lt_dist_group_rank(L, g, r, what);
}

/* t itself if contiguous; else a contiguous copy (copied back to t after
 * the op when write_back). Returns a new reference. */
static dp_tensor *dense(lua_State *L, dp_tensor *t, bool write_back, copybacks *cb) {
  if (dp_is_contiguous(t)) {
    dp_retain(t);
    return t;
  }
  dp_tensor *c = dp_empty(t->dtype, t->ndim, t->shape, dp_dev(t));
  if (!c || dp_copy_(c, t)) {
    dp_release(c);
    cb_clear(cb);
    lt_error(L);
  }
  if (write_back) cb_add(cb, t, c);
  return c;
}

/* Op with one tensor and an optional reduction + group rank. Arguments:
 * all_reduce(t, op, opts), broadcast(t, src, opts), reduce(t, dst, op, opts). */
static int l_all_reduce(lua_State *L) {
  dp_tensor *t = check_tensor(L, 1, "all_reduce");
  int oi = lua_istable(L, 2) ? 2 : 3;
  dp_redop op = oi == 3 ? check_redop(L, 2, "all_reduce") : DP_RED_SUM;
  copts o;
  read_opts(L, oi, "all_reduce", &o, true);
  copybacks cb = {0};
  dp_tensor *c = dense(L, t, true, &cb);
  dp_work *w = NULL;
  int rc = o.g->pg->ops->all_reduce(o.g->pg, c, op, o.async ? &w : NULL);
  dp_release(c);
  return finish(L, rc, w, &cb);
}

static int l_broadcast(lua_State *L) {
  dp_tensor *t = check_tensor(L, 1, "broadcast");
  copts o;
  read_opts(L, 3, "broadcast", &o, true);
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "broadcast: the source rank (argument 2) is missing");
  int src = check_rank_arg(L, 2, o.g, "broadcast: src");
  copybacks cb = {0};
  dp_tensor *c = dense(L, t, true, &cb);
  dp_work *w = NULL;
  int rc = o.g->pg->ops->broadcast(o.g->pg, c, src, o.async ? &w : NULL);
  dp_release(c);
  return finish(L, rc, w, &cb);
}

static int l_reduce(lua_State *L) {
  dp_tensor *t = check_tensor(L, 1, "reduce");
  int oi = lua_istable(L, 3) ? 3 : 4;
  dp_redop op = oi == 4 ? check_redop(L, 3, "reduce") : DP_RED_SUM;
  copts o;
  read_opts(L, oi, "reduce", &o, true);
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "reduce: the destination rank (argument 2) is missing");
  int dst = check_rank_arg(L, 2, o.g, "reduce: dst");
  copybacks cb = {0};
  dp_tensor *c = dense(L, t, true, &cb);
  dp_work *w = NULL;
  int rc = o.g->pg->ops->reduce(o.g->pg, c, dst, op, o.async ? &w : NULL);
  dp_release(c);
  return finish(L, rc, w, &cb);
}

/* A flat buffer of n tensors shaped like `like`, and views of its blocks. */
static dp_tensor *flat_for(lua_State *L, const dp_tensor *like, int n) {
  int64_t total = dp_numel(like) * n;
  dp_tensor *f = dp_empty(like->dtype, 1, &total, dp_dev(like));
  if (!f) lt_error(L);
  return f;
}

static dp_tensor *block_view(lua_State *L, dp_tensor *flat, int i, int64_t per, const dp_tensor *shape_of) {
  dp_tensor *v =
      dp_from_storage(flat->storage, flat->dtype, shape_of->ndim, shape_of->shape, NULL, flat->offset + i * per);
  if (!v) lt_error(L);
  return v;
}

/* The i-th entry of a list of tensors, checked against `like`. */
static dp_tensor *list_entry(lua_State *L, int list, int i, const dp_tensor *like, const char *what, const char *name) {
  lua_geti(L, list, i + 1);
  dp_tensor *e = lt_test(L, -1);
  if (!e) luaL_error(L, "%s: %s[%d] is a %s, expected a tensor", what, name, i + 1, luaL_typename(L, -1));
  lua_pop(L, 1); /* the list keeps it alive */
  if (e->dtype != like->dtype || dp_numel(e) != dp_numel(like)) {
    char a[64], b[64];
    luaL_error(L, "%s: %s[%d] is %s %s, expected %s %s like the tensor", what, name, i + 1, dp_dtype_name(e->dtype),
               dp_shape_str(e, a, sizeof a), dp_dtype_name(like->dtype), dp_shape_str(like, b, sizeof b));
  }
  return e;
}

/* all_gather(list_or_out, t, opts): a list of world_size tensors (an empty
 * table is filled with new ones) or one tensor of world_size x numel(t). */
static int l_all_gather(lua_State *L) {
  dp_tensor *t = check_tensor(L, 2, "all_gather");
  copts o;
  read_opts(L, 3, "all_gather", &o, true);
  int n = o.g->n;
  copybacks cb = {0};
  dp_tensor *out = lt_test(L, 1), *flat;
  if (out) {
    if (out->dtype != t->dtype)
      return luaL_error(L, "all_gather: the output is %s but the input is %s", dp_dtype_name(out->dtype),
                        dp_dtype_name(t->dtype));
    if (dp_numel(out) != dp_numel(t) * n)
      return luaL_error(L, "all_gather: the output has %d elements, expected world size %d x %d", (int)dp_numel(out), n,
                        (int)dp_numel(t));
    flat = dense(L, out, true, &cb);
  } else if (lua_istable(L, 1)) {
    int len = (int)luaL_len(L, 1);
    if (len != 0 && len != n)
      return luaL_error(L, "all_gather: the output list has %d tensors, expected %d (one per rank) or none", len, n);
    flat = flat_for(L, t, n);
    for (int i = 0; i < n; i++) {
      dp_tensor *v = block_view(L, flat, i, dp_numel(t), t);
      if (len == 0) {
        lt_push(L, v); /* entries are views of the gathered buffer */
        lua_rawseti(L, 1, i + 1);
      } else {
        cb_add(&cb, list_entry(L, 1, i, t, "all_gather", "output"), v);
        dp_release(v);
      }
    }
  } else {
    return luaL_error(L, "all_gather: expected a list of tensors or an output tensor as argument 1, got %s",
                      luaL_typename(L, 1));
  }
  dp_tensor *in = dense(L, t, false, &cb);
  dp_work *w = NULL;
  int rc = o.g->pg->ops->all_gather(o.g->pg, flat, in, o.async ? &w : NULL);
  dp_release(in);
  dp_release(flat);
  return finish(L, rc, w, &cb);
}

/* reduce_scatter(out, list_or_in, op, opts) */
static int l_reduce_scatter(lua_State *L) {
  dp_tensor *out = check_tensor(L, 1, "reduce_scatter");
  int oi = lua_istable(L, 3) ? 3 : 4;
  dp_redop op = oi == 4 ? check_redop(L, 3, "reduce_scatter") : DP_RED_SUM;
  copts o;
  read_opts(L, oi, "reduce_scatter", &o, true);
  int n = o.g->n;
  copybacks cb = {0};
  dp_tensor *in = lt_test(L, 2), *flat;
  if (in) {
    if (in->dtype != out->dtype)
      return luaL_error(L, "reduce_scatter: the input is %s but the output is %s", dp_dtype_name(in->dtype),
                        dp_dtype_name(out->dtype));
    if (dp_numel(in) != dp_numel(out) * n)
      return luaL_error(L, "reduce_scatter: the input has %d elements, expected world size %d x %d", (int)dp_numel(in),
                        n, (int)dp_numel(out));
    flat = dense(L, in, false, &cb);
  } else if (lua_istable(L, 2)) {
    int len = (int)luaL_len(L, 2);
    if (len != n)
      return luaL_error(L, "reduce_scatter: the input list has %d tensors, expected %d (one per rank)", len, n);
    flat = flat_for(L, out, n);
    for (int i = 0; i < n; i++) {
      dp_tensor *e = list_entry(L, 2, i, out, "reduce_scatter", "input");
      dp_tensor *v = block_view(L, flat, i, dp_numel(out), e);
      int rc = dp_copy_(v, e);
      dp_release(v);
      if (rc) {
        dp_release(flat);
        return lt_error(L);
      }
    }
  } else {
    return luaL_error(L, "reduce_scatter: expected a list of tensors or an input tensor as argument 2, got %s",
                      luaL_typename(L, 2));
  }
  dp_tensor *c = dense(L, out, true, &cb);
  dp_work *w = NULL;
  int rc = o.g->pg->ops->reduce_scatter(o.g->pg, c, flat, op, o.async ? &w : NULL);
  dp_release(c);
  dp_release(flat);
  return finish(L, rc, w, &cb);
}

static int l_barrier(lua_State *L) {
  copts o;
  read_opts(L, 1, "barrier", &o, false);
  if (o.g->pg->ops->barrier(o.g->pg)) return lt_error(L);
  return 0;
}

static int l_send(lua_State *L) {
  dp_tensor *t = check_tensor(L, 1, "send");
  copts o;
  read_opts(L, 3, "send", &o, false);
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "send: the destination rank (argument 2) is missing");
  int dst = check_rank_arg(L, 2, o.g, "send: dst");
  copybacks cb = {0};
  dp_tensor *c = dense(L, t, false, &cb);
  int rc = o.g->pg->ops->send(o.g->pg, c, dst);
  dp_release(c);
  return finish(L, rc, NULL, &cb);
}

/* recv(t, src, opts) -> src */
static int l_recv(lua_State *L) {
  dp_tensor *t = check_tensor(L, 1, "recv");
  copts o;
  read_opts(L, 3, "recv", &o, false);
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "recv: the source rank (argument 2) is missing");
  int src = check_rank_arg(L, 2, o.g, "recv: src");
  copybacks cb = {0};
  dp_tensor *c = dense(L, t, true, &cb);
  int rc = o.g->pg->ops->recv(o.g->pg, c, src);
  dp_release(c);
  finish(L, rc, NULL, &cb);
  lua_pushinteger(L, o.g->ranks[src]);
  return 1;
}

/* _alloc_shared(n, dtype) -> tensor in the group's shared pool, or nil
 * (bench and tests: DDP allocates its buckets the same way) */
static int l_alloc_shared(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  dp_dtype dt = lua_isnoneornil(L, 2) ? DP_F32 : lt_check_dtype(L, 2);
  copts o;
  read_opts(L, 3, "alloc_shared", &o, false);
  if (n < 0 || (uint64_t)n > ((uint64_t)1 << 48) / dp_dtype_size(dt))
    return luaL_error(L, "alloc_shared: size %I elements of %s is out of range (0 to 2^48 bytes)", n,
                      dp_dtype_name(dt));
  dp_pg *pg = o.g->pg;
  dp_storage *st = pg->ops->alloc_shared ? pg->ops->alloc_shared(pg, (size_t)n * dp_dtype_size(dt)) : NULL;
  if (!st) return 0;
  int64_t shape = n;
  dp_tensor *t = dp_from_storage(st, dt, 1, &shape, NULL, 0);
  dp_storage_release(st);
  return lt_push(L, t);
}

void lt_open_dist_coll(lua_State *L, int dist) {
  luaL_newmetatable(L, DP_WORK_MT);
  static const luaL_Reg wm[] = {{"wait", w_wait}, {"is_completed", w_is_completed}, {NULL, NULL}};
  lua_newtable(L);
  luaL_setfuncs(L, wm, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, w_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushstring(L, "Work");
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
  static const luaL_Reg fs[] = {{"all_reduce", l_all_reduce},
                                {"broadcast", l_broadcast},
                                {"reduce", l_reduce},
                                {"all_gather", l_all_gather},
                                {"reduce_scatter", l_reduce_scatter},
                                {"barrier", l_barrier},
                                {"send", l_send},
                                {"recv", l_recv},
                                {"_alloc_shared", l_alloc_shared},
                                {NULL, NULL}};
  lua_pushvalue(L, dist);
  luaL_setfuncs(L, fs, 0);
  lua_pop(L, 1);
}
