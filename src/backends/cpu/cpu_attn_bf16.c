/* The helpers the bfloat16 attention kernels share (contract in
 * cpu_attn_bf16.h): pairing rows into the words both kernels read, and
 * P V through either kernel's mm. AVX-512 with AVX512-BF16's rounding
 * converts only, so they run on every CPU either kernel runs on. */
#include "backends/cpu/cpu_attn_bf16.h"

#include <immintrin.h>
#include <string.h>

#define TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

/* two float32 vectors (16 + 16 values, scaled) as one of 32 bfloat16, the first 16 in the low half */
TARGET_BF16 static inline __m512i to_bf16(__m512 lo, __m512 hi, __m512 va, bool scale) {
  if (scale) lo = _mm512_mul_ps(va, lo), hi = _mm512_mul_ps(va, hi);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* the first n of 16 lanes (n may be <= 0 or > 16) */
static inline __mmask16 first16(int64_t n) { return (__mmask16)(n >= 16 ? 0xFFFFu : n > 0 ? (1u << n) - 1u : 0u); }

/* x and y (32 bfloat16 each: rows 2p and 2p + 1) as 32 pair words at d: word j = x[j] low, y[j] high */
TARGET_BF16 static inline void store_pairs(uint32_t *d, __m512i x, __m512i y) {
  const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  _mm512_storeu_si512(d, _mm512_permutex2var_epi16(x, lo_idx, y));
  _mm512_storeu_si512(d + 16, _mm512_permutex2var_epi16(x, hi_idx, y));
}

TARGET_BF16 void dp_attn_bf16_pv(const dp_attn_bf16_kernel *k, int64_t rows, int64_t w, int64_t N, const float *P,
                                 int64_t ldp, float alpha, const uint32_t *vv, float *C, int64_t ldc, bool accumulate,
                                 uint16_t *pb, float *tmp) {
  const int64_t steps = (w + 31) / 32, pw = steps * 32; /* keys in whole tile steps, P zero past w */
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t r = 0; r < 16; r++)
    for (int64_t c = 0; c < pw; c += 32) {
      int64_t n = r < rows ? w - c : 0; /* rows past `rows`: zeros */
      _mm512_storeu_si512(pb + r * pw + c,
                          to_bf16(_mm512_maskz_loadu_ps(first16(n), P + r * ldp + c),
                                  _mm512_maskz_loadu_ps(first16(n - 16), P + r * ldp + c + 16), va, alpha != 1.0f));
    }
  float *c = C;
  int64_t ld = ldc;
  if (rows < 16) { /* fewer rows than a tile: through 16 rows of scratch, so no row past C's is touched */
    for (int64_t r = 0; r < rows && accumulate; r++) memcpy(tmp + r * N, C + r * ldc, sizeof(float) * (size_t)N);
    c = tmp, ld = N;
  }
  k->mm(steps * 16, N, (const uint32_t *)pb, pw / 2, vv, N, c, ld, accumulate);
  for (int64_t r = 0; c == tmp && r < rows; r++) memcpy(C + r * ldc, tmp + r * N, sizeof(float) * (size_t)N);
}

TARGET_BF16 void dp_attn_bf16_pair_f32(const float *src, int64_t lds, int64_t rows, int64_t prows, int64_t cols,
                                       float alpha, uint32_t *dst) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t p = 0; p < prows; p++)
    for (int64_t c = 0; c < cols; c += 32) { /* rows 2p and 2p + 1 as bfloat16 (zeros past rows), then paired */
      const float *r0 = src + 2 * p * lds + c, *r1 = r0 + lds;
      __m512i x = 2 * p < rows ? to_bf16(_mm512_loadu_ps(r0), _mm512_loadu_ps(r0 + 16), va, alpha != 1.0f)
                               : _mm512_setzero_si512();
      __m512i y = 2 * p + 1 < rows ? to_bf16(_mm512_loadu_ps(r1), _mm512_loadu_ps(r1 + 16), va, alpha != 1.0f)
                                   : _mm512_setzero_si512();
      store_pairs(dst + p * cols + c, x, y);
    }
}

TARGET_BF16 void dp_attn_bf16_pair_rows(const uint16_t *src, int64_t lds, int64_t rows, int64_t prows, int64_t cols,
                                        uint32_t *dst) {
  for (int64_t p = 0; p < prows; p++)
    for (int64_t c = 0; c < cols; c += 32) {
      __m512i x = 2 * p < rows ? _mm512_loadu_si512(src + 2 * p * lds + c) : _mm512_setzero_si512();
      __m512i y = 2 * p + 1 < rows ? _mm512_loadu_si512(src + (2 * p + 1) * lds + c) : _mm512_setzero_si512();
      store_pairs(dst + p * cols + c, x, y);
    }
}
