/* Elementwise ops with broadcasting, and their gradients. */
#include <math.h>
#include <string.h>

#include "ops/op_util.h"

const char *dp_shp_n(int ndim, const int64_t *shape) {
  static _Thread_local char bufs[8][160];
  static _Thread_local unsigned k;
  char *b = bufs[k++ & 7];
  return dp_shape_str_n(ndim, shape, b, 160);
}

const char *dp_shp(const dp_tensor *t) { return dp_shp_n(t->ndim, t->shape); }

int dp_check_same_device(const char *op, const dp_tensor *a, const dp_tensor *b) {
  if (dp_device_eq(dp_dev(a), dp_dev(b))) return 0;
  char x[16], y[16];
  return dp_error("%s: expected all tensors on the same device, got %s and %s", op,
                  dp_device_str(dp_dev(a), x, sizeof x), dp_device_str(dp_dev(b), y, sizeof y));
}

int dp_check_float(const char *op, const dp_tensor *t) {
  if (dp_dtype_is_float(t->dtype)) return 0;
  return dp_error("%s: expected a floating point tensor, got %s", op, dp_dtype_name(t->dtype));
}

int dp_check_dim(const char *op, const dp_tensor *t, int dim) {
  if (dim >= 0 && dim < t->ndim) return 0;
  return dp_error("%s: dimension %d out of range for a %d-dimensional tensor", op, dim + 1, t->ndim);
}

int dp_broadcast_shape(const dp_tensor *a, const dp_tensor *b, int *ndim, int64_t *shape) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int i = 0; i < n; i++) {
    int da = a->ndim - n + i, db = b->ndim - n + i;
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      return dp_error("shapes %s and %s cannot be broadcast together (size %" PRId64 " vs %" PRId64
                      " at dimension %d of the result)",
                      SHAPE(a), SHAPE(b), sa, sb, i + 1);
    }
    shape[i] = sa == 1 ? sb : sa;
  }
  *ndim = n;
  return 0;
}

dp_tensor *dp_expand_raw(dp_tensor *t, int ndim, const int64_t *shape) {
  int64_t st[DP_MAXDIM];
  for (int i = 0; i < ndim; i++) {
    int d = t->ndim - ndim + i;
    if (d < 0 || t->shape[d] == 1) st[i] = 0;
    else st[i] = t->stride[d];
    if (d >= 0 && t->shape[d] != 1 && t->shape[d] != shape[i]) {
      dp_error("cannot expand shape %s to %s", SHAPE(t), dp_shp_n(ndim, shape));
      return NULL;
    }
  }
  /* a view that may address no element (numel 0) is fine */
  dp_storage_retain(t->storage);
  dp_tensor *v = dp_xcalloc(1, sizeof *v);
  v->refcount = 1;
  v->storage = t->storage;
  v->offset = t->offset;
  v->dtype = t->dtype;
  v->ndim = ndim;
  memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
  memcpy(v->stride, st, sizeof(int64_t) * (size_t)ndim);
  return v;
}

dp_tensor *dp_grad_for_input(dp_node *n, int i, dp_tensor *g) {
  if (!g) return NULL;
  DP_SCOPE(sc);
  dp_scope_add(&sc, g);
  dp_tensor *s = dp_scope_add(&sc, dp_sum_to(g, n->in_ndim[i], n->in_shape[i]));
  if (!s) return NULL;
  return s->dtype == n->in_dtype[i] ? dp_scope_keep(&sc, s) : dp_to(s, n->in_dtype[i], dp_dev(s));
}

/* ---- unary: everything per op comes from the op table ---- */
DP_STATIC_ASSERT(sizeof(dp_unary_params) <= sizeof(((dp_node *)0)->f), "a node holds the op's parameters");

static int unary_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_unary_args a = {.op = (dp_unary_op)n->i[0]};
  memcpy(&a.p, n->f, sizeof a.p);
  DP_SCOPE(s);
  dp_tensor *gy = gout[0], *gx = dp_scope_add(&s, dp_empty_like(gy));
  if (!gx || dp_backend_of(gy)->unary_backward(&a, gx, gy, dp_node_saved(n, 0), dp_node_saved(n, 1))) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

/* Integer inputs keep their dtype for the ops that say so (int64 math is
 * exact); the others give float32, as PyTorch's math functions do. */
