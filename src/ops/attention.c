/* scaled_dot_product_attention as one fused op: the checks (shapes,
 * dtypes, devices, the mask's broadcast, PyTorch's rule that attn_mask and
 * is_causal exclude each other), the folding of any batch dims into the
 * two the kernels take, and the autograd node. The kernels (flash
 * attention's tiled online softmax: backends/backend.h, dp_attn_args)
 * keep no [L, S] matrix: the node saves q, k, v (views of the caller's
 * tensors), the mask, the output and the rows' log-sum-exp, and the
 * backward recomputes the scores; dropout keeps only its Philox (seed,
 * offset), as nn.Dropout does. */
#include <math.h>
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"

/* t's leading nb dims folded into two ([b1, b2, rows, cols], b2 the last
 * batch dim, b1 the product of the others) as a strided view; NULL (no
 * error set) when the dims before the last do not step as one run. */
static dp_tensor *fold4(dp_tensor *t, int nb) {
  int64_t sh[4] = {1, 1, t->shape[nb], t->shape[nb + 1]}, st[4] = {0, 0, t->stride[nb], t->stride[nb + 1]};
  if (nb >= 1) sh[1] = t->shape[nb - 1], st[1] = t->stride[nb - 1];
  bool started = false;
  for (int d = nb - 2; d >= 0; d--) { /* inner to outer: each dim must step over the run folded so far */
    if (t->shape[d] == 1) continue;
    if (!started) st[0] = t->stride[d], started = true;
    else if (t->stride[d] != st[0] * sh[0]) return NULL;
    sh[0] *= t->shape[d];
  }
  return dp_as_strided(t, 4, sh, st, t->offset);
}

/* A [b1, b2, rows, cols] view of t, with unit stride along its last dim
 * when unit_last (copying when t's strides do not allow it). */
static dp_tensor *as4(dp_scope *s, dp_tensor *t, int nb, bool unit_last) {
  bool unit = !unit_last || t->shape[t->ndim - 1] <= 1 || t->stride[t->ndim - 1] == 1;
  dp_tensor *v = unit ? fold4(t, nb) : NULL;
  if (v) return dp_scope_add(s, v);
  dp_tensor *c = dp_scope_add(s, dp_contiguous_raw(t));
  return c ? dp_scope_add(s, fold4(c, nb)) : NULL;
}

static int attention_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *q = dp_node_saved(n, 0), *k = dp_node_saved(n, 1), *v = dp_node_saved(n, 2);
  dp_tensor *mask = dp_node_saved(n, 3), *out = dp_node_saved(n, 4), *lse = dp_node_saved(n, 5);
  dp_attn_args a = {.b1 = q->shape[0],
                    .b2 = q->shape[1],
                    .L = q->shape[2],
                    .S = k->shape[2],
                    .E = q->shape[3],
                    .Ev = v->shape[3],
                    .q = q,
                    .k = k,
                    .v = v,
                    .mask = mask,
                    .mask_bool = n->i[0],
                    .causal = n->i[1],
                    .scale = n->f[0],
                    .dropout_p = n->f[1],
                    .seed = (uint64_t)n->i[2],
                    .offset = (uint64_t)n->i[3],
                    .out = out,
                    .lse = lse};
  DP_SCOPE(s);
  /* the CPU kernels read any [b1, b2, L, Ev] view with a unit last stride (the transposed gradient of an output
   * merged back to [B, T, C] costs no copy); the others take it contiguous */
  int nb = n->in_ndim[0] - 2;
  dp_tensor *gc = dp_dev(q).type == DP_CPU ? as4(&s, gout[0], nb, true)
                                           : as4(&s, dp_scope_add(&s, dp_contiguous_raw(gout[0])), nb, true);
  dp_tensor *gq = dp_scope_add(&s, dp_empty(q->dtype, 4, q->shape, dp_dev(q)));
  dp_tensor *gk = dp_scope_add(&s, dp_empty(k->dtype, 4, k->shape, dp_dev(q)));
  dp_tensor *gv = dp_scope_add(&s, dp_empty(v->dtype, 4, v->shape, dp_dev(q)));
  bool want_mask = mask && !a.mask_bool && dp_node_needs(n, 3);
  int64_t msh[4] = {a.b1, a.b2, a.L, a.S};
  /* float32 for the CPU's bfloat16: summed over the mask's broadcast, then rounded once (dp_grad_for_input) */
  dp_dtype gmt = dp_attention_keeps_f32_out(q) ? DP_F32 : q->dtype;
  dp_tensor *gm = want_mask ? dp_scope_add(&s, dp_empty(gmt, 4, msh, dp_dev(q))) : NULL;
  if (!gc || !gq || !gk || !gv || (want_mask && !gm)) return -1;
  a.gout = gc;
  if (dp_backend_of(q)->attention_backward(gq, gk, gv, gm, &a)) return -1;
  dp_tensor *gs[3] = {gq, gk, gv};
  for (int i = 0; i < 3; i++)
    if (dp_node_needs(n, i) && !(gin[i] = dp_reshape(gs[i], n->in_ndim[i], n->in_shape[i]))) return -1;
  if (want_mask) { /* the scores' gradient, summed over the mask's broadcast dims */
    int nd = n->in_ndim[0];
    int64_t full[DP_MAXDIM];
    memcpy(full, n->in_shape[0], sizeof(int64_t) * (size_t)nd);
    full[nd - 1] = a.S;
    dp_tensor *g = dp_scope_add(&s, dp_reshape(gm, nd, full));
    if (!g || !(gin[3] = dp_grad_for_input(n, 3, dp_scope_keep(&s, g)))) return -1;
  }
  return 0;
}

