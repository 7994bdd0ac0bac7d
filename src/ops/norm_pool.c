/* max_pool2d(relu(batch_norm(x))) as one op (nn.Sequential's BatchNorm2d,
 * ReLU, MaxPool2d): the same values, gradients and running statistics as
 * the three ops, in fewer passes over memory and with neither the
 * normalised output nor the pooled indices kept for the backward (the
 * backend remakes both from x: backend.h's bn_relu_pool_backward).
 *
 * Fused where the backend has the kernel (the CPU), for float32 4-d inputs
 * with planes of >= 64 values (the fused batch norm + ReLU's threshold,
 * norm.c) and weight and bias given together or not at all, all float32;
 * anything else (other dtypes and devices, bad arguments, autocast's
 * half-precision inputs) runs as dp_batch_norm_relu then dp_max_pool2d,
 * whose errors name the bad argument.
 *
 * SyncBatchNorm (distributed/sync_bn.c) runs the same fused kernels with
 * hooks (dp_bn_sync) for the global statistics and for the all-reduce of
 * the backward's sums, which falls between the kernel's two passes. */
#include <stdlib.h>

#include "ops/op_util.h"
#include "ops/pool_geom.h"

#define BN_POOL_MIN_PLANE 64

/* A per-channel float32 [c] CPU tensor, or NULL. */
static bool channel_ok(const dp_tensor *t, const dp_tensor *x) {
  return !t || (t->ndim == 1 && t->shape[0] == x->shape[1] && t->dtype == DP_F32 && dp_dev(t).type == dp_dev(x).type);
}

bool dp_bn_relu_pool_fusable(const dp_tensor *x, const dp_tensor *rm, const dp_tensor *rv, const dp_tensor *w,
                             const dp_tensor *b, bool training, double eps) {
  if (dp_dev(x).type != DP_CPU || !dp_backend_of(x)->bn_relu_pool_backward || x->dtype != DP_F32 || x->ndim != 4 ||
      x->shape[2] * x->shape[3] < BN_POOL_MIN_PLANE || x->shape[0] < 1 || x->shape[1] < 1)
    return false;
  if (!w != !b || !rm != !rv || (!training && !rm) || !(eps >= 0)) return false;
  return channel_ok(rm, x) && channel_ok(rv, x) && channel_ok(w, x) && channel_ok(b, x);
}

static int bn_relu_pool_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *mean = dp_node_saved(n, 1), *invstd = dp_node_saved(n, 2);
  dp_tensor *w = dp_node_saved(n, 3), *b = dp_node_saved(n, 4);
  const dp_bn_sync *sync = n->ctx;
  DP_SCOPE(s);
  dp_tensor *gy = gout[0]->dtype == DP_F32 ? dp_scope_add(&s, dp_contiguous_raw(gout[0]))
                                           : dp_scope_add(&s, dp_to(gout[0], DP_F32, dp_dev(x)));
  if (!gy) return -1;
  dp_window2d g = {.n = x->shape[0],
                   .c = x->shape[1],
                   .h = x->shape[2],
                   .w = x->shape[3],
                   .kh = n->i[1],
                   .kw = n->i[2],
                   .sh = n->i[3],
                   .sw = n->i[4],
                   .ph = n->i[5],
                   .pw = n->i[6],
                   .dh = 1,
                   .dw = 1,
                   .oh = gy->shape[2],
                   .ow = gy->shape[3]};
  int64_t c = g.c;
  dp_tensor *gx = dp_scope_add(&s, dp_empty_like(x));
  dp_tensor *s1 = gx ? dp_scope_add(&s, dp_empty(DP_F32, 1, &c, dp_dev(x))) : NULL;
  dp_tensor *s2 = s1 ? dp_scope_add(&s, dp_empty_like(s1)) : NULL;
  dp_bn_args ba = {.n = g.n,
                   .c = c,
                   .inner = g.h * g.w,
                   .x = x,
                   .mean = mean,
                   .invstd = invstd,
                   .w = w,
                   .b = b,
                   .gy = gy,
                   .count = n->f[0],
                   .relu = true,
                   .pool = &g,
                   .eval_stats = !n->i[0],
                   .phase = sync ? 1 : 0};
  if (!s2 || dp_backend_of(x)->bn_relu_pool_backward(gx, s1, s2, &ba)) return -1;
  if (sync) { /* this rank's sums -> every rank's, then the second pass from them */
    dp_tensor *parts[2] = {s1, s2};
    dp_tensor *both = dp_scope_add(&s, dp_cat(2, parts, 0));
    dp_tensor *sd = both ? dp_scope_add(&s, dp_narrow(both, 0, 0, c)) : NULL;
    dp_tensor *sdx = sd ? dp_scope_add(&s, dp_narrow(both, 0, c, c)) : NULL;
    if (!sdx || sync->sum(sync->group, both)) return -1;
    ba.phase = 2, ba.sum_dy = sd, ba.sum_dy_xhat = sdx, ba.gy = NULL;
    if (dp_backend_of(x)->bn_relu_pool_backward(gx, NULL, NULL, &ba)) return -1;
  }
  if (dp_node_needs(n, 0)) gin[0] = dp_scope_keep(&s, gx);
  if (n->n_inputs > 1 && dp_node_needs(n, 1)) gin[1] = dp_scope_keep(&s, s2);
  if (n->n_inputs > 2 && dp_node_needs(n, 2)) gin[2] = dp_scope_keep(&s, s1);
  return 0;
}

