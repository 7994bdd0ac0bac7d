/* Elementwise float32 kernels of cpu_vec.h, included once by each per-ISA
 * translation unit (cpu_vec_avx512.c, ...), which sets the target first;
 * no include guard on purpose. The unary and binary loops come from the op
 * table: one loop per op over its formula from ops/scalar_math_t.h,
 * instantiated here as dp_<name>_fwd_v with vmath.h's functions, so the
 * whole loop (math included) vectorises. */
#include <math.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_vec.h"
#include "backends/cpu/vmath.h"
#include "ops/philox.h"
#include "ops/scalar_math.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

/* the op table's formulas once more: T = float with vmath.h (suffix _v) */
#define DP_T float
#define DP_T_SFX v
#define DP_T_MATH(fn) dp_v##fn##f
#define DP_T_LAST_PASS 0
#define DP_T_GELU_PHI dp_vgelu_phif
#include "ops/scalar_math_t.h"
#undef DP_T_GELU_PHI
#undef DP_T
#undef DP_T_SFX
#undef DP_T_MATH
#undef DP_T_LAST_PASS

#define RESTRICT __restrict__

/* ---- unary: o = op(x), one loop per op; in place through one pointer, so
 * the vectoriser needs no overlap check ---- */
#define DP_CASE_OX(ID, name, ...)                                                                                      \
  case DP_U_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_fwd_v(x[i], &p);                                                \
    break;
#define DP_CASE_OO(ID, name, ...)                                                                                      \
  case DP_U_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_fwd_v(o[i], &p);                                                \
    break;
static void unary_apart(dp_unary_op op, dp_unary_params p, float *RESTRICT o, const float *RESTRICT x, int64_t n) {
  switch (op) {
    DP_UNARY_OPS(DP_CASE_OX)
  default: break;
  }
}
static void unary_inplace(dp_unary_op op, dp_unary_params p, float *o, int64_t n) {
  switch (op) {
    DP_UNARY_OPS(DP_CASE_OO)
  default: break;
  }
}
#undef DP_CASE_OX
#undef DP_CASE_OO

static void v_sincos(float *o, const float *x, int64_t n, bool want_cos);
static void v_unary(const dp_unary_args *a, float *o, const float *x, int64_t n) {
  if (a->op == DP_U_SIN || a->op == DP_U_COS) v_sincos(o, x, n, a->op == DP_U_COS);
  else if (o == x) unary_inplace(a->op, a->p, o, n);
  else unary_apart(a->op, a->p, o, x, n);
}

/* The element of x or y the op's backward reads (0 for the other). */
#define DP_VX_GRAD_X(x, i) x[i]
#define DP_VX_GRAD_Y(x, i) 0.f
#define DP_VX_GRAD_NONE(x, i) 0.f
#define DP_VY_GRAD_X(y, i) 0.f
#define DP_VY_GRAD_Y(y, i) y[i]
#define DP_VY_GRAD_NONE(y, i) 0.f

static void v_unary_bwd(const dp_unary_args *a, float *gx, const float *gy, const float *x, const float *y, int64_t n) {
  const dp_unary_params p = a->p;
  if (a->op == DP_U_SIN || a->op == DP_U_COS) { /* gy * cos(x), gy * -sin(x): the derivative by v_sincos */
    float d[512];
    for (int64_t i = 0; i < n; i += 512) {
      int64_t m = n - i < 512 ? n - i : 512;
      v_sincos(d, x + i, m, a->op == DP_U_SIN);
      if (a->op == DP_U_SIN)
        for (int64_t j = 0; j < m; j++) gx[i + j] = gy[i + j] * d[j];
      else
        for (int64_t j = 0; j < m; j++) gx[i + j] = gy[i + j] * -d[j];
    }
    return;
  }
  switch (a->op) {
#define DP_CASE(ID, name, node, grad, ...)                                                                             \
  case DP_U_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) gx[i] = dp_##name##_bwd_v(gy[i], DP_VX_##grad(x, i), DP_VY_##grad(y, i), &p);      \
    break;
    DP_UNARY_OPS(DP_CASE)
#undef DP_CASE
  default: break;
  }
}

/* GELU's forward with its derivative, the op table's two formulas (BWD with gy = 1: multiplying by 1 is exact) */
static void v_gelu_with_grad(float *RESTRICT o, float *RESTRICT d, const float *RESTRICT x, int64_t n) {
  const dp_unary_params p = {0};
  for (int64_t i = 0; i < n; i++) {
    o[i] = dp_gelu_fwd_v(x[i], &p);
    d[i] = dp_gelu_bwd_v(1.0f, x[i], 0.0f, &p);
  }
}

