/* 3-d convolution by a backend's direct kernel (oneDNN on the CPU: its
 * blocked-layout 3-d convolutions, forward and both backwards), for
 * nn/conv3d.lua. Where no backend kernel takes the case (another device,
 * a dtype other than float32, autocast on, an empty batch, oneDNN not
 * built or declining the shape) dp_conv3d_direct declines: it returns NULL
 * with *declined set and no error, and the Lua layer composes the
 * convolution from 2-d ones, whose paths cover every device and dtype.
 * A case taken forward is taken backward: the backward primitives exist
 * wherever the forward one does (oneDNN's reference kernels at worst), and
 * a backend that declines there is an error naming the shapes. */
#include "ops/autocast.h"
#include "ops/op_util.h"

/* The geometry of x [n, c, d, h, w] under w [o, c / groups, kd, kh, kw]: -1 (no error set) when the window leaves
 * no output position along some axis. */
static int window3_of(dp_window3d *g, const int64_t *xs, const int64_t *ws, const dp_conv3d_args *a) {
  *g = (dp_window3d){.n = xs[0],
                     .c = xs[1],
                     .d = xs[2],
                     .h = xs[3],
                     .w = xs[4],
                     .kd = ws[2],
                     .kh = ws[3],
                     .kw = ws[4],
                     .sd = a->stride[0],
                     .sh = a->stride[1],
                     .sw = a->stride[2],
                     .pd = a->padding[0],
                     .ph = a->padding[1],
                     .pw = a->padding[2],
                     .dd = a->dilation[0],
                     .dh = a->dilation[1],
                     .dw = a->dilation[2],
                     .groups = a->groups};
  if (dp_window_size(g->d, g->kd, g->sd, g->pd, g->dd, false, &g->od) ||
      dp_window_size(g->h, g->kh, g->sh, g->ph, g->dh, false, &g->oh) ||
      dp_window_size(g->w, g->kw, g->sw, g->pw, g->dw, false, &g->ow) || g->od < 1 || g->oh < 1 || g->ow < 1)
    return -1;
  return 0;
}

static int check_args(const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_conv3d_args *a) {
  if (x->ndim != 5) return dp_error("conv3d: expected a 5-dimensional input [N, C, D, H, W], got shape %s", SHAPE(x));
  if (w->ndim != 5)
    return dp_error("conv3d: weight must be 5-dimensional [out_channels, in_channels / groups, kd, kh, kw], got "
                    "shape %s",
                    SHAPE(w));
  if (a->groups < 1) return dp_error("conv3d: groups must be >= 1, got %" PRId64, a->groups);
  if (w->shape[0] < 1 || w->shape[1] < 1 || w->shape[0] % a->groups)
    return dp_error(
        "conv3d: weight of shape %s needs output and input channels, the outputs divisible by groups %" PRId64,
        SHAPE(w), a->groups);
  if (x->shape[1] % a->groups || x->shape[1] / a->groups != w->shape[1])
    return dp_error("conv3d: input has %" PRId64 " channels (shape %s) but weight of shape %s with groups %" PRId64
                    " expects %" PRId64 " input channels",
                    x->shape[1], SHAPE(x), SHAPE(w), a->groups, w->shape[1] * a->groups);
  if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
    return dp_error("conv3d: bias of shape %s does not match weight %s (expected [%" PRId64 "])", SHAPE(b), SHAPE(w),
                    w->shape[0]);
  if (x->dtype != w->dtype || (b && b->dtype != w->dtype) || !dp_dtype_is_float(w->dtype))
    return dp_error("conv3d: input, weight and bias must share one floating point dtype, got %s, %s%s%s",
                    dp_dtype_name(x->dtype), dp_dtype_name(w->dtype), b ? " and " : "",
                    b ? dp_dtype_name(b->dtype) : "");
  if (dp_check_same_device("conv3d", x, w) || (b && dp_check_same_device("conv3d", x, b))) return -1;
  for (int d = 0; d < 3; d++) {
    if (a->stride[d] < 1) return dp_error("conv3d: stride must be >= 1, got %" PRId64, a->stride[d]);
    if (a->padding[d] < 0) return dp_error("conv3d: padding must be >= 0, got %" PRId64, a->padding[d]);
    if (a->dilation[d] < 1) return dp_error("conv3d: dilation must be >= 1, got %" PRId64, a->dilation[d]);
  }
  dp_window3d g;
  if (window3_of(&g, x->shape, w->shape, a))
    return dp_error("conv3d: kernel %s (dilation %" PRId64 "x%" PRId64 "x%" PRId64 ") does not fit the input %s "
                    "padded by %" PRId64 "x%" PRId64 "x%" PRId64,
                    SHAPE(w), a->dilation[0], a->dilation[1], a->dilation[2], SHAPE(x), a->padding[0], a->padding[1],
                    a->padding[2]);
  if (dp_check_shape(5, (int64_t[]){g.n, w->shape[0], g.od, g.oh, g.ow})) {
    dp_error_prefix("conv3d: the output: ");
    return -1;
  }
  return 0;
}

