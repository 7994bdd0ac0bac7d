/* Batch norm and layer norm with their gradients.
 *
 * Batch norm is exposed as pieces without autograd (stats, gather, running
 * update, elemt, backward reduce, backward elemt) because SyncBatchNorm
 * runs the same pieces with all-reduces in between: per-rank statistics are
 * gathered into global ones before the apply, and the two per-channel sums
 * of the backward are all-reduced before the input gradient. dp_batch_norm
 * is the single-process composition with an autograd node. */
#include <math.h>
#include <string.h>

#include "ops/op_util.h"

/* x seen as [n, c, inner] */
static void bn_geometry(const dp_tensor *x, int64_t *n, int64_t *c, int64_t *inner) {
  *n = x->shape[0];
  *c = x->shape[1];
  *inner = 1;
  for (int d = 2; d < x->ndim; d++) *inner *= x->shape[d];
}

static int check_bn_input(const char *op, const dp_tensor *x) {
  if (x->ndim < 2) return dp_error("%s: expected an input of shape [N, C, ...], got shape %s", op, SHAPE(x));
  return dp_check_float(op, x);
}

/* A per-channel tensor must be [C] on x's device; `what` names it. */
static int check_channel(const char *op, const char *what, const dp_tensor *t, const dp_tensor *x) {
  if (!t) return 0;
  if (t->ndim != 1 || t->shape[0] != x->shape[1])
    return dp_error("%s: %s of shape %s does not match the %" PRId64 " channels of input shape %s (expected [%" PRId64
                    "])",
                    op, what, SHAPE(t), x->shape[1], SHAPE(x), x->shape[1]);
  if (!dp_dtype_is_float(t->dtype))
    return dp_error("%s: %s must be a floating point tensor, got %s", op, what, dp_dtype_name(t->dtype));
  return dp_check_same_device(op, x, t);
}

/* t as a contiguous tensor of x's dtype (t itself, retained, when it is
 * one already); NULL stays NULL. */
static dp_tensor *like_x(dp_tensor *t, const dp_tensor *x, bool *fail) {
  if (!t) return NULL;
  dp_tensor *r;
  if (t->dtype == x->dtype) r = dp_contiguous_raw(t);
  else if ((r = dp_empty(x->dtype, t->ndim, t->shape, dp_dev(t))) && dp_copy_(r, t)) dp_clear(&r);
  if (!r) *fail = true;
  return r;
}

/* ---- the pieces ---- */

int dp_batch_norm_stats(dp_tensor *x, dp_tensor **mean, dp_tensor **var, int64_t *count) {
  *mean = *var = NULL;
  if (check_bn_input("batch_norm_stats", x)) return -1;
  int64_t n, c, inner;
  bn_geometry(x, &n, &c, &inner);
  if (n * inner == 0) return dp_error("batch_norm_stats: input of shape %s has no values per channel", SHAPE(x));
  dp_tensor *xc = dp_contiguous_raw(x);
  dp_tensor *m = xc ? dp_empty(x->dtype, 1, &c, dp_dev(x)) : NULL, *v = m ? dp_empty_like(m) : NULL;
  dp_bn_args ba = {.n = n, .c = c, .inner = inner, .x = xc};
  int rc = v ? dp_backend_of(x)->bn_stats(m, v, &ba) : -1;
  dp_release(xc);
  if (rc) {
    dp_release(m), dp_release(v);
    return -1;
  }
  *mean = m, *var = v;
  if (count) *count = n * inner;
  return 0;
}

