/* norm, var and std.
 *
 * var and std are compositions of differentiable ops (a cast to float64,
 * mean, subtract, square, sum, divide; sqrt behind a where), so their
 * gradients come from those. norm
 * computes its value without recording a graph and has its own node with
 * PyTorch's gradient, which is 0 (not NaN) where the norm is 0 and splits
 * an inf-norm's gradient evenly among the elements that attain it. */
#include <math.h>
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"

static int reduced_count(const char *op, const dp_tensor *x, int n, const int *dims, bool *mask, int64_t *count) {
  memset(mask, 0, sizeof(bool) * DP_MAXDIM);
  *count = 1;
  for (int i = 0; i < n; i++) {
    if (dp_check_dim(op, x, dims[i])) return -1;
    if (mask[dims[i]]) return dp_error("%s: dimension %d appears more than once", op, dims[i] + 1);
    mask[dims[i]] = true;
  }
  for (int d = 0; d < x->ndim; d++)
    if (n == 0 || mask[d]) *count *= x->shape[d], mask[d] = true;
  return 0;
}

/* ---- var / std ---- */

/* The backward of the moments path: PyTorch's var_backward, (2 / (N - correction)) g (x - mean), and for std
 * that of var at g / (2 std), 0 where the std is 0 */
static int var_std_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *mean = dp_node_saved(n, 1), *sd = n->n_saved > 2 ? dp_node_saved(n, 2) : NULL;
  double scale = 2.0 / n->f[0]; /* inf for N - correction <= 0: inf or NaN, as PyTorch's */
  DP_SCOPE(s);
  dp_tensor *g = dp_scope_add(&s, dp_reshape(gout[0], x->ndim, mean->shape));
  if (g && sd) {
    dp_tensor *two = dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, sd, 2.0, false));
    dp_tensor *q = two ? dp_scope_add(&s, dp_div(g, two)) : NULL;
    dp_tensor *zero = q ? dp_scope_add(&s, dp_binary_scalar(DP_B_EQ, sd, 0.0, false)) : NULL;
    dp_tensor *z = zero ? dp_scope_add(&s, dp_scalar(0, q->dtype, dp_dev(q))) : NULL;
    g = z ? dp_scope_add(&s, dp_where(zero, z, q)) : NULL;
  }
  dp_tensor *gs = g ? dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, g, scale, false)) : NULL;
  dp_tensor *d = gs ? dp_scope_add(&s, dp_sub(x, mean)) : NULL;
  dp_tensor *r = d ? dp_scope_add(&s, dp_mul(d, gs)) : NULL;
  if (!r) return -1;
  gin[0] = dp_scope_keep(&s, r);
  return 0;
}

/* x seen as [p, r, q] around the reduced dims of mask when they are one run (all of them, the last ones, a middle
 * run; none: r = 1), keep[] x's shape with those dims 1; false when they are not one run. */
static bool reduced_run(const dp_tensor *x, const bool *mask, int64_t *p, int64_t *r, int64_t *q, int64_t *keep) {
  int first = -1, last = -1;
  for (int d = 0; d < x->ndim; d++)
    if (mask[d]) last = d, first = first < 0 ? d : first;
  for (int d = first; d >= 0 && d <= last; d++)
    if (!mask[d]) return false;
  *p = 1, *r = 1, *q = 1;
  for (int d = 0; d < x->ndim; d++) {
    keep[d] = mask[d] ? 1 : x->shape[d];
    if (first < 0 || d < first) *p *= x->shape[d];
    else if (d > last) *q *= x->shape[d];
    else *r *= x->shape[d];
  }
  return true;
}

/* float32 and float64 with the reduced dims side by side (all of them, the last ones, a middle run): the
 * backend's moments over x seen as [p, r, q], in double, one pass for the sums and one for the squares (the
 * composition below makes eight over a float64 copy: 50 ms against PyTorch's 3.2 for a var of 4M float32 values).
 * NULL with no error when the backend has no moments or the dims are not one run. */
