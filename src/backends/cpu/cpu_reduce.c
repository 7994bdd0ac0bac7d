/* CPU reductions over the middle axis of a contiguous [outer, k, inner]
 * view. Sums accumulate in double (float64 inputs) or in double as well for
 * float32, which costs little on a memory-bound loop and keeps a 60000-row
 * mean accurate; integer sums accumulate exactly in int64. float32 sums
 * and extremes run the per-ISA vector kernels (cpu_vec.h), split over the
 * outer rows between threads; bfloat16 sums too, their rows widened to
 * float32 in blocks of WIDEN values (exact: a bfloat16 is a float32's top
 * half) and rounded once into the result, and bfloat16 extremes with each
 * outer row widened whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"

typedef struct {
  dp_reduce_op op;
  dp_tensor *out, *idx;
  const float *x; /* float32, or bfloat16 (bf16 set) */
  int64_t k, inner, base;
  bool bf16, failed;
} f32_reduce;

enum { WIDEN = 512 };
/* the sum of n bfloat16 values, WIDEN at a time through the float32 kernel */
static double sum_bf16(const dp_cpu_vec *v, const uint16_t *x, int64_t n) {
  float buf[WIDEN];
  double s = 0;
  for (int64_t i = 0; i < n; i += WIDEN) {
    int64_t m = n - i < WIDEN ? n - i : WIDEN;
    v->cast(buf, DP_F32, x + i, DP_BF16, m);
    s += v->sum(buf, m);
  }
  return s;
}
/* acc[i] += x[i] for n bfloat16 values */
static void col_acc_bf16(const dp_cpu_vec *v, double *acc, const uint16_t *x, int64_t n) {
  float buf[WIDEN];
  for (int64_t i = 0; i < n; i += WIDEN) {
    int64_t m = n - i < WIDEN ? n - i : WIDEN;
    v->cast(buf, DP_F32, x + i, DP_BF16, m);
    v->col_acc(acc + i, buf, m);
  }
}

/* outer rows [lo, hi) of a float32 sum or mean */
static void sum_rows(void *vctx, int64_t lo, int64_t hi) {
  f32_reduce *c = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  char *op = dp_data(c->out);
  size_t os = dp_elsize(c->out);
  double *acc = c->inner > 1 ? malloc(sizeof(double) * (size_t)c->inner) : NULL;
  if (c->inner > 1 && !acc) {
    c->failed = true;
    return;
  }
  for (int64_t o = lo; o < hi; o++) {
    const float *r = c->x + o * c->k * c->inner;
    const uint16_t *rb = (const uint16_t *)c->x + o * c->k * c->inner;
    if (c->inner == 1) {
      double s = c->bf16 ? sum_bf16(v, rb, c->k) : v->sum(r, c->k);
      dp_store_d(op + (size_t)o * os, c->out->dtype, c->op == DP_R_MEAN ? (c->k ? s / (double)c->k : NAN) : s);
      continue;
    }
    memset(acc, 0, sizeof(double) * (size_t)c->inner);
    for (int64_t j = 0; j < c->k; j++)
      if (c->bf16) col_acc_bf16(v, acc, rb + j * c->inner, c->inner);
      else v->col_acc(acc, r + j * c->inner, c->inner);
    for (int64_t i = 0; i < c->inner; i++)
      dp_store_d(op + (size_t)(o * c->inner + i) * os, c->out->dtype,
                 c->op == DP_R_MEAN ? (c->k ? acc[i] / (double)c->k : NAN) : acc[i]);
  }
  free(acc);
}

/* outer rows [lo, hi) of a float32 max/min/argmax/argmin; bfloat16 rows
 * widened whole into scratch first (exact: the same winners, and their
 * values narrow back exactly) */
