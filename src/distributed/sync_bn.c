/* SyncBatchNorm: batch normalisation whose statistics cover the whole
 * global batch. Forward: per-rank mean/var/count are all-gathered (one
 * collective of [R, 2C+1]) and combined; backward: the per-channel sums
 * that the input gradient needs are all-reduced (one collective of [2C]),
 * while the weight/bias gradients stay local — DDP averages them like any
 * other gradient, which gives exactly the single-process gradient of the
 * mean loss over the global batch. Built from the batch-norm pieces of
 * ops/norm.c. SyncBatchNorm followed by ReLU and max pooling (nn.Sequential)
 * runs the fused kernels of ops/norm_pool.c with this file's two
 * collectives as hooks. */
#include "distributed/sync_bn.h"

#include <string.h>

#include "ops/autocast.h"
#include "ops/op_util.h"

/* all_gather of a contiguous 1-d tensor into [size, n] */
static dp_tensor *gather_rows(dp_pg *pg, dp_tensor *row) {
  int64_t sh[2] = {pg->size, row->shape[0]};
  dp_tensor *all = dp_empty(row->dtype, 2, sh, dp_dev(row));
  if (!all) return NULL;
  if (pg->ops->all_gather(pg, all, row, NULL)) {
    dp_release(all);
    return NULL;
  }
  return all;
}

static int sync_bn_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_pg *pg = n->ctx;
  dp_tensor *x = dp_node_saved(n, 0), *w = dp_node_saved(n, 1), *mean = dp_node_saved(n, 2),
            *invstd = dp_node_saved(n, 3);
  double count = n->f[0];
  int64_t C = mean->shape[0];
  dp_tensor *sum_dy = NULL, *sum_dy_xhat = NULL, *both = NULL, *gdy = NULL, *gdx = NULL;
  int rc = -1;
  if (dp_batch_norm_backward_reduce(gout[0], x, mean, invstd, &sum_dy, &sum_dy_xhat)) goto out;
  /* weight and bias gradients: local sums */
  if (n->n_inputs > 1 && dp_node_needs(n, 1)) gin[1] = dp_to(sum_dy_xhat, n->in_dtype[1], dp_dev(x));
  if (n->n_inputs > 2 && dp_node_needs(n, 2)) gin[2] = dp_to(sum_dy, n->in_dtype[2], dp_dev(x));
  if (dp_node_needs(n, 0)) {
    dp_tensor *parts[2] = {sum_dy, sum_dy_xhat};
    both = dp_cat(2, parts, 0);
    if (!both || pg->ops->all_reduce(pg, both, DP_RED_SUM, NULL)) goto out;
    gdy = dp_narrow(both, 0, 0, C);
    gdx = dp_narrow(both, 0, C, C);
    dp_tensor *a = gdy ? dp_contiguous_raw(gdy) : NULL, *b = gdx ? dp_contiguous_raw(gdx) : NULL;
    gin[0] = (a && b) ? dp_batch_norm_backward_elemt(gout[0], x, mean, invstd, w, a, b, count) : NULL;
    dp_release(a), dp_release(b);
    if (!gin[0]) goto out;
  }
  rc = 0;
out:
  dp_release(sum_dy), dp_release(sum_dy_xhat), dp_release(both), dp_release(gdy), dp_release(gdx);
  if (rc) dp_error_prefix("SyncBatchNorm backward: ");
  return rc;
}

/* The group's statistics of x: this rank's mean/var/count all-gathered (one
 * collective of [R, 2C+1], float64 so large counts stay exact) and combined;
 * mean and var come back in x's dtype (dp_bn_sync's stats hook). */
static int sync_stats(void *group, dp_tensor *x, dp_tensor **gmean, dp_tensor **gvar, double *total) {
  dp_pg *pg = group;
  dp_tensor *mean = NULL, *var = NULL, *packed = NULL, *all = NULL, *means = NULL, *vars = NULL, *counts = NULL;
  int64_t count = 0;
  int rc = -1;
  *gmean = *gvar = NULL;
  if (dp_batch_norm_stats(x, &mean, &var, &count)) goto out;
  int64_t C = mean->shape[0], len = 2 * C + 1;
  packed = dp_empty(DP_F64, 1, &len, dp_dev(x));
  if (!packed) goto out;
  dp_tensor *pm = dp_narrow(packed, 0, 0, C), *pv = dp_narrow(packed, 0, C, C), *pc = dp_narrow(packed, 0, 2 * C, 1);
  int r = (pm && pv && pc) ? (dp_copy_(pm, mean) || dp_copy_(pv, var) || dp_fill_(pc, (double)count)) : -1;
  dp_release(pm), dp_release(pv), dp_release(pc);
  if (r) goto out;
  all = gather_rows(pg, packed);
  if (!all) goto out;
  dp_tensor *am = dp_narrow(all, 1, 0, C), *av = dp_narrow(all, 1, C, C), *ac = dp_narrow(all, 1, 2 * C, 1);
  means = am ? dp_contiguous_raw(am) : NULL;
  vars = av ? dp_contiguous_raw(av) : NULL;
  counts = ac ? dp_reshape(ac, 1, (int64_t[]){pg->size}) : NULL;
  dp_release(am), dp_release(av), dp_release(ac);
  if (!means || !vars || !counts) goto out;
  dp_tensor *m64 = NULL, *v64 = NULL;
  if (dp_batch_norm_gather_stats(means, vars, counts, &m64, &v64, total)) goto out;
  *gmean = dp_to(m64, x->dtype, dp_dev(x));
  *gvar = dp_to(v64, x->dtype, dp_dev(x));
  dp_release(m64), dp_release(v64);
  if (!*gmean || !*gvar) {
    dp_release(*gmean), dp_release(*gvar);
    *gmean = *gvar = NULL;
    goto out;
  }
  rc = 0;
out:
  dp_release(mean), dp_release(var), dp_release(packed), dp_release(all), dp_release(means), dp_release(vars);
  dp_release(counts);
  return rc;
}

