/* bfloat16 / float16 <-> float32, round to nearest even. Plain functions
 * usable from host code and (with DP_HD) CUDA device code. */
#ifndef DP_HALF_H
#define DP_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DP_HD __host__ __device__
#else
#define DP_HD
#endif

static inline DP_HD float dp_bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline DP_HD uint32_t dp_f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline DP_HD float dp_bf16_to_f32(uint16_t h) { return dp_bits_to_f32((uint32_t)h << 16); }

static inline DP_HD uint16_t dp_f32_to_bf16(float f) {
  uint32_t u = dp_f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline DP_HD float dp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return dp_bits_to_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return dp_bits_to_f32(sign | 0x7f800000u | (man << 13));
  return dp_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline DP_HD uint16_t dp_f32_to_f16(float f) {
  uint32_t u = dp_f32_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (a < 0x38800000u) {                                   /* subnormal or zero in f16 */
    if (a < 0x33000000u) return (uint16_t)sign;            /* rounds to zero */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t half = 1u << (shift - 1), rem = m & ((1u << shift) - 1u);
    uint32_t r = m >> shift;
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u; /* rebias 127->15 */
  return (uint16_t)(sign | (r >> 13));
}

#endif
