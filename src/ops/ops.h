/* The op layer: device-agnostic, differentiable operations.
 *
 * Each function checks its arguments (errors name shapes, dtypes, values),
 * allocates outputs on the inputs' device, calls the device backend and
 * records an autograd node when grad mode is on and an input requires grad.
 * All dims and indices are 0-based here (the Lua layer converts). Results
 * are new references; NULL + dp_errmsg() on error.
 *
 * Temporaries live in a scope (tensor/scope.h), released when the op
 * returns. Adding an op (docs/adding_an_op.md): an elementwise one is a row
 * in ops/op_table.h (name, node, what its backward reads, integer rule,
 * epilogue, parameters) and two formulas in ops/scalar_math_t.h; the CPU
 * and CUDA kernels, dp_unary, its autograd node and the Lua binding come
 * from the table, a module is one line in lua/ddplua/nn/activation.lua,
 * and a spec checks it against float64 references, finite differences and
 * PyTorch. Any other op: its kernels (backends/cpu, backends/cuda, taking
 * an argument struct when the signature is long), its entry in
 * backends/backend.h and backend.c's entry list, its forward + backward
 * function in the family's file here, its binding in src/lua, and a spec. */
#ifndef DP_OPS_H
#define DP_OPS_H

#include "backends/backend.h"
#include "tensor/tensor.h"

/* ---- numbers and type promotion (ops/promote.c) ---- */
/* A Lua number as an operand (PyTorch's "wrapped number"): an integer is
 * exact in int64, a float is a double; both are weakly typed. */
typedef struct {
  bool is_int;
  int64_t i; /* is_int */
  double d;  /* !is_int (and (double)i otherwise) */
} dp_number;
static inline dp_number dp_number_int(int64_t i) {
  dp_number n = {true, i, (double)i};
  return n;
}
static inline dp_number dp_number_float(double d) {
  dp_number n = {false, 0, d};
  return n;
}
/* A double typed as a Lua number holding it would be: whole values in
 * range are integers (internal callers pass positions, counts, 0.5 ...). */
dp_number dp_number_of_double(double v);
double dp_number_value(const dp_number *v);
/* A 0-dim tensor of dtype dt holding v cast as PyTorch casts a scalar
 * (an int64 exactly, uint8 modulo 256). */
dp_tensor *dp_number_tensor(const dp_number *v, dp_dtype dt, dp_device dev);
/* PyTorch's checked conversion of a scalar (fill_, clamp's bounds): an
 * error naming op when v overflows dt (uint8 takes -255..255, wrapping the
 * negatives). */
int dp_number_check(const char *op, const dp_number *v, dp_dtype dt);
/* PyTorch's result_type of a binary op (0-dim tensors and numbers take
 * part by category only; ops/promote.c explains the rule). */
dp_dtype dp_result_type(const dp_tensor *a, const dp_tensor *b);
dp_dtype dp_result_type_number(const dp_tensor *a, const dp_number *v);
/* Whether an in-place op may write a result of dtype `from` into `to`
 * (PyTorch's can_cast: not a float into an integer). */
bool dp_can_cast(dp_dtype from, dp_dtype to);
/* t in dtype dt (t itself, retained, when it has it); no autograd. */
dp_tensor *dp_cast_raw(dp_tensor *t, dp_dtype dt);

/* ---- elementwise (ops/elementwise.c) ---- */
/* y = op(x), op from the op table (ops/op_table.h) with its default
 * parameters; dp_unary_with takes them explicitly (a->p). */
dp_tensor *dp_unary(dp_unary_op op, dp_tensor *x);
dp_tensor *dp_unary_with(const dp_unary_args *a, dp_tensor *x);
/* Binary ops with broadcasting and PyTorch's type promotion: the operands
 * are cast to the result type (or float32 for an integer result of an
 * OUT_FLOAT op), computed there, and comparisons give uint8 0/1. */
