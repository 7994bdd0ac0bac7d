/* Reductions (sum, mean, prod, max, min, argmax, argmin) and their
 * gradients. The kernels reduce the middle axis of a contiguous
 * [outer, k, inner] view; several dims are reduced one after another. */
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

/* Reduces one dim of x (any strides) keeping it as size 1. */
static dp_tensor *reduce_one(dp_reduce_op op, dp_tensor *x, int dim, dp_dtype odt, dp_tensor **idx_out, int64_t base) {
  DP_SCOPE(s);
  if (op == DP_R_SUM && !idx_out && x->stride[dim] == 0 && x->shape[dim] > 1 && x->dtype == DP_F32 && odt == DP_F32) {
    /* a sum along a broadcast dim (the gradient of a broadcast operand,
     * from an expanded upstream gradient): k equal terms, k * v, without
     * materialising the expansion. The kernels sum in double, where k
     * copies of a float add up to k * v exactly; one rounding of that is
     * the product's. + 0 makes a sum of -0s +0, as adding them does. */
    bool prev = dp_set_grad_enabled(false);
    dp_tensor *one = dp_scope_add(&s, dp_narrow(x, dim, 0, 1));
    dp_tensor *c = one ? dp_scope_add(&s, dp_contiguous_raw(one)) : NULL;
    dp_tensor *k = c ? dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, c, (double)x->shape[dim], false)) : NULL;
    dp_tensor *out = k ? dp_binary_scalar(DP_B_ADD, k, 0.0, false) : NULL;
    dp_set_grad_enabled(prev);
    return out;
  }
  dp_tensor *c = dp_scope_add(&s, dp_contiguous_raw(x));
  if (!c) return NULL;
  int64_t outer = 1, inner = 1, k = c->shape[dim];
  for (int d = 0; d < dim; d++) outer *= c->shape[d];
  for (int d = dim + 1; d < c->ndim; d++) inner *= c->shape[d];
  int64_t sh[DP_MAXDIM];
  memcpy(sh, c->shape, sizeof sh);
  sh[dim] = 1;
  dp_tensor *out = dp_scope_add(&s, dp_empty(odt, c->ndim, sh, dp_dev(c)));
  dp_tensor *idx = idx_out ? dp_scope_add(&s, dp_empty(DP_I64, c->ndim, sh, dp_dev(c))) : NULL;
  dp_reduce_args ra = {op, outer, k, inner, base};
  if (!out || (idx_out && !idx) || dp_backend_of(c)->reduce(out, idx, c, &ra)) return NULL;
  if (idx_out) *idx_out = dp_scope_keep(&s, idx);
  return dp_scope_keep(&s, out);
}

/* Normalised dim list: sorted, unique, checked. n == 0 means all. */
static int dim_mask(const char *op, const dp_tensor *x, int n, const int *dims, bool *mask) {
  memset(mask, 0, sizeof(bool) * DP_MAXDIM);
  if (n == 0) {
    for (int d = 0; d < x->ndim; d++) mask[d] = true;
    return 0;
  }
  for (int i = 0; i < n; i++) {
    if (dp_check_dim(op, x, dims[i])) return -1;
    if (mask[dims[i]]) return dp_error("%s: dimension %d appears more than once", op, dims[i] + 1);
    mask[dims[i]] = true;
  }
  return 0;
}

static dp_tensor *drop_dims(dp_tensor *t, const bool *mask) {
  int64_t sh[DP_MAXDIM];
  int k = 0;
  for (int d = 0; d < t->ndim; d++)
    if (!mask[d]) sh[k++] = t->shape[d];
  return dp_reshape(t, k, sh);
}

/* Gradient of sum/mean: unsqueeze reduced dims back and broadcast. */
static int sum_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int nd = n->in_ndim[0];
  bool keep = n->i[0];
  int64_t sh[DP_MAXDIM];
  /* keepdim shape: reduced dims are 1, others from the input */
  for (int d = 0; d < nd; d++) sh[d] = ((n->i[1] >> d) & 1) ? 1 : n->in_shape[0][d];
  DP_SCOPE(s);
  dp_tensor *g = keep ? gout[0] : dp_scope_add(&s, dp_reshape(gout[0], nd, sh));
  if (g && n->f[0] != 1.0) g = dp_scope_add(&s, dp_binary_scalar(DP_B_MUL, g, n->f[0], false));
  gin[0] = g ? dp_expand_raw(g, nd, n->in_shape[0]) : NULL;
  return gin[0] ? 0 : -1;
}

