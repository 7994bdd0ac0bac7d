/* CPU update loops of RMSprop, Adadelta and Adagrad (formulas in ops/model_math.h,
 * shared with the CUDA kernels) and the one-pass sum of |g|^p over a list
 * of gradients behind clip_grad_norm_. */
#include <math.h>

#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/model_math.h"

static int check_float(const char *who, const dp_tensor *p) {
  if (p->dtype != DP_F32 && p->dtype != DP_F64)
    return dp_error("%s: parameters must be float32 or float64 on the cpu, got %s", who, dp_dtype_name(p->dtype));
  return 0;
}

int dp_cpu_rmsprop_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *gavg, dp_tensor *buf,
                        const dp_rmsprop_args *a) {
  if (check_float("RMSprop", p)) return -1;
  int64_t n = dp_numel(p);
  if (p->dtype == DP_F32) {
    float *pp = dp_data(p), *sp = dp_data(sq), *ga = gavg ? dp_data(gavg) : NULL, *bp = buf ? dp_data(buf) : NULL;
    const float *gp = dp_data(g);
    for (int64_t i = 0; i < n; i++)
      dp_rmsprop_update_f(&pp[i], gp[i], &sp[i], ga ? &ga[i] : NULL, bp ? &bp[i] : NULL, (float)a->lr, (float)a->alpha,
                          (float)a->eps, (float)a->weight_decay, (float)a->momentum);
    return 0;
  }
  double *pp = dp_data(p), *sp = dp_data(sq), *ga = gavg ? dp_data(gavg) : NULL, *bp = buf ? dp_data(buf) : NULL;
  const double *gp = dp_data(g);
  for (int64_t i = 0; i < n; i++)
    dp_rmsprop_update_d(&pp[i], gp[i], &sp[i], ga ? &ga[i] : NULL, bp ? &bp[i] : NULL, a->lr, a->alpha, a->eps,
                        a->weight_decay, a->momentum);
  return 0;
}

int dp_cpu_adagrad_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sum, const dp_adagrad_args *a) {
  if (check_float("Adagrad", p)) return -1;
  int64_t n = dp_numel(p);
  if (p->dtype == DP_F32) {
    float *pp = dp_data(p), *sp = dp_data(sum);
    const float *gp = dp_data(g);
    for (int64_t i = 0; i < n; i++)
      dp_adagrad_update_f(&pp[i], gp[i], &sp[i], (float)a->clr, (float)a->eps, (float)a->weight_decay);
    return 0;
  }
  double *pp = dp_data(p), *sp = dp_data(sum);
  const double *gp = dp_data(g);
  for (int64_t i = 0; i < n; i++) dp_adagrad_update_d(&pp[i], gp[i], &sp[i], a->clr, a->eps, a->weight_decay);
  return 0;
}

int dp_cpu_adadelta_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *acc, const dp_adadelta_args *a) {
  if (check_float("Adadelta", p)) return -1;
  int64_t n = dp_numel(p);
  if (p->dtype == DP_F32) {
    float *pp = dp_data(p), *sp = dp_data(sq), *ap = dp_data(acc);
    const float *gp = dp_data(g);
    const float lr = (float)a->lr, rho = (float)a->rho, eps = (float)a->eps, wd = (float)a->weight_decay;
    for (int64_t i = 0; i < n; i++) dp_adadelta_update_f(&pp[i], gp[i], &sp[i], &ap[i], lr, rho, eps, wd);
    return 0;
  }
  double *pp = dp_data(p), *sp = dp_data(sq), *ap = dp_data(acc);
  const double *gp = dp_data(g);
  for (int64_t i = 0; i < n; i++)
    dp_adadelta_update_d(&pp[i], gp[i], &sp[i], &ap[i], a->lr, a->rho, a->eps, a->weight_decay);
  return 0;
}

/* eight lanes so the float32 sum of squares vectorises; NaN propagates
 * through the sums, and through the max by the explicit test */
int dp_cpu_pow_sum_list(dp_tensor *out, const dp_tensor *const *gs, int n, double p) {
  double total = 0;
  bool inf = isinf(p);
  for (int t = 0; t < n; t++) {
    const dp_tensor *g = gs[t];
    int64_t m = dp_numel(g);
    if (g->dtype == DP_F32 && p == 2.0) { /* the vector kernels' double sum of squares (deviations from 0) */
      total += dp_cpu_vec_get()->sq_dev(dp_data(g), m, 0.0);
      continue;
    }
    const char *x = dp_data(g);
    size_t es = dp_elsize(g);
    for (int64_t i = 0; i < m; i++) {
      double v = fabs(dp_load_d(x + (size_t)i * es, g->dtype));
      if (inf) total = v != v ? v : v > total ? v : total; /* a NaN total stays: NaN > x is false */
      else total += p == 1.0 ? v : p == 2.0 ? v * v : pow(v, p);
    }
  }
  *(double *)dp_data(out) = total;
  return 0;
}