/* ---- binary ---- */
#define DP_CASE_AB(ID, name, ...)                                                                                      \
  case DP_B_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_bin_v(a[i], b[i]);                                              \
    break;
#define DP_CASE_AV(ID, name, ...)                                                                                      \
  case DP_B_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_bin_v(a[i], v);                                                 \
    break;
#define DP_CASE_VA(ID, name, ...)                                                                                      \
  case DP_B_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_bin_v(v, a[i]);                                                 \
    break;
#define DP_BINARY_SWITCH(op, CASE)                                                                                     \
  switch (op) {                                                                                                        \
    DP_BINARY_OPS(CASE)                                                                                                \
  default: break;                                                                                                      \
  }
/* + - * / in blocks of two 32-byte vectors (16-byte ones on the
 * baseline): each vector's operands loaded into registers (the empty asm
 * keeps the compiler from folding a load into the op), then the ops, then
 * the stores, as PyTorch's AVX2 loop does. The vectoriser's own loop does
 * one 64-byte vector's load, op and store per iteration; on the AMD EPYC
 * reference core (Zen 4) that stream ran 1.3-1.6x slower once its rows
 * outgrow the L2: a 4096x1024 add, one core, median of 21, in a C harness
 * with the loops in asm: 1.18-1.58 ms against 0.82-1.06 for this block;
 * four 64-byte vectors with folded loads 0.93-1.14. In the L2 all forms
 * ran alike. bench/nn_ops.lua's add broadcast 4096x1024 + 1024: 1.35-1.64
 * ms before, 0.96-0.99 after, alternated (PyTorch 0.72-0.74). The math is the op table's (a + b is dp_add_bin_v's
 * formula, and so on); o may be a or b itself (an in-place op), never a partial overlap (ops/inplace.c refuses or
 * copies those). */
#define DP_BLK_W (DP_VEC_WIDTH < 8 ? DP_VEC_WIDTH : 8)
#define DP_BLK_V 2
#define DP_BLK_N (DP_BLK_W * DP_BLK_V)
typedef float dp_blk_vf __attribute__((vector_size(DP_BLK_W * 4), aligned(4), may_alias));
#define DP_BLK_LOAD(p, k) (*(const dp_blk_vf *)((p) + i + (k)*DP_BLK_W))
/* o[i..] = x OP y over whole blocks; x_[k], y_[k] the block's vectors (y_ = the value when there is no b) */
#define DP_BLOCKED(EXPR)                                                                                               \
  for (; i + DP_BLK_N <= n; i += DP_BLK_N) {                                                                           \
    dp_blk_vf x_[DP_BLK_V], y_[DP_BLK_V];                                                                              \
    for (int k_ = 0; k_ < DP_BLK_V; k_++) {                                                                            \
      y_[k_] = b ? DP_BLK_LOAD(b, k_) : vv;                                                                            \
      x_[k_] = DP_BLK_LOAD(a, k_);                                                                                     \
      __asm__("" : "+x"(x_[k_]), "+x"(y_[k_]));                                                                        \
    }                                                                                                                  \
    for (int k_ = 0; k_ < DP_BLK_V; k_++) x_[k_] = (EXPR);                                                             \
    for (int k_ = 0; k_ < DP_BLK_V; k_++) *(dp_blk_vf *)(o + i + k_ * DP_BLK_W) = x_[k_];                              \
  }
