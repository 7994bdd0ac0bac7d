/* CUDA batch norm pieces and layer norm.
 *
 * Per-channel statistics ([n, c, inner] reduced over n and inner) use a
 * block per (channel, split) with Welford/Chan merging in double, then a
 * small kernel to combine the splits; layer norm gives each row a warp or
 * a block. The element formulas are scalar_math.h's. */
#include "backends/cuda/cuda_kernels.cuh"

/* Which splits a channel's n*inner elements are cut into: enough blocks to
 * fill the device, none smaller than 4096 elements. */
static int64_t channel_splits(const dp_cu_ctx *c, int64_t ch, int64_t total) {
  int64_t splits = 1;
  if (ch < 2 * c->sm_count && total > 8192) {
    splits = (2 * c->sm_count + ch - 1) / ch;
    if (splits > total / 4096) splits = total / 4096;
    if (splits < 1) splits = 1;
  }
  return splits;
}

/* A per-channel vector with its own dtype (the op layer may keep
 * statistics and affine parameters in different ones); p == NULL for an
 * absent weight or bias. */
typedef struct {
  const void *p;
  dp_dtype dt;
} dp_cu_vec;
static dp_cu_vec vec(const dp_tensor *t) {
  dp_cu_vec v = {t ? dp_cu_ptr(t) : NULL, t ? t->dtype : DP_F32};
  return v;
}

__device__ __forceinline__ double vld(dp_cu_vec v, int64_t i, double absent) {
  return v.p ? dp_cu_ld(v.p, i, v.dt) : absent;
}
__device__ __forceinline__ void vst(dp_cu_vec v, int64_t i, double x) {
  if (v.p) dp_cu_st((void *)v.p, i, v.dt, x);
}

/* element j (0 <= j < n*inner) of channel c */
__device__ __forceinline__ int64_t chan_elem(int64_t j, int64_t c, int64_t ch, int64_t inner) {
  int64_t o, i;
  dp_cu_divmod(j, inner, &o, &i);
  return (o * ch + c) * inner + i;
}

__global__ void k_bn_stats(const char *x, dp_dtype xdt, int64_t total, int64_t ch, int64_t inner, int64_t splits,
                           dp_cu_welford *partial) {
  __shared__ dp_cu_welford shm[32];
  DP_CU_BLOCK_LOOP(item, ch * splits) {
    int64_t c = item / splits, s = item % splits, chunk = (total + splits - 1) / splits;
    int64_t j0 = s * chunk, j1 = j0 + chunk < total ? j0 + chunk : total;
    dp_cu_welford w = {0, 0, 0};
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      double v = dp_cu_ld(x, chan_elem(j, c, ch, inner), xdt);
      w.n += 1;
      double d = v - w.mean;
      w.mean += d / w.n;
      w.m2 += d * (v - w.mean);
    }
    w = dp_cu_group_reduce(
        w, [](dp_cu_welford a, dp_cu_welford b) { return dp_cu_welford2(a, b); }, true, shm);
    if (threadIdx.x == 0) partial[item] = w;
  }
}

__global__ void k_bn_stats_finish(dp_cu_vec mean, dp_cu_vec var, const dp_cu_welford *partial, int64_t ch,
                                  int64_t splits) {
  DP_CU_LOOP(c, ch) {
    dp_cu_welford w = {0, 0, 0};
    for (int64_t s = 0; s < splits; s++) w = dp_cu_welford2(w, partial[c * splits + s]);
    vst(mean, c, w.n > 0 ? w.mean : NAN);
    vst(var, c, w.n > 0 ? w.m2 / w.n : NAN);
  }
}