static void extreme_rows(void *vctx, int64_t lo, int64_t hi) {
  f32_reduce *c = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  bool want_max = c->op == DP_R_MAX || c->op == DP_R_ARGMAX, arg = c->op == DP_R_ARGMAX || c->op == DP_R_ARGMIN;
  int64_t per = c->k * c->inner;
  float *wide = c->bf16 ? malloc(sizeof(float) * (size_t)(per + c->inner)) : NULL; /* the row, then its values */
  if (c->bf16 && !wide) {
    c->failed = true;
    return;
  }
  for (int64_t o = lo; o < hi; o++) {
    const float *r = c->x + o * per;
    if (c->bf16) v->cast(wide, DP_F32, (const uint16_t *)c->x + o * per, DP_BF16, per), r = wide;
    int64_t *pos = arg      ? (int64_t *)dp_data(c->out) + o * c->inner
                   : c->idx ? (int64_t *)dp_data(c->idx) + o * c->inner
                            : NULL;
    if (c->inner == 1) {
      int64_t best = v->arg_extreme(r, c->k, want_max);
      if (!arg && c->bf16) ((uint16_t *)dp_data(c->out))[o] = ((const uint16_t *)c->x)[o * per + best];
      else if (!arg) ((float *)dp_data(c->out))[o] = r[best];
      if (pos) pos[0] = best + c->base;
      continue;
    }
    float *vals = arg ? NULL : c->bf16 ? wide + per : (float *)dp_data(c->out) + o * c->inner;
    float small[256];
    float *tmp = vals ? vals : c->inner <= 256 ? small : malloc(sizeof(float) * (size_t)c->inner);
    if (!tmp) {
      c->failed = true;
      free(wide);
      return;
    }
    v->extreme_cols(tmp, pos, r, c->k, c->inner, want_max);
    if (pos)
      for (int64_t i = 0; i < c->inner; i++) pos[i] += c->base;
    if (!arg && c->bf16) v->cast((uint16_t *)dp_data(c->out) + o * c->inner, DP_BF16, tmp, DP_F32, c->inner);
    if (tmp != vals && tmp != small) free(tmp);
  }
  free(wide);
}

static int reduce_f32(dp_reduce_op op, dp_tensor *out, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a) {
  if (a->outer == 0 || a->inner == 0) return 0; /* an empty result: nothing to write (no memset of NULL) */
  f32_reduce c = {op, out, idx, dp_data(x), a->k, a->inner, a->base, x->dtype == DP_BF16, false};
  bool sum = op == DP_R_SUM || op == DP_R_MEAN;
  int64_t per = a->k * a->inner;
  dp_cpu_parallel_for(a->outer, DP_GRAIN_MEMORY / (per > 0 ? per : 1) + 1, 1, sum ? sum_rows : extreme_rows, &c);
  return c.failed ? dp_error("out of memory in reduction") : 0;
}

