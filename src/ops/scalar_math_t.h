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
#define TAN(v) DP_T_MATH(tan)(v)
#define ASIN(v) DP_T_MATH(asin)(v)
#define ACOS(v) DP_T_MATH(acos)(v)
#define ATAN(v) DP_T_MATH(atan)(v)
#define SINH(v) DP_T_MATH(sinh)(v)
#define COSH(v) DP_T_MATH(cosh)(v)
#define ASINH(v) DP_T_MATH(asinh)(v)
#define ACOSH(v) DP_T_MATH(acosh)(v)
#define ATANH(v) DP_T_MATH(atanh)(v)
#define LOG2(v) DP_T_MATH(log2)(v)
#define LOG10(v) DP_T_MATH(log10)(v)
#define EXP2(v) DP_T_MATH(exp2)(v)
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

/* Where PyTorch 1.13's vectorised loop and its scalar tail differ at NaN
 * (or at a bound), so that its result depends on the element's place in
 * the tensor, the formulas below take the vectorised loop's answer, as elu
 * does (docs/pytorch_differences.md, pytorch_elu_nan_grad). */

/* clamp(x, min_val, max_val) as PyTorch's hardtanh (NaN stays NaN,
 * min_val > max_val gives max_val everywhere); unlike clamp's, the
 * gradient flows only strictly inside (min_val, max_val): 0 at the bounds,
 * and 0 at NaN */
FWD(hardtanh) {
  T t = x < (T)p->min_val ? (T)p->min_val : x;
  return t > (T)p->max_val ? (T)p->max_val : t;
}
BWD(hardtanh) { return x > (T)p->min_val && x < (T)p->max_val ? gy : 0; }
INT(hardtanh) {
  int64_t lo = dp_i64_bound(p->min_val), hi = dp_i64_bound(p->max_val), t = x < lo ? lo : x;
  return t > hi ? hi : t;
}

/* min(max(x + 3, 0), 6) / 6 (NaN stays NaN); the gradient gy / 6 strictly
 * inside (-3, 3), with PyTorch's float32 one sixth (1.0f / 6.0f, in
 * float64 too) */
FWD(hardsigmoid) {
  T t = x + 3;
  t = t < 0 ? 0 : t;
  return (t > 6 ? 6 : t) / C(6);
}
BWD(hardsigmoid) { return x > -3 && x < 3 ? gy * C(1.0f / 6.0f) : 0; }

/* x * min(max(x + 3, 0), 6) / 6 (-inf gives NaN there, as PyTorch); the
 * gradient 0 below -3, gy from 3 on, gy * (x / 3 + 0.5) between (NaN at
 * NaN) */
FWD(hardswish) {
  T t = x + 3;
  t = t < 0 ? 0 : t;
  t = t > 6 ? 6 : t;
  return x * t / C(6);
}
BWD(hardswish) { return x < -3 ? 0 : x >= 3 ? gy : gy * (x / 3 + C(0.5)); }

/* x * tanh(softplus(x)) (-inf gives NaN, as PyTorch); tanh(log(1 + e)) for
 * e = exp(x) is n / (n + 2) with n = e (e + 2): one exp where exp, log1p
 * and tanh made the float32 loop too long to inline (a call per element,
 * 51 ms a million, PyTorch's 7); from x = 20 on it is 1 in double as in
 * float (and n would overflow). The gradient tanh(sp) + x * sigmoid(x) *
 * (1 - tanh(sp)^2). */
#define DP_MISH_TANH_SP(x_) T e = EXP((x_) < 20 ? (x_) : C(20)), n = e * (e + 2), t = (x_) < 20 ? n / (n + 2) : C(1)
FWD(mish) {
  DP_MISH_TANH_SP(x);
  return x * t;
}
BWD(mish) {
  DP_MISH_TANH_SP(x);
  T s = 1 / (1 + EXP(-x));
  return gy * (t + x * s * (1 - t * t));
}
#undef DP_MISH_TANH_SP

/* scale * x where x > 0, else scale * alpha * (exp(x) - 1), PyTorch's elu
 * kernel with its constants (exp(x) - 1 as it computes it; the
 * coefficient scale * alpha rounded to T); the gradient gy * scale * alpha
 * * exp(x) there (NaN at NaN) */
