/* Per-element math shared by the CPU kernels and the CUDA kernels (DP_HD
 * marks them host+device), so the CPU tests exercise the same arithmetic the
 * GPU runs. Each function has a float and a double version; the double one
 * is the reference the float kernels are tested against. */
#ifndef DP_SCALAR_MATH_H
#define DP_SCALAR_MATH_H

#include <math.h>
#include <stdint.h>

#include "tensor/half.h" /* DP_HD */

#define DP_SQRT1_2 0.70710678118654752440
#define DP_2_SQRTPI 1.12837916709551257390

/* relu */
static inline DP_HD float dp_relu_f(float x) { return x > 0.f ? x : 0.f; }
static inline DP_HD double dp_relu_d(double x) { return x > 0.0 ? x : 0.0; }
/* d/dx relu using the output (y > 0 iff x > 0) */
static inline DP_HD float dp_relu_grad_f(float y) { return y > 0.f ? 1.f : 0.f; }
static inline DP_HD double dp_relu_grad_d(double y) { return y > 0.0 ? 1.0 : 0.0; }

/* exact GELU: x * Phi(x) */
static inline DP_HD float dp_gelu_f(float x) { return 0.5f * x * (1.f + erff(x * (float)DP_SQRT1_2)); }
static inline DP_HD double dp_gelu_d(double x) { return 0.5 * x * (1.0 + erf(x * DP_SQRT1_2)); }
static inline DP_HD float dp_gelu_grad_f(float x) {
  float cdf = 0.5f * (1.f + erff(x * (float)DP_SQRT1_2));
  float pdf = expf(-0.5f * x * x) * (float)(DP_2_SQRTPI * DP_SQRT1_2 * 0.5);
  return cdf + x * pdf;
}
static inline DP_HD double dp_gelu_grad_d(double x) {
  double cdf = 0.5 * (1.0 + erf(x * DP_SQRT1_2));
  double pdf = exp(-0.5 * x * x) * (DP_2_SQRTPI * DP_SQRT1_2 * 0.5);
  return cdf + x * pdf;
}

/* sigmoid, stable for large |x| */
static inline DP_HD float dp_sigmoid_f(float x) {
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  float e = expf(x);
  return e / (1.f + e);
}
static inline DP_HD double dp_sigmoid_d(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}
/* derivatives from the output y */
static inline DP_HD float dp_sigmoid_grad_f(float y) { return y * (1.f - y); }
static inline DP_HD double dp_sigmoid_grad_d(double y) { return y * (1.0 - y); }
static inline DP_HD float dp_tanh_grad_f(float y) { return 1.f - y * y; }
static inline DP_HD double dp_tanh_grad_d(double y) { return 1.0 - y * y; }

static inline DP_HD float dp_sign_f(float x) { return (float)((x > 0.f) - (x < 0.f)); }
static inline DP_HD double dp_sign_d(double x) { return (double)((x > 0.0) - (x < 0.0)); }

/* ---- sliding windows (conv, pooling) ---- */

/* Output size of a window of k with stride s over n inputs padded by p on
 * both sides (floor mode, as PyTorch's default); < 1 when it does not fit. */
static inline DP_HD int64_t dp_window_out(int64_t n, int64_t k, int64_t s, int64_t p) {
  return n + 2 * p < k ? 0 : (n + 2 * p - k) / s + 1;
}
/* ceil(a / b) for b > 0 and any sign of a. */
static inline DP_HD int64_t dp_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
/* The window of output position o along one axis: the input range [*lo,
 * *hi) clipped to the input, and the divisor avg_pool2d uses with
 * count_include_pad=true (the window clipped to the padded input). */
static inline DP_HD int64_t dp_window_range(int64_t o, int64_t n, int64_t k, int64_t s, int64_t p, int64_t *lo,
                                            int64_t *hi) {
  int64_t start = o * s - p, end = start + k;
  if (end > n + p) end = n + p;
  int64_t padded = end - start;
  *lo = start < 0 ? 0 : start;
  *hi = end > n ? n : end;
  return padded;
}

