/* CUDA elementwise kernels: copy/cast, fill, arange, rand, unary, binary,
 * unary backward, dropout.
 *
 * Every strided kernel indexes through dp_index_plan (strided_index.h) and
 * picks one of three arithmetic modes once per launch, like the CPU's fast
 * and reference paths: float (float32/bfloat16/float16 operands, the
 * *_f functions of scalar_math.h), exact int64 (integer ops that keep the
 * type), or double (float64, integers mixed with floats: the *_d
 * reference functions). A contiguous float32 op merges to one dimension,
 * so its indexing is one multiply. */
#include "backends/cuda/cuda_kernels.cuh"
#include "ops/philox.h"

enum { MODE_FLOAT, MODE_DOUBLE, MODE_INT, MODE_SAME };

static bool all_f32ish(dp_dtype a, dp_dtype b) { return dp_dtype_is_f32ish(a) && dp_dtype_is_f32ish(b); }

/* A strided plan over t0's shape for the given operands (all of that
 * shape; operand 0 is written). */
static const dp_index_plan *plan_of(dp_index_plan *p, int n, const dp_tensor *t0, const dp_tensor *t1 = NULL,
                                    const dp_tensor *t2 = NULL, const dp_tensor *t3 = NULL) {
  const dp_tensor *ts[DP_IDX_MAXOPS] = {t0, t1, t2, t3};
  const int64_t *st[DP_IDX_MAXOPS];
  for (int k = 0; k < n; k++) st[k] = ts[k]->stride;
  dp_index_plan_init(p, t0->ndim, t0->shape, n, st);
  return p;
}

/* ---- copy / cast ---- */
__global__ void k_copy(const __grid_constant__ dp_index_plan p, char *dst, dp_dtype ddt, const char *src, dp_dtype sdt,
                       int mode) {
  const int64_t de = (int64_t)dp_dtype_bytes(ddt), se = (int64_t)dp_dtype_bytes(sdt);
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    char *d = dst + off[0] * de;
    const char *s = src + off[1] * se;
    if (mode == MODE_SAME) {
      switch (de) {
      case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
      case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
      case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
      default: *(uint64_t *)d = *(const uint64_t *)s; break;
      }
    } else if (mode == MODE_FLOAT) {
      dp_conv_store_f(d, ddt, dp_conv_load_f(s, sdt));
    } else if (mode == MODE_INT) { /* int64 <-> uint8: wrap / widen like the CPU */
      if (ddt == DP_U8) *(uint8_t *)d = (uint8_t) * (const int64_t *)s;
      else *(int64_t *)d = *(const uint8_t *)s;
    } else {
      dp_conv_store_d(d, ddt, dp_conv_load_d(s, sdt));
    }
  }
}

/* dst <- src, any strides, casting; one memcpy when both are dense in one dtype */
int dp_cu_copy(dp_tensor *dst_t, const dp_tensor *src_t) {
  DP_CU_ENTER(c, dst_t);
  if (dst_t->dtype == src_t->dtype && dp_cu_contig(dst_t) && dp_cu_contig(src_t)) {
    size_t bytes = (size_t)dp_cu_numel(dst_t) * dp_dtype_bytes(dst_t->dtype);
    if (!bytes) return 0;
    return dp_cu_check(cudaMemcpyAsync(dp_cu_ptr(dst_t), dp_cu_ptr(src_t), bytes, cudaMemcpyDeviceToDevice, c->stream),
                       "copy", c->device);
  }
  dp_index_plan plan;
  const dp_index_plan *p = plan_of(&plan, 2, dst_t, src_t);
  void *dst = dp_cu_ptr(dst_t);
  const void *src = dp_cu_ptr(src_t);
  dp_dtype ddt = dst_t->dtype, sdt = src_t->dtype;
  if (p->numel == 0) return 0;
  int mode = ddt == sdt                                                           ? MODE_SAME
             : all_f32ish(ddt, sdt)                                               ? MODE_FLOAT
             : (ddt == DP_U8 && sdt == DP_I64) || (ddt == DP_I64 && sdt == DP_U8) ? MODE_INT
                                                                                  : MODE_DOUBLE;
  k_copy<<<dp_cu_blocks(c, p->numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(*p, (char *)dst, ddt,
                                                                                    (const char *)src, sdt, mode);
  return dp_cu_after_launch(c, "copy");
}

/* ---- fill: the element's bytes are computed once on the host ---- */
__global__ void k_fill(const __grid_constant__ dp_index_plan p, char *dst, int es, uint64_t bits) {
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    char *d = dst + off[0] * es;
    switch (es) {
    case 1: *(uint8_t *)d = (uint8_t)bits; break;
    case 2: *(uint16_t *)d = (uint16_t)bits; break;
    case 4: *(uint32_t *)d = (uint32_t)bits; break;
    default: *(uint64_t *)d = bits; break;
    }
  }
}

