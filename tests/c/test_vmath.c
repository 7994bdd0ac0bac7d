/* The vectorisable float32 math of backends/cpu/vmath.h against the double
 * libm: a sweep over float32 bit patterns (every 1021st, which covers every
 * binade and both signs; DDPLUA_VMATH_FULL=1 sweeps all 2^32), reporting
 * the worst error in units in the last place of the float32 result, and
 * the special values (infinities, NaN, signed zeros, denormals) exactly.
 * Runs with denormals flushed and not. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_fpu.h"
#include "backends/cpu/vmath.h"
#include "test_util.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* |got - want| in ulps of want rounded to float32 (denormal ulps below
 * the normal range); 0 when both are the same special value */
static double ulps(float got, double want, double floor) {
  if (isnan(want)) return isnan(got) ? 0 : INFINITY;
  float wf = (float)want; /* may round to an infinity */
  if (isinf(wf) || isinf(got)) return got == wf ? 0 : INFINITY;
  int e;
  frexp(fabs(wf) < floor ? floor : wf == 0 ? 1e-45 : wf, &e);
  double ulp = ldexp(1.0, (e - 24) < -149 ? -149 : e - 24);
  return fabs((double)got - want) / ulp;
}

typedef struct {
  const char *name;
  float (*f)(float);
  double (*ref)(double);
  double lo, hi; /* the domain swept (outside: special values only) */
  double max_ulp;
  double floor; /* errors in ulps of at least this magnitude's (0: of the result's) */
} fn_case;

static float v_exp(float x) { return dp_vexpf(x); }
static float v_exp_nonpos(float x) { return dp_vexp_nonposf(x); }
static float v_log(float x) { return dp_vlogf(x); }
static float v_log1p(float x) { return dp_vlog1pf(x); }
static float v_expm1(float x) { return dp_vexpm1f(x); }
static float v_tanh(float x) { return dp_vtanhf(x); }
static float v_erf(float x) { return dp_verff(x); }
/* GELU x Phi(x) and its derivative Phi(x) + x phi(x) through dp_vgelu_phif */
static float v_gelu(float x) {
  float pdf;
  return x * dp_vgelu_phif(x, &pdf);
}
static float v_gelu_grad(float x) {
  float pdf, cdf = dp_vgelu_phif(x, &pdf);
  return cdf + x * pdf;
}
static double gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752440); }
static double gelu_grad(double x) {
  return 0.5 * erfc(-x * 0.70710678118654752440) + x * exp(-0.5 * x * x) * 0.39894228040143267794;
}

static void sweep(const fn_case *c, uint64_t stride, bool flushing) {
  double worst = 0;
  float worst_x = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += stride) {
    float x = from_bits((uint32_t)u);
    if (!(x >= c->lo && x <= c->hi)) continue;
    double want = c->ref((double)x);
    if (flushing && fabs(want) < 1.1754943508222875e-38) continue; /* flushed results: checked below */
    if (flushing && fabs(x) < 1.1754943508222875e-38 && x != 0) continue;
    double e = ulps(c->f(x), want, c->floor);
    if (e > worst) worst = e, worst_x = x;
  }
  if (worst > c->max_ulp)
    fprintf(stderr, "%s: %.2f ulp at x = %.9g (%a): got %.9g, want %.17g\n", c->name, worst, worst_x, worst_x,
            c->f(worst_x), c->ref(worst_x));
  else printf("%-6s worst %.2f ulp%s\n", c->name, worst, flushing ? " (flushing)" : "");
  CHECK(worst <= c->max_ulp);
}

