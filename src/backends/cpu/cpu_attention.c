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
 * dS = P (dO V^T - D) with D = rowsum(dO O) (or, for a head whose keys fit
 * one tile, D = sum P dZ from the tile, as the composed backward's softmax
 * takes it: cpu_attention_rows.h), dQ += dS K, dK += dS^T Q.
 * Causal tiles above the diagonal are skipped. The work is split over
 * (head, query block) pairs in the forward and over heads in the backward,
 * on the GEMM's thread pool when ddp.set_num_threads asks for threads;
 * while a task computes, the next task of its part has its rows prefetched
 * into the L2 a slice per strip (cpu_attention_prefetch.h: the GPT layer's
 * forward + backward 5.1-5.2 -> 3.8-4.7 ms, the example 13.1-13.5k ->
 * 13.9-14.2k tokens/s on one Zen 4 core).
 * The tile loops are compiled once per instruction set (AVX-512, AVX2,
 * plain) through target attributes, and the best the CPU has runs; the
 * AVX-512 variant's row passes (the softmax's max, exp and sum, dS, the
 * causal cut as lane masks) and D = rowsum(dO O) are written in intrinsics
 * (the compiler left the scalar versions' lane reductions on the stack),
 * the others are the plain loops the compiler vectorises.
 *
 * bfloat16 operands are widened into float32 staging (cpu_attention_stage.h);
 * with head dims in multiples of 32, every product runs in bfloat16 instead
 * (cpu_attn_bf16.h: K and V transposed 32 bits at a time or paired by rows,
 * P and dS rounded to bfloat16), the row passes unchanged: on AMX tiles
 * where the CPU has them (the GPT example's layer, B=16 T=128, 4 heads of
 * 32, 1 thread: fwd 0.94 -> 0.50 ms, fwd+bwd 3.1 -> 2.3 ms), else with
 * AVX512-BF16's dot products (AMD Zen 4: see cpu_attn_dot.c).
 *
 * float64 (and any other dtype) takes a row-at-a-time double reference
 * path: the same algorithm without tiles, which the float32 one is tested
 * against. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_attention_stage.h"
#include "backends/cpu/cpu_attn_bf16.h"
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
  dp_tensor *out, *lse;             /* forward */
  dp_tensor *gq, *gk, *gv, *gmask;  /* backward */
  bool stage;                       /* bfloat16 operands: widened rows in float32 staging (cpu_attention_stage.h) */
  const dp_attn_bf16_kernel *tiles; /* and their score and weight products in bfloat16 (NULL: widened) */
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

#include "backends/cpu/cpu_attention_prefetch.h"
/* rows r0.. of head bh of t into the prefetch of a next task */
INLINE void pf_head(pf_cursor *c, const dp_tensor *t, const dp_attn_args *a, int64_t bh, int64_t r0, int64_t rows,
                    int64_t cols, bool write) {
  if (t) pf_add(c, head_raw(t, a, bh), t->stride[2], (int64_t)dp_elsize(t), r0, rows, cols, write);
}

/* the row passes: masks, the causal cut in strips, the softmax rows, dS */
#include "backends/cpu/cpu_attention_rows.h"

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
  uint16_t *pb = (uint16_t *)(Vs + on * BC * Ev), *pad = pb + 16 * BC; /* jb->tiles: a strip's bfloat16 weights */
  float m[BR], l[BR];
  const float scale = (float)a->scale;
  int64_t jend = a->causal && i0 + nr < S ? i0 + nr : S; /* keys after the last query are all masked */
  pf_cursor pf = {0}; /* this part's next task: its queries, keys up to its causal end, values, output rows */
  if (t + jb->parts < jb->tasks) {
    const int64_t tn = t + jb->parts, bn = tn / jb->nqb, in = (tn % jb->nqb) * BR, nn = L - in < BR ? L - in : BR;
    const int64_t je = a->causal && in + nn < S ? in + nn : S;
    pf_head(&pf, a->q, a, bn, in, nn, E, false);
    pf_head(&pf, a->k, a, bn, 0, je, E, false);
    pf_head(&pf, a->v, a, bn, 0, je, Ev, false);
    pf_head(&pf, jb->out, a, bn, in, nn, Ev, true);
    pf_start(&pf, (jend + BC - 1) / BC * ((nr + SR - 1) / SR));
  }
  for (int64_t r = 0; r < nr; r++) {
    if (jend == 0) /* else the first key block's P V writes every row (each strip sees key 0) */
      for (int64_t e = 0; e < Ev; e++) acc[r * Ev + e] = 0.0f;
    m[r] = -INFINITY, l[r] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < jend; j0 += BC) {
    int64_t nc = jend - j0 < BC ? jend - j0 : BC;
    if (jb->tiles) { /* K^T as pair rows (K's rows transposed 32 bits at a time), V's rows paired; bf16 products */
      const int64_t ks = a->k->stride[2], q16 = a->q->stride[2];
      tr((const float *)head_raw(a->k, a, bh) + j0 * ks / 2, ks / 2, nc, E / 2, Kt, BC);
      dp_attn_bf16_pair_rows((const uint16_t *)head_raw(a->v, a, bh) + j0 * a->v->stride[2], a->v->stride[2], nc,
                             (nc + 31) / 32 * 16, Ev, (uint32_t *)Vs);
      const uint16_t *qb = (const uint16_t *)head_raw(a->q, a, bh) + i0 * q16;
      for (int64_t r0 = 0; r0 < nr; r0 += SR) {
        int64_t w = strip_cols(a, i0, r0, j0, nc), rows = nr - r0 < SR ? nr - r0 : SR;
        if (w)
          jb->tiles->scores(rows, w, E, qb + r0 * q16, q16, (const uint32_t *)Kt, BC, Sb + r0 * BC, BC, scale, pad);
      }
      softmax_rows(a, bh, i0, nr, j0, nc, Sb, m, l, acc);
      for (int64_t r0 = 0; r0 < nr; r0 += SR) {
        int64_t w = strip_cols(a, i0, r0, j0, nc);
        if (w) /* all 16 rows: acc has them (scratch past nr) */
          dp_attn_bf16_pv(jb->tiles, SR, w, Ev, Sb + r0 * BC, BC, 1.0f, (const uint32_t *)Vs, acc + r0 * Ev, Ev, j0 > 0,
                          pb, NULL);
      }
      continue;
    }
    int64_t qs, vs;
    const float *v = rows_f32(a->v, a, bh, j0, nc, Ev, Vs, &vs, jb->isa); /* read by every strip's P V */
    transpose_rows(jb, a->k, bh, j0, nc, E, ch, Kt, tr);
    for (int64_t r0 = 0; r0 < nr; r0 += SR) { /* S = (q k^T) * scale, as the backward's; a strip of q at a time */
      int64_t w = strip_cols(a, i0, r0, j0, nc), rows = nr - r0 < SR ? nr - r0 : SR;
      pf_issue(&pf, false);
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
  pf_issue(&pf, true);
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
  uint16_t *pad = (uint16_t *)(gVs + on * BC * Ev), *pb = pad + 16 * (E > Ev ? E : Ev); /* jb->tiles scratch */
  float *tmp = (float *)(pb + 16 * BC);
  /* and dV, dK's operands as pair rows over the queries: Z (or P), dS scaled, dO, Q; one key strip's A */
  enum { PR = BR / 2 + 16 }; /* pair rows: a strip's steps start at its first row's pair, up to 16 pairs past nr */
  uint32_t *zp = (uint32_t *)(tmp + 16 * E), *sp = zp + PR * BC, *op = sp + PR * BC, *qp = op + PR * Ev;
  uint32_t *At = qp + PR * E;
  int64_t qs, ks = 0, vs = 0, dos, os;
  const float *q = rows_f32(a->q, a, bh, 0, L, E, Qs, &qs, jb->isa);
  const float *dO = rows_f32(a->gout, a, bh, 0, L, Ev, dOs, &dos, jb->isa);
  /* D = rowsum(dO O); a head whose keys fit one tile takes it from the tile instead (bwd_rows_fn), without O */
  const bool d_from_tile = S <= BC;
  if (!d_from_tile) {
    const float *O = rows_f32(a->out, a, bh, 0, L, Ev, Os, &os, jb->isa);
    dp_attn_rowdot(jb->isa, dO, dos, O, os, L, Ev, D);
  }
  const double *lse = (const double *)dp_data(a->lse) + bh * L;
  pf_cursor pf = {0}; /* the next head of this part: what it reads, then what it writes */
  if (bh + jb->parts < jb->tasks) {
    const int64_t bn = bh + jb->parts;
    pf_head(&pf, a->q, a, bn, 0, L, E, false);
    pf_head(&pf, a->gout, a, bn, 0, L, Ev, false);
    if (S > BC) pf_head(&pf, a->out, a, bn, 0, L, Ev, false); /* O only for D = rowsum(dO O) */
    pf_head(&pf, a->k, a, bn, 0, S, E, false);
    pf_head(&pf, a->v, a, bn, 0, S, Ev, false);
    pf_head(&pf, jb->gq, a, bn, 0, L, E, true);
    pf_head(&pf, jb->gk, a, bn, 0, S, E, true);
    pf_head(&pf, jb->gv, a, bn, 0, S, Ev, true);
    pf_start(&pf, (S + BC - 1) / BC * ((L + SR - 1) / SR) / (a->causal ? 2 : 1));
  }
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
    /* with the tiles, K's rows go to dQ's product as pair rows (in Ks), and V's only to V^T */
    const float *k = jb->tiles ? NULL : rows_f32(a->k, a, bh, j0, nc, E, Ks, &ks, jb->isa);
    if (jb->tiles)
      dp_attn_bf16_pair_rows((const uint16_t *)head_raw(a->k, a, bh) + j0 * a->k->stride[2], a->k->stride[2], nc,
                             (nc + 31) / 32 * 16, E, (uint32_t *)Ks);
    const float *v = jb->tiles ? NULL : rows_f32(a->v, a, bh, j0, nc, Ev, Vs, &vs, jb->isa); /* only for V^T */
    float *gk = st ? gKs : head_w(jb->gk, a, bh) + j0 * gks, *gv = st ? gVs : head_w(jb->gv, a, bh) + j0 * gvs;
    if (jb->tiles) { /* K^T and V^T as pair rows: the bfloat16 rows transposed 32 bits at a time */
      tr((const float *)head_raw(a->k, a, bh) + j0 * a->k->stride[2] / 2, a->k->stride[2] / 2, nc, E / 2, Kt, BC);
      tr((const float *)head_raw(a->v, a, bh) + j0 * a->v->stride[2] / 2, a->v->stride[2] / 2, nc, Ev / 2, Vt, BC);
    } else {
      tr(k, ks, nc, E, Kt, BC);
      tr(v, vs, nc, Ev, Vt, BC);
    }
    for (int64_t i0 = a->causal ? j0 / BR * BR : 0; i0 < L; i0 += BR) { /* queries before j0 see none of these keys */
      int64_t nr = L - i0 < BR ? L - i0 : BR;
      for (int64_t r0 = 0; r0 < nr; r0 += SR) { /* the forward's S, bit for bit */
        int64_t w = strip_cols(a, i0, r0, j0, nc), rows = nr - r0 < SR ? nr - r0 : SR;
        pf_issue(&pf, false);
        if (w && jb->tiles) { /* the forward's S, bit for bit, and dZ = dO V^T, from the bfloat16 rows */
          const int64_t q16 = a->q->stride[2], g16 = a->gout->stride[2];
          jb->tiles->scores(rows, w, E, (const uint16_t *)head_raw(a->q, a, bh) + (i0 + r0) * q16, q16,
                            (const uint32_t *)Kt, BC, P + r0 * BC, BC, scale, pad);
          jb->tiles->scores(rows, w, Ev, (const uint16_t *)head_raw(a->gout, a, bh) + (i0 + r0) * g16, g16,
                            (const uint32_t *)Vt, BC, dS + r0 * BC, BC, 1.0f, pad);
        } else if (w) {
          gemm(rows, w, E, q + (i0 + r0) * qs, qs, 1, Kt, BC, P + r0 * BC, BC, scale, false);
          gemm(rows, w, Ev, dO + (i0 + r0) * dos, dos, 1, Vt, BC, dS + r0 * BC, BC, 1.0f, false); /* dZ = dO V^T */
        }
      }
      grad_rows(a, bh, i0, nr, j0, nc, lse + i0, d_from_tile ? NULL : D + i0, P, Z, dS, keep,
                gm ? gm + i0 * S + j0 : NULL);
      const float *Zt = drop ? Z : P;
      for (int64_t r0 = 0; r0 < nr; r0 += SR) {
        int64_t w = strip_cols(a, i0, r0, j0, nc), rows = nr - r0 < SR ? nr - r0 : SR;
        if (w && jb->tiles) /* dQ (+)= dS K, dS scaled and rounded to bfloat16 */
          dp_attn_bf16_pv(jb->tiles, rows, w, E, dS + r0 * BC, BC, scale, (const uint32_t *)Ks, gq + (i0 + r0) * gqs,
                          gqs, j0 > 0, pb, tmp);
        else if (w) /* dQ (+)= dS K */
          gemm(rows, E, w, dS + r0 * BC, BC, 1, k, ks, gq + (i0 + r0) * gqs, gqs, scale, j0 > 0);
      }
      if (jb->tiles) { /* the block's rows paired once; each key strip's pairs from its first row on */
        dp_attn_bf16_pair_f32(Zt, BC, nr, PR, BC, 1.0f, zp);
        dp_attn_bf16_pair_f32(dS, BC, nr, PR, BC, scale, sp);
        dp_attn_bf16_pair_rows((const uint16_t *)head_raw(a->gout, a, bh) + i0 * a->gout->stride[2], a->gout->stride[2],
                               nr, PR, Ev, op);
        dp_attn_bf16_pair_rows((const uint16_t *)head_raw(a->q, a, bh) + i0 * a->q->stride[2], a->q->stride[2], nr, PR,
                               E, qp);
      }
      for (int64_t c0 = 0; c0 < nc; c0 += SR) { /* dV (+)= Z^T dO, dK (+)= dS^T Q */
        int64_t r1 = strip_row0(a, i0, c0, j0), cols = nc - c0 < SR ? nc - c0 : SR;
        if (r1 >= nr) continue;
        bool acc = seen[c0 / SR];
        seen[c0 / SR] = true;
        if (jb->tiles) { /* A: the strip's 16 keys' pairs over rows r1.. (a 32-bit transpose); C: 16 rows of dV, dK */
          const int64_t np = (nr - r1 + 31) / 32 * 16;
          tr((const float *)zp + r1 / 2 * BC + c0, BC, np, SR, (float *)At, 64);
          jb->tiles->mm(np, Ev, At, 64, op + r1 / 2 * Ev, Ev, gv + c0 * gvs, gvs, acc);
          tr((const float *)sp + r1 / 2 * BC + c0, BC, np, SR, (float *)At, 64);
          jb->tiles->mm(np, E, At, 64, qp + r1 / 2 * E, E, gk + c0 * gks, gks, acc);
          continue;
        }
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
  pf_issue(&pf, true);
}

/* ---- the instruction-set variants and the thread split ---- */
/* the work areas' floats (fwd_block's and bwd_head's layouts), the staging's only with bfloat16 operands */
static size_t fwd_floats(const job *jb) {
  const dp_attn_args *a = jb->a;
  int64_t stage = jb->stage ? SR * (a->E > a->Ev ? a->E : a->Ev) + BC * a->Ev : 0;
  int64_t amx = jb->tiles ? 8 * BC + 8 * (a->E > a->Ev ? a->E : a->Ev) : 0; /* bfloat16 weights of a strip, padding */
  return (size_t)(a->E * BC + BR * BC + BR * a->Ev + stage + amx);
}
static size_t bwd_floats(const job *jb) {
  const dp_attn_args *a = jb->a;
  int64_t L = a->L, E = a->E, Ev = a->Ev, stage = jb->stage ? 2 * L * (E + Ev) + 2 * BC * (E + Ev) : 0;
  /* the tiles' scratch: a short strip's rows (16 x max(E, Ev) bf16), 16 x BC bf16 weights, 16 x E floats, the
   * pair rows of Z, dS, dO and Q, a strip's A */
  int64_t amx = jb->tiles ? 8 * (E > Ev ? E : Ev) + 8 * BC + 16 * E + (BR / 2 + 16) * (2 * BC + E + Ev) + 16 * 64 : 0;
  return (size_t)(E * BC + Ev * BC + 3 * BR * BC + L + stage + amx);
}

#define DEFINE_PARTS(SFX, TARGET, GEMM, TR)                                                                            \
  TARGET static void fwd_part_##SFX(void *ctx, int part) {                                                             \
    job *jb = ctx;                                                                                                     \
    float *work = malloc(sizeof(float) * fwd_floats(jb));                                                              \
    if (!work) {                                                                                                       \
      atomic_store(&jb->failed, 1);                                                                                    \
      return;                                                                                                          \
    }                                                                                                                  \
    if (jb->tiles) jb->tiles->begin();                                                                                 \
    for (int64_t t = part; t < jb->tasks; t += jb->parts) fwd_block(jb, t, work, GEMM, TR, fwd_rows_##SFX);            \
    if (jb->tiles) jb->tiles->end();                                                                                   \
    free(work);                                                                                                        \
  }                                                                                                                    \
  TARGET static void bwd_part_##SFX(void *ctx, int part) {                                                             \
    job *jb = ctx;                                                                                                     \
    float *work = malloc(sizeof(float) * bwd_floats(jb));                                                              \
    uint8_t *keep = malloc(BR * BC);                                                                                   \
    if (!work || !keep) atomic_store(&jb->failed, 1);                                                                  \
    else {                                                                                                             \
      if (jb->tiles) jb->tiles->begin();                                                                               \
      for (int64_t t = part; t < jb->tasks; t += jb->parts) bwd_head(jb, t, work, keep, GEMM, TR, bwd_rows_##SFX);     \
      if (jb->tiles) jb->tiles->end();                                                                                 \
    }                                                                                                                  \
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
static int bf16_kernel = DP_ATTN_BF16_AUTO; /* atomic */
int dp_cpu_attention_bf16_kernel(int kind) {
  if (kind == DP_ATTN_BF16_AMX && !dp_attn_amx_supported()) return -1;
  if (kind == DP_ATTN_BF16_DOT && !dp_attn_dot_supported()) return -1;
  if (kind >= DP_ATTN_BF16_AUTO && kind <= DP_ATTN_BF16_WIDEN)
    return __atomic_exchange_n(&bf16_kernel, kind, __ATOMIC_RELAXED);
  return __atomic_load_n(&bf16_kernel, __ATOMIC_RELAXED);
}
int dp_cpu_attention_bf16_amx(int on) {
  int was = on < 0 ? dp_cpu_attention_bf16_kernel(-1)
                   : dp_cpu_attention_bf16_kernel(on ? DP_ATTN_BF16_AUTO : DP_ATTN_BF16_WIDEN);
  return was != DP_ATTN_BF16_WIDEN;
}
static const dp_attn_bf16_kernel *bf16_products(void) {
  switch (__atomic_load_n(&bf16_kernel, __ATOMIC_RELAXED)) {
  case DP_ATTN_BF16_AMX: return &dp_attn_bf16_amx;
  case DP_ATTN_BF16_DOT: return &dp_attn_bf16_dot;
  case DP_ATTN_BF16_WIDEN: return NULL;
  default: return dp_attn_amx_supported() ? &dp_attn_bf16_amx : dp_attn_dot_supported() ? &dp_attn_bf16_dot : NULL;
  }
}
/* bfloat16 operands the bfloat16 products read in place: rows of whole 32-bit pairs (even strides, 4-byte
 * aligned), head dims in whole tile steps, on a CPU running the AVX-512 tiles; NULL: widened to float32 */
static const dp_attn_bf16_kernel *tiles_for(const job *jb, const dp_tensor *const *t, int n) {
  const dp_attn_args *a = jb->a;
  if (!jb->stage || a->q->dtype != DP_BF16 || jb->isa != 2 || a->E % 32 || a->Ev % 32) return NULL;
  for (int i = 0; i < n; i++)
    if (t[i]->stride[3] != 1 || (t[i]->stride[0] | t[i]->stride[1] | t[i]->stride[2]) % 2 ||
        (uintptr_t)dp_data(t[i]) % 4)
      return NULL;
  return bf16_products();
}
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
  jb.tiles = tiles_for(&jb, (const dp_tensor *[]){a->q, a->k, a->v}, 3);
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
  jb.tiles = tiles_for(&jb, (const dp_tensor *[]){a->q, a->k, a->v, a->gout}, 4);
  atomic_init(&jb.failed, 0);
  return run(&jb, false);
}