static int check_inputs(dp_tensor *q, dp_tensor *k, dp_tensor *v) {
  const char *op = "scaled_dot_product_attention";
  dp_tensor *ts[3] = {q, k, v};
  const char *names[3] = {"query", "key", "value"};
  for (int i = 0; i < 3; i++) {
    if (ts[i]->ndim < 2)
      return dp_error("%s: the %s must have at least 2 dimensions ([..., length, dim]), got shape %s", op, names[i],
                      SHAPE(ts[i]));
    if (!dp_dtype_is_float(ts[i]->dtype))
      return dp_error("%s: the %s must be floating point, got %s", op, names[i], dp_dtype_name(ts[i]->dtype));
    if (ts[i]->dtype != q->dtype)
      return dp_error("%s: query, key and value must have one dtype, got %s, %s and %s", op, dp_dtype_name(q->dtype),
                      dp_dtype_name(k->dtype), dp_dtype_name(v->dtype));
    if (dp_check_same_device(op, q, ts[i])) return -1;
  }
  int nd = q->ndim;
  bool same = k->ndim == nd && v->ndim == nd;
  for (int d = 0; same && d < nd - 2; d++) same = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
  if (!same)
    return dp_error("%s: query %s, key %s and value %s must have the same leading (batch) dimensions", op, SHAPE(q),
                    SHAPE(k), SHAPE(v));
  if (k->shape[nd - 1] != q->shape[nd - 1])
    return dp_error("%s: query %s and key %s must have the same last dimension", op, SHAPE(q), SHAPE(k));
  if (k->shape[nd - 2] != v->shape[nd - 2])
    return dp_error("%s: key %s and value %s must have the same length (dimension %d)", op, SHAPE(k), SHAPE(v), nd - 1);
  return 0;
}

/* The CPU kernels attend float32, and bfloat16 (an autocast linear's
 * output) in float32 inside: they widen the rows each tile reads and round
 * what they write once (cpu_attention.c), giving float32 attention of the
 * widened operands rounded, bit for bit, without casting whole tensors.
 * float16 operands are widened here, attended in float32 and the output
 * narrowed back, through differentiable casts, so the gradients flow as
 * through any cast. The double reference path would take ~30x longer. */
bool dp_attention_widens(const dp_tensor *q) { return dp_dev(q).type == DP_CPU && q->dtype == DP_F16; }

/* bfloat16 on the CPU: the kernels compute in float32, and the backward's rowsum(dO O) reads the output before
 * its rounding (backend.h, dp_attn_args.out_f32), so the gradients are those of float32 attention too */
bool dp_attention_keeps_f32_out(const dp_tensor *q) { return dp_dev(q).type == DP_CPU && q->dtype == DP_BF16; }

static dp_tensor *widened_sdpa(dp_tensor *q, dp_tensor *k, dp_tensor *v, dp_tensor *mask, bool causal, double dropout_p,
                               double scale) {
  DP_SCOPE(s);
  dp_tensor *q32 = dp_scope_add(&s, dp_to(q, DP_F32, dp_dev(q)));
  dp_tensor *k32 = dp_scope_add(&s, dp_to(k, DP_F32, dp_dev(k)));
  dp_tensor *v32 = dp_scope_add(&s, dp_to(v, DP_F32, dp_dev(v)));
  dp_tensor *m32 = mask && mask->dtype != DP_U8 ? dp_scope_add(&s, dp_to(mask, DP_F32, dp_dev(mask))) : mask;
  if (!q32 || !k32 || !v32 || !m32 != !mask) return NULL;
  dp_tensor *o32 = dp_scope_add(&s, dp_scaled_dot_product_attention(q32, k32, v32, m32, causal, dropout_p, scale));
  return o32 ? dp_to(o32, q->dtype, dp_dev(q)) : NULL;
}

