/* CPU elementwise kernels: copy/cast, fill, unary, binary, their backward.
 *
 * Paths per kernel: a float32 unit-stride loop the compiler vectorises; a
 * strided float32 loop with the same float math (so a view computes what
 * a contiguous tensor does, as in PyTorch and on CUDA); exact int64 loops;
 * and the reference path that loads every element as double (dp_load_d),
 * applies the double version of the math and stores in the output dtype
 * (float64 and dtype mixes). The specs check the float32 paths against it. The math is the op table's formulas
 * (ops/scalar_math_t.h); the per-op float32 loops are generated from the
 * table, so a new op needs nothing here. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "core/error.h"
#include "ops/philox.h"
#include "ops/scalar_math.h"

/* ---- copy / cast ---- */
typedef struct {
  dp_dtype to, from;
} cast_ctx;

static void copy_row(char **p, const int64_t *s, int64_t n, void *vctx) {
  cast_ctx *c = vctx;
  size_t es = dp_dtype_size(c->to);
  if (c->to == c->from) {
    if (s[0] == (int64_t)es && s[1] == (int64_t)es) {
      memcpy(p[0], p[1], (size_t)n * es);
      return;
    }
    if (s[1] == 0) { /* a broadcast value: typed stores, not a memcpy call per element */
      if (es == 4) {
        uint32_t v;
        memcpy(&v, p[1], 4);
        for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], &v, 4);
      } else if (es == 8) {
        uint64_t v;
        memcpy(&v, p[1], 8);
        for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], &v, 8);
      } else {
        for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1], es);
      }
      return;
    }
    for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], es);
    return;
  }
  if (c->to == DP_F32 && c->from == DP_U8 && s[0] == 4 && s[1] == 1) {
    float *o = (float *)p[0];
    const uint8_t *x = (const uint8_t *)p[1];
    for (int64_t i = 0; i < n; i++) o[i] = x[i];
    return;
  }
  if (c->to == DP_I64 && c->from == DP_U8) {
    for (int64_t i = 0; i < n; i++) *(int64_t *)(p[0] + i * s[0]) = *(uint8_t *)(p[1] + i * s[1]);
    return;
  }
  if (c->to == DP_U8 && c->from == DP_I64) {
    for (int64_t i = 0; i < n; i++) *(uint8_t *)(p[0] + i * s[0]) = (uint8_t) * (int64_t *)(p[1] + i * s[1]);
    return;
  }
  for (int64_t i = 0; i < n; i++) dp_store_d(p[0] + i * s[0], c->to, dp_load_d(p[1] + i * s[1], c->from));
}

int dp_cpu_copy(dp_tensor *dst, const dp_tensor *src) {
  cast_ctx c = {dst->dtype, src->dtype};
  const dp_tensor *ops[2] = {dst, src};
  dp_cpu_foreach(2, ops, copy_row, &c);
  return 0;
}

static void fill_row(char **p, const int64_t *s, int64_t n, void *vctx) {
  const dp_tensor *t = ((const dp_tensor **)vctx)[0];
  double v = *((const double **)vctx)[1];
  size_t es = dp_elsize(t);
  char one[8];
  dp_store_d(one, t->dtype, v);
  if (s[0] == 4 && t->dtype == DP_F32) {
    float f = *(float *)one, *o = (float *)p[0];
    for (int64_t i = 0; i < n; i++) o[i] = f;
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], one, es);
}

int dp_cpu_fill(dp_tensor *t, double v) {
  if (v == 0.0 && dp_is_contiguous(t)) {
    memset(dp_data(t), 0, (size_t)dp_numel(t) * dp_elsize(t));
    return 0;
  }
  const void *ctx[2] = {t, &v};
  const dp_tensor *ops[1] = {t};
  dp_cpu_foreach(1, ops, fill_row, ctx);
  return 0;
}