static dp_dtype unary_out_dtype(const dp_unary_args *a, dp_dtype in) {
  if (dp_dtype_is_float(in)) return in;
  switch (dp_unary_ops[a->op].ints) {
  case DP_INT_KEEP: return in;
  case DP_INT_KEEP_IF_WHOLE: /* a parameter with a fraction makes it float, as a Lua number would */
    for (size_t k = 0; k < DP_UNARY_NPARAMS; k++) {
      const dp_param_info *pi = &dp_unary_param_list[k];
      double v;
      memcpy(&v, (const char *)&a->p + pi->offset, sizeof v);
      if (pi->op == a->op && !isinf(v) && v != floor(v)) return DP_F32;
    }
    return in;
  default: return DP_F32;
  }
}

dp_tensor *dp_unary_with(const dp_unary_args *a, dp_tensor *x) {
  if ((unsigned)a->op >= DP_U_COUNT) {
    dp_error("unknown unary op %d", (int)a->op);
    return NULL;
  }
  const dp_op_info *info = &dp_unary_ops[a->op];
  if (info->ints == DP_INT_ERROR && dp_check_float(info->name, x)) return NULL;
  DP_SCOPE(s);
  dp_tensor *out = dp_scope_add(&s, dp_empty(unary_out_dtype(a, x->dtype), x->ndim, x->shape, dp_dev(x)));
  if (!out || dp_backend_of(x)->unary(a, out, x)) return NULL;
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new(info->node, unary_backward, 1, &x, 1);
    n->i[0] = a->op;
    memcpy(n->f, &a->p, sizeof a->p);
    dp_node_save(n, info->grad == DP_GRAD_X ? x : NULL);
    dp_node_save(n, info->grad == DP_GRAD_Y ? out : NULL);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_unary(dp_unary_op op, dp_tensor *x) {
  if ((unsigned)op >= DP_U_COUNT) {
    dp_error("unknown unary op %d", (int)op);
    return NULL;
  }
  dp_unary_args a = dp_unary_args_of(op);
  return dp_unary_with(&a, x);
}

/* ---- binary ---- */
static dp_dtype binary_out_dtype(dp_binary_op op, dp_dtype a, dp_dtype b) {
  if (dp_binary_ops[op].out == DP_OUT_BOOL) return DP_U8;
  dp_dtype t = dp_promote(a, b);
  if (dp_binary_ops[op].out == DP_OUT_FLOAT && !dp_dtype_is_float(t)) return DP_F32;
  return t;
}

/* The weight a gets of the gradient of maximum/minimum(a, b): 1 where it
 * wins, 0.5 at ties (the gradient is split equally, as PyTorch), 0 where
 * it loses; b (NULL) stands for the scalar s. */
static dp_tensor *extreme_weight(dp_binary_op op, dp_tensor *a, dp_tensor *b, double s, dp_tensor *like) {
  DP_SCOPE(sc);
  dp_binary_op wins = op == DP_B_MAX ? DP_B_GT : DP_B_LT;
  dp_tensor *win = dp_scope_add(&sc, b ? dp_binary(wins, a, b) : dp_binary_scalar(wins, a, s, false));
  dp_tensor *tie = dp_scope_add(&sc, b ? dp_binary(DP_B_EQ, a, b) : dp_binary_scalar(DP_B_EQ, a, s, false));
  dp_tensor *wf = win ? dp_scope_add(&sc, dp_to(win, like->dtype, dp_dev(like))) : NULL;
  dp_tensor *tf = tie ? dp_scope_add(&sc, dp_to(tie, like->dtype, dp_dev(like))) : NULL;
  dp_tensor *half = tf ? dp_scope_add(&sc, dp_binary_scalar(DP_B_MUL, tf, 0.5, false)) : NULL;
  return wf && half ? dp_add(wf, half) : NULL;
}

static int binary_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_binary_op op = (dp_binary_op)n->i[0];
  dp_tensor *gy = gout[0];
  dp_tensor *a = dp_node_saved(n, 0), *b = dp_node_saved(n, 1), *y = dp_node_saved(n, 2);
  bool na = dp_node_needs(n, 0), nb = dp_node_needs(n, 1);
  DP_SCOPE(s);
  dp_tensor *ga = NULL, *gb = NULL; /* handed to dp_grad_for_input, which consumes them */
  switch (op) {
  case DP_B_ADD:
    if (na) dp_retain(gy), ga = gy;
    if (nb) dp_retain(gy), gb = gy;
    break;
  case DP_B_SUB:
    if (na) dp_retain(gy), ga = gy;
    if (nb) gb = dp_neg(gy);
    break;
  case DP_B_MUL:
    if (na) ga = dp_mul(gy, b);
    if (nb) gb = dp_mul(gy, a);
    break;
  case DP_B_DIV:
    if (na) ga = dp_div(gy, b);
    if (nb) { /* -gy * y / b */
      dp_tensor *t = dp_scope_add(&s, dp_mul(gy, y)), *u = t ? dp_scope_add(&s, dp_div(t, b)) : NULL;
      gb = u ? dp_neg(u) : NULL;
    }
    break;
  case DP_B_MAX:
  case DP_B_MIN: {
    dp_tensor *ma = dp_scope_add(&s, extreme_weight(op, a, b, 0, gy)); /* a's weight; b's is 1 - ma */
    if (ma && na) ga = dp_mul(gy, ma);
    if (ma && nb) {
      dp_tensor *mb = dp_scope_add(&s, dp_binary_scalar(DP_B_SUB, ma, 1.0, true));
      gb = mb ? dp_mul(gy, mb) : NULL;
    }
    break;
  }
  case DP_B_POW:
    if (na) { /* gy * b * a^(b-1) */
      dp_tensor *bm1 = dp_scope_add(&s, dp_binary_scalar(DP_B_SUB, b, 1.0, false));
      dp_tensor *p = bm1 ? dp_scope_add(&s, dp_binary(DP_B_POW, a, bm1)) : NULL;
      dp_tensor *t = p ? dp_scope_add(&s, dp_mul(p, b)) : NULL;
      ga = t ? dp_mul(gy, t) : NULL;
    }
    if (nb) { /* gy * y * log(a) */
      dp_tensor *la = dp_scope_add(&s, dp_unary(DP_U_LOG, a)), *t = la ? dp_scope_add(&s, dp_mul(y, la)) : NULL;
      gb = t ? dp_mul(gy, t) : NULL;
    }
    break;
  default: return dp_error("comparison ops have no gradient");
  }
  gin[0] = dp_grad_for_input(n, 0, ga);
  gin[1] = dp_grad_for_input(n, 1, gb);
  return (na && !gin[0]) || (nb && !gin[1]) ? -1 : 0;
}

