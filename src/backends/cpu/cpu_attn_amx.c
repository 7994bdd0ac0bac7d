/* bfloat16 attention products on AMX tiles (contract in cpu_attn_amx.h).
 *
 * One tile multiply (tdpbf16ps) is a 16 x 16 block of float32 results over
 * 32 bfloat16 terms: a strip of 16 queries against 16 keys at a head dim of
 * 32 is one instruction. Every tile here is 16 rows of 64 bytes (16 floats
 * or 32 bfloat16), so one configuration serves them all: tiles 0 and 1
 * accumulate, 2 holds A (rows of 32 bfloat16), 3 holds B (16 pair rows of
 * 16 words, VNNI: word j of pair row p is B[2p][j] low, B[2p + 1][j] high).
 * (AVX512-BF16's vdpbf16ps was measured first: on this CPU it issues at
 * half the rate of float32 FMAs, so it did no better than widening.) */
#include "backends/cpu/cpu_attn_amx.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backends/cpu/sgemm.h"

#define TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16")))

/* Linux hands out the tile registers' state only on request (arch_prctl, once per process) */
enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_ok;
static void amx_probe(void) {
  __builtin_cpu_init();
  amx_ok = dp_sgemm_cpu_supports(DP_SGEMM_AVX512) && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
           syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
}
bool dp_attn_amx_supported(void) {
  pthread_once(&amx_once, amx_probe);
  return amx_ok;
}

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

TARGET_AMX void dp_attn_amx_begin(void) {
  tile_config c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 4; t++) c.rows[t] = 16, c.colsb[t] = 64;
  /* GCC's ldtilecfg builtin does not say it reads c: without this the stores above were dropped as dead (a
   * configuration of palette 1 and no tiles, which faults) */
  __asm__ volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}
TARGET_AMX void dp_attn_amx_end(void) { _tile_release(); }

TARGET_AMX void dp_attn_amx_scores(int64_t rows, int64_t w, int64_t E, const uint16_t *a, int64_t as,
                                   const uint32_t *bt, int64_t ldb, float *S, int64_t lds, float scale, uint16_t *pad) {
  if (rows < 16) { /* the last strip of a sequence: its rows copied into 16 zero-padded ones */
    memset(pad, 0, sizeof(uint16_t) * (size_t)(16 * E));
    for (int64_t r = 0; r < rows; r++) memcpy(pad + r * E, a + r * as, sizeof(uint16_t) * (size_t)E);
    a = pad, as = E;
  }
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < w; j0 += 16) {
    _tile_zero(0);
    for (int64_t e0 = 0; e0 < E; e0 += 32) {
      _tile_loadd(2, a + e0, as * 2);
      _tile_loadd(3, bt + e0 / 2 * ldb + j0, ldb * 4);
      _tile_dpbf16ps(0, 2, 3);
    }
    _tile_stored(0, S + j0, lds * 4);
    for (int64_t r = 0; r < rows; r++)
      _mm512_storeu_ps(S + r * lds + j0, _mm512_mul_ps(vs, _mm512_loadu_ps(S + r * lds + j0)));
  }
}

TARGET_AMX void dp_attn_amx_mm(int64_t K2, int64_t N, const uint32_t *A, int64_t lda, const uint32_t *B, int64_t ldb,
                               float *C, int64_t ldc, bool accumulate) {
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    if (accumulate) _tile_loadd(1, C + n0, ldc * 4);
    else _tile_zero(1);
    for (int64_t p = 0; p < K2; p += 16) {
      _tile_loadd(2, A + p, lda * 4);
      _tile_loadd(3, B + p * ldb + n0, ldb * 4);
      _tile_dpbf16ps(1, 2, 3);
    }
    _tile_stored(1, C + n0, ldc * 4);
  }
}

/* two float32 vectors (16 + 16 values, scaled) as one of 32 bfloat16, the first 16 in the low half */
TARGET_AMX static inline __m512i to_bf16(__m512 lo, __m512 hi, __m512 va, bool scale) {
  if (scale) lo = _mm512_mul_ps(va, lo), hi = _mm512_mul_ps(va, hi);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* the first n of 16 lanes (n may be <= 0 or > 16) */
static inline __mmask16 first16(int64_t n) { return (__mmask16)(n >= 16 ? 0xFFFFu : n > 0 ? (1u << n) - 1u : 0u); }

/* x and y (32 bfloat16 each: rows 2p and 2p + 1) as 32 pair words at d: word j = x[j] low, y[j] high */
TARGET_AMX static inline void store_pairs(uint32_t *d, __m512i x, __m512i y) {
  const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  _mm512_storeu_si512(d, _mm512_permutex2var_epi16(x, lo_idx, y));
  _mm512_storeu_si512(d + 16, _mm512_permutex2var_epi16(x, hi_idx, y));
}

TARGET_AMX void dp_attn_amx_pv(int64_t rows, int64_t w, int64_t N, const float *P, int64_t ldp, float alpha,
                               const uint32_t *vv, float *C, int64_t ldc, bool accumulate, uint16_t *pb, float *tmp) {
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
  dp_attn_amx_mm(steps * 16, N, (const uint32_t *)pb, pw / 2, vv, N, c, ld, accumulate);
  for (int64_t r = 0; c == tmp && r < rows; r++) memcpy(C + r * ldc, tmp + r * N, sizeof(float) * (size_t)N);
}

TARGET_AMX void dp_attn_amx_pair_f32(const float *src, int64_t lds, int64_t rows, int64_t prows, int64_t cols,
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

TARGET_AMX void dp_attn_amx_pair_rows(const uint16_t *src, int64_t lds, int64_t rows, int64_t prows, int64_t cols,
                                      uint32_t *dst) {
  for (int64_t p = 0; p < prows; p++)
    for (int64_t c = 0; c < cols; c += 32) {
      __m512i x = 2 * p < rows ? _mm512_loadu_si512(src + 2 * p * lds + c) : _mm512_setzero_si512();
      __m512i y = 2 * p + 1 < rows ? _mm512_loadu_si512(src + (2 * p + 1) * lds + c) : _mm512_setzero_si512();
      store_pairs(dst + p * cols + c, x, y);
    }
}
