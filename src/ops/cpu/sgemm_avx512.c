/* AVX-512 SGEMM micro-kernel: an MR x (NV * 16) tile of C' held in MR * NV
 * zmm accumulators. Each k step loads NV vectors of the packed Q panel and
 * broadcasts MR elements of P straight into the FMAs (embedded {1to16}
 * broadcasts), so the loop is loads + FMAs only.
 *
 * Compiled for AVX-512 through target attributes, so the build needs no
 * -march flag; sgemm.c only calls in here after __builtin_cpu_supports
 * said yes. */
#include <immintrin.h>
#include <string.h>

#include "ops/cpu/sgemm_kernels.h"

#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define INLINE static inline __attribute__((always_inline))

enum { MR = 8, NV = 3, VL = 16, NR = NV * VL };

/* Writes the finished accumulators: C' = alpha * acc + beta * C'. */
TARGET_AVX512 INLINE void store_tile(const dp_sg_tile *t, __m512 acc[MR][NV], const int nv) {
  const __m512 va = _mm512_set1_ps(t->alpha), vb = _mm512_set1_ps(t->beta);
  const bool read_c = t->beta != 0.0f;
  if (t->c_cs == 1) {
    int rem = t->nr - (nv - 1) * VL; /* 1..16 lanes in the last vector */
    __mmask16 tail = (__mmask16)(rem >= VL ? 0xFFFFu : (1u << rem) - 1u);
    for (int r = 0; r < MR; r++) {
      if (r >= t->mr) break;
      float *c = t->c + r * t->c_rs;
      for (int v = 0; v < nv; v++) {
        __mmask16 m = v == nv - 1 ? tail : (__mmask16)0xFFFF;
        __m512 x = _mm512_mul_ps(va, acc[r][v]);
        if (read_c) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c + v * VL), x);
        _mm512_mask_storeu_ps(c + v * VL, m, x);
      }
    }
    return;
  }
  /* C' is transposed (c_rs == 1): column j of the tile is mr contiguous
   * floats of C. Transpose 8 x 16 blocks through a buffer so each column
   * is one masked 8-lane store. */
  float buf[NR][MR] __attribute__((aligned(64)));
  for (int v = 0; v < nv; v++) {
    /* lanes of acc[r][v] -> buf[v*16 + lane][r] */
    float rows[MR][VL] __attribute__((aligned(64)));
    for (int r = 0; r < MR; r++) _mm512_store_ps(rows[r], _mm512_mul_ps(va, acc[r][v]));
    for (int l = 0; l < VL; l++)
      for (int r = 0; r < MR; r++) buf[v * VL + l][r] = rows[r][l];
  }
  const __mmask8 rows_mask = (__mmask8)((1u << t->mr) - 1u);
  const __m256 vb8 = _mm512_castps512_ps256(vb);
  for (int j = 0; j < t->nr; j++) {
    float *c = t->c + j * t->c_cs;
    __m256 x = _mm256_load_ps(buf[j]);
    if (read_c) x = _mm256_fmadd_ps(vb8, _mm256_maskz_loadu_ps(rows_mask, c), x);
    _mm256_mask_storeu_ps(c, rows_mask, x);
  }
}

/* The k loop for nv vectors; packed says where P's elements are (see
 * dp_sg_tile). Both are constants at every call site, so each instance is
 * fully unrolled over the MR x nv accumulators, which stay in registers. */
TARGET_AVX512 INLINE void tile_nv(const dp_sg_tile *t, const int nv, const bool packed) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  /* rows past mr alias row 0 when P is read in place: valid memory, and
   * their results are never stored */
  const float *ar[MR];
  for (int r = 0; r < MR; r++) ar[r] = packed ? t->a + r : t->a + (r < t->mr ? r : 0) * t->a_rs;
  const int64_t as = packed ? MR : 1;
  const float *b = t->b;
  for (int64_t p = 0; p < t->k; p++) {
    __m512 bv[NV];
    for (int v = 0; v < nv; v++) bv[v] = _mm512_load_ps(b + v * VL);
    for (int r = 0; r < MR; r++) {
      __m512 a = _mm512_set1_ps(ar[r][p * as]);
      for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(a, bv[v], acc[r][v]);
    }
    b += nv * VL;
  }
  store_tile(t, acc, nv);
}

TARGET_AVX512 static void tile_avx512(const dp_sg_tile *t) {
  int nv = (t->nr + VL - 1) / VL;
  if (t->a_packed) {
    if (nv == 3) tile_nv(t, 3, true);
    else if (nv == 2) tile_nv(t, 2, true);
    else tile_nv(t, 1, true);
  } else {
    if (nv == 3) tile_nv(t, 3, false);
    else if (nv == 2) tile_nv(t, 2, false);
    else tile_nv(t, 1, false);
  }
}

TARGET_AVX512 static void pack_q_trans_avx512(int64_t kc, int w, const float *q, int64_t q_cs, float *dst) {
  int nrpad = (w + VL - 1) / VL * VL;
  for (int j = 0; j < w; j++) {
    const float *src = q + j * q_cs;
    for (int64_t p = 0; p < kc; p++) dst[p * nrpad + j] = src[p];
  }
  if (nrpad > w)
    for (int64_t p = 0; p < kc; p++) memset(dst + p * nrpad + w, 0, sizeof(float) * (size_t)(nrpad - w));
}

const dp_sg_kernel dp_sg_avx512 = {
    .name = "avx512",
    .mr = MR,
    .nr = NR,
    .vl = VL,
    .kc = 256,
    .nc = 480,
    .tile = tile_avx512,
    .pack_q_trans = pack_q_trans_avx512,
};
