/* In-place writes a user asks for (fill_, zero_, copy_, t[i] = v, add_,
 * sub_, mul_, div_), with PyTorch's checks and autograd recording.
 *
 * Checks, before anything is written:
 *  - the result dtype must cast to the destination's (int:add_(0.5) is an
 *    error, not a truncation: dp_can_cast);
 *  - a destination with internal overlap (an expanded view: several
 *    elements on one memory location) is refused for every write but a
 *    fill, as PyTorch does;
 *  - a source that shares memory with the destination: identical views
 *    are fine (x:add_(x)); disjoint extents are fine; two dense layouts
 *    whose extents intersect (x:add_(x:t()), a[2..4]:copy_(a[1..3])) are
 *    refused with PyTorch's message; anything else (interleaved strided
 *    views) is computed correctly from a copy of the source.
 *
 * Autograd: with grad mode on, a write into a leaf that requires grad (or a
 * view of one) is refused with PyTorch's message. A write that involves a
 * tensor requiring grad is recorded: the new value is computed out of
 * place from the old one (a clone where the op saves its input), written
 * into the destination's memory, and the destination takes the new value's
 * history. Through a view, the base takes a CopySlices node (the gradient
 * of the written region goes to the new value, the rest to the old base)
 * and every view of the base rebuilds its grad_fn from the base
 * (AsStridedBackward) the next time autograd reads it. */
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"
#include "tensor/checked.h"

/* ---- view bookkeeping ---- */

void dp_view_set_base(dp_tensor *v, dp_tensor *of) {
  dp_tensor *root = of->view_base ? of->view_base : of;
  if (v->view_base == root) return;
  dp_retain(root);
  dp_release(v->view_base);
  v->view_base = root;
  v->view_hist = root->hist;
}

/* The geometry of a view inside its base's memory (element offsets
 * relative to the lowest element of the base), for the gradient nodes. */
typedef struct {
  int bnd, vnd;
  int64_t bshape[DP_MAXDIM], bstride[DP_MAXDIM], boff;
  int64_t vshape[DP_MAXDIM], vstride[DP_MAXDIM], voff;
  int64_t span; /* elements the base's layout reaches */
} view_geom;

static int geom_of(view_geom *g, const dp_tensor *base, const dp_tensor *v) {
  int64_t lo, hi;
  bool empty;
  if (dp_span_overflow(base->ndim, base->shape, base->stride, base->offset, &lo, &hi, &empty))
    return dp_error("internal error: a view's base spans more than an int64 holds");
  if (empty) lo = hi = base->offset;
  g->bnd = base->ndim, g->vnd = v->ndim;
  memcpy(g->bshape, base->shape, sizeof g->bshape);
  memcpy(g->bstride, base->stride, sizeof g->bstride);
  memcpy(g->vshape, v->shape, sizeof g->vshape);
  memcpy(g->vstride, v->stride, sizeof g->vstride);
  g->boff = base->offset - lo;
  g->voff = v->offset - lo;
  g->span = hi - lo + 1;
  return 0;
}

/* zeros laid out as the base (its strides), and the view's region of it */
static dp_tensor *geom_zeros(const view_geom *g, dp_dtype dt, dp_device dev, dp_tensor **region) {
  DP_SCOPE(s);
  dp_tensor *flat = dp_scope_add(&s, dp_zeros(dt, 1, &g->span, dev));
  dp_tensor *b = flat ? dp_scope_add(&s, dp_as_strided(flat, g->bnd, g->bshape, g->bstride, g->boff)) : NULL;
  dp_tensor *r = b ? dp_as_strided(flat, g->vnd, g->vshape, g->vstride, g->voff) : NULL;
  if (!r) return NULL;
  *region = r;
  return dp_scope_keep(&s, b);
}

/* CopySlices: inputs (old base, new value of the view); the gradient of the
 * base is g with the view's region zeroed, the new value's is the region */
static int copy_slices_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  const view_geom *g = n->ctx;
  DP_SCOPE(s);
  dp_tensor *region = NULL;
  dp_tensor *gb = dp_scope_add(&s, geom_zeros(g, gout[0]->dtype, dp_dev(gout[0]), &region));
  dp_scope_add(&s, region);
  if (!gb || dp_copy_(gb, gout[0])) return -1;
  if (dp_node_needs(n, 1)) {
    dp_tensor *gv = dp_copy_raw(region);
    if (!gv || !(gin[1] = dp_grad_for_input(n, 1, gv))) return -1;
  }
  if (dp_node_needs(n, 0)) {
    if (dp_fill_(region, 0.0)) return -1;
    gin[0] = dp_scope_keep(&s, gb);
  }
  return 0;
}

