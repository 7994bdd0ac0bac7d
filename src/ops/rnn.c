/* One direction of one recurrent layer (nn.RNN / nn.LSTM / nn.GRU) over
 * time, as one autograd node.
 *
 * The input projection of every step (x W_ih^T + b_ih) is one GEMM made by
 * the caller (nn's rnn.lua, through linear, whose own gradient flows as
 * usual); here each step is one GEMM for h_{t-1} W_hh^T and one fused
 * kernel for the gates and the state (backends: rnn_cell). The node saves
 * the gate activations and the states; its backward walks the steps in
 * reverse (one cell-backward kernel and one GEMM for dh_{t-1} per step)
 * and finishes with one GEMM for dW_hh over all steps and one column sum
 * for db_hh. */
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"

/* rows x cols view of t's step (a [T, rows, cols] contiguous tensor) */
static dp_tensor *step_view(dp_scope *s, const dp_tensor *t, int64_t step) {
  if (!t) return NULL;
  int64_t rows = t->shape[1], cols = t->shape[2];
  return dp_scope_add(
      s, dp_as_strided(t, 2, (int64_t[]){rows, cols}, (int64_t[]){cols, 1}, t->offset + step * rows * cols));
}

/* c [m, n] = op(a) op(b) (+ c when beta is 1), all contiguous: a stored [m,
 * k] or, transposed, [k, m]; b [k, n] or, transposed, [n, k] */
static int gemm2(dp_tensor *c, const dp_tensor *a, bool trans_a, const dp_tensor *b, bool trans_b, int64_t m, int64_t n,
                 int64_t k, double beta) {
  dp_gemm_args g = {.dtype = c->dtype,
                    .trans_a = trans_a,
                    .trans_b = trans_b,
                    .m = m,
                    .n = n,
                    .k = k,
                    .batch = 1,
                    .alpha = 1.0,
                    .beta = beta,
                    .a = dp_data(a),
                    .lda = a->shape[a->ndim - 1],
                    .b = dp_data(b),
                    .ldb = b->shape[b->ndim - 1],
                    .c = dp_data(c),
                    .ldc = n,
                    .device = dp_dev(c).index};
  return dp_backend_of(c)->gemm(&g);
}

static int check_args(dp_rnn_mode mode, dp_tensor *xp, dp_tensor *w_hh, dp_tensor *b_hh, dp_tensor *h0, dp_tensor *c0) {
  const char *op = "rnn";
  int G = dp_rnn_gates(mode);
  if (xp->ndim != 3 || xp->shape[2] % G)
    return dp_error("%s: the input projection must be [T, N, %d * hidden], got shape %s", op, G, SHAPE(xp));
  int64_t N = xp->shape[1], H = xp->shape[2] / G;
  if (!dp_dtype_is_float(xp->dtype)) return dp_check_float(op, xp);
  if (w_hh->ndim != 2 || w_hh->shape[0] != G * H || w_hh->shape[1] != H)
    return dp_error("%s: weight_hh must be [%" PRId64 ", %" PRId64 "], got shape %s", op, G * H, H, SHAPE(w_hh));
  if (b_hh && (b_hh->ndim != 1 || b_hh->shape[0] != G * H))
    return dp_error("%s: bias_hh must be [%" PRId64 "], got shape %s", op, G * H, SHAPE(b_hh));
  dp_tensor *st[2] = {h0, c0};
  for (int i = 0; i < 2; i++)
    if (st[i] && (st[i]->ndim != 2 || st[i]->shape[0] != N || st[i]->shape[1] != H))
      return dp_error("%s: the initial %s state must be [%" PRId64 ", %" PRId64 "], got shape %s", op,
                      i ? "cell" : "hidden", N, H, SHAPE(st[i]));
  dp_tensor *all[4] = {w_hh, b_hh, h0, c0};
  for (int i = 0; i < 4; i++) {
    if (!all[i]) continue;
    if (all[i]->dtype != xp->dtype)
      return dp_error("%s: every tensor must be %s like the input, got %s", op, dp_dtype_name(xp->dtype),
                      dp_dtype_name(all[i]->dtype));
    if (dp_check_same_device(op, xp, all[i])) return -1;
  }
  return 0;
}

