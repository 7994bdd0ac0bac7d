/* The CUDA backend's function table: each entry unpacks its tensors into
 * pointers, dtypes and sizes (or a strided plan) for the launchers in the
 * .cu files, after dp_cu_enter has selected the tensors' device and raised
 * any error the device reported since the last call. The contracts are
 * backend.h's; the comments here only note where CUDA differs. */
#include <math.h>
#include <string.h>

#include "backends/cuda/cuda_host.h"

_Static_assert(DP_IDX_MAXDIM == DP_MAXDIM, "the strided plan must cover every tensor dimension");

#define ENTER(t)                                                                                                       \
  const dp_cu_ctx *c = dp_cu_enter((t)->storage->device.index);                                                        \
  if (!c) return -1

static dp_cu_vec vec(const dp_tensor *t) {
  dp_cu_vec v = {t ? dp_cu_ptr(t) : NULL, t ? t->dtype : DP_F32};
  return v;
}

/* A plan over ts[0]'s shape for n operands of that shape. */
static void plan_of(dp_index_plan *p, int n, const dp_tensor *const *ts) {
  const int64_t *st[DP_IDX_MAXOPS];
  for (int k = 0; k < n; k++) st[k] = ts[k]->stride;
  dp_index_plan_init(p, ts[0]->ndim, ts[0]->shape, n, st);
}

/* ---- memory ---- */
static int cu_device_count(void) { return dp_cu_device_count(); }
static void *cu_alloc(int device, size_t n) { return dp_cu_alloc(device, n); }
static void cu_free(int device, void *p, size_t n) { dp_cu_free(device, p, n); }

/* ---- elementwise ---- */
static int cu_copy(dp_tensor *dst, const dp_tensor *src) {
  ENTER(dst);
  if (dst->dtype == src->dtype && dp_cu_contig(dst) && dp_cu_contig(src)) {
    size_t n = (size_t)dp_cu_numel(dst) * dp_dtype_bytes(dst->dtype);
    if (!n) return 0;
    return dp_cu_check(cudaMemcpyAsync(dp_cu_ptr(dst), dp_cu_ptr(src), n, cudaMemcpyDeviceToDevice, c->stream), "copy",
                       c->device);
  }
  dp_index_plan p;
  plan_of(&p, 2, (const dp_tensor *[]){dst, src});
  return dp_cu_copy(c, &p, dp_cu_ptr(dst), dst->dtype, dp_cu_ptr(src), src->dtype);
}

static int cu_fill(dp_tensor *t, double v) {
  ENTER(t);
  if (v == 0.0 && dp_cu_contig(t)) {
    size_t n = (size_t)dp_cu_numel(t) * dp_dtype_bytes(t->dtype);
    return n ? dp_cu_check(cudaMemsetAsync(dp_cu_ptr(t), 0, n, c->stream), "fill", c->device) : 0;
  }
  dp_index_plan p;
  plan_of(&p, 1, (const dp_tensor *[]){t});
  return dp_cu_fill(c, &p, dp_cu_ptr(t), t->dtype, v);
}

static int cu_arange(dp_tensor *out, double start, double step) {
  ENTER(out);
  return dp_cu_arange(c, dp_cu_ptr(out), out->dtype, dp_cu_numel(out), start, step);
}

static int cu_rand(dp_tensor *out, dp_rand_kind kind, uint64_t seed, uint64_t offset, double a, double b) {
  ENTER(out);
  return dp_cu_rand(c, dp_cu_ptr(out), out->dtype, dp_cu_numel(out), kind, seed, offset, a, b);
}

static int cu_unary(const dp_unary_args *a, dp_tensor *out, const dp_tensor *x) {
  ENTER(out);
  dp_index_plan p;
  plan_of(&p, 2, (const dp_tensor *[]){out, x});
  return dp_cu_unary(c, &p, a, dp_cu_ptr(out), out->dtype, dp_cu_ptr(x), x->dtype);
}

static int cu_unary_backward(const dp_unary_args *a, dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x,
                             const dp_tensor *y) {
  ENTER(gx);
  const dp_tensor *ops[4] = {gx, gy, NULL, NULL};
  int n = 2;
  if (x) ops[n++] = x;
  if (y) ops[n++] = y;
  dp_index_plan p;
  plan_of(&p, n, ops);
  return dp_cu_unary_backward(c, &p, a, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(gy), gy->dtype, x ? dp_cu_ptr(x) : NULL,
                              x ? x->dtype : DP_F32, y ? dp_cu_ptr(y) : NULL, y ? y->dtype : DP_F32);
}

static int cu_binary(dp_binary_op op, dp_tensor *out, const dp_tensor *a, const dp_tensor *b) {
  ENTER(out);
  dp_index_plan p;
  plan_of(&p, 3, (const dp_tensor *[]){out, a, b});
  return dp_cu_binary(c, &p, op, dp_cu_ptr(out), out->dtype, dp_cu_ptr(a), a->dtype, dp_cu_ptr(b), b->dtype, 0.0,
                      false);
}

