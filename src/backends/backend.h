/* The backend interface: one struct of function pointers per device type
 * (ggml's pattern). The op layer in src/ops checks arguments, allocates
 * outputs, records autograd and calls these; a backend only computes.
 *
 * Conventions every backend follows:
 *  - return 0, or -1 after dp_error(...);
 *  - tensors live on the backend's device; "contiguous" in a comment means
 *    the op layer guarantees it, otherwise arbitrary strides are allowed
 *    (including 0-strides from broadcasting) for inputs, and outputs are
 *    dense in the given strides (never overlapping);
 *  - index tensors are int64 and `base` says whether they count from 0 or 1
 *    (Lua positions are 1-based; internal users pass 0);
 *  - floating math follows the scalar functions of ops/scalar_math.h, which
 *    the CPU and CUDA kernels share, so both devices compute the same
 *    arithmetic.
 * The CUDA backend is a plugin (ddplua_cuda.so) loaded on first use, so the
 * runtime starts fast and builds without a CUDA toolkit. */
#ifndef DP_BACKEND_H
#define DP_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "distributed/store.h"
#include "ops/model_math.h"
#include "ops/op_table.h"
#include "tensor/tensor.h"

/* C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b], row-major, b < batch.
 * A is m x k after op, B is k x n after op; ld* are row strides of the
 * matrices as stored; stride* are batch strides in elements. */
typedef struct {
  dp_dtype dtype; /* F32 or F64 (BF16/F16 on CUDA with F32 accumulation) */
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  double alpha, beta;
  const void *a;
  int64_t lda, stride_a;
  const void *b;
  int64_t ldb, stride_b;
  void *c;
  int64_t ldc, stride_c;
  int device;
} dp_gemm_args;

/* 2-d sliding-window geometry shared by conv (im2col) and pooling: output
 * position o along an axis reads inputs o * s - p + i * d for kernel
 * offsets i < k (d, the dilation, is 1 for pooling). */
typedef struct {
  int64_t n, c, h, w; /* input NCHW */
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t dh, dw; /* dilation */
  int64_t oh, ow; /* output spatial size */
  int64_t groups; /* convolution groups (0 or 1: dense; c and the output channels divide by it) */
  /* average pooling's divisor (dp_avgpool_div): 0 the window within the padded input (count_include_pad,
   * PyTorch's default), DP_AVGPOOL_VALID its positions inside the input (count_include_pad=false), > 0 that
   * number (divisor_override) */
  int64_t divisor;
} dp_window2d;

/* A 3-d convolution's geometry: input [n, c, d, h, w], weight [o, c / groups, kd, kh, kw]; output position o
 * along an axis reads inputs o * s - p + i * dil for kernel offsets i < k, as dp_window2d's. */
typedef struct {
  int64_t n, c, d, h, w;
  int64_t kd, kh, kw, sd, sh, sw, pd, ph, pw;
  int64_t dd, dh, dw; /* dilation */
  int64_t od, oh, ow; /* output spatial size */
  int64_t groups;     /* >= 1 */
} dp_window3d;

/* Connectionist temporal classification of log-probabilities [T, N, C] (contiguous float32 or float64) against
 * each sample's labels (0-based, not the blank): sample n's are targets[offsets[n] ..] (target_lengths[n] of
 * them), its inputs the first input_lengths[n] steps; host arrays, checked by ops/ctc.c. */
typedef struct {
  const dp_tensor *log_probs;
  const int64_t *targets, *offsets, *input_lengths, *target_lengths;
  int64_t blank, max_target_length;
  bool zero_infinity;
  /* Optional: the forward's log_alpha tables (sample n's input_lengths[n] * (2 * target_lengths[n] + 1) doubles at
   * alpha + alpha_offsets[n]) for the backward to read instead of recomputing them; NULL: none kept */
  double *alpha;
  const int64_t *alpha_offsets;
} dp_ctc_args;

/* Reductions over the middle axis of x seen as [outer, k, inner]; index
 * tensors count from base. */
typedef struct {
  dp_reduce_op op; /* reduce only */
  int64_t outer, k, inner;
  int64_t base;
} dp_reduce_args;

/* Cross-entropy of logits x [rows, classes] with int64 targets [rows]
 * (class positions + base). Rows whose target equals ignore_index get loss
 * 0. Label smoothing eps: loss = (1-eps)*nll + eps*mean_j(-logp_j). */
typedef struct {
  const dp_tensor *x, *target;
  const dp_tensor *lse;   /* backward: the forward's per-row max and log(sum(exp(x - max))), float64 [rows, 2] */
  const dp_tensor *scale; /* backward: per-row upstream gradient over the normaliser (0 for ignored rows) */
  int64_t base, ignore_index;
  double smoothing;
} dp_ce_args;