/* AsStridedBackward: a view of the base's current history; the gradient is
 * scattered into zeros laid out as the base */
static int as_strided_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  const view_geom *g = n->ctx;
  DP_SCOPE(s);
  dp_tensor *region = NULL;
  dp_tensor *gb = dp_scope_add(&s, geom_zeros(g, gout[0]->dtype, dp_dev(gout[0]), &region));
  dp_scope_add(&s, region);
  if (!gb || dp_copy_(region, gout[0])) return -1;
  gin[0] = dp_scope_keep(&s, gb);
  return 0;
}

static dp_node *geom_node(const char *name, dp_backward_fn fn, int n_in, dp_tensor *const *ins, const dp_tensor *base,
                          const dp_tensor *v) {
  view_geom *g = dp_xcalloc(1, sizeof *g);
  if (geom_of(g, base, v)) {
    free(g);
    return NULL;
  }
  dp_node *n = dp_node_new(name, fn, n_in, ins, 1);
  n->ctx = g;
  n->free_ctx = free;
  return n;
}

void dp_autograd_refresh(dp_tensor *t) {
  dp_tensor *b = t->view_base;
  if (!b || t->view_hist == b->hist) return;
  t->view_hist = b->hist;
  if (!b->requires_grad || (!t->grad_fn && t->requires_grad)) return; /* a user's leaf view keeps being a leaf */
  dp_node *n = geom_node("AsStridedBackward", as_strided_backward, 1, &b, b, t);
  if (!n) return; /* unreachable: the base's span was computed when it was made */
  dp_node_attach(n, t, 0);
  dp_node_release(n);
}

/* ---- overlap ---- */

/* Dims of size > 1 sorted by stride, for the layout tests below. */
static int sorted_dims(const dp_tensor *t, int *dims) {
  int n = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] > 1) dims[n++] = d;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t->stride[dims[j]] < t->stride[dims[j - 1]]; j--) {
      int x = dims[j];
      dims[j] = dims[j - 1], dims[j - 1] = x;
    }
  return n;
}

/* Two elements on one memory location? (Sufficient test: sorted by stride,
 * each stride passes the extent of the smaller ones.) */
static bool internal_overlap(const dp_tensor *t) {
  int dims[DP_MAXDIM], n = sorted_dims(t, dims);
  int64_t reach = 0;
  for (int i = 0; i < n; i++) {
    int64_t st = t->stride[dims[i]];
    if (st <= reach) return true;
    reach += st * (t->shape[dims[i]] - 1);
  }
  return false;
}

/* Every element of the extent addressed exactly once (a permuted
 * contiguous layout). */
static bool dense(const dp_tensor *t) {
  int dims[DP_MAXDIM], n = sorted_dims(t, dims);
  int64_t expect = 1;
  for (int i = 0; i < n; i++) {
    if (t->stride[dims[i]] != expect) return false;
    expect *= t->shape[dims[i]];
  }
  return true;
}

static bool same_view(const dp_tensor *a, const dp_tensor *b) {
  if (a->offset != b->offset || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->stride[d] != b->stride[d])) return false;
  return true;
}

/* byte range [lo, hi] a tensor's elements occupy; false when it has none */
static bool byte_extent(const dp_tensor *t, int64_t *lo, int64_t *hi) {
  int64_t l, h;
  bool empty;
  if (dp_span_overflow(t->ndim, t->shape, t->stride, t->offset, &l, &h, &empty) || empty) return false;
  int64_t es = (int64_t)dp_elsize(t);
  *lo = l * es, *hi = (h + 1) * es - 1;
  return true;
}

static const char *const PARTIAL_MSG = "unsupported operation: some elements of the input tensor and the written-to "
                                       "tensor refer to a single memory location. Please clone() the tensor before "
                                       "performing the operation.";

/* How src may be read while dst is written: 0 as it is, 1 from a copy,
 * -1 refused (error set). */
static int overlap_plan(const char *op, const dp_tensor *dst, const dp_tensor *src) {
  if (!src || src->storage != dst->storage) return 0;
  int64_t dl, dh, sl, sh;
  if (!byte_extent(dst, &dl, &dh) || !byte_extent(src, &sl, &sh) || dh < sl || sh < dl) return 0;
  if (same_view(dst, src)) return 0;
  if (dense(dst) && dense(src)) return dp_error("%s: %s", op, PARTIAL_MSG);
  return 1;
}

