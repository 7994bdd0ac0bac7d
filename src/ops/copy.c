/* Fills, copies, casts and moves between devices. */
#include <math.h>
#include <string.h>

#include "ops/op_util.h"

int dp_fill_(dp_tensor *t, double v) {
  int rc = dp_backend_of(t)->fill(t, v);
  if (!rc) dp_bump_version(t);
  return rc;
}

/* Contiguous same-dtype transfer between the CPU and a device. */
static int cross_device_copy(dp_tensor *dst, dp_tensor *src) {
  /* stage: make src contiguous + dst dtype on its own device, move, then
   * copy into dst's strides on dst's device */
  DP_SCOPE(sc);
  dp_tensor *s = src;
  if (src->dtype != dst->dtype || !dp_is_contiguous(src)) {
    s = dp_scope_add(&sc, dp_empty(dst->dtype, src->ndim, src->shape, dp_dev(src)));
    if (!s || dp_backend_of(src)->copy(s, src)) return -1;
  }
  bool direct = dp_is_contiguous(dst);
  dp_tensor *staged = direct ? dst : dp_scope_add(&sc, dp_empty(dst->dtype, dst->ndim, dst->shape, dp_dev(dst)));
  if (!staged) return -1;
  int rc;
  if (dp_dev(src).type == DP_CPU) rc = dp_backend_of(staged)->copy_from_cpu(staged, s);
  else if (dp_dev(dst).type == DP_CPU) rc = dp_backend_of(s)->copy_to_cpu(staged, s);
  else { /* device to device through the host */
    dp_tensor *h = dp_scope_add(&sc, dp_empty(s->dtype, s->ndim, s->shape, dp_cpu()));
    rc = h ? dp_backend_of(s)->copy_to_cpu(h, s) : -1;
    if (!rc) rc = dp_backend_of(staged)->copy_from_cpu(staged, h);
  }
  if (!rc && !direct) rc = dp_backend_of(dst)->copy(dst, staged);
  return rc;
}

int dp_copy_(dp_tensor *dst, dp_tensor *src) {
  DP_SCOPE(s);
  dp_tensor *e = dp_scope_add(&s, dp_expand_raw(src, dst->ndim, dst->shape));
  if (!e) {
    dp_error_prefix("copy_: ");
    return -1;
  }
  int rc;
  if (dp_device_eq(dp_dev(dst), dp_dev(src))) rc = dp_backend_of(dst)->copy(dst, e);
  else {
    dp_tensor *c = dp_scope_add(&s, dp_contiguous_raw(e)); /* materialise the broadcast first */
    rc = c ? cross_device_copy(dst, c) : -1;
  }
  if (!rc) dp_bump_version(dst);
  return rc;
}

dp_tensor *dp_copy_raw(dp_tensor *t) {
  DP_SCOPE(s);
  dp_tensor *c = dp_scope_add(&s, dp_empty(t->dtype, t->ndim, t->shape, dp_dev(t)));
  if (!c || dp_backend_of(t)->copy(c, t)) return NULL;
  return dp_scope_keep(&s, c);
}

dp_tensor *dp_contiguous_raw(dp_tensor *t) {
  if (dp_is_contiguous(t)) {
    dp_retain(t);
    return t;
  }
  return dp_copy_raw(t);
}

static int identity_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  gin[0] = dp_grad_for_input(n, 0, (dp_retain(gout[0]), gout[0]));
  return gin[0] ? 0 : -1;
}

static dp_tensor *with_identity_grad(dp_tensor *in, dp_tensor *out, const char *name) {
  if (out && dp_any_requires_grad(1, &in)) {
    dp_node *n = dp_node_new(name, identity_backward, 1, &in, 1);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_contiguous(dp_tensor *t) {
  if (dp_is_contiguous(t)) {
    dp_retain(t);
    return t;
  }
  return with_identity_grad(t, dp_copy_raw(t), "CloneBackward");
}

dp_tensor *dp_clone(dp_tensor *t) { return with_identity_grad(t, dp_copy_raw(t), "CloneBackward"); }

dp_tensor *dp_detach(dp_tensor *t) { return dp_alias(t); }

/* Gradient of a cast/move: cast/move back (dp_grad_for_input casts dtype;
 * the device move is done here). */
static int to_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_device dev = {(int8_t)n->i[0], (int8_t)n->i[1]};
  dp_tensor *g = dp_to(gout[0], n->in_dtype[0], dev);
  gin[0] = g;
  return g ? 0 : -1;
}

dp_tensor *dp_to(dp_tensor *t, dp_dtype dt, dp_device dev) {
  if (t->dtype == dt && dp_device_eq(dp_dev(t), dev)) {
    dp_retain(t);
    return t;
  }
  if (dev.type != DP_CPU && !dp_backend_require(dev.type)) return NULL;
  DP_SCOPE(s);
  dp_tensor *out = dp_scope_add(&s, dp_empty(dt, t->ndim, t->shape, dev));
  if (!out || dp_copy_(out, t)) return NULL;
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &t) && dp_dtype_is_float(dt)) {
    dp_node *n = dp_node_new("ToCopyBackward", to_backward, 1, &t, 1);
    n->i[0] = dp_dev(t).type;
    n->i[1] = dp_dev(t).index;
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

dp_tensor *dp_arange(double start, double end, double step, dp_dtype dt, dp_device dev) {
  if (step == 0 || isnan(step) || isnan(start) || isnan(end)) {
    dp_error("arange: step must be non-zero and bounds finite (start=%g, end=%g, step=%g)", start, end, step);
    return NULL;
  }
  double cnt = ceil((end - start) / step);
  if (cnt < 0) cnt = 0;
  if (cnt > 1e12) {
    dp_error("arange: %g elements is too many", cnt);
    return NULL;
  }
  int64_t n = (int64_t)cnt;
  DP_SCOPE(s);
  dp_tensor *out = dp_scope_add(&s, dp_empty(dt, 1, &n, dev));
  if (!out || dp_backend_of(out)->arange(out, start, step)) return NULL;
  return dp_scope_keep(&s, out);
}