dp_tensor *dp_binary(dp_binary_op op, dp_tensor *a, dp_tensor *b);
/* a (op) s, or s (op) a when scalar_first; s a Lua number (exact in
 * int64, rounded to a float result's dtype as PyTorch casts a scalar).
 * dp_binary_scalar types a double as dp_number_of_double does. */
dp_tensor *dp_binary_number(dp_binary_op op, dp_tensor *a, const dp_number *s, bool scalar_first);
dp_tensor *dp_binary_scalar(dp_binary_op op, dp_tensor *a, double s, bool scalar_first);
/* a + alpha * b (PyTorch's add(a, b, alpha=)), alpha applied after
 * promotion; a float alpha with an integer result is an error. */
dp_tensor *dp_add_scaled(dp_tensor *a, dp_tensor *b, const dp_number *alpha);
/* clamp(x, min, max) with either bound absent (NULL): exact in int64 for
 * integer bounds; a float bound makes an integer x float32 (PyTorch's
 * result type). */
dp_tensor *dp_clamp_number(dp_tensor *x, const dp_number *lo, const dp_number *hi);
static inline dp_tensor *dp_add(dp_tensor *a, dp_tensor *b) { return dp_binary(DP_B_ADD, a, b); }
static inline dp_tensor *dp_sub(dp_tensor *a, dp_tensor *b) { return dp_binary(DP_B_SUB, a, b); }
static inline dp_tensor *dp_mul(dp_tensor *a, dp_tensor *b) { return dp_binary(DP_B_MUL, a, b); }
static inline dp_tensor *dp_div(dp_tensor *a, dp_tensor *b) { return dp_binary(DP_B_DIV, a, b); }
static inline dp_tensor *dp_neg(dp_tensor *x) { return dp_unary(DP_U_NEG, x); }
/* In place, no autograd (grad accumulation, optimizers, running stats):
 * a = a (op) b with b broadcast to a's shape. */
int dp_binary_(dp_binary_op op, dp_tensor *a, dp_tensor *b);
int dp_binary_scalar_(dp_binary_op op, dp_tensor *a, double s);
/* Broadcast shape of a and b; error names both shapes. */
int dp_broadcast_shape(const dp_tensor *a, const dp_tensor *b, int *ndim, int64_t *shape);
/* View of t expanded (stride 0) to ndim/shape; raw, no autograd. */
dp_tensor *dp_expand_raw(dp_tensor *t, int ndim, const int64_t *shape);

/* ---- in-place writes a user asks for (ops/inplace.c): PyTorch's dtype
 * and overlap checks, refusal on a leaf that requires grad, and autograd
 * recording (CopySlices through views) ---- */
int dp_inplace_fill_(dp_tensor *t, const dp_number *v);
int dp_inplace_copy_(dp_tensor *dst, dp_tensor *src);
int dp_inplace_binary_(dp_binary_op op, dp_tensor *a, dp_tensor *b);
int dp_inplace_binary_number_(dp_binary_op op, dp_tensor *a, const dp_number *s);

/* ---- copies, casts, fills (ops/copy.c): no autograd, no checks ---- */
int dp_fill_(dp_tensor *t, double v);
/* dst <- src broadcast to dst's shape, casting dtype, across devices. */
int dp_copy_(dp_tensor *dst, dp_tensor *src);
dp_tensor *dp_contiguous(dp_tensor *t); /* t itself (retained) if already contiguous */
dp_tensor *dp_clone(dp_tensor *t);
dp_tensor *dp_detach(dp_tensor *t);
/* Cast and/or move; differentiable (the gradient is cast/moved back). */
dp_tensor *dp_to(dp_tensor *t, dp_dtype dt, dp_device dev);
dp_tensor *dp_arange(double start, double end, double step, dp_dtype dt, dp_device dev);

/* ---- views (ops/view.c): share storage, differentiable ---- */
/* shape may contain one -1 (inferred). view needs compatible strides;
 * reshape copies when it must. */