/* The node keeps stride and padding in i[0..5], groups in i[6] and the dilation in f[0..2] (a node holds 8
 * integers; the dilations are small integers, exact in a double). */
static dp_conv3d_args load_args(const dp_node *n) {
  dp_conv3d_args a = {{n->i[0], n->i[1], n->i[2]},
                      {n->i[3], n->i[4], n->i[5]},
                      {(int64_t)n->f[0], (int64_t)n->f[1], (int64_t)n->f[2]},
                      n->i[6]};
  return a;
}

static int conv3d_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *w = dp_node_saved(n, 1);
  dp_conv3d_args a = load_args(n);
  dp_window3d g;
  window3_of(&g, x->shape, w->shape, &a);
  bool want_x = dp_node_needs(n, 0), want_w = dp_node_needs(n, 1), want_b = n->n_inputs > 2 && dp_node_needs(n, 2);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = NULL, *gw = NULL, *gb = NULL;
  if (!gy) return -1;
  int64_t o = w->shape[0];
  if (want_x && !(gx = dp_scope_add(&s, dp_empty(x->dtype, 5, x->shape, dp_dev(x))))) return -1;
  if (want_w && !(gw = dp_scope_add(&s, dp_empty(w->dtype, 5, w->shape, dp_dev(w))))) return -1;
  if (want_b && !(gb = dp_scope_add(&s, dp_empty(gy->dtype, 1, &o, dp_dev(gy))))) return -1;
  const dp_backend *be = dp_backend_of(gy);
  if (want_x || want_w) {
    int rc = be->conv3d_backward ? be->conv3d_backward(gx, gw, want_w ? gb : NULL, gy, x, w, &g) : 0;
    if (rc < 0) return -1;
    if (rc == 0)
      return dp_error("conv3d: the %s backend declined the gradients of a convolution it ran forward (input %s, "
                      "weight %s)",
                      be->name, SHAPE(x), SHAPE(w));
  }
  if (want_b && !want_w && be->channel_sum(gb, gy, g.n, o, g.od * g.oh * g.ow)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  gin[1] = dp_scope_keep(&s, gw);
  if (want_b) gin[2] = dp_scope_keep(&s, gb);
  return 0;
}

