/* CPU kernels for 2-d sliding windows: im2col / col2im (convolution runs
 * as a GEMM over the column matrix) and max / average pooling.
 *
 * All tensors are contiguous NCHW (the op layer guarantees it). float32 has
 * dedicated loops (rows copied with memcpy where the stride is 1; im2col,
 * a copy, serves bfloat16 and float16 too); every other dtype goes through
 * the double reference path, which evaluates each
 * window element by element with explicit bounds checks so the specs can
 * hold the fast path against it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/scalar_math.h"
#include "tensor/storage.h"

#define LD(t, p, i) dp_load_d((const char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype)
#define ST(t, p, i, v) dp_store_d((char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype, (v))

/* Output columns [lo, hi) whose input column ox * sw - pw + kj * dw is
 * inside the image: the rest read padding. */
static void valid_cols(const dp_window2d *g, int64_t kj, int64_t *lo, int64_t *hi) {
  int64_t off = kj * g->dw;
  int64_t a = dp_ceil_div(g->pw - off, g->sw), b = dp_ceil_div(g->w + g->pw - off, g->sw);
  *lo = a < 0 ? 0 : a > g->ow ? g->ow : a;
  *hi = b < *lo ? *lo : b > g->ow ? g->ow : b;
}

/* ---- im2col: cols[n, (c*kh + ki)*kw + kj, oy*ow + ox] = x[n, c, iy, ix] ---- */

/* A copy, so one loop serves every 2- and 4-byte dtype: float32, and
 * bfloat16 / float16 (autocast's) bit for bit; padding is all-zero bits,
 * which is +0 in each. */
static void im2col_bits(char *cols, const char *x, const dp_window2d *g, int64_t nb, size_t es) {
  int64_t L = g->oh * g->ow, plane = g->h * g->w, kk = g->kh * g->kw;
  for (int64_t n = 0; n < nb; n++)
    for (int64_t c = 0; c < g->c; c++) {
      const char *xp = x + (size_t)((n * g->c + c) * plane) * es;
      for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) {
          char *row = cols + (size_t)(((n * g->c + c) * kk + ki * g->kw + kj) * L) * es;
          int64_t lo, hi;
          valid_cols(g, kj, &lo, &hi);
          for (int64_t oy = 0; oy < g->oh; oy++) {
            char *r = row + (size_t)(oy * g->ow) * es;
            int64_t iy = oy * g->sh - g->ph + ki * g->dh;
            if (iy < 0 || iy >= g->h) {
              memset(r, 0, es * (size_t)g->ow);
              continue;
            }
            /* src + ox * sw * es is column ox (the offset may point before the row: only [lo, hi) is read) */
            int64_t first = iy * g->w - g->pw + kj * g->dw;
            memset(r, 0, es * (size_t)lo);
            if (g->sw == 1) memcpy(r + (size_t)lo * es, xp + (size_t)(first + lo) * es, es * (size_t)(hi - lo));
            else if (es == 4)
              for (int64_t ox = lo; ox < hi; ox++) ((float *)r)[ox] = ((const float *)xp)[first + ox * g->sw];
            else
              for (int64_t ox = lo; ox < hi; ox++) ((uint16_t *)r)[ox] = ((const uint16_t *)xp)[first + ox * g->sw];
            memset(r + (size_t)hi * es, 0, es * (size_t)(g->ow - hi));
          }
        }
    }
}

int dp_cpu_im2col(dp_tensor *cols, const dp_tensor *x, const dp_window2d *g, int64_t n0, int64_t nb) {
  int64_t plane = g->h * g->w, img = g->c * plane;
  if (x->dtype == cols->dtype && (x->dtype == DP_F32 || x->dtype == DP_BF16 || x->dtype == DP_F16)) {
    size_t es = dp_elsize(x);
    im2col_bits(dp_data(cols), (const char *)dp_data(x) + (size_t)(n0 * img) * es, g, nb, es);
    return 0;
  }
  const char *xp = dp_data(x);
  char *cp = dp_data(cols);
  int64_t k = 0;
  for (int64_t n = n0; n < n0 + nb; n++)
    for (int64_t c = 0; c < g->c; c++)
      for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++)
          for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++, k++) {
              int64_t iy = oy * g->sh - g->ph + ki * g->dh, ix = ox * g->sw - g->pw + kj * g->dw;
              bool inside = iy >= 0 && iy < g->h && ix >= 0 && ix < g->w;
              ST(cols, cp, k, inside ? LD(x, xp, n * img + c * plane + iy * g->w + ix) : 0.0);
            }
  return 0;
}

