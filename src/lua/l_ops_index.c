/* Bindings of the selection, shape, statistics and sampling ops (each a
 * tensor method and a ddp function; positions and dims 1-based):
 *
 *   ddp.where(cond, a, b)           a, b tensors or numbers     t:masked_fill(mask, value)
 *   t:tril([k]) t:triu([k])         ddp.tril / ddp.triu
 *   t:gather(dim, index)            t:scatter(dim, index, src|value)   t:scatter_add(dim, index, src)
 *   t:scatter_(...) t:scatter_add_(...)   in place, no autograd
 *   t:topk(k [, dim [, largest [, sorted]]] | k, {dim=, largest=, sorted=}) -> values, indices
 *   t:split(size | {sizes}, [dim]) t:chunk(n, [dim])   -> the parts, as several results
 *   t:cumsum(dim) t:flip(dims)      t:repeat_(r1, ...) t:tile(r1, ...)   ({r1, ...} works too)
 *   t:norm([p [, dim [, keepdim]]]) p a number, math.huge, or "fro"; t:norm(p, {dim=, keepdim=})
 *   t:var([dim] [, {unbiased=, correction=, keepdim=}]) t:std(...)   or (dim, unbiased, keepdim)
 *   ddp.randint([low,] high, size [, {generator=, dtype=, device=}])
 *   ddp.multinomial(probs, n [, replacement | {replacement=, generator=}])  ddp.bernoulli(p [, {generator=}])
 *
 * repeat_ has its underscore because `repeat` is a Lua keyword. */
#include <math.h>
#include <string.h>

#include "autograd/autograd.h"
#include "lua/l_util.h"
#include "ops/model_ops.h"

void lt_open_model_layers(lua_State *L, int module, int methods); /* l_ops_models.c */

/* A tensor at idx, or a Lua number made a 0-dim tensor of dtype dt on dev
 * (a weakly typed scalar, as PyTorch's: it takes the other operand's
 * dtype, float32 when it has a fraction and that one is integer). The
 * caller releases *made. */
static dp_tensor *tensor_or_number(lua_State *L, int idx, dp_dtype dt, dp_device dev, dp_tensor **made,
                                   const char *op) {
  *made = NULL;
  dp_tensor *t = lt_test(L, idx);
  if (t) return t;
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "%s: argument %d must be a tensor or a number, got %s", op, idx, luaL_typename(L, idx));
  if (!dp_dtype_is_float(dt) && !lua_isinteger(L, idx)) dt = DP_F32;
  *made = dp_scalar(lua_tonumber(L, idx), dt, dev);
  if (!*made) lt_error(L);
  return *made;
}

static bool opt_bool(lua_State *L, int idx, const char *op, const char *what, bool dflt) {
  if (lua_isnoneornil(L, idx)) return dflt;
  if (lua_type(L, idx) != LUA_TBOOLEAN)
    luaL_error(L, "%s: %s must be a boolean, got %s", op, what, luaL_typename(L, idx));
  return lua_toboolean(L, idx);
}

/* field `key` of the options table at idx as a boolean (dflt when absent) */
static bool field_bool(lua_State *L, int idx, const char *key, const char *op, bool dflt) {
  lua_getfield(L, idx, key);
  bool v = opt_bool(L, -1, op, key, dflt);
  lua_pop(L, 1);
  return v;
}

/* core.resample_dim(x, dim, idx, w): T weighted taps along dim (nn/resample.lua's linear modes): idx an int64
 * tensor [T, k] of 1-based positions, w [T, k] in x's dtype; out[.., j, ..] = sum_t w[t, j] * x[.., idx[t, j], ..] */
static int l_resample_dim(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  int d = lt_check_dim(L, 2, x->ndim, 0);
  return lt_push(L, dp_resample_dim(x, d, lt_check(L, 3), lt_check(L, 4), 1));
}

/* core.plane_gather(x, rows, cols [, value = 0]): x's last two dims read through the int64 maps of 1-based
 * positions, 0 giving value (out[.., i, j] = x[.., rows[i], cols[j]]), with autograd (float32 / float64) */
