/* plane_gather and its gradient (backend.h): out [outer, oh, ow] =
 * x [outer, h, w] read through a row map ih [oh] and a column map iw [ow],
 * -1 in either giving `value` (the paddings of nn/resample.lua: reflect,
 * replicate, circular, constant and crops; nearest interpolation). One pass
 * each way where composing one index_select or cat per dim took two, and
 * two index_adds (or narrows) back.
 *
 * The column map is read once into runs: columns j.. where iw steps by +1
 * (a padding's middle: one memcpy a row), or all -1 (a constant border: one
 * fill). Maps of short runs (nearest upsampling repeats each column) are
 * gathered element by element instead, a column map of j / 2 (nearest by
 * 2) as each value stored twice, and a row the map repeats is a copy of the
 * one just written. The gradient zeroes gx and adds each gy row into the
 * source row its map names, run by run (a gathered column's repeats summed
 * first), rows in order, so repeated places (a replicate border) add up in
 * a fixed order; planes are split between threads, each plane written by
 * one. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "core/error.h"
#include "tensor/dtype_conv.h"

typedef struct {
  int64_t dst, src, len; /* src -1: a run of the fill value */
} run;

typedef struct {
  char *out;
  const char *x;
  int64_t *ih, *iw; /* 0-based, -1: the fill value (copies of the maps less base) */
  run *runs;
  int64_t n_runs, h, w, oh, ow;
  size_t es;
  char value[8]; /* the fill value in the output's dtype */
  bool gather;   /* short runs: element by element */
  bool twice;    /* iw[j] = j / 2 (nearest upsampling by 2): each column written twice */
} plane_ctx;

/* a map less base, each value checked against size (base - 1, the fill, allowed); NULL with an error naming the
 * first bad value and its position (from base) */
static int64_t *read_map(const char *op, const char *which, const dp_tensor *t, int64_t size, int64_t base) {
  int64_t n = dp_numel(t);
  const int64_t *m = dp_data(t);
  for (int64_t i = 0; i < n; i++)
    if (m[i] < base - 1 || m[i] - base >= size) { /* m[i] >= base - 1 first: no overflow */
      dp_error("%s: %s map value %" PRId64 " at position %" PRId64 " is out of range %" PRId64 "..%" PRId64 " (%" PRId64
               ": the fill value)",
               op, which, m[i], i + base, base - 1, size - 1 + base, base - 1);
      return NULL;
    }
  int64_t *r = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!r) {
    dp_error("%s: out of memory for a map of %" PRId64 " values", op, n);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) r[i] = m[i] - base;
  return r;
}

/* runs of iw; NULL with an error (out of memory) */
static run *make_runs(const int64_t *iw, int64_t ow, int64_t *n_runs, bool *has_fill) {
  run *r = malloc(sizeof(run) * (size_t)(ow ? ow : 1));
  if (!r) {
    dp_error("plane_gather: out of memory for %" PRId64 " runs", ow);
    return NULL;
  }
  int64_t n = 0;
  *has_fill = false;
  for (int64_t j = 0; j < ow; j++) {
    if (iw[j] < 0) *has_fill = true;
    if (n > 0 && ((iw[j] < 0 && r[n - 1].src < 0) ||
                  (iw[j] >= 0 && r[n - 1].src >= 0 && iw[j] == r[n - 1].src + r[n - 1].len))) {
      r[n - 1].len++;
      continue;
    }
    r[n++] = (run){j, iw[j] < 0 ? -1 : iw[j], 1};
  }
  *n_runs = n;
  return r;
}

#define FILL(T, o, n)                                                                                                  \
  do {                                                                                                                 \
    T v_;                                                                                                              \
    memcpy(&v_, c->value, sizeof v_);                                                                                  \
    for (int64_t k_ = 0; k_ < (n); k_++) ((T *)(void *)(o))[k_] = v_;                                                  \
  } while (0)
