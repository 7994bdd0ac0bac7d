/* CPU scaled dot-product attention, forward and backward (contract:
 * backends/backend.h, dp_attn_args), flash attention's algorithm.
 *
 * float32: the queries of one head are cut into blocks of BR rows; a block
 * walks the keys BC at a time, computing the BR x BC scores with a small
 * GEMM (cpu_attn_gemm.c), folding them into a running row maximum m, sum
 * l and output accumulator (the online softmax: when the maximum grows,
 * what was accumulated is rescaled by exp(m_old - m_new)), then adds P V.
 * Only the output and lse = m + log(l) per row (in float64) are stored. The backward
 * (FlashAttention-2) walks key blocks outside and query blocks inside,
 * recomputing P = exp(S - lse) per tile, and accumulates dV += P^T dO,
 * dS = P (dO V^T - D) with D = rowsum(dO O), dQ += dS K, dK += dS^T Q.
 * Causal tiles above the diagonal are skipped. The work is split over
 * (head, query block) pairs in the forward and over heads in the backward,
 * on the GEMM's thread pool when ddp.set_num_threads asks for threads.
 * The tile loops are compiled once per instruction set (AVX-512, AVX2,
 * plain) through target attributes, and the best the CPU has runs; the
 * AVX-512 variant's row passes (the softmax's max, exp and sum, dS, the
 * causal cut as lane masks) and D = rowsum(dO O) are written in intrinsics
 * (the compiler left the scalar versions' lane reductions on the stack),
 * the others are the plain loops the compiler vectorises.
 *
 * float64 (and any other dtype) takes a row-at-a-time double reference
 * path: the same algorithm without tiles, which the float32 one is tested
 * against. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_attn_gemm.h"
#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_kernels.h"
#include "core/error.h"
#include "ops/model_math.h"

/* 128 x 128 tiles: a 128-token sequence (the GPT example's) is one tile per
 * head, with no online rescaling and each key block transposed once; the
 * backward's three tiles (192 KiB) stay in L2. 64 x 64 measured ~5% slower
 * on that model's attention, forward and backward. */
enum { BR = 128, BC = 128 };

#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

typedef struct {
  const dp_attn_args *a;
  dp_tensor *out, *lse;            /* forward */
  dp_tensor *gq, *gk, *gv, *gmask; /* backward */
  float *D;                        /* backward: rowsum(dO * O), [b1 b2 L] */
  int64_t tasks, nqb;
  int isa; /* 2 AVX-512, 1 AVX2, 0 plain */
  int parts;
  atomic_int failed;
} job;

/* the per-head base of a [b1, b2, rows, cols] view */
INLINE const float *head_of(const dp_tensor *t, const dp_attn_args *a, int64_t bh) {
  return (const float *)dp_data(t) + (bh / a->b2) * t->stride[0] + (bh % a->b2) * t->stride[1];
}
INLINE float *head_w(dp_tensor *t, const dp_attn_args *a, int64_t bh) { return (float *)head_of(t, a, bh); }

/* The user's mask on one row of scores s[0..nc) for query i and keys j0..:
 * -inf where a boolean mask excludes a key, a float mask added. */
INLINE void mask_user(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t nc, float *s) {
  const dp_tensor *m = a->mask;
  int64_t off = (bh / a->b2) * m->stride[0] + (bh % a->b2) * m->stride[1] + i * m->stride[2] + j0 * m->stride[3];
  int64_t ms = m->stride[3];
  if (a->mask_bool) {
    const uint8_t *mp = (const uint8_t *)dp_data(m) + off;
    for (int64_t c = 0; c < nc; c++)
      if (!mp[c * ms]) s[c] = -INFINITY;
  } else {
    const float *mp = (const float *)dp_data(m) + off;
    for (int64_t c = 0; c < nc; c++) s[c] += mp[c * ms];
  }
}
/* the user's mask and the causal cut: -inf where a key takes no part */
INLINE void mask_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t nc, float *s) {
  if (a->mask) mask_user(a, bh, i, j0, nc, s);
  if (a->causal)
    for (int64_t c = i - j0 + 1 < 0 ? 0 : i - j0 + 1; c < nc; c++) s[c] = -INFINITY;
}
/* how many of the keys j0..j0 + w - 1 query i sees through the causal cut (all w without one) */
INLINE int64_t causal_vis(const dp_attn_args *a, int64_t i, int64_t j0, int64_t w) {
  int64_t v = a->causal ? i - j0 + 1 : w;
  return v < 0 ? 0 : v < w ? v : w;
}

/* Row reductions in 16 independent lanes: strict floating point does not
 * let the compiler reassociate a serial max or sum, so a one-accumulator
 * loop would run scalar; lanes vectorise (and combine in a fixed order). */
