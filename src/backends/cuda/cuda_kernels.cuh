/* Device-side helpers shared by the kernel files: launch geometry, typed
 * loads and stores (dtype_conv.h), group reductions for row and channel
 * kernels, and the fault report. The math itself comes from
 * scalar_math.h / philox.h, shared with the CPU backend. */
#ifndef DP_CUDA_KERNELS_CUH
#define DP_CUDA_KERNELS_CUH

#include <math.h>
#include <stdint.h>

#include "backends/cuda/cuda_common.h"
#include "ops/scalar_math.h"
#include "tensor/dtype_conv.h"

#define DP_CU_THREADS 256

/* Grid for n independent items with `threads` per block: enough blocks to
 * fill the device a few times over; kernels loop (grid-stride) past that. */
static inline unsigned dp_cu_blocks(const dp_cu_ctx *c, int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  int64_t cap = (int64_t)c->sm_count * 32;
  if (b > cap) b = cap;
  if (b < 1) b = 1;
  return (unsigned)b;
}

/* Kernels whose blocks each take one item (a row, a (channel, split) pair)
 * are launched with at most this many blocks and loop over the rest: a
 * grid's x dimension stops at 2^31 - 1, and the item counts are int64. The
 * cap is far above what a GPU runs at once, so it costs nothing. */
#define DP_CU_MAX_GRID 65535
static inline unsigned dp_cu_item_grid(int64_t items) {
  return items > DP_CU_MAX_GRID ? DP_CU_MAX_GRID : items < 1 ? 1u : (unsigned)items;
}
/* for (int64_t b = first; b < n; b += grid): block-uniform, so the body may
 * synchronise the block */
#define DP_CU_BLOCK_LOOP(b, n) for (int64_t b = blockIdx.x; b < (n); b += gridDim.x)

#define DP_CU_LOOP(i, n)                                                                                               \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

/* Element byte address */
__device__ __forceinline__ char *dp_cu_at(void *base, int64_t i, dp_dtype dt) {
  return (char *)base + i * (int64_t)dp_dtype_bytes(dt);
}
__device__ __forceinline__ const char *dp_cu_at(const void *base, int64_t i, dp_dtype dt) {
  return (const char *)base + i * (int64_t)dp_dtype_bytes(dt);
}
__device__ __forceinline__ double dp_cu_ld(const void *base, int64_t i, dp_dtype dt) {
  return dp_conv_load_d(dp_cu_at(base, i, dt), dt);
}
__device__ __forceinline__ void dp_cu_st(void *base, int64_t i, dp_dtype dt, double v) {
  dp_conv_store_d(dp_cu_at(base, i, dt), dt, v);
}
__device__ __forceinline__ float dp_cu_ldf(const void *base, int64_t i, dp_dtype dt) {
  return dp_conv_load_f(dp_cu_at(base, i, dt), dt);
}
__device__ __forceinline__ void dp_cu_stf(void *base, int64_t i, dp_dtype dt, float v) {
  dp_conv_store_f(dp_cu_at(base, i, dt), dt, v);
}

/* q = a / b, r = a % b with 32-bit arithmetic when both fit (64-bit
 * division is several times slower on the GPU). */
__device__ __forceinline__ void dp_cu_divmod(int64_t a, int64_t b, int64_t *q, int64_t *r) {
  if (((uint64_t)a | (uint64_t)b) <= 0xffffffffull) {
    uint32_t qq = (uint32_t)a / (uint32_t)b;
    *q = qq;
    *r = (int64_t)((uint32_t)a - qq * (uint32_t)b);
  } else {
    *q = a / b;
    *r = a - *q * b;
  }
}

/* Records a data error (first reporter wins); see dp_cu_fault. */
__device__ __forceinline__ void dp_cu_report(const dp_cu_ctx c, int code, long long a, long long b, long long d,
                                             long long e) {
  if (atomicCAS(c.fault_claim, 0, 1) == 0) {
    c.fault->code = code;
    c.fault->v[0] = a, c.fault->v[1] = b, c.fault->v[2] = d, c.fault->v[3] = e;
    __threadfence_system();
    c.fault->ready = 1;
  }
}

