/* index_select and its gradient along any dim without moving it (backend.h's
 * index_select_dim / index_add_dim): x contiguous seen as [outer, n, inner],
 * out [outer, k, inner] (out[o, j, :] = x[o, idx[j] - base, :]). Moving the
 * dim to the front took two strided copies of the whole tensor: along the
 * last dim of a [32, 64, 32, 32] float32 tensor, 80 ms against 7 along the
 * third (the interpolations and paddings of nn/resample.lua select along
 * the last two dims). Here a row of inner elements is one copy (inner = 1:
 * a typed gather along the row), the outer rows split between threads; the
 * gradient adds gy's rows into zeros, each outer row by one thread, so
 * repeated positions accumulate in index order.
 *
 * resample_dim / resample_dim_backward are the same walk with T weighted
 * taps an output position (F.interpolate's linear and bilinear: two):
 * out[o, j, :] = w[0, j] * x[o, p[0, j], :] + ... in tap order, PyTorch's
 * order of the sum. Composed from index_select, mul and add, a bilinear x2
 * upsampling of [8, 16, 64, 64] took 6.1 ms (PyTorch 3.0): six passes over
 * tensors up to the output's size where this is one per dim. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "core/error.h"

typedef struct {
  char *out;
  const char *x;
  const int64_t *pos; /* 0-based positions, checked */
  int64_t n, k, inner;
  size_t es;
} dim_ctx;

#define GATHER_ROW(T)                                                                                                  \
  for (int64_t o = lo; o < hi; o++) {                                                                                  \
    const T *xr = (const T *)(const void *)c->x + o * c->n;                                                            \
    T *orow = (T *)(void *)c->out + o * c->k;                                                                          \
    for (int64_t j = 0; j < c->k; j++) orow[j] = xr[c->pos[j]];                                                        \
  }

static void select_rows(void *vctx, int64_t lo, int64_t hi) {
  const dim_ctx *c = vctx;
  if (c->inner == 1 && c->es == 4) {
    GATHER_ROW(uint32_t)
  } else if (c->inner == 1 && c->es == 8) {
    GATHER_ROW(uint64_t)
  } else if (c->inner == 1 && c->es == 2) {
    GATHER_ROW(uint16_t)
  } else {
    size_t row = (size_t)c->inner * c->es;
    for (int64_t o = lo; o < hi; o++)
      for (int64_t j = 0; j < c->k; j++)
        memcpy(c->out + ((size_t)(o * c->k + j)) * row, c->x + ((size_t)(o * c->n + c->pos[j])) * row, row);
  }
}
#undef GATHER_ROW

#define ADD_ROWS(T)                                                                                                    \
  for (int64_t o = lo; o < hi; o++) {                                                                                  \
    T *g = (T *)(void *)c->out + o * c->n * c->inner;                                                                  \
    const T *gy = (const T *)(const void *)c->x + o * c->k * c->inner;                                                 \
    for (int64_t j = 0; j < c->k; j++) {                                                                               \
      T *dst = g + c->pos[j] * c->inner;                                                                               \
      const T *src = gy + j * c->inner;                                                                                \
      for (int64_t i = 0; i < c->inner; i++) dst[i] += src[i];                                                         \
    }                                                                                                                  \
  }

/* (out: gx [outer, n, inner], zeroed; x: gy [outer, k, inner]) */
static void add_rows(void *vctx, int64_t lo, int64_t hi) {
  const dim_ctx *c = vctx;
  if (c->es == 4) {
    ADD_ROWS(float)
  } else {
    ADD_ROWS(double)
  }
}
#undef ADD_ROWS

