/* F.unfold and F.fold: the sliding blocks of an image as columns and back,
 * PyTorch's [N, C, H, W] <-> [N, C * kh * kw, L] (L = oh * ow blocks; an
 * unbatched [C, H, W] <-> [C * kh * kw, L]). They are the convolutions'
 * im2col and col2im (the backends' entries), so each is the other's
 * gradient: unfold's backward folds gy into zeros (overlapping blocks add
 * up), fold's unfolds gy. */
#include "ops/op_util.h"
#include "tensor/checked.h"

/* the geometry of an input [.., C, H, W] under a's window; -1 + error (naming op and the sizes) when no block fits */
static int geometry(const char *op, dp_window2d *g, int64_t n, int64_t c, int64_t h, int64_t w,
                    const dp_unfold_args *a) {
  const char *names[4] = {"kernel_size", "dilation", "padding", "stride"};
  const int64_t *v[4] = {a->kernel, a->dilation, a->padding, a->stride};
  for (int i = 0; i < 4; i++)
    for (int d = 0; d < 2; d++)
      if (i == 2 ? v[i][d] < 0 : v[i][d] < 1)
        return dp_error("%s: %s must be %s, got (%" PRId64 ", %" PRId64 ")", op, names[i],
                        i == 2 ? "non-negative" : "greater than zero", v[i][0], v[i][1]);
  *g = (dp_window2d){.n = n,
                     .c = c,
                     .h = h,
                     .w = w,
                     .kh = a->kernel[0],
                     .kw = a->kernel[1],
                     .sh = a->stride[0],
                     .sw = a->stride[1],
                     .ph = a->padding[0],
                     .pw = a->padding[1],
                     .dh = a->dilation[0],
                     .dw = a->dilation[1],
                     .groups = 1};
  if (dp_window_size(h, g->kh, g->sh, g->ph, g->dh, false, &g->oh) ||
      dp_window_size(w, g->kw, g->sw, g->pw, g->dw, false, &g->ow) || g->oh < 1 || g->ow < 1)
    return dp_error("%s: input of spatial size (%" PRId64 ", %" PRId64 ") with kernel_size=(%" PRId64 ", %" PRId64
                    "), dilation=(%" PRId64 ", %" PRId64 "), padding=(%" PRId64 ", %" PRId64
                    ") leaves no sliding block (each side needs at least one)",
                    op, h, w, g->kh, g->kw, g->dh, g->dw, g->ph, g->pw);
  dp_window_one_step(g);
  return 0;
}

/* the call's arguments as given (the backward recomputes the window from them: a geometry's stride may have been
 * set to 1 along an axis of one block, which with the input's size would give more blocks) */
static void save_args(dp_node *n, const dp_unfold_args *a) {
  n->i[0] = a->kernel[0], n->i[1] = a->kernel[1], n->i[2] = a->dilation[0], n->i[3] = a->dilation[1];
  n->i[4] = a->padding[0], n->i[5] = a->padding[1], n->i[6] = a->stride[0], n->i[7] = a->stride[1];
}

static dp_unfold_args load_args(const dp_node *n) {
  return (dp_unfold_args){{n->i[0], n->i[1]}, {n->i[2], n->i[3]}, {n->i[4], n->i[5]}, {n->i[6], n->i[7]}};
}

/* cols [N, C*kh*kw, L] = im2col(x [N, C, H, W]); x contiguous */
static dp_tensor *unfold_raw(dp_tensor *x, const dp_window2d *g, int ndim_out) {
  int64_t sh[3] = {g->n, 0, 0};
  if (dp_mul_overflow(g->c, g->kh, &sh[1]) || dp_mul_overflow(sh[1], g->kw, &sh[1]) ||
      dp_mul_overflow(g->oh, g->ow, &sh[2])) {
    dp_error("unfold: the columns of kernel_size (%" PRId64 ", %" PRId64 ") over %" PRId64 " channels are too many",
             g->kh, g->kw, g->c);
    return NULL;
  }
  dp_tensor *cols = dp_empty(x->dtype, ndim_out, ndim_out == 3 ? sh : sh + 1, dp_dev(x));
  if (cols && g->n > 0 && dp_numel(cols) > 0 && dp_backend_of(x)->im2col(cols, x, g, 0, g->n)) {
    dp_release(cols);
    return NULL;
  }
  return cols;
}

/* x [N, C, H, W] (shape given) = col2im(cols [N, C*kh*kw, L]); cols contiguous */
static dp_tensor *fold_raw(dp_tensor *cols, const dp_window2d *g, int ndim_out) {
  int64_t sh[4] = {g->n, g->c, g->h, g->w};
  dp_tensor *x = dp_zeros(cols->dtype, ndim_out, ndim_out == 4 ? sh : sh + 1, dp_dev(cols));
  if (x && g->n > 0 && dp_numel(cols) > 0 && dp_backend_of(cols)->col2im(x, cols, g, 0, g->n)) {
    dp_release(x);
    return NULL;
  }
  return x;
}

