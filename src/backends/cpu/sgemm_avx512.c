/* AVX-512 SGEMM micro-kernel: an 8 x 48 tile of C' held in 24 zmm
 * accumulators (narrower tiles: 8 x 32, 8 x 16; slivers of at most 4 rows
 * multiply only 4: the LSTM example's 20 x 800 x 200 step 132 -> 154
 * GFLOP/s). Each k step loads up to 3
 * vectors of the packed Q panel (or of Q's rows in place, storing them into
 * the panel for the next slivers) and broadcasts 8 elements of P straight
 * into the FMAs (embedded {1to16} broadcasts from the packed sliver or from
 * 8 rows in place), so the loop is loads + FMAs only.
 *
 * Compiled for AVX-512 through target attributes, so the build needs no
 * -march flag; sgemm.c only calls in here after __builtin_cpu_supports
 * said yes. */
#include <immintrin.h>

#include "backends/cpu/sgemm_kernels.h"

#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define INLINE static inline __attribute__((always_inline))
/* every loop over tile rows and vectors is unrolled, so the accumulators
 * are only ever indexed by constants and live in registers */
#define UNROLL _Pragma("GCC unroll 16")

enum { MR = 8, NV = 3, VL = 16, NR = NV * VL };
_Static_assert(MR == 8, "the transposed store transposes 8-row tiles");

/* Writes the finished accumulators: C' = alpha * acc + beta * C' (+ the
 * tile's bias, a separate add after, as an unfused bias pass would). */
TARGET_AVX512 INLINE void store_tile(const dp_sg_tile *t, __m512 acc[MR][NV], const int nv) {
  const __m512 va = _mm512_set1_ps(t->alpha), vb = _mm512_set1_ps(t->beta);
  const bool read_c = t->beta != 0.0f;
  if (t->c_cs == 1) {
    int rem = t->nr - (nv - 1) * VL; /* 1..16 lanes in the last vector */
    __mmask16 tail = (__mmask16)(rem >= VL ? 0xFFFFu : (1u << rem) - 1u);
    UNROLL
    for (int r = 0; r < MR; r++) {
      if (r >= t->mr) break;
      float *c = t->c + r * t->c_rs;
      UNROLL
      for (int v = 0; v < nv; v++) {
        __mmask16 m = v == nv - 1 ? tail : (__mmask16)0xFFFF;
        __m512 x = _mm512_mul_ps(va, acc[r][v]);
        if (read_c) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c + v * VL), x);
        if (t->bias_n) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, t->bias_n + v * VL));
        if (t->bias_m) x = _mm512_add_ps(x, _mm512_set1_ps(t->bias_m[r]));
        _mm512_mask_storeu_ps(c + v * VL, m, x);
      }
    }
    return;
  }
  /* C' is transposed (c_rs == 1): column j of the tile is mr contiguous
   * floats of C. Transpose each 8 x 16 block of accumulators in registers
   * into 16 columns of 8 and store each with one (masked) 8-lane access. */
  const __mmask8 rows_mask = (__mmask8)((1u << t->mr) - 1u);
  const __m256 vb8 = _mm512_castps512_ps256(vb);
  /* lanes 0-3 of a then of b, 4-7 of a then of b; and the same for 8-15 */
  const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  UNROLL
  for (int v = 0; v < nv; v++) {
    __m512 x[MR];
    UNROLL
    for (int r = 0; r < MR; r++) x[r] = _mm512_mul_ps(va, acc[r][v]);
    /* per 128-bit lane L: u[c] holds rows 0-3 of column 4L+c, u[4+c] rows 4-7 */
    __m512 u[8];
    UNROLL
    for (int h = 0; h < 2; h++) {
      __m512 t0 = _mm512_unpacklo_ps(x[4 * h], x[4 * h + 1]), t1 = _mm512_unpackhi_ps(x[4 * h], x[4 * h + 1]);
      __m512 t2 = _mm512_unpacklo_ps(x[4 * h + 2], x[4 * h + 3]), t3 = _mm512_unpackhi_ps(x[4 * h + 2], x[4 * h + 3]);
      u[4 * h + 0] = _mm512_shuffle_ps(t0, t2, 0x44);
      u[4 * h + 1] = _mm512_shuffle_ps(t0, t2, 0xEE);
      u[4 * h + 2] = _mm512_shuffle_ps(t1, t3, 0x44);
      u[4 * h + 3] = _mm512_shuffle_ps(t1, t3, 0xEE);
    }
    UNROLL
    for (int cc = 0; cc < 4; cc++) {
      /* columns cc, 4+cc (lo) and 8+cc, 12+cc (hi), each 8 rows */
      __m512 lo = _mm512_permutex2var_ps(u[cc], lo_idx, u[4 + cc]);
      __m512 hi = _mm512_permutex2var_ps(u[cc], hi_idx, u[4 + cc]);
      __m256 col[4] = {_mm512_castps512_ps256(lo), _mm512_extractf32x8_ps(lo, 1), _mm512_castps512_ps256(hi),
                       _mm512_extractf32x8_ps(hi, 1)};
      UNROLL
      for (int q = 0; q < 4; q++) {
        int j = v * VL + 4 * q + cc;
        if (j >= t->nr) continue;
        float *c = t->c + j * t->c_cs;
        __m256 y = col[q];
        if (read_c) y = _mm256_fmadd_ps(vb8, _mm256_maskz_loadu_ps(rows_mask, c), y);
        if (t->bias_m) y = _mm256_add_ps(y, _mm256_maskz_loadu_ps(rows_mask, t->bias_m));
        if (t->bias_n) y = _mm256_add_ps(y, _mm256_set1_ps(t->bias_n[j]));
        _mm256_mask_storeu_ps(c, rows_mask, y);
      }
    }
  }
}

