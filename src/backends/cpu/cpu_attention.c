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

#include "backends/cpu/cpu_attention_stage.h"
#include "backends/cpu/cpu_attn_gemm.h"
#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_kernels.h"
#include "core/error.h"
#include "ops/model_math.h"
#include "tensor/half.h"

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
  bool stage;                      /* bfloat16 operands: widened rows in float32 staging (cpu_attention_stage.h) */
  int64_t tasks, nqb;
  int isa; /* 2 AVX-512, 1 AVX2, 0 plain */
  int parts;
  atomic_int failed;
} job;

/* the per-head base of a [b1, b2, rows, cols] view, of any dtype (head_of: a float32 one) */
INLINE char *head_raw(const dp_tensor *t, const dp_attn_args *a, int64_t bh) {
  return (char *)dp_data(t) + ((bh / a->b2) * t->stride[0] + (bh % a->b2) * t->stride[1]) * (int64_t)dp_elsize(t);
}
INLINE const float *head_of(const dp_tensor *t, const dp_attn_args *a, int64_t bh) {
  return (const float *)head_raw(t, a, bh);
}
INLINE float *head_w(dp_tensor *t, const dp_attn_args *a, int64_t bh) { return (float *)head_raw(t, a, bh); }
/* rows r0..r0 + n - 1 (cols values each) of head bh of t as float32: t's own memory (*ld its row stride) when it
 * is float32, else widened into stage (*ld = cols) */