enum { LANES = 16 };
INLINE float row_max(const float *s, int64_t n) {
  float lane[LANES];
  for (int l = 0; l < LANES; l++) lane[l] = -INFINITY;
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] = s[c + l] > lane[l] ? s[c + l] : lane[l];
  float mx = -INFINITY;
  for (; c < n; c++) mx = s[c] > mx ? s[c] : mx;
  for (int l = 0; l < LANES; l++) mx = lane[l] > mx ? lane[l] : mx;
  return mx;
}
/* s[c] = exp((s[c] - m) - lo): m + lo is the backward's float64 lse as two floats (s - m is exact for the scores
 * near it, Sterbenz), so the weights keep float32's precision however large the scores are */
INLINE void exp_row2(float *s, int64_t n, float m, float lo) {
  for (int64_t c = 0; c < n; c++) s[c] = dp_attn_exp((s[c] - m) - lo);
}
/* s[c] = exp(s[c] - m); returns their sum */
INLINE float exp_row(float *s, int64_t n, float m) {
  float lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) {
      float p = dp_attn_exp(s[c + l] - m);
      s[c + l] = p;
      lane[l] += p;
    }
  float sum = 0;
  for (; c < n; c++) {
    s[c] = dp_attn_exp(s[c] - m);
    sum += s[c];
  }
  /* the lanes combined pairwise (depth 4, and in vector halves) rather than one serial chain of 16 adds */
  for (int w = LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w];
  return sum + lane[0];
}

/* Dropout of a row of weights in place (keep[c] records the mask for the
 * backward's second use). */
INLINE void dropout_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t nc, float *p, uint8_t *keep) {
  float inv = (float)(1.0 / (1.0 - a->dropout_p)), pf = (float)a->dropout_p;
  uint64_t e0 = (uint64_t)((bh * a->L + i) * a->S + j0);
  for (int64_t c = 0; c < nc; c++) {
    bool k = dp_attn_keep(a->seed, a->offset, e0 + (uint64_t)c, pf);
    if (keep) keep[c] = k;
    p[c] = k ? p[c] * inv : 0.0f;
  }
}

/* The causal cut in strips of SR rows (queries) and SR keys: a tile on the
 * diagonal computes, for each strip of its rows, only the keys up to the
 * strip's last query (strip_cols), and the reductions over rows (dV, dK)
 * start, for each strip of keys, at the first row that sees them
 * (strip_row0): what is skipped is exactly 0 (masked weights), so the
 * results are those of the whole tiles, with about 40% less of a diagonal
 * tile's work. Tiles start at multiples of SR, so a strip's first row
 * and first key are SR-aligned against each other. */
enum { SR = 16 };
_Static_assert(BR % SR == 0 && BC % SR == 0, "tiles are whole strips");
INLINE int64_t strip_cols(const dp_attn_args *a, int64_t i0, int64_t r0, int64_t j0, int64_t nc) {
  if (!a->causal) return nc;
  int64_t w = i0 + r0 + SR - j0; /* keys j <= i: the strip's last query is i0 + r0 + SR - 1 */
  return w < 0 ? 0 : w < nc ? w : nc;
}
INLINE int64_t strip_row0(const dp_attn_args *a, int64_t i0, int64_t c0, int64_t j0) {
  if (!a->causal) return 0;
  int64_t r = j0 + c0 - i0; /* rows before it have zero weight for keys c0..c0 + SR - 1 */
  return r < 0 ? 0 : r;
}

/* ---- float32 forward: the softmax rows of one score tile ----
 * Sb's rows (keys j0..j0 + nc - 1 of queries i0..i0 + nr - 1) become the
 * weights exp(s - m) (0 where masked) of the online softmax, folding into
 * each row's running maximum m, sum l and output accumulator acc. */
typedef void (*fwd_rows_fn)(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                            float *Sb, float *m, float *l, float *acc);
/* the fold of one row's new maximum and sum (mx, sum over its weights s[0..w)) */
INLINE void fold_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t w, float *s, float *m, float *l,
                     float *acc, float alpha, float mnew, float sum) {
  *l = *l * alpha + sum;
  *m = mnew;
  if (alpha != 1.0f && j0 > 0) /* the first key block's P V writes acc rather than adding to it */
    for (int64_t e = 0; e < a->Ev; e++) acc[e] *= alpha;
  if (a->dropout_p > 0) dropout_row(a, bh, i, j0, w, s, NULL);
}
/* any instruction set: the scalar row loops, vectorised by the compiler where it can */
INLINE void fwd_rows_body(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc, float *Sb,
                          float *m, float *l, float *acc) {
  const int64_t Ev = a->Ev;
  for (int64_t r = 0; r < nr; r++) {
    float *s = Sb + r * BC;
    int64_t w = strip_cols(a, i0, r / SR * SR, j0, nc);
    if (!w) continue;
    mask_row(a, bh, i0 + r, j0, w, s);
    float mx = row_max(s, w);
    float mnew = mx > m[r] ? mx : m[r];
    if (mnew == -INFINITY) { /* no key so far: contributes nothing */
      for (int64_t c = 0; c < w; c++) s[c] = 0.0f;
      continue;
    }
    float sum = exp_row(s, w, mnew);
    fold_row(a, bh, i0 + r, j0, w, s, m + r, l + r, acc + r * Ev, dp_attn_exp(m[r] - mnew), mnew, sum);
  }
}
TARGET_AVX2 static void fwd_rows_avx2(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                                      float *Sb, float *m, float *l, float *acc) {
  fwd_rows_body(a, bh, i0, nr, j0, nc, Sb, m, l, acc);
}
static void fwd_rows_plain(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc, float *Sb,
                           float *m, float *l, float *acc) {
  fwd_rows_body(a, bh, i0, nr, j0, nc, Sb, m, l, acc);
}
/* the first n of 16 lanes */
TARGET_AVX512 INLINE __mmask16 lanes16(int64_t n) {
  return (__mmask16)(n >= 16 ? 0xFFFFu : n > 0 ? (1u << n) - 1u : 0u);
}
/* AVX-512: the maximum and the sum in registers, the causal cut as a lane mask, G rows of a strip at once (they
 * have the same width w): each row's loops and reductions are a chain of dependent steps, and G independent
 * chains side by side keep the vector units busy where one row at a time left them waiting (the forward's row
 * pass took 0.35 ms of the GPT example's 1.08 ms attention layer that way). */
