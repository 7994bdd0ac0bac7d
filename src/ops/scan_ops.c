/* cumprod and logcumsumexp with autograd (backend cum_scan). Each
 * gradient is one more scan, in the backend, that reads x and the upstream
 * gradient (the forward's output is recomputed there in the same pass, so
 * nothing but x is saved): cumprod's is exact with zeros (no division by
 * x), logcumsumexp's stays finite where exp(-y) alone would overflow
 * (ops/model_math.h says how). Neither gradient is itself differentiable,
 * as no ddplua gradient is (no create_graph). */
#include "ops/model_ops.h"
#include "ops/op_util.h"

static const char *scan_name(dp_scan_kind k) { return dp_scan_is_lse(k) ? "logcumsumexp" : "cumprod"; }

/* The scan (or, g != NULL, its gradient) of x along dim, no autograd. */
static dp_tensor *scan_raw(dp_tensor *x, dp_tensor *g, int dim, dp_scan_kind kind) {
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *gt = g && g->dtype != x->dtype ? dp_scope_add(&s, dp_to(g, x->dtype, dp_dev(x))) : g;
  dp_tensor *gc = gt ? dp_scope_add(&s, dp_contiguous_raw(gt)) : NULL;
  dp_tensor *out = xc && (!g || gc) ? dp_scope_add(&s, dp_empty(x->dtype, x->ndim, x->shape, dp_dev(x))) : NULL;
  if (!out) return NULL;
  dp_reduce_args ra = dp_around_dim(x, dim, DP_R_SUM, 0);
  if (dp_backend_of(x)->cum_scan(out, xc, gc, &ra, kind)) return NULL;
  return dp_scope_keep(&s, out);
}

static int scan_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  gin[0] = scan_raw(dp_node_saved(n, 0), gout[0], (int)n->i[0], (dp_scan_kind)n->i[1]);
  return gin[0] ? 0 : -1;
}

static dp_tensor *scan(dp_tensor *x, int dim, dp_scan_kind kind, dp_scan_kind grad_kind) {
  const char *who = scan_name(kind);
  bool ok = dp_dtype_is_float(x->dtype) || (kind == DP_SCAN_PROD && x->dtype == DP_I64);
  if (!ok) {
    dp_error("%s: expected a floating-point tensor%s, got %s", who, kind == DP_SCAN_PROD ? " or int64" : "",
             dp_dtype_name(x->dtype));
    return NULL;
  }
  if (x->ndim > 0 && dp_check_dim(who, x, dim)) return NULL;
  dp_tensor *out = scan_raw(x, NULL, dim, kind);
  if (out && dp_any_requires_grad(1, &x)) {
    dp_node *n =
        dp_node_new(kind == DP_SCAN_PROD ? "CumprodBackward" : "LogcumsumexpBackward", scan_backward, 1, &x, 1);
    n->i[0] = dim;
    n->i[1] = grad_kind;
    dp_node_save(n, x);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_cumprod(dp_tensor *x, int dim) { return scan(x, dim, DP_SCAN_PROD, DP_SCAN_PROD_GRAD); }
dp_tensor *dp_logcumsumexp(dp_tensor *x, int dim) { return scan(x, dim, DP_SCAN_LOGADDEXP, DP_SCAN_LOGADDEXP_GRAD); }
