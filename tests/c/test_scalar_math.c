/* The per-element and per-row math the CUDA kernels share with the CPU
 * backend (ops/scalar_math.h, tensor/dtype_conv.h), checked on the CPU:
 * float versions against the double references, derivatives against
 * finite differences, the parallel-reduction merges (log-sum-exp, Welford)
 * against direct two-pass results for every way of splitting the data,
 * exact int64 arithmetic, and the dtype conversions of the float path. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/scalar_math.h"
#include "tensor/dtype_conv.h"
#include "test_util.h"

static double frand(unsigned *s, double lo, double hi) {
  *s = *s * 1103515245u + 12345u;
  return lo + (hi - lo) * ((*s >> 8) & 0xffffff) / 16777216.0;
}

/* every op of the table with its default parameters */
static void test_unary(void) {
  unsigned s = 1;
  for (int op = 0; op < DP_U_COUNT; op++) {
    dp_unary_args a = dp_unary_args_of((dp_unary_op)op);
    const dp_unary_params *p = &a.p;
    bool positive = op == DP_U_LOG || op == DP_U_SQRT || op == DP_U_RSQRT || op == DP_U_RECIP || op == DP_U_LOG2 ||
                    op == DP_U_LOG10;
    bool unit = op == DP_U_ASIN || op == DP_U_ACOS || op == DP_U_ATANH; /* their domain (-1, 1) */
    double worst = 0, worst_grad = 0;
    for (int i = 0; i < 2000; i++) {
      double x = positive ? frand(&s, 0.05, 6.0) : unit ? frand(&s, -0.95, 0.95) : frand(&s, -6.0, 6.0);
      if (op == DP_U_ACOSH) x = frand(&s, 1.05, 6.0);
      if (op == DP_U_TAN && fabs(cos(x)) < 0.05) continue; /* tan's poles: finite differences lose there */
      if (fabs(x) < 1e-3) continue;                        /* sign/abs/relu kinks */
      float xf = (float)x;
      double yd = dp_unary_d((dp_unary_op)op, xf, p), yf = dp_unary_f((dp_unary_op)op, xf, p);
      double e = fabs(yf - yd) / (1 + fabs(yd)); /* float cancels near zero (gelu's tail): relative to 1 + |y| */
      if (e > worst) worst = e;
      /* the derivative against central differences of the double version */
      double h = 1e-6 * (1 + fabs(x));
      double fd = (dp_unary_d((dp_unary_op)op, x + h, p) - dp_unary_d((dp_unary_op)op, x - h, p)) / (2 * h);
      double gd = dp_unary_grad_d((dp_unary_op)op, 1.0, x, dp_unary_d((dp_unary_op)op, x, p), p);
      double eg = fabs(gd - fd) / (1 + fabs(fd));
      if (eg > worst_grad) worst_grad = eg;
      /* and the float derivative against the double one */
      double gf = dp_unary_grad_f((dp_unary_op)op, 1.f, xf, dp_unary_f((dp_unary_op)op, xf, p), p);
      double gd2 = dp_unary_grad_d((dp_unary_op)op, 1.0, xf, dp_unary_d((dp_unary_op)op, xf, p), p);
      double e2 = fabs(gf - gd2) / (1 + fabs(gd2));
      if (e2 > worst) worst = e2;
    }
    if (!(worst < 2e-6 && worst_grad < 1e-5))
      fprintf(stderr, "unary op %s: float vs double %.3g, gradient vs finite differences %.3g\n",
              dp_unary_name((dp_unary_op)op), worst, worst_grad);
    CHECK(worst < 2e-6);
    CHECK(worst_grad < 1e-5);
  }
  /* NaN in, NaN out; relu/sign at zero */
  dp_unary_params none = dp_unary_args_of(DP_U_EXP).p;
  CHECK(isnan(dp_unary_f(DP_U_EXP, NAN, &none)) && isnan(dp_unary_d(DP_U_TANH, NAN, &none)));
  CHECK(dp_unary_f(DP_U_RELU, 0.f, &none) == 0.f && dp_unary_d(DP_U_SIGN, 0.0, &none) == 0.0);
  /* relu's gradient is a select: no NaN where the output is not positive */
  CHECK(dp_unary_grad_f(DP_U_RELU, NAN, -1.f, 0.f, &none) == 0.f);
  /* int64 ops keep the type exactly */
  int64_t big = ((int64_t)1 << 60) + 3;
  CHECK(dp_unary_i64(DP_U_NEG, big, &none) == -big);
  CHECK(dp_unary_i64(DP_U_ABS, -big, &none) == big);
  CHECK(dp_unary_i64(DP_U_RELU, -5, &none) == 0 && dp_unary_i64(DP_U_RELU, 7, &none) == 7);
  CHECK(dp_unary_i64(DP_U_SQUARE, 3037000499, &none) == (int64_t)3037000499 * 3037000499);
  CHECK(dp_unary_i64(DP_U_SIGN, -9, &none) == -1 && dp_unary_i64(DP_U_SIGN, 0, &none) == 0);
  /* clamp: PyTorch's order (min > max gives max), NaN kept, int64 bounds saturate */
  dp_unary_params cl = dp_unary_args_of(DP_U_CLAMP).p;
  cl.min = 2, cl.max = 1;
  CHECK(dp_unary_d(DP_U_CLAMP, 5.0, &cl) == 1.0 && dp_unary_d(DP_U_CLAMP, -5.0, &cl) == 1.0);
  cl.min = -1, cl.max = INFINITY;
  CHECK(isnan(dp_unary_f(DP_U_CLAMP, NAN, &cl)) && dp_unary_i64(DP_U_CLAMP, big, &cl) == big);
  CHECK(dp_unary_i64(DP_U_CLAMP, -big, &cl) == -1);
  /* the trigonometric ops' domain edges, as PyTorch: NaN outside, inf at atanh(+-1), and the gradients' rsqrt of 0 */
  CHECK(isnan(dp_unary_d(DP_U_ASIN, 1.5, &none)) && isnan(dp_unary_f(DP_U_ACOS, -1.5f, &none)));
  CHECK(isnan(dp_unary_d(DP_U_ACOSH, 0.5, &none)) && isnan(dp_unary_f(DP_U_ATANH, 2.f, &none)));
  CHECK(dp_unary_d(DP_U_ATANH, 1.0, &none) == INFINITY && dp_unary_f(DP_U_ATANH, -1.f, &none) == -INFINITY);
  CHECK(dp_unary_grad_d(DP_U_ASIN, 1.0, -1.0, 0, &none) == INFINITY);
  CHECK(dp_unary_grad_f(DP_U_ACOS, 1.f, 1.f, 0, &none) == -INFINITY);
  CHECK(dp_unary_grad_d(DP_U_ACOSH, 1.0, 1.0, 0, &none) == INFINITY &&
        isnan(dp_unary_grad_d(DP_U_ACOSH, 1, 0.5, 0, &none)));
  CHECK(dp_unary_grad_f(DP_U_ATANH, 1.f, 1.f, 0, &none) == INFINITY &&
        isnan(dp_unary_grad_d(DP_U_ASIN, 1, 2, 0, &none)));
  CHECK(dp_unary_d(DP_U_LOG2, 8.0, &none) == 3 && dp_unary_f(DP_U_LOG10, 1000.f, &none) == 3.f);
  CHECK(dp_unary_d(DP_U_LOG2, 0.0, &none) == -INFINITY && isnan(dp_unary_f(DP_U_LOG10, -1.f, &none)));
  CHECK(dp_unary_d(DP_U_EXP2, 10.0, &none) == 1024 && dp_unary_f(DP_U_EXP2, -INFINITY, &none) == 0);
  CHECK(dp_unary_grad_d(DP_U_ATAN, 1.0, INFINITY, 0, &none) == 0 &&
        dp_unary_d(DP_U_COSH, -INFINITY, &none) == INFINITY);
}

