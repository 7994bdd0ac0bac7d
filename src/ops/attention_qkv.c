/* Multi-head self-attention over a packed projection, as one op:
 * qkv [B, T, 3C] is what Linear(C, 3C) gives (q, k, v side by side along
 * the last dim, each cut into n_head heads of C / n_head), the result
 * [B, T, C] the heads' outputs side by side again: nanoGPT's
 *
 *   q, k, v = qkv.split(C, 2); each .view(B, T, H, D).transpose(1, 2)
 *   y = scaled_dot_product_attention(q, k, v, is_causal=...)
 *   y = y.transpose(1, 2).contiguous().view(B, T, C)
 *
 * without its copies: the CPU attention kernels (backend.h, dp_attn_args)
 * read q, k and v as strided views of qkv, write the output in [B, T, C]
 * order, and the backward writes dq, dk and dv into one [B, T, 3C]
 * gradient (the composition above allocates three zero [B, T, 3C]
 * gradients for the split and adds them). The kernels, the dropout
 * stream (one Philox offset per call, the same elements as
 * scaled_dot_product_attention's) and so the numbers are those of the
 * composition. CPU only: F.self_attention_qkv composes the unfused ops on
 * other devices. */
#include <math.h>
#include <string.h>

#include "ops/model_ops.h"
#include "ops/op_util.h"

/* [B, H, T, D] views of a [B, T, W] tensor's columns from col on */
static dp_tensor *heads(dp_tensor *t, int64_t H, int64_t D, int64_t col) {
  int64_t B = t->shape[0], T = t->shape[1], W = t->shape[2];
  int64_t sh[4] = {B, H, T, D}, st[4] = {T * W, D, W, 1};
  return dp_as_strided(t, 4, sh, st, t->offset + col);
}

static dp_attn_args args_of(dp_tensor *q, dp_tensor *k, dp_tensor *v, bool causal, double scale, double p,
                            uint64_t seed, uint64_t offset) {
  return (dp_attn_args){.b1 = q->shape[0],
                        .b2 = q->shape[1],
                        .L = q->shape[2],
                        .S = q->shape[2],
                        .E = q->shape[3],
                        .Ev = q->shape[3],
                        .q = q,
                        .k = k,
                        .v = v,
                        .causal = causal,
                        .scale = scale,
                        .dropout_p = p,
                        .seed = seed,
                        .offset = offset};
}

