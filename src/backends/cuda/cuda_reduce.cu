/* CUDA reductions over the middle axis of a contiguous [outer, k, inner]
 * view, with the CPU's semantics: float sums and products accumulate in
 * double, integer ones exactly in int64; max/min/argmax/argmin keep the
 * first occurrence and let NaN win (the first NaN), which as a pairwise
 * combine is associative, so the parallel result equals the CPU's scan.
 *
 * inner == 1 (rows): a block per row; inner > 1 (columns): a thread per
 * output walking k with stride inner, so neighbouring threads read
 * neighbouring memory. When there are too few outputs to fill the GPU, k is
 * split across blocks/threads into partial results and a second kernel
 * combines them. */
#include "backends/cuda/cuda_kernels.cuh"

/* ACC_IMAX / ACC_IMIN: int64 extremes, compared as integers (the value's
 * bits ride in the accumulator's double), so values beyond 2^53 that a
 * double would merge stay distinct */
enum { ACC_FSUM, ACC_FPROD, ACC_ISUM, ACC_IPROD, ACC_MAX, ACC_MIN, ACC_IMAX, ACC_IMIN };

struct reduce_args {
  const char *x;
  dp_dtype xdt;
  int acc; /* ACC_* */
  dp_reduce_op op;
  int64_t outer, k, inner, splits, chunk, base;
  char *out;
  dp_dtype odt;
  int64_t *idx;
  dp_cu_acc *partial; /* [outer * inner * splits] when splits > 1 */
};

__device__ __forceinline__ dp_cu_acc acc_identity(int acc) {
  switch (acc) {
  case ACC_FPROD: return dp_cu_acc{1.0, 0};
  case ACC_IPROD: return dp_cu_acc{0.0, 1};
  case ACC_MAX:
  case ACC_MIN:
  case ACC_IMAX:
  case ACC_IMIN: return dp_cu_acc{0.0, -1}; /* i < 0: empty */
  default: return dp_cu_acc{0.0, 0};
  }
}

/* a and b cover disjoint ranges; for extremes the smaller position wins ties */
__device__ __forceinline__ dp_cu_acc acc_combine(int acc, dp_cu_acc a, dp_cu_acc b) {
  switch (acc) {
  case ACC_FSUM: return dp_cu_acc{a.d + b.d, 0};
  case ACC_FPROD: return dp_cu_acc{a.d * b.d, 0};
  case ACC_ISUM: return dp_cu_acc{0.0, (long long)((unsigned long long)a.i + (unsigned long long)b.i)};
  case ACC_IPROD: return dp_cu_acc{0.0, (long long)((unsigned long long)a.i * (unsigned long long)b.i)};
  case ACC_IMAX:
  case ACC_IMIN: {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    long long av = __double_as_longlong(a.d), bv = __double_as_longlong(b.d);
    if (av != bv) return (acc == ACC_IMAX ? av > bv : av < bv) ? a : b;
    return a.i < b.i ? a : b;
  }
  default: {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    bool an = a.d != a.d, bn = b.d != b.d;
    if (an || bn) {
      if (an && bn) return a.i < b.i ? a : b;
      return an ? a : b;
    }
    bool a_better = acc == ACC_MAX ? a.d > b.d : a.d < b.d;
    bool b_better = acc == ACC_MAX ? b.d > a.d : b.d < a.d;
    if (a_better) return a;
    if (b_better) return b;
    return a.i < b.i ? a : b;
  }
  }
}

/* element j of output (o, i) */
__device__ __forceinline__ dp_cu_acc acc_load(const reduce_args &r, int64_t o, int64_t j, int64_t i) {
  const char *e = r.x + ((o * r.k + j) * r.inner + i) * (int64_t)dp_dtype_bytes(r.xdt);
  switch (r.acc) {
  case ACC_ISUM:
  case ACC_IPROD: {
    long long v = r.xdt == DP_I64  ? *(const int64_t *)e
                  : r.xdt == DP_U8 ? (long long)*(const uint8_t *)e
                                   : (long long)dp_conv_load_d(e, r.xdt);
    return dp_cu_acc{0.0, v};
  }
  case ACC_MAX:
  case ACC_MIN: return dp_cu_acc{dp_conv_load_d(e, r.xdt), j};
  case ACC_IMAX:
  case ACC_IMIN: return dp_cu_acc{__longlong_as_double(*(const long long *)e), j};
  default: return dp_cu_acc{dp_conv_load_d(e, r.xdt), 0};
  }
}

