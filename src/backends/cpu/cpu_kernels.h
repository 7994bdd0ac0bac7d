/* CPU kernels: the entries of dp_cpu_backend (see backends/backend.h for each
 * one's contract). The double-precision reference math the float paths are
 * tested against is ops/scalar_math.h's (_d functions). */
#ifndef DP_CPU_KERNELS_H
#define DP_CPU_KERNELS_H

#include "backends/backend.h"

/* BLAS (OpenBLAS, loaded at first use) */
int dp_blas_set_num_threads(int n);
int dp_blas_get_num_threads(void);
const char *dp_blas_info(void); /* "OpenBLAS 0.3.21 ... SkylakeX" or the load error */

/* cpu_elementwise.c */
int dp_cpu_copy(dp_tensor *dst, const dp_tensor *src);
/* cpu_copy_permute.c: dst (contiguous) = src when src's unit-stride dim is not its last, as tiled 2-D transposes;
 * false (nothing written) when the copy is not of that kind or too small to gain */
bool dp_cpu_copy_permuted(dp_tensor *dst, const dp_tensor *src);
int dp_cpu_fill(dp_tensor *t, double v);
int dp_cpu_arange(dp_tensor *out, double start, double step);
int dp_cpu_rand(dp_tensor *out, dp_rand_kind kind, uint64_t seed, uint64_t offset, double a, double b);
int dp_cpu_unary(const dp_unary_args *a, dp_tensor *out, const dp_tensor *x);
int dp_cpu_unary_backward(const dp_unary_args *a, dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x,
                          const dp_tensor *y);
int dp_cpu_unary_with_grad(const dp_unary_args *a, dp_tensor *out, dp_tensor *d, const dp_tensor *x);
/* cpu_gelu_table.c: GELU of n bfloat16 x, and its backward gx = gy * GELU'(x), by table: the bits the float32
 * vector kernels give on the widened values, rounded to bfloat16 once; false (nothing written) when the table
 * could not be made. y and gx are fresh outputs: they overlap no input (the lookups are restrict loops) */
bool dp_cpu_gelu_bf16(uint16_t *y, const uint16_t *x, int64_t n);
bool dp_cpu_gelu_bf16_backward(uint16_t *gx, const uint16_t *gy, const uint16_t *x, int64_t n);
/* o[i] = op(o[i]) over n contiguous float32 values (bias_act's epilogue) */
void dp_cpu_unary_f32_(const dp_unary_args *a, float *o, int64_t n);
int dp_cpu_binary(dp_binary_op op, dp_tensor *out, const dp_tensor *a, const dp_tensor *b);
int dp_cpu_binary_scalar(dp_binary_op op, dp_tensor *out, const dp_tensor *a, double s, bool scalar_first);
int dp_cpu_dropout(dp_tensor *out, const dp_tensor *x, double p, uint64_t seed, uint64_t offset);

/* cpu_reduce.c */
int dp_cpu_reduce(dp_tensor *out, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a);
int dp_cpu_scatter_add_dim(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_reduce_args *a);

/* cpu_blas.c: dp_cpu_gemm dispatches (float32: sgemm.h unless DDPLUA_GEMM=blas);
 * dp_cpu_gemm_blas calls OpenBLAS (the reference path), or a plain loop
 * where no BLAS library loads. */
int dp_cpu_gemm(const dp_gemm_args *g);
int dp_cpu_gemm_blas(const dp_gemm_args *g);
/* dp_cpu_gemm, then C += bias along each row (backend.h's gemm_bias):
 * float32 on sgemm.h adds it in the GEMM's stores, the rest after */
int dp_cpu_gemm_bias(const dp_gemm_args *g, const void *bias);

/* cpu_nn.c: bias/activation epilogue, softmax, cross-entropy, index ops */
int dp_cpu_bias_act(dp_tensor *y, const dp_tensor *bias, const dp_unary_args *act, int64_t outer, int64_t c,
                    int64_t inner);
int dp_cpu_channel_sum(dp_tensor *gb, const dp_tensor *gy, int64_t outer, int64_t c, int64_t inner);
int dp_cpu_softmax(dp_tensor *y, const dp_tensor *x, int64_t rows, int64_t cols, bool log);
int dp_cpu_softmax_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *y, int64_t rows, int64_t cols,
                            bool log);
int dp_cpu_cross_entropy(dp_tensor *loss, dp_tensor *lse, const dp_ce_args *a);
int dp_cpu_cross_entropy_backward(dp_tensor *gx, const dp_ce_args *a);
int dp_cpu_index_select(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int64_t base);
int dp_cpu_index_add(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int64_t base);

