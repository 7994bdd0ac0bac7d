#include "backends/cpu/cpu_iter.h"

#include <string.h>

void dp_cpu_foreach(int nops, const dp_tensor *const *ops, dp_row_fn fn, void *ctx) {
  const dp_tensor *out = ops[0];
  int nd = out->ndim;
  int64_t shape[DP_MAXDIM];
  int64_t st[DP_ITER_MAX_OPS][DP_MAXDIM];
  char *base[DP_ITER_MAX_OPS];
  for (int d = 0; d < nd; d++) {
    if (out->shape[d] == 0) return;
  }
  for (int k = 0; k < nops; k++) {
    size_t es = dp_dtype_size(ops[k]->dtype);
    base[k] = (char *)dp_data(ops[k]);
    for (int d = 0; d < nd; d++) st[k][d] = ops[k]->stride[d] * (int64_t)es;
  }
  /* Drop size-1 dims, then merge dims d-1, d when every operand steps
   * through d-1 exactly one full row of d. */
  int m = 0;
  for (int d = 0; d < nd; d++) {
    if (out->shape[d] == 1) continue;
    if (m > 0) {
      bool merge = true;
      for (int k = 0; k < nops; k++)
        if (st[k][m - 1] != st[k][d] * out->shape[d]) merge = false;
      if (merge) {
        shape[m - 1] *= out->shape[d];
        for (int k = 0; k < nops; k++) st[k][m - 1] = st[k][d];
        continue;
      }
    }
    shape[m] = out->shape[d];
    for (int k = 0; k < nops; k++) st[k][m] = st[k][d];
    m++;
  }
  if (m == 0) { /* a single element */
    int64_t zero[DP_ITER_MAX_OPS] = {0};
    fn(base, zero, 1, ctx);
    return;
  }
  int64_t inner = shape[m - 1];
  int64_t istr[DP_ITER_MAX_OPS];
  for (int k = 0; k < nops; k++) istr[k] = st[k][m - 1];
  int64_t idx[DP_MAXDIM] = {0};
  char *p[DP_ITER_MAX_OPS];
  for (;;) {
    for (int k = 0; k < nops; k++) {
      p[k] = base[k];
      for (int d = 0; d < m - 1; d++) p[k] += idx[d] * st[k][d];
    }
    fn(p, istr, inner, ctx);
    int d = m - 2;
    while (d >= 0) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      d--;
    }
    if (d < 0) break;
  }
}