int dp_cu_fill(dp_tensor *t, double v) {
  DP_CU_ENTER(c, t);
  if (v == 0.0 && !signbit(v) && dp_cu_contig(t)) { /* -0.0 keeps its sign */
    size_t bytes = (size_t)dp_cu_numel(t) * dp_dtype_bytes(t->dtype);
    return bytes ? dp_cu_check(cudaMemsetAsync(dp_cu_ptr(t), 0, bytes, c->stream), "fill", c->device) : 0;
  }
  dp_index_plan plan;
  const dp_index_plan *p = plan_of(&plan, 1, t);
  void *dst = dp_cu_ptr(t);
  dp_dtype dt = t->dtype;
  if (p->numel == 0) return 0;
  uint64_t bits = 0;
  dp_conv_store_d(&bits, dt, v); /* little-endian: the element sits in the low bytes */
  int es = (int)dp_dtype_bytes(dt);
  k_fill<<<dp_cu_blocks(c, p->numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(*p, (char *)dst, es, bits);
  return dp_cu_after_launch(c, "fill");
}

/* ---- arange / rand: contiguous, element i from its index alone ----
 * a + b * x is written with the explicitly rounded intrinsics: nvcc would
 * contract it into one fused multiply-add (one rounding instead of two),
 * and the CPU (ISO C, no contraction) rounds twice, so the two devices
 * would give numbers that differ in the last bit for general bounds and
 * starts. */
__device__ __forceinline__ double mul_add_d(double a, double b, double x) { return __dadd_rn(a, __dmul_rn(b, x)); }
__device__ __forceinline__ float mul_add_f(float a, float b, float x) { return __fadd_rn(a, __fmul_rn(b, x)); }

__global__ void k_arange(char *out, dp_dtype dt, int64_t n, double start, double step) {
  DP_CU_LOOP(i, n) {
    if (dt == DP_I64) ((int64_t *)out)[i] = (int64_t)start + i * (int64_t)step;
    else dp_cu_st(out, i, dt, mul_add_d(start, (double)i, step));
  }
}

int dp_cu_arange(dp_tensor *t, double start, double step) {
  DP_CU_ENTER(c, t);
  void *out = dp_cu_ptr(t);
  dp_dtype dt = t->dtype;
  int64_t n = dp_cu_numel(t);
  if (n == 0) return 0;
  k_arange<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)out, dt, n, start, step);
  return dp_cu_after_launch(c, "arange");
}

/* Same formulas as dp_cpu_rand, so a seed gives the same numbers on both. */
__global__ void k_rand(char *out, dp_dtype dt, int64_t n, int normal, uint64_t seed, uint64_t offset, double a,
                       double b) {
  DP_CU_LOOP(i, n) {
    uint64_t ctr = offset + (uint64_t)i;
    if (!normal && dt == DP_F32) {
      float fa = (float)a, fs = (float)(b - a);
      ((float *)out)[i] = mul_add_f(fa, fs, dp_philox_uniform_f(seed, ctr));
    } else {
      double v =
          normal ? mul_add_d(a, b, dp_philox_normal_d(seed, ctr)) : mul_add_d(a, b - a, dp_philox_uniform_d(seed, ctr));
      dp_cu_st(out, i, dt, v);
    }
  }
}

