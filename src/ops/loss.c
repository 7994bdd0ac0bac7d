/* softmax, log_softmax, cross-entropy (fused with log-softmax, label
 * smoothing, ignore_index) and MSE. */
#include <string.h>

#include "ops/autocast.h"
#include "ops/op_util.h"

/* x with `dim` moved last, contiguous, as [rows, cols] */
static dp_tensor *rows_last(dp_tensor *x, int dim, int64_t *rows, int64_t *cols) {
  DP_SCOPE(s);
  dp_tensor *t = dim == x->ndim - 1 ? x : dp_scope_add(&s, dp_transpose(x, dim, x->ndim - 1));
  if (!t) return NULL;
  *cols = x->ndim ? x->shape[dim] : 1;
  *rows = *cols ? dp_numel(x) / *cols : 0;
  return dp_contiguous_raw(t);
}

static dp_tensor *rows_back(dp_tensor *c, const dp_tensor *like, int dim) {
  /* c is contiguous in the transposed layout; view it back */
  if (dim == like->ndim - 1) {
    dp_retain(c);
    return c;
  }
  int64_t sh[DP_MAXDIM];
  memcpy(sh, like->shape, sizeof sh);
  sh[dim] = like->shape[like->ndim - 1];
  sh[like->ndim - 1] = like->shape[dim];
  DP_SCOPE(s);
  dp_tensor *v = dp_scope_add(&s, dp_as_strided(c, like->ndim, sh, c->stride, c->offset));
  if (!v) return NULL;
  /* strides of a contiguous tensor of shape sh */
  dp_contiguous_strides(like->ndim, sh, v->stride);
  return dp_transpose(v, dim, like->ndim - 1);
}

static int softmax_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int dim = (int)n->i[0];
  bool log = n->i[1];
  dp_tensor *y = dp_node_saved(n, 0);
  if (!y) return -1;
  int64_t rows, cols;
  DP_SCOPE(s);
  dp_tensor *yc = dp_scope_add(&s, rows_last(y, dim, &rows, &cols));
  dp_tensor *gc = yc ? dp_scope_add(&s, rows_last(gout[0], dim, &rows, &cols)) : NULL;
  dp_tensor *gx = gc ? dp_scope_add(&s, dp_empty_like(gc)) : NULL;
  if (!gx || dp_backend_of(y)->softmax_backward(gx, gc, yc, rows, cols, log)) return -1;
  gin[0] = rows_back(gx, y, dim);
  return gin[0] ? 0 : -1;
}

static dp_tensor *softmax_impl(dp_tensor *x, int dim, bool log) {
  const char *op = log ? "log_softmax" : "softmax";
  if (dp_check_float(op, x)) return NULL;
  if (x->ndim == 0) dim = 0;
  else if (dp_check_dim(op, x, dim)) return NULL;
  int64_t rows, cols;
  DP_SCOPE(s);
  dp_tensor *xs = x->ndim == 0 ? dp_scope_add(&s, dp_reshape(x, 1, (int64_t[]){1})) : x;
  dp_tensor *c = xs ? dp_scope_add(&s, rows_last(xs, dim, &rows, &cols)) : NULL;
  dp_tensor *y = c ? dp_scope_add(&s, dp_empty_like(c)) : NULL;
  if (!y || dp_backend_of(x)->softmax(y, c, rows, cols, log)) return NULL;
  dp_tensor *out = dp_scope_add(&s, rows_back(y, xs, dim));
  if (out && x->ndim == 0) out = dp_scope_add(&s, dp_reshape(out, 0, NULL));
  if (!out) return NULL;
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new(log ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_backward, 1, &x, 1);
    n->i[0] = dim;
    n->i[1] = log;
    dp_node_save(n, out);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* Autocast (autocast.h) computes the softmaxes and losses of bfloat16 /
 * float16 inputs in float32. */
static dp_tensor *softmax_fp32(dp_tensor *x, int dim, bool log) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 1, (dp_tensor * *[]){&x})) return NULL;
  return dp_autocast_done(&ac, softmax_impl(x, dim, log));
}
dp_tensor *dp_softmax(dp_tensor *x, int dim) { return softmax_fp32(x, dim, false); }
dp_tensor *dp_log_softmax(dp_tensor *x, int dim) { return softmax_fp32(x, dim, true); }

