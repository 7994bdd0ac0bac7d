/* The attention tiles' GEMM micro-kernels (contract in cpu_attn_gemm.h).
 *
 * Each keeps an MR x (NV vectors) block of C in registers while it walks
 * k: per step NV loads of B's row (masked at the right edge), MR
 * broadcasts of A's column, MR x NV FMAs. NV follows the width (one to
 * four vectors: a 32-wide head dimension is two AVX-512 vectors, and a
 * kernel for four would waste half its FMAs on it), MR the registers left.
 * Rows past R reuse the last row's address and are not stored, so the
 * inner loop has no branches. */
#include <immintrin.h>
#include <stdint.h>

#include "backends/cpu/cpu_attn_gemm.h"

#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* ---- AVX-512: 16 lanes ---- */
TARGET_AVX512 INLINE void tile512(const int MR, const int NV, int64_t rows, int64_t w, int64_t K, const float *A,
                                  int64_t ars, int64_t acs, const float *B, int64_t ldb, float *C, int64_t ldc,
                                  float alpha, bool accumulate) {
  __m512 acc[8][4];
  __mmask16 m[4];
  const float *a[8];
  UNROLL
  for (int v = 0; v < NV; v++) {
    int64_t rem = w - 16 * v;
    m[v] = (__mmask16)(rem >= 16 ? 0xFFFFu : rem > 0 ? (1u << rem) - 1u : 0u);
  }
  UNROLL
  for (int r = 0; r < MR; r++) {
    a[r] = A + (r < rows ? r : rows - 1) * ars;
    UNROLL
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; k++) {
    __m512 b[4];
    UNROLL
    for (int v = 0; v < NV; v++) b[v] = _mm512_maskz_loadu_ps(m[v], B + k * ldb + 16 * v);
    UNROLL
    for (int r = 0; r < MR; r++) {
      __m512 x = _mm512_set1_ps(a[r][k * acs]);
      UNROLL
      for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  __m512 va = _mm512_set1_ps(alpha);
  UNROLL
  for (int r = 0; r < MR; r++) {
    if (r >= rows) break;
    float *c = C + r * ldc;
    UNROLL
    for (int v = 0; v < NV; v++) {
      __m512 y = _mm512_mul_ps(va, acc[r][v]);
      if (accumulate) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m[v], c + 16 * v));
      _mm512_mask_storeu_ps(c + 16 * v, m[v], y);
    }
  }
}

TARGET_AVX512 void dp_attn_gemm_avx512(int64_t R, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                                       const float *B, int64_t ldb, float *C, int64_t ldc, float alpha,
                                       bool accumulate) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    int64_t w = N - n0 < 64 ? N - n0 : 64;
    int nv = (int)((w + 15) / 16);
    int mr = nv <= 2 ? 8 : 4;
    for (int64_t r0 = 0; r0 < R; r0 += mr) {
      int64_t rows = R - r0 < mr ? R - r0 : mr;
      const float *a = A + r0 * ars;
      float *c = C + r0 * ldc + n0;
      const float *b = B + n0;
      switch (nv) {
      case 1: tile512(8, 1, rows, w, K, a, ars, acs, b, ldb, c, ldc, alpha, accumulate); break;
      case 2: tile512(8, 2, rows, w, K, a, ars, acs, b, ldb, c, ldc, alpha, accumulate); break;
      case 3: tile512(4, 3, rows, w, K, a, ars, acs, b, ldb, c, ldc, alpha, accumulate); break;
      default: tile512(4, 4, rows, w, K, a, ars, acs, b, ldb, c, ldc, alpha, accumulate); break;
      }
    }
  }
}

/* A 16 x 16 block in registers: rows n of src (m columns each) to rows m of dst (n columns each), the four
 * rounds of unpacks and lane shuffles (64 shuffles per block, where gathering it took 16 gathers of 16 loads each,
 * about 4x the time). */
