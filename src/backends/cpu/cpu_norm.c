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
 * run the float versions in loops the compiler vectorises (batch norm's
 * input gradient excepted: double, see there); every other dtype loads each
 * element as double and runs the double versions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
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

/* float32 row reductions in double. Eight independent lanes instead of
 * one running sum: the compiler may not reorder a floating-point sum, so a
 * single accumulator is a serial chain of adds; eight lanes vectorise. */
#define LANES 8

static double sum_f32(const float *r, int64_t n) {
  double acc[LANES] = {0}, s = 0;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int j = 0; j < LANES; j++) acc[j] += r[i + j];
  for (; i < n; i++) s += r[i];
  for (int j = 0; j < LANES; j++) s += acc[j];
  return s;
}

/* sum of (r[i] - m)^2 */
static double sq_dev_f32(const float *r, int64_t n, double m) {
  double acc[LANES] = {0}, s = 0;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int j = 0; j < LANES; j++) {
      double d = (double)r[i + j] - m;
      acc[j] += d * d;
    }
  for (; i < n; i++) s += ((double)r[i] - m) * ((double)r[i] - m);
  for (int j = 0; j < LANES; j++) s += acc[j];
  return s;
}

/* *sum_g = sum of g[i]; returns sum of g[i] * (x[i] - m) */
static double dot_dev_f32(const float *g, const float *x, int64_t n, double m, double *sum_g) {
  double acc[LANES] = {0}, accg[LANES] = {0}, s = 0, sg = 0;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int j = 0; j < LANES; j++) {
      accg[j] += g[i + j];
      acc[j] += (double)g[i + j] * ((double)x[i + j] - m);
    }
  for (; i < n; i++) sg += g[i], s += (double)g[i] * ((double)x[i] - m);
  for (int j = 0; j < LANES; j++) s += acc[j], sg += accg[j];
  *sum_g = sg;
  return s;
}

/* Sum over one contiguous row, in double. */
static double row_sum(const dp_tensor *t, const char *p, int64_t off, int64_t n) {
  if (t->dtype == DP_F32) return sum_f32((const float *)p + off, n);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += LD(t, p, off + i);
  return s;
}

/* Sum of (r[i] - m)^2 over one contiguous row, in double. */
static double row_sq_dev(const dp_tensor *t, const char *p, int64_t off, int64_t n, double m) {
  if (t->dtype == DP_F32) return sq_dev_f32((const float *)p + off, n, m);
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = LD(t, p, off + i) - m;
    s += d * d;
  }
  return s;
}

/* ---- batch norm ---- */

int dp_cpu_bn_stats(dp_tensor *mean, dp_tensor *var, const dp_bn_args *a) {
  const dp_tensor *x = a->x;
  int64_t n = a->n, c = a->c, inner = a->inner;
  double *acc = scratch(c, 2), *m = acc + c, cnt = (double)(n * inner);
  if (!acc) return -1;
  const char *xp = dp_data(x);
  for (int64_t i = 0; i < n; i++)
    for (int64_t ch = 0; ch < c; ch++) acc[ch] += row_sum(x, xp, (i * c + ch) * inner, inner);
  for (int64_t ch = 0; ch < c; ch++) m[ch] = acc[ch] / cnt, acc[ch] = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t ch = 0; ch < c; ch++) acc[ch] += row_sq_dev(x, xp, (i * c + ch) * inner, inner, m[ch]);
  for (int64_t ch = 0; ch < c; ch++) {
    ST(mean, dp_data(mean), ch, m[ch]);
    ST(var, dp_data(var), ch, acc[ch] / cnt);
  }
  free(acc);
  return 0;
}

