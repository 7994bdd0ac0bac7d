/* Float32 math functions the compiler can vectorise: exp, log, log1p,
 * expm1, tanh and erf written as straight-line arithmetic (polynomials,
 * bit manipulation, selects; no branches, no calls, no errno), so a loop
 * over one of the op table's formulas that calls them becomes one vector
 * loop at whatever width the translation unit is compiled for (the per-ISA
 * kernels, cpu_vec_impl.h). libm's versions are calls the vectoriser
 * cannot look into.
 *
 * Accuracy (tests/c/test_vmath.c sweeps every float32 in range against the
 * double libm): exp, log, log1p, expm1 and tanh within 2 ulp, erf within 2
 * ulp (dp_vgelu_phif: see there); infinities, NaN, signed zeros and denormal inputs and results as
 * libm's, whether or not the thread flushes denormals.
 *
 * Included by the CPU kernels only (not by CUDA code). */
#ifndef DP_VMATH_H
#define DP_VMATH_H

#include <stdint.h>
#include <string.h>

#define DP_VM static inline __attribute__((always_inline))

DP_VM float dp_vm_f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
DP_VM uint32_t dp_vm_u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
DP_VM float dp_vm_sel(int c, float a, float b) { return c ? a : b; }
/* |x| and the sign of y on |x| */
DP_VM float dp_vfabsf(float x) { return dp_vm_f(dp_vm_u(x) & 0x7fffffffu); }
DP_VM float dp_vm_copysign(float x, float y) {
  return dp_vm_f((dp_vm_u(x) & 0x7fffffffu) | (dp_vm_u(y) & 0x80000000u));
}
DP_VM float dp_vsqrtf(float x) { return __builtin_sqrtf(x); }

/* The shared core of dp_vexpf and dp_vexp_nonposf for a clamped x: *n =
 * rint(x / ln2) (the 1.5 * 2^23 trick, no float->int conversion) and e^r,
 * r = x - n ln2, by the polynomial; e^x = e^r 2^n. */
DP_VM float dp_vexp_reduced(float xc, int32_t *n_out) {
  const float shifter = 12582912.0f;
  float t = __builtin_fmaf(xc, 1.44269504088896341f, shifter);
  float n = t - shifter;
  *n_out = (int32_t)(dp_vm_u(t) - dp_vm_u(shifter));
  float r = __builtin_fmaf(n, -0.693359375f, xc);
  r = __builtin_fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  return __builtin_fmaf(p * r, r, r) + 1.0f;
}

/* e^x: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite, two-part ln2), e^r by a
 * degree-6 polynomial (Cephes' expf coefficients), times 2^n built in two
 * halves so that results in the denormal and overflow ranges scale
 * correctly. */
DP_VM float dp_vexpf(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  int32_t ni;
  float p = dp_vexp_reduced(xc, &ni);
  int32_t n1 = ni >> 1, n2 = ni - n1; /* n in [-150, 129]: each half a normal exponent */
  float s1 = dp_vm_f((uint32_t)(n1 + 127) << 23), s2 = dp_vm_f((uint32_t)(n2 + 127) << 23);
  float y = (p * s1) * s2;
  return x != x ? x : y;
}

/* e^x for x <= 0 (or NaN), the softmax and cross-entropy rows' exp of a
 * logit minus its row maximum: dp_vexpf's reduction and polynomial with
 * one scale by 2^n (n >= -126 is a normal exponent) and no overflow side;
 * results below FLT_MIN (x < -87.34) are 0, as a thread that flushes
 * denormals (ddplua's default) gets from dp_vexpf too, and within 1.2e-38
 * of them otherwise: a probability that small changes no sum or gradient.
 * 16 vector operations instead of 22: the 700 x 10000 cross-entropy of
 * the LSTM example spends most of its time in them. */
DP_VM float dp_vexp_nonposf(float x) {
  float xc = x > -87.3365f ? x : -87.3365f; /* NaN -> the clamp; restored below */
  int32_t ni;
  float p = dp_vexp_reduced(xc, &ni);
  float y = p * dp_vm_f((uint32_t)(ni + 127) << 23);
  y = x >= -87.3365f ? y : 0.0f;
  return x != x ? x : y;
}

/* log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 +
 * f^3 P(f) with f = m - 1 (Cephes' logf coefficients), plus e ln2 in two
 * parts. Denormal inputs are scaled by 2^23 first. */
