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

/* gx = gy * d, d the derivative the forward saved (backend.h unary_with_grad) */
static int unary_saved_grad_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  DP_SCOPE(s);
  dp_tensor *gy = gout[0], *d = dp_node_saved(n, 0), *gx = dp_scope_add(&s, dp_empty_like(gy));
  if (!gx || dp_backend_of(gy)->binary(DP_B_MUL, gx, gy, d)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

/* out = op(x), with the node saving op'(x) when the backend computes it alongside (GELU on the CPU: its
 * backward then multiplies instead of recomputing Phi and phi); 1 done, 0 declined, -1 error */
static int unary_saving_grad(const dp_unary_args *a, dp_tensor *x, dp_tensor *out) {
  const dp_backend *be = dp_backend_of(x);
  if (!be->unary_with_grad || a->op != DP_U_GELU) return 0;
  int takes = be->unary_with_grad(a, out, NULL, x); /* before allocating d: bfloat16 GELU declines on the CPU */
  if (takes != 1) return takes;
  DP_SCOPE(s);
  dp_tensor *d = dp_scope_add(&s, dp_empty(DP_F32, x->ndim, x->shape, dp_dev(x)));
  if (!d) return -1;
  int r = be->unary_with_grad(a, out, d, x);
  if (r != 1) return r;
  dp_node *n = dp_node_new(dp_unary_ops[a->op].node, unary_saved_grad_backward, 1, &x, 1);
  dp_node_save(n, d);
  dp_node_attach(n, out, 0);
  dp_node_release(n);
  return 1;
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
  if (!out) return NULL;
  int saved = dp_any_requires_grad(1, &x) ? unary_saving_grad(a, x, out) : 0;
  if (saved < 0 || (!saved && dp_backend_of(x)->unary(a, out, x))) return NULL;
  dp_scope_keep(&s, out);
  if (!saved && dp_any_requires_grad(1, &x)) {
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
/* The dtype the op computes in (PyTorch's result type; an integer one
 * becomes float32 for the OUT_FLOAT ops) and the dtype it writes. */
static dp_dtype compute_dtype(dp_binary_op op, dp_dtype rt) {
  return dp_binary_ops[op].out == DP_OUT_FLOAT && !dp_dtype_is_float(rt) ? DP_F32 : rt;
}
static dp_dtype output_dtype(dp_binary_op op, dp_dtype compute) {
  return dp_binary_ops[op].out == DP_OUT_BOOL ? DP_U8 : compute;
}

/* The weight an operand gets of the gradient of maximum/minimum: 1 where
 * it wins, 0.5 at ties (split equally), 0 where it loses, and 1 where the
 * comparison is undecided (a NaN on either side: PyTorch passes the
 * gradient to both there). `lose` is the comparison under which the
 * operand loses; b (NULL) stands for the scalar s. */
static dp_tensor *extreme_weight(dp_binary_op lose, dp_tensor *a, dp_tensor *b, double s, dp_tensor *like) {
  DP_SCOPE(sc);
  dp_tensor *l = dp_scope_add(&sc, b ? dp_binary(lose, a, b) : dp_binary_scalar(lose, a, s, false));
  dp_tensor *tie = dp_scope_add(&sc, b ? dp_binary(DP_B_EQ, a, b) : dp_binary_scalar(DP_B_EQ, a, s, false));
  dp_tensor *lf = l ? dp_scope_add(&sc, dp_to(l, like->dtype, dp_dev(like))) : NULL;
  dp_tensor *tf = tie ? dp_scope_add(&sc, dp_to(tie, like->dtype, dp_dev(like))) : NULL;
  dp_tensor *half = tf ? dp_scope_add(&sc, dp_binary_scalar(DP_B_MUL, tf, 0.5, false)) : NULL;
  dp_tensor *drop = lf && half ? dp_scope_add(&sc, dp_add(lf, half)) : NULL;
  return drop ? dp_binary_scalar(DP_B_SUB, drop, 1.0, true) : NULL; /* 1 - lose - tie/2 */
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
    bool mx = op == DP_B_MAX;
    if (na) {
      dp_tensor *w = dp_scope_add(&s, extreme_weight(mx ? DP_B_LT : DP_B_GT, a, b, 0, gy));
      ga = w ? dp_mul(gy, w) : NULL;
    }
    if (nb) {
      dp_tensor *w = dp_scope_add(&s, extreme_weight(mx ? DP_B_GT : DP_B_LT, a, b, 0, gy));
      gb = w ? dp_mul(gy, w) : NULL;
    }
    break;
  }
  case DP_B_POW:
    if (na && b->dtype == gy->dtype) { /* gy * b * a^(b-1), 0 where b == 0 */
      dp_tensor *t = dp_scope_add(&s, dp_binary(DP_B_POW_DBASE, a, b));
      ga = t ? dp_mul(gy, t) : NULL;
    } else if (na) { /* b - 1 in b's own dtype, as PyTorch: an int64 b exact beyond 2^53 (wrapping), a float32
                      * b rounded there (1e-16 - 1 is -1, an integer power of a negative base, not NaN) */
      dp_number one = dp_number_int(1);
      dp_tensor *b1 = dp_scope_add(&s, dp_binary_number(DP_B_SUB, b, &one, false));
      dp_tensor *p = b1 ? dp_scope_add(&s, dp_binary(DP_B_POW, a, b1)) : NULL;
      dp_tensor *pb = p ? dp_scope_add(&s, dp_mul(p, b)) : NULL;
      dp_tensor *t = pb ? dp_scope_add(&s, dp_binary(DP_B_KEEP_NZ, pb, b)) : NULL;
      ga = t ? dp_mul(gy, t) : NULL;
    }
    if (nb) { /* gy * a^b * log(a), 0 where a == 0 and b >= 0 */
      dp_tensor *t = dp_scope_add(&s, dp_binary(DP_B_POW_DEXP, a, b));
      gb = t ? dp_mul(gy, t) : NULL;
    }
    break;
  case DP_B_BCE_LOGITS: /* gy (sigmoid(a) - b), gy * -a */
    if (na) {
      dp_tensor *sg = dp_scope_add(&s, dp_unary(DP_U_SIGMOID, a));
      dp_tensor *d = sg ? dp_scope_add(&s, dp_sub(sg, b)) : NULL;
      ga = d ? dp_mul(gy, d) : NULL;
    }
    if (nb) {
      dp_tensor *na_ = dp_scope_add(&s, dp_neg(a));
      gb = na_ ? dp_mul(gy, na_) : NULL;
    }
    break;
  default: return dp_error("%s has no gradient", dp_binary_name(op));
  }
  (void)y;
  gin[0] = dp_grad_for_input(n, 0, ga);
  gin[1] = dp_grad_for_input(n, 1, gb);
  return (na && !gin[0]) || (nb && !gin[1]) ? -1 : 0;
}

static bool half_or_f32(dp_dtype t) { return t == DP_F32 || t == DP_BF16 || t == DP_F16; }

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
  dp_dtype cdt = compute_dtype(op, dp_result_type(a, b));
  DP_SCOPE(s);
  /* operands in the compute dtype (cast before broadcasting: the small side); the CPU kernels widen 16-bit
   * float operands of a float32 op chunk by chunk themselves (exactly), so a bfloat16 activation added to a
   * float32 residual costs no extra pass */
  bool widen_in_kernel = dp_dev(a).type == DP_CPU && cdt == DP_F32 && half_or_f32(a->dtype) && half_or_f32(b->dtype);
  dp_tensor *ca = widen_in_kernel ? a : dp_scope_add(&s, dp_cast_raw(a, cdt));
  dp_tensor *cb = !ca ? NULL : widen_in_kernel ? b : dp_scope_add(&s, dp_cast_raw(b, cdt));
  dp_tensor *out = cb ? dp_scope_add(&s, dp_empty(output_dtype(op, cdt), nd, shape, dp_dev(a))) : NULL;
  dp_tensor *ea = out ? dp_scope_add(&s, dp_expand_raw(ca, nd, shape)) : NULL;
  dp_tensor *eb = ea ? dp_scope_add(&s, dp_expand_raw(cb, nd, shape)) : NULL;
  if (!eb || dp_backend_of(a)->binary(op, out, ea, eb)) return NULL;
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
  case DP_B_POW: { /* a^s: s * a^(s-1), 0 for s == 0; s^a: s^a * log(s), 0 for s == 0 and a >= 0 */
    dp_number sn = dp_number_float(s), s1 = dp_number_float(s - 1);
    dp_tensor *t;
    if (first || s == 0) t = dp_scope_add(&sc, dp_binary_number(first ? DP_B_POW_DEXP : DP_B_POW_DBASE, a, &sn, first));
    else { /* a^(s-1) as the forward computes a power (sqrt, rsqrt, ...: PyTorch's (-inf)^-0.5 is NaN, not 0) */
      dp_tensor *p = dp_scope_add(&sc, dp_binary_number(DP_B_POW, a, &s1, false));
      t = p ? dp_scope_add(&sc, dp_binary_number(DP_B_MUL, p, &sn, false)) : NULL;
    }
    g = t ? dp_mul(gy, t) : NULL;
    break;
  }
  case DP_B_MAX:
  case DP_B_MIN: {
    dp_tensor *m = dp_scope_add(&sc, extreme_weight(op == DP_B_MAX ? DP_B_LT : DP_B_GT, a, NULL, s, gy));
    g = m ? dp_mul(gy, m) : NULL;
    break;
  }
  default: return dp_error("%s has no gradient", dp_binary_name(op));
  }
  if (!g) return -1;
  gin[0] = dp_grad_for_input(n, 0, g);
  return gin[0] ? 0 : -1;
}

