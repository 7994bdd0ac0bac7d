/* CUDA scaled dot-product attention (contract: backends/backend.h,
 * dp_attn_args), written to be obviously correct rather than fast: the
 * same online softmax as the CPU kernel, one warp per row.
 *
 * Forward: a warp per query row walks the keys one at a time; each score
 * is a warp-reduced dot product, folded into the running maximum m, sum l
 * and the output accumulator, whose Ev values are spread over the lanes.
 * Backward: a warp per query row recomputes its scores and weights P =
 * exp(S - lse), writes D = rowsum(dO O) and accumulates dQ; then a warp
 * per key row walks the queries for dK and dV. No atomics; the dropout
 * mask is recomputed from Philox (dp_attn_keep) as on the CPU. Float
 * inputs (float32, bfloat16, float16) accumulate in float, float64 in
 * double. */
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/cuda_model.h"
#include "ops/model_math.h"

enum { MAXV = 8 }; /* head dims up to 32 * MAXV */

struct view4 { /* a [b1, b2, rows, cols] tensor as the kernels see it */
  const char *p;
  int64_t s[4];
};

struct attn_k {
  view4 q, k, v, m;
  dp_dtype dt, mdt;
  bool has_mask, mask_bool, causal;
  int64_t b2, L, S, E, Ev;
  double scale;
  float pdrop;
  uint64_t seed, offset;
};

static view4 view_of(const dp_tensor *t) {
  view4 v = {NULL, {0, 0, 0, 0}};
  if (!t) return v;
  v.p = (const char *)dp_cu_ptr(t);
  for (int d = 0; d < 4; d++) v.s[d] = t->stride[d];
  return v;
}

static attn_k kargs(const dp_attn_args *a) {
  attn_k k;
  k.q = view_of(a->q), k.k = view_of(a->k), k.v = view_of(a->v), k.m = view_of(a->mask);
  k.dt = a->q->dtype, k.mdt = a->mask ? a->mask->dtype : DP_U8;
  k.has_mask = a->mask != NULL, k.mask_bool = a->mask_bool, k.causal = a->causal;
  k.b2 = a->b2, k.L = a->L, k.S = a->S, k.E = a->E, k.Ev = a->Ev;
  k.scale = a->scale, k.pdrop = (float)a->dropout_p, k.seed = a->seed, k.offset = a->offset;
  return k;
}

__device__ __forceinline__ int64_t at4(const view4 &v, int64_t bh, int64_t b2, int64_t r, int64_t c) {
  return (bh / b2) * v.s[0] + (bh % b2) * v.s[1] + r * v.s[2] + c * v.s[3];
}

template <typename A> __device__ __forceinline__ A ld(const view4 &v, dp_dtype dt, int64_t off) {
  return (A)dp_cu_ld(v.p, off, dt);
}

/* the score of query i and key j (every lane gets it), masked */
template <typename A> __device__ A score(const attn_k &a, int64_t bh, int64_t i, int64_t j, int lane) {
  A d = 0;
  for (int64_t e = lane; e < a.E; e += 32)
    d += ld<A>(a.q, a.dt, at4(a.q, bh, a.b2, i, e)) * ld<A>(a.k, a.dt, at4(a.k, bh, a.b2, j, e));
  for (int w = 16; w > 0; w >>= 1) d += __shfl_xor_sync(0xffffffffu, d, w);
  d *= (A)a.scale;
  if (a.has_mask) {
    int64_t mo = at4(a.m, bh, a.b2, i, j);
    if (a.mask_bool) d = ((const uint8_t *)a.m.p)[mo] ? d : (A)-INFINITY;
    else d += (A)dp_cu_ld(a.m.p, mo, a.mdt);
  }
  if (a.causal && j > i) d = (A)-INFINITY;
  return d;
}

template <typename A> __device__ __forceinline__ A keep_scale(const attn_k &a, int64_t bh, int64_t i, int64_t j) {
  if (a.pdrop <= 0) return (A)1;
  uint64_t e = (uint64_t)((bh * a.L + i) * a.S + j);
  return dp_attn_keep(a.seed, a.offset, e, a.pdrop) ? (A)(1.0 / (1.0 - (double)a.pdrop)) : (A)0;
}

template <typename A> __device__ __forceinline__ A warp_sum(A v) {
  for (int w = 16; w > 0; w >>= 1) v += __shfl_xor_sync(0xffffffffu, v, w);
  return v;
}

