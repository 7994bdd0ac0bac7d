/* CUDA kernels for the bias/activation epilogue, bias gradients, softmax,
 * cross-entropy and row gather/scatter (embedding).
 *
 * Row kernels (softmax, cross-entropy) give each row a warp, or a block
 * when the row is long, and accumulate in double with the per-row formulas
 * of scalar_math.h that the CPU kernels use. Errors in the data (a class or
 * an index out of range) are recorded with dp_cu_report and raised by the
 * host at the next sync point; the affected outputs are NaN / zero so that
 * nothing reads out of bounds in the meantime. */
#include "backends/cuda/cuda_kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* ---- y = act(y + bias[c]) on [outer, c, inner] ---- */
__global__ void k_bias_act(char *y, dp_dtype ydt, const char *bias, dp_dtype bdt, bool has_act, const dp_unary_args act,
                           int64_t n, int64_t ch, int64_t inner, bool fmode) {
  DP_CU_LOOP(i, n) {
    int64_t q, r, c;
    dp_cu_divmod(i, inner, &q, &r);
    dp_cu_divmod(q, ch, &q, &c);
    if (fmode) {
      float v = dp_cu_ldf(y, i, ydt) + (bias ? dp_cu_ldf(bias, c, bdt) : 0.f);
      dp_cu_stf(y, i, ydt, has_act ? dp_unary_f(act.op, v, &act.p) : v);
    } else {
      double v = dp_cu_ld(y, i, ydt) + (bias ? dp_cu_ld(bias, c, bdt) : 0.0);
      dp_cu_st(y, i, ydt, has_act ? dp_unary_d(act.op, v, &act.p) : v);
    }
  }
}

int dp_cu_bias_act(dp_tensor *y_t, const dp_tensor *bias_t, const dp_unary_args *act, int64_t outer, int64_t ch,
                   int64_t inner) {
  DP_CU_ENTER(c, y_t);
  void *y = dp_cu_ptr(y_t);
  const void *bias = bias_t ? dp_cu_ptr(bias_t) : NULL;
  dp_dtype ydt = y_t->dtype, bdt = bias_t ? bias_t->dtype : y_t->dtype;
  int64_t n = outer * ch * inner;
  if (n == 0) return 0;
  bool fmode = dp_dtype_is_f32ish(ydt) && (!bias || dp_dtype_is_f32ish(bdt));
  dp_unary_args none = dp_unary_args_of(DP_U_NEG);
  k_bias_act<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)y, ydt, (const char *)bias, bdt, act != NULL, act ? *act : none, n, ch, inner, fmode);
  return dp_cu_after_launch(c, "bias_act");
}

/* ---- gb[c] = sum of gy [outer, c, inner] over outer and inner ----
 * inner == 1 is a column sum: the reduction kernels' [1, outer, c] case.
 * Otherwise a block per (channel, split) walks its slice of outer*inner. */
__global__ void k_channel_sum(const char *gy, dp_dtype gydt, int64_t outer, int64_t ch, int64_t inner, int64_t splits,
                              double *partial) {
  __shared__ double shm[32];
  DP_CU_BLOCK_LOOP(item, ch * splits) {
    int64_t c = item / splits, s = item % splits;
    int64_t total = outer * inner, chunk = (total + splits - 1) / splits;
    int64_t j0 = s * chunk, j1 = j0 + chunk < total ? j0 + chunk : total;
    double acc = 0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      int64_t o, i;
      dp_cu_divmod(j, inner, &o, &i);
      acc += dp_cu_ld(gy, (o * ch + c) * inner + i, gydt);
    }
    acc = dp_cu_group_reduce(
        acc, [](double a, double b) { return a + b; }, true, shm);
    if (threadIdx.x == 0) partial[item] = acc;
  }
}

__global__ void k_sum_splits(char *out, dp_dtype odt, const double *partial, int64_t n, int64_t splits) {
  DP_CU_LOOP(c, n) {
    double acc = 0;
    for (int64_t s = 0; s < splits; s++) acc += partial[c * splits + s];
    dp_cu_st(out, c, odt, acc);
  }
}