static dp_tensor *var_std_moments(dp_tensor *x, const bool *mask, int64_t count, double correction, bool keepdim,
                                  bool is_std, bool *taken) {
  const dp_backend *be = dp_backend_of(x);
  int64_t p, r_, q, keep[DP_MAXDIM], out[DP_MAXDIM];
  *taken = false;
  /* (the CPU only: the division by N - correction below runs on m2's memory from here) */
  if (!be->moments || dp_dev(x).type != DP_CPU || (x->dtype != DP_F32 && x->dtype != DP_F64) || count == 0 ||
      dp_numel(x) == 0 || !reduced_run(x, mask, &p, &r_, &q, keep))
    return NULL;
  *taken = true;
  int nk = 0;
  for (int d = 0; d < x->ndim; d++)
    if (keepdim || !mask[d]) out[nk++] = keep[d];
  DP_SCOPE(s);
  int64_t pq = p * q;
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *mean = xc ? dp_scope_add(&s, dp_empty(DP_F64, x->ndim, keep, dp_dev(x))) : NULL;
  dp_tensor *m2 = mean ? dp_scope_add(&s, dp_empty(DP_F64, 1, &pq, dp_dev(x))) : NULL;
  if (!m2 || be->moments(mean, m2, xc, p, r_, q)) return NULL;
  double div = (double)count - correction, *qv = dp_data(m2);
  if (!(div > 0)) div = 0; /* m2 / 0: inf, or NaN for one value */
  for (int64_t i = 0; i < pq; i++) qv[i] = is_std ? sqrt(qv[i] / div) : qv[i] / div;
  dp_tensor *v = dp_scope_add(&s, dp_to(m2, x->dtype, dp_dev(x)));
  dp_tensor *r = v ? dp_scope_add(&s, dp_reshape(v, nk, out)) : NULL;
  if (!r) return NULL;
  if (dp_any_requires_grad(1, &x)) {
    dp_tensor *mx = dp_scope_add(&s, dp_to(mean, x->dtype, dp_dev(x)));
    dp_tensor *sd = mx && is_std ? dp_scope_add(&s, dp_reshape(v, x->ndim, keep)) : NULL;
    if (!mx || (is_std && !sd)) return NULL;
    dp_node *nd = dp_node_new(is_std ? "StdBackward" : "VarBackward", var_std_backward, 1, &x, 1);
    nd->f[0] = div;
    dp_node_save(nd, x);
    dp_node_save(nd, mx);
    if (sd) dp_node_save(nd, sd);
    dp_node_attach(nd, r, 0);
    dp_node_release(nd);
  }
  return dp_scope_keep(&s, r);
}

/* float32 runs in float64 and rounds once at the end, as PyTorch's CPU kernels accumulate: the squares of values
 * beyond 1.8e19 overflow float32 where their std does not (the differential suite found std = inf for 8.8e26) */
static dp_tensor *var_std(dp_tensor *x, int n, const int *dims, double correction, bool keepdim, bool is_std) {
  bool mask[DP_MAXDIM];
  int64_t count;
  const char *op = is_std ? "std" : "var";
  if (dp_check_float(op, x) || reduced_count(op, x, n, dims, mask, &count)) return NULL;
  bool taken;
  dp_tensor *fast = var_std_moments(x, mask, count, correction, keepdim, is_std, &taken);
  if (taken) return fast;
  DP_SCOPE(s);
  dp_tensor *xd = x->dtype == DP_F32 ? dp_scope_add(&s, dp_to(x, DP_F64, dp_dev(x))) : x;
  dp_tensor *m = xd ? dp_scope_add(&s, dp_mean(xd, n, dims, true)) : NULL;
  dp_tensor *d = m ? dp_scope_add(&s, dp_sub(xd, m)) : NULL;
  dp_tensor *sq = d ? dp_scope_add(&s, dp_mul(d, d)) : NULL;
  dp_tensor *sum = sq ? dp_scope_add(&s, dp_sum(sq, n, dims, keepdim)) : NULL;
  /* the corrected two-pass sum: minus (sum d)^2 / count, the rounding of the mean (with identical values the mean
   * can be an ulp off them; PyTorch's Welford pass then gives exactly 0, and so does this), floored at 0 */
  dp_tensor *s1 = sum ? dp_scope_add(&s, dp_sum(d, n, dims, keepdim)) : NULL;
  dp_tensor *s11 = s1 ? dp_scope_add(&s, dp_mul(s1, s1)) : NULL;
  dp_tensor *c = s11 ? dp_scope_add(&s, dp_binary_scalar(DP_B_DIV, s11, (double)count, false)) : NULL;
  dp_tensor *ss = c ? dp_scope_add(&s, dp_sub(sum, c)) : NULL;
  dp_tensor *neg = ss ? dp_scope_add(&s, dp_binary_scalar(DP_B_LT, ss, 0.0, false)) : NULL;
  dp_tensor *z0 = neg ? dp_scope_add(&s, dp_scalar(0, ss->dtype, dp_dev(ss))) : NULL;
  dp_tensor *ssf = z0 ? dp_scope_add(&s, dp_where(neg, z0, ss)) : NULL;
  double div = (double)count - correction;
  dp_tensor *v = ssf ? dp_scope_add(&s, dp_binary_scalar(DP_B_DIV, ssf, div > 0 ? div : 0.0, false)) : NULL;
  dp_tensor *r = v;
  if (v && is_std) {
    /* sqrt with PyTorch's gradient 0 where the std is 0 (sqrt's own, g / (2 sqrt(0)), would make 0 * inf = NaN of
     * var's zero gradient there): where(var == 0, 0, sqrt(where(var == 0, 1, var))) has that value and gradient */
    dp_tensor *zero = dp_scope_add(&s, dp_binary_scalar(DP_B_EQ, v, 0.0, false));
    dp_tensor *one = zero ? dp_scope_add(&s, dp_scalar(1, v->dtype, dp_dev(v))) : NULL;
    dp_tensor *z = one ? dp_scope_add(&s, dp_scalar(0, v->dtype, dp_dev(v))) : NULL;
    dp_tensor *safe = z ? dp_scope_add(&s, dp_where(zero, one, v)) : NULL;
    dp_tensor *sr = safe ? dp_scope_add(&s, dp_unary(DP_U_SQRT, safe)) : NULL;
    r = sr ? dp_scope_add(&s, dp_where(zero, z, sr)) : NULL;
  }
  if (!r) return NULL;
  return r->dtype == x->dtype ? dp_scope_keep(&s, r) : dp_to(r, x->dtype, dp_dev(x));
}

