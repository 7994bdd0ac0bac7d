/* Per-element formulas written once for a type T: scalar_math.h includes
 * this file twice, with T = float (names ending _f: the float32, bfloat16
 * and float16 kernels) and T = double (_d: float64, and the reference path
 * every float kernel is tested against). No include guard on purpose.
 *
 * Unary ops: FWD(name) is y = f(x); BWD(name) is the input gradient gx
 * from the upstream gradient gy and x or y (whichever the op table's grad
 * column says is saved); INT(name), for ops that keep integer dtypes, is
 * the exact int64 version. p holds the op's parameters (op_table.h).
 * Literals go through C(...) and math functions through the upper-case
 * names below, so that the float version stays in float. */

#define T DP_T
#define C(v) ((T)(v))
#define EXP(v) DP_T_MATH(exp)(v)
#define LOG(v) DP_T_MATH(log)(v)
#define LOG1P(v) DP_T_MATH(log1p)(v)
#define EXPM1(v) DP_T_MATH(expm1)(v)
#define TANH(v) DP_T_MATH(tanh)(v)
#define SQRT(v) DP_T_MATH(sqrt)(v)
#define ERF(v) DP_T_MATH(erf)(v)
#define FABS(v) DP_T_MATH(fabs)(v)
#define SIN(v) DP_T_MATH(sin)(v)
#define COS(v) DP_T_MATH(cos)(v)
#define POW(a, b) DP_T_MATH(pow)(a, b)
#define FLOOR(v) DP_T_MATH(floor)(v)
#define CEIL(v) DP_T_MATH(ceil)(v)
#define TRUNC(v) DP_T_MATH(trunc)(v)
#define RINT(v) DP_T_MATH(nearbyint)(v)
#define FWD(name) static inline DP_HD T DP_TN(dp_##name##_fwd)(T x, DP_UNUSED const dp_unary_params *p)
#define BWD(name)                                                                                                      \
  static inline DP_HD T DP_TN(dp_##name##_bwd)(DP_UNUSED T gy, DP_UNUSED T x, DP_UNUSED T y,                           \
                                               DP_UNUSED const dp_unary_params *p)
#define INT(name) static inline DP_HD int64_t DP_TN(dp_##name##_i64)(int64_t x, DP_UNUSED const dp_unary_params *p)
#define BIN(name) static inline DP_HD T DP_TN(dp_##name##_bin)(T a, T b)
#define BIN_INT(name) static inline DP_HD int64_t DP_TN(dp_##name##_bin_i64)(int64_t a, int64_t b)

/* ---- unary ops, in the op table's order ---- */

FWD(neg) { return -x; }
BWD(neg) { return -gy; }
INT(neg) { return (int64_t)(0u - (uint64_t)x); }

FWD(exp) { return EXP(x); }
BWD(exp) { return gy * y; }

FWD(log) { return LOG(x); }
BWD(log) { return gy * (1 / x); }

/* NaN stays NaN (PyTorch's clamp_min(x, 0)) */
FWD(relu) { return x <= 0 ? 0 : x; }
/* from y, as a select: where y <= 0 the gradient is 0 even if gy is inf
 * or NaN, and NaN passes gy (PyTorch's threshold_backward) */
BWD(relu) { return y <= 0 ? 0 : gy; }
INT(relu) { return x > 0 ? x : 0; }

/* exact GELU, x * Phi(x) (PyTorch's default, approximate='none') */
#ifdef DP_T_GELU_PHI /* the CPU's vector loops: Phi and phi from one exp (backends/cpu/vmath.h) */
FWD(gelu) {
  T pdf;
  return x * DP_T_GELU_PHI(x, &pdf);
}
BWD(gelu) {
  T pdf, cdf = DP_T_GELU_PHI(x, &pdf);
  return gy * (cdf + x * pdf);
}
#else
FWD(gelu) { return C(0.5) * x * (1 + ERF(x * C(DP_SQRT1_2))); }
BWD(gelu) {
  T cdf = C(0.5) * (1 + ERF(x * C(DP_SQRT1_2)));
  T pdf = EXP(C(-0.5) * x * x) * C(DP_2_SQRTPI * DP_SQRT1_2 * 0.5);
  return gy * (cdf + x * pdf);
}
#endif

FWD(tanh) { return TANH(x); }
BWD(tanh) { return gy * (1 - y * y); }