DP_VM float dp_vlogf(float x) {
  int tiny = x < 1.17549435e-38f;
  float xs = tiny ? x * 8388608.0f : x;
  uint32_t ix = dp_vm_u(xs);
  float e = (float)((int32_t)((ix >> 23) & 0xffu) - 126) - (tiny ? 23.0f : 0.0f);
  float m = dp_vm_f((ix & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
  int lo = m < 0.707106781186547524f;
  e = lo ? e - 1.0f : e;
  float f = lo ? m + m - 1.0f : m - 1.0f;
  float z = f * f;
  float p = 7.0376836292e-2f;
  p = __builtin_fmaf(p, f, -1.1514610310e-1f);
  p = __builtin_fmaf(p, f, 1.1676998740e-1f);
  p = __builtin_fmaf(p, f, -1.2420140846e-1f);
  p = __builtin_fmaf(p, f, 1.4249322787e-1f);
  p = __builtin_fmaf(p, f, -1.6668057665e-1f);
  p = __builtin_fmaf(p, f, 2.0000714765e-1f);
  p = __builtin_fmaf(p, f, -2.4999993993e-1f);
  p = __builtin_fmaf(p, f, 3.3333331174e-1f);
  float y = p * f * z;
  y = __builtin_fmaf(e, -2.12194440e-4f, y);
  y = __builtin_fmaf(z, -0.5f, y);
  float r = f + y;
  r = __builtin_fmaf(e, 0.693359375f, r);
  r = x == __builtin_inff() ? x : r;
  r = x == 0.0f ? -__builtin_inff() : r;
  r = x < 0.0f ? __builtin_nanf("") : r;
  return x != x ? x : r;
}

/* log(1 + x) = log(u) - ((u - 1) - x) / u with u = 1 + x rounded: the
 * second term restores what rounding u lost (Goldberg); x itself where u
 * rounds to 1. */
DP_VM float dp_vlog1pf(float x) {
  float u = 1.0f + x;
  float d = u - 1.0f;
  float r = dp_vlogf(u) - (d - x) / u;
  r = u == 1.0f ? x : r;
  r = u == 0.0f ? -__builtin_inff() : r;
  r = x == __builtin_inff() ? x : r;
  return x != x ? x : r;
}

/* e^x - 1: a Taylor polynomial for |x| < 1/2 (relative accuracy where
 * e^x - 1 cancels), e^x - 1 elsewhere. */
DP_VM float dp_vexpm1f(float x) {
  float p = 2.7557319e-7f; /* 1/10! */
  p = __builtin_fmaf(p, x, 2.7557319e-6f);
  p = __builtin_fmaf(p, x, 2.4801587e-5f);
  p = __builtin_fmaf(p, x, 1.9841270e-4f);
  p = __builtin_fmaf(p, x, 1.3888889e-3f);
  p = __builtin_fmaf(p, x, 8.3333333e-3f);
  p = __builtin_fmaf(p, x, 4.1666667e-2f);
  p = __builtin_fmaf(p, x, 1.6666667e-1f);
  p = __builtin_fmaf(p, x, 0.5f);
  float small = __builtin_fmaf(p * x, x, x);
  small = x == 0.0f ? x : small; /* -0 stays -0 */
  float big = dp_vexpf(x) - 1.0f;
  return dp_vfabsf(x) < 0.5f ? small : big;
}

/* tanh: x + x^3 P(x^2) below |x| = 0.625 (Cephes' tanhf), 1 - 2 / (e^2|x|
 * + 1) with x's sign above (1 once e^2|x| overflows). */
DP_VM float dp_vtanhf(float x) {
  float ax = dp_vfabsf(x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = __builtin_fmaf(p, z, 2.06390887954e-2f);
  p = __builtin_fmaf(p, z, -5.37397155531e-2f);
  p = __builtin_fmaf(p, z, 1.33314422036e-1f);
  p = __builtin_fmaf(p, z, -3.33332819422e-1f);
  float small = __builtin_fmaf(p * z, x, x);
  small = x == 0.0f ? x : small;
  float big = 1.0f - 2.0f / (dp_vexpf(ax + ax) + 1.0f);
  big = dp_vm_copysign(big, x);
  return ax < 0.625f ? small : big;
}

/* erf: x P(x^2) below |x| = 0.875; 1 - e^Q(|x|) with x's sign up to 4,
 * where Q fits log(erfc) (both least-squares minimax fits in float64 to
 * the coefficients' precision); +-1 beyond 4, where erf rounds to 1. */
DP_VM float dp_verff(float x) {
  float ax = dp_vfabsf(x);
  float t = x * x;
  float p = -9.641519693515122e-06f;
  p = __builtin_fmaf(p, t, 1.1256949305152308e-04f);
  p = __builtin_fmaf(p, t, -8.482829059491825e-04f);
  p = __builtin_fmaf(p, t, 5.220945449392431e-03f);
  p = __builtin_fmaf(p, t, -2.686540004892901e-02f);
  p = __builtin_fmaf(p, t, 1.1283781974245743e-01f);
  p = __builtin_fmaf(p, t, -3.761263843466356e-01f);
  /* x (c0 + t P(t)): the leading term added last, in one rounding */
  float small = __builtin_fmaf(x, 1.1283791670580239f, x * t * p);
  float a = ax > 4.0f ? 4.0f : ax;
  float q = 1.5571296068106477e-06f;
  q = __builtin_fmaf(q, a, -4.447864560136461e-05f);
  q = __builtin_fmaf(q, a, 0.0005835221224233383f);
  q = __builtin_fmaf(q, a, -0.004697551146840284f);
  q = __builtin_fmaf(q, a, 0.0262454990665592f);
  q = __builtin_fmaf(q, a, -0.10977221482500618f);
  q = __builtin_fmaf(q, a, -0.6321516990914091f);
  q = __builtin_fmaf(q, a, -1.1300437267789802f);
  q = __builtin_fmaf(q, a, 0.0002735929047586401f);
  float big = dp_vm_copysign(1.0f - dp_vexpf(q), x);
  float r = ax < 0.875f ? small : big;
  r = x == 0.0f ? x : r;
  return x != x ? x : r;
}

/* GELU's normal CDF Phi(x) and density phi(x) = e^(-x^2/2) / sqrt(2 pi)
 * with one exp shared by both (GELU's backward needs the two; erf-based
 * Phi would cost an erf and an exp). With z = |x| / sqrt(2):
 * Phi(-|x|) = erfc(z) / 2 = t P(t) e^(-z^2) / 2, t = 1 / (1 + z / 2), where
 * t P(t) fits erfcx(z) = erfc(z) e^(z^2) to 4.3e-8 relative on z in [0, 10]
 * (a degree-8 least-squares minimax fit in float64, tools of the commit
 * that added it; beyond 10 the result underflows anyway). So the negative
 * tail keeps its relative accuracy (1 + erf(x) cancels there), and x^2 is
 * taken exactly (its rounding error lo from an fma) so that e^(-x^2/2)
 * stays within a few ulp out to where it underflows. Phi(|x|) = 1 -
 * Phi(-|x|). NaN gives NaN; +-inf give Phi 1 and 0 with phi 0. */
DP_VM float dp_vgelu_phif(float x, float *pdf) {
  float ax = dp_vfabsf(x);
  float xx = x * x;
  float lo = __builtin_fmaf(x, x, -xx);
  float e = dp_vexp_nonposf(-0.5f * xx); /* 0 once it would be denormal: |x| > 13.2, where Phi(-|x|) is too */
  e = __builtin_fmaf(e, -0.5f * lo, e);  /* e^(-(xx + lo)/2) ~ e^(-xx/2) (1 - lo/2) */
  e = xx == __builtin_inff() ? 0.0f : e; /* lo is NaN there */
  float t = 1.0f / __builtin_fmaf(ax, 0.5f * 0.70710678118654752f, 1.0f);
  float p = -5.907003316e-02f;
  p = __builtin_fmaf(p, t, 2.845800339e-01f);
  p = __builtin_fmaf(p, t, -4.872100154e-01f);
  p = __builtin_fmaf(p, t, 2.780782437e-01f);
  p = __builtin_fmaf(p, t, -2.663292385e-02f);
  p = __builtin_fmaf(p, t, 2.026897631e-01f);
  p = __builtin_fmaf(p, t, 2.431030803e-01f);
  p = __builtin_fmaf(p, t, 2.823753951e-01f);
  p = __builtin_fmaf(p, t, 2.820864134e-01f);
  float h = (0.5f * t) * p * e; /* Phi(-|x|) */
  *pdf = e * 0.398942280401432678f;
  float r = x < 0.0f ? h : 1.0f - h;
  return x != x ? x : r;
}

/* powf stays libm's (its special cases are many and the op is rare): a
 * loop that calls it is not vectorised. */
#define dp_vpowf(a, b) powf(a, b)
/* sinf and cosf too, for the formulas' scalar uses; the float32 sin and
 * cos ops and their backwards run cpu_vec_ew_t.h's v_sincos instead (the
 * reduction in double, libm's exact one from |x| >= 2^19). */
#define dp_vsinf(x) sinf(x)
#define dp_vcosf(x) cosf(x)
/* the other trigonometric, hyperbolic, base-2 and base-10 functions: libm's
 * (rare ops; their loops are not vectorised) */
#define dp_vtanf(x) tanf(x)
#define dp_vasinf(x) asinf(x)
#define dp_vacosf(x) acosf(x)
#define dp_vatanf(x) atanf(x)
#define dp_vsinhf(x) sinhf(x)
#define dp_vcoshf(x) coshf(x)
#define dp_vasinhf(x) asinhf(x)
#define dp_vacoshf(x) acoshf(x)
#define dp_vatanhf(x) atanhf(x)
#define dp_vlog2f(x) log2f(x)
#define dp_vlog10f(x) log10f(x)
#define dp_vexp2f(x) exp2f(x)
/* rounding: the builtins, one vroundps each where the target has SSE4.1 */
#define dp_vfloorf(x) __builtin_floorf(x)
#define dp_vceilf(x) __builtin_ceilf(x)
#define dp_vtruncf(x) __builtin_truncf(x)
#define dp_vnearbyintf(x) __builtin_nearbyintf(x)

#endif