static int cu_binary_scalar(dp_binary_op op, dp_tensor *out, const dp_tensor *a, double s, bool scalar_first) {
  ENTER(out);
  dp_index_plan p;
  plan_of(&p, 2, (const dp_tensor *[]){out, a});
  return dp_cu_binary(c, &p, op, dp_cu_ptr(out), out->dtype, dp_cu_ptr(a), a->dtype, NULL, a->dtype, s, scalar_first);
}

static int cu_dropout(dp_tensor *out, const dp_tensor *x, double p, uint64_t seed, uint64_t offset) {
  ENTER(out);
  return dp_cu_dropout(c, dp_cu_ptr(out), out->dtype, dp_cu_ptr(x), x->dtype, dp_cu_numel(out), p, seed, offset);
}

/* ---- reductions ---- */
static int cu_reduce(dp_reduce_op op, dp_tensor *out, dp_tensor *idx, const dp_tensor *x, int64_t outer, int64_t k,
                     int64_t inner, int64_t base) {
  ENTER(x);
  return dp_cu_reduce(c, op, dp_cu_ptr(out), out->dtype, idx ? (int64_t *)dp_cu_ptr(idx) : NULL, dp_cu_ptr(x), x->dtype,
                      outer, k, inner, base);
}

static int cu_scatter_add_dim(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, int64_t outer, int64_t k,
                              int64_t inner, int64_t base) {
  ENTER(gx);
  return dp_cu_scatter_add_dim(c, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(gy), gy->dtype, dp_cu_ptr(idx), outer, k, inner,
                               base);
}

/* ---- nn ---- */
static int cu_bias_act(dp_tensor *y, const dp_tensor *bias, const dp_unary_args *act, int64_t outer, int64_t ch,
                       int64_t inner) {
  ENTER(y);
  return dp_cu_bias_act(c, dp_cu_ptr(y), y->dtype, bias ? dp_cu_ptr(bias) : NULL, bias ? bias->dtype : y->dtype, act,
                        outer, ch, inner);
}

static int cu_channel_sum(dp_tensor *gb, const dp_tensor *gy, int64_t outer, int64_t ch, int64_t inner) {
  ENTER(gy);
  return dp_cu_channel_sum(c, dp_cu_ptr(gb), gb->dtype, dp_cu_ptr(gy), gy->dtype, outer, ch, inner);
}

static int cu_softmax(dp_tensor *y, const dp_tensor *x, int64_t rows, int64_t cols, bool log) {
  ENTER(x);
  return dp_cu_softmax(c, dp_cu_ptr(y), y->dtype, dp_cu_ptr(x), x->dtype, rows, cols, log);
}

static int cu_softmax_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *y, int64_t rows, int64_t cols,
                               bool log) {
  ENTER(gx);
  return dp_cu_softmax_backward(c, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(gy), gy->dtype, dp_cu_ptr(y), y->dtype, rows,
                                cols, log);
}

/* A target out of range is found by the kernel: the row's loss is NaN and
 * the error is raised at the next sync point (loss:item(), for one). */
static int cu_cross_entropy(dp_tensor *loss, dp_tensor *lse, const dp_tensor *x, const dp_tensor *target, int64_t base,
                            double smoothing, int64_t ignore_index) {
  ENTER(x);
  return dp_cu_cross_entropy(c, dp_cu_ptr(loss), loss->dtype, dp_cu_ptr(lse), lse->dtype, dp_cu_ptr(x), x->dtype,
                             dp_cu_ptr(target), x->shape[0], x->shape[1], base, smoothing, ignore_index);
}

static int cu_cross_entropy_backward(dp_tensor *gx, const dp_tensor *x, const dp_tensor *lse, const dp_tensor *target,
                                     const dp_tensor *scale, int64_t base, double smoothing, int64_t ignore_index) {
  ENTER(x);
  return dp_cu_cross_entropy_backward(c, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(x), x->dtype, dp_cu_ptr(lse), lse->dtype,
                                      dp_cu_ptr(target), dp_cu_ptr(scale), scale->dtype, x->shape[0], x->shape[1], base,
                                      smoothing, ignore_index);
}

static dp_cu_window window(const dp_window2d *g) {
  dp_cu_window w = {g->n, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->oh, g->ow};
  return w;
}

static int cu_im2col(dp_tensor *cols, const dp_tensor *x, const dp_window2d *g, int64_t n0, int64_t nb) {
  ENTER(x);
  dp_cu_window w = window(g);
  if (cols->dtype != x->dtype)
    return dp_cu_error("im2col: columns (%s) and input (%s) must share a dtype", dp_cu_dtype_name(cols->dtype),
                       dp_cu_dtype_name(x->dtype));
  return dp_cu_im2col(c, dp_cu_ptr(cols), dp_cu_ptr(x), x->dtype, &w, n0, nb);
}