int dp_cpu_arange(dp_tensor *out, double start, double step) {
  int64_t n = dp_numel(out);
  char *p = dp_data(out);
  size_t es = dp_elsize(out);
  if (out->dtype == DP_I64) {
    for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = (int64_t)start + i * (int64_t)step;
    return 0;
  }
  for (int64_t i = 0; i < n; i++) dp_store_d(p + (size_t)i * es, out->dtype, start + (double)i * step);
  return 0;
}

int dp_cpu_rand(dp_tensor *out, dp_rand_kind kind, uint64_t seed, uint64_t offset, double a, double b) {
  int64_t n = dp_numel(out);
  char *p = dp_data(out);
  size_t es = dp_elsize(out);
  if (kind == DP_RAND_UNIFORM && out->dtype == DP_F32) {
    float *o = (float *)p, fa = (float)a, fs = (float)(b - a);
    for (int64_t i = 0; i < n; i++) o[i] = fa + fs * dp_philox_uniform_f(seed, offset + (uint64_t)i);
    return 0;
  }
  for (int64_t i = 0; i < n; i++) {
    double v = kind == DP_RAND_UNIFORM ? a + (b - a) * dp_philox_uniform_d(seed, offset + (uint64_t)i)
                                       : a + b * dp_philox_normal_d(seed, offset + (uint64_t)i);
    dp_store_d(p + (size_t)i * es, out->dtype, v);
  }
  return 0;
}

/* ---- unary: the op table's formulas, one vectorised float32 loop per op ---- */
typedef struct {
  const dp_unary_args *a;
  dp_dtype to, from;
} unary_ctx;

/* One vectorised loop per op of the table: o[i] = op(x[i]), and in place
 * (one pointer, so the vectoriser needs no overlap check). */
#define DP_UNARY_F32_LOOPS(a, CASE)                                                                                    \
  switch ((a)->op) {                                                                                                   \
    DP_UNARY_OPS(CASE)                                                                                                 \
  default: break;                                                                                                      \
  }
#define DP_CASE_OX(ID, name, ...)                                                                                      \
  case DP_U_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_fwd_f(x[i], &a->p);                                             \
    break;
#define DP_CASE_OO(ID, name, ...)                                                                                      \
  case DP_U_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_fwd_f(o[i], &a->p);                                             \
    break;
static void unary_f32(const dp_unary_args *a, float *o, const float *x, int64_t n) { DP_UNARY_F32_LOOPS(a, DP_CASE_OX) }
void dp_cpu_unary_f32_(const dp_unary_args *a, float *o, int64_t n) { DP_UNARY_F32_LOOPS(a, DP_CASE_OO) }
#undef DP_CASE_OX
#undef DP_CASE_OO
#undef DP_UNARY_F32_LOOPS

