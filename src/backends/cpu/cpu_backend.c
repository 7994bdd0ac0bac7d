/* The CPU backend's function table. */
#include <stdlib.h>

#include "backends/cpu/cpu_dnnl.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_model_kernels.h"
#include "tensor/storage.h"

static int cpu_device_count(void) { return 1; }
/* The convolutions' gradients: oneDNN's (cpu_dnnl.c), except the weight gradients our own kernels take (each
 * measured faster there): the depthwise and grouped layers' (cpu_conv_depthwise.c) and the narrow first layers'
 * (cpu_conv_narrow_grad_w.c). The input gradient then still goes to oneDNN, and when oneDNN declines it the whole
 * call is declined (ops/conv.c asks again for the weights alone). */
static int cpu_conv2d_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                               const dp_tensor *w, const dp_window2d *g) {
  int (*own)(dp_tensor *, dp_tensor *, const dp_tensor *, const dp_tensor *, const dp_window2d *) = NULL;
  if (gw && x->dtype == DP_F32 && gw->dtype == DP_F32 && (!gb || gb->dtype == DP_F32)) {
    if (dp_cpu_conv2d_dw_grad_w_takes(g, gy)) own = dp_cpu_conv2d_dw_grad_w;
    else if (dp_cpu_conv2d_narrow_grad_w_takes(g, gy)) own = dp_cpu_conv2d_narrow_grad_w;
  }
  if (!own) return dp_dnnl_conv2d_backward(gx, gw, gb, gy, x, w, g);
  if (gx) {
    int r = dp_dnnl_conv2d_backward(gx, NULL, NULL, gy, x, w, g);
    if (r <= 0) return r;
  }
  return own(gw, gb, gy, x, g) ? -1 : 1;
}

static void *cpu_alloc(int device, size_t n) {
  (void)device;
  return dp_cpu_alloc(n);
}
static void cpu_free(int device, void *p, size_t n) {
  (void)device;
  dp_cpu_free(p, n);
}
static int cpu_sync(int device) {
  (void)device;
  return 0;
}

const dp_backend dp_cpu_backend = {
    .name = "cpu",
    .device_count = cpu_device_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .synchronize = cpu_sync,
    .copy = dp_cpu_copy,
    .copy_from_cpu = NULL,
    .copy_to_cpu = NULL,
    .fill = dp_cpu_fill,
    .arange = dp_cpu_arange,
    .rand = dp_cpu_rand,
    .unary = dp_cpu_unary,
    .unary_backward = dp_cpu_unary_backward,
    .unary_with_grad = dp_cpu_unary_with_grad,
    .binary = dp_cpu_binary,
    .binary_scalar = dp_cpu_binary_scalar,
    .reduce = dp_cpu_reduce,
    .scatter_add_dim = dp_cpu_scatter_add_dim,
    .gemm = dp_cpu_gemm,
    .bias_act = dp_cpu_bias_act,
    .gemm_bias = dp_cpu_gemm_bias,
    .channel_sum = dp_cpu_channel_sum,
    .softmax = dp_cpu_softmax,
    .softmax_backward = dp_cpu_softmax_backward,
    .cross_entropy = dp_cpu_cross_entropy,
    .cross_entropy_backward = dp_cpu_cross_entropy_backward,
    .im2col = dp_cpu_im2col,
    .col2im = dp_cpu_col2im,
    .max_pool2d = dp_cpu_max_pool2d,
    .max_pool2d_backward = dp_cpu_max_pool2d_backward,
    .avg_pool2d = dp_cpu_avg_pool2d,
    .avg_pool2d_backward = dp_cpu_avg_pool2d_backward,
    .bn_stats = dp_cpu_bn_stats,
    .moments = dp_cpu_moments,
    .sum_squares = dp_cpu_sum_squares,
    .index_select_dim = dp_cpu_index_select_dim,
    .index_add_dim = dp_cpu_index_add_dim,
    .resample_dim = dp_cpu_resample_dim,
    .resample_dim_backward = dp_cpu_resample_dim_backward,
    .plane_gather = dp_cpu_plane_gather,
    .plane_gather_backward = dp_cpu_plane_gather_backward,
    .bn_forward = dp_cpu_bn_forward,
    .bn_backward_reduce = dp_cpu_bn_backward_reduce,
    .bn_backward_elemt = dp_cpu_bn_backward_elemt,
    .bn_relu_pool_backward = dp_cpu_bn_relu_pool_backward,
    .layer_norm = dp_cpu_layer_norm,
    .layer_norm_backward = dp_cpu_layer_norm_backward,
    .dropout = dp_cpu_dropout,
    .index_select = dp_cpu_index_select,
    .index_add = dp_cpu_index_add,
    .where = dp_cpu_where,
    .tri = dp_cpu_tri,
    .gather = dp_cpu_gather,
    .scatter = dp_cpu_scatter,
    .topk = dp_cpu_topk,
    .cumsum = dp_cpu_cumsum,
    .cum_extreme = dp_cpu_cum_extreme,
    .cum_scan = dp_cpu_cum_scan,
    .searchsorted = dp_cpu_searchsorted,
    .nonzero = dp_cpu_nonzero,
    .bincount = dp_cpu_bincount,
    .group_norm = dp_cpu_group_norm,
    .group_norm_backward = dp_cpu_group_norm_backward,
    .histogram = dp_cpu_histogram,
    .multinomial = dp_cpu_multinomial,
    .attention = dp_cpu_attention,
    .attention_backward = dp_cpu_attention_backward,
    .rnn_cell = dp_cpu_rnn_cell,
    .rnn_cell_backward = dp_cpu_rnn_cell_backward,
    .adaptive_avg_pool2d = dp_cpu_adaptive_avg_pool2d,
    .adaptive_avg_pool2d_backward = dp_cpu_adaptive_avg_pool2d_backward,
    .sgd_step = dp_cpu_sgd_step,
    .adam_step = dp_cpu_adam_step,
    .rmsprop_step = dp_cpu_rmsprop_step,
    .adagrad_step = dp_cpu_adagrad_step,
    .adadelta_step = dp_cpu_adadelta_step,
    .pow_sum_list = dp_cpu_pow_sum_list,
    .unscale = dp_cpu_unscale,
    .conv2d = dp_dnnl_conv2d,
    .conv2d_backward = cpu_conv2d_backward,
    .conv2d_bf16_pays = dp_dnnl_conv2d_bf16_pays,
    .conv3d = dp_dnnl_conv3d,
    .conv3d_backward = dp_dnnl_conv3d_backward,
    .ctc_loss = dp_cpu_ctc_loss,
    .ctc_loss_backward = dp_cpu_ctc_loss_backward,
};
