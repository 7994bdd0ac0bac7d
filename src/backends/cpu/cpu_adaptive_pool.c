/* Adaptive average pooling over [planes, h, w] on the CPU (backend.h's
 * adaptive_avg_pool2d and its backward; the windows are ops/model_math.h's
 * dp_adaptive_start / dp_adaptive_end, shared with CUDA). Sums in double,
 * the planes split among the pool's threads. Where the windows tile the
 * plane exactly (h and w multiples of the output's: 28 -> 7, 8 -> 1) each
 * input has one output, so the backward is a spread of gy / area over its
 * window; the general backward sums, for each input, the outputs whose
 * windows hold it (neighbouring windows may overlap) in output order, as
 * the CUDA kernel does. [32, 64, 28, 28] to 7 x 7, forward and backward:
 * 9.7 ms with one generic loop, PyTorch 3.4. Windows of 16 or more columns
 * sum each row (or the whole run of rows a full-width window covers) in
 * the vector unit's double lanes: a global pooling of [8, 256, 28, 28]
 * took 1.06 ms as one chain of dependent double additions, PyTorch 0.11. */
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/model_math.h"

#define LD(t, i) dp_load_d((const char *)dp_data(t) + (size_t)(i)*dp_elsize(t), (t)->dtype)
#define ST(t, i, v) dp_store_d((char *)dp_data(t) + (size_t)(i)*dp_elsize(t), (t)->dtype, (v))

typedef struct {
  dp_tensor *out;
  const dp_tensor *in;
  int64_t h, w, oh, ow;
  const int64_t *rng; /* the backward's ranges (below) */
  atomic_bool failed; /* a part ran out of memory */
} pool_ctx;

/* A plane's values as float32: in place, or bfloat16 widened into buf
 * (exact); NULL for other dtypes (the loops load each value as double). */
static const float *plane_f32(const dp_tensor *t, int64_t off, int64_t n, float *buf) {
  if (t->dtype == DP_F32) return (const float *)dp_data(t) + off;
  if (t->dtype != DP_BF16 || !buf) return NULL;
  dp_cpu_vec_get()->cast(buf, DP_F32, (const uint16_t *)dp_data(t) + off, DP_BF16, n);
  return buf;
}

static void forward_planes(void *vctx, int64_t lo, int64_t hi) {
  pool_ctx *c = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  const dp_tensor *x = c->in;
  int64_t h = c->h, w = c->w, oh = c->oh, ow = c->ow;
  float *buf = x->dtype == DP_BF16 ? malloc(sizeof(float) * (size_t)(h * w > 0 ? h * w : 1)) : NULL;
  if (x->dtype == DP_BF16 && !buf) {
    atomic_store(&c->failed, true);
    return;
  }
  if (oh == 1 && ow == 1 && x->dtype == DP_F32 && c->out->dtype == DP_F32) { /* global pooling: a plane a sum */
    const float *xp = dp_data(x);
    float *yp = dp_data(c->out);
    for (int64_t p = lo; p < hi; p++) yp[p] = (float)(v->sum(xp + p * h * w, h * w) / (double)(h * w));
    return;
  }
  for (int64_t p = lo; p < hi; p++) {
    const float *xp = plane_f32(x, p * h * w, h * w, buf);
    for (int64_t oy = 0; oy < oh; oy++) {
      int64_t y0 = dp_adaptive_start(oy, h, oh), y1 = dp_adaptive_end(oy, h, oh);
      for (int64_t ox = 0; ox < ow; ox++) {
        int64_t x0 = dp_adaptive_start(ox, w, ow), x1 = dp_adaptive_end(ox, w, ow);
        double s = 0;
        if (xp && x0 == 0 && x1 == w) { /* whole rows: one contiguous run (a global pooling's whole plane) */
          s = v->sum(xp + y0 * w, (y1 - y0) * w);
        } else if (xp && x1 - x0 >= 16) {
          for (int64_t iy = y0; iy < y1; iy++) s += v->sum(xp + iy * w + x0, x1 - x0);
        } else if (xp) {
          for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) s += xp[iy * w + ix];
        } else {
          for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) s += LD(x, (p * h + iy) * w + ix);
        }
        ST(c->out, (p * oh + oy) * ow + ox, s / (double)((y1 - y0) * (x1 - x0)));
      }
    }
  }
  free(buf);
}

int dp_cpu_adaptive_avg_pool2d(dp_tensor *y, const dp_tensor *x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                               int64_t ow) {
  pool_ctx c = {.out = y, .in = x, .h = h, .w = w, .oh = oh, .ow = ow};
  atomic_init(&c.failed, false);
  dp_cpu_parallel_for(planes, DP_GRAIN_MEMORY / (h * w + 1) + 1, 1, forward_planes, &c);
  return atomic_load(&c.failed)
             ? dp_error("adaptive_avg_pool2d: out of memory for a plane of %lld values", (long long)(h * w))
             : 0;
}