#define GATHER(T)                                                                                                      \
  {                                                                                                                    \
    T *o_ = (T *)(void *)orow;                                                                                         \
    const T *x_ = (const T *)(const void *)xrow;                                                                       \
    if (c->twice) {                                                                                                    \
      int64_t j_ = 0;                                                                                                  \
      for (; 2 * j_ + 1 < c->ow; j_++) o_[2 * j_] = x_[j_], o_[2 * j_ + 1] = x_[j_];                                   \
      if (2 * j_ < c->ow) o_[2 * j_] = x_[j_];                                                                         \
    } else {                                                                                                           \
      for (int64_t j_ = 0; j_ < c->ow; j_++) o_[j_] = x_[c->iw[j_]];                                                   \
    }                                                                                                                  \
  }

static void fill_bytes(const plane_ctx *c, char *o, int64_t n) {
  if (c->es == 4) FILL(uint32_t, o, n);
  else if (c->es == 8) FILL(uint64_t, o, n);
  else if (c->es == 2) FILL(uint16_t, o, n);
  else memset(o, (unsigned char)c->value[0], (size_t)n);
}

static void gather_planes(void *vctx, int64_t lo, int64_t hi) {
  const plane_ctx *c = vctx;
  size_t es = c->es;
  for (int64_t p = lo; p < hi; p++)
    for (int64_t i = 0; i < c->oh; i++) {
      char *orow = c->out + (size_t)((p * c->oh + i) * c->ow) * es;
      if (c->ih[i] < 0) {
        fill_bytes(c, orow, c->ow);
        continue;
      }
      if (i > 0 && c->ih[i] == c->ih[i - 1]) { /* a repeated row (replicate, nearest): the one just written */
        memcpy(orow, orow - (size_t)c->ow * es, (size_t)c->ow * es);
        continue;
      }
      const char *xrow = c->x + (size_t)((p * c->h + c->ih[i]) * c->w) * es;
      if (c->gather) { /* no -1 in iw (make_runs' caller) */
        if (es == 4) GATHER(uint32_t)
        else if (es == 8) GATHER(uint64_t)
        else if (es == 2) GATHER(uint16_t)
        else GATHER(uint8_t)
        continue;
      }
      if (es == 4) { /* float32: the runs inline (a row of a padded 64 x 64 plane is three short runs) */
        uint32_t v, *o = (uint32_t *)(void *)orow;
        const uint32_t *xs = (const uint32_t *)(const void *)xrow;
        memcpy(&v, c->value, sizeof v);
        for (int64_t k = 0; k < c->n_runs; k++) {
          const run *r = &c->runs[k];
          if (r->src < 0)
            for (int64_t q = 0; q < r->len; q++) o[r->dst + q] = v;
          else if (r->len >= 32) memcpy(o + r->dst, xs + r->src, (size_t)r->len * 4);
          else
            for (int64_t q = 0; q < r->len; q++) o[r->dst + q] = xs[r->src + q];
        }
        continue;
      }
      for (int64_t k = 0; k < c->n_runs; k++) {
        const run *r = &c->runs[k];
        if (r->src < 0) fill_bytes(c, orow + (size_t)r->dst * es, r->len);
        else memcpy(orow + (size_t)r->dst * es, xrow + (size_t)r->src * es, (size_t)r->len * es);
      }
    }
}
#undef GATHER
#undef FILL

/* gy's rows added into gx (zeroed) through the maps */
#define ADD_PLANES(T)                                                                                                  \
  for (int64_t p = lo; p < hi; p++)                                                                                    \
    for (int64_t i = 0; i < c->oh; i++) {                                                                              \
      if (c->ih[i] < 0) continue;                                                                                      \
      T *g = (T *)(void *)c->out + (p * c->h + c->ih[i]) * c->w;                                                       \
      const T *gy = (const T *)(const void *)c->x + (p * c->oh + i) * c->ow;                                           \
      if (c->twice) {                                                                                                  \
        int64_t j = 0;                                                                                                 \
        for (; 2 * j + 1 < c->ow; j++) g[j] += gy[2 * j] + gy[2 * j + 1];                                              \
        if (2 * j < c->ow) g[j] += gy[2 * j];                                                                          \
        continue;                                                                                                      \
      }                                                                                                                \
      if (c->gather) { /* a column's repeats summed before they reach g: no chain of stores to one place */            \
        for (int64_t j = 0; j < c->ow;) {                                                                              \
          int64_t at = c->iw[j];                                                                                       \
          T v = gy[j++];                                                                                               \
          for (; j < c->ow && c->iw[j] == at; j++) v += gy[j];                                                         \
          g[at] += v;                                                                                                  \
        }                                                                                                              \
        continue;                                                                                                      \
      }                                                                                                                \
      for (int64_t k = 0; k < c->n_runs; k++) {                                                                        \
        const run *r = &c->runs[k];                                                                                    \
        if (r->src < 0) continue;                                                                                      \
        T *gd = g + r->src;                                                                                            \
        const T *gs = gy + r->dst;                                                                                     \
        for (int64_t q = 0; q < r->len; q++) gd[q] += gs[q];                                                           \
      }                                                                                                                \
    }
