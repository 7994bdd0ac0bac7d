/* CPU elementwise kernels: copy/cast, fill, unary, binary, their backward.
 *
 * Paths per kernel: float32 rows of unit stride go to the per-ISA vector
 * kernels (cpu_vec.h: AVX-512, AVX2 or the baseline, chosen at run time; a
 * broadcast operand is one value), strided float32 rows and rows with
 * bfloat16 / float16 operands to the same kernels in gathered, widened
 * chunks (so a view computes what a contiguous tensor does, as in PyTorch
 * and on CUDA, and 16-bit floats compute in float32 and round once, as
 * PyTorch's CPU kernels); exact int64 loops; and the reference
 * path that loads every element as double (dp_load_d), applies the double
 * version of the math and stores in the output dtype (float64 and dtype
 * mixes); the specs check the float32 paths against it. The math is the op table's formulas
 * (ops/scalar_math_t.h); the per-op float32 loops are generated from the
 * table, so a new op needs nothing here. Large iterations are split over
 * the threads of cpu_parallel.h. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/philox.h"
#include "ops/scalar_math.h"
#include "tensor/dtype_conv.h"

/* ---- copy / cast ---- */
typedef struct {
  dp_dtype to, from;
} cast_ctx;

/* one value into n elements es bytes wide, s0 bytes apart: typed stores
 * (a loop the compiler vectorises when they are contiguous), not a memcpy
 * call per element */
#define FILL_WITH(T)                                                                                                   \
  do {                                                                                                                 \
    T v_;                                                                                                              \
    memcpy(&v_, val, sizeof v_);                                                                                       \
    if (s0 == (int64_t)sizeof v_)                                                                                      \
      for (int64_t i = 0; i < n; i++) ((T *)dst)[i] = v_;                                                              \
    else                                                                                                               \
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * s0, &v_, sizeof v_);                                            \
  } while (0)
static void fill_value(char *dst, int64_t s0, const char *val, size_t es, int64_t n) {
  if (es == 2) FILL_WITH(uint16_t);
  else if (es == 4) FILL_WITH(uint32_t);
  else if (es == 8) FILL_WITH(uint64_t);
  else
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * s0, val, es);
}
#undef FILL_WITH

/* n contiguous bytes; from STREAM_MIN bytes on with non-temporal stores on
 * AVX-512 and AVX2 (the destination not read first into the cache: a
 * regular store reads each line before writing it, 3 bytes of traffic per
 * byte copied instead of 2). glibc's memcpy streams only past 3/4 of the
 * L3 (24 MiB here), and it copies 2 MiB-aligned blocks (this allocator's
 * large ones) backward to dodge 4K aliasing. Measured on one AMD EPYC core
 * (32 MiB L3), median of 60 clones, memcpy against streamed: 4 MiB 0.09 /
 * 0.16 ms (source and copy stay in the L3: memcpy wins), 8 MiB 0.53 / 0.33,
 * 16 MiB 1.7-2.7 / 1.05-1.1, 32 MiB 4.7-5.0 / 2.5-2.7; bench/nn_ops.lua's
 * clone 2048x2048 0.70-0.88 ms against PyTorch's 1.10-1.48 in the same runs.
 * A streamed copy is not in the cache afterwards; one this size would have
 * displaced most of it anyway. (Streaming a binary op's output the same way
 * made a 4 MiB mul 2x slower and did not speed up the 16 MiB broadcast add.) */
#define STREAM_MIN ((size_t)8 << 20)
#define TARGET_AVX512 __attribute__((target("avx512f")))
#define TARGET_AVX2 __attribute__((target("avx2")))
TARGET_AVX512 static void stream_avx512(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 256)
    for (int k = 0; k < 4; k++) _mm512_stream_ps((float *)(d + i + 64 * k), _mm512_loadu_ps(s + i + 64 * k));
}
TARGET_AVX2 static void stream_avx2(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 128)
    for (int k = 0; k < 4; k++)
      _mm256_stream_ps((float *)(d + i + 32 * k), _mm256_loadu_ps((const float *)(s + i + 32 * k)));
}
/* the whole lines with non-temporal stores (w: the vector table's width, 8 or 16), the partial ones around
 * them with memcpy, then a fence: the stores are weakly ordered, and another thread reads them next */
