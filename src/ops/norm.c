/* Batch norm and layer norm with their gradients.
 *
 * Batch norm is exposed as pieces without autograd (stats, gather, running
 * update, elemt, backward reduce, backward elemt) because SyncBatchNorm
 * runs the same pieces with all-reduces in between: per-rank statistics are
 * gathered into global ones before the apply, and the two per-channel sums
 * of the backward are all-reduced before the input gradient. dp_batch_norm
 * is the single-process composition with an autograd node;
 * dp_batch_norm_relu the same with the ReLU after it fused into its passes
 * (dp_bn_args.relu) where the backend has that. */
#include <math.h>
#include <string.h>

#include "ops/autocast.h"
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

/* t as a contiguous tensor of x's dtype (t itself when it is one already),
 * owned by scope s; NULL stays NULL, and *fail records a failure. */
static dp_tensor *like_x(dp_scope *s, dp_tensor *t, const dp_tensor *x, bool *fail) {
  if (!t) return NULL;
  dp_tensor *r;
  if (t->dtype == x->dtype) r = dp_scope_add(s, dp_contiguous_raw(t));
  else if ((r = dp_scope_add(s, dp_empty(x->dtype, t->ndim, t->shape, dp_dev(t)))) && dp_copy_(r, t)) r = NULL;
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
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *m = xc ? dp_scope_add(&s, dp_empty(x->dtype, 1, &c, dp_dev(x))) : NULL;
  dp_tensor *v = m ? dp_scope_add(&s, dp_empty_like(m)) : NULL;
  dp_bn_args ba = {.n = n, .c = c, .inner = inner, .x = xc};
  if (!v || dp_backend_of(x)->bn_stats(m, v, &ba)) return -1;
  *mean = dp_scope_keep(&s, m), *var = dp_scope_keep(&s, v);
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
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *cf = dp_scope_add(&s, dp_to(counts, mean_all->dtype, dp_dev(mean_all)));
  dp_tensor *cc = cf ? dp_scope_add(&s, dp_unsqueeze(cf, 1)) : NULL;
  dp_tensor *tot = cf ? dp_scope_add(&s, dp_sum(cf, 0, NULL, false)) : NULL;
  dp_tensor *wm = cc ? dp_scope_add(&s, dp_mul(cc, mean_all)) : NULL;
  dp_tensor *sm = wm ? dp_scope_add(&s, dp_sum(wm, 1, (int[]){0}, false)) : NULL;
  dp_tensor *m = sm && tot ? dp_scope_add(&s, dp_div(sm, tot)) : NULL;
  dp_tensor *dev = m ? dp_scope_add(&s, dp_sub(mean_all, m)) : NULL;
  dp_tensor *sq = dev ? dp_scope_add(&s, dp_mul(dev, dev)) : NULL;
  dp_tensor *vs = sq ? dp_scope_add(&s, dp_add(var_all, sq)) : NULL;
  dp_tensor *wv = vs ? dp_scope_add(&s, dp_mul(cc, vs)) : NULL;
  dp_tensor *sv = wv ? dp_scope_add(&s, dp_sum(wv, 1, (int[]){0}, false)) : NULL;
  dp_tensor *v = sv ? dp_scope_add(&s, dp_div(sv, tot)) : NULL;
  dp_set_grad_enabled(prev);
  double t = 0;
  if (!v || dp_item_d(tot, &t)) return -1;
  if (!(t > 0)) return dp_error("%s: the counts add up to %g; at least one value per channel is needed", op, t);
  *mean = dp_scope_keep(&s, m), *var = dp_scope_keep(&s, v);
  if (total) *total = t;
  return 0;
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
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *dm = dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, mean, momentum, false));
  dp_tensor *dv = dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, var, momentum * unbias, false));
  int rc = (dm && dv) ? 0 : -1;
  if (!rc) rc = dp_binary_scalar_(DP_B_MUL, running_mean, 1.0 - momentum);
  if (!rc) rc = dp_binary_(DP_B_ADD, running_mean, dm);
  if (!rc) rc = dp_binary_scalar_(DP_B_MUL, running_var, 1.0 - momentum);
  if (!rc) rc = dp_binary_(DP_B_ADD, running_var, dv);
  dp_set_grad_enabled(prev);
  return rc;
}

dp_tensor *dp_batch_norm_invstd(dp_tensor *var, double eps) {
  if (dp_check_float("batch_norm_invstd", var)) return NULL;
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *ve = dp_scope_add(&s, dp_binary_scalar(DP_B_ADD, var, eps, false)),
            *r = ve ? dp_unary(DP_U_RSQRT, ve) : NULL;
  dp_set_grad_enabled(prev);
  return r;
}