/* ---- col2im: the adjoint, accumulating into gx ---- */

static void col2im_f32(float *gx, const float *cols, const dp_window2d *g, int64_t nb) {
  int64_t L = g->oh * g->ow, plane = g->h * g->w, kk = g->kh * g->kw;
  for (int64_t n = 0; n < nb; n++)
    for (int64_t c = 0; c < g->c; c++) {
      float *gp = gx + (n * g->c + c) * plane;
      for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) {
          const float *row = cols + ((n * g->c + c) * kk + ki * g->kw + kj) * L;
          int64_t lo, hi;
          valid_cols(g, kj, &lo, &hi);
          for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t iy = oy * g->sh - g->ph + ki * g->dh;
            if (iy < 0 || iy >= g->h) continue;
            const float *r = row + oy * g->ow;
            float *dst = gp + iy * g->w - g->pw + kj * g->dw;
            if (g->sw == 1)
              for (int64_t ox = lo; ox < hi; ox++) dst[ox] += r[ox];
            else
              for (int64_t ox = lo; ox < hi; ox++) dst[ox * g->sw] += r[ox];
          }
        }
    }
}

/* bfloat16 / float16 (autocast's): an image at a time, its gradient and
 * columns widened to float32, the float32 loop, one rounding per element
 * (instead of one per overlapping window) */
static int col2im_half(dp_tensor *gx, const dp_tensor *cols, const dp_window2d *g, int64_t n0, int64_t nb) {
  int64_t plane = g->h * g->w, img = g->c * plane, ncol = g->c * g->kh * g->kw * g->oh * g->ow;
  size_t bytes = sizeof(float) * (size_t)(img + ncol);
  float *buf = dp_cpu_alloc(bytes ? bytes : 4);
  if (!buf) return dp_error("col2im: out of memory for a %s image's float32 copy", dp_dtype_name(gx->dtype));
  const dp_cpu_vec *v = dp_cpu_vec_get();
  uint16_t *gp = (uint16_t *)dp_data(gx) + n0 * img;
  const uint16_t *cp = dp_data(cols);
  for (int64_t n = 0; n < nb; n++) {
    v->cast(buf, DP_F32, gp + n * img, gx->dtype, img);
    v->cast(buf + img, DP_F32, cp + n * ncol, cols->dtype, ncol);
    col2im_f32(buf, buf + img, g, 1);
    v->cast(gp + n * img, gx->dtype, buf, DP_F32, img);
  }
  dp_cpu_free(buf, bytes ? bytes : 4);
  return 0;
}

int dp_cpu_col2im(dp_tensor *gx, const dp_tensor *cols, const dp_window2d *g, int64_t n0, int64_t nb) {
  int64_t plane = g->h * g->w, img = g->c * plane;
  if (gx->dtype == DP_F32 && cols->dtype == DP_F32) {
    col2im_f32((float *)dp_data(gx) + n0 * img, dp_data(cols), g, nb);
    return 0;
  }
  if (gx->dtype == cols->dtype && (gx->dtype == DP_BF16 || gx->dtype == DP_F16))
    return col2im_half(gx, cols, g, n0, nb);
  char *gp = dp_data(gx);
  const char *cp = dp_data(cols);
  int64_t k = 0;
  for (int64_t n = n0; n < n0 + nb; n++)
    for (int64_t c = 0; c < g->c; c++)
      for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++)
          for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++, k++) {
              int64_t iy = oy * g->sh - g->ph + ki * g->dh, ix = ox * g->sw - g->pw + kj * g->dw;
              if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
              int64_t e = n * img + c * plane + iy * g->w + ix;
              ST(gx, gp, e, LD(gx, gp, e) + LD(cols, cp, k));
            }
  return 0;
}

