/* The op layer's model ops (the conventions of ops/ops.h: 0-based dims and
 * positions, index tensors int64 counting from `base`, new references,
 * NULL + dp_errmsg() on error, an autograd node when an input requires
 * grad): selections and scans (ops/index_ops.c), shape copies
 * (ops/shape_ops.c), statistics (ops/stats.c), sampling (ops/sampling.c),
 * attention (ops/attention.c), recurrent layers (ops/rnn.c), adaptive
 * pooling and the extra optimizer steps and gradient clipping
 * (ops/optim_extra.c). */
#ifndef DP_MODEL_OPS_H
#define DP_MODEL_OPS_H

#include "ops/ops.h"

/* ---- selections and scans (ops/index_ops.c) ---- */
/* cond (uint8) ? a : b, the three broadcast, a and b promoted. */
dp_tensor *dp_where(dp_tensor *cond, dp_tensor *a, dp_tensor *b);
/* x with value where mask (uint8, broadcastable to x) is nonzero; value a
 * 0-dim tensor (its gradient is the masked gradient's sum). */
dp_tensor *dp_masked_fill(dp_tensor *x, dp_tensor *mask, dp_tensor *value);
/* Lower (upper) triangle of the last two dims: j - i <= k (>= k). */
dp_tensor *dp_tri(dp_tensor *x, int64_t k, bool upper);
/* out[p] = x[p with coordinate dim = idx[p] - base], idx of x's rank and
 * no larger than x outside dim. */
dp_tensor *dp_gather(dp_tensor *x, int dim, dp_tensor *idx, int64_t base);
/* x with src (a tensor at least idx's size, or the 0-dim value) written
 * (added) at idx along dim: scatter / scatter_add. */
dp_tensor *dp_scatter(dp_tensor *x, int dim, dp_tensor *idx, dp_tensor *src, int64_t base, bool accumulate);
/* In place, no autograd (x:scatter_(...), x:scatter_add_(...)). */
int dp_scatter_(dp_tensor *x, int dim, dp_tensor *idx, dp_tensor *src, int64_t base, bool accumulate);
/* The k largest (smallest) along dim: values, and int64 positions + base. */
dp_tensor *dp_topk(dp_tensor *x, int64_t k, int dim, bool largest, int64_t base, dp_tensor **indices);
/* Inclusive prefix sums along dim; integers give int64. */
dp_tensor *dp_cumsum(dp_tensor *x, int dim);
/* int64 positions (+ base) of the running maximum (minimum) along dim, and its values when values != NULL */
dp_tensor *dp_cum_extreme(dp_tensor *x, int dim, bool is_max, int64_t base, dp_tensor **values);
/* Running products (float types, int64) and log-sum-exps (float types) along dim, with autograd (scan_ops.c) */
dp_tensor *dp_cumprod(dp_tensor *x, int dim);
dp_tensor *dp_logcumsumexp(dp_tensor *x, int dim);
/* int64 [rows, m] insertion counts (+ base) of v [rows, m] in the sorted rows of seq [rows or 1, n] */
/* t with src's slices along dim added at idx - base (float32/64, backends with index_add_dim), with autograd */
dp_tensor *dp_index_add(dp_tensor *t, int dim, dp_tensor *idx, dp_tensor *src, int64_t base);
/* counts (int64) or weight sums (w's dtype) [size] of idx's values in [0, size) (backends with bincount) */
dp_tensor *dp_bincount_native(dp_tensor *idx, dp_tensor *w, int64_t size);
/* counts (or weight sums) [nb] of x's values between nb + 1 increasing edges, the last bin closed (float32/64,
 * backends with histogram); the edges' order is the caller's to check */
dp_tensor *dp_histogram_native(dp_tensor *x, dp_tensor *w, dp_tensor *edges, bool uniform);
/* int64 [count, ndim] coordinates (or [count] flat positions) + base of m's non-zero bytes (uint8, count of them) */
dp_tensor *dp_nonzero_native(dp_tensor *m, int64_t count, bool flat, int64_t base);
dp_tensor *dp_searchsorted(dp_tensor *seq, dp_tensor *v, bool right, int64_t base);
/* x reversed along each of the n dims. */
dp_tensor *dp_flip(dp_tensor *x, int n, const int *dims);

/* ---- shape copies (ops/shape_ops.c) ---- */
/* PyTorch's repeat: reps (n >= x->ndim) copies along each dim, leading
 * ones added; tile pads reps with leading ones instead. */
dp_tensor *dp_repeat(dp_tensor *x, int n, const int64_t *reps);
dp_tensor *dp_tile(dp_tensor *x, int n, const int64_t *reps);