TARGET_AVX512 INLINE void fwd_rows512(const int G, const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t w,
                                      float *s, float *m, float *l, float *acc) {
  int64_t vis[4];
  __m512 vmax[4], vm[4], vsum[4];
  float mnew[4];
  UNROLL
  for (int g = 0; g < G; g++) {
    if (a->mask) mask_user(a, bh, i + g, j0, w, s + g * BC);
    vis[g] = causal_vis(a, i + g, j0, w);
    vmax[g] = _mm512_set1_ps(-INFINITY);
  }
  for (int64_t c = 0; c < w; c += 16) { /* max(x, vmax) keeps vmax where x is NaN, as row_max does */
    UNROLL
    for (int g = 0; g < G; g++) {
      __mmask16 k = lanes16(vis[g] - c);
      vmax[g] = _mm512_mask_max_ps(vmax[g], k, _mm512_maskz_loadu_ps(k, s + g * BC + c), vmax[g]);
    }
  }
  UNROLL
  for (int g = 0; g < G; g++) {
    float mx = _mm512_reduce_max_ps(vmax[g]);
    mnew[g] = mx > m[g] ? mx : m[g];
    vm[g] = _mm512_set1_ps(mnew[g]);
    vsum[g] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < w; c += 16) {
    __mmask16 kw = lanes16(w - c);
    UNROLL
    for (int g = 0; g < G; g++) {
      /* keys past the causal cut: weight 0 */
      __m512 p =
          dp_attn_exp512_maskz(lanes16(vis[g] - c), _mm512_sub_ps(_mm512_maskz_loadu_ps(kw, s + g * BC + c), vm[g]));
      _mm512_mask_storeu_ps(s + g * BC + c, kw, p);
      vsum[g] = _mm512_add_ps(vsum[g], p);
    }
  }
  UNROLL
  for (int g = 0; g < G; g++) {
    if (mnew[g] == -INFINITY) { /* no key so far: contributes nothing */
      for (int64_t c = 0; c < w; c++) s[g * BC + c] = 0.0f;
      continue;
    }
    fold_row(a, bh, i + g, j0, w, s + g * BC, m + g, l + g, acc + g * a->Ev, dp_attn_exp(m[g] - mnew[g]), mnew[g],
             _mm512_reduce_add_ps(vsum[g]));
  }
}
TARGET_AVX512 static void fwd_rows_avx512(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0,
                                          int64_t nc, float *Sb, float *m, float *l, float *acc) {
  const int64_t Ev = a->Ev;
  for (int64_t r0 = 0; r0 < nr; r0 += SR) {
    int64_t w = strip_cols(a, i0, r0, j0, nc), r1 = nr - r0 < SR ? nr : r0 + SR, r = r0;
    if (!w) continue;
    for (; r + 4 <= r1; r += 4) fwd_rows512(4, a, bh, i0 + r, j0, w, Sb + r * BC, m + r, l + r, acc + r * Ev);
    for (; r < r1; r++) fwd_rows512(1, a, bh, i0 + r, j0, w, Sb + r * BC, m + r, l + r, acc + r * Ev);
  }
}