/* ---- max pooling: idx holds the winner's position iy * w + ix in its
 * plane; NaN wins (propagates; the last NaN of the window, as PyTorch's
 * `val > max || isnan(val)`); the first maximum wins ties ---- */

static int64_t window_max_ref(const dp_tensor *x, const char *p, int64_t w, int64_t y0, int64_t y1, int64_t x0,
                              int64_t x1, double *m) {
  int64_t best = y0 * w + x0;
  double bv = -INFINITY;
  for (int64_t iy = y0; iy < y1; iy++)
    for (int64_t ix = x0; ix < x1; ix++) {
      double v = LD(x, p, iy * w + ix);
      if (v > bv || isnan(v)) bv = v, best = iy * w + ix;
    }
  *m = bv;
  return best;
}

/* float32 pooling: planes split over the threads, each plane one call of
 * the vector kernels */
typedef struct {
  const dp_window2d *g;
  float *y;
  int64_t *idx;
  const float *x;
} pool_ctx;

#define POOL_GEOM(g) (g)->h, (g)->w, (g)->oh, (g)->ow, (g)->kh, (g)->kw, (g)->sh, (g)->sw, (g)->ph, (g)->pw
#define AVG_GEOM(g) POOL_GEOM(g), (g)->divisor

static void max_pool_planes(void *vctx, int64_t lo, int64_t hi) {
  const pool_ctx *k = vctx;
  int64_t plane = k->g->h * k->g->w, L = k->g->oh * k->g->ow;
  for (int64_t pl = lo; pl < hi; pl++)
    dp_cpu_vec_get()->max_pool_plane(k->y + pl * L, k->idx + pl * L, k->x + pl * plane, POOL_GEOM(k->g));
}
static void avg_pool_planes(void *vctx, int64_t lo, int64_t hi) {
  const pool_ctx *k = vctx;
  int64_t plane = k->g->h * k->g->w, L = k->g->oh * k->g->ow;
  for (int64_t pl = lo; pl < hi; pl++)
    dp_cpu_vec_get()->avg_pool_plane(k->y + pl * L, k->x + pl * plane, AVG_GEOM(k->g));
}
/* here y is gx (zeroed) and x is gy */
static void avg_pool_bwd_planes(void *vctx, int64_t lo, int64_t hi) {
  const pool_ctx *k = vctx;
  int64_t plane = k->g->h * k->g->w, L = k->g->oh * k->g->ow;
  for (int64_t pl = lo; pl < hi; pl++)
    dp_cpu_vec_get()->avg_pool_bwd_plane(k->y + pl * plane, k->x + pl * L, AVG_GEOM(k->g));
}
static int64_t pool_grain(const dp_window2d *g) { return DP_GRAIN_MEMORY / (g->h * g->w + 1) + 1; }

/* bfloat16 planes (autocast's activations: a bfloat16 convolution's output
 * through ReLU) run the float32 kernels: each plane widened into a worker's
 * scratch, its
 * output rounded once (max pooling's values are exact; the gradients sum in
 * float32, then round). */
enum { HP_MAX, HP_AVG, HP_MAX_BWD, HP_AVG_BWD };
typedef struct {
  const dp_window2d *g;
  int kind;
  uint16_t *out;
  const uint16_t *in;
  int64_t *idx; /* HP_MAX: written; HP_MAX_BWD: read */
  int failed;   /* atomic: 1 out of memory, 2 a saved index outside its plane */
} half_pool_ctx;