static dp_tensor *sum_impl(const char *opname, dp_tensor *x, int n, const int *dims, bool keepdim, bool mean) {
  bool mask[DP_MAXDIM];
  if (dim_mask(opname, x, n, dims, mask)) return NULL;
  dp_dtype odt = x->dtype;
  if (!dp_dtype_is_float(odt)) {
    if (mean) {
      dp_error("mean: expected a floating point tensor, got %s (convert with :float())", dp_dtype_name(odt));
      return NULL;
    }
    odt = DP_I64;
  }
  int64_t count = 1;
  for (int d = 0; d < x->ndim; d++)
    if (mask[d]) count *= x->shape[d];
  /* bfloat16 and float16 accumulate in float32 through every reduced dim and the mean's division, rounded to
   * their dtype once at the end (PyTorch's CPU kernels; rounding after each dim would round two or three times) */
  const dp_dtype acc = odt == DP_BF16 || odt == DP_F16 ? DP_F32 : odt;
  DP_SCOPE(s);
  dp_tensor *cur;
  if (x->ndim == 0) {
    cur = dp_scope_add(&s, dp_cast_raw(x, odt));
    if (cur == x) cur = dp_scope_add(&s, dp_copy_raw(x)); /* dp_cast_raw handed x back (retained) */
  } else if (n == 0 || x->ndim == 1) {
    /* everything at once: one row of numel elements */
    dp_tensor *c = dp_scope_add(&s, dp_contiguous_raw(x));
    int64_t one = 1;
    cur = c ? dp_scope_add(&s, dp_empty(acc, 1, &one, dp_dev(x))) : NULL;
    dp_reduce_args ra = {mean ? DP_R_MEAN : DP_R_SUM, 1, c ? dp_numel(c) : 0, 1, 0};
    if (!cur || dp_backend_of(x)->reduce(cur, NULL, c, &ra)) return NULL;
    int64_t sh[DP_MAXDIM];
    for (int d = 0; d < x->ndim; d++) sh[d] = 1;
    cur = dp_scope_add(&s, dp_reshape(cur, x->ndim, sh));
  } else { /* dim by dim, from the last */
    cur = x;
    /* adjacent reduced dims of a contiguous x are one dim of their product: one pass with long rows (mean over
     * H and W: one row of H * W per plane, not W then H in short rows of per-call overhead), each sum one
     * accumulation */
    int64_t msh[DP_MAXDIM], ksh[DP_MAXDIM];
    bool mm[DP_MAXDIM] = {false};
    int m = 0;
    for (int d = 0; d < x->ndim; d++) {
      ksh[d] = mask[d] ? 1 : x->shape[d];
      if (mask[d] && d > 0 && mask[d - 1]) msh[m - 1] *= x->shape[d];
      else mm[m] = mask[d], msh[m++] = x->shape[d];
    }
    bool merged = m < x->ndim && dp_is_contiguous(x);
    const bool *rm = merged ? mm : mask;
    if (merged) cur = dp_scope_add(&s, dp_reshape(x, m, msh));
    for (int d = (merged ? m : x->ndim) - 1; d >= 0 && cur; d--)
      if (rm[d]) cur = dp_scope_add(&s, reduce_one(DP_R_SUM, cur, d, acc, NULL, 0));
    if (cur && merged) cur = dp_scope_add(&s, dp_reshape(cur, x->ndim, ksh));
    if (cur && mean) cur = dp_scope_add(&s, dp_binary_scalar(DP_B_DIV, cur, (double)count, false));
  }
  if (cur && x->ndim > 0 && cur->dtype != odt) cur = dp_scope_add(&s, dp_cast_raw(cur, odt));
  if (cur && !keepdim) cur = dp_scope_add(&s, drop_dims(cur, mask));
  if (!cur) return NULL;
  dp_tensor *out = cur == x ? (dp_retain(x), x) : dp_scope_keep(&s, cur);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *nd = dp_node_new(mean ? "MeanBackward" : "SumBackward", sum_backward, 1, &x, 1);
    nd->i[0] = keepdim;
    int64_t bits = 0;
    for (int d = 0; d < x->ndim; d++)
      if (mask[d]) bits |= (int64_t)1 << d;
    nd->i[1] = bits;
    nd->f[0] = mean ? 1.0 / (double)(count ? count : 1) : 1.0;
    dp_node_attach(nd, out, 0);
    dp_node_release(nd);
  }
  return out;
}

