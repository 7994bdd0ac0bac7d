/* AVX2+FMA SGEMM micro-kernel for CPUs without AVX-512: a 6 x 16 tile of C'
 * in 12 ymm accumulators, 2 for the Q vectors and 1 for the broadcast of
 * P (the classic Haswell shape: 15 of the 16 ymm registers).
 *
 * Compiled for AVX2 through target attributes, so the build needs no
 * -march flag; sgemm.c only calls in here after __builtin_cpu_supports
 * said yes. */
#include <immintrin.h>
#include <string.h>

#include "ops/cpu/sgemm_kernels.h"

#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

enum { MR = 6, NV = 2, VL = 8, NR = NV * VL };

/* Lanes below n set (for maskload/maskstore). */
TARGET_AVX2 INLINE __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Writes the finished accumulators: C' = alpha * acc + beta * C'. */
TARGET_AVX2 INLINE void store_tile(const dp_sg_tile *t, __m256 acc[MR][NV], const int nv) {
  const __m256 va = _mm256_set1_ps(t->alpha), vb = _mm256_set1_ps(t->beta);
  const bool read_c = t->beta != 0.0f;
  if (t->c_cs == 1) {
    const int rem = t->nr - (nv - 1) * VL; /* 1..8 lanes in the last vector */
    const __m256i tail = lane_mask(rem);
    for (int r = 0; r < MR; r++) {
      if (r >= t->mr) break;
      float *c = t->c + r * t->c_rs;
      for (int v = 0; v < nv; v++) {
        __m256 x = _mm256_mul_ps(va, acc[r][v]);
        if (v < nv - 1 || rem == VL) {
          if (read_c) x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + v * VL), x);
          _mm256_storeu_ps(c + v * VL, x);
        } else {
          if (read_c) x = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + v * VL, tail), x);
          _mm256_maskstore_ps(c + v * VL, tail, x);
        }
      }
    }
    return;
  }
  /* C' is transposed (c_rs == 1): column j of the tile is mr contiguous
   * floats of C. */
  float rows[MR][NR] __attribute__((aligned(32)));
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < nv; v++) _mm256_store_ps(rows[r] + v * VL, _mm256_mul_ps(va, acc[r][v]));
  for (int j = 0; j < t->nr; j++) {
    float *c = t->c + j * t->c_cs;
    for (int r = 0; r < t->mr; r++) c[r] = read_c ? rows[r][j] + t->beta * c[r] : rows[r][j];
  }
}

/* The k loop for nv vectors; packed says where P's elements are (see
 * dp_sg_tile). Both are constants at every call site. */
TARGET_AVX2 INLINE void tile_nv(const dp_sg_tile *t, const int nv, const bool packed) {
  __m256 acc[MR][NV];
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
  const float *ar[MR];
  for (int r = 0; r < MR; r++) ar[r] = packed ? t->a + r : t->a + (r < t->mr ? r : 0) * t->a_rs;
  const int64_t as = packed ? MR : 1;
  const float *b = t->b;
  for (int64_t p = 0; p < t->k; p++) {
    __m256 bv[NV];
    for (int v = 0; v < nv; v++) bv[v] = _mm256_load_ps(b + v * VL);
    for (int r = 0; r < MR; r++) {
      __m256 a = _mm256_broadcast_ss(&ar[r][p * as]);
      for (int v = 0; v < nv; v++) acc[r][v] = _mm256_fmadd_ps(a, bv[v], acc[r][v]);
    }
    b += nv * VL;
  }
  store_tile(t, acc, nv);
}

TARGET_AVX2 static void tile_avx2(const dp_sg_tile *t) {
  int nv = (t->nr + VL - 1) / VL;
  if (t->a_packed) {
    if (nv == 2) tile_nv(t, 2, true);
    else tile_nv(t, 1, true);
  } else {
    if (nv == 2) tile_nv(t, 2, false);
    else tile_nv(t, 1, false);
  }
}

static void pack_q_trans_avx2(int64_t kc, int w, const float *q, int64_t q_cs, float *dst) {
  int nrpad = (w + VL - 1) / VL * VL;
  for (int j = 0; j < w; j++) {
    const float *src = q + j * q_cs;
    for (int64_t p = 0; p < kc; p++) dst[p * nrpad + j] = src[p];
  }
  if (nrpad > w)
    for (int64_t p = 0; p < kc; p++) memset(dst + p * nrpad + w, 0, sizeof(float) * (size_t)(nrpad - w));
}

const dp_sg_kernel dp_sg_avx2 = {
    .name = "avx2",
    .mr = MR,
    .nr = NR,
    .vl = VL,
    .kc = 256,
    .nc = 512,
    .tile = tile_avx2,
    .pack_q_trans = pack_q_trans_avx2,
};
