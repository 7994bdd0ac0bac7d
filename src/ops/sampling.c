/* Random integers, categorical draws and Bernoulli draws from the Philox
 * generator (ops/philox.h), from a (seed, offset) the caller reserved:
 * the global generator's or a Generator object's. The same seed gives the
 * same numbers on every device: randint computes them on the host (one
 * counter per element) and moves them; multinomial and bernoulli draw
 * their uniforms with the device's rand kernel and select there. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"

dp_tensor *dp_randint(int64_t low, int64_t high, int ndim, const int64_t *shape, dp_device dev, uint64_t seed,
                      uint64_t offset) {
  if (high <= low) {
    dp_error("randint: low (%" PRId64 ") must be less than high (%" PRId64 ")", low, high);
    return NULL;
  }
  if (dp_check_shape(ndim, shape)) return NULL;
  DP_SCOPE(s);
  dp_tensor *t = dp_scope_add(&s, dp_empty(DP_I64, ndim, shape, dp_cpu()));
  if (!t) return NULL;
  int64_t *p = dp_data(t), n = dp_numel(t);
  /* the span in unsigned arithmetic: exact up to PyTorch's widest [-2^63, 2^63 - 1) (2^64 - 1 values), where the
   * signed difference overflowed; for spans below 2^53 the draws are the ones (double)high - (double)low gave */
  uint64_t span = (uint64_t)high - (uint64_t)low;
  double range = (double)span;
  for (int64_t i = 0; i < n; i++) {
    double u = dp_philox_uniform_d(seed, offset + (uint64_t)i);
    uint64_t k = (uint64_t)floor(u * range); /* u < 1: below 2^64 */
    if (k >= span) k = span - 1;             /* u * range can round up to range */
    p[i] = (int64_t)((uint64_t)low + k);     /* low + k, in [low, high) */
  }
  if (dev.type == DP_CPU) return dp_scope_keep(&s, t);
  return dp_to(t, DP_I64, dev);
}

/* The checks PyTorch makes, on a host copy of the weights: finite, >= 0,
 * a positive sum per row, and enough categories for draws without
 * replacement. */
static int check_weights(const dp_tensor *w, int64_t rows, int64_t cats, int64_t n, bool replacement) {
  const double *p = dp_data(w);
  for (int64_t r = 0; r < rows; r++) {
    double sum = 0;
    int64_t nonzero = 0;
    for (int64_t j = 0; j < cats; j++) {
      double v = p[r * cats + j];
      if (!isfinite(v) || v < 0)
        return dp_error("multinomial: probability %g at category %" PRId64 " of row %" PRId64
                        " is invalid (expected finite values >= 0)",
                        v, j + 1, r + 1);
      sum += v;
      nonzero += v > 0;
    }
    if (!(sum > 0)) return dp_error("multinomial: row %" PRId64 " of the probabilities sums to 0", r + 1);
    if (!replacement && n > nonzero)
      return dp_error("multinomial: cannot draw %" PRId64 " samples without replacement from row %" PRId64
                      ", which has %" PRId64 " categories with non-zero probability",
                      n, r + 1, nonzero);
  }
  return 0;
}

dp_tensor *dp_multinomial(dp_tensor *probs, int64_t n, bool replacement, int64_t base, uint64_t seed, uint64_t offset) {
  if (probs->ndim < 1 || probs->ndim > 2 || !dp_dtype_is_float(probs->dtype)) {
    dp_error("multinomial: expected a 1- or 2-dimensional floating point tensor of probabilities, got %s of shape %s",
             dp_dtype_name(probs->dtype), SHAPE(probs));
    return NULL;
  }
  int64_t rows = probs->ndim == 2 ? probs->shape[0] : 1, cats = probs->shape[probs->ndim - 1];
  if (n < 0) {
    dp_error("multinomial: the number of samples must be >= 0, got %" PRId64, n);
    return NULL;
  }
  if (cats == 0) {
    dp_error("multinomial: the probabilities have no category (shape %s)", SHAPE(probs));
    return NULL;
  }
  if (!replacement && n > cats) {
    dp_error("multinomial: cannot draw %" PRId64 " samples without replacement from %" PRId64 " categories", n, cats);
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *w = dp_scope_add(&s, dp_empty(DP_F64, 2, (int64_t[]){rows, cats}, dp_dev(probs)));
  dp_tensor *pv = w ? dp_scope_add(&s, dp_reshape(probs, 2, (int64_t[]){rows, cats})) : NULL;
  if (!pv || dp_copy_(w, pv)) return NULL;
  dp_tensor *host = dp_dev(w).type == DP_CPU ? w : dp_scope_add(&s, dp_to(w, DP_F64, dp_cpu()));
  if (!host || check_weights(host, rows, cats, n, replacement)) return NULL;
  int64_t osh[2] = {rows, n};
  dp_tensor *u = dp_scope_add(&s, dp_empty(DP_F64, 2, osh, dp_dev(probs)));
  dp_tensor *out = u ? dp_scope_add(&s, dp_empty(DP_I64, 2, osh, dp_dev(probs))) : NULL;
  if (!out || dp_backend_of(u)->rand(u, DP_RAND_UNIFORM, seed, offset, 0.0, 1.0) ||
      dp_backend_of(u)->multinomial(out, w, u, rows, cats, n, replacement, base))
    return NULL;
  if (probs->ndim == 2) return dp_scope_keep(&s, out);
  return dp_reshape(out, 1, &n);
}

dp_tensor *dp_bernoulli(dp_tensor *p, uint64_t seed, uint64_t offset) {
  if (!dp_dtype_is_float(p->dtype)) {
    dp_error("bernoulli: expected a floating point tensor of probabilities, got %s", dp_dtype_name(p->dtype));
    return NULL;
  }
  DP_SCOPE(s);
  if (dp_dev(p).type == DP_CPU) {
    dp_tensor *pc = dp_scope_add(&s, dp_to(p, DP_F64, dp_cpu()));
    dp_tensor *pcc = pc ? dp_scope_add(&s, dp_contiguous_raw(pc)) : NULL;
    if (!pcc) return NULL;
    const double *v = dp_data(pcc);
    for (int64_t i = 0, m = dp_numel(pcc); i < m; i++)
      if (!(v[i] >= 0 && v[i] <= 1)) {
        dp_error("bernoulli: probability %g at position %" PRId64 " is not in [0, 1]", v[i], i + 1);
        return NULL;
      }
  }
  dp_tensor *u = dp_scope_add(&s, dp_empty(p->dtype, p->ndim, p->shape, dp_dev(p)));
  if (!u || dp_backend_of(u)->rand(u, DP_RAND_UNIFORM, seed, offset, 0.0, 1.0)) return NULL;
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *lt = dp_scope_add(&s, dp_binary(DP_B_LT, u, p));
  dp_tensor *out = lt ? dp_to(lt, p->dtype, dp_dev(p)) : NULL;
  dp_set_grad_enabled(prev);
  return out;
}
