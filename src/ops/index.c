/* index_select along a dimension (gather of rows by position), with its
 * gradient (index_add into zeros). Positions are 1-based from Lua. A
 * backend with index_select_dim / index_add_dim reads the tensor as
 * [outer, n, inner] in place along any dim; the others move the dim to the
 * front and back (two copies of the whole tensor each way past the first).
 *
 * resample_dim: T weighted taps along a dim (F.interpolate's linear modes,
 * one call per spatial dim): out[.., j, ..] = sum_t w[t, j] * x[.., idx[t,
 * j], ..], the gradient for x only (the weights are constants of the
 * sizes). Backends without resample_dim compose it from index_select, mul
 * and add, autograd running through the composition.
 *
 * index_add: t plus src's slices added at positions along dim, through
 * index_add_dim (the Lua side composes scatter_add on other backends).
 *
 * plane_gather: the last two dims through a row map and a column map at
 * once (-1: a fill value), the paddings' and nearest interpolation's one
 * pass each way; backends without it are not called (nn/resample.lua
 * composes index_select and cat there). */
#include <string.h>

#include "ops/op_util.h"

/* outer and inner sizes around dim */
static void around(int nd, const int64_t *shape, int dim, int64_t *outer, int64_t *inner) {
  *outer = 1, *inner = 1;
  for (int d = 0; d < nd; d++) {
    if (d < dim) *outer *= shape[d];
    if (d > dim) *inner *= shape[d];
  }
}

/* out's backward node over ins (when one requires grad), keeping dim, base and the index for it */
static void attach_indexed(const char *name, dp_backward_fn fn, int n_in, dp_tensor *const *ins, dp_tensor *out,
                           int dim, int64_t base, dp_tensor *idx) {
  if (!dp_any_requires_grad(n_in, ins)) return;
  dp_node *n = dp_node_new(name, fn, n_in, ins, 1);
  n->i[0] = dim;
  n->i[1] = base;
  dp_node_save(n, idx);
  dp_node_attach(n, out, 0);
  dp_node_release(n);
}

