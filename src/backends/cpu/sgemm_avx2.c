/* AVX2+FMA SGEMM micro-kernel for CPUs without AVX-512: a 6 x 16 tile of C'
 * in 12 ymm accumulators, 2 for the Q vectors and 1 for the broadcast of
 * P (the classic Haswell shape: 15 of the 16 ymm registers). Q and P come
 * packed or in place exactly as for the AVX-512 kernel. Also the packers
 * both kernels share (AVX-512 CPUs have AVX2).
 *
 * Compiled for AVX2 through target attributes, so the build needs no
 * -march flag; sgemm.c only calls in here after __builtin_cpu_supports
 * said yes. */
#include <immintrin.h>

#include "backends/cpu/sgemm_kernels.h"

#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
/* every loop over tile rows and vectors is unrolled, so the accumulators
 * are only ever indexed by constants and live in registers */
#define UNROLL _Pragma("GCC unroll 16")

enum { MR = 6, NV = 2, VL = 8, NR = NV * VL };

/* Lanes below n set (for maskload/maskstore). */
TARGET_AVX2 INLINE __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Writes the finished accumulators: C' = alpha * acc + beta * C'. */
TARGET_AVX2 INLINE void store_tile(const dp_sg_tile *t, __m256 acc[MR][NV], const int nv) {
  const __m256 va = _mm256_set1_ps(t->alpha), vb = _mm256_set1_ps(t->beta);
  const bool read_c = t->beta != 0.0f;
  const bool has_bias = t->bias_n || t->bias_m; /* added after, as an unfused bias pass would */
  __m256 bias = _mm256_setzero_ps();
  if (t->c_cs == 1) {
    const int rem = t->nr - (nv - 1) * VL; /* 1..8 lanes in the last vector */
    const __m256i tail = lane_mask(rem);
    UNROLL
    for (int r = 0; r < MR; r++) {
      if (r >= t->mr) break;
      float *c = t->c + r * t->c_rs;
      UNROLL
      for (int v = 0; v < nv; v++) {
        __m256 x = _mm256_mul_ps(va, acc[r][v]);
        if (t->bias_m) bias = _mm256_set1_ps(t->bias_m[r]);
        if (v < nv - 1 || rem == VL) {
          if (read_c) x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + v * VL), x);
          if (t->bias_n) bias = _mm256_loadu_ps(t->bias_n + v * VL);
          if (has_bias) x = _mm256_add_ps(x, bias);
          _mm256_storeu_ps(c + v * VL, x);
        } else {
          if (read_c) x = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + v * VL, tail), x);
          if (t->bias_n) bias = _mm256_maskload_ps(t->bias_n + v * VL, tail);
          if (has_bias) x = _mm256_add_ps(x, bias);
          _mm256_maskstore_ps(c + v * VL, tail, x);
        }
      }
    }
    return;
  }
  /* C' is transposed (c_rs == 1): column j of the tile is mr contiguous
   * floats of C. */
  float rows[MR][NR] __attribute__((aligned(32)));
  UNROLL
  for (int r = 0; r < MR; r++) UNROLL
  for (int v = 0; v < nv; v++) _mm256_store_ps(rows[r] + v * VL, _mm256_mul_ps(va, acc[r][v]));
  for (int j = 0; j < t->nr; j++) {
    float *c = t->c + j * t->c_cs;
    for (int r = 0; r < t->mr; r++) {
      float y = read_c ? rows[r][j] + t->beta * c[r] : rows[r][j];
      c[r] = has_bias ? y + (t->bias_n ? t->bias_n[j] : t->bias_m[r]) : y;
    }
  }
}

/* The k loop for nv vectors; packed says where P's elements are, fill
 * whether Q comes from b_src (see dp_sg_tile). All are constants at every
 * call site. */