dp_tensor *dp_view(dp_tensor *t, int ndim, const int64_t *shape);
dp_tensor *dp_reshape(dp_tensor *t, int ndim, const int64_t *shape);
dp_tensor *dp_transpose(dp_tensor *t, int d0, int d1);
dp_tensor *dp_permute(dp_tensor *t, const int *perm);
dp_tensor *dp_narrow(dp_tensor *t, int dim, int64_t start, int64_t len);
dp_tensor *dp_select(dp_tensor *t, int dim, int64_t index);
dp_tensor *dp_expand(dp_tensor *t, int ndim, const int64_t *shape); /* -1 keeps a size */
dp_tensor *dp_flatten(dp_tensor *t, int start, int end);
dp_tensor *dp_unsqueeze(dp_tensor *t, int dim);
dp_tensor *dp_squeeze(dp_tensor *t, int dim); /* dim < 0: all size-1 dims */
dp_tensor *dp_cat(int n, dp_tensor *const *ts, int dim);
/* Rows of x along dim at positions idx (1-d int64, + base) (ops/index.c). */
dp_tensor *dp_index_select(dp_tensor *x, int dim, dp_tensor *idx, int64_t base);
/* T weighted taps along dim: out[.., j, ..] = sum_t w[t, j] * x[.., idx[t, j] - base, ..] (idx int64 [T, k], w
 * x's dtype [T, k]; ops/index.c) */
dp_tensor *dp_resample_dim(dp_tensor *x, int dim, dp_tensor *idx, dp_tensor *w, int64_t base);
/* The last two dims of x through the maps ih [oh], iw [ow] (int64 positions + base, base - 1: value): out [.., oh,
 * ow] (backend.h's plane_gather; ops/index.c) */
dp_tensor *dp_plane_gather(dp_tensor *x, dp_tensor *ih, dp_tensor *iw, double value, int64_t base);

/* ---- reductions (ops/reduce.c) ---- */
/* dims: list of 0-based dims (n = 0 means all). */
dp_tensor *dp_sum(dp_tensor *x, int n, const int *dims, bool keepdim);
dp_tensor *dp_mean(dp_tensor *x, int n, const int *dims, bool keepdim);
/* max/min over one dim: values, and (if indices != NULL) int64 0-based
 * positions. dim < 0 means over everything (values only). */
dp_tensor *dp_max(dp_tensor *x, int dim, bool keepdim, dp_tensor **indices);
dp_tensor *dp_min(dp_tensor *x, int dim, bool keepdim, dp_tensor **indices);
/* int64 positions + base (Lua passes 1). dim < 0: over the flattened tensor. */
dp_tensor *dp_argmax(dp_tensor *x, int dim, bool keepdim, int64_t base);
dp_tensor *dp_argmin(dp_tensor *x, int dim, bool keepdim, int64_t base);

/* ---- linear algebra (ops/matmul.c) ---- */
/* PyTorch's matmul: 1-d/2-d/batched with broadcasting of batch dims. */
dp_tensor *dp_matmul(dp_tensor *a, dp_tensor *b);
/* y = x w^T + b (b may be NULL), bias fused into the GEMM epilogue. act < 0
 * for none, or a unary op the op table marks EPILOGUE (relu, tanh,
 * sigmoid) to fuse the activation as well. */
dp_tensor *dp_linear(dp_tensor *x, dp_tensor *w, dp_tensor *b, int act);

/* ---- nn functional (ops/loss.c, conv.c, pool.c, norm.c, nn_misc.c) ---- */
dp_tensor *dp_softmax(dp_tensor *x, int dim);
dp_tensor *dp_log_softmax(dp_tensor *x, int dim);
typedef enum { DP_REDUCE_NONE, DP_REDUCE_MEAN, DP_REDUCE_SUM } dp_reduction;
/* logits [N, C] or [N, C, d...]; target int64 [N] / [N, d...] holding class
 * positions + base. */
dp_tensor *dp_cross_entropy(dp_tensor *logits, dp_tensor *target, dp_reduction red, double smoothing,
                            int64_t ignore_index, int64_t base);
/* Broadcasting a and b, as PyTorch (which warns when the shapes differ:
 * the Lua binding does). */
