/* The interface between the SGEMM driver (sgemm.c) and its per-ISA
 * micro-kernels (sgemm_avx512.c, sgemm_avx2.c).
 *
 * The driver reduces every call to C'[m x n] += P[m x k] * Q[k x n] where
 * the micro-kernel broadcasts P's elements and loads Q as vectors along n
 * (see sgemm.c for how A, B and C map onto P, Q and C'). One micro-kernel
 * call computes an mr x nr tile (mr <= MR, nr <= NR) over kc steps. */
#ifndef DP_SGEMM_KERNELS_H
#define DP_SGEMM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
  int64_t k;
  /* P's mr x k rows: packed (a[p * MR + r], rows beyond mr are zero) or read
   * in place (a[r * a_rs + p], unit stride along k). */
  const float *a;
  int64_t a_rs;
  bool a_packed;
  /* Q's packed k x nr panel: b[p * nrpad + j], nrpad = nr rounded up to the
   * vector width, padding zero; 64-byte aligned. */
  const float *b;
  /* Or, when b_src is set, Q's rows in place (b_src[p * b_rs + j], j < nr),
   * copied into the packed panel b_fill as the k loop reads them: the first
   * sliver of P packs Q while it computes, instead of a separate pass that
   * waits on memory. */
  const float *b_src;
  int64_t b_rs;
  float *b_fill;
  /* C' tile: c[i * c_rs + j * c_cs]; c_cs == 1 (rows along n, the normal
   * case) or c_rs == 1 (C' is a transposed view of the caller's C). */
  float *c;
  int64_t c_rs, c_cs;
  /* C' = alpha * P Q + beta * C'; beta == 0 never reads C'. */
  float alpha, beta;
  /* When set (the last k block of a GEMM with a bias, sgemm.h's
   * dp_sgemm_run_bias), added to that result as it is stored: bias_n[j] to
   * column j of the tile, or bias_m[i] to row i; at most one of them. */
  const float *bias_n, *bias_m;
  int mr, nr;
} dp_sg_tile;

/* How a Q block of nc columns is cut into panels of whole vectors, at most
 * NR wide, as even as possible (64 columns -> 32 + 32, not 48 + 16): a
 * narrow panel has too few accumulators to keep the FMA units busy. Panel
 * t has dp_sg_panel_cols(pl, t) columns (the last clipped to nc). */
typedef struct {
  int vl, panels, base, extra;
} dp_sg_panels;

static inline int dp_sg_panel_cols(const dp_sg_panels *pl, int t) { return (pl->base + (t < pl->extra)) * pl->vl; }

typedef struct {
  const char *name;
  int mr, nr, vl;    /* tile rows, tile columns, vector lanes (nr % vl == 0) */
  int64_t kc, nc;    /* cache blocking: Q blocks of kc x nc stay in L2 */
  int64_t kc_max;    /* largest kc whose MR x kc sliver of P still fits in L1 */
  int64_t l2_floats; /* Q block budget (kc x nc floats) */
  void (*tile)(const dp_sg_tile *t);
  /* Packs a kc x w block of Q stored k-contiguous (element (p, j) at
   * q[p + j * q_cs]) into one panel: dst[p * nrpad + j], columns w..nrpad
   * zero; nrpad a multiple of 8 (and of vl), dst 32-byte aligned. */
  void (*pack_q_trans)(int64_t kc, int w, int nrpad, const float *q, int64_t q_cs, float *dst);
  /* Packs mr (<= MR <= 8) rows of P stored column-contiguous (element
   * (r, p) at p_src[r + p * p_cs]) as dst[p * MR + r], rows past mr zero. */
  void (*pack_p)(int64_t kc, int mr, int MR, const float *p_src, int64_t p_cs, float *dst);
} dp_sg_kernel;

extern const dp_sg_kernel dp_sg_avx512, dp_sg_avx2;

/* The packers both kernels use (AVX2: AVX-512 CPUs have it). */
void dp_sg_pack_q_trans8(int64_t kc, int w, int nrpad, const float *q, int64_t q_cs, float *dst);
void dp_sg_pack_p8(int64_t kc, int mr, int MR, const float *p_src, int64_t p_cs, float *dst);

/* sgemm_pool.c: runs fn(ctx, part) for part 0..parts-1 (at most
 * DP_SG_MAX_THREADS), part 0 on the calling thread, the others on parked
 * worker threads; returns when all are done. */
enum { DP_SG_MAX_THREADS = 64 };
void dp_sg_parallel(int parts, void (*fn)(void *ctx, int part), void *ctx);
/* Whether the calling thread is inside dp_sg_parallel (a pool worker, or a
 * caller waiting for its parts): a nested call there runs its parts
 * serially instead of waiting for the pool it is part of. */
bool dp_sg_in_parallel(void);

#endif