/* ---- float32 forward: one (head, query block) ---- */
INLINE void fwd_block(job *jb, int64_t t, float *work, dp_attn_gemm_fn gemm, dp_attn_transpose_fn tr,
                      fwd_rows_fn softmax_rows) {
  const dp_attn_args *a = jb->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  const int64_t bh = t / jb->nqb, i0 = (t % jb->nqb) * BR, nr = L - i0 < BR ? L - i0 : BR;
  const int64_t qs = a->q->stride[2], ks = a->k->stride[2], vs = a->v->stride[2];
  const float *q = head_of(a->q, a, bh) + i0 * qs, *k = head_of(a->k, a, bh), *v = head_of(a->v, a, bh);
  float *Kt = work, *Sb = Kt + E * BC, *acc = Sb + BR * BC;
  float m[BR], l[BR];
  const float scale = (float)a->scale;
  int64_t jend = a->causal && i0 + nr < S ? i0 + nr : S; /* keys after the last query are all masked */
  for (int64_t r = 0; r < nr; r++) {
    if (jend == 0) /* else the first key block's P V writes every row (each strip sees key 0) */
      for (int64_t e = 0; e < Ev; e++) acc[r * Ev + e] = 0.0f;
    m[r] = -INFINITY, l[r] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < jend; j0 += BC) {
    int64_t nc = jend - j0 < BC ? jend - j0 : BC;
    tr(k + j0 * ks, ks, nc, E, Kt, BC);
    for (int64_t r0 = 0; r0 < nr; r0 += SR) { /* S = (q k^T) * scale, as the backward's */
      int64_t w = strip_cols(a, i0, r0, j0, nc);
      if (w) gemm(nr - r0 < SR ? nr - r0 : SR, w, E, q + r0 * qs, qs, 1, Kt, BC, Sb + r0 * BC, BC, scale, false);
    }
    softmax_rows(a, bh, i0, nr, j0, nc, Sb, m, l, acc);
    for (int64_t r0 = 0; r0 < nr; r0 += SR) {
      int64_t w = strip_cols(a, i0, r0, j0, nc);
      if (w)
        gemm(nr - r0 < SR ? nr - r0 : SR, Ev, w, Sb + r0 * BC, BC, 1, v + j0 * vs, vs, acc + r0 * Ev, Ev, 1.0f, j0 > 0);
    }
  }
  const int64_t os = jb->out->stride[2];
  float *o = head_w(jb->out, a, bh) + i0 * os;
  double *lse = (double *)dp_data(jb->lse) + bh * L + i0;
  for (int64_t r = 0; r < nr; r++) {
    float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    for (int64_t e = 0; e < Ev; e++) o[r * os + e] = acc[r * Ev + e] * inv;
    lse[r] = l[r] > 0 ? (double)m[r] + log((double)l[r]) : -INFINITY;
  }
}

/* ---- float32 backward: the rows of one tile ----
 * P's rows (the recomputed scores of queries i0.. against keys j0..) become
 * the weights exp(s - lse), dS's (dZ = dO V^T) become dS = P (dZ' - D) where
 * dZ' is dZ through the dropout (whose kept weights go to Z and mask to
 * keep); gm (the mask's gradient rows of these queries and keys, row stride
 * S) receives dS. */
typedef void (*bwd_rows_fn)(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                            const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep, float *gm);
/* the dropout's part of one row: Z = kept weights, dZ' = dZ * keep / (1 - p) */
INLINE void bwd_drop_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t w, const float *p, float *z,
                         float *d, uint8_t *keep) {
  const float inv = (float)(1.0 / (1.0 - a->dropout_p));
  memcpy(z, p, sizeof(float) * (size_t)w);
  dropout_row(a, bh, i, j0, w, z, keep);
  for (int64_t c = 0; c < w; c++) d[c] = keep[c] ? d[c] * inv : 0.0f;
}
INLINE void bwd_rows_body(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                          const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep, float *gm) {
  for (int64_t r = 0; r < nr; r++) {
    float *p = P + r * BC, *d = dS + r * BC;
    int64_t w = strip_cols(a, i0, r / SR * SR, j0, nc);
    double li = lse[r];
    if (li == -INFINITY) { /* a row with no key: no gradient */
      for (int64_t c = 0; c < w; c++) p[c] = 0.0f;
    } else {
      mask_row(a, bh, i0 + r, j0, w, p);
      float hi = (float)li;
      exp_row2(p, w, hi, (float)(li - (double)hi));
    }
    if (a->dropout_p > 0) bwd_drop_row(a, bh, i0 + r, j0, w, p, Z + r * BC, d, keep + r * BC);
    float Di = D[r];
    for (int64_t c = 0; c < w; c++) d[c] = p[c] * (d[c] - Di);
    if (gm) memcpy(gm + r * a->S, d, sizeof(float) * (size_t)w);
  }
}
TARGET_AVX2 static void bwd_rows_avx2(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                                      const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep,
                                      float *gm) {
  bwd_rows_body(a, bh, i0, nr, j0, nc, lse, D, P, Z, dS, keep, gm);
}
static void bwd_rows_plain(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                           const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep, float *gm) {
  bwd_rows_body(a, bh, i0, nr, j0, nc, lse, D, P, Z, dS, keep, gm);
}
/* AVX-512: the causal cut as a lane mask, and without dropout the weights and dS in one pass */
TARGET_AVX512 static void bwd_rows_avx512(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0,
                                          int64_t nc, const double *lse, const float *D, float *P, float *Z, float *dS,
                                          uint8_t *keep, float *gm) {
  const bool drop = a->dropout_p > 0;
  for (int64_t r = 0; r < nr; r++) {
    float *p = P + r * BC, *d = dS + r * BC;
    int64_t w = strip_cols(a, i0, r / SR * SR, j0, nc), vis = 0;
    double li = lse[r];
    float hi = 0, lo = 0;
    if (li != -INFINITY) { /* else a row with no key: weights 0, no gradient */
      if (a->mask) mask_user(a, bh, i0 + r, j0, w, p);
      vis = causal_vis(a, i0 + r, j0, w);
      hi = (float)li, lo = (float)(li - (double)hi);
    }
    const __m512 vhi = _mm512_set1_ps(hi), vlo = _mm512_set1_ps(lo), vD = _mm512_set1_ps(D[r]);
    for (int64_t c = 0; c < w; c += 16) {
      __mmask16 kw = lanes16(w - c);
      __m512 x = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(kw, p + c), vhi), vlo);
      __m512 e = dp_attn_exp512_maskz(lanes16(vis - c), x);
      _mm512_mask_storeu_ps(p + c, kw, e);
      if (!drop)
        _mm512_mask_storeu_ps(d + c, kw, _mm512_mul_ps(e, _mm512_sub_ps(_mm512_maskz_loadu_ps(kw, d + c), vD)));
    }
    if (drop) {
      bwd_drop_row(a, bh, i0 + r, j0, w, p, Z + r * BC, d, keep + r * BC);
      float Di = D[r];
      for (int64_t c = 0; c < w; c++) d[c] = p[c] * (d[c] - Di);
    }
    if (gm) memcpy(gm + r * a->S, d, sizeof(float) * (size_t)w);
  }
}