/* stable for large |x|: exp of a non-positive number only; one exp and
 * one division for both signs (a vector loop computes both sides of a
 * select: two exps and two divisions as two branches) */
FWD(sigmoid) {
  T e = EXP(-FABS(x));
  T r = 1 / (1 + e);
  return x >= 0 ? r : e * r;
}
BWD(sigmoid) { return gy * (y * (1 - y)); }

/* the gradients in PyTorch's order of operations, which decides where an
 * intermediate overflows: grad / (2 y); -0.5 grad * y^3 */
FWD(sqrt) { return SQRT(x); }
BWD(sqrt) { return gy / (2 * y); }

FWD(rsqrt) { return 1 / SQRT(x); }
BWD(rsqrt) { return C(-0.5) * gy * (y * y * y); }

FWD(abs) { return FABS(x); }
BWD(abs) { return gy * (T)((x > 0) - (x < 0)); }
INT(abs) { return x < 0 ? (int64_t)(0u - (uint64_t)x) : x; }

FWD(square) { return x * x; }
BWD(square) { return gy * (2 * x); }
INT(square) { return (int64_t)((uint64_t)x * (uint64_t)x); }

FWD(reciprocal) { return 1 / x; }
BWD(reciprocal) { return gy * (-y * y); }

FWD(sign) { return (T)((x > 0) - (x < 0)); }
BWD(sign) { return 0; }
INT(sign) { return (x > 0) - (x < 0); }

/* min(max(x, min), max) as PyTorch (min > max gives max everywhere); NaN
 * stays NaN; the gradient flows where min <= x <= max */
FWD(clamp) {
  T t = x < (T)p->min ? (T)p->min : x;
  return t > (T)p->max ? (T)p->max : t;
}
BWD(clamp) { return x >= (T)p->min && x <= (T)p->max ? gy : 0; }
INT(clamp) {
  int64_t lo = dp_i64_bound(p->min), hi = dp_i64_bound(p->max), t = x < lo ? lo : x;
  return t > hi ? hi : t;
}

/* x where x > 0, else negative_slope * x (and the gradient likewise: the
 * slope at 0, as PyTorch) */
FWD(leaky_relu) { return x > 0 ? x : x * (T)p->negative_slope; }
BWD(leaky_relu) { return x > 0 ? gy : gy * (T)p->negative_slope; }

/* x where x > 0, else alpha * (exp(x) - 1); the gradient alpha * exp(x)
 * there (alpha at 0), and NaN at NaN (as PyTorch's vectorised kernel;
 * its scalar tail gives gy there: tests/diff/known_differences.lua) */
FWD(elu) { return x > 0 ? x : (T)p->alpha * EXPM1(x); }
BWD(elu) { return x > 0 ? gy : gy * (T)p->alpha * EXP(x); }

/* x * sigmoid(x), in PyTorch's form x / (1 + exp(-x)) (so -inf gives NaN
 * there too) */
FWD(silu) { return x / (1 + EXP(-x)); }
BWD(silu) {
  T s = 1 / (1 + EXP(-x));
  return gy * s * (1 + x * (1 - s));
}

/* log(1 + exp(beta x)) / beta, and x itself where beta x > threshold
 * (PyTorch's linear regime, which also keeps exp from overflowing) */
FWD(softplus) {
  T bx = x * (T)p->beta;
  return bx > (T)p->threshold ? x : LOG1P(EXP(bx)) / (T)p->beta;
}
BWD(softplus) {
  T bx = x * (T)p->beta;
  if (bx > (T)p->threshold) return gy;
  T z = EXP(bx);
  return gy * z / (z + 1);
}

FWD(sin) { return SIN(x); }
BWD(sin) { return gy * COS(x); }

FWD(cos) { return COS(x); }
BWD(cos) { return gy * -SIN(x); }

/* d/dx erf(x) = 2/sqrt(pi) exp(-x^2) */
FWD(erf) { return ERF(x); }
BWD(erf) { return gy * (C(DP_2_SQRTPI) * EXP(-x * x)); }

/* log(1 + x) accurate near 0; the gradient 1 / (1 + x) (inf at -1, as PyTorch) */
FWD(log1p) { return LOG1P(x); }
BWD(log1p) { return gy / (x + 1); }

/* exp(x) - 1 accurate near 0; the gradient exp(x) = y + 1 */
FWD(expm1) { return EXPM1(x); }
BWD(expm1) { return gy * (y + 1); }

