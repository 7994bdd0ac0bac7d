/* Optimizer update loops: one pass over parameter, gradient and state, the
 * per-element math from scalar_math.h (shared with the CUDA kernels);
 * float32 in the per-ISA vector kernels (cpu_vec.h), split over threads. */
#include <math.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/scalar_math.h"

static int check_float(const dp_tensor *p) {
  if (p->dtype != DP_F32 && p->dtype != DP_F64)
    return dp_error("optimizer: parameters must be float32 or float64 on the cpu, got %s", dp_dtype_name(p->dtype));
  return 0;
}

typedef struct {
  float *p, *buf, *m, *v, *vmax;
  const float *g;
  dp_vec_sgd sgd;
  const dp_adam_k *adam;
  float scale; /* unscale */
  int nbad;    /* unscale: parts that met inf/NaN (atomic) */
} step_ctx;

static void sgd_range(void *vctx, int64_t lo, int64_t hi) {
  step_ctx *k = vctx;
  dp_cpu_vec_get()->sgd(k->p + lo, k->g + lo, k->buf ? k->buf + lo : NULL, hi - lo, &k->sgd);
}
static void adam_range(void *vctx, int64_t lo, int64_t hi) {
  step_ctx *k = vctx;
  dp_cpu_vec_get()->adam(k->p + lo, k->g + lo, k->m + lo, k->v + lo, k->vmax ? k->vmax + lo : NULL, hi - lo, k->adam);
}
static void unscale_range(void *vctx, int64_t lo, int64_t hi) {
  step_ctx *k = vctx;
  if (dp_cpu_vec_get()->unscale(k->p + lo, hi - lo, k->scale)) __atomic_fetch_add(&k->nbad, 1, __ATOMIC_RELAXED);
}

int dp_cpu_sgd_step(dp_tensor *p, const dp_tensor *g, dp_tensor *buf, const dp_sgd_args *a) {
  double lr = a->lr, momentum = a->momentum, dampening = a->dampening, weight_decay = a->weight_decay;
  bool nesterov = a->nesterov, first_step = a->first_step;
  if (check_float(p)) return -1;
  int64_t n = dp_numel(p);
  if (p->dtype == DP_F32) {
    step_ctx k = {.p = dp_data(p),
                  .buf = buf ? dp_data(buf) : NULL,
                  .g = dp_data(g),
                  .sgd = {lr, momentum, dampening, weight_decay, nesterov, first_step}};
    dp_cpu_parallel_for(n, DP_GRAIN_MEMORY, 16, sgd_range, &k);
    return 0;
  }
  double *pp = dp_data(p), *bp = buf ? dp_data(buf) : NULL;
  const double *gp = dp_data(g);
  double dummy = 0;
  for (int64_t i = 0; i < n; i++)
    dp_sgd_update_d(&pp[i], gp[i], bp ? &bp[i] : &dummy, lr, bp ? momentum : 0.0, dampening, weight_decay, nesterov,
                    first_step);
  return 0;
}

int dp_cpu_adam_step(dp_tensor *p, const dp_tensor *g, dp_tensor *m, dp_tensor *v, const dp_adam_args *a) {
  if (check_float(p)) return -1;
  int64_t n = dp_numel(p);
  dp_adam_k k = dp_adam_coefs(a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->decoupled, a->step);
  void *vmax = a->max_exp_avg_sq ? dp_data(a->max_exp_avg_sq) : NULL;
  if (p->dtype == DP_F32) {
    step_ctx sk = {.p = dp_data(p), .m = dp_data(m), .v = dp_data(v), .vmax = vmax, .g = dp_data(g), .adam = &k};
    dp_cpu_parallel_for(n, DP_GRAIN_MEMORY, 16, adam_range, &sk);
    return 0;
  }
  double *pp = dp_data(p), *mp = dp_data(m), *vp = dp_data(v), *xp = vmax;
  const double *gp = dp_data(g);
  for (int64_t i = 0; i < n; i++) dp_adam_update_d(&pp[i], gp[i], &mp[i], &vp[i], xp ? &xp[i] : NULL, &k);
  return 0;
}

int dp_cpu_unscale(dp_tensor *g, double inv_scale, int *found_inf) {
  int64_t n = dp_numel(g);
  if (g->dtype == DP_F32) {
    step_ctx k = {.p = dp_data(g), .scale = (float)inv_scale};
    dp_cpu_parallel_for(n, DP_GRAIN_MEMORY, 16, unscale_range, &k);
    if (k.nbad) *found_inf = 1;
    return 0;
  }
  char *gp = dp_data(g);
  size_t es = dp_elsize(g);
  for (int64_t i = 0; i < n; i++) {
    double v = dp_load_d(gp + (size_t)i * es, g->dtype) * inv_scale;
    if (!isfinite(v)) *found_inf = 1;
    dp_store_d(gp + (size_t)i * es, g->dtype, v);
  }
  return 0;
}