/* ---- float32 backward: one head ---- */
INLINE void bwd_head(job *jb, int64_t bh, float *work, uint8_t *keep, dp_attn_gemm_fn gemm, dp_attn_transpose_fn tr,
                     bwd_rows_fn grad_rows) {
  const dp_attn_args *a = jb->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  const int64_t qs = a->q->stride[2], ks = a->k->stride[2], vs = a->v->stride[2];
  const float *q = head_of(a->q, a, bh), *k = head_of(a->k, a, bh), *v = head_of(a->v, a, bh);
  const int64_t dos = a->gout->stride[2], gqs = jb->gq->stride[2], gks = jb->gk->stride[2], gvs = jb->gv->stride[2];
  const float *dO = head_of(a->gout, a, bh);
  const double *lse = (const double *)dp_data(a->lse) + bh * L;
  const float *D = jb->D + bh * L;
  float *gq = head_w(jb->gq, a, bh), *gk = head_w(jb->gk, a, bh), *gv = head_w(jb->gv, a, bh);
  float *gm = jb->gmask ? (float *)dp_data(jb->gmask) + bh * L * S : NULL;
  float *Kt = work, *Vt = Kt + E * BC, *P = Vt + Ev * BC, *Z = P + BR * BC, *dS = Z + BR * BC;
  const float scale = (float)a->scale;
  const bool drop = a->dropout_p > 0;
  /* No zeroing of dQ, dK, dV first (it took a twentieth of the backward, a memset call per strided row): the
   * first key block writes every row of dQ (at j0 = 0 each query block's strips see key 0), and a strip of dK and
   * dV is written by the first query block that sees it (seen) and zeroed after them if none does. */
  if (S == 0)
    for (int64_t i = 0; i < L; i++)
      for (int64_t e = 0; e < E; e++) gq[i * gqs + e] = 0.0f;
  if (gm) memset(gm, 0, sizeof(float) * (size_t)(L * S));
  for (int64_t j0 = 0; j0 < S; j0 += BC) {
    int64_t nc = S - j0 < BC ? S - j0 : BC;
    bool seen[BC / SR] = {0};
    tr(k + j0 * ks, ks, nc, E, Kt, BC);
    tr(v + j0 * vs, vs, nc, Ev, Vt, BC);
    for (int64_t i0 = a->causal ? j0 / BR * BR : 0; i0 < L; i0 += BR) { /* queries before j0 see none of these keys */
      int64_t nr = L - i0 < BR ? L - i0 : BR;
      for (int64_t r0 = 0; r0 < nr; r0 += SR) { /* the forward's S, bit for bit */
        int64_t w = strip_cols(a, i0, r0, j0, nc), rows = nr - r0 < SR ? nr - r0 : SR;
        if (w) gemm(rows, w, E, q + (i0 + r0) * qs, qs, 1, Kt, BC, P + r0 * BC, BC, scale, false);
        if (w) gemm(rows, w, Ev, dO + (i0 + r0) * dos, dos, 1, Vt, BC, dS + r0 * BC, BC, 1.0f, false); /* dZ = dO V^T */
      }
      grad_rows(a, bh, i0, nr, j0, nc, lse + i0, D + i0, P, Z, dS, keep, gm ? gm + i0 * S + j0 : NULL);
      const float *Zt = drop ? Z : P;
      for (int64_t r0 = 0; r0 < nr; r0 += SR) {
        int64_t w = strip_cols(a, i0, r0, j0, nc), rows = nr - r0 < SR ? nr - r0 : SR;
        if (w) /* dQ (+)= dS K */
          gemm(rows, E, w, dS + r0 * BC, BC, 1, k + j0 * ks, ks, gq + (i0 + r0) * gqs, gqs, scale, j0 > 0);
      }
      for (int64_t c0 = 0; c0 < nc; c0 += SR) { /* dV (+)= Z^T dO, dK (+)= dS^T Q */
        int64_t r1 = strip_row0(a, i0, c0, j0), cols = nc - c0 < SR ? nc - c0 : SR;
        if (r1 >= nr) continue;
        bool acc = seen[c0 / SR];
        seen[c0 / SR] = true;
        gemm(cols, Ev, nr - r1, Zt + r1 * BC + c0, 1, BC, dO + (i0 + r1) * dos, dos, gv + (j0 + c0) * gvs, gvs, 1.0f,
             acc);
        gemm(cols, E, nr - r1, dS + r1 * BC + c0, 1, BC, q + (i0 + r1) * qs, qs, gk + (j0 + c0) * gks, gks, scale, acc);
      }
    }
    for (int64_t j = j0; j < j0 + nc; j++) /* keys no query sees (causal, fewer queries than keys) */
      if (!seen[(j - j0) / SR]) {
        for (int64_t e = 0; e < E; e++) gk[j * gks + e] = 0.0f;
        for (int64_t e = 0; e < Ev; e++) gv[j * gvs + e] = 0.0f;
      }
  }
}

