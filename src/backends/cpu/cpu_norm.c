/* CPU kernels for batch norm and layer norm.
 *
 * Batch norm sees x as [n, c, inner] (contiguous); every loop walks memory
 * in order (n, then c, then inner) and keeps per-channel double
 * accumulators, so [N, C] and [N, C, H, W] inputs both stream. Statistics
 * are two-pass (mean, then squared deviations) in double, which stays
 * accurate for large counts and offsets far from zero.
 *
 * Every element goes through the formulas of ops/scalar_math.h that the
 * CUDA kernels use too: batch norm's per-channel scale and shift (and the
 * three coefficients of its input gradient) computed in double once per
 * channel, layer norm's per-element apply and gradient. float32 tensors
 * run the float versions in the per-ISA vector kernels (cpu_vec.h), split
 * over channels (batch norm) or rows (layer norm) between threads (batch
 * norm's input gradient in double, see cpu_vec_nn_t.h); every other dtype
 * loads each element as double and runs the double versions. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/scalar_math.h"

#define LD(t, p, i) dp_load_d((const char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype)
#define ST(t, p, i, v) dp_store_d((char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype, (v))

/* Element k of an optional per-channel tensor, or `dflt` when absent. */
static double opt_at(const dp_tensor *t, int64_t k, double dflt) { return t ? LD(t, dp_data(t), k) : dflt; }

static double *scratch(int64_t n, int nvec) {
  double *p = calloc((size_t)(n > 0 ? n : 1) * (size_t)nvec, sizeof(double));
  if (!p) dp_error("out of memory for %lld normalisation accumulators", (long long)n * nvec);
  return p;
}

/* Sum over one contiguous row, in double. */
static double row_sum(const dp_tensor *t, const char *p, int64_t off, int64_t n) {
  if (t->dtype == DP_F32) return dp_cpu_vec_get()->sum((const float *)p + off, n);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += LD(t, p, off + i);
  return s;
}

/* Sum of (r[i] - m)^2 over one contiguous row, in double. */
static double row_sq_dev(const dp_tensor *t, const char *p, int64_t off, int64_t n, double m) {
  if (t->dtype == DP_F32) return dp_cpu_vec_get()->sq_dev((const float *)p + off, n, m);
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = LD(t, p, off + i) - m;
    s += d * d;
  }
  return s;
}

/* ---- batch norm ----
 * float32 work is split over channels (cpu_parallel.h); each channel's
 * loop walks its n planes of `inner` values in order. */

typedef struct {
  const dp_bn_args *a;
  dp_tensor *out;      /* y or gx */
  double *acc, *acc_x; /* per-channel results */
  const double *mu;
} bn_ctx;

static int64_t bn_grain(const dp_bn_args *a) {
  return DP_GRAIN_MEMORY / (a->n * a->inner > 0 ? a->n * a->inner : 1) + 1;
}

static void bn_stats_channels(void *vctx, int64_t lo, int64_t hi) {
  const bn_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const char *xp = dp_data(a->x);
  double cnt = (double)(a->n * a->inner);
  double rn = (double)a->inner;
  for (int64_t ch = lo; ch < hi; ch++) {
    /* one pass over memory: each row's mean and squared deviations (two
     * passes over the row, the second from cache), merged into the
     * channel's running ones (Chan et al.'s pairwise update, in double) */
    double m = 0, q = 0, seen = 0;
    for (int64_t i = 0; i < a->n; i++) {
      int64_t off = (i * a->c + ch) * a->inner;
      double rm, rq;
      if (a->x->dtype == DP_F32) dp_cpu_vec_get()->moments((const float *)xp + off, a->inner, &rm, &rq);
      else rm = row_sum(a->x, xp, off, a->inner) / rn, rq = row_sq_dev(a->x, xp, off, a->inner, rm);
      double d = rm - m, tot = seen + rn;
      m += d * (rn / tot);
      q += rq + d * d * (seen * rn / tot);
      seen = tot;
    }
    k->acc[ch] = m, k->acc_x[ch] = q / cnt;
  }
}

