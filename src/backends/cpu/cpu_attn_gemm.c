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

TARGET_AVX512 void dp_attn_transpose_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                            int64_t ldd) {
  if (lds > INT32_MAX / 16) {
    dp_attn_transpose_plain(src, lds, rows, cols, dst, ldd);
    return;
  }
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32((int)lds));
  for (int64_t c0 = 0; c0 < rows; c0 += 16) {
    int64_t n = rows - c0 < 16 ? rows - c0 : 16;
    __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
    const float *s = src + c0 * lds;
    for (int64_t e = 0; e < cols; e++)
      _mm512_mask_storeu_ps(dst + e * ldd + c0, m, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, s + e, 4));
  }
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
