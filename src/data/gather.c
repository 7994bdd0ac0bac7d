/* Row gathering for batches (see gather.h). The CPU path reads the source
 * rows in place and writes the output once: a uint8 -> float32 batch costs
 * one pass over the batch's bytes. */
#include "data/gather.h"

#include <inttypes.h>
#include <string.h>

#include "backends/backend.h"
#include "core/error.h"
#include "ops/ops.h"

static int check_indices(const dp_tensor *src, const int64_t *idx, int64_t n, int64_t base) {
  int64_t rows = src->shape[0];
  for (int64_t i = 0; i < n; i++)
    if (idx[i] - base < 0 || idx[i] - base >= rows)
      return dp_error("index %" PRId64 " at batch position %" PRId64 " is out of range %" PRId64 "..%" PRId64
                      " (%" PRId64 " rows)",
                      idx[i], i + base, base, rows - 1 + base, rows);
  return 0;
}

/* Rows of a contiguous CPU source into a contiguous output. */
static void gather_cpu(dp_tensor *out, const dp_tensor *src, const int64_t *idx, int64_t n, int64_t base,
                       double divisor) {
  int64_t row = src->shape[0] ? dp_numel(src) / src->shape[0] : 0;
  const char *sp = dp_data(src);
  char *op = dp_data(out);
  size_t ses = dp_elsize(src), oes = dp_elsize(out);
  if (src->dtype == out->dtype && divisor == 1) {
    for (int64_t i = 0; i < n; i++)
      memcpy(op + (size_t)(i * row) * oes, sp + (size_t)((idx[i] - base) * row) * ses, (size_t)row * ses);
    return;
  }
  if (src->dtype == DP_U8 && out->dtype == DP_F32) {
    float d = (float)divisor;
    for (int64_t i = 0; i < n; i++) {
      const uint8_t *s = (const uint8_t *)sp + (idx[i] - base) * row;
      float *o = (float *)op + i * row;
      for (int64_t j = 0; j < row; j++) o[j] = (float)s[j] / d;
    }
    return;
  }
  /* every other pair: the double reference conversion */
  for (int64_t i = 0; i < n; i++) {
    const char *s = sp + (size_t)((idx[i] - base) * row) * ses;
    char *o = op + (size_t)(i * row) * oes;
    for (int64_t j = 0; j < row; j++)
      dp_store_d(o + (size_t)j * oes, out->dtype, dp_load_d(s + (size_t)j * ses, src->dtype) / divisor);
  }
}

/* Device sources: the backend picks the rows, then cast and divide. */
static dp_tensor *gather_device(dp_tensor *src, const int64_t *idx, int64_t n, int64_t base, dp_dtype dt,
                                double divisor) {
  dp_tensor *ihost = dp_empty(DP_I64, 1, &n, dp_cpu()), *idev = NULL, *s = NULL, *picked = NULL, *out = NULL;
  if (!ihost) return NULL;
  memcpy(dp_data(ihost), idx, (size_t)n * sizeof *idx);
  int64_t shape[DP_MAXDIM];
  shape[0] = n;
  for (int d = 1; d < src->ndim; d++) shape[d] = src->shape[d];
  if (!(idev = dp_to(ihost, DP_I64, dp_dev(src))) || !(s = dp_contiguous(src)) ||
      !(picked = dp_empty(src->dtype, src->ndim, shape, dp_dev(src))))
    goto done;
  if (dp_backend_of(src)->index_select(picked, s, idev, base)) goto done;
  out = dp_to(picked, dt, dp_dev(src));
  if (out && divisor != 1 && dp_binary_scalar_(DP_B_DIV, out, divisor)) dp_clear(&out);
done:
  dp_release(ihost);
  dp_release(idev);
  dp_release(s);
  dp_release(picked);
  return out;
}

dp_tensor *dp_gather_rows(dp_tensor *src, const int64_t *idx, int64_t n, int64_t base, dp_dtype dt, double divisor) {
  if (src->ndim < 1) {
    dp_error("cannot gather rows of a 0-dimensional tensor");
    return NULL;
  }
  if (!(divisor > 0)) {
    dp_error("gather: divisor must be positive, got %g", divisor);
    return NULL;
  }
  if (divisor != 1 && !dp_dtype_is_float(dt)) {
    dp_error("gather: divisor %g needs a floating point output dtype, got %s", divisor, dp_dtype_name(dt));
    return NULL;
  }
  if (check_indices(src, idx, n, base)) return NULL;
  if (dp_dev(src).type != DP_CPU) return gather_device(src, idx, n, base, dt, divisor);
  dp_tensor *s = dp_contiguous(src);
  if (!s) return NULL;
  int64_t shape[DP_MAXDIM];
  shape[0] = n;
  for (int d = 1; d < src->ndim; d++) shape[d] = src->shape[d];
  dp_tensor *out = dp_empty(dt, src->ndim, shape, dp_cpu());
  if (out) gather_cpu(out, s, idx, n, base, divisor);
  dp_release(s);
  return out;
}