template <typename A> __global__ void k_attn_fwd(const attn_k a, char *out, char *lse, dp_dtype ldt, int64_t rows) {
  int lane = threadIdx.x & 31;
  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < rows;
       row += ((int64_t)gridDim.x * blockDim.x) >> 5) {
    int64_t bh = row / a.L, i = row % a.L;
    A m = (A)-INFINITY, l = 0, acc[MAXV];
    for (int u = 0; u < MAXV; u++) acc[u] = 0;
    int64_t jend = a.causal && i + 1 < a.S ? i + 1 : a.S;
    for (int64_t j = 0; j < jend; j++) {
      A s = score<A>(a, bh, i, j, lane);
      if (s == (A)-INFINITY) continue;
      A mn = s > m ? s : m;
      A alpha = exp(m - mn), p = exp(s - mn), z = p * keep_scale<A>(a, bh, i, j);
      l = l * alpha + p;
      m = mn;
      for (int u = 0; u < MAXV; u++) {
        int64_t e = lane + 32 * u;
        if (e < a.Ev) acc[u] = acc[u] * alpha + z * ld<A>(a.v, a.dt, at4(a.v, bh, a.b2, j, e));
      }
    }
    for (int u = 0; u < MAXV; u++) {
      int64_t e = lane + 32 * u;
      if (e < a.Ev) dp_cu_st(out, row * a.Ev + e, a.dt, l > 0 ? (double)(acc[u] / l) : 0.0);
    }
    if (lane == 0) dp_cu_st(lse, row, ldt, l > 0 ? (double)(m + log(l)) : -INFINITY);
  }
}

/* dQ of one query row, and D = rowsum(dO O) for the key pass */
template <typename A>
__global__ void k_attn_bwd_q(const attn_k a, const char *out, const char *gout, const char *lse, dp_dtype ldt, char *gq,
                             char *gmask, A *D, int64_t rows) {
  int lane = threadIdx.x & 31;
  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < rows;
       row += ((int64_t)gridDim.x * blockDim.x) >> 5) {
    int64_t bh = row / a.L, i = row % a.L;
    A di = 0, dq[MAXV];
    for (int64_t e = lane; e < a.Ev; e += 32)
      di += (A)dp_cu_ld(gout, row * a.Ev + e, a.dt) * (A)dp_cu_ld(out, row * a.Ev + e, a.dt);
    di = warp_sum(di);
    if (lane == 0) D[row] = di;
    for (int u = 0; u < MAXV; u++) dq[u] = 0;
    A li = (A)dp_cu_ld(lse, row, ldt);
    for (int64_t j = 0; j < a.S; j++) {
      A s = score<A>(a, bh, i, j, lane);
      A p = li == (A)-INFINITY ? (A)0 : exp(s - li), dz = 0;
      for (int64_t e = lane; e < a.Ev; e += 32)
        dz += (A)dp_cu_ld(gout, row * a.Ev + e, a.dt) * ld<A>(a.v, a.dt, at4(a.v, bh, a.b2, j, e));
      dz = warp_sum(dz);
      A ds = p * (dz * keep_scale<A>(a, bh, i, j) - di);
      if (gmask && lane == 0) dp_cu_st(gmask, row * a.S + j, a.dt, (double)ds);
      for (int u = 0; u < MAXV; u++) {
        int64_t e = lane + 32 * u;
        if (e < a.E) dq[u] += (A)a.scale * ds * ld<A>(a.k, a.dt, at4(a.k, bh, a.b2, j, e));
      }
    }
    for (int u = 0; u < MAXV; u++) {
      int64_t e = lane + 32 * u;
      if (e < a.E) dp_cu_st(gq, row * a.E + e, a.dt, (double)dq[u]);
    }
  }
}