/* ---- normalisation (one element) ---- */

/* batch/layer norm forward: (x - mean) * invstd * w + b */
static inline DP_HD float dp_norm_apply_f(float x, float mean, float invstd, float w, float b) {
  return (x - mean) * invstd * w + b;
}
static inline DP_HD double dp_norm_apply_d(double x, double mean, double invstd, double w, double b) {
  return (x - mean) * invstd * w + b;
}
/* Input gradient of a normalisation over `count` values from the mean of
 * gy and of gy * xhat over them: w * invstd * (gy - mean_dy - xhat *
 * mean_dy_xhat). Batch norm passes sums / count (zeros in eval mode, where
 * the statistics are constants); layer norm passes w = 1 and folds its
 * weight into gy. */
static inline DP_HD double dp_norm_grad_d(double gy, double xhat, double w, double invstd, double mean_dy,
                                          double mean_dy_xhat) {
  return w * invstd * (gy - mean_dy - xhat * mean_dy_xhat);
}
static inline DP_HD float dp_norm_grad_f(float gy, float xhat, float w, float invstd, float mean_dy,
                                         float mean_dy_xhat) {
  return w * invstd * (gy - mean_dy - xhat * mean_dy_xhat);
}

/* ---- optimizer updates (one element) ---- */

/* SGD with PyTorch's semantics: g += wd*p; buf = first ? g : mu*buf +
 * (1-dampening)*g; step = nesterov ? g + mu*buf : buf; p -= lr*step. */
static inline DP_HD void dp_sgd_update_f(float *p, float g, float *buf, float lr, float mu, float damp,
                                         float wd, int nesterov, int first) {
  if (wd != 0.f) g += wd * *p;
  float step = g;
  if (mu != 0.f) {
    float b = first ? g : mu * *buf + (1.f - damp) * g;
    *buf = b;
    step = nesterov ? g + mu * b : b;
  }
  *p -= lr * step;
}
static inline DP_HD void dp_sgd_update_d(double *p, double g, double *buf, double lr, double mu, double damp,
                                         double wd, int nesterov, int first) {
  if (wd != 0.0) g += wd * *p;
  double step = g;
  if (mu != 0.0) {
    double b = first ? g : mu * *buf + (1.0 - damp) * g;
    *buf = b;
    step = nesterov ? g + mu * b : b;
  }
  *p -= lr * step;
}

/* Adam / AdamW (decoupled weight decay), PyTorch's formulation:
 * bc1 = 1 - b1^t, bc2 = 1 - b2^t (passed in), p -= lr/bc1 * m / (sqrt(v/bc2)+eps). */
static inline DP_HD void dp_adam_update_f(float *p, float g, float *m, float *v, float lr, float b1, float b2,
                                          float eps, float wd, int decoupled, float bc1, float bc2) {
  if (wd != 0.f) {
    if (decoupled) *p *= 1.f - lr * wd;
    else g += wd * *p;
  }
  *m = b1 * *m + (1.f - b1) * g;
  *v = b2 * *v + (1.f - b2) * g * g;
  float denom = sqrtf(*v / bc2) + eps;
  *p -= (lr / bc1) * *m / denom;
}
static inline DP_HD void dp_adam_update_d(double *p, double g, double *m, double *v, double lr, double b1,
                                          double b2, double eps, double wd, int decoupled, double bc1,
                                          double bc2) {
  if (wd != 0.0) {
    if (decoupled) *p *= 1.0 - lr * wd;
    else g += wd * *p;
  }
  *m = b1 * *m + (1.0 - b1) * g;
  *v = b2 * *v + (1.0 - b2) * g * g;
  double denom = sqrt(*v / bc2) + eps;
  *p -= (lr / bc1) * *m / denom;
}

#endif