int dp_cpu_bn_stats(dp_tensor *mean, dp_tensor *var, const dp_bn_args *a) {
  const dp_tensor *x = a->x;
  int64_t n = a->n, c = a->c, inner = a->inner;
  double *acc = scratch(c, 2), *m = acc + c, cnt = (double)(n * inner);
  if (!acc) return -1;
  const char *xp = dp_data(x);
  if (inner > 1) { /* per channel, in parallel */
    bn_ctx k = {.a = a, .acc = m, .acc_x = acc};
    dp_cpu_parallel_for(c, bn_grain(a), 1, bn_stats_channels, &k);
  } else { /* [N, C]: column sums, row by row */
    for (int64_t i = 0; i < n; i++) {
      if (x->dtype == DP_F32) dp_cpu_vec_get()->col_acc(acc, (const float *)xp + i * c, c);
      else
        for (int64_t ch = 0; ch < c; ch++) acc[ch] += LD(x, xp, i * c + ch);
    }
    for (int64_t ch = 0; ch < c; ch++) m[ch] = acc[ch] / cnt, acc[ch] = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t ch = 0; ch < c; ch++) {
        double d = LD(x, xp, i * c + ch) - m[ch];
        acc[ch] += d * d;
      }
    for (int64_t ch = 0; ch < c; ch++) acc[ch] /= cnt;
  }
  for (int64_t ch = 0; ch < c; ch++) {
    ST(mean, dp_data(mean), ch, m[ch]);
    ST(var, dp_data(var), ch, acc[ch]);
  }
  free(acc);
  return 0;
}

static dp_bn_affine_k bn_affine_of(const dp_bn_args *a, int64_t ch) {
  return dp_bn_affine(LD(a->mean, dp_data(a->mean), ch), LD(a->invstd, dp_data(a->invstd), ch), opt_at(a->w, ch, 1.0),
                      opt_at(a->b, ch, 0.0));
}

static void bn_forward_channels(void *vctx, int64_t lo, int64_t hi) {
  const bn_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const float *x = dp_data(a->x);
  float *y = dp_data(k->out);
  for (int64_t ch = lo; ch < hi; ch++) {
    dp_bn_affine_k f = bn_affine_of(a, ch);
    for (int64_t i = 0; i < a->n; i++) {
      int64_t off = (i * a->c + ch) * a->inner;
      dp_cpu_vec_get()->affine(y + off, x + off, a->inner, (float)f.mean, (float)f.scale, (float)f.bias);
    }
  }
}

int dp_cpu_bn_forward(dp_tensor *y, const dp_bn_args *a) {
  const dp_tensor *x = a->x;
  int64_t n = a->n, c = a->c, inner = a->inner;
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
  if (x->dtype == DP_F32 && y->dtype == DP_F32 && inner > 1) {
    bn_ctx k = {.a = a, .out = y};
    dp_cpu_parallel_for(c, bn_grain(a), 1, bn_forward_channels, &k);
    return 0;
  }
  for (int64_t ch = 0; ch < c; ch++) {
    dp_bn_affine_k k = bn_affine_of(a, ch);
    float mu = (float)k.mean, scale = (float)k.scale, bias = (float)k.bias;
    for (int64_t i = 0; i < n; i++) {
      int64_t off = (i * c + ch) * inner;
      if (x->dtype == DP_F32 && y->dtype == DP_F32) {
        const float *xr = (const float *)xp + off;
        float *yr = (float *)yp + off;
        for (int64_t j = 0; j < inner; j++) yr[j] = dp_bn_apply_f(xr[j], mu, scale, bias);
      } else {
        for (int64_t j = 0; j < inner; j++)
          ST(y, yp, off + j, dp_bn_apply_d(LD(x, xp, off + j), k.mean, k.scale, k.bias));
      }
    }
  }
  return 0;
}

static void bn_reduce_channels(void *vctx, int64_t lo, int64_t hi) {
  const bn_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const float *g = dp_data(a->gy), *x = dp_data(a->x);
  for (int64_t ch = lo; ch < hi; ch++) {
    double s = 0, sx = 0;
    for (int64_t i = 0; i < a->n; i++) {
      int64_t off = (i * a->c + ch) * a->inner;
      double sg;
      sx += dp_cpu_vec_get()->dot_dev(g + off, x + off, a->inner, k->mu[ch], &sg);
      s += sg;
    }
    k->acc[ch] = s, k->acc_x[ch] = sx;
  }
}

int dp_cpu_bn_backward_reduce(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a) {
  const dp_tensor *gy = a->gy, *x = a->x, *mean = a->mean, *invstd = a->invstd;
  int64_t n = a->n, c = a->c, inner = a->inner;
  double *acc = scratch(c, 3), *acc_x = acc + c, *mu = acc + 2 * c;
  if (!acc) return -1;
  const char *gp = dp_data(gy), *xp = dp_data(x);
  bool f32 = gy->dtype == DP_F32 && x->dtype == DP_F32;
  for (int64_t ch = 0; ch < c; ch++) mu[ch] = LD(mean, dp_data(mean), ch);
  if (f32 && inner > 1) {
    bn_ctx k = {.a = a, .acc = acc, .acc_x = acc_x, .mu = mu};
    dp_cpu_parallel_for(c, bn_grain(a), 1, bn_reduce_channels, &k);
  } else {
    for (int64_t i = 0; i < n; i++)
      for (int64_t ch = 0; ch < c; ch++) {
        int64_t off = (i * c + ch) * inner;
        double s = 0, sx = 0, m = mu[ch];
        for (int64_t k = 0; k < inner; k++) {
          double g = LD(gy, gp, off + k);
          s += g, sx += g * (LD(x, xp, off + k) - m);
        }
        acc[ch] += s, acc_x[ch] += sx;
      }
  }
  for (int64_t ch = 0; ch < c; ch++) {
    ST(sum_dy, dp_data(sum_dy), ch, acc[ch]);
    ST(sum_dy_xhat, dp_data(sum_dy_xhat), ch, acc_x[ch] * LD(invstd, dp_data(invstd), ch));
  }
  free(acc);
  return 0;
}

