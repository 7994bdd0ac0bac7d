/* The CUDA plugin's internal interface between its host code (C: the
 * backend table, allocator, copies, cuBLAS, NCCL) and its kernel files
 * (.cu, compiled as C++).
 *
 * Most entries of the backend table are the .cu launchers themselves:
 * they take the tensors and argument structs of backends/backend.h (which
 * C++ reads), select the tensors' device with DP_CU_ENTER, unpack what
 * their kernels need and launch. They return 0, or -1 after
 * dp_cu_error(...). Everything runs on the device's one compute stream
 * (dp_cu_ctx.stream). */
#ifndef DP_CUDA_COMMON_H
#define DP_CUDA_COMMON_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "ops/op_table.h"
#include "ops/strided_index.h"
#include "tensor/dtype.h"
#include "tensor/dtype_conv.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DP_CU_MAXDEV 64

/* Errors a kernel finds in its data (an index or class label out of
 * range) cannot stop the host at the op: the kernel records the first one
 * here and the host raises it at the next call into the backend or sync
 * point (DDPLUA_CUDA_SYNC=1 waits after every kernel so it surfaces at the
 * op that failed). The slot is pinned, mapped host memory: the host reads
 * it without a device round trip. */
enum {
  DP_CU_FAULT_INDEX_SELECT = 1, /* v: index, position, lo, hi */
  DP_CU_FAULT_INDEX_ADD,        /* v: index, position, lo, hi */
  DP_CU_FAULT_TARGET,           /* v: target, position, lo, hi */
  DP_CU_FAULT_SCATTER,          /* v: index, lo, hi */
  DP_CU_FAULT_GATHER,           /* v: index, position, lo, hi (gather) */
  DP_CU_FAULT_SCATTER_DIM,      /* v: index, position, lo, hi (scatter, scatter_add) */
};
typedef struct {
  volatile int ready; /* set last, after the fields */
  int code;
  long long v[4];
} dp_cu_fault;

/* What a launcher needs from its device. */
typedef struct {
  int device;
  cudaStream_t stream;
  int sm_count;
  dp_cu_fault *fault; /* device-visible alias of the mapped slot */
  int *fault_claim;   /* device memory: first reporter wins */
} dp_cu_ctx;

/* ---- host side, in cuda_plugin.c ---- */
/* Records an error message (forwarded to the runtime's dp_error). */
int dp_cu_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* 0, or -1 + dp_error "<what> on cuda:N failed: <CUDA's message>" */
int dp_cu_check(cudaError_t e, const char *what, int device);
/* Validates the index, initialises the device on first use, makes it the
 * calling thread's current device and raises pending device errors.
 * NULL + dp_error on failure. */
const dp_cu_ctx *dp_cu_enter(int device);
/* The context c of tensor t's device, entered; returns -1 from the caller
 * on failure. */
#define DP_CU_ENTER(c, t)                                                                                              \
  const dp_cu_ctx *c = dp_cu_enter((t)->storage->device.index);                                                        \
  if (!c) return -1
/* After a launch: reports a launch failure naming op; in sync mode waits
 * for the stream and reports device faults at the op. */
int dp_cu_after_launch(const dp_cu_ctx *c, const char *op);
/* Device scratch memory from the caching allocator, stream-ordered: free
 * it right after the last launch that uses it. */
void *dp_cu_scratch(const dp_cu_ctx *c, size_t nbytes);
void dp_cu_scratch_free(const dp_cu_ctx *c, void *p, size_t nbytes);

/* ---- tensor helpers (inline: the runtime's functions are out of reach,
 * the plugin links nothing of it) ---- */
static inline void *dp_cu_ptr(const dp_tensor *t) {
  return (char *)t->storage->data + (size_t)t->offset * dp_dtype_bytes(t->dtype);
}
static inline int64_t dp_cu_numel(const dp_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}
static inline bool dp_cu_contig(const dp_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] == 0) return true;
    if (t->shape[d] != 1 && t->stride[d] != s) return false;
    s *= t->shape[d];
  }
  return true;
}

/* ---- the backend entries the kernel files implement (contracts in
 * backends/backend.h) ---- */