static dp_tensor *fused(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                        bool training, double momentum, double eps, const dp_pool2d_args *pa, const dp_bn_sync *sync) {
  dp_window2d g;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_pool2d_input("max_pool2d", x, pa, &g));
  if (!xc) return NULL;
  int64_t inner = g.h * g.w;
  double count = (double)(g.n * inner);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *mean = NULL, *var = NULL, *invstd = NULL, *y = NULL;
  bool fail = false;
  if (training) {
    fail = (sync ? sync->stats(sync->group, xc, &mean, &var, &count) : dp_batch_norm_stats(xc, &mean, &var, NULL)) != 0;
    dp_scope_add(&s, mean), dp_scope_add(&s, var);
    if (!fail && running_mean)
      fail = dp_batch_norm_update_stats(running_mean, running_var, mean, var, count, momentum) != 0;
  } else {
    fail = !(mean = dp_scope_add(&s, dp_contiguous_raw(running_mean))) ||
           !(var = dp_scope_add(&s, dp_contiguous_raw(running_var)));
  }
  if (!fail) invstd = dp_scope_add(&s, dp_batch_norm_invstd(var, eps));
  dp_tensor *wc = w ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL,
            *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  int64_t sh[4] = {g.n, g.c, g.oh, g.ow};
  if (invstd && (!w || wc) && (!b || bc)) y = dp_scope_add(&s, dp_empty(DP_F32, 4, sh, dp_dev(x)));
  dp_bn_args ba = {.n = g.n,
                   .c = g.c,
                   .inner = inner,
                   .x = xc,
                   .mean = mean,
                   .invstd = invstd,
                   .w = wc,
                   .b = bc,
                   .relu = true,
                   .pool = &g};
  int rc = y ? dp_backend_of(x)->bn_forward(y, &ba) : -1;
  dp_set_grad_enabled(prev);
  if (rc) return NULL;
  dp_scope_keep(&s, y);
  dp_tensor *ins[3] = {x, w, b};
  int nin = b ? 3 : 1;
  if (dp_any_requires_grad(nin, ins)) {
    dp_node *nd = dp_node_new(sync ? "SyncBatchNormReluMaxPoolBackward" : "BatchNormReluMaxPoolBackward",
                              bn_relu_pool_backward, nin, ins, 1);
    nd->i[0] = training;
    nd->i[1] = g.kh, nd->i[2] = g.kw, nd->i[3] = g.sh, nd->i[4] = g.sw, nd->i[5] = g.ph, nd->i[6] = g.pw;
    nd->f[0] = count;
    if (sync && training) { /* the hooks' group is borrowed: it outlives the step (destroying it mid-backward is a
                               user error, as for SyncBatchNorm) */
      dp_bn_sync *copy = malloc(sizeof *copy);
      if (!copy) {
        dp_node_release(nd);
        dp_release(y);
        dp_error("batch_norm_relu_max_pool2d: out of memory");
        return NULL;
      }
      *copy = *sync;
      nd->ctx = copy, nd->free_ctx = free;
    }
    dp_node_save(nd, xc);
    dp_node_save(nd, mean);
    dp_node_save(nd, invstd);
    dp_node_save(nd, wc);
    dp_node_save(nd, bc);
    dp_node_attach(nd, y, 0);
    dp_node_release(nd);
  }
  return y;
}

dp_tensor *dp_bn_relu_pool_synced(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                  dp_tensor *b, double momentum, double eps, const dp_pool2d_args *pa,
                                  const dp_bn_sync *sync) {
  if (!dp_bn_relu_pool_fusable(x, running_mean, running_var, w, b, true, eps)) {
    dp_error("batch_norm_relu_max_pool2d: these inputs do not take the fused path (dp_bn_relu_pool_fusable)");
    return NULL;
  }
  return fused(x, running_mean, running_var, w, b, true, momentum, eps, pa, sync);
}

dp_tensor *dp_batch_norm_relu_max_pool2d(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                         dp_tensor *b, bool training, double momentum, double eps,
                                         const dp_pool2d_args *pa) {
  if (dp_bn_relu_pool_fusable(x, running_mean, running_var, w, b, training, eps))
    return fused(x, running_mean, running_var, w, b, training, momentum, eps, pa, NULL);
  dp_tensor *y = dp_batch_norm_relu(x, running_mean, running_var, w, b, training, momentum, eps);
  dp_tensor *r = y ? dp_max_pool2d(y, pa) : NULL;
  dp_release(y);
  return r;
}