static int qkv_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  if (!dp_node_needs(n, 0)) return 0;
  dp_tensor *x = dp_node_saved(n, 0), *o4 = dp_node_saved(n, 1), *lse = dp_node_saved(n, 2);
  int64_t H = n->i[0], C = x->shape[2] / 3, D = C / H;
  DP_SCOPE(s);
  dp_tensor *q = dp_scope_add(&s, heads(x, H, D, 0)), *k = dp_scope_add(&s, heads(x, H, D, C));
  dp_tensor *v = dp_scope_add(&s, heads(x, H, D, 2 * C));
  dp_tensor *gc = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *g4 = gc ? dp_scope_add(&s, heads(gc, H, D, 0)) : NULL;
  /* every element of gx is written: each head's rows of dq, dk and dv are zeroed, then accumulated */
  dp_tensor *gx = dp_scope_add(&s, dp_empty(x->dtype, 3, x->shape, dp_dev(x)));
  dp_tensor *gq = gx ? dp_scope_add(&s, heads(gx, H, D, 0)) : NULL;
  dp_tensor *gk = gx ? dp_scope_add(&s, heads(gx, H, D, C)) : NULL;
  dp_tensor *gv = gx ? dp_scope_add(&s, heads(gx, H, D, 2 * C)) : NULL;
  if (!q || !k || !v || !g4 || !gq || !gk || !gv) return -1;
  dp_attn_args a = args_of(q, k, v, n->i[1], n->f[0], n->f[1], (uint64_t)n->i[2], (uint64_t)n->i[3]);
  a.out = o4, a.lse = lse, a.gout = g4;
  if (dp_backend_of(x)->attention_backward(gq, gk, gv, NULL, &a)) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_self_attention_qkv(dp_tensor *qkv, int64_t n_head, bool causal, double dropout_p, double scale) {
  const char *op = "self_attention_qkv";
  if (qkv->ndim != 3 || qkv->shape[2] % 3 != 0) {
    dp_error("%s: qkv must be [batch, length, 3 * embed] (q, k and v side by side), got shape %s", op, SHAPE(qkv));
    return NULL;
  }
  int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
  if (n_head < 1 || C % n_head != 0) {
    dp_error("%s: n_head must be a positive divisor of the embedding size %" PRId64 ", got %" PRId64, op, C, n_head);
    return NULL;
  }
  if (!dp_dtype_is_float(qkv->dtype)) {
    dp_error("%s: qkv must be floating point, got %s", op, dp_dtype_name(qkv->dtype));
    return NULL;
  }
  if (dp_dev(qkv).type != DP_CPU) {
    dp_error("%s: CPU tensors only (F.self_attention_qkv composes the unfused ops on other devices)", op);
    return NULL;
  }
  if (!(dropout_p >= 0 && dropout_p < 1)) {
    dp_error("%s: dropout_p must be in [0, 1), got %g", op, dropout_p);
    return NULL;
  }
  if (dp_attention_widens(qkv)) { /* float16: float32 inside, as scaled_dot_product_attention (attention.c) */
    DP_SCOPE(w);
    dp_tensor *x32 = dp_scope_add(&w, dp_to(qkv, DP_F32, dp_dev(qkv)));
    dp_tensor *o32 = x32 ? dp_scope_add(&w, dp_self_attention_qkv(x32, n_head, causal, dropout_p, scale)) : NULL;
    return o32 ? dp_to(o32, qkv->dtype, dp_dev(qkv)) : NULL;
  }
  int64_t D = C / n_head, rows = B * n_head * T;
  if (scale < 0) scale = D ? 1.0 / sqrt((double)D) : 1.0;
  DP_SCOPE(s);
  dp_tensor *x = dp_scope_add(&s, dp_contiguous_raw(qkv));
  dp_tensor *q = x ? dp_scope_add(&s, heads(x, n_head, D, 0)) : NULL;
  dp_tensor *k = x ? dp_scope_add(&s, heads(x, n_head, D, C)) : NULL;
  dp_tensor *v = x ? dp_scope_add(&s, heads(x, n_head, D, 2 * C)) : NULL;
  dp_tensor *out = dp_scope_add(&s, dp_empty(qkv->dtype, 3, (int64_t[]){B, T, C}, dp_dev(qkv)));
  dp_tensor *o4 = out ? dp_scope_add(&s, heads(out, n_head, D, 0)) : NULL;
  dp_tensor *lse = dp_scope_add(&s, dp_empty(DP_F64, 1, &rows, dp_dev(qkv)));
  if (!q || !k || !v || !o4 || !lse) return NULL;
  bool grad = dp_any_requires_grad(1, &qkv);
  dp_tensor *o32 = NULL; /* bfloat16: the output before its rounding, for the backward (attention.c) */
  if (grad && dp_attention_keeps_f32_out(qkv)) {
    dp_tensor *f = dp_scope_add(&s, dp_empty(DP_F32, 3, (int64_t[]){B, T, C}, dp_dev(qkv)));
    if (!f || !(o32 = dp_scope_add(&s, heads(f, n_head, D, 0)))) return NULL;
  }
  uint64_t seed = 0, offset = 0;
  if (dropout_p > 0) { /* scaled_dot_product_attention's reservation: the same stream for the same elements */
    seed = dp_rng_seed();
    offset = dp_rng_reserve(((uint64_t)(rows * T) + 3) / 4);
  }
  dp_attn_args a = args_of(q, k, v, causal, scale, dropout_p, seed, offset);
  a.out_f32 = o32;
  if (rows > 0 && dp_backend_of(qkv)->attention(o4, lse, &a)) return NULL;
  dp_scope_keep(&s, out);
  if (grad) {
    dp_node *n = dp_node_new("SelfAttentionQkvBackward", qkv_backward, 1, &qkv, 1);
    n->i[0] = n_head, n->i[1] = causal, n->i[2] = (int64_t)seed, n->i[3] = (int64_t)offset;
    n->f[0] = scale, n->f[1] = dropout_p;
    dp_node_save(n, x);
    dp_node_save(n, o32 ? o32 : o4);
    dp_node_save(n, lse);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}