static int rnn_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_rnn_mode mode = (dp_rnn_mode)n->i[0];
  bool reverse = n->i[1];
  dp_tensor *w = dp_node_saved(n, 0), *saved = dp_node_saved(n, 1), *c_all = dp_node_saved(n, 2);
  dp_tensor *y = dp_node_saved(n, 3), *h0 = dp_node_saved(n, 4), *c0 = dp_node_saved(n, 5);
  int64_t T = y->shape[0], N = y->shape[1], H = y->shape[2], G = dp_rnn_gates(mode);
  dp_device dev = dp_dev(y);
  dp_dtype dt = y->dtype;
  DP_SCOPE(s);
  int64_t gsh[3] = {T, N, G * H}, hsh[2] = {N, H};
  dp_tensor *gxp = dp_scope_add(&s, dp_empty(dt, 3, gsh, dev));
  dp_tensor *ghp = mode == DP_RNN_GRU ? dp_scope_add(&s, dp_empty(dt, 3, gsh, dev)) : gxp;
  dp_tensor *gy = gout[0] ? dp_scope_add(&s, dp_contiguous_raw(gout[0])) : NULL;
  /* gh: the gradient reaching h of the step being walked, from later steps */
  dp_tensor *gh = gout[1] ? dp_scope_add(&s, dp_copy_raw(gout[1])) : dp_scope_add(&s, dp_zeros(dt, 2, hsh, dev));
  dp_tensor *gc = mode != DP_RNN_LSTM ? NULL
                  : gout[2]           ? dp_scope_add(&s, dp_copy_raw(gout[2]))
                                      : dp_scope_add(&s, dp_zeros(dt, 2, hsh, dev));
  dp_tensor *gc2 = mode == DP_RNN_LSTM ? dp_scope_add(&s, dp_empty(dt, 2, hsh, dev)) : NULL;
  dp_tensor *ghd = mode == DP_RNN_GRU ? dp_scope_add(&s, dp_empty(dt, 2, hsh, dev)) : NULL;
  dp_tensor *cur = dp_scope_add(&s, dp_empty(dt, 2, hsh, dev));
  dp_tensor *wc = dp_scope_add(&s, dp_contiguous_raw(w));
  dp_tensor *zeros = dp_scope_add(&s, dp_zeros(dt, 2, hsh, dev));
  if (!gxp || !ghp || !gh || (mode == DP_RNN_LSTM && (!gc || !gc2)) || (mode == DP_RNN_GRU && !ghd) || !cur || !wc ||
      !zeros || (gout[0] && !gy))
    return -1;
  const dp_backend *be = dp_backend_of(y);
  if (T == 0 && dp_node_needs(n, 1)) { /* no step: no gradient for the weights */
    gin[1] = dp_zeros(dt, 2, w->shape, dev);
    if (!gin[1]) return -1;
  }
  for (int64_t st = T - 1; st >= 0; st--) {
    int64_t t = reverse ? T - 1 - st : st, tp = reverse ? t + 1 : t - 1; /* tp: the step before, in walk order */
    DP_SCOPE(e);
    dp_tensor *gyt = gy ? step_view(&e, gy, t) : NULL;
    if (gy && (!gyt || dp_backend_of(cur)->binary(DP_B_ADD, cur, gh, gyt))) return -1;
    dp_tensor *h_prev = st == 0 ? (h0 ? h0 : zeros) : step_view(&e, y, tp);
    dp_tensor *c_prev = mode != DP_RNN_LSTM ? NULL : st == 0 ? (c0 ? c0 : zeros) : step_view(&e, c_all, tp);
    dp_rnn_cell_args a = {.mode = mode,
                          .rows = N,
                          .hidden = H,
                          .saved = step_view(&e, saved, t),
                          .h_prev = h_prev,
                          .c_prev = c_prev,
                          .gh = gy ? cur : gh,
                          .gc = gc,
                          .c = step_view(&e, c_all, t),
                          .h = step_view(&e, y, t),
                          .gxp = step_view(&e, gxp, t),
                          .ghp = step_view(&e, ghp, t),
                          .gc_prev = gc2,
                          .gh_direct = ghd};
    if (!h_prev || !a.h || !a.gxp || !a.ghp || be->rnn_cell_backward(&a)) return -1;
    /* dh_{t-1} = ghp W_hh (+ the direct share for GRU) */
    if (ghd && be->copy(gh, ghd)) return -1;
    if (gemm2(gh, a.ghp, false, wc, false, N, H, G * H, ghd ? 1.0 : 0.0)) return -1;
    if (gc) { /* swap the cell gradients */
      dp_tensor *tmp = gc;
      gc = gc2, gc2 = tmp;
    }
  }
  if (dp_node_needs(n, 0)) gin[0] = dp_scope_keep(&s, gxp);
  if (T > 0 && dp_node_needs(n, 1)) { /* dW_hh = sum_t ghp_t^T h_{t-1}: one GEMM over all steps */
    dp_tensor *hprev = dp_scope_add(&s, dp_empty(dt, 3, y->shape, dev));
    if (!hprev) return -1;
    DP_SCOPE(e);
    int64_t first = reverse ? T - 1 : 0;
    dp_tensor *h0v = step_view(&e, hprev, first);
    if (!h0v || be->copy(h0v, h0 ? h0 : zeros)) return -1;
    if (T > 1) {
      int64_t rsh[3] = {T - 1, N, H};
      dp_tensor *dst = dp_scope_add(&e, dp_as_strided(hprev, 3, rsh, hprev->stride, (reverse ? 0 : 1) * N * H));
      dp_tensor *src = dp_scope_add(&e, dp_as_strided(y, 3, rsh, y->stride, y->offset + (reverse ? 1 : 0) * N * H));
      if (!dst || !src || be->copy(dst, src)) return -1;
    }
    dp_tensor *gw = dp_scope_add(&s, dp_empty(dt, 2, w->shape, dev));
    if (!gw || gemm2(gw, ghp, true, hprev, false, G * H, H, T * N, 0.0)) return -1;
    gin[1] = dp_scope_keep(&s, gw);
  }
  if (dp_node_needs(n, 2)) {
    dp_tensor *gb = dp_scope_add(&s, dp_empty(dt, 1, (int64_t[]){G * H}, dev));
    if (!gb || be->channel_sum(gb, ghp, T * N, G * H, 1)) return -1;
    gin[2] = dp_scope_keep(&s, gb);
  }
  if (dp_node_needs(n, 3)) gin[3] = dp_scope_keep(&s, gh);
  if (dp_node_needs(n, 4)) gin[4] = dp_scope_keep(&s, gc);
  return 0;
}