static int l_plane_gather(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *rows = lt_check(L, 2), *cols = lt_check(L, 3);
  return lt_push(L, dp_plane_gather(x, rows, cols, luaL_optnumber(L, 4, 0), 1));
}

/* core._pad_positions(mode, n, l, r [, start = 0]) -> the int64 map of nn/padding.lua along one dim, first, last:
 * for each of the n + l + r output positions j, the 1-based input position it reads, 0 for the fill ("constant":
 * j - l when in [0, n), else the fill; "reflect": j - l mirrored once at each end; "replicate": j - l clamped;
 * "circular": start + (j - l) mod n); first and last bound the output positions that read x (1-based; nil, nil
 * when none do). One pass in C: in Lua a map of a million positions took ~0.1 s, a long signal's every new length.
 * A negative l or r crops (circular: nn/padding.lua crops first, into start); the sums are taken in 128 bits. */
static int l_pad_positions(lua_State *L) {
  static const char *const modes[] = {"constant", "reflect", "replicate", "circular", NULL};
  int mode = luaL_checkoption(L, 1, NULL, modes);
  int64_t n = (int64_t)luaL_checkinteger(L, 2), l = (int64_t)luaL_checkinteger(L, 3),
          r = (int64_t)luaL_checkinteger(L, 4), start = (int64_t)luaL_optinteger(L, 5, 0);
  const __int128 lim = (__int128)1 << 59, len128 = (__int128)n + l + r;
  if (n < (mode == 0 ? 0 : 1) || n > lim || start < 0 || start > lim || len128 < 0 || len128 > lim)
    return luaL_error(L, "_pad_positions: size %I with the padding (%I, %I) and start %I is out of range",
                      (lua_Integer)n, (lua_Integer)l, (lua_Integer)r, (lua_Integer)start);
  if ((mode == 1 && (l >= n || r >= n)) || (mode == 3 && (l < 0 || r < 0 || l > n || r > n)))
    return luaL_error(L, "_pad_positions: %s padding (%I, %I) out of range for the size %I", modes[mode],
                      (lua_Integer)l, (lua_Integer)r, (lua_Integer)n);
  int64_t len = (int64_t)len128;
  dp_tensor *t = dp_empty(DP_I64, 1, &len, dp_cpu());
  if (!t) return lt_error(L);
  int64_t *o = dp_data(t);
  for (int64_t j = 0; j < len; j++) {
    __int128 p = (__int128)j - l; /* reflect: in (-n, 2n - 1) */
    switch (mode) {
    case 0: o[j] = p >= 0 && p < n ? (int64_t)p + 1 : 0; break;
    case 1: {
      int64_t q = (int64_t)(p < 0 ? -p : p);
      o[j] = n - (q > n - 1 ? q - (n - 1) : (n - 1) - q);
      break;
    }
    case 2: o[j] = (p < 0 ? 0 : p > n - 1 ? n - 1 : (int64_t)p) + 1; break;
    default: o[j] = start + (((int64_t)p % n) + n) % n + 1; break;
    }
  }
  lt_push(L, t);
  /* the output positions j in [max(0, l), min(len, l + n)) read x */
  __int128 lo = l > 0 ? l : 0, hi = (__int128)l + n < len ? (__int128)l + n : len;
  if (mode != 0) lo = 0, hi = len;
  if (lo >= hi) {
    lua_pushnil(L);
    lua_pushnil(L);
  } else {
    lua_pushinteger(L, (lua_Integer)lo + 1);
    lua_pushinteger(L, (lua_Integer)hi);
  }
  return 3;
}

/* core.cum_extreme(x, dim, is_max [, with_values]) -> the 1-based positions of cummax (cummin) [, its values] */
static int l_cum_extreme(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  int d = lt_check_dim(L, 2, x->ndim ? x->ndim : 1, 0);
  dp_tensor *values = NULL;
  bool with_values = lua_toboolean(L, 4);
  dp_tensor *idx = dp_cum_extreme(x, d, lua_toboolean(L, 3), 1, with_values ? &values : NULL);
  lt_push(L, idx);
  if (!with_values) return 1;
  return lt_push(L, values) + 1;
}

