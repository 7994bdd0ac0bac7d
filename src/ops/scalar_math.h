/* Per-element math shared by the CPU kernels and the CUDA kernels (DP_HD
 * marks them host+device), so the CPU tests exercise the same arithmetic the
 * GPU runs. Each function has a float and a double version; the double one
 * is the reference the float kernels are tested against. */
#ifndef DP_SCALAR_MATH_H
#define DP_SCALAR_MATH_H

#include <math.h>
#include <stdint.h>

#include "ops/op_enums.h"
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

/* ---- the elementwise op table: one switch per op family, float and
 * double. The CPU reference path and every CUDA elementwise kernel call
 * these. ---- */
static inline DP_HD double dp_unary_d(dp_unary_op op, double x) {
  switch (op) {
  case DP_U_NEG: return -x;
  case DP_U_EXP: return exp(x);
  case DP_U_LOG: return log(x);
  case DP_U_RELU: return dp_relu_d(x);
  case DP_U_GELU: return dp_gelu_d(x);
  case DP_U_TANH: return tanh(x);
  case DP_U_SIGMOID: return dp_sigmoid_d(x);
  case DP_U_SQRT: return sqrt(x);
  case DP_U_RSQRT: return 1.0 / sqrt(x);
  case DP_U_ABS: return fabs(x);
  case DP_U_SQUARE: return x * x;
  case DP_U_RECIP: return 1.0 / x;
  case DP_U_SIGN: return dp_sign_d(x);
  default: return NAN;
  }
}
static inline DP_HD float dp_unary_f(dp_unary_op op, float x) {
  switch (op) {
  case DP_U_NEG: return -x;
  case DP_U_EXP: return expf(x);
  case DP_U_LOG: return logf(x);
  case DP_U_RELU: return dp_relu_f(x);
  case DP_U_GELU: return dp_gelu_f(x);
  case DP_U_TANH: return tanhf(x);
  case DP_U_SIGMOID: return dp_sigmoid_f(x);
  case DP_U_SQRT: return sqrtf(x);
  case DP_U_RSQRT: return 1.f / sqrtf(x);
  case DP_U_ABS: return fabsf(x);
  case DP_U_SQUARE: return x * x;
  case DP_U_RECIP: return 1.f / x;
  case DP_U_SIGN: return dp_sign_f(x);
  default: return NAN;
  }
}
/* Integer unary ops that keep the type (neg, abs, relu, square, sign):
 * exact in int64 with wrap-around. */
static inline DP_HD int64_t dp_unary_i64(dp_unary_op op, int64_t x) {
  switch (op) {
  case DP_U_NEG: return (int64_t)(0u - (uint64_t)x);
  case DP_U_ABS: return x < 0 ? (int64_t)(0u - (uint64_t)x) : x;
  case DP_U_RELU: return x > 0 ? x : 0;
  case DP_U_SQUARE: return (int64_t)((uint64_t)x * (uint64_t)x);
  case DP_U_SIGN: return (x > 0) - (x < 0);
  default: return 0;
  }
}

/* Derivative factor dy/dx from input x and/or output y (dp_unary_grad_uses
 * in cpu_kernels.h says which one an op reads). */
static inline DP_HD double dp_unary_grad_d(dp_unary_op op, double x, double y) {
  switch (op) {
  case DP_U_NEG: return -1.0;
  case DP_U_EXP: return y;
  case DP_U_LOG: return 1.0 / x;
  case DP_U_RELU: return dp_relu_grad_d(y);
  case DP_U_GELU: return dp_gelu_grad_d(x);
  case DP_U_TANH: return dp_tanh_grad_d(y);
  case DP_U_SIGMOID: return dp_sigmoid_grad_d(y);
  case DP_U_SQRT: return 0.5 / y;
  case DP_U_RSQRT: return -0.5 * y * y * y;
  case DP_U_ABS: return dp_sign_d(x);
  case DP_U_SQUARE: return 2.0 * x;
  case DP_U_RECIP: return -y * y;
  case DP_U_SIGN: return 0.0;
  default: return NAN;
  }
}
static inline DP_HD float dp_unary_grad_f(dp_unary_op op, float x, float y) {
  switch (op) {
  case DP_U_NEG: return -1.f;
  case DP_U_EXP: return y;
  case DP_U_LOG: return 1.f / x;
  case DP_U_RELU: return dp_relu_grad_f(y);
  case DP_U_GELU: return dp_gelu_grad_f(x);
  case DP_U_TANH: return dp_tanh_grad_f(y);
  case DP_U_SIGMOID: return dp_sigmoid_grad_f(y);
  case DP_U_SQRT: return 0.5f / y;
  case DP_U_RSQRT: return -0.5f * y * y * y;
  case DP_U_ABS: return dp_sign_f(x);
  case DP_U_SQUARE: return 2.f * x;
  case DP_U_RECIP: return -y * y;
  case DP_U_SIGN: return 0.f;
  default: return NAN;
  }
}

