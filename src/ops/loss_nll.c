/* nll_loss, and cross_entropy with class weights or probability (soft)
 * targets, composed of differentiable ops (log_softmax, a one-hot mask,
 * products and sums), with PyTorch's formulas:
 *
 *   nll:    loss_i = -w[t_i] * logp[i, t_i] (0 for ignored targets);
 *           mean divides by the sum of w[t_i] over the kept targets.
 *   cross_entropy with class targets = nll of log_softmax, and with
 *           label smoothing eps: (1 - eps) * nll + eps / C * smooth, where
 *           smooth_i = -sum_j w[j] * logp[i, j] (0 for ignored targets) and
 *           its mean divides by the same weight sum (the count of kept
 *           targets without weights), as PyTorch 1.13 does.
 *   cross_entropy with probabilities p (the logits' shape): loss_i =
 *           -sum_j w[j] * p'[i, j] * logp[i, j], p' = (1 - eps) p + eps / C;
 *           mean divides by the number of rows (numel / C).
 *
 * The common case (class targets, no weights) runs the fused kernel in
 * loss.c instead; it agrees with these formulas. */
#include <string.h>

#include "ops/op_util.h"

/* The class dim of logits / log-probabilities: 0 unbatched ([C]), else 1. */
static int class_dim(const dp_tensor *x) { return x->ndim == 1 ? 0 : 1; }

/* x with its class dim moved last (a view) */
static dp_tensor *class_last(dp_tensor *x) {
  int cd = class_dim(x), perm[DP_MAXDIM], k = 0;
  for (int d = 0; d < x->ndim; d++)
    if (d != cd) perm[k++] = d;
  perm[k] = cd;
  return dp_permute(x, perm);
}

static int check_weight(const char *op, const dp_tensor *x, const dp_tensor *w) {
  if (!w) return 0;
  int64_t C = x->shape[class_dim(x)];
  if (w->ndim != 1 || w->shape[0] != C)
    return dp_error("%s: weight of shape %s must hold one value per class ([%" PRId64 "] for input shape %s)", op,
                    SHAPE(w), C, SHAPE(x));
  if (!dp_dtype_is_float(w->dtype))
    return dp_error("%s: weight must be a floating point tensor, got %s", op, dp_dtype_name(w->dtype));
  return dp_check_same_device(op, x, w);
}

/* Class-position targets: int64 of the input's shape without the class
 * dim, each a class (base..C-1+base) or ignore_index. */
static int check_targets(const char *op, const dp_tensor *x, dp_tensor *t, const dp_loss_opts *o) {
  if (t->dtype != DP_I64)
    return dp_error("%s: target must be int64 class positions (or, for cross_entropy, class probabilities of the "
                    "input's shape), got %s of shape %s",
                    op, dp_dtype_name(t->dtype), SHAPE(t));
  bool ok = x->ndim >= 1 && t->ndim == x->ndim - 1;
  for (int d = 0, k = 0; ok && d < x->ndim; d++)
    if (d != class_dim(x)) ok = t->shape[k++] == x->shape[d];
  if (!ok)
    return dp_error("%s: input of shape %s needs targets of shape [N] (or [N, d...] for [N, C, d...], [] for [C]); got "
                    "target shape %s",
                    op, SHAPE(x), SHAPE(t));
  if (dp_check_same_device(op, x, t)) return -1;
  int64_t C = x->shape[class_dim(x)];
  DP_SCOPE(s);
  dp_tensor *tc = dp_scope_add(&s, dp_dev(t).type == DP_CPU ? dp_contiguous_raw(t) : dp_to(t, DP_I64, dp_cpu()));
  if (!tc) return -1;
  tc = dp_scope_add(&s, dp_contiguous_raw(tc));
  if (!tc) return -1;
  const int64_t *p = dp_data(tc);
  for (int64_t i = 0, n = dp_numel(tc); i < n; i++)
    if (p[i] != o->ignore_index && (p[i] < o->base || p[i] - o->base >= C))
      return dp_error("%s: target %" PRId64 " at position %" PRId64 " is out of range: classes are %" PRId64
                      "..%" PRId64,
                      op, p[i], i + o->base, o->base, C - 1 + o->base);
  return 0;
}