int dp_cu_bn_stats(dp_tensor *mean_t, dp_tensor *var_t, const dp_bn_args *a) {
  DP_CU_ENTER(c, a->x);
  dp_cu_vec mean = vec(mean_t), var = vec(var_t);
  const void *x = dp_cu_ptr(a->x);
  dp_dtype xdt = a->x->dtype;
  int64_t n = a->n, ch = a->c, inner = a->inner;
  if (ch == 0) return 0;
  int64_t total = n * inner, splits = channel_splits(c, ch, total);
  size_t pbytes = (size_t)(ch * splits) * sizeof(dp_cu_welford);
  dp_cu_welford *partial = (dp_cu_welford *)dp_cu_scratch(c, pbytes);
  if (!partial) return -1;
  k_bn_stats<<<dp_cu_item_grid(ch * splits), DP_CU_THREADS, 0, c->stream>>>((const char *)x, xdt, total, ch, inner,
                                                                            splits, partial);
  int rc = dp_cu_after_launch(c, "batch_norm statistics");
  if (!rc) {
    k_bn_stats_finish<<<dp_cu_blocks(c, ch, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(mean, var, partial, ch,
                                                                                           splits);
    rc = dp_cu_after_launch(c, "batch_norm statistics");
  }
  dp_cu_scratch_free(c, partial, pbytes);
  return rc;
}

/* y = (x - mean) * invstd * w + b */
__global__ void k_bn_forward(char *y, dp_dtype ydt, const char *x, dp_dtype xdt, dp_cu_vec mean, dp_cu_vec invstd,
                             dp_cu_vec w, dp_cu_vec b, int64_t count, int64_t ch, int64_t inner) {
  DP_CU_LOOP(e, count) {
    int64_t q, i, c;
    dp_cu_divmod(e, inner, &q, &i);
    dp_cu_divmod(q, ch, &q, &c);
    dp_bn_affine_k k = dp_bn_affine(vld(mean, c, 0.0), vld(invstd, c, 1.0), vld(w, c, 1.0), vld(b, c, 0.0));
    dp_cu_st(y, e, ydt, dp_bn_apply_d(dp_cu_ld(x, e, xdt), k.mean, k.scale, k.bias));
  }
}

int dp_cu_bn_forward(dp_tensor *y_t, const dp_bn_args *a) {
  DP_CU_ENTER(c, a->x);
  void *y = dp_cu_ptr(y_t);
  const void *x = dp_cu_ptr(a->x);
  dp_dtype ydt = y_t->dtype, xdt = a->x->dtype;
  dp_cu_vec mean = vec(a->mean), invstd = vec(a->invstd), w = vec(a->w), b = vec(a->b);
  int64_t n = a->n, ch = a->c, inner = a->inner;
  int64_t count = n * ch * inner;
  if (count == 0) return 0;
  k_bn_forward<<<dp_cu_blocks(c, count, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)y, ydt, (const char *)x, xdt, mean, invstd, w, b, count, ch, inner);
  return dp_cu_after_launch(c, "batch_norm");
}

/* sum_dy[c] = sum gy; sum_dy_xhat[c] = sum gy * (x - mean) * invstd */
__global__ void k_bn_backward_reduce(const char *gy, dp_dtype gydt, const char *x, dp_dtype xdt, dp_cu_vec mean,
                                     dp_cu_vec invstd, int64_t total, int64_t ch, int64_t inner, int64_t splits,
                                     dp_cu_pair *partial) {
  __shared__ dp_cu_pair shm[32];
  DP_CU_BLOCK_LOOP(item, ch * splits) {
    int64_t c = item / splits, s = item % splits, chunk = (total + splits - 1) / splits;
    int64_t j0 = s * chunk, j1 = j0 + chunk < total ? j0 + chunk : total;
    double m = vld(mean, c, 0.0), is = vld(invstd, c, 1.0);
    dp_cu_pair acc = {0, 0};
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      int64_t e = chan_elem(j, c, ch, inner);
      double g = dp_cu_ld(gy, e, gydt);
      acc.a += g;
      acc.b += g * (dp_cu_ld(x, e, xdt) - m) * is;
    }
    acc = dp_cu_group_reduce(
        acc, [](dp_cu_pair a, dp_cu_pair b) { return dp_cu_sum2(a, b); }, true, shm);
    if (threadIdx.x == 0) partial[item] = acc;
  }
}