dp_tensor *dp_scaled_dot_product_attention(dp_tensor *q, dp_tensor *k, dp_tensor *v, dp_tensor *mask, bool causal,
                                           double dropout_p, double scale) {
  const char *op = "scaled_dot_product_attention";
  if (check_inputs(q, k, v)) return NULL;
  if (mask && mask->dtype != DP_U8 && mask->dtype != q->dtype) {
    dp_error("%s: attn_mask must be boolean (uint8) or of the query's dtype %s, got %s", op, dp_dtype_name(q->dtype),
             dp_dtype_name(mask->dtype));
    return NULL;
  }
  if (dp_attention_widens(q)) return widened_sdpa(q, k, v, mask, causal, dropout_p, scale);
  if (!(dropout_p >= 0 && dropout_p < 1)) {
    dp_error("%s: dropout_p must be in [0, 1), got %g", op, dropout_p);
    return NULL;
  }
  if (mask && causal) {
    dp_error("%s: pass attn_mask or is_causal=true, not both (as PyTorch)", op);
    return NULL;
  }
  int nd = q->ndim, nb = nd - 2;
  int64_t L = q->shape[nd - 2], S = k->shape[nd - 2], E = q->shape[nd - 1], Ev = v->shape[nd - 1];
  if (scale < 0) scale = E ? 1.0 / sqrt((double)E) : 1.0;
  DP_SCOPE(s);
  dp_tensor *m4 = NULL, *mc = NULL;
  bool mask_bool = false;
  if (mask) {
    mask_bool = mask->dtype == DP_U8;
    if (dp_check_same_device(op, q, mask)) return NULL;
    int64_t full[DP_MAXDIM];
    memcpy(full, q->shape, sizeof(int64_t) * (size_t)nd);
    full[nd - 1] = S;
    dp_tensor *e = dp_scope_add(&s, dp_expand_raw(mask, nd, full));
    if (!e) {
      dp_error("%s: attn_mask of shape %s cannot be broadcast to the scores' shape %s", op, SHAPE(mask),
               dp_shp_n(nd, full));
      return NULL;
    }
    mc = e;
    m4 = as4(&s, mc, nb, false);
    if (!m4) return NULL;
  }
  dp_tensor *q4 = as4(&s, q, nb, true), *k4 = as4(&s, k, nb, true), *v4 = as4(&s, v, nb, true);
  if (!q4 || !k4 || !v4) return NULL;
  int64_t osh[DP_MAXDIM];
  memcpy(osh, q->shape, sizeof(int64_t) * (size_t)nd);
  osh[nd - 1] = Ev;
  int64_t b1 = q4->shape[0], b2 = q4->shape[1], rows = b1 * b2 * L;
  dp_tensor *out = dp_scope_add(&s, dp_empty(q->dtype, nd, osh, dp_dev(q)));
  dp_tensor *lse = dp_scope_add(&s, dp_empty(DP_F64, 1, &rows, dp_dev(q))); /* backend.h: float64 always */
  dp_tensor *o4 = out ? as4(&s, out, nb, true) : NULL;
  if (!out || !lse || !o4) return NULL;
  dp_tensor *ins[4] = {q, k, v, mask};
  bool grad = dp_any_requires_grad(4, ins);
  dp_tensor *o32 = NULL; /* the output before its rounding, for the backward */
  if (grad && dp_attention_keeps_f32_out(q)) {
    dp_tensor *f = dp_scope_add(&s, dp_empty(DP_F32, nd, osh, dp_dev(q)));
    if (!f || !(o32 = as4(&s, f, nb, true))) return NULL;
  }
  uint64_t seed = 0, offset = 0;
  if (dropout_p > 0) {
    seed = dp_rng_seed();
    offset = dp_rng_reserve(((uint64_t)(rows * S) + 3) / 4);
  }
  dp_attn_args a = {.b1 = b1,
                    .b2 = b2,
                    .L = L,
                    .S = S,
                    .E = E,
                    .Ev = Ev,
                    .q = q4,
                    .k = k4,
                    .v = v4,
                    .mask = m4,
                    .mask_bool = mask_bool,
                    .causal = causal,
                    .scale = scale,
                    .dropout_p = dropout_p,
                    .seed = seed,
                    .offset = offset,
                    .out_f32 = o32};
  if (dp_backend_of(q)->attention(o4, lse, &a)) return NULL;
  dp_scope_keep(&s, out);
  if (grad) {
    dp_node *n = dp_node_new("ScaledDotProductAttentionBackward", attention_backward, 4, ins, 1);
    n->i[0] = mask_bool, n->i[1] = causal, n->i[2] = (int64_t)seed, n->i[3] = (int64_t)offset;
    n->f[0] = scale, n->f[1] = dropout_p;
    dp_node_save(n, q4);
    dp_node_save(n, k4);
    dp_node_save(n, v4);
    dp_node_save(n, m4);
    dp_node_save(n, o32 ? o32 : o4);
    dp_node_save(n, lse);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}
