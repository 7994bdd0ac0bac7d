/* Per-element math of the model ops (recurrent cells, RMSprop / Adadelta / Adagrad,
 * adaptive pooling windows, sampling, attention dropout, top-k order),
 * shared by the CPU kernels and the CUDA kernels (DP_HD) so both devices
 * compute the same arithmetic and the CPU tests exercise what the GPU
 * runs. The cell and optimizer formulas exist for float (_f: float32
 * kernels) and double (_d: float64, the reference). */
#ifndef DP_MODEL_MATH_H
#define DP_MODEL_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops/philox.h"
#include "tensor/half.h" /* DP_HD */

/* Recurrent cell kinds (nn.RNN's tanh / relu, nn.LSTM, nn.GRU) and the
 * number of gate blocks of h values per row of their projections. */
typedef enum { DP_RNN_TANH, DP_RNN_RELU, DP_RNN_LSTM, DP_RNN_GRU } dp_rnn_mode;
static inline DP_HD int dp_rnn_gates(dp_rnn_mode m) { return m == DP_RNN_LSTM ? 4 : m == DP_RNN_GRU ? 3 : 1; }
/* Per-row values a step saves for its backward, in units of h: LSTM its 4
 * activated gates, GRU r, z, n and the hidden n projection, RNN none (the
 * output itself is enough). */
static inline DP_HD int dp_rnn_saved(dp_rnn_mode m) { return m == DP_RNN_LSTM ? 4 : m == DP_RNN_GRU ? 4 : 0; }

#define DP_MODEL_MATH_T(T, S, EXP_, TANH_, SQRT_)                                                                      \
  static inline DP_HD T dp_sigmoid_##S(T x) {                                                                          \
    if (x >= 0) return 1 / (1 + EXP_(-x));                                                                             \
    T e = EXP_(x);                                                                                                     \
    return e / (1 + e);                                                                                                \
  }                                                                                                                    \
  /* LSTM (PyTorch's gate order i, f, g, o): from the pre-activations (both                                            \
   * projections and both biases summed) and c_{t-1}, the activated gates,                                             \
   * c_t = f c_{t-1} + i g and h_t = o tanh(c_t). */                                                                   \
  static inline DP_HD void dp_lstm_cell_##S(T pi, T pf, T pg, T po, T c_prev, T *ai, T *af, T *ag, T *ao, T *c,        \
                                            T *h) {                                                                    \
    *ai = dp_sigmoid_##S(pi);                                                                                          \
    *af = dp_sigmoid_##S(pf);                                                                                          \
    *ag = TANH_(pg);                                                                                                   \
    *ao = dp_sigmoid_##S(po);                                                                                          \
    *c = *af * c_prev + *ai * *ag;                                                                                     \
    *h = *ao * TANH_(*c);                                                                                              \
  }                                                                                                                    \
  /* Its backward: dh is the whole gradient reaching h_t, dc the one reaching                                          \
   * c_t from step t + 1; gives the pre-activation gradients and dc_{t-1}. */                                          \
  static inline DP_HD void dp_lstm_cell_grad_##S(T ai, T af, T ag, T ao, T c, T c_prev, T dh, T dc, T *dpi, T *dpf,    \
                                                 T *dpg, T *dpo, T *dc_prev) {                                         \
    T tc = TANH_(c);                                                                                                   \
    T dct = dc + dh * ao * (1 - tc * tc);                                                                              \
    *dpo = dh * tc * (ao * (1 - ao));                                                                                  \
    *dpi = dct * ag * (ai * (1 - ai));                                                                                 \
    *dpf = dct * c_prev * (af * (1 - af));                                                                             \
    *dpg = dct * ai * (1 - ag * ag);                                                                                   \
    *dc_prev = dct * af;                                                                                               \
  }                                                                                                                    \
  /* GRU (PyTorch's order r, z, n): x* the input projection with b_ih, h*                                              \
   * the hidden one with b_hh (kept apart: r multiplies the hidden n part).                                            \
   * n = tanh(xn + r hn), h_t = (1 - z) n + z h_{t-1}. */                                                              \
  static inline DP_HD void dp_gru_cell_##S(T xr, T xz, T xn, T hr, T hz, T hn, T h_prev, T *r, T *z, T *n, T *h) {     \
    *r = dp_sigmoid_##S(xr + hr);                                                                                      \
    *z = dp_sigmoid_##S(xz + hz);                                                                                      \
    *n = TANH_(xn + *r * hn);                                                                                          \
    *h = (1 - *z) * *n + *z * h_prev;                                                                                  \
  }                                                                                                                    \
  /* Its backward: the input-side pre-activation gradients (the hidden side's                                          \
   * are the same for r and z, and dhn for n) and h_{t-1}'s direct share. */                                           \
  static inline DP_HD void dp_gru_cell_grad_##S(T r, T z, T n, T hn, T h_prev, T dh, T *dxr, T *dxz, T *dxn, T *dhn,   \
                                                T *dh_direct) {                                                        \
    T dnp = dh * (1 - z) * (1 - n * n);                                                                                \
    *dxr = dnp * hn * (r * (1 - r));                                                                                   \
    *dxz = dh * (h_prev - n) * (z * (1 - z));                                                                          \
    *dxn = dnp;                                                                                                        \
    *dhn = dnp * r;                                                                                                    \
    *dh_direct = dh * z;                                                                                               \
  }                                                                                                                    \
  /* RMSprop, PyTorch's update: square_avg = a sa + (1-a) g^2; centered                                                \
   * (gavg non-NULL) subtracts the squared mean gradient; with momentum                                                \
   * (buf non-NULL) buf = m buf + g / avg and p -= lr buf, else p -= lr g / avg. */                                    \
  static inline DP_HD void dp_rmsprop_update_##S(T *p, T g, T *sq, T *gavg, T *buf, T lr, T alpha, T eps, T wd,        \
                                                 T momentum) {                                                         \
    if (wd != 0) g += wd * *p;                                                                                         \
    *sq = alpha * *sq + (1 - alpha) * g * g;                                                                           \
    T avg;                                                                                                             \
    if (gavg) {                                                                                                        \
      *gavg = alpha * *gavg + (1 - alpha) * g;                                                                         \
      avg = SQRT_(*sq - *gavg * *gavg) + eps;                                                                          \
    } else {                                                                                                           \
      avg = SQRT_(*sq) + eps;                                                                                          \
    }                                                                                                                  \
    if (buf) {                                                                                                         \
      *buf = momentum * *buf + g / avg;                                                                                \
      *p += -lr * *buf;                                                                                                \
    } else {                                                                                                           \
      *p += -lr * (g / avg);                                                                                           \
    }                                                                                                                  \
  }                                                                                                                    \
  /* Adadelta, PyTorch's update (its order of operations): square_avg = rho sa + (1-rho) g^2,                          \
   * delta = sqrt(acc_delta + eps) / sqrt(sa + eps) * g, acc_delta = rho ad + (1-rho) delta^2,                         \
   * p -= lr delta. */                                                                                                 \
  static inline DP_HD void dp_adadelta_update_##S(T *p, T g, T *sq, T *acc, T lr, T rho, T eps, T wd) {                \
    if (wd != 0) g += wd * *p;                                                                                         \
    *sq = rho * *sq + (1 - rho) * g * g;                                                                               \
    T delta = SQRT_(*acc + eps) / SQRT_(*sq + eps) * g;                                                                \
    *acc = rho * *acc + (1 - rho) * delta * delta;                                                                     \
    *p += -lr * delta;                                                                                                 \
  }                                                                                                                    \
  /* Adagrad: sum += g^2, p -= clr g / (sqrt(sum) + eps), clr the decayed lr. */                                       \
  static inline DP_HD void dp_adagrad_update_##S(T *p, T g, T *sum, T clr, T eps, T wd) {                              \
    if (wd != 0) g += wd * *p;                                                                                         \
    *sum += g * g;                                                                                                     \
    *p += -clr * (g / (SQRT_(*sum) + eps));                                                                            \
  }