/* ---- the instruction-set variants and the thread split ---- */
static size_t fwd_floats(const dp_attn_args *a) { return (size_t)(a->E * BC + BR * BC + BR * a->Ev); }
static size_t bwd_floats(const dp_attn_args *a) { return (size_t)(a->E * BC + a->Ev * BC + 3 * BR * BC); }

#define DEFINE_PARTS(SFX, TARGET, GEMM, TR)                                                                            \
  TARGET static void fwd_part_##SFX(void *ctx, int part) {                                                             \
    job *jb = ctx;                                                                                                     \
    float *work = malloc(sizeof(float) * fwd_floats(jb->a));                                                           \
    if (!work) {                                                                                                       \
      atomic_store(&jb->failed, 1);                                                                                    \
      return;                                                                                                          \
    }                                                                                                                  \
    for (int64_t t = part; t < jb->tasks; t += jb->parts) fwd_block(jb, t, work, GEMM, TR, fwd_rows_##SFX);            \
    free(work);                                                                                                        \
  }                                                                                                                    \
  TARGET static void bwd_part_##SFX(void *ctx, int part) {                                                             \
    job *jb = ctx;                                                                                                     \
    float *work = malloc(sizeof(float) * bwd_floats(jb->a));                                                           \
    uint8_t *keep = malloc(BR * BC);                                                                                   \
    if (!work || !keep) atomic_store(&jb->failed, 1);                                                                  \
    else                                                                                                               \
      for (int64_t t = part; t < jb->tasks; t += jb->parts) bwd_head(jb, t, work, keep, GEMM, TR, bwd_rows_##SFX);     \
    free(work);                                                                                                        \
    free(keep);                                                                                                        \
  }
DEFINE_PARTS(avx512, TARGET_AVX512, dp_attn_gemm_avx512, dp_attn_transpose_avx512)
DEFINE_PARTS(avx2, TARGET_AVX2, dp_attn_gemm_avx2, dp_attn_transpose_plain)
DEFINE_PARTS(plain, , dp_attn_gemm_plain, dp_attn_transpose_plain)

/* D = rowsum(dO * O), each row's dot product rounded as the tiles' GEMM kernel rounds dZ = dO V^T's (one FMA
 * after another from 0 where the kernel fuses, a multiply then an add in the plain one), so a row whose weights
 * are one-hot (a saturated softmax: O is that key's value row bit for bit) gets dS = P (dZ - D) = 0 exactly, as
 * the composed softmax's backward does, instead of a rounding difference times |K|. Eight rows at a time: eight
 * independent chains hide the FMA's latency. */
#define FMA_STEP(x, y, z) __builtin_fmaf(x, y, z)
#define MUL_ADD_STEP(x, y, z) ((z) + (x) * (y))
#define DEFINE_ROWDOT(SFX, TARGET, STEP)                                                                               \
  TARGET static void rowdot_##SFX(const dp_attn_args *a, float *D) {                                                   \
    const int64_t L = a->L, Ev = a->Ev, gs = a->gout->stride[2], os = a->out->stride[2];                               \
    for (int64_t bh = 0; bh < a->b1 * a->b2; bh++) {                                                                   \
      const float *go = head_of(a->gout, a, bh), *o = head_of(a->out, a, bh);                                          \
      for (int64_t i0 = 0; i0 < L; i0 += 8) {                                                                          \
        int64_t nr = L - i0 < 8 ? L - i0 : 8;                                                                          \
        float acc[8] = {0};                                                                                            \
        for (int64_t e = 0; e < Ev; e++)                                                                               \
          for (int64_t r = 0; r < nr; r++) acc[r] = STEP(go[(i0 + r) * gs + e], o[(i0 + r) * os + e], acc[r]);         \
        for (int64_t r = 0; r < nr; r++) D[bh * L + i0 + r] = acc[r];                                                  \
      }                                                                                                                \
    }                                                                                                                  \
  }
