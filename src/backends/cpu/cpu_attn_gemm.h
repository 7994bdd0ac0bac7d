/* The small float32 GEMMs of the CPU attention kernel (cpu_attention.c)
 * and its exponential.
 *
 * dp_attn_gemm_fn computes, for an attention tile (at most a few hundred
 * rows and columns), C[r, n] = alpha * sum_k A[r * ars + k * acs] * B[k *
 * ldb + n] (+ C[r, n] when accumulate): A is read element by element (any
 * strides, so a transposed tile costs no copy), B row by row along n (unit
 * stride), C's rows have stride ldc. Register-blocked micro-kernels for
 * AVX-512 and AVX2+FMA (compiled through target attributes, chosen at run
 * time by the CPU's features as sgemm.c does) and a plain loop. */
#ifndef DP_CPU_ATTN_GEMM_H
#define DP_CPU_ATTN_GEMM_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef void (*dp_attn_gemm_fn)(int64_t R, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                                const float *B, int64_t ldb, float *C, int64_t ldc, float alpha, bool accumulate);

void dp_attn_gemm_avx512(int64_t R, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                         int64_t ldb, float *C, int64_t ldc, float alpha, bool accumulate);
void dp_attn_gemm_avx2(int64_t R, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                       int64_t ldb, float *C, int64_t ldc, float alpha, bool accumulate);
void dp_attn_gemm_plain(int64_t R, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                        int64_t ldb, float *C, int64_t ldc, float alpha, bool accumulate);

/* dst[e * ldd + c] = src[c * lds + e] for c < rows, e < cols: a key
 * block transposed for the score GEMM's B. AVX-512 transposes 16 x 16
 * blocks in registers; the plain version is a scalar loop. */
typedef void (*dp_attn_transpose_fn)(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                     int64_t ldd);
void dp_attn_transpose_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd);
void dp_attn_transpose_plain(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd);

/* exp(x) for the softmax tiles, x <= 0 (scores minus their row maximum):
 * Cephes' range reduction (to nearest) and degree-6 polynomial (about 2 ulp), written
 * as straight-line float code the compiler vectorises in each target's
 * loop, with explicit FMAs (ISO C mode contracts no a * b + c by itself;
 * they made the GPT example's attention forward 9% faster, 1.52 -> 1.39 ms
 * per layer); exactly 0 below -87.3 (and at -inf, a masked score), NaN stays
 * NaN. */
static inline __attribute__((always_inline)) float dp_attn_exp(float x) {
  float xc = x > -87.3f ? x : -87.3f; /* NaN -> -87.3 here; restored below */
  xc = xc < 88.0f ? xc : 88.0f;
  /* round to nearest by adding and removing 1.5 * 2^23 (no floorf call, which the compiler will not inline
   * under strict floating point, so the loop stays vectorised) */
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = __builtin_fmaf(n, 2.12194440e-4f, __builtin_fmaf(n, -0.693359375f, xc));
  float y = 1.9875691500e-4f;
  y = __builtin_fmaf(y, r, 1.3981999507e-3f);
  y = __builtin_fmaf(y, r, 8.3334519073e-3f);
  y = __builtin_fmaf(y, r, 4.1665795894e-2f);
  y = __builtin_fmaf(y, r, 1.6666665459e-1f);
  y = __builtin_fmaf(y, r, 5.0000001201e-1f);
  y = __builtin_fmaf(y * r, r, r) + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float p2;
  memcpy(&p2, &bits, sizeof p2);
  y *= p2;
  y = x > -87.3f ? y : 0.0f;
  return x == x ? y : x;
}

/* dp_attn_exp on the lanes of k (0 in the others): the same results, lane
 * by lane, in fewer operations, as AVX-512 intrinsics for the row loops of
 * cpu_attention.c's AVX-512 variant (where the compiler kept the scalar
 * version's lanes on the stack): max(lo, x) and min(88, .) pass NaN
 * through, roundscale rounds to nearest as the 1.5 * 2^23 trick does, and
 * scalef multiplies by 2^n as the exponent bits do for n >= -126 (all that
 * xc >= -87.3 gives); the underflow's 0 is a lane mask. */
__attribute__((target("avx512f,avx512dq,fma"))) static inline __attribute__((always_inline)) __m512
dp_attn_exp512_maskz(__mmask16 k, __m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc));
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(y, r), r, r), _mm512_set1_ps(1.0f));
  k = _mm512_mask_cmp_ps_mask(k, x, lo, _CMP_NLE_UQ); /* x > -87.3 or NaN */
  return _mm512_maskz_scalef_ps(k, y, n);
}
__attribute__((target("avx512f,avx512dq,fma"))) static inline __attribute__((always_inline)) __m512
dp_attn_exp512(__m512 x) {
  return dp_attn_exp512_maskz((__mmask16)0xFFFFu, x);
}

#endif
