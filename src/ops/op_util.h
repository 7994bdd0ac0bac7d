/* Helpers shared by the op-layer files (not part of the public op API):
 * error-message shapes, common argument checks, gradients summed back to
 * an input's shape, raw copies (and tensor/scope.h, the scope that owns
 * an op's temporaries). */
#ifndef DP_OP_UTIL_H
#define DP_OP_UTIL_H

#include <inttypes.h>
#include <stdio.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "ops/ops.h"
#include "tensor/scope.h"

/* Shape text for error messages ("[2, 3]"), from a small rotating set of
 * thread-local buffers so several can appear in one message. */
const char *dp_shp(const dp_tensor *t);

/* sum of (x - y)^2 (y NULL: x^2) over the dims in mask, kept as size 1,
 * float64, through the backend's one-pass sum_squares (stats.c); NULL
 * without an error when that path does not apply (not the CPU, not
 * float32, y of another shape, mask dims not adjacent, empty), with
 * *failed set when it applied and failed. No autograd. */
dp_tensor *dp_sum_squares_raw(dp_tensor *x, dp_tensor *y, const bool *mask, bool *failed);
const char *dp_shp_n(int ndim, const int64_t *shape);
#define SHAPE(t) dp_shp(t)

/* Both tensors on one device, else an error naming both. */
int dp_check_same_device(const char *op, const dp_tensor *a, const dp_tensor *b);
/* A float dtype, else an error naming op and dtype. */
int dp_check_float(const char *op, const dp_tensor *t);
/* Gradient for input i of node n: g summed to the input's shape and cast to
 * its dtype. Consumes g. */
dp_tensor *dp_grad_for_input(dp_node *n, int i, dp_tensor *g);
dp_tensor *dp_contiguous_raw(dp_tensor *t); /* contiguous copy without autograd */
/* A new tensor of t's dtype/device/shape holding t's values, no autograd */
dp_tensor *dp_copy_raw(dp_tensor *t);
/* 0-based dim check: error naming the dim in the user's 1-based terms. */
int dp_check_dim(const char *op, const dp_tensor *t, int dim);
/* x (contiguous) seen as [outer, k, inner] around dim (a 0-dim x: [1, 1, 1]), for the scans, topk and
 * cum_extreme's backend calls. */
static inline dp_reduce_args dp_around_dim(const dp_tensor *x, int dim, dp_reduce_op op, int64_t base) {
  dp_reduce_args ra = {op, 1, x->ndim ? x->shape[dim] : 1, 1, base};
  for (int d = 0; d < x->ndim; d++) {
    if (d < dim) ra.outer *= x->shape[d];
    if (d > dim) ra.inner *= x->shape[d];
  }
  return ra;
}
/* Output size of a sliding window of k inputs spaced by dilation d, with
 * stride s over n inputs padded by p on both sides (PyTorch's formula,
 * floor or ceil mode; in ceil mode a last window that would start past the
 * padded input is dropped), in checked arithmetic (ops/pool.c). *out < 1
 * when the window does not fit; -1 (no message) on overflow. */
int dp_window_size(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode, int64_t *out);
/* A stride along an axis with one output position never multiplies anything: set it to 1, so that a hostile
 * stride (math.maxinteger) cannot overflow the kernels' index arithmetic (ceil divisions by it). The results are
 * the same. */
static inline void dp_window_one_step(dp_window2d *g) {
  if (g->oh == 1) g->sh = 1;
  if (g->ow == 1) g->sw = 1;
}

#endif
