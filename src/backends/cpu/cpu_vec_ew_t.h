/* Elementwise float32 kernels of cpu_vec.h, included once by each per-ISA
 * translation unit (cpu_vec_avx512.c, ...), which sets the target first;
 * no include guard on purpose. The unary and binary loops come from the op
 * table: one loop per op over its formula from ops/scalar_math_t.h,
 * instantiated here as dp_<name>_fwd_v with vmath.h's functions, so the
 * whole loop (math included) vectorises. */
#include <math.h>
#include <string.h>

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

static void v_unary(const dp_unary_args *a, float *o, const float *x, int64_t n) {
  if (o == x) unary_inplace(a->op, a->p, o, n);
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
static void v_binary(dp_binary_op op, float *o, const float *a, const float *b, int64_t n) {
  DP_BINARY_SWITCH(op, DP_CASE_AB)
}
static void v_binary_value(dp_binary_op op, float *o, const float *a, float v, bool value_first, int64_t n) {
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
static void v_uniform(float *o, int64_t n, float a, float s, uint64_t seed, uint64_t offset) {
  for (int64_t i = 0; i < n; i++) o[i] = a + s * dp_philox_uniform_f(seed, offset + (uint64_t)i);
}
static void v_dropout(float *o, const float *x, int64_t n, float p, float scale, uint64_t seed, uint64_t offset) {
  for (int64_t i = 0; i < n; i++) {
    float u = dp_philox_uniform_f(seed, offset + (uint64_t)i);
    o[i] = u >= p ? x[i] * scale : 0.f;
  }
}