/* Batch norm over x seen as [n, c, inner] (contiguous): every per-channel
 * tensor is contiguous [c] in x's dtype (the op layer converts). */
typedef struct {
  int64_t n, c, inner;
  const dp_tensor *x;
  const dp_tensor *mean, *invstd;        /* forward and backward */
  const dp_tensor *w, *b;                /* affine; NULL for none (b: forward only) */
  const dp_tensor *gy;                   /* backward: the upstream gradient, x's shape */
  const dp_tensor *sum_dy, *sum_dy_xhat; /* backward_elemt: the per-channel sums */
  double count;                          /* backward_elemt: the values the sums cover */
  /* batch norm followed by ReLU (CPU, float32/float64 only; the op layer
   * composes the two elsewhere): forward y = relu(affine); backward gy
   * counts only where that output is > 0, recomputed from x, mean, invstd,
   * w and b (b then given to the backward too) by the forward's own code,
   * so the mask is the forward's bit for bit */
  bool relu;
  /* batch norm + ReLU + max pooling (bn_relu_pool_backward; the forward
   * with a->relu and a->pool: y is the pooled output, [n, c, oh, ow]):
   * the backward's gy is the pooled output's gradient, and the pooling's
   * winners are recomputed from x like the ReLU's mask. eval_stats: the
   * statistics were constants (evaluation mode), gx = gy * w * invstd. */
  const dp_window2d *pool;
  bool eval_stats;
  /* bn_relu_pool_backward around SyncBatchNorm's all-reduce: 0 both passes;
   * 1 the first only (gx gets the masked rows, the sums are this rank's);
   * 2 the second only (gx in place, from sum_dy, sum_dy_xhat and count given:
   * the global ones; the sums out are not written and may be NULL) */
  int phase;
} dp_bn_args;

/* Layer norm over the cols of x [rows, cols] (contiguous); mean and rstd
 * [rows] in x's dtype, w and b [cols] (x's dtype) or NULL. */
typedef struct {
  int64_t rows, cols;
  const dp_tensor *x, *w, *b;
  const dp_tensor *mean, *rstd; /* backward: the forward's statistics */
  const dp_tensor *gy;          /* backward */
  double eps;                   /* forward */
} dp_ln_args;

/* Group norm of x [n, c, hw] (contiguous) in `groups` groups of c / groups
 * channels: each group's (c / groups) * hw values normalised by their mean
 * and biased variance, then y = xhat * w[c] + b[c] (w, b [c] in x's dtype
 * or NULL); mean and rstd [n * groups] float64. */
typedef struct {
  int64_t n, c, hw, groups;
  const dp_tensor *x, *w, *b;
  const dp_tensor *mean, *rstd; /* backward: the forward's statistics */
  const dp_tensor *gy;          /* backward */
  double eps;                   /* forward */
} dp_gn_args;

/* Optimizer hyper-parameters (PyTorch's names and semantics). */
typedef struct {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step; /* the momentum buffer starts as the gradient */
} dp_sgd_args;
typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled; /* AdamW */
  int64_t step;   /* 1 at the first step (bias corrections) */
  /* amsgrad: the running maximum of exp_avg_sq (contiguous, like the
   * parameter), updated in place and used in the denominator; NULL
   * without amsgrad */
  dp_tensor *max_exp_avg_sq;
} dp_adam_args;

/* Scaled dot-product attention over q [b1, b2, L, E], k [b1, b2, S, E], v
 * [b1, b2, S, Ev] (q's batch dims folded into two; any strides with a
 * unit one along the last dim), as flash attention computes it: tiles of
 * scores with an online softmax, so no [L, S] matrix is kept; the forward
 * saves only the output and each row's log-sum-exp, the backward
 * recomputes the scores. mask (NULL for none) is a [b1, b2, L, S] view
 * (stride 0 where broadcast): uint8 (nonzero takes part) or x's dtype
 * (added to the scores). causal keeps j <= i. Rows with no key left give
 * 0 (and lse -inf). Dropout zeroes the weights where dp_attn_keep
 * (ops/model_math.h) says so, scaling the rest by 1 / (1 - p). The
 * output, the gradients gq, gk, gv and (backward) out and gout are
 * [b1, b2, rows, cols] views too: the CPU kernels honour their strides
 * (unit along the last dim), the CUDA ones take them contiguous; lse is a
 * contiguous float64 [b1 b2 L], the mask's gradient contiguous. */