/* Exact picks without multiplying by a 0/1 mask (0 * inf is NaN, and PyTorch
 * picks, so an infinite weight of another class must not reach a row):
 * the values v [R] (differentiable) extended by a 0, read at idx [R] where
 * ignored rows read the appended 0. */
static dp_tensor *pick(dp_tensor *v, dp_tensor *idx) {
  DP_SCOPE(s);
  dp_tensor *z = dp_scope_add(&s, dp_zeros(v->dtype, 1, (int64_t[]){1}, dp_dev(v)));
  dp_tensor *ext = z ? dp_scope_add(&s, dp_cat(2, (dp_tensor *[]){v, z}, 0)) : NULL;
  return ext ? dp_index_select(ext, 0, idx, 0) : NULL;
}

/* keep [R] (int64 0/1): target != ignore_index; pos [R]: the class (0-based)
 * of kept rows, `other` for ignored ones */
static int target_index(dp_tensor *t, const dp_loss_opts *o, int64_t other, dp_tensor **keep, dp_tensor **pos) {
  DP_SCOPE(s);
  dp_number ig = dp_number_int(o->ignore_index), base = dp_number_int(o->base), oth = dp_number_int(other);
  dp_tensor *tf = dp_scope_add(&s, dp_reshape(t, 1, (int64_t[]){-1}));
  dp_tensor *k8 = tf ? dp_scope_add(&s, dp_binary_number(DP_B_NE, tf, &ig, false)) : NULL;
  dp_tensor *k = k8 ? dp_scope_add(&s, dp_cast_raw(k8, DP_I64)) : NULL;
  dp_tensor *c = k ? dp_scope_add(&s, dp_binary_number(DP_B_SUB, tf, &base, false)) : NULL;
  /* pos = (t - base - other) * keep + other: exact int64 */
  dp_tensor *c2 = c ? dp_scope_add(&s, dp_binary_number(DP_B_SUB, c, &oth, false)) : NULL;
  dp_tensor *c3 = c2 ? dp_scope_add(&s, dp_mul(c2, k)) : NULL;
  dp_tensor *p = c3 ? dp_scope_add(&s, dp_binary_number(DP_B_ADD, c3, &oth, false)) : NULL;
  if (!p) return -1;
  *keep = dp_scope_keep(&s, k), *pos = dp_scope_keep(&s, p);
  return 0;
}

/* row r of the kept rows' values, 0 for ignored rows, from v [R] */
static dp_tensor *kept_only(dp_tensor *v, dp_tensor *keep) {
  int64_t R = v->shape[0];
  dp_number rn = dp_number_int(R);
  DP_SCOPE(s);
  dp_tensor *rows = dp_scope_add(&s, dp_arange(0, (double)R, 1, DP_I64, dp_dev(v)));
  dp_tensor *a = rows ? dp_scope_add(&s, dp_binary_number(DP_B_SUB, rows, &rn, false)) : NULL;
  dp_tensor *b = a ? dp_scope_add(&s, dp_mul(a, keep)) : NULL; /* (r - R) * keep + R: r, or R */
  dp_tensor *idx = b ? dp_scope_add(&s, dp_binary_number(DP_B_ADD, b, &rn, false)) : NULL;
  return idx ? pick(v, idx) : NULL;
}

/* sum, mean (over `denom`, a 0-dim tensor or NULL for the count) or none */
static dp_tensor *reduce_loss(dp_tensor *per, dp_reduction red, dp_tensor *denom, double count) {
  if (red == DP_REDUCE_NONE) return (dp_retain(per), per);
  DP_SCOPE(s);
  dp_tensor *sum = dp_scope_add(&s, dp_sum(per, 0, NULL, false));
  if (!sum || red == DP_REDUCE_SUM) return dp_scope_keep(&s, sum);
  if (denom) return dp_div(sum, denom);
  return dp_binary_number(DP_B_DIV, sum, &(dp_number){false, 0, count}, false);
}

/* nll of class-last log-probabilities lp [..., C]; *wsum_out gets the kept
 * targets' weight sum (0-dim, no grad), *keep_out which rows are kept [R] (int64 0/1) */
