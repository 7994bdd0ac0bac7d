/* Selections and scans with their gradients: where and masked_fill,
 * tril / triu, gather / scatter / scatter_add, topk, cumsum, flip.
 *
 * Gradients are the ops themselves run the other way: where's is where
 * with a zero, tril's is tril, gather's is scatter_add into zeros,
 * scatter's the gathered gradient (and the rest of it, the written
 * positions zeroed), topk's a scatter of the values' gradient, cumsum's a
 * cumsum from the end, flip's a flip. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"

/* ---- where / masked_fill ---- */

/* cond ? a : b broadcast to (nd, shape), in dtype dt; no autograd */
static dp_tensor *where_raw(dp_tensor *cond, dp_tensor *a, dp_tensor *b, dp_dtype dt, int nd, const int64_t *shape) {
  DP_SCOPE(s);
  dp_tensor *ac = a->dtype == dt ? a : dp_scope_add(&s, dp_to(a, dt, dp_dev(a)));
  dp_tensor *bc = b->dtype == dt ? b : dp_scope_add(&s, dp_to(b, dt, dp_dev(b)));
  dp_tensor *ec = dp_scope_add(&s, dp_expand_raw(cond, nd, shape));
  dp_tensor *ea = ac ? dp_scope_add(&s, dp_expand_raw(ac, nd, shape)) : NULL;
  dp_tensor *eb = bc ? dp_scope_add(&s, dp_expand_raw(bc, nd, shape)) : NULL;
  dp_tensor *out = dp_scope_add(&s, dp_empty(dt, nd, shape, dp_dev(cond)));
  if (!ec || !ea || !eb || !out || dp_backend_of(out)->where(out, ec, ea, eb)) return NULL;
  return dp_scope_keep(&s, out);
}

static int check_cond(const char *op, const dp_tensor *cond) {
  if (cond->dtype == DP_U8) return 0;
  return dp_error("%s: the %s must be a boolean (uint8) tensor such as x:gt(0) gives, got %s", op,
                  strcmp(op, "where") ? "mask" : "condition", dp_dtype_name(cond->dtype));
}

/* where's gradient for input `which` (1: a, 2: b): the upstream gradient
 * where that input was chosen, 0 elsewhere, summed to the input's shape */
static dp_tensor *where_grad(dp_node *n, dp_tensor *cond, dp_tensor *gy, int which) {
  DP_SCOPE(s);
  dp_tensor *zero = dp_scope_add(&s, dp_scalar(0, gy->dtype, dp_dev(gy)));
  dp_tensor *g = zero ? dp_scope_add(&s, where_raw(cond, which == 1 ? gy : zero, which == 1 ? zero : gy, gy->dtype,
                                                   gy->ndim, gy->shape))
                      : NULL;
  return g ? dp_grad_for_input(n, which, dp_scope_keep(&s, g)) : NULL;
}

static int where_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *cond = dp_node_saved(n, 0);
  for (int k = 1; k <= 2; k++)
    if (dp_node_needs(n, k) && !(gin[k] = where_grad(n, cond, gout[0], k))) return -1;
  return 0;
}