/* ---- cross-entropy ---- */
static int ce_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *target = dp_node_saved(n, 1), *lse = dp_node_saved(n, 2),
            *valid = dp_node_saved(n, 3);
  dp_reduction red = (dp_reduction)n->i[0];
  int64_t rows = x->shape[0];
  DP_SCOPE(s);
  /* per-row scale: upstream grad (per row for 'none') over the normaliser */
  dp_tensor *scale;
  if (red == DP_REDUCE_NONE) {
    dp_tensor *g = dp_scope_add(&s, dp_reshape(gout[0], 1, &rows));
    scale = g ? dp_scope_add(&s, dp_mul(g, valid)) : NULL;
  } else {
    double denom = red == DP_REDUCE_MEAN ? n->f[1] : 1.0;
    dp_tensor *g = dp_scope_add(&s, dp_binary_scalar(DP_B_DIV, gout[0], denom > 0 ? denom : 1.0, false));
    scale = g ? dp_scope_add(&s, dp_mul(valid, g)) : NULL; /* broadcasts the 0-dim grad over rows */
  }
  dp_tensor *sc = scale ? dp_scope_add(&s, dp_contiguous_raw(scale)) : NULL;
  dp_tensor *gx = sc ? dp_scope_add(&s, dp_empty_like(x)) : NULL;
  dp_ce_args ca = {.x = x,
                   .target = target,
                   .lse = lse,
                   .scale = sc,
                   .base = n->i[1],
                   .ignore_index = n->i[2],
                   .smoothing = n->f[0]};
  if (!gx || dp_backend_of(x)->cross_entropy_backward(gx, &ca)) return -1;
  if (n->in_ndim[0] == 2) {
    gin[0] = dp_scope_keep(&s, gx);
    return 0;
  }
  if (n->in_ndim[0] == 1) { /* unbatched [C] logits: the forward lifted them to [1, C] */
    gin[0] = dp_reshape(gx, 1, n->in_shape[0]);
    return gin[0] ? 0 : -1;
  }
  /* back to the logits' original layout */
  int nd = n->in_ndim[0];
  int64_t sh[DP_MAXDIM]; /* [N, d..., C] then move C back to dim 1 */
  sh[0] = n->in_shape[0][0];
  for (int d = 2; d < nd; d++) sh[d - 1] = n->in_shape[0][d];
  sh[nd - 1] = n->in_shape[0][1];
  dp_tensor *v = dp_scope_add(&s, dp_reshape(gx, nd, sh));
  if (!v) return -1;
  int perm[DP_MAXDIM];
  perm[0] = 0;
  perm[1] = nd - 1;
  for (int d = 2; d < nd; d++) perm[d] = d - 1;
  gin[0] = dp_permute(v, perm);
  return gin[0] ? 0 : -1;
}

/* logits and targets as [rows, C] and [rows], contiguous */
static int ce_rows(dp_tensor *logits, dp_tensor *target, dp_tensor **x2, dp_tensor **t2) {
  int nd = logits->ndim;
  int64_t C = nd == 1 ? logits->shape[0] : logits->shape[1];
  DP_SCOPE(s);
  dp_tensor *xv, *tv;
  if (nd == 1) {
    xv = dp_scope_add(&s, dp_reshape(logits, 2, (int64_t[]){1, C}));
    tv = dp_scope_add(&s, dp_reshape(target, 1, (int64_t[]){1}));
  } else if (nd == 2) {
    xv = logits, tv = target;
  } else {
    int perm[DP_MAXDIM];
    perm[0] = 0;
    for (int d = 2; d < nd; d++) perm[d - 1] = d;
    perm[nd - 1] = 1;
    dp_tensor *p = dp_scope_add(&s, dp_permute(logits, perm));
    xv = p ? dp_scope_add(&s, dp_reshape(p, 2, (int64_t[]){-1, C})) : NULL;
    tv = dp_scope_add(&s, dp_reshape(target, 1, (int64_t[]){-1}));
  }
  *x2 = xv ? dp_contiguous_raw(xv) : NULL;
  *t2 = tv ? dp_contiguous_raw(tv) : NULL;
  return *x2 && *t2 ? 0 : -1;
}

