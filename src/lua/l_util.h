/* Helpers for the Lua bindings: tensor userdata, argument checks that name
 * the argument and what was expected, and conversion of Lua's 1-based
 * positions to the runtime's 0-based ones. */
#ifndef DP_L_UTIL_H
#define DP_L_UTIL_H

#include <lauxlib.h>
#include <lua.h>

#include "core/error.h"
#include "tensor/tensor.h"

#define DP_TENSOR_MT "ddplua.Tensor"

/* A tensor userdata: the tensor it owns (NULL once freed) and, after an
 * explicit release, what released it, for the error a later use raises. */
typedef struct {
  dp_tensor *t;
  const char *freed_by; /* "t:free()", "a <close> variable" (NULL: never freed) */
} lt_box;

/* Pushes a userdata owning t (takes over the caller's reference); on NULL
 * raises the runtime's error message as a Lua error. */
int lt_push(lua_State *L, dp_tensor *t);
/* Like lt_push but pushes nil for NULL without an error. */
void lt_push_or_nil(lua_State *L, dp_tensor *t);
/* The tensor at idx: lt_check raises an error naming the argument when it
 * is something else; lt_test returns NULL then. Both raise "tensor was
 * freed by ..." for a tensor whose memory was released. */
dp_tensor *lt_check(lua_State *L, int idx);
dp_tensor *lt_test(lua_State *L, int idx);
/* Releases the tensor a box owns now (free(), __close), recording by what. */
void lt_box_free(lua_State *L, int idx, const char *by);
/* The Lua number at idx as an op operand: integers stay exact (int64),
 * floats are doubles (the caller checked lua_type == LUA_TNUMBER). */
#define LT_NUMBER(L, idx)                                                                                              \
  (lua_isinteger(L, idx) ? dp_number_int((int64_t)lua_tointeger(L, idx)) : dp_number_float(lua_tonumber(L, idx)))
/* Raises dp_errmsg() as a Lua error (with the caller's position). */
int lt_error(lua_State *L);
#define LT_CHECK(L, expr)                                                                                              \
  do {                                                                                                                 \
    if ((expr) != 0) lt_error(L);                                                                                      \
  } while (0)

/* 1-based / negative dim at stack idx -> 0-based; error names the dim and
 * the valid range for t. `ndim_extra` allows one past the end (unsqueeze). */
int lt_check_dim(lua_State *L, int idx, int ndim, int ndim_extra);
/* Converts a Lua dim value (already read) the same way. */
int lt_dim_value(lua_State *L, lua_Integer d, int ndim, int ndim_extra);
/* Shape from either integers at idx.. (stopping at the first non-number) or
 * a table at idx; returns the number of dims and sets *next to the first
 * stack index after the shape. */
int lt_read_shape(lua_State *L, int idx, int64_t *shape, int *next);
/* The length (#, __len included) of the list at idx, raising "<what>: the
 * list's length (#) is N, expected 0..2^31 - 1" outside that range (a
 * buffer of that many entries is sized from it). */
int lt_list_len(lua_State *L, int idx, const char *what);
/* An optional timeout in seconds at idx (none/nil: dflt_s) as milliseconds
 * for poll(): negative -> -1 (forever), huge -> INT_MAX, NaN -> an error
 * naming what. */
int lt_timeout_ms(lua_State *L, int idx, double dflt_s, const char *what);
/* The file or directory path at idx, raising "<what>: the path contains a NUL
 * byte (at byte k)" for one that does (C would cut it there: another file;
 * Python says "embedded null byte"). lt_opt_path: none/nil -> dflt. */
const char *lt_check_path(lua_State *L, int idx, const char *what);
const char *lt_opt_path(lua_State *L, int idx, const char *dflt, const char *what);
/* v as an int if lo <= v <= hi, else the error "<what> must be lo..hi, got v"
 * (hi <= INT_MAX, lo >= INT_MIN). */
int lt_check_int_range(lua_State *L, lua_Integer v, lua_Integer lo, lua_Integer hi, const char *what);
/* Reads {dtype=, device=, requires_grad=} at idx (may be none/nil). */
typedef struct {
  dp_dtype dtype;
  dp_device device;
  int requires_grad;
  int has_dtype, has_device;
} lt_opts;
void lt_read_opts(lua_State *L, int idx, lt_opts *o, dp_dtype default_dtype);
dp_dtype lt_check_dtype(lua_State *L, int idx);
dp_device lt_check_device(lua_State *L, int idx);
/* Checks a string key of an options table against a list of valid keys. */
void lt_check_keys(lua_State *L, int idx, const char *what, const char *const *valid);

/* The process group behind a Lua group object (nil/none: the default
 * group); raises a Lua error if none is initialised. Defined in l_distributed.c. */
struct dp_pg;
struct dp_pg *lt_check_pg(lua_State *L, int idx);
/* A max pool's kernel_size, stride, padding and ceil_mode at idx .. idx + 3
 * (l_ops_layers.c; Lua errors naming op and the argument). */
struct dp_pool2d_args;
void lt_read_pool2d(lua_State *L, int idx, const char *op, struct dp_pool2d_args *a);

/* Tells the GC pacer that tensors were allocated (called by lt_push). */
void lt_gc_pace(lua_State *L);
/* A full collection, counted as the pacer's own (its counters start over). */
void lt_gc_full(lua_State *L);
/* Tells the pacer that a full collection just ran (Lua's collectgarbage(), wrapped by ddplua.core). */
void lt_gc_collected(void);
/* The full and young collections the pacer ran itself so far. */
void lt_gc_counts(int64_t *full, int64_t *young);

/* Registration of the binding files: each adds its functions to the module
 * table at stack index `module` and its tensor methods to the method table
 * at `methods` (l_core.c calls them in turn). */
void lt_open_tensor(lua_State *L, int module, int methods);
void lt_open_tensor_create(lua_State *L, int module);
void lt_open_tensor_ops(lua_State *L, int module, int methods);
void lt_open_nn_ops(lua_State *L, int module, int methods);
void lt_open_model_ops(lua_State *L, int module, int methods); /* l_ops_index.c, l_ops_models.c */
void lt_open_nn_layers(lua_State *L, int module, int methods);
void lt_open_nn_support(lua_State *L, int module);
void lt_open_autograd_function(lua_State *L, int module); /* l_autograd_fn.c */
/* records the Lua state that runs the autograd engine now (custom Functions' backward calls into it); returns the
 * previous one, to restore after */
lua_State *lt_engine_state(lua_State *L);
/* l_tensor_backward.c: t:backward, t:retain_grad, t.retains_grad, core._grad_hooks */
int lt_backward(lua_State *L);
int lt_retain_grad(lua_State *L);
bool lt_retains_grad(lua_State *L, int idx);
int lt_grad_hooks(lua_State *L);
void lt_open_optim(lua_State *L, int module);
void lt_open_data(lua_State *L, int module);
void lt_open_ddp(lua_State *L, int module);
void lt_open_cuda(lua_State *L, int module); /* l_backend_cuda.c: CUDA device controls, autocast, unscale */

#endif