dp_tensor *dp_mse_loss(dp_tensor *a, dp_tensor *b, dp_reduction red);
/* PyTorch's loss options (ops/loss_nll.c). */
typedef struct {
  dp_reduction reduction;
  double label_smoothing; /* cross_entropy */
  int64_t ignore_index;
  int64_t base;      /* class positions count from base (Lua: 1) */
  dp_tensor *weight; /* [C] class weights, or NULL */
} dp_loss_opts;
/* cross_entropy with every option: class-position targets (int64) or class
 * probabilities (a float target of the logits' shape), class weights; the
 * plain case is dp_cross_entropy's fused kernel. */
dp_tensor *dp_cross_entropy_opts(dp_tensor *logits, dp_tensor *target, const dp_loss_opts *o);
/* nll_loss of log-probabilities [N, C], [N, C, d...] or [C] (label_smoothing unused). */
dp_tensor *dp_nll_loss(dp_tensor *logp, dp_tensor *target, const dp_loss_opts *o);
/* PyTorch's F.conv2d arguments ({h, w} pairs; groups >= 1). */
typedef struct {
  int64_t stride[2], padding[2], dilation[2];
  int64_t groups;
} dp_conv2d_args;
/* x [N, C, H, W] or [C, H, W], w [O, C / groups, kh, kw], b [O] or NULL. */
dp_tensor *dp_conv2d(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv2d_args *a);
/* CTC loss: log_probs [T, N, C] (float32 / float64), targets int64 ([N, S] padded, or the labels concatenated),
 * input_lengths and target_lengths int64 [N]; labels count from base, blank is 0-based. Each sample's negative
 * log-likelihood [N] (0 for an impossible alignment with zero_infinity), autograd to log_probs (ops/ctc.c). */
dp_tensor *dp_ctc_loss(dp_tensor *log_probs, dp_tensor *targets, dp_tensor *input_lengths, dp_tensor *target_lengths,
                       int64_t blank, int64_t base, bool zero_infinity);
/* A 3-d convolution's arguments ({d, h, w} triples; groups >= 1). */
typedef struct {
  int64_t stride[3], padding[3], dilation[3];
  int64_t groups;
} dp_conv3d_args;
/* x [N, C, D, H, W], w [O, C / groups, kd, kh, kw], b [O] or NULL, by the backend's direct 3-d convolution; NULL
 * with *declined set (no error) where it has none for the case (ops/conv3d.c says which), NULL after dp_error
 * for bad arguments. */
dp_tensor *dp_conv3d_direct(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv3d_args *a, bool *declined);
/* A transposed 3-d convolution's arguments ({d, h, w} triples; groups >= 1; output_padding below the stride or
 * the dilation). */
typedef struct {
  int64_t stride[3], padding[3], output_padding[3], dilation[3];
  int64_t groups;
} dp_conv_transpose3d_args;
/* x [N, C, D, H, W], w [C, O / groups, kd, kh, kw], b [O] or NULL; as dp_conv3d_direct (declined: NULL, *declined
 * set, no error; also for an output_padding past the padding). */
dp_tensor *dp_conv_transpose3d_direct(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv_transpose3d_args *a,
                                      bool *declined);
/* PyTorch's F.conv_transpose2d arguments ({h, w} pairs; groups >= 1;
 * output_padding below the stride). */
typedef struct {
  int64_t stride[2], padding[2], output_padding[2], dilation[2];
  int64_t groups;
} dp_conv_transpose2d_args;
/* x [N, Cin, H, W] or [Cin, H, W], w [Cin, Cout / groups, kh, kw], b [Cout] or NULL. */
dp_tensor *dp_conv_transpose2d(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv_transpose2d_args *a);
/* PyTorch's F.max_pool2d / F.avg_pool2d arguments: padding at most half
 * the kernel; ceil_mode rounds the output size up (a last window must
 * start inside the padded input); avg divides by the window within the
 * padded input (count_include_pad=true, PyTorch's default), by its
 * positions inside the input (exclude_pad: count_include_pad=false), or by
 * divisor_override when it is > 0. Zeroed fields are PyTorch's defaults. */