static void half_pool_planes(void *vctx, int64_t lo, int64_t hi) {
  half_pool_ctx *k = vctx;
  const dp_window2d *g = k->g;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  int64_t plane = g->h * g->w, L = g->oh * g->ow;
  bool bwd = k->kind == HP_MAX_BWD || k->kind == HP_AVG_BWD;
  int64_t nin = bwd ? L : plane, nout = bwd ? plane : L;
  float *in = malloc(sizeof(float) * (size_t)(nin + nout + 1)), *out = in + nin;
  if (!in) {
    __atomic_store_n(&k->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t pl = lo; pl < hi; pl++) {
    v->cast(in, DP_F32, k->in + pl * nin, DP_BF16, nin);
    if (bwd) memset(out, 0, sizeof(float) * (size_t)nout);
    if (k->kind == HP_MAX) v->max_pool_plane(out, k->idx + pl * L, in, POOL_GEOM(g));
    else if (k->kind == HP_AVG) v->avg_pool_plane(out, in, AVG_GEOM(g));
    else if (k->kind == HP_AVG_BWD) v->avg_pool_bwd_plane(out, in, AVG_GEOM(g));
    else
      for (int64_t o = 0; o < L; o++) {
        int64_t e = k->idx[pl * L + o];
        if (e < 0 || e >= plane) {
          __atomic_store_n(&k->failed, 2, __ATOMIC_RELAXED);
          free(in);
          return;
        }
        out[e] += in[o];
      }
    v->cast(k->out + pl * nout, DP_BF16, out, DP_F32, nout);
  }
  free(in);
}

static int half_pool(int kind, dp_tensor *out, const dp_tensor *in, int64_t *idx, const dp_window2d *g) {
  half_pool_ctx k = {g, kind, dp_data(out), dp_data(in), idx, 0};
  dp_cpu_parallel_for(g->n * g->c, pool_grain(g), 1, half_pool_planes, &k);
  if (k.failed == 1) return dp_error("pooling: out of memory for a plane of %lld values", (long long)(g->h * g->w));
  if (k.failed == 2)
    return dp_error("max_pool2d backward: a saved index is outside its plane of %lld", (long long)(g->h * g->w));
  return 0;
}

int dp_cpu_max_pool2d(dp_tensor *y, dp_tensor *idx, const dp_tensor *x, const dp_window2d *g) {
  int64_t planes = g->n * g->c, plane = g->h * g->w, L = g->oh * g->ow;
  int64_t *ip = dp_data(idx);
  bool f32 = x->dtype == DP_F32 && y->dtype == DP_F32;
  if (x->dtype == DP_BF16 && y->dtype == DP_BF16) return half_pool(HP_MAX, y, x, ip, g);
  if (f32) {
    pool_ctx k = {g, dp_data(y), ip, dp_data(x)};
    dp_cpu_parallel_for(planes, pool_grain(g), 1, max_pool_planes, &k);
    return 0;
  }
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t oy = 0; oy < g->oh; oy++) {
      int64_t y0, y1;
      dp_window_range(oy, g->h, g->kh, g->sh, g->ph, &y0, &y1);
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t x0, x1, o = pl * L + oy * g->ow + ox;
        dp_window_range(ox, g->w, g->kw, g->sw, g->pw, &x0, &x1);
        double m;
        ip[o] = window_max_ref(x, xp + (size_t)(pl * plane) * dp_elsize(x), g->w, y0, y1, x0, x1, &m);
        ST(y, yp, o, m);
      }
    }
  return 0;
}

/* float32 planes of the max-pool backward, split over the threads: each
 * plane zeroed and its gradients scattered while it is in cache (one
 * memset of the whole input gradient first was a pass over memory of its
 * own, on one thread) */
typedef struct {
  const dp_window2d *g;
  float *gx;
  const float *gy;
  const int64_t *idx;
  int bad; /* atomic: a saved index outside its plane */
} pool_bwd_ctx;

static void max_pool_bwd_planes(void *vctx, int64_t lo, int64_t hi) {
  pool_bwd_ctx *k = vctx;
  int64_t plane = k->g->h * k->g->w, L = k->g->oh * k->g->ow;
  for (int64_t pl = lo; pl < hi; pl++) {
    float *gx = k->gx + pl * plane;
    const float *gy = k->gy + pl * L;
    const int64_t *ip = k->idx + pl * L;
    memset(gx, 0, (size_t)plane * sizeof(float));
    for (int64_t o = 0; o < L; o++) {
      int64_t e = ip[o];
      if (e < 0 || e >= plane) {
        __atomic_store_n(&k->bad, 1, __ATOMIC_RELAXED);
        return;
      }
      gx[e] += gy[o];
    }
  }
}