/* relu: relu(y) in the same pass (the backend's fused path: the caller
 * checks it applies) */
static dp_tensor *bn_elemt(dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w, dp_tensor *b, bool relu) {
  const char *op = "batch_norm_elemt";
  if (check_bn_input(op, x) || check_channel(op, "mean", mean, x) || check_channel(op, "invstd", invstd, x) ||
      check_channel(op, "weight", w, x) || check_channel(op, "bias", b, x))
    return NULL;
  int64_t n, c, inner;
  bn_geometry(x, &n, &c, &inner);
  DP_SCOPE(s);
  bool fail = false;
  dp_bn_args ba = {.n = n,
                   .c = c,
                   .inner = inner,
                   .x = dp_scope_add(&s, dp_contiguous_raw(x)),
                   .mean = like_x(&s, mean, x, &fail),
                   .invstd = like_x(&s, invstd, x, &fail),
                   .w = like_x(&s, w, x, &fail),
                   .b = like_x(&s, b, x, &fail),
                   .relu = relu};
  dp_tensor *y = ba.x && !fail ? dp_scope_add(&s, dp_empty_like(ba.x)) : NULL;
  if (!y || dp_backend_of(x)->bn_forward(y, &ba)) return NULL;
  return dp_scope_keep(&s, y);
}

dp_tensor *dp_batch_norm_elemt(dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w, dp_tensor *b) {
  return bn_elemt(x, mean, invstd, w, b, false);
}

/* relu: gy is the gradient of relu(batch_norm(x)) with the forward's w and
 * b (the ReLU's mask is recomputed from them, see dp_bn_args) */
static int bn_backward_reduce(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w,
                              dp_tensor *b, bool relu, dp_tensor **sum_dy, dp_tensor **sum_dy_xhat) {
  const char *op = "batch_norm_backward_reduce";
  *sum_dy = *sum_dy_xhat = NULL;
  if (check_bn_input(op, x) || check_channel(op, "mean", mean, x) || check_channel(op, "invstd", invstd, x) ||
      dp_check_same_device(op, x, gy))
    return -1;
  if (!dp_same_shape(gy, x))
    return dp_error("%s: gradient of shape %s does not match input shape %s", op, SHAPE(gy), SHAPE(x));
  int64_t n, c, inner;
  bn_geometry(x, &n, &c, &inner);
  DP_SCOPE(s);
  bool fail = false;
  dp_bn_args ba = {.n = n,
                   .c = c,
                   .inner = inner,
                   .x = dp_scope_add(&s, dp_contiguous_raw(x)),
                   .gy = like_x(&s, gy, x, &fail),
                   .mean = like_x(&s, mean, x, &fail),
                   .invstd = like_x(&s, invstd, x, &fail),
                   .w = relu ? like_x(&s, w, x, &fail) : NULL,
                   .b = relu ? like_x(&s, b, x, &fail) : NULL,
                   .relu = relu};
  dp_tensor *s1 = ba.x && !fail ? dp_scope_add(&s, dp_empty(x->dtype, 1, &c, dp_dev(x))) : NULL;
  dp_tensor *s2 = s1 ? dp_scope_add(&s, dp_empty_like(s1)) : NULL;
  if (!s2 || dp_backend_of(x)->bn_backward_reduce(s1, s2, &ba)) return -1;
  *sum_dy = dp_scope_keep(&s, s1), *sum_dy_xhat = dp_scope_keep(&s, s2);
  return 0;
}

int dp_batch_norm_backward_reduce(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor **sum_dy,
                                  dp_tensor **sum_dy_xhat) {
  return bn_backward_reduce(gy, x, mean, invstd, NULL, NULL, false, sum_dy, sum_dy_xhat);
}

static dp_tensor *bn_backward_elemt(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w,
                                    dp_tensor *b, bool relu, dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, double count) {
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
  DP_SCOPE(s);
  bool fail = false;
  dp_bn_args ba = {.n = n,
                   .c = c,
                   .inner = inner,
                   .x = dp_scope_add(&s, dp_contiguous_raw(x)),
                   .gy = like_x(&s, gy, x, &fail),
                   .mean = like_x(&s, mean, x, &fail),
                   .invstd = like_x(&s, invstd, x, &fail),
                   .w = like_x(&s, w, x, &fail),
                   .sum_dy = like_x(&s, sum_dy, x, &fail),
                   .sum_dy_xhat = like_x(&s, sum_dy_xhat, x, &fail),
                   .count = count,
                   .b = relu ? like_x(&s, b, x, &fail) : NULL,
                   .relu = relu};
  dp_tensor *gx = ba.x && !fail ? dp_scope_add(&s, dp_empty_like(ba.x)) : NULL;
  if (!gx || dp_backend_of(x)->bn_backward_elemt(gx, &ba)) return NULL;
  return dp_scope_keep(&s, gx);
}

