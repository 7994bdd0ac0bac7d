/* conv_transpose2d (PyTorch's F.conv_transpose2d), and its gradients.
 *
 * A transposed convolution of x [N, Cin, H, W] by w [Cin, Cout/G, kh, kw]
 * is the gradient, with respect to its input, of the convolution by w (w
 * read as conv2d's [O = Cin, C/G = Cout/G, kh, kw]) of an input [N, Cout,
 * Ho, Wo], Ho = (H - 1) sh - 2 ph + dh (kh - 1) + oph + 1, at an output
 * gradient x. So it runs conv.c's gradient dispatch (dp_conv_grads with the
 * input gradient only: oneDNN's backward-data or col2im + GEMM), and its
 * own gradients are that convolution's other two directions:
 *   gx = conv2d(gy, w)                         (dp_conv_forward)
 *   gw = conv2d's weight gradient, input gy, output gradient x
 *   gb = gy summed over N, Ho, Wo
 * output_padding (extra rows and columns at the bottom and right, which no
 * input pixel reaches) must be below the stride: then conv2d over [Ho, Wo]
 * gives back exactly H x W positions. PyTorch also takes an
 * output_padding below the dilation alone; ddplua refuses that, saying so. */
#include "ops/autocast.h"
#include "ops/conv_internal.h"

static const char *const OP = "conv_transpose2d";

static int check_args(const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_conv_transpose2d_args *a,
                      int64_t out_hw[2]) {
  if (x->ndim != 4)
    return dp_error("%s: expected a 4-dimensional input [N, C, H, W] (or 3-dimensional [C, H, W]), got shape %s", OP,
                    SHAPE(x));
  if (w->ndim != 4)
    return dp_error("%s: weight must be 4-dimensional [in_channels, out_channels / groups, kh, kw], got shape %s", OP,
                    SHAPE(w));
  if (a->groups < 1) return dp_error("%s: groups must be >= 1, got %" PRId64, OP, a->groups);
  if (w->shape[0] < 1 || w->shape[1] < 1 || w->shape[2] < 1 || w->shape[3] < 1)
    return dp_error("%s: weight of shape %s has no channels or an empty kernel", OP, SHAPE(w));
  if (x->shape[1] != w->shape[0])
    return dp_error("%s: input has %" PRId64 " channels (shape %s) but weight of shape %s expects %" PRId64, OP,
                    x->shape[1], SHAPE(x), SHAPE(w), w->shape[0]);
  if (w->shape[0] % a->groups)
    return dp_error("%s: in_channels %" PRId64 " (weight shape %s) must be divisible by groups %" PRId64, OP,
                    w->shape[0], SHAPE(w), a->groups);
  int64_t cout = w->shape[1] * a->groups;
  if (b && (b->ndim != 1 || b->shape[0] != cout))
    return dp_error("%s: bias of shape %s does not match weight %s with groups %" PRId64 " (expected [%" PRId64 "])",
                    OP, SHAPE(b), SHAPE(w), a->groups, cout);
  if (x->dtype != w->dtype || (b && b->dtype != w->dtype) || !dp_dtype_is_float(w->dtype))
    return dp_error("%s: input, weight and bias must share one floating point dtype, got %s, %s%s%s", OP,
                    dp_dtype_name(x->dtype), dp_dtype_name(w->dtype), b ? " and " : "",
                    b ? dp_dtype_name(b->dtype) : "");
  if (dp_check_same_device(OP, x, w) || (b && dp_check_same_device(OP, x, b))) return -1;
  for (int d = 0; d < 2; d++) {
    const char *hw = d ? "width" : "height";
    if (a->stride[d] < 1) return dp_error("%s: stride must be >= 1, got %" PRId64, OP, a->stride[d]);
    if (a->padding[d] < 0) return dp_error("%s: padding must be >= 0, got %" PRId64, OP, a->padding[d]);
    if (a->dilation[d] < 1) return dp_error("%s: dilation must be >= 1, got %" PRId64, OP, a->dilation[d]);
    if (a->output_padding[d] < 0 || a->output_padding[d] >= a->stride[d])
      return dp_error("%s: output_padding %" PRId64 " must be >= 0 and smaller than the stride %" PRId64
                      " (PyTorch also takes one below the dilation alone; ddplua does not)",
                      OP, a->output_padding[d], a->stride[d]);
    int64_t in = x->shape[2 + d], k = w->shape[2 + d];
    /* (in - 1) s - 2 p + d (k - 1) + op + 1, in int64 that cannot overflow for sizes a tensor can have */
    if (in > ((int64_t)1 << 40) || a->stride[d] > ((int64_t)1 << 20) || a->dilation[d] > ((int64_t)1 << 20) ||
        a->padding[d] > ((int64_t)1 << 40) || k > ((int64_t)1 << 20))
      return dp_error("%s: sizes, stride, padding or dilation out of range (input %s, weight %s)", OP, SHAPE(x),
                      SHAPE(w));
    out_hw[d] = (in - 1) * a->stride[d] - 2 * a->padding[d] + a->dilation[d] * (k - 1) + a->output_padding[d] + 1;
    if (in < 1 || out_hw[d] < 1)
      return dp_error("%s: the output %s would be %" PRId64 " (input %s, weight %s, stride %" PRId64
                      ", padding %" PRId64 ", dilation %" PRId64 ", output_padding %" PRId64 "): expected >= 1",
                      OP, hw, out_hw[d], SHAPE(x), SHAPE(w), a->stride[d], a->padding[d], a->dilation[d],
                      a->output_padding[d]);
  }
  return 0;
}