static dp_tensor *nll_core(dp_tensor *lp, dp_tensor *t, const dp_loss_opts *o, dp_reduction red, dp_tensor **wsum_out,
                           dp_tensor **keep_out) {
  int64_t C = lp->shape[lp->ndim - 1], R = C ? dp_numel(lp) / C : dp_numel(t);
  DP_SCOPE(s);
  dp_tensor *keep = NULL, *cls = NULL;
  if (target_index(t, o, C, &keep, &cls)) return NULL; /* ignored rows: class C (the appended zero) */
  dp_scope_add(&s, keep), dp_scope_add(&s, cls);
  /* logp[r, t_r] from the flat [R * C] log-probabilities: index r * C + t_r, ignored rows the appended 0 */
  dp_number cn = dp_number_int(C), rc = dp_number_int(R * C);
  dp_tensor *rows = dp_scope_add(&s, dp_arange(0, (double)R, 1, DP_I64, dp_dev(lp)));
  dp_tensor *off = rows ? dp_scope_add(&s, dp_binary_number(DP_B_MUL, rows, &cn, false)) : NULL;
  dp_tensor *at = off ? dp_scope_add(&s, dp_add(off, cls)) : NULL;
  dp_tensor *a2 = at ? dp_scope_add(&s, dp_binary_number(DP_B_SUB, at, &rc, false)) : NULL;
  dp_tensor *a3 = a2 ? dp_scope_add(&s, dp_mul(a2, keep)) : NULL;
  dp_tensor *idx = a3 ? dp_scope_add(&s, dp_binary_number(DP_B_ADD, a3, &rc, false)) : NULL;
  dp_tensor *flat = idx ? dp_scope_add(&s, dp_reshape(lp, 1, (int64_t[]){R * C})) : NULL;
  dp_tensor *picked = flat ? dp_scope_add(&s, pick(flat, idx)) : NULL;
  /* the weights of the targets (1 without weights), 0 for ignored rows */
  dp_tensor *wt;
  bool prev = dp_set_grad_enabled(false);
  if (o->weight) wt = picked ? dp_scope_add(&s, pick(o->weight, cls)) : NULL;
  else wt = picked ? dp_scope_add(&s, dp_to(keep, lp->dtype, dp_dev(lp))) : NULL;
  dp_tensor *wsum = wt ? dp_scope_add(&s, dp_sum(wt, 0, NULL, false)) : NULL;
  dp_set_grad_enabled(prev);
  dp_tensor *pw = wsum ? dp_scope_add(&s, dp_mul(picked, wt)) : NULL;
  dp_tensor *neg = pw ? dp_scope_add(&s, dp_neg(pw)) : NULL;
  dp_tensor *per = neg ? dp_scope_add(&s, dp_reshape(neg, t->ndim, t->shape)) : NULL;
  dp_tensor *out = per ? reduce_loss(per, red, wsum, 0) : NULL;
  if (out && wsum_out) *wsum_out = dp_scope_keep(&s, wsum);
  if (out && keep_out) *keep_out = dp_scope_keep(&s, keep);
  return out;
}

dp_tensor *dp_nll_loss(dp_tensor *logp, dp_tensor *target, const dp_loss_opts *o) {
  const char *op = "nll_loss";
  if (logp->ndim < 1 || dp_check_float(op, logp) || check_weight(op, logp, o->weight) ||
      check_targets(op, logp, target, o))
    return NULL;
  DP_SCOPE(s);
  dp_tensor *lp = dp_scope_add(&s, class_last(logp));
  return lp ? nll_core(lp, target, o, o->reduction, NULL, NULL) : NULL;
}