static int reduce_sum(dp_reduce_op op, dp_tensor *out, const dp_tensor *x, int64_t outer, int64_t k, int64_t inner) {
  const char *xp = dp_data(x);
  char *op_ = dp_data(out);
  size_t xs = dp_elsize(x), os = dp_elsize(out);
  bool integer = !dp_dtype_is_float(out->dtype);
  if (integer && inner == 1 && op != DP_R_PROD && (x->dtype == DP_I64 || x->dtype == DP_U8)) {
    /* contiguous rows of int64 or uint8 summed exactly (wrapping) in a loop the compiler vectorises: the general
     * loop below took 0.9 ms for a million int64 values */
    for (int64_t o = 0; o < outer; o++) {
      uint64_t acc = 0;
      if (x->dtype == DP_I64) {
        const uint64_t *r = (const uint64_t *)(const void *)xp + o * k;
        uint64_t lane[8] = {0};
        int64_t j = 0;
        for (; j + 8 <= k; j += 8)
          for (int l = 0; l < 8; l++) lane[l] += r[j + l];
        for (; j < k; j++) acc += r[j];
        for (int l = 0; l < 8; l++) acc += lane[l];
      } else /* chunks whose sums fit 32 bits: the compiler widens bytes to 32-bit lanes */
        for (int64_t j0 = 0; j0 < k; j0 += 1 << 16) {
          const uint8_t *r = (const uint8_t *)xp + o * k + j0;
          uint32_t part = 0;
          for (int64_t j = 0, m = k - j0 < (1 << 16) ? k - j0 : (1 << 16); j < m; j++) part += r[j];
          acc += part;
        }
      ((int64_t *)(void *)op_)[o] = (int64_t)acc;
    }
    return 0;
  }
  if (integer) {
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t acc = op == DP_R_PROD ? 1 : 0;
        for (int64_t j = 0; j < k; j++) {
          const char *e = xp + (size_t)((o * k + j) * inner + i) * xs;
          int64_t v = x->dtype == DP_I64  ? *(const int64_t *)e
                      : x->dtype == DP_U8 ? *(const uint8_t *)e
                                          : (int64_t)dp_load_d(e, x->dtype);
          acc = op == DP_R_PROD ? (int64_t)((uint64_t)acc * (uint64_t)v) : (int64_t)((uint64_t)acc + (uint64_t)v);
        }
        *(int64_t *)(op_ + (size_t)(o * inner + i) * os) = acc;
      }
    return 0;
  }
  if (inner == 1 && op != DP_R_PROD && (x->dtype == DP_F32 || x->dtype == DP_F64)) {
    /* each output sums one contiguous row of k: eight independent lanes
     * instead of one serial chain of adds, so the loop vectorises */
    for (int64_t o = 0; o < outer; o++) {
      double lane[8] = {0}, s = 0;
      int64_t j = 0;
      if (x->dtype == DP_F32) {
        const float *r = (const float *)xp + o * k;
        for (; j + 8 <= k; j += 8)
          for (int l = 0; l < 8; l++) lane[l] += r[j + l];
        for (; j < k; j++) s += r[j];
      } else {
        const double *r = (const double *)xp + o * k;
        for (; j + 8 <= k; j += 8)
          for (int l = 0; l < 8; l++) lane[l] += r[j + l];
        for (; j < k; j++) s += r[j];
      }
      for (int l = 0; l < 8; l++) s += lane[l];
      dp_store_d(op_ + (size_t)o * os, out->dtype, op == DP_R_MEAN ? (k ? s / (double)k : NAN) : s);
    }
    return 0;
  }
  double *acc = malloc(sizeof(double) * (size_t)(inner ? inner : 1));
  if (!acc) return dp_error("out of memory in reduction");
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < inner; i++) acc[i] = op == DP_R_PROD ? 1.0 : 0.0;
    for (int64_t j = 0; j < k; j++) {
      const char *row = xp + (size_t)((o * k + j) * inner) * xs;
      if (x->dtype == DP_F32 && op != DP_R_PROD) {
        const float *r = (const float *)row;
        for (int64_t i = 0; i < inner; i++) acc[i] += r[i];
      } else if (x->dtype == DP_F64 && op != DP_R_PROD) {
        const double *r = (const double *)row;
        for (int64_t i = 0; i < inner; i++) acc[i] += r[i];
      } else {
        for (int64_t i = 0; i < inner; i++) {
          double v = dp_load_d(row + (size_t)i * xs, x->dtype);
          acc[i] = op == DP_R_PROD ? acc[i] * v : acc[i] + v;
        }
      }
    }
    for (int64_t i = 0; i < inner; i++) {
      double v = op == DP_R_MEAN ? (k ? acc[i] / (double)k : NAN) : acc[i];
      dp_store_d(op_ + (size_t)(o * inner + i) * os, out->dtype, v);
    }
  }
  free(acc);
  return 0;
}

/* Index of the extreme of k int64 values spaced by inner: compared as
 * integers (a double would merge values beyond 2^53); the first wins. */
static int64_t extreme_i64(const int64_t *p, int64_t k, int64_t inner, bool want_max) {
  if (inner == 1 && k >= 64) {
    /* a contiguous row: the extreme value in 8 independent chains of selects (no branch to mispredict), then
     * its first position (0.6-0.9 ms a million values with one chain of branches, PyTorch 0.1) */
    int64_t lane[8], bv;
    for (int l = 0; l < 8; l++) lane[l] = p[0];
    int64_t j = 0;
    if (want_max)
      for (; j + 8 <= k; j += 8)
        for (int l = 0; l < 8; l++) lane[l] = p[j + l] > lane[l] ? p[j + l] : lane[l];
    else
      for (; j + 8 <= k; j += 8)
        for (int l = 0; l < 8; l++) lane[l] = p[j + l] < lane[l] ? p[j + l] : lane[l];
    for (; j < k; j++) lane[0] = (want_max ? p[j] > lane[0] : p[j] < lane[0]) ? p[j] : lane[0];
    bv = lane[0];
    for (int l = 1; l < 8; l++) bv = (want_max ? lane[l] > bv : lane[l] < bv) ? lane[l] : bv;
    for (j = 0; p[j] != bv; j++) {}
    return j;
  }
  int64_t best = 0, bv = p[0];
  for (int64_t j = 1; j < k; j++) {
    int64_t v = p[j * inner];
    if (want_max ? v > bv : v < bv) best = j, bv = v;
  }
  return best;
}