int dp_cu_channel_sum(dp_tensor *gb_t, const dp_tensor *gy_t, int64_t outer, int64_t ch, int64_t inner) {
  DP_CU_ENTER(c, gy_t);
  void *gb = dp_cu_ptr(gb_t);
  const void *gy = dp_cu_ptr(gy_t);
  dp_dtype gbdt = gb_t->dtype, gydt = gy_t->dtype;
  if (ch == 0) return 0;
  if (inner == 1) { /* [outer, ch] seen as [1, outer, ch] */
    dp_reduce_args ra = {DP_R_SUM, 1, outer, ch, 0};
    return dp_cu_reduce(gb_t, NULL, gy_t, &ra);
  }
  int64_t total = outer * inner, splits = 1;
  if (ch < 2 * c->sm_count && total > 16384) {
    splits = (2 * c->sm_count + ch - 1) / ch;
    if (splits > total / 8192) splits = total / 8192;
    if (splits < 1) splits = 1;
  }
  size_t pbytes = (size_t)(ch * splits) * sizeof(double);
  double *partial = (double *)dp_cu_scratch(c, pbytes);
  if (!partial) return -1;
  k_channel_sum<<<dp_cu_item_grid(ch * splits), DP_CU_THREADS, 0, c->stream>>>((const char *)gy, gydt, outer, ch, inner,
                                                                               splits, partial);
  int rc = dp_cu_after_launch(c, "channel_sum");
  if (!rc) {
    k_sum_splits<<<dp_cu_blocks(c, ch, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)gb, gbdt, partial, ch,
                                                                                      splits);
    rc = dp_cu_after_launch(c, "channel_sum");
  }
  dp_cu_scratch_free(c, partial, pbytes);
  return rc;
}

/* ---- softmax / log_softmax over rows ---- */
__device__ __forceinline__ void lse_add(dp_cu_pair *p, double v) {
  if (v != -INFINITY) dp_lse_merge_d(&p->a, &p->b, v, 1.0); /* exp(-inf) adds nothing */
}

/* the row's (max, log of sum(exp(x - max))): dp_softmax_out_d works from x - max */
__device__ __forceinline__ dp_cu_pair row_lse(const char *x, dp_dtype xdt, int64_t base, int64_t cols, dp_cu_rows g,
                                              dp_cu_pair *shm) {
  dp_cu_pair p = {-INFINITY, 0.0};
  for (int64_t j = g.lane; j < cols; j += g.size) lse_add(&p, dp_cu_ld(x, base + j, xdt));
  p = dp_cu_group_reduce(
      p, [](dp_cu_pair a, dp_cu_pair b) { return dp_cu_lse2(a, b); }, g.block, shm);
  p.b = log(p.b);
  return p;
}

__global__ void k_softmax(char *y, dp_dtype ydt, const char *x, dp_dtype xdt, int64_t rows, int64_t cols, bool logsm,
                          bool block) {
  __shared__ dp_cu_pair shm[32];
  for (dp_cu_rows g = dp_cu_rows_here(block); g.row < rows; dp_cu_rows_next(&g)) {
    int64_t base = g.row * cols;
    dp_cu_pair ml = row_lse(x, xdt, base, cols, g, shm);
    for (int64_t j = g.lane; j < cols; j += g.size)
      dp_cu_st(y, base + j, ydt, dp_softmax_out_d(dp_cu_ld(x, base + j, xdt), ml.a, ml.b, logsm));
  }
}

int dp_cu_softmax(dp_tensor *y_t, const dp_tensor *x_t, int64_t rows, int64_t cols, bool log) {
  DP_CU_ENTER(c, x_t);
  void *y = dp_cu_ptr(y_t);
  const void *x = dp_cu_ptr(x_t);
  dp_dtype ydt = y_t->dtype, xdt = x_t->dtype;
  if (rows == 0 || cols == 0) return 0;
  bool block = dp_cu_rows_by_block(cols);
  k_softmax<<<dp_cu_rows_grid(rows, block), DP_CU_THREADS, 0, c->stream>>>((char *)y, ydt, (const char *)x, xdt, rows,
                                                                           cols, log, block);
  return dp_cu_after_launch(c, "softmax");
}