static dp_tensor *soft_cross_entropy(dp_tensor *x, dp_tensor *p, const dp_loss_opts *o) {
  const char *op = "cross_entropy";
  if (!dp_same_shape(x, p))
    return dp_error("%s: probability targets must have the input's shape %s, got %s", op, SHAPE(x), SHAPE(p)), NULL;
  if (dp_check_same_device(op, x, p)) return NULL;
  int64_t C = x->shape[class_dim(x)];
  DP_SCOPE(s);
  dp_tensor *lp = dp_scope_add(&s, dp_log_softmax(x, class_dim(x)));
  dp_tensor *lpl = lp ? dp_scope_add(&s, class_last(lp)) : NULL, *pl = dp_scope_add(&s, class_last(p));
  dp_tensor *q = pl;
  if (pl && o->label_smoothing > 0) {
    dp_tensor *a = dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, pl, 1.0 - o->label_smoothing, false));
    q = a ? dp_scope_add(&s, dp_binary_scalar(DP_B_ADD, a, o->label_smoothing / (double)C, false)) : NULL;
  }
  dp_tensor *prod = lpl && q ? dp_scope_add(&s, dp_mul(lpl, q)) : NULL;
  if (prod && o->weight) prod = dp_scope_add(&s, dp_mul(prod, o->weight));
  dp_tensor *ps = prod ? dp_scope_add(&s, dp_sum(prod, 1, (int[]){prod->ndim - 1}, false)) : NULL;
  dp_tensor *per = ps ? dp_scope_add(&s, dp_neg(ps)) : NULL;
  return per ? reduce_loss(per, o->reduction, NULL, (double)(dp_numel(x) / (C ? C : 1))) : NULL;
}

/* class targets with weights */
static dp_tensor *composed_cross_entropy(dp_tensor *x, dp_tensor *t, const dp_loss_opts *o) {
  int64_t C = x->shape[class_dim(x)];
  double eps = o->label_smoothing;
  DP_SCOPE(s);
  dp_tensor *lp = dp_scope_add(&s, dp_log_softmax(x, class_dim(x)));
  dp_tensor *lpl = lp ? dp_scope_add(&s, class_last(lp)) : NULL;
  dp_tensor *wsum = NULL, *keep = NULL;
  dp_tensor *nll = lpl ? dp_scope_add(&s, nll_core(lpl, t, o, o->reduction, &wsum, &keep)) : NULL;
  dp_scope_add(&s, wsum), dp_scope_add(&s, keep);
  if (!nll || eps == 0) return nll ? dp_scope_keep(&s, nll) : NULL;
  /* smooth_i = -sum_j w[j] logp[i, j], zero (not multiplied by 0) for ignored targets */
  dp_tensor *wl = o->weight ? dp_scope_add(&s, dp_mul(lpl, o->weight)) : lpl;
  dp_tensor *ws = wl ? dp_scope_add(&s, dp_sum(wl, 1, (int[]){lpl->ndim - 1}, false)) : NULL;
  dp_tensor *wf = ws ? dp_scope_add(&s, dp_reshape(ws, 1, (int64_t[]){-1})) : NULL;
  dp_tensor *sm = wf ? dp_scope_add(&s, kept_only(wf, keep)) : NULL;
  dp_tensor *sr = sm ? dp_scope_add(&s, dp_reshape(sm, t->ndim, t->shape)) : NULL;
  dp_tensor *smooth = sr ? dp_scope_add(&s, dp_neg(sr)) : NULL;
  dp_tensor *ret = smooth ? dp_scope_add(&s, reduce_loss(smooth, o->reduction, wsum, 0)) : NULL;
  dp_tensor *a = ret ? dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, nll, 1.0 - eps, false)) : NULL;
  dp_tensor *b = a ? dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, ret, eps / (double)C, false)) : NULL;
  return b ? dp_add(a, b) : NULL;
}

dp_tensor *dp_cross_entropy_opts(dp_tensor *logits, dp_tensor *target, const dp_loss_opts *o) {
  const char *op = "cross_entropy";
  if (logits->ndim < 1) {
    dp_error("%s: expected logits of shape [N, C], [N, C, d...] or [C], got %s", op, SHAPE(logits));
    return NULL;
  }
  if (dp_check_float(op, logits) || check_weight(op, logits, o->weight)) return NULL;
  if (o->label_smoothing < 0 || o->label_smoothing > 1) {
    dp_error("%s: label_smoothing must be in [0, 1], got %g", op, o->label_smoothing);
    return NULL;
  }
  if (dp_dtype_is_float(target->dtype)) return soft_cross_entropy(logits, target, o);
  if (check_targets(op, logits, target, o)) return NULL;
  if (o->weight) return composed_cross_entropy(logits, target, o);
  return dp_cross_entropy(logits, target, o->reduction, o->label_smoothing, o->ignore_index, o->base);
}
