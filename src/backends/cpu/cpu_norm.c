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
 * loads each element as double and runs the double versions.
 *
 * Batch norm with a->relu is batch norm followed by ReLU in the same passes
 * (float32 and float64): see "batch norm + ReLU" below for how its
 * backward gets the ReLU's mask without a saved output; with a->pool too,
 * max pooling of that output (cpu_norm_pool.c). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_norm_rows.h"
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
  atomic_bool failed; /* a worker could not get its ReLU mask row */
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
      if (i + 1 < a->n && a->x->dtype == DP_F32)
        dp_cpu_prefetch_plane((const float *)xp + off + a->c * a->inner, a->inner);
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

dp_bn_affine_k dp_cpu_bn_affine_of(const dp_bn_args *a, int64_t ch) {
  return dp_bn_affine(LD(a->mean, dp_data(a->mean), ch), LD(a->invstd, dp_data(a->invstd), ch), opt_at(a->w, ch, 1.0),
                      opt_at(a->b, ch, 0.0));
}

/* ---- batch norm + ReLU (a->relu) ----
 * The forward applies the ReLU to each row while it is in cache. The
 * backward needs the ReLU's mask: rather than read a saved output it
 * recomputes each row of y from x (already being read) into a scratch row,
 * with the very calls the forward made (same kernels, same float
 * coefficients: the same bits), then runs the ReLU's own forward and
 * backward kernels on it, so the masked gradient is the unfused ReLU's
 * output bit for bit and the sums and gx that follow are the unfused ones. */

static void relu_row_f32(float *y, int64_t n) {
  dp_unary_args r = dp_unary_args_of(DP_U_RELU);
  dp_cpu_vec_get()->unary(&r, y, y, n);
}

/* One float32 row of the forward's pre-ReLU output: the vector kernel for
 * planes (inner > 1), the scalar formula for [N, C] (one value per row). */
static void bn_row_f32(float *y, const float *x, int64_t n, const dp_bn_affine_k *f, bool planes) {
  float mu = (float)f->mean, scale = (float)f->scale, bias = (float)f->bias;
  if (planes) dp_cpu_vec_get()->affine(y, x, n, mu, scale, bias);
  else
    for (int64_t j = 0; j < n; j++) y[j] = dp_bn_apply_f(x[j], mu, scale, bias);
}

void dp_cpu_bn_relu_row(float *y, const float *x, int64_t n, const dp_bn_affine_k *f) {
  bn_row_f32(y, x, n, f, true);
  relu_row_f32(y, n);
}

/* m: a row of the pre-ReLU output; becomes gy masked by the ReLU */
static void relu_mask_f32(float *m, const float *g, int64_t n) {
  dp_unary_args r = dp_unary_args_of(DP_U_RELU);
  dp_cpu_vec_get()->unary(&r, m, m, n);
  dp_cpu_vec_get()->unary_bwd(&r, m, g, NULL, m, n);
}

/* double rows (float64 tensors: their stores are exact) */
static double bn_y_d(const dp_bn_affine_k *k, double x, bool relu) {
  double v = dp_bn_apply_d(x, k->mean, k->scale, k->bias);
  return relu ? dp_relu_fwd_d(v, NULL) : v;
}
static double bn_g_d(const dp_bn_affine_k *k, double g, double x, bool relu) {
  return relu ? dp_relu_bwd_d(g, 0.0, bn_y_d(k, x, true), NULL) : g;
}

/* g's row, masked by the ReLU into m when a->relu (m: n floats; f: the
 * channel's bn_affine_of) */
static const float *bn_grad_row(const dp_bn_args *a, const dp_bn_affine_k *f, const float *g, const float *x, int64_t n,
                                float *m) {
  if (!a->relu) return g;
  bn_row_f32(m, x, n, f, a->inner > 1);
  relu_mask_f32(m, g, n);
  return m;
}