/* core.cumprod(x, dim), core.logcumsumexp(x, dim): the running scans, with autograd (x already of a type they take) */
static int l_cumprod(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  return lt_push(L, dp_cumprod(x, lt_check_dim(L, 2, x->ndim ? x->ndim : 1, 0)));
}
static int l_logcumsumexp(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  return lt_push(L, dp_logcumsumexp(x, lt_check_dim(L, 2, x->ndim ? x->ndim : 1, 0)));
}

/* core.searchsorted(seq [rows or 1, n], v [rows, m], right): 1-based insertion positions, int64 [rows, m] */
static int l_searchsorted(lua_State *L) {
  return lt_push(L, dp_searchsorted(lt_check(L, 1), lt_check(L, 2), lua_toboolean(L, 3), 1));
}

/* core.nonzero(m, count, flat): the 1-based coordinates [count, ndim] (flat: positions [count]) of m's non-zero
 * bytes; an error on a backend without the kernel (tensor_more.lua composes it there) */
static int l_nonzero(lua_State *L) {
  return lt_push(L, dp_nonzero_native(lt_check(L, 1), luaL_checkinteger(L, 2), lua_toboolean(L, 3), 1));
}

/* core.index_add(t, dim, index, source): t + source's slices at the 1-based index along dim (float32 / float64 on
 * the CPU; tensor_reduce_more.lua checks the arguments and composes scatter_add elsewhere) */
static int l_index_add(lua_State *L) {
  dp_tensor *t = lt_check(L, 1);
  int d = lt_check_dim(L, 2, t->ndim ? t->ndim : 1, 0);
  return lt_push(L, dp_index_add(t, d, lt_check(L, 3), lt_check(L, 4), 1));
}

/* core.histogram(values, weights or nil, edges, uniform): counts or weight sums between the edges (CPU;
 * tensor_order.lua checks the edges and composes elsewhere) */
static int l_histogram(lua_State *L) {
  return lt_push(L, dp_histogram_native(lt_check(L, 1), lt_test(L, 2), lt_check(L, 3), lua_toboolean(L, 4)));
}

/* core.bincount(values, weights or nil, size): 0-based values' counts (CPU; tensor_order.lua checks and composes) */
static int l_bincount(lua_State *L) {
  return lt_push(L, dp_bincount_native(lt_check(L, 1), lt_test(L, 2), luaL_checkinteger(L, 3)));
}

/* ---- where / masked_fill / tril / triu ---- */
static int l_where(lua_State *L) {
  dp_tensor *cond = lt_check(L, 1);
  if (lua_isnoneornil(L, 2) && lua_isnoneornil(L, 3))
    return luaL_error(L, "where: expected where(condition, a, b) (the one-argument form is not supported)");
  dp_tensor *like = lt_test(L, 2) ? lt_test(L, 2) : lt_test(L, 3);
  /* two numbers: int64 when both are integers, else float32, on the condition's device */
  dp_dtype dt = like ? like->dtype : lua_isinteger(L, 2) && lua_isinteger(L, 3) ? DP_I64 : DP_F32;
  dp_device dev = like ? dp_dev(like) : dp_dev(cond);
  dp_tensor *ma, *mb;
  dp_tensor *a = tensor_or_number(L, 2, dt, dev, &ma, "where");
  dp_tensor *b = tensor_or_number(L, 3, dt, dev, &mb, "where");
  dp_tensor *r = dp_where(cond, a, b);
  dp_clear(&ma);
  dp_clear(&mb);
  return lt_push(L, r);
}

static int l_masked_fill(lua_State *L) {
  dp_tensor *x = lt_check(L, 1), *mask = lt_check(L, 2), *made;
  dp_tensor *v = tensor_or_number(L, 3, x->dtype, dp_dev(x), &made, "masked_fill");
  dp_tensor *r = dp_masked_fill(x, mask, v);
  dp_clear(&made);
  return lt_push(L, r);
}