/* s in the compute dtype, as PyTorch casts a scalar to it (float32 rounds
 * 0.1; bfloat16 rounds further) */
static double number_in(const dp_number *s, dp_dtype dt) {
  double v = dp_number_value(s);
  char one[8];
  dp_store_d(one, dt, v);
  return dp_load_d(one, dt);
}

/* x^e for the exponents PyTorch computes without pow (a copy for 1, sqrt
 * for 0.5, x * x for 2, ...): the same values, e.g. (-inf)^0.5 is NaN as
 * sqrt gives, not C pow's inf. The result itself (no autograd; it was copied into a fresh
 * output: half a square's time), or NULL with *special false when e is not
 * one of them. */
static dp_tensor *pow_special(dp_tensor *x, double e, bool *special) {
  dp_unary_op u;
  *special = true;
  if (e == 1) { /* a copy (a square's backward multiplies by x^1: powf per element took 10 ms a million) */
    bool prev = dp_set_grad_enabled(false);
    dp_tensor *c = dp_clone(x);
    dp_set_grad_enabled(prev);
    return c;
  }
  if (e == 0.5) u = DP_U_SQRT;
  else if (e == -0.5) u = DP_U_RSQRT;
  else if (e == -1) u = DP_U_RECIP;
  else if (e == 2 || e == 3 || e == -2) u = DP_U_SQUARE;
  else return *special = false, NULL;
  bool prev = dp_set_grad_enabled(false);
  DP_SCOPE(s);
  dp_tensor *v = dp_scope_add(&s, dp_unary(u, x));
  if (v && e == 3) v = dp_scope_add(&s, dp_mul(v, x));
  if (v && e == -2) v = dp_scope_add(&s, dp_unary(DP_U_RECIP, v));
  dp_set_grad_enabled(prev);
  return v ? dp_scope_keep(&s, v) : NULL;
}