static int index_select_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int dim = (int)n->i[0];
  int64_t base = n->i[1];
  dp_tensor *idx = dp_node_saved(n, 0);
  const dp_backend *be = dp_backend_of(gout[0]);
  if (be->index_add_dim && (n->in_dtype[0] == DP_F32 || n->in_dtype[0] == DP_F64) && gout[0]->dtype == n->in_dtype[0]) {
    int64_t outer, inner;
    around(n->in_ndim[0], n->in_shape[0], dim, &outer, &inner);
    DP_SCOPE(s);
    dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
    dp_tensor *gx = gy ? dp_scope_add(&s, dp_empty(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gy))) : NULL;
    if (!gx || be->index_add_dim(gx, gy, idx, outer, n->in_shape[0][dim], inner, base, false)) return -1;
    gin[0] = dp_scope_keep(&s, gx);
    return 0;
  }
  /* move dim first, accumulate rows, move back */
  int nd = n->in_ndim[0];
  int64_t sh[DP_MAXDIM];
  memcpy(sh, n->in_shape[0], sizeof sh);
  int64_t t = sh[0];
  sh[0] = sh[dim];
  sh[dim] = t;
  DP_SCOPE(s);
  dp_tensor *acc = dp_scope_add(&s, dp_zeros(n->in_dtype[0], nd, sh, dp_dev(gout[0])));
  dp_tensor *g = acc ? dp_scope_add(&s, dp_transpose(gout[0], 0, dim)) : NULL;
  dp_tensor *gc = g ? dp_scope_add(&s, dp_contiguous_raw(g)) : NULL;
  if (!gc || dp_backend_of(acc)->index_add(acc, idx, gc, base)) return -1;
  dp_tensor *back = dp_scope_add(&s, dp_transpose(acc, 0, dim));
  gin[0] = back ? dp_contiguous_raw(back) : NULL;
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_index_select(dp_tensor *x, int dim, dp_tensor *idx, int64_t base) {
  if (dp_check_dim("index_select", x, dim)) return NULL;
  if (idx->dtype != DP_I64 || idx->ndim > 1) {
    dp_error("index_select: the index must be a 1-d int64 tensor, got %s of shape %s", dp_dtype_name(idx->dtype),
             SHAPE(idx));
    return NULL;
  }
  if (dp_check_same_device("index_select", x, idx)) return NULL;
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  const dp_backend *be = dp_backend_of(x);
  bool in_place = be->index_select_dim != NULL;
  dp_tensor *xt = in_place ? NULL : dp_scope_add(&s, dp_transpose(x, 0, dim));
  dp_tensor *src = in_place ? dp_scope_add(&s, dp_contiguous_raw(x))
                   : xt     ? dp_scope_add(&s, dp_contiguous_raw(xt))
                            : NULL;
  dp_tensor *ic = dp_scope_add(&s, dp_contiguous_raw(idx));
  dp_tensor *out = NULL;
  if (in_place && src && ic) {
    int64_t sh[DP_MAXDIM], outer, inner;
    memcpy(sh, x->shape, sizeof sh);
    sh[dim] = dp_numel(ic);
    around(x->ndim, x->shape, dim, &outer, &inner);
    out = dp_scope_add(&s, dp_empty(x->dtype, x->ndim, sh, dp_dev(x)));
    if (out && be->index_select_dim(out, src, ic, outer, x->shape[dim], inner, base)) out = NULL;
  } else if (src && ic) {
    int64_t sh[DP_MAXDIM];
    memcpy(sh, src->shape, sizeof sh);
    sh[0] = dp_numel(ic);
    out = dp_scope_add(&s, dp_empty(x->dtype, x->ndim, sh, dp_dev(x)));
    if (out && dp_backend_of(x)->index_select(out, src, ic, base)) out = NULL;
    if (out && dim != 0) {
      dp_tensor *o2 = dp_scope_add(&s, dp_transpose(out, 0, dim));
      out = o2 ? dp_scope_add(&s, dp_contiguous_raw(o2)) : NULL;
    }
  }
  dp_set_grad_enabled(prev);
  if (!out) return NULL;
  dp_scope_keep(&s, out);
  attach_indexed("IndexSelectBackward", index_select_backward, 1, &x, out, dim, base, ic);
  return out;
}

static int resample_dim_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int dim = (int)n->i[0];
  int64_t base = n->i[1], outer, inner;
  dp_tensor *idx = dp_node_saved(n, 0), *w = dp_node_saved(n, 1);
  around(n->in_ndim[0], n->in_shape[0], dim, &outer, &inner);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = gy ? dp_scope_add(&s, dp_empty(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gy))) : NULL;
  if (!gx || dp_backend_of(gy)->resample_dim_backward(gx, gy, idx, w, outer, n->in_shape[0][dim], inner, base))
    return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

/* sum_t index_select(x, dim, idx[t]) * w[t] (shaped along dim), autograd through the ops */
static dp_tensor *resample_composed(dp_tensor *x, int dim, dp_tensor *idx, dp_tensor *w, int64_t base) {
  DP_SCOPE(s);
  dp_tensor *y = NULL;
  int64_t sh[DP_MAXDIM];
  for (int d = 0; d < x->ndim; d++) sh[d] = 1;
  sh[dim] = idx->shape[1];
  for (int64_t t = 0; t < idx->shape[0]; t++) {
    dp_tensor *it = dp_scope_add(&s, dp_select(idx, 0, t));
    dp_tensor *wt = dp_scope_add(&s, dp_select(w, 0, t));
    dp_tensor *wv = wt ? dp_scope_add(&s, dp_reshape(wt, x->ndim, sh)) : NULL;
    dp_tensor *xs = it && wv ? dp_scope_add(&s, dp_index_select(x, dim, it, base)) : NULL;
    dp_tensor *term = xs ? dp_scope_add(&s, dp_mul(xs, wv)) : NULL;
    if (!term) return NULL;
    y = y ? dp_scope_add(&s, dp_add(y, term)) : term;
    if (!y) return NULL;
  }
  return dp_scope_keep(&s, y);
}