static int tri(lua_State *L, bool upper) {
  dp_tensor *x = lt_check(L, 1);
  lua_Integer k = luaL_optinteger(L, 2, 0);
  return lt_push(L, dp_tri(x, k, upper));
}
static int l_tril(lua_State *L) { return tri(L, false); }
static int l_triu(lua_State *L) { return tri(L, true); }

/* ---- gather / scatter ---- */
static int l_gather(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  int d = lt_check_dim(L, 2, x->ndim ? x->ndim : 1, 0);
  return lt_push(L, dp_gather(x, d, lt_check(L, 3), 1));
}

static int scatter(lua_State *L, bool accumulate, bool inplace) {
  dp_tensor *x = lt_check(L, 1), *made;
  const char *op = accumulate ? "scatter_add" : "scatter";
  int d = lt_check_dim(L, 2, x->ndim ? x->ndim : 1, 0);
  dp_tensor *idx = lt_check(L, 3);
  if (accumulate && !lt_test(L, 4))
    return luaL_error(L, "scatter_add: the source must be a tensor, got %s", luaL_typename(L, 4));
  dp_tensor *src = tensor_or_number(L, 4, x->dtype, dp_dev(x), &made, op);
  if (inplace) {
    if (x->requires_grad && dp_grad_enabled()) {
      dp_clear(&made);
      return luaL_error(L, "%s_: in-place operation on a tensor that requires grad (wrap it in ddp.no_grad)", op);
    }
    int rc = dp_scatter_(x, d, idx, src, 1, accumulate);
    dp_clear(&made);
    LT_CHECK(L, rc);
    lua_settop(L, 1);
    return 1;
  }
  dp_tensor *r = dp_scatter(x, d, idx, src, 1, accumulate);
  dp_clear(&made);
  return lt_push(L, r);
}
static int l_scatter(lua_State *L) { return scatter(L, false, false); }
static int l_scatter_add(lua_State *L) { return scatter(L, true, false); }
static int l_scatter_i(lua_State *L) { return scatter(L, false, true); }
static int l_scatter_add_i(lua_State *L) { return scatter(L, true, true); }

/* ---- topk ---- */
static int l_topk(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  lua_Integer k = luaL_checkinteger(L, 2);
  int dim = x->ndim ? x->ndim - 1 : 0;
  bool largest = true;
  if (lua_istable(L, 3)) {
    static const char *const valid[] = {"dim", "largest", "sorted", NULL};
    lt_check_keys(L, 3, "topk", valid);
    if (lua_getfield(L, 3, "dim") != LUA_TNIL)
      dim = lt_dim_value(L, luaL_checkinteger(L, -1), x->ndim ? x->ndim : 1, 0);
    lua_pop(L, 1);
    largest = field_bool(L, 3, "largest", "topk", true);
    field_bool(L, 3, "sorted", "topk", true); /* always sorted: a valid order for sorted=false too */
  } else {
    if (!lua_isnoneornil(L, 3)) dim = lt_check_dim(L, 3, x->ndim ? x->ndim : 1, 0);
    largest = opt_bool(L, 4, "topk", "largest", true);
    opt_bool(L, 5, "topk", "sorted", true);
  }
  dp_tensor *idx = NULL;
  dp_tensor *v = dp_topk(x, k, dim, largest, 1, &idx);
  lt_push(L, v);
  return lt_push(L, idx) + 1;
}

/* ---- split / chunk: narrow views, so gradients flow to the whole ---- */
static int push_parts(lua_State *L, dp_tensor *x, int d, int n, const int64_t *sizes) {
  luaL_checkstack(L, n + 2, "split: too many parts");
  int64_t start = 0;
  for (int i = 0; i < n; i++) {
    lt_push(L, dp_narrow(x, d, start, sizes[i]));
    start += sizes[i];
  }
  return n;
}

