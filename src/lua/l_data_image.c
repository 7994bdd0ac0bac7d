/* Image bindings: core.image.{read, write_png, write_jpeg, read_idx,
 * read_csv, permutation, apply, dataset}. lua/ddplua/data/csv_image.lua and
 * transforms.lua build data.CSVImageDataset and data.transforms on them.
 *
 * Transforms arrive as the tables data.transforms makes ({op = "resize",
 * height =, width =}, {op = "rotation", min =, max =}, {op = "hflip", p =},
 * {op = "to_tensor"}, {op = "normalize", mean = {...}, std = {...}}) and are
 * compiled here into the C pipeline. Item positions are 1-based in Lua. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "data/image_csv.h"
#include "data/image_decode.h"
#include "data/image_pool.h"
#include "lua/l_util.h"
#include "ops/ops.h"
#include "ops/philox.h"

#define IMAGE_SET_MT "ddplua.ImageSet"

/* ---- files ---- */

/* read(path [, channels]) -> uint8 [H, W, C] */
static int l_read(lua_State *L) {
  const char *path = lt_check_path(L, 1, "image.read");
  int channels = lt_check_int_range(L, luaL_optinteger(L, 2, 0), 0, 4, "image.read: channels");
  dp_image img;
  LT_CHECK(L, dp_image_read(path, channels, &img));
  int64_t shape[3] = {img.height, img.width, img.channels};
  dp_tensor *t = dp_empty(DP_U8, 3, shape, dp_cpu());
  if (t) memcpy(dp_data(t), img.data, (size_t)img.height * img.width * img.channels);
  dp_image_free(&img);
  return lt_push(L, t);
}

/* A uint8 [H, W] or [H, W, C] tensor as an image (a contiguous copy is
 * kept in *keep while the image is used). */
static dp_image check_image_tensor(lua_State *L, int idx, dp_tensor **keep) {
  dp_tensor *t = lt_check(L, idx);
  char buf[64];
  if (t->dtype != DP_U8 || (t->ndim != 2 && t->ndim != 3) || dp_dev(t).type != DP_CPU)
    luaL_error(L, "expected a uint8 cpu image tensor of shape [H, W] or [H, W, C], got %s %s", dp_dtype_name(t->dtype),
               dp_shape_str(t, buf, sizeof buf));
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] > INT_MAX)
      luaL_error(L, "image tensor of shape %s: a size above 2^31 - 1 is not an image",
                 dp_shape_str(t, buf, sizeof buf));
  dp_tensor *c = dp_contiguous(t);
  if (!c) lt_error(L);
  *keep = c;
  dp_image img = {(int)t->shape[0], (int)t->shape[1], t->ndim == 3 ? (int)t->shape[2] : 1, dp_data(c)};
  return img;
}

static int write_image(lua_State *L, bool jpeg) {
  const char *path = lt_check_path(L, 1, jpeg ? "image.write_jpeg" : "image.write_png");
  int quality = lt_check_int_range(L, luaL_optinteger(L, 3, 90), 1, 100, "write_jpeg: quality");
  dp_tensor *keep;
  dp_image img = check_image_tensor(L, 2, &keep);
  int rc = jpeg ? dp_image_write_jpeg(path, &img, quality) : dp_image_write_png(path, &img);
  dp_release(keep);
  LT_CHECK(L, rc);
  return 0;
}
static int l_write_png(lua_State *L) { return write_image(L, false); }
static int l_write_jpeg(lua_State *L) { return write_image(L, true); }

/* read_idx(path [, limit]) -> uint8 tensor with the file's dims */
static int l_read_idx(lua_State *L) {
  const char *path = lt_check_path(L, 1, "image.read_idx");
  lua_Integer limit = luaL_optinteger(L, 2, -1);
  int ndim;
  int64_t dims[4];
  uint8_t *data;
  LT_CHECK(L, dp_image_read_idx(path, limit, &ndim, dims, &data));
  dp_tensor *t = dp_empty(DP_U8, ndim, dims, dp_cpu());
  if (t) memcpy(dp_data(t), data, (size_t)dp_numel(t));
  free(data);
  return lt_push(L, t);
}