static void bn_forward_channels(void *vctx, int64_t lo, int64_t hi) {
  const bn_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const float *x = dp_data(a->x);
  float *y = dp_data(k->out);
  for (int64_t ch = lo; ch < hi; ch++) {
    dp_bn_affine_k f = dp_cpu_bn_affine_of(a, ch);
    for (int64_t i = 0; i < a->n; i++) {
      int64_t off = (i * a->c + ch) * a->inner;
      if (i + 1 < a->n) dp_cpu_prefetch_plane(x + off + a->c * a->inner, a->inner);
      if (a->relu) dp_cpu_bn_relu_row(y + off, x + off, a->inner, &f);
      else bn_row_f32(y + off, x + off, a->inner, &f, true);
    }
  }
}

int dp_cpu_bn_forward(dp_tensor *y, const dp_bn_args *a) {
  const dp_tensor *x = a->x;
  int64_t n = a->n, c = a->c, inner = a->inner;
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
  bool f32 = x->dtype == DP_F32 && y->dtype == DP_F32;
  if (a->relu && !f32 && x->dtype != DP_F64)
    return dp_error("batch_norm: the fused ReLU takes float32 or float64, got %s", dp_dtype_name(x->dtype));
  if (a->pool) return dp_cpu_bn_relu_pool_forward(y, a);
  if (f32 && inner > 1) {
    bn_ctx k = {.a = a, .out = y};
    dp_cpu_parallel_for(c, bn_grain(a), 1, bn_forward_channels, &k);
    return 0;
  }
  for (int64_t ch = 0; ch < c; ch++) {
    dp_bn_affine_k k = dp_cpu_bn_affine_of(a, ch);
    for (int64_t i = 0; i < n; i++) {
      int64_t off = (i * c + ch) * inner;
      if (f32) {
        float *yr = (float *)yp + off;
        bn_row_f32(yr, (const float *)xp + off, inner, &k, false);
        if (a->relu) relu_row_f32(yr, inner);
      } else {
        for (int64_t j = 0; j < inner; j++) ST(y, yp, off + j, bn_y_d(&k, LD(x, xp, off + j), a->relu));
      }
    }
  }
  return 0;
}

/* a scratch row for the ReLU mask (NULL without a->relu); *failed on OOM */
static float *mask_row(const dp_bn_args *a, atomic_bool *failed) {
  if (!a->relu) return NULL;
  float *m = malloc(sizeof(float) * (size_t)(a->inner > 0 ? a->inner : 1));
  if (!m) atomic_store(failed, true);
  return m;
}

static void bn_reduce_channels(void *vctx, int64_t lo, int64_t hi) {
  bn_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const float *g = dp_data(a->gy), *x = dp_data(a->x);
  float *m = mask_row(a, &k->failed);
  if (a->relu && !m) return;
  for (int64_t ch = lo; ch < hi; ch++) {
    double s = 0, sx = 0;
    dp_bn_affine_k f = a->relu ? dp_cpu_bn_affine_of(a, ch) : (dp_bn_affine_k){0};
    for (int64_t i = 0; i < a->n; i++) {
      int64_t off = (i * a->c + ch) * a->inner;
      double sg;
      if (i + 1 < a->n) {
        dp_cpu_prefetch_plane(x + off + a->c * a->inner, a->inner);
        dp_cpu_prefetch_plane(g + off + a->c * a->inner, a->inner);
      }
      sx += dp_cpu_vec_get()->dot_dev(bn_grad_row(a, &f, g + off, x + off, a->inner, m), x + off, a->inner, k->mu[ch],
                                      &sg);
      s += sg;
    }
    k->acc[ch] = s, k->acc_x[ch] = sx;
  }
  free(m);
}