static int l_split(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  if (x->ndim == 0) return luaL_error(L, "split: cannot split a 0-dimensional tensor");
  int d = lua_isnoneornil(L, 3) ? 0 : lt_check_dim(L, 3, x->ndim, 0);
  int64_t len = x->shape[d];
  if (lua_istable(L, 2)) {
    int n = (int)luaL_len(L, 2);
    int64_t *sizes = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(n ? n : 1), 0), sum = 0;
    for (int i = 0; i < n; i++) {
      lua_geti(L, 2, i + 1);
      int ok;
      sizes[i] = lua_tointegerx(L, -1, &ok);
      lua_pop(L, 1);
      if (!ok || sizes[i] < 0) return luaL_error(L, "split: section %d must be a non-negative integer", i + 1);
      if (sizes[i] > len - sum) /* (checked before the add: huge sections cannot overflow it) */
        return luaL_error(L, "split: the sections up to %d sum to more than dimension %d's size %I", i + 1, d + 1,
                          (lua_Integer)len);
      sum += sizes[i];
    }
    if (sum != len)
      return luaL_error(L, "split: the sections sum to %I but dimension %d has size %I", (lua_Integer)sum, d + 1,
                        (lua_Integer)len);
    return push_parts(L, x, d, n, sizes);
  }
  lua_Integer size = luaL_checkinteger(L, 2);
  if (size < 0 || (size == 0 && len > 0)) return luaL_error(L, "split: the split size must be positive, got %I", size);
  int64_t parts = len == 0 ? 1 : len / size + (len % size != 0); /* ceil, no overflow */
  if (parts > 1000000) return luaL_error(L, "split: %I parts are too many", (lua_Integer)parts);
  int n = (int)parts;
  int64_t *sizes = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)n, 0);
  for (int i = 0; i < n; i++) sizes[i] = len - (int64_t)i * size < size ? len - (int64_t)i * size : size;
  return push_parts(L, x, d, n, sizes);
}

static int l_chunk(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  lua_Integer chunks = luaL_checkinteger(L, 2);
  if (chunks < 1) return luaL_error(L, "chunk: the number of chunks must be positive, got %I", chunks);
  if (x->ndim == 0) return luaL_error(L, "chunk: cannot chunk a 0-dimensional tensor");
  int d = lua_isnoneornil(L, 3) ? 0 : lt_check_dim(L, 3, x->ndim, 0);
  int64_t len = x->shape[d], size = len / chunks + (len % chunks != 0); /* ceil(len / chunks), no overflow */
  if (len == 0) {                                                       /* PyTorch's: `chunks` empty parts */
    if (chunks > 1000000) return luaL_error(L, "chunk: %I empty parts are too many", chunks);
    int64_t *sizes = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)chunks, 0);
    memset(sizes, 0, sizeof(int64_t) * (size_t)chunks);
    return push_parts(L, x, d, (int)chunks, sizes);
  }
  lua_settop(L, 1);
  lua_pushinteger(L, size ? size : 1);
  lua_pushinteger(L, d + 1);
  return l_split(L);
}

/* ---- cumsum / flip / repeat / tile ---- */
static int l_cumsum(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  if (lua_isnoneornil(L, 2)) return luaL_error(L, "cumsum: the dimension is required (t:cumsum(dim))");
  if (lua_gettop(L) > 2) return luaL_error(L, "cumsum: expected only dim, got %d arguments", lua_gettop(L));
  return lt_push(L, dp_cumsum(x, lt_check_dim(L, 2, x->ndim ? x->ndim : 1, 0)));
}

/* dims as integers from idx on, or one table */
static int read_dim_list(lua_State *L, int idx, const dp_tensor *t, int *dims) {
  int n = 0;
  if (lua_istable(L, idx)) {
    n = (int)luaL_len(L, idx);
    if (n > DP_MAXDIM) luaL_error(L, "at most %d dimensions", DP_MAXDIM);
    for (int i = 0; i < n; i++) {
      lua_geti(L, idx, i + 1);
      dims[i] = lt_dim_value(L, luaL_checkinteger(L, -1), t->ndim, 0);
      lua_pop(L, 1);
    }
    return n;
  }
  while (!lua_isnone(L, idx + n)) {
    if (n >= DP_MAXDIM) luaL_error(L, "at most %d dimensions", DP_MAXDIM);
    dims[n] = lt_check_dim(L, idx + n, t->ndim, 0);
    n++;
  }
  return n;
}

