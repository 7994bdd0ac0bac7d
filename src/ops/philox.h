/* Philox 4x32-10 counter-based generator (Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3", SC'11). Element i of a draw with (seed,
 * offset) uses counter offset + i, so the CPU and CUDA kernels produce the
 * same numbers for the same seed regardless of how work is split. Shared by
 * both backends (DP_HD). */
#ifndef DP_PHILOX_H
#define DP_PHILOX_H

#include <math.h>
#include <stdint.h>

#include "tensor/half.h"

typedef struct {
  uint32_t v[4];
} dp_philox4;

static inline DP_HD uint32_t dp_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

static inline DP_HD dp_philox4 dp_philox(uint64_t seed, uint64_t counter) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = dp_mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = dp_mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  dp_philox4 out = {{c0, c1, c2, c3}};
  return out;
}

/* Uniform in [0, 1) with 24 random bits (exactly representable in float). */
static inline DP_HD float dp_u32_to_uniform_f(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
/* Uniform in [0, 1) with 53 bits from two words. */
static inline DP_HD double dp_u64_to_uniform_d(uint32_t a, uint32_t b) {
  uint64_t x = ((uint64_t)a << 21) ^ (uint64_t)(b >> 11);
  return (double)(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* Element i's uniform: counter i, first word. */
static inline DP_HD float dp_philox_uniform_f(uint64_t seed, uint64_t i) {
  return dp_u32_to_uniform_f(dp_philox(seed, i).v[0]);
}
static inline DP_HD double dp_philox_uniform_d(uint64_t seed, uint64_t i) {
  dp_philox4 r = dp_philox(seed, i);
  return dp_u64_to_uniform_d(r.v[0], r.v[1]);
}
/* Element i's standard normal (Box-Muller on the counter's words). */
static inline DP_HD double dp_philox_normal_d(uint64_t seed, uint64_t i) {
  dp_philox4 r = dp_philox(seed, i);
  double u1 = dp_u64_to_uniform_d(r.v[0], r.v[1]);
  double u2 = dp_u64_to_uniform_d(r.v[2], r.v[3]);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