int dp_cpu_max_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_window2d *g) {
  int64_t planes = g->n * g->c, plane = g->h * g->w, L = g->oh * g->ow;
  const int64_t *ip = dp_data(idx);
  if (gx->dtype == DP_BF16 && gy->dtype == DP_BF16) return half_pool(HP_MAX_BWD, gx, gy, (int64_t *)ip, g);
  if (gx->dtype == DP_F32 && gy->dtype == DP_F32) {
    pool_bwd_ctx k = {g, dp_data(gx), dp_data(gy), ip, 0};
    dp_cpu_parallel_for(planes, pool_grain(g), 1, max_pool_bwd_planes, &k);
    return k.bad ? dp_error("max_pool2d backward: a saved index is outside its plane of %lld", (long long)plane) : 0;
  }
  memset(dp_data(gx), 0, (size_t)(planes * plane) * dp_elsize(gx));
  char *gp = dp_data(gx);
  const char *yp = dp_data(gy);
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t o = 0; o < L; o++) {
      int64_t k = ip[pl * L + o];
      if (k < 0 || k >= plane)
        return dp_error("max_pool2d backward: saved index %lld is outside the plane", (long long)k);
      int64_t e = pl * plane + k;
      ST(gx, gp, e, LD(gx, gp, e) + LD(gy, yp, pl * L + o));
    }
  return 0;
}

/* ---- average pooling (divisor: dp_window2d.divisor's mode) ---- */

int dp_cpu_avg_pool2d(dp_tensor *y, const dp_tensor *x, const dp_window2d *g) {
  int64_t planes = g->n * g->c, plane = g->h * g->w, L = g->oh * g->ow;
  bool f32 = x->dtype == DP_F32 && y->dtype == DP_F32;
  if (x->dtype == DP_BF16 && y->dtype == DP_BF16) return half_pool(HP_AVG, y, x, NULL, g);
  if (f32) {
    pool_ctx k = {g, dp_data(y), NULL, dp_data(x)};
    dp_cpu_parallel_for(planes, pool_grain(g), 1, avg_pool_planes, &k);
    return 0;
  }
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t oy = 0; oy < g->oh; oy++) {
      int64_t y0, y1;
      int64_t dh = dp_window_range(oy, g->h, g->kh, g->sh, g->ph, &y0, &y1);
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t x0, x1;
        int64_t dw = dp_window_range(ox, g->w, g->kw, g->sw, g->pw, &x0, &x1);
        int64_t o = pl * L + oy * g->ow + ox;
        double s = 0;
        for (int64_t iy = y0; iy < y1; iy++)
          for (int64_t ix = x0; ix < x1; ix++) s += LD(x, xp, pl * plane + iy * g->w + ix);
        ST(y, yp, o, s / (double)dp_avgpool_div(g->divisor, dh * dw, (y1 - y0) * (x1 - x0)));
      }
    }
  return 0;
}

int dp_cpu_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_window2d *g) {
  int64_t planes = g->n * g->c, plane = g->h * g->w, L = g->oh * g->ow;
  if (gx->dtype == DP_BF16 && gy->dtype == DP_BF16) return half_pool(HP_AVG_BWD, gx, gy, NULL, g);
  memset(dp_data(gx), 0, (size_t)(planes * plane) * dp_elsize(gx));
  bool f32 = gx->dtype == DP_F32 && gy->dtype == DP_F32;
  if (f32) {
    pool_ctx k = {g, dp_data(gx), NULL, dp_data(gy)};
    dp_cpu_parallel_for(planes, pool_grain(g), 1, avg_pool_bwd_planes, &k);
    return 0;
  }
  char *gp = dp_data(gx);
  const char *yp = dp_data(gy);
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t oy = 0; oy < g->oh; oy++) {
      int64_t y0, y1;
      int64_t dh = dp_window_range(oy, g->h, g->kh, g->sh, g->ph, &y0, &y1);
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t x0, x1;
        int64_t dw = dp_window_range(ox, g->w, g->kw, g->sw, g->pw, &x0, &x1);
        double v =
            LD(gy, yp, pl * L + oy * g->ow + ox) / (double)dp_avgpool_div(g->divisor, dh * dw, (y1 - y0) * (x1 - x0));
        for (int64_t iy = y0; iy < y1; iy++)
          for (int64_t ix = x0; ix < x1; ix++) {
            int64_t e = pl * plane + iy * g->w + ix;
            ST(gx, gp, e, LD(gx, gp, e) + v);
          }
      }
    }
  return 0;
}