static dp_tensor *cross_entropy_impl(dp_tensor *logits, dp_tensor *target, dp_reduction red, double smoothing,
                                     int64_t ignore_index, int64_t base) {
  if (dp_check_float("cross_entropy", logits)) return NULL;
  if (target->dtype != DP_I64) {
    dp_error("cross_entropy: target must be int64 class positions, got %s (use :long())", dp_dtype_name(target->dtype));
    return NULL;
  }
  if (!(smoothing >= 0 && smoothing <= 1)) { /* NaN too */
    dp_error("cross_entropy: label_smoothing must be in [0, 1], got %g", smoothing);
    return NULL;
  }
  if (dp_check_same_device("cross_entropy", logits, target)) return NULL;
  int nd = logits->ndim;
  bool shape_ok = nd >= 2 && target->ndim == nd - 1 && target->shape[0] == logits->shape[0];
  for (int d = 2; d < nd && shape_ok; d++) shape_ok = target->shape[d - 1] == logits->shape[d];
  if (nd == 1 && target->ndim == 0) shape_ok = true;
  if (!shape_ok) {
    dp_error("cross_entropy: logits of shape %s need targets of shape [N] (or [N, d...] for [N, C, d...]); got "
             "target shape %s",
             SHAPE(logits), SHAPE(target));
    return NULL;
  }
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *xc = NULL, *tc = NULL, *out = NULL, *valid = NULL;
  double count = 0;
  int rc = ce_rows(logits, target, &xc, &tc);
  dp_scope_add(&s, xc), dp_scope_add(&s, tc);
  int64_t rows = xc ? xc->shape[0] : 0;
  count = (double)rows;
  dp_tensor *loss = rc ? NULL : dp_scope_add(&s, dp_empty(logits->dtype, 1, &rows, dp_dev(logits)));
  /* per row (max, log_s) in float64: the gradient is exp((x - max) - log_s), exact for any logit magnitude */
  int64_t lse_shape[2] = {rows, 2};
  dp_tensor *lse = loss ? dp_scope_add(&s, dp_empty(DP_F64, 2, lse_shape, dp_dev(logits))) : NULL;
  dp_ce_args ca = {.x = xc, .target = tc, .base = base, .ignore_index = ignore_index, .smoothing = smoothing};
  rc = lse ? dp_backend_of(logits)->cross_entropy(loss, lse, &ca) : -1;
  /* valid-row mask (1 where target != ignore_index) and count */
  if (!rc) {
    dp_tensor *ne = dp_scope_add(&s, dp_binary_scalar(DP_B_NE, tc, (double)ignore_index, false));
    valid = ne ? dp_scope_add(&s, dp_to(ne, logits->dtype, dp_dev(logits))) : NULL;
    if (valid && red == DP_REDUCE_MEAN) {
      dp_tensor *cnt = dp_scope_add(&s, dp_sum(valid, 0, NULL, false));
      if (!cnt || dp_item_d(cnt, &count)) valid = NULL;
    }
  }
  if (valid) {
    if (red == DP_REDUCE_NONE) {
      out = nd <= 2 ? dp_reshape(loss, nd == 1 ? 0 : 1, target->shape) : dp_reshape(loss, target->ndim, target->shape);
    } else {
      dp_tensor *sum = dp_scope_add(&s, dp_sum(loss, 0, NULL, false));
      out = !sum                    ? NULL
            : red == DP_REDUCE_MEAN ? dp_binary_scalar(DP_B_DIV, sum, count > 0 ? count : 0.0 / 0.0, false)
                                    : dp_scope_keep(&s, sum);
    }
  }
  dp_set_grad_enabled(prev);
  if (out && dp_any_requires_grad(1, &logits)) {
    dp_node *n = dp_node_new("CrossEntropyBackward", ce_backward, 1, &logits, 1);
    n->i[0] = red, n->i[1] = base, n->i[2] = ignore_index;
    n->f[0] = smoothing, n->f[1] = count;
    dp_node_save(n, xc);
    dp_node_save(n, tc);
    dp_node_save(n, lse);
    dp_node_save(n, valid);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_cross_entropy(dp_tensor *logits, dp_tensor *target, dp_reduction red, double smoothing,
                            int64_t ignore_index, int64_t base) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 1, (dp_tensor * *[]){&logits})) return NULL;
  return dp_autocast_done(&ac, cross_entropy_impl(logits, target, red, smoothing, ignore_index, base));
}