/* The parameters share slots across ops (op_table.h's DP_UNARY_PARAM_FIELDS): one op's parameters never share one,
 * and each reads back its default. */
static void test_param_slots(void) {
  for (size_t i = 0; i < DP_UNARY_NPARAMS; i++) {
    const dp_param_info *a = &dp_unary_param_list[i];
    CHECK(a->offset + sizeof(double) <= sizeof(dp_unary_params));
    for (size_t j = i + 1; j < DP_UNARY_NPARAMS; j++)
      if (dp_unary_param_list[j].op == a->op) {
        if (dp_unary_param_list[j].offset == a->offset)
          fprintf(stderr, "%s: %s and %s share a slot\n", dp_unary_name(a->op), a->name, dp_unary_param_list[j].name);
        CHECK(dp_unary_param_list[j].offset != a->offset);
      }
    dp_unary_args args = dp_unary_args_of(a->op);
    double v;
    memcpy(&v, (const char *)&args.p + a->offset, sizeof v);
    CHECK(v == a->dflt || (isnan(v) && isnan(a->dflt)));
  }
}

/* The activations' edges, as PyTorch's vectorised loops give them: the gradient of hardtanh and the shrinks only
 * strictly inside / outside their bounds, 0 at NaN; selu's and celu's NaN at NaN; softshrink(NaN) = 0. */