int dp_rnn_layer(dp_rnn_mode mode, dp_tensor *xp, dp_tensor *w_hh, dp_tensor *b_hh, dp_tensor *h0, dp_tensor *c0,
                 bool reverse, dp_tensor **y_out, dp_tensor **h_last, dp_tensor **c_last) {
  if (mode != DP_RNN_LSTM) c0 = NULL;
  if (check_args(mode, xp, w_hh, b_hh, h0, c0)) return -1;
  int64_t T = xp->shape[0], N = xp->shape[1], G = dp_rnn_gates(mode), H = xp->shape[2] / G, Sv = dp_rnn_saved(mode);
  dp_device dev = dp_dev(xp);
  dp_dtype dt = xp->dtype;
  DP_SCOPE(s);
  int64_t ysh[3] = {T, N, H}, hsh[2] = {N, H};
  dp_tensor *x = dp_scope_add(&s, dp_contiguous_raw(xp));
  dp_tensor *wc = dp_scope_add(&s, dp_contiguous_raw(w_hh));
  /* W_hh^T stored [H, G H] for the steps' h_{t-1} W_hh^T once there are a
   * few: the GEMM then streams its rows in place instead of broadcasting a
   * 20-column transposed panel of h (114 against 95 GFLOP/s at 20 x 800 x
   * 200 on AVX-512), for one transpose per layer call */
  dp_tensor *wt = NULL;
  if (wc && T >= 4) {
    int64_t tsh[2] = {H, G * H}, tst[2] = {1, H};
    dp_tensor *tv = dp_scope_add(&s, dp_as_strided(wc, 2, tsh, tst, wc->offset));
    wt = tv ? dp_scope_add(&s, dp_contiguous_raw(tv)) : NULL;
    if (!wt) return -1;
  }
  dp_tensor *bc = b_hh ? dp_scope_add(&s, dp_contiguous_raw(b_hh)) : NULL;
  dp_tensor *h0c = h0 ? dp_scope_add(&s, dp_contiguous_raw(h0)) : NULL;
  dp_tensor *c0c = c0 ? dp_scope_add(&s, dp_contiguous_raw(c0)) : NULL;
  dp_tensor *y = dp_scope_add(&s, dp_empty(dt, 3, ysh, dev));
  dp_tensor *saved = Sv ? dp_scope_add(&s, dp_empty(dt, 3, (int64_t[]){T, N, Sv * H}, dev)) : NULL;
  dp_tensor *c_all = mode == DP_RNN_LSTM ? dp_scope_add(&s, dp_empty(dt, 3, ysh, dev)) : NULL;
  dp_tensor *hp = dp_scope_add(&s, dp_empty(dt, 2, (int64_t[]){N, G * H}, dev));
  dp_tensor *zeros = dp_scope_add(&s, dp_zeros(dt, 2, hsh, dev));
  if (!x || !wc || (b_hh && !bc) || (h0 && !h0c) || (c0 && !c0c) || !y || (Sv && !saved) ||
      (mode == DP_RNN_LSTM && !c_all) || !hp || !zeros)
    return -1;
  const dp_backend *be = dp_backend_of(x);
  for (int64_t st = 0; st < T; st++) {
    int64_t t = reverse ? T - 1 - st : st, tp = reverse ? t + 1 : t - 1;
    DP_SCOPE(e);
    /* the step reads the previous one's states straight from y and c_all */
    dp_tensor *h_prev = st == 0 ? (h0c ? h0c : zeros) : step_view(&e, y, tp);
    dp_tensor *c_prev = mode != DP_RNN_LSTM ? NULL : st == 0 ? (c0c ? c0c : zeros) : step_view(&e, c_all, tp);
    if (!h_prev || gemm2(hp, h_prev, false, wt ? wt : wc, !wt, N, G * H, H, 0.0)) return -1;
    dp_rnn_cell_args a = {.mode = mode,
                          .rows = N,
                          .hidden = H,
                          .xp = step_view(&e, x, t),
                          .hp = hp,
                          .bhh = bc,
                          .h_prev = h_prev,
                          .c_prev = c_prev,
                          .h_out = step_view(&e, y, t),
                          .c_out = step_view(&e, c_all, t),
                          .saved = step_view(&e, saved, t)};
    if (!a.xp || !a.h_out || (c_all && !a.c_out) || (saved && !a.saved) || be->rnn_cell(&a)) return -1;
  }
  /* the state after the last step walked (the initial one for T = 0) */
  int64_t tl = reverse ? 0 : T - 1;
  DP_SCOPE(e);
  dp_tensor *last_h = T ? step_view(&e, y, tl) : h0c ? h0c : zeros;
  dp_tensor *last_c = mode != DP_RNN_LSTM ? NULL : T ? step_view(&e, c_all, tl) : c0c ? c0c : zeros;
  dp_tensor *hl = last_h ? dp_scope_add(&s, dp_copy_raw(last_h)) : NULL;
  dp_tensor *cl = last_c ? dp_scope_add(&s, dp_copy_raw(last_c)) : NULL;
  if (!hl || (mode == DP_RNN_LSTM && !cl)) return -1;
  dp_tensor *ins[5] = {xp, w_hh, b_hh, h0, c0};
  if (dp_any_requires_grad(5, ins)) {
    dp_node *n = dp_node_new(mode == DP_RNN_LSTM  ? "LstmBackward"
                             : mode == DP_RNN_GRU ? "GruBackward"
                                                  : "RnnBackward",
                             rnn_backward, 5, ins, 3);
    n->i[0] = mode;
    n->i[1] = reverse;
    dp_node_save(n, wc);
    dp_node_save(n, saved);
    dp_node_save(n, c_all);
    dp_node_save(n, y);
    dp_node_save(n, h0c);
    dp_node_save(n, c0c);
    dp_node_attach(n, y, 0);
    dp_node_attach(n, hl, 1);
    if (cl) dp_node_attach(n, cl, 2);
    dp_node_release(n);
  }
  *y_out = dp_scope_keep(&s, y);
  *h_last = dp_scope_keep(&s, hl);
  if (c_last) *c_last = cl ? dp_scope_keep(&s, cl) : NULL;
  return 0;
}