int dp_batch_norm_gather_stats(dp_tensor *mean_all, dp_tensor *var_all, dp_tensor *counts, dp_tensor **mean,
                               dp_tensor **var, double *total) {
  *mean = *var = NULL;
  const char *op = "batch_norm_gather_stats";
  if (mean_all->ndim != 2 || !dp_same_shape(mean_all, var_all))
    return dp_error("%s: expected means and variances of one shape [replicas, C], got %s and %s", op, SHAPE(mean_all),
                    SHAPE(var_all));
  if (counts->ndim != 1 || counts->shape[0] != mean_all->shape[0])
    return dp_error("%s: expected one count per replica ([%" PRId64 "]), got shape %s", op, mean_all->shape[0],
                    SHAPE(counts));
  if (dp_check_float(op, mean_all) || dp_check_float(op, var_all) || dp_check_same_device(op, mean_all, var_all) ||
      dp_check_same_device(op, mean_all, counts))
    return -1;
  /* mean = sum_r n_r m_r / N; var = sum_r n_r (v_r + (m_r - mean)^2) / N */
  bool prev = dp_set_grad_enabled(false);
  int rc = -1;
  dp_tensor *cf = dp_to(counts, mean_all->dtype, dp_dev(mean_all));
  dp_tensor *cc = cf ? dp_unsqueeze(cf, 1) : NULL, *tot = cf ? dp_sum(cf, 0, NULL, false) : NULL;
  dp_tensor *wm = cc ? dp_mul(cc, mean_all) : NULL, *sm = wm ? dp_sum(wm, 1, (int[]){0}, false) : NULL;
  dp_tensor *m = sm && tot ? dp_div(sm, tot) : NULL;
  dp_tensor *dev = m ? dp_sub(mean_all, m) : NULL, *sq = dev ? dp_mul(dev, dev) : NULL;
  dp_tensor *vs = sq ? dp_add(var_all, sq) : NULL, *wv = vs ? dp_mul(cc, vs) : NULL;
  dp_tensor *sv = wv ? dp_sum(wv, 1, (int[]){0}, false) : NULL, *v = sv ? dp_div(sv, tot) : NULL;
  double t = 0;
  if (v && !dp_item_d(tot, &t)) {
    if (t > 0) {
      *mean = m, *var = v, m = v = NULL;
      if (total) *total = t;
      rc = 0;
    } else {
      dp_error("%s: the counts add up to %g; at least one value per channel is needed", op, t);
    }
  }
  dp_release(cf), dp_release(cc), dp_release(tot), dp_release(wm), dp_release(sm), dp_release(m);
  dp_release(dev), dp_release(sq), dp_release(vs), dp_release(wv), dp_release(sv), dp_release(v);
  dp_set_grad_enabled(prev);
  return rc;
}

int dp_batch_norm_update_stats(dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *mean, dp_tensor *var,
                               double count, double momentum) {
  const char *op = "batch_norm_update_stats";
  if (running_mean->ndim != 1 || !dp_same_shape(running_mean, mean) || !dp_same_shape(running_var, var) ||
      !dp_same_shape(mean, var))
    return dp_error("%s: running_mean %s, running_var %s, mean %s and var %s must all be [C]", op, SHAPE(running_mean),
                    SHAPE(running_var), SHAPE(mean), SHAPE(var));
  if (dp_check_same_device(op, running_mean, mean) || dp_check_same_device(op, running_var, var)) return -1;
  if (count < 1) return dp_error("%s: count must be >= 1, got %g", op, count);
  /* PyTorch keeps the unbiased variance in running_var */
  double unbias = count > 1 ? count / (count - 1) : 1.0;
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *dm = dp_binary_scalar(DP_B_MUL, mean, momentum, false);
  dp_tensor *dv = dp_binary_scalar(DP_B_MUL, var, momentum * unbias, false);
  int rc = (dm && dv) ? 0 : -1;
  if (!rc) rc = dp_binary_scalar_(DP_B_MUL, running_mean, 1.0 - momentum);
  if (!rc) rc = dp_binary_(DP_B_ADD, running_mean, dm);
  if (!rc) rc = dp_binary_scalar_(DP_B_MUL, running_var, 1.0 - momentum);
  if (!rc) rc = dp_binary_(DP_B_ADD, running_var, dv);
  dp_release(dm), dp_release(dv);
  dp_set_grad_enabled(prev);
  return rc;
}

dp_tensor *dp_batch_norm_invstd(dp_tensor *var, double eps) {
  if (dp_check_float("batch_norm_invstd", var)) return NULL;
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *s = dp_binary_scalar(DP_B_ADD, var, eps, false), *r = s ? dp_unary(DP_U_RSQRT, s) : NULL;
  dp_release(s);
  dp_set_grad_enabled(prev);
  return r;
}

dp_tensor *dp_batch_norm_elemt(dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w, dp_tensor *b) {
  const char *op = "batch_norm_elemt";
  if (check_bn_input(op, x) || check_channel(op, "mean", mean, x) || check_channel(op, "invstd", invstd, x) ||
      check_channel(op, "weight", w, x) || check_channel(op, "bias", b, x))
    return NULL;
  int64_t n, c, inner;
  bn_geometry(x, &n, &c, &inner);
  bool fail = false;
  dp_tensor *xc = dp_contiguous_raw(x), *mc = like_x(mean, x, &fail), *sc = like_x(invstd, x, &fail);
  dp_tensor *wc = like_x(w, x, &fail), *bc = like_x(b, x, &fail);
  dp_tensor *y = xc && !fail ? dp_empty_like(xc) : NULL;
  dp_bn_args ba = {.n = n, .c = c, .inner = inner, .x = xc, .mean = mc, .invstd = sc, .w = wc, .b = bc};
  if (y && dp_backend_of(x)->bn_forward(y, &ba)) dp_clear(&y);
  dp_release(xc), dp_release(mc), dp_release(sc), dp_release(wc), dp_release(bc);
  return y;
}