int dp_cpu_bn_backward_reduce(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a) {
  const dp_tensor *gy = a->gy, *x = a->x, *mean = a->mean, *invstd = a->invstd;
  int64_t n = a->n, c = a->c, inner = a->inner;
  double *acc = scratch(c, 3), *acc_x = acc + c, *mu = acc + 2 * c;
  if (!acc) return -1;
  const char *gp = dp_data(gy), *xp = dp_data(x);
  bool f32 = gy->dtype == DP_F32 && x->dtype == DP_F32;
  for (int64_t ch = 0; ch < c; ch++) mu[ch] = LD(mean, dp_data(mean), ch);
  if (f32 && (inner > 1 || a->relu)) {
    bn_ctx k = {.a = a, .acc = acc, .acc_x = acc_x, .mu = mu};
    atomic_init(&k.failed, false);
    dp_cpu_parallel_for(c, bn_grain(a), 1, bn_reduce_channels, &k);
    if (atomic_load(&k.failed)) {
      free(acc);
      return dp_error("batch_norm backward: out of memory for a row of %lld values", (long long)inner);
    }
  } else {
    for (int64_t i = 0; i < n; i++)
      for (int64_t ch = 0; ch < c; ch++) {
        int64_t off = (i * c + ch) * inner;
        dp_bn_affine_k f = a->relu ? dp_cpu_bn_affine_of(a, ch) : (dp_bn_affine_k){0};
        double s = 0, sx = 0, m = mu[ch];
        for (int64_t k = 0; k < inner; k++) {
          double xv = LD(x, xp, off + k), g = bn_g_d(&f, LD(gy, gp, off + k), xv, a->relu);
          s += g, sx += g * (xv - m);
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

/* in double, as the CUDA kernel: the three terms cancel (to the eps term
 * alone when a channel has two values), and float coefficients left float32
 * results several ulps of the terms off */
static void bn_grad_row_scalar(float *o, const float *g, const float *x, int64_t n, const dp_bn_grad_k *k) {
  for (int64_t j = 0; j < n; j++) o[j] = (float)dp_bn_grad_apply_d(g[j], x[j], k->gy, k->x, k->c);
}

static void bn_elemt_channels(void *vctx, int64_t lo, int64_t hi) {
  bn_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const float *g = dp_data(a->gy), *x = dp_data(a->x);
  float *o = dp_data(k->out);
  float *m = mask_row(a, &k->failed);
  if (a->relu && !m) return;
  for (int64_t ch = lo; ch < hi; ch++) {
    dp_bn_grad_k f = bn_grad_of(a, ch);
    dp_bn_affine_k af = a->relu ? dp_cpu_bn_affine_of(a, ch) : (dp_bn_affine_k){0};
    for (int64_t i = 0; i < a->n; i++) {
      int64_t off = (i * a->c + ch) * a->inner;
      if (i + 1 < a->n) {
        dp_cpu_prefetch_plane(x + off + a->c * a->inner, a->inner);
        dp_cpu_prefetch_plane(g + off + a->c * a->inner, a->inner);
      }
      const float *gr = bn_grad_row(a, &af, g + off, x + off, a->inner, m);
      if (a->inner > 1) dp_cpu_vec_get()->bn_grad(o + off, gr, x + off, a->inner, f.gy, f.x, f.c);
      else bn_grad_row_scalar(o + off, gr, x + off, a->inner, &f);
    }
  }
  free(m);
}

int dp_cpu_bn_backward_elemt(dp_tensor *gx, const dp_bn_args *a) {
  const dp_tensor *gy = a->gy, *x = a->x;
  int64_t n = a->n, c = a->c, inner = a->inner;
  const char *gp = dp_data(gy), *xp = dp_data(x);
  char *op = dp_data(gx);
  bool f32 = gx->dtype == DP_F32 && gy->dtype == DP_F32 && x->dtype == DP_F32;
  if (f32 && (inner > 1 || a->relu)) {
    bn_ctx k = {.a = a, .out = gx};
    atomic_init(&k.failed, false);
    dp_cpu_parallel_for(c, bn_grain(a), 1, bn_elemt_channels, &k);
    if (atomic_load(&k.failed))
      return dp_error("batch_norm backward: out of memory for a row of %lld values", (long long)inner);
    return 0;
  }
  for (int64_t ch = 0; ch < c; ch++) {
    dp_bn_grad_k k = bn_grad_of(a, ch);
    dp_bn_affine_k f = a->relu ? dp_cpu_bn_affine_of(a, ch) : (dp_bn_affine_k){0};
    for (int64_t i = 0; i < n; i++) {
      int64_t off = (i * c + ch) * inner;
      if (f32) {
        bn_grad_row_scalar((float *)op + off, (const float *)gp + off, (const float *)xp + off, inner, &k);
      } else {
        for (int64_t j = 0; j < inner; j++) {
          double xv = LD(x, xp, off + j);
          ST(gx, op, off + j, dp_bn_grad_apply_d(bn_g_d(&f, LD(gy, gp, off + j), xv, a->relu), xv, k.gy, k.x, k.c));
        }
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