/* ---- group reductions ----
 * A group is one warp or one whole block. Values of a small struct type T
 * are combined with an associative function; every thread of the group gets
 * the result. Block groups need T shared[32] and synchronise (so every
 * thread of the block must call). */
__device__ __forceinline__ double dp_cu_shfl(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ long long dp_cu_shfl(long long v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }

struct dp_cu_acc { /* a running value: a double and/or an integer (sums, extremes with their position) */
  double d;
  long long i;
};
struct dp_cu_pair { /* two doubles: (max, sum of exp) or two sums */
  double a, b;
};
struct dp_cu_welford {
  double n, mean, m2;
};
__device__ __forceinline__ dp_cu_acc dp_cu_shfl(dp_cu_acc v, int m) {
  return dp_cu_acc{dp_cu_shfl(v.d, m), dp_cu_shfl(v.i, m)};
}
__device__ __forceinline__ dp_cu_pair dp_cu_shfl(dp_cu_pair v, int m) {
  return dp_cu_pair{dp_cu_shfl(v.a, m), dp_cu_shfl(v.b, m)};
}
__device__ __forceinline__ dp_cu_welford dp_cu_shfl(dp_cu_welford v, int m) {
  return dp_cu_welford{dp_cu_shfl(v.n, m), dp_cu_shfl(v.mean, m), dp_cu_shfl(v.m2, m)};
}

template <typename T, typename F> __device__ __forceinline__ T dp_cu_warp_reduce(T v, F combine) {
  for (int m = 16; m > 0; m >>= 1) v = combine(v, dp_cu_shfl(v, m));
  return v;
}

/* whole_block: reduce across the block (blockDim.x a multiple of 32). */
template <typename T, typename F>
__device__ __forceinline__ T dp_cu_group_reduce(T v, F combine, bool whole_block, T *shared32) {
  v = dp_cu_warp_reduce(v, combine);
  if (!whole_block) return v;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  T r = shared32[0];
  for (int w = 1; w < nw; w++) r = combine(r, shared32[w]);
  __syncthreads(); /* shared32 may be reused by the caller */
  return r;
}

__device__ __forceinline__ dp_cu_pair dp_cu_sum2(dp_cu_pair x, dp_cu_pair y) {
  return dp_cu_pair{x.a + y.a, x.b + y.b};
}
__device__ __forceinline__ dp_cu_pair dp_cu_lse2(dp_cu_pair x, dp_cu_pair y) {
  dp_lse_merge_d(&x.a, &x.b, y.a, y.b);
  return x;
}
__device__ __forceinline__ dp_cu_welford dp_cu_welford2(dp_cu_welford x, dp_cu_welford y) {
  dp_welford_merge_d(&x.n, &x.mean, &x.m2, y.n, y.mean, y.m2);
  return x;
}

/* Rows of a [rows, cols] matrix handled by a warp each (cols small) or by a
 * block each; the grid is capped (dp_cu_rows_grid), so a kernel walks
 * for (dp_cu_rows g = dp_cu_rows_here(block); g.row < rows; dp_cu_rows_next(&g)),
 * the same number of rounds for every thread of a warp (warp rows) or of
 * the block (block rows). */
struct dp_cu_rows {
  int64_t row;
  int lane, size;
  bool block;
};
__device__ __forceinline__ dp_cu_rows dp_cu_rows_here(bool block) {
  dp_cu_rows r;
  r.block = block;
  if (block) {
    r.row = blockIdx.x, r.lane = threadIdx.x, r.size = blockDim.x;
  } else {
    r.row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), r.lane = threadIdx.x & 31, r.size = 32;
  }
  return r;
}
__device__ __forceinline__ void dp_cu_rows_next(dp_cu_rows *r) {
  r->row += r->block ? (int64_t)gridDim.x : (int64_t)gridDim.x * (blockDim.x >> 5);
}
/* Launch geometry for a row kernel: block per row above 1024 columns. */
static inline bool dp_cu_rows_by_block(int64_t cols) { return cols > 1024; }
static inline unsigned dp_cu_rows_grid(int64_t rows, bool block) {
  return dp_cu_item_grid(block ? rows : (rows + DP_CU_THREADS / 32 - 1) / (DP_CU_THREADS / 32));
}

#endif
