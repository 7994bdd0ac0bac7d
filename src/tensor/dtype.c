#include "tensor/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/dtype_conv.h"

int dp_dtype_parse(const char *s, dp_dtype *out) {
  for (int t = 0; t < DP_NDTYPES; t++)
    if (strcmp(s, dp_dtype_name((dp_dtype)t)) == 0) {
      *out = (dp_dtype)t;
      return 0;
    }
  /* the other spellings PyTorch (and short forms) accept */
  static const struct {
    const char *alias;
    dp_dtype t;
  } aliases[] = {
      {"float", DP_F32}, {"f32", DP_F32}, {"double", DP_F64}, {"f64", DP_F64},   {"long", DP_I64}, {"i64", DP_I64},
      {"byte", DP_U8},   {"u8", DP_U8},   {"bool", DP_U8},    {"bf16", DP_BF16}, {"half", DP_F16}, {"f16", DP_F16},
  };
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(s, aliases[i].alias) == 0) {
      *out = aliases[i].t;
      return 0;
    }
  return -1;
}

dp_dtype dp_promote(dp_dtype a, dp_dtype b) {
  if (a == b) return a;
  bool fa = dp_dtype_is_float(a), fb = dp_dtype_is_float(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return DP_I64; /* u8 with i64 */
  if (a == DP_F64 || b == DP_F64) return DP_F64;
  return DP_F32; /* f32 with a half type, or bf16 with f16 */
}

/* One definition shared with the CUDA kernels (dtype_conv.h). */
double dp_load_d(const void *p, dp_dtype t) { return dp_conv_load_d(p, t); }
void dp_store_d(void *p, dp_dtype t, double v) { dp_conv_store_d(p, t, v); }

int dp_device_parse(const char *s, dp_device *out) {
  if (strcmp(s, "cpu") == 0) {
    *out = dp_cpu();
    return 0;
  }
  if (strncmp(s, "cuda", 4) == 0) {
    if (s[4] == 0) {
      *out = (dp_device){DP_CUDA, 0};
      return 0;
    }
    if (s[4] == ':') {
      char *end;
      long i = strtol(s + 5, &end, 10);
      if (end != s + 5 && *end == 0 && i >= 0 && i < 64) {
        *out = (dp_device){DP_CUDA, (int8_t)i};
        return 0;
      }
    }
  }
  return -1;
}

const char *dp_device_str(dp_device d, char *buf, size_t n) {
  if (d.type == DP_CPU) snprintf(buf, n, "cpu");
  else snprintf(buf, n, "cuda:%d", d.index);
  return buf;
}