/* rounding: a zero gradient (PyTorch's, NaN and inf upstream included), integers unchanged; round is to the
 * nearest, ties to even (torch.round) */
FWD(floor) { return FLOOR(x); }
BWD(floor) { return 0; }
INT(floor) { return x; }
FWD(ceil) { return CEIL(x); }
BWD(ceil) { return 0; }
INT(ceil) { return x; }
FWD(round) { return RINT(x); }
BWD(round) { return 0; }
INT(round) { return x; }
FWD(trunc) { return TRUNC(x); }
BWD(trunc) { return 0; }
INT(trunc) { return x; }

/* ---- binary ops (gradients: ops/elementwise.c composes them) ---- */

BIN(add) { return a + b; }
BIN(sub) { return a - b; }
BIN(mul) { return a * b; }
BIN(div) { return a / b; }
BIN(maximum) { return (a != a || a > b) ? a : b; } /* NaN propagates */
BIN(minimum) { return (a != a || a < b) ? a : b; }
BIN(pow) { return POW(a, b); }
BIN(eq) { return a == b; }
BIN(ne) { return a != b; }
BIN(lt) { return a < b; }
BIN(le) { return a <= b; }
BIN(gt) { return a > b; }
BIN(ge) { return a >= b; }
/* d(a^b)/da = b * a^(b-1), 0 where b == 0 (so 0^0 has gradient 0, not
 * 0 * inf); d(a^b)/db = a^b * log(a), 0 where a == 0 and b >= 0 */
BIN(pow_grad_base) { return b == 0 ? (T)0 : b * POW(a, b - 1); }
BIN(pow_grad_exp) { return (a == 0 && b >= 0) ? (T)0 : POW(a, b) * LOG(a); }
BIN(keep_where_nonzero) { return b == 0 ? (T)0 : a; }
/* exact in int64, wrapping; div promotes integers to float */
BIN_INT(add) { return (int64_t)((uint64_t)a + (uint64_t)b); }
BIN_INT(sub) { return (int64_t)((uint64_t)a - (uint64_t)b); }
BIN_INT(mul) { return (int64_t)((uint64_t)a * (uint64_t)b); }
BIN_INT(maximum) { return a > b ? a : b; }
/* integer powers by squaring, wrapping; a negative exponent gives 0 except
 * for a base of 1 or -1 (PyTorch's integer pow) */
BIN_INT(pow) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, base = (uint64_t)a;
  for (int64_t e = b; e; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return (int64_t)r;
}
BIN_INT(minimum) { return a < b ? a : b; }
BIN_INT(eq) { return a == b; }
BIN_INT(ne) { return a != b; }
BIN_INT(lt) { return a < b; }
BIN_INT(le) { return a <= b; }
BIN_INT(gt) { return a > b; }
BIN_INT(ge) { return a >= b; }

/* ---- the per-op switches, generated from the op table ---- */

static inline DP_HD T DP_TN(dp_unary)(dp_unary_op op, T x, const dp_unary_params *p) {
  switch (op) {
#define DP_CASE(ID, name, ...)                                                                                         \
  case DP_U_##ID: return DP_TN(dp_##name##_fwd)(x, p);
    DP_UNARY_OPS(DP_CASE)
#undef DP_CASE
  default: return (T)NAN;
  }
}

/* gx from gy and x / y (0 for the one the op does not read) */
static inline DP_HD T DP_TN(dp_unary_grad)(dp_unary_op op, T gy, T x, T y, const dp_unary_params *p) {
  switch (op) {
#define DP_CASE(ID, name, ...)                                                                                         \
  case DP_U_##ID: return DP_TN(dp_##name##_bwd)(gy, x, y, p);
    DP_UNARY_OPS(DP_CASE)
#undef DP_CASE
  default: return (T)NAN;
  }
}

static inline DP_HD T DP_TN(dp_binary)(dp_binary_op op, T a, T b) {
  switch (op) {
#define DP_CASE(ID, name, ...)                                                                                         \
  case DP_B_##ID: return DP_TN(dp_##name##_bin)(a, b);
    DP_BINARY_OPS(DP_CASE)
#undef DP_CASE
  default: return (T)NAN;
  }
}

#if DP_T_LAST_PASS
/* Integer ops that keep the type, exact in int64 (defined once: they do
 * not depend on T). */
