/* CUDA kernels for where, tril/triu, gather, scatter (and scatter_add),
 * topk, cumsum and multinomial. Kept simple: one thread per element
 * (where, tri, gather, scatter) or per line (topk's selection, cumsum's
 * scan, multinomial's row), indexing through the strided plan the CPU
 * kernels use (ops/strided_index.h) and the shared per-element math of
 * ops/model_math.h. An index out of range is recorded with dp_cu_report
 * and raised at the next sync point (the element is skipped). */
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/cuda_model.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* copies one element of es bytes */
__device__ __forceinline__ void copy_elem(char *d, const char *s, int64_t es) {
  switch (es) {
  case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
  case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
  case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
  default: *(uint64_t *)d = *(const uint64_t *)s; break;
  }
}

static dp_index_plan plan_for(int nops, const dp_tensor *shape_of, const int64_t *const *strides) {
  dp_index_plan p;
  dp_index_plan_init(&p, shape_of->ndim, shape_of->shape, nops, strides);
  return p;
}

/* ---- where ---- */
__global__ void k_where(const __grid_constant__ dp_index_plan p, char *out, const uint8_t *cond, const char *a,
                        const char *b, int64_t es) {
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    copy_elem(out + off[0] * es, cond[off[1]] ? a + off[2] * es : b + off[3] * es, es);
  }
}

int dp_cu_where(dp_tensor *out, const dp_tensor *cond, const dp_tensor *a, const dp_tensor *b) {
  DP_CU_ENTER(c, out);
  const int64_t *st[4] = {out->stride, cond->stride, a->stride, b->stride};
  dp_index_plan p = plan_for(4, out, st);
  if (p.numel == 0) return 0;
  k_where<<<dp_cu_blocks(c, p.numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      p, (char *)dp_cu_ptr(out), (const uint8_t *)dp_cu_ptr(cond), (const char *)dp_cu_ptr(a),
      (const char *)dp_cu_ptr(b), (int64_t)dp_dtype_bytes(out->dtype));
  return dp_cu_after_launch(c, "where");
}

/* ---- tril / triu ---- */
__global__ void k_tri(char *out, const char *x, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper,
                      int64_t es) {
  DP_CU_LOOP(e, n) {
    int64_t q, j, i, bt;
    dp_cu_divmod(e, cols, &q, &j);
    dp_cu_divmod(q, rows, &bt, &i);
    bool keep = upper ? j - i >= k : j - i <= k;
    if (keep) copy_elem(out + e * es, x + e * es, es);
    else
      for (int64_t z = 0; z < es; z++) out[e * es + z] = 0;
  }
}

int dp_cu_tri(dp_tensor *out, const dp_tensor *x, int64_t rows, int64_t cols, int64_t k, bool upper) {
  DP_CU_ENTER(c, out);
  int64_t n = dp_cu_numel(x);
  if (n == 0) return 0;
  k_tri<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)dp_cu_ptr(out), (const char *)dp_cu_ptr(x), n, rows, cols, k, upper, (int64_t)dp_dtype_bytes(x->dtype));
  return dp_cu_after_launch(c, upper ? "triu" : "tril");
}

/* ---- gather / scatter: a plan over the index's shape; operand 0 the
 * index, 1 the indexed tensor without its dim's stride, 2 the other ---- */
static dp_index_plan index_plan(const dp_tensor *idx, const dp_tensor *other, int dim, const dp_tensor *third) {
  int64_t ost[DP_MAXDIM];
  for (int d = 0; d < other->ndim; d++) ost[d] = d == dim ? 0 : other->stride[d];
  const int64_t *st[3] = {idx->stride, ost, third->stride};
  return plan_for(3, idx, st);
}

__global__ void k_gather(const __grid_constant__ dp_index_plan p, char *out, const char *src, const int64_t *idx,
                         int64_t size, int64_t sd, int64_t base, int64_t es, const dp_cu_ctx c) {
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    const int64_t v = idx[off[0]];
    if (v < base || v - base >= size) { /* v >= base first: no overflow */
      dp_cu_report(c, DP_CU_FAULT_GATHER, v, i + 1, base, size - 1 + base);
      continue;
    }
    const int64_t j = v - base;
    copy_elem(out + off[2] * es, src + (off[1] + j * sd) * es, es);
  }
}

int dp_cu_gather(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int dim, int64_t base) {
  DP_CU_ENTER(c, out);
  dp_index_plan p = index_plan(idx, src, dim, out);
  if (p.numel == 0) return 0;
  k_gather<<<dp_cu_blocks(c, p.numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      p, (char *)dp_cu_ptr(out), (const char *)dp_cu_ptr(src), (const int64_t *)dp_cu_ptr(idx), src->shape[dim],
      src->stride[dim], base, (int64_t)dp_dtype_bytes(src->dtype), *c);
  return dp_cu_after_launch(c, "gather");
}