static int check_no_internal_overlap(const char *op, const dp_tensor *dst) {
  if (!internal_overlap(dst)) return 0;
  return dp_error("%s: unsupported operation: more than one element of the written-to tensor refers to a single "
                  "memory location. Please clone() the tensor before performing the operation.",
                  op);
}

/* ---- the write ---- */

typedef enum { W_FILL, W_COPY, W_BINARY, W_BINARY_NUMBER } write_kind;
typedef struct {
  write_kind kind;
  dp_binary_op op;
  dp_tensor *src;   /* W_COPY, W_BINARY */
  dp_number number; /* W_FILL, W_BINARY_NUMBER */
} write_spec;

/* CopyBackwards: inputs (old value, source); the old value gets a zero
 * gradient, the source the gradient summed to its shape */
static int overwrite_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  if (dp_node_needs(n, 0) && !(gin[0] = dp_zeros(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gout[0]))))
    return -1;
  if (n->n_inputs > 1 && dp_node_needs(n, 1)) {
    dp_retain(gout[0]);
    if (!(gin[1] = dp_grad_for_input(n, 1, gout[0]))) return -1;
  }
  return 0;
}

/* The new value of dst, out of place and differentiable (grad mode on). */
static dp_tensor *new_value(const write_spec *w, dp_tensor *old, dp_tensor *src) {
  switch (w->kind) {
  case W_FILL:
  case W_COPY: {
    DP_SCOPE(s);
    dp_tensor *v =
        w->kind == W_COPY
            ? (dp_device_eq(dp_dev(src), dp_dev(old)) ? src : dp_scope_add(&s, dp_to(src, old->dtype, dp_dev(old))))
            : dp_scope_add(&s, dp_number_tensor(&w->number, old->dtype, dp_dev(old)));
    dp_tensor *out = v ? dp_scope_add(&s, dp_empty_like(old)) : NULL;
    if (!out || dp_copy_(out, v)) return NULL;
    dp_tensor *ins[2] = {old, v};
    dp_node *n = dp_node_new("CopyBackwards", overwrite_backward, 2, ins, 1);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
    return dp_scope_keep(&s, out);
  }
  case W_BINARY: return dp_binary(w->op, old, src);
  default: return dp_binary_number(w->op, old, &w->number, false);
  }
}

/* The write without autograd, straight into dst (the kernels read and
 * write the same element, which the overlap checks made safe). */
static int raw_write(const write_spec *w, dp_tensor *dst, dp_tensor *src, dp_dtype compute) {
  DP_SCOPE(s);
  switch (w->kind) {
  case W_FILL: {
    if (w->number.is_int && dst->dtype == DP_I64) { /* exact beyond 2^53 */
      dp_tensor *v = dp_scope_add(&s, dp_number_tensor(&w->number, DP_I64, dp_dev(dst)));
      return v ? dp_copy_(dst, v) : -1;
    }
    return dp_fill_(dst, dp_number_value(&w->number));
  }
  case W_COPY: return dp_copy_(dst, src);
  case W_BINARY: return dp_binary_(w->op, dst, src);
  default: { /* the number as a 0-dim tensor of the compute dtype: exact for int64, rounded as PyTorch casts it */
    dp_tensor *v = dp_scope_add(&s, dp_number_tensor(&w->number, compute, dp_dev(dst)));
    return v ? dp_binary_(w->op, dst, v) : -1;
  }
  }
}

static const char *write_name(const write_spec *w) {
  switch (w->kind) {
  case W_FILL: return "fill_";
  case W_COPY: return "copy_";
  default:
    switch (w->op) {
    case DP_B_ADD: return "add_";
    case DP_B_SUB: return "sub_";
    case DP_B_MUL: return "mul_";
    case DP_B_DIV: return "div_";
    default: return "in-place op";
    }
  }
}