static inline DP_HD int64_t dp_unary_i64(dp_unary_op op, int64_t x, const dp_unary_params *p) {
  switch (op) {
#define DP_CASE(ID, name, node, grad, ints, ...) DP_IF_##ints(case DP_U_##ID : return DP_TN(dp_##name##_i64)(x, p);)
    DP_UNARY_OPS(DP_CASE)
#undef DP_CASE
  default: return 0;
  }
}
static inline DP_HD int64_t dp_binary_i64(dp_binary_op op, int64_t a, int64_t b) {
  switch (op) {
#define DP_CASE(ID, name, node, out, ...) DP_IF_##out(case DP_B_##ID : return DP_TN(dp_##name##_bin_i64)(a, b);)
    DP_BINARY_OPS(DP_CASE)
#undef DP_CASE
  default: return 0;
  }
}
#endif

/* ---- normalisation, one element ---- */

/* batch norm: y = (x - mean) * scale + bias, scale = invstd * w per
 * channel (dp_bn_affine): subtracting the mean first keeps a channel with
 * |mean| >> std exact where x * scale + (b - mean * scale) cancels */
static inline DP_HD T DP_TN(dp_bn_apply)(T x, T mean, T scale, T bias) { return (x - mean) * scale + bias; }
/* batch norm input gradient gx = k.gy * gy + k.x * x + k.c (dp_bn_grad_coefs) */
static inline DP_HD T DP_TN(dp_bn_grad_apply)(T gy, T x, T kgy, T kx, T kc) { return kgy * gy + kx * x + kc; }
/* layer norm: (x - mean) * rstd * w + b, mean and rstd per row, w and b per column */
static inline DP_HD T DP_TN(dp_ln_apply)(T x, T mean, T rstd, T w, T b) { return (x - mean) * rstd * w + b; }
/* layer norm input gradient for one element of a row of n: rstd * (g -
 * mean(g) - xhat * mean(g * xhat)) with g = gy * w, xhat = (x - mean) * rstd */
static inline DP_HD T DP_TN(dp_ln_grad)(T g, T xhat, T rstd, T mean_g, T mean_gx) {
  return rstd * (g - mean_g - xhat * mean_gx);
}

/* ---- optimizer updates, one element ---- */

/* SGD with PyTorch's semantics: g += wd*p; buf = first ? g : mu*buf +
 * (1-dampening)*g; step = nesterov ? g + mu*buf : buf; p -= lr*step. */
static inline DP_HD void DP_TN(dp_sgd_update)(T *p, T g, T *buf, T lr, T mu, T damp, T wd, int nesterov, int first) {
  if (wd != 0) g += wd * *p;
  T step = g;
  if (mu != 0) {
    T b = first ? g : mu * *buf + (1 - damp) * g;
    *buf = b;
    step = nesterov ? g + mu * b : b;
  }
  *p -= lr * step;
}

/* Adam / AdamW (decoupled weight decay), PyTorch's single-tensor update
 * in its order of operations, with the coefficients of dp_adam_coefs
 * (scalar_math.h) rounded to T: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2)
 * g g, p -= step_size m / (sqrt(v) / sqrt(bc2) + eps); with amsgrad (vmax
 * not NULL) the denominator uses the running maximum of v (NaN
 * propagating, as torch.maximum). */
static inline DP_HD void DP_TN(dp_adam_update)(T *p, T g, T *m, T *v, T *vmax, const dp_adam_k *k) {
  if (k->wd != 0) {
    if (k->decoupled) *p *= (T)k->decay;
    else g += (T)k->wd * *p;
  }
  *m = (T)k->b1 * *m + (T)k->one_minus_b1 * g;
  *v = (T)k->b2 * *v + (T)k->one_minus_b2 * g * g;
  T vv = *v;
  if (vmax) vv = *vmax = DP_TN(dp_maximum_bin)(*vmax, vv);
  T denom = SQRT(vv) / (T)k->bc2_sqrt + (T)k->eps;
  *p -= (T)k->step_size * *m / denom;
}

#undef T
#undef C
#undef EXP
#undef LOG
#undef LOG1P
#undef EXPM1
#undef TANH
#undef SQRT
#undef ERF
#undef FABS
#undef SIN
#undef COS
#undef POW
#undef FLOOR
#undef CEIL
#undef TRUNC
#undef RINT
#undef FWD
#undef BWD
#undef INT
#undef BIN
#undef BIN_INT