static int l_flip(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  int dims[DP_MAXDIM];
  int n = read_dim_list(L, 2, x, dims);
  return lt_push(L, dp_flip(x, n, dims));
}

static int repeat_like(lua_State *L, bool tile) {
  dp_tensor *x = lt_check(L, 1);
  int64_t reps[DP_MAXDIM];
  int next, n = lt_read_shape(L, 2, reps, &next);
  if (!lua_isnone(L, next))
    return luaL_error(L, "%s: the repeat counts must be integers, got %s", tile ? "tile" : "repeat_",
                      luaL_typename(L, next));
  return lt_push(L, tile ? dp_tile(x, n, reps) : dp_repeat(x, n, reps));
}
static int l_repeat(lua_State *L) { return repeat_like(L, false); }
static int l_tile(lua_State *L) { return repeat_like(L, true); }

/* ---- norm / var / std ---- */
/* nil (every dim), an integer or a table of them at idx */
static int read_dims_arg(lua_State *L, int idx, const dp_tensor *x, int *dims) {
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_istable(L, idx)) return read_dim_list(L, idx, x, dims);
  dims[0] = lt_check_dim(L, idx, x->ndim, 0);
  return 1;
}

static int l_norm(lua_State *L) {
  dp_tensor *x = lt_check(L, 1);
  double p = 2;
  if (lua_type(L, 2) == LUA_TSTRING) {
    if (strcmp(lua_tostring(L, 2), "fro") != 0)
      return luaL_error(L, "norm: p must be a number, math.huge or \"fro\", got \"%s\"", lua_tostring(L, 2));
  } else if (!lua_isnoneornil(L, 2)) {
    p = luaL_checknumber(L, 2);
  }
  int dims[DP_MAXDIM], n = 0;
  bool keep = false;
  if (lua_istable(L, 3) && luaL_len(L, 3) == 0) { /* {dim=, keepdim=} */
    static const char *const valid[] = {"dim", "keepdim", NULL};
    lt_check_keys(L, 3, "norm", valid);
    lua_getfield(L, 3, "dim");
    n = read_dims_arg(L, lua_gettop(L), x, dims);
    lua_pop(L, 1);
    keep = field_bool(L, 3, "keepdim", "norm", false);
  } else {
    n = read_dims_arg(L, 3, x, dims);
    keep = opt_bool(L, 4, "norm", "keepdim", false);
  }
  return lt_push(L, dp_norm(x, p, n, dims, keep));
}

static int var_std(lua_State *L, bool is_std) {
  const char *op = is_std ? "std" : "var";
  dp_tensor *x = lt_check(L, 1);
  int dims[DP_MAXDIM], n = 0, opts = 0;
  double correction = 1;
  bool keep = false;
  int next = 2;
  if (lua_type(L, 2) == LUA_TNUMBER || (lua_istable(L, 2) && luaL_len(L, 2) > 0)) {
    n = read_dims_arg(L, 2, x, dims);
    next = 3;
  } else if (lua_isnil(L, 2)) {
    next = 3;
  }
  if (lua_istable(L, next)) opts = next;
  if (opts) {
    static const char *const valid[] = {"unbiased", "correction", "keepdim", NULL};
    lt_check_keys(L, opts, op, valid);
    bool has_unbiased = lua_getfield(L, opts, "unbiased") != LUA_TNIL;
    bool unbiased = opt_bool(L, -1, op, "unbiased", true);
    bool has_corr = lua_getfield(L, opts, "correction") != LUA_TNIL;
    if (has_corr) correction = luaL_checknumber(L, -1);
    lua_pop(L, 2);
    if (has_unbiased && has_corr) return luaL_error(L, "%s: pass unbiased or correction, not both", op);
    if (has_unbiased) correction = unbiased ? 1 : 0;
    keep = field_bool(L, opts, "keepdim", op, false);
  } else { /* PyTorch's positional form: (dim, unbiased, keepdim) */
    correction = opt_bool(L, next, op, "unbiased", true) ? 1 : 0;
    keep = opt_bool(L, next + 1, op, "keepdim", false);
  }
  return lt_push(L, is_std ? dp_std(x, n, dims, correction, keep) : dp_var(x, n, dims, correction, keep));
}
static int l_var(lua_State *L) { return var_std(L, false); }
static int l_std(lua_State *L) { return var_std(L, true); }