static void test_activation_edges(void) {
  dp_unary_params ht = dp_unary_args_of(DP_U_HARDTANH).p;
  CHECK(dp_unary_grad_d(DP_U_HARDTANH, 2.0, -1.0, 0.0, &ht) == 0 &&
        dp_unary_grad_f(DP_U_HARDTANH, 2.f, 1.f, 0.f, &ht) == 0);
  CHECK(dp_unary_grad_d(DP_U_HARDTANH, 2.0, 0.5, 0.0, &ht) == 2 &&
        dp_unary_grad_f(DP_U_HARDTANH, 2.f, NAN, 0.f, &ht) == 0);
  CHECK(isnan(dp_unary_d(DP_U_HARDTANH, NAN, &ht)) && dp_unary_f(DP_U_HARDTANH, 5.f, &ht) == 1.f);
  ht.min_val = 0, ht.max_val = 6; /* relu6 */
  CHECK(dp_unary_d(DP_U_HARDTANH, 7.0, &ht) == 6 && dp_unary_i64(DP_U_HARDTANH, -9, &ht) == 0);
  CHECK(dp_unary_grad_d(DP_U_HARDTANH, 1.0, 0.0, 0.0, &ht) == 0);
  dp_unary_params sh = dp_unary_args_of(DP_U_SOFTSHRINK).p;
  CHECK(dp_unary_d(DP_U_SOFTSHRINK, NAN, &sh) == 0 && isnan(dp_unary_f(DP_U_HARDSHRINK, NAN, &sh)));
  CHECK(dp_unary_grad_f(DP_U_SOFTSHRINK, 1.f, NAN, 0.f, &sh) == 0 &&
        dp_unary_grad_d(DP_U_HARDSHRINK, 1.0, 0.5, 0, &sh) == 0);
  CHECK(dp_unary_d(DP_U_SOFTSHRINK, -2.0, &sh) == -1.5 && dp_unary_d(DP_U_HARDSHRINK, 0.5, &sh) == 0);
  dp_unary_params none = dp_unary_args_of(DP_U_SELU).p, ce = dp_unary_args_of(DP_U_CELU).p;
  CHECK(isnan(dp_unary_grad_d(DP_U_SELU, 1.0, NAN, 0, &none)) && isnan(dp_unary_grad_f(DP_U_CELU, 1.f, NAN, 0, &ce)));
  CHECK(dp_unary_grad_d(DP_U_HARDSIGMOID, 1.0, 0.0, 0, &none) == (double)(1.0f / 6.0f));
  CHECK(dp_unary_grad_d(DP_U_HARDSWISH, 1.0, 3.0, 0, &none) == 1 &&
        isnan(dp_unary_grad_f(DP_U_HARDSWISH, 1.f, NAN, 0, &none)));
  CHECK(isnan(dp_unary_d(DP_U_MISH, -INFINITY, &none)) && isnan(dp_unary_f(DP_U_GELU_TANH, -INFINITY, &none)));
  CHECK(dp_unary_d(DP_U_LOGSIGMOID, -INFINITY, &none) == -INFINITY &&
        dp_unary_f(DP_U_LOGSIGMOID, INFINITY, &none) == 0);
  dp_unary_params th = dp_unary_args_of(DP_U_THRESHOLD).p;
  th.threshold = 0.5, th.value = -2;
  CHECK(dp_unary_d(DP_U_THRESHOLD, 0.5, &th) == -2 && isnan(dp_unary_f(DP_U_THRESHOLD, NAN, &th)));
  CHECK(dp_unary_grad_d(DP_U_THRESHOLD, 3.0, NAN, 0, &th) == 3 &&
        dp_unary_grad_f(DP_U_THRESHOLD, 3.f, 0.5f, 0, &th) == 0);
  th.threshold = 1; /* int64 keeps the dtype for whole parameters */
  CHECK(dp_unary_i64(DP_U_THRESHOLD, 1, &th) == -2 && dp_unary_i64(DP_U_THRESHOLD, 2, &th) == 2);
}

