/* CPU kernels of max_pool2d(relu(batch_norm(x))) fused (float32, planes of
 * inner > 1; dp_bn_args.pool): the normalised, rectified planes never go to
 * memory.
 *
 * Forward: per channel, each plane of relu(batch_norm(x)) is pooled. The
 * CNN's 2x2 / stride 2 window has a kernel of its own that makes the
 * normalised values in registers (bn_relu_max_pool2x2,
 * cpu_vec_pool2x2_t.h); other windows make the plane in a scratch row
 * (dp_cpu_bn_relu_row: the fused batch norm + ReLU's own calls) and pool it
 * with the max-pool kernel (the same call max_pool2d makes). Either way the
 * output has the three ops' bits.
 *
 * Backward: nothing but x and the statistics is saved (no pooled indices,
 * no normalised output). Per channel, pass 1 remakes each plane as the
 * forward did and finds the winners again (the same inputs: the same
 * winners), routes the pooled gradient to them (max_pool2d's backward: a
 * scatter into a zeroed row), masks it by the ReLU (its backward on that
 * output, as the fused batch norm + ReLU does), and adds the row's sums
 * (dot_dev, as the batch norm's reduce); the masked row is parked in gx.
 * The 2x2 window does the remaking, routing and masking in registers
 * (bn_relu_max_pool2x2_bwd), straight into gx. The channel's sums are
 * stored rounded to float32 as the reduce stores them and read back as the
 * elementwise backward reads them; pass 2 turns each parked row into gx in
 * place with the batch-norm gradient kernel. A thread owns whole channels,
 * so a channel's planes are still in cache for pass 2 (64 planes of 28x28:
 * 200 KB). Every value is the unfused ops' bit for bit
 * (tests/spec/nn_bn_relu_pool_fused_spec.lua). SyncBatchNorm runs the two
 * passes apart (dp_bn_args.phase), its all-reduce of the sums between them. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_norm_rows.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/op_table.h"

#define POOL_GEOM(g) (g)->h, (g)->w, (g)->oh, (g)->ow, (g)->kh, (g)->kw, (g)->sh, (g)->sw, (g)->ph, (g)->pw

typedef struct {
  const dp_bn_args *a;
  float *y; /* forward: the pooled output; backward: gx */
  float *sum_dy, *sum_dy_xhat;
  atomic_bool failed; /* a worker could not get its scratch rows */
} bnp_ctx;

static int64_t bnp_grain(const dp_bn_args *a) {
  return DP_GRAIN_MEMORY / (a->n * a->inner > 0 ? a->n * a->inner : 1) + 1;
}

/* One worker's scratch: L pool positions, then two rows of inner floats
 * and L pooled values (NULL and k->failed set when out of memory). */
typedef struct {
  int64_t *idx;
  float *row, *grow, *pooled;
} bnp_scratch;

static bool scratch_get(bnp_ctx *k, bnp_scratch *s) {
  int64_t inner = k->a->inner, L = k->a->pool->oh * k->a->pool->ow;
  s->idx = malloc(sizeof(int64_t) * (size_t)L + sizeof(float) * (size_t)(2 * inner + L));
  if (!s->idx) {
    atomic_store(&k->failed, true);
    return false;
  }
  s->row = (float *)(s->idx + L), s->grow = s->row + inner, s->pooled = s->grow + inner;
  return true;
}

static double at_d(const dp_tensor *t, int64_t i, double dflt) {
  return t ? dp_load_d((const char *)dp_data(t) + (size_t)i * dp_elsize(t), t->dtype) : dflt;
}

/* The CNN's window (2x2, stride 2, no padding, floor mode): one kernel per
 * plane makes the normalised values in registers and pools them
 * (cpu_vec_pool2x2_t.h); other windows go through a row and the pool
 * kernel. */
static bool window_2x2(const dp_window2d *g) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 && g->oh == g->h / 2 &&
         g->ow == g->w / 2 && g->oh > 0 && g->ow > 0;
}

static void fwd_channels(void *vctx, int64_t lo, int64_t hi) {
  bnp_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const dp_window2d *g = a->pool;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  int64_t L = g->oh * g->ow;
  const float *x = dp_data(a->x);
  bool w2 = window_2x2(g);
  bnp_scratch s = {0};
  if (!w2 && !scratch_get(k, &s)) return;
  for (int64_t ch = lo; ch < hi; ch++) {
    dp_bn_affine_k f = dp_cpu_bn_affine_of(a, ch);
    for (int64_t i = 0; i < a->n; i++) {
      int64_t pl = i * a->c + ch;
      if (i + 1 < a->n) dp_cpu_prefetch_plane(x + (pl + a->c) * a->inner, a->inner);
      if (w2) {
        v->bn_relu_max_pool2x2(k->y + pl * L, x + pl * a->inner, g->h, g->w, (float)f.mean, (float)f.scale,
                               (float)f.bias);
        continue;
      }
      dp_cpu_bn_relu_row(s.row, x + pl * a->inner, a->inner, &f);
      v->max_pool_plane(k->y + pl * L, s.idx, s.row, POOL_GEOM(g));
    }
  }
  free(s.idx);
}