/* ---- sampling ---- */
/* Reserves n counters: from opts.generator ({seed=, offset=}, advanced by
 * n) when the options table at idx has one, else from the global one. */
static void reserve(lua_State *L, int idx, uint64_t n, const char *op, uint64_t *seed, uint64_t *offset) {
  if (lua_istable(L, idx) && lua_getfield(L, idx, "generator") != LUA_TNIL) {
    if (!lua_istable(L, -1)) luaL_error(L, "%s: generator must be a ddp.Generator, got %s", op, luaL_typename(L, -1));
    int g = lua_gettop(L);
    lua_getfield(L, g, "seed");
    lua_getfield(L, g, "offset");
    int ok1, ok2;
    lua_Integer s = lua_tointegerx(L, -2, &ok1), o = lua_tointegerx(L, -1, &ok2);
    if (!ok1 || !ok2) luaL_error(L, "%s: generator must have integer seed and offset", op);
    lua_pop(L, 2);
    lua_pushinteger(L, (lua_Integer)((uint64_t)o + n)); /* the counter wraps, as Lua's integers do */
    lua_setfield(L, g, "offset");
    lua_pop(L, 1);
    *seed = (uint64_t)s, *offset = (uint64_t)o;
    return;
  }
  if (lua_istable(L, idx)) lua_pop(L, 1);
  *seed = dp_rng_seed();
  *offset = dp_rng_reserve(n);
}

static int l_randint(lua_State *L) {
  int nint = 0;
  while (nint < 2 && lua_type(L, nint + 1) == LUA_TNUMBER) nint++;
  if (nint == 0) return luaL_error(L, "randint: expected ([low,] high, size [, opts])");
  lua_Integer low = nint == 2 ? luaL_checkinteger(L, 1) : 0, high = luaL_checkinteger(L, nint);
  if (!lua_istable(L, nint + 1)) return luaL_error(L, "randint: size must be a table such as {2, 3}");
  int64_t shape[DP_MAXDIM];
  int nd = lt_read_shape(L, nint + 1, shape, NULL);
  int oi = nint + 2;
  dp_dtype dt = DP_I64;
  dp_device dev = dp_cpu();
  if (lua_istable(L, oi)) {
    static const char *const valid[] = {"generator", "dtype", "device", NULL};
    lt_check_keys(L, oi, "randint", valid);
    if (lua_getfield(L, oi, "dtype") != LUA_TNIL) dt = lt_check_dtype(L, -1);
    if (lua_getfield(L, oi, "device") != LUA_TNIL) dev = lt_check_device(L, -1);
    lua_pop(L, 2);
  } else if (!lua_isnone(L, oi)) {
    return luaL_error(L, "randint: options must be a table, got %s", luaL_typename(L, oi));
  }
  lt_opts o = {.dtype = dt, .device = dev};
  if (o.device.type != DP_CPU && !dp_backend_require(o.device.type)) return lt_error(L);
  if (dp_check_shape(nd, shape)) return lt_error(L); /* before the count is taken from it */
  int64_t count = 1;
  for (int d = 0; d < nd; d++) count *= shape[d];
  uint64_t seed, off;
  reserve(L, oi, (uint64_t)count, "randint", &seed, &off);
  dp_tensor *t = dp_randint(low, high, nd, shape, o.device, seed, off);
  if (t && o.dtype != DP_I64) {
    dp_tensor *c = dp_to(t, o.dtype, o.device);
    dp_release(t);
    t = c;
  }
  return lt_push(L, t);
}