TARGET_AVX2 INLINE void tile_nv(const dp_sg_tile *t, const int nv, const bool packed, const bool fill) {
  __m256 acc[MR][NV];
  UNROLL
  for (int r = 0; r < MR; r++) UNROLL
  for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
  const float *ar[MR];
  UNROLL
  for (int r = 0; r < MR; r++) ar[r] = packed ? t->a + r : t->a + (r < t->mr ? r : 0) * t->a_rs;
  const int64_t as = packed ? MR : 1;
  const float *b = t->b;
  const float *src = t->b_src;
  float *fill_to = t->b_fill;
  const int64_t src_rs = t->b_rs;
  const int rem = t->nr - (nv - 1) * VL;
  const __m256i tail = lane_mask(rem);
  const int64_t k = t->k;
  for (int64_t p = 0; p < k; p++) {
    __m256 bv[NV];
    if (fill) {
      UNROLL
      for (int v = 0; v < nv; v++) {
        bv[v] = v == nv - 1 && rem < VL ? _mm256_maskload_ps(src + v * VL, tail) : _mm256_loadu_ps(src + v * VL);
        _mm256_store_ps(fill_to + v * VL, bv[v]);
      }
      if (p + 8 < k) _mm_prefetch((const char *)(src + 8 * src_rs), _MM_HINT_T0);
      src += src_rs;
      fill_to += nv * VL;
    } else {
      UNROLL
      for (int v = 0; v < nv; v++) bv[v] = _mm256_load_ps(b + v * VL);
      b += nv * VL;
    }
    UNROLL
    for (int r = 0; r < MR; r++) {
      __m256 a = _mm256_broadcast_ss(&ar[r][p * as]);
      UNROLL
      for (int v = 0; v < nv; v++) acc[r][v] = _mm256_fmadd_ps(a, bv[v], acc[r][v]);
    }
  }
  store_tile(t, acc, nv);
}

TARGET_AVX2 INLINE void tile_with(const dp_sg_tile *t, const bool packed, const bool fill) {
  if ((t->nr + VL - 1) / VL == 2) tile_nv(t, 2, packed, fill);
  else tile_nv(t, 1, packed, fill);
}

TARGET_AVX2 static void tile_avx2(const dp_sg_tile *t) {
  if (t->a_packed) {
    if (t->b_src) tile_with(t, true, true);
    else tile_with(t, true, false);
  } else {
    if (t->b_src) tile_with(t, false, true);
    else tile_with(t, false, false);
  }
}

/* r[i] (row i of an 8 x 8 block) -> r[j] (column j). */
TARGET_AVX2 INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  UNROLL
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  /* per 128-bit lane L: u[c] holds rows 0-3 of column 4L+c, u[4+c] rows 4-7 */
  UNROLL
  for (int h = 0; h < 2; h++) {
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  UNROLL
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

/* Used by both kernels (AVX-512 CPUs have AVX2): 8 columns of the panel at
 * a time, 8 x 8 blocks transposed in registers. */
TARGET_AVX2 void dp_sg_pack_q_trans8(int64_t kc, int w, int nrpad, const float *q, int64_t q_cs, float *dst) {
  for (int j0 = 0; j0 < nrpad; j0 += 8) {
    int jn = w - j0 < 0 ? 0 : (w - j0 > 8 ? 8 : w - j0); /* real columns in this group */
    /* columns past w re-read column 0 (valid memory) and are masked to 0 */
    const float *src[8];
    UNROLL
    for (int jj = 0; jj < 8; jj++) src[jj] = jj < jn ? q + (j0 + jj) * q_cs : q;
    const __m256 keep = _mm256_castsi256_ps(lane_mask(jn));
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      __m256 r[8];
      UNROLL
      for (int jj = 0; jj < 8; jj++) r[jj] = _mm256_loadu_ps(src[jj] + p);
      transpose8(r);
      UNROLL
      for (int pp = 0; pp < 8; pp++) _mm256_store_ps(dst + (p + pp) * nrpad + j0, _mm256_and_ps(r[pp], keep));
    }
    for (; p < kc; p++)
      for (int jj = 0; jj < 8; jj++) dst[p * nrpad + j0 + jj] = jj < jn ? src[jj][p] : 0.0f;
  }
}

/* One masked 8-lane copy per k (a libc memcpy of 32 bytes costs more). */
TARGET_AVX2 void dp_sg_pack_p8(int64_t kc, int mr, int MR, const float *p_src, int64_t p_cs, float *dst) {
  const __m256i src_mask = lane_mask(mr), dst_mask = lane_mask(MR);
  for (int64_t p = 0; p < kc; p++, p_src += p_cs, dst += MR) {
    /* columns of a 1024-row matrix are 4 KB apart: prefetch 8 ahead */
    if (p + 8 < kc) _mm_prefetch((const char *)(p_src + 8 * p_cs), _MM_HINT_T0);
    _mm256_maskstore_ps(dst, dst_mask, _mm256_maskload_ps(p_src, src_mask));
  }
}

const dp_sg_kernel dp_sg_avx2 = {
    .name = "avx2",
    .mr = MR,
    .nr = NR,
    .vl = VL,
    .kc = 256,
    .nc = 192,
    .kc_max = 768,          /* 6 x 768 floats: 18 KB of a 32 KB L1 */
    .l2_floats = 48 * 1024, /* 192 KB: most of Haswell's 256 KB L2 */
    .tile = tile_avx2,
    .pack_q_trans = dp_sg_pack_q_trans8,
    .pack_p = dp_sg_pack_p8,
};