int dp_cu_rand(dp_tensor *t, dp_rand_kind kind, uint64_t seed, uint64_t offset, double a, double b) {
  DP_CU_ENTER(c, t);
  void *out = dp_cu_ptr(t);
  dp_dtype dt = t->dtype;
  int64_t n = dp_cu_numel(t);
  if (n == 0) return 0;
  k_rand<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)out, dt, n, kind == DP_RAND_NORMAL,
                                                                             seed, offset, a, b);
  return dp_cu_after_launch(c, "rand");
}

/* ---- unary: the op table's formulas (a by value: the parameters travel
 * with the launch) ---- */
__global__ void k_unary(const __grid_constant__ dp_index_plan p, const dp_unary_args a, char *out, dp_dtype odt,
                        const char *x, dp_dtype xdt, int mode) {
  const int64_t oe = (int64_t)dp_dtype_bytes(odt), xe = (int64_t)dp_dtype_bytes(xdt);
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    char *o = out + off[0] * oe;
    const char *xi = x + off[1] * xe;
    if (mode == MODE_FLOAT) dp_conv_store_f(o, odt, dp_unary_f(a.op, dp_conv_load_f(xi, xdt), &a.p));
    else if (mode == MODE_INT) *(int64_t *)o = dp_unary_i64(a.op, *(const int64_t *)xi, &a.p);
    else dp_conv_store_d(o, odt, dp_unary_d(a.op, dp_conv_load_d(xi, xdt), &a.p));
  }
}

int dp_cu_unary(const dp_unary_args *a, dp_tensor *out_t, const dp_tensor *x_t) {
  DP_CU_ENTER(c, out_t);
  dp_index_plan plan;
  const dp_index_plan *p = plan_of(&plan, 2, out_t, x_t);
  void *out = dp_cu_ptr(out_t);
  const void *x = dp_cu_ptr(x_t);
  dp_dtype odt = out_t->dtype, xdt = x_t->dtype;
  if (p->numel == 0) return 0;
  bool keeps_int = dp_unary_ops[a->op].ints == DP_INT_KEEP || dp_unary_ops[a->op].ints == DP_INT_KEEP_IF_WHOLE;
  int mode = all_f32ish(odt, xdt) ? MODE_FLOAT : odt == DP_I64 && xdt == DP_I64 && keeps_int ? MODE_INT : MODE_DOUBLE;
  k_unary<<<dp_cu_blocks(c, p->numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(*p, *a, (char *)out, odt,
                                                                                     (const char *)x, xdt, mode);
  return dp_cu_after_launch(c, "unary op");
}

/* ---- unary backward: operands gx, gy, [x], [y] ---- */
__global__ void k_unary_backward(const __grid_constant__ dp_index_plan p, const dp_unary_args a, char *gx,
                                 dp_dtype gxdt, const char *gy, dp_dtype gydt, const char *x, dp_dtype xdt,
                                 const char *y, dp_dtype ydt, int kx, int ky, int mode) {
  const int64_t e0 = (int64_t)dp_dtype_bytes(gxdt), e1 = (int64_t)dp_dtype_bytes(gydt);
  const int64_t ex = (int64_t)dp_dtype_bytes(xdt), ey = (int64_t)dp_dtype_bytes(ydt);
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    const char *xp = kx >= 0 ? x + off[kx] * ex : NULL;
    const char *yp = ky >= 0 ? y + off[ky] * ey : NULL;
    if (mode == MODE_FLOAT) {
      float xv = xp ? dp_conv_load_f(xp, xdt) : 0.f, yv = yp ? dp_conv_load_f(yp, ydt) : 0.f;
      float g = dp_conv_load_f(gy + off[1] * e1, gydt);
      dp_conv_store_f(gx + off[0] * e0, gxdt, dp_unary_grad_f(a.op, g, xv, yv, &a.p));
    } else {
      double xv = xp ? dp_conv_load_d(xp, xdt) : 0.0, yv = yp ? dp_conv_load_d(yp, ydt) : 0.0;
      double g = dp_conv_load_d(gy + off[1] * e1, gydt);
      dp_conv_store_d(gx + off[0] * e0, gxdt, dp_unary_grad_d(a.op, g, xv, yv, &a.p));
    }
  }
}

