/* The CUDA launchers of the model ops (contracts in backends/backend.h),
 * entries of dp_cu_backend: indexing, sorting and scans (cuda_index.cu),
 * attention (cuda_attention.cu), recurrent cells and adaptive pooling
 * (cuda_rnn.cu), RMSprop / Adagrad and gradient norms
 * (cuda_optim_extra.cu). The per-element math is ops/model_math.h's,
 * shared with the CPU kernels. */
#ifndef DP_CUDA_MODEL_H
#define DP_CUDA_MODEL_H

#include "backends/cuda/cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

int dp_cu_where(dp_tensor *out, const dp_tensor *cond, const dp_tensor *a, const dp_tensor *b);
int dp_cu_tri(dp_tensor *out, const dp_tensor *x, int64_t rows, int64_t cols, int64_t k, bool upper);
int dp_cu_gather(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int dim, int64_t base);
int dp_cu_scatter(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int dim, int64_t base, bool accumulate);
int dp_cu_topk(dp_tensor *values, dp_tensor *indices, const dp_tensor *x, const dp_reduce_args *a, int64_t k,
               bool largest);
int dp_cu_cumsum(dp_tensor *out, const dp_tensor *x, const dp_reduce_args *a, bool reverse);
int dp_cu_cum_extreme(dp_tensor *values, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a, bool is_max);
int dp_cu_cum_scan(dp_tensor *out, const dp_tensor *x, const dp_tensor *g, const dp_reduce_args *a, dp_scan_kind kind);
int dp_cu_searchsorted(dp_tensor *out, const dp_tensor *seq, const dp_tensor *v, int64_t rows, int64_t n, int64_t m,
                       bool right, int64_t base);
int dp_cu_multinomial(dp_tensor *out, dp_tensor *w, const dp_tensor *u, int64_t rows, int64_t cats, int64_t n,
                      bool replacement, int64_t base);

int dp_cu_attention(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a);
int dp_cu_attention_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a);

int dp_cu_rnn_cell(const dp_rnn_cell_args *a);
int dp_cu_rnn_cell_backward(const dp_rnn_cell_args *a);
int dp_cu_adaptive_avg_pool2d(dp_tensor *y, const dp_tensor *x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                              int64_t ow);
int dp_cu_adaptive_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, int64_t planes, int64_t h, int64_t w,
                                       int64_t oh, int64_t ow);

int dp_cu_rmsprop_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *gavg, dp_tensor *buf,
                       const dp_rmsprop_args *a);
int dp_cu_adagrad_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sum, const dp_adagrad_args *a);
int dp_cu_adadelta_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *acc, const dp_adadelta_args *a);
int dp_cu_pow_sum_list(dp_tensor *out, const dp_tensor *const *gs, int n, double p);

#ifdef __cplusplus
}
#endif

#endif