static void test_binary(void) {
  unsigned s = 2;
  for (int op = 0; op < DP_B_COUNT; op++) {
    double worst = 0;
    for (int i = 0; i < 2000; i++) {
      float a = (float)frand(&s, -4, 4), b = (float)frand(&s, -4, 4);
      if (op == DP_B_POW) a = fabsf(a) + 0.1f;
      if (op == DP_B_DIV && fabsf(b) < 0.05f) b = 0.5f;
      if (op == DP_B_BCE_LOGITS) b = (b + 4) / 8; /* a target in [0, 1] */
      double d = dp_binary_d((dp_binary_op)op, a, b), f = dp_binary_f((dp_binary_op)op, a, b);
      double e = fabs(f - d) / (1e-30 + fabs(d));
      if (d == 0) e = fabs(f);
      if (op == DP_B_BCE_LOGITS) e = fabs(f - d) / fmax(1, fabs(d)); /* a loss: its terms cancel near 0 */
      if (e > worst) worst = e;
    }
    CHECK(worst < 1e-6);
  }
  CHECK(isnan(dp_binary_f(DP_B_MAX, NAN, 1.f)) && isnan(dp_binary_d(DP_B_MIN, NAN, 1.0)));
  CHECK(dp_binary_f(DP_B_MAX, 1.f, 2.f) == 2.f);
  int64_t big = ((int64_t)1 << 61) + 1;
  CHECK(dp_binary_i64(DP_B_ADD, big, 1) == big + 1); /* 2^61 + 2: not representable in double */
  CHECK(dp_binary_i64(DP_B_MUL, big, 2) == 2 * big);
  CHECK(dp_binary_i64(DP_B_LT, big, big + 1) == 1 && dp_binary_i64(DP_B_EQ, big, big + 1) == 0);
  CHECK(dp_binary_is_compare(DP_B_EQ) && !dp_binary_is_compare(DP_B_POW));
}

/* every split of v[0..n) into two runs, merged, equals the direct result */
static void test_lse_and_welford(void) {
  unsigned s = 3;
  double v[40];
  for (int trial = 0; trial < 50; trial++) {
    int n = 1 + trial % 40;
    for (int i = 0; i < n; i++) v[i] = frand(&s, -30, 30);
    if (trial % 7 == 3) v[trial % n] = -INFINITY; /* masked logits */
    double mx = -INFINITY, sum = 0, mean = 0, m2 = 0;
    for (int i = 0; i < n; i++) mx = v[i] > mx ? v[i] : mx;
    for (int i = 0; i < n; i++) sum += exp(v[i] - mx);
    double lse = mx + log(sum);
    int finite = 0;
    for (int i = 0; i < n; i++)
      if (isfinite(v[i])) mean += v[i], finite++;
    mean /= finite;
    for (int i = 0; i < n; i++)
      if (isfinite(v[i])) m2 += (v[i] - mean) * (v[i] - mean);
    for (int cut = 0; cut <= n; cut++) {
      double ma = -INFINITY, sa = 0, mb = -INFINITY, sb = 0;
      double na = 0, meana = 0, m2a = 0, nb = 0, meanb = 0, m2b = 0;
      for (int i = 0; i < n; i++) {
        bool left = i < cut;
        if (v[i] != -INFINITY) dp_lse_merge_d(left ? &ma : &mb, left ? &sa : &sb, v[i], 1.0);
        if (!isfinite(v[i])) continue;
        dp_welford_merge_d(left ? &na : &nb, left ? &meana : &meanb, left ? &m2a : &m2b, 1.0, v[i], 0.0);
      }
      dp_lse_merge_d(&ma, &sa, mb, sb);
      CHECK(fabs(ma + log(sa) - lse) < 1e-12 * (1 + fabs(lse)));
      dp_welford_merge_d(&na, &meana, &m2a, nb, meanb, m2b);
      CHECK(na == finite);
      CHECK(fabs(meana - mean) < 1e-12 * (1 + fabs(mean)));
      CHECK(fabs(m2a - m2) < 1e-10 * (1 + m2));
    }
  }
  double m = 0, s1 = 1;
  dp_lse_merge_d(&m, &s1, NAN, 1.0);
  CHECK(isnan(m + log(s1)));
}

