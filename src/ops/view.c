/* Views (sharing storage) and cat, with their gradients. Every view made
 * here records the tensor it views (view_base: the root of a chain of
 * views), so that an in-place write through it is recorded on the base's
 * history (ops/inplace.c). */
#include <stdio.h>
#include <string.h>

#include "ops/op_util.h"
#include "tensor/checked.h"

/* A tensor over t's storage; a view of t unless `fresh` (t is a private
 * copy the caller made, not something the user can write through). */
static dp_tensor *new_view(dp_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset,
                           bool fresh) {
  dp_tensor *v = dp_xcalloc(1, sizeof *v);
  v->refcount = 1;
  dp_storage_retain(t->storage);
  v->storage = t->storage;
  v->dtype = t->dtype;
  v->offset = offset;
  v->ndim = ndim;
  memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
  memcpy(v->stride, stride, sizeof(int64_t) * (size_t)ndim);
  if (!fresh) dp_view_set_base(v, t);
  return v;
}
static dp_tensor *make_view(dp_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset) {
  return new_view(t, ndim, shape, stride, offset, false);
}

/* ---- shape-changing views: gradient is reshaped back ---- */
static int reshape_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  gin[0] = dp_reshape(gout[0], n->in_ndim[0], n->in_shape[0]);
  return gin[0] ? 0 : -1;
}

