/* matmul (PyTorch's broadcasting rules) and linear with a fused bias and
 * activation epilogue; GEMMs go to the backend (OpenBLAS / cuBLAS) with
 * transposes expressed as flags, never as copies, when strides allow. */
#include <string.h>

#include "ops/autocast.h"
#include "ops/op_util.h"

/* A matrix operand as the backend wants it: a data pointer, row stride and
 * transpose flag. Returns false if the last two dims have no unit stride.
 * The stride of a size-1 dim never moves the pointer (expand makes it 0),
 * so it is read as whatever packed value the layout needs. */
static bool as_gemm_operand(const dp_tensor *t, bool *trans, int64_t *ld) {
  int d = t->ndim;
  int64_t rows = t->shape[d - 2], cols = t->shape[d - 1];
  int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
  int64_t sr = rows == 1 ? c1 : t->stride[d - 2], sc = cols == 1 ? 1 : t->stride[d - 1];
  if (sc == 1 && sr >= c1) { /* row-major */
    *trans = false;
    *ld = sr;
    return true;
  }
  sr = rows == 1 ? 1 : t->stride[d - 2], sc = cols == 1 ? r1 : t->stride[d - 1];
  if (sr == 1 && sc >= r1) { /* column-major: the transpose of a row-major matrix */
    *trans = true;
    *ld = sc;
    return true;
  }
  return false;
}

/* Collapses leading batch dims (ndim - 2 of them) to a single stride if
 * they are uniformly strided; batch count in *nb. */
static bool batch_stride(const dp_tensor *t, int64_t *stride, int64_t *nb) {
  int nbd = t->ndim - 2;
  *nb = 1;
  *stride = 0;
  int64_t expect = -1;
  for (int d = nbd - 1; d >= 0; d--) {
    if (t->shape[d] == 1) continue;
    if (expect < 0) *stride = t->stride[d];
    else if (t->stride[d] != expect) return false;
    expect = t->stride[d] * t->shape[d];
    *nb *= t->shape[d];
  }
  return true;
}

/* t itself when the backend can read it in place, else a packed copy
 * (owned by the caller's scope s). */
static dp_tensor *gemm_operand(dp_scope *s, dp_tensor *t, bool *trans, int64_t *ld, int64_t *bstride, int64_t *nb) {
  if (as_gemm_operand(t, trans, ld) && batch_stride(t, bstride, nb)) return t;
  /* dp_copy_raw gives dense strides even where dp_contiguous_raw would
   * keep an empty or size-1 view as it is */
  dp_tensor *copy = dp_scope_add(s, dp_copy_raw(t));
  if (!copy) return NULL;
  if (!as_gemm_operand(copy, trans, ld) || !batch_stride(copy, bstride, nb)) {
    dp_error("internal error: a packed copy of shape %s is not a GEMM operand", SHAPE(copy));
    return NULL;
  }
  return copy;
}

/* out [batch..., m, n] = a [batch..., m, k] @ b [batch..., k, n] (+ bias
 * [n] along every row, through the backend's gemm_bias: the caller checks
 * it has one and k > 0); a and b already expanded to the same batch dims. */
static int gemm_batched_bias(dp_tensor *out, dp_tensor *a, dp_tensor *b, double beta, const dp_tensor *bias) {
  /* nothing to compute, or a sum over k = 0 terms: no GEMM (an empty
   * operand need not have GEMM strides) */
  if (dp_numel(out) == 0) return 0;
  if (a->shape[a->ndim - 1] == 0) return beta == 0.0 ? dp_fill_(out, 0.0) : 0;
  DP_SCOPE(s);
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0, sa = 0, sb = 0, nba = 1, nbb = 1;
  a = gemm_operand(&s, a, &ta, &lda, &sa, &nba);
  b = a ? gemm_operand(&s, b, &tb, &ldb, &sb, &nbb) : NULL;
  if (!a || !b) return -1;
  int nd = out->ndim;
  int64_t batch = 1;
  for (int d = 0; d < nd - 2; d++) batch *= out->shape[d];
  dp_gemm_args g = {
      .dtype = out->dtype,
      .trans_a = ta,
      .trans_b = tb,
      .m = out->shape[nd - 2],
      .n = out->shape[nd - 1],
      .k = a->shape[a->ndim - 1],
      .batch = batch,
      .alpha = 1.0,
      .beta = beta,
      .a = dp_data(a),
      .lda = lda,
      .stride_a = nba == 1 ? 0 : sa,
      .b = dp_data(b),
      .ldb = ldb,
      .stride_b = nbb == 1 ? 0 : sb,
      .c = dp_data(out),
      .ldc = out->shape[nd - 1],
      .stride_c = out->shape[nd - 2] * out->shape[nd - 1],
      .device = dp_dev(out).index,
  };
  return bias ? dp_backend_of(out)->gemm_bias(&g, dp_data(bias)) : dp_backend_of(out)->gemm(&g);
}

