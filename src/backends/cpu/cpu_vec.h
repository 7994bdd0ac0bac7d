/* The float32 CPU kernels, compiled once per instruction set and chosen at
 * run time from the CPU's features (as sgemm.h chooses its micro-kernel):
 * cpu_vec_avx512.c, cpu_vec_avx2.c and cpu_vec_base.c each include the
 * same kernel bodies (cpu_vec_*_t.h) under their own target, so every loop
 * is vectorised at that width by the compiler. The elementwise loops are
 * the op table's formulas (ops/scalar_math_t.h instantiated once more with
 * the vectorisable math of vmath.h), one loop per op.
 *
 * Every kernel works on contiguous float32 memory; the callers (cpu_*.c)
 * check dtypes and strides, split work over threads (cpu_parallel.h) and
 * keep the double-precision reference path for everything else, which the
 * specs hold these kernels against.
 *
 * DDPLUA_CPU_ISA=avx512|avx2|base (or dp_cpu_vec_set) picks one explicitly;
 * the default is the best this CPU has. */
#ifndef DP_CPU_VEC_H
#define DP_CPU_VEC_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/op_table.h"
#include "ops/scalar_math.h"

typedef struct {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
} dp_vec_sgd;

typedef struct dp_cpu_vec {
  const char *name; /* "avx512", "avx2", "base" */
  int width;        /* float32 lanes per vector */

  /* ---- elementwise over n values (cpu_vec_ew_t.h) ---- */
  /* o = op(x); o may be x */
  void (*unary)(const dp_unary_args *a, float *o, const float *x, int64_t n);
  /* gx from gy and x or y (the one the op table's grad column names) */
  void (*unary_bwd)(const dp_unary_args *a, float *gx, const float *gy, const float *x, const float *y, int64_t n);
  /* exact GELU (approximate='none') and its derivative: o = gelu(x), d = gelu'(x), so that gy * d is the
   * backward's gx bit for bit (the factor it multiplies gy by); the backward then reads d instead of
   * recomputing Phi and phi from x */
  void (*gelu_with_grad)(float *o, float *d, const float *x, int64_t n);
  /* o = a (op) b; o = a (op) v, or v (op) a when value_first; comparisons
   * write 1.0 / 0.0 */
  void (*binary)(dp_binary_op op, float *o, const float *a, const float *b, int64_t n);
  void (*binary_value)(dp_binary_op op, float *o, const float *a, float v, bool value_first, int64_t n);
  /* o = a^y for a finite y (powf's special cases where a is not positive and finite) */
  void (*pow_value)(float *o, const float *a, float y, int64_t n);
  /* comparisons into uint8 0/1 */
  void (*compare)(dp_binary_op op, uint8_t *o, const float *a, const float *b, int64_t n);
  void (*compare_value)(dp_binary_op op, uint8_t *o, const float *a, float v, bool value_first, int64_t n);
  /* dst (to) = src (from), n values; false when the pair is not one of
   * float32 <-> bfloat16 / float16 / float64, uint8 -> float32 */
  bool (*cast)(void *dst, int to, const void *src, int from, int64_t n);
  /* o[i] = keep_i ? x[i] * scale : 0, keep_i = Philox-uniform(seed, offset + i) >= p */
  void (*dropout)(float *o, const float *x, int64_t n, float p, float scale, uint64_t seed, uint64_t offset);
  /* o[i] = a + s * Philox-uniform(seed, offset + i) */
  void (*uniform)(float *o, int64_t n, float a, float s, uint64_t seed, uint64_t offset);
  /* o[i] = mean + std * Philox-normal(seed, offset + i), in double, rounded once */
  void (*normal)(float *o, int64_t n, double mean, double std, uint64_t seed, uint64_t offset);

  /* ---- rows and reductions (cpu_vec_rows_t.h) ---- */
  /* one row of n: softmax or log_softmax from exp(x - max) */
  void (*softmax_row)(float *y, const float *x, int64_t n, bool log);
  /* gx = y * (gy - sum(gy*y)) or gy - exp(y) * sum(gy) */
  void (*softmax_bwd_row)(float *gx, const float *gy, const float *y, int64_t n, bool log);
  /* the row's max and log_s = log(sum exp(x - max)) (the softmax's pair,
   * dp_softmax_out_d), and *sum_d = sum of (x - max) in double when sum_d is
   * not NULL; NaN anywhere makes log_s NaN. next (or NULL): the n floats
   * the caller reads next, fetched into the cache while this row's exps
   * compute (a cross-entropy's next row: its max pass then reads the cache,
   * not memory) */
  void (*lse_row)(const float *x, int64_t n, double *mx, double *log_s, double *sum_d, const float *next);
  /* one step of CTC's log-space recursion (cpu_ctc.c) over n states: out[s] = lp[s] + log(exp(a[s]) + exp(b[s]) +
   * exp(c[s])) in double, each term's exp taken relative to the largest in float32 (vmath.h, 2 ulp) and the
   * log of their sum (in [1, 3]) likewise; -inf terms allowed, all three -inf gives -inf */
  void (*lse3_row)(double *out, const double *a, const double *b, const double *c, const double *lp, int64_t n);
  /* g[j] = (exp((x[j] - mx) - log_s) - off) * sc (the target's element is
   * the caller's); next as lse_row's */
  void (*ce_bwd_row)(float *g, const float *x, int64_t n, double mx, double log_s, double off, double sc,
                     const float *next);
  /* sums in double */
  double (*sum)(const float *x, int64_t n);
  double (*sq_dev)(const float *x, int64_t n, double m);                                 /* sum (x - m)^2 */
  double (*dot_dev)(const float *g, const float *x, int64_t n, double m, double *sum_g); /* sum g (x - m) */
  void (*moments)(const float *x, int64_t n, double *mean, double *m2);                  /* mean, sum (x - mean)^2 */
  void (*col_acc)(double *acc, const float *x, int64_t n);                               /* acc[i] += x[i] */
  void (*col_sq_dev)(double *acc, const float *x, const double *m, int64_t n);           /* acc[i] += (x[i] - m[i])^2 */
  /* sum (x - y)^2, y NULL: sum x^2; difference and square in float32 (PyTorch's values), summed in double */
  double (*sum_sq)(const float *x, const float *y, int64_t n);
  void (*col_sum_sq)(double *acc, const float *x, const float *y, int64_t n); /* acc[i] += (x[i] - y[i])^2 */
  /* acc[i] += x[0][i], then += x[1][i], ... x[rows - 1][i] (rows <= 8): col_acc
   * row after row, the same additions, in one pass over acc */
  void (*col_acc_rows)(double *acc, const float *const *x, int rows, int64_t n);
  /* first position of the largest (want_max) or smallest value; NaN wins */
  int64_t (*arg_extreme)(const float *x, int64_t n, bool want_max);
  /* x seen as [k, inner]: out[i] = extreme over k of x[j * inner + i], idx
   * its first position (may be NULL); NaN wins */
  void (*extreme_cols)(float *out, int64_t *idx, const float *x, int64_t k, int64_t inner, bool want_max);

  /* ---- normalisation, optimizers, pooling (cpu_vec_nn_t.h) ---- */
  /* y = x * scale + shift */
  void (*affine)(float *y, const float *x, int64_t n, float mean, float scale, float bias);
  /* o = kgy * g + kx * x + kc; o may be g (not overlapping it otherwise) */
  void (*bn_grad)(float *o, const float *g, const float *x, int64_t n, double kgy, double kx, double kc);
  /* one row: y = (x - mean) * rstd * w + b (w, b may be NULL); returns the
   * mean and rstd computed in double */
  void (*ln_row)(float *y, const float *x, const float *w, const float *b, int64_t n, double eps, double *mean,
                 double *rstd);
  /* one row of the input gradient; gw, gb (double accumulators, may be
   * NULL) += gy * xhat, gy; scratch holds n floats */
  void (*ln_bwd_row)(float *gx, double *gw, double *gb, const float *gy, const float *x, const float *w, int64_t n,
                     double mean, double rstd, float *scratch);
  void (*sgd)(float *p, const float *g, float *buf, int64_t n, const dp_vec_sgd *a);
  void (*adam)(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, const dp_adam_k *k);
  /* g *= s; returns whether a value is inf or NaN */
  bool (*unscale)(float *g, int64_t n, float s);
  /* one plane: y [oh, ow], idx (plane positions) for a kh x kw window,
   * stride sh x sw, padding ph x pw (windows never empty) */
  void (*max_pool_plane)(float *y, int64_t *idx, const float *x, int64_t h, int64_t w, int64_t oh, int64_t ow,
                         int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw);
  /* divisor: dp_window2d.divisor's mode (dp_avgpool_div) */
  void (*avg_pool_plane)(float *y, const float *x, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t divisor);
  void (*avg_pool_bwd_plane)(float *gx, const float *gy, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
                             int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t divisor);
  /* one plane of max_pool2d(relu(batch_norm(x)), 2) (2x2 windows, stride 2, no padding, floor mode):
   * y [h/2, w/2] from x [h, w], the batch norm being (x - mean) * scale + bias (cpu_vec_pool2x2_t.h) */
  void (*bn_relu_max_pool2x2)(float *y, const float *x, int64_t h, int64_t w, float mean, float scale, float bias);
  /* its backward to the batch norm's output: gx [h, w] (every value written) from gy [h/2, w/2] */
  void (*bn_relu_max_pool2x2_bwd)(float *gx, const float *x, const float *gy, int64_t h, int64_t w, float mean,
                                  float scale, float bias);
} dp_cpu_vec;

extern const dp_cpu_vec dp_cpu_vec_avx512, dp_cpu_vec_avx2, dp_cpu_vec_base;

/* The kernels in use (DDPLUA_CPU_ISA, else the best the CPU supports). */
const dp_cpu_vec *dp_cpu_vec_get(void);
/* "avx512" | "avx2" | "base" | "auto": 0, or -1 + dp_error for another name
 * or one this CPU cannot run. */
int dp_cpu_vec_set(const char *name);
/* Whether this CPU runs the named set. */
bool dp_cpu_vec_supported(const dp_cpu_vec *v);
/* memcpy with non-temporal stores for the whole cache lines, at the width
 * of the kernels in use (plain memcpy without AVX2), then a store fence:
 * the copy is not left in this core's cache, and another thread or process
 * may read it next (cpu_elementwise.c; the collectives' streamed staging). */
void dp_cpu_copy_streamed(void *dst, const void *src, size_t n);
/* The CPU's model name and the features the dispatch looks at:
 * "Intel(R) Xeon(R) ... | avx512f avx512bw ... amx-bf16 | kernels avx512" */
const char *dp_cpu_describe(void);

#endif