static void unary_row(char **p, const int64_t *s, int64_t n, void *vctx) {
  unary_ctx *c = vctx;
  if (c->to == DP_F32 && c->from == DP_F32 && s[0] == 4 && s[1] == 4) {
    unary_f32(c->a, (float *)p[0], (const float *)p[1], n);
    return;
  }
  if (c->to == DP_F32 && c->from == DP_F32) {
    for (int64_t i = 0; i < n; i++)
      *(float *)(p[0] + i * s[0]) = dp_unary_f(c->a->op, *(const float *)(p[1] + i * s[1]), &c->a->p);
    return;
  }
  if (c->to == DP_I64 && c->from == DP_I64) { /* ops that keep integers: exact beyond 2^53 */
    for (int64_t i = 0; i < n; i++)
      *(int64_t *)(p[0] + i * s[0]) = dp_unary_i64(c->a->op, *(const int64_t *)(p[1] + i * s[1]), &c->a->p);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    dp_store_d(p[0] + i * s[0], c->to, dp_unary_d(c->a->op, dp_load_d(p[1] + i * s[1], c->from), &c->a->p));
}

int dp_cpu_unary(const dp_unary_args *a, dp_tensor *out, const dp_tensor *x) {
  unary_ctx c = {a, out->dtype, x->dtype};
  const dp_tensor *ops[2] = {out, x};
  dp_cpu_foreach(2, ops, unary_row, &c);
  return 0;
}

typedef struct {
  const dp_unary_args *a;
  dp_dtype dt[4];
  bool has_x, has_y;
} ugrad_ctx;

/* The element of x or y the op's backward reads (0 for the other). */
#define DP_GRAD_X_AT_GRAD_X(x, i) x[i]
#define DP_GRAD_X_AT_GRAD_Y(x, i) 0.f
#define DP_GRAD_X_AT_GRAD_NONE(x, i) 0.f
#define DP_GRAD_Y_AT_GRAD_X(y, i) 0.f
#define DP_GRAD_Y_AT_GRAD_Y(y, i) y[i]
#define DP_GRAD_Y_AT_GRAD_NONE(y, i) 0.f

static void ugrad_f32(const dp_unary_args *a, float *gx, const float *gy, const float *x, const float *y, int64_t n) {
  const dp_unary_params *p = &a->p;
  switch (a->op) {
#define DP_CASE(ID, name, node, grad, ...)                                                                             \
  case DP_U_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++)                                                                                    \
      gx[i] = dp_##name##_bwd_f(gy[i], DP_GRAD_X_AT_##grad(x, i), DP_GRAD_Y_AT_##grad(y, i), p);                       \
    break;
    DP_UNARY_OPS(DP_CASE)
#undef DP_CASE
  default: break;
  }
}

