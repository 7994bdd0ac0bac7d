/* Automatic mixed precision (PyTorch's torch.autocast("cuda")): while a
 * thread's autocast dtype is set, matmul, linear and conv2d on CUDA tensors
 * run in bfloat16 (or float16) with float32 accumulation, whatever the
 * dtype of their float32 inputs. The casts are ordinary differentiable
 * casts, so float32 master weights get float32 gradients; the op's output
 * is in the autocast dtype, and ops that mix it with float32 promote to
 * float32 as usual.
 *
 * CPU tensors are left alone: the CPU GEMM computes in float32/float64
 * only, so autocast on the CPU is a no-op for float32 (unlike PyTorch's
 * CPU autocast, which would round through bfloat16). float64 tensors are
 * never cast (as in PyTorch).
 *
 * An op opts in with a scope around its body:
 *   dp_autocast_scope ac;
 *   if (dp_autocast_cast(&ac, 3, (dp_tensor **[]){&x, &w, &b})) return NULL;
 *   ... the op on x, w, b ...
 *   return dp_autocast_done(&ac, out);
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

/* Replaces each non-NULL *args[i] by its cast when autocast is on and every
 * tensor argument is on a CUDA device (the casts are held by the scope).
 * -1 + dp_error if a cast fails. */
int dp_autocast_cast(dp_autocast_scope *sc, int n, dp_tensor **args[]);
/* Releases the scope's casts; returns out unchanged. */
dp_tensor *dp_autocast_done(dp_autocast_scope *sc, dp_tensor *out);

#endif
