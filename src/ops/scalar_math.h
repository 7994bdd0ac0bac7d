/* Per-element math shared by the CPU kernels and the CUDA kernels (DP_HD
 * marks them host+device), so the CPU tests exercise the same arithmetic the
 * GPU runs. The elementwise formulas are written once, for a type T, in
 * scalar_math_t.h, included below with T = float (names ending _f) and T =
 * double (_d, the reference the float kernels are tested against); the
 * per-op switches there come from the op table (op_table.h). Per-row and
 * per-channel math that always runs in double follows. */
#ifndef DP_SCALAR_MATH_H
#define DP_SCALAR_MATH_H

#include <math.h>
#include <stdint.h>

#include "ops/op_table.h"
#include "tensor/half.h" /* DP_HD */

#define DP_SQRT1_2 0.70710678118654752440
#define DP_SQRT2 1.41421356237309504880
#define DP_2_SQRTPI 1.12837916709551257390
/* SELU's constants (PyTorch's, from Klambauer et al.) */
#define DP_SELU_ALPHA 1.6732632423543772848170429916717
#define DP_SELU_SCALE 1.0507009873554804934193349852946

#if defined(__GNUC__)
#define DP_UNUSED __attribute__((unused))
#else
#define DP_UNUSED
#endif

/* A double parameter as an int64 bound: infinities (and values beyond the
 * range) saturate. */
static inline DP_HD int64_t dp_i64_bound(double v) {
  if (v <= -9223372036854775808.0) return INT64_MIN;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  return (int64_t)v;
}

/* Adam / AdamW's coefficients for one step, computed once in double as
 * torch.optim's Python computes them: 1 - beta2 in float32 (1 - 0.999f) is
 * off by 1e-5, in double it rounds to float32 exactly. */
typedef struct {
  double b1, one_minus_b1, b2, one_minus_b2, eps, wd;
  double decay;     /* AdamW: p *= 1 - lr * wd */
  double step_size; /* lr / (1 - b1^t) */
  double bc2_sqrt;  /* sqrt(1 - b2^t) */
  int decoupled;
} dp_adam_k;
static inline dp_adam_k dp_adam_coefs(double lr, double b1, double b2, double eps, double wd, int decoupled,
                                      int64_t step) {
  dp_adam_k k;
  k.b1 = b1, k.one_minus_b1 = 1.0 - b1, k.b2 = b2, k.one_minus_b2 = 1.0 - b2, k.eps = eps, k.wd = wd;
  k.decay = 1.0 - lr * wd;
  k.step_size = lr / (1.0 - pow(b1, (double)step));
  k.bc2_sqrt = sqrt(1.0 - pow(b2, (double)step));
  k.decoupled = decoupled;
  return k;
}

/* the two instantiations of scalar_math_t.h */
#define DP_TN(name) DP_TN_(name, DP_T_SFX)
#define DP_TN_(name, sfx) DP_TN__(name, sfx)
#define DP_TN__(name, sfx) name##_##sfx
#define DP_T float
#define DP_T_SFX f
#define DP_T_MATH(fn) fn##f
#define DP_T_LAST_PASS 0
#include "ops/scalar_math_t.h"
#undef DP_T
#undef DP_T_SFX
#undef DP_T_MATH
#undef DP_T_LAST_PASS
#define DP_T double
#define DP_T_SFX d
#define DP_T_MATH(fn) fn
#define DP_T_LAST_PASS 1
#include "ops/scalar_math_t.h"
#undef DP_T
#undef DP_T_SFX
#undef DP_T_MATH
#undef DP_T_LAST_PASS

/* comparisons give uint8 0/1 (host code: it reads the op table) */
static inline int dp_binary_is_compare(dp_binary_op op) { return dp_binary_ops[op].out == DP_OUT_BOOL; }

/* ---- sliding windows (conv, pooling) ---- */

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
/* softmax / log_softmax output from an element, its row's max and log of
 * sum(exp(v - max)). From v - max, as PyTorch: the lse max + log_s is
 * rounded to the logits' magnitude, so exp(v - lse) was |v| * 1e-16 off
 * (1e-4 at 1e12) and float32 lse far worse (bug 13 of issue 11). */