dp_tensor *dp_conv3d_direct(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv3d_args *a, bool *declined) {
  *declined = false;
  if (check_args(x, w, b, a)) return NULL;
  const dp_backend *be = dp_backend_of(x);
  if (!be->conv3d || !be->conv3d_backward || x->dtype != DP_F32 || dp_autocast_get().enabled || x->shape[0] < 1) {
    *declined = true;
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x)), *wc = xc ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL;
  dp_tensor *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  if (!wc || (b && !bc)) return NULL;
  dp_window3d g;
  window3_of(&g, xc->shape, wc->shape, a);
  int64_t o = wc->shape[0];
  dp_tensor *out = dp_scope_add(&s, dp_empty(DP_F32, 5, (int64_t[]){g.n, o, g.od, g.oh, g.ow}, dp_dev(xc)));
  if (!out) {
    dp_error_prefix("conv3d: the output: ");
    return NULL;
  }
  int rc = be->conv3d(out, xc, wc, bc, &g);
  if (rc <= 0) {
    *declined = rc == 0;
    return NULL;
  }
  dp_scope_keep(&s, out);
  dp_tensor *ins[3] = {x, w, b};
  if (dp_any_requires_grad(b ? 3 : 2, ins)) {
    dp_node *n = dp_node_new("Convolution3dBackward", conv3d_backward, b ? 3 : 2, ins, 1);
    for (int d = 0; d < 3; d++) n->i[d] = a->stride[d], n->i[3 + d] = a->padding[d], n->f[d] = (double)a->dilation[d];
    n->i[6] = a->groups;
    dp_node_save(n, xc);
    dp_node_save(n, wc);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* ---- the transposed 3-d convolution: the input gradient of a convolution from its output's shape (y) to its
 * input's (x), weights [C, O / groups, kd, kh, kw] read as that convolution's [out, in / groups, ...]. Forward is
 * the backward-data kernel, the input gradient a forward convolution, the weight gradient the weight kernel with
 * the roles of x and y exchanged. ---- */

/* The geometry of the convolution whose input gradient x -> y is: its input y, its output x. */
static int transposed_window(dp_window3d *g, const dp_tensor *x, const dp_tensor *w, const dp_conv_transpose3d_args *a,
                             int64_t ysh[5]) {
  ysh[0] = x->shape[0], ysh[1] = w->shape[1] * a->groups;
  for (int d = 0; d < 3; d++)
    ysh[2 + d] = (x->shape[2 + d] - 1) * a->stride[d] - 2 * a->padding[d] + a->dilation[d] * (w->shape[2 + d] - 1) +
                 a->output_padding[d] + 1;
  dp_conv3d_args c = {{a->stride[0], a->stride[1], a->stride[2]},
                      {a->padding[0], a->padding[1], a->padding[2]},
                      {a->dilation[0], a->dilation[1], a->dilation[2]},
                      a->groups};
  return window3_of(g, ysh, w->shape, &c) || g->od != x->shape[2] || g->oh != x->shape[3] || g->ow != x->shape[4];
}

static int check_transposed(const dp_tensor *x, const dp_tensor *w, const dp_tensor *b,
                            const dp_conv_transpose3d_args *a) {
  if (x->ndim != 5 || w->ndim != 5)
    return dp_error("conv_transpose3d: expected a 5-dimensional input and weight, got shapes %s and %s", SHAPE(x),
                    SHAPE(w));
  if (a->groups < 1 || w->shape[0] < 1 || w->shape[1] < 1 || x->shape[1] != w->shape[0] || w->shape[0] % a->groups)
    return dp_error("conv_transpose3d: input of shape %s and weight of shape %s with groups %" PRId64
                    " do not match (weight [in_channels, out_channels / groups, kd, kh, kw])",
                    SHAPE(x), SHAPE(w), a->groups);
  if (b && (b->ndim != 1 || b->shape[0] != w->shape[1] * a->groups))
    return dp_error("conv_transpose3d: bias of shape %s, expected [%" PRId64 "]", SHAPE(b), w->shape[1] * a->groups);
  if (x->dtype != w->dtype || (b && b->dtype != w->dtype) || !dp_dtype_is_float(w->dtype))
    return dp_error("conv_transpose3d: input, weight and bias must share one floating point dtype, got %s and %s",
                    dp_dtype_name(x->dtype), dp_dtype_name(w->dtype));
  if (dp_check_same_device("conv_transpose3d", x, w) || (b && dp_check_same_device("conv_transpose3d", x, b)))
    return -1;
  for (int d = 0; d < 3; d++) {
    if (a->stride[d] < 1 || a->dilation[d] < 1 || a->padding[d] < 0 || a->output_padding[d] < 0 ||
        (a->output_padding[d] >= a->stride[d] && a->output_padding[d] >= a->dilation[d]))
      return dp_error("conv_transpose3d: stride and dilation must be >= 1, padding >= 0 and output_padding below the "
                      "stride or the dilation, got %" PRId64 ", %" PRId64 ", %" PRId64 " and %" PRId64 " in dim %d",
                      a->stride[d], a->dilation[d], a->padding[d], a->output_padding[d], d + 3);
    /* sizes that cannot overflow: each factor within 2^20 (a hostile size fails here, not in the arithmetic) */
    if (a->stride[d] > (1 << 20) || a->dilation[d] > (1 << 20) || a->padding[d] > (1 << 20) ||
        w->shape[2 + d] > (1 << 20))
      return dp_error("conv_transpose3d: stride, dilation, padding and kernel must be at most 2^20 each");
  }
  dp_window3d g;
  int64_t ysh[5];
  transposed_window(&g, x, w, a, ysh);
  if (ysh[2] < 1 || ysh[3] < 1 || ysh[4] < 1)
    return dp_error("conv_transpose3d: no output for the input %s and weight %s with these settings", SHAPE(x),
                    SHAPE(w));
  if (dp_check_shape(5, ysh)) {
    dp_error_prefix("conv_transpose3d: the output: ");
    return -1;
  }
  return 0;
}

/* stride and padding in i[0..5], groups in i[6], output_padding in f[0..2] and the dilation in f[3..5] */
static dp_conv_transpose3d_args load_transposed(const dp_node *n) {
  dp_conv_transpose3d_args a = {{n->i[0], n->i[1], n->i[2]},
                                {n->i[3], n->i[4], n->i[5]},
                                {(int64_t)n->f[0], (int64_t)n->f[1], (int64_t)n->f[2]},
                                {(int64_t)n->f[3], (int64_t)n->f[4], (int64_t)n->f[5]},
                                n->i[6]};
  return a;
}

static int conv_transpose3d_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *w = dp_node_saved(n, 1);
  dp_conv_transpose3d_args a = load_transposed(n);
  dp_window3d g;
  int64_t ysh[5];
  transposed_window(&g, x, w, &a, ysh);
  bool want_x = dp_node_needs(n, 0), want_w = dp_node_needs(n, 1), want_b = n->n_inputs > 2 && dp_node_needs(n, 2);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = NULL, *gw = NULL, *gb = NULL;
  if (!gy) return -1;
  if (want_x && !(gx = dp_scope_add(&s, dp_empty(x->dtype, 5, x->shape, dp_dev(x))))) return -1;
  if (want_w && !(gw = dp_scope_add(&s, dp_empty(w->dtype, 5, w->shape, dp_dev(w))))) return -1;
  if (want_b && !(gb = dp_scope_add(&s, dp_empty(gy->dtype, 1, &ysh[1], dp_dev(gy))))) return -1;
  const dp_backend *be = dp_backend_of(gy);
  int rc = 1;
  if (want_x) rc = be->conv3d(gx, gy, w, NULL, &g); /* the input gradient: a convolution of gy */
  if (rc > 0 && want_w) rc = be->conv3d_backward(NULL, gw, NULL, x, gy, w, &g); /* x is that convolution's gy */
  if (rc < 0) return -1;
  if (rc == 0)
    return dp_error("conv_transpose3d: the %s backend declined the gradients of a convolution it ran forward (input "
                    "%s, weight %s)",
                    be->name, SHAPE(x), SHAPE(w));
  if (want_b && be->channel_sum(gb, gy, ysh[0], ysh[1], ysh[2] * ysh[3] * ysh[4])) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  gin[1] = dp_scope_keep(&s, gw);
  if (want_b) gin[2] = dp_scope_keep(&s, gb);
  return 0;
}