static void add_planes(void *vctx, int64_t lo, int64_t hi) {
  const plane_ctx *c = vctx;
  if (c->es == 4) {
    ADD_PLANES(float)
  } else {
    ADD_PLANES(double)
  }
}
#undef ADD_PLANES

/* the planes: the product of the dims before the last two (the same for both tensors) */
static int64_t planes_of(const dp_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d + 2 < t->ndim; d++) n *= t->shape[d];
  return n;
}

static void release(plane_ctx *c) { free(c->ih), free(c->iw), free(c->runs); }

/* the context shared by both directions (big: the [.., h, w] tensor); false with an error (nothing held) */
static bool setup(plane_ctx *c, const char *op, const dp_tensor *big, const dp_tensor *ih, const dp_tensor *iw,
                  int64_t base) {
  c->h = big->shape[big->ndim - 2], c->w = big->shape[big->ndim - 1];
  c->oh = dp_numel(ih), c->ow = dp_numel(iw);
  c->es = dp_elsize(big);
  c->ih = read_map(op, "row", ih, c->h, base);
  c->iw = c->ih ? read_map(op, "column", iw, c->w, base) : NULL;
  bool has_fill = false;
  c->runs = c->iw ? make_runs(c->iw, c->ow, &c->n_runs, &has_fill) : NULL;
  if (!c->runs) {
    release(c);
    return false;
  }
  c->gather = !has_fill && c->n_runs * 4 > c->ow; /* runs shorter than 4 on average */
  c->twice = c->gather;
  for (int64_t j = 0; j < c->ow && c->twice; j++) c->twice = c->iw[j] == j / 2;
  return true;
}

int dp_cpu_plane_gather(dp_tensor *out, const dp_tensor *x, const dp_tensor *ih, const dp_tensor *iw, double value,
                        int64_t base) {
  plane_ctx c = {.out = dp_data(out), .x = dp_data(x)};
  if (!setup(&c, "plane_gather", x, ih, iw, base)) return -1;
  dp_store_d(c.value, out->dtype, value);
  int64_t planes = planes_of(out);
  if (planes > 0 && c.oh > 0 && c.ow > 0)
    dp_cpu_parallel_for(planes, DP_GRAIN_MEMORY / (c.oh * c.ow) + 1, 1, gather_planes, &c);
  release(&c);
  return 0;
}

int dp_cpu_plane_gather_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *ih, const dp_tensor *iw,
                                 int64_t base) {
  if ((gx->dtype != DP_F32 && gx->dtype != DP_F64) || gy->dtype != gx->dtype)
    return dp_error("plane_gather backward: expected float32 or float64 tensors of one dtype, got %s and %s",
                    dp_dtype_name(gx->dtype), dp_dtype_name(gy->dtype));
  plane_ctx c = {.out = dp_data(gx), .x = dp_data(gy)};
  if (!setup(&c, "plane_gather backward", gx, ih, iw, base)) return -1;
  memset(dp_data(gx), 0, (size_t)dp_numel(gx) * dp_elsize(gx));
  int64_t planes = planes_of(gy);
  if (planes > 0 && c.oh > 0 && c.ow > 0)
    dp_cpu_parallel_for(planes, DP_GRAIN_MEMORY / (c.oh * c.ow) + 1, 1, add_planes, &c);
  release(&c);
  return 0;
}