typedef struct {
  int64_t b1, b2, L, S, E, Ev;
  const dp_tensor *q, *k, *v, *mask;
  bool mask_bool, causal;
  double scale, dropout_p;
  uint64_t seed, offset;
  /* backward: the forward's output and lse, and the output's gradient. The
   * CPU kernels take bfloat16 operands in float32 (rounding what they
   * write once); there out may be the float32 output before its rounding
   * (out_f32), which the backward's rowsum(dO O) then reads, as float32
   * attention of the widened operands would. */
  const dp_tensor *out, *lse, *gout;
  /* forward, CPU, bfloat16 operands: NULL, or a float32 [b1, b2, L, Ev]
   * view (unit last stride) that receives the output unrounded too */
  dp_tensor *out_f32;
} dp_attn_args;

/* One time step of a recurrent layer for `rows` rows of h = `hidden` units (dp_rnn_mode,
 * ops/model_math.h; G = dp_rnn_gates gate blocks). xp: the step's input
 * projection [n, G h] with b_ih; hp: h_{t-1} W_hh^T [n, G h] without bias;
 * bhh [G h] or NULL. Each tensor 2-d [rows, ...]: unit stride along a row,
 * any row stride. */
typedef struct {
  dp_rnn_mode mode;
  int64_t rows, hidden;
  const dp_tensor *xp, *hp, *bhh, *h_prev, *c_prev; /* c_prev: LSTM */
  /* forward writes h (and c for LSTM) and the saved values (dp_rnn_saved x h per row) */
  dp_tensor *h_out, *c_out, *saved;
  /* backward: gh the whole gradient reaching h_t, gc the one reaching c_t
   * (LSTM; NULL for zero); c the step's c_t; writes gxp [n, G h] (the
   * pre-activation gradient), ghp [n, G h] (the hidden projection's: gxp
   * itself but for GRU's n block), gc_prev (LSTM) and gh_direct (GRU:
   * z gh, the share of h_{t-1} outside the projection) */
  const dp_tensor *gh, *gc, *c, *h;
  dp_tensor *gxp, *ghp, *gc_prev, *gh_direct;
} dp_rnn_cell_args;

/* RMSprop, Adadelta and Adagrad (PyTorch's semantics, ops/model_math.h). */
typedef struct {
  double lr, alpha, eps, weight_decay, momentum;
  bool centered;
} dp_rmsprop_args;
typedef struct {
  double lr, rho, eps, weight_decay;
} dp_adadelta_args;
typedef struct {
  double clr; /* lr / (1 + (step - 1) lr_decay) */
  double eps, weight_decay;
} dp_adagrad_args;

/* Device memory accounting (the CUDA caching allocator). */
typedef struct {
  size_t live_bytes;                /* bytes held by tensors (rounded to the block size) */
  size_t peak_bytes;                /* high-water mark of live_bytes */
  size_t cached_bytes;              /* freed blocks kept for reuse */
  size_t allocs;                    /* allocations served */
  size_t cache_hits;                /* ... of which from the cache */
  size_t device_mallocs;            /* cudaMalloc calls */
  size_t device_total, device_free; /* as the driver reports them */
} dp_device_mem_stats;

struct dp_pg;
struct dp_pg_init;