int dp_cpu_bn_forward(dp_tensor *y, const dp_bn_args *a) {
  const dp_tensor *x = a->x, *mean = a->mean, *invstd = a->invstd, *w = a->w, *b = a->b;
  int64_t n = a->n, c = a->c, inner = a->inner;
  const char *xp = dp_data(x), *mp = dp_data(mean), *sp = dp_data(invstd);
  char *yp = dp_data(y);
  bool f32 = x->dtype == DP_F32 && y->dtype == DP_F32;
  for (int64_t ch = 0; ch < c; ch++) {
    dp_bn_affine_k k = dp_bn_affine(LD(mean, mp, ch), LD(invstd, sp, ch), opt_at(w, ch, 1.0), opt_at(b, ch, 0.0));
    float mu = (float)k.mean, scale = (float)k.scale, bias = (float)k.bias;
    for (int64_t i = 0; i < n; i++) {
      int64_t off = (i * c + ch) * inner;
      if (f32) {
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

int dp_cpu_bn_backward_reduce(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a) {
  const dp_tensor *gy = a->gy, *x = a->x, *mean = a->mean, *invstd = a->invstd;
  int64_t n = a->n, c = a->c, inner = a->inner;
  double *acc = scratch(c, 2), *acc_x = acc + c;
  if (!acc) return -1;
  const char *gp = dp_data(gy), *xp = dp_data(x);
  bool f32 = gy->dtype == DP_F32 && x->dtype == DP_F32;
  double *mu = scratch(c, 1);
  if (!mu) {
    free(acc);
    return -1;
  }
  for (int64_t ch = 0; ch < c; ch++) mu[ch] = LD(mean, dp_data(mean), ch);
  for (int64_t i = 0; i < n; i++)
    for (int64_t ch = 0; ch < c; ch++) {
      int64_t off = (i * c + ch) * inner;
      double s = 0, sx = 0, m = mu[ch];
      if (f32) {
        sx = dot_dev_f32((const float *)gp + off, (const float *)xp + off, inner, m, &s);
      } else {
        for (int64_t k = 0; k < inner; k++) {
          double g = LD(gy, gp, off + k);
          s += g, sx += g * (LD(x, xp, off + k) - m);
        }
      }
      acc[ch] += s, acc_x[ch] += sx;
    }
  for (int64_t ch = 0; ch < c; ch++) {
    ST(sum_dy, dp_data(sum_dy), ch, acc[ch]);
    ST(sum_dy_xhat, dp_data(sum_dy_xhat), ch, acc_x[ch] * LD(invstd, dp_data(invstd), ch));
  }
  free(acc);
  free(mu);
  return 0;
}

int dp_cpu_bn_backward_elemt(dp_tensor *gx, const dp_bn_args *a) {
  const dp_tensor *gy = a->gy, *x = a->x, *mean = a->mean, *invstd = a->invstd, *w = a->w;
  const dp_tensor *sum_dy = a->sum_dy, *sum_dy_xhat = a->sum_dy_xhat;
  int64_t n = a->n, c = a->c, inner = a->inner;
  double count = a->count;
  const char *gp = dp_data(gy), *xp = dp_data(x);
  char *op = dp_data(gx);
  bool f32 = gx->dtype == DP_F32 && gy->dtype == DP_F32 && x->dtype == DP_F32;
  for (int64_t ch = 0; ch < c; ch++) {
    dp_bn_grad_k k =
        dp_bn_grad_coefs(opt_at(w, ch, 1.0), LD(invstd, dp_data(invstd), ch), LD(mean, dp_data(mean), ch),
                         LD(sum_dy, dp_data(sum_dy), ch) / count, LD(sum_dy_xhat, dp_data(sum_dy_xhat), ch) / count);
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

/* ---- layer norm: each row of `cols` values normalised on its own ---- */

int dp_cpu_layer_norm(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_ln_args *a) {
  const dp_tensor *x = a->x, *w = a->w, *b = a->b;
  int64_t rows = a->rows, cols = a->cols;
  double eps = a->eps;
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
  bool f32 = x->dtype == DP_F32 && y->dtype == DP_F32 && (!w || w->dtype == DP_F32) && (!b || b->dtype == DP_F32);
  const float *wf = w ? dp_data(w) : NULL, *bf = b ? dp_data(b) : NULL;
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = r * cols;
    double m = row_sum(x, xp, off, cols) / (double)cols;
    double is = 1.0 / sqrt(row_sq_dev(x, xp, off, cols, m) / (double)cols + eps);
    ST(mean, dp_data(mean), r, m);
    ST(rstd, dp_data(rstd), r, is);
    if (f32) {
      const float *xr = (const float *)xp + off;
      float *yr = (float *)yp + off, fm = (float)m, fs = (float)is;
      if (wf && bf)
        for (int64_t j = 0; j < cols; j++) yr[j] = dp_ln_apply_f(xr[j], fm, fs, wf[j], bf[j]);
      else if (wf)
        for (int64_t j = 0; j < cols; j++) yr[j] = dp_ln_apply_f(xr[j], fm, fs, wf[j], 0.f);
      else
        for (int64_t j = 0; j < cols; j++) yr[j] = dp_ln_apply_f(xr[j], fm, fs, 1.f, bf ? bf[j] : 0.f);
    } else {
      for (int64_t j = 0; j < cols; j++)
        ST(y, yp, off + j, dp_ln_apply_d(LD(x, xp, off + j), m, is, opt_at(w, j, 1.0), opt_at(b, j, 0.0)));
    }
  }
  return 0;
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
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = r * cols;
    double m = LD(mean, dp_data(mean), r), is = LD(rstd, dp_data(rstd), r);
    double s = 0, sx = 0;
    if (gy->dtype == DP_F32 && x->dtype == DP_F32 && (!w || w->dtype == DP_F32)) {
      const float *gr = (const float *)gp + off, *xr = (const float *)xp + off, *wf = w ? dp_data(w) : NULL;
      /* per-column work first (vectorises), then the two row sums in lanes */
      for (int64_t j = 0; j < cols; j++) {
        double xh = ((double)xr[j] - m) * is;
        g[j] = wf ? (double)gr[j] * wf[j] : gr[j];
        acc_w[j] += gr[j] * xh, acc_b[j] += gr[j];
      }
      double ls[LANES] = {0}, lx[LANES] = {0};
      int64_t j = 0;
      for (; j + LANES <= cols; j += LANES)
        for (int k = 0; k < LANES; k++) ls[k] += g[j + k], lx[k] += g[j + k] * (((double)xr[j + k] - m) * is);
      for (; j < cols; j++) s += g[j], sx += g[j] * (((double)xr[j] - m) * is);
      for (int k = 0; k < LANES; k++) s += ls[k], sx += lx[k];
    } else {
      for (int64_t j = 0; j < cols; j++) {
        double gv = LD(gy, gp, off + j), xh = (LD(x, xp, off + j) - m) * is;
        g[j] = gv * opt_at(w, j, 1.0);
        s += g[j], sx += g[j] * xh;
        acc_w[j] += gv * xh, acc_b[j] += gv;
      }
    }
    double md = s / (double)cols, mdx = sx / (double)cols;
    if (gx->dtype == DP_F32 && x->dtype == DP_F32) {
      const float *xr = (const float *)xp + off;
      float *o = (float *)op + off;
      for (int64_t j = 0; j < cols; j++) o[j] = (float)dp_ln_grad_d(g[j], ((double)xr[j] - m) * is, is, md, mdx);
    } else {
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