/* read_csv(path) -> {header = {...}, columns = {name = {...}}, lines = {...}, nrows = n} */
static int l_read_csv(lua_State *L) {
  const char *path = lt_check_path(L, 1, "image.read_csv");
  dp_image_csv c;
  LT_CHECK(L, dp_image_csv_read(path, &c));
  lua_createtable(L, 0, 4);
  lua_createtable(L, c.ncols, 0);
  for (int k = 0; k < c.ncols; k++) {
    lua_pushstring(L, c.header[k]);
    lua_rawseti(L, -2, k + 1);
  }
  lua_setfield(L, -2, "header");
  lua_createtable(L, 0, c.ncols);
  for (int k = 0; k < c.ncols; k++) {
    lua_createtable(L, (int)c.nrows, 0);
    for (int64_t r = 0; r < c.nrows; r++) {
      lua_pushstring(L, c.cells[r * c.ncols + k]);
      lua_rawseti(L, -2, r + 1);
    }
    lua_setfield(L, -2, c.header[k]);
  }
  lua_setfield(L, -2, "columns");
  lua_createtable(L, (int)c.nrows, 0);
  for (int64_t r = 0; r < c.nrows; r++) {
    lua_pushinteger(L, c.lines[r]);
    lua_rawseti(L, -2, r + 1);
  }
  lua_setfield(L, -2, "lines");
  lua_pushinteger(L, c.nrows);
  lua_setfield(L, -2, "nrows");
  dp_image_csv_free(&c);
  return 1;
}

/* permutation(n, seed) -> a Lua array holding 1..n shuffled by Philox with
 * its own seed (the global generator is left alone, so every rank makes the
 * same train/valid/test split whatever it drew before). */