FWD(selu) { return x <= 0 ? (EXP(x) - 1) * (C(DP_SELU_ALPHA) * C(DP_SELU_SCALE)) : x * C(DP_SELU_SCALE); }
BWD(selu) { return x > 0 ? gy * C(DP_SELU_SCALE) : gy * (C(DP_SELU_ALPHA) * C(DP_SELU_SCALE)) * EXP(x); }

/* x where x > 0, else alpha * (exp(x / alpha) - 1), as PyTorch's elu
 * kernel computes it (x times 1 / alpha, the reciprocal in double then
 * rounded to T); the gradient gy * (1 / alpha) * alpha * exp(x / alpha)
 * there (NaN at NaN), with PyTorch's 1 / alpha of the backward: 1.0 /
 * alpha.toFloat() (derivatives.yaml), alpha rounded to float32 first */
FWD(celu) { return x <= 0 ? (EXP(x * (T)(1.0 / p->alpha)) - 1) * (T)p->alpha : x; }
BWD(celu) {
  T inv = (T)(1.0 / (double)(float)p->alpha);
  return x > 0 ? gy : gy * inv * (T)p->alpha * EXP(x * inv);
}

/* log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)) (NaN propagates through
 * the min); the gradient (1 - b / (1 + b)) gy below 0, b / (1 + b) gy
 * from 0 on, b = exp(-|x|) (PyTorch's saved buffer) */
FWD(logsigmoid) { return (x > 0 ? 0 : x) - LOG1P(EXP(-FABS(x))); }
BWD(logsigmoid) {
  T b = EXP(-FABS(x));
  T q = b / (1 + b);
  return (x < 0 ? 1 - q : q) * gy;
}

/* x / (|x| + 1) (inf gives NaN, as PyTorch); the gradient as PyTorch's
 * autograd composes it through div and abs: gy / d - gy * (x / d / d) *
 * sign(x), d = |x| + 1 (for large |x| the two terms cancel to 0 or a
 * rounding residue where 1 / d^2 would be smaller still) */
FWD(softsign) { return x / (FABS(x) + 1); }
BWD(softsign) {
  T d = FABS(x) + 1;
  T through_abs = (-gy * (x / d / d)) * (T)((x > 0) - (x < 0));
  return gy / d + through_abs;
}

/* x - tanh(x); the gradient as PyTorch's autograd composes it: gy - gy *
 * (1 - tanh(x)^2) */
FWD(tanhshrink) { return x - TANH(x); }
BWD(tanhshrink) {
  T t = TANH(x);
  return gy + -gy * (1 - t * t);
}

/* x - lambd above lambd, x + lambd below -lambd, else 0 (NaN gives 0, as
 * PyTorch); the gradient gy outside [-lambd, lambd], 0 inside and at NaN */
FWD(softshrink) { return x > (T)p->lambd ? x - (T)p->lambd : x < -(T)p->lambd ? x + (T)p->lambd : 0; }
BWD(softshrink) { return x < -(T)p->lambd || x > (T)p->lambd ? gy : 0; }

/* 0 inside [-lambd, lambd], x elsewhere (NaN stays NaN); the gradient as
 * softshrink's */
FWD(hardshrink) { return x >= -(T)p->lambd && x <= (T)p->lambd ? 0 : x; }
BWD(hardshrink) { return x < -(T)p->lambd || x > (T)p->lambd ? gy : 0; }

/* The losses' elementwise forms of d = input - target, PyTorch's formulas:
 * smooth_l1 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta > 0:
 * the Lua side takes l1 for 0); huber 0.5 d^2 where |d| < delta, else
 * delta (|d| - 0.5 delta); NaN stays NaN. Gradients: the sign's (times
 * delta for huber) from beta (delta) on, d / beta (d) inside. */
FWD(_smooth_l1) {
  T z = x < 0 ? -x : x, b = (T)p->beta;
  return z < b ? C(0.5) * x * x / b : z - C(0.5) * b;
}
BWD(_smooth_l1) {
  T b = (T)p->beta;
  return x <= -b ? -gy : x >= b ? gy : x * gy / b;
}
FWD(_huber) {
  T z = x < 0 ? -x : x, dl = (T)p->delta;
  return z < dl ? C(0.5) * x * x : dl * (z - C(0.5) * dl);
}
BWD(_huber) {
  T dl = (T)p->delta;
  return x <= -dl ? -dl * gy : x >= dl ? dl * gy : x * gy;
}