dp_tensor *dp_var(dp_tensor *x, int n, const int *dims, double correction, bool keepdim) {
  return var_std(x, n, dims, correction, keepdim, false);
}

dp_tensor *dp_std(dp_tensor *x, int n, const int *dims, double correction, bool keepdim) {
  return var_std(x, n, dims, correction, keepdim, true);
}

/* ---- norm ---- */

dp_tensor *dp_sum_squares_raw(dp_tensor *x, dp_tensor *y, const bool *mask, bool *failed) {
  const dp_backend *be = dp_backend_of(x);
  *failed = false;
  if (!be->sum_squares || dp_dev(x).type != DP_CPU || x->dtype != DP_F32 || dp_numel(x) == 0 ||
      (y && (y->dtype != DP_F32 || !dp_same_shape(x, y) || !dp_device_eq(dp_dev(x), dp_dev(y)))))
    return NULL;
  int64_t p, r, q, keep[DP_MAXDIM];
  if (!reduced_run(x, mask, &p, &r, &q, keep)) return NULL;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *yc = !y ? NULL : dp_scope_add(&s, dp_contiguous_raw(y));
  dp_tensor *out = xc && (yc || !y) ? dp_scope_add(&s, dp_empty(DP_F64, x->ndim, keep, dp_dev(x))) : NULL;
  if (!out || be->sum_squares(out, xc, yc, p, r, q)) {
    *failed = true;
    return NULL;
  }
  return dp_scope_keep(&s, out);
}

/* max (or min) of t over the masked dims, kept as size 1 */
static dp_tensor *extreme_dims(dp_scope *s, dp_tensor *t, const bool *mask, bool is_max) {
  dp_tensor *cur = t;
  for (int d = 0; d < t->ndim && cur; d++)
    if (mask[d]) cur = dp_scope_add(s, is_max ? dp_max(cur, d, true, NULL) : dp_min(cur, d, true, NULL));
  return cur;
}

