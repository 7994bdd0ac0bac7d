#include "backends/cpu/cpu_iter.h"

#include <string.h>

#include "backends/cpu/cpu_parallel.h"

/* The merged iteration: m dims of shape[] with byte strides st[k][]. */
typedef struct {
  int nops, m;
  int64_t shape[DP_MAXDIM];
  int64_t st[DP_ITER_MAX_OPS][DP_MAXDIM];
  char *base[DP_ITER_MAX_OPS];
  dp_row_fn fn;
  void *ctx;
} iter_plan;

/* false when the iteration is empty */
static bool plan(iter_plan *it, int nops, const dp_tensor *const *ops) {
  const dp_tensor *out = ops[0];
  int nd = out->ndim;
  it->nops = nops;
  for (int d = 0; d < nd; d++)
    if (out->shape[d] == 0) return false;
  int64_t st[DP_ITER_MAX_OPS][DP_MAXDIM];
  for (int k = 0; k < nops; k++) {
    size_t es = dp_dtype_size(ops[k]->dtype);
    it->base[k] = (char *)dp_data(ops[k]);
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
        if (it->st[k][m - 1] != st[k][d] * out->shape[d]) merge = false;
      if (merge) {
        it->shape[m - 1] *= out->shape[d];
        for (int k = 0; k < nops; k++) it->st[k][m - 1] = st[k][d];
        continue;
      }
    }
    it->shape[m] = out->shape[d];
    for (int k = 0; k < nops; k++) it->st[k][m] = st[k][d];
    m++;
  }
  it->m = m;
  return true;
}

/* rows [r0, r1) of the outer dims (all but the innermost) */
static void run_rows(const iter_plan *it, int64_t r0, int64_t r1) {
  const int m = it->m, nops = it->nops;
  if (m == 0) { /* a single element */
    int64_t zero[DP_ITER_MAX_OPS] = {0};
    char *p[DP_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++) p[k] = it->base[k];
    it->fn(p, zero, 1, it->ctx);
    return;
  }
  int64_t inner = it->shape[m - 1];
  int64_t istr[DP_ITER_MAX_OPS];
  for (int k = 0; k < nops; k++) istr[k] = it->st[k][m - 1];
  /* the multi-index of row r0 */
  int64_t idx[DP_MAXDIM] = {0}, r = r0;
  for (int d = m - 2; d >= 0; d--) {
    idx[d] = r % it->shape[d];
    r /= it->shape[d];
  }
  char *p[DP_ITER_MAX_OPS];
  for (int k = 0; k < nops; k++) {
    p[k] = it->base[k];
    for (int d = 0; d < m - 1; d++) p[k] += idx[d] * it->st[k][d];
  }
  for (int64_t row = r0; row < r1; row++) {
    it->fn(p, istr, inner, it->ctx);
    /* the next row's pointers stepped from this one's: one add per operand, a carry into the outer dims only at
     * the end of a dim (recomputing every pointer from the multi-index cost a multiply per dim per row) */
    for (int d = m - 2; d >= 0; d--) {
      if (++idx[d] < it->shape[d]) {
        for (int k = 0; k < nops; k++) p[k] += it->st[k][d];
        break;
      }
      idx[d] = 0;
      for (int k = 0; k < nops; k++) p[k] -= (it->shape[d] - 1) * it->st[k][d];
    }
  }
}

void dp_cpu_foreach(int nops, const dp_tensor *const *ops, dp_row_fn fn, void *ctx) {
  iter_plan it;
  if (!plan(&it, nops, ops)) return;
  it.fn = fn, it.ctx = ctx;
  int64_t rows = 1;
  for (int d = 0; d + 1 < it.m; d++) rows *= it.shape[d];
  run_rows(&it, 0, rows);
}

static void par_rows(void *ctx, int64_t lo, int64_t hi) { run_rows(ctx, lo, hi); }

/* one merged row split in ranges: the operands' pointers moved to lo */
static void par_within(void *ctx, int64_t lo, int64_t hi) {
  const iter_plan *it = ctx;
  char *p[DP_ITER_MAX_OPS];
  int64_t istr[DP_ITER_MAX_OPS];
  for (int k = 0; k < it->nops; k++) {
    istr[k] = it->st[k][0];
    p[k] = it->base[k] + lo * istr[k];
  }
  it->fn(p, istr, hi - lo, it->ctx);
}

void dp_cpu_foreach_par(int nops, const dp_tensor *const *ops, dp_row_fn fn, void *ctx, int64_t grain) {
  iter_plan it;
  if (!plan(&it, nops, ops)) return;
  it.fn = fn, it.ctx = ctx;
  int64_t rows = 1;
  for (int d = 0; d + 1 < it.m; d++) rows *= it.shape[d];
  int64_t inner = it.m ? it.shape[it.m - 1] : 1, total = rows * inner;
  if (total < 2 * grain) {
    run_rows(&it, 0, rows);
    return;
  }
  if (it.m == 1) {
    dp_cpu_parallel_for(inner, grain, 16, par_within, &it);
    return;
  }
  int64_t rows_grain = (grain + inner - 1) / inner;
  dp_cpu_parallel_for(rows, rows_grain < 1 ? 1 : rows_grain, 1, par_rows, &it);
}
