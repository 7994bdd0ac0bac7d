/* repeat and tile: composed of differentiable views (a size-1 axis
 * inserted before each repeated dim, expanded, then folded by reshape,
 * which copies), so their gradient (the copies summed back) comes from
 * expand's and reshape's. One repeated dim at a time keeps the rank within
 * DP_MAXDIM. */
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"
#include "tensor/checked.h"

/* x repeated r times along dim d */
static dp_tensor *repeat_one(dp_scope *s, dp_tensor *x, int d, int64_t r) {
  int nd = x->ndim;
  if (nd + 1 > DP_MAXDIM) {
    dp_error("repeat: a tensor has at most %d dimensions", DP_MAXDIM);
    return NULL;
  }
  int64_t sh[DP_MAXDIM], ex[DP_MAXDIM], out[DP_MAXDIM];
  for (int k = 0, j = 0; k < nd; k++) {
    if (k == d) sh[j] = 1, ex[j] = r, j++;
    sh[j] = x->shape[k], ex[j] = x->shape[k], j++;
    out[k] = x->shape[k];
    if (k == d && dp_mul_overflow(r, x->shape[k], &out[k])) { /* the expand below would refuse it, after UB here */
      dp_error("repeat: %" PRId64 " repeats of dim %d of size %" PRId64 " is too large", r, d + 1, x->shape[k]);
      return NULL;
    }
  }
  dp_tensor *v = dp_scope_add(s, dp_reshape(x, nd + 1, sh));
  dp_tensor *e = v ? dp_scope_add(s, dp_expand(v, nd + 1, ex)) : NULL;
  return e ? dp_scope_add(s, dp_reshape(e, nd, out)) : NULL;
}

dp_tensor *dp_repeat(dp_tensor *x, int n, const int64_t *reps) {
  if (n < x->ndim) {
    dp_error("repeat: %d repeat count(s) given for a %d-dimensional tensor (expected at least %d)", n, x->ndim,
             x->ndim);
    return NULL;
  }
  if (n > DP_MAXDIM) {
    dp_error("repeat: at most %d repeat counts, got %d", DP_MAXDIM, n);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (reps[i] < 0) {
      dp_error("repeat: repeat count %d is %" PRId64 " (expected >= 0)", i + 1, reps[i]);
      return NULL;
    }
  DP_SCOPE(s);
  int64_t sh[DP_MAXDIM] = {0};
  for (int i = 0; i < n; i++) sh[i] = i < n - x->ndim ? 1 : x->shape[i - (n - x->ndim)];
  dp_tensor *cur = dp_scope_add(&s, dp_reshape(x, n, sh)); /* leading ones added */
  for (int d = 0; d < n && cur; d++)
    if (reps[d] != 1) cur = repeat_one(&s, cur, d, reps[d]);
  if (!cur) return NULL;
  /* a fresh tensor even when nothing repeats (PyTorch's repeat copies) */
  if (cur->storage == x->storage) {
    dp_tensor *c = dp_scope_add(&s, dp_clone(cur));
    return c ? dp_scope_keep(&s, c) : NULL;
  }
  return dp_scope_keep(&s, cur);
}

dp_tensor *dp_tile(dp_tensor *x, int n, const int64_t *reps) {
  if (n > DP_MAXDIM) {
    dp_error("tile: at most %d repeat counts, got %d", DP_MAXDIM, n);
    return NULL;
  }
  int64_t r[DP_MAXDIM];
  int m = n < x->ndim ? x->ndim : n;
  for (int i = 0; i < m; i++) r[i] = i < m - n ? 1 : reps[i - (m - n)];
  return dp_repeat(x, m, r);
}
