/* The CUDA backend's function table. Most entries are the kernel files'
 * launchers (cuda_common.h), which take the tensors as they are; the host
 * code here only does what needs the plugin's device state: unscaling a
 * list of gradients with one wait per device, and the memory entries. The
 * contracts are backend.h's. */
#include <string.h>

#include "backends/cuda/cuda_host.h"
#include "backends/cuda/cuda_model.h"

DP_STATIC_ASSERT(DP_IDX_MAXDIM == DP_MAXDIM, "the strided plan must cover every tensor dimension");

static int cu_device_count(void) { return dp_cu_device_count(); }

/* Every gradient's kernel raises one device flag; the host reads it once
 * per device at the end (the only wait of a loss-scaled step). */
static int cu_unscale_list(dp_tensor *const *gs, int n, double inv_scale, int *found_inf) {
  bool used[DP_CU_MAXDEV] = {false};
  for (int i = 0; i < n; i++) {
    int d = gs[i]->storage->device.index;
    const dp_cu_ctx *c = dp_cu_enter(d);
    if (!c) return -1;
    dp_cu_device *dv = dp_cu_device_get(d);
    if (!used[d]) {
      used[d] = true;
      if (dp_cu_check(cudaMemsetAsync(dv->flag_dev, 0, sizeof(int), c->stream), "unscale", d)) return -1;
    }
    if (dp_cu_unscale(c, dp_cu_ptr(gs[i]), gs[i]->dtype, dp_cu_numel(gs[i]), inv_scale, dv->flag_dev)) return -1;
  }
  for (int d = 0; d < DP_CU_MAXDEV; d++) {
    if (!used[d]) continue;
    dp_cu_device *dv = dp_cu_device_get(d);
    if (dp_cu_select(d) ||
        dp_cu_check(cudaMemcpyAsync(dv->flag_host, dv->flag_dev, sizeof(int), cudaMemcpyDeviceToHost, dv->ctx.stream),
                    "unscale", d) ||
        dp_cu_sync_device(d))
      return -1;
    if (*dv->flag_host) *found_inf = 1;
  }
  return 0;
}

static int cu_unscale(dp_tensor *g, double inv_scale, int *found_inf) {
  return cu_unscale_list(&g, 1, inv_scale, found_inf);
}

const dp_backend dp_cu_backend = {
    .name = "cuda",
    .device_count = cu_device_count,
    .alloc = dp_cu_alloc,
    .free = dp_cu_free,
    .synchronize = dp_cu_synchronize,
    .copy = dp_cu_copy,
    .copy_from_cpu = dp_cu_copy_from_cpu,
    .copy_to_cpu = dp_cu_copy_to_cpu,
    .fill = dp_cu_fill,
    .arange = dp_cu_arange,
    .rand = dp_cu_rand,
    .unary = dp_cu_unary,
    .unary_backward = dp_cu_unary_backward,
    .binary = dp_cu_binary,
    .binary_scalar = dp_cu_binary_scalar,
    .reduce = dp_cu_reduce,
    .scatter_add_dim = dp_cu_scatter_add_dim,
    .gemm = dp_cu_gemm,
    .bias_act = dp_cu_bias_act,
    .channel_sum = dp_cu_channel_sum,
    .softmax = dp_cu_softmax,
    .softmax_backward = dp_cu_softmax_backward,
    .cross_entropy = dp_cu_cross_entropy,
    .cross_entropy_backward = dp_cu_cross_entropy_backward,
    .im2col = dp_cu_im2col,
    .col2im = dp_cu_col2im,
    .max_pool2d = dp_cu_max_pool2d,
    .max_pool2d_backward = dp_cu_max_pool2d_backward,
    .avg_pool2d = dp_cu_avg_pool2d,
    .avg_pool2d_backward = dp_cu_avg_pool2d_backward,
    .bn_stats = dp_cu_bn_stats,
    .bn_forward = dp_cu_bn_forward,
    .bn_backward_reduce = dp_cu_bn_backward_reduce,
    .bn_backward_elemt = dp_cu_bn_backward_elemt,
    .layer_norm = dp_cu_layer_norm,
    .layer_norm_backward = dp_cu_layer_norm_backward,
    .dropout = dp_cu_dropout,
    .index_select = dp_cu_index_select,
    .index_add = dp_cu_index_add,
    .where = dp_cu_where,
    .tri = dp_cu_tri,
    .gather = dp_cu_gather,
    .scatter = dp_cu_scatter,
    .topk = dp_cu_topk,
    .cumsum = dp_cu_cumsum,
    .cum_extreme = dp_cu_cum_extreme,
    .cum_scan = dp_cu_cum_scan,
    .searchsorted = dp_cu_searchsorted,
    .multinomial = dp_cu_multinomial,
    .attention = dp_cu_attention,
    .attention_backward = dp_cu_attention_backward,
    .rnn_cell = dp_cu_rnn_cell,
    .rnn_cell_backward = dp_cu_rnn_cell_backward,
    .adaptive_avg_pool2d = dp_cu_adaptive_avg_pool2d,
    .adaptive_avg_pool2d_backward = dp_cu_adaptive_avg_pool2d_backward,
    .sgd_step = dp_cu_sgd_step,
    .adam_step = dp_cu_adam_step,
    .rmsprop_step = dp_cu_rmsprop_step,
    .adadelta_step = dp_cu_adadelta_step,
    .adagrad_step = dp_cu_adagrad_step,
    .pow_sum_list = dp_cu_pow_sum_list,
    .unscale = cu_unscale,
    .unscale_list = cu_unscale_list,
    .memory_stats = dp_cu_memory_stats,
    .empty_cache = dp_cu_empty_cache,
    .set_option = dp_cu_set_option,
    .get_option = dp_cu_get_option,
    .device_name = dp_cu_device_name,
    .pg_new = dp_cu_pg_nccl_new,
};