static void ugrad_row(char **p, const int64_t *s, int64_t n, void *vctx) {
  ugrad_ctx *c = vctx;
  /* operands: gx, gy, [x], [y] (in that order, absent ones skipped) */
  int kx = c->has_x ? 2 : -1, ky = c->has_y ? (c->has_x ? 3 : 2) : -1;
  bool all_f32 = true;
  for (int k = 0; k < 4; k++) all_f32 = all_f32 && c->dt[k] == DP_F32;
  bool unit = s[0] == 4 && s[1] == 4 && (kx < 0 || s[kx] == 4) && (ky < 0 || s[ky] == 4);
  dp_grad_reads reads = dp_unary_ops[c->a->op].grad;
  if (all_f32 && unit && (reads != DP_GRAD_X || kx > 0) && (reads != DP_GRAD_Y || ky > 0)) {
    ugrad_f32(c->a, (float *)p[0], (const float *)p[1], kx > 0 ? (const float *)p[kx] : NULL,
              ky > 0 ? (const float *)p[ky] : NULL, n);
    return;
  }
  if (all_f32) { /* strided: the same float math (a broadcast gy computes what a contiguous one does) */
    for (int64_t i = 0; i < n; i++) {
      float x = kx > 0 ? *(const float *)(p[kx] + i * s[kx]) : 0.f;
      float y = ky > 0 ? *(const float *)(p[ky] + i * s[ky]) : 0.f;
      *(float *)(p[0] + i * s[0]) = dp_unary_grad_f(c->a->op, *(const float *)(p[1] + i * s[1]), x, y, &c->a->p);
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double x = kx > 0 ? dp_load_d(p[kx] + i * s[kx], c->dt[kx]) : 0.0;
    double y = ky > 0 ? dp_load_d(p[ky] + i * s[ky], c->dt[ky]) : 0.0;
    double gy = dp_load_d(p[1] + i * s[1], c->dt[1]);
    dp_store_d(p[0] + i * s[0], c->dt[0], dp_unary_grad_d(c->a->op, gy, x, y, &c->a->p));
  }
}

int dp_cpu_unary_backward(const dp_unary_args *a, dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x,
                          const dp_tensor *y) {
  ugrad_ctx c = {.a = a, .has_x = x != NULL, .has_y = y != NULL};
  const dp_tensor *ops[4] = {gx, gy, NULL, NULL};
  int k = 2;
  if (x) ops[k++] = x;
  if (y) ops[k++] = y;
  for (int i = 0; i < 4; i++) c.dt[i] = i < k ? ops[i]->dtype : DP_F32;
  dp_cpu_foreach(k, ops, ugrad_row, &c);
  return 0;
}

/* ---- binary ---- */
typedef struct {
  dp_binary_op op;
  dp_dtype to, a, b;
  double s;
  bool scalar_first;
} binary_ctx;

/* Vectorised float32 loops from the op table: o = a (op) b with b of unit
 * stride, o = a (op) v and o = v (op) a for one value v. */
#define DP_BINARY_F32_LOOPS(op, EXPR)                                                                                  \
  switch (op) {                                                                                                        \
    DP_BINARY_OPS(EXPR)                                                                                                \
  default: break;                                                                                                      \
  }
#define DP_CASE_AB(ID, name, ...)                                                                                      \
  case DP_B_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_bin_f(a[i], b[i]);                                              \
    break;
#define DP_CASE_AV(ID, name, ...)                                                                                      \
  case DP_B_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_bin_f(a[i], v);                                                 \
    break;
#define DP_CASE_VA(ID, name, ...)                                                                                      \
  case DP_B_##ID:                                                                                                      \
    for (int64_t i = 0; i < n; i++) o[i] = dp_##name##_bin_f(v, a[i]);                                                 \
    break;
static void binary_f32(dp_binary_op op, float *o, const float *a, const float *b, int64_t n) {
  DP_BINARY_F32_LOOPS(op, DP_CASE_AB)
}
static void binary_f32_value(dp_binary_op op, float *o, const float *a, float v, bool value_first, int64_t n) {
  if (value_first) DP_BINARY_F32_LOOPS(op, DP_CASE_VA)
  else DP_BINARY_F32_LOOPS(op, DP_CASE_AV)
}
#undef DP_CASE_AB
#undef DP_CASE_AV
#undef DP_CASE_VA
#undef DP_BINARY_F32_LOOPS

static void binary_row(char **p, const int64_t *s, int64_t n, void *vctx) {
  binary_ctx *c = vctx;
  if (c->to == DP_F32 && c->a == DP_F32 && c->b == DP_F32 && s[0] == 4 && s[1] == 4 && (s[2] == 4 || s[2] == 0)) {
    if (s[2] == 0) binary_f32_value(c->op, (float *)p[0], (const float *)p[1], *(const float *)p[2], false, n);
    else binary_f32(c->op, (float *)p[0], (const float *)p[1], (const float *)p[2], n);
    return;
  }
  if (c->a == DP_F32 && c->b == DP_F32 && (c->to == DP_F32 || (c->to == DP_U8 && dp_binary_is_compare(c->op)))) {
    for (int64_t i = 0; i < n; i++) {
      float r = dp_binary_f(c->op, *(const float *)(p[1] + i * s[1]), *(const float *)(p[2] + i * s[2]));
      if (c->to == DP_F32) *(float *)(p[0] + i * s[0]) = r;
      else *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)r;
    }
    return;
  }
  if (c->to == DP_I64 && c->a == DP_I64 && c->b == DP_I64) {
    for (int64_t i = 0; i < n; i++)
      *(int64_t *)(p[0] + i * s[0]) =
          dp_binary_i64(c->op, *(int64_t *)(p[1] + i * s[1]), *(int64_t *)(p[2] + i * s[2]));
    return;
  }
  /* other integer mixes (uint8, and comparisons to uint8): exact in int64,
   * wrapping into uint8 as uint8 arithmetic would (5^194 is 25 there) */
  if ((c->to == DP_I64 || c->to == DP_U8) && (c->a == DP_I64 || c->a == DP_U8) && (c->b == DP_I64 || c->b == DP_U8) &&
      dp_binary_ops[c->op].out != DP_OUT_FLOAT) {
    for (int64_t i = 0; i < n; i++) {
      const char *pa = p[1] + i * s[1], *pb = p[2] + i * s[2];
      int64_t av = c->a == DP_U8 ? *(const uint8_t *)pa : *(const int64_t *)pa;
      int64_t bv = c->b == DP_U8 ? *(const uint8_t *)pb : *(const int64_t *)pb;
      int64_t r = dp_binary_i64(c->op, av, bv);
      if (c->to == DP_U8) *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)r;
      else *(int64_t *)(p[0] + i * s[0]) = r;
    }
    return;
  }
  for (int64_t i = 0; i < n; i++)
    dp_store_d(p[0] + i * s[0], c->to,
               dp_binary_d(c->op, dp_load_d(p[1] + i * s[1], c->a), dp_load_d(p[2] + i * s[2], c->b)));
}