dp_tensor *dp_batch_norm_backward_elemt(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w,
                                        dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, double count) {
  return bn_backward_elemt(gy, x, mean, invstd, w, NULL, false, sum_dy, sum_dy_xhat, count);
}

/* ---- batch norm with autograd ---- */

static int batch_norm_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *mean = dp_node_saved(n, 1), *invstd = dp_node_saved(n, 2);
  dp_tensor *w = dp_node_saved(n, 3), *b = dp_node_saved(n, 4);
  bool training = n->i[0], relu = n->i[1];
  double count = n->f[0];
  DP_SCOPE(s);
  dp_tensor *sum_dy = NULL, *sum_dy_xhat = NULL;
  if (bn_backward_reduce(gout[0], x, mean, invstd, w, b, relu, &sum_dy, &sum_dy_xhat)) return -1;
  dp_scope_add(&s, sum_dy), dp_scope_add(&s, sum_dy_xhat);
  if (dp_node_needs(n, 0)) {
    if (training) {
      gin[0] = bn_backward_elemt(gout[0], x, mean, invstd, w, b, relu, sum_dy, sum_dy_xhat, count);
    } else { /* running statistics are constants: gx = gy * w * invstd (the count unused: an empty batch's 0
              * would be refused) */
      dp_tensor *z = dp_scope_add(&s, dp_zeros_like(sum_dy));
      gin[0] = z ? bn_backward_elemt(gout[0], x, mean, invstd, w, b, relu, z, z, count > 0 ? count : 1) : NULL;
    }
    if (!gin[0]) return -1;
  }
  if (n->n_inputs > 1 && dp_node_needs(n, 1)) gin[1] = (dp_retain(sum_dy_xhat), sum_dy_xhat);
  if (n->n_inputs > 2 && dp_node_needs(n, 2)) gin[2] = (dp_retain(sum_dy), sum_dy);
  return 0;
}

static dp_tensor *batch_norm_impl(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                  dp_tensor *b, bool training, double momentum, double eps, bool relu) {
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
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *mean = NULL, *var = NULL, *invstd = NULL, *y = NULL;
  int64_t count = n * inner;
  /* one contiguous copy of a strided input, shared by the pieces (they
   * take a contiguous tensor as it is) and the backward */
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  bool fail = !xc;
  if (!fail && training) {
    fail = dp_batch_norm_stats(xc, &mean, &var, NULL) != 0;
    dp_scope_add(&s, mean), dp_scope_add(&s, var);
    if (!fail && running_mean)
      fail = dp_batch_norm_update_stats(running_mean, running_var, mean, var, (double)count, momentum) != 0;
  } else if (!fail) {
    mean = like_x(&s, running_mean, x, &fail);
    var = like_x(&s, running_var, x, &fail);
  }
  if (!fail) invstd = dp_scope_add(&s, dp_batch_norm_invstd(var, eps));
  if (invstd) y = bn_elemt(xc, mean, invstd, w, b, relu);
  dp_set_grad_enabled(prev);
  dp_tensor *ins[3] = {x, w, b};
  int nin = b ? 3 : w ? 2 : 1;
  if (y && dp_any_requires_grad(nin, ins)) {
    dp_node *nd = dp_node_new(relu ? "BatchNormReluBackward" : "BatchNormBackward", batch_norm_backward, nin, ins, 1);
    nd->i[0] = training;
    nd->i[1] = relu;
    nd->f[0] = (double)count;
    dp_node_save(nd, xc);
    dp_node_save(nd, mean);
    dp_node_save(nd, invstd);
    dp_node_save(nd, w);
    dp_node_save(nd, relu ? b : NULL); /* the ReLU's mask is recomputed from it */
    dp_node_attach(nd, y, 0);
    dp_node_release(nd);
  }
  return y;
}

/* Autocast (autocast.h) normalises bfloat16 / float16 inputs in float32,
 * with the float32 weights and statistics as they are. */
dp_tensor *dp_batch_norm(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                         bool training, double momentum, double eps) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, batch_norm_impl(x, running_mean, running_var, w, b, training, momentum, eps, false));
}

