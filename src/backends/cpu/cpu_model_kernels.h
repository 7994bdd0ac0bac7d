/* CPU kernels of the model ops (indexing, sorting and scans, attention,
 * recurrent cells, adaptive pooling, RMSprop / Adagrad, gradient norms):
 * entries of dp_cpu_backend, contracts in backends/backend.h; per-element
 * math in ops/model_math.h, shared with the CUDA kernels. */
#ifndef DP_CPU_MODEL_KERNELS_H
#define DP_CPU_MODEL_KERNELS_H

#include "backends/backend.h"

/* cpu_index.c */
int dp_cpu_where(dp_tensor *out, const dp_tensor *cond, const dp_tensor *a, const dp_tensor *b);
int dp_cpu_tri(dp_tensor *out, const dp_tensor *x, int64_t rows, int64_t cols, int64_t k, bool upper);
int dp_cpu_gather(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int dim, int64_t base);
int dp_cpu_scatter(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int dim, int64_t base, bool accumulate);
int dp_cpu_topk(dp_tensor *values, dp_tensor *indices, const dp_tensor *x, const dp_reduce_args *a, int64_t k,
                bool largest);
int dp_cpu_cumsum(dp_tensor *out, const dp_tensor *x, const dp_reduce_args *a, bool reverse);
int dp_cpu_cum_extreme(dp_tensor *values, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a, bool is_max);
int dp_cpu_group_norm(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_gn_args *a);
int dp_cpu_group_norm_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_gn_args *a);
int dp_cpu_histogram(dp_tensor *out, const dp_tensor *x, const dp_tensor *w, const dp_tensor *edges, bool uniform);
int dp_cpu_cum_scan(dp_tensor *out, const dp_tensor *x, const dp_tensor *g, const dp_reduce_args *a, dp_scan_kind kind);
int dp_cpu_bincount(dp_tensor *out, const dp_tensor *idx, const dp_tensor *w);
int dp_cpu_nonzero(dp_tensor *out, const dp_tensor *m, bool flat, int64_t base);
int dp_cpu_searchsorted(dp_tensor *out, const dp_tensor *seq, const dp_tensor *v, int64_t rows, int64_t n, int64_t m,
                        bool right, int64_t base);
int dp_cpu_multinomial(dp_tensor *out, dp_tensor *w, const dp_tensor *u, int64_t rows, int64_t cats, int64_t n,
                       bool replacement, int64_t base);

/* cpu_attention.c */
int dp_cpu_attention(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a);
int dp_cpu_attention_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a);
/* Tests: run the float32 tiles compiled for isa (2 AVX-512, 1 AVX2, 0 plain;
 * -1 the best the CPU has); -1 when the CPU lacks it. */
int dp_cpu_attention_force_isa(int isa);
/* How bfloat16 attention multiplies scores and weights (cpu_attn_bf16.h): in bfloat16 on AMX tiles or with
 * AVX512-BF16 dot products, or with every operand widened to float32 (bit for bit float32 attention rounded
 * once). AUTO (the default): AMX where the CPU has AMX-BF16, else the dot products where it has AVX512-BF16,
 * else widened. kind < 0 only asks; a kind this CPU cannot run is -1 (nothing changed). Returns the previous
 * setting. dp_cpu_attention_bf16_amx: the older switch, on = AUTO, off = WIDEN; returns whether it was not
 * WIDEN. */
enum { DP_ATTN_BF16_AUTO, DP_ATTN_BF16_AMX, DP_ATTN_BF16_DOT, DP_ATTN_BF16_WIDEN };
int dp_cpu_attention_bf16_kernel(int kind);
int dp_cpu_attention_bf16_amx(int on);

/* cpu_rnn.c: recurrent cells and adaptive pooling */
int dp_cpu_rnn_cell(const dp_rnn_cell_args *a);
int dp_cpu_rnn_cell_backward(const dp_rnn_cell_args *a);
/* backend.h's ctc_loss and ctc_loss_backward (cpu_ctc.c) */
int dp_cpu_ctc_loss(dp_tensor *loss, const dp_ctc_args *a);
int dp_cpu_ctc_loss_backward(dp_tensor *grad, const dp_tensor *gloss, const dp_ctc_args *a);
int dp_cpu_adaptive_avg_pool2d(dp_tensor *y, const dp_tensor *x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                               int64_t ow);
int dp_cpu_adaptive_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, int64_t planes, int64_t h, int64_t w,
                                        int64_t oh, int64_t ow);

/* cpu_optim_extra.c */
int dp_cpu_rmsprop_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *gavg, dp_tensor *buf,
                        const dp_rmsprop_args *a);
int dp_cpu_adagrad_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sum, const dp_adagrad_args *a);
int dp_cpu_adadelta_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *acc, const dp_adadelta_args *a);
int dp_cpu_pow_sum_list(dp_tensor *out, const dp_tensor *const *gs, int n, double p);

#endif