int dp_batch_norm_backward_reduce(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor **sum_dy,
                                  dp_tensor **sum_dy_xhat) {
  const char *op = "batch_norm_backward_reduce";
  *sum_dy = *sum_dy_xhat = NULL;
  if (check_bn_input(op, x) || check_channel(op, "mean", mean, x) || check_channel(op, "invstd", invstd, x) ||
      dp_check_same_device(op, x, gy))
    return -1;
  if (!dp_same_shape(gy, x))
    return dp_error("%s: gradient of shape %s does not match input shape %s", op, SHAPE(gy), SHAPE(x));
  int64_t n, c, inner;
  bn_geometry(x, &n, &c, &inner);
  bool fail = false;
  dp_tensor *xc = dp_contiguous_raw(x), *gc = like_x(gy, x, &fail);
  dp_tensor *mc = like_x(mean, x, &fail), *sc = like_x(invstd, x, &fail);
  dp_tensor *s1 = xc && !fail ? dp_empty(x->dtype, 1, &c, dp_dev(x)) : NULL, *s2 = s1 ? dp_empty_like(s1) : NULL;
  dp_bn_args ba = {.n = n, .c = c, .inner = inner, .x = xc, .mean = mc, .invstd = sc, .gy = gc};
  int rc = s2 ? dp_backend_of(x)->bn_backward_reduce(s1, s2, &ba) : -1;
  dp_release(xc), dp_release(gc), dp_release(mc), dp_release(sc);
  if (rc) {
    dp_release(s1), dp_release(s2);
    return -1;
  }
  *sum_dy = s1, *sum_dy_xhat = s2;
  return 0;
}

dp_tensor *dp_batch_norm_backward_elemt(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w,
                                        dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, double count) {
  const char *op = "batch_norm_backward_elemt";
  if (check_bn_input(op, x) || check_channel(op, "mean", mean, x) || check_channel(op, "invstd", invstd, x) ||
      check_channel(op, "weight", w, x) || check_channel(op, "sum_dy", sum_dy, x) ||
      check_channel(op, "sum_dy_xhat", sum_dy_xhat, x) || dp_check_same_device(op, x, gy))
    return NULL;
  if (!dp_same_shape(gy, x)) {
    dp_error("%s: gradient of shape %s does not match input shape %s", op, SHAPE(gy), SHAPE(x));
    return NULL;
  }
  if (!(count > 0)) {
    dp_error("%s: count must be > 0, got %g", op, count);
    return NULL;
  }
  int64_t n, c, inner;
  bn_geometry(x, &n, &c, &inner);
  bool fail = false;
  dp_tensor *xc = dp_contiguous_raw(x), *gc = like_x(gy, x, &fail), *mc = like_x(mean, x, &fail);
  dp_tensor *sc = like_x(invstd, x, &fail), *wc = like_x(w, x, &fail);
  dp_tensor *s1 = like_x(sum_dy, x, &fail), *s2 = like_x(sum_dy_xhat, x, &fail);
  dp_tensor *gx = xc && !fail ? dp_empty_like(xc) : NULL;
  dp_bn_args ba = {.n = n,
                   .c = c,
                   .inner = inner,
                   .x = xc,
                   .mean = mc,
                   .invstd = sc,
                   .w = wc,
                   .gy = gc,
                   .sum_dy = s1,
                   .sum_dy_xhat = s2,
                   .count = count};
  if (gx && dp_backend_of(x)->bn_backward_elemt(gx, &ba)) dp_clear(&gx);
  dp_release(xc), dp_release(gc), dp_release(mc), dp_release(sc), dp_release(wc), dp_release(s1), dp_release(s2);
  return gx;
}

/* ---- batch norm with autograd ---- */

