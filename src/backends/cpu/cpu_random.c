/* CPU random draws: uniform / normal fills and dropout, from Philox
 * (ops/philox.h: the numbers the CUDA kernels draw). float32 runs the
 * per-ISA vector kernels (cpu_vec.h) split over the threads, bfloat16
 * dropout the same kernel on widened chunks; every other dtype draws each
 * element through the double reference. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "ops/philox.h"
#include "tensor/dtype_conv.h"

enum { DROP_CHUNK = 512 };

/* Philox draws in ranges: element i uses counter offset + i wherever it
 * runs, so the split does not change the numbers */
typedef struct {
  void *o;       /* float32, or bfloat16 for dropout_bf16_range */
  const void *x; /* the same dtype as o */
  float a, s;
  uint64_t seed, offset;
  double mean, std; /* normal_range */
} philox_ctx;

static void uniform_range(void *vctx, int64_t lo, int64_t hi) {
  philox_ctx *c = vctx;
  dp_cpu_vec_get()->uniform((float *)c->o + lo, hi - lo, c->a, c->s, c->seed, c->offset + (uint64_t)lo);
}

static void normal_range(void *vctx, int64_t lo, int64_t hi) {
  philox_ctx *c = vctx;
  dp_cpu_vec_get()->normal((float *)c->o + lo, hi - lo, c->mean, c->std, c->seed, c->offset + (uint64_t)lo);
}

static void dropout_range(void *vctx, int64_t lo, int64_t hi) {
  philox_ctx *c = vctx;
  dp_cpu_vec_get()->dropout((float *)c->o + lo, (const float *)c->x + lo, hi - lo, c->a, c->s, c->seed,
                            c->offset + (uint64_t)lo);
}

int dp_cpu_rand(dp_tensor *out, dp_rand_kind kind, uint64_t seed, uint64_t offset, double a, double b) {
  int64_t n = dp_numel(out);
  char *p = dp_data(out);
  size_t es = dp_elsize(out);
  if (kind == DP_RAND_UNIFORM && out->dtype == DP_F32) {
    philox_ctx c = {.o = (float *)p, .a = (float)a, .s = (float)(b - a), .seed = seed, .offset = offset};
    dp_cpu_parallel_for(n, DP_GRAIN_COMPUTE, 16, uniform_range, &c);
    return 0;
  }
  if (kind == DP_RAND_NORMAL && out->dtype == DP_F32) {
    philox_ctx c = {.o = (float *)p, .seed = seed, .offset = offset, .mean = a, .std = b};
    dp_cpu_parallel_for(n, DP_GRAIN_COMPUTE, 16, normal_range, &c);
    return 0;
  }
  for (int64_t i = 0; i < n; i++) {
    double v = kind == DP_RAND_UNIFORM ? a + (b - a) * dp_philox_uniform_d(seed, offset + (uint64_t)i)
                                       : a + b * dp_philox_normal_d(seed, offset + (uint64_t)i);
    dp_store_d(p + (size_t)i * es, out->dtype, v);
  }
  return 0;
}

/* ---- dropout: out = x * keep / (1-p), keep from Philox (recomputed in
 * backward with the same seed/offset) ---- */

/* bfloat16 (autocast's activations): the float32 kernel on DROP_CHUNK values at
 * a time widened, its products rounded once more to bfloat16 (the same
 * kept elements as float32's; a value within a rounding of x / (1 - p)) */
static void dropout_bf16_range(void *vctx, int64_t lo, int64_t hi) {
  const philox_ctx *c = vctx;
  const uint16_t *x = c->x;
  uint16_t *o = c->o;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  float bx[DROP_CHUNK], bo[DROP_CHUNK];
  for (int64_t i = lo; i < hi; i += DROP_CHUNK) {
    int64_t m = hi - i < DROP_CHUNK ? hi - i : DROP_CHUNK;
    v->cast(bx, DP_F32, x + i, DP_BF16, m);
    v->dropout(bo, bx, m, c->a, c->s, c->seed, c->offset + (uint64_t)i);
    v->cast(o + i, DP_BF16, bo, DP_F32, m);
  }
}

int dp_cpu_dropout(dp_tensor *out, const dp_tensor *x, double p, uint64_t seed, uint64_t offset) {
  int64_t n = dp_numel(out);
  philox_ctx c = {
      .o = dp_data(out), .x = dp_data(x), .a = (float)p, .s = (float)(1.0 / (1.0 - p)), .seed = seed, .offset = offset};
  if (out->dtype == DP_BF16 && x->dtype == DP_BF16) {
    dp_cpu_parallel_for(n, DP_GRAIN_COMPUTE, 16, dropout_bf16_range, &c);
    return 0;
  }
  if (out->dtype == DP_F32) {
    dp_cpu_parallel_for(n, DP_GRAIN_COMPUTE, 16, dropout_range, &c);
    return 0;
  }
  char *o = dp_data(out);
  const char *xi = dp_data(x);
  size_t es = dp_elsize(out);
  double scale = 1.0 / (1.0 - p);
  for (int64_t i = 0; i < n; i++) {
    bool keep = dp_philox_uniform_f(seed, offset + (uint64_t)i) >= (float)p;
    dp_store_d(o + (size_t)i * es, out->dtype, keep ? dp_load_d(xi + (size_t)i * es, x->dtype) * scale : 0.0);
  }
  return 0;
}