/* the first elements of o = a OP b (b a row, or the value v when b is NULL), in whole blocks; returns how many */
static int64_t blocked_arith(dp_binary_op op, float *o, const float *a, const float *b, float v, bool value_first,
                             int64_t n) {
  int64_t i = 0;
  dp_blk_vf vv; /* v in every lane (not {0} + v: 0 + -0 is +0, and -0 * 1 came out +0) */
  for (int k = 0; k < DP_BLK_W; k++) vv[k] = v;
  if (value_first && op == DP_B_SUB) DP_BLOCKED(y_[k_] - x_[k_]) /* v - a */
  else if (value_first && op == DP_B_DIV) DP_BLOCKED(y_[k_] / x_[k_])
  else if (op == DP_B_ADD) DP_BLOCKED(x_[k_] + y_[k_]) /* the value's side does not matter: + and * commute exactly */
  else if (op == DP_B_SUB) DP_BLOCKED(x_[k_] - y_[k_])
  else if (op == DP_B_MUL) DP_BLOCKED(x_[k_] * y_[k_])
  else if (op == DP_B_DIV) DP_BLOCKED(x_[k_] / y_[k_])
  return i;
}
#undef DP_BLOCKED
#undef DP_BLK_LOAD
static void v_binary(dp_binary_op op, float *o, const float *a, const float *b, int64_t n) {
  int64_t done = blocked_arith(op, o, a, b, 0.f, false, n);
  o += done, a += done, b += done, n -= done;
  DP_BINARY_SWITCH(op, DP_CASE_AB)
}
static void v_binary_value(dp_binary_op op, float *o, const float *a, float v, bool value_first, int64_t n) {
  int64_t done = blocked_arith(op, o, a, NULL, v, value_first, n);
  o += done, a += done, n -= done;
  if (value_first) DP_BINARY_SWITCH(op, DP_CASE_VA)
  else DP_BINARY_SWITCH(op, DP_CASE_AV)
}
static void v_compare(dp_binary_op op, uint8_t *o, const float *a, const float *b, int64_t n) {
  DP_BINARY_SWITCH(op, DP_CASE_AB)
}
static void v_compare_value(dp_binary_op op, uint8_t *o, const float *a, float v, bool value_first, int64_t n) {
  if (value_first) DP_BINARY_SWITCH(op, DP_CASE_VA)
  else DP_BINARY_SWITCH(op, DP_CASE_AV)
}
#undef DP_CASE_AB
#undef DP_CASE_AV
#undef DP_CASE_VA
#undef DP_BINARY_SWITCH

/* ---- casts: the dtype pairs training moves through (autocast's bfloat16,
 * images' uint8, float64 references); bit-exact with tensor/half.h ---- */
static void f32_to_bf16(uint16_t *RESTRICT o, const float *RESTRICT x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u; /* NaN stays a (quiet) NaN */
    o[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
  }
}
static void bf16_to_f32(float *RESTRICT o, const uint16_t *RESTRICT x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)x[i] << 16;
    memcpy(&o[i], &u, 4);
  }
}
static bool v_cast(void *dst, int to, const void *src, int from, int64_t n) {
  if (to == DP_BF16 && from == DP_F32) f32_to_bf16(dst, src, n);
  else if (to == DP_F32 && from == DP_BF16) bf16_to_f32(dst, src, n);
  else if (to == DP_F32 && from == DP_U8) {
    float *RESTRICT o = dst;
    const uint8_t *RESTRICT x = src;
    for (int64_t i = 0; i < n; i++) o[i] = x[i];
  } else if (to == DP_F64 && from == DP_F32) {
    double *RESTRICT o = dst;
    const float *RESTRICT x = src;
    for (int64_t i = 0; i < n; i++) o[i] = x[i];
  } else if (to == DP_F32 && from == DP_F64) {
    float *RESTRICT o = dst;
    const double *RESTRICT x = src;
    for (int64_t i = 0; i < n; i++) o[i] = (float)x[i];
  } else {
    return false;
  }
  return true;
}

/* ---- Philox draws (ops/philox.h: the same numbers as the CUDA kernels):
 * the 10 rounds on 32-bit lanes, 32 x 32 -> 64-bit products ---- */
/* Dropout's draws DP_VEC_WIDTH at a time: Philox on 64-bit lanes, whose
 * 32 x 32 -> 64-bit products are one unsigned even-lane multiply each
 * (vpmuludq: it reads only the low 32 bits of a lane, so the high halves
 * that the XORs leave are never masked); GCC would otherwise emulate them
 * with full 64-bit multiplies (vpmullq, three times slower). PH_NV
 * independent counter vectors per step cover the multiplies' latency (the
 * ten rounds are one dependent chain). The scalar dp_philox_uniform_f is
 * the reference: the same words, bit for bit (tests/spec/dropout_spec.lua). */
typedef uint64_t dp_ph_u64 __attribute__((vector_size(DP_VEC_WIDTH * 4)));
typedef uint32_t dp_ph_u32h __attribute__((vector_size(DP_VEC_WIDTH * 2)));
typedef uint32_t dp_ph_u32 __attribute__((vector_size(DP_VEC_WIDTH * 4)));
typedef int32_t dp_ph_i32 __attribute__((vector_size(DP_VEC_WIDTH * 4)));
typedef float dp_ph_f32 __attribute__((vector_size(DP_VEC_WIDTH * 4)));
enum { PH_LANES = DP_VEC_WIDTH / 2, PH_NV = 4, PH_STEP = PH_NV * PH_LANES };
static inline dp_ph_u64 ph_mul_lo32(dp_ph_u64 a, dp_ph_u64 b) {
#if defined(__AVX512F__) && DP_VEC_WIDTH == 16
  return (dp_ph_u64)_mm512_mul_epu32((__m512i)a, (__m512i)b);
#elif defined(__AVX2__) && DP_VEC_WIDTH == 8
  return (dp_ph_u64)_mm256_mul_epu32((__m256i)a, (__m256i)b);
#elif defined(__SSE2__) && DP_VEC_WIDTH == 4
  return (dp_ph_u64)_mm_mul_epu32((__m128i)a, (__m128i)b);
#else
  return (a & 0xFFFFFFFFull) * (b & 0xFFFFFFFFull);
#endif
}
/* word 0 of Philox4x32-10 (ops/philox.h) for counters first + 0 .. PH_STEP - 1,
 * as PH_NV vectors of PH_LANES (low 32 bits of each lane) */
