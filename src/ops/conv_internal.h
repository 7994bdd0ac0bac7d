/* What conv.c shares with conv_transpose.c (not part of the public op
 * API): a convolution's geometry and its two directions, dispatched as
 * conv2d does (one window, unrolled weights, the backend's direct
 * convolution, im2col + GEMM). A transposed convolution is the gradient of
 * a convolution with respect to its input, and its gradients are a
 * convolution and a convolution's weight gradient. */
#ifndef DP_CONV_INTERNAL_H
#define DP_CONV_INTERNAL_H

#include "ops/op_util.h"

typedef struct {
  dp_window2d g;
  int64_t groups;
  int64_t outc, opg, cpg; /* output channels; per group: output and input channels */
  int64_t ck, L;          /* GEMM depth per group (C/G*kh*kw), oh*ow */
  bool direct;            /* 1x1, stride 1, no padding or dilation: cols are x */
} conv_geom;

/* The geometry of a convolution of an input [n, c, h, w] by w [O, C/G, kh,
 * kw]: -1 (no error set) when the window leaves no output position. */
int dp_conv_geometry(conv_geom *cg, const int64_t nchw[4], const dp_tensor *w, const dp_conv2d_args *a);

/* out [n, O, oh, ow] = conv(xc, wc) + bc (bc may be NULL); all contiguous */
int dp_conv_forward(dp_tensor *out, dp_tensor *xc, dp_tensor *wc, dp_tensor *bc, const conv_geom *cg);

/* From gy [n, O, oh, ow] (contiguous): gx (the input's shape), gw (w's),
 * gb ([O]), each computed when not NULL; x (contiguous) is read only for
 * gw and may be NULL without it. */
int dp_conv_grads(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, dp_tensor *gy, dp_tensor *x, dp_tensor *w,
                  const conv_geom *cg);

#endif