/* the equivalent convolution's arguments (output_padding plays no part in it) */
static dp_conv2d_args conv_args(const dp_conv_transpose2d_args *a) {
  dp_conv2d_args c = {
      {a->stride[0], a->stride[1]}, {a->padding[0], a->padding[1]}, {a->dilation[0], a->dilation[1]}, a->groups};
  return c;
}

static int conv_transpose2d_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *w = dp_node_saved(n, 1);
  dp_conv2d_args a = {{n->i[0], n->i[1]}, {n->i[2], n->i[3]}, {n->i[4], n->i[5]}, n->i[6]};
  bool want_x = dp_node_needs(n, 0), want_w = dp_node_needs(n, 1), want_b = n->n_inputs > 2 && dp_node_needs(n, 2);
  DP_SCOPE(s);
  /* [N, Cout, Ho, Wo] (an unbatched output's gradient lifted to N = 1, as the forward lifted x) */
  dp_tensor *g4 =
      gout[0]->ndim == 3
          ? dp_scope_add(
                &s, dp_reshape(gout[0], 4, (int64_t[]){1, gout[0]->shape[0], gout[0]->shape[1], gout[0]->shape[2]}))
          : gout[0];
  dp_tensor *gy = g4 ? dp_scope_add(&s, dp_contiguous_raw(g4)) : NULL;
  conv_geom cg;
  if (!gy || dp_conv_geometry(&cg, gy->shape, w, &a)) return gy ? dp_error("%s: backward geometry", OP) : -1;
  dp_tensor *gx = NULL, *gw = NULL, *gb = NULL;
  bool none = cg.g.n == 0; /* an empty batch: zero gradients, no convolution to run */
  if (want_x && !(gx = dp_scope_add(&s, dp_empty(x->dtype, 4, x->shape, dp_dev(x))))) return -1;
  if (want_w && !(gw = dp_scope_add(&s, dp_empty(w->dtype, 4, w->shape, dp_dev(w))))) return -1;
  if (want_b && !(gb = dp_scope_add(&s, dp_empty(gy->dtype, 1, &gy->shape[1], dp_dev(gy))))) return -1;
  if (none) {
    if ((gw && dp_fill_(gw, 0.0)) || (gb && dp_fill_(gb, 0.0))) return -1;
  } else {
    if (gx && dp_conv_forward(gx, gy, w, NULL, &cg)) return -1;
    /* the weight gradient of the convolution gy -> x, whose output gradient x is */
    if (gw && dp_conv_grads(NULL, gw, NULL, x, gy, w, &cg)) return -1;
    if (gb && dp_backend_of(gy)->channel_sum(gb, gy, cg.g.n, gy->shape[1], gy->shape[2] * gy->shape[3])) return -1;
  }
  if (gx && n->in_ndim[0] == 3 && !(gx = dp_scope_add(&s, dp_reshape(gx, 3, n->in_shape[0])))) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  gin[1] = dp_scope_keep(&s, gw);
  if (want_b) gin[2] = dp_scope_keep(&s, gb);
  return 0;
}

static dp_tensor *conv_transpose2d_impl(dp_tensor *x_in, dp_tensor *w, dp_tensor *b,
                                        const dp_conv_transpose2d_args *a) {
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *x = x_in->ndim == 3 ? dp_scope_add(&s, dp_unsqueeze(x_in, 0)) : x_in;
  dp_set_grad_enabled(prev);
  int64_t hw[2];
  if (!x || check_args(x, w, b, a, hw)) return NULL;
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x)), *wc = xc ? dp_scope_add(&s, dp_contiguous_raw(w)) : NULL;
  dp_tensor *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  if (!wc || (b && !bc)) return NULL;
  int64_t n = xc->shape[0], cout = wc->shape[1] * a->groups, ysh[4] = {n, cout, hw[0], hw[1]};
  dp_conv2d_args ca = conv_args(a);
  conv_geom cg;
  if (dp_conv_geometry(&cg, ysh, wc, &ca) || cg.g.oh != xc->shape[2] || cg.g.ow != xc->shape[3]) {
    dp_error("%s: internal geometry mismatch for input %s and weight %s", OP, SHAPE(xc), SHAPE(wc));
    return NULL;
  }
  dp_tensor *y = dp_scope_add(&s, dp_empty(xc->dtype, 4, ysh, dp_dev(xc)));
  if (!y) return NULL;
  if (n > 0) {
    if (dp_conv_grads(y, NULL, NULL, xc, NULL, wc, &cg)) return NULL;
    if (bc && dp_backend_of(y)->bias_act(y, bc, NULL, n, cout, hw[0] * hw[1])) return NULL;
  }
  if (x_in->ndim == 3 && !(y = dp_scope_add(&s, dp_reshape(y, 3, (int64_t[]){cout, hw[0], hw[1]})))) return NULL;
  dp_scope_keep(&s, y);
  dp_tensor *ins[3] = {x_in, w, b};
  if (dp_any_requires_grad(b ? 3 : 2, ins)) {
    dp_node *nd = dp_node_new("ConvolutionBackward", conv_transpose2d_backward, b ? 3 : 2, ins, 1);
    nd->i[0] = ca.stride[0], nd->i[1] = ca.stride[1], nd->i[2] = ca.padding[0], nd->i[3] = ca.padding[1];
    nd->i[4] = ca.dilation[0], nd->i[5] = ca.dilation[1], nd->i[6] = ca.groups;
    dp_node_save(nd, xc);
    dp_node_save(nd, wc);
    dp_node_attach(nd, y, 0);
    dp_node_release(nd);
  }
  return y;
}

/* autocast casts float32 operands to its dtype first, as for conv2d */
dp_tensor *dp_conv_transpose2d(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv_transpose2d_args *a) {
  dp_autocast_scope ac;
  if (dp_autocast_cast(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, conv_transpose2d_impl(x, w, b, a));
}