typedef struct dp_pool2d_args {
  int64_t kernel[2], stride[2], padding[2];
  bool ceil_mode;
  bool exclude_pad;
  int64_t divisor_override;
} dp_pool2d_args;
/* F.unfold / F.fold (ops/unfold.c): x [N, C, H, W] or [C, H, W] -> [N, C * kh * kw, L] or [C * kh * kw, L], the
 * L = oh * ow sliding blocks as columns (im2col), and back, overlaps summed (col2im); each the other's gradient */
typedef struct dp_unfold_args {
  int64_t kernel[2], dilation[2], padding[2], stride[2];
} dp_unfold_args;
dp_tensor *dp_unfold2d(dp_tensor *x, const dp_unfold_args *a);
dp_tensor *dp_fold2d(dp_tensor *cols, const int64_t output_size[2], const dp_unfold_args *a);
dp_tensor *dp_max_pool2d(dp_tensor *x, const dp_pool2d_args *a);
dp_tensor *dp_avg_pool2d(dp_tensor *x, const dp_pool2d_args *a);
/* x [N, C, ...]; running stats updated in place when training (may be
 * NULL); w, b may be NULL. Training uses the batch statistics (biased
 * variance) and moves running_mean/running_var towards them by momentum,
 * the variance unbiased (PyTorch's rule); evaluation uses the running ones. */
dp_tensor *dp_batch_norm(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                         bool training, double momentum, double eps);
/* relu(dp_batch_norm(...)), the same values and gradients, in one pass and
 * one autograd node on the CPU (nn.Sequential's BatchNorm + ReLU). */
dp_tensor *dp_batch_norm_relu(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w, dp_tensor *b,
                              bool training, double momentum, double eps);
/* dp_max_pool2d(dp_batch_norm_relu(...), pool), the same values and
 * gradients, fused where the backend can (ops/norm_pool.c) */
dp_tensor *dp_batch_norm_relu_max_pool2d(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                         dp_tensor *b, bool training, double momentum, double eps,
                                         const dp_pool2d_args *pool);
/* Whether those arguments (training or not) take the fused kernels. */
bool dp_bn_relu_pool_fusable(const dp_tensor *x, const dp_tensor *rm, const dp_tensor *rv, const dp_tensor *w,
                             const dp_tensor *b, bool training, double eps);
/* SyncBatchNorm's hooks into the fused op (distributed/sync_bn.c): x's
 * mean and biased var over every rank ([C], x's dtype) and the count they
 * cover; and a float32 tensor summed over every rank in place. */
typedef struct dp_bn_sync {
  int (*stats)(void *group, dp_tensor *x, dp_tensor **mean, dp_tensor **var, double *count);
  int (*sum)(void *group, dp_tensor *t);
  void *group;
} dp_bn_sync;
/* The fused op in training mode with the statistics and the backward's sums
 * taken over every rank through sync; the same values and gradients as
 * SyncBatchNorm, ReLU and max_pool2d. Only for fusable arguments (an error
 * otherwise). */
dp_tensor *dp_bn_relu_pool_synced(dp_tensor *x, dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *w,
                                  dp_tensor *b, double momentum, double eps, const dp_pool2d_args *pool,
                                  const dp_bn_sync *sync);
/* The pieces dp_batch_norm is made of, without autograd, for
 * SyncBatchNorm (ops/norm.c): stats per rank -> all-gather -> gather_stats
 * -> update_stats / invstd -> elemt; backward: backward_reduce ->
 * all-reduce of both sums -> backward_elemt with the global count.
 * Per-channel tensors are [C]; they are cast to x's dtype where needed. */
/* mean and biased variance per channel (x's dtype); *count (may be NULL)
 * gets the number of values per channel. */
int dp_batch_norm_stats(dp_tensor *x, dp_tensor **mean, dp_tensor **var, int64_t *count);
/* Global statistics from per-replica ones: mean_all, var_all [R, C],
 * counts [R] -> mean, biased var [C]; *total (may be NULL) = sum of counts. */