static void stream_bytes(char *d, const char *s, size_t n, int w) {
  size_t head = (64 - (uintptr_t)d % 64) % 64;
  if (head > n) head = n;
  size_t body = (n - head) / 256 * 256;
  memcpy(d, s, head); /* to the destination's first cache line */
  if (w == 16) stream_avx512(d + head, s + head, body);
  else stream_avx2(d + head, s + head, body);
  memcpy(d + head + body, s + head + body, n - head - body);
  _mm_sfence();
}
void dp_cpu_copy_streamed(void *dst, const void *src, size_t n) {
  int w = dp_cpu_vec_get()->width;
  if (w < 8) memcpy(dst, src, n);
  else stream_bytes(dst, src, n, w);
}

static void copy_bytes(char *d, const char *s, size_t n) {
  int w = n < STREAM_MIN ? 0 : dp_cpu_vec_get()->width; /* a row copy's usual case asks for no table */
  if (w < 8) memcpy(d, s, n);
  else stream_bytes(d, s, n, w);
}

/* strided elements of one size: typed loads and stores */
#define COPY_WITH(T)                                                                                                   \
  for (int64_t i = 0; i < n; i++) {                                                                                    \
    T v_;                                                                                                              \
    memcpy(&v_, p[1] + i * s[1], sizeof v_);                                                                           \
    memcpy(p[0] + i * s[0], &v_, sizeof v_);                                                                           \
  }

/* a row read backwards (flip along the last dim): d[i] = s[-i], typed so
 * the loop vectorises with a lane reversal */
#define COPY_REVERSED(T)                                                                                               \
  {                                                                                                                    \
    T *d_ = (T *)(void *)p[0];                                                                                         \
    const T *s_ = (const T *)(const void *)p[1];                                                                       \
    for (int64_t i = 0; i < n; i++) d_[i] = s_[-i];                                                                    \
  }

static void copy_row(char *const *p, const int64_t *s, int64_t n, void *vctx) {
  cast_ctx *c = vctx;
  size_t es = dp_dtype_size(c->to);
  if (c->to == c->from) {
    if (s[0] == (int64_t)es && s[1] == (int64_t)es) copy_bytes(p[0], p[1], (size_t)n * es);
    else if (s[0] == (int64_t)es && s[1] == -(int64_t)es && es == 4) COPY_REVERSED(uint32_t)
    else if (s[0] == (int64_t)es && s[1] == -(int64_t)es && es == 8) COPY_REVERSED(uint64_t)
    else if (s[0] == (int64_t)es && s[1] == -(int64_t)es && es == 2) COPY_REVERSED(uint16_t)
    else if (s[1] == 0) fill_value(p[0], s[0], p[1], es, n); /* a broadcast value */
    else if (es == 2) COPY_WITH(uint16_t)
    else if (es == 4) COPY_WITH(uint32_t)
    else if (es == 8) COPY_WITH(uint64_t)
    else
      for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], es);
    return;
  }
  if (s[0] == (int64_t)es && s[1] == (int64_t)dp_dtype_size(c->from) &&
      dp_cpu_vec_get()->cast(p[0], c->to, p[1], c->from, n))
    return;
  if (s[1] == 0 && n > 1) { /* a broadcast value cast once (a gradient's expanded scalar), then stored n times */
    char one[8];
    copy_row((char *[]){one, p[1]}, (const int64_t[]){(int64_t)es, 0}, 1, vctx);
    fill_value(p[0], s[0], one, es, n);
    return;
  }
  if (c->to == DP_I64 && c->from == DP_U8) {
    for (int64_t i = 0; i < n; i++) *(int64_t *)(p[0] + i * s[0]) = *(uint8_t *)(p[1] + i * s[1]);
    return;
  }
  if (c->to == DP_U8 && c->from == DP_I64) {
    for (int64_t i = 0; i < n; i++) *(uint8_t *)(p[0] + i * s[0]) = (uint8_t) * (int64_t *)(p[1] + i * s[1]);
    return;
  }
  for (int64_t i = 0; i < n; i++) dp_store_d(p[0] + i * s[0], c->to, dp_load_d(p[1] + i * s[1], c->from));
}
#undef COPY_WITH
#undef COPY_REVERSED

int dp_cpu_copy(dp_tensor *dst, const dp_tensor *src) {
  cast_ctx c = {dst->dtype, src->dtype};
  const dp_tensor *ops[2] = {dst, src};
  if (dp_cpu_copy_permuted(dst, src)) return 0; /* a transposed or permuted view: cpu_copy_permute.c */
  dp_cpu_foreach_par(2, ops, copy_row, &c, DP_GRAIN_MEMORY);
  return 0;
}