static int batch_norm_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *mean = dp_node_saved(n, 1), *invstd = dp_node_saved(n, 2);
  dp_tensor *w = dp_node_saved(n, 3);
  bool training = n->i[0];
  double count = n->f[0];
  dp_tensor *sum_dy = NULL, *sum_dy_xhat = NULL, *gx = NULL;
  int rc = -1;
  if (dp_batch_norm_backward_reduce(gout[0], x, mean, invstd, &sum_dy, &sum_dy_xhat)) goto out;
  if (dp_node_needs(n, 0)) {
    if (training) {
      gx = dp_batch_norm_backward_elemt(gout[0], x, mean, invstd, w, sum_dy, sum_dy_xhat, count);
    } else { /* running statistics are constants: gx = gy * w * invstd */
      dp_tensor *z = dp_zeros_like(sum_dy);
      gx = z ? dp_batch_norm_backward_elemt(gout[0], x, mean, invstd, w, z, z, count) : NULL;
      dp_release(z);
    }
    if (!gx) goto out;
    gin[0] = gx;
  }
  if (n->n_inputs > 1 && dp_node_needs(n, 1)) gin[1] = (dp_retain(sum_dy_xhat), sum_dy_xhat);
  if (n->n_inputs > 2 && dp_node_needs(n, 2)) gin[2] = (dp_retain(sum_dy), sum_dy);
  rc = 0;
out:
  dp_release(sum_dy), dp_release(sum_dy_xhat);
  return rc;
}

dp_tensor *dp_batch_norm(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                         bool training, double momentum, double eps) {
  const char *op = "batch_norm";
  if (check_bn_input(op, x) || check_channel(op, "running_mean", running_mean, x) ||
      check_channel(op, "running_var", running_var, x) || check_channel(op, "weight", w, x) ||
      check_channel(op, "bias", b, x))
    return NULL;
  if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype)) {
    dp_error("%s: weight and bias must have the input's dtype %s, got %s and %s", op, dp_dtype_name(x->dtype),
             w ? dp_dtype_name(w->dtype) : "none", b ? dp_dtype_name(b->dtype) : "none");
    return NULL;
  }
  if (!running_mean != !running_var) {
    dp_error("%s: running_mean and running_var must be given together", op);
    return NULL;
  }
  if (!training && !running_mean) {
    dp_error("%s: evaluation mode (training=false) needs running_mean and running_var", op);
    return NULL;
  }
  if (!(eps >= 0)) {
    dp_error("%s: eps must be >= 0, got %g", op, eps);
    return NULL;
  }
  int64_t n, c, inner;
  bn_geometry(x, &n, &c, &inner);
  if (training && n * inner <= 1) {
    dp_error("%s: expected more than 1 value per channel when training, got input of shape %s", op, SHAPE(x));
    return NULL;
  }
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *mean = NULL, *var = NULL, *invstd = NULL, *y = NULL;
  int64_t count = n * inner;
  /* one contiguous copy of a strided input, shared by the pieces (they
   * take a contiguous tensor as it is) and the backward */
  dp_tensor *xc = dp_contiguous_raw(x);
  bool fail = !xc;
  if (!fail && training) {
    if (dp_batch_norm_stats(xc, &mean, &var, NULL) ||
        (running_mean && dp_batch_norm_update_stats(running_mean, running_var, mean, var, (double)count, momentum)))
      fail = true;
  } else if (!fail) {
    mean = like_x(running_mean, x, &fail);
    var = like_x(running_var, x, &fail);
  }
  if (!fail) invstd = dp_batch_norm_invstd(var, eps);
  if (invstd) y = dp_batch_norm_elemt(xc, mean, invstd, w, b);
  dp_set_grad_enabled(prev);
  dp_tensor *ins[3] = {x, w, b};
  int nin = b ? 3 : w ? 2 : 1;
  if (y && dp_any_requires_grad(nin, ins)) {
    dp_node *nd = dp_node_new("BatchNormBackward", batch_norm_backward, nin, ins, 1);
    nd->i[0] = training;
    nd->f[0] = (double)count;
    dp_node_save(nd, xc);
    dp_node_save(nd, mean);
    dp_node_save(nd, invstd);
    dp_node_save(nd, w);
    dp_node_attach(nd, y, 0);
    dp_node_release(nd);
  }
  dp_release(xc), dp_release(mean), dp_release(var), dp_release(invstd);
  return y;
}

/* ---- layer norm ---- */