typedef struct dp_backend {
  const char *name;
  int (*device_count)(void);
  void *(*alloc)(int device, size_t nbytes);
  void (*free)(int device, void *p, size_t nbytes);
  int (*synchronize)(int device); /* device < 0: every device in use */

  /* dst <- src, same device, any strides, casting dtypes. */
  int (*copy)(dp_tensor *dst, const dp_tensor *src);
  /* Contiguous, same dtype and size, one side on the CPU. NULL on the CPU
   * backend. */
  int (*copy_from_cpu)(dp_tensor *dst, const dp_tensor *src_cpu);
  int (*copy_to_cpu)(dp_tensor *dst_cpu, const dp_tensor *src);
  int (*fill)(dp_tensor *t, double v);
  /* out[i] = start + i * step (out contiguous, any dtype) */
  int (*arange)(dp_tensor *out, double start, double step);
  /* Philox(seed, offset + i): same numbers on every backend. out contiguous. */
  int (*rand)(dp_tensor *out, dp_rand_kind kind, uint64_t seed, uint64_t offset, double a, double b);

  /* ---- elementwise: out and inputs have the same shape ---- */
  /* a: the op and its parameters (ops/op_table.h); the math is its
   * formulas in ops/scalar_math_t.h. */
  int (*unary)(const dp_unary_args *a, dp_tensor *out, const dp_tensor *x);
  /* gx from gy and x (the input) or y (the output): the one the op table's
   * grad column names is given, the other may be NULL. */
  int (*unary_backward)(const dp_unary_args *a, dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x,
                        const dp_tensor *y);
  /* Optional (NULL: unary, and unary_backward from x later): out = op(x) and d = op'(x) in float32 (d the
   * factor the backward multiplies gy by, so gx = gy * d is unary_backward's result bit for bit), for the
   * ops whose backward recomputes a costly derivative from x (GELU). 1 done, 0 declined (the caller falls
   * back), -1 error. out, d and x contiguous, of one shape. d NULL only asks: 1 if it would take these
   * operands, 0 if not, nothing written (so the caller allocates d only when it will be filled). */
  int (*unary_with_grad)(const dp_unary_args *a, dp_tensor *out, dp_tensor *d, const dp_tensor *x);
  int (*binary)(dp_binary_op op, dp_tensor *out, const dp_tensor *a, const dp_tensor *b);
  /* out = a (op) s, or s (op) a when scalar_first. */
  int (*binary_scalar)(dp_binary_op op, dp_tensor *out, const dp_tensor *a, double s, bool scalar_first);

  /* ---- reductions: x contiguous, seen as [outer, k, inner]; out (and idx
   * for MAX/MIN, may be NULL) contiguous [outer, inner]. ARGMAX/ARGMIN
   * write int64 positions (+base) into out. ---- */
  int (*reduce)(dp_tensor *out, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a);
  /* gx (contiguous [outer,k,inner], zeroed by the caller) [o, idx[o,i], i] += gy[o,i] */
  int (*scatter_add_dim)(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_reduce_args *a);

  int (*gemm)(const dp_gemm_args *g);

  /* ---- nn ---- */
  /* y [outer, c, inner] contiguous, in place: y = act(y + bias[c]); bias and
   * act (a unary op, usually one the op table marks EPILOGUE) may be NULL. */
  int (*bias_act)(dp_tensor *y, const dp_tensor *bias, const dp_unary_args *act, int64_t outer, int64_t c,
                  int64_t inner);
  /* Optional (NULL: gemm, then bias_act): gemm, then C[b][i][j] += bias[j]
   * (bias: g->n contiguous values of g->dtype), the add done as the GEMM
   * stores C rather than in a pass of its own (linear's bias). */
  int (*gemm_bias)(const dp_gemm_args *g, const void *bias);
  /* gb[c] = sum over outer, inner of gy [outer, c, inner] (contiguous) */
  int (*channel_sum)(dp_tensor *gb, const dp_tensor *gy, int64_t outer, int64_t c, int64_t inner);
  /* rows x cols, contiguous. */
  int (*softmax)(dp_tensor *y, const dp_tensor *x, int64_t rows, int64_t cols, bool log);
  int (*softmax_backward)(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *y, int64_t rows, int64_t cols, bool log);
  /* Per-row loss (float dtype of x) and log-sum-exp (float64: the op layer
   * keeps it exact for large logits; backends store whatever dtype lse has)
   * of the logits (dp_ce_args). A target out of range is an error naming
   * it. */
  int (*cross_entropy)(dp_tensor *loss, dp_tensor *lse, const dp_ce_args *a);
  /* gx = (softmax(x) - smoothed_onehot) * scale[row] */
  int (*cross_entropy_backward)(dp_tensor *gx, const dp_ce_args *a);
  /* cols [nb, c*kh*kw, oh*ow] from images n0..n0+nb-1 of x (contiguous),
   * with the window's dilation. */
  int (*im2col)(dp_tensor *cols, const dp_tensor *x, const dp_window2d *g, int64_t n0, int64_t nb);
  /* gx images n0.. += col2im(cols); gx zeroed by the caller. */
  int (*col2im)(dp_tensor *gx, const dp_tensor *cols, const dp_window2d *g, int64_t n0, int64_t nb);
  /* Pooling: x, gy, y, idx contiguous NCHW; windows follow
   * dp_window_range (ops/scalar_math.h), padding <= kernel / 2 and the
   * last window (ceil mode) starting inside the padded input, so no window
   * is empty. idx (int64) holds the winner's position iy * w + ix
   * in its plane; the last NaN wins, else the first maximum (PyTorch's). The backward kernels
   * overwrite gx (contiguous, x's shape). */
  int (*max_pool2d)(dp_tensor *y, dp_tensor *idx, const dp_tensor *x, const dp_window2d *g);
  int (*max_pool2d_backward)(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_window2d *g);
  /* count_include_pad semantics as PyTorch's default (true). */
  int (*avg_pool2d)(dp_tensor *y, const dp_tensor *x, const dp_window2d *g);
  int (*avg_pool2d_backward)(dp_tensor *gx, const dp_tensor *gy, const dp_window2d *g);
  /* Batch norm (dp_bn_args; y, gx contiguous like x). mean and biased
   * var [c] of x. */
  int (*bn_stats)(dp_tensor *mean, dp_tensor *var, const dp_bn_args *a);
  /* var and std: the mean and the sum of squared deviations over the
   * middle dim of x seen as [p, r, q] (contiguous, float32 or float64,
   * r >= 1), accumulated in double, into float64 [p, q] tensors mean and
   * m2. NULL: the op layer composes them from its float64 ops. */
  int (*moments)(dp_tensor *mean, dp_tensor *m2, const dp_tensor *x, int64_t p, int64_t r, int64_t q);
  /* norm and mse_loss: out[i, k] = sum over j of (x - y)^2 at [i, j, k] of
   * x and y seen as [p, r, q] (contiguous float32, y the same shape or NULL
   * for x^2), the difference and square in float32 (PyTorch's values: a
   * 1e20's square is inf), summed in double into the float64 [p, q] out.
   * NULL: the op layer composes it from its float32 ops. */
  int (*sum_squares)(dp_tensor *out, const dp_tensor *x, const dp_tensor *y, int64_t p, int64_t r, int64_t q);
  /* y = (x - mean) * invstd * w + b */
  int (*bn_forward)(dp_tensor *y, const dp_bn_args *a);
  /* sum_dy[c] = sum gy; sum_dy_xhat[c] = sum gy * (x - mean) * invstd */
  int (*bn_backward_reduce)(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a);
  /* gx = w*invstd*(gy - sum_dy/count - xhat*sum_dy_xhat/count) */
  int (*bn_backward_elemt)(dp_tensor *gx, const dp_bn_args *a);
  /* The backward of max_pool2d(relu(batch_norm(x))) in one call (float32;
   * NULL: the op layer composes the three ops): gx and the two sums of
   * bn_backward_reduce, the same bits as the three ops' backwards. */
  int (*bn_relu_pool_backward)(dp_tensor *gx, dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a);
  /* Layer norm (dp_ln_args): y, and the statistics mean, rstd [rows]. */
  int (*layer_norm)(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_ln_args *a);
  /* gw, gb may be NULL (no affine); they are overwritten, not accumulated. */
  int (*layer_norm_backward)(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_ln_args *a);
  /* Group norm (dp_gn_args; float32 / float64): y and the statistics, and
   * the backward's gx, gw, gb (gw, gb NULL when not wanted). NULL: the Lua
   * side composes layer_norm over the groups and the channels' affine map. */
  int (*group_norm)(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_gn_args *a);
  int (*group_norm_backward)(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_gn_args *a);
  /* out = x * keep / (1 - p), keep = Philox-uniform(seed, offset + i) >= p.
   * Same call on gy gives the backward (the mask is recomputed). */
  int (*dropout)(dp_tensor *out, const dp_tensor *x, double p, uint64_t seed, uint64_t offset);
  /* out [n, d] = src[idx[i] - base, :] for src [rows, d] contiguous; an index
   * out of range is an error naming it and its position. */
  int (*index_select)(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int64_t base);
  /* dst[idx[i] - base, :] += src[i, :] */
  int (*index_add)(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int64_t base);
  /* Along any dim: out [outer, k, inner] = x [outer, n,
   * inner] at the k positions idx - base of its middle dim (x and out
   * contiguous; an index out of range is an error naming it), and the
   * gradient gx [outer, n, inner] = 0 + gy's rows added at those positions
   * (float32 / float64; accumulate: added to gx's values instead, the op
   * index_add). NULL: the op layer moves the dim to the front for
   * index_select / index_add. */
  int (*index_select_dim)(dp_tensor *out, const dp_tensor *x, const dp_tensor *idx, int64_t outer, int64_t n,
                          int64_t inner, int64_t base);
  int (*index_add_dim)(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, int64_t outer, int64_t n,
                       int64_t inner, int64_t base, bool accumulate);
  /* The last two dims read through index maps (the paddings' reflect, replicate, circular, constant and crops;
   * nearest interpolation): x contiguous [outer, h, w] (any dtype), out [outer, oh, ow], ih / iw contiguous int64
   * [oh] / [ow] of positions + base, base - 1 for `value`: out[o, i, j] = x[o, ih[i] - base, iw[j] - base], value
   * where either map holds base - 1; a map value outside base - 1 .. base + h - 1 (w) is an error naming it. The
   * gradient gx [outer, h, w] = 0 + gy[o, i, j] added at those places (float32 / float64). NULL: the Lua side
   * composes index_select / cat per dim. */
  int (*plane_gather)(dp_tensor *out, const dp_tensor *x, const dp_tensor *ih, const dp_tensor *iw, double value,
                      int64_t base);
  int (*plane_gather_backward)(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *ih, const dp_tensor *iw,
                               int64_t base);
  /* T weighted taps along a dim (F.interpolate's linear modes): x
   * contiguous [outer, n, inner], out [outer, k, inner], idx int64 and w
   * (x's dtype) contiguous [T, k]: out[o, j, :] = w[0, j] * x[o, idx[0, j]
   * - base, :] + ... + w[T-1, j] * x[o, idx[T-1, j] - base, :], summed in
   * tap order; the gradient gx = 0 + w[t, j] * gy[o, j, :] added at those
   * positions (float32 / float64; an index out of range is an error naming
   * it). NULL: the op layer composes index_select, mul and add. */
  int (*resample_dim)(dp_tensor *out, const dp_tensor *x, const dp_tensor *idx, const dp_tensor *w, int64_t outer,
                      int64_t n, int64_t inner, int64_t base);
  int (*resample_dim_backward)(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_tensor *w,
                               int64_t outer, int64_t n, int64_t inner, int64_t base);

  /* ---- indexing, sorting, scans (ops/index_ops.c); index tensors int64 ---- */
  /* out = cond ? a : b; cond uint8 (nonzero: true), a, b in out's dtype,
   * all of out's shape (inputs strided, broadcast with stride 0). */
  int (*where)(dp_tensor *out, const dp_tensor *cond, const dp_tensor *a, const dp_tensor *b);
  /* x, out contiguous [batch, rows, cols]: out = x where j - i <= k (upper:
   * j - i >= k), else 0. */
  int (*tri)(dp_tensor *out, const dp_tensor *x, int64_t rows, int64_t cols, int64_t k, bool upper);
  /* For every position p of idx's shape (idx and src strided, out
   * contiguous of idx's shape): out[p] = src[p with coordinate dim replaced
   * by idx[p] - base]. An index outside src's dim is an error naming it. */
  int (*gather)(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int dim, int64_t base);
  /* dst[p with coordinate dim replaced by idx[p] - base] = src[p] (or +=
   * when accumulate) for every p of idx's shape; dst strided, written in
   * place; src of idx's shape, strided. Repeated targets: the last write
   * wins (assign). */
  int (*scatter)(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int dim, int64_t base, bool accumulate);
  /* The k largest (smallest) of x's middle axis [outer, a->k, inner]
   * (contiguous) into values and indices (+ a->base) [outer, k, inner], in
   * dp_topk_before order (ops/model_math.h). */
  int (*topk)(dp_tensor *values, dp_tensor *indices, const dp_tensor *x, const dp_reduce_args *a, int64_t k,
              bool largest);
  /* Inclusive prefix sums along the middle axis of [outer, a->k, inner]
   * (contiguous; from the end when reverse), accumulated in double (int64
   * exactly). */
  int (*cumsum)(dp_tensor *out, const dp_tensor *x, const dp_reduce_args *a, bool reverse);
  /* idx int64 [outer, a->k, inner]: the position (+ a->base) along the
   * middle axis of x (contiguous) of the running maximum (minimum) so far,
   * by dp_cum_extreme_takes (ops/model_math.h); values (x's dtype and
   * shape, or NULL) the value there. */
  int (*cum_extreme)(dp_tensor *values, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a, bool is_max);
  /* out = the running sum (DP_SCAN_SUM: float types), product
   * (DP_SCAN_PROD: float types, int64 exactly) or log-add-exp (DP_SCAN_LOGADDEXP: float types) along the middle axis
   * of x [outer, a->k, inner], folded in double (dp_scan_fold); the
   * _GRAD kinds write the gradient of x's scan for the upstream gradient g
   * instead (dp_scan_grad_carry, dp_scan_grad_value). out, x and g (NULL
   * unless _GRAD) contiguous, of one dtype. */
  int (*cum_scan)(dp_tensor *out, const dp_tensor *x, const dp_tensor *g, const dp_reduce_args *a, dp_scan_kind kind);
  /* out int64 [rows, m]: for each value v[r, j] (contiguous [rows, m]) the
   * count (+ base) of the boundaries of seq's row r (contiguous [rows, n],
   * or [1, n] shared by every row; sorted ascending, NaN last) that come
   * before it by dp_boundary_before (ops/model_math.h), n for a NaN value;
   * seq and v of one dtype. */
  int (*searchsorted)(dp_tensor *out, const dp_tensor *seq, const dp_tensor *v, int64_t rows, int64_t n, int64_t m,
                      bool right, int64_t base);
  /* m uint8 contiguous with out->shape[0] non-zero bytes (counted by the
   * caller): out int64 [count, m->ndim] their coordinates (+ base) in
   * order, or [count] their flat positions (+ base) when flat. A count
   * that does not match is an error. NULL: the Lua side composes it from
   * cumsum and scatter. */
  int (*nonzero)(dp_tensor *out, const dp_tensor *m, bool flat, int64_t base);
  /* out contiguous [size] = how often each of 0..size-1 occurs in idx
   * (contiguous int64; out int64), or the sums of the weights w
   * (contiguous, out's dtype float32 / float64) at them; a value outside is
   * an error naming it. NULL: the Lua side composes scatter_add. */
  int (*bincount)(dp_tensor *out, const dp_tensor *idx, const dp_tensor *w);
  /* out [nb] = the values of x (contiguous, float32 / float64) counted (or
   * their weights w, x's shape and dtype, summed) in the bins between the
   * nb + 1 increasing edges (contiguous, x's dtype): the last edge at or
   * below a value is its bin's, the last bin closed, values outside and
   * NaN left out; uniform says the edges are equally spaced (a hint for
   * the first guess, not a trust). NULL: the Lua side composes searchsorted
   * and bincount. */
  int (*histogram)(dp_tensor *out, const dp_tensor *x, const dp_tensor *w, const dp_tensor *edges, bool uniform);
  /* out int64 [rows, n] from the float64 weights w [rows, cats] (consumed)
   * and float64 uniforms u [rows, n], all contiguous (dp_multinomial_row). */
  int (*multinomial)(dp_tensor *out, dp_tensor *w, const dp_tensor *u, int64_t rows, int64_t cats, int64_t n,
                     bool replacement, int64_t base);

  /* ---- attention, recurrent cells, pooling (ops/attention.c, ops/rnn.c) ---- */
  /* out contiguous [b1, b2, L, Ev] in q's dtype; lse contiguous [b1 b2 L]
   * float64 (for every input dtype: the backward's exp(S - lse) would lose
   * |lse| * 2^-24 of each weight to a float32 lse). */
  int (*attention)(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a);
  /* gq, gk, gv contiguous like q, k, v (overwritten); gmask NULL, or
   * contiguous [b1, b2, L, S] in the scores' dtype (float32 for the CPU's
   * bfloat16 operands: summed over the mask's broadcast before the one
   * rounding): the scores' gradient (a float mask's). */
  int (*attention_backward)(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a);
  int (*rnn_cell)(const dp_rnn_cell_args *a);
  int (*rnn_cell_backward)(const dp_rnn_cell_args *a);
  /* x, y contiguous [planes, h, w] -> [planes, oh, ow]: windows of
   * dp_adaptive_start/end; the backward overwrites gx. */
  int (*adaptive_avg_pool2d)(dp_tensor *y, const dp_tensor *x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                             int64_t ow);
  int (*adaptive_avg_pool2d_backward)(dp_tensor *gx, const dp_tensor *gy, int64_t planes, int64_t h, int64_t w,
                                      int64_t oh, int64_t ow);

  /* ---- optimizers: all contiguous, same numel; state tensors updated in
   * place. ---- */
  /* buf may be NULL (no momentum). */
  int (*sgd_step)(dp_tensor *p, const dp_tensor *g, dp_tensor *buf, const dp_sgd_args *a);
  int (*adam_step)(dp_tensor *p, const dp_tensor *g, dp_tensor *m, dp_tensor *v, const dp_adam_args *a);
  /* gavg (centered) and buf (momentum) may be NULL. */
  int (*rmsprop_step)(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *gavg, dp_tensor *buf,
                      const dp_rmsprop_args *a);
  int (*adagrad_step)(dp_tensor *p, const dp_tensor *g, dp_tensor *sum, const dp_adagrad_args *a);
  /* square_avg and acc_delta, both required */
  int (*adadelta_step)(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *acc, const dp_adadelta_args *a);
  /* out (0-dim float64 on this device) = sum over the n tensors (this
   * device's, contiguous) of |g|^p, or their max |g| for p = inf: one pass
   * over all of them (clip_grad_norm_). NaN propagates. */
  int (*pow_sum_list)(dp_tensor *out, const dp_tensor *const *gs, int n, double p);
  /* g *= inv_scale; sets *found_inf when any element is inf/nan. */
  int (*unscale)(dp_tensor *g, double inv_scale, int *found_inf);

  /* ---- device extras: NULL on the CPU backend; a device backend (the
   * plugin) must have them all except the two marked optional ---- */
  /* Optional: unscale over a list of gradients on this backend's devices
   * with one wait for the found-inf flag instead of one per tensor
   * (GradScaler; without it, unscale per tensor). */
  int (*unscale_list)(dp_tensor *const *gs, int n, double inv_scale, int *found_inf);
  int (*memory_stats)(int device, dp_device_mem_stats *out);
  /* Returns cached device blocks to the driver (after waiting for the
   * device: they may still be in use by queued kernels). */
  int (*empty_cache)(void);
  /* Named switches: "tf32" (float32 GEMMs on tensor cores, 0/1), "sync"
   * (wait after every kernel so device errors surface at the op, 0/1).
   * Unknown names are an error naming them. */
  int (*set_option)(const char *name, double value);
  int (*get_option)(const char *name, double *value);
  /* "NVIDIA H200 (sm_90, 139.8 GiB)", or NULL + dp_error for a bad index */
  const char *(*device_name)(int device);
  /* Optional: the NCCL process group (distributed/pg.h: dp_pg_nccl_new
   * calls this; NULL when the plugin was built without NCCL). */
  struct dp_pg *(*pg_new)(const struct dp_pg_init *init);

  /* ---- optional direct convolution (the CPU's oneDNN, cpu_dnnl.h): 1 when
   * computed, 0 when the backend leaves the case to im2col + GEMM, -1 after
   * dp_error. Contiguous NCHW / OIHW tensors; g->groups and the dilation
   * may be anything (a backend declines what it does not run). ---- */
  /* y = conv(x, w) + b (b may be NULL) */
  int (*conv2d)(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window2d *g);
  /* gx, gw, gb (each may be NULL; gb only with gw), overwritten */
  int (*conv2d_backward)(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                         const dp_tensor *w, const dp_window2d *g);
  /* Optional: whether autocast's bfloat16 convolution of this geometry is
   * faster than float32 here (NULL: always); where not, ops/conv.c runs it
   * in float32 and rounds the output to bfloat16. */
  bool (*conv2d_bf16_pays)(const dp_window2d *g);
  /* Optional: a direct 3-d convolution (the CPU's oneDNN) of contiguous float32 NCDHW / OIDHW tensors, 1 when
   * computed, 0 declined (ops/conv3d.c then declines too and the caller composes it from 2-d convolutions), -1
   * after dp_error; y = conv(x, w) + b (b may be NULL); gx, gw, gb (each may be NULL, gb only with gw) */
  int (*conv3d)(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window3d *g);
  int (*conv3d_backward)(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                         const dp_tensor *w, const dp_window3d *g);
  /* Optional (ops/ctc.c runs other devices' tensors on the CPU's): loss [N] (log_probs' dtype) = each sample's
   * negative log-likelihood (0 for an impossible one with zero_infinity); grad [T, N, C] from gloss [N] */
  int (*ctc_loss)(dp_tensor *loss, const dp_ctc_args *a);
  int (*ctc_loss_backward)(dp_tensor *grad, const dp_tensor *gloss, const dp_ctc_args *a);
} dp_backend;