__device__ void acc_finish(const reduce_args &r, int64_t o, int64_t i, dp_cu_acc a) {
  int64_t pos = o * r.inner + i;
  switch (r.acc) {
  case ACC_ISUM:
  case ACC_IPROD: ((int64_t *)r.out)[pos] = a.i; return;
  case ACC_FSUM:
  case ACC_FPROD: {
    double v = r.op == DP_R_MEAN ? (r.k ? a.d / (double)r.k : NAN) : a.d;
    dp_cu_st(r.out, pos, r.odt, v);
    return;
  }
  default:
    if (r.op == DP_R_ARGMAX || r.op == DP_R_ARGMIN) {
      ((int64_t *)r.out)[pos] = a.i + r.base;
    } else {
      /* copy the element itself (exact for int64) */
      size_t es = dp_dtype_bytes(r.xdt);
      const char *src = r.x + ((o * r.k + a.i) * r.inner + i) * (int64_t)es;
      char *dst = r.out + pos * (int64_t)es;
      for (size_t b = 0; b < es; b++) dst[b] = src[b];
      if (r.idx) r.idx[pos] = a.i + r.base;
    }
  }
}

/* inner == 1: block (row, split), looping past the capped grid */
__global__ void k_reduce_rows(const __grid_constant__ reduce_args r) {
  __shared__ dp_cu_acc shm[32];
  DP_CU_BLOCK_LOOP(item, r.outer * r.splits) {
    int64_t row = item / r.splits, s = item % r.splits;
    int64_t j0 = s * r.chunk, j1 = j0 + r.chunk < r.k ? j0 + r.chunk : r.k;
    dp_cu_acc a = acc_identity(r.acc);
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) a = acc_combine(r.acc, a, acc_load(r, row, j, 0));
    int acc = r.acc;
    a = dp_cu_group_reduce(
        a, [acc](dp_cu_acc x, dp_cu_acc y) { return acc_combine(acc, x, y); }, true, shm);
    if (threadIdx.x == 0) {
      if (r.splits > 1) r.partial[row * r.splits + s] = a;
      else acc_finish(r, row, 0, a);
    }
  }
}

/* inner > 1: thread (split, o, i), i fastest so that neighbouring threads
 * read neighbouring columns */
__global__ void k_reduce_cols(const __grid_constant__ reduce_args r) {
  int64_t outputs = r.outer * r.inner, total = outputs * r.splits;
  DP_CU_LOOP(t, total) {
    int64_t s = t / outputs, oi = t % outputs;
    int64_t o = oi / r.inner, i = oi % r.inner;
    int64_t j0 = s * r.chunk, j1 = j0 + r.chunk < r.k ? j0 + r.chunk : r.k;
    dp_cu_acc a = acc_identity(r.acc);
    for (int64_t j = j0; j < j1; j++) a = acc_combine(r.acc, a, acc_load(r, o, j, i));
    if (r.splits > 1) r.partial[oi * r.splits + s] = a;
    else acc_finish(r, o, i, a);
  }
}

__global__ void k_reduce_finish(const __grid_constant__ reduce_args r) {
  DP_CU_LOOP(oi, r.outer * r.inner) {
    dp_cu_acc a = acc_identity(r.acc);
    for (int64_t s = 0; s < r.splits; s++) a = acc_combine(r.acc, a, r.partial[oi * r.splits + s]);
    acc_finish(r, oi / r.inner, oi % r.inner, a);
  }
}