static dp_tensor *mse_impl(dp_tensor *a, dp_tensor *b, dp_reduction red);

dp_tensor *dp_mse_loss(dp_tensor *a, dp_tensor *b, dp_reduction red) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 2, (dp_tensor * *[]){&a, &b})) return NULL;
  return dp_autocast_done(&ac, mse_impl(a, b, red));
}

/* the fused mse_loss's gradient: scale * g * (a - b) for a and its
 * negation for b, as the composition's */
static int mse_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  DP_SCOPE(s);
  dp_tensor *a = dp_node_saved(n, 0), *b = dp_node_saved(n, 1);
  dp_tensor *gs = dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, gout[0], n->f[0], false));
  dp_tensor *d = gs ? dp_scope_add(&s, dp_sub(a, b)) : NULL;
  dp_tensor *ga = d ? dp_scope_add(&s, dp_mul(d, gs)) : NULL;
  if (!ga) return -1;
  if (dp_node_needs(n, 1) && !(gin[1] = dp_unary(DP_U_NEG, ga))) return -1;
  if (dp_node_needs(n, 0)) gin[0] = dp_scope_keep(&s, ga);
  return 0;
}

/* a reduced mse_loss of two float32 CPU tensors of one shape: the sum of
 * squared differences in one pass (dp_sum_squares_raw), no [N]
 * temporaries. NULL with *failed unset where it does not apply. */
static dp_tensor *mse_fused(dp_tensor *a, dp_tensor *b, dp_reduction red, bool *failed) {
  bool mask[DP_MAXDIM];
  for (int d = 0; d < DP_MAXDIM; d++) mask[d] = d < a->ndim;
  *failed = false;
  if (red == DP_REDUCE_NONE) return NULL;
  DP_SCOPE(s);
  dp_tensor *ss = dp_scope_add(&s, dp_sum_squares_raw(a, b, mask, failed));
  if (!ss) return NULL;
  double n = (double)dp_numel(a), v = *(const double *)dp_data(ss);
  dp_tensor *out = dp_scalar(red == DP_REDUCE_MEAN ? v / n : v, DP_F32, dp_dev(a));
  if (!out) {
    *failed = true;
    return NULL;
  }
  dp_tensor *ins[2] = {a, b};
  if (dp_any_requires_grad(2, ins)) {
    dp_node *nd = dp_node_new("MseLossBackward", mse_backward, 2, ins, 1);
    nd->f[0] = red == DP_REDUCE_MEAN ? 2.0 / n : 2.0;
    dp_node_save(nd, a);
    dp_node_save(nd, b);
    dp_node_attach(nd, out, 0);
    dp_node_release(nd);
  }
  return out;
}

static dp_tensor *mse_impl(dp_tensor *a, dp_tensor *b, dp_reduction red) {
  bool failed;
  dp_tensor *fused = mse_fused(a, b, red, &failed);
  if (fused || failed) return fused;
  DP_SCOPE(s);
  dp_tensor *d = dp_scope_add(&s, dp_sub(a, b));
  dp_tensor *sq = d ? dp_unary(DP_U_SQUARE, d) : NULL;
  if (!sq || red == DP_REDUCE_NONE) return sq;
  dp_scope_add(&s, sq);
  return red == DP_REDUCE_MEAN ? dp_mean(sq, 0, NULL, false) : dp_sum(sq, 0, NULL, false);
}