static void specials(void) {
  const float inf = INFINITY, nan = NAN;
  CHECK(dp_vexpf(inf) == inf && dp_vexpf(-inf) == 0 && isnan(dp_vexpf(nan)) && dp_vexpf(0) == 1);
  CHECK(dp_vexpf(89.0f) == inf && dp_vexpf(-110.0f) == 0);
  CHECK(dp_vlogf(inf) == inf && dp_vlogf(0) == -inf && dp_vlogf(-0.0f) == -inf && isnan(dp_vlogf(-1)) &&
        isnan(dp_vlogf(nan)) && dp_vlogf(1) == 0);
  CHECK(dp_vlog1pf(inf) == inf && dp_vlog1pf(-1) == -inf && isnan(dp_vlog1pf(-2)) && isnan(dp_vlog1pf(nan)));
  CHECK(dp_vlog1pf(1e-30f) == 1e-30f && signbit(dp_vlog1pf(-0.0f)));
  CHECK(dp_vexpm1f(inf) == inf && dp_vexpm1f(-inf) == -1 && isnan(dp_vexpm1f(nan)) && signbit(dp_vexpm1f(-0.0f)));
  CHECK(dp_vexpm1f(1e-30f) == 1e-30f);
  CHECK(dp_vtanhf(inf) == 1 && dp_vtanhf(-inf) == -1 && isnan(dp_vtanhf(nan)) && signbit(dp_vtanhf(-0.0f)));
  CHECK(dp_vtanhf(1e-30f) == 1e-30f);
  CHECK(dp_verff(inf) == 1 && dp_verff(-inf) == -1 && isnan(dp_verff(nan)) && signbit(dp_verff(-0.0f)));
  CHECK(dp_verff(5.0f) == 1 && dp_verff(-5.0f) == -1);
  /* GELU: x Phi(x) with Phi(+inf) = 1, Phi(-inf) = 0 (so gelu(-inf) and the gradient at +-inf are +-inf * 0, NaN, as
   * PyTorch's x * (1 + erf) gives), phi 0 at both; NaN in, NaN out; signed zero kept; tiny beyond -12.5 */
  float pdf;
  CHECK(dp_vgelu_phif(inf, &pdf) == 1 && pdf == 0 && dp_vgelu_phif(-inf, &pdf) == 0 && pdf == 0);
  CHECK(isnan(dp_vgelu_phif(nan, &pdf)) && isnan(pdf));
  CHECK(v_gelu(inf) == inf && isnan(v_gelu(-inf)) && isnan(v_gelu(nan)) && isnan(v_gelu_grad(inf)) &&
        isnan(v_gelu_grad(-inf)) && isnan(v_gelu_grad(nan)));
  CHECK(v_gelu(0.0f) == 0 && signbit(v_gelu(-0.0f)) && v_gelu_grad(0.0f) == 0.5f);
  CHECK(v_gelu(1e30f) == 1e30f && v_gelu(-1e30f) == 0 && v_gelu_grad(1e30f) == 1 && v_gelu_grad(-1e30f) == 0);
  for (float x = -12.5f; x > -40; x -= 0.37f) CHECK(fabsf(v_gelu(x)) < 1e-33f && fabsf(v_gelu_grad(x)) < 1e-32f);
}

int main(void) {
  const char *full = getenv("DDPLUA_VMATH_FULL");
  uint64_t stride = full && *full == '1' ? 1 : 1021;
  const fn_case cases[] = {
      {"exp", v_exp, exp, -200, 200, 2, 0},
      /* x <= 0, down to where e^x leaves the normal range (below: 0, checked after the sweeps) */
      {"exp<=0", v_exp_nonpos, exp, -87.3365, 0, 2, 0},
      {"log", v_log, log, 0, INFINITY, 2, 0},
      {"log1p", v_log1p, log1p, -1, INFINITY, 2, 0},
      {"expm1", v_expm1, expm1, -200, 200, 2, 0},
      {"tanh", v_tanh, tanh, -INFINITY, INFINITY, 2, 0},
      {"erf", v_erf, erf, -INFINITY, INFINITY, 2, 0},
      /* from -12.5: further out Phi is denormal (0 when flushing; below) */
      {"gelu", v_gelu, gelu, -12.5, INFINITY, 8, 0},
      /* Phi + x phi crosses 0 at -0.7518: its error in ulps of 1 */
      {"gelu'", v_gelu_grad, gelu_grad, -12.5, INFINITY, 8, 1},
  };
  for (int flush = 0; flush < 2; flush++) {
    dp_fpu_set_flush_denormal(flush);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) sweep(&cases[i], stride, flush);
    specials();
  }
  /* flushing: results below the normal range are 0, denormal inputs read as 0 */
  volatile float m100 = -100.0f, den = from_bits(1); /* volatile: not folded at compile time */
  CHECK(dp_vexpf(m100) == 0);
  /* dp_vexp_nonposf: 0 below FLT_MIN's logarithm whether or not the thread flushes, e^0 = 1, NaN stays */
  for (int flush = 0; flush < 2; flush++) {
    dp_fpu_set_flush_denormal(flush);
    volatile float below = -87.3366f, ninf = -INFINITY, zero = 0.0f, mzero = -0.0f, nan = NAN;
    CHECK(dp_vexp_nonposf(below) == 0 && dp_vexp_nonposf(m100) == 0 && dp_vexp_nonposf(ninf) == 0);
    CHECK(dp_vexp_nonposf(zero) == 1 && dp_vexp_nonposf(mzero) == 1 && isnan(dp_vexp_nonposf(nan)));
    CHECK(dp_vexp_nonposf(-87.3365f) >= 1.17549435e-38f); /* the last normal result */
  }
  CHECK(dp_vlogf(den) == -INFINITY);
  TEST_DONE();
}