INLINE const float *rows_f32(const dp_tensor *t, const dp_attn_args *a, int64_t bh, int64_t r0, int64_t n, int64_t cols,
                             float *stage, int64_t *ld, int isa) {
  const int64_t rs = t->stride[2];
  const char *base = head_raw(t, a, bh) + r0 * rs * (int64_t)dp_elsize(t);
  if (t->dtype == DP_F32) {
    *ld = rs;
    return (const float *)base;
  }
  dp_attn_widen(isa, base, t->dtype, rs, n, cols, stage, cols);
  *ld = cols;
  return stage;
}
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
  } else if (m->dtype == DP_BF16) { /* widened exactly: the scores get what a float32 copy of the mask adds */
    const uint16_t *mp = (const uint16_t *)dp_data(m) + off;
    for (int64_t c = 0; c < nc; c++) s[c] += dp_bf16_to_f32(mp[c * ms]);
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

/* rows j0..j0 + n - 1 of head bh of t transposed into dst (dst[e * BC + c] = row j0 + c's value e) for the score
 * GEMM's B; bfloat16 rows widened SR at a time through ch (SR x cols floats): a small buffer written and read back
 * at once stays in L1, where staging the whole block first cost its round trip through L2 */
INLINE void transpose_rows(const job *jb, const dp_tensor *t, int64_t bh, int64_t j0, int64_t n, int64_t cols,
                           float *ch, float *dst, dp_attn_transpose_fn tr) {
  const int64_t step = t->dtype == DP_F32 ? BC : SR; /* float32: the rows themselves, in one call */
  for (int64_t c0 = 0; c0 < n; c0 += step) {
    int64_t m = n - c0 < step ? n - c0 : step, ld;
    const float *src = rows_f32(t, jb->a, bh, j0 + c0, m, cols, ch, &ld, jb->isa);
    tr(src, ld, m, cols, dst + c0, BC);
  }
}

/* ---- float32 forward: one (head, query block) ----
 * bfloat16 operands (jb->stage): the block's queries and each key block's
 * keys and values are widened into float32 staging (Qs, Ks, Vs) and the
 * output rounded once from the accumulator, so the tiles and their bits
 * are those of float32 operands. */
INLINE void fwd_block(job *jb, int64_t t, float *work, dp_attn_gemm_fn gemm, dp_attn_transpose_fn tr,
                      fwd_rows_fn softmax_rows) {
  const dp_attn_args *a = jb->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  const int64_t bh = t / jb->nqb, i0 = (t % jb->nqb) * BR, nr = L - i0 < BR ? L - i0 : BR;
  const int64_t on = jb->stage; /* without staging its buffers are empty (the work area has none) */
  float *Kt = work, *Sb = Kt + E * BC, *acc = Sb + BR * BC, *ch = acc + BR * Ev, *Vs = ch + on * SR * (E > Ev ? E : Ev);
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
    int64_t qs, vs;
    const float *v = rows_f32(a->v, a, bh, j0, nc, Ev, Vs, &vs, jb->isa); /* read by every strip's P V */
    transpose_rows(jb, a->k, bh, j0, nc, E, ch, Kt, tr);
    for (int64_t r0 = 0; r0 < nr; r0 += SR) { /* S = (q k^T) * scale, as the backward's; a strip of q at a time */
      int64_t w = strip_cols(a, i0, r0, j0, nc), rows = nr - r0 < SR ? nr - r0 : SR;
      if (!w) continue;
      const float *q = rows_f32(a->q, a, bh, i0 + r0, rows, E, ch, &qs, jb->isa);
      gemm(rows, w, E, q, qs, 1, Kt, BC, Sb + r0 * BC, BC, scale, false);
    }
    softmax_rows(a, bh, i0, nr, j0, nc, Sb, m, l, acc);
    for (int64_t r0 = 0; r0 < nr; r0 += SR) {
      int64_t w = strip_cols(a, i0, r0, j0, nc);
      if (w) gemm(nr - r0 < SR ? nr - r0 : SR, Ev, w, Sb + r0 * BC, BC, 1, v, vs, acc + r0 * Ev, Ev, 1.0f, j0 > 0);
    }
  }
  const int64_t os = jb->out->stride[2];
  float *o = jb->stage ? acc : head_w(jb->out, a, bh) + i0 * os; /* staged: O in place of acc, then rounded */
  const int64_t ors = jb->stage ? Ev : os;
  double *lse = (double *)dp_data(jb->lse) + bh * L + i0;
  for (int64_t r = 0; r < nr; r++) {
    float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    for (int64_t e = 0; e < Ev; e++) o[r * ors + e] = acc[r * Ev + e] * inv;
    lse[r] = l[r] > 0 ? (double)m[r] + log((double)l[r]) : -INFINITY;
  }
  if (!jb->stage) return;
  dp_tensor *outs[2] = {jb->out, a->out_f32};
  for (int i = 0; i < 2; i++)
    if (outs[i])
      dp_attn_narrow(jb->isa, acc, Ev, nr, Ev, head_raw(outs[i], a, bh) + i0 * outs[i]->stride[2] * dp_elsize(outs[i]),
                     outs[i]->dtype, outs[i]->stride[2]);
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
  const bool st = jb->stage;
  float *Kt = work, *Vt = Kt + E * BC, *P = Vt + Ev * BC, *Z = P + BR * BC, *dS = Z + BR * BC, *D = dS + BR * BC;
  /* bfloat16 operands: the head's Q, dO (and O when it is not the float32 one) widened once, K and V one key block
   * at a time; dQ accumulates in float32 over the key blocks and dK, dV over the query blocks, each rounded once */
  const int64_t on = st; /* without staging its buffers are empty (the work area has none) */
  float *Qs = D + L, *dOs = Qs + on * L * E, *Os = dOs + on * L * Ev, *Ks = Os + on * L * Ev, *Vs = Ks + on * BC * E;
  float *gQs = Vs + on * BC * Ev, *gKs = gQs + on * L * E, *gVs = gKs + on * BC * E;
  int64_t qs, ks, vs, dos, os;
  const float *q = rows_f32(a->q, a, bh, 0, L, E, Qs, &qs, jb->isa);
  const float *dO = rows_f32(a->gout, a, bh, 0, L, Ev, dOs, &dos, jb->isa);
  const float *O = rows_f32(a->out, a, bh, 0, L, Ev, Os, &os, jb->isa);
  dp_attn_rowdot(jb->isa, dO, dos, O, os, L, Ev, D); /* D = rowsum(dO O) */
  const double *lse = (const double *)dp_data(a->lse) + bh * L;
  const int64_t gqs = st ? E : jb->gq->stride[2], gks = st ? E : jb->gk->stride[2], gvs = st ? Ev : jb->gv->stride[2];
  float *gq = st ? gQs : head_w(jb->gq, a, bh);
  float *gm = jb->gmask ? (float *)dp_data(jb->gmask) + bh * L * S : NULL;
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
    const float *k = rows_f32(a->k, a, bh, j0, nc, E, Ks, &ks, jb->isa);
    const float *v = rows_f32(a->v, a, bh, j0, nc, Ev, Vs, &vs, jb->isa);
    float *gk = st ? gKs : head_w(jb->gk, a, bh) + j0 * gks, *gv = st ? gVs : head_w(jb->gv, a, bh) + j0 * gvs;
    tr(k, ks, nc, E, Kt, BC);
    tr(v, vs, nc, Ev, Vt, BC);
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
          gemm(rows, E, w, dS + r0 * BC, BC, 1, k, ks, gq + (i0 + r0) * gqs, gqs, scale, j0 > 0);
      }
      for (int64_t c0 = 0; c0 < nc; c0 += SR) { /* dV (+)= Z^T dO, dK (+)= dS^T Q */
        int64_t r1 = strip_row0(a, i0, c0, j0), cols = nc - c0 < SR ? nc - c0 : SR;
        if (r1 >= nr) continue;
        bool acc = seen[c0 / SR];
        seen[c0 / SR] = true;
        gemm(cols, Ev, nr - r1, Zt + r1 * BC + c0, 1, BC, dO + (i0 + r1) * dos, dos, gv + c0 * gvs, gvs, 1.0f, acc);
        gemm(cols, E, nr - r1, dS + r1 * BC + c0, 1, BC, q + (i0 + r1) * qs, qs, gk + c0 * gks, gks, scale, acc);
      }
    }
    for (int64_t j = 0; j < nc; j++) /* keys no query sees (causal, fewer queries than keys) */
      if (!seen[j / SR]) {
        for (int64_t e = 0; e < E; e++) gk[j * gks + e] = 0.0f;
        for (int64_t e = 0; e < Ev; e++) gv[j * gvs + e] = 0.0f;
      }
    if (st) {
      const dp_tensor *t[2] = {jb->gk, jb->gv};
      for (int i = 0; i < 2; i++)
        dp_attn_narrow(jb->isa, i ? gv : gk, i ? Ev : E, nc, i ? Ev : E,
                       head_raw(t[i], a, bh) + j0 * t[i]->stride[2] * dp_elsize(t[i]), t[i]->dtype, t[i]->stride[2]);
    }
  }
  if (st) dp_attn_narrow(jb->isa, gq, E, L, E, head_raw(jb->gq, a, bh), jb->gq->dtype, jb->gq->stride[2]);
}