int dp_cu_unary_backward(const dp_unary_args *a, dp_tensor *gx_t, const dp_tensor *gy_t, const dp_tensor *x_t,
                         const dp_tensor *y_t) {
  DP_CU_ENTER(c, gx_t);
  dp_index_plan plan;
  const dp_index_plan *p = x_t && y_t ? plan_of(&plan, 4, gx_t, gy_t, x_t, y_t)
                           : x_t      ? plan_of(&plan, 3, gx_t, gy_t, x_t)
                           : y_t      ? plan_of(&plan, 3, gx_t, gy_t, y_t)
                                      : plan_of(&plan, 2, gx_t, gy_t);
  void *gx = dp_cu_ptr(gx_t);
  const void *gy = dp_cu_ptr(gy_t), *x = x_t ? dp_cu_ptr(x_t) : NULL, *y = y_t ? dp_cu_ptr(y_t) : NULL;
  dp_dtype gxdt = gx_t->dtype, gydt = gy_t->dtype, xdt = x_t ? x_t->dtype : DP_F32, ydt = y_t ? y_t->dtype : DP_F32;
  if (p->numel == 0) return 0;
  int kx = x ? 2 : -1, ky = y ? (x ? 3 : 2) : -1;
  if (!x) xdt = DP_F32;
  if (!y) ydt = DP_F32;
  bool f = all_f32ish(gxdt, gydt) && dp_dtype_is_f32ish(xdt) && dp_dtype_is_f32ish(ydt);
  k_unary_backward<<<dp_cu_blocks(c, p->numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      *p, *a, (char *)gx, gxdt, (const char *)gy, gydt, (const char *)x, xdt, (const char *)y, ydt, kx, ky,
      f ? MODE_FLOAT : MODE_DOUBLE);
  return dp_cu_after_launch(c, "unary backward");
}

/* ---- binary (tensor op tensor, or with a scalar: no operand 2) ---- */
__global__ void k_binary(const __grid_constant__ dp_index_plan p, dp_binary_op op, char *out, dp_dtype odt,
                         const char *a, dp_dtype adt, const char *b, dp_dtype bdt, double s, int scalar, int mode) {
  const int64_t oe = (int64_t)dp_dtype_bytes(odt), ae = (int64_t)dp_dtype_bytes(adt), be = (int64_t)dp_dtype_bytes(bdt);
  DP_CU_LOOP(i, p.numel) {
    int64_t off[DP_IDX_MAXOPS];
    dp_index_offsets(&p, i, off);
    char *o = out + off[0] * oe;
    const char *ap = a + off[1] * ae;
    if (mode == MODE_INT) { /* int64 or uint8 operands (cast to the result type), exact, wrapping */
      const char *bp = b + off[2] * be;
      int64_t av = adt == DP_U8 ? (int64_t) * (const uint8_t *)ap : *(const int64_t *)ap;
      int64_t bv = bdt == DP_U8 ? (int64_t) * (const uint8_t *)bp : *(const int64_t *)bp;
      int64_t r = dp_binary_i64(op, av, bv);
      if (odt == DP_U8) *(uint8_t *)o = (uint8_t)r;
      else *(int64_t *)o = r;
    } else if (mode == MODE_FLOAT) {
      float av = dp_conv_load_f(ap, adt);
      float bv = scalar ? (float)s : dp_conv_load_f(b + off[2] * be, bdt);
      dp_conv_store_f(o, odt, scalar == 2 ? dp_binary_f(op, bv, av) : dp_binary_f(op, av, bv));
    } else {
      double av = dp_conv_load_d(ap, adt);
      double bv = scalar ? s : dp_conv_load_d(b + off[2] * be, bdt);
      dp_conv_store_d(o, odt, scalar == 2 ? dp_binary_d(op, bv, av) : dp_binary_d(op, av, bv));
    }
  }
}