/* t summed over the group in place (dp_bn_sync's sum hook) */
static int sync_sum(void *group, dp_tensor *t) {
  dp_pg *pg = group;
  return pg->ops->all_reduce(pg, t, DP_RED_SUM, NULL);
}

static bool sync_needed(bool training, dp_pg *pg) {
  return training && pg && (pg->size > 1 || dp_pg_force_collectives());
}

static dp_tensor *sync_batch_norm(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                  dp_tensor *b, bool training, double momentum, double eps, dp_pg *pg) {
  if (!sync_needed(training, pg))
    return dp_batch_norm(x, running_mean, running_var, w, b, training || !running_mean, momentum, eps);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *gmean = NULL, *gvar = NULL, *invstd = NULL, *out = NULL;
  double total = 0;
  if (sync_stats(pg, x, &gmean, &gvar, &total)) goto out;
  if (running_mean && running_var &&
      dp_batch_norm_update_stats(running_mean, running_var, gmean, gvar, total, momentum))
    goto out;
  invstd = dp_batch_norm_invstd(gvar, eps);
  if (!invstd) goto out;
  out = dp_batch_norm_elemt(x, gmean, invstd, w, b);
out:
  dp_set_grad_enabled(prev);
  if (out) {
    dp_tensor *ins[3] = {x, w, b};
    int nin = b ? 3 : (w ? 2 : 1);
    if (dp_any_requires_grad(nin, ins)) {
      dp_node *n = dp_node_new("SyncBatchNormBackward", sync_bn_backward, nin, ins, 1);
      n->ctx = pg; /* borrowed: the group outlives the step (destroying it mid-backward is a user error) */
      n->f[0] = total;
      dp_node_save(n, x);
      dp_node_save(n, w);
      dp_node_save(n, gmean);
      dp_node_save(n, invstd);
      dp_node_attach(n, out, 0);
      dp_node_release(n);
    }
  }
  dp_release(gmean), dp_release(gvar), dp_release(invstd);
  return out;
}

/* Under autocast a bfloat16 / float16 input is normalised in float32, as
 * BatchNorm's (ops/autocast.h's float32 policy): statistics, output and
 * running statistics keep float32 precision. */
dp_tensor *dp_sync_batch_norm(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                              bool training, double momentum, double eps, dp_pg *pg) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, sync_batch_norm(x, running_mean, running_var, w, b, training, momentum, eps, pg));
}

static dp_tensor *sync_bn_relu_max_pool2d(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                          dp_tensor *b, bool training, double momentum, double eps,
                                          const dp_pool2d_args *pool, dp_pg *pg) {
  if (!sync_needed(training, pg))
    return dp_batch_norm_relu_max_pool2d(x, running_mean, running_var, w, b, training || !running_mean, momentum, eps,
                                         pool);
  if (dp_bn_relu_pool_fusable(x, running_mean, running_var, w, b, true, eps)) {
    dp_bn_sync sync = {.stats = sync_stats, .sum = sync_sum, .group = pg};
    return dp_bn_relu_pool_synced(x, running_mean, running_var, w, b, momentum, eps, pool, &sync);
  }
  dp_tensor *y = sync_batch_norm(x, running_mean, running_var, w, b, true, momentum, eps, pg);
  dp_tensor *r = y ? dp_unary(DP_U_RELU, y) : NULL;
  dp_release(y);
  dp_tensor *p = r ? dp_max_pool2d(r, pool) : NULL;
  dp_release(r);
  return p;
}

dp_tensor *dp_sync_batch_norm_relu_max_pool2d(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var,
                                              dp_tensor *w, dp_tensor *b, bool training, double momentum, double eps,
                                              const dp_pool2d_args *pool, dp_pg *pg) {
  dp_autocast_scope ac;
  if (dp_autocast_fp32(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(
      &ac, sync_bn_relu_max_pool2d(x, running_mean, running_var, w, b, training, momentum, eps, pool, pg));
}