/* The k loop for nv vectors; packed says where P's elements are, fill
 * whether Q comes from b_src (see dp_sg_tile). All are constants at every
 * call site, so each instance is fully unrolled over the MR x nv
 * accumulators, which stay in registers. */
TARGET_AVX512 INLINE void tile_nv(const dp_sg_tile *t, const int nv, const bool packed, const bool fill,
                                  const int rows) {
  __m512 acc[MR][NV];
  UNROLL
  for (int r = 0; r < MR; r++) UNROLL
  for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  /* rows past mr alias row 0 when P is read in place: valid memory, and
   * their results are never stored */
  const float *ar[MR];
  UNROLL
  for (int r = 0; r < MR; r++) ar[r] = packed ? t->a + r : t->a + (r < t->mr ? r : 0) * t->a_rs;
  const int64_t as = packed ? MR : 1;
  const float *b = t->b;
  const float *src = t->b_src;
  float *fill_to = t->b_fill;
  const int64_t src_rs = t->b_rs;
  const int rem = t->nr - (nv - 1) * VL;
  const __mmask16 tail = (__mmask16)(rem >= VL ? 0xFFFFu : (1u << rem) - 1u);
  const int64_t k = t->k;
  for (int64_t p = 0; p < k; p++) {
    __m512 bv[NV];
    if (fill) {
      UNROLL
      for (int v = 0; v < nv; v++) {
        bv[v] = _mm512_maskz_loadu_ps(v == nv - 1 ? tail : (__mmask16)0xFFFF, src + v * VL);
        _mm512_store_ps(fill_to + v * VL, bv[v]);
        /* rows 4 KB apart defeat the hardware prefetchers */
        if (p + 8 < k) _mm_prefetch((const char *)(src + 8 * src_rs + v * VL), _MM_HINT_T0);
      }
      src += src_rs;
      fill_to += nv * VL;
    } else {
      UNROLL
      for (int v = 0; v < nv; v++) bv[v] = _mm512_load_ps(b + v * VL);
      b += nv * VL;
    }
    UNROLL
    for (int r = 0; r < rows; r++) {
      __m512 a = _mm512_set1_ps(ar[r][p * as]);
      UNROLL
      for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(a, bv[v], acc[r][v]);
    }
  }
  store_tile(t, acc, nv);
}

/* rows: the rows of P the k loop multiplies, 8, or 4 for a sliver of at
 * most 4 (the LSTM example's 20-row steps end in one: 8 rows would spend a
 * sixth of the step's FMAs on rows never stored); the others stay 0. */
TARGET_AVX512 INLINE void tile_rows(const dp_sg_tile *t, const bool packed, const bool fill, const int rows) {
  int nv = (t->nr + VL - 1) / VL;
  if (nv == 3) tile_nv(t, 3, packed, fill, rows);
  else if (nv == 2) tile_nv(t, 2, packed, fill, rows);
  else tile_nv(t, 1, packed, fill, rows);
}

TARGET_AVX512 INLINE void tile_with(const dp_sg_tile *t, const bool packed, const bool fill) {
  if (t->mr <= 4) tile_rows(t, packed, fill, 4);
  else tile_rows(t, packed, fill, MR);
}

TARGET_AVX512 static void tile_avx512(const dp_sg_tile *t) {
  if (t->a_packed) {
    if (t->b_src) tile_with(t, true, true);
    else tile_with(t, true, false);
  } else {
    if (t->b_src) tile_with(t, false, true);
    else tile_with(t, false, false);
  }
}

const dp_sg_kernel dp_sg_avx512 = {
    .name = "avx512",
    .mr = MR,
    .nr = NR,
    .vl = VL,
    .kc = 256,
    .nc = 480,
    .kc_max = 1024,          /* 8 x 1024 floats: 32 KB of a 48 KB L1 */
    .l2_floats = 128 * 1024, /* 512 KB: half the L2 of Zen 4/5 and Skylake-SP (1 MB) */
    .tile = tile_avx512,
    .pack_q_trans = dp_sg_pack_q_trans8, /* AVX-512 CPUs have AVX2 */
    .pack_p = dp_sg_pack_p8,
};
