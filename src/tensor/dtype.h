/* Element types and devices. DP_DTYPES is the one place that gives a dtype
 * its name (PyTorch's), size and kind; the enum, dp_dtype_name,
 * dp_dtype_size and dp_dtype_is_float come from it (and the CUDA plugin,
 * which links nothing of the runtime, uses these inline versions too).
 * Conversion to/from double is dtype_conv.h's; kernels that need a typed
 * fast path switch on dtype once, outside their loops. */
#ifndef DP_DTYPE_H
#define DP_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/half.h" /* DP_HD */

/* X(ID, name, bytes, is_float) */
// clang-format off
#define DP_DTYPES(X)            \
  X(F32,  "float32",  4, true)  \
  X(F64,  "float64",  8, true)  \
  X(I64,  "int64",    8, false) \
  X(U8,   "uint8",    1, false) \
  X(BF16, "bfloat16", 2, true)  \
  X(F16,  "float16",  2, true)
// clang-format on

#define DP_DTYPE_ENUM(ID, ...) DP_##ID,
typedef enum { DP_DTYPES(DP_DTYPE_ENUM) DP_NDTYPES } dp_dtype;
#undef DP_DTYPE_ENUM

static inline const char *dp_dtype_name(dp_dtype t) { /* "float32", ... */
#define DP_DTYPE_NAME(ID, name, ...) name,
  static const char *const names[] = {DP_DTYPES(DP_DTYPE_NAME)};
#undef DP_DTYPE_NAME
  return (unsigned)t < DP_NDTYPES ? names[t] : "?";
}
static inline DP_HD size_t dp_dtype_size(dp_dtype t) {
  switch (t) {
#define DP_DTYPE_SIZE(ID, name, bytes, ...)                                                                            \
  case DP_##ID: return bytes;
    DP_DTYPES(DP_DTYPE_SIZE)
#undef DP_DTYPE_SIZE
  default: return 0;
  }
}
static inline DP_HD bool dp_dtype_is_float(dp_dtype t) {
  switch (t) {
#define DP_DTYPE_FLOAT(ID, name, bytes, is_float)                                                                      \
  case DP_##ID: return is_float;
    DP_DTYPES(DP_DTYPE_FLOAT)
#undef DP_DTYPE_FLOAT
  default: return false;
  }
}

typedef enum { DP_CPU = 0, DP_CUDA = 1 } dp_devtype;

typedef struct {
  int8_t type;  /* dp_devtype */
  int8_t index; /* cuda ordinal; 0 for cpu */
} dp_device;

static inline dp_device dp_cpu(void) { return (dp_device){DP_CPU, 0}; }
static inline bool dp_device_eq(dp_device a, dp_device b) { return a.type == b.type && a.index == b.index; }

/* Accepts PyTorch's names and aliases: float32/float/f32, float64/double,
 * int64/long, uint8/byte, bfloat16, float16/half. Returns -1 if unknown. */
int dp_dtype_parse(const char *s, dp_dtype *out);
/* Result dtype of a binary arithmetic op (PyTorch's promotion for the types
 * we have: any float beats integers; wider float wins; f16+bf16 -> f32). */
dp_dtype dp_promote(dp_dtype a, dp_dtype b);

/* Element <-> double conversion, the reference path every typed kernel is
 * checked against. p points at one element of type t. */
double dp_load_d(const void *p, dp_dtype t);
void dp_store_d(void *p, dp_dtype t, double v);

/* "cpu", "cuda", "cuda:1". Returns -1 on a malformed string. */
int dp_device_parse(const char *s, dp_device *out);
/* Writes "cpu" or "cuda:N" into buf. */
const char *dp_device_str(dp_device d, char *buf, size_t n);

#endif