static void test_cross_entropy(void) {
  double x[5] = {0.3, -1.2, 2.5, 0.0, 1.1};
  int C = 5, t = 2;
  for (int k = 0; k < 3; k++) {
    double eps = k * 0.1;
    double mx = 2.5, sum = 0, sx = 0;
    for (int j = 0; j < C; j++) sum += exp(x[j] - mx), sx += x[j];
    double lse = mx + log(sum), total = 0;
    for (int j = 0; j < C; j++) {
      double g = dp_ce_grad_d(x[j], mx, log(sum), j == t, C, eps, 1.0);
      total += g;
      /* against a finite difference of the loss */
      double h = 1e-6, xp[5], xm[5];
      for (int i = 0; i < C; i++) xp[i] = xm[i] = x[i];
      xp[j] += h, xm[j] -= h;
      double lp = 0, lm = 0, sp = 0, sm = 0, sxp = 0, sxm = 0;
      for (int i = 0; i < C; i++) lp += exp(xp[i]), lm += exp(xm[i]), sxp += xp[i], sxm += xm[i];
      sp = log(lp), sm = log(lm);
      double fd = (dp_ce_loss_d(0, sp, xp[t], sxp, C, eps) - dp_ce_loss_d(0, sm, xm[t], sxm, C, eps)) / (2 * h);
      CHECK(fabs(g - fd) < 1e-7);
    }
    CHECK(fabs(total) < 1e-12); /* softmax sums to 1, so do the targets */
    CHECK(fabs(dp_ce_loss_d(mx, log(sum), x[t], sx, C, 0.0) - (lse - x[t])) < 1e-15);
  }
  /* softmax gradient formulas against differences */
  double y[3], xs[3] = {0.2, -0.7, 1.3}, gy[3] = {0.5, -1.0, 2.0};
  double sum = exp(0.2) + exp(-0.7) + exp(1.3), lse = log(sum);
  for (int j = 0; j < 3; j++) y[j] = dp_softmax_out_d(xs[j], 0, lse, 0);
  double dot = gy[0] * y[0] + gy[1] * y[1] + gy[2] * y[2];
  for (int j = 0; j < 3; j++) {
    double h = 1e-6, fp = 0, fm = 0;
    for (int i = 0; i < 3; i++) {
      double xp = xs[i] + (i == j ? h : 0), xm = xs[i] - (i == j ? h : 0);
      double lp = log(exp(xs[0] + (j == 0 ? h : 0)) + exp(xs[1] + (j == 1 ? h : 0)) + exp(xs[2] + (j == 2 ? h : 0)));
      double lm = log(exp(xs[0] - (j == 0 ? h : 0)) + exp(xs[1] - (j == 1 ? h : 0)) + exp(xs[2] - (j == 2 ? h : 0)));
      fp += gy[i] * dp_softmax_out_d(xp, 0, lp, 0);
      fm += gy[i] * dp_softmax_out_d(xm, 0, lm, 0);
    }
    CHECK(fabs(dp_softmax_grad_d(gy[j], y[j], dot, 0) - (fp - fm) / (2 * h)) < 1e-7);
  }
  /* logits of 1e12 (bug 13 of issue 11): from x - max, softmax, log_softmax, the loss and its gradient stay exact;
   * through lse = max + log_s (rounded to 1e12's ulp, 1.2e-4) they were 1e-4 off */
  double big[2] = {1e12, 1e12 - 1}, mb = 1e12, ls = log(1 + exp(-1.0));
  double p0 = 1 / (1 + exp(-1.0)), p1 = exp(-1.0) / (1 + exp(-1.0));
  CHECK(fabs(dp_softmax_out_d(big[0], mb, ls, 0) - p0) < 1e-15);
  CHECK(fabs(dp_softmax_out_d(big[1], mb, ls, 0) - p1) < 1e-15);
  CHECK(fabs(dp_softmax_out_d(big[1], mb, ls, 1) - (-1 - ls)) < 1e-15);
  CHECK(fabs(dp_ce_loss_d(mb, ls, big[1], -1.0, 2, 0.0) - (1 + ls)) < 1e-15);
  CHECK(fabs(dp_ce_grad_d(big[0], mb, ls, 1, 2, 0.0, 1.0) - (p0 - 1)) < 1e-15);
  /* label smoothing over a row of equal logits 2.3e17: mean_j(-log p_j) = log(5), where the mean of the logits is
   * 32 off the max */
  CHECK(fabs(dp_ce_loss_d(2.3371544944018147e17, log(5.0), 2.3371544944018147e17, 0.0, 5, 1.0) - log(5.0)) < 1e-15);
}