static dp_tensor *norm_value(dp_scope *s, dp_tensor *x, double p, const bool *mask, int n, const int *dims) {
  /* p = 2 squares x itself (x * x is |x| * |x| bit for bit, NaN and -0 too): one pass less */
  dp_tensor *a = p == 2 && dp_numel(x) > 0 ? x : dp_scope_add(s, dp_unary(DP_U_ABS, x));
  if (!a) return NULL;
  if (isinf(p) && dp_numel(x) == 0) { /* 0, as torch.norm gives (max/min refuse an empty input) */
    int64_t sh[DP_MAXDIM];
    for (int d = 0; d < x->ndim; d++) sh[d] = mask[d] ? 1 : x->shape[d];
    return dp_scope_add(s, dp_zeros(x->dtype, x->ndim, sh, dp_dev(x)));
  }
  if (isinf(p)) return x->ndim ? extreme_dims(s, a, mask, p > 0) : a;
  if (p == 2) { /* one pass over x where the backend has it: sqrt of the double sum, rounded once */
    bool failed;
    dp_tensor *ss = dp_scope_add(s, dp_sum_squares_raw(x, NULL, mask, &failed));
    if (failed) return NULL;
    if (ss) {
      double *v = dp_data(ss);
      for (int64_t i = 0; i < dp_numel(ss); i++) v[i] = sqrt(v[i]);
      return dp_scope_add(s, dp_to(ss, x->dtype, dp_dev(x)));
    }
  }
  dp_tensor *t;
  if (p == 0) {
    dp_tensor *nz = dp_scope_add(s, dp_binary_scalar(DP_B_NE, a, 0.0, false));
    t = nz ? dp_scope_add(s, dp_to(nz, x->dtype, dp_dev(x))) : NULL;
  } else if (p == 1) {
    t = a;
  } else if (p == 2) {
    t = dp_scope_add(s, dp_mul(a, a));
  } else {
    t = dp_scope_add(s, dp_binary_scalar(DP_B_POW, a, p, false));
  }
  dp_tensor *sum = t ? dp_scope_add(s, dp_sum(t, n, dims, true)) : NULL;
  if (!sum || p == 0 || p == 1) return sum;
  if (p == 2) return dp_scope_add(s, dp_unary(DP_U_SQRT, sum));
  return dp_scope_add(s, dp_binary_scalar(DP_B_POW, sum, 1.0 / p, false));
}