dp_tensor *dp_where(dp_tensor *cond, dp_tensor *a, dp_tensor *b) {
  if (check_cond("where", cond) || dp_check_same_device("where", cond, a) || dp_check_same_device("where", a, b))
    return NULL;
  int nd, nd2;
  int64_t sh[DP_MAXDIM], sh2[DP_MAXDIM];
  if (dp_broadcast_shape(a, b, &nd, sh)) {
    dp_error_prefix("where: ");
    return NULL;
  }
  dp_tensor ab = {.ndim = nd}; /* a shape-only stand-in for the broadcast of a and b */
  memcpy(ab.shape, sh, sizeof sh);
  if (dp_broadcast_shape(cond, &ab, &nd2, sh2)) {
    dp_error_prefix("where: ");
    return NULL;
  }
  dp_tensor *out = where_raw(cond, a, b, dp_promote(a->dtype, b->dtype), nd2, sh2);
  dp_tensor *ins[3] = {cond, a, b};
  if (out && dp_any_requires_grad(3, ins)) {
    dp_node *n = dp_node_new("WhereBackward", where_backward, 3, ins, 1);
    dp_node_save(n, cond);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_masked_fill(dp_tensor *x, dp_tensor *mask, dp_tensor *value) {
  if (check_cond("masked_fill", mask) || dp_check_same_device("masked_fill", x, mask)) return NULL;
  if (value->ndim != 0) {
    dp_error("masked_fill: the value must be a number or a 0-dimensional tensor, got shape %s", SHAPE(value));
    return NULL;
  }
  int nd;
  int64_t sh[DP_MAXDIM];
  if (dp_broadcast_shape(x, mask, &nd, sh) || nd != x->ndim || memcmp(sh, x->shape, sizeof(int64_t) * (size_t)nd)) {
    dp_error("masked_fill: the mask of shape %s cannot be broadcast to the tensor's shape %s", SHAPE(mask), SHAPE(x));
    return NULL;
  }
  DP_SCOPE(s);
  /* the value takes x's dtype, as PyTorch's masked_fill */
  dp_tensor *v = value->dtype == x->dtype ? value : dp_scope_add(&s, dp_to(value, x->dtype, dp_dev(x)));
  return v ? dp_where(mask, v, x) : NULL;
}

/* ---- tril / triu ---- */
static dp_tensor *tri_raw(dp_tensor *x, int64_t k, bool upper) {
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *out = xc ? dp_scope_add(&s, dp_empty_like(xc)) : NULL;
  if (!out || dp_backend_of(x)->tri(out, xc, x->shape[x->ndim - 2], x->shape[x->ndim - 1], k, upper)) return NULL;
  return dp_scope_keep(&s, out);
}

static int tri_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  gin[0] = tri_raw(gout[0], n->i[0], n->i[1]);
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_tri(dp_tensor *x, int64_t k, bool upper) {
  if (x->ndim < 2) {
    dp_error("%s: expected a tensor with at least 2 dimensions, got shape %s", upper ? "triu" : "tril", SHAPE(x));
    return NULL;
  }
  /* a diagonal past the matrix keeps or clears all of it: clamped, the kernels' i + k cannot overflow */
  int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
  k = k < -rows ? -rows : k > cols ? cols : k;
  dp_tensor *out = tri_raw(x, k, upper);
  if (out && dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new(upper ? "TriuBackward" : "TrilBackward", tri_backward, 1, &x, 1);
    n->i[0] = k;
    n->i[1] = upper;
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* ---- gather / scatter ---- */
static int check_index(const char *op, const dp_tensor *x, int dim, const dp_tensor *idx, const dp_tensor *src) {
  if (idx->dtype != DP_I64)
    return dp_error("%s: the index must be an int64 tensor, got %s (convert with :long())", op,
                    dp_dtype_name(idx->dtype));
  if (dp_check_same_device(op, x, idx)) return -1;
  if (idx->ndim != x->ndim)
    return dp_error("%s: the index (shape %s) must have as many dimensions as the tensor (shape %s)", op, SHAPE(idx),
                    SHAPE(x));
  if (dp_check_dim(op, x, dim)) return -1;
  for (int d = 0; d < x->ndim; d++) {
    if (d != dim && idx->shape[d] > x->shape[d])
      return dp_error("%s: the index (shape %s) is larger than the tensor (shape %s) in dimension %d", op, SHAPE(idx),
                      SHAPE(x), d + 1);
    if (src && src->ndim && idx->shape[d] > src->shape[d])
      return dp_error("%s: the index (shape %s) is larger than the source (shape %s) in dimension %d", op, SHAPE(idx),
                      SHAPE(src), d + 1);
  }
  if (src && src->ndim && src->ndim != x->ndim)
    return dp_error("%s: the source (shape %s) must have as many dimensions as the tensor (shape %s)", op, SHAPE(src),
                    SHAPE(x));
  return 0;
}

/* src's values over idx's shape, in dtype dt: a narrowed view, or the
 * 0-dim value expanded */
static dp_tensor *source_view(dp_scope *s, dp_tensor *src, const dp_tensor *idx, dp_dtype dt) {
  dp_tensor *c = src->dtype == dt ? src : dp_scope_add(s, dp_to(src, dt, dp_dev(src)));
  if (!c) return NULL;
  if (c->ndim == 0) return dp_scope_add(s, dp_expand_raw(c, idx->ndim, idx->shape));
  return dp_scope_add(s, dp_as_strided(c, idx->ndim, idx->shape, c->stride, c->offset));
}

static int gather_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  DP_SCOPE(s);
  dp_tensor *idx = dp_node_saved(n, 0);
  dp_tensor *gx = dp_scope_add(&s, dp_zeros(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gout[0])));
  if (!gx || dp_backend_of(gx)->scatter(gx, idx, gout[0], (int)n->i[0], n->i[1], true)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_gather(dp_tensor *x, int dim, dp_tensor *idx, int64_t base) {
  if (check_index("gather", x, dim, idx, NULL)) return NULL;
  DP_SCOPE(s);
  dp_tensor *out = dp_scope_add(&s, dp_empty(x->dtype, idx->ndim, idx->shape, dp_dev(x)));
  if (!out || dp_backend_of(x)->gather(out, x, idx, dim, base)) return NULL;
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("GatherBackward", gather_backward, 1, &x, 1);
    n->i[0] = dim;
    n->i[1] = base;
    dp_node_save(n, idx);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

int dp_scatter_(dp_tensor *x, int dim, dp_tensor *idx, dp_tensor *src, int64_t base, bool accumulate) {
  const char *op = accumulate ? "scatter_add" : "scatter";
  if (check_index(op, x, dim, idx, src) || dp_check_same_device(op, x, src)) return -1;
  DP_SCOPE(s);
  dp_tensor *sv = source_view(&s, src, idx, x->dtype);
  if (!sv || dp_backend_of(x)->scatter(x, idx, sv, dim, base, accumulate)) return -1;
  dp_bump_version(x);
  return 0;
}

static int scatter_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *idx = dp_node_saved(n, 0), *gy = gout[0];
  int dim = (int)n->i[0];
  int64_t base = n->i[1];
  bool accumulate = n->i[2];
  DP_SCOPE(s);
  if (dp_node_needs(n, 0)) { /* x's: all of it (add), or all but the written positions (assign) */
    dp_tensor *g = dp_scope_add(&s, dp_copy_raw(gy));
    dp_tensor *zero = g ? dp_scope_add(&s, dp_scalar(0, gy->dtype, dp_dev(gy))) : NULL;
    dp_tensor *z = zero ? dp_scope_add(&s, dp_expand_raw(zero, idx->ndim, idx->shape)) : NULL;
    if (!z || (!accumulate && dp_backend_of(g)->scatter(g, idx, z, dim, base, false))) return -1;
    gin[0] = dp_scope_keep(&s, g);
  }
  if (dp_node_needs(n, 1)) { /* src's: the gathered gradient, zero past idx's shape */
    dp_tensor *gs = dp_scope_add(&s, dp_zeros(n->in_dtype[1], n->in_ndim[1], n->in_shape[1], dp_dev(gy)));
    dp_tensor *region =
        gs && n->in_ndim[1] ? dp_scope_add(&s, dp_as_strided(gs, idx->ndim, idx->shape, gs->stride, 0)) : NULL;
    dp_tensor *gg = gs ? dp_scope_add(&s, dp_empty(gy->dtype, idx->ndim, idx->shape, dp_dev(gy))) : NULL;
    if (!gg || dp_backend_of(gg)->gather(gg, gy, idx, dim, base)) return -1;
    if (n->in_ndim[1] == 0) { /* a 0-dim value: the sum of its positions' gradients */
      gin[1] = dp_grad_for_input(n, 1, dp_scope_keep(&s, gg));
      if (!gin[1]) return -1;
    } else {
      if (!region || dp_copy_(region, gg)) return -1;
      gin[1] = dp_scope_keep(&s, gs);
    }
  }
  return 0;
}

dp_tensor *dp_scatter(dp_tensor *x, int dim, dp_tensor *idx, dp_tensor *src, int64_t base, bool accumulate) {
  DP_SCOPE(s);
  dp_tensor *out = dp_scope_add(&s, dp_copy_raw(x));
  if (!out || dp_scatter_(out, dim, idx, src, base, accumulate)) return NULL;
  dp_scope_keep(&s, out);
  dp_tensor *ins[2] = {x, src};
  if (dp_any_requires_grad(2, ins)) {
    dp_node *n = dp_node_new(accumulate ? "ScatterAddBackward" : "ScatterBackward", scatter_backward, 2, ins, 1);
    n->i[0] = dim, n->i[1] = base, n->i[2] = accumulate;
    dp_node_save(n, idx);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* ---- topk ---- */
static int topk_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  DP_SCOPE(s);
  dp_tensor *idx = dp_node_saved(n, 0);
  dp_tensor *gx = dp_scope_add(&s, dp_zeros(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gout[0])));
  if (!gx) return -1;
  if (n->in_ndim[0] == 0) { /* k is 0 or 1 */
    if (dp_numel(idx) && dp_copy_(gx, gout[0])) return -1;
  } else if (dp_backend_of(gx)->scatter(gx, idx, gout[0], (int)n->i[0], 0, true)) {
    return -1;
  }
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_topk(dp_tensor *x, int64_t k, int dim, bool largest, int64_t base, dp_tensor **indices) {
  int nd = x->ndim;
  if (nd > 0 && dp_check_dim("topk", x, dim)) return NULL;
  int64_t n = nd ? x->shape[dim] : 1;
  if (nd == 0 && k != 1) {
    dp_error("topk: k must be 1 for a 0-dimensional tensor, got %" PRId64, k);
    return NULL;
  }
  if (k < 0 || k > n) {
    dp_error("topk: k = %" PRId64 " is out of range for a dimension of size %" PRId64 " (expected 0..%" PRId64 ")", k,
             n, n);
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  if (!xc) return NULL;
  int64_t outer = 1, inner = 1, sh[DP_MAXDIM];
  for (int d = 0; d < nd; d++) {
    sh[d] = d == dim ? k : x->shape[d];
    if (d < dim) outer *= x->shape[d];
    if (d > dim) inner *= x->shape[d];
  }
  dp_tensor *v = dp_scope_add(&s, dp_empty(x->dtype, nd, sh, dp_dev(x)));
  dp_tensor *i0 = dp_scope_add(&s, dp_empty(DP_I64, nd, sh, dp_dev(x)));
  dp_reduce_args ra = {DP_R_MAX, outer, n, inner, 0};
  if (!v || !i0 || dp_backend_of(x)->topk(v, i0, xc, &ra, k, largest)) return NULL;
  dp_scope_keep(&s, v);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *nd_ = dp_node_new("TopkBackward", topk_backward, 1, &x, 1);
    nd_->i[0] = dim;
    dp_node_save(nd_, i0);
    dp_node_attach(nd_, v, 0);
    dp_node_release(nd_);
  }
  if (indices) {
    /* a new tensor: i0 is saved for the backward and must not change in place */
    *indices = base ? dp_binary_scalar(DP_B_ADD, i0, (double)base, false) : (dp_retain(i0), i0);
    if (!*indices) {
      dp_release(v);
      return NULL;
    }
  }
  return v;
}

/* ---- cumsum ---- */
static dp_tensor *cumsum_raw(dp_tensor *x, int dim, bool reverse) {
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_dtype odt = dp_dtype_is_float(x->dtype) ? x->dtype : DP_I64;
  dp_tensor *out = xc ? dp_scope_add(&s, dp_empty(odt, x->ndim, x->shape, dp_dev(x))) : NULL;
  if (!out) return NULL;
  dp_reduce_args ra = dp_around_dim(x, dim, DP_R_SUM, 0);
  if (dp_backend_of(x)->cumsum(out, xc, &ra, reverse)) return NULL;
  return dp_scope_keep(&s, out);
}

static int cumsum_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  gin[0] = cumsum_raw(gout[0], (int)n->i[0], true);
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_cumsum(dp_tensor *x, int dim) {
  if (x->ndim > 0 && dp_check_dim("cumsum", x, dim)) return NULL;
  dp_tensor *out = cumsum_raw(x, dim, false);
  if (out && dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("CumsumBackward", cumsum_backward, 1, &x, 1);
    n->i[0] = dim;
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* ---- cummax / cummin positions and (values != NULL) values, no gradient: the Lua side gathers the values when
 * one is needed ---- */
dp_tensor *dp_cum_extreme(dp_tensor *x, int dim, bool is_max, int64_t base, dp_tensor **values) {
  if (x->ndim > 0 && dp_check_dim("cum_extreme", x, dim)) return NULL;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *out = xc ? dp_scope_add(&s, dp_empty(DP_I64, x->ndim, x->shape, dp_dev(x))) : NULL;
  dp_tensor *v = out && values ? dp_scope_add(&s, dp_empty(x->dtype, x->ndim, x->shape, dp_dev(x))) : NULL;
  if (!out || (values && !v)) return NULL;
  dp_reduce_args ra = dp_around_dim(x, dim, DP_R_MAX, base);
  if (dp_backend_of(x)->cum_extreme(v, out, xc, &ra, is_max)) return NULL;
  if (values) *values = dp_scope_keep(&s, v);
  return dp_scope_keep(&s, out);
}

/* ---- searchsorted: seq [rows or 1, n], v [rows, m], one dtype and device (the Lua side casts) ---- */
dp_tensor *dp_searchsorted(dp_tensor *seq, dp_tensor *v, bool right, int64_t base) {
  if (seq->ndim != 2 || v->ndim != 2 || (seq->shape[0] != v->shape[0] && seq->shape[0] != 1)) {
    dp_error("searchsorted: expected boundaries [rows or 1, n] and values [rows, m], got %dD and %dD", seq->ndim,
             v->ndim);
    return NULL;
  }
  if (seq->dtype != v->dtype) {
    dp_error("searchsorted: the boundaries are %s and the values %s: expected one dtype", dp_dtype_name(seq->dtype),
             dp_dtype_name(v->dtype));
    return NULL;
  }
  if (dp_check_same_device("searchsorted", seq, v)) return NULL;
  DP_SCOPE(s);
  dp_tensor *sc = dp_scope_add(&s, dp_contiguous_raw(seq));
  dp_tensor *vc = sc ? dp_scope_add(&s, dp_contiguous_raw(v)) : NULL;
  dp_tensor *out = vc ? dp_scope_add(&s, dp_empty(DP_I64, 2, v->shape, dp_dev(v))) : NULL;
  if (!out) return NULL;
  if (dp_backend_of(v)->searchsorted(out, sc, vc, v->shape[0], seq->shape[1], v->shape[1], right, base)) return NULL;
  return dp_scope_keep(&s, out);
}

/* ---- nonzero: m uint8 with count non-zero bytes; NULL with an error on a backend without the kernel ---- */
dp_tensor *dp_nonzero_native(dp_tensor *m, int64_t count, bool flat, int64_t base) {
  const dp_backend *be = dp_backend_of(m);
  if (!be->nonzero) {
    dp_error("nonzero: the %s backend has no nonzero kernel", be->name);
    return NULL;
  }
  if (m->dtype != DP_U8 || count < 0 || count > dp_numel(m)) {
    dp_error("nonzero: expected a uint8 mask and a count in [0, %" PRId64 "], got %s and %" PRId64, dp_numel(m),
             dp_dtype_name(m->dtype), count);
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *mc = dp_scope_add(&s, dp_contiguous_raw(m));
  int64_t shape[2] = {count, m->ndim};
  dp_tensor *out = mc ? dp_scope_add(&s, dp_empty(DP_I64, flat ? 1 : 2, shape, dp_dev(m))) : NULL;
  if (!out || be->nonzero(out, mc, flat, base)) return NULL;
  return dp_scope_keep(&s, out);
}

/* ---- bincount: idx int64 1-D with values in [0, size), w NULL or 1-D float32 / float64 of idx's length ---- */
dp_tensor *dp_bincount_native(dp_tensor *idx, dp_tensor *w, int64_t size) {
  const dp_backend *be = dp_backend_of(idx);
  if (!be->bincount) {
    dp_error("bincount: the %s backend has no bincount kernel", be->name);
    return NULL;
  }
  if (idx->dtype != DP_I64 || idx->ndim != 1 || size < 0 ||
      (w && (w->ndim != 1 || w->shape[0] != idx->shape[0] || (w->dtype != DP_F32 && w->dtype != DP_F64)))) {
    dp_error("bincount: expected 1-d int64 values, float32 or float64 weights of their length and a size >= 0");
    return NULL;
  }
  if (w && dp_check_same_device("bincount", idx, w)) return NULL;
  DP_SCOPE(s);
  dp_tensor *ic = dp_scope_add(&s, dp_contiguous_raw(idx));
  dp_tensor *wc = ic && w ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL;
  dp_tensor *out = ic && (wc || !w) ? dp_scope_add(&s, dp_empty(w ? w->dtype : DP_I64, 1, &size, dp_dev(idx))) : NULL;
  if (!out || be->bincount(out, ic, wc)) return NULL;
  return dp_scope_keep(&s, out);
}

dp_tensor *dp_histogram_native(dp_tensor *x, dp_tensor *w, dp_tensor *edges, bool uniform) {
  const dp_backend *be = dp_backend_of(x);
  if (!be->histogram) {
    dp_error("histogram: the %s backend has no histogram kernel", be->name);
    return NULL;
  }
  bool fdt = x->dtype == DP_F32 || x->dtype == DP_F64;
  if (!fdt || x->ndim != 1 || edges->ndim != 1 || edges->shape[0] < 2 || edges->dtype != x->dtype ||
      (w && (w->ndim != 1 || w->shape[0] != x->shape[0] || w->dtype != x->dtype))) {
    dp_error("histogram: expected 1-d float32 or float64 values, weights of their length and dtype, and at least 2 "
             "edges of their dtype");
    return NULL;
  }
  if (dp_check_same_device("histogram", x, edges) || (w && dp_check_same_device("histogram", x, w))) return NULL;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *ec = xc ? dp_scope_add(&s, dp_contiguous_raw(edges)) : NULL;
  dp_tensor *wc = ec && w ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL;
  int64_t nb = edges->shape[0] - 1;
  dp_tensor *out = ec && (wc || !w) ? dp_scope_add(&s, dp_empty(x->dtype, 1, &nb, dp_dev(x))) : NULL;
  if (!out || be->histogram(out, xc, wc, ec, uniform)) return NULL;
  return dp_scope_keep(&s, out);
}

/* ---- flip: a copy from a view that walks the flipped dims backwards ----
 * The view (negative strides, offset at each flipped dim's last element)
 * lives only inside this function: the backend's strided copy reads it,
 * so a flip costs one pass (the last dim's rows are reversed copies) where
 * an index_select per dim moved that dim to the front and back. Its
 * gradient is the same flip. */
static dp_tensor *flip_raw(dp_tensor *x, unsigned mask) {
  int64_t st[DP_MAXDIM], off = x->offset;
  bool empty = dp_numel(x) == 0;
  for (int d = 0; d < x->ndim; d++) {
    st[d] = x->stride[d];
    if (mask & (1u << d) && !empty) {
      off += (x->shape[d] - 1) * x->stride[d];
      st[d] = -st[d];
    }
  }
  DP_SCOPE(s);
  dp_tensor *v = dp_scope_add(&s, dp_from_storage(x->storage, x->dtype, x->ndim, x->shape, st, off));
  dp_tensor *out = v ? dp_scope_add(&s, dp_empty(x->dtype, x->ndim, x->shape, dp_dev(x))) : NULL;
  if (!out || (!empty && dp_backend_of(x)->copy(out, v))) return NULL;
  return dp_scope_keep(&s, out);
}

static int flip_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  gin[0] = flip_raw(gout[0], (unsigned)n->i[0]);
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_flip(dp_tensor *x, int n, const int *dims) {
  unsigned mask = 0;
  for (int i = 0; i < n; i++) {
    if (dp_check_dim("flip", x, dims[i])) return NULL;
    if (mask & (1u << dims[i])) {
      dp_error("flip: dimension %d appears more than once", dims[i] + 1);
      return NULL;
    }
    mask |= 1u << dims[i];
  }
  dp_tensor *out = flip_raw(x, mask); /* no dims: a copy, as PyTorch's flip */
  if (out && dp_any_requires_grad(1, &x)) {
    dp_node *nd = dp_node_new("FlipBackward", flip_backward, 1, &x, 1);
    nd->i[0] = mask;
    dp_node_attach(nd, out, 0);
    dp_node_release(nd);
  }
  return out;
}