DP_MODEL_MATH_T(float, f, expf, tanhf, sqrtf)
DP_MODEL_MATH_T(double, d, exp, tanh, sqrt)
#undef DP_MODEL_MATH_T

/* ---- adaptive average pooling: output o of `out` over n inputs averages
 * [floor(o n / out), ceil((o + 1) n / out)) (PyTorch's windows) ---- */
static inline DP_HD int64_t dp_adaptive_start(int64_t o, int64_t n, int64_t out) { return (o * n) / out; }
static inline DP_HD int64_t dp_adaptive_end(int64_t o, int64_t n, int64_t out) { return ((o + 1) * n + out - 1) / out; }

/* ---- top-k order: whether a (at position ia) comes before b. NaN counts
 * as the largest value, as in PyTorch (first for largest, last for
 * smallest); ties keep the lower position first ---- */
static inline DP_HD bool dp_topk_before(double a, int64_t ia, double b, int64_t ib, bool largest) {
  bool an = a != a, bn = b != b;
  if (an || bn) {
    if (an && bn) return ia < ib;
    return largest ? an : bn;
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

/* cummax / cummin: does the value v at a later position replace the running
 * extreme cur? Ties move to the later position, a NaN takes over and stays
 * until the next NaN (PyTorch's order). */
static inline DP_HD bool dp_cum_extreme_takes(double v, double cur, bool is_max) {
  return v != v || (is_max ? v >= cur : v <= cur);
}

/* Running scans (backend cum_scan): the sum (the CPU's float cumsum runs
 * through it), the product, the log-add-exp, and the gradients of the last
 * two, computed per line in two passes (see the kernels). A scan starts
 * from dp_scan_start and folds each value in with dp_scan_fold, in double. */
typedef enum {
  DP_SCAN_SUM,
  DP_SCAN_PROD,
  DP_SCAN_PROD_GRAD,
  DP_SCAN_LOGADDEXP,
  DP_SCAN_LOGADDEXP_GRAD,
  DP_SCAN_KINDS
} dp_scan_kind;

/* log(exp(a) + exp(b)) without overflow: NaN stays NaN, two equal infinities
 * give themselves (inf - inf would be NaN), -inf is the identity. */
static inline DP_HD double dp_log_add_exp(double a, double b) {
  if (a != a || b != b) return a + b;
  double hi = a > b ? a : b, lo = a > b ? b : a;
  if (lo == -INFINITY || hi == INFINITY) return hi;
  return hi + log1p(exp(lo - hi));
}
static inline DP_HD bool dp_scan_is_lse(dp_scan_kind k) {
  return k == DP_SCAN_LOGADDEXP || k == DP_SCAN_LOGADDEXP_GRAD;
}
static inline DP_HD double dp_scan_start(dp_scan_kind k) {
  return dp_scan_is_lse(k) ? -INFINITY : k == DP_SCAN_SUM ? 0.0 : 1.0;
}
static inline DP_HD double dp_scan_fold(dp_scan_kind k, double acc, double v) {
  return dp_scan_is_lse(k) ? dp_log_add_exp(acc, v) : k == DP_SCAN_SUM ? acc + v : acc * v;
}
/* The backward passes, from the end of a line. The product's: with E the
 * exclusive product before the position (the first pass stores it) and s
 * the sum over later positions i of g_i times the x between, s_j = g_j +
 * x_(j+1) s_(j+1) and dx_j = E_j s_j: no division, exact with zeros. The
 * log-add-exp's: y is non-decreasing, so a_j = g_j + exp(y_j - y_(j+1))
 * a_(j+1) never overflows, and dx_j = exp(x_j - y_j) a_j; a factor of 0
 * (y_(j+1) = +inf) drops the later carry, NaN or not, as the terms it stands
 * for are 0 (PyTorch's gradient, which divides by exp(y) in log space, is
 * the same; both are NaN where x_j = y_j = -inf). `next` is x_(j+1)
 * (product) or y_(j+1), and `last` says j is the line's end. */
static inline DP_HD double dp_scan_grad_carry(dp_scan_kind k, double g, double here, double next, double carry,
                                              bool last) {
  if (last) return g;
  if (k == DP_SCAN_PROD_GRAD) return g + next * carry;
  double f = exp(here - next);
  return f == 0 ? g : g + f * carry;
}
static inline DP_HD double dp_scan_grad_value(dp_scan_kind k, double x, double stored, double carry) {
  return k == DP_SCAN_PROD_GRAD ? stored * carry : exp(x - stored) * carry;
}

/* searchsorted: does boundary b come before value x (b < x, or b <= x when
 * right)? A NaN boundary (sorted last) never does; a NaN value goes after
 * every boundary, which the kernels test before calling this. */
static inline DP_HD bool dp_boundary_before(double b, double x, bool right) { return right ? b <= x : b < x; }

/* ---- multinomial, one row: w holds the row's cats weights (consumed:
 * turned into cumulative sums with replacement, drawn ones zeroed without),
 * u the row's n uniforms in [0, 1), out its n category positions + base.
 * A draw takes the first category whose cumulative weight exceeds u times
 * the total (rounding past the end takes the last category with weight). */
static inline DP_HD void dp_multinomial_row(double *w, int64_t cats, const double *u, int64_t n, bool replacement,
                                            int64_t base, int64_t *out) {
  if (replacement) {
    int64_t last = 0;
    for (int64_t j = 0; j < cats; j++) {
      if (w[j] > 0) last = j;
      if (j) w[j] += w[j - 1];
    }
    double total = w[cats - 1];
    for (int64_t s = 0; s < n; s++) {
      double t = u[s] * total;
      int64_t lo = 0, hi = cats; /* first j with w[j] > t */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (w[mid] > t) hi = mid;
        else lo = mid + 1;
      }
      out[s] = (lo < cats ? lo : last) + base;
    }
    return;
  }
  for (int64_t s = 0; s < n; s++) {
    double total = 0;
    int64_t last = -1;
    for (int64_t j = 0; j < cats; j++) {
      total += w[j];
      if (w[j] > 0) last = j;
    }
    double t = u[s] * total, acc = 0;
    int64_t pick = last;
    for (int64_t j = 0; j < cats; j++) {
      if (w[j] <= 0) continue;
      acc += w[j];
      if (acc > t) {
        pick = j;
        break;
      }
    }
    out[s] = pick + base;
    if (pick >= 0) w[pick] = 0;
  }
}

/* ---- attention dropout: element e (= (bh * L + i) * S + j) of the
 * attention weights is kept when its uniform >= p; four elements share one
 * Philox counter (offset + e / 4, word e % 4), so a draw reserves
 * ceil(count / 4) counters. The forward and both backward passes, on every
 * device, recompute the same mask. ---- */
static inline DP_HD bool dp_attn_keep(uint64_t seed, uint64_t offset, uint64_t e, float p) {
  dp_philox4 r = dp_philox(seed, offset + e / 4);
  return dp_u32_to_uniform_f(r.v[e % 4]) >= p;
}

#endif