__device__ __forceinline__ void atomic_add_byte(uint8_t *p, unsigned v) {
  unsigned *word = (unsigned *)((uintptr_t)p & ~(uintptr_t)3);
  unsigned shift = ((unsigned)(uintptr_t)p & 3u) * 8u;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    unsigned byte = ((assumed >> shift) + v) & 0xffu;
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
  } while (old != assumed);
}

__global__ void k_scatter(const __grid_constant__ dp_index_plan p, char *dst, const char *src, const int64_t *idx,
                          int64_t size, int64_t sd, int64_t base, dp_dtype dt, bool accumulate, const dp_cu_ctx c) {
  const int64_t es = (int64_t)dp_dtype_bytes(dt);
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    const int64_t v = idx[off[0]];
    if (v < base || v - base >= size) { /* v >= base first: no overflow */
      dp_cu_report(c, DP_CU_FAULT_SCATTER_DIM, v, i + 1, base, size - 1 + base);
      continue;
    }
    const int64_t j = v - base;
    char *d = dst + (off[1] + j * sd) * es;
    const char *s = src + off[2] * es;
    if (!accumulate) {
      copy_elem(d, s, es);
      continue;
    }
    switch (dt) {
    case DP_F32: atomicAdd((float *)d, *(const float *)s); break;
    case DP_F64: atomicAdd((double *)d, *(const double *)s); break;
    case DP_BF16: atomicAdd((__nv_bfloat16 *)d, *(const __nv_bfloat16 *)s); break;
    case DP_F16: atomicAdd((__half *)d, *(const __half *)s); break;
    case DP_I64: atomicAdd((unsigned long long *)d, *(const unsigned long long *)s); break;
    default: atomic_add_byte((uint8_t *)d, *(const uint8_t *)s); break;
    }
  }
}

int dp_cu_scatter(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int dim, int64_t base, bool accumulate) {
  DP_CU_ENTER(c, dst);
  dp_index_plan p = index_plan(idx, dst, dim, src);
  if (p.numel == 0) return 0;
  k_scatter<<<dp_cu_blocks(c, p.numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      p, (char *)dp_cu_ptr(dst), (const char *)dp_cu_ptr(src), (const int64_t *)dp_cu_ptr(idx), dst->shape[dim],
      dst->stride[dim], base, dst->dtype, accumulate, *c);
  return dp_cu_after_launch(c, accumulate ? "scatter_add" : "scatter");
}

/* ---- topk: one thread per line; pick r is the best element after pick
 * r - 1 in dp_topk_before's strict order (O(n k), no scratch) ---- */
__global__ void k_topk(char *vals, int64_t *inds, const char *x, dp_dtype dt, int64_t outer, int64_t n, int64_t inner,
                       int64_t k, bool largest, int64_t base) {
  const int64_t es = (int64_t)dp_dtype_bytes(dt);
  DP_CU_LOOP(line, outer * inner) {
    int64_t o, in;
    dp_cu_divmod(line, inner, &o, &in);
    double pv = 0;
    int64_t pi = -1;
    for (int64_t r = 0; r < k; r++) {
      double bv = 0;
      int64_t bi = -1;
      for (int64_t j = 0; j < n; j++) {
        double v = dp_cu_ld(x, (o * n + j) * inner + in, dt);
        if (pi >= 0 && !dp_topk_before(pv, pi, v, j, largest)) continue; /* already picked */
        if (bi < 0 || dp_topk_before(v, j, bv, bi, largest)) bv = v, bi = j;
      }
      int64_t oi = (o * k + r) * inner + in;
      copy_elem(vals + oi * es, x + ((o * n + bi) * inner + in) * es, es);
      inds[oi] = bi + base;
      pv = bv, pi = bi;
    }
  }
}

int dp_cu_topk(dp_tensor *values, dp_tensor *indices, const dp_tensor *x, const dp_reduce_args *a, int64_t k,
               bool largest) {
  DP_CU_ENTER(c, x);
  int64_t lines = a->outer * a->inner;
  if (lines == 0 || k == 0) return 0;
  k_topk<<<dp_cu_blocks(c, lines, 128), 128, 0, c->stream>>>((char *)dp_cu_ptr(values), (int64_t *)dp_cu_ptr(indices),
                                                             (const char *)dp_cu_ptr(x), x->dtype, a->outer, a->k,
                                                             a->inner, k, largest, a->base);
  return dp_cu_after_launch(c, "topk");
}