static inline void ph_words4(dp_ph_u64 *out, dp_ph_u64 *w1, dp_ph_u64 *w2, dp_ph_u64 *w3, uint64_t seed,
                             uint64_t first) {
  dp_ph_u64 c0[PH_NV], c1[PH_NV], c2[PH_NV], c3[PH_NV], iota;
  for (int l = 0; l < PH_LANES; l++) iota[l] = (uint64_t)l;
  const dp_ph_u64 z = iota ^ iota, m0 = z + 0xD2511F53ull, m1 = z + 0xCD9E8D57ull;
  for (int v = 0; v < PH_NV; v++) {
    c0[v] = iota + (first + (uint64_t)(v * PH_LANES));
    c1[v] = c0[v] >> 32, c2[v] = z, c3[v] = z;
  }
  uint64_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    for (int v = 0; v < PH_NV; v++) {
      dp_ph_u64 p0 = ph_mul_lo32(c0[v], m0), p1 = ph_mul_lo32(c2[v], m1);
      dp_ph_u64 n0 = (p1 >> 32) ^ c1[v] ^ k0, n2 = (p0 >> 32) ^ c3[v] ^ k1;
      c1[v] = p1, c3[v] = p0, c0[v] = n0, c2[v] = n2;
    }
    k0 = (uint32_t)(k0 + 0x9E3779B9u);
    k1 = (uint32_t)(k1 + 0xBB67AE85u);
  }
  for (int v = 0; v < PH_NV; v++) out[v] = c0[v];
  if (w1) /* constant at every call: the words not asked for are dead code */
    for (int v = 0; v < PH_NV; v++) w1[v] = c1[v], w2[v] = c2[v], w3[v] = c3[v];
}
static inline void ph_words(dp_ph_u64 *out, uint64_t seed, uint64_t first) {
  ph_words4(out, NULL, NULL, NULL, seed, first);
}
static void v_dropout(float *o, const float *x, int64_t n, float p, float scale, uint64_t seed, uint64_t offset) {
  int64_t i = 0;
  for (; i + PH_STEP <= n; i += PH_STEP) {
    dp_ph_u64 r[PH_NV];
    ph_words(r, seed, offset + (uint64_t)i);
    for (int v = 0; v < PH_NV; v += 2) { /* two vectors of 64-bit lanes: one of floats */
      dp_ph_u32h lo = __builtin_convertvector(r[v], dp_ph_u32h), hi = __builtin_convertvector(r[v + 1], dp_ph_u32h);
      dp_ph_u32 w;
      memcpy(&w, &lo, sizeof lo);
      memcpy((char *)&w + sizeof lo, &hi, sizeof hi);
      /* dp_u32_to_uniform_f: 24 bits, exact in float */
      dp_ph_f32 u = __builtin_convertvector(w >> 8, dp_ph_f32) * (1.0f / 16777216.0f), xv;
      int64_t j = i + v * PH_LANES;
      memcpy(&xv, x + j, sizeof xv);
      dp_ph_i32 keep = u >= p;
      dp_ph_u32 y = (dp_ph_u32)(xv * scale) & (dp_ph_u32)keep; /* dropped: +0, as the scalar path */
      memcpy(o + j, &y, sizeof y);
    }
  }
  for (; i < n; i++) {
    float u = dp_philox_uniform_f(seed, offset + (uint64_t)i);
    o[i] = u >= p ? x[i] * scale : 0.f;
  }
}
/* Uniform draws a + s u, PH_STEP at a time, the words as dropout's: 10 ns
 * an element scalar (a Linear(1024, 1024)'s init 10 ms), ~1 vectorised.
 * The product and the sum are separate roundings in both paths (no FMA:
 * the empty asm keeps the product a value of its own). */