/* the positions idx - base, each checked against n; NULL with an error */
static int64_t *positions(const dp_tensor *idx, int64_t n, int64_t base, const char *op) {
  int64_t k = dp_numel(idx);
  const int64_t *ip = dp_data(idx);
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
  if (!pos) {
    dp_error("%s: out of memory for %" PRId64 " positions", op, k);
    return NULL;
  }
  for (int64_t j = 0; j < k; j++) {
    if (ip[j] < base || ip[j] - base >= n) { /* ip[j] >= base first: no overflow */
      dp_error("index %" PRId64 " at position %" PRId64 " is out of range %" PRId64 "..%" PRId64, ip[j], j + base, base,
               n - 1 + base);
      free(pos);
      return NULL;
    }
    pos[j] = ip[j] - base;
  }
  return pos;
}

int dp_cpu_index_select_dim(dp_tensor *out, const dp_tensor *x, const dp_tensor *idx, int64_t outer, int64_t n,
                            int64_t inner, int64_t base) {
  int64_t *pos = positions(idx, n, base, "index_select");
  if (!pos) return -1;
  int64_t k = dp_numel(idx);
  dim_ctx c = {dp_data(out), dp_data(x), pos, n, k, inner, dp_elsize(x)};
  if (outer > 0 && k > 0 && inner > 0)
    dp_cpu_parallel_for(outer, DP_GRAIN_MEMORY / (k * inner + 1) + 1, 1, select_rows, &c);
  free(pos);
  return 0;
}

int dp_cpu_index_add_dim(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, int64_t outer, int64_t n,
                         int64_t inner, int64_t base, bool accumulate) {
  if ((gx->dtype != DP_F32 && gx->dtype != DP_F64) || gy->dtype != gx->dtype)
    return dp_error("index_add_dim: expected float32 or float64 tensors of one dtype, got %s and %s",
                    dp_dtype_name(gx->dtype), dp_dtype_name(gy->dtype));
  int64_t *pos = positions(idx, n, base, "index_select backward");
  if (!pos) return -1;
  int64_t k = dp_numel(idx);
  if (!accumulate) memset(dp_data(gx), 0, (size_t)dp_numel(gx) * dp_elsize(gx));
  dim_ctx c = {dp_data(gx), dp_data(gy), pos, n, k, inner, dp_elsize(gx)};
  if (outer > 0 && k > 0 && inner > 0)
    dp_cpu_parallel_for(outer, DP_GRAIN_MEMORY / (k * inner + 1) + 1, 1, add_rows, &c);
  free(pos);
  return 0;
}

/* ---- resample_dim: T weighted taps along a dim ---- */

typedef struct {
  char *out;
  const char *x;
  const int64_t *pos; /* [T, k] 0-based, checked */
  const char *w;      /* [T, k], x's dtype */
  int64_t n, k, inner, taps;
  /* the backward's inverse lists: position i's taps are entries from[i] .. from[i + 1] - 1 */
  int64_t *from, *tap_j, *tap_f;
} taps_ctx;