static void fill_row(char *const *p, const int64_t *s, int64_t n, void *vctx) {
  const dp_tensor *t = ((const dp_tensor **)vctx)[0];
  double v = *((const double **)vctx)[1];
  size_t es = dp_elsize(t);
  char one[8];
  dp_store_d(one, t->dtype, v);
  if (s[0] == 4 && t->dtype == DP_F32) {
    float f = *(float *)one, *o = (float *)p[0];
    for (int64_t i = 0; i < n; i++) o[i] = f;
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], one, es);
}

int dp_cpu_fill(dp_tensor *t, double v) {
  if (v == 0.0 && !signbit(v) && dp_is_contiguous(t)) { /* (-0.0 keeps its sign: the row loop writes it) */
    memset(dp_data(t), 0, (size_t)dp_numel(t) * dp_elsize(t));
    return 0;
  }
  const void *ctx[2] = {t, &v};
  const dp_tensor *ops[1] = {t};
  dp_cpu_foreach(1, ops, fill_row, ctx);
  return 0;
}

int dp_cpu_arange(dp_tensor *out, double start, double step) {
  int64_t n = dp_numel(out);
  char *p = dp_data(out);
  size_t es = dp_elsize(out);
  if (out->dtype == DP_I64) {
    for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = (int64_t)start + i * (int64_t)step;
    return 0;
  }
  if (out->dtype == DP_F32 || out->dtype == DP_F64) {
    /* the same double value rounded, in blocks of 8 that vectorise: the
     * block's first index counted in a double (exact below 2^53) plus the
     * lanes' 0..7, as SSE2 has no int64 -> double conversion to vectorise */
    static const double lane[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t i = 0;
    double di = 0;
    if (out->dtype == DP_F32)
      for (float *o = (float *)p; i + 8 <= n; i += 8, di += 8.0)
        for (int l = 0; l < 8; l++) o[i + l] = (float)(start + (di + lane[l]) * step);
    else
      for (double *o = (double *)p; i + 8 <= n; i += 8, di += 8.0)
        for (int l = 0; l < 8; l++) o[i + l] = start + (di + lane[l]) * step;
    for (; i < n; i++)
      if (out->dtype == DP_F32) ((float *)p)[i] = (float)(start + (double)i * step);
      else ((double *)p)[i] = start + (double)i * step;
    return 0;
  }
  for (int64_t i = 0; i < n; i++) dp_store_d(p + (size_t)i * es, out->dtype, start + (double)i * step);
  return 0;
}

/* ---- float rows of other strides and of 16-bit floats ----
 * A row where some operand is not of unit stride (a broadcast value, a
 * transposed or sliced view, the expanded gradient of a sum), or is
 * bfloat16 / float16 (autocast's activations), still runs the float32
 * vector kernels: CHUNK elements at a time, gathered (and widened) into
 * local buffers and the result scattered (and rounded to nearest even)
 * back when the output is strided or 16-bit. 16-bit floats thus compute in
 * float32 and round once, as PyTorch's CPU kernels do. */
enum { CHUNK = 512 };

static bool vec_float(dp_dtype t) { return t == DP_F32 || t == DP_BF16 || t == DP_F16; }

static const float *f32_chunk(const char *p, int64_t s, dp_dtype t, int64_t i, int64_t m, float *buf) {
  if (t == DP_F32 && s == 4) return (const float *)p + i;
  if (s == 0) {
    /* a broadcast value (a sum's gradient): the row's first chunk filled the buffer whole (every caller keeps
     * one buffer per operand across its chunks and writes its results elsewhere), later ones reuse it */
    if (i > 0) return buf;
    float v = dp_conv_load_f(p, t);
    for (int64_t k = 0; k < m; k++) buf[k] = v;
    return buf;
  }
  if (t != DP_F32 && s == 2 && dp_cpu_vec_get()->cast(buf, DP_F32, p + i * 2, t, m)) return buf;
  for (int64_t k = 0; k < m; k++) buf[k] = dp_conv_load_f(p + (i + k) * s, t);
  return buf;
}

static float *f32_out_chunk(char *p, int64_t s, dp_dtype t, int64_t i, float *buf) {
  return t == DP_F32 && s == 4 ? (float *)p + i : buf;
}

static void f32_scatter(char *p, int64_t s, dp_dtype t, int64_t i, int64_t m, const float *buf) {
  if (t == DP_F32 && s == 4) return;
  if (t != DP_F32 && s == 2 && dp_cpu_vec_get()->cast(p + i * 2, t, buf, DP_F32, m)) return;
  for (int64_t k = 0; k < m; k++) dp_conv_store_f(p + (i + k) * s, t, buf[k]);
}

/* ---- unary: the op table's formulas, one vectorised float32 loop per op ---- */
typedef struct {
  const dp_unary_args *a;
  dp_dtype to, from;
} unary_ctx;

void dp_cpu_unary_f32_(const dp_unary_args *a, float *o, int64_t n) { dp_cpu_vec_get()->unary(a, o, o, n); }

static void unary_row(char *const *p, const int64_t *s, int64_t n, void *vctx) {
  unary_ctx *c = vctx;
  if (c->to == DP_F32 && c->from == DP_F32 && s[0] == 4 && s[1] == 4) {
    dp_cpu_vec_get()->unary(c->a, (float *)p[0], (const float *)p[1], n);
    return;
  }
  if (c->a->op == DP_U_GELU && c->to == DP_BF16 && c->from == DP_BF16 && s[0] == 2 && s[1] == 2 &&
      dp_cpu_gelu_bf16((uint16_t *)p[0], (const uint16_t *)p[1], n))
    return; /* the same bits by table (cpu_gelu_table.c) */
  if (vec_float(c->to) && vec_float(c->from)) {
    float bx[CHUNK], bo[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
      int64_t m = n - i < CHUNK ? n - i : CHUNK;
      const float *x = f32_chunk(p[1], s[1], c->from, i, m, bx);
      dp_cpu_vec_get()->unary(c->a, f32_out_chunk(p[0], s[0], c->to, i, bo), x, m);
      f32_scatter(p[0], s[0], c->to, i, m, bo);
    }
    return;
  }
  if (c->to == DP_I64 && c->from == DP_I64) { /* ops that keep integers: exact beyond 2^53 */
    for (int64_t i = 0; i < n; i++)
      *(int64_t *)(p[0] + i * s[0]) = dp_unary_i64(c->a->op, *(const int64_t *)(p[1] + i * s[1]), &c->a->p);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    dp_store_d(p[0] + i * s[0], c->to, dp_unary_d(c->a->op, dp_load_d(p[1] + i * s[1], c->from), &c->a->p));
}

int dp_cpu_unary(const dp_unary_args *a, dp_tensor *out, const dp_tensor *x) {
  unary_ctx c = {a, out->dtype, x->dtype};
  const dp_tensor *ops[2] = {out, x};
  dp_cpu_foreach_par(2, ops, unary_row, &c, DP_GRAIN_COMPUTE);
  return 0;
}

typedef struct {
  const dp_unary_args *a;
  dp_dtype dt[4];
  bool has_x, has_y;
} ugrad_ctx;

static void ugrad_row(char *const *p, const int64_t *s, int64_t n, void *vctx) {
  ugrad_ctx *c = vctx;
  /* operands: gx, gy, [x], [y] (in that order, absent ones skipped) */
  int kx = c->has_x ? 2 : -1, ky = c->has_y ? (c->has_x ? 3 : 2) : -1;
  bool f32 = true, vf = true, unit = s[0] == 4 && s[1] == 4 && (kx < 0 || s[kx] == 4) && (ky < 0 || s[ky] == 4);
  for (int k = 0; k < 4; k++) f32 = f32 && c->dt[k] == DP_F32, vf = vf && vec_float(c->dt[k]);
  dp_grad_reads reads = dp_unary_ops[c->a->op].grad;
  if (c->a->op == DP_U_GELU && kx == 2 && ky < 0 && c->dt[0] == DP_BF16 && c->dt[1] == DP_BF16 && c->dt[2] == DP_BF16 &&
      s[0] == 2 && s[1] == 2 && s[2] == 2 &&
      dp_cpu_gelu_bf16_backward((uint16_t *)p[0], (const uint16_t *)p[1], (const uint16_t *)p[2], n))
    return; /* the same bits by table (cpu_gelu_table.c) */
  if (vf && (reads != DP_GRAD_X || kx > 0) && (reads != DP_GRAD_Y || ky > 0)) {
    if (unit && f32) {
      dp_cpu_vec_get()->unary_bwd(c->a, (float *)p[0], (const float *)p[1], kx > 0 ? (const float *)p[kx] : NULL,
                                  ky > 0 ? (const float *)p[ky] : NULL, n);
      return;
    }
    float bo[CHUNK], bgy[CHUNK], bx[CHUNK], by[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
      int64_t m = n - i < CHUNK ? n - i : CHUNK;
      const float *gy = f32_chunk(p[1], s[1], c->dt[1], i, m, bgy);
      const float *x = kx > 0 ? f32_chunk(p[kx], s[kx], c->dt[kx], i, m, bx) : NULL;
      const float *y = ky > 0 ? f32_chunk(p[ky], s[ky], c->dt[ky], i, m, by) : NULL;
      dp_cpu_vec_get()->unary_bwd(c->a, f32_out_chunk(p[0], s[0], c->dt[0], i, bo), gy, x, y, m);
      f32_scatter(p[0], s[0], c->dt[0], i, m, bo);
    }
    return;
  }
  if (f32) { /* the same float math (a broadcast gy computes what a contiguous one does) */
    for (int64_t i = 0; i < n; i++) {
      float x = kx > 0 ? *(const float *)(p[kx] + i * s[kx]) : 0.f;
      float y = ky > 0 ? *(const float *)(p[ky] + i * s[ky]) : 0.f;
      *(float *)(p[0] + i * s[0]) = dp_unary_grad_f(c->a->op, *(const float *)(p[1] + i * s[1]), x, y, &c->a->p);
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double x = kx > 0 ? dp_load_d(p[kx] + i * s[kx], c->dt[kx]) : 0.0;
    double y = ky > 0 ? dp_load_d(p[ky] + i * s[ky], c->dt[ky]) : 0.0;
    double gy = dp_load_d(p[1] + i * s[1], c->dt[1]);
    dp_store_d(p[0] + i * s[0], c->dt[0], dp_unary_grad_d(c->a->op, gy, x, y, &c->a->p));
  }
}

int dp_cpu_unary_backward(const dp_unary_args *a, dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x,
                          const dp_tensor *y) {
  ugrad_ctx c = {.a = a, .has_x = x != NULL, .has_y = y != NULL};
  const dp_tensor *ops[4] = {gx, gy, NULL, NULL};
  int k = 2;
  if (x) ops[k++] = x;
  if (y) ops[k++] = y;
  for (int i = 0; i < 4; i++) c.dt[i] = i < k ? ops[i]->dtype : DP_F32;
  dp_cpu_foreach_par(k, ops, ugrad_row, &c, DP_GRAIN_COMPUTE);
  return 0;
}

/* GELU with its derivative (backend.h unary_with_grad): float32 or 16-bit x and out, float32 d */
static void unary_grad_row(char *const *p, const int64_t *s, int64_t n, void *vctx) {
  const unary_ctx *c = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  if (c->from == DP_F32 && s[0] == 4 && s[1] == 4 && s[2] == 4) {
    v->gelu_with_grad((float *)p[0], (float *)p[1], (const float *)p[2], n);
    return;
  }
  float bx[CHUNK], bo[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    int64_t m = n - i < CHUNK ? n - i : CHUNK;
    const float *x = f32_chunk(p[2], s[2], c->from, i, m, bx);
    v->gelu_with_grad(f32_out_chunk(p[0], s[0], c->to, i, bo), (float *)(p[1] + i * s[1]), x, m);
    f32_scatter(p[0], s[0], c->to, i, m, bo);
  }
}

int dp_cpu_unary_with_grad(const dp_unary_args *a, dp_tensor *out, dp_tensor *d, const dp_tensor *x) {
  /* bfloat16 declines: its forward and backward by table (cpu_gelu_table.c) read x, where a saved float32
   * derivative would double the bytes written and read */
  if (a->op != DP_U_GELU || !vec_float(x->dtype) || x->dtype == DP_BF16 || out->dtype != x->dtype ||
      !dp_is_contiguous(x) || !dp_is_contiguous(out) || (d && (d->dtype != DP_F32 || !dp_is_contiguous(d))))
    return 0;
  if (!d) return 1; /* the caller asks before it allocates d */
  unary_ctx c = {a, out->dtype, x->dtype};
  const dp_tensor *ops[3] = {out, d, x};
  dp_cpu_foreach_par(3, ops, unary_grad_row, &c, DP_GRAIN_COMPUTE);
  return 1;
}

/* ---- binary ---- */
typedef struct {
  dp_binary_op op;
  dp_dtype to, a, b;
  double s;
  bool scalar_first;
} binary_ctx;

/* Integer rows, contiguous or one value (stride 0) each, one of them a row: the op's case chosen outside the loop,
 * so each case is a plain loop the compiler vectorises (the per-element switch below took 1.8 ms for a compare of
 * 1M int64 and 2.5 ms an op of 1M uint8 masks, float32 0.06). The ops' integer forms are the op table's
 * (dp_<op>_bin_i64: int64 wraps as two's complement, a uint8 result keeps the low byte). */
#define DP_INT_CASE(ID, name, node, out, ...)                                                                          \
  DP_IF_##out(case DP_B_##ID : if (sa && sb) for (int64_t i = 0; i < n; i++) o[i] =                                  \
                                   (to_t)dp_##name##_bin_i64_d(a[i], b[i]);                                            \
              else if (sa) {                                                                                           \
                int64_t y = b[0];                                                                                      \
                for (int64_t i = 0; i < n; i++) o[i] = (to_t)dp_##name##_bin_i64_d(a[i], y);                           \
              } else {                                                                                                 \
                int64_t x = a[0];                                                                                      \
                for (int64_t i = 0; i < n; i++) o[i] = (to_t)dp_##name##_bin_i64_d(x, b[i]);                           \
              } return true;)
#define DP_INT_ROWS(fn, TA, TO)                                                                                        \
  static bool fn(dp_binary_op op, void *vo, const void *va, bool sa, const void *vb, bool sb, int64_t n) {             \
    typedef TA ta_t;                                                                                                   \
    typedef TO to_t;                                                                                                   \
    to_t *o = vo;                                                                                                      \
    const ta_t *a = va, *b = vb;                                                                                       \
    switch (op) {                                                                                                      \
      DP_BINARY_OPS(DP_INT_CASE)                                                                                       \
    default: return false;                                                                                             \
    }                                                                                                                  \
  }
DP_INT_ROWS(int_rows_i64_i64, int64_t, int64_t)
DP_INT_ROWS(int_rows_i64_u8, int64_t, uint8_t)
DP_INT_ROWS(int_rows_u8_u8, uint8_t, uint8_t)
#undef DP_INT_ROWS
#undef DP_INT_CASE

/* o (to) = a op b for integer a and b of one dtype, rows of one element size or one value; false when this is
 * not such a case (the callers' general loops take it) */
static bool int_rows(dp_binary_op op, dp_dtype to, dp_dtype ab, char *o, int64_t so, const char *a, int64_t sa,
                     const char *b, int64_t sb, int64_t n) {
  size_t ea = dp_dtype_size(ab);
  if (dp_binary_ops[op].out == DP_OUT_FLOAT || so != (int64_t)dp_dtype_size(to) || (sa != 0 && sa != (int64_t)ea) ||
      (sb != 0 && sb != (int64_t)ea) || (sa == 0 && sb == 0))
    return false;
  if (ab == DP_I64 && to == DP_I64) return int_rows_i64_i64(op, o, a, sa != 0, b, sb != 0, n);
  if (ab == DP_I64 && to == DP_U8) return int_rows_i64_u8(op, o, a, sa != 0, b, sb != 0, n);
  if (ab == DP_U8 && to == DP_U8) return int_rows_u8_u8(op, o, a, sa != 0, b, sb != 0, n);
  return false;
}

static void binary_row(char *const *p, const int64_t *s, int64_t n, void *vctx) {
  binary_ctx *c = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  if (c->a == DP_F32 && c->b == DP_F32 && (s[1] == 4 || s[1] == 0) && (s[2] == 4 || s[2] == 0) &&
      (s[1] == 4 || s[2] == 4)) {
    const float *a = (const float *)p[1], *b = (const float *)p[2];
    if (c->to == DP_F32 && s[0] == 4) {
      if (s[2] == 0) v->binary_value(c->op, (float *)p[0], a, *b, false, n);
      else if (s[1] == 0) v->binary_value(c->op, (float *)p[0], b, *a, true, n);
      else v->binary(c->op, (float *)p[0], a, b, n);
      return;
    }
    if (c->to == DP_U8 && s[0] == 1 && dp_binary_is_compare(c->op)) {
      if (s[2] == 0) v->compare_value(c->op, (uint8_t *)p[0], a, *b, false, n);
      else if (s[1] == 0) v->compare_value(c->op, (uint8_t *)p[0], b, *a, true, n);
      else v->compare(c->op, (uint8_t *)p[0], a, b, n);
      return;
    }
  }
  if (c->to == DP_U8 && s[0] == 1 && dp_binary_is_compare(c->op) && vec_float(c->a) && vec_float(c->b)) {
    float ba[CHUNK], bb[CHUNK]; /* widening is exact: the compares are the double path's */
    for (int64_t i = 0; i < n; i += CHUNK) {
      int64_t m = n - i < CHUNK ? n - i : CHUNK;
      v->compare(c->op, (uint8_t *)p[0] + i, f32_chunk(p[1], s[1], c->a, i, m, ba),
                 f32_chunk(p[2], s[2], c->b, i, m, bb), m);
    }
    return;
  }
  if (vec_float(c->to) && vec_float(c->a) && vec_float(c->b)) {
    float ba[CHUNK], bb[CHUNK], bo[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
      int64_t m = n - i < CHUNK ? n - i : CHUNK;
      const float *a = f32_chunk(p[1], s[1], c->a, i, m, ba), *b = f32_chunk(p[2], s[2], c->b, i, m, bb);
      v->binary(c->op, f32_out_chunk(p[0], s[0], c->to, i, bo), a, b, m);
      f32_scatter(p[0], s[0], c->to, i, m, bo);
    }
    return;
  }
  if (c->a == DP_F32 && c->b == DP_F32 && (c->to == DP_F32 || (c->to == DP_U8 && dp_binary_is_compare(c->op)))) {
    for (int64_t i = 0; i < n; i++) {
      float r = dp_binary_f(c->op, *(const float *)(p[1] + i * s[1]), *(const float *)(p[2] + i * s[2]));
      if (c->to == DP_F32) *(float *)(p[0] + i * s[0]) = r;
      else *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)r;
    }
    return;
  }
  if (c->a == c->b && int_rows(c->op, c->to, c->a, p[0], s[0], p[1], s[1], p[2], s[2], n)) return;
  if (c->to == DP_I64 && c->a == DP_I64 && c->b == DP_I64) {
    for (int64_t i = 0; i < n; i++)
      *(int64_t *)(p[0] + i * s[0]) =
          dp_binary_i64(c->op, *(int64_t *)(p[1] + i * s[1]), *(int64_t *)(p[2] + i * s[2]));
    return;
  }
  /* other integer mixes (uint8, and comparisons to uint8): exact in int64,
   * wrapping into uint8 as uint8 arithmetic would (5^194 is 25 there) */
  if ((c->to == DP_I64 || c->to == DP_U8) && (c->a == DP_I64 || c->a == DP_U8) && (c->b == DP_I64 || c->b == DP_U8) &&
      dp_binary_ops[c->op].out != DP_OUT_FLOAT) {
    for (int64_t i = 0; i < n; i++) {
      const char *pa = p[1] + i * s[1], *pb = p[2] + i * s[2];
      int64_t av = c->a == DP_U8 ? *(const uint8_t *)pa : *(const int64_t *)pa;
      int64_t bv = c->b == DP_U8 ? *(const uint8_t *)pb : *(const int64_t *)pb;
      int64_t r = dp_binary_i64(c->op, av, bv);
      if (c->to == DP_U8) *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)r;
      else *(int64_t *)(p[0] + i * s[0]) = r;
    }
    return;
  }
  for (int64_t i = 0; i < n; i++)
    dp_store_d(p[0] + i * s[0], c->to,
               dp_binary_d(c->op, dp_load_d(p[1] + i * s[1], c->a), dp_load_d(p[2] + i * s[2], c->b)));
}