static int cu_col2im(dp_tensor *gx, const dp_tensor *cols, const dp_window2d *g, int64_t n0, int64_t nb) {
  ENTER(gx);
  dp_cu_window w = window(g);
  return dp_cu_col2im(c, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(cols), cols->dtype, &w, n0, nb);
}

static int cu_max_pool2d(dp_tensor *y, dp_tensor *idx, const dp_tensor *x, const dp_window2d *g) {
  ENTER(x);
  dp_cu_window w = window(g);
  if (y->dtype != x->dtype)
    return dp_cu_error("max_pool2d: output (%s) and input (%s) must share a dtype", dp_cu_dtype_name(y->dtype),
                       dp_cu_dtype_name(x->dtype));
  return dp_cu_max_pool2d(c, dp_cu_ptr(y), dp_cu_ptr(idx), dp_cu_ptr(x), x->dtype, &w);
}

static int cu_max_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_window2d *g) {
  ENTER(gx);
  dp_cu_window w = window(g);
  return dp_cu_max_pool2d_backward(c, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(gy), gy->dtype, dp_cu_ptr(idx), &w);
}

static int cu_avg_pool2d(dp_tensor *y, const dp_tensor *x, const dp_window2d *g) {
  ENTER(x);
  dp_cu_window w = window(g);
  if (y->dtype != x->dtype)
    return dp_cu_error("avg_pool2d: output (%s) and input (%s) must share a dtype", dp_cu_dtype_name(y->dtype),
                       dp_cu_dtype_name(x->dtype));
  return dp_cu_avg_pool2d(c, dp_cu_ptr(y), dp_cu_ptr(x), x->dtype, &w);
}

static int cu_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_window2d *g) {
  ENTER(gx);
  dp_cu_window w = window(g);
  return dp_cu_avg_pool2d_backward(c, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(gy), gy->dtype, &w);
}

static int cu_bn_stats(dp_tensor *mean, dp_tensor *var, const dp_tensor *x, int64_t n, int64_t ch, int64_t inner) {
  ENTER(x);
  return dp_cu_bn_stats(c, vec(mean), vec(var), dp_cu_ptr(x), x->dtype, n, ch, inner);
}

static int cu_bn_forward(dp_tensor *y, const dp_tensor *x, const dp_tensor *mean, const dp_tensor *invstd,
                         const dp_tensor *w, const dp_tensor *b, int64_t n, int64_t ch, int64_t inner) {
  ENTER(x);
  return dp_cu_bn_forward(c, dp_cu_ptr(y), y->dtype, dp_cu_ptr(x), x->dtype, vec(mean), vec(invstd), vec(w), vec(b), n,
                          ch, inner);
}

static int cu_bn_backward_reduce(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_tensor *gy, const dp_tensor *x,
                                 const dp_tensor *mean, const dp_tensor *invstd, int64_t n, int64_t ch, int64_t inner) {
  ENTER(x);
  return dp_cu_bn_backward_reduce(c, vec(sum_dy), vec(sum_dy_xhat), dp_cu_ptr(gy), gy->dtype, dp_cu_ptr(x), x->dtype,
                                  vec(mean), vec(invstd), n, ch, inner);
}

static int cu_bn_backward_elemt(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x, const dp_tensor *mean,
                                const dp_tensor *invstd, const dp_tensor *w, const dp_tensor *sum_dy,
                                const dp_tensor *sum_dy_xhat, double count, int64_t n, int64_t ch, int64_t inner) {
  ENTER(x);
  return dp_cu_bn_backward_elemt(c, dp_cu_ptr(gx), gx->dtype, dp_cu_ptr(gy), gy->dtype, dp_cu_ptr(x), x->dtype,
                                 vec(mean), vec(invstd), vec(w), vec(sum_dy), vec(sum_dy_xhat), count, n, ch, inner);
}

static int cu_layer_norm(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_tensor *x, const dp_tensor *w,
                         const dp_tensor *b, int64_t rows, int64_t cols, double eps) {
  ENTER(x);
  return dp_cu_layer_norm(c, dp_cu_ptr(y), y->dtype, vec(mean), vec(rstd), dp_cu_ptr(x), x->dtype, vec(w), vec(b), rows,
                          cols, eps);
}

static int cu_layer_norm_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                                  const dp_tensor *mean, const dp_tensor *rstd, const dp_tensor *w, int64_t rows,
                                  int64_t cols) {
  ENTER(x);
  return dp_cu_layer_norm_backward(c, dp_cu_ptr(gx), gx->dtype, vec(gw), vec(gb), dp_cu_ptr(gy), gy->dtype,
                                   dp_cu_ptr(x), x->dtype, vec(mean), vec(rstd), vec(w), rows, cols);
}

