/* CPU reductions over the middle axis of a contiguous [outer, k, inner]
 * view. Sums accumulate in double (float64 inputs) or in double as well for
 * float32, which costs little on a memory-bound loop and keeps a 60000-row
 * mean accurate; integer sums accumulate exactly in int64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/error.h"

static int reduce_sum(dp_reduce_op op, dp_tensor *out, const dp_tensor *x, int64_t outer, int64_t k, int64_t inner) {
  const char *xp = dp_data(x);
  char *op_ = dp_data(out);
  size_t xs = dp_elsize(x), os = dp_elsize(out);
  bool integer = !dp_dtype_is_float(out->dtype);
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
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t v = ix[o * inner + i];
      if (v < base || v - base >= k)
        return dp_error("index %lld out of range [%lld, %lld]", (long long)v, (long long)base,
                        (long long)(k - 1 + base));
      int64_t j = v - base;
      char *dst = g + (size_t)((o * k + j) * inner + i) * es;
      dp_store_d(dst, gx->dtype, dp_load_d(dst, gx->dtype) + dp_load_d(y + (size_t)(o * inner + i) * es, gy->dtype));
    }
  return 0;
}