static int unfold_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  const int64_t *xs = n->in_shape[0];
  int lead = n->in_ndim[0] - 4;
  dp_unfold_args a = load_args(n);
  dp_window2d g;
  if (geometry("unfold", &g, lead < 0 ? 1 : xs[0], xs[lead + 1], xs[lead + 2], xs[lead + 3], &a)) return -1;
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  gin[0] = gy ? fold_raw(gy, &g, n->in_ndim[0]) : NULL;
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_unfold2d(dp_tensor *x, const dp_unfold_args *a) {
  if (x->ndim != 3 && x->ndim != 4) {
    dp_error("unfold: expected a 3-D (unbatched) or 4-D (batched) input, got shape %s", SHAPE(x));
    return NULL;
  }
  if (dp_check_float("unfold", x)) return NULL;
  int lead = x->ndim - 4;
  dp_window2d g;
  if (geometry("unfold", &g, lead < 0 ? 1 : x->shape[0], x->shape[lead + 1], x->shape[lead + 2], x->shape[lead + 3], a))
    return NULL;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *y = xc ? dp_scope_add(&s, unfold_raw(xc, &g, x->ndim - 1)) : NULL;
  if (!y) return NULL;
  dp_scope_keep(&s, y);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("Im2ColBackward", unfold_backward, 1, &x, 1);
    save_args(n, a);
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}

/* the window of fold's output: C from the columns' rows, L checked against the blocks */
static int fold_geometry(dp_window2d *g, const dp_tensor *cols, const int64_t out[2], const dp_unfold_args *a) {
  int lead = cols->ndim - 3;
  int64_t rows = cols->shape[lead + 1], L = cols->shape[lead + 2], kk;
  if (out[0] < 1 || out[1] < 1)
    return dp_error("fold: output_size must be positive, got (%" PRId64 ", %" PRId64 ")", out[0], out[1]);
  if (a->kernel[0] < 1 || a->kernel[1] < 1)
    return dp_error("fold: kernel_size must be greater than zero, got (%" PRId64 ", %" PRId64 ")", a->kernel[0],
                    a->kernel[1]);
  if (dp_mul_overflow(a->kernel[0], a->kernel[1], &kk))
    return dp_error("fold: kernel_size (%" PRId64 ", %" PRId64 ") is too large", a->kernel[0], a->kernel[1]);
  if (rows % kk)
    return dp_error("fold: expected size of input's dimension %d to be divisible by the product of kernel_size, but "
                    "got input.size(%d)=%" PRId64 " and kernel_size=(%" PRId64 ", %" PRId64 ")",
                    lead + 1, lead + 1, rows, a->kernel[0], a->kernel[1]);
  if (geometry("fold", g, lead < 0 ? 1 : cols->shape[0], rows / kk, out[0], out[1], a)) return -1;
  int64_t blocks;
  if (dp_mul_overflow(g->oh, g->ow, &blocks))
    return dp_error("fold: output_size (%" PRId64 ", %" PRId64 ") gives too many sliding blocks", out[0], out[1]);
  if (blocks != L)
    return dp_error("fold: given output_size=(%" PRId64 ", %" PRId64 "), kernel_size=(%" PRId64 ", %" PRId64
                    "), dilation=(%" PRId64 ", %" PRId64 "), padding=(%" PRId64 ", %" PRId64 "), stride=(%" PRId64
                    ", %" PRId64 "), expected size of input's dimension %d to match the calculated number of sliding "
                    "blocks %" PRId64 " * %" PRId64 " = %" PRId64 ", but got input.size(%d)=%" PRId64,
                    out[0], out[1], a->kernel[0], a->kernel[1], a->dilation[0], a->dilation[1], a->padding[0],
                    a->padding[1], a->stride[0], a->stride[1], lead + 2, g->oh, g->ow, blocks, lead + 2, L);
  return 0;
}

static int fold_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  const int64_t *cs = n->in_shape[0];
  int lead = n->in_ndim[0] - 3;
  dp_unfold_args a = load_args(n);
  dp_window2d g;
  const int64_t *ys = gout[0]->shape;
  int ylead = gout[0]->ndim - 4;
  if (geometry("fold", &g, lead < 0 ? 1 : cs[0], cs[lead + 1] / (a.kernel[0] * a.kernel[1]), ys[ylead + 2],
               ys[ylead + 3], &a))
    return -1;
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  gin[0] = gy ? unfold_raw(gy, &g, n->in_ndim[0]) : NULL;
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_fold2d(dp_tensor *cols, const int64_t output_size[2], const dp_unfold_args *a) {
  if (cols->ndim != 2 && cols->ndim != 3) {
    dp_error("fold: expected a 2-D (unbatched) or 3-D (batched) input, got shape %s", SHAPE(cols));
    return NULL;
  }
  if (dp_check_float("fold", cols)) return NULL;
  dp_window2d g;
  if (fold_geometry(&g, cols, output_size, a)) return NULL;
  DP_SCOPE(s);
  dp_tensor *cc = dp_scope_add(&s, dp_contiguous_raw(cols));
  dp_tensor *y = cc ? dp_scope_add(&s, fold_raw(cc, &g, cols->ndim + 1)) : NULL;
  if (!y) return NULL;
  dp_scope_keep(&s, y);
  if (dp_any_requires_grad(1, &cols)) {
    dp_node *n = dp_node_new("Col2ImBackward", fold_backward, 1, &cols, 1);
    save_args(n, a);
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}