static inline DP_HD double dp_binary_d(dp_binary_op op, double a, double b) {
  switch (op) {
  case DP_B_ADD: return a + b;
  case DP_B_SUB: return a - b;
  case DP_B_MUL: return a * b;
  case DP_B_DIV: return a / b;
  case DP_B_MAX: return (a != a || a > b) ? a : b; /* NaN propagates */
  case DP_B_MIN: return (a != a || a < b) ? a : b;
  case DP_B_POW: return pow(a, b);
  case DP_B_EQ: return a == b;
  case DP_B_NE: return a != b;
  case DP_B_LT: return a < b;
  case DP_B_LE: return a <= b;
  case DP_B_GT: return a > b;
  case DP_B_GE: return a >= b;
  default: return NAN;
  }
}
static inline DP_HD float dp_binary_f(dp_binary_op op, float a, float b) {
  switch (op) {
  case DP_B_ADD: return a + b;
  case DP_B_SUB: return a - b;
  case DP_B_MUL: return a * b;
  case DP_B_DIV: return a / b;
  case DP_B_MAX: return (a != a || a > b) ? a : b;
  case DP_B_MIN: return (a != a || a < b) ? a : b;
  case DP_B_POW: return powf(a, b);
  case DP_B_EQ: return a == b;
  case DP_B_NE: return a != b;
  case DP_B_LT: return a < b;
  case DP_B_LE: return a <= b;
  case DP_B_GT: return a > b;
  case DP_B_GE: return a >= b;
  default: return NAN;
  }
}
/* Integer arithmetic stays exact in int64 (the double path would round
 * beyond 2^53); the op layer promotes integer division and pow to float. */
static inline DP_HD int64_t dp_binary_i64(dp_binary_op op, int64_t a, int64_t b) {
  switch (op) {
  case DP_B_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
  case DP_B_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
  case DP_B_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
  case DP_B_MAX: return a > b ? a : b;
  case DP_B_MIN: return a < b ? a : b;
  case DP_B_EQ: return a == b;
  case DP_B_NE: return a != b;
  case DP_B_LT: return a < b;
  case DP_B_LE: return a <= b;
  case DP_B_GT: return a > b;
  case DP_B_GE: return a >= b;
  default: return 0;
  }
}
static inline DP_HD int dp_binary_is_compare(dp_binary_op op) { return op >= DP_B_EQ; }

/* ---- per-row math: softmax, cross-entropy, normalisation ---- */

/* Online log-sum-exp: merges the partial (max m2, sum s2 of exp(v - m2))
 * into (m, s). Used by the parallel row reductions; (-inf, 0) is empty. */
static inline DP_HD void dp_lse_merge_d(double *m, double *s, double m2, double s2) {
  if (m2 != m2 || *m != *m) { /* NaN anywhere makes the row NaN */
    *m = NAN;
    *s = 1.0;
    return;
  }
  if (s2 == 0.0) return;
  if (*s == 0.0) {
    *m = m2, *s = s2;
    return;
  }
  if (m2 > *m) {
    *s = *s * exp(*m - m2) + s2;
    *m = m2;
  } else {
    *s += s2 * exp(m2 - *m);
  }
}
/* softmax / log_softmax output from an element and its row's lse */
static inline DP_HD double dp_softmax_out_d(double v, double lse, int log_softmax) {
  return log_softmax ? v - lse : exp(v - lse);
}
/* gradient: softmax: y * (gy - sum(gy*y)); log_softmax: gy - exp(y) * sum(gy) */
static inline DP_HD double dp_softmax_grad_d(double gy, double y, double dot, int log_softmax) {
  return log_softmax ? gy - exp(y) * dot : y * (gy - dot);
}
/* Cross-entropy of one row from its lse, the target logit and the sum of
 * the logits: (1-eps) * nll + eps * mean_j(-log p_j). */