/* batch norm / layer norm element formulas against differences of the
 * normalisation of one channel / row */
static double norm_objective(const double *x, int n, const double *gy, double w) {
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += x[i];
  mean /= n;
  for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  double r = 0;
  for (int i = 0; i < n; i++) r += gy[i] * w * (x[i] - mean) / sqrt(var + 1e-5);
  return r;
}

static void test_norms(void) {
  double x[6] = {0.5, -1.5, 2.0, 0.25, 3.0, -0.75}, gy[6] = {1.0, -2.0, 0.5, 0.3, -0.1, 0.7}, w = 1.7;
  int n = 6;
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += x[i];
  mean /= n;
  for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  double invstd = 1 / sqrt(var + 1e-5), sum_dy = 0, sum_dy_xhat = 0, mg = 0, mgx = 0;
  for (int i = 0; i < n; i++) {
    sum_dy += gy[i], sum_dy_xhat += gy[i] * (x[i] - mean) * invstd;
    mg += gy[i] * w, mgx += gy[i] * w * (x[i] - mean) * invstd;
  }
  mg /= n, mgx /= n;
  for (int i = 0; i < n; i++) {
    double xp[6], xm[6], h = 1e-6;
    for (int k = 0; k < n; k++) xp[k] = xm[k] = x[k];
    xp[i] += h, xm[i] -= h;
    double fd = (norm_objective(xp, n, gy, w) - norm_objective(xm, n, gy, w)) / (2 * h);
    dp_bn_grad_k k = dp_bn_grad_coefs(w, invstd, mean, sum_dy / n, sum_dy_xhat / n);
    double bn = dp_bn_grad_apply_d(gy[i], x[i], k.gy, k.x, k.c);
    double ln = dp_ln_grad_d(gy[i] * w, (x[i] - mean) * invstd, invstd, mg, mgx);
    CHECK(fabs(bn - fd) < 1e-6);
    CHECK(fabs(ln - fd) < 1e-6);
  }
}

static void test_avgpool_divisor(void) {
  /* 3x3 windows, padding 1 on a 5x5 input: always 9 (count_include_pad) */
  for (int64_t oy = 0; oy < 5; oy++)
    for (int64_t ox = 0; ox < 5; ox++) CHECK(dp_avgpool_divisor(oy - 1, ox - 1, 3, 3, 5, 5, 1, 1) == 9);
  /* a window running past the padded edge (as ceil_mode would make) is clipped to it */
  CHECK(dp_avgpool_divisor(4, 0, 3, 2, 5, 5, 1, 0) == 2 * 2);
}

static void test_conversions(void) {
  unsigned s = 4;
  dp_dtype f32ish[3] = {DP_F32, DP_BF16, DP_F16};
  for (int i = 0; i < 5000; i++) {
    float v = (float)frand(&s, -70000, 70000) * (i % 3 ? 1.f : 1e-6f);
    for (int k = 0; k < 3; k++) {
      uint64_t a = 0, b = 0;
      dp_conv_store_f(&a, f32ish[k], v);
      dp_conv_store_d(&b, f32ish[k], v);
      CHECK(a == b); /* the float path rounds exactly like the reference */
      CHECK(dp_conv_load_f(&a, f32ish[k]) == (float)dp_conv_load_d(&a, f32ish[k]));
    }
  }
  uint64_t b = 0;
  dp_conv_store_d(&b, DP_U8, 300.7);
  CHECK(b == 44); /* wraps after truncation, like PyTorch */
  dp_conv_store_d(&b, DP_I64, NAN);
  CHECK(b == 0);
  CHECK(dp_dtype_bytes(DP_BF16) == 2 && dp_dtype_bytes(DP_I64) == 8 && dp_dtype_bytes(DP_U8) == 1);
}

int main(void) {
  test_unary();
  test_param_slots();
  test_activation_edges();
  test_binary();
  test_lse_and_welford();
  test_cross_entropy();
  test_norms();
  test_avgpool_divisor();
  test_conversions();
  TEST_DONE();
}