/* AVX-512: 16 rows in the lanes of one vector, each lane the same chain of FMAs in the same order, fed by blocks
 * of dO and O transposed in registers (the loop above compiled to scalar code with strided loads: 6% of the GPT
 * example's attention backward) */
TARGET_AVX512 static void rowdot_avx512(const dp_attn_args *a, float *D) {
  enum { EB = 64 };
  float tg[EB * 16] = {0}, to[EB * 16] = {0}; /* lanes past a short block keep old values, never garbage */
  const int64_t L = a->L, Ev = a->Ev, gs = a->gout->stride[2], os = a->out->stride[2];
  for (int64_t bh = 0; bh < a->b1 * a->b2; bh++) {
    const float *go = head_of(a->gout, a, bh), *o = head_of(a->out, a, bh);
    for (int64_t i0 = 0; i0 < L; i0 += 16) {
      int64_t nr = L - i0 < 16 ? L - i0 : 16;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t e0 = 0; e0 < Ev; e0 += EB) {
        int64_t ne = Ev - e0 < EB ? Ev - e0 : EB;
        dp_attn_transpose_avx512(go + i0 * gs + e0, gs, nr, ne, tg, 16);
        dp_attn_transpose_avx512(o + i0 * os + e0, os, nr, ne, to, 16);
        for (int64_t e = 0; e < ne; e++)
          acc = _mm512_fmadd_ps(_mm512_loadu_ps(tg + e * 16), _mm512_loadu_ps(to + e * 16), acc);
      }
      _mm512_mask_storeu_ps(D + bh * L + i0, lanes16(nr), acc);
    }
  }
}
DEFINE_ROWDOT(avx2, TARGET_AVX2, FMA_STEP)
DEFINE_ROWDOT(plain, , MUL_ADD_STEP)

static int forced_isa = -1;

int dp_cpu_attention_force_isa(int isa) {
  if (isa == 2 && !dp_sgemm_cpu_supports(DP_SGEMM_AVX512)) return -1;
  if (isa == 1 && !dp_sgemm_cpu_supports(DP_SGEMM_AVX2)) return -1;
  forced_isa = isa < 0 || isa > 2 ? -1 : isa;
  return 0;
}

static int best_isa(void) {
  if (forced_isa >= 0) return forced_isa;
  if (dp_sgemm_cpu_supports(DP_SGEMM_AVX512)) return 2;
  if (dp_sgemm_cpu_supports(DP_SGEMM_AVX2)) return 1;
  return 0;
}

static int run(job *jb, bool forward) {
  static void (*const fwd[3])(void *, int) = {fwd_part_plain, fwd_part_avx2, fwd_part_avx512};
  static void (*const bwd[3])(void *, int) = {bwd_part_plain, bwd_part_avx2, bwd_part_avx512};
  void (*fn)(void *, int) = (forward ? fwd : bwd)[jb->isa];
  int threads = dp_sgemm_get_num_threads();
  jb->parts = (int)(jb->tasks < threads ? jb->tasks : threads);
  if (jb->parts > DP_SG_MAX_THREADS) jb->parts = DP_SG_MAX_THREADS;
  if (jb->parts <= 1) {
    jb->parts = 1;
    fn(jb, 0);
  } else {
    dp_sg_parallel(jb->parts, fn, jb);
  }
  return atomic_load(&jb->failed) ? dp_error("attention: out of memory for the tiles") : 0;
}

/* ---- the double reference path (float64 and other dtypes) ---- */
#define LDT(t, off) dp_load_d((const char *)dp_data(t) + (size_t)(off)*dp_elsize(t), (t)->dtype)
#define STT(t, off, v) dp_store_d((char *)dp_data(t) + (size_t)(off)*dp_elsize(t), (t)->dtype, (v))

static int64_t off4(const dp_tensor *t, const dp_attn_args *a, int64_t bh, int64_t row, int64_t col) {
  return (bh / a->b2) * t->stride[0] + (bh % a->b2) * t->stride[1] + row * t->stride[2] + col * t->stride[3];
}

/* scores of query i against every key, masked; returns their maximum */
static double ref_scores(const dp_attn_args *a, int64_t bh, int64_t i, double *s) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < a->S; j++) {
    double d = 0;
    for (int64_t e = 0; e < a->E; e++) d += LDT(a->q, off4(a->q, a, bh, i, e)) * LDT(a->k, off4(a->k, a, bh, j, e));
    d *= a->scale;
    if (a->mask) {
      int64_t mo = off4(a->mask, a, bh, i, j);
      if (a->mask_bool) d = ((const uint8_t *)dp_data(a->mask))[mo] ? d : -INFINITY;
      else d += LDT(a->mask, mo);
    }
    if (a->causal && j > i) d = -INFINITY;
    s[j] = d;
    mx = d > mx ? d : mx;
  }
  return mx;
}

static double ref_keep(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j) {
  if (a->dropout_p <= 0) return 1.0;
  uint64_t e = (uint64_t)((bh * a->L + i) * a->S + j);
  return dp_attn_keep(a->seed, a->offset, e, (float)a->dropout_p) ? 1.0 / (1.0 - a->dropout_p) : 0.0;
}