/* a[c], b[c] = the sums of the splits of channel (or column) c */
__global__ void k_pair_finish(dp_cu_vec a, dp_cu_vec b, const dp_cu_pair *partial, int64_t n, int64_t splits) {
  DP_CU_LOOP(c, n) {
    dp_cu_pair acc = {0, 0};
    for (int64_t s = 0; s < splits; s++) acc = dp_cu_sum2(acc, partial[c * splits + s]);
    vst(a, c, acc.a);
    vst(b, c, acc.b);
  }
}

int dp_cu_bn_backward_reduce(dp_tensor *sum_dy_t, dp_tensor *sum_dy_xhat_t, const dp_bn_args *a) {
  DP_CU_ENTER(c, a->x);
  dp_cu_vec sum_dy = vec(sum_dy_t), sum_dy_xhat = vec(sum_dy_xhat_t), mean = vec(a->mean), invstd = vec(a->invstd);
  const void *gy = dp_cu_ptr(a->gy), *x = dp_cu_ptr(a->x);
  dp_dtype gydt = a->gy->dtype, xdt = a->x->dtype;
  int64_t n = a->n, ch = a->c, inner = a->inner;
  if (ch == 0) return 0;
  int64_t total = n * inner, splits = channel_splits(c, ch, total);
  size_t pbytes = (size_t)(ch * splits) * sizeof(dp_cu_pair);
  dp_cu_pair *partial = (dp_cu_pair *)dp_cu_scratch(c, pbytes);
  if (!partial) return -1;
  k_bn_backward_reduce<<<dp_cu_item_grid(ch * splits), DP_CU_THREADS, 0, c->stream>>>(
      (const char *)gy, gydt, (const char *)x, xdt, mean, invstd, total, ch, inner, splits, partial);
  int rc = dp_cu_after_launch(c, "batch_norm backward");
  if (!rc) {
    k_pair_finish<<<dp_cu_blocks(c, ch, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(sum_dy, sum_dy_xhat, partial, ch,
                                                                                       splits);
    rc = dp_cu_after_launch(c, "batch_norm backward");
  }
  dp_cu_scratch_free(c, partial, pbytes);
  return rc;
}

__global__ void k_bn_backward_elemt(char *gx, dp_dtype gxdt, const char *gy, dp_dtype gydt, const char *x, dp_dtype xdt,
                                    dp_cu_vec mean, dp_cu_vec invstd, dp_cu_vec w, dp_cu_vec sum_dy,
                                    dp_cu_vec sum_dy_xhat, double count, int64_t total, int64_t ch, int64_t inner) {
  DP_CU_LOOP(e, total) {
    int64_t q, i, c;
    dp_cu_divmod(e, inner, &q, &i);
    dp_cu_divmod(q, ch, &q, &c);
    dp_bn_grad_k k = dp_bn_grad_coefs(vld(w, c, 1.0), vld(invstd, c, 1.0), vld(mean, c, 0.0),
                                      vld(sum_dy, c, 0.0) / count, vld(sum_dy_xhat, c, 0.0) / count);
    dp_cu_st(gx, e, gxdt, dp_bn_grad_apply_d(dp_cu_ld(gy, e, gydt), dp_cu_ld(x, e, xdt), k.gy, k.x, k.c));
  }
}

int dp_cu_bn_backward_elemt(dp_tensor *gx_t, const dp_bn_args *a) {
  DP_CU_ENTER(c, a->x);
  void *gx = dp_cu_ptr(gx_t);
  const void *gy = dp_cu_ptr(a->gy), *x = dp_cu_ptr(a->x);
  dp_dtype gxdt = gx_t->dtype, gydt = a->gy->dtype, xdt = a->x->dtype;
  dp_cu_vec mean = vec(a->mean), invstd = vec(a->invstd), w = vec(a->w), sum_dy = vec(a->sum_dy),
            sum_dy_xhat = vec(a->sum_dy_xhat);
  double count = a->count;
  int64_t n = a->n, ch = a->c, inner = a->inner;
  int64_t total = n * ch * inner;
  if (total == 0) return 0;
  k_bn_backward_elemt<<<dp_cu_blocks(c, total, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)gx, gxdt, (const char *)gy, gydt, (const char *)x, xdt, mean, invstd, w, sum_dy, sum_dy_xhat, count,
      total, ch, inner);
  return dp_cu_after_launch(c, "batch_norm backward");
}