/* cpu_conv.c: im2col/col2im and pooling */
int dp_cpu_im2col(dp_tensor *cols, const dp_tensor *x, const dp_window2d *g, int64_t n0, int64_t nb);
int dp_cpu_col2im(dp_tensor *gx, const dp_tensor *cols, const dp_window2d *g, int64_t n0, int64_t nb);
int dp_cpu_max_pool2d(dp_tensor *y, dp_tensor *idx, const dp_tensor *x, const dp_window2d *g);
int dp_cpu_max_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_window2d *g);
int dp_cpu_avg_pool2d(dp_tensor *y, const dp_tensor *x, const dp_window2d *g);
int dp_cpu_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_window2d *g);

/* cpu_norm.c: batch norm, layer norm */
int dp_cpu_bn_stats(dp_tensor *mean, dp_tensor *var, const dp_bn_args *a);
/* cpu_moments.c */
int dp_cpu_moments(dp_tensor *mean, dp_tensor *m2, const dp_tensor *x, int64_t p, int64_t r, int64_t q);
int dp_cpu_sum_squares(dp_tensor *out, const dp_tensor *x, const dp_tensor *y, int64_t p, int64_t r, int64_t q);
int dp_cpu_index_select_dim(dp_tensor *out, const dp_tensor *x, const dp_tensor *idx, int64_t outer, int64_t n,
                            int64_t inner, int64_t base);
int dp_cpu_index_add_dim(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, int64_t outer, int64_t n,
                         int64_t inner, int64_t base, bool accumulate);
int dp_cpu_resample_dim(dp_tensor *out, const dp_tensor *x, const dp_tensor *idx, const dp_tensor *w, int64_t outer,
                        int64_t n, int64_t inner, int64_t base);
int dp_cpu_resample_dim_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_tensor *w,
                                 int64_t outer, int64_t n, int64_t inner, int64_t base);
/* cpu_conv_depthwise.c: the weight (and bias) gradient of a depthwise, stride-1 float32 convolution (groups = in =
 * out channels), for the kernels _takes says yes to; gw [C, 1, kh, kw], gb [C] or NULL, gy and x contiguous */
bool dp_cpu_conv2d_dw_grad_w_takes(const dp_window2d *g, const dp_tensor *gy);
int dp_cpu_conv2d_dw_grad_w(dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_window2d *g);
/* cpu_conv_narrow_grad_w.c: the weight and bias gradients of a dense stride-1 convolution of one input channel and
 * at most 27 taps (grayscale first layers), float32 on AVX-512; _takes says whether it runs the shape; gb [O] or
 * NULL, gy and x contiguous */
bool dp_cpu_conv2d_narrow_grad_w_takes(const dp_window2d *g, const dp_tensor *gy);
int dp_cpu_conv2d_narrow_grad_w(dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                                const dp_window2d *g);
/* on unless DDPLUA_CONV_NARROW_GRAD=0 or set off (returns whether it was); the calls that ran the kernel so far */
bool dp_cpu_set_conv_narrow_grad(bool on);
bool dp_cpu_conv_narrow_grad_enabled(void);
long dp_cpu_conv_narrow_grad_calls(void);
/* cpu_plane_gather.c */
int dp_cpu_plane_gather(dp_tensor *out, const dp_tensor *x, const dp_tensor *ih, const dp_tensor *iw, double value,
                        int64_t base);
int dp_cpu_plane_gather_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *ih, const dp_tensor *iw,
                                 int64_t base);
int dp_cpu_bn_forward(dp_tensor *y, const dp_bn_args *a);
int dp_cpu_bn_backward_reduce(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a);
int dp_cpu_bn_backward_elemt(dp_tensor *gx, const dp_bn_args *a);
int dp_cpu_bn_relu_pool_backward(dp_tensor *gx, dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a);
int dp_cpu_layer_norm(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_ln_args *a);
int dp_cpu_layer_norm_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_ln_args *a);

/* cpu_optim.c */
int dp_cpu_sgd_step(dp_tensor *p, const dp_tensor *g, dp_tensor *buf, const dp_sgd_args *a);
int dp_cpu_adam_step(dp_tensor *p, const dp_tensor *g, dp_tensor *m, dp_tensor *v, const dp_adam_args *a);
int dp_cpu_unscale(dp_tensor *g, double inv_scale, int *found_inf);

#endif