/* ---- the instruction-set variants and the thread split ---- */
/* the work areas' floats (fwd_block's and bwd_head's layouts), the staging's only with bfloat16 operands */
static size_t fwd_floats(const job *jb) {
  const dp_attn_args *a = jb->a;
  int64_t stage = jb->stage ? SR * (a->E > a->Ev ? a->E : a->Ev) + BC * a->Ev : 0;
  return (size_t)(a->E * BC + BR * BC + BR * a->Ev + stage);
}
static size_t bwd_floats(const job *jb) {
  const dp_attn_args *a = jb->a;
  int64_t L = a->L, E = a->E, Ev = a->Ev, stage = jb->stage ? 2 * L * (E + Ev) + 2 * BC * (E + Ev) : 0;
  return (size_t)(E * BC + Ev * BC + 3 * BR * BC + L + stage);
}

#define DEFINE_PARTS(SFX, TARGET, GEMM, TR)                                                                            \
  TARGET static void fwd_part_##SFX(void *ctx, int part) {                                                             \
    job *jb = ctx;                                                                                                     \
    float *work = malloc(sizeof(float) * fwd_floats(jb));                                                              \
    if (!work) {                                                                                                       \
      atomic_store(&jb->failed, 1);                                                                                    \
      return;                                                                                                          \
    }                                                                                                                  \
    for (int64_t t = part; t < jb->tasks; t += jb->parts) fwd_block(jb, t, work, GEMM, TR, fwd_rows_##SFX);            \
    free(work);                                                                                                        \
  }                                                                                                                    \
  TARGET static void bwd_part_##SFX(void *ctx, int part) {                                                             \
    job *jb = ctx;                                                                                                     \
    float *work = malloc(sizeof(float) * bwd_floats(jb));                                                              \
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

/* ---- the entries ---- */
/* The tiles take float32 operands, and bfloat16 ones through the staging; the reference path the rest. */
static bool fast_path(const dp_attn_args *a, const dp_tensor *const *same, int n) {
  dp_dtype dt = a->q->dtype;
  if ((dt != DP_F32 && dt != DP_BF16) || a->k->dtype != dt || a->v->dtype != dt) return false;
  if (a->mask && !a->mask_bool && a->mask->dtype != DP_F32 && a->mask->dtype != dt) return false;
  for (int i = 0; i < n; i++)
    if (same[i] && same[i]->dtype != dt) return false;
  return true;
}

int dp_cpu_attention(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a) {
  if (a->b1 * a->b2 * a->L == 0) return 0;
  if (!fast_path(a, (const dp_tensor *[]){out}, 1) || (a->out_f32 && a->out_f32->dtype != DP_F32))
    return dp_attn_ref_forward(out, lse, a);
  job jb = {.a = a, .out = out, .lse = lse, .nqb = (a->L + BR - 1) / BR, .isa = best_isa()};
  jb.stage = a->q->dtype != DP_F32;
  jb.tasks = a->b1 * a->b2 * jb.nqb;
  atomic_init(&jb.failed, 0);
  return run(&jb, true);
}

int dp_cpu_attention_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a) {
  if (a->b1 * a->b2 == 0) return 0;
  /* out: float32 (the unrounded one) or the operands' dtype; the mask's gradient float32 */
  if (!fast_path(a, (const dp_tensor *[]){a->gout, gq, gk, gv}, 4) || (gmask && gmask->dtype != DP_F32) ||
      (a->out->dtype != DP_F32 && a->out->dtype != a->q->dtype))
    return dp_attn_ref_backward(gq, gk, gv, gmask, a);
  job jb = {.a = a, .gq = gq, .gk = gk, .gv = gv, .gmask = gmask, .tasks = a->b1 * a->b2, .isa = best_isa()};
  jb.stage = a->q->dtype != DP_F32;
  atomic_init(&jb.failed, 0);
  return run(&jb, false);
}
