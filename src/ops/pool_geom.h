/* The pooling ops' input check and window geometry (ops/pool.c), shared
 * with the fused batch norm + ReLU + max pool (ops/norm_pool.c). */
#ifndef DDPLUA_OPS_POOL_GEOM_H
#define DDPLUA_OPS_POOL_GEOM_H

#include "ops/ops.h"

/* x as a contiguous 4-d tensor (an unbatched input gains N = 1; a new
 * reference) and the window geometry g; NULL with an error naming the
 * arguments (op names the caller). */
dp_tensor *dp_pool2d_input(const char *op, dp_tensor *x, const dp_pool2d_args *a, dp_window2d *g);

#endif
