/* Element <-> double/float conversion as inline host+device functions: the
 * one definition of how every dtype is read and written. dtype.c's
 * dp_load_d / dp_store_d are these, and the CUDA kernels call them too, so
 * a cast on the GPU rounds, truncates and wraps exactly as on the CPU. */
#ifndef DP_DTYPE_CONV_H
#define DP_DTYPE_CONV_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"
#include "tensor/half.h" /* DP_HD */

/* the kernels' name for dp_dtype_size (dtype.h) */
static inline DP_HD size_t dp_dtype_bytes(dp_dtype t) { return dp_dtype_size(t); }

/* float32, bfloat16 and float16 compute in float on the fast paths; the
 * others (and any mix with them) go through double. */
static inline DP_HD int dp_dtype_is_f32ish(dp_dtype t) { return t == DP_F32 || t == DP_BF16 || t == DP_F16; }

static inline DP_HD double dp_conv_load_d(const void *p, dp_dtype t) {
  switch (t) {
  case DP_F32: return *(const float *)p;
  case DP_F64: return *(const double *)p;
  case DP_I64: return (double)*(const int64_t *)p;
  case DP_U8: return *(const uint8_t *)p;
  case DP_BF16: return dp_bf16_to_f32(*(const uint16_t *)p);
  case DP_F16: return dp_f16_to_f32(*(const uint16_t *)p);
  default: return 0;
  }
}

static inline DP_HD void dp_conv_store_d(void *p, dp_dtype t, double v) {
  switch (t) {
  case DP_F32: *(float *)p = (float)v; break;
  case DP_F64: *(double *)p = v; break;
  case DP_I64:
    /* Truncation toward zero like a C cast; NaN and out-of-range become 0 /
     * the limit rather than undefined behaviour. */
    if (isnan(v)) *(int64_t *)p = 0;
    else if (v >= 9.2233720368547758e18) *(int64_t *)p = INT64_MAX;
    else if (v <= -9.2233720368547758e18) *(int64_t *)p = INT64_MIN;
    else *(int64_t *)p = (int64_t)v;
    break;
  case DP_U8:
    /* Wraps like PyTorch's uint8 conversion of integers. */
    if (isnan(v) || isinf(v)) *(uint8_t *)p = 0;
    else *(uint8_t *)p = (uint8_t)(int64_t)fmod(trunc(v), 256.0);
    break;
  case DP_BF16: *(uint16_t *)p = dp_f32_to_bf16((float)v); break;
  case DP_F16: *(uint16_t *)p = dp_f32_to_f16((float)v); break;
  default: break;
  }
}

/* Float paths (only for dp_dtype_is_f32ish types; others defer to double,
 * which gives the same value for them). */
static inline DP_HD float dp_conv_load_f(const void *p, dp_dtype t) {
  switch (t) {
  case DP_F32: return *(const float *)p;
  case DP_BF16: return dp_bf16_to_f32(*(const uint16_t *)p);
  case DP_F16: return dp_f16_to_f32(*(const uint16_t *)p);
  default: return (float)dp_conv_load_d(p, t);
  }
}

static inline DP_HD void dp_conv_store_f(void *p, dp_dtype t, float v) {
  switch (t) {
  case DP_F32: *(float *)p = v; break;
  case DP_BF16: *(uint16_t *)p = dp_f32_to_bf16(v); break;
  case DP_F16: *(uint16_t *)p = dp_f32_to_f16(v); break;
  default: dp_conv_store_d(p, t, (double)v); break;
  }
}

#endif