/* Exact tiles: each input of a kh x kw window gets its output's gy / area (float32 stores where gx is float32). */
static void backward_tiles(pool_ctx *c, int64_t lo, int64_t hi) {
  dp_tensor *gx = c->out;
  const dp_tensor *gy = c->in;
  int64_t h = c->h, w = c->w, oh = c->oh, ow = c->ow, kh = h / oh, kw = w / ow;
  double area = (double)(kh * kw);
  for (int64_t p = lo; p < hi; p++)
    for (int64_t iy = 0; iy < h; iy++) {
      int64_t oy = iy / kh, row = (p * h + iy) * w;
      for (int64_t ox = 0; ox < ow; ox++) {
        double q = LD(gy, (p * oh + oy) * ow + ox) / area;
        if (gx->dtype == DP_F32) {
          float *g = (float *)dp_data(gx) + row + ox * kw, qf = (float)q;
          for (int64_t k = 0; k < kw; k++) g[k] = qf;
        } else {
          for (int64_t k = 0; k < kw; k++) ST(gx, row + ox * kw + k, q);
        }
      }
    }
}

/* The general case. rng: for each input row and column its output range [lo, hi) (2h then 2w values), then the
 * windows' ends and sizes (ey: oh, ex: ow, ny: oh, nx: ow). q: the plane's gy / area, computed once per plane, so
 * the loop over the inputs is a sum of usually one term (a range search and divisions per element made a global
 * pooling's backward 17x its forward). */
static void backward_planes(void *vctx, int64_t lo, int64_t hi) {
  pool_ctx *c = vctx;
  int64_t h = c->h, w = c->w, oh = c->oh, ow = c->ow;
  if (h % oh == 0 && w % ow == 0) {
    backward_tiles(c, lo, hi);
    return;
  }
  dp_tensor *gx = c->out;
  const dp_tensor *gy = c->in;
  const int64_t *ry = c->rng, *rx = ry + 2 * h, *ey = rx + 2 * w, *ex = ey + oh, *ny = ex + ow, *nx = ny + oh;
  double *q = malloc(sizeof(double) * (size_t)(oh * ow > 0 ? oh * ow : 1));
  if (!q) {
    atomic_store(&c->failed, true);
    return;
  }
  for (int64_t p = lo; p < hi; p++) {
    for (int64_t oy = 0; oy < oh; oy++)
      for (int64_t ox = 0; ox < ow; ox++) q[oy * ow + ox] = LD(gy, (p * oh + oy) * ow + ox) / (double)(ny[oy] * nx[ox]);
    for (int64_t iy = 0; iy < h; iy++)
      for (int64_t ix = 0; ix < w; ix++) {
        double s = 0;
        for (int64_t oy = ry[2 * iy]; oy < ry[2 * iy + 1]; oy++) {
          if (iy >= ey[oy]) continue;
          for (int64_t ox = rx[2 * ix]; ox < rx[2 * ix + 1]; ox++)
            if (ix < ex[ox]) s += q[oy * ow + ox];
        }
        int64_t e = (p * h + iy) * w + ix;
        if (gx->dtype == DP_F32) ((float *)dp_data(gx))[e] = (float)s;
        else ST(gx, e, s);
      }
  }
  free(q);
}

int dp_cpu_adaptive_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, int64_t planes, int64_t h, int64_t w,
                                        int64_t oh, int64_t ow) {
  int64_t *rng = malloc(sizeof(int64_t) * (size_t)(2 * (h + w) + 2 * (oh + ow) + 1));
  if (!rng)
    return dp_error("adaptive_avg_pool2d backward: out of memory for a plane of %lld outputs", (long long)(oh * ow));
  int64_t *ry = rng, *rx = rng + 2 * h, *ey = rx + 2 * w, *ex = ey + oh, *ny = ex + ow, *nx = ny + oh;
  for (int64_t o = 0; o < oh; o++) ey[o] = dp_adaptive_end(o, h, oh), ny[o] = ey[o] - dp_adaptive_start(o, h, oh);
  for (int64_t o = 0; o < ow; o++) ex[o] = dp_adaptive_end(o, w, ow), nx[o] = ex[o] - dp_adaptive_start(o, w, ow);
  for (int64_t i = 0; i < h; i++) {
    int64_t o = i * oh / h;
    ry[2 * i] = o;
    while (o < oh && dp_adaptive_start(o, h, oh) <= i) o++;
    ry[2 * i + 1] = o;
  }
  for (int64_t i = 0; i < w; i++) {
    int64_t o = i * ow / w;
    rx[2 * i] = o;
    while (o < ow && dp_adaptive_start(o, w, ow) <= i) o++;
    rx[2 * i + 1] = o;
  }
  pool_ctx c = {.out = gx, .in = gy, .h = h, .w = w, .oh = oh, .ow = ow, .rng = rng};
  atomic_init(&c.failed, false);
  dp_cpu_parallel_for(planes, DP_GRAIN_MEMORY / (h * w + 1) + 1, 1, backward_planes, &c);
  free(rng);
  return atomic_load(&c.failed)
             ? dp_error("adaptive_avg_pool2d backward: out of memory for a plane of %lld outputs", (long long)(oh * ow))
             : 0;
}