/* ---- layer norm over the last `cols` elements of each row ---- */
__global__ void k_layer_norm(char *y, dp_dtype ydt, dp_cu_vec mean, dp_cu_vec rstd, const char *x, dp_dtype xdt,
                             dp_cu_vec w, dp_cu_vec b, int64_t rows, int64_t cols, double eps, bool block) {
  __shared__ dp_cu_welford shm[32];
  for (dp_cu_rows g = dp_cu_rows_here(block); g.row < rows; dp_cu_rows_next(&g)) {
    int64_t base = g.row * cols;
    dp_cu_welford st = {0, 0, 0};
    for (int64_t j = g.lane; j < cols; j += g.size) {
      double v = dp_cu_ld(x, base + j, xdt);
      st.n += 1;
      double d = v - st.mean;
      st.mean += d / st.n;
      st.m2 += d * (v - st.mean);
    }
    st = dp_cu_group_reduce(
        st, [](dp_cu_welford a, dp_cu_welford c) { return dp_cu_welford2(a, c); }, g.block, shm);
    double mu = st.mean, rs = 1.0 / sqrt(st.m2 / (double)cols + eps);
    if (g.lane == 0) {
      vst(mean, g.row, mu);
      vst(rstd, g.row, rs);
    }
    for (int64_t j = g.lane; j < cols; j += g.size)
      dp_cu_st(y, base + j, ydt, dp_ln_apply_d(dp_cu_ld(x, base + j, xdt), mu, rs, vld(w, j, 1.0), vld(b, j, 0.0)));
  }
}

int dp_cu_layer_norm(dp_tensor *y_t, dp_tensor *mean_t, dp_tensor *rstd_t, const dp_ln_args *a) {
  DP_CU_ENTER(c, a->x);
  void *y = dp_cu_ptr(y_t);
  const void *x = dp_cu_ptr(a->x);
  dp_dtype ydt = y_t->dtype, xdt = a->x->dtype;
  dp_cu_vec mean = vec(mean_t), rstd = vec(rstd_t), w = vec(a->w), b = vec(a->b);
  int64_t rows = a->rows, cols = a->cols;
  double eps = a->eps;
  if (rows == 0 || cols == 0) return 0;
  bool block = dp_cu_rows_by_block(cols);
  k_layer_norm<<<dp_cu_rows_grid(rows, block), DP_CU_THREADS, 0, c->stream>>>(
      (char *)y, ydt, mean, rstd, (const char *)x, xdt, w, b, rows, cols, eps, block);
  return dp_cu_after_launch(c, "layer_norm");
}

/* gx per row: rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * w */
__global__ void k_layer_norm_backward_x(char *gx, dp_dtype gxdt, const char *gy, dp_dtype gydt, const char *x,
                                        dp_dtype xdt, dp_cu_vec mean, dp_cu_vec rstd, dp_cu_vec w, int64_t rows,
                                        int64_t cols, bool block) {
  __shared__ dp_cu_pair shm[32];
  for (dp_cu_rows gr = dp_cu_rows_here(block); gr.row < rows; dp_cu_rows_next(&gr)) {
    int64_t base = gr.row * cols;
    double mu = vld(mean, gr.row, 0.0), rs = vld(rstd, gr.row, 1.0);
    dp_cu_pair s = {0, 0};
    for (int64_t j = gr.lane; j < cols; j += gr.size) {
      double g = dp_cu_ld(gy, base + j, gydt) * vld(w, j, 1.0);
      s.a += g;
      s.b += g * (dp_cu_ld(x, base + j, xdt) - mu) * rs;
    }
    s = dp_cu_group_reduce(
        s, [](dp_cu_pair a, dp_cu_pair b) { return dp_cu_sum2(a, b); }, gr.block, shm);
    double mg = s.a / (double)cols, mgx = s.b / (double)cols;
    for (int64_t j = gr.lane; j < cols; j += gr.size) {
      double g = dp_cu_ld(gy, base + j, gydt) * vld(w, j, 1.0);
      double xhat = (dp_cu_ld(x, base + j, xdt) - mu) * rs;
      dp_cu_st(gx, base + j, gxdt, dp_ln_grad_d(g, xhat, rs, mg, mgx));
    }
  }
}