__global__ void k_softmax_backward(char *gx, dp_dtype gxdt, const char *gy, dp_dtype gydt, const char *y, dp_dtype ydt,
                                   int64_t rows, int64_t cols, bool logsm, bool block) {
  __shared__ double shm[32];
  for (dp_cu_rows g = dp_cu_rows_here(block); g.row < rows; dp_cu_rows_next(&g)) {
    int64_t base = g.row * cols;
    double dot = 0;
    for (int64_t j = g.lane; j < cols; j += g.size) {
      double gv = dp_cu_ld(gy, base + j, gydt);
      dot += logsm ? gv : gv * dp_cu_ld(y, base + j, ydt);
    }
    dot = dp_cu_group_reduce(
        dot, [](double a, double b) { return a + b; }, g.block, shm);
    for (int64_t j = g.lane; j < cols; j += g.size)
      dp_cu_st(gx, base + j, gxdt,
               dp_softmax_grad_d(dp_cu_ld(gy, base + j, gydt), dp_cu_ld(y, base + j, ydt), dot, logsm));
  }
}

int dp_cu_softmax_backward(dp_tensor *gx_t, const dp_tensor *gy_t, const dp_tensor *y_t, int64_t rows, int64_t cols,
                           bool log) {
  DP_CU_ENTER(c, gx_t);
  void *gx = dp_cu_ptr(gx_t);
  const void *gy = dp_cu_ptr(gy_t), *y = dp_cu_ptr(y_t);
  dp_dtype gxdt = gx_t->dtype, gydt = gy_t->dtype, ydt = y_t->dtype;
  if (rows == 0 || cols == 0) return 0;
  bool block = dp_cu_rows_by_block(cols);
  k_softmax_backward<<<dp_cu_rows_grid(rows, block), DP_CU_THREADS, 0, c->stream>>>(
      (char *)gx, gxdt, (const char *)gy, gydt, (const char *)y, ydt, rows, cols, log, block);
  return dp_cu_after_launch(c, "softmax backward");
}

/* ---- cross-entropy (fused log-softmax + NLL, label smoothing) ---- */
__global__ void k_cross_entropy(char *loss, dp_dtype ldt, char *lse_out, dp_dtype lsedt, const char *x, dp_dtype xdt,
                                const int64_t *target, int64_t rows, int64_t C, int64_t base, double eps,
                                int64_t ignore, bool block, const dp_cu_ctx ctx) {
  __shared__ dp_cu_pair shm[32];
  for (dp_cu_rows g = dp_cu_rows_here(block); g.row < rows; dp_cu_rows_next(&g)) {
    int64_t rb = g.row * C;
    dp_cu_pair p = {-INFINITY, 0.0};
    for (int64_t j = g.lane; j < C; j += g.size) lse_add(&p, dp_cu_ld(x, rb + j, xdt));
    p = dp_cu_group_reduce(
        p, [](dp_cu_pair a, dp_cu_pair b) { return dp_cu_lse2(a, b); }, g.block, shm);
    /* every lane has the row max: sum_d of x - max (dp_ce_loss_d) in a second pass */
    double sum_d = 0;
    for (int64_t j = g.lane; j < C; j += g.size) sum_d += dp_cu_ld(x, rb + j, xdt) - p.a;
    sum_d = dp_cu_group_reduce(
        sum_d, [](double a, double b) { return a + b; }, g.block, (double *)shm);
    if (g.lane != 0) continue; /* lane 0 writes; the others go on to the next row */
    double mx = p.a, log_s = log(p.b);
    dp_cu_st(lse_out, 2 * g.row, lsedt, mx);
    dp_cu_st(lse_out, 2 * g.row + 1, lsedt, log_s);
    int64_t t = target[g.row];
    if (t == ignore) {
      dp_cu_st(loss, g.row, ldt, 0.0);
    } else if (t < base || t - base >= C) {
      dp_cu_report(ctx, DP_CU_FAULT_TARGET, t, g.row + base, base, C - 1 + base);
      dp_cu_st(loss, g.row, ldt, NAN);
    } else {
      dp_cu_st(loss, g.row, ldt, dp_ce_loss_d(mx, log_s, dp_cu_ld(x, rb + t - base, xdt), sum_d, C, eps));
    }
  }
}

/* A target out of range is found by the kernel: the row's loss is NaN and
 * the error is raised at the next sync point (loss:item(), for one). */