int dp_batch_norm_gather_stats(dp_tensor *mean_all, dp_tensor *var_all, dp_tensor *counts, dp_tensor **mean,
                               dp_tensor **var, double *total);
/* In place: running = (1 - momentum) * running + momentum * stat, with the
 * variance made unbiased by count / (count - 1). */
int dp_batch_norm_update_stats(dp_tensor *running_mean, dp_tensor *running_var, dp_tensor *mean, dp_tensor *var,
                               double count, double momentum);
dp_tensor *dp_batch_norm_invstd(dp_tensor *var, double eps); /* 1 / sqrt(var + eps) */
/* y = (x - mean) * invstd * w + b; w, b may be NULL. */
dp_tensor *dp_batch_norm_elemt(dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w, dp_tensor *b);
/* Per channel: sum_dy = sum of gy (the bias gradient), sum_dy_xhat = sum
 * of gy * (x - mean) * invstd (the weight gradient). */
int dp_batch_norm_backward_reduce(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor **sum_dy,
                                  dp_tensor **sum_dy_xhat);
/* gx = w * invstd * (gy - sum_dy / count - xhat * sum_dy_xhat / count);
 * w may be NULL. */
dp_tensor *dp_batch_norm_backward_elemt(dp_tensor *gy, dp_tensor *x, dp_tensor *mean, dp_tensor *invstd, dp_tensor *w,
                                        dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, double count);
/* Normalises over the last n_norm_dims dims; w, b (or NULL) have their shape. */
dp_tensor *dp_layer_norm(dp_tensor *x, int n_norm_dims, dp_tensor *w, dp_tensor *b, double eps);
/* group_norm of x [N, C, *] in groups of C / groups channels, weight and bias [C] or NULL, with autograd (backends
 * with group_norm: group_norm.c) */
dp_tensor *dp_group_norm(dp_tensor *x, int64_t groups, dp_tensor *w, dp_tensor *b, double eps);
/* p in [0, 1]; the identity when !training or p == 0; zeros when p == 1. */
dp_tensor *dp_dropout(dp_tensor *x, double p, bool training);
/* weight [num, dim]; idx int64 any shape, positions + base; the result is
 * [idx shape..., dim]. A bad id is an error naming it and its position. */
/* padding_row: the 0-based row whose gradient stays zero (padding_idx), -1 for none */
dp_tensor *dp_embedding(dp_tensor *weight, dp_tensor *idx, int64_t base, int64_t padding_row);

/* ---- optimizer steps (ops/optim.c): in place, no autograd ----
 * One update of parameter p from its gradient g (any strides) and its
 * state (buf may be NULL without momentum); the gradient and the state
 * must match p, which must be contiguous. `who` names p in errors ("SGD:
 * parameter 3"). */
int dp_sgd_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *buf, const dp_sgd_args *a);
int dp_adam_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *m, dp_tensor *v, const dp_adam_args *a);

/* ---- random numbers (ops/random.c): Philox, one global generator ---- */
void dp_manual_seed(uint64_t seed);
uint64_t dp_rng_seed(void);
/* Reserves n counters; returns the first. */
uint64_t dp_rng_reserve(uint64_t n);
void dp_rng_get_state(uint64_t *seed, uint64_t *offset);
void dp_rng_set_state(uint64_t seed, uint64_t offset);
dp_tensor *dp_rand(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev);
dp_tensor *dp_randn(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev);
/* t's elements drawn as dp_rand (normal: dp_randn) would draw them, in place (t contiguous, floating point) */
int dp_rand_(dp_tensor *t, bool normal);
/* int64 permutation of 0..n-1 (+base) on the CPU, from the generator. */
dp_tensor *dp_randperm(int64_t n, int64_t base);
/* Same from an explicit generator state (a Generator object, a sampler's
 * seed + epoch): uses counters [offset, offset + n). */
dp_tensor *dp_randperm_with(int64_t n, int64_t base, uint64_t seed, uint64_t offset);

#endif