/* index_select / index_add: an index out of range is found by the kernel
 * (the row is zero / skipped) and raised at the next sync point. */
static int cu_index_select(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int64_t base) {
  ENTER(src);
  int64_t rows = src->shape[0], d = rows ? dp_cu_numel(src) / rows : 0;
  if (out->dtype != src->dtype)
    return dp_cu_error("index_select: output (%s) and source (%s) must share a dtype", dp_cu_dtype_name(out->dtype),
                       dp_cu_dtype_name(src->dtype));
  return dp_cu_index_select(c, dp_cu_ptr(out), dp_cu_ptr(src), src->dtype, rows, d, dp_cu_ptr(idx), dp_cu_numel(idx),
                            base);
}

static int cu_index_add(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int64_t base) {
  ENTER(dst);
  int64_t rows = dst->shape[0], d = rows ? dp_cu_numel(dst) / rows : 0;
  return dp_cu_index_add(c, dp_cu_ptr(dst), dst->dtype, rows, d, dp_cu_ptr(idx), dp_cu_numel(idx), dp_cu_ptr(src),
                         src->dtype, base);
}

/* ---- optimizers ---- */
static int cu_sgd_step(dp_tensor *p, const dp_tensor *g, dp_tensor *buf, double lr, double momentum, double dampening,
                       double weight_decay, bool nesterov, bool first_step) {
  ENTER(p);
  return dp_cu_sgd_step(c, dp_cu_ptr(p), dp_cu_ptr(g), buf ? dp_cu_ptr(buf) : NULL, p->dtype, dp_cu_numel(p), lr,
                        momentum, dampening, weight_decay, nesterov, first_step);
}

static int cu_adam_step(dp_tensor *p, const dp_tensor *g, dp_tensor *m, dp_tensor *v, double lr, double beta1,
                        double beta2, double eps, double weight_decay, bool decoupled, int64_t step) {
  ENTER(p);
  double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
  return dp_cu_adam_step(c, dp_cu_ptr(p), dp_cu_ptr(g), dp_cu_ptr(m), dp_cu_ptr(v), p->dtype, dp_cu_numel(p), lr, beta1,
                         beta2, eps, weight_decay, decoupled, bc1, bc2);
}

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

static int cu_empty_cache(void) { return dp_cu_empty_cache(); }
static int cu_memory_stats(int device, dp_device_mem_stats *out) { return dp_cu_memory_stats(device, out); }

const dp_backend dp_cu_backend = {
    .name = "cuda",
    .device_count = cu_device_count,
    .alloc = cu_alloc,
    .free = cu_free,
    .synchronize = dp_cu_synchronize,
    .copy = cu_copy,
    .copy_from_cpu = dp_cu_copy_from_cpu,
    .copy_to_cpu = dp_cu_copy_to_cpu,
    .fill = cu_fill,
    .arange = cu_arange,
    .rand = cu_rand,
    .unary = cu_unary,
    .unary_backward = cu_unary_backward,
    .binary = cu_binary,
    .binary_scalar = cu_binary_scalar,
    .reduce = cu_reduce,
    .scatter_add_dim = cu_scatter_add_dim,
    .gemm = dp_cu_gemm,
    .bias_act = cu_bias_act,
    .channel_sum = cu_channel_sum,
    .softmax = cu_softmax,
    .softmax_backward = cu_softmax_backward,
    .cross_entropy = cu_cross_entropy,
    .cross_entropy_backward = cu_cross_entropy_backward,
    .im2col = cu_im2col,
    .col2im = cu_col2im,
    .max_pool2d = cu_max_pool2d,
    .max_pool2d_backward = cu_max_pool2d_backward,
    .avg_pool2d = cu_avg_pool2d,
    .avg_pool2d_backward = cu_avg_pool2d_backward,
    .bn_stats = cu_bn_stats,
    .bn_forward = cu_bn_forward,
    .bn_backward_reduce = cu_bn_backward_reduce,
    .bn_backward_elemt = cu_bn_backward_elemt,
    .layer_norm = cu_layer_norm,
    .layer_norm_backward = cu_layer_norm_backward,
    .dropout = cu_dropout,
    .index_select = cu_index_select,
    .index_add = cu_index_add,
    .sgd_step = cu_sgd_step,
    .adam_step = cu_adam_step,
    .unscale = cu_unscale,
    .unscale_list = cu_unscale_list,
    .memory_stats = cu_memory_stats,
    .empty_cache = cu_empty_cache,
    .set_option = dp_cu_set_option,
    .get_option = dp_cu_get_option,
    .device_name = dp_cu_device_name,
    .pg_new = dp_cu_pg_nccl_new,
};
