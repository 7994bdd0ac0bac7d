/* group_norm with autograd over the backends that have the fused kernel
 * (backend.h's group_norm, dp_gn_args; the CPU's today). The Lua side
 * (nn/norm_more.lua) checks the arguments as PyTorch does and composes
 * layer_norm and the channels' affine map where the backend has none; this
 * checks again what a direct core call could get wrong. The forward's
 * statistics (float64 [n * groups]) are saved for the backward, which
 * returns gx and the weight's and bias's gradients in one backend call.
 * Under autocast it runs in float32, as PyTorch's CPU group_norm. */
#include "ops/autocast.h"
#include "ops/model_ops.h"
#include "ops/op_util.h"

static int group_norm_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *w = dp_node_saved(n, 1);
  dp_tensor *mean = dp_node_saved(n, 2), *rstd = dp_node_saved(n, 3);
  int64_t c = x->shape[1], groups = n->i[0];
  bool want_w = n->n_inputs > 1 && dp_node_needs(n, 1), want_b = n->n_inputs > 2 && dp_node_needs(n, 2);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gyt = gy && gy->dtype != x->dtype ? dp_scope_add(&s, dp_to(gy, x->dtype, dp_dev(x))) : gy;
  dp_tensor *gx = gyt && dp_node_needs(n, 0) ? dp_scope_add(&s, dp_empty_like(x)) : NULL;
  dp_tensor *gw = gyt && want_w ? dp_scope_add(&s, dp_empty(x->dtype, 1, &c, dp_dev(x))) : NULL;
  dp_tensor *gb = gyt && want_b ? dp_scope_add(&s, dp_empty(x->dtype, 1, &c, dp_dev(x))) : NULL;
  if (!gyt || (dp_node_needs(n, 0) && !gx) || (want_w && !gw) || (want_b && !gb)) return -1;
  int64_t rows = x->shape[0] * c, hw = rows > 0 ? dp_numel(x) / rows : 0;
  dp_gn_args ga = {
      .n = x->shape[0], .c = c, .hw = hw, .groups = groups, .x = x, .w = w, .mean = mean, .rstd = rstd, .gy = gyt};
  if (rows > 0 && hw > 0) {
    if (dp_backend_of(x)->group_norm_backward(gx, gw, gb, &ga)) return -1;
  } else if ((gw && dp_fill_(gw, 0)) || (gb && dp_fill_(gb, 0))) { /* no values: the sums are 0 */
    return -1;
  }
  if (gx) gin[0] = dp_scope_keep(&s, gx);
  if (gw) gin[1] = dp_scope_keep(&s, gw);
  if (gb) gin[2] = dp_scope_keep(&s, gb);
  return 0;
}

static dp_tensor *group_norm_impl(dp_tensor *x, int64_t groups, dp_tensor *w, dp_tensor *b, double eps) {
  const char *op = "group_norm";
  const dp_backend *be = dp_backend_of(x);
  if (!be->group_norm) {
    dp_error("%s: the %s backend has no group_norm kernel", op, be->name);
    return NULL;
  }
  if (x->dtype != DP_F32 && x->dtype != DP_F64) {
    dp_error("%s: expected a float32 or float64 input, got %s", op, dp_dtype_name(x->dtype));
    return NULL;
  }
  if (x->ndim < 2 || groups < 1 || x->shape[1] % groups != 0) {
    dp_error("%s: expected an input [N, C, *] with C divisible by groups, got shape %s and %lld groups", op, SHAPE(x),
             (long long)groups);
    return NULL;
  }
  int64_t c = x->shape[1];
  dp_tensor *aff[2] = {w, b};
  for (int k = 0; k < 2; k++)
    if (aff[k] && (aff[k]->ndim != 1 || aff[k]->shape[0] != c || aff[k]->dtype != x->dtype ||
                   dp_check_same_device(op, x, aff[k]))) {
      dp_error("%s: %s must be a %s tensor of shape [%lld], got %s %s", op, k ? "bias" : "weight",
               dp_dtype_name(x->dtype), (long long)c, dp_dtype_name(aff[k]->dtype), SHAPE(aff[k]));
      return NULL;
    }
  if (!(eps >= 0)) {
    dp_error("%s: eps must be >= 0, got %g", op, eps);
    return NULL;
  }
  int64_t stats = x->shape[0] * groups;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *wc = w ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL,
            *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  dp_tensor *y = xc && (!w || wc) && (!b || bc) ? dp_scope_add(&s, dp_empty_like(xc)) : NULL;
  dp_tensor *mean = y ? dp_scope_add(&s, dp_empty(DP_F64, 1, &stats, dp_dev(x))) : NULL;
  dp_tensor *rstd = mean ? dp_scope_add(&s, dp_empty(DP_F64, 1, &stats, dp_dev(x))) : NULL;
  if (!rstd) return NULL;
  dp_gn_args ga = {.n = x->shape[0],
                   .c = c,
                   .hw = c ? dp_numel(x) / (x->shape[0] ? x->shape[0] * c : 1) : 0,
                   .groups = groups,
                   .x = xc,
                   .w = wc,
                   .b = bc,
                   .eps = eps};
  if (stats > 0 && ga.hw > 0 && be->group_norm(y, mean, rstd, &ga)) return NULL;
  dp_scope_keep(&s, y);
  dp_tensor *ins[3] = {x, w, b};
  int nin = b ? 3 : w ? 2 : 1;
  if (dp_any_requires_grad(nin, ins)) {
    dp_node *n = dp_node_new("NativeGroupNormBackward", group_norm_backward, nin, ins, 1);
    n->i[0] = groups;
    dp_node_save(n, xc);
    dp_node_save(n, wc);
    dp_node_save(n, mean);
    dp_node_save(n, rstd);
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}

dp_tensor *dp_group_norm(dp_tensor *x, int64_t groups, dp_tensor *w, dp_tensor *b, double eps) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, group_norm_impl(x, groups, w, b, eps));
}