static inline DP_HD double dp_softmax_out_d(double v, double mx, double log_s, int log_softmax) {
  double d = (v - mx) - log_s;
  return log_softmax ? d : exp(d);
}
/* gradient: softmax: y * (gy - sum(gy*y)); log_softmax: gy - exp(y) * sum(gy) */
static inline DP_HD double dp_softmax_grad_d(double gy, double y, double dot, int log_softmax) {
  return log_softmax ? gy - exp(y) * dot : y * (gy - dot);
}
/* Cross-entropy of one row from its max and log_s (as softmax's), the
 * target logit and sum_d = sum_j (x_j - max): (1-eps) * nll + eps *
 * mean_j(-log p_j), each from differences to the max (a mean of the logits
 * themselves is rounded to their magnitude: 32 off at 2e17). */
static inline DP_HD double dp_ce_loss_d(double mx, double log_s, double x_target, double sum_d, int64_t classes,
                                        double eps) {
  double nll = (mx - x_target) + log_s;
  if (eps == 0) return nll; /* no 0 * inf from an infinite logit in the smoothing term */
  double smooth = log_s - sum_d / (double)classes;
  return (1.0 - eps) * nll + eps * smooth;
}
/* d loss / d x_j times the row's scale: (p_j - smoothed one-hot_j) * scale */
static inline DP_HD double dp_ce_grad_d(double x, double mx, double log_s, int is_target, int64_t classes, double eps,
                                        double scale) {
  double target_p = eps / (double)classes + (is_target ? 1.0 - eps : 0.0);
  return (dp_softmax_out_d(x, mx, log_s, 0) - target_p) * scale;
}

/* Welford/Chan merge of (count n, mean, M2 = sum of squared deviations). */
static inline DP_HD void dp_welford_merge_d(double *n, double *mean, double *m2, double n2, double mean2, double m2b) {
  if (n2 == 0.0) return;
  double n1 = *n, tot = n1 + n2, delta = mean2 - *mean;
  *mean += delta * (n2 / tot);
  *m2 += m2b + delta * delta * (n1 * n2 / tot);
  *n = tot;
}
/* Batch norm's per-channel terms (y = (x - mean) * scale + bias:
 * dp_bn_apply), computed in double once per channel. */
typedef struct {
  double mean, scale, bias;
} dp_bn_affine_k;
static inline DP_HD dp_bn_affine_k dp_bn_affine(double mean, double invstd, double w, double b) {
  dp_bn_affine_k k;
  k.mean = mean;
  k.scale = invstd * w;
  k.bias = b;
  return k;
}
/* Batch norm input gradient w * invstd * (gy - mean_dy - xhat *
 * mean_dy_xhat), xhat = (x - mean) * invstd, folded the same way into gx =
 * k.gy * gy + k.x * x + k.c (dp_bn_grad_apply). mean_dy and mean_dy_xhat
 * are the per-channel sums over the count (zero in evaluation mode, where
 * the statistics are constants). */
typedef struct {
  double gy, x, c;
} dp_bn_grad_k;
static inline DP_HD dp_bn_grad_k dp_bn_grad_coefs(double w, double invstd, double mean, double mean_dy,
                                                  double mean_dy_xhat) {
  double a = w * invstd;
  dp_bn_grad_k k;
  k.gy = a;
  k.x = -a * invstd * mean_dy_xhat;
  /* without the xhat term (evaluation mode) an infinite mean must not make 0 * inf */
  k.c = -a * mean_dy + (mean_dy_xhat != 0 ? a * invstd * mean_dy_xhat * mean : 0.0);
  return k;
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
/* dp_window2d.divisor's modes: the padded window (0, above), the positions inside the input
 * (DP_AVGPOOL_VALID: count_include_pad=false), or the number itself (> 0: divisor_override). padded is
 * dp_avgpool_divisor's value, valid the count of the window's positions inside the input. */
#define DP_AVGPOOL_VALID (-1)
static inline DP_HD int64_t dp_avgpool_div(int64_t mode, int64_t padded, int64_t valid) {
  return mode > 0 ? mode : mode == DP_AVGPOOL_VALID ? valid : padded;
}

#endif