dp_tensor *dp_sum(dp_tensor *x, int n, const int *dims, bool keepdim) {
  return sum_impl("sum", x, n, dims, keepdim, false);
}
dp_tensor *dp_mean(dp_tensor *x, int n, const int *dims, bool keepdim) {
  return sum_impl("mean", x, n, dims, keepdim, true);
}

dp_tensor *dp_sum_to(dp_tensor *g, int ndim, const int64_t *shape) {
  if (g->ndim == ndim) {
    bool same = true;
    for (int d = 0; d < ndim; d++) same &= g->shape[d] == shape[d];
    if (same) {
      dp_retain(g);
      return g;
    }
  }
  int dims[DP_MAXDIM], n = 0, lead = g->ndim - ndim;
  for (int d = 0; d < g->ndim; d++) {
    int k = d - lead;
    if (k < 0 || (shape[k] == 1 && g->shape[d] != 1)) dims[n++] = d;
  }
  DP_SCOPE(sc);
  dp_tensor *s = n ? dp_scope_add(&sc, dp_sum(g, n, dims, true)) : g;
  return s ? dp_reshape(s, ndim, shape) : NULL;
}

/* ---- max / min ---- */
static int extreme_dim_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int dim = (int)n->i[0];
  bool keep = n->i[1];
  dp_tensor *idx = dp_node_saved(n, 0);
  if (!idx) return -1;
  DP_SCOPE(s);
  dp_tensor *g = keep ? gout[0] : dp_scope_add(&s, dp_unsqueeze(gout[0], dim));
  dp_tensor *gc = g ? dp_scope_add(&s, dp_contiguous_raw(g)) : NULL;
  dp_tensor *gx = gc ? dp_scope_add(&s, dp_zeros(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gc))) : NULL;
  if (!gx) return -1;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++) outer *= gx->shape[d];
  for (int d = dim + 1; d < gx->ndim; d++) inner *= gx->shape[d];
  dp_reduce_args ra = {DP_R_SUM, outer, gx->shape[dim], inner, 0};
  if (dp_backend_of(gx)->scatter_add_dim(gx, gc, idx, &ra)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

static int extreme_all_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  /* gradient split evenly among the elements equal to the extreme, or
   * among the NaNs when the extreme is NaN (PyTorch's evenly_distribute) */
  dp_tensor *x = dp_node_saved(n, 0), *y = dp_node_saved(n, 1);
  if (!x || !y) return -1;
  DP_SCOPE(s);
  dp_tensor *same = dp_scope_add(&s, dp_binary(DP_B_EQ, x, y));
  dp_tensor *xn = same ? dp_scope_add(&s, dp_binary(DP_B_NE, x, x)) : NULL;
  dp_tensor *yn = xn ? dp_scope_add(&s, dp_binary(DP_B_NE, y, y)) : NULL;
  dp_tensor *both = yn ? dp_scope_add(&s, dp_mul(xn, yn)) : NULL;
  dp_tensor *eq = both ? dp_scope_add(&s, dp_add(same, both)) : NULL; /* never both 1: NaN != NaN */
  dp_tensor *m = eq ? dp_scope_add(&s, dp_to(eq, gout[0]->dtype, dp_dev(x))) : NULL;
  dp_tensor *cnt = m ? dp_scope_add(&s, dp_sum(m, 0, NULL, false)) : NULL;
  dp_tensor *w = cnt ? dp_scope_add(&s, dp_div(m, cnt)) : NULL;
  gin[0] = w ? dp_mul(w, gout[0]) : NULL;
  return gin[0] ? 0 : -1;
}