static int inplace_write(dp_tensor *dst, const write_spec *w) {
  const char *op = write_name(w);
  dp_tensor *src = w->src;
  dp_autograd_refresh(dst);
  if (src) {
    dp_autograd_refresh(src);
    if (w->kind != W_COPY && dp_check_same_device(op, dst, src)) return -1;
  }
  /* the result's dtype must fit dst's, and its shape must be dst's */
  dp_dtype rt = dst->dtype;
  if (w->kind == W_BINARY || w->kind == W_BINARY_NUMBER) {
    rt = w->kind == W_BINARY ? dp_result_type(dst, src) : dp_result_type_number(dst, &w->number);
    if (dp_binary_ops[w->op].out == DP_OUT_FLOAT && !dp_dtype_is_float(rt)) rt = DP_F32;
    if (!dp_can_cast(rt, dst->dtype))
      return dp_error("%s: result type %s can't be cast to the desired output type %s", op, dp_dtype_name(rt),
                      dp_dtype_name(dst->dtype));
  }
  if (src && w->kind != W_FILL) {
    int nd;
    int64_t sh[DP_MAXDIM];
    if (dp_broadcast_shape(dst, src, &nd, sh)) {
      dp_error_prefix(": ");
      dp_error_prefix(op);
      return -1;
    }
    bool same = nd == dst->ndim;
    for (int d = 0; same && d < nd; d++) same = sh[d] == dst->shape[d];
    if (!same)
      return dp_error("%s: the source of shape %s does not broadcast to the destination's shape %s", op, SHAPE(src),
                      SHAPE(dst));
  }
  if (w->kind != W_FILL && check_no_internal_overlap(op, dst)) return -1;
  int plan = overlap_plan(op, dst, src);
  if (plan < 0) return -1;
  DP_SCOPE(s);
  if (plan == 1 && !(src = dp_scope_add(&s, dp_clone(src)))) return -1; /* differentiable copy */
  dp_tensor *base = dst->view_base;
  bool recording = dp_grad_enabled() && (dst->requires_grad || (src && src->requires_grad));
  if (recording && dst->requires_grad && !dst->grad_fn)
    return dp_error("%s: a leaf Variable that requires grad is being used in an in-place operation. (Change its "
                    "values under ddp.no_grad.)",
                    op);
  if (recording && base && base->requires_grad && !base->grad_fn)
    return dp_error("%s: a view of a leaf Variable that requires grad is being used in an in-place operation. "
                    "(Change its values under ddp.no_grad.)",
                    op);
  if (!recording) return raw_write(w, dst, src, rt);

  /* the old value: a clone where the op saves its input (the write below
   * would change what the node saved) */
  bool saves = w->kind == W_BINARY || w->kind == W_BINARY_NUMBER
                   ? w->op == DP_B_MUL || w->op == DP_B_DIV || w->op == DP_B_MAX || w->op == DP_B_MIN
                   : false;
  dp_tensor *old = saves ? dp_scope_add(&s, dp_clone(dst)) : dst;
  dp_tensor *v = old ? dp_scope_add(&s, new_value(w, old, src)) : NULL;
  if (!v) return -1;
  bool prev = dp_set_grad_enabled(false);
  int rc = dp_backend_of(dst)->copy(dst, v);
  dp_set_grad_enabled(prev);
  if (rc) return -1;
  dp_bump_version(dst);
  if (!v->requires_grad) return 0; /* nothing differentiable took part */
  if (!base) {                     /* dst takes the new value's history */
    dp_node *fn = v->grad_fn;
    dp_node_retain(fn);
    dp_node_attach(fn, dst, v->output_nr);
    dp_node_release(fn);
    dst->hist++;
    return 0;
  }
  dp_tensor *ins[2] = {base, v};
  dp_node *n = geom_node("CopySlices", copy_slices_backward, 2, ins, base, dst);
  if (!n) return -1;
  dp_node_attach(n, base, 0);
  dp_node_release(n);
  base->hist++;
  dp_autograd_refresh(dst); /* dst is a view of the new history now */
  return 0;
}

/* ---- the entries ---- */

int dp_inplace_fill_(dp_tensor *t, const dp_number *v) {
  if (dp_number_check("fill_", v, t->dtype)) return -1;
  write_spec w = {.kind = W_FILL, .number = *v};
  return inplace_write(t, &w);
}

int dp_inplace_copy_(dp_tensor *dst, dp_tensor *src) {
  write_spec w = {.kind = W_COPY, .src = src};
  return inplace_write(dst, &w);
}

int dp_inplace_binary_(dp_binary_op op, dp_tensor *a, dp_tensor *b) {
  write_spec w = {.kind = W_BINARY, .op = op, .src = b};
  return inplace_write(a, &w);
}

int dp_inplace_binary_number_(dp_binary_op op, dp_tensor *a, const dp_number *s) {
  write_spec w = {.kind = W_BINARY_NUMBER, .op = op, .number = *s};
  return inplace_write(a, &w);
}
