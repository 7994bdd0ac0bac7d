/* Automatic mixed precision (PyTorch's torch.autocast): while a thread's
 * autocast dtype is set, two policies apply, as PyTorch's CUDA and CPU
 * autocast do:
 *  - lower precision: matmul, linear and conv2d run in the autocast dtype
 *    (bfloat16 or float16; float32 accumulation) whatever the dtype of their
 *    float32 inputs, on CUDA tensors, and with bfloat16 on CPU tensors too
 *    (PyTorch's CPU autocast knows bfloat16 only; float16 autocast leaves
 *    CPU tensors alone);
 *  - float32: softmax, log_softmax, cross_entropy, mse_loss, layer_norm and
 *    batch_norm (SyncBatchNorm too) compute in float32 when given bfloat16
 *    or float16 inputs (the output of an autocast linear), so losses, their
 *    log-sum-exp and normalisation statistics keep float32 precision and
 *    float32 weights meet a float32 input. (PyTorch 1.13's CPU autocast
 *    leaves batch_norm and layer_norm in bfloat16, float32 inside; a
 *    bfloat16 batch norm through float32 scratch rows measured slower than
 *    the casts here: docs/performance.md.)
 * The casts are ordinary differentiable casts, so float32 master weights
 * get float32 gradients; ops that mix the autocast dtype with float32
 * promote to float32 as usual. float64 tensors are never cast.
 *
 * An op opts in with a scope around its body:
 *   dp_autocast_scope ac;
 *   if (dp_autocast_cast(&ac, 3, (dp_tensor **[]){&x, &w, &b})) return NULL;
 *   ... the op on x, w, b ...
 *   return dp_autocast_done(&ac, out);
 * (dp_autocast_fp32 in place of dp_autocast_cast for the float32 ops.)
 */
#ifndef DP_AUTOCAST_H
#define DP_AUTOCAST_H

#include <stdbool.h>

#include "tensor/tensor.h"

#define DP_AUTOCAST_MAX_ARGS 4

typedef struct {
  bool enabled;
  dp_dtype dtype; /* DP_BF16 or DP_F16 */
} dp_autocast_state;

/* The calling thread's state; set returns the previous one (restore it
 * when the region ends). An enabled state with another dtype is an error. */
dp_autocast_state dp_autocast_get(void);
int dp_autocast_set(dp_autocast_state s, dp_autocast_state *prev);

typedef struct {
  int n;
  dp_tensor *held[DP_AUTOCAST_MAX_ARGS];
} dp_autocast_scope;

/* Lower precision: replaces each float32 *args[i] (non-NULL) by its cast
 * to the autocast dtype when autocast is on and every tensor argument is
 * on a CUDA device, or on the CPU with bfloat16 (the casts are held by the
 * scope). -1 + dp_error if a cast fails. */
int dp_autocast_cast(dp_autocast_scope *sc, int n, dp_tensor **args[]);
/* Float32: replaces each bfloat16 / float16 *args[i] by its float32 cast
 * when autocast is on. */
int dp_autocast_fp32(dp_autocast_scope *sc, int n, dp_tensor **args[]);
/* Releases the scope's casts; returns out unchanged. */
dp_tensor *dp_autocast_done(dp_autocast_scope *sc, dp_tensor *out);

#endif