/* What the runtime hands a backend plugin (the CUDA backend is built as a
 * separate shared object and resolves nothing from the runtime by symbol:
 * the runtime may be loaded RTLD_LOCAL by stock lua5.4, and the plugin is
 * linked with --no-undefined to keep it that way). */
typedef struct {
  int abi_version; /* DP_PLUGIN_ABI */
  int (*error)(const char *fmt, ...);
  void (*error_prefix)(const char *prefix);
  const char *(*errmsg)(void);
  /* storage lifetime: NCCL work keeps its buffers alive until the
   * collective has finished on the device */
  void (*storage_retain)(dp_storage *s);
  void (*storage_release)(dp_storage *s);
  /* the rendezvous store (NCCL unique ids, debug cross-checks) */
  int (*store_set)(dp_store *s, const char *key, const void *val, size_t len);
  int (*store_get)(dp_store *s, const char *key, void **val, size_t *len, int timeout_ms);
  int (*store_add)(dp_store *s, const char *key, int64_t delta, int64_t *result);
} dp_runtime_api;
#define DP_PLUGIN_ABI 4
/* Exported by ddplua_cuda.so. Returns NULL and writes err when no GPU can
 * be used (driver missing, no device visible). */
typedef const dp_backend *(*dp_plugin_init_fn)(const dp_runtime_api *api, char *err, size_t errlen);
#define DP_CUDA_PLUGIN_INIT "dp_cuda_plugin_init"

/* Checks that every entry a backend needs is there (device: the plugin's
 * table, which must also have copy_from_cpu / copy_to_cpu and the device
 * extras not marked optional). 0, or -1 + dp_error naming the first
 * missing entry. The runtime refuses a CUDA plugin that fails it. */
int dp_backend_check(const dp_backend *b, bool device);

/* The backend for a device type, or NULL if not available/loaded. */
const dp_backend *dp_backend_get(int devtype);
/* Same, loading the CUDA plugin on first use; NULL + dp_error naming why
 * (built without CUDA, no GPU visible, driver error). */
const dp_backend *dp_backend_require(int devtype);
/* GPUs this process could use, counted without initialising the driver
 * (/proc/driver/nvidia/gpus, narrowed by CUDA_VISIBLE_DEVICES): what the
 * launcher may call before it forks workers, since a CUDA driver
 * initialised in a parent does not survive fork. 0 without a driver. */
int dp_cuda_count_without_init(void);
/* The backend of a tensor's device (loaded: a tensor on it exists). */
static inline const dp_backend *dp_backend_of(const dp_tensor *t) { return dp_backend_get(t->storage->device.type); }

extern const dp_backend dp_cpu_backend;

#endif
