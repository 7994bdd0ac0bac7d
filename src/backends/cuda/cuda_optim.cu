/* Fused optimizer updates (one pass over parameter, gradient and state),
 * gradient unscaling for loss scaling, and the beta-scaling GEMMs need when
 * k == 0. Per-element math from scalar_math.h, as on the CPU. */
#include "backends/cuda/cuda_kernels.cuh"

__global__ void k_sgd_f32(float *p, const float *g, float *buf, int64_t n, float lr, float mu, float damp, float wd,
                          int nesterov, int first) {
  DP_CU_LOOP(i, n) {
    float dummy = 0.f;
    dp_sgd_update_f(&p[i], g[i], buf ? &buf[i] : &dummy, lr, buf ? mu : 0.f, damp, wd, nesterov, first);
  }
}
__global__ void k_sgd_f64(double *p, const double *g, double *buf, int64_t n, double lr, double mu, double damp,
                          double wd, int nesterov, int first) {
  DP_CU_LOOP(i, n) {
    double dummy = 0.0;
    dp_sgd_update_d(&p[i], g[i], buf ? &buf[i] : &dummy, lr, buf ? mu : 0.0, damp, wd, nesterov, first);
  }
}

static int check_dtype(dp_dtype dt) {
  if (dt != DP_F32 && dt != DP_F64)
    return dp_cu_error("optimizer: parameters must be float32 or float64 on cuda (keep float32 master weights "
                       "and use autocast for bfloat16), got %s",
                       dp_dtype_is_float(dt) ? dp_dtype_name(dt) : "an integer dtype");
  return 0;
}

int dp_cu_sgd_step(dp_tensor *p_t, const dp_tensor *g_t, dp_tensor *buf_t, const dp_sgd_args *a) {
  DP_CU_ENTER(c, p_t);
  void *p = dp_cu_ptr(p_t), *buf = buf_t ? dp_cu_ptr(buf_t) : NULL;
  const void *g = dp_cu_ptr(g_t);
  dp_dtype dt = p_t->dtype;
  int64_t n = dp_cu_numel(p_t);
  double lr = a->lr, momentum = a->momentum, dampening = a->dampening, weight_decay = a->weight_decay;
  bool nesterov = a->nesterov, first_step = a->first_step;
  if (check_dtype(dt)) return -1;
  if (n == 0) return 0;
  unsigned blocks = dp_cu_blocks(c, n, DP_CU_THREADS);
  if (dt == DP_F32)
    k_sgd_f32<<<blocks, DP_CU_THREADS, 0, c->stream>>>((float *)p, (const float *)g, (float *)buf, n, (float)lr,
                                                       (float)momentum, (float)dampening, (float)weight_decay, nesterov,
                                                       first_step);
  else
    k_sgd_f64<<<blocks, DP_CU_THREADS, 0, c->stream>>>((double *)p, (const double *)g, (double *)buf, n, lr, momentum,
                                                       dampening, weight_decay, nesterov, first_step);
  return dp_cu_after_launch(c, "sgd step");
}

/* vmax: amsgrad's running maximum, or NULL; k: the step's coefficients
 * (dp_adam_coefs, the same as the CPU's) */
__global__ void k_adam_f32(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, const dp_adam_k k) {
  DP_CU_LOOP(i, n)
  dp_adam_update_f(&p[i], g[i], &m[i], &v[i], vmax ? &vmax[i] : NULL, &k);
}
__global__ void k_adam_f64(double *p, const double *g, double *m, double *v, double *vmax, int64_t n,
                           const dp_adam_k k) {
  DP_CU_LOOP(i, n)
  dp_adam_update_d(&p[i], g[i], &m[i], &v[i], vmax ? &vmax[i] : NULL, &k);
}

int dp_cu_adam_step(dp_tensor *p_t, const dp_tensor *g_t, dp_tensor *m_t, dp_tensor *v_t, const dp_adam_args *a) {
  DP_CU_ENTER(c, p_t);
  void *p = dp_cu_ptr(p_t), *m = dp_cu_ptr(m_t), *v = dp_cu_ptr(v_t);
  void *vmax = a->max_exp_avg_sq ? dp_cu_ptr(a->max_exp_avg_sq) : NULL;
  const void *g = dp_cu_ptr(g_t);
  dp_dtype dt = p_t->dtype;
  int64_t n = dp_cu_numel(p_t);
  dp_adam_k k = dp_adam_coefs(a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->decoupled, a->step);
  if (check_dtype(dt)) return -1;
  if (n == 0) return 0;
  unsigned blocks = dp_cu_blocks(c, n, DP_CU_THREADS);
  if (dt == DP_F32)
    k_adam_f32<<<blocks, DP_CU_THREADS, 0, c->stream>>>((float *)p, (const float *)g, (float *)m, (float *)v,
                                                        (float *)vmax, n, k);
  else
    k_adam_f64<<<blocks, DP_CU_THREADS, 0, c->stream>>>((double *)p, (const double *)g, (double *)m, (double *)v,
                                                        (double *)vmax, n, k);
  return dp_cu_after_launch(c, "adam step");
}

/* g *= inv_scale; any non-finite result raises the flag (a plain store of 1:
 * every writer writes the same value) */
__global__ void k_unscale(char *g, dp_dtype dt, int64_t n, double inv, int *flag) {
  bool bad = false;
  if (dt == DP_F32) {
    float *gf = (float *)g, s = (float)inv;
    DP_CU_LOOP(i, n) {
      float v = gf[i] * s;
      gf[i] = v;
      bad |= !isfinite(v);
    }
  } else {
    DP_CU_LOOP(i, n) {
      double v = dp_cu_ld(g, i, dt) * inv;
      bad |= !isfinite(v);
      dp_cu_st(g, i, dt, v);
    }
  }
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

int dp_cu_unscale(const dp_cu_ctx *c, void *g, dp_dtype dt, int64_t n, double inv_scale, int *flag) {
  if (n == 0) return 0;
  k_unscale<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)g, dt, n, inv_scale, flag);
  return dp_cu_after_launch(c, "unscale");
}

__global__ void k_scale_matrix(char *dst, dp_dtype dt, int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                               int64_t bs, double beta) {
  DP_CU_LOOP(e, batch * rows * cols) {
    int64_t q, j, b, i;
    dp_cu_divmod(e, cols, &q, &j);
    dp_cu_divmod(q, rows, &b, &i);
    int64_t d = b * bs + i * ld + j;
    dp_cu_st(dst, d, dt, beta == 0.0 ? 0.0 : beta * dp_cu_ld(dst, d, dt));
  }
}

int dp_cu_scale_matrix(const dp_cu_ctx *c, void *dst, dp_dtype dt, int64_t batch, int64_t rows, int64_t cols,
                       int64_t ld, int64_t bs, double beta) {
  int64_t n = batch * rows * cols;
  if (n == 0) return 0;
  k_scale_matrix<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)dst, dt, batch, rows, cols,
                                                                                     ld, bs, beta);
  return dp_cu_after_launch(c, "matmul");
}