/* ---- statistics (ops/stats.c) ---- */
/* p-norm over dims (n = 0: all): p >= 0 or +-inf; p = 0 counts non-zeros. */
dp_tensor *dp_norm(dp_tensor *x, double p, int n, const int *dims, bool keepdim);
/* variance / standard deviation over dims (n = 0: all) with N - correction
 * in the denominator (correction 1: unbiased). */
dp_tensor *dp_var(dp_tensor *x, int n, const int *dims, double correction, bool keepdim);
dp_tensor *dp_std(dp_tensor *x, int n, const int *dims, double correction, bool keepdim);

/* ---- sampling (ops/sampling.c): from (seed, offset), counters reserved
 * by the caller (the global generator or a Generator object) ---- */
/* Uniform integers in [low, high), int64. Uses counters [offset, offset + numel). */
dp_tensor *dp_randint(int64_t low, int64_t high, int ndim, const int64_t *shape, dp_device dev, uint64_t seed,
                      uint64_t offset);
/* n category positions + base per row of probs ([cats] or [rows, cats]):
 * counters [offset, offset + rows * n). */
dp_tensor *dp_multinomial(dp_tensor *probs, int64_t n, bool replacement, int64_t base, uint64_t seed, uint64_t offset);
/* 1 with probability p (elementwise, p in [0, 1]), p's dtype: counters
 * [offset, offset + numel). */
dp_tensor *dp_bernoulli(dp_tensor *p, uint64_t seed, uint64_t offset);

/* ---- attention (ops/attention.c) ---- */
/* softmax(q k^T * scale + mask) v over q [..., L, E], k [..., S, E], v
 * [..., S, Ev] (the same leading dims); mask NULL, uint8 (nonzero takes
 * part) or float (added), broadcastable to [..., L, S]; causal keeps j <=
 * i; dropout_p on the weights; scale < 0 for 1 / sqrt(E). */
dp_tensor *dp_scaled_dot_product_attention(dp_tensor *q, dp_tensor *k, dp_tensor *v, dp_tensor *mask, bool causal,
                                           double dropout_p, double scale);
/* Self-attention over a packed projection qkv [B, T, 3C] (q, k, v side
 * by side, n_head heads each) to [B, T, C], scaled_dot_product_attention
 * without the split, transposes and merge copies (ops/attention_qkv.c);
 * CPU only. Both attend bfloat16 / float16 CPU operands in float32 and
 * return the operands' dtype: bfloat16 inside the kernels (which keep the
 * unrounded output for the backward when keeps_f32_out), float16 through
 * casts around the float32 op (widens). */
bool dp_attention_widens(const dp_tensor *q);
bool dp_attention_keeps_f32_out(const dp_tensor *q);
dp_tensor *dp_self_attention_qkv(dp_tensor *qkv, int64_t n_head, bool causal, double dropout_p, double scale);

/* ---- recurrent layers (ops/rnn.c) ---- */
/* One direction of one layer over time: xp [T, N, G H] the input
 * projection (with b_ih), w_hh [G H, H], b_hh [G H] or NULL, h0 (and c0 for
 * LSTM) [N, H] or NULL for zeros; reverse walks t = T-1 .. 0. Gives y [T,
 * N, H], and h_T (c_T) [N, H] (the state after the last step walked). */
int dp_rnn_layer(dp_rnn_mode mode, dp_tensor *xp, dp_tensor *w_hh, dp_tensor *b_hh, dp_tensor *h0, dp_tensor *c0,
                 bool reverse, dp_tensor **y, dp_tensor **h_last, dp_tensor **c_last);

/* ---- adaptive pooling, optimizers, clipping (ops/optim_extra.c) ---- */
/* x [N, C, H, W] or [C, H, W] -> [..., oh, ow]. */
dp_tensor *dp_adaptive_avg_pool2d(dp_tensor *x, int64_t oh, int64_t ow);
int dp_rmsprop_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *sq, dp_tensor *gavg, dp_tensor *buf,
                     const dp_rmsprop_args *a);
int dp_adagrad_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *sum, const dp_adagrad_args *a);
int dp_adadelta_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *sq, dp_tensor *acc,
                      const dp_adadelta_args *a);
/* The p-norm of all n gradients together (0-dim float32, float64 when any
 * is float64, on their device), then each scaled by min(1, max_norm /
 * (norm + 1e-6)) in place (PyTorch's clip_grad_norm_). error_if_nonfinite:
 * a NaN or inf norm is an error and nothing is scaled. */
dp_tensor *dp_clip_grad_norm_(dp_tensor *const *gs, int n, double max_norm, double p, bool error_if_nonfinite);

#endif