static dp_bn_grad_k bn_grad_of(const dp_bn_args *a, int64_t ch) {
  return dp_bn_grad_coefs(opt_at(a->w, ch, 1.0), LD(a->invstd, dp_data(a->invstd), ch),
                          LD(a->mean, dp_data(a->mean), ch), LD(a->sum_dy, dp_data(a->sum_dy), ch) / a->count,
                          LD(a->sum_dy_xhat, dp_data(a->sum_dy_xhat), ch) / a->count);
}

static void bn_elemt_channels(void *vctx, int64_t lo, int64_t hi) {
  const bn_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const float *g = dp_data(a->gy), *x = dp_data(a->x);
  float *o = dp_data(k->out);
  for (int64_t ch = lo; ch < hi; ch++) {
    dp_bn_grad_k f = bn_grad_of(a, ch);
    for (int64_t i = 0; i < a->n; i++) {
      int64_t off = (i * a->c + ch) * a->inner;
      dp_cpu_vec_get()->bn_grad(o + off, g + off, x + off, a->inner, f.gy, f.x, f.c);
    }
  }
}

int dp_cpu_bn_backward_elemt(dp_tensor *gx, const dp_bn_args *a) {
  const dp_tensor *gy = a->gy, *x = a->x;
  int64_t n = a->n, c = a->c, inner = a->inner;
  const char *gp = dp_data(gy), *xp = dp_data(x);
  char *op = dp_data(gx);
  bool f32 = gx->dtype == DP_F32 && gy->dtype == DP_F32 && x->dtype == DP_F32;
  if (f32 && inner > 1) {
    bn_ctx k = {.a = a, .out = gx};
    dp_cpu_parallel_for(c, bn_grain(a), 1, bn_elemt_channels, &k);
    return 0;
  }
  for (int64_t ch = 0; ch < c; ch++) {
    dp_bn_grad_k k = bn_grad_of(a, ch);
    for (int64_t i = 0; i < n; i++) {
      int64_t off = (i * c + ch) * inner;
      if (f32) {
        /* in double, as the CUDA kernel: the three terms cancel (to the eps
         * term alone when a channel has two values), and float coefficients
         * left float32 results several ulps of the terms off */
        const float *g = (const float *)gp + off, *xr = (const float *)xp + off;
        float *o = (float *)op + off;
        for (int64_t j = 0; j < inner; j++) o[j] = (float)dp_bn_grad_apply_d(g[j], xr[j], k.gy, k.x, k.c);
      } else {
        for (int64_t j = 0; j < inner; j++)
          ST(gx, op, off + j, dp_bn_grad_apply_d(LD(gy, gp, off + j), LD(x, xp, off + j), k.gy, k.x, k.c));
      }
    }
  }
  return 0;
}

/* ---- layer norm: each row of `cols` values normalised on its own;
 * float32 rows split over the threads ---- */

typedef struct {
  const dp_ln_args *a;
  dp_tensor *y, *mean, *rstd; /* forward; backward: y is gx */
  double *gw, *gb;            /* backward: the column sums, merged under mu */
  pthread_mutex_t mu;
  bool failed;
} ln_ctx;

static int64_t ln_grain(int64_t cols) { return DP_GRAIN_MEMORY / (cols > 0 ? cols : 1) + 1; }

static void ln_rows(void *vctx, int64_t lo, int64_t hi) {
  ln_ctx *k = vctx;
  const dp_ln_args *a = k->a;
  int64_t cols = a->cols;
  const float *x = dp_data(a->x), *w = a->w ? dp_data(a->w) : NULL, *b = a->b ? dp_data(a->b) : NULL;
  float *y = dp_data(k->y);
  for (int64_t r = lo; r < hi; r++) {
    double m, is;
    dp_cpu_vec_get()->ln_row(y + r * cols, x + r * cols, w, b, cols, a->eps, &m, &is);
    ST(k->mean, dp_data(k->mean), r, m);
    ST(k->rstd, dp_data(k->rstd), r, is);
  }
}

