/* The CUDA plugin's internal interface between its host glue (C: the
 * backend table, allocator, copies, cuBLAS, NCCL) and its kernels (.cu).
 *
 * The .cu files never see dp_tensor (tensor.h uses C11 atomics, which C++
 * does not accept): the glue turns tensors into raw pointers, dtypes,
 * sizes and, for strided elementwise work, a dp_index_plan. Launchers
 * return 0, or -1 after dp_cu_error(...). Everything here runs on the
 * device's one compute stream (dp_cu_ctx.stream). */
#ifndef DP_CUDA_COMMON_H
#define DP_CUDA_COMMON_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/op_table.h"
#include "ops/strided_index.h"
#include "tensor/dtype.h"

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
/* After a launch: reports a launch failure naming op; in sync mode waits
 * for the stream and reports device faults at the op. */
int dp_cu_after_launch(const dp_cu_ctx *c, const char *op);
/* Device scratch memory from the caching allocator, stream-ordered: free
 * it right after the last launch that uses it. */
void *dp_cu_scratch(const dp_cu_ctx *c, size_t nbytes);
void dp_cu_scratch_free(const dp_cu_ctx *c, void *p, size_t nbytes);

/* ---- launchers (.cu) ---- */
/* cuda_elementwise.cu: plans cover every operand (operand 0 is written) */
int dp_cu_copy(const dp_cu_ctx *c, const dp_index_plan *p, void *dst, dp_dtype ddt, const void *src, dp_dtype sdt);
int dp_cu_fill(const dp_cu_ctx *c, const dp_index_plan *p, void *dst, dp_dtype dt, double v);
int dp_cu_arange(const dp_cu_ctx *c, void *out, dp_dtype dt, int64_t n, double start, double step);
int dp_cu_rand(const dp_cu_ctx *c, void *out, dp_dtype dt, int64_t n, dp_rand_kind kind, uint64_t seed, uint64_t offset,
               double a, double b);
int dp_cu_unary(const dp_cu_ctx *c, const dp_index_plan *p, const dp_unary_args *a, void *out, dp_dtype odt,
                const void *x, dp_dtype xdt);
/* operands in the plan: gx, gy, then x and/or y when given */
int dp_cu_unary_backward(const dp_cu_ctx *c, const dp_index_plan *p, const dp_unary_args *a, void *gx, dp_dtype gxdt,
                         const void *gy, dp_dtype gydt, const void *x, dp_dtype xdt, const void *y, dp_dtype ydt);
/* b == NULL: scalar s (scalar_first: s op a) */
int dp_cu_binary(const dp_cu_ctx *c, const dp_index_plan *p, dp_binary_op op, void *out, dp_dtype odt, const void *a,
                 dp_dtype adt, const void *b, dp_dtype bdt, double s, bool scalar_first);
int dp_cu_dropout(const dp_cu_ctx *c, void *out, dp_dtype odt, const void *x, dp_dtype xdt, int64_t n, double p,
                  uint64_t seed, uint64_t offset);

/* cuda_reduce.cu: x contiguous [outer, k, inner]; out/idx [outer, inner] */
int dp_cu_reduce(const dp_cu_ctx *c, dp_reduce_op op, void *out, dp_dtype odt, int64_t *idx, const void *x,
                 dp_dtype xdt, int64_t outer, int64_t k, int64_t inner, int64_t base);
int dp_cu_scatter_add_dim(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, const void *gy, dp_dtype gydt,
                          const int64_t *idx, int64_t outer, int64_t k, int64_t inner, int64_t base);

/* cuda_nn.cu */
int dp_cu_bias_act(const dp_cu_ctx *c, void *y, dp_dtype ydt, const void *bias, dp_dtype bdt, const dp_unary_args *act,
                   int64_t outer, int64_t ch, int64_t inner);
int dp_cu_channel_sum(const dp_cu_ctx *c, void *gb, dp_dtype gbdt, const void *gy, dp_dtype gydt, int64_t outer,
                      int64_t ch, int64_t inner);
int dp_cu_softmax(const dp_cu_ctx *c, void *y, dp_dtype ydt, const void *x, dp_dtype xdt, int64_t rows, int64_t cols,
                  bool log);
int dp_cu_softmax_backward(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, const void *gy, dp_dtype gydt, const void *y,
                           dp_dtype ydt, int64_t rows, int64_t cols, bool log);
int dp_cu_cross_entropy(const dp_cu_ctx *c, void *loss, dp_dtype ldt, void *lse, dp_dtype lsedt, const void *x,
                        dp_dtype xdt, const int64_t *target, int64_t rows, int64_t classes, int64_t base,
                        double smoothing, int64_t ignore_index);
int dp_cu_cross_entropy_backward(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, const void *x, dp_dtype xdt,
                                 const void *lse, dp_dtype lsedt, const int64_t *target, const void *scale,
                                 dp_dtype sdt, int64_t rows, int64_t classes, int64_t base, double smoothing,
                                 int64_t ignore_index);