/* cuda_elementwise.cu */
int dp_cu_copy(dp_tensor *dst, const dp_tensor *src);
int dp_cu_fill(dp_tensor *t, double v);
int dp_cu_arange(dp_tensor *out, double start, double step);
int dp_cu_rand(dp_tensor *out, dp_rand_kind kind, uint64_t seed, uint64_t offset, double a, double b);
int dp_cu_unary(const dp_unary_args *a, dp_tensor *out, const dp_tensor *x);
int dp_cu_unary_backward(const dp_unary_args *a, dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x,
                         const dp_tensor *y);
int dp_cu_binary(dp_binary_op op, dp_tensor *out, const dp_tensor *a, const dp_tensor *b);
int dp_cu_binary_scalar(dp_binary_op op, dp_tensor *out, const dp_tensor *a, double s, bool scalar_first);
int dp_cu_dropout(dp_tensor *out, const dp_tensor *x, double p, uint64_t seed, uint64_t offset);
/* cuda_reduce.cu */
int dp_cu_reduce(dp_tensor *out, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a);
int dp_cu_scatter_add_dim(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_reduce_args *a);
/* cuda_nn.cu */
int dp_cu_bias_act(dp_tensor *y, const dp_tensor *bias, const dp_unary_args *act, int64_t outer, int64_t ch,
                   int64_t inner);
int dp_cu_channel_sum(dp_tensor *gb, const dp_tensor *gy, int64_t outer, int64_t ch, int64_t inner);
int dp_cu_softmax(dp_tensor *y, const dp_tensor *x, int64_t rows, int64_t cols, bool log);
int dp_cu_softmax_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *y, int64_t rows, int64_t cols,
                           bool log);
int dp_cu_cross_entropy(dp_tensor *loss, dp_tensor *lse, const dp_ce_args *a);
int dp_cu_cross_entropy_backward(dp_tensor *gx, const dp_ce_args *a);
int dp_cu_index_select(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int64_t base);
int dp_cu_index_add(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int64_t base);
/* cuda_conv.cu */
int dp_cu_im2col(dp_tensor *cols, const dp_tensor *x, const dp_window2d *g, int64_t n0, int64_t nb);
int dp_cu_col2im(dp_tensor *gx, const dp_tensor *cols, const dp_window2d *g, int64_t n0, int64_t nb);
int dp_cu_max_pool2d(dp_tensor *y, dp_tensor *idx, const dp_tensor *x, const dp_window2d *g);
int dp_cu_max_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_window2d *g);
int dp_cu_avg_pool2d(dp_tensor *y, const dp_tensor *x, const dp_window2d *g);
int dp_cu_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_window2d *g);
/* cuda_norm.cu */
int dp_cu_bn_stats(dp_tensor *mean, dp_tensor *var, const dp_bn_args *a);
int dp_cu_bn_forward(dp_tensor *y, const dp_bn_args *a);
int dp_cu_bn_backward_reduce(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a);
int dp_cu_bn_backward_elemt(dp_tensor *gx, const dp_bn_args *a);
int dp_cu_layer_norm(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_ln_args *a);
int dp_cu_layer_norm_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_ln_args *a);
/* cuda_optim.cu (float32 or float64) */
int dp_cu_sgd_step(dp_tensor *p, const dp_tensor *g, dp_tensor *buf, const dp_sgd_args *a);
int dp_cu_adam_step(dp_tensor *p, const dp_tensor *g, dp_tensor *m, dp_tensor *v, const dp_adam_args *a);

/* ---- raw launchers the host code uses ---- */
/* g (n elements of dt, on c's device) *= inv_scale; *flag (device int) = 1
 * if any result is inf/nan (cuda_optim.cu; GradScaler's unscale_list) */
int dp_cu_unscale(const dp_cu_ctx *c, void *g, dp_dtype dt, int64_t n, double inv_scale, int *flag);
/* dst (rows x cols, row stride ld, batch stride bs) = beta * dst, 0 when
 * beta == 0 (GEMM with k == 0) */
int dp_cu_scale_matrix(const dp_cu_ctx *c, void *dst, dp_dtype dt, int64_t batch, int64_t rows, int64_t cols,
                       int64_t ld, int64_t bs, double beta);

#ifdef __cplusplus
}
#endif

#endif
