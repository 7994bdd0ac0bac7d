/* Row gathering for batches (see gather.h). The CPU path reads the source
 * rows in place and writes the output once: a uint8 -> float32 batch costs
 * one pass over the batch's bytes. Device sources go through the op layer
 * (index_select, to, div). The indices are checked here, on the host, so
 * a bad one is an error at the call on every device. */
#include "data/gather.h"

#include <inttypes.h>
#include <string.h>

#include "core/error.h"
#include "ops/ops.h"
#include "tensor/scope.h"

static int check_indices(const dp_tensor *src, const int64_t *idx, int64_t n, int64_t base) {
  int64_t rows = src->shape[0];
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < base || idx[i] - base >= rows)
      return dp_error("index %" PRId64 " at batch position %" PRId64 " is out of range %" PRId64 "..%" PRId64
                      " (%" PRId64 " rows)",
                      idx[i], i + base, base, rows - 1 + base, rows);
  return 0;
}

/* A batch's rows are random rows of a source larger than the caches: each
 * row's lines are asked for AHEAD rows before they are converted, so the
 * misses overlap instead of each waiting in turn. */
enum { AHEAD = 8 };
static void prefetch_row(const char *p, size_t bytes) {
  if (bytes > 4096) bytes = 4096; /* a long row's hardware prefetcher takes over after its first page */
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 0);
}

/* Rows of a contiguous CPU source into a contiguous output. */
static void gather_cpu(dp_tensor *out, const dp_tensor *src, const int64_t *idx, int64_t n, int64_t base,
                       double divisor) {
  int64_t row = src->shape[0] ? dp_numel(src) / src->shape[0] : 0;
  const char *sp = dp_data(src);
  char *op = dp_data(out);
  size_t ses = dp_elsize(src), oes = dp_elsize(out);
  size_t row_bytes = (size_t)row * ses;
  for (int64_t i = 0; i < n && i < AHEAD; i++) prefetch_row(sp + (size_t)(idx[i] - base) * row_bytes, row_bytes);
  if (src->dtype == out->dtype && divisor == 1) {
    for (int64_t i = 0; i < n; i++) {
      if (i + AHEAD < n) prefetch_row(sp + (size_t)(idx[i + AHEAD] - base) * row_bytes, row_bytes);
      memcpy(op + (size_t)(i * row) * oes, sp + (size_t)((idx[i] - base) * row) * ses, (size_t)row * ses);
    }
    return;
  }
  if (src->dtype == DP_U8 && out->dtype == DP_F32) {
    float d = (float)divisor;
    for (int64_t i = 0; i < n; i++) {
      if (i + AHEAD < n) prefetch_row(sp + (size_t)(idx[i + AHEAD] - base) * row_bytes, row_bytes);
      const uint8_t *s = (const uint8_t *)sp + (idx[i] - base) * row;
      float *o = (float *)op + i * row;
      for (int64_t j = 0; j < row; j++) o[j] = (float)s[j] / d;
    }
    return;
  }
  /* every other pair: the double reference conversion */
  for (int64_t i = 0; i < n; i++) {
    if (i + AHEAD < n) prefetch_row(sp + (size_t)(idx[i + AHEAD] - base) * row_bytes, row_bytes);
    const char *s = sp + (size_t)((idx[i] - base) * row) * ses;
    char *o = op + (size_t)(i * row) * oes;
    for (int64_t j = 0; j < row; j++)
      dp_store_d(o + (size_t)j * oes, out->dtype, dp_load_d(s + (size_t)j * ses, src->dtype) / divisor);
  }
}

/* Device sources: the op layer picks the rows (index_select), then casts
 * and divides. */
static dp_tensor *gather_device(dp_tensor *src, const int64_t *idx, int64_t n, int64_t base, dp_dtype dt,
                                double divisor) {
  DP_SCOPE(s);
  dp_tensor *ihost = dp_scope_add(&s, dp_empty(DP_I64, 1, &n, dp_cpu()));
  if (!ihost) return NULL;
  memcpy(dp_data(ihost), idx, (size_t)n * sizeof *idx);
  dp_tensor *idev = dp_scope_add(&s, dp_to(ihost, DP_I64, dp_dev(src)));
  dp_tensor *picked = idev ? dp_scope_add(&s, dp_index_select(src, 0, idev, base)) : NULL;
  dp_tensor *out = picked ? dp_scope_add(&s, dp_to(picked, dt, dp_dev(src))) : NULL;
  if (!out || (divisor != 1 && dp_binary_scalar_(DP_B_DIV, out, divisor))) return NULL;
  return dp_scope_keep(&s, out);
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
  DP_SCOPE(s);
  dp_tensor *c = dp_scope_add(&s, dp_contiguous(src));
  if (!c) return NULL;
  int64_t shape[DP_MAXDIM];
  shape[0] = n;
  for (int d = 1; d < src->ndim; d++) shape[d] = src->shape[d];
  dp_tensor *out = dp_empty(dt, src->ndim, shape, dp_cpu());
  if (out) gather_cpu(out, c, idx, n, base, divisor);
  return out;
}