TARGET_AVX512 INLINE void block16(const float *src, int64_t lds, int64_t n, int64_t m, float *dst, int64_t ldd) {
  __m512 x[16], y[16];
  const __mmask16 km = (__mmask16)(m >= 16 ? 0xFFFFu : (1u << m) - 1u);
  const __mmask16 kn = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
  UNROLL
  for (int i = 0; i < 16; i++) x[i] = i < n ? _mm512_maskz_loadu_ps(km, src + i * lds) : _mm512_setzero_ps();
  UNROLL
  for (int i = 0; i < 16; i += 2) { /* pairs of rows interleaved element by element */
    y[i] = _mm512_unpacklo_ps(x[i], x[i + 1]);
    y[i + 1] = _mm512_unpackhi_ps(x[i], x[i + 1]);
  }
  UNROLL
  for (int i = 0; i < 16; i += 4) { /* then by pairs of elements */
    UNROLL
    for (int j = 0; j < 2; j++) {
      x[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(y[i + j]), _mm512_castps_pd(y[i + j + 2])));
      x[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(y[i + j]), _mm512_castps_pd(y[i + j + 2])));
    }
  }
  UNROLL
  for (int i = 0; i < 16; i += 8) { /* then 128-bit lanes of four rows, then of eight */
    UNROLL
    for (int j = 0; j < 4; j++) {
      y[i + j] = _mm512_shuffle_f32x4(x[i + j], x[i + j + 4], 0x88);
      y[i + j + 4] = _mm512_shuffle_f32x4(x[i + j], x[i + j + 4], 0xDD);
    }
  }
  UNROLL
  for (int j = 0; j < 8; j++) {
    x[j] = _mm512_shuffle_f32x4(y[j], y[j + 8], 0x88);
    x[j + 8] = _mm512_shuffle_f32x4(y[j], y[j + 8], 0xDD);
  }
  /* x[k] now holds column c(k) of the block: the rounds leave the columns in the order below */
  static const int col[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  UNROLL
  for (int k = 0; k < 16; k++)
    if (col[k] < m) _mm512_mask_storeu_ps(dst + col[k] * ldd, kn, x[k]);
}

TARGET_AVX512 void dp_attn_transpose_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                            int64_t ldd) {
  for (int64_t c0 = 0; c0 < rows; c0 += 16)
    for (int64_t e0 = 0; e0 < cols; e0 += 16)
      block16(src + c0 * lds + e0, lds, rows - c0 < 16 ? rows - c0 : 16, cols - e0 < 16 ? cols - e0 : 16,
              dst + e0 * ldd + c0, ldd);
}

/* ---- AVX2: 8 lanes, masks as integer vectors ---- */
TARGET_AVX2 INLINE __m256i mask256(int64_t rem) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int n = rem >= 8 ? 8 : rem > 0 ? (int)rem : 0;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes);
}

TARGET_AVX2 INLINE void tile256(const int MR, const int NV, int64_t rows, int64_t w, int64_t K, const float *A,
                                int64_t ars, int64_t acs, const float *B, int64_t ldb, float *C, int64_t ldc,
                                float alpha, bool accumulate) {
  __m256 acc[6][2];
  __m256i m[2];
  const float *a[6];
  UNROLL
  for (int v = 0; v < NV; v++) m[v] = mask256(w - 8 * v);
  UNROLL
  for (int r = 0; r < MR; r++) {
    a[r] = A + (r < rows ? r : rows - 1) * ars;
    UNROLL
    for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < K; k++) {
    __m256 b[2];
    UNROLL
    for (int v = 0; v < NV; v++) b[v] = _mm256_maskload_ps(B + k * ldb + 8 * v, m[v]);
    UNROLL
    for (int r = 0; r < MR; r++) {
      __m256 x = _mm256_set1_ps(a[r][k * acs]);
      UNROLL
      for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  __m256 va = _mm256_set1_ps(alpha);
  UNROLL
  for (int r = 0; r < MR; r++) {
    if (r >= rows) break;
    float *c = C + r * ldc;
    UNROLL
    for (int v = 0; v < NV; v++) {
      __m256 y = _mm256_mul_ps(va, acc[r][v]);
      if (accumulate) y = _mm256_add_ps(y, _mm256_maskload_ps(c + 8 * v, m[v]));
      _mm256_maskstore_ps(c + 8 * v, m[v], y);
    }
  }
}

TARGET_AVX2 void dp_attn_gemm_avx2(int64_t R, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                                   const float *B, int64_t ldb, float *C, int64_t ldc, float alpha, bool accumulate) {
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    int64_t w = N - n0 < 16 ? N - n0 : 16;
    for (int64_t r0 = 0; r0 < R; r0 += 6) {
      int64_t rows = R - r0 < 6 ? R - r0 : 6;
      const float *a = A + r0 * ars;
      float *c = C + r0 * ldc + n0;
      if (w > 8) tile256(6, 2, rows, w, K, a, ars, acs, B + n0, ldb, c, ldc, alpha, accumulate);
      else tile256(6, 1, rows, w, K, a, ars, acs, B + n0, ldb, c, ldc, alpha, accumulate);
    }
  }
}

/* ---- any CPU: row by row, the compiler's own vectorisation ---- */
void dp_attn_gemm_plain(int64_t R, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                        int64_t ldb, float *C, int64_t ldc, float alpha, bool accumulate) {
  for (int64_t r = 0; r < R; r++) {
    float *c = C + r * ldc;
    if (!accumulate)
      for (int64_t n = 0; n < N; n++) c[n] = 0;
    for (int64_t k = 0; k < K; k++) {
      float x = alpha * A[r * ars + k * acs];
      const float *b = B + k * ldb;
      for (int64_t n = 0; n < N; n++) c[n] += x * b[n];
    }
  }
}

void dp_attn_transpose_plain(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd) {
  for (int64_t e = 0; e < cols; e++)
    for (int64_t c = 0; c < rows; c++) dst[e * ldd + c] = src[c * lds + e];
}