int dp_cu_cross_entropy(dp_tensor *loss_t, dp_tensor *lse_t, const dp_ce_args *a) {
  DP_CU_ENTER(c, a->x);
  void *loss = dp_cu_ptr(loss_t), *lse = dp_cu_ptr(lse_t);
  const void *x = dp_cu_ptr(a->x);
  const int64_t *target = (const int64_t *)dp_cu_ptr(a->target);
  dp_dtype ldt = loss_t->dtype, lsedt = lse_t->dtype, xdt = a->x->dtype;
  int64_t rows = a->x->shape[0], classes = a->x->shape[1], base = a->base, ignore_index = a->ignore_index;
  double smoothing = a->smoothing;
  if (rows == 0) return 0;
  bool block = dp_cu_rows_by_block(classes);
  k_cross_entropy<<<dp_cu_rows_grid(rows, block), DP_CU_THREADS, 0, c->stream>>>(
      (char *)loss, ldt, (char *)lse, lsedt, (const char *)x, xdt, target, rows, classes, base, smoothing, ignore_index,
      block, *c);
  return dp_cu_after_launch(c, "cross_entropy");
}

/* elementwise: gx = (softmax(x) - smoothed one-hot) * scale[row] */
__global__ void k_cross_entropy_backward(char *gx, dp_dtype gxdt, const char *x, dp_dtype xdt, const char *lse,
                                         dp_dtype lsedt, const int64_t *target, const char *scale, dp_dtype sdt,
                                         int64_t rows, int64_t C, int64_t base, double eps, int64_t ignore) {
  DP_CU_LOOP(e, rows * C) {
    int64_t r, j;
    dp_cu_divmod(e, C, &r, &j);
    int64_t t = target[r];
    double sc = dp_cu_ld(scale, r, sdt);
    double v = 0.0;
    if (t != ignore) /* 0 * NaN stays NaN, as on the CPU */
      v = dp_ce_grad_d(dp_cu_ld(x, e, xdt), dp_cu_ld(lse, 2 * r, lsedt), dp_cu_ld(lse, 2 * r + 1, lsedt), j == t - base,
                       C, eps, sc);
    dp_cu_st(gx, e, gxdt, v);
  }
}

int dp_cu_cross_entropy_backward(dp_tensor *gx_t, const dp_ce_args *a) {
  DP_CU_ENTER(c, a->x);
  void *gx = dp_cu_ptr(gx_t);
  const void *x = dp_cu_ptr(a->x), *lse = dp_cu_ptr(a->lse), *scale = dp_cu_ptr(a->scale);
  const int64_t *target = (const int64_t *)dp_cu_ptr(a->target);
  dp_dtype gxdt = gx_t->dtype, xdt = a->x->dtype, lsedt = a->lse->dtype, sdt = a->scale->dtype;
  int64_t rows = a->x->shape[0], classes = a->x->shape[1], base = a->base, ignore_index = a->ignore_index;
  double smoothing = a->smoothing;
  int64_t n = rows * classes;
  if (n == 0) return 0;
  k_cross_entropy_backward<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)gx, gxdt, (const char *)x, xdt, (const char *)lse, lsedt, target, (const char *)scale, sdt, rows, classes,
      base, smoothing, ignore_index);
  return dp_cu_after_launch(c, "cross_entropy backward");
}

/* ---- out [n, d] = src[idx[i] - base, :] ---- */
__global__ void k_index_select(char *out, const char *src, int es, int64_t rows, int64_t d, const int64_t *idx,
                               int64_t n, int64_t base, const dp_cu_ctx ctx) {
  DP_CU_LOOP(e, n * d) {
    int64_t i, j;
    dp_cu_divmod(e, d, &i, &j);
    /* idx[i] < base first, so the subtraction cannot overflow */
    int64_t k = idx[i] < base ? -1 : idx[i] - base;
    char *o = out + e * es;
    if (k < 0 || k >= rows) {
      if (j == 0) dp_cu_report(ctx, DP_CU_FAULT_INDEX_SELECT, idx[i], i + base, base, rows - 1 + base);
      for (int b = 0; b < es; b++) o[b] = 0;
      continue;
    }
    const char *s = src + (k * d + j) * es;
    switch (es) {
    case 1: *(uint8_t *)o = *(const uint8_t *)s; break;
    case 2: *(uint16_t *)o = *(const uint16_t *)s; break;
    case 4: *(uint32_t *)o = *(const uint32_t *)s; break;
    default: *(uint64_t *)o = *(const uint64_t *)s; break;
    }
  }
}