int dp_cpu_bn_relu_pool_forward(dp_tensor *y, const dp_bn_args *a) {
  if (a->x->dtype != DP_F32 || y->dtype != DP_F32 || !a->relu || a->inner < 2)
    return dp_error("batch_norm + relu + max_pool2d: the fused kernel takes float32 planes, got %s",
                    dp_dtype_name(a->x->dtype));
  bnp_ctx k = {.a = a, .y = dp_data(y)};
  atomic_init(&k.failed, false);
  dp_cpu_parallel_for(a->c, bnp_grain(a), 1, fwd_channels, &k);
  if (atomic_load(&k.failed))
    return dp_error("batch_norm + relu + max_pool2d: out of memory for a row of %lld values", (long long)a->inner);
  return 0;
}

static void bwd_channels(void *vctx, int64_t lo, int64_t hi) {
  bnp_ctx *k = vctx;
  const dp_bn_args *a = k->a;
  const dp_window2d *g = a->pool;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  int64_t L = g->oh * g->ow, inner = a->inner;
  const float *x = dp_data(a->x), *gy = a->gy ? dp_data(a->gy) : NULL; /* phase 2 reads no gy */
  float *gx = k->y;
  dp_unary_args relu = dp_unary_args_of(DP_U_RELU);
  bool w2 = window_2x2(g);
  bnp_scratch s = {0};
  if (!w2 && !scratch_get(k, &s)) return;
  for (int64_t ch = lo; ch < hi; ch++) {
    dp_bn_affine_k f = dp_cpu_bn_affine_of(a, ch);
    double mu = at_d(a->mean, ch, 0), invstd = at_d(a->invstd, ch, 1);
    double sum = 0, sum_x = 0;
    for (int64_t i = 0; i < a->n && a->phase != 2; i++) { /* pass 1: the masked rows and the sums */
      int64_t pl = i * a->c + ch;
      const float *xr = x + pl * inner, *gyr = gy + pl * L;
      if (i + 1 < a->n) {
        dp_cpu_prefetch_plane(xr + a->c * inner, inner);
        dp_cpu_prefetch_plane(gyr + a->c * L, L);
      }
      double sg;
      if (w2) { /* the ReLU's input gradient straight into its place in gx */
        v->bn_relu_max_pool2x2_bwd(gx + pl * inner, xr, gyr, g->h, g->w, (float)f.mean, (float)f.scale, (float)f.bias);
        sum_x += v->dot_dev(gx + pl * inner, xr, inner, mu, &sg);
        sum += sg;
        continue;
      }
      dp_cpu_bn_relu_row(s.row, xr, inner, &f);
      v->max_pool_plane(s.pooled, s.idx, s.row, POOL_GEOM(g));
      memset(s.grow, 0, sizeof(float) * (size_t)inner);
      for (int64_t o = 0; o < L; o++) s.grow[s.idx[o]] += gyr[o];
      v->unary_bwd(&relu, s.row, s.grow, NULL, s.row, inner); /* row: the ReLU's input gradient */
      sum_x += v->dot_dev(s.row, xr, inner, mu, &sg);
      sum += sg;
      memcpy(gx + pl * inner, s.row, sizeof(float) * (size_t)inner);
    }
    /* as the reduce stores them (float32) and the elementwise pass reads them; phase 2 reads the global ones */
    float sd = (float)sum, sdx = (float)(sum_x * invstd);
    if (a->phase == 2) sd = (float)at_d(a->sum_dy, ch, 0), sdx = (float)at_d(a->sum_dy_xhat, ch, 0);
    else k->sum_dy[ch] = sd, k->sum_dy_xhat[ch] = sdx;
    if (a->phase == 1) continue;
    dp_bn_grad_k c = dp_bn_grad_coefs(at_d(a->w, ch, 1.0), invstd, mu, a->eval_stats ? 0.0 : (double)sd / a->count,
                                      a->eval_stats ? 0.0 : (double)sdx / a->count);
    for (int64_t i = 0; i < a->n; i++) { /* pass 2: gx from the parked rows */
      float *o = gx + (i * a->c + ch) * inner;
      v->bn_grad(o, o, x + (i * a->c + ch) * inner, inner, c.gy, c.x, c.c);
    }
  }
  free(s.idx);
}

int dp_cpu_bn_relu_pool_backward(dp_tensor *gx, dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_bn_args *a) {
  bool sums_out = a->phase != 2, sums_in = a->phase == 2;
  if (a->x->dtype != DP_F32 || gx->dtype != DP_F32 || (a->phase != 2 && a->gy->dtype != DP_F32) ||
      (sums_out && (!sum_dy || !sum_dy_xhat || sum_dy->dtype != DP_F32 || sum_dy_xhat->dtype != DP_F32)) ||
      (sums_in && (!a->sum_dy || !a->sum_dy_xhat || a->sum_dy->dtype != DP_F32 || a->sum_dy_xhat->dtype != DP_F32 ||
                   !(a->count > 0))) ||
      a->phase < 0 || a->phase > 2 || !a->pool || a->inner < 2)
    return dp_error("batch_norm + relu + max_pool2d backward: the fused kernel takes float32 planes, got %s",
                    dp_dtype_name(a->x->dtype));
  bnp_ctx k = {.a = a,
               .y = dp_data(gx),
               .sum_dy = sums_out ? dp_data(sum_dy) : NULL,
               .sum_dy_xhat = sums_out ? dp_data(sum_dy_xhat) : NULL};
  atomic_init(&k.failed, false);
  dp_cpu_parallel_for(a->c, bnp_grain(a), 1, bwd_channels, &k);
  if (atomic_load(&k.failed))
    return dp_error("batch_norm + relu + max_pool2d backward: out of memory for a row of %lld values",
                    (long long)a->inner);
  return 0;
}
