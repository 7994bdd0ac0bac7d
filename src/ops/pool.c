/* 2-d max and average pooling (floor or ceil mode; average divides by the
 * padded window as PyTorch's default, by the positions inside the input
 * (count_include_pad=false), or by divisor_override), with their gradients, and the window
 * size formula convolution shares. Inputs are [N, C, H, W] or unbatched
 * [C, H, W]. Max pooling saves the winners' positions, so its backward is
 * a scatter and never compares values again. */
#include "ops/op_util.h"
#include "ops/pool_geom.h"
#include "ops/scalar_math.h"
#include "tensor/checked.h"

int dp_window_size(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode, int64_t *out) {
  int64_t eff, num;
  /* eff = d * (k - 1) + 1; num = n + 2p - eff (+ s - 1 in ceil mode) */
  if (k < 1 || s < 1 || d < 1 || dp_mul_overflow(d, k - 1, &eff) || dp_add_overflow(eff, 1, &eff) ||
      dp_mul_overflow(p, 2, &num) || dp_add_overflow(num, n, &num) || dp_sub_overflow(num, eff, &num) ||
      (ceil_mode && dp_add_overflow(num, s - 1, &num)))
    return -1;
  int64_t q = num / s - (num % s != 0 && num < 0); /* rounded down (no -num + s - 1: it can overflow) */
  int64_t o = q + 1;
  /* PyTorch's rule: in ceil mode the last window must start inside the
   * input or its left padding ((o - 1) * s < n + p) */
  if (ceil_mode && o > 0 && (o - 1) > (n + p - 1) / s) o--;
  *out = o;
  return 0;
}

/* x as a contiguous 4-d tensor (an unbatched input gains N = 1) and the
 * window geometry; NULL + error naming the arguments. */
dp_tensor *dp_pool2d_input(const char *op, dp_tensor *x, const dp_pool2d_args *a, dp_window2d *g) {
  const int64_t *k = a->kernel, *s = a->stride, *p = a->padding;
  if (x->ndim != 3 && x->ndim != 4) {
    dp_error("%s: expected a 3- or 4-dimensional input ([C, H, W] or [N, C, H, W]), got shape %s", op, SHAPE(x));
    return NULL;
  }
  if (dp_check_float(op, x)) return NULL;
  for (int d = 0; d < 2; d++) {
    if (k[d] < 1) {
      dp_error("%s: kernel size must be >= 1, got %" PRId64 "x%" PRId64, op, k[0], k[1]);
      return NULL;
    }
    if (s[d] < 1) {
      dp_error("%s: stride must be >= 1, got %" PRId64 "x%" PRId64, op, s[0], s[1]);
      return NULL;
    }
    if (p[d] < 0 || p[d] > k[d] / 2) {
      dp_error("%s: padding %" PRId64 "x%" PRId64 " must be >= 0 and at most half the kernel size %" PRId64 "x%" PRId64,
               op, p[0], p[1], k[0], k[1]);
      return NULL;
    }
  }
  int lead = x->ndim - 4; /* -1 for an unbatched input */
  g->n = lead < 0 ? 1 : x->shape[0];
  g->c = x->shape[lead + 1], g->h = x->shape[lead + 2], g->w = x->shape[lead + 3];
  g->kh = k[0], g->kw = k[1], g->sh = s[0], g->sw = s[1], g->ph = p[0], g->pw = p[1], g->dh = g->dw = 1;
  g->groups = 0;
  g->divisor = a->divisor_override > 0 ? a->divisor_override : a->exclude_pad ? DP_AVGPOOL_VALID : 0;
  if (dp_window_size(g->h, g->kh, g->sh, g->ph, 1, a->ceil_mode, &g->oh) ||
      dp_window_size(g->w, g->kw, g->sw, g->pw, 1, a->ceil_mode, &g->ow) || g->oh < 1 || g->ow < 1) {
    dp_error("%s: kernel size %" PRId64 "x%" PRId64 " does not fit the input %" PRId64 "x%" PRId64 " padded by %" PRId64
             "x%" PRId64 " (input shape %s)",
             op, k[0], k[1], g->h, g->w, p[0], p[1], SHAPE(x));
    return NULL;
  }
  dp_window_one_step(g);
  return dp_contiguous_raw(x);
}