int dp_cpu_binary(dp_binary_op op, dp_tensor *out, const dp_tensor *a, const dp_tensor *b) {
  binary_ctx c = {op, out->dtype, a->dtype, b->dtype, 0, false};
  const dp_tensor *ops[3] = {out, a, b};
  dp_cpu_foreach_par(3, ops, binary_row, &c, DP_GRAIN_MEMORY);
  return 0;
}

static void binary_scalar_row(char *const *p, const int64_t *s, int64_t n, void *vctx) {
  binary_ctx *c = vctx;
  if (c->to == DP_F32 && c->a == DP_F32 && s[0] == 4 && s[1] == 4 && dp_binary_ops[c->op].scalar_f32) {
    dp_cpu_vec_get()->binary_value(c->op, (float *)p[0], (const float *)p[1], (float)c->s, c->scalar_first, n);
    return;
  }
  /* x > 0, pred == label: the float compare against the float32 scalar
   * (the op layer rounded it), as the scalar loop below */
  if (c->to == DP_U8 && c->a == DP_F32 && s[0] == 1 && s[1] == 4 && dp_binary_is_compare(c->op)) {
    dp_cpu_vec_get()->compare_value(c->op, (uint8_t *)p[0], (const float *)p[1], (float)c->s, c->scalar_first, n);
    return;
  }
  /* a 16-bit float against the scalar (in its dtype, so a float32 exactly) */
  if (c->to == DP_U8 && vec_float(c->a) && s[0] == 1 && dp_binary_is_compare(c->op) &&
      ((double)(float)c->s == c->s || c->s != c->s)) {
    float ba[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
      int64_t m = n - i < CHUNK ? n - i : CHUNK;
      dp_cpu_vec_get()->compare_value(c->op, (uint8_t *)p[0] + i, f32_chunk(p[1], s[1], c->a, i, m, ba), (float)c->s,
                                      c->scalar_first, m);
    }
    return;
  }
  if (vec_float(c->to) && (c->a == DP_BF16 || c->a == DP_F16) && dp_binary_ops[c->op].scalar_f32) {
    float ba[CHUNK], bo[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
      int64_t m = n - i < CHUNK ? n - i : CHUNK;
      const float *a = f32_chunk(p[1], s[1], c->a, i, m, ba);
      dp_cpu_vec_get()->binary_value(c->op, f32_out_chunk(p[0], s[0], c->to, i, bo), a, (float)c->s, c->scalar_first,
                                     m);
      f32_scatter(p[0], s[0], c->to, i, m, bo);
    }
    return;
  }
  if (c->op == DP_B_POW && !c->scalar_first && c->to == DP_F32 && c->a == DP_F32 && s[0] == 4 && s[1] == 4 &&
      isfinite((float)c->s)) { /* x^y in double lanes (5.7 ms a million with powf's calls, PyTorch's 4.3) */
    dp_cpu_vec_get()->pow_value((float *)p[0], (const float *)p[1], (float)c->s, n);
    return;
  }
  if (c->a == DP_F32 && (c->to == DP_F32 || (c->to == DP_U8 && dp_binary_is_compare(c->op)))) {
    /* float math with the float scalar (the op layer rounded it to float32) */
    float v = (float)c->s;
    for (int64_t i = 0; i < n; i++) {
      float a = *(const float *)(p[1] + i * s[1]);
      float r = c->scalar_first ? dp_binary_f(c->op, v, a) : dp_binary_f(c->op, a, v);
      if (c->to == DP_F32) *(float *)(p[0] + i * s[0]) = r;
      else *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)r;
    }
    return;
  }
  /* an int64 tensor and a whole scalar an int64 holds exactly: the integer rows (exact past 2^53, as PyTorch's) */
  if (c->a == DP_I64 && c->s == (double)(int64_t)c->s && fabs(c->s) <= 9007199254740992.0) {
    int64_t v = (int64_t)c->s;
    const char *pv = (const char *)&v;
    if (c->scalar_first ? int_rows(c->op, c->to, DP_I64, p[0], s[0], pv, 0, p[1], s[1], n)
                        : int_rows(c->op, c->to, DP_I64, p[0], s[0], p[1], s[1], pv, 0, n))
      return;
  }
  for (int64_t i = 0; i < n; i++) {
    double a = dp_load_d(p[1] + i * s[1], c->a);
    double r = c->scalar_first ? dp_binary_d(c->op, c->s, a) : dp_binary_d(c->op, a, c->s);
    dp_store_d(p[0] + i * s[0], c->to, r);
  }
}

int dp_cpu_binary_scalar(dp_binary_op op, dp_tensor *out, const dp_tensor *a, double s, bool scalar_first) {
  binary_ctx c = {op, out->dtype, a->dtype, a->dtype, s, scalar_first};
  const dp_tensor *ops[2] = {out, a};
  dp_cpu_foreach_par(2, ops, binary_scalar_row, &c, DP_GRAIN_MEMORY);
  return 0;
}