dp_tensor *dp_binary_number(dp_binary_op op, dp_tensor *a, const dp_number *s, bool scalar_first) {
  if ((unsigned)op >= DP_B_COUNT) {
    dp_error("unknown binary op %d", (int)op);
    return NULL;
  }
  const dp_op_info *info = &dp_binary_ops[op];
  dp_dtype cdt = compute_dtype(op, dp_result_type_number(a, s));
  if (op == DP_B_POW && !scalar_first && !dp_dtype_is_float(cdt) && s->is_int && s->i < 0) {
    dp_error("pow: integers to negative integer powers are not allowed (%s tensor to the power %lld)",
             dp_dtype_name(a->dtype), (long long)s->i);
    return NULL;
  }
  DP_SCOPE(sc);
  dp_tensor *ca = dp_scope_add(&sc, dp_cast_raw(a, cdt));
  bool special = false;
  dp_tensor *out = ca && dp_dtype_is_float(cdt) && op == DP_B_POW && !scalar_first
                       ? dp_scope_add(&sc, pow_special(ca, number_in(s, cdt), &special))
                       : NULL;
  if (!special) out = ca ? dp_scope_add(&sc, dp_empty(output_dtype(op, cdt), a->ndim, a->shape, dp_dev(a))) : NULL;
  if (!out) return NULL;
  if (special) { /* out is the special power's result already */
  } else if (dp_dtype_is_float(cdt)) {
    if (dp_backend_of(a)->binary_scalar(op, out, ca, number_in(s, cdt), scalar_first)) return NULL;
  } else { /* integers: the number as a broadcast 0-dim tensor, so the kernel's exact int64 path runs */
    dp_tensor *st = dp_scope_add(&sc, dp_number_tensor(s, cdt, dp_dev(a)));
    dp_tensor *es = st ? dp_scope_add(&sc, dp_expand_raw(st, a->ndim, a->shape)) : NULL;
    if (!es || dp_backend_of(a)->binary(op, out, scalar_first ? es : ca, scalar_first ? ca : es)) return NULL;
  }
  dp_scope_keep(&sc, out);
  if (info->node && dp_any_requires_grad(1, &a)) {
    dp_node *n = dp_node_new(info->node, binary_scalar_backward, 1, &a, 1);
    n->i[0] = op;
    n->i[1] = scalar_first;
    n->f[0] = number_in(s, cdt);
    bool need_a = op == DP_B_MAX || op == DP_B_MIN || op == DP_B_POW || (op == DP_B_DIV && scalar_first);
    dp_node_save(n, need_a ? a : NULL);
    dp_node_save(n, (op == DP_B_DIV && scalar_first) ? out : NULL);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_binary_scalar(dp_binary_op op, dp_tensor *a, double s, bool scalar_first) {
  dp_number n = dp_number_of_double(s);
  return dp_binary_number(op, a, &n, scalar_first);
}

dp_tensor *dp_add_scaled(dp_tensor *a, dp_tensor *b, const dp_number *alpha) {
  dp_dtype rt = dp_result_type(a, b);
  if (!dp_dtype_is_float(rt) && !alpha->is_int) {
    dp_error("add: for integral input tensors, argument alpha must not be a floating point number (got %g)", alpha->d);
    return NULL;
  }
  /* alpha * b in the result dtype (a uint8 b with alpha -1 wraps there, as
   * in PyTorch, instead of in b's own dtype before promotion) */
  DP_SCOPE(s);
  dp_tensor *bc = b->dtype == rt ? b : dp_scope_add(&s, dp_to(b, rt, dp_dev(b)));
  dp_tensor *sb = bc ? dp_scope_add(&s, dp_binary_number(DP_B_MUL, bc, alpha, false)) : NULL;
  return sb ? dp_add(a, sb) : NULL;
}

dp_tensor *dp_clamp_number(dp_tensor *x, const dp_number *lo, const dp_number *hi) {
  if (!lo && !hi) {
    dp_error("clamp: at least one of min and max must be given");
    return NULL;
  }
  bool ints = !dp_dtype_is_float(x->dtype) && (!lo || lo->is_int) && (!hi || hi->is_int);
  if (ints) { /* exact: maximum then minimum with the integer bounds (PyTorch's order: max wins) */
    if ((lo && dp_number_check("clamp", lo, x->dtype)) || (hi && dp_number_check("clamp", hi, x->dtype))) return NULL;
    DP_SCOPE(s);
    dp_tensor *t = lo ? dp_scope_add(&s, dp_binary_number(DP_B_MAX, x, lo, false)) : x;
    return !t ? NULL : hi ? dp_binary_number(DP_B_MIN, t, hi, false) : (dp_retain(t), t);
  }
  dp_unary_args a = dp_unary_args_of(DP_U_CLAMP);
  if (lo) a.p.min = dp_number_value(lo);
  if (hi) a.p.max = dp_number_value(hi);
  if (dp_dtype_is_float(x->dtype)) return dp_unary_with(&a, x);
  /* an integer x with a float bound: float32, the default dtype */
  DP_SCOPE(s);
  dp_tensor *xf = dp_scope_add(&s, dp_cast_raw(x, DP_F32));
  return xf ? dp_unary_with(&a, xf) : NULL;
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