static int gemm_batched(dp_tensor *out, dp_tensor *a, dp_tensor *b, double beta) {
  return gemm_batched_bias(out, a, b, beta, NULL);
}

static int matmul_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *a = dp_node_saved(n, 0), *b = dp_node_saved(n, 1);
  DP_SCOPE(s);
  /* lift 1-d operands to matrices exactly as the forward did */
  dp_tensor *a2 = a->ndim == 1 ? dp_scope_add(&s, dp_unsqueeze(a, 0)) : a;
  dp_tensor *b2 = b->ndim == 1 ? dp_scope_add(&s, dp_unsqueeze(b, 1)) : b;
  dp_tensor *gy = gout[0], *g2 = NULL;
  if (!a2 || !b2) return -1;
  {
    /* gy with the 1-d dims re-inserted: [..., m, n] */
    int nd = gy->ndim + (a->ndim == 1) + (b->ndim == 1);
    int64_t sh[DP_MAXDIM];
    int k = 0;
    for (int d = 0; d < gy->ndim - ((a->ndim == 1 ? 0 : 1) + (b->ndim == 1 ? 0 : 1)); d++) sh[k++] = gy->shape[d];
    sh[k++] = a->ndim == 1 ? 1 : a2->shape[a2->ndim - 2];
    sh[k++] = b->ndim == 1 ? 1 : b2->shape[b2->ndim - 1];
    if (k != nd) nd = k;
    g2 = dp_scope_add(&s, dp_reshape(gy, nd, sh));
  }
  if (!g2) return -1;
  if (dp_node_needs(n, 0)) { /* g2 @ b^T, summed over broadcast batch dims */
    dp_tensor *bt = dp_scope_add(&s, dp_transpose(b2, b2->ndim - 2, b2->ndim - 1));
    dp_tensor *ga = bt ? dp_scope_add(&s, dp_matmul(g2, bt)) : NULL;
    dp_tensor *sum = ga ? dp_scope_add(&s, dp_sum_to(ga, a2->ndim, a2->shape)) : NULL;
    if (!sum || !(gin[0] = dp_reshape(sum, a->ndim, a->shape))) return -1;
  }
  if (dp_node_needs(n, 1)) { /* a^T @ g2 */
    dp_tensor *at = dp_scope_add(&s, dp_transpose(a2, a2->ndim - 2, a2->ndim - 1));
    dp_tensor *gb = at ? dp_scope_add(&s, dp_matmul(at, g2)) : NULL;
    dp_tensor *sum = gb ? dp_scope_add(&s, dp_sum_to(gb, b2->ndim, b2->shape)) : NULL;
    if (!sum || !(gin[1] = dp_reshape(sum, b->ndim, b->shape))) return -1;
  }
  return 0;
}

