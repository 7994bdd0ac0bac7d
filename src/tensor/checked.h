/* Checked int64 arithmetic for sizes, offsets and strides: the one place
 * where a number a user gave (a shape, a narrow length, a stride, a
 * padding) is multiplied or added. Each helper returns true when the exact
 * result does not fit (the GCC/Clang overflow builtins), so a caller turns
 * an overflow into an error naming the numbers instead of wrapping into a
 * small, wrong size (narrow(1, 2, math.maxinteger) once passed its bounds
 * check that way and addressed 2^63 elements).
 *
 * The span helpers compute what a view (shape, stride, offset) can reach:
 * check_view_fits (tensor.c), the in-place overlap checks (ops/inplace.c)
 * and the autograd view geometry all use them. Host code only. */
#ifndef DP_CHECKED_H
#define DP_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline bool dp_add_overflow(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline bool dp_sub_overflow(int64_t a, int64_t b, int64_t *r) { return __builtin_sub_overflow(a, b, r); }
static inline bool dp_mul_overflow(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }

/* The element count of a shape whose sizes are all >= 0; true on overflow. */
static inline bool dp_numel_overflow(int ndim, const int64_t *shape, int64_t *n) {
  int64_t acc = 1;
  for (int d = 0; d < ndim; d++)
    if (dp_mul_overflow(acc, shape[d], &acc)) return true;
  *n = acc;
  return false;
}

/* The lowest and highest element offsets a view can address (lo = hi =
 * offset for a 0-dim view); *empty is set when a size is 0 (nothing is
 * addressed, lo and hi are then offset). True on overflow. */
static inline bool dp_span_overflow(int ndim, const int64_t *shape, const int64_t *stride, int64_t offset, int64_t *lo,
                                    int64_t *hi, bool *empty) {
  int64_t l = offset, h = offset;
  *empty = false;
  for (int d = 0; d < ndim; d++)
    if (shape[d] == 0) *empty = true;
  if (!*empty)
    for (int d = 0; d < ndim; d++) {
      int64_t step;
      if (dp_mul_overflow(stride[d], shape[d] - 1, &step)) return true;
      if (step >= 0 ? dp_add_overflow(h, step, &h) : dp_add_overflow(l, step, &l)) return true;
    }
  *lo = l, *hi = h;
  return false;
}

#endif