/* Output shape: the input's with H, W replaced by oh, ow. */
static void pool_out_shape(const dp_tensor *x, const dp_window2d *g, int64_t *sh) {
  for (int d = 0; d < x->ndim - 2; d++) sh[d] = x->shape[d];
  sh[x->ndim - 2] = g->oh;
  sh[x->ndim - 1] = g->ow;
}

static void save_geometry(dp_node *n, const dp_window2d *g) {
  n->i[0] = g->kh, n->i[1] = g->kw, n->i[2] = g->sh, n->i[3] = g->sw, n->i[4] = g->ph, n->i[5] = g->pw;
  n->i[6] = g->oh, n->i[7] = g->ow;
  n->f[0] = (double)g->divisor; /* the integer slots are full; a divisor is far below 2^53 */
}

static dp_window2d load_geometry(const dp_node *n) {
  int nd = n->in_ndim[0], lead = nd - 4;
  const int64_t *sh = n->in_shape[0];
  dp_window2d g = {.n = lead < 0 ? 1 : sh[0],
                   .c = sh[lead + 1],
                   .h = sh[lead + 2],
                   .w = sh[lead + 3],
                   .kh = n->i[0],
                   .kw = n->i[1],
                   .sh = n->i[2],
                   .sw = n->i[3],
                   .ph = n->i[4],
                   .pw = n->i[5],
                   .dh = 1,
                   .dw = 1,
                   .oh = n->i[6],
                   .ow = n->i[7],
                   .divisor = (int64_t)n->f[0]};
  return g;
}

static int max_pool_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_window2d g = load_geometry(n);
  DP_SCOPE(s);
  dp_tensor *idx = dp_node_saved(n, 0), *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = gy ? dp_scope_add(&s, dp_empty(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gy))) : NULL;
  if (!gx || dp_backend_of(gx)->max_pool2d_backward(gx, gy, idx, &g)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_max_pool2d(dp_tensor *x, const dp_pool2d_args *a) {
  dp_window2d g;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_pool2d_input("max_pool2d", x, a, &g));
  if (!xc) return NULL;
  int64_t sh[4];
  pool_out_shape(x, &g, sh);
  dp_tensor *y = dp_scope_add(&s, dp_empty(x->dtype, x->ndim, sh, dp_dev(x)));
  dp_tensor *idx = y ? dp_scope_add(&s, dp_empty(DP_I64, x->ndim, sh, dp_dev(x))) : NULL;
  if (!idx || dp_backend_of(x)->max_pool2d(y, idx, xc, &g)) return NULL;
  dp_scope_keep(&s, y);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("MaxPool2DBackward", max_pool_backward, 1, &x, 1);
    save_geometry(n, &g);
    dp_node_save(n, idx);
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}

static int avg_pool_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_window2d g = load_geometry(n);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = gy ? dp_scope_add(&s, dp_empty(n->in_dtype[0], n->in_ndim[0], n->in_shape[0], dp_dev(gy))) : NULL;
  if (!gx || dp_backend_of(gx)->avg_pool2d_backward(gx, gy, &g)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_avg_pool2d(dp_tensor *x, const dp_pool2d_args *a) {
  dp_window2d g;
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_pool2d_input("avg_pool2d", x, a, &g));
  if (!xc) return NULL;
  int64_t sh[4];
  pool_out_shape(x, &g, sh);
  dp_tensor *y = dp_scope_add(&s, dp_empty(x->dtype, x->ndim, sh, dp_dev(x)));
  if (!y || dp_backend_of(x)->avg_pool2d(y, xc, &g)) return NULL;
  dp_scope_keep(&s, y);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("AvgPool2DBackward", avg_pool_backward, 1, &x, 1);
    save_geometry(n, &g);
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}