static inline DP_HD double dp_ce_loss_d(double lse, double x_target, double sum_x, int64_t classes, double eps) {
  double nll = lse - x_target;
  double smooth = lse - sum_x / (double)classes;
  return (1.0 - eps) * nll + eps * smooth;
}
/* d loss / d x_j times the row's scale: (p_j - smoothed one-hot_j) * scale */
static inline DP_HD double dp_ce_grad_d(double x, double lse, int is_target, int64_t classes, double eps,
                                        double scale) {
  double target_p = eps / (double)classes + (is_target ? 1.0 - eps : 0.0);
  return (exp(x - lse) - target_p) * scale;
}

/* Welford/Chan merge of (count n, mean, M2 = sum of squared deviations). */
static inline DP_HD void dp_welford_merge_d(double *n, double *mean, double *m2, double n2, double mean2, double m2b) {
  if (n2 == 0.0) return;
  double n1 = *n, tot = n1 + n2, delta = mean2 - *mean;
  *mean += delta * (n2 / tot);
  *m2 += m2b + delta * delta * (n1 * n2 / tot);
  *n = tot;
}
/* Batch norm backward, elementwise part: w * invstd * (gy - sum_dy/count -
 * xhat * sum_dy_xhat/count), xhat = (x - mean) * invstd. */
static inline DP_HD double dp_bn_backward_elemt_d(double gy, double x, double mean, double invstd, double w,
                                                  double sum_dy, double sum_dy_xhat, double count) {
  double xhat = (x - mean) * invstd;
  return w * invstd * (gy - sum_dy / count - xhat * sum_dy_xhat / count);
}
/* Layer norm backward for one element: rstd * (g - mean(g) - xhat *
 * mean(g * xhat)) with g = gy * w. */
static inline DP_HD double dp_ln_backward_d(double g, double xhat, double rstd, double mean_g, double mean_gx) {
  return rstd * (g - mean_g - xhat * mean_gx);
}

/* Average pooling divisor with count_include_pad (PyTorch's default): the
 * window clipped to the padded input, so it is kh*kw unless a window runs
 * past the padding. */
static inline DP_HD int64_t dp_avgpool_divisor(int64_t hstart, int64_t wstart, int64_t kh, int64_t kw, int64_t h,
                                               int64_t w, int64_t ph, int64_t pw) {
  int64_t hend = hstart + kh < h + ph ? hstart + kh : h + ph;
  int64_t wend = wstart + kw < w + pw ? wstart + kw : w + pw;
  return (hend - hstart) * (wend - wstart);
}

/* ---- optimizer updates (one element) ---- */

/* SGD with PyTorch's semantics: g += wd*p; buf = first ? g : mu*buf +
 * (1-dampening)*g; step = nesterov ? g + mu*buf : buf; p -= lr*step. */
static inline DP_HD void dp_sgd_update_f(float *p, float g, float *buf, float lr, float mu, float damp, float wd,
                                         int nesterov, int first) {
  if (wd != 0.f) g += wd * *p;
  float step = g;
  if (mu != 0.f) {
    float b = first ? g : mu * *buf + (1.f - damp) * g;
    *buf = b;
    step = nesterov ? g + mu * b : b;
  }
  *p -= lr * step;
}
static inline DP_HD void dp_sgd_update_d(double *p, double g, double *buf, double lr, double mu, double damp, double wd,
                                         int nesterov, int first) {
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
static inline DP_HD void dp_adam_update_d(double *p, double g, double *m, double *v, double lr, double b1, double b2,
                                          double eps, double wd, int decoupled, double bc1, double bc2) {
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
