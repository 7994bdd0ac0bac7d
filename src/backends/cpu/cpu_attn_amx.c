/* bfloat16 attention products on AMX tiles (dp_attn_bf16_amx, contract in
 * cpu_attn_bf16.h).
 *
 * One tile multiply (tdpbf16ps) is a 16 x 16 block of float32 results over
 * 32 bfloat16 terms: a strip of 16 queries against 16 keys at a head dim of
 * 32 is one instruction. Every tile here is 16 rows of 64 bytes (16 floats
 * or 32 bfloat16), so one configuration serves them all: tiles 0 and 1
 * accumulate, 2 holds A (rows of 32 bfloat16), 3 holds B (16 pair rows of
 * 16 words, VNNI: word j of pair row p is B[2p][j] low, B[2p + 1][j] high).
 * (AVX512-BF16's vdpbf16ps was measured first: on that Intel CPU it issues
 * at half the rate of float32 FMAs, so it did no better than widening; on
 * AMD's Zen 4, without AMX, it runs at twice that rate: cpu_attn_dot.c.) */
#include "backends/cpu/cpu_attn_bf16.h"

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

TARGET_AMX static void amx_begin(void) {
  tile_config c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 4; t++) c.rows[t] = 16, c.colsb[t] = 64;
  /* GCC's ldtilecfg builtin does not say it reads c: without this the stores above were dropped as dead (a
   * configuration of palette 1 and no tiles, which faults) */
  __asm__ volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}
TARGET_AMX static void amx_end(void) { _tile_release(); }

TARGET_AMX static void amx_scores(int64_t rows, int64_t w, int64_t E, const uint16_t *a, int64_t as, const uint32_t *bt,
                                  int64_t ldb, float *S, int64_t lds, float scale, uint16_t *pad) {
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

TARGET_AMX static void amx_mm(int64_t K2, int64_t N, const uint32_t *A, int64_t lda, const uint32_t *B, int64_t ldb,
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

const dp_attn_bf16_kernel dp_attn_bf16_amx = {
    .name = "amx", .begin = amx_begin, .end = amx_end, .scores = amx_scores, .mm = amx_mm};