dp_tensor *dp_conv_transpose3d_direct(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv_transpose3d_args *a,
                                      bool *declined) {
  *declined = false;
  if (check_transposed(x, w, b, a)) return NULL;
  const dp_backend *be = dp_backend_of(x);
  /* composed instead: an output padding past the padding (oneDNN would get a negative padding), or one of a
   * dilation past the stride, whose last positions no window of the convolution reaches */
  bool pads_ok = true;
  for (int d = 0; d < 3; d++) pads_ok = pads_ok && a->output_padding[d] <= a->padding[d];
  dp_window3d g0;
  int64_t ysh0[5];
  if (!be->conv3d || !be->conv3d_backward || x->dtype != DP_F32 || dp_autocast_get().enabled || x->shape[0] < 1 ||
      !pads_ok || transposed_window(&g0, x, w, a, ysh0)) {
    *declined = true;
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x)), *wc = xc ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL;
  dp_tensor *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  if (!wc || (b && !bc)) return NULL;
  dp_window3d g;
  int64_t ysh[5];
  transposed_window(&g, xc, wc, a, ysh);
  dp_tensor *out = dp_scope_add(&s, dp_empty(DP_F32, 5, ysh, dp_dev(xc)));
  if (!out) {
    dp_error_prefix("conv_transpose3d: the output: ");
    return NULL;
  }
  /* the output is the convolution's input gradient (its "input" argument only gives dtype and shape) */
  int rc = be->conv3d_backward(out, NULL, NULL, xc, out, wc, &g);
  if (rc <= 0) {
    *declined = rc == 0;
    return NULL;
  }
  if (bc && be->bias_act(out, bc, NULL, ysh[0], ysh[1], ysh[2] * ysh[3] * ysh[4])) return NULL;
  dp_scope_keep(&s, out);
  dp_tensor *ins[3] = {x, w, b};
  if (dp_any_requires_grad(b ? 3 : 2, ins)) {
    dp_node *n = dp_node_new("ConvolutionTranspose3dBackward", conv_transpose3d_backward, b ? 3 : 2, ins, 1);
    for (int d = 0; d < 3; d++) {
      n->i[d] = a->stride[d], n->i[3 + d] = a->padding[d];
      n->f[d] = (double)a->output_padding[d], n->f[3 + d] = (double)a->dilation[d];
    }
    n->i[6] = a->groups;
    dp_node_save(n, xc);
    dp_node_save(n, wc);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}