static void v_uniform(float *o, int64_t n, float a, float s, uint64_t seed, uint64_t offset) {
  int64_t i = 0;
  for (; i + PH_STEP <= n; i += PH_STEP) {
    dp_ph_u64 r[PH_NV];
    ph_words(r, seed, offset + (uint64_t)i);
    for (int v = 0; v < PH_NV; v += 2) {
      dp_ph_u32h lo = __builtin_convertvector(r[v], dp_ph_u32h), hi = __builtin_convertvector(r[v + 1], dp_ph_u32h);
      dp_ph_u32 w;
      memcpy(&w, &lo, sizeof lo);
      memcpy((char *)&w + sizeof lo, &hi, sizeof hi);
      dp_ph_f32 u = __builtin_convertvector(w >> 8, dp_ph_f32) * (1.0f / 16777216.0f); /* dp_u32_to_uniform_f */
      dp_ph_f32 su = u * s;
      __asm__("" : "+x"(su));
      su = su + a;
      memcpy(o + i + v * PH_LANES, &su, sizeof su);
    }
  }
  for (; i < n; i++) {
    float su = s * dp_philox_uniform_f(seed, offset + (uint64_t)i);
    __asm__("" : "+x"(su));
    o[i] = a + su;
  }
}

/* ---- normal draws: dp_philox_normal_d (Box-Muller in double) on PH_LANES
 * lanes of double. log and cos are fdlibm's kernels (their published
 * minimax coefficients, under 1 ulp) instead of libm's calls: 38 ns an
 * element scalar, PyTorch's float32 randn 4.6. cos(2 pi u) reduces u
 * itself by quarter turns (exact) rather than the rounded 2 pi u, so a
 * value can differ from the reference's in the last bit of the double,
 * and the float32 result in a rounding tie only (tests/spec/randn_spec.lua
 * counts them) ---- */