/* ---- cumsum: one thread per line, double (or exact int64) sums ---- */
__global__ void k_cumsum(char *out, dp_dtype odt, const char *x, dp_dtype xdt, int64_t outer, int64_t n, int64_t inner,
                         bool reverse) {
  DP_CU_LOOP(line, outer * inner) {
    int64_t o, in;
    dp_cu_divmod(line, inner, &o, &in);
    double acc = 0;
    long long iacc = 0;
    for (int64_t s = 0; s < n; s++) {
      int64_t j = reverse ? n - 1 - s : s, at = (o * n + j) * inner + in;
      if (odt == DP_I64) {
        long long v = xdt == DP_I64 ? ((const long long *)x)[at] : (long long)((const uint8_t *)x)[at];
        iacc = (long long)((unsigned long long)iacc + (unsigned long long)v);
        ((long long *)out)[at] = iacc;
      } else {
        acc += dp_cu_ld(x, at, xdt);
        dp_cu_st(out, at, odt, acc);
      }
    }
  }
}

int dp_cu_cumsum(dp_tensor *out, const dp_tensor *x, const dp_reduce_args *a, bool reverse) {
  DP_CU_ENTER(c, x);
  int64_t lines = a->outer * a->inner;
  if (lines == 0 || a->k == 0) return 0;
  k_cumsum<<<dp_cu_blocks(c, lines, 128), 128, 0, c->stream>>>(
      (char *)dp_cu_ptr(out), out->dtype, (const char *)dp_cu_ptr(x), x->dtype, a->outer, a->k, a->inner, reverse);
  return dp_cu_after_launch(c, "cumsum");
}

/* ---- cummax / cummin: one thread per line, int64 compared exactly; values (when asked) the element there ---- */
__global__ void k_cum_extreme(char *values, int64_t *idx, const char *x, dp_dtype xdt, int64_t outer, int64_t n,
                              int64_t inner, bool is_max, int64_t base) {
  DP_CU_LOOP(line, outer * inner) {
    int64_t o, in;
    dp_cu_divmod(line, inner, &o, &in);
    int64_t at = o * n * inner + in, best = 0;
    double cur = dp_cu_ld(x, at, xdt);
    long long icur = xdt == DP_I64 ? ((const long long *)x)[at] : 0;
    idx[at] = base;
    if (values) {
      if (xdt == DP_I64) ((long long *)values)[at] = icur;
      else dp_cu_st(values, at, xdt, cur);
    }
    for (int64_t j = 1; j < n; j++) {
      at += inner;
      bool takes;
      if (xdt == DP_I64) {
        long long v = ((const long long *)x)[at];
        takes = is_max ? v >= icur : v <= icur;
        if (takes) icur = v;
      } else {
        double v = dp_cu_ld(x, at, xdt);
        takes = dp_cum_extreme_takes(v, cur, is_max);
        if (takes) cur = v;
      }
      if (takes) best = j;
      idx[at] = best + base;
      if (values) {
        if (xdt == DP_I64) ((long long *)values)[at] = icur;
        else dp_cu_st(values, at, xdt, cur);
      }
    }
  }
}

int dp_cu_cum_extreme(dp_tensor *values, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a, bool is_max) {
  DP_CU_ENTER(c, x);
  int64_t lines = a->outer * a->inner;
  if (lines == 0 || a->k == 0) return 0;
  k_cum_extreme<<<dp_cu_blocks(c, lines, 128), 128, 0, c->stream>>>(
      values ? (char *)dp_cu_ptr(values) : NULL, (int64_t *)dp_cu_ptr(idx), (const char *)dp_cu_ptr(x), x->dtype,
      a->outer, a->k, a->inner, is_max, a->base);
  return dp_cu_after_launch(c, "cum_extreme");
}

/* ---- cumprod / logcumsumexp and their gradients: one thread per line, folded in double (int64 products
 * exactly), the math of ops/model_math.h; the gradients' two passes as the CPU kernel's (cpu_scan.c) ---- */