/* b_t == NULL: the scalar s (scalar_first: s op a) */
static int binary(dp_binary_op op, dp_tensor *out_t, const dp_tensor *a_t, const dp_tensor *b_t, double s,
                  bool scalar_first) {
  DP_CU_ENTER(c, out_t);
  dp_index_plan plan;
  const dp_index_plan *p = b_t ? plan_of(&plan, 3, out_t, a_t, b_t) : plan_of(&plan, 2, out_t, a_t);
  void *out = dp_cu_ptr(out_t);
  const void *a = dp_cu_ptr(a_t), *b = b_t ? dp_cu_ptr(b_t) : NULL;
  dp_dtype odt = out_t->dtype, adt = a_t->dtype, bdt = b_t ? b_t->dtype : a_t->dtype;
  if (p->numel == 0) return 0;
  bool arith = dp_binary_ops[op].scalar_f32;
  int mode;
  if (b) {
    bool f = all_f32ish(adt, bdt) && (dp_dtype_is_f32ish(odt) || (odt == DP_U8 && dp_binary_is_compare(op)));
    bool ints = (adt == DP_I64 || adt == DP_U8) && (bdt == DP_I64 || bdt == DP_U8);
    bool i = ints && (odt == DP_I64 || odt == DP_U8) && dp_binary_ops[op].out != DP_OUT_FLOAT;
    mode = f ? MODE_FLOAT : i ? MODE_INT : MODE_DOUBLE;
  } else {
    /* as the CPU: only arithmetic with a scalar rounds the scalar to float;
     * comparisons and the rest see the exact scalar */
    bdt = adt;
    mode = all_f32ish(odt, adt) && arith ? MODE_FLOAT : MODE_DOUBLE;
  }
  int scalar = b ? 0 : scalar_first ? 2 : 1;
  k_binary<<<dp_cu_blocks(c, p->numel, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      *p, op, (char *)out, odt, (const char *)a, adt, (const char *)b, bdt, s, scalar, mode);
  return dp_cu_after_launch(c, "binary op");
}

int dp_cu_binary(dp_binary_op op, dp_tensor *out, const dp_tensor *a, const dp_tensor *b) {
  return binary(op, out, a, b, 0.0, false);
}
int dp_cu_binary_scalar(dp_binary_op op, dp_tensor *out, const dp_tensor *a, double s, bool scalar_first) {
  return binary(op, out, a, NULL, s, scalar_first);
}

/* ---- dropout: keep = Philox uniform >= p, recomputed in backward ---- */
__global__ void k_dropout(char *out, dp_dtype odt, const char *x, dp_dtype xdt, int64_t n, double p, uint64_t seed,
                          uint64_t offset) {
  float fp = (float)p;
  DP_CU_LOOP(i, n) {
    bool keep = dp_philox_uniform_f(seed, offset + (uint64_t)i) >= fp;
    if (odt == DP_F32 && xdt == DP_F32) {
      float scale = (float)(1.0 / (1.0 - p));
      ((float *)out)[i] = keep ? ((const float *)x)[i] * scale : 0.f;
    } else {
      dp_cu_st(out, i, odt, keep ? dp_cu_ld(x, i, xdt) * (1.0 / (1.0 - p)) : 0.0);
    }
  }
}

int dp_cu_dropout(dp_tensor *out_t, const dp_tensor *x_t, double p, uint64_t seed, uint64_t offset) {
  DP_CU_ENTER(c, out_t);
  void *out = dp_cu_ptr(out_t);
  const void *x = dp_cu_ptr(x_t);
  dp_dtype odt = out_t->dtype, xdt = x_t->dtype;
  int64_t n = dp_cu_numel(out_t);
  if (n == 0) return 0;
  k_dropout<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)out, odt, (const char *)x, xdt,
                                                                                n, p, seed, offset);
  return dp_cu_after_launch(c, "dropout");
}