/* max/min/argmax/argmin: first occurrence wins; NaN counts as the extreme
 * (PyTorch propagates NaN). */
static int reduce_extreme(dp_reduce_op op, dp_tensor *out, dp_tensor *idx, const dp_tensor *x, int64_t outer, int64_t k,
                          int64_t inner, int64_t base) {
  if (k == 0) return dp_error("max/min of an empty dimension is undefined");
  bool want_max = op == DP_R_MAX || op == DP_R_ARGMAX;
  bool arg = op == DP_R_ARGMAX || op == DP_R_ARGMIN;
  const char *xp = dp_data(x);
  size_t xs = dp_elsize(x);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t best = 0;
      double bv = dp_load_d(xp + (size_t)((o * k) * inner + i) * xs, x->dtype);
      if (x->dtype == DP_I64) best = extreme_i64((const int64_t *)xp + (o * k) * inner + i, k, inner, want_max);
      else if (bv == bv)
        for (int64_t j = 1; j < k; j++) {
          double v = dp_load_d(xp + (size_t)((o * k + j) * inner + i) * xs, x->dtype);
          if (v != v) {
            best = j, bv = v;
            break;
          }
          if (want_max ? v > bv : v < bv) best = j, bv = v;
        }
      int64_t pos = o * inner + i;
      if (arg) {
        ((int64_t *)dp_data(out))[pos] = best + base;
      } else {
        /* copy the element itself, exact for int64 */
        memcpy((char *)dp_data(out) + (size_t)pos * xs, xp + (size_t)((o * k + best) * inner + i) * xs, xs);
        if (idx) ((int64_t *)dp_data(idx))[pos] = best + base;
      }
    }
  return 0;
}

int dp_cpu_reduce(dp_tensor *out, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a) {
  dp_reduce_op op = a->op;
  int64_t outer = a->outer, k = a->k, inner = a->inner, base = a->base;
  bool extreme = op != DP_R_SUM && op != DP_R_MEAN && op != DP_R_PROD;
  bool arg = op == DP_R_ARGMAX || op == DP_R_ARGMIN;
  if (x->dtype == DP_F32 && op != DP_R_PROD && !(extreme && k == 0) && (!extreme || arg || out->dtype == DP_F32))
    return reduce_f32(op, out, idx, x, a);
  if (x->dtype == DP_BF16 && (op == DP_R_SUM || op == DP_R_MEAN)) return reduce_f32(op, out, idx, x, a);
  /* bfloat16 extremes widen a whole outer row: up to 4 MiB of scratch a thread */
  if (x->dtype == DP_BF16 && extreme && op != DP_R_PROD && k > 0 && k * inner <= (1 << 20) &&
      (arg || out->dtype == DP_BF16))
    return reduce_f32(op, out, idx, x, a);
  switch (op) {
  case DP_R_SUM:
  case DP_R_MEAN:
  case DP_R_PROD: return reduce_sum(op, out, x, outer, k, inner);
  default: return reduce_extreme(op, out, idx, x, outer, k, inner, base);
  }
}

int dp_cpu_scatter_add_dim(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_reduce_args *a) {
  int64_t outer = a->outer, k = a->k, inner = a->inner, base = a->base;
  char *g = dp_data(gx);
  const char *y = dp_data(gy);
  const int64_t *ix = dp_data(idx);
  size_t es = dp_elsize(gx);
  bool f32 = gx->dtype == DP_F32 && gy->dtype == DP_F32; /* a typed add (dp_load_d per element: 18% of a step) */
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t v = ix[o * inner + i];
      if (v < base || v - base >= k)
        return dp_error("index %lld out of range [%lld, %lld]", (long long)v, (long long)base,
                        (long long)(k - 1 + base));
      int64_t j = v - base;
      char *dst = g + (size_t)((o * k + j) * inner + i) * es;
      if (f32) *(float *)(void *)dst += ((const float *)(const void *)y)[o * inner + i];
      else
        dp_store_d(dst, gx->dtype, dp_load_d(dst, gx->dtype) + dp_load_d(y + (size_t)(o * inner + i) * es, gy->dtype));
    }
  return 0;
}