int dp_cu_reduce(dp_tensor *out_t, dp_tensor *idx_t, const dp_tensor *x_t, const dp_reduce_args *ra) {
  DP_CU_ENTER(c, x_t);
  dp_reduce_op op = ra->op;
  int64_t outer = ra->outer, k = ra->k, inner = ra->inner, base = ra->base;
  void *out = dp_cu_ptr(out_t);
  int64_t *idx = idx_t ? (int64_t *)dp_cu_ptr(idx_t) : NULL;
  const void *x = dp_cu_ptr(x_t);
  dp_dtype odt = out_t->dtype, xdt = x_t->dtype;
  reduce_args r;
  r.x = (const char *)x, r.xdt = xdt, r.op = op, r.outer = outer, r.k = k, r.inner = inner, r.base = base;
  r.out = (char *)out, r.odt = odt, r.idx = idx, r.partial = NULL;
  bool integer = odt != DP_F32 && odt != DP_F64 && odt != DP_BF16 && odt != DP_F16;
  switch (op) {
  case DP_R_SUM:
  case DP_R_MEAN: r.acc = integer ? ACC_ISUM : ACC_FSUM; break;
  case DP_R_PROD: r.acc = integer ? ACC_IPROD : ACC_FPROD; break;
  case DP_R_MAX:
  case DP_R_ARGMAX: r.acc = xdt == DP_I64 ? ACC_IMAX : ACC_MAX; break;
  default: r.acc = xdt == DP_I64 ? ACC_IMIN : ACC_MIN; break;
  }
  if (r.acc >= ACC_MAX && k == 0) return dp_cu_error("max/min of an empty dimension is undefined");
  int64_t outputs = outer * inner;
  if (outputs == 0) return 0;
  bool rows = inner == 1;
  /* split k when the outputs alone cannot fill the device */
  int64_t target = rows ? 2 * (int64_t)c->sm_count : 2 * (int64_t)c->sm_count * DP_CU_THREADS;
  int64_t min_chunk = rows ? 8192 : 64;
  int64_t splits = 1;
  if (outputs < target && k > min_chunk) {
    splits = (target + outputs - 1) / outputs;
    int64_t by_k = (k + min_chunk - 1) / min_chunk;
    if (splits > by_k) splits = by_k;
    if (splits > 1024) splits = 1024;
  }
  r.splits = splits;
  r.chunk = (k + splits - 1) / splits;
  if (r.chunk == 0) r.chunk = 1;
  size_t pbytes = 0;
  if (splits > 1) {
    pbytes = (size_t)(outputs * splits) * sizeof(dp_cu_acc);
    r.partial = (dp_cu_acc *)dp_cu_scratch(c, pbytes);
    if (!r.partial) return -1;
  }
  if (rows) k_reduce_rows<<<dp_cu_item_grid(outputs * splits), DP_CU_THREADS, 0, c->stream>>>(r);
  else k_reduce_cols<<<dp_cu_blocks(c, outputs * splits, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(r);
  int rc = dp_cu_after_launch(c, "reduction");
  if (!rc && splits > 1) {
    k_reduce_finish<<<dp_cu_blocks(c, outputs, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(r);
    rc = dp_cu_after_launch(c, "reduction");
  }
  if (r.partial) dp_cu_scratch_free(c, r.partial, pbytes);
  return rc;
}

/* gx [o, idx[o,i] - base, i] += gy[o, i]: one destination per (o, i), so no
 * two threads write the same element. */
__global__ void k_scatter_add_dim(char *gx, dp_dtype gxdt, const char *gy, dp_dtype gydt, const int64_t *idx,
                                  int64_t outer, int64_t k, int64_t inner, int64_t base, const dp_cu_ctx c) {
  DP_CU_LOOP(t, outer * inner) {
    int64_t o = t / inner, i = t % inner;
    int64_t j = idx[t] < base ? -1 : idx[t] - base; /* no overflow */
    if (j < 0 || j >= k) {
      dp_cu_report(c, DP_CU_FAULT_SCATTER, idx[t], base, k - 1 + base, 0);
      continue;
    }
    int64_t d = (o * k + j) * inner + i;
    dp_cu_st(gx, d, gxdt, dp_cu_ld(gx, d, gxdt) + dp_cu_ld(gy, t, gydt));
  }
}

int dp_cu_scatter_add_dim(dp_tensor *gx_t, const dp_tensor *gy_t, const dp_tensor *idx_t, const dp_reduce_args *ra) {
  DP_CU_ENTER(c, gx_t);
  int64_t outer = ra->outer, k = ra->k, inner = ra->inner, base = ra->base;
  void *gx = dp_cu_ptr(gx_t);
  const void *gy = dp_cu_ptr(gy_t);
  const int64_t *idx = (const int64_t *)dp_cu_ptr(idx_t);
  dp_dtype gxdt = gx_t->dtype, gydt = gy_t->dtype;
  int64_t n = outer * inner;
  if (n == 0) return 0;
  k_scatter_add_dim<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)gx, gxdt, (const char *)gy, gydt, idx, outer, k, inner, base, *c);
  return dp_cu_after_launch(c, "scatter_add");
}