static dp_tensor *matmul_impl(dp_tensor *a, dp_tensor *b) {
  if (dp_check_same_device("matmul", a, b)) return NULL;
  if (a->ndim == 0 || b->ndim == 0) {
    dp_error("matmul: both arguments need at least 1 dimension, got shapes %s and %s", SHAPE(a), SHAPE(b));
    return NULL;
  }
  if (a->dtype != b->dtype) {
    dp_error("matmul: expected two tensors of the same dtype, got %s and %s", dp_dtype_name(a->dtype),
             dp_dtype_name(b->dtype));
    return NULL;
  }
  int64_t k = a->shape[a->ndim - 1], kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
  if (k != kb) {
    dp_error("matmul: shapes %s and %s cannot be multiplied (%" PRId64 " != %" PRId64 ")", SHAPE(a), SHAPE(b), k, kb);
    return NULL;
  }
  int64_t m = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
  int64_t nn = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
  /* broadcast batch dims */
  int nba = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
  int nbd = nba > nbb ? nba : nbb;
  int64_t bsh[DP_MAXDIM];
  for (int i = 0; i < nbd; i++) {
    int da = nba - nbd + i, db = nbb - nbd + i;
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      dp_error("matmul: batch dimensions of %s and %s cannot be broadcast", SHAPE(a), SHAPE(b));
      return NULL;
    }
    bsh[i] = sa == 1 ? sb : sa;
  }
  if (nbd + 2 > DP_MAXDIM) {
    dp_error("matmul: too many dimensions");
    return NULL;
  }
  /* full 3+ dim shapes */
  int64_t ash[DP_MAXDIM], bshp[DP_MAXDIM], osh[DP_MAXDIM];
  memcpy(ash, bsh, sizeof(int64_t) * (size_t)nbd);
  memcpy(bshp, bsh, sizeof(int64_t) * (size_t)nbd);
  memcpy(osh, bsh, sizeof(int64_t) * (size_t)nbd);
  ash[nbd] = m, ash[nbd + 1] = k;
  bshp[nbd] = k, bshp[nbd + 1] = nn;
  osh[nbd] = m, osh[nbd + 1] = nn;
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *a2 = a->ndim == 1 ? dp_scope_add(&s, dp_reshape(a, 2, (int64_t[]){1, k})) : a;
  dp_tensor *b2 = b->ndim == 1 ? dp_scope_add(&s, dp_reshape(b, 2, (int64_t[]){k, 1})) : b;
  dp_tensor *ea = a2 ? dp_scope_add(&s, dp_expand_raw(a2, nbd + 2, ash)) : NULL;
  dp_tensor *eb = b2 ? dp_scope_add(&s, dp_expand_raw(b2, nbd + 2, bshp)) : NULL;
  dp_tensor *out = (ea && eb) ? dp_scope_add(&s, dp_empty(a->dtype, nbd + 2, osh, dp_dev(a))) : NULL;
  dp_set_grad_enabled(prev);
  if (!out || gemm_batched(out, ea, eb, 0.0)) return NULL;
  /* drop the dims that 1-d operands added */
  if (a->ndim == 1 || b->ndim == 1) {
    int64_t sh[DP_MAXDIM];
    int kk = 0;
    for (int d = 0; d < nbd; d++) sh[kk++] = osh[d];
    if (a->ndim != 1) sh[kk++] = m;
    if (b->ndim != 1) sh[kk++] = nn;
    if (!(out = dp_scope_add(&s, dp_reshape(out, kk, sh)))) return NULL;
  }
  dp_scope_keep(&s, out);
  dp_tensor *ins[2] = {a, b};
  if (dp_any_requires_grad(2, ins)) {
    dp_node *n = dp_node_new("MatmulBackward", matmul_backward, 2, ins, 1);
    dp_node_save(n, a);
    dp_node_save(n, b);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* Autocast (autocast.h) casts float32 operands to bfloat16/float16 first. */
dp_tensor *dp_matmul(dp_tensor *a, dp_tensor *b) {
  dp_autocast_scope ac;
  if (dp_autocast_cast(&ac, 2, (dp_tensor * *[]){&a, &b})) return NULL;
  return dp_autocast_done(&ac, matmul_impl(a, b));
}

/* ---- linear ---- */
static int linear_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *w = dp_node_saved(n, 1), *y = dp_node_saved(n, 2);
  int act = (int)n->i[0];
  int64_t rows = n->i[1], in = w->shape[1], outf = w->shape[0];
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_reshape(gout[0], 2, (int64_t[]){rows, outf})), *g;
  if (!gy) return -1;
  if (act >= 0) { /* through the fused activation, using the saved output */
    g = dp_scope_add(&s, dp_empty(gy->dtype, 2, gy->shape, dp_dev(gy)));
    dp_tensor *y2 = dp_scope_add(&s, dp_reshape(y, 2, (int64_t[]){rows, outf}));
    dp_unary_args a = dp_unary_args_of((dp_unary_op)act);
    if (!g || !y2 || dp_backend_of(gy)->unary_backward(&a, g, gy, NULL, y2)) return -1;
  } else if (!(g = dp_scope_add(&s, dp_contiguous_raw(gy)))) {
    return -1;
  }
  if (dp_node_needs(n, 0)) { /* gx = g @ w */
    dp_tensor *gx = dp_scope_add(&s, dp_empty(g->dtype, 2, (int64_t[]){rows, in}, dp_dev(g)));
    if (!gx || gemm_batched(gx, g, w, 0.0) || !(gin[0] = dp_reshape(gx, n->in_ndim[0], n->in_shape[0]))) return -1;
  }
  if (dp_node_needs(n, 1)) { /* gw = g^T @ x, straight into DDP's bucket when it has one */
    dp_tensor *x2 = dp_scope_add(&s, dp_reshape(x, 2, (int64_t[]){rows, in}));
    dp_tensor *gt = x2 ? dp_scope_add(&s, dp_transpose(g, 0, 1)) : NULL;
    double beta = 0.0;
    dp_tensor *sink = gt ? dp_node_grad_sink(n, 1, g->dtype, &beta) : NULL;
    dp_tensor *gw = sink ? NULL : gt ? dp_scope_add(&s, dp_empty(g->dtype, 2, (int64_t[]){outf, in}, dp_dev(g))) : NULL;
    if ((!sink && !gw) || gemm_batched(sink ? sink : gw, gt, x2, beta)) return -1;
    if (sink) dp_node_grad_sink_done(n, 1);
    else gin[1] = dp_scope_keep(&s, gw);
  }
  if (n->n_inputs > 2 && dp_node_needs(n, 2)) {
    double beta = 0.0;
    dp_tensor *sink = dp_node_grad_sink(n, 2, g->dtype, &beta);
    if (sink && beta != 0.0) sink = NULL; /* channel_sum overwrites: accumulate the usual way */
    dp_tensor *gb = sink ? NULL : dp_scope_add(&s, dp_empty(g->dtype, 1, &outf, dp_dev(g)));
    if ((!sink && !gb) || dp_backend_of(g)->channel_sum(sink ? sink : gb, g, rows, outf, 1)) return -1;
    if (sink) dp_node_grad_sink_done(n, 2);
    else gin[2] = dp_scope_keep(&s, gb);
  }
  return 0;
}