int dp_cu_index_select(const dp_cu_ctx *c, void *out, const void *src, dp_dtype dt, int64_t rows, int64_t d,
                       const int64_t *idx, int64_t n, int64_t base);
int dp_cu_index_add(const dp_cu_ctx *c, void *dst, dp_dtype ddt, int64_t rows, int64_t d, const int64_t *idx, int64_t n,
                    const void *src, dp_dtype sdt, int64_t base);

/* cuda_conv.cu: window geometry as in backend.h's dp_window2d */
typedef struct {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
} dp_cu_window;
int dp_cu_im2col(const dp_cu_ctx *c, void *cols, const void *x, dp_dtype dt, const dp_cu_window *g, int64_t n0,
                 int64_t nb);
int dp_cu_col2im(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, const void *cols, dp_dtype cdt, const dp_cu_window *g,
                 int64_t n0, int64_t nb);
int dp_cu_max_pool2d(const dp_cu_ctx *c, void *y, int64_t *idx, const void *x, dp_dtype dt, const dp_cu_window *g);
int dp_cu_max_pool2d_backward(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, const void *gy, dp_dtype gydt,
                              const int64_t *idx, const dp_cu_window *g);
int dp_cu_avg_pool2d(const dp_cu_ctx *c, void *y, const void *x, dp_dtype dt, const dp_cu_window *g);
int dp_cu_avg_pool2d_backward(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, const void *gy, dp_dtype gydt,
                              const dp_cu_window *g);

/* cuda_norm.cu: per-channel vectors come with their own dtypes (the op
 * layer may keep statistics and affine parameters in different ones);
 * .p == NULL for an absent weight or bias */
typedef struct {
  const void *p;
  dp_dtype dt;
} dp_cu_vec;
int dp_cu_bn_stats(const dp_cu_ctx *c, dp_cu_vec mean, dp_cu_vec var, const void *x, dp_dtype xdt, int64_t n,
                   int64_t ch, int64_t inner);
int dp_cu_bn_forward(const dp_cu_ctx *c, void *y, dp_dtype ydt, const void *x, dp_dtype xdt, dp_cu_vec mean,
                     dp_cu_vec invstd, dp_cu_vec w, dp_cu_vec b, int64_t n, int64_t ch, int64_t inner);
int dp_cu_bn_backward_reduce(const dp_cu_ctx *c, dp_cu_vec sum_dy, dp_cu_vec sum_dy_xhat, const void *gy, dp_dtype gydt,
                             const void *x, dp_dtype xdt, dp_cu_vec mean, dp_cu_vec invstd, int64_t n, int64_t ch,
                             int64_t inner);
int dp_cu_bn_backward_elemt(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, const void *gy, dp_dtype gydt, const void *x,
                            dp_dtype xdt, dp_cu_vec mean, dp_cu_vec invstd, dp_cu_vec w, dp_cu_vec sum_dy,
                            dp_cu_vec sum_dy_xhat, double count, int64_t n, int64_t ch, int64_t inner);
/* rows x cols; mean/rstd [rows]; w, b, gw, gb [cols] (may be absent) */
int dp_cu_layer_norm(const dp_cu_ctx *c, void *y, dp_dtype ydt, dp_cu_vec mean, dp_cu_vec rstd, const void *x,
                     dp_dtype xdt, dp_cu_vec w, dp_cu_vec b, int64_t rows, int64_t cols, double eps);
int dp_cu_layer_norm_backward(const dp_cu_ctx *c, void *gx, dp_dtype gxdt, dp_cu_vec gw, dp_cu_vec gb, const void *gy,
                              dp_dtype gydt, const void *x, dp_dtype xdt, dp_cu_vec mean, dp_cu_vec rstd, dp_cu_vec w,
                              int64_t rows, int64_t cols);

/* cuda_optim.cu (float32 or float64; every tensor of one call has dt) */
int dp_cu_sgd_step(const dp_cu_ctx *c, void *p, const void *g, void *buf, dp_dtype dt, int64_t n, double lr,
                   double momentum, double dampening, double weight_decay, bool nesterov, bool first_step);
int dp_cu_adam_step(const dp_cu_ctx *c, void *p, const void *g, void *m, void *v, dp_dtype dt, int64_t n, double lr,
                    double beta1, double beta2, double eps, double weight_decay, bool decoupled, double bc1,
                    double bc2);
/* g *= inv_scale; *flag (device int) = 1 if any result is inf/nan */
int dp_cu_unscale(const dp_cu_ctx *c, void *g, dp_dtype dt, int64_t n, double inv_scale, int *flag);
/* dst (rows x cols, row stride ld, batch stride bs) = beta * dst, 0 when
 * beta == 0 (GEMM with k == 0) */
int dp_cu_scale_matrix(const dp_cu_ctx *c, void *dst, dp_dtype dt, int64_t batch, int64_t rows, int64_t cols,
                       int64_t ld, int64_t bs, double beta);

#ifdef __cplusplus
}
#endif

#endif
