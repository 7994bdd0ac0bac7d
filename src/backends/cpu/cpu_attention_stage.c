/* The CPU attention's staging of bfloat16 rows and its D = rowsum(dO O)
 * (contracts in cpu_attention_stage.h).
 *
 * The casts are the loops of the vector kernels' bf16 <-> f32 casts
 * (cpu_vec_ew_t.h, bit-exact with tensor/half.h) over a block of strided
 * rows, compiled once per instruction set through target attributes as the
 * tiles are: a row of a head is 16 to 128 values, and one call per block
 * (rather than a call of dp_cpu_vec_get()->cast per row) keeps the
 * staging a few percent of the tiles' time. */
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_attention_stage.h"
#include "backends/cpu/cpu_attn_gemm.h"

#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

INLINE void widen_body(const void *src, dp_dtype dt, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd) {
  if (dt == DP_F32) {
    for (int64_t r = 0; r < rows; r++)
      memcpy(dst + r * ldd, (const float *)src + r * lds, sizeof(float) * (size_t)cols);
    return;
  }
  for (int64_t r = 0; r < rows; r++) {
    const uint16_t *restrict x = (const uint16_t *)src + r * lds;
    float *restrict o = dst + r * ldd;
    for (int64_t c = 0; c < cols; c++) {
      uint32_t u = (uint32_t)x[c] << 16;
      memcpy(&o[c], &u, 4);
    }
  }
}

INLINE void narrow_body(const float *src, int64_t lds, int64_t rows, int64_t cols, void *dst, dp_dtype dt,
                        int64_t ldd) {
  if (dt == DP_F32) {
    for (int64_t r = 0; r < rows; r++) memcpy((float *)dst + r * ldd, src + r * lds, sizeof(float) * (size_t)cols);
    return;
  }
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict x = src + r * lds;
    uint16_t *restrict o = (uint16_t *)dst + r * ldd;
    for (int64_t c = 0; c < cols; c++) {
      uint32_t u;
      memcpy(&u, &x[c], 4);
      uint32_t n = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* round to nearest even */
      uint32_t q = (u >> 16) | 0x40u;                      /* NaN stays a (quiet) NaN */
      o[c] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : n);
    }
  }
}

TARGET_AVX512 static void widen_avx512(const void *src, dp_dtype dt, int64_t lds, int64_t rows, int64_t cols,
                                       float *dst, int64_t ldd) {
  widen_body(src, dt, lds, rows, cols, dst, ldd);
}
TARGET_AVX2 static void widen_avx2(const void *src, dp_dtype dt, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                   int64_t ldd) {
  widen_body(src, dt, lds, rows, cols, dst, ldd);
}
static void widen_plain(const void *src, dp_dtype dt, int64_t lds, int64_t rows, int64_t cols, float *dst,
                        int64_t ldd) {
  widen_body(src, dt, lds, rows, cols, dst, ldd);
}
TARGET_AVX512 static void narrow_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, void *dst,
                                        dp_dtype dt, int64_t ldd) {
  narrow_body(src, lds, rows, cols, dst, dt, ldd);
}
TARGET_AVX2 static void narrow_avx2(const float *src, int64_t lds, int64_t rows, int64_t cols, void *dst, dp_dtype dt,
                                    int64_t ldd) {
  narrow_body(src, lds, rows, cols, dst, dt, ldd);
}
static void narrow_plain(const float *src, int64_t lds, int64_t rows, int64_t cols, void *dst, dp_dtype dt,
                         int64_t ldd) {
  narrow_body(src, lds, rows, cols, dst, dt, ldd);
}

void dp_attn_widen(int isa, const void *src, dp_dtype dt, int64_t lds, int64_t rows, int64_t cols, float *dst,
                   int64_t ldd) {
  (isa == 2 ? widen_avx512 : isa == 1 ? widen_avx2 : widen_plain)(src, dt, lds, rows, cols, dst, ldd);
}
void dp_attn_narrow(int isa, const float *src, int64_t lds, int64_t rows, int64_t cols, void *dst, dp_dtype dt,
                    int64_t ldd) {
  (isa == 2 ? narrow_avx512 : isa == 1 ? narrow_avx2 : narrow_plain)(src, lds, rows, cols, dst, dt, ldd);
}

/* D = rowsum(dO * O), each row's dot product rounded as the tiles' GEMM kernel rounds dZ = dO V^T's (one FMA
 * after another from 0 where the kernel fuses, a multiply then an add in the plain one), so a row whose weights
 * are one-hot (a saturated softmax: O is that key's value row bit for bit) gets dS = P (dZ - D) = 0 exactly, as
 * the composed softmax's backward does, instead of a rounding difference times |K|. Eight rows at a time: eight
 * independent chains hide the FMA's latency. */
#define FMA_STEP(x, y, z) __builtin_fmaf(x, y, z)
#define MUL_ADD_STEP(x, y, z) ((z) + (x) * (y))
#define DEFINE_ROWDOT(SFX, TARGET, STEP)                                                                               \
  TARGET static void rowdot_##SFX(const float *go, int64_t gs, const float *o, int64_t os, int64_t L, int64_t Ev,      \
                                  float *D) {                                                                          \
    for (int64_t i0 = 0; i0 < L; i0 += 8) {                                                                            \
      int64_t nr = L - i0 < 8 ? L - i0 : 8;                                                                            \
      float acc[8] = {0};                                                                                              \
      for (int64_t e = 0; e < Ev; e++)                                                                                 \
        for (int64_t r = 0; r < nr; r++) acc[r] = STEP(go[(i0 + r) * gs + e], o[(i0 + r) * os + e], acc[r]);           \
      for (int64_t r = 0; r < nr; r++) D[i0 + r] = acc[r];                                                             \
    }                                                                                                                  \
  }
DEFINE_ROWDOT(avx2, TARGET_AVX2, FMA_STEP)
DEFINE_ROWDOT(plain, , MUL_ADD_STEP)
/* AVX-512: 16 rows in the lanes of one vector, each lane the same chain of FMAs in the same order, fed by blocks
 * of dO and O transposed in registers (the loop above compiled to scalar code with strided loads: 6% of the GPT
 * example's attention backward) */
TARGET_AVX512 static void rowdot_avx512(const float *go, int64_t gs, const float *o, int64_t os, int64_t L, int64_t Ev,
                                        float *D) {
  enum { EB = 64 };
  float tg[EB * 16] = {0}, to[EB * 16] = {0}; /* lanes past a short block keep old values, never garbage */
  for (int64_t i0 = 0; i0 < L; i0 += 16) {
    int64_t nr = L - i0 < 16 ? L - i0 : 16;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t e0 = 0; e0 < Ev; e0 += EB) {
      int64_t ne = Ev - e0 < EB ? Ev - e0 : EB;
      dp_attn_transpose_avx512(go + i0 * gs + e0, gs, nr, ne, tg, 16);
      dp_attn_transpose_avx512(o + i0 * os + e0, os, nr, ne, to, 16);
      for (int64_t e = 0; e < ne; e++)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(tg + e * 16), _mm512_loadu_ps(to + e * 16), acc);
    }
    _mm512_mask_storeu_ps(D + i0, (__mmask16)(nr >= 16 ? 0xFFFFu : (1u << nr) - 1u), acc);
  }
}

void dp_attn_rowdot(int isa, const float *go, int64_t gs, const float *o, int64_t os, int64_t L, int64_t Ev, float *D) {
  (isa == 2 ? rowdot_avx512 : isa == 1 ? rowdot_avx2 : rowdot_plain)(go, gs, o, os, L, Ev, D);
}