static int l_multinomial(lua_State *L) {
  dp_tensor *p = lt_check(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  bool replacement = false;
  int oi = 0;
  if (lua_istable(L, 3)) {
    static const char *const valid[] = {"replacement", "generator", NULL};
    lt_check_keys(L, 3, "multinomial", valid);
    replacement = field_bool(L, 3, "replacement", "multinomial", false);
    oi = 3;
  } else {
    replacement = opt_bool(L, 3, "multinomial", "replacement", false);
    if (lua_istable(L, 4)) oi = 4;
  }
  int64_t rows = p->ndim == 2 ? p->shape[0] : 1, draws = 0;
  if (n > 0 && __builtin_mul_overflow(rows, (int64_t)n, &draws))
    return luaL_error(L, "multinomial: %I samples for each of %I rows is too large", n, (lua_Integer)rows);
  uint64_t seed, off;
  reserve(L, oi ? oi : lua_gettop(L) + 1, (uint64_t)draws, "multinomial", &seed, &off);
  return lt_push(L, dp_multinomial(p, n, replacement, 1, seed, off));
}

/* bernoulli(p [, opts]): 1 with probability p[i] at each i; bernoulli(x, prob [, opts]): x's shape, dtype and
 * device, 1 with probability prob everywhere (PyTorch's bernoulli.p overload) */
static int l_bernoulli(lua_State *L) {
  dp_tensor *p = lt_check(L, 1);
  int oi = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    double prob = lua_tonumber(L, 2);
    if (!(prob >= 0 && prob <= 1)) return luaL_error(L, "bernoulli: p must be in [0, 1], got %f", prob);
    if (!dp_dtype_is_float(p->dtype))
      return luaL_error(L, "bernoulli: expected a floating point tensor, got %s", dp_dtype_name(p->dtype));
    lt_push(L, dp_full(p->dtype, p->ndim, p->shape, prob, dp_dev(p))); /* owned by Lua: an error below frees it */
    p = lt_check(L, -1);
    oi = 3;
  }
  if (lua_istable(L, oi)) {
    static const char *const valid[] = {"generator", NULL};
    lt_check_keys(L, oi, "bernoulli", valid);
  }
  uint64_t seed, off;
  reserve(L, oi, (uint64_t)dp_numel(p), "bernoulli", &seed, &off);
  return lt_push(L, dp_bernoulli(p, seed, off));
}

void lt_open_model_ops(lua_State *L, int module, int methods) {
  module = lua_absindex(L, module), methods = lua_absindex(L, methods);
  static const luaL_Reg both[] = {{"masked_fill", l_masked_fill},
                                  {"tril", l_tril},
                                  {"triu", l_triu},
                                  {"gather", l_gather},
                                  {"scatter", l_scatter},
                                  {"scatter_add", l_scatter_add},
                                  {"topk", l_topk},
                                  {"split", l_split},
                                  {"chunk", l_chunk},
                                  {"cumsum", l_cumsum},
                                  {"flip", l_flip},
                                  {"tile", l_tile},
                                  {"norm", l_norm},
                                  {"var", l_var},
                                  {"std", l_std},
                                  {"multinomial", l_multinomial},
                                  {"bernoulli", l_bernoulli},
                                  {NULL, NULL}};
  static const luaL_Reg meths[] = {
      {"repeat_", l_repeat}, {"scatter_", l_scatter_i}, {"scatter_add_", l_scatter_add_i}, {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"where", l_where},
                                   {"randint", l_randint},
                                   {"resample_dim", l_resample_dim},
                                   {"plane_gather", l_plane_gather},
                                   {"_pad_positions", l_pad_positions},
                                   {"cum_extreme", l_cum_extreme},
                                   {"cumprod", l_cumprod},
                                   {"histogram", l_histogram},
                                   {"logcumsumexp", l_logcumsumexp},
                                   {"searchsorted", l_searchsorted},
                                   {"nonzero", l_nonzero},
                                   {"index_add", l_index_add},
                                   {"bincount", l_bincount},
                                   {NULL, NULL}};
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, both, 0);
  luaL_setfuncs(L, meths, 0);
  lua_pop(L, 1);
  lua_pushvalue(L, module);
  luaL_setfuncs(L, both, 0);
  luaL_setfuncs(L, funcs, 0);
  lua_pop(L, 1);
  lt_open_model_layers(L, module, methods);
}