__global__ void k_cum_scan(char *out, const char *x, const char *g, dp_dtype dt, int64_t outer, int64_t n,
                           int64_t inner, dp_scan_kind k) {
  DP_CU_LOOP(line, outer * inner) {
    int64_t o, in;
    dp_cu_divmod(line, inner, &o, &in);
    int64_t first = o * n * inner + in;
    if (dt == DP_I64) {
      unsigned long long acc = 1;
      for (int64_t j = 0; j < n; j++) {
        acc *= (unsigned long long)((const long long *)x)[first + j * inner];
        ((long long *)out)[first + j * inner] = (long long)acc;
      }
      continue;
    }
    double acc = dp_scan_start(k);
    for (int64_t j = 0; j < n; j++) {
      int64_t at = first + j * inner;
      double folded = dp_scan_fold(k, acc, dp_cu_ld(x, at, dt));
      dp_cu_st(out, at, dt, k == DP_SCAN_PROD_GRAD ? acc : folded);
      acc = folded;
    }
    if (k == DP_SCAN_PROD || k == DP_SCAN_LOGADDEXP) continue;
    double carry = 0, next = 0;
    for (int64_t j = n - 1; j >= 0; j--) {
      int64_t at = first + j * inner;
      double xv = dp_cu_ld(x, at, dt), stored = dp_cu_ld(out, at, dt);
      carry = dp_scan_grad_carry(k, dp_cu_ld(g, at, dt), stored, next, carry, j == n - 1);
      dp_cu_st(out, at, dt, dp_scan_grad_value(k, xv, stored, carry));
      next = k == DP_SCAN_PROD_GRAD ? xv : stored;
    }
  }
}

int dp_cu_cum_scan(dp_tensor *out, const dp_tensor *x, const dp_tensor *g, const dp_reduce_args *a, dp_scan_kind kind) {
  DP_CU_ENTER(c, x);
  int64_t lines = a->outer * a->inner;
  if (lines == 0 || a->k == 0) return 0;
  k_cum_scan<<<dp_cu_blocks(c, lines, 128), 128, 0, c->stream>>>((char *)dp_cu_ptr(out), (const char *)dp_cu_ptr(x),
                                                                 g ? (const char *)dp_cu_ptr(g) : NULL, x->dtype,
                                                                 a->outer, a->k, a->inner, kind);
  return dp_cu_after_launch(c, "cum_scan");
}

/* ---- searchsorted: one thread per value, a binary search over its row; int64 compared exactly ---- */
__global__ void k_searchsorted(int64_t *out, const char *seq, const char *v, dp_dtype dt, int64_t rows, int64_t n,
                               int64_t m, bool shared, bool right, int64_t base) {
  DP_CU_LOOP(i, rows * m) {
    int64_t row_at = shared ? 0 : (i / m) * n, at = 0, len = n;
    double x = dp_cu_ld(v, i, dt);
    long long xi = dt == DP_I64 ? ((const long long *)v)[i] : 0;
    while (len > 0) {
      int64_t half = len >> 1;
      bool go;
      if (dt == DP_I64) {
        long long b = ((const long long *)seq)[row_at + at + half];
        go = right ? b <= xi : b < xi;
      } else {
        go = x != x || dp_boundary_before(dp_cu_ld(seq, row_at + at + half, dt), x, right);
      }
      at = go ? at + half + 1 : at;
      len = go ? len - half - 1 : half;
    }
    out[i] = at + base;
  }
}

int dp_cu_searchsorted(dp_tensor *out, const dp_tensor *seq, const dp_tensor *v, int64_t rows, int64_t n, int64_t m,
                       bool right, int64_t base) {
  DP_CU_ENTER(c, v);
  if (rows * m == 0) return 0;
  bool shared = seq->shape[0] == 1 && rows > 1;
  k_searchsorted<<<dp_cu_blocks(c, rows * m, 128), 128, 0, c->stream>>>(
      (int64_t *)dp_cu_ptr(out), (const char *)dp_cu_ptr(seq), (const char *)dp_cu_ptr(v), v->dtype, rows, n, m, shared,
      right, base);
  return dp_cu_after_launch(c, "searchsorted");
}

/* ---- multinomial: one thread per row ---- */
__global__ void k_multinomial(int64_t *out, double *w, const double *u, int64_t rows, int64_t cats, int64_t n,
                              bool replacement, int64_t base) {
  DP_CU_LOOP(r, rows) dp_multinomial_row(w + r * cats, cats, u + r * n, n, replacement, base, out + r * n);
}

int dp_cu_multinomial(dp_tensor *out, dp_tensor *w, const dp_tensor *u, int64_t rows, int64_t cats, int64_t n,
                      bool replacement, int64_t base) {
  DP_CU_ENTER(c, out);
  if (rows == 0 || n == 0) return 0;
  k_multinomial<<<dp_cu_blocks(c, rows, 64), 64, 0, c->stream>>>((int64_t *)dp_cu_ptr(out), (double *)dp_cu_ptr(w),
                                                                 (const double *)dp_cu_ptr(u), rows, cats, n,
                                                                 replacement, base);
  return dp_cu_after_launch(c, "multinomial");
}