dp_tensor *dp_resample_dim(dp_tensor *x, int dim, dp_tensor *idx, dp_tensor *w, int64_t base) {
  if (dp_check_dim("resample", x, dim)) return NULL;
  if (!dp_dtype_is_float(x->dtype)) {
    dp_error("resample: expected a floating-point input, got %s", dp_dtype_name(x->dtype));
    return NULL;
  }
  if (idx->dtype != DP_I64 || idx->ndim != 2 || idx->shape[0] < 1) {
    dp_error("resample: the positions must be a 2-d int64 tensor [taps >= 1, k], got %s of shape %s",
             dp_dtype_name(idx->dtype), SHAPE(idx));
    return NULL;
  }
  if (w->dtype != x->dtype || w->ndim != 2 || w->shape[0] != idx->shape[0] || w->shape[1] != idx->shape[1]) {
    dp_error("resample: the weights must be a %s tensor of the positions' shape %s, got %s of shape %s",
             dp_dtype_name(x->dtype), SHAPE(idx), dp_dtype_name(w->dtype), SHAPE(w));
    return NULL;
  }
  if (dp_check_same_device("resample", x, idx) || dp_check_same_device("resample", x, w)) return NULL;
  const dp_backend *be = dp_backend_of(x);
  if (!be->resample_dim || !be->resample_dim_backward || (x->dtype != DP_F32 && x->dtype != DP_F64))
    return resample_composed(x, dim, idx, w, base);
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *ic = xc ? dp_scope_add(&s, dp_contiguous_raw(idx)) : NULL;
  dp_tensor *wc = ic ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL;
  if (!wc) return NULL;
  int64_t sh[DP_MAXDIM], outer, inner;
  memcpy(sh, x->shape, sizeof sh);
  sh[dim] = idx->shape[1];
  around(x->ndim, x->shape, dim, &outer, &inner);
  dp_tensor *out = dp_scope_add(&s, dp_empty(x->dtype, x->ndim, sh, dp_dev(x)));
  if (!out || be->resample_dim(out, xc, ic, wc, outer, x->shape[dim], inner, base)) return NULL;
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("ResampleBackward", resample_dim_backward, 1, &x, 1);
    n->i[0] = dim;
    n->i[1] = base;
    dp_node_save(n, ic);
    dp_node_save(n, wc);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* ---- plane_gather ---- */
static int plane_gather_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *ih = dp_node_saved(n, 0), *iw = dp_node_saved(n, 1);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gyt = gy && gy->dtype != n->in_dtype[0] ? dp_scope_add(&s, dp_to(gy, n->in_dtype[0], dp_dev(gy))) : gy;
  dp_tensor *gx = gyt ? dp_scope_add(&s, dp_empty(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gyt))) : NULL;
  if (!gx || dp_backend_of(gx)->plane_gather_backward(gx, gyt, ih, iw, n->i[0])) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_plane_gather(dp_tensor *x, dp_tensor *ih, dp_tensor *iw, double value, int64_t base) {
  const char *op = "plane_gather";
  const dp_backend *be = dp_backend_of(x);
  if (!be->plane_gather || !be->plane_gather_backward) {
    dp_error("%s: the %s backend has no plane_gather kernel", op, be->name);
    return NULL;
  }
  if (x->ndim < 2) {
    dp_error("%s: expected an input of at least 2 dimensions, got shape %s", op, SHAPE(x));
    return NULL;
  }
  dp_tensor *maps[2] = {ih, iw};
  for (int k = 0; k < 2; k++)
    if (maps[k]->dtype != DP_I64 || maps[k]->ndim != 1 || dp_check_same_device(op, x, maps[k])) {
      dp_error("%s: the %s map must be a 1-d int64 tensor, got %s of shape %s", op, k ? "column" : "row",
               dp_dtype_name(maps[k]->dtype), SHAPE(maps[k]));
      return NULL;
    }
  bool grad = dp_any_requires_grad(1, &x);
  if (grad && x->dtype != DP_F32 && x->dtype != DP_F64) {
    dp_error("%s: the gradient is float32 / float64 only, got an input of %s that requires grad", op,
             dp_dtype_name(x->dtype));
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *hc = xc ? dp_scope_add(&s, dp_contiguous_raw(ih)) : NULL;
  dp_tensor *wc = hc ? dp_scope_add(&s, dp_contiguous_raw(iw)) : NULL;
  if (!wc) return NULL;
  int64_t sh[DP_MAXDIM];
  memcpy(sh, x->shape, sizeof sh);
  sh[x->ndim - 2] = dp_numel(hc), sh[x->ndim - 1] = dp_numel(wc);
  dp_tensor *out = dp_scope_add(&s, dp_empty(x->dtype, x->ndim, sh, dp_dev(x)));
  if (!out || be->plane_gather(out, xc, hc, wc, value, base)) return NULL;
  dp_scope_keep(&s, out);
  if (grad) {
    dp_node *n = dp_node_new("PlaneGatherBackward", plane_gather_backward, 1, &x, 1);
    n->i[0] = base;
    dp_node_save(n, hc);
    dp_node_save(n, wc);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* ---- index_add (out of place): t with src's slices along dim added at idx - base, repeats adding up; the
 * gradient t's unchanged, src's the index_select of it. Backends with index_add_dim only (the Lua side
 * composes scatter_add elsewhere): a copy of t, src's rows added into it along the dim in place. Through
 * scatter_add with the index expanded to src's shape it took 2.1 ms for [1024, 1024] (PyTorch 0.22). */
static int index_add_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  if (dp_node_needs(n, 0) && !(gin[0] = dp_grad_for_input(n, 0, (dp_retain(gout[0]), gout[0])))) return -1;
  if (dp_node_needs(n, 1) && !(gin[1] = dp_index_select(gout[0], (int)n->i[0], dp_node_saved(n, 0), n->i[1])))
    return -1;
  return 0;
}

dp_tensor *dp_index_add(dp_tensor *t, int dim, dp_tensor *idx, dp_tensor *src, int64_t base) {
  if (dp_check_dim("index_add", t, dim) || dp_check_same_device("index_add", t, src) ||
      dp_check_same_device("index_add", t, idx))
    return NULL;
  const dp_backend *be = dp_backend_of(t);
  bool shapes = src->ndim == t->ndim && idx->ndim == 1 && idx->dtype == DP_I64;
  for (int d = 0; shapes && d < t->ndim; d++) shapes = src->shape[d] == (d == dim ? idx->shape[0] : t->shape[d]);
  if (!be->index_add_dim || (t->dtype != DP_F32 && t->dtype != DP_F64) || src->dtype != t->dtype || !shapes) {
    dp_error("index_add: expected float32 or float64 tensors of one dtype on a backend with index_add_dim, a 1-d "
             "int64 index and the source of the tensor's shape %s with the index's length along dim %d; got %s %s, "
             "index %s %s, source %s %s",
             SHAPE(t), dim, dp_dtype_name(t->dtype), SHAPE(t), dp_dtype_name(idx->dtype), SHAPE(idx),
             dp_dtype_name(src->dtype), SHAPE(src));
    return NULL;
  }
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  int64_t outer, inner;
  around(t->ndim, t->shape, dim, &outer, &inner);
  dp_tensor *sc = dp_scope_add(&s, dp_contiguous_raw(src));
  dp_tensor *ic = sc ? dp_scope_add(&s, dp_contiguous_raw(idx)) : NULL;
  dp_tensor *out = ic ? dp_scope_add(&s, dp_copy_raw(t)) : NULL; /* a contiguous copy of t, src's rows added */
  if (out && be->index_add_dim(out, sc, ic, outer, t->shape[dim], inner, base, true)) out = NULL;
  dp_set_grad_enabled(prev);
  if (!out) return NULL;
  dp_scope_keep(&s, out);
  dp_tensor *ins[2] = {t, src};
  attach_indexed("IndexAddBackward", index_add_backward, 2, ins, out, dim, base, ic);
  return out;
}