static int norm_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *nrm = dp_node_saved(n, 1); /* nrm: keepdim shape */
  double p = n->f[0];
  int nd = x->ndim;
  DP_SCOPE(s);
  dp_tensor *g = dp_scope_add(&s, dp_reshape(gout[0], nd, nrm->shape));
  dp_tensor *r = NULL;
  if (!g) return -1;
  if (p == 0) {
    r = dp_scope_add(&s, dp_zeros(x->dtype, nd, x->shape, dp_dev(x)));
  } else if (p == 1) {
    dp_tensor *sg = dp_scope_add(&s, dp_unary(DP_U_SIGN, x));
    r = sg ? dp_scope_add(&s, dp_mul(sg, g)) : NULL;
  } else if (isinf(p)) { /* g * sign(x) * m / count(m), m = (|x| == norm or NaN), 0 at NaNs: PyTorch's values */
    dp_tensor *a = dp_scope_add(&s, dp_unary(DP_U_ABS, x));
    dp_tensor *eq = a ? dp_scope_add(&s, dp_binary(DP_B_EQ, a, nrm)) : NULL;
    dp_tensor *isn = eq ? dp_scope_add(&s, dp_binary(DP_B_NE, a, a)) : NULL;
    dp_tensor *eqf = isn ? dp_scope_add(&s, dp_to(eq, x->dtype, dp_dev(x))) : NULL;
    dp_tensor *isnf = eqf ? dp_scope_add(&s, dp_to(isn, x->dtype, dp_dev(x))) : NULL;
    dp_tensor *m = isnf ? dp_scope_add(&s, dp_add(eqf, isnf)) : NULL; /* never both: NaN equals nothing */
    int dims[DP_MAXDIM], k = 0;
    for (int d = 0; d < nd; d++)
      if (nrm->shape[d] == 1 && x->shape[d] != 1) dims[k++] = d;
    dp_tensor *cnt = m ? (k ? dp_scope_add(&s, dp_sum(m, k, dims, true)) : m) : NULL;
    dp_tensor *sg = cnt ? dp_scope_add(&s, dp_unary(DP_U_SIGN, x)) : NULL;
    dp_tensor *w = sg ? dp_scope_add(&s, dp_mul(sg, m)) : NULL;
    dp_tensor *wg = w ? dp_scope_add(&s, dp_mul(w, g)) : NULL;
    dp_tensor *q = wg ? dp_scope_add(&s, dp_div(wg, cnt)) : NULL;
    dp_tensor *z = q ? dp_scope_add(&s, dp_scalar(0, x->dtype, dp_dev(x))) : NULL;
    r = z ? dp_scope_add(&s, dp_where(isn, z, q)) : NULL;
  } else { /* PyTorch's grouping, which keeps float32 in range (x |x|^(p-2) overflows for a tiny x and p < 2):
            * p < 1: sign(x) |x|^(p-1) (0 where x is 0) * g * norm^(1-p); p < 2: sign(x) |x|^(p-1) * (g / norm^(p-1));
            * else x |x|^(p-2) * (g / norm^(p-1)); the last two 0 where the norm is 0 */
    dp_tensor *num;
    if (p == 2) {
      num = x;
    } else if (p < 2) {
      dp_tensor *a = dp_scope_add(&s, dp_unary(DP_U_ABS, x));
      dp_tensor *ap = a ? dp_scope_add(&s, dp_binary_scalar(DP_B_POW, a, p - 1, false)) : NULL;
      dp_tensor *sg = ap ? dp_scope_add(&s, dp_unary(DP_U_SIGN, x)) : NULL;
      num = sg ? dp_scope_add(&s, dp_mul(sg, ap)) : NULL;
      if (num && p < 1) {
        dp_tensor *x0 = dp_scope_add(&s, dp_binary_scalar(DP_B_EQ, x, 0.0, false));
        dp_tensor *z0 = x0 ? dp_scope_add(&s, dp_scalar(0, x->dtype, dp_dev(x))) : NULL;
        num = z0 ? dp_scope_add(&s, dp_where(x0, z0, num)) : NULL;
      }
    } else {
      dp_tensor *a = dp_scope_add(&s, dp_unary(DP_U_ABS, x));
      dp_tensor *ap = a ? dp_scope_add(&s, dp_binary_scalar(DP_B_POW, a, p - 2, false)) : NULL;
      num = ap ? dp_scope_add(&s, dp_mul(x, ap)) : NULL;
    }
    if (num && p < 1) {
      dp_tensor *ng = dp_scope_add(&s, dp_mul(num, g));
      dp_tensor *np = ng ? dp_scope_add(&s, dp_binary_scalar(DP_B_POW, nrm, 1 - p, false)) : NULL;
      r = np ? dp_scope_add(&s, dp_mul(ng, np)) : NULL;
    } else if (num) {
      dp_tensor *den = p == 2 ? nrm : dp_scope_add(&s, dp_binary_scalar(DP_B_POW, nrm, p - 1, false));
      dp_tensor *sc = den ? dp_scope_add(&s, dp_div(g, den)) : NULL;
      dp_tensor *zero = sc ? dp_scope_add(&s, dp_binary_scalar(DP_B_EQ, nrm, 0.0, false)) : NULL;
      dp_tensor *z = zero ? dp_scope_add(&s, dp_scalar(0, x->dtype, dp_dev(x))) : NULL;
      dp_tensor *scz = z ? dp_scope_add(&s, dp_where(zero, z, sc)) : NULL;
      r = scz ? dp_scope_add(&s, dp_mul(num, scz)) : NULL;
    }
  }
  if (!r) return -1;
  gin[0] = dp_scope_keep(&s, r);
  return 0;
}

dp_tensor *dp_norm(dp_tensor *x, double p, int n, const int *dims, bool keepdim) {
  bool mask[DP_MAXDIM];
  int64_t count;
  if (dp_check_float("norm", x) || reduced_count("norm", x, n, dims, mask, &count)) return NULL;
  if (p != p || (p < 0 && !isinf(p))) {
    dp_error("norm: p must be >= 0 or +-inf, got %g", p);
    return NULL;
  }
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *v = norm_value(&s, x, p, mask, n, dims); /* keepdim shape */
  dp_tensor *out = NULL;
  if (v) {
    int64_t sh[DP_MAXDIM];
    int k = 0;
    for (int d = 0; d < x->ndim; d++)
      if (keepdim || !mask[d]) sh[k++] = v->shape[d];
    out = dp_scope_add(&s, dp_reshape(v, k, sh));
  }
  dp_set_grad_enabled(prev);
  if (!out) return NULL;
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *nd = dp_node_new("NormBackward", norm_backward, 1, &x, 1);
    nd->f[0] = p;
    dp_node_save(nd, x);
    dp_node_save(nd, v);
    dp_node_attach(nd, out, 0);
    dp_node_release(nd);
  }
  return out;
}
