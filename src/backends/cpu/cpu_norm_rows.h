/* Row helpers of the CPU batch norm (cpu_norm.c) shared with its fusion
 * with max pooling (cpu_norm_pool.c): a channel's affine coefficients, and
 * one float32 plane of relu(batch_norm(x)) computed by the very calls the
 * fused forward makes (so a recomputed row has the forward's bits). */
#ifndef DDPLUA_CPU_NORM_ROWS_H
#define DDPLUA_CPU_NORM_ROWS_H

#include "backends/backend.h"
#include "ops/scalar_math.h"

dp_bn_affine_k dp_cpu_bn_affine_of(const dp_bn_args *a, int64_t ch);

/* Asks for the n floats at p (the plane a channel loop reads next) to come
 * into the cache. A channel's planes are C planes apart ([N, C, H, W]),
 * 100 KB for the CNN's 32 x 28 x 28: each is a short stream of its own that
 * the hardware prefetchers start late, and the loops over them ran at
 * about 10 GB/s from the L3. */
static inline void dp_cpu_prefetch_plane(const float *p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 3);
}
/* y[0..n) = relu(batch_norm(x[0..n))) for one plane (n > 1) */
void dp_cpu_bn_relu_row(float *y, const float *x, int64_t n, const dp_bn_affine_k *f);
/* the forward with a->pool (float32, planes of inner > 1): y pooled */
int dp_cpu_bn_relu_pool_forward(dp_tensor *y, const dp_bn_args *a);

#endif
