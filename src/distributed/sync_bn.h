#ifndef DP_SYNC_BN_H
#define DP_SYNC_BN_H

#include "distributed/pg.h"
#include "ops/ops.h"

/* Batch norm over the global batch of the group's ranks (see sync_bn.c).
 * Falls back to dp_batch_norm when not training or the group has one rank. */
dp_tensor *dp_sync_batch_norm(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                              bool training, double momentum, double eps, dp_pg *pg);
/* dp_max_pool2d(relu(dp_sync_batch_norm(...)), pool): the same values and
 * gradients, through the fused kernels where they take the arguments. */
dp_tensor *dp_sync_batch_norm_relu_max_pool2d(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var,
                                              dp_tensor *w, dp_tensor *b, bool training, double momentum, double eps,
                                              const dp_pool2d_args *pool, dp_pg *pg);

#endif