static dp_tensor *linear_impl(dp_tensor *x, dp_tensor *w, dp_tensor *b, int act) {
  if (w->ndim != 2) {
    dp_error("linear: weight must be 2-dimensional [out_features, in_features], got %s", SHAPE(w));
    return NULL;
  }
  if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
    dp_error("linear: input of shape %s does not match weight %s (expected last dimension %" PRId64 ")", SHAPE(x),
             SHAPE(w), w->shape[1]);
    return NULL;
  }
  if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
    dp_error("linear: bias of shape %s does not match weight %s (expected [%" PRId64 "])", SHAPE(b), SHAPE(w),
             w->shape[0]);
    return NULL;
  }
  if (x->dtype != w->dtype || (b && b->dtype != w->dtype) || !dp_dtype_is_float(w->dtype)) {
    dp_error("linear: input, weight and bias must share one floating point dtype, got %s, %s%s%s",
             dp_dtype_name(x->dtype), dp_dtype_name(w->dtype), b ? " and " : "", b ? dp_dtype_name(b->dtype) : "");
    return NULL;
  }
  if (dp_check_same_device("linear", x, w) || (b && dp_check_same_device("linear", x, b))) return NULL;
  if (act >= 0 && (act >= DP_U_COUNT || !dp_unary_ops[act].epilogue)) {
    dp_error("linear: %s cannot be fused as an activation (the op table marks the ones that can)",
             dp_unary_name((dp_unary_op)act));
    return NULL;
  }
  int64_t in = w->shape[1], outf = w->shape[0], rows = 1;
  for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *x2 = dp_scope_add(&s, dp_reshape(x, 2, (int64_t[]){rows, in}));
  dp_tensor *wt = x2 ? dp_scope_add(&s, dp_transpose(w, 0, 1)) : NULL;
  dp_set_grad_enabled(prev);
  /* the kernel reads the bias as a dense [out_features] row: an expanded or
   * strided bias is packed first */
  dp_tensor *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  dp_tensor *out =
      wt && (!b || bc) ? dp_scope_add(&s, dp_empty(w->dtype, 2, (int64_t[]){rows, outf}, dp_dev(x))) : NULL;
  dp_unary_args a = dp_unary_args_of((dp_unary_op)(act >= 0 ? act : 0));
  /* the bias added as the GEMM stores its tiles where the backend can (no
   * pass of its own over the output: the LSTM example's 700 x 10000
   * logits), else by bias_act after; the activation always after */
  const dp_tensor *fused = bc && in > 0 && out && dp_backend_of(out)->gemm_bias ? bc : NULL;
  const dp_tensor *after = fused ? NULL : bc;
  if (!out || gemm_batched_bias(out, x2, wt, 0.0, fused) ||
      ((after || act >= 0) && rows > 0 &&
       dp_backend_of(out)->bias_act(out, after, act >= 0 ? &a : NULL, rows, outf, 1)))
    return NULL;
  if (x->ndim != 2) {
    int64_t osh[DP_MAXDIM];
    memcpy(osh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    osh[x->ndim - 1] = outf;
    if (!(out = dp_scope_add(&s, dp_reshape(out, x->ndim, osh)))) return NULL;
  }
  dp_scope_keep(&s, out);
  dp_tensor *ins[3] = {x, w, b};
  if (dp_any_requires_grad(b ? 3 : 2, ins)) {
    dp_node *n =
        dp_node_new(act == DP_U_RELU ? "LinearReluBackward" : "LinearBackward", linear_backward, b ? 3 : 2, ins, 1);
    n->i[0] = act;
    n->i[1] = rows;
    dp_node_save(n, dp_node_needs(n, 1) ? x : NULL);
    dp_node_save(n, w);
    dp_node_save(n, act >= 0 ? out : NULL);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_linear(dp_tensor *x, dp_tensor *w, dp_tensor *b, int act) {
  dp_autocast_scope ac;
  if (dp_autocast_cast(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, linear_impl(x, w, b, act));
}
