/* Dropout and embedding, with their gradients.
 *
 * Dropout draws its mask from the Philox generator: the forward reserves
 * one counter per element and the node keeps only (seed, offset), so the
 * backward recomputes the same mask instead of storing it, and the CPU and
 * CUDA backends drop the same elements for the same seed.
 *
 * Embedding is a row gather (index_select) whose gradient is a row
 * scatter-add (index_add) into a zero weight-shaped tensor. */
#include <stdio.h>
#include <string.h>

#include "ops/op_util.h"

/* ---- dropout ---- */

static int dropout_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = gy ? dp_scope_add(&s, dp_empty_like(gy)) : NULL;
  if (!gx || dp_backend_of(gx)->dropout(gx, gy, n->f[0], (uint64_t)n->i[0], (uint64_t)n->i[1])) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  return 0;
}

dp_tensor *dp_dropout(dp_tensor *x, double p, bool training) {
  if (!(p >= 0.0 && p <= 1.0)) {
    dp_error("dropout: probability has to be between 0 and 1, got %g", p);
    return NULL;
  }
  if (dp_check_float("dropout", x)) return NULL;
  if (!training || p == 0.0 || dp_numel(x) == 0) { /* the identity, as PyTorch returns its input */
    dp_retain(x);
    return x;
  }
  if (p == 1.0) return dp_binary_scalar(DP_B_MUL, x, 0.0, false); /* zeros, with a zero gradient */
  DP_SCOPE(s);
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));
  dp_tensor *y = xc ? dp_scope_add(&s, dp_empty_like(xc)) : NULL;
  if (!y) return NULL;
  uint64_t seed = dp_rng_seed(), offset = dp_rng_reserve((uint64_t)dp_numel(x));
  if (dp_backend_of(x)->dropout(y, xc, p, seed, offset)) return NULL;
  dp_scope_keep(&s, y);
  if (dp_any_requires_grad(1, &x)) {
    dp_node *n = dp_node_new("DropoutBackward", dropout_backward, 1, &x, 1);
    n->i[0] = (int64_t)seed;
    n->i[1] = (int64_t)offset;
    n->f[0] = p;
    dp_node_attach(n, y, 0);
    dp_node_release(n);
  }
  return y;
}

/* ---- embedding ---- */

/* Checks every id of a CPU index tensor (contiguous int64) against rows,
 * naming the first bad one and its position in the ids' own shape; other
 * devices rely on the kernel's check. */
static int check_ids(const dp_tensor *ids, int64_t rows, int64_t base) {
  if (dp_dev(ids).type != DP_CPU) return 0;
  const int64_t *p = dp_data(ids);
  int64_t n = dp_numel(ids);
  for (int64_t i = 0; i < n; i++) {
    if (p[i] >= base && p[i] - base < rows) continue; /* p[i] >= base first: no overflow */
    char pos[DP_MAXDIM * 24 + 4];
    size_t k = 0;
    int64_t rem = i;
    int64_t idx[DP_MAXDIM];
    for (int d = ids->ndim - 1; d >= 0; d--) idx[d] = rem % ids->shape[d], rem /= ids->shape[d];
    k += (size_t)snprintf(pos, sizeof pos, "%s", ids->ndim == 1 ? "" : "(");
    for (int d = 0; d < ids->ndim; d++)
      k += (size_t)snprintf(pos + k, sizeof pos - k, d ? ", %" PRId64 : "%" PRId64, idx[d] + base);
    snprintf(pos + k, sizeof pos - k, "%s", ids->ndim == 1 ? "" : ")");
    if (ids->ndim == 0)
      return dp_error("embedding: id %" PRId64 " is out of range: the weight has %" PRId64 " rows (ids %" PRId64
                      "..%" PRId64 ")",
                      p[i], rows, base, rows - 1 + base);
    return dp_error("embedding: id %" PRId64 " at position %s of the ids (shape %s) is out of range: the weight has "
                    "%" PRId64 " rows (ids %" PRId64 "..%" PRId64 ")",
                    p[i], pos, SHAPE(ids), rows, base, rows - 1 + base);
  }
  return 0;
}

static int embedding_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *ids = dp_node_saved(n, 0);
  int64_t base = n->i[0], d = n->in_shape[0][1], cnt = dp_numel(ids);
  DP_SCOPE(s);
  dp_tensor *gw = dp_scope_add(&s, dp_zeros(n->in_dtype[0], 2, n->in_shape[0], dp_dev(gout[0])));
  dp_tensor *gy = gw ? dp_scope_add(&s, dp_contiguous_raw(gout[0])) : NULL;
  dp_tensor *g2 = gy ? dp_scope_add(&s, dp_reshape(gy, 2, (int64_t[]){cnt, d})) : NULL;
  if (!g2 || dp_backend_of(gw)->index_add(gw, ids, g2, base)) return -1;
  if (n->i[1] >= 0) { /* padding_idx: that row gets no gradient */
    dp_tensor *row = dp_scope_add(&s, dp_narrow(gw, 0, n->i[1], 1));
    if (!row || dp_fill_(row, 0.0)) return -1;
  }
  gin[0] = dp_scope_keep(&s, gw);
  return 0;
}

dp_tensor *dp_embedding(dp_tensor *weight, dp_tensor *idx, int64_t base, int64_t padding_row) {
  if (weight->ndim != 2 || !dp_dtype_is_float(weight->dtype)) {
    dp_error("embedding: weight must be a 2-dimensional floating point tensor [num_embeddings, embedding_dim], got "
             "%s of shape %s",
             dp_dtype_name(weight->dtype), SHAPE(weight));
    return NULL;
  }
  if (idx->dtype != DP_I64) {
    dp_error("embedding: ids must be int64, got %s (convert with :long())", dp_dtype_name(idx->dtype));
    return NULL;
  }
  if (idx->ndim + 1 > DP_MAXDIM) {
    dp_error("embedding: ids of shape %s have too many dimensions (at most %d)", SHAPE(idx), DP_MAXDIM - 1);
    return NULL;
  }
  if (dp_check_same_device("embedding", weight, idx)) return NULL;
  if (padding_row < -1 || padding_row >= weight->shape[0]) {
    dp_error("embedding: padding_idx %" PRId64 " is out of range: the weight has %" PRId64 " rows (ids %" PRId64
             "..%" PRId64 ")",
             padding_row + base, weight->shape[0], base, weight->shape[0] - 1 + base);
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *ic = dp_scope_add(&s, dp_contiguous_raw(idx));
  if (!ic || check_ids(ic, weight->shape[0], base)) return NULL;
  int64_t sh[DP_MAXDIM];
  memcpy(sh, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
  sh[idx->ndim] = weight->shape[1];
  dp_tensor *wc = dp_scope_add(&s, dp_contiguous_raw(weight));
  dp_tensor *out = wc ? dp_scope_add(&s, dp_empty(weight->dtype, idx->ndim + 1, sh, dp_dev(weight))) : NULL;
  if (!out) return NULL;
  if (dp_backend_of(out)->index_select(out, wc, ic, base)) {
    dp_error_prefix("embedding: ");
    return NULL;
  }
  dp_scope_keep(&s, out);
  if (dp_any_requires_grad(1, &weight)) {
    dp_node *n = dp_node_new("EmbeddingBackward", embedding_backward, 1, &weight, 1);
    n->i[0] = base;
    n->i[1] = padding_row;
    dp_node_save(n, ic);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}
