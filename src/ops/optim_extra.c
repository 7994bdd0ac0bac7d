/* Adaptive average pooling (with its gradient) and clip_grad_norm_: one pass over all gradients for their norm, then
 * each scaled in place by a 0-dim factor computed on their device (no host round trip, as PyTorch's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"

/* ---- adaptive_avg_pool2d ---- */
static int adaptive_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int nd = n->in_ndim[0];
  const int64_t *sh = n->in_shape[0];
  int64_t h = sh[nd - 2], w = sh[nd - 1], oh = n->i[0], ow = n->i[1], planes = 1;
  for (int d = 0; d < nd - 2; d++) planes *= sh[d];
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = gy ? dp_scope_add(&s, dp_empty(n->in_dtype[0], nd, sh, dp_dev(gy))) : NULL;
  if (!gx || dp_backend_of(gx)->adaptive_avg_pool2d_backward(gx, gy, planes, h, w, oh, ow)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_adaptive_avg_pool2d(dp_tensor *x, int64_t oh, int64_t ow) {
  if (x->ndim != 3 && x->ndim != 4) {
    dp_error("adaptive_avg_pool2d: expected a 3- or 4-dimensional input ([N, C, H, W] or [C, H, W]), got shape %s",
             SHAPE(x));
    return NULL;
  }
  if (dp_check_float("adaptive_avg_pool2d", x)) return NULL;
  int nd = x->ndim;
  int64_t h = x->shape[nd - 2], w = x->shape[nd - 1], planes = 1;
  if (oh < 1 || ow < 1) {
    dp_error("adaptive_avg_pool2d: output size (%" PRId64 ", %" PRId64 ") must be positive", oh, ow);
    return NULL;
  }
  if (h < 1 || w < 1) {
    dp_error("adaptive_avg_pool2d: the input's spatial size %s is empty", SHAPE(x));
    return NULL;
  }
  for (int d = 0; d < nd - 2; d++) planes *= x->shape[d];
  int64_t sh[4];
  memcpy(sh, x->shape, sizeof(int64_t) * (size_t)nd);
  sh[nd - 2] = oh, sh[nd - 1] = ow;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *y = xc ? dp_scope_add(&s, dp_empty(x->dtype, nd, sh, dp_dev(x))) : NULL;
  if (!y || dp_backend_of(x)->adaptive_avg_pool2d(y, xc, planes, h, w, oh, ow)) return NULL;
  dp_scope_keep(&s, y);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("AdaptiveAvgPool2DBackward", adaptive_backward, 1, &x, 1);
    n->i[0] = oh, n->i[1] = ow;
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}

dp_tensor *dp_clip_grad_norm_(dp_tensor *const *gs, int n, double max_norm, double p, bool error_if_nonfinite) {
  if (!(p == p) || (p < 0 && !isinf(p)) || p == 0) {
    dp_error("clip_grad_norm_: norm_type must be > 0 or inf, got %g", p);
    return NULL;
  }
  if (max_norm != max_norm) {
    dp_error("clip_grad_norm_: max_norm is NaN");
    return NULL;
  }
  dp_device dev = n ? dp_dev(gs[0]) : dp_cpu();
  dp_dtype dt = DP_F32;
  for (int i = 0; i < n; i++) {
    if (!dp_dtype_is_float(gs[i]->dtype)) {
      dp_error("clip_grad_norm_: gradient %d is %s, expected floating point", i + 1, dp_dtype_name(gs[i]->dtype));
      return NULL;
    }
    if (!dp_device_eq(dp_dev(gs[i]), dev)) {
      dp_error("clip_grad_norm_: the gradients are on more than one device (gradient %d)", i + 1);
      return NULL;
    }
    if (gs[i]->dtype == DP_F64) dt = DP_F64;
  }
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *acc = dp_scope_add(&s, dp_zeros(DP_F64, 0, NULL, dev));
  dp_tensor *total = NULL, *coef = NULL;
  if (acc) {
    /* the one pass: every gradient in one call (contiguous, as gradients usually are) */
    dp_tensor **cs = dp_xcalloc((size_t)(n ? n : 1), sizeof *cs);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
      if (!(cs[i] = dp_contiguous_raw(gs[i]))) rc = -1;
    if (!rc) rc = dp_backend_of(acc)->pow_sum_list(acc, (const dp_tensor *const *)cs, n, p);
    for (int i = 0; i < n; i++) dp_clear(&cs[i]);
    free(cs);
    if (!rc) {
      dp_tensor *t = isinf(p) || p == 1 ? acc : dp_scope_add(&s, dp_binary_scalar(DP_B_POW, acc, 1.0 / p, false));
      total = t ? dp_scope_add(&s, dp_to(t, dt, dev)) : NULL;
    }
  }
  if (total && error_if_nonfinite) {
    double v;
    if (dp_item_d(total, &v)) total = NULL;
    else if (!isfinite(v)) {
      dp_error("clip_grad_norm_: the total norm of order %g of the gradients is non-finite (%g), so they cannot be "
               "clipped (error_if_nonfinite=true)",
               p, v);
      total = NULL;
    }
  }
  if (total) { /* min(1, max_norm / (total + 1e-6)), in the gradients' dtype */
    dp_tensor *den = dp_scope_add(&s, dp_binary_scalar(DP_B_ADD, total, 1e-6, false));
    dp_tensor *q = den ? dp_scope_add(&s, dp_binary_scalar(DP_B_DIV, den, max_norm, true)) : NULL;
    coef = q ? dp_scope_add(&s, dp_binary_scalar(DP_B_MIN, q, 1.0, false)) : NULL;
  }
  for (int i = 0; coef && i < n; i++) {
    DP_SCOPE(each);
    dp_tensor *c = coef->dtype == gs[i]->dtype ? coef : dp_scope_add(&each, dp_to(coef, gs[i]->dtype, dev));
    if (!c || dp_binary_(DP_B_MUL, gs[i], c)) coef = NULL;
  }
  dp_set_grad_enabled(prev);
  return coef ? dp_scope_keep(&s, total) : NULL;
}
