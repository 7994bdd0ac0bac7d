/* The C side of ddp.autograd.Function (lua/ddplua/autograd_function.lua): a graph node whose backward calls back
 * into Lua. The engine runs inside a Lua call (t:backward, autograd.grad), which records its state here
 * (lt_engine_state); a node's backward calls the dispatcher function autograd_function.lua registered, in a protected
 * call, with the Function's id and the gradients of its outputs (zeros where none flowed, as PyTorch's
 * materialize_grads), and takes back one gradient (or nil) per input of the node. A node's Lua state (the Function's
 * ctx, its saved tensors) lives in a Lua table under the id; when the node's saved state goes (backward without
 * retain_graph, or the graph freed), the id is queued here and the Lua side drops it at its next call. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "autograd/autograd.h"
#include "lua/l_util.h"
#include "ops/ops.h"

#define FN_DISPATCH "ddplua.function_backward"

static lua_State *engine_L; /* the Lua state running the engine now, or NULL */

lua_State *lt_engine_state(lua_State *L) {
  lua_State *prev = engine_L;
  engine_L = L;
  return prev;
}

/* ids whose nodes let their state go (a node may be freed on DDP's communication thread) */
static pthread_mutex_t dead_mu = PTHREAD_MUTEX_INITIALIZER;
static lua_Integer *dead;
static size_t n_dead, cap_dead;

/* "<name>Backward" for a node's name, kept for the life of the process: a node's name outlives its ctx (the engine
 * names a node in errors after its state went); at most 1024 distinct names, then the generic one */
static const char *node_name(const char *name) {
  static char *names[1024];
  static int n_names;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  char buf[80];
  snprintf(buf, sizeof buf, "%.63sBackward", name);
  const char *r = "FunctionBackward";
  pthread_mutex_lock(&mu);
  int k = 0;
  while (k < n_names && strcmp(names[k], buf) != 0) k++;
  if (k < n_names) r = names[k];
  else if (n_names < 1024) r = names[n_names++] = dp_xstrdup(buf);
  pthread_mutex_unlock(&mu);
  return r;
}

typedef struct {
  lua_Integer id;
  const char *name;
  int n_out;
  int ndim[16];
  int64_t shape[16][DP_MAXDIM];
  dp_dtype dtype[16];
  dp_device dev[16];
} fn_ctx;

static void free_fn_ctx(void *p) {
  fn_ctx *c = p;
  pthread_mutex_lock(&dead_mu);
  if (n_dead == cap_dead) {
    cap_dead = cap_dead ? 2 * cap_dead : 64;
    dead = dp_xrealloc(dead, cap_dead * sizeof *dead);
  }
  dead[n_dead++] = c->id;
  pthread_mutex_unlock(&dead_mu);
  free(c);
}

/* in a protected call: dispatcher(id, g1, ..., gm) -> the table of gradients (arguments: the dispatcher, then the
 * light userdata of the gradients array, the node) */
static int call_backward_protected(lua_State *L) {
  dp_tensor **gs = lua_touserdata(L, 2);
  dp_node *n = lua_touserdata(L, 3);
  fn_ctx *c = n->ctx;
  lua_settop(L, 1);
  lua_pushinteger(L, c->id);
  for (int o = 0; o < c->n_out; o++) {
    lt_push(L, gs[o]);
    gs[o] = NULL; /* the box owns it now */
  }
  lua_call(L, 1 + c->n_out, 1);
  return 1;
}

static int fn_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  fn_ctx *c = n->ctx;
  if (!c) return dp_error("trying to backward through the graph a second time (pass retain_graph=true to the first)");
  lua_State *L = engine_L;
  if (!L) return dp_error("%s: a custom Function's backward runs only inside backward or autograd.grad", c->name);
  dp_tensor *gs[16] = {0};
  for (int o = 0; o < c->n_out; o++) {
    gs[o] = gout[o] ? (dp_retain(gout[o]), gout[o]) : dp_full(c->dtype[o], c->ndim[o], c->shape[o], 0.0, c->dev[o]);
    if (!gs[o]) {
      for (int q = 0; q < o; q++) dp_release(gs[q]);
      return -1;
    }
  }
  int top = lua_gettop(L), rc = 0;
  lua_pushcfunction(L, call_backward_protected);
  if (lua_getfield(L, LUA_REGISTRYINDEX, FN_DISPATCH) != LUA_TFUNCTION) {
    lua_settop(L, top);
    for (int o = 0; o < c->n_out; o++) dp_release(gs[o]);
    return dp_error("%s: the Lua side of autograd.Function is not loaded", c->name);
  }
  lua_pushlightuserdata(L, gs);
  lua_pushlightuserdata(L, n);
  if (lua_pcall(L, 3, 1, 0) != LUA_OK) {
    rc = dp_error("%s: %s", c->name, lua_tostring(L, -1) ? lua_tostring(L, -1) : "(an error object)");
  } else if (!lua_istable(L, -1)) {
    rc = dp_error("%s: the backward dispatch returned a %s", c->name, luaL_typename(L, -1));
  } else {
    for (int k = 0; k < n->n_inputs && !rc; k++) {
      lua_rawgeti(L, -1, k + 1);
      lt_box *b = luaL_testudata(L, -1, DP_TENSOR_MT);
      if (b && b->t && dp_node_needs(n, k)) {
        dp_tensor *g = b->t;
        bool same = g->ndim == n->in_ndim[k] && g->dtype == n->in_dtype[k] &&
                    memcmp(g->shape, n->in_shape[k], sizeof(int64_t) * (size_t)g->ndim) == 0;
        if (!same) {
          char a[128];
          rc = dp_error("%s: backward returned a %s %s gradient for input %d, expected its dtype %s and shape", c->name,
                        dp_dtype_name(g->dtype), dp_shape_str(g, a, sizeof a), k + 1, dp_dtype_name(n->in_dtype[k]));
        } else {
          dp_retain(g);
          gin[k] = g;
        }
      } else if (!b && !lua_isnil(L, -1) && !(lua_isboolean(L, -1) && !lua_toboolean(L, -1))) {
        rc = dp_error("%s: backward returned a %s for input %d, expected a tensor or nil", c->name,
                      luaL_typename(L, -1), k + 1);
      }
      lua_pop(L, 1);
    }
  }
  for (int o = 0; o < c->n_out; o++) dp_release(gs[o]); /* those the protected call did not take */
  lua_settop(L, top);
  if (rc)
    for (int k = 0; k < n->n_inputs; k++) dp_clear(&gin[k]);
  return rc;
}

