/* Elementwise reductions for the collectives (see reduce_kern.h). Work goes
 * in blocks that stay in L1 while every source is folded in. */
#include "distributed/reduce_kern.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 2048 /* elements per block: 8-16 KiB of destination */

bool dp_redop_supported(dp_redop op, dp_dtype dt) {
  if (dt == DP_F32 || dt == DP_F64) return true;
  if (dt == DP_I64) return op != DP_RED_AVG;
  return false;
}

/* NaN propagates through max/min as in PyTorch. */
static void fold_f32(float *d, const float *a, const float *b, size_t n, dp_redop op) {
  switch (op) {
  case DP_RED_SUM:
  case DP_RED_AVG:
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    break;
  case DP_RED_PROD:
    for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i];
    break;
  case DP_RED_MAX:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] > b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  case DP_RED_MIN:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] < b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  }
}

static void fold_f64(double *d, const double *a, const double *b, size_t n, dp_redop op) {
  switch (op) {
  case DP_RED_SUM:
  case DP_RED_AVG:
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    break;
  case DP_RED_PROD:
    for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i];
    break;
  case DP_RED_MAX:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] > b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  case DP_RED_MIN:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] < b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  }
}

/* int64 sums and products wrap like PyTorch's (computed unsigned: no UB). */
static void fold_i64(int64_t *d, const int64_t *a, const int64_t *b, size_t n, dp_redop op) {
  switch (op) {
  case DP_RED_SUM:
  case DP_RED_AVG:
    for (size_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)a[i] + (uint64_t)b[i]);
    break;
  case DP_RED_PROD:
    for (size_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)a[i] * (uint64_t)b[i]);
    break;
  case DP_RED_MAX:
    for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i];
    break;
  case DP_RED_MIN:
    for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i];
    break;
  }
}

static void fold(void *d, const void *a, const void *b, size_t n, dp_dtype dt, dp_redop op) {
  switch (dt) {
  case DP_F32: fold_f32(d, a, b, n, op); break;
  case DP_F64: fold_f64(d, a, b, n, op); break;
  case DP_I64: fold_i64(d, a, b, n, op); break;
  default: break; /* callers check dp_redop_supported */
  }
}

void dp_reduce_n(void *dst, const void *const *src, int k, size_t n, dp_dtype dt, dp_redop op) {
  size_t es = dp_dtype_size(dt);
  if (k == 1) {
    if (dst != src[0]) memmove(dst, src[0], n * es);
    return;
  }
  for (size_t i0 = 0; i0 < n; i0 += BLOCK) {
    size_t m = n - i0 < BLOCK ? n - i0 : BLOCK, off = i0 * es;
    char *d = (char *)dst + off;
    fold(d, (const char *)src[0] + off, (const char *)src[1] + off, m, dt, op);
    for (int j = 2; j < k; j++) fold(d, d, (const char *)src[j] + off, m, dt, op);
  }
}

/* x / k; for a power of two k that is exactly x * (1/k), which vectorises
 * at full rate where a division does not (the 2-rank average of DDP). */
void dp_reduce_scale(void *dst, size_t n, dp_dtype dt, int k) {
  bool pow2 = k > 0 && (k & (k - 1)) == 0;
  if (dt == DP_F32) {
    float *d = dst, s = (float)k, r = 1.0f / s;
    if (pow2)
      for (size_t i = 0; i < n; i++) d[i] *= r;
    else
      for (size_t i = 0; i < n; i++) d[i] /= s;
  } else if (dt == DP_F64) {
    double *d = dst, s = (double)k, r = 1.0 / s;
    if (pow2)
      for (size_t i = 0; i < n; i++) d[i] *= r;
    else
      for (size_t i = 0; i < n; i++) d[i] /= s;
  }
}

/* Two ranks' copies averaged (or summed) into both at once: one pass that
 * reads each line of a and b once and writes both, with no staging buffer
 * between the fold and the copies out. The arithmetic is dp_reduce_n's
 * followed by dp_reduce_scale's, in the same order, so the bits are too. */
static void pair_f32(float *restrict a, float *restrict b, size_t n, int div) {
  if (div <= 1) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] = a[i] + b[i];
  } else if ((div & (div - 1)) == 0) {
    float r = 1.0f / (float)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) * r;
  } else {
    float s = (float)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) / s;
  }
}

static void pair_f64(double *restrict a, double *restrict b, size_t n, int div) {
  if (div <= 1) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] = a[i] + b[i];
  } else if ((div & (div - 1)) == 0) {
    double r = 1.0 / (double)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) * r;
  } else {
    double s = (double)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) / s;
  }
}

/* The staged form: mine and a peer's staged copy summed into mine and into
 * my staging slot at once (the result the peers copy out), where a fold
 * into the slot and a copy back would touch the slot's lines twice. */
static void pair_to_f32(float *restrict mine, float *restrict slot, const float *restrict peer, size_t n, int div) {
  if (div <= 1) {
    for (size_t i = 0; i < n; i++) mine[i] = slot[i] = mine[i] + peer[i];
  } else if ((div & (div - 1)) == 0) {
    float r = 1.0f / (float)div;
    for (size_t i = 0; i < n; i++) mine[i] = slot[i] = (mine[i] + peer[i]) * r;
  } else {
    float s = (float)div;
    for (size_t i = 0; i < n; i++) mine[i] = slot[i] = (mine[i] + peer[i]) / s;
  }
}

static void pair_to_f64(double *restrict mine, double *restrict slot, const double *restrict peer, size_t n, int div) {
  if (div <= 1) {
    for (size_t i = 0; i < n; i++) mine[i] = slot[i] = mine[i] + peer[i];
  } else if ((div & (div - 1)) == 0) {
    double r = 1.0 / (double)div;
    for (size_t i = 0; i < n; i++) mine[i] = slot[i] = (mine[i] + peer[i]) * r;
  } else {
    double s = (double)div;
    for (size_t i = 0; i < n; i++) mine[i] = slot[i] = (mine[i] + peer[i]) / s;
  }
}

bool dp_reduce_pair_to(void *mine, void *slot, const void *peer, size_t n, dp_dtype dt, dp_redop op, int avg_div) {
  if (op != DP_RED_SUM && op != DP_RED_AVG) return false;
  if (dt == DP_F32) pair_to_f32(mine, slot, peer, n, avg_div);
  else if (dt == DP_F64) pair_to_f64(mine, slot, peer, n, avg_div);
  else return false;
  return true;
}

bool dp_reduce_pair_inplace(void *a, void *b, size_t n, dp_dtype dt, dp_redop op, int avg_div) {
  if (op != DP_RED_SUM && op != DP_RED_AVG) return false;
  if (dt == DP_F32) pair_f32(a, b, n, avg_div);
  else if (dt == DP_F64) pair_f64(a, b, n, avg_div);
  else return false;
  return true;
}