/* out[o, j, :] = sum_t w[t, j] * x[o, pos[t, j], :] (first tap assigned, the rest added, in tap order) */
#define RESAMPLE_ROWS(T)                                                                                               \
  {                                                                                                                    \
    const T *w = (const T *)(const void *)c->w;                                                                        \
    const int64_t k = c->k, inner = c->inner;                                                                          \
    for (int64_t o = lo; o < hi; o++) {                                                                                \
      const T *xo = (const T *)(const void *)c->x + o * c->n * inner;                                                  \
      T *oo = (T *)(void *)c->out + o * k * inner;                                                                     \
      if (inner == 1 && c->taps == 2) { /* the gather along the last dim */                                            \
        for (int64_t j = 0; j < k; j++) oo[j] = xo[c->pos[j]] * w[j] + xo[c->pos[k + j]] * w[k + j];                   \
        continue;                                                                                                      \
      }                                                                                                                \
      for (int64_t j = 0; j < k; j++) {                                                                                \
        T *dst = oo + j * inner;                                                                                       \
        const T *a = xo + c->pos[j] * inner, wa = w[j];                                                                \
        if (c->taps == 2) { /* one pass over the output row */                                                         \
          const T *b = xo + c->pos[k + j] * inner, wb = w[k + j];                                                      \
          for (int64_t i = 0; i < inner; i++) dst[i] = a[i] * wa + b[i] * wb;                                          \
          continue;                                                                                                    \
        }                                                                                                              \
        for (int64_t i = 0; i < inner; i++) dst[i] = a[i] * wa;                                                        \
        for (int64_t t = 1; t < c->taps; t++) {                                                                        \
          const T *b = xo + c->pos[t * k + j] * inner, wb = w[t * k + j];                                              \
          for (int64_t i = 0; i < inner; i++) dst[i] += b[i] * wb;                                                     \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }

/* gx[o, i, :] = sum over the taps (t, j) with pos[t, j] = i, in (j, t) order, of w[t, j] * gy[o, j, :]: each
 * position's taps listed once per call (from[i] .. from[i + 1] in tap_j / tap_f, the flat index t * k + j), so a
 * row of gx is written once, its sum in registers. Scattering each gy row into gx instead chained every add
 * through memory (an upsampling's neighbouring outputs share a source): 3x slower along the last dim. */
#define RESAMPLE_BACK_ROWS(T)                                                                                          \
  {                                                                                                                    \
    const T *w = (const T *)(const void *)c->w;                                                                        \
    const int64_t k = c->k, n = c->n, inner = c->inner;                                                                \
    for (int64_t o = lo; o < hi; o++) {                                                                                \
      T *go = (T *)(void *)c->out + o * n * inner;                                                                     \
      const T *gyo = (const T *)(const void *)c->x + o * k * inner;                                                    \
      if (inner == 1) {                                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                                              \
          T acc = 0;                                                                                                   \
          for (int64_t e = c->from[i]; e < c->from[i + 1]; e++) acc += gyo[c->tap_j[e]] * w[c->tap_f[e]];              \
          go[i] = acc;                                                                                                 \
        }                                                                                                              \
        continue;                                                                                                      \
      }                                                                                                                \
      for (int64_t i = 0; i < n; i++) {                                                                                \
        T *dst = go + i * inner;                                                                                       \
        int64_t e = c->from[i], end = c->from[i + 1];                                                                  \
        if (e == end) {                                                                                                \
          memset(dst, 0, sizeof(T) * (size_t)inner);                                                                   \
          continue;                                                                                                    \
        }                                                                                                              \
        const T *src = gyo + c->tap_j[e] * inner, wt = w[c->tap_f[e]];                                                 \
        for (int64_t q = 0; q < inner; q++) dst[q] = (T)0 + src[q] * wt;                                               \
        for (e++; e < end; e++) {                                                                                      \
          const T *s2 = gyo + c->tap_j[e] * inner, w2 = w[c->tap_f[e]];                                                \
          for (int64_t q = 0; q < inner; q++) dst[q] += s2[q] * w2;                                                    \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }

static void resample_rows_f32(void *vctx, int64_t lo, int64_t hi) {
  const taps_ctx *c = vctx;
  RESAMPLE_ROWS(float)
}
static void resample_rows_f64(void *vctx, int64_t lo, int64_t hi) {
  const taps_ctx *c = vctx;
  RESAMPLE_ROWS(double)
}
static void resample_back_rows_f32(void *vctx, int64_t lo, int64_t hi) {
  const taps_ctx *c = vctx;
  RESAMPLE_BACK_ROWS(float)
}
static void resample_back_rows_f64(void *vctx, int64_t lo, int64_t hi) {
  const taps_ctx *c = vctx;
  RESAMPLE_BACK_ROWS(double)
}
#undef RESAMPLE_ROWS
#undef RESAMPLE_BACK_ROWS

/* the checked context of a resample call (a: out or gx, b: x or gy); -1 with an error */
static int resample_ctx(taps_ctx *c, const char *op, dp_tensor *a, const dp_tensor *b, const dp_tensor *idx,
                        const dp_tensor *w, int64_t n, int64_t inner, int64_t base) {
  if ((b->dtype != DP_F32 && b->dtype != DP_F64) || a->dtype != b->dtype || w->dtype != b->dtype)
    return dp_error("%s: expected float32 or float64 tensors of one dtype, got %s, %s and weights %s", op,
                    dp_dtype_name(a->dtype), dp_dtype_name(b->dtype), dp_dtype_name(w->dtype));
  if (idx->ndim != 2 || w->ndim != 2 || idx->shape[0] != w->shape[0] || idx->shape[1] != w->shape[1] ||
      idx->shape[0] < 1)
    return dp_error("%s: expected positions and weights of one shape [taps >= 1, k], got %d-d and %d-d tensors", op,
                    idx->ndim, w->ndim);
  int64_t *pos = positions(idx, n, base, op);
  if (!pos) return -1;
  *c = (taps_ctx){dp_data(a), dp_data(b), pos, dp_data(w), n, idx->shape[1], inner, idx->shape[0], NULL, NULL, NULL};
  return 0;
}

int dp_cpu_resample_dim(dp_tensor *out, const dp_tensor *x, const dp_tensor *idx, const dp_tensor *w, int64_t outer,
                        int64_t n, int64_t inner, int64_t base) {
  taps_ctx c;
  if (resample_ctx(&c, "resample", out, x, idx, w, n, inner, base)) return -1;
  if (outer > 0 && c.k > 0 && inner > 0)
    dp_cpu_parallel_for(outer, DP_GRAIN_MEMORY / (c.k * inner * c.taps + 1) + 1, 1,
                        x->dtype == DP_F32 ? resample_rows_f32 : resample_rows_f64, &c);
  free((void *)c.pos);
  return 0;
}

int dp_cpu_resample_dim_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_tensor *w,
                                 int64_t outer, int64_t n, int64_t inner, int64_t base) {
  taps_ctx c;
  if (resample_ctx(&c, "resample backward", gx, gy, idx, w, n, inner, base)) return -1;
  int64_t m = c.taps * c.k; /* taps in all */
  c.from = calloc((size_t)n + 1, sizeof(int64_t));
  c.tap_j = malloc(sizeof(int64_t) * (size_t)(m ? m : 1));
  c.tap_f = malloc(sizeof(int64_t) * (size_t)(m ? m : 1));
  if (!c.from || !c.tap_j || !c.tap_f) {
    free(c.from), free(c.tap_j), free(c.tap_f), free((void *)c.pos);
    return dp_error("resample backward: out of memory for the lists of %" PRId64 " taps", m);
  }
  for (int64_t f = 0; f < m; f++) c.from[c.pos[f] + 1]++;
  for (int64_t i = 0; i < n; i++) c.from[i + 1] += c.from[i];
  int64_t *fill = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!fill) {
    free(c.from), free(c.tap_j), free(c.tap_f), free((void *)c.pos);
    return dp_error("resample backward: out of memory for %" PRId64 " positions", n);
  }
  memcpy(fill, c.from, sizeof(int64_t) * (size_t)n);
  for (int64_t j = 0; j < c.k; j++) /* (j, t) order: each list in the order the taps were summed forward */
    for (int64_t t = 0; t < c.taps; t++) {
      int64_t e = fill[c.pos[t * c.k + j]]++;
      c.tap_j[e] = j, c.tap_f[e] = t * c.k + j;
    }
  free(fill);
  if (outer > 0 && n > 0 && inner > 0)
    dp_cpu_parallel_for(outer, DP_GRAIN_MEMORY / (n * inner + m + 1) + 1, 1,
                        gy->dtype == DP_F32 ? resample_back_rows_f32 : resample_back_rows_f64, &c);
  free(c.from), free(c.tap_j), free(c.tap_f), free((void *)c.pos);
  return 0;
}
