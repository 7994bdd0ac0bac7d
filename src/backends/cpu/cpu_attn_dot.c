/* bfloat16 attention products with AVX512-BF16 dot products
 * (dp_attn_bf16_dot, contract in cpu_attn_bf16.h), for CPUs that have
 * AVX512-BF16 but no AMX (AMD Zen 4).
 *
 * vdpbf16ps adds, in each of 16 float32 lanes, the products of one pair
 * of bfloat16 from each operand: with A's pair word broadcast and a vector
 * of B's pair words, one instruction is a row of 16 columns over 2 terms of
 * the sum, and the kernel is sgemm's micro-kernel in pairs: 8 rows x 32
 * columns of float32 accumulators (16 registers), per pair step 2 vector
 * loads of B, 8 broadcasts of A and 16 vdpbf16ps. On the AMD EPYC (Zen 4)
 * of 2026-12-03 vdpbf16ps ran 233 GFLOP/s on one core against 117 for
 * float32 FMAs (a register-only loop), where the Intel CPU with AMX of
 * cpu_attn_amx.c issued it at half its FMA rate. */
#include <immintrin.h>
#include <pthread.h>

#include "backends/cpu/cpu_attn_bf16.h"
#include "backends/cpu/sgemm.h"

#define TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

static pthread_once_t dot_once = PTHREAD_ONCE_INIT;
static bool dot_ok;
static void dot_probe(void) {
  __builtin_cpu_init();
  dot_ok = dp_sgemm_cpu_supports(DP_SGEMM_AVX512) && __builtin_cpu_supports("avx512bf16");
}
bool dp_attn_dot_supported(void) {
  pthread_once(&dot_once, dot_probe);
  return dot_ok;
}

/* the 32-bit word at p in every lane (an unaligned load that may alias the bfloat16 it holds) */
TARGET_BF16 INLINE __m512bh bcast_pair(const uint32_t *p) {
  return (__m512bh)_mm512_broadcastd_epi32(_mm_loadu_si32(p));
}

/* C rows 0..7 (+)= A rows 0..7 (pair words, row stride lda) times B's nv vectors of pair words over K2 pairs, each
 * result times scale (when scaled); rows from `rows` on read A's row 0 and store zeros */
TARGET_BF16 INLINE void block8(int64_t K2, const uint32_t *A, int64_t lda, int rows, const uint32_t *B, int64_t ldb,
                               float *C, int64_t ldc, bool accumulate, float scale, const bool scaled, const int nv) {
  __m512 acc[8][2];
  const uint32_t *ar[8];
  UNROLL
  for (int r = 0; r < 8; r++) {
    ar[r] = A + (r < rows ? r : 0) * lda;
    UNROLL
    for (int v = 0; v < nv; v++)
      acc[r][v] = accumulate && r < rows ? _mm512_loadu_ps(C + r * ldc + v * 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < K2; p++) {
    __m512bh b[2];
    UNROLL
    for (int v = 0; v < nv; v++) b[v] = (__m512bh)_mm512_loadu_si512(B + p * ldb + v * 16);
    UNROLL
    for (int r = 0; r < 8; r++) {
      __m512bh a = bcast_pair(ar[r] + p);
      UNROLL
      for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  const __m512 vs = _mm512_set1_ps(scale);
  UNROLL
  for (int r = 0; r < 8; r++) {
    UNROLL
    for (int v = 0; v < nv; v++) {
      __m512 x = r < rows ? (scaled ? _mm512_mul_ps(vs, acc[r][v]) : acc[r][v]) : _mm512_setzero_ps();
      _mm512_storeu_ps(C + r * ldc + v * 16, x);
    }
  }
}

/* 16 rows of C over N columns (a multiple of 16) in blocks of 8 rows x 32 columns, the last 16 columns alone */
TARGET_BF16 static void rows16(int64_t K2, int64_t N, const uint32_t *A, int64_t lda, int rows, const uint32_t *B,
                               int64_t ldb, float *C, int64_t ldc, bool accumulate, float scale, bool scaled) {
  for (int h = 0; h < 2; h++) {
    const int hr = rows - 8 * h < 0 ? 0 : rows - 8 * h > 8 ? 8 : rows - 8 * h;
    const uint32_t *a = A + (hr ? 8 * h : 0) * lda; /* a half with no rows reads row 0, stores zeros */
    float *c = C + 8 * h * ldc;
    int64_t n0 = 0;
    for (; n0 + 32 <= N; n0 += 32) {
      if (scaled) block8(K2, a, lda, hr, B + n0, ldb, c + n0, ldc, accumulate, scale, true, 2);
      else block8(K2, a, lda, hr, B + n0, ldb, c + n0, ldc, accumulate, scale, false, 2);
    }
    if (n0 < N) {
      if (scaled) block8(K2, a, lda, hr, B + n0, ldb, c + n0, ldc, accumulate, scale, true, 1);
      else block8(K2, a, lda, hr, B + n0, ldb, c + n0, ldc, accumulate, scale, false, 1);
    }
  }
}

static void dot_begin(void) {}
static void dot_end(void) {}

/* a's rows are whole pair words (the caller's strides are even and its rows 4-byte aligned) */
TARGET_BF16 static void dot_scores(int64_t rows, int64_t w, int64_t E, const uint16_t *a, int64_t as,
                                   const uint32_t *bt, int64_t ldb, float *S, int64_t lds, float scale, uint16_t *pad) {
  (void)pad; /* rows past `rows` are never read: no padded copy */
  rows16(E / 2, (w + 15) / 16 * 16, (const uint32_t *)(const void *)a, as / 2, (int)rows, bt, ldb, S, lds, false, scale,
         true);
}

TARGET_BF16 static void dot_mm(int64_t K2, int64_t N, const uint32_t *A, int64_t lda, const uint32_t *B, int64_t ldb,
                               float *C, int64_t ldc, bool accumulate) {
  rows16(K2, N, A, lda, 16, B, ldb, C, ldc, accumulate, 1.0f, false);
}

const dp_attn_bf16_kernel dp_attn_bf16_dot = {
    .name = "avx512_bf16", .begin = dot_begin, .end = dot_end, .scores = dot_scores, .mm = dot_mm};