typedef double dp_ph_f64 __attribute__((vector_size(DP_VEC_WIDTH * 4)));
typedef int64_t dp_ph_i64 __attribute__((vector_size(DP_VEC_WIDTH * 4)));
static inline dp_ph_f64 ph_select(dp_ph_i64 m, dp_ph_f64 a, dp_ph_f64 b) {
  return (dp_ph_f64)((m & (dp_ph_i64)a) | (~m & (dp_ph_i64)b));
}
/* log(x) for normal x > 0: x = 2^k m, m in [sqrt(1/2), sqrt(2)), f = m - 1 */
static inline dp_ph_f64 ph_log(dp_ph_f64 x) {
  dp_ph_i64 bits = (dp_ph_i64)x;
  dp_ph_i64 k = ((bits >> 52) & 0x7FF) - 1023;
  dp_ph_i64 mb = (bits & 0x000FFFFFFFFFFFFFll) | 0x3FF0000000000000ll; /* m in [1, 2) */
  dp_ph_i64 big = mb > 0x3FF6A09E667F3BCDll;                           /* m > sqrt(2): m / 2, k + 1 */
  mb -= big & 0x0010000000000000ll, k -= big;
  dp_ph_f64 f = (dp_ph_f64)mb - 1.0, dk = __builtin_convertvector(k, dp_ph_f64);
  dp_ph_f64 hfsq = 0.5 * f * f, sv = f / (2.0 + f), z = sv * sv, w = z * z;
  dp_ph_f64 t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
  dp_ph_f64 t2 = z * (6.666666666666735130e-01 +
                      w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
  dp_ph_f64 r = t2 + t1;
  return dk * 6.93147180369123816490e-01 - ((hfsq - (sv * (hfsq + r) + dk * 1.90821492927058770002e-10)) - f);
}
/* a * b + c, fused where the kernel set has FMA (the build leaves contraction off: the scalar reference and
 * the vector loops must round alike elsewhere; the polynomials below are this file's own, held to float64) */
static inline dp_ph_f64 ph_madd(dp_ph_f64 a, dp_ph_f64 b, dp_ph_f64 c) {
#if defined(__AVX512F__) && DP_VEC_WIDTH == 16
  return (dp_ph_f64)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif defined(__FMA__) && DP_VEC_WIDTH == 8
  return (dp_ph_f64)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#else
  return a * b + c;
#endif
}
static inline dp_ph_f64 ph_splat(double c) {
  dp_ph_f64 v;
  for (int l = 0; l < PH_LANES; l++) v[l] = c;
  return v;
}
/* cos(q pi / 2 + x) for x in [-pi/4, pi/4]: fdlibm's sin and cos kernels
 * (1 - (z/2 - z^2 c(z)) for cos, with a quarter of x^2 split off above
 * |x| = 0.3), chosen and signed by the quadrant q; the polynomials by
 * Horner's rule in fused steps (half the operations of a multiply and an
 * add each: sin of 1M float32 values 1.75 -> see docs/performance.md) */
static inline dp_ph_f64 ph_cos_quadrant(dp_ph_f64 x, dp_ph_i64 q) {
  dp_ph_f64 z = x * x, zero = x - x;
  dp_ph_f64 ps = ph_splat(1.58969099521155010221e-10);
  ps = ph_madd(ps, z, ph_splat(-2.50507602534068634195e-08));
  ps = ph_madd(ps, z, ph_splat(2.75573137070700676789e-06));
  ps = ph_madd(ps, z, ph_splat(-1.98412698298579493134e-04));
  ps = ph_madd(ps, z, ph_splat(8.33333333332248946124e-03));
  ps = ph_madd(ps, z, ph_splat(-1.66666666666666324348e-01));
  dp_ph_f64 sn = ph_madd(z * x, ps, x);
  dp_ph_f64 pc = ph_splat(-1.13596475577881948265e-11);
  pc = ph_madd(pc, z, ph_splat(2.08757232129817482790e-09));
  pc = ph_madd(pc, z, ph_splat(-2.75573143513906633035e-07));
  pc = ph_madd(pc, z, ph_splat(2.48015872894767294178e-05));
  pc = ph_madd(pc, z, ph_splat(-1.38888888888741095749e-03));
  pc = ph_madd(pc, z, ph_splat(4.16666666666666019037e-02));
  dp_ph_f64 cr = (z * z) * pc;
  sn = ph_select(z == 0.0, x, sn); /* sin(-0) = -0 (x + z x s(z) would be +0) */
  dp_ph_f64 ax = (dp_ph_f64)((dp_ph_i64)x & 0x7FFFFFFFFFFFFFFFll);
  dp_ph_f64 qx = (dp_ph_f64)((dp_ph_i64)(0.25 * ax * ax) & (int64_t)0xFFFFFFFF00000000ull);
  qx = ph_select(ax > 0.78125, zero + 0.28125, qx);
  qx = ph_select(ax < 0.3, zero, qx);
  dp_ph_f64 cs = (1.0 - qx) - ((0.5 * z - qx) - cr);
  dp_ph_f64 v = ph_select((q & 1) != 0, sn, cs);
  dp_ph_i64 neg = ((q + 1) & 2) != 0; /* q = 1 or 2 (mod 4) */
  return (dp_ph_f64)((dp_ph_i64)v ^ (neg & INT64_MIN));
}
/* 1.5 * 2^52: adding it and taking it away rounds a double to an integer */
#define PH_ROUND(v) (((v) + 6755399441055744.0) - 6755399441055744.0)
/* cos(2 pi u) for u in [0, 1): q quarter turns (nearest), r = (4u - q) pi / 2 exactly reduced */
static inline dp_ph_f64 ph_cos_2pi(dp_ph_f64 u) {
  dp_ph_f64 t = 4.0 * u, qd = PH_ROUND(t);
  return ph_cos_quadrant((t - qd) * 1.57079632679489655800e+00, __builtin_convertvector(qd, dp_ph_i64));
}
static inline dp_ph_f64 ph_sqrt(dp_ph_f64 x) {
#if defined(__AVX512F__) && DP_VEC_WIDTH == 16
  return (dp_ph_f64)_mm512_sqrt_pd((__m512d)x);
#elif defined(__AVX__) && DP_VEC_WIDTH == 8
  return (dp_ph_f64)_mm256_sqrt_pd((__m256d)x);
#else
  for (int l = 0; l < PH_LANES; l++) x[l] = sqrt(x[l]);
  return x;
#endif
}
/* dp_u64_to_uniform_d on the low 32 bits of two lanes */
static inline dp_ph_f64 ph_uniform_d(dp_ph_u64 a, dp_ph_u64 b) {
  dp_ph_u64 x = (((a & 0xFFFFFFFFull) << 21) ^ ((b & 0xFFFFFFFFull) >> 11)) & ((1ull << 53) - 1);
  return __builtin_convertvector((dp_ph_i64)x, dp_ph_f64) * (1.0 / 9007199254740992.0);
}
/* PH_STEP draws from counter first on */
static inline void normal_block(float *o, double mean, double std, uint64_t seed, uint64_t first) {
  dp_ph_u64 w0[PH_NV], w1[PH_NV], w2[PH_NV], w3[PH_NV];
  ph_words4(w0, w1, w2, w3, seed, first);
  for (int v = 0; v < PH_NV; v++) {
    dp_ph_f64 u1 = ph_uniform_d(w0[v], w1[v]), u2 = ph_uniform_d(w2[v], w3[v]);
    u1 = ph_select(u1 < 1e-300, (u1 - u1) + 1e-300, u1);
    dp_ph_f64 y = mean + std * (ph_sqrt(-2.0 * ph_log(u1)) * ph_cos_2pi(u2));
    for (int l = 0; l < PH_LANES; l++) o[v * PH_LANES + l] = (float)y[l];
  }
}
static void v_normal(float *o, int64_t n, double mean, double std, uint64_t seed, uint64_t offset) {
  int64_t i = 0;
  for (; i + PH_STEP <= n; i += PH_STEP) normal_block(o + i, mean, std, seed, offset + (uint64_t)i);
  if (i < n) { /* the tail through the same lanes (a block drawn whole, its first values kept): an element's value
                  does not depend on where the thread split put it */
    float t[PH_STEP];
    normal_block(t, mean, std, seed, offset + (uint64_t)i);
    memcpy(o + i, t, (size_t)(n - i) * sizeof(float));
  }
}

/* ---- sin and cos of float32: each value widened to double, reduced by
 * k = round(x 2 / pi) quarter turns with pi / 2 in two parts (its first
 * 33 bits, so k times it is exact for |k| < 2^20, then the rest),
 * ph_cos_quadrant, rounded once: the float64 sin / cos rounded but for
 * rounding ties (libm's sinf differs from that for some values), 3.5x
 * faster than sinf's calls. |x| >= 2^19, inf and NaN lanes take libm's
 * own call (its exact reduction of any size). o may be x. ---- */
typedef float dp_ph_f32h __attribute__((vector_size(DP_VEC_WIDTH * 2)));
/* PH_NV vectors at a time, as pow_block: one vector's polynomials are a chain of dependent steps (2.1 ms for 1M
 * values, bound by their latency); four independent chains keep the FMA units busy */
static inline void sincos_block(float *o, const float *x, bool want_cos) {
  dp_ph_f32h xs[PH_NV], y[PH_NV];
  dp_ph_i64 big[PH_NV];
  memcpy(xs, x, sizeof xs);
  for (int k = 0; k < PH_NV; k++) {
    dp_ph_f64 xd = __builtin_convertvector(xs[k], dp_ph_f64);
    dp_ph_f64 ax = (dp_ph_f64)((dp_ph_i64)xd & 0x7FFFFFFFFFFFFFFFll);
    big[k] = ~(ax < 524288.0);                 /* NaN too */
    xd = (dp_ph_f64)(~big[k] & (dp_ph_i64)xd); /* those lanes 0 here, libm's below */
    dp_ph_f64 kd = PH_ROUND(xd * 6.36619772367581382433e-01);
    dp_ph_f64 r = (xd - kd * 1.57079632673412561417e+00) - kd * 6.07710050650619224932e-11;
    dp_ph_i64 q = __builtin_convertvector(kd, dp_ph_i64) - (want_cos ? 0 : 1); /* sin(y) = cos(y - pi/2) */
    y[k] = __builtin_convertvector(ph_cos_quadrant(r, q), dp_ph_f32h);
  }
  int64_t any = 0;
  for (int k = 0; k < PH_NV; k++)
    for (int l = 0; l < PH_LANES; l++) any |= big[k][l];
  if (any)
    for (int k = 0; k < PH_NV; k++)
      for (int l = 0; l < PH_LANES; l++)
        if (big[k][l]) y[k][l] = want_cos ? cosf(xs[k][l]) : sinf(xs[k][l]);
  memcpy(o, y, sizeof y);
}
/* o = block(o, x, arg) over n values in blocks of STEP, the tail padded with zeros in a local block: every value
 * through the same lanes, so its result does not depend on its position (sin, cos and pow below) */
#ifndef PH_BY_BLOCKS
#define PH_BY_BLOCKS(STEP, block, o, x, n, arg)                                                                        \
  do {                                                                                                                 \
    int64_t i_ = 0;                                                                                                    \
    for (; i_ + (STEP) <= (n); i_ += (STEP)) block((o) + i_, (x) + i_, arg);                                           \
    if (i_ < (n)) {                                                                                                    \
      float t_[STEP] = {0};                                                                                            \
      memcpy(t_, (x) + i_, (size_t)((n)-i_) * sizeof(float));                                                          \
      block(t_, t_, arg);                                                                                              \
      memcpy((o) + i_, t_, (size_t)((n)-i_) * sizeof(float));                                                          \
    }                                                                                                                  \
  } while (0)
#endif
static void v_sincos(float *o, const float *x, int64_t n, bool want_cos) {
  PH_BY_BLOCKS(PH_STEP, sincos_block, o, x, n, want_cos);
}

/* ---- pow of float32 values to one float32 power: x^y = exp(y log x) in
 * double lanes (ph_log; exp by 2^k times a degree-11 polynomial of r =
 * t - k ln 2, ln 2 in two parts; Estrin's scheme), rounded once: within an ulp of the
 * float64 pow rounded, at a fifth of powf's calls (tests/spec/pow_float_spec.lua).
 * A negative x takes |x|^y, NaN for a fractional y and the sign of
 * (-1)^y for a whole one; lanes of 0, inf and NaN take powf's call and
 * its special cases; y itself finite (the caller). The
 * result's range is float32's: t is clamped to +-200, far beyond it. ---- */
static inline dp_ph_f64 ph_exp(dp_ph_f64 t) {
  t = ph_select(t > 200.0, (t - t) + 200.0, t);
  t = ph_select(t < -200.0, (t - t) - 200.0, t);
  dp_ph_f64 kd = PH_ROUND(t * 1.44269504088896338700e+00);
  dp_ph_f64 r = (t - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
  /* the Taylor polynomial of degree 11 in Estrin's form: pairs, then pairs of pairs (a chain of 4 steps, not 12) */
  dp_ph_f64 r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
  dp_ph_f64 p01 = 1.0 + r, p23 = 0.5 + r * (1.0 / 6.0), p45 = 1.0 / 24.0 + r * (1.0 / 120.0);
  dp_ph_f64 p67 = 1.0 / 720.0 + r * (1.0 / 5040.0), p89 = 1.0 / 40320.0 + r * (1.0 / 362880.0);
  dp_ph_f64 pab = 1.0 / 3628800.0 + r * (1.0 / 39916800.0);
  dp_ph_f64 pl = (p01 + r2 * p23) + r4 * (p45 + r2 * p67) + r8 * (p89 + r2 * pab);
  dp_ph_i64 k = __builtin_convertvector(kd, dp_ph_i64);
  return pl * (dp_ph_f64)((k + 1023) << 52); /* |k| <= 289: 2^k a normal double */
}
/* PH_NV vectors at a time: four independent chains of the polynomials' steps (one took 38 ns a vector, its
 * latency) */
static inline void pow_block(float *o, const float *x, float y) {
  bool whole = y == truncf(y), odd_power = whole && fmodf(y, 2.0f) != 0.0f;
  dp_ph_f32h xs[PH_NV], r[PH_NV];
  dp_ph_f64 ax[PH_NV], v[PH_NV];
  dp_ph_i64 odd[PH_NV], neg[PH_NV];
  memcpy(xs, x, sizeof xs);
  for (int k = 0; k < PH_NV; k++) {
    dp_ph_f64 xd = __builtin_convertvector(xs[k], dp_ph_f64);
    neg[k] = xd < 0.0;
    ax[k] = (dp_ph_f64)((dp_ph_i64)xd & 0x7FFFFFFFFFFFFFFFll);
    odd[k] = ~((ax[k] > 0.0) & (ax[k] < 3.5e38));            /* 0, inf, NaN: powf below */
    ax[k] = ph_select(odd[k], (ax[k] - ax[k]) + 1.0, ax[k]); /* (NaN - NaN is NaN: the select decides) */
  }
  for (int k = 0; k < PH_NV; k++) v[k] = ph_exp((double)y * ph_log(ax[k]));
  int64_t any = 0;
  for (int k = 0; k < PH_NV; k++) {
    /* a negative x: NaN for a fractional y, the sign of (-1)^y for a whole one */
    if (!whole) v[k] = ph_select(neg[k], (v[k] - v[k]) + NAN, v[k]);
    else if (odd_power) v[k] = (dp_ph_f64)((dp_ph_i64)v[k] ^ (neg[k] & INT64_MIN));
    r[k] = __builtin_convertvector(v[k], dp_ph_f32h);
    for (int l = 0; l < PH_LANES; l++) any |= odd[k][l];
  }
  if (any)
    for (int k = 0; k < PH_NV; k++)
      for (int l = 0; l < PH_LANES; l++)
        if (odd[k][l]) r[k][l] = powf(xs[k][l], y);
  memcpy(o, r, sizeof r);
}
static void v_pow_value(float *o, const float *x, float y, int64_t n) { PH_BY_BLOCKS(PH_STEP, pow_block, o, x, n, y); }