int dp_cpu_layer_norm(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_ln_args *a) {
  const dp_tensor *x = a->x, *w = a->w, *b = a->b;
  int64_t rows = a->rows, cols = a->cols;
  double eps = a->eps;
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
  if (x->dtype == DP_F32 && y->dtype == DP_F32 && (!w || w->dtype == DP_F32) && (!b || b->dtype == DP_F32)) {
    ln_ctx k = {.a = a, .y = y, .mean = mean, .rstd = rstd};
    dp_cpu_parallel_for(rows, ln_grain(cols), 1, ln_rows, &k);
    return 0;
  }
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = r * cols;
    double m = row_sum(x, xp, off, cols) / (double)cols;
    double is = 1.0 / sqrt(row_sq_dev(x, xp, off, cols, m) / (double)cols + eps);
    ST(mean, dp_data(mean), r, m);
    ST(rstd, dp_data(rstd), r, is);
    for (int64_t j = 0; j < cols; j++)
      ST(y, yp, off + j, dp_ln_apply_d(LD(x, xp, off + j), m, is, opt_at(w, j, 1.0), opt_at(b, j, 0.0)));
  }
  return 0;
}

/* rows [lo, hi) of the backward, with column sums of their own merged at
 * the end */
static void ln_bwd_rows(void *vctx, int64_t lo, int64_t hi) {
  ln_ctx *k = vctx;
  const dp_ln_args *a = k->a;
  int64_t cols = a->cols;
  double *acc = calloc((size_t)(2 * cols + 1), sizeof(double));
  float *xhat = malloc(sizeof(float) * (size_t)(cols + 1));
  if (!acc || !xhat) {
    free(acc), free(xhat);
    pthread_mutex_lock(&k->mu);
    k->failed = true;
    pthread_mutex_unlock(&k->mu);
    return;
  }
  const float *gy = dp_data(a->gy), *x = dp_data(a->x), *w = a->w ? dp_data(a->w) : NULL;
  float *gx = dp_data(k->y);
  for (int64_t r = lo; r < hi; r++)
    dp_cpu_vec_get()->ln_bwd_row(gx + r * cols, acc, acc + cols, gy + r * cols, x + r * cols, w, cols,
                                 LD(a->mean, dp_data(a->mean), r), LD(a->rstd, dp_data(a->rstd), r), xhat);
  pthread_mutex_lock(&k->mu);
  for (int64_t j = 0; j < cols; j++) k->gw[j] += acc[j], k->gb[j] += acc[cols + j];
  pthread_mutex_unlock(&k->mu);
  free(acc);
  free(xhat);
}

int dp_cpu_layer_norm_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_ln_args *a) {
  const dp_tensor *gy = a->gy, *x = a->x, *mean = a->mean, *rstd = a->rstd, *w = a->w;
  int64_t rows = a->rows, cols = a->cols;
  /* per row, with g = gy * w and xhat = (x - mean) * rstd:
   * gx = rstd * (g - mean(g) - xhat * mean(g * xhat)); gw += gy * xhat; gb += gy */
  double *acc = scratch(cols, 3), *acc_w = acc, *acc_b = acc + cols, *g = acc + 2 * cols;
  if (!acc) return -1;
  const char *gp = dp_data(gy), *xp = dp_data(x);
  char *op = dp_data(gx);
  if (gy->dtype == DP_F32 && x->dtype == DP_F32 && gx->dtype == DP_F32 && (!w || w->dtype == DP_F32)) {
    ln_ctx k = {.a = a, .y = gx, .gw = acc_w, .gb = acc_b, .mu = PTHREAD_MUTEX_INITIALIZER};
    dp_cpu_parallel_for(rows, ln_grain(cols), 1, ln_bwd_rows, &k);
    pthread_mutex_destroy(&k.mu);
    if (k.failed) {
      free(acc);
      return dp_error("layer_norm backward: out of memory for %lld column sums", (long long)cols);
    }
  } else {
    for (int64_t r = 0; r < rows; r++) {
      int64_t off = r * cols;
      double m = LD(mean, dp_data(mean), r), is = LD(rstd, dp_data(rstd), r);
      double s = 0, sx = 0;
      for (int64_t j = 0; j < cols; j++) {
        double gv = LD(gy, gp, off + j), xh = (LD(x, xp, off + j) - m) * is;
        g[j] = gv * opt_at(w, j, 1.0);
        s += g[j], sx += g[j] * xh;
        acc_w[j] += gv * xh, acc_b[j] += gv;
      }
      double md = s / (double)cols, mdx = sx / (double)cols;
      for (int64_t j = 0; j < cols; j++)
        ST(gx, op, off + j, dp_ln_grad_d(g[j], (LD(x, xp, off + j) - m) * is, is, md, mdx));
    }
  }
  for (int64_t j = 0; j < cols; j++) {
    if (gw) ST(gw, dp_data(gw), j, acc_w[j]);
    if (gb) ST(gb, dp_data(gb), j, acc_b[j]);
  }
  free(acc);
  return 0;
}