/* gw[j] = sum_rows gy * xhat, gb[j] = sum_rows gy: thread per (column,
 * split of the rows); neighbouring threads read neighbouring columns. */
__global__ void k_layer_norm_backward_w(const char *gy, dp_dtype gydt, const char *x, dp_dtype xdt, dp_cu_vec mean,
                                        dp_cu_vec rstd, int64_t rows, int64_t cols, int64_t splits,
                                        dp_cu_pair *partial) {
  DP_CU_LOOP(t, cols * splits) {
    int64_t s, j;
    dp_cu_divmod(t, cols, &s, &j);
    int64_t chunk = (rows + splits - 1) / splits, r0 = s * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    dp_cu_pair acc = {0, 0};
    for (int64_t r = r0; r < r1; r++) {
      double g = dp_cu_ld(gy, r * cols + j, gydt);
      acc.a += g * (dp_cu_ld(x, r * cols + j, xdt) - vld(mean, r, 0.0)) * vld(rstd, r, 1.0);
      acc.b += g;
    }
    partial[j * splits + s] = acc;
  }
}

int dp_cu_layer_norm_backward(dp_tensor *gx_t, dp_tensor *gw_t, dp_tensor *gb_t, const dp_ln_args *a) {
  DP_CU_ENTER(c, a->x);
  void *gx = dp_cu_ptr(gx_t);
  const void *gy = dp_cu_ptr(a->gy), *x = dp_cu_ptr(a->x);
  dp_dtype gxdt = gx_t->dtype, gydt = a->gy->dtype, xdt = a->x->dtype;
  dp_cu_vec gw = vec(gw_t), gb = vec(gb_t), mean = vec(a->mean), rstd = vec(a->rstd), w = vec(a->w);
  int64_t rows = a->rows, cols = a->cols;
  if (cols == 0) return 0;
  if (rows > 0) {
    bool block = dp_cu_rows_by_block(cols);
    k_layer_norm_backward_x<<<dp_cu_rows_grid(rows, block), DP_CU_THREADS, 0, c->stream>>>(
        (char *)gx, gxdt, (const char *)gy, gydt, (const char *)x, xdt, mean, rstd, w, rows, cols, block);
    if (dp_cu_after_launch(c, "layer_norm backward")) return -1;
  }
  if (!gw.p && !gb.p) return 0;
  int64_t splits = 1, want = 2 * (int64_t)c->sm_count * DP_CU_THREADS;
  if (cols < want && rows > 64) {
    splits = (want + cols - 1) / cols;
    if (splits > rows / 32) splits = rows / 32;
    if (splits < 1) splits = 1;
  }
  size_t pbytes = (size_t)(cols * splits) * sizeof(dp_cu_pair);
  dp_cu_pair *partial = (dp_cu_pair *)dp_cu_scratch(c, pbytes);
  if (!partial) return -1;
  k_layer_norm_backward_w<<<dp_cu_blocks(c, cols * splits, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (const char *)gy, gydt, (const char *)x, xdt, mean, rstd, rows, cols, splits, partial);
  int rc = dp_cu_after_launch(c, "layer_norm backward");
  if (!rc) {
    k_pair_finish<<<dp_cu_blocks(c, cols, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(gw, gb, partial, cols, splits);
    rc = dp_cu_after_launch(c, "layer_norm backward");
  }
  dp_cu_scratch_free(c, partial, pbytes);
  return rc;
}