/* core._function_node(inputs, outputs, id, name): a node over the input tensors (those that do not require grad
 * get no edge) made the grad_fn of each output tensor (fresh tensors: autograd_function.lua passes detached
 * aliases) */
static int l_function_node(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer id = luaL_checkinteger(L, 3);
  const char *name = luaL_checkstring(L, 4);
  lua_Integer n_in = (lua_Integer)lua_rawlen(L, 1), n_out = (lua_Integer)lua_rawlen(L, 2);
  if (n_in < 1 || n_in > 64) return luaL_error(L, "autograd.Function: %I tensor inputs (expected 1 to 64)", n_in);
  if (n_out < 1 || n_out > 16) return luaL_error(L, "autograd.Function: %I tensor outputs (expected 1 to 16)", n_out);
  dp_tensor *ins[64], *outs[16];
  for (lua_Integer i = 0; i < n_in + n_out; i++) {
    lua_rawgeti(L, i < n_in ? 1 : 2, i < n_in ? i + 1 : i - n_in + 1);
    dp_tensor *t = lt_check(L, -1);
    if (i < n_in) ins[i] = t;
    else outs[i - n_in] = t;
    lua_pop(L, 1);
  }
  for (int o = 0; o < n_out; o++)
    if (outs[o]->grad_fn || outs[o]->requires_grad || !dp_dtype_is_float(outs[o]->dtype))
      return luaL_error(L, "autograd.Function: output %d must be a fresh floating-point tensor without a history",
                        o + 1);
  fn_ctx *c = dp_xcalloc(1, sizeof *c);
  c->id = id;
  c->name = node_name(name);
  c->n_out = (int)n_out;
  for (int o = 0; o < n_out; o++) {
    c->ndim[o] = outs[o]->ndim;
    memcpy(c->shape[o], outs[o]->shape, sizeof(int64_t) * (size_t)outs[o]->ndim);
    c->dtype[o] = outs[o]->dtype;
    c->dev[o] = dp_dev(outs[o]);
  }
  dp_node *n = dp_node_new(c->name, fn_backward, (int)n_in, ins, (int)n_out);
  n->ctx = c;
  n->free_ctx = free_fn_ctx;
  for (int o = 0; o < n_out; o++) dp_node_attach(n, outs[o], o);
  dp_node_release(n);
  return 0;
}

/* core._function_dead_ids() -> the ids whose nodes let their state go since the last call */
static int l_function_dead_ids(lua_State *L) {
  pthread_mutex_lock(&dead_mu);
  size_t m = n_dead;
  lua_Integer *ids = m ? dp_xmalloc(m * sizeof *ids) : NULL;
  if (m) memcpy(ids, dead, m * sizeof *ids);
  n_dead = 0;
  pthread_mutex_unlock(&dead_mu);
  lua_createtable(L, (int)m, 0);
  for (size_t k = 0; k < m; k++) {
    lua_pushinteger(L, ids[k]);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  free(ids);
  return 1;
}

/* core._set_function_dispatch(fn): the Lua function a node's backward calls */
static int l_set_function_dispatch(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, FN_DISPATCH);
  return 0;
}

void lt_open_autograd_function(lua_State *L, int module) {
  static const luaL_Reg funcs[] = {{"_function_node", l_function_node},
                                   {"_function_dead_ids", l_function_dead_ids},
                                   {"_set_function_dispatch", l_set_function_dispatch},
                                   {NULL, NULL}};
  lua_pushvalue(L, module);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
}