static int layer_norm_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *mean = dp_node_saved(n, 1), *rstd = dp_node_saved(n, 2);
  dp_tensor *w = dp_node_saved(n, 3);
  int64_t rows = dp_numel(mean), cols = rows ? dp_numel(x) / rows : 0;
  bool want_w = n->n_inputs > 1 && dp_node_needs(n, 1), want_b = n->n_inputs > 2 && dp_node_needs(n, 2);
  dp_tensor *gy = dp_contiguous_raw(gout[0]), *gx = gy ? dp_empty_like(x) : NULL;
  dp_tensor *gw = gx && want_w ? dp_empty(x->dtype, 1, &cols, dp_dev(x)) : NULL;
  dp_tensor *gb = gx && want_b ? dp_empty(x->dtype, 1, &cols, dp_dev(x)) : NULL;
  int rc = -1;
  if (gx && (!want_w || gw) && (!want_b || gb) &&
      !dp_backend_of(x)->layer_norm_backward(
          gx, gw, gb,
          &(dp_ln_args){.rows = rows, .cols = cols, .x = x, .w = w, .mean = mean, .rstd = rstd, .gy = gy})) {
    gin[0] = dp_node_needs(n, 0) ? (dp_retain(gx), gx) : NULL;
    if (gw) gin[1] = dp_reshape(gw, n->in_ndim[1], n->in_shape[1]);
    if (gb) gin[2] = dp_reshape(gb, n->in_ndim[2], n->in_shape[2]);
    rc = (gw && !gin[1]) || (gb && !gin[2]) ? -1 : 0;
  }
  dp_release(gy), dp_release(gx), dp_release(gw), dp_release(gb);
  return rc;
}

dp_tensor *dp_layer_norm(dp_tensor *x, int nd, dp_tensor *w, dp_tensor *b, double eps) {
  const char *op = "layer_norm";
  if (dp_check_float(op, x)) return NULL;
  if (nd < 1 || nd > x->ndim) {
    dp_error("%s: cannot normalise over the last %d dimensions of an input of shape %s", op, nd, SHAPE(x));
    return NULL;
  }
  const int64_t *tail = x->shape + x->ndim - nd;
  dp_tensor *aff[2] = {w, b};
  for (int k = 0; k < 2; k++) {
    dp_tensor *t = aff[k];
    if (!t) continue;
    bool same = t->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = t->shape[d] == tail[d];
    if (!same) {
      dp_error("%s: %s of shape %s does not match normalized_shape %s (the last %d dimensions of input shape %s)", op,
               k ? "bias" : "weight", SHAPE(t), dp_shp_n(nd, tail), nd, SHAPE(x));
      return NULL;
    }
    if (t->dtype != x->dtype) {
      dp_error("%s: %s must have the input's dtype %s, got %s", op, k ? "bias" : "weight", dp_dtype_name(x->dtype),
               dp_dtype_name(t->dtype));
      return NULL;
    }
    if (dp_check_same_device(op, x, t)) return NULL;
  }
  if (!(eps >= 0)) {
    dp_error("%s: eps must be >= 0, got %g", op, eps);
    return NULL;
  }
  int64_t cols = 1, rows = 1;
  for (int d = 0; d < x->ndim; d++) {
    if (d < x->ndim - nd) rows *= x->shape[d];
    else cols *= x->shape[d];
  }
  dp_tensor *xc = dp_contiguous_raw(x), *wc = w ? dp_contiguous_raw(w) : NULL, *bc = b ? dp_contiguous_raw(b) : NULL;
  dp_tensor *y = xc && (!w || wc) && (!b || bc) ? dp_empty_like(xc) : NULL;
  dp_tensor *mean = y ? dp_empty(x->dtype, 1, &rows, dp_dev(x)) : NULL, *rstd = mean ? dp_empty_like(mean) : NULL;
  dp_ln_args la = {.rows = rows, .cols = cols, .x = xc, .w = wc, .b = bc, .eps = eps};
  if (!rstd || dp_backend_of(x)->layer_norm(y, mean, rstd, &la)) dp_clear(&y);
  dp_tensor *ins[3] = {x, w, b};
  int nin = b ? 3 : w ? 2 : 1;
  if (y && dp_any_requires_grad(nin, ins)) {
    dp_node *n = dp_node_new("LayerNormBackward", layer_norm_backward, nin, ins, 1);
    dp_node_save(n, xc);
    dp_node_save(n, mean);
    dp_node_save(n, rstd);
    dp_node_save(n, wc);
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  dp_release(xc), dp_release(wc), dp_release(bc), dp_release(mean), dp_release(rstd);
  return y;
}