static int l_permutation(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  uint64_t seed = (uint64_t)luaL_checkinteger(L, 2);
  if (n < 0 || n > (1 << 30)) return luaL_argerror(L, 1, "expected 0 <= n <= 2^30");
  int64_t *p = dp_xmalloc((size_t)(n ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = i + 1;
  for (int64_t i = n - 1; i > 0; i--) {
    dp_philox4 r = dp_philox(seed, (uint64_t)i);
    int64_t j = (int64_t)((((uint64_t)r.v[0] << 32) | r.v[1]) % (uint64_t)(i + 1));
    int64_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  lua_createtable(L, (int)n, 0);
  for (int64_t i = 0; i < n; i++) {
    lua_pushinteger(L, p[i]);
    lua_rawseti(L, -2, i + 1);
  }
  free(p);
  return 1;
}

/* ---- transforms ---- */

static double num_field(lua_State *L, int idx, const char *key, int pos, const char *name) {
  lua_getfield(L, idx, key);
  int ok;
  double v = lua_tonumberx(L, -1, &ok);
  if (!ok)
    luaL_error(L, "transform %d (%s): field '%s' must be a number, got %s", pos, name, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

static int int_field(lua_State *L, int idx, const char *key, int pos, const char *name) {
  lua_getfield(L, idx, key);
  int ok;
  lua_Integer v = lua_tointegerx(L, -1, &ok);
  if (!ok || v < 0 || v > (1 << 20))
    luaL_error(L, "transform %d (%s): field '%s' must be an integer size in 0..2^20, got %s", pos, name, key,
               luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
  return (int)v;
}

/* mean/std lists of a normalize step; returns the count. */
static int num_list(lua_State *L, int idx, const char *key, double *out, int pos) {
  if (lua_getfield(L, idx, key) != LUA_TTABLE)
    luaL_error(L, "transform %d (Normalize): '%s' must be a list of numbers", pos, key);
  int n = (int)luaL_len(L, -1);
  if (n < 1 || n > 4) luaL_error(L, "transform %d (Normalize): '%s' has %d entries (expected 1 to 4)", pos, key, n);
  for (int i = 0; i < n; i++) {
    lua_geti(L, -1, i + 1);
    int ok;
    out[i] = lua_tonumberx(L, -1, &ok);
    if (!ok) luaL_error(L, "transform %d (Normalize): %s[%d] must be a number", pos, key, i + 1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

static void read_pipeline(lua_State *L, int idx, dp_img_pipeline *p) {
  idx = lua_absindex(L, idx);
  luaL_checktype(L, idx, LUA_TTABLE);
  memset(p, 0, sizeof *p);
  int n = (int)luaL_len(L, idx);
  if (n > DP_IMG_MAX_STEPS) luaL_error(L, "transforms: %d given, at most %d are supported", n, DP_IMG_MAX_STEPS);
  for (int i = 0; i < n; i++) {
    int pos = i + 1;
    if (lua_geti(L, idx, pos) != LUA_TTABLE)
      luaL_error(L, "transform %d is a %s; expected a data.transforms object (transforms run in C, not as Lua code)",
                 pos, luaL_typename(L, -1));
    int t = lua_gettop(L);
    lua_getfield(L, t, "op");
    const char *op = lua_tostring(L, -1);
    dp_img_step *s = &p->step[i];
    if (!op) {
      luaL_error(L, "transform %d has no 'op' field; expected a data.transforms object", pos);
    } else if (strcmp(op, "resize") == 0) {
      s->op = DP_IMG_RESIZE;
      s->height = int_field(L, t, "height", pos, "Resize");
      s->width = int_field(L, t, "width", pos, "Resize");
    } else if (strcmp(op, "rotation") == 0) {
      s->op = DP_IMG_ROTATE;
      s->lo = num_field(L, t, "min", pos, "RandomRotation");
      s->hi = num_field(L, t, "max", pos, "RandomRotation");
    } else if (strcmp(op, "hflip") == 0) {
      s->op = DP_IMG_HFLIP;
      s->p = num_field(L, t, "p", pos, "RandomHorizontalFlip");
    } else if (strcmp(op, "to_tensor") == 0) {
      s->op = DP_IMG_TO_TENSOR;
    } else if (strcmp(op, "normalize") == 0) {
      s->op = DP_IMG_NORMALIZE;
      s->n = num_list(L, t, "mean", s->mean, pos);
      if (num_list(L, t, "std", s->std, pos) != s->n)
        luaL_error(L, "transform %d (Normalize): mean and std have different lengths", pos);
    } else {
      luaL_error(L, "transform %d: unknown op '%s' (expected resize, rotation, hflip, to_tensor or normalize)", pos,
                 op);
    }
    lua_pop(L, 2);
  }
  p->n = n;
}

/* apply(transforms, image [, {seed=, epoch=, draw=, item=}]) -> float32
 * [C, H, W]. Without a seed the randomness comes from the global generator
 * (one counter per call), so ddp.manual_seed makes it repeatable. */
static int l_apply(lua_State *L) {
  dp_img_pipeline p;
  read_pipeline(L, 1, &p);
  uint64_t seed = dp_rng_seed(), epoch = 0, draw = 0, item = 0;
  if (lua_istable(L, 3)) {
    static const char *const valid[] = {"seed", "epoch", "draw", "item", NULL};
    lt_check_keys(L, 3, "apply", valid);
    if (lua_getfield(L, 3, "seed") != LUA_TNIL) seed = (uint64_t)luaL_checkinteger(L, -1);
    else epoch = dp_rng_reserve(1);
    if (lua_getfield(L, 3, "epoch") != LUA_TNIL) epoch = (uint64_t)luaL_checkinteger(L, -1);
    if (lua_getfield(L, 3, "draw") != LUA_TNIL) draw = (uint64_t)luaL_checkinteger(L, -1);
    if (lua_getfield(L, 3, "item") != LUA_TNIL) item = (uint64_t)luaL_checkinteger(L, -1) - 1;
    lua_pop(L, 4);
  } else {
    epoch = dp_rng_reserve(1);
  }
  dp_tensor *keep;
  dp_image img = check_image_tensor(L, 2, &keep);
  if (dp_img_pipeline_check(&p, img.channels, false)) {
    dp_release(keep);
    return lt_error(L);
  }
  int64_t shape[3] = {img.channels, 0, 0};
  int oh, ow;
  for (int i = 0; i < p.n && (img.height == 0 || img.width == 0); i++)
    if (p.step[i].op == DP_IMG_RESIZE || p.step[i].op == DP_IMG_ROTATE) {
      dp_release(keep);
      return luaL_error(L, "transform %d (%s): the image is empty (%dx%d pixels), nothing to resample", i + 1,
                        dp_img_step_name(p.step[i].op), img.width, img.height);
    }
  dp_img_output_size(&p, img.height, img.width, &oh, &ow);
  shape[1] = oh, shape[2] = ow;
  dp_tensor *out = dp_empty(DP_F32, 3, shape, dp_cpu());
  if (out) {
    dp_img_scratch scr = {0};
    dp_img_apply(&p, &img, dp_img_rng_for(seed, epoch, draw, item), &scr, dp_data(out));
    dp_img_scratch_free(&scr);
  }
  dp_release(keep);
  return lt_push(L, out);
}

/* ---- the dataset userdata ---- */

typedef struct {
  dp_image_set *set;
} set_box;

static dp_image_set *check_set(lua_State *L, int idx) {
  set_box *b = luaL_checkudata(L, idx, IMAGE_SET_MT);
  if (!b->set) luaL_error(L, "image dataset: used after close()");
  return b->set;
}

/* Reads n strings or integers from the array field `key` of table idx into
 * a buffer owned by a userdata left on the stack (with the table, which
 * keeps the strings alive), so an error cannot leak it. */
static void *array_field(lua_State *L, int idx, const char *key, int64_t n, bool strings) {
  if (lua_getfield(L, idx, key) != LUA_TTABLE) luaL_error(L, "image dataset: '%s' must be a list", key);
  int t = lua_gettop(L);
  if ((int64_t)lt_list_len(L, t, "image dataset") != n)
    luaL_error(L, "image dataset: '%s' must have %d entries", key, (int)n);
  void *out = lua_newuserdatauv(L, (size_t)(n ? n : 1) * (strings ? sizeof(char *) : sizeof(int64_t)), 0);
  for (int64_t i = 0; i < n; i++) {
    lua_geti(L, t, i + 1);
    bool ok = strings ? lua_type(L, -1) == LUA_TSTRING : lua_isinteger(L, -1);
    if (!ok) luaL_error(L, "image dataset: %s[%d] must be %s", key, (int)i + 1, strings ? "a string" : "an integer");
    if (strings) ((const char **)out)[i] = lua_tostring(L, -1);
    else ((int64_t *)out)[i] = lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  return out;
}

static lua_Integer int_opt(lua_State *L, int idx, const char *key, lua_Integer dflt, bool int_sized) {
  lua_getfield(L, idx, key);
  int ok;
  lua_Integer v = lua_tointegerx(L, -1, &ok);
  if (!ok && !lua_isnil(L, -1)) luaL_error(L, "image dataset: '%s' must be an integer", key);
  if (ok && int_sized && (v < INT_MIN || v > INT_MAX))
    luaL_error(L, "image dataset: '%s' = %I is out of range", key, v);
  lua_pop(L, 1);
  return ok ? v : dflt;
}

/* dataset{csv=, paths=, labels=, rows=, lines=, channels=, transforms=,
 * seed=, num_workers=} (internal: csv_image.lua checks the user's options
 * and names them in its errors) */
static int l_dataset(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  dp_image_set_config cfg = {0};
  if (lua_getfield(L, 1, "csv") != LUA_TSTRING) luaL_error(L, "image dataset: 'csv' must be a string");
  cfg.csv = lua_tostring(L, -1);
  if (lua_getfield(L, 1, "paths") != LUA_TTABLE) luaL_error(L, "image dataset: 'paths' must be a list");
  cfg.n = lt_list_len(L, -1, "image dataset: 'paths'");
  dp_img_pipeline pipe;
  lua_getfield(L, 1, "transforms");
  read_pipeline(L, -1, &pipe);
  cfg.pipeline = &pipe;
  cfg.channels = (int)int_opt(L, 1, "channels", 3, true);
  cfg.seed = (uint64_t)int_opt(L, 1, "seed", 0, false);
  cfg.num_workers = (int)int_opt(L, 1, "num_workers", -1, true);
  cfg.paths = array_field(L, 1, "paths", cfg.n, true);
  cfg.labels = array_field(L, 1, "labels", cfg.n, false);
  cfg.rows = array_field(L, 1, "rows", cfg.n, false);
  cfg.lines = array_field(L, 1, "lines", cfg.n, false);
  set_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->set = NULL;
  luaL_setmetatable(L, IMAGE_SET_MT);
  b->set = dp_image_set_new(&cfg);
  if (!b->set) return lt_error(L);
  return 1;
}

/* A 1-based item position as 0-based; one below 1 is an error naming it
 * (math.mininteger - 1 would overflow). */
static int64_t pos0(lua_State *L, lua_Integer v, const char *what, int64_t i) {
  if (v < 1)
    luaL_error(L, "%s: index %I (position %I of the indices) is out of range: positions are 1-based", what, v,
               (lua_Integer)i + 1);
  return (int64_t)v - 1;
}

/* Indices: a Lua array of 1-based positions or an int64 tensor of them,
 * converted to 0-based in a userdata buffer (left on the stack). */
static int64_t *read_indices(lua_State *L, int idx, int64_t *n, const char *what) {
  dp_tensor *t = lt_test(L, idx);
  if (t) {
    if (t->dtype != DP_I64 || t->ndim != 1 || dp_dev(t).type != DP_CPU)
      luaL_error(L, "%s: indices must be a Lua array or a 1-d int64 cpu tensor", what);
    *n = t->shape[0];
    int64_t *out = lua_newuserdatauv(L, (size_t)(*n ? *n : 1) * sizeof *out, 0);
    const int64_t *src = dp_data(t);
    for (int64_t i = 0; i < *n; i++) out[i] = pos0(L, src[i * t->stride[0]], what, i);
    return out;
  }
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: expected a list of 1-based item positions, got %s", what, luaL_typename(L, idx));
  *n = lt_list_len(L, idx, what);
  int64_t *out = lua_newuserdatauv(L, (size_t)(*n ? *n : 1) * sizeof *out, 0);
  for (int64_t i = 0; i < *n; i++) {
    lua_geti(L, idx, i + 1);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok)
      luaL_error(L, "%s: indices[%d] must be an integer position, got %s", what, (int)i + 1,
                 luaL_tolstring(L, -1, NULL));
    out[i] = pos0(L, v, what, i);
    lua_pop(L, 1);
  }
  return out;
}

static int l_set_get_batch(lua_State *L) {
  dp_image_set *s = check_set(L, 1);
  int64_t n;
  int64_t *idx = read_indices(L, 2, &n, "get_batch");
  dp_tensor *x, *y;
  LT_CHECK(L, dp_image_set_get_batch(s, idx, n, &x, &y));
  lt_push(L, x);
  lt_push(L, y);
  return 2;
}

static int l_set_prefetch(lua_State *L) {
  dp_image_set *s = check_set(L, 1);
  int64_t n;
  int64_t *idx = read_indices(L, 2, &n, "prefetch");
  LT_CHECK(L, dp_image_set_prefetch(s, idx, n));
  return 0;
}

static int l_set_get(lua_State *L) {
  dp_image_set *s = check_set(L, 1);
  lua_Integer i = luaL_checkinteger(L, 2);
  dp_tensor *x;
  int64_t label;
  if (i < 1) return luaL_error(L, "get: index %I is out of range 1..%I", i, (lua_Integer)dp_image_set_len(s));
  LT_CHECK(L, dp_image_set_get_item(s, (int64_t)i - 1, &x, &label));
  lt_push(L, x);
  lua_pushinteger(L, label);
  return 2;
}

static int l_set_len(lua_State *L) {
  lua_pushinteger(L, dp_image_set_len(check_set(L, 1)));
  return 1;
}

static int l_set_set_epoch(lua_State *L) {
  dp_image_set *s = check_set(L, 1);
  lua_Integer e = luaL_checkinteger(L, 2);
  if (e < 0) return luaL_argerror(L, 2, "epoch must be >= 0");
  dp_image_set_set_epoch(s, (uint64_t)e);
  return 0;
}

static int l_set_info(lua_State *L) {
  dp_image_set *s = check_set(L, 1);
  int64_t shape[3];
  dp_image_set_item_shape(s, shape);
  dp_image_set_stats st = dp_image_set_get_stats(s);
  lua_createtable(L, 0, 5);
  lua_createtable(L, 3, 0);
  for (int i = 0; i < 3; i++) {
    lua_pushinteger(L, shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "item_shape");
  lua_pushinteger(L, dp_image_set_workers(s));
  lua_setfield(L, -2, "num_workers");
  lua_pushinteger(L, st.hits);
  lua_setfield(L, -2, "prefetch_hits");
  lua_pushinteger(L, st.misses);
  lua_setfield(L, -2, "prefetch_misses");
  lua_pushinteger(L, st.discarded);
  lua_setfield(L, -2, "prefetch_discarded");
  return 1;
}

/* close() / __gc / __close: joins the workers; later use is an error. */
static int l_set_close(lua_State *L) {
  set_box *b = luaL_checkudata(L, 1, IMAGE_SET_MT);
  dp_image_set_free(b->set);
  b->set = NULL;
  return 0;
}

void lt_open_image(lua_State *L, int module) {
  static const luaL_Reg set_methods[] = {
      {"get_batch", l_set_get_batch}, {"prefetch", l_set_prefetch}, {"get", l_set_get},     {"len", l_set_len},
      {"set_epoch", l_set_set_epoch}, {"info", l_set_info},         {"close", l_set_close}, {NULL, NULL}};
  luaL_newmetatable(L, IMAGE_SET_MT);
  luaL_newlib(L, set_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_set_close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_set_close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, l_set_len);
  lua_setfield(L, -2, "__len");
  lua_pop(L, 1);

  static const luaL_Reg funcs[] = {{"read", l_read},         {"write_png", l_write_png}, {"write_jpeg", l_write_jpeg},
                                   {"read_idx", l_read_idx}, {"read_csv", l_read_csv},   {"permutation", l_permutation},
                                   {"apply", l_apply},       {"dataset", l_dataset},     {NULL, NULL}};
  luaL_newlib(L, funcs);
  lua_setfield(L, module, "image");
}
