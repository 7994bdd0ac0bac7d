/* Element types and devices. The only place that maps a dtype to its size,
 * name and conversion to/from double (dtype.c); kernels that need a typed
 * fast path switch on dtype once, outside their loops. */
#ifndef DP_DTYPE_H
#define DP_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { DP_F32 = 0, DP_F64, DP_I64, DP_U8, DP_BF16, DP_F16, DP_NDTYPES } dp_dtype;

typedef enum { DP_CPU = 0, DP_CUDA = 1 } dp_devtype;

typedef struct {
  int8_t type;  /* dp_devtype */
  int8_t index; /* cuda ordinal; 0 for cpu */
} dp_device;

static inline dp_device dp_cpu(void) { return (dp_device){DP_CPU, 0}; }
static inline bool dp_device_eq(dp_device a, dp_device b) { return a.type == b.type && a.index == b.index; }

size_t dp_dtype_size(dp_dtype t);
const char *dp_dtype_name(dp_dtype t); /* "float32", ... (PyTorch's names) */
/* Accepts PyTorch's names and aliases: float32/float/f32, float64/double,
 * int64/long, uint8/byte, bfloat16, float16/half. Returns -1 if unknown. */
int dp_dtype_parse(const char *s, dp_dtype *out);
bool dp_dtype_is_float(dp_dtype t);
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