/* value where x <= threshold, else x (NaN stays NaN); the gradient 0
 * there, gy elsewhere (NaN included) */
FWD(threshold) { return x <= (T)p->threshold ? (T)p->value : x; }
BWD(threshold) { return x <= (T)p->threshold ? 0 : gy; }
INT(threshold) { return x <= dp_i64_bound(p->threshold) ? dp_i64_bound(p->value) : x; }

/* GELU's tanh approximation (approximate='tanh'), 0.5 x (1 + tanh(inner)),
 * inner = sqrt(2 / pi) (x + 0.044715 x^3), and its gradient, both in
 * PyTorch's order of operations (-inf gives NaN, as there) */
FWD(gelu_tanh) {
  T x_cube = x * x * x;
  T inner = C(DP_SQRT2 * DP_2_SQRTPI * 0.5) * (x + C(0.044715) * x_cube);
  return C(0.5) * x * (1 + TANH(inner));
}
BWD(gelu_tanh) {
  const T beta = C(DP_SQRT2 * DP_2_SQRTPI * 0.5), kappa = C(0.044715);
  T x_sq = x * x, x_cube = x_sq * x;
  T t = TANH(beta * (x + kappa * x_cube));
  T left = C(0.5) * x, right = 1 + t;
  T left_derivative = C(0.5) * right;
  T tanh_derivative = 1 - t * t;
  T inner_derivative = beta * (1 + C(3) * kappa * x_sq);
  T right_derivative = left * tanh_derivative * inner_derivative;
  return gy * (left_derivative + right_derivative);
}

/* Trigonometric, hyperbolic, base-2 and base-10 functions (libm's; outside
 * the domain NaN, atanh(+-1) = +-inf, log2(0) = -inf). The gradients are
 * PyTorch's formulas (derivatives.yaml) in its order of operations, so the
 * domain edges give what it gives: asin' and acos' at +-1 and acosh' at 1
 * are +-inf (a rsqrt of 0), atanh' at +-1 is inf, NaN outside. */
FWD(tan) { return TAN(x); }
BWD(tan) { return gy * (1 + y * y); }

/* rsqrt(-x * x + 1) */
FWD(asin) { return ASIN(x); }
BWD(asin) { return gy * (1 / SQRT(-x * x + 1)); }

FWD(acos) { return ACOS(x); }
BWD(acos) { return gy * -(1 / SQRT(-x * x + 1)); }

FWD(atan) { return ATAN(x); }
BWD(atan) { return gy / (x * x + 1); }

FWD(sinh) { return SINH(x); }
BWD(sinh) { return gy * COSH(x); }

FWD(cosh) { return COSH(x); }
BWD(cosh) { return gy * SINH(x); }

/* rsqrt(x^2 + 1) and rsqrt(x^2 - 1) */
FWD(asinh) { return ASINH(x); }
BWD(asinh) { return gy * (1 / SQRT(x * x + 1)); }

FWD(acosh) { return ACOSH(x); }
BWD(acosh) { return gy * (1 / SQRT(x * x - 1)); }

/* grad * 1 / (1 - x^2) */
FWD(atanh) { return ATANH(x); }
BWD(atanh) { return gy / (1 - x * x); }

/* grad / (x * ln 2), grad / (x * ln 10), with PyTorch's constants rounded
 * to T */
FWD(log2) { return LOG2(x); }
BWD(log2) { return gy / (x * C(0.6931471805599453)); }

FWD(log10) { return LOG10(x); }
BWD(log10) { return gy / (x * C(2.3025850929940456)); }

/* grad * y * ln 2 */
FWD(exp2) { return EXP2(x); }
BWD(exp2) { return gy * y * C(0.6931471805599453); }

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
/* (1 - b) a + log(1 + exp(-a)), the log as log1p(exp(-|a|)) + max(-a, 0): finite for any a (the gradient,
 * elementwise.c: sigmoid(a) - b for a, -a for b) */
BIN(_bce_logits) {
  T m = a < 0 ? -a : 0;
  return (1 - b) * a + (LOG1P(EXP(-a - m - m)) + m);
}
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
#undef TAN
#undef ASIN
#undef ACOS
#undef ATAN
#undef SINH
#undef COSH
#undef ASINH
#undef ACOSH
#undef ATANH
#undef LOG2
#undef LOG10
#undef EXP2
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