static int ref_forward(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a) {
  int64_t BH = a->b1 * a->b2, L = a->L, S = a->S, Ev = a->Ev;
  double *s = malloc(sizeof(double) * (size_t)(S + Ev + 1));
  if (!s) return dp_error("attention: out of memory");
  double *acc = s + S;
  for (int64_t bh = 0; bh < BH; bh++)
    for (int64_t i = 0; i < L; i++) {
      double mx = ref_scores(a, bh, i, s), l = 0;
      for (int64_t e = 0; e < Ev; e++) acc[e] = 0;
      if (mx != -INFINITY)
        for (int64_t j = 0; j < S; j++) {
          double p = exp(s[j] - mx);
          l += p;
          double z = p * ref_keep(a, bh, i, j);
          for (int64_t e = 0; e < Ev; e++) acc[e] += z * LDT(a->v, off4(a->v, a, bh, j, e));
        }
      for (int64_t e = 0; e < Ev; e++) STT(out, off4(out, a, bh, i, e), l > 0 ? acc[e] / l : 0.0);
      STT(lse, bh * L + i, l > 0 ? mx + log(l) : -INFINITY);
    }
  free(s);
  return 0;
}

static int ref_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a) {
  int64_t BH = a->b1 * a->b2, L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  double *s = malloc(sizeof(double) * (size_t)(S + E + S * E + S * Ev));
  if (!s) return dp_error("attention: out of memory");
  double *dq = s + S, *dk = dq + E, *dv = dk + S * E;
  for (int64_t bh = 0; bh < BH; bh++) {
    memset(dk, 0, sizeof(double) * (size_t)(S * E + S * Ev));
    for (int64_t i = 0; i < L; i++) {
      double li = LDT(a->lse, bh * L + i), Di = 0;
      ref_scores(a, bh, i, s);
      for (int64_t e = 0; e < Ev; e++)
        Di += LDT(a->gout, off4(a->gout, a, bh, i, e)) * LDT(a->out, off4(a->out, a, bh, i, e));
      for (int64_t e = 0; e < E; e++) dq[e] = 0;
      for (int64_t j = 0; j < S; j++) {
        double p = li == -INFINITY ? 0.0 : exp(s[j] - li), keep = ref_keep(a, bh, i, j), dz = 0;
        for (int64_t e = 0; e < Ev; e++) {
          double go = LDT(a->gout, off4(a->gout, a, bh, i, e));
          dv[j * Ev + e] += p * keep * go;
          dz += go * LDT(a->v, off4(a->v, a, bh, j, e));
        }
        double ds = p * (dz * keep - Di);
        if (gmask) STT(gmask, off4(gmask, a, bh, i, j), ds);
        for (int64_t e = 0; e < E; e++) {
          dq[e] += a->scale * ds * LDT(a->k, off4(a->k, a, bh, j, e));
          dk[j * E + e] += a->scale * ds * LDT(a->q, off4(a->q, a, bh, i, e));
        }
      }
      for (int64_t e = 0; e < E; e++) STT(gq, off4(gq, a, bh, i, e), dq[e]);
    }
    for (int64_t j = 0; j < S; j++) {
      for (int64_t e = 0; e < E; e++) STT(gk, off4(gk, a, bh, j, e), dk[j * E + e]);
      for (int64_t e = 0; e < Ev; e++) STT(gv, off4(gv, a, bh, j, e), dv[j * Ev + e]);
    }
  }
  free(s);
  return 0;
}

/* ---- the entries ---- */
static bool fast_path(const dp_attn_args *a) {
  return a->q->dtype == DP_F32 && a->k->dtype == DP_F32 && a->v->dtype == DP_F32 &&
         (!a->mask || a->mask_bool || a->mask->dtype == DP_F32);
}

int dp_cpu_attention(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a) {
  if (a->b1 * a->b2 * a->L == 0) return 0;
  if (!fast_path(a)) return ref_forward(out, lse, a);
  job jb = {.a = a, .out = out, .lse = lse, .nqb = (a->L + BR - 1) / BR, .isa = best_isa()};
  jb.tasks = a->b1 * a->b2 * jb.nqb;
  atomic_init(&jb.failed, 0);
  return run(&jb, true);
}

int dp_cpu_attention_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a) {
  int64_t BH = a->b1 * a->b2, L = a->L;
  if (BH == 0) return 0;
  if (!fast_path(a)) return ref_backward(gq, gk, gv, gmask, a);
  float *D = malloc(sizeof(float) * (size_t)(BH * L + 1));
  if (!D) return dp_error("attention: out of memory");
  int isa = best_isa();
  (isa == 2 ? rowdot_avx512 : isa == 1 ? rowdot_avx2 : rowdot_plain)(a, D);
  job jb = {.a = a, .gq = gq, .gk = gk, .gv = gv, .gmask = gmask, .D = D, .tasks = BH, .isa = isa};
  atomic_init(&jb.failed, 0);
  int rc = run(&jb, false);
  free(D);
  return rc;
}