/* index_select / index_add: an index out of range is found by the kernel
 * (the row is zero / skipped) and raised at the next sync point. */
int dp_cu_index_select(dp_tensor *out_t, const dp_tensor *src_t, const dp_tensor *idx_t, int64_t base) {
  DP_CU_ENTER(c, src_t);
  if (out_t->dtype != src_t->dtype)
    return dp_cu_error("index_select: output (%s) and source (%s) must share a dtype", dp_dtype_name(out_t->dtype),
                       dp_dtype_name(src_t->dtype));
  int64_t rows = src_t->shape[0], d = rows ? dp_cu_numel(src_t) / rows : 0, n = dp_cu_numel(idx_t);
  void *out = dp_cu_ptr(out_t);
  const void *src = dp_cu_ptr(src_t);
  const int64_t *idx = (const int64_t *)dp_cu_ptr(idx_t);
  dp_dtype dt = src_t->dtype;
  if (n * d == 0) return 0;
  k_index_select<<<dp_cu_blocks(c, n * d, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)out, (const char *)src, (int)dp_dtype_bytes(dt), rows, d, idx, n, base, *c);
  return dp_cu_after_launch(c, "index_select");
}

/* ---- dst[idx[i] - base, :] += src[i, :] (atomics: indices repeat) ---- */
__device__ __forceinline__ void atomic_add_u8(uint8_t *p, unsigned v) {
  unsigned *word = (unsigned *)((uintptr_t)p & ~(uintptr_t)3);
  unsigned shift = ((unsigned)(uintptr_t)p & 3u) * 8u;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    unsigned byte = ((assumed >> shift) + v) & 0xffu;
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
  } while (old != assumed);
}

__global__ void k_index_add(char *dst, dp_dtype ddt, int64_t rows, int64_t d, const int64_t *idx, int64_t n,
                            const char *src, dp_dtype sdt, int64_t base, const dp_cu_ctx ctx) {
  DP_CU_LOOP(e, n * d) {
    int64_t i, j;
    dp_cu_divmod(e, d, &i, &j);
    int64_t k = idx[i] < base ? -1 : idx[i] - base; /* no overflow */
    if (k < 0 || k >= rows) {
      if (j == 0) dp_cu_report(ctx, DP_CU_FAULT_INDEX_ADD, idx[i], i + base, base, rows - 1 + base);
      continue;
    }
    char *o = dp_cu_at(dst, k * d + j, ddt);
    switch (ddt) {
    case DP_F32: atomicAdd((float *)o, dp_cu_ldf(src, e, sdt)); break;
    case DP_F64: atomicAdd((double *)o, dp_cu_ld(src, e, sdt)); break;
    case DP_BF16: atomicAdd((__nv_bfloat16 *)o, __float2bfloat16_rn(dp_cu_ldf(src, e, sdt))); break;
    case DP_F16: atomicAdd((__half *)o, __float2half_rn(dp_cu_ldf(src, e, sdt))); break;
    case DP_I64: {
      long long v = sdt == DP_I64 ? ((const long long *)src)[e] : (long long)dp_cu_ld(src, e, sdt);
      atomicAdd((unsigned long long *)o, (unsigned long long)v);
      break;
    }
    default: {
      uint8_t v8;
      dp_conv_store_d(&v8, DP_U8, dp_cu_ld(src, e, sdt));
      atomic_add_u8((uint8_t *)o, v8);
      break;
    }
    }
  }
}

int dp_cu_index_add(dp_tensor *dst_t, const dp_tensor *idx_t, const dp_tensor *src_t, int64_t base) {
  DP_CU_ENTER(c, dst_t);
  int64_t rows = dst_t->shape[0], d = rows ? dp_cu_numel(dst_t) / rows : 0, n = dp_cu_numel(idx_t);
  void *dst = dp_cu_ptr(dst_t);
  const void *src = dp_cu_ptr(src_t);
  const int64_t *idx = (const int64_t *)dp_cu_ptr(idx_t);
  dp_dtype ddt = dst_t->dtype, sdt = src_t->dtype;
  if (n * d == 0) return 0;
  k_index_add<<<dp_cu_blocks(c, n * d, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)dst, ddt, rows, d, idx, n,
                                                                                      (const char *)src, sdt, base, *c);
  return dp_cu_after_launch(c, "index_add");
}