dp_tensor *dp_binary(dp_binary_op op, dp_tensor *a, dp_tensor *b) {
  const char *name = dp_binary_name(op);
  if ((unsigned)op >= DP_B_COUNT) {
    dp_error("unknown binary op %d", (int)op);
    return NULL;
  }
  if (dp_check_same_device(name, a, b)) return NULL;
  int nd;
  int64_t shape[DP_MAXDIM];
  if (dp_broadcast_shape(a, b, &nd, shape)) {
    dp_error_prefix(": ");
    dp_error_prefix(name);
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *out = dp_scope_add(&s, dp_empty(binary_out_dtype(op, a->dtype, b->dtype), nd, shape, dp_dev(a)));
  dp_tensor *ea = dp_scope_add(&s, dp_expand_raw(a, nd, shape)), *eb = dp_scope_add(&s, dp_expand_raw(b, nd, shape));
  if (!out || !ea || !eb || dp_backend_of(a)->binary(op, out, ea, eb)) return NULL;
  dp_scope_keep(&s, out);
  dp_tensor *ins[2] = {a, b};
  const dp_op_info *info = &dp_binary_ops[op];
  if (info->node && dp_any_requires_grad(2, ins)) {
    dp_node *n = dp_node_new(info->node, binary_backward, 2, ins, 1);
    n->i[0] = op;
    dp_node_save(n, info->saves != DP_SAVES_NONE ? a : NULL);
    dp_node_save(n, info->saves != DP_SAVES_NONE ? b : NULL);
    dp_node_save(n, info->saves == DP_SAVES_ABY ? out : NULL);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

static int binary_scalar_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_binary_op op = (dp_binary_op)n->i[0];
  bool first = n->i[1];
  double s = n->f[0];
  dp_tensor *gy = gout[0], *a = dp_node_saved(n, 0), *y = dp_node_saved(n, 1);
  DP_SCOPE(sc);
  dp_tensor *g = NULL; /* handed to dp_grad_for_input */
  switch (op) {
  case DP_B_ADD: dp_retain(gy), g = gy; break;
  case DP_B_SUB: g = first ? dp_neg(gy) : (dp_retain(gy), gy); break;
  case DP_B_MUL: g = dp_binary_scalar(DP_B_MUL, gy, s, false); break;
  case DP_B_DIV:
    if (!first) g = dp_binary_scalar(DP_B_DIV, gy, s, false);
    else { /* d(s/a) = -y/a */
      dp_tensor *t = dp_scope_add(&sc, dp_div(y, a)), *u = t ? dp_scope_add(&sc, dp_mul(gy, t)) : NULL;
      g = u ? dp_neg(u) : NULL;
    }
    break;
  case DP_B_POW:
    if (!first) { /* s * a^(s-1) */
      dp_tensor *p = dp_scope_add(&sc, dp_binary_scalar(DP_B_POW, a, s - 1.0, false));
      dp_tensor *t = p ? dp_scope_add(&sc, dp_binary_scalar(DP_B_MUL, p, s, false)) : NULL;
      g = t ? dp_mul(gy, t) : NULL;
    } else { /* s^a: y * log(s) */
      dp_tensor *t = dp_scope_add(&sc, dp_binary_scalar(DP_B_MUL, y, log(s), false));
      g = t ? dp_mul(gy, t) : NULL;
    }
    break;
  case DP_B_MAX:
  case DP_B_MIN: {
    dp_tensor *m = dp_scope_add(&sc, extreme_weight(op, a, NULL, s, gy));
    g = m ? dp_mul(gy, m) : NULL;
    break;
  }
  default: return dp_error("comparison ops have no gradient");
  }
  if (!g) return -1;
  gin[0] = dp_grad_for_input(n, 0, g);
  return gin[0] ? 0 : -1;
}

dp_tensor *dp_binary_scalar(dp_binary_op op, dp_tensor *a, double s, bool scalar_first) {
  if ((unsigned)op >= DP_B_COUNT) {
    dp_error("unknown binary op %d", (int)op);
    return NULL;
  }
  /* A Lua number is weakly typed (as a Python scalar in PyTorch): it keeps
   * an integer tensor integer unless it has a fraction. */
  const dp_op_info *info = &dp_binary_ops[op];
  dp_dtype odt = a->dtype;
  if (info->out == DP_OUT_BOOL) odt = DP_U8;
  else if (!dp_dtype_is_float(odt) && (info->out == DP_OUT_FLOAT || s != floor(s) || isinf(s))) odt = DP_F32;
  DP_SCOPE(sc);
  dp_tensor *out = dp_scope_add(&sc, dp_empty(odt, a->ndim, a->shape, dp_dev(a)));
  if (!out || dp_backend_of(a)->binary_scalar(op, out, a, s, scalar_first)) return NULL;
  dp_scope_keep(&sc, out);
  if (info->node && dp_any_requires_grad(1, &a)) {
    dp_node *n = dp_node_new(info->node, binary_scalar_backward, 1, &a, 1);
    n->i[0] = op;
    n->i[1] = scalar_first;
    n->f[0] = s;
    bool need_a = op == DP_B_MAX || op == DP_B_MIN || op == DP_B_POW || (op == DP_B_DIV && scalar_first);
    dp_node_save(n, need_a ? a : NULL);
    dp_node_save(n, ((op == DP_B_DIV || op == DP_B_POW) && scalar_first) ? out : NULL);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

int dp_binary_(dp_binary_op op, dp_tensor *a, dp_tensor *b) {
  if (dp_check_same_device(dp_binary_name(op), a, b)) return -1;
  DP_SCOPE(s);
  dp_tensor *eb = dp_scope_add(&s, dp_expand_raw(b, a->ndim, a->shape));
  if (!eb || dp_backend_of(a)->binary(op, a, a, eb)) return -1;
  dp_bump_version(a);
  return 0;
}

int dp_binary_scalar_(dp_binary_op op, dp_tensor *a, double s) {
  int rc = dp_backend_of(a)->binary_scalar(op, a, a, s, false);
  if (!rc) dp_bump_version(a);
  return rc;
}