static dp_tensor *extreme(bool is_max, dp_tensor *x, int dim, bool keepdim, dp_tensor **indices) {
  const char *op = is_max ? "max" : "min";
  if (dim >= 0 && dp_check_dim(op, x, dim)) return NULL;
  /* empty elsewhere is fine (an empty result); an empty reduced dim is not */
  if (dim < 0 ? dp_numel(x) == 0 : x->shape[dim] == 0) {
    if (dim < 0) dp_error("%s: the tensor is empty (shape %s): specify a dimension to reduce", op, SHAPE(x));
    else dp_error("%s: dimension %d of shape %s is empty: there is no extreme to take", op, dim + 1, SHAPE(x));
    return NULL;
  }
  dp_reduce_op rop = is_max ? DP_R_MAX : DP_R_MIN;
  DP_SCOPE(s);
  if (dim < 0) { /* over everything */
    dp_tensor *c = dp_scope_add(&s, dp_contiguous_raw(x));
    dp_tensor *out = c ? dp_scope_add(&s, dp_empty(x->dtype, 0, NULL, dp_dev(x))) : NULL;
    dp_reduce_args ra = {rop, 1, c ? dp_numel(c) : 0, 1, 0};
    if (!out || dp_backend_of(x)->reduce(out, NULL, c, &ra)) return NULL;
    dp_scope_keep(&s, out);
    if (dp_any_requires_grad(1, &x)) {
      dp_node *n = dp_node_new(is_max ? "MaxBackward" : "MinBackward", extreme_all_backward, 1, &x, 1);
      dp_node_save(n, x);
      dp_node_save(n, out);
      dp_node_attach(n, out, 0);
      dp_node_release(n);
    }
    return out;
  }
  if (dp_check_dim(op, x, dim)) return NULL;
  dp_tensor *idx = NULL;
  dp_tensor *v = dp_scope_add(&s, reduce_one(rop, x, dim, x->dtype, &idx, 0));
  if (!v) return NULL;
  dp_scope_add(&s, idx);
  bool mask[DP_MAXDIM] = {false};
  mask[dim] = true;
  dp_tensor *out = keepdim ? v : dp_scope_add(&s, drop_dims(v, mask));
  dp_tensor *iout = keepdim ? idx : dp_scope_add(&s, drop_dims(idx, mask));
  if (!out || !iout) return NULL;
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new(is_max ? "MaxBackward" : "MinBackward", extreme_dim_backward, 1, &x, 1);
    n->i[0] = dim;
    n->i[1] = keepdim;
    dp_node_save(n, idx);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  if (indices) *indices = dp_scope_keep(&s, iout);
  return out;
}

dp_tensor *dp_max(dp_tensor *x, int dim, bool keepdim, dp_tensor **indices) {
  return extreme(true, x, dim, keepdim, indices);
}
dp_tensor *dp_min(dp_tensor *x, int dim, bool keepdim, dp_tensor **indices) {
  return extreme(false, x, dim, keepdim, indices);
}

static dp_tensor *arg_extreme(bool is_max, dp_tensor *x, int dim, bool keepdim, int64_t base) {
  const char *op = is_max ? "argmax" : "argmin";
  if (dim >= 0 && dp_check_dim(op, x, dim)) return NULL;
  if (dim < 0 ? dp_numel(x) == 0 : x->shape[dim] == 0) {
    if (dim < 0) dp_error("%s: the tensor is empty (shape %s): specify a dimension to reduce", op, SHAPE(x));
    else dp_error("%s: dimension %d of shape %s is empty: there is no extreme to take", op, dim + 1, SHAPE(x));
    return NULL;
  }
  dp_reduce_op rop = is_max ? DP_R_ARGMAX : DP_R_ARGMIN;
  DP_SCOPE(s);
  if (dim < 0) {
    dp_tensor *c = dp_scope_add(&s, dp_contiguous_raw(x));
    dp_tensor *out = c ? dp_scope_add(&s, dp_empty(DP_I64, 0, NULL, dp_dev(x))) : NULL;
    dp_reduce_args ra = {rop, 1, c ? dp_numel(c) : 0, 1, base};
    if (!out || dp_backend_of(x)->reduce(out, NULL, c, &ra)) return NULL;
    return dp_scope_keep(&s, out);
  }
  if (dp_check_dim(op, x, dim)) return NULL;
  dp_tensor *c = dp_scope_add(&s, dp_contiguous_raw(x));
  if (!c) return NULL;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++) outer *= c->shape[d];
  for (int d = dim + 1; d < c->ndim; d++) inner *= c->shape[d];
  int64_t sh[DP_MAXDIM];
  memcpy(sh, c->shape, sizeof sh);
  sh[dim] = 1;
  dp_tensor *out = dp_scope_add(&s, dp_empty(DP_I64, c->ndim, sh, dp_dev(c)));
  dp_reduce_args ra = {rop, outer, c->shape[dim], inner, base};
  if (!out || dp_backend_of(c)->reduce(out, NULL, c, &ra)) return NULL;
  if (keepdim) return dp_scope_keep(&s, out);
  bool mask[DP_MAXDIM] = {false};
  mask[dim] = true;
  return drop_dims(out, mask);
}

dp_tensor *dp_argmax(dp_tensor *x, int dim, bool keepdim, int64_t base) {
  return arg_extreme(true, x, dim, keepdim, base);
}
dp_tensor *dp_argmin(dp_tensor *x, int dim, bool keepdim, int64_t base) {
  return arg_extreme(false, x, dim, keepdim, base);
}