/* The CPU kernels fuse the ReLU for float32 and float64 (other dtypes'
 * stores round, which could flip the mask) on planes of >= 64 values;
 * elsewhere it is the two ops. The fused kernels work row by row (a few
 * calls per plane), which costs more than it saves on small planes:
 * measured forward + backward at batch 64, 2 threads, fused against the two
 * ops: 32x28x28 1.23x, 16x16x16 1.15x, 16x8x8 1.02x, 32x4x4 0.92x, 64x2x2
 * 0.29x. */
#define BN_RELU_MIN_PLANE 64

static dp_tensor *batch_norm_relu_impl(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                       dp_tensor *b, bool training, double momentum, double eps) {
  int64_t plane = 1;
  for (int d = 2; d < x->ndim; d++) plane *= x->shape[d];
  if (dp_dev(x).type == DP_CPU && (x->dtype == DP_F32 || x->dtype == DP_F64) && x->ndim >= 2 &&
      plane >= BN_RELU_MIN_PLANE)
    return batch_norm_impl(x, running_mean, running_var, w, b, training, momentum, eps, true);
  dp_tensor *y = batch_norm_impl(x, running_mean, running_var, w, b, training, momentum, eps, false);
  dp_tensor *r = y ? dp_unary(DP_U_RELU, y) : NULL;
  dp_release(y);
  return r;
}

dp_tensor *dp_batch_norm_relu(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                              bool training, double momentum, double eps) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, batch_norm_relu_impl(x, running_mean, running_var, w, b, training, momentum, eps));
}

/* ---- layer norm ---- */

static int layer_norm_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *mean = dp_node_saved(n, 1), *rstd = dp_node_saved(n, 2);
  dp_tensor *w = dp_node_saved(n, 3);
  int64_t rows = dp_numel(mean), cols = n->i[0]; /* the normalised extent (saved: rows may be 0) */
  bool want_w = n->n_inputs > 1 && dp_node_needs(n, 1), want_b = n->n_inputs > 2 && dp_node_needs(n, 2);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = gy ? dp_scope_add(&s, dp_empty_like(x)) : NULL;
  dp_tensor *gw = gx && want_w ? dp_scope_add(&s, dp_empty(x->dtype, 1, &cols, dp_dev(x))) : NULL;
  dp_tensor *gb = gx && want_b ? dp_scope_add(&s, dp_empty(x->dtype, 1, &cols, dp_dev(x))) : NULL;
  dp_ln_args la = {.rows = rows, .cols = cols, .x = x, .w = w, .mean = mean, .rstd = rstd, .gy = gy};
  if (!gx || (want_w && !gw) || (want_b && !gb) || dp_backend_of(x)->layer_norm_backward(gx, gw, gb, &la)) return -1;
  if (dp_node_needs(n, 0)) gin[0] = dp_scope_keep(&s, gx);
  if (gw && !(gin[1] = dp_reshape(gw, n->in_ndim[1], n->in_shape[1]))) return -1;
  if (gb && !(gin[2] = dp_reshape(gb, n->in_ndim[2], n->in_shape[2]))) return -1;
  return 0;
}

static dp_tensor *layer_norm_impl(dp_tensor *x, int nd, dp_tensor *w, dp_tensor *b, double eps);

dp_tensor *dp_layer_norm(dp_tensor *x, int nd, dp_tensor *w, dp_tensor *b, double eps) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, layer_norm_impl(x, nd, w, b, eps));
}

static dp_tensor *layer_norm_impl(dp_tensor *x, int nd, dp_tensor *w, dp_tensor *b, double eps) {
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
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *wc = w ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL,
            *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  dp_tensor *y = xc && (!w || wc) && (!b || bc) ? dp_scope_add(&s, dp_empty_like(xc)) : NULL;
  dp_tensor *mean = y ? dp_scope_add(&s, dp_empty(x->dtype, 1, &rows, dp_dev(x))) : NULL;
  dp_tensor *rstd = mean ? dp_scope_add(&s, dp_empty_like(mean)) : NULL;
  dp_ln_args la = {.rows = rows, .cols = cols, .x = xc, .w = wc, .b = bc, .eps = eps};
  if (!rstd || dp_backend_of(x)->layer_norm(y, mean, rstd, &la)) return NULL;
  dp_scope_keep(&s, y);
  dp_tensor *ins[3] = {x, w, b};
  int nin = b ? 3 : w ? 2 : 1;
  if (dp_any_requires_grad(nin, ins)) {
    dp_node *n = dp_node_new("LayerNormBackward", layer_norm_backward, nin, ins, 1);
    n->i[0] = cols;
    dp_node_save(n, xc);
    dp_node_save(n, mean);
    dp_node_save(n, rstd);
    dp_node_save(n, wc);
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}