int dp_cpu_binary(dp_binary_op op, dp_tensor *out, const dp_tensor *a, const dp_tensor *b) {
  binary_ctx c = {op, out->dtype, a->dtype, b->dtype, 0, false};
  const dp_tensor *ops[3] = {out, a, b};
  dp_cpu_foreach(3, ops, binary_row, &c);
  return 0;
}

static void binary_scalar_row(char **p, const int64_t *s, int64_t n, void *vctx) {
  binary_ctx *c = vctx;
  if (c->to == DP_F32 && c->a == DP_F32 && s[0] == 4 && s[1] == 4 && dp_binary_ops[c->op].scalar_f32) {
    binary_f32_value(c->op, (float *)p[0], (const float *)p[1], (float)c->s, c->scalar_first, n);
    return;
  }
  if (c->a == DP_F32 && (c->to == DP_F32 || (c->to == DP_U8 && dp_binary_is_compare(c->op)))) {
    /* float math with the float scalar (the op layer rounded it to float32) */
    float v = (float)c->s;
    for (int64_t i = 0; i < n; i++) {
      float a = *(const float *)(p[1] + i * s[1]);
      float r = c->scalar_first ? dp_binary_f(c->op, v, a) : dp_binary_f(c->op, a, v);
      if (c->to == DP_F32) *(float *)(p[0] + i * s[0]) = r;
      else *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)r;
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double a = dp_load_d(p[1] + i * s[1], c->a);
    double r = c->scalar_first ? dp_binary_d(c->op, c->s, a) : dp_binary_d(c->op, a, c->s);
    dp_store_d(p[0] + i * s[0], c->to, r);
  }
}

int dp_cpu_binary_scalar(dp_binary_op op, dp_tensor *out, const dp_tensor *a, double s, bool scalar_first) {
  binary_ctx c = {op, out->dtype, a->dtype, a->dtype, s, scalar_first};
  const dp_tensor *ops[2] = {out, a};
  dp_cpu_foreach(2, ops, binary_scalar_row, &c);
  return 0;
}

/* ---- dropout: out = x * keep / (1-p), keep from Philox (recomputed in
 * backward with the same seed/offset) ---- */
int dp_cpu_dropout(dp_tensor *out, const dp_tensor *x, double p, uint64_t seed, uint64_t offset) {
  int64_t n = dp_numel(out);
  if (out->dtype == DP_F32) {
    float *o = dp_data(out), scale = (float)(1.0 / (1.0 - p)), fp = (float)p;
    const float *xi = dp_data(x);
    for (int64_t i = 0; i < n; i++) o[i] = dp_philox_uniform_f(seed, offset + (uint64_t)i) >= fp ? xi[i] * scale : 0.f;
    return 0;
  }
  char *o = dp_data(out);
  const char *xi = dp_data(x);
  size_t es = dp_elsize(out);
  double scale = 1.0 / (1.0 - p);
  for (int64_t i = 0; i < n; i++) {
    bool keep = dp_philox_uniform_f(seed, offset + (uint64_t)i) >= (float)p;
    dp_store_d(o + (size_t)i * es, out->dtype, keep ? dp_load_d(xi + (size_t)i * es, x->dtype) * scale : 0.0);
  }
  return 0;
}