static dp_tensor *attach_reshape_grad(dp_tensor *in, dp_tensor *out, const char *name) {
  if (out && dp_any_requires_grad(1, &in)) {
    dp_node *n = dp_node_new(name, reshape_backward, 1, &in, 1);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* Resolves one -1 and checks the element count. */
static int infer_shape(const char *op, const dp_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
  if (ndim > DP_MAXDIM) return dp_error("%s: at most %d dimensions, got %d", op, DP_MAXDIM, ndim);
  int infer = -1;
  int64_t known = 1;
  for (int d = 0; d < ndim; d++) {
    out[d] = shape[d];
    if (shape[d] == -1) {
      if (infer >= 0) return dp_error("%s: only one dimension can be -1", op);
      infer = d;
    } else if (shape[d] < 0) {
      return dp_error("%s: invalid size %" PRId64 " at dimension %d", op, shape[d], d + 1);
    } else if (dp_mul_overflow(known, shape[d], &known)) {
      return dp_error("%s: shape %s is too large", op, dp_shp_n(ndim, shape));
    }
  }
  int64_t n = dp_numel(t);
  if (infer >= 0) {
    if (known == 0 || n % known)
      return dp_error("%s: shape %s is invalid for a tensor of %" PRId64 " elements (shape %s)", op,
                      dp_shp_n(ndim, shape), n, SHAPE(t));
    out[infer] = n / known;
  } else if (known != n) {
    return dp_error("%s: shape %s is invalid for a tensor of %" PRId64 " elements (shape %s)", op,
                    dp_shp_n(ndim, shape), n, SHAPE(t));
  }
  if (dp_check_shape(ndim, out)) { /* an empty shape whose strides overflow */
    char pre[32];
    snprintf(pre, sizeof pre, "%s: ", op);
    dp_error_prefix(pre);
    return -1;
  }
  return 0;
}

/* Strides for viewing t as `shape` without copying, if possible (PyTorch's
 * rule: each run of merged input dims must be contiguous within itself). */
static bool view_strides(const dp_tensor *t, int ndim, const int64_t *shape, int64_t *stride) {
  if (dp_numel(t) == 0 || dp_is_contiguous(t)) {
    dp_contiguous_strides(ndim, shape, stride);
    if (dp_is_contiguous(t)) return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base_stride = t->ndim ? t->stride[t->ndim - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    tensor_numel *= t->shape[d];
    if (d == 0 || (t->shape[d - 1] != 1 && t->stride[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        stride[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = t->stride[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

dp_tensor *dp_view(dp_tensor *t, int ndim, const int64_t *shape) {
  int64_t sh[DP_MAXDIM], st[DP_MAXDIM];
  if (infer_shape("view", t, ndim, shape, sh)) return NULL;
  if (!view_strides(t, ndim, sh, st)) {
    dp_error("view: size %s is not compatible with the input's strides (shape %s, not contiguous); use "
             "reshape(...) or contiguous() first",
             dp_shp_n(ndim, sh), SHAPE(t));
    return NULL;
  }
  return attach_reshape_grad(t, make_view(t, ndim, sh, st, t->offset), "ViewBackward");
}

dp_tensor *dp_reshape(dp_tensor *t, int ndim, const int64_t *shape) {
  int64_t sh[DP_MAXDIM], st[DP_MAXDIM];
  if (infer_shape("reshape", t, ndim, shape, sh)) return NULL;
  if (view_strides(t, ndim, sh, st))
    return attach_reshape_grad(t, make_view(t, ndim, sh, st, t->offset), "ReshapeBackward");
  DP_SCOPE(s);
  dp_tensor *c = dp_scope_add(&s, dp_contiguous_raw(t));
  if (!c) return NULL;
  dp_contiguous_strides(ndim, sh, st);
  return attach_reshape_grad(t, new_view(c, ndim, sh, st, c->offset, true), "ReshapeBackward");
}

dp_tensor *dp_flatten(dp_tensor *t, int start, int end) {
  if (t->ndim == 0) return dp_reshape(t, 1, (int64_t[]){1});
  if (dp_check_dim("flatten", t, start) || dp_check_dim("flatten", t, end)) return NULL;
  if (start > end) {
    dp_error("flatten: start dimension %d comes after end dimension %d", start + 1, end + 1);
    return NULL;
  }
  int64_t sh[DP_MAXDIM];
  int k = 0;
  for (int d = 0; d < start; d++) sh[k++] = t->shape[d];
  int64_t m = 1;
  for (int d = start; d <= end; d++) m *= t->shape[d];
  sh[k++] = m;
  for (int d = end + 1; d < t->ndim; d++) sh[k++] = t->shape[d];
  return dp_reshape(t, k, sh);
}

dp_tensor *dp_unsqueeze(dp_tensor *t, int dim) {
  if (dim < 0 || dim > t->ndim) {
    dp_error("unsqueeze: dimension %d out of range for a %d-dimensional tensor (expected 1..%d)", dim + 1, t->ndim,
             t->ndim + 1);
    return NULL;
  }
  if (t->ndim >= DP_MAXDIM) {
    dp_error("unsqueeze: a tensor has at most %d dimensions", DP_MAXDIM);
    return NULL;
  }
  int64_t sh[DP_MAXDIM], st[DP_MAXDIM];
  for (int d = 0, k = 0; d <= t->ndim; d++) {
    if (d == dim) {
      sh[d] = 1;
      st[d] = d < t->ndim ? t->stride[k] * t->shape[k] : 1;
      continue;
    }
    sh[d] = t->shape[k];
    st[d] = t->stride[k];
    k++;
  }
  return attach_reshape_grad(t, make_view(t, t->ndim + 1, sh, st, t->offset), "UnsqueezeBackward");
}

dp_tensor *dp_squeeze(dp_tensor *t, int dim) {
  int64_t sh[DP_MAXDIM], st[DP_MAXDIM];
  int k = 0;
  if (dim >= 0 && dp_check_dim("squeeze", t, dim)) return NULL;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] == 1 && (dim < 0 || d == dim)) continue;
    sh[k] = t->shape[d];
    st[k] = t->stride[d];
    k++;
  }
  return attach_reshape_grad(t, make_view(t, k, sh, st, t->offset), "SqueezeBackward");
}

/* ---- permutations ---- */
static int permute_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int inv[DP_MAXDIM];
  for (int d = 0; d < n->in_ndim[0]; d++) inv[n->i[d]] = d;
  gin[0] = dp_permute(gout[0], inv);
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_permute(dp_tensor *t, const int *perm) {
  int64_t sh[DP_MAXDIM], st[DP_MAXDIM];
  bool seen[DP_MAXDIM] = {false};
  for (int d = 0; d < t->ndim; d++) {
    int p = perm[d];
    if (p < 0 || p >= t->ndim || seen[p]) {
      dp_error("permute: the dims must be a permutation of 1..%d (dimension %d is %s)", t->ndim, p + 1,
               (p < 0 || p >= t->ndim) ? "out of range" : "repeated");
      return NULL;
    }
    seen[p] = true;
    sh[d] = t->shape[p];
    st[d] = t->stride[p];
  }
  dp_tensor *out = make_view(t, t->ndim, sh, st, t->offset);
  if (dp_any_requires_grad(1, &t)) {
    dp_node *n = dp_node_new("PermuteBackward", permute_backward, 1, &t, 1);
    for (int d = 0; d < t->ndim; d++) n->i[d] = perm[d];
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_transpose(dp_tensor *t, int d0, int d1) {
  if (dp_check_dim("transpose", t, d0) || dp_check_dim("transpose", t, d1)) return NULL;
  int perm[DP_MAXDIM];
  for (int d = 0; d < t->ndim; d++) perm[d] = d;
  perm[d0] = d1;
  perm[d1] = d0;
  return dp_permute(t, perm);
}

/* ---- narrow / select: gradient scattered into zeros ---- */
static int narrow_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int dim = (int)n->i[0];
  int64_t start = n->i[1], len = n->i[2];
  bool selected = n->i[3];
  DP_SCOPE(s);
  dp_tensor *g = dp_scope_add(&s, dp_zeros(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gout[0])));
  dp_tensor *region = g ? dp_scope_add(&s, dp_narrow(g, dim, start, len)) : NULL;
  dp_tensor *src = selected ? dp_scope_add(&s, dp_unsqueeze(gout[0], dim)) : gout[0];
  if (!region || !src || dp_copy_(region, src)) return -1;
  gin[0] = dp_scope_keep(&s, g);
  return 0;
}

static dp_tensor *narrow_impl(dp_tensor *t, int dim, int64_t start, int64_t len, bool select) {
  const char *op = select ? "select" : "narrow";
  if (dp_check_dim(op, t, dim)) return NULL;
  /* start <= size first, so size - start cannot overflow */
  if (start < 0 || len < 0 || start > t->shape[dim] || len > t->shape[dim] - start) {
    if (select)
      dp_error("select: index %" PRId64 " out of range for dimension %d of size %" PRId64, start + 1, dim + 1,
               t->shape[dim]);
    else
      dp_error("narrow: start %" PRId64 " with length %" PRId64 " exceeds dimension %d of size %" PRId64, start + 1,
               len, dim + 1, t->shape[dim]);
    return NULL;
  }
  int64_t sh[DP_MAXDIM], st[DP_MAXDIM];
  int k = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (d == dim && select) continue;
    sh[k] = d == dim ? len : t->shape[d];
    st[k] = t->stride[d];
    k++;
  }
  dp_tensor *out = make_view(t, k, sh, st, t->offset + start * t->stride[dim]);
  if (dp_any_requires_grad(1, &t)) {
    dp_node *n = dp_node_new(select ? "SelectBackward" : "NarrowBackward", narrow_backward, 1, &t, 1);
    n->i[0] = dim, n->i[1] = start, n->i[2] = len, n->i[3] = select;
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_narrow(dp_tensor *t, int dim, int64_t start, int64_t len) {
  return narrow_impl(t, dim, start, len, false);
}
dp_tensor *dp_select(dp_tensor *t, int dim, int64_t index) {
  if (dim >= 0 && dim < t->ndim && index < 0) index += t->shape[dim];
  return narrow_impl(t, dim, index, 1, true);
}

/* ---- expand ---- */
static int expand_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  gin[0] = dp_grad_for_input(n, 0, (dp_retain(gout[0]), gout[0]));
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_expand(dp_tensor *t, int ndim, const int64_t *shape) {
  if (ndim < t->ndim || ndim > DP_MAXDIM) {
    dp_error("expand: the number of sizes (%d) must be at least the tensor's dimensions (%d) and at most %d", ndim,
             t->ndim, DP_MAXDIM);
    return NULL;
  }
  int64_t sh[DP_MAXDIM];
  for (int i = 0; i < ndim; i++) {
    int d = t->ndim - ndim + i;
    if (shape[i] == -1 && d < 0) {
      dp_error("expand: the size -1 is not allowed in a leading, new dimension (size %d of %s)", i + 1,
               dp_shp_n(ndim, shape));
      return NULL;
    }
    if (shape[i] < -1) {
      dp_error("expand: invalid size %" PRId64 " at dimension %d of %s (sizes are >= 0, or -1 to keep one)", shape[i],
               i + 1, dp_shp_n(ndim, shape));
      return NULL;
    }
    sh[i] = shape[i] == -1 ? t->shape[d] : shape[i];
  }
  if (dp_check_shape(ndim, sh)) {
    dp_error_prefix("expand: ");
    return NULL;
  }
  dp_tensor *out = dp_expand_raw(t, ndim, sh);
  if (out) dp_view_set_base(out, t);
  if (out && dp_any_requires_grad(1, &t)) {
    dp_node *n = dp_node_new("ExpandBackward", expand_backward, 1, &t, 1);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* ---- cat ---- */
static int cat_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  int dim = (int)n->i[0];
  int64_t start = 0;
  for (int k = 0; k < n->n_inputs; k++) {
    int64_t len = n->in_shape[k][dim];
    if (dp_node_needs(n, k)) {
      DP_SCOPE(s);
      dp_tensor *v = dp_scope_add(&s, dp_narrow(gout[0], dim, start, len));
      gin[k] = v ? dp_contiguous_raw(v) : NULL;
      if (!gin[k]) return -1;
    }
    start += len;
  }
  return 0;
}

dp_tensor *dp_cat(int n, dp_tensor *const *ts, int dim) {
  if (n < 1) {
    dp_error("cat: expected a non-empty list of tensors");
    return NULL;
  }
  const dp_tensor *t0 = ts[0];
  if (dp_check_dim("cat", t0, dim)) return NULL;
  int64_t sh[DP_MAXDIM];
  memcpy(sh, t0->shape, sizeof(int64_t) * (size_t)t0->ndim);
  sh[dim] = 0;
  dp_dtype dt = t0->dtype;
  for (int k = 0; k < n; k++) {
    const dp_tensor *t = ts[k];
    if (t->ndim != t0->ndim) {
      dp_error("cat: tensor %d has %d dimensions, tensor 1 has %d", k + 1, t->ndim, t0->ndim);
      return NULL;
    }
    for (int d = 0; d < t0->ndim; d++)
      if (d != dim && t->shape[d] != t0->shape[d]) {
        dp_error("cat: tensor %d has shape %s, tensor 1 has %s: sizes must match except in dimension %d", k + 1,
                 SHAPE(t), SHAPE(t0), dim + 1);
        return NULL;
      }
    if (dp_check_same_device("cat", t0, t)) return NULL;
    dt = dp_promote(dt, t->dtype);
    if (dp_add_overflow(sh[dim], t->shape[dim], &sh[dim])) {
      dp_error("cat: the sizes along dimension %d add up to more than an int64 holds", dim + 1);
      return NULL;
    }
  }
  DP_SCOPE(s);
  dp_tensor *out = dp_scope_add(&s, dp_empty(dt, t0->ndim, sh, dp_dev(t0)));
  if (!out) return NULL;
  int64_t start = 0;
  for (int k = 0; k < n; k++) {
    int64_t len = ts[k]->shape[dim];
    int64_t rsh[DP_MAXDIM];
    memcpy(rsh, out->shape, sizeof rsh);
    rsh[dim] = len;
    DP_SCOPE(each);
    dp_tensor *region = dp_scope_add(&each, dp_as_strided(out, out->ndim, rsh, out->stride, start * out->stride[dim]));
    if (!region || dp_backend_of(out)->copy(region, ts[k])) return NULL;
    start += len;
  }
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(n, ts)) {
    dp_node *nd = dp_node_new("CatBackward", cat_backward, n, ts, 1);
    nd->i[0] = dim;
    dp_node_attach(nd, out, 0);
    dp_node_release(nd);
  }
  return out;
}