/* dK and dV of one key row */
template <typename A>
__global__ void k_attn_bwd_kv(const attn_k a, const char *gout, const char *lse, dp_dtype ldt, const A *D, char *gk,
                              char *gv, int64_t krows) {
  int lane = threadIdx.x & 31;
  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < krows;
       row += ((int64_t)gridDim.x * blockDim.x) >> 5) {
    int64_t bh = row / a.S, j = row % a.S;
    A dk[MAXV], dv[MAXV];
    for (int u = 0; u < MAXV; u++) dk[u] = dv[u] = 0;
    for (int64_t i = a.causal ? j : 0; i < a.L; i++) {
      int64_t qrow = bh * a.L + i;
      A li = (A)dp_cu_ld(lse, qrow, ldt);
      A s = score<A>(a, bh, i, j, lane);
      A p = li == (A)-INFINITY ? (A)0 : exp(s - li), ks = keep_scale<A>(a, bh, i, j), dz = 0;
      for (int64_t e = lane; e < a.Ev; e += 32)
        dz += (A)dp_cu_ld(gout, qrow * a.Ev + e, a.dt) * ld<A>(a.v, a.dt, at4(a.v, bh, a.b2, j, e));
      dz = warp_sum(dz);
      A ds = p * (dz * ks - D[qrow]);
      for (int u = 0; u < MAXV; u++) {
        int64_t e = lane + 32 * u;
        if (e < a.Ev) dv[u] += p * ks * (A)dp_cu_ld(gout, qrow * a.Ev + e, a.dt);
        if (e < a.E) dk[u] += (A)a.scale * ds * ld<A>(a.q, a.dt, at4(a.q, bh, a.b2, i, e));
      }
    }
    for (int u = 0; u < MAXV; u++) {
      int64_t e = lane + 32 * u;
      if (e < a.Ev) dp_cu_st(gv, row * a.Ev + e, a.dt, (double)dv[u]);
      if (e < a.E) dp_cu_st(gk, row * a.E + e, a.dt, (double)dk[u]);
    }
  }
}

static int check_dims(const dp_attn_args *a) {
  if (a->E > 32 * MAXV || a->Ev > 32 * MAXV)
    return dp_cu_error("scaled_dot_product_attention on cuda: head dimensions up to %d are supported, got %lld and "
                       "%lld",
                       32 * MAXV, (long long)a->E, (long long)a->Ev);
  return 0;
}

static unsigned warp_grid(int64_t rows) {
  int64_t blocks = (rows + 7) / 8; /* 8 warps per block */
  return dp_cu_item_grid(blocks);
}

int dp_cu_attention(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a) {
  DP_CU_ENTER(c, out);
  if (check_dims(a)) return -1;
  int64_t rows = a->b1 * a->b2 * a->L;
  if (rows == 0) return 0;
  attn_k k = kargs(a);
  if (a->q->dtype == DP_F64)
    k_attn_fwd<double>
        <<<warp_grid(rows), 256, 0, c->stream>>>(k, (char *)dp_cu_ptr(out), (char *)dp_cu_ptr(lse), lse->dtype, rows);
  else
    k_attn_fwd<float>
        <<<warp_grid(rows), 256, 0, c->stream>>>(k, (char *)dp_cu_ptr(out), (char *)dp_cu_ptr(lse), lse->dtype, rows);
  return dp_cu_after_launch(c, "scaled_dot_product_attention");
}

template <typename A>
static int backward_t(const dp_cu_ctx *c, const dp_attn_args *a, dp_tensor *gq, dp_tensor *gk, dp_tensor *gv,
                      dp_tensor *gmask) {
  int64_t rows = a->b1 * a->b2 * a->L, krows = a->b1 * a->b2 * a->S;
  attn_k k = kargs(a);
  size_t dbytes = sizeof(A) * (size_t)(rows ? rows : 1);
  A *D = (A *)dp_cu_scratch(c, dbytes);
  if (!D) return -1;
  int rc = 0;
  if (rows) {
    k_attn_bwd_q<A><<<warp_grid(rows), 256, 0, c->stream>>>(
        k, (const char *)dp_cu_ptr(a->out), (const char *)dp_cu_ptr(a->gout), (const char *)dp_cu_ptr(a->lse),
        a->lse->dtype, (char *)dp_cu_ptr(gq), gmask ? (char *)dp_cu_ptr(gmask) : NULL, D, rows);
    rc = dp_cu_after_launch(c, "scaled_dot_product_attention backward");
  }
  if (!rc && krows) {
    k_attn_bwd_kv<A><<<warp_grid(krows), 256, 0, c->stream>>>(k, (const char *)dp_cu_ptr(a->gout),
                                                              (const char *)dp_cu_ptr(a->lse), a->lse->dtype, D,
                                                              (char *)dp_cu_ptr(gk), (char *)dp_cu_ptr(gv), krows);
    rc = dp_cu_after_launch(c, "scaled_dot_product_attention backward");
  }
  dp_cu_scratch_free(c, D, dbytes);
  return rc;
}

int dp_cu_attention_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a) {
  DP_CU_ENTER(c, gq);
  if (check_dims(a)) return -1;
  if (a->q->dtype == DP_F64) return backward_t<double>(c, a, gq, gk, gv, gmask);
  return backward_t<float>(c, a, gq, gk, gv, gmask);
}
