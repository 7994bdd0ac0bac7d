/* CUDA kernels for the RMSprop, Adadelta and Adagrad updates (ops/model_math.h, as
 * on the CPU) and the sum of |g|^p over a list of gradients: one kernel
 * per tensor into one device double (a block's partial sum by atomicAdd,
 * or its maximum by atomicMax on the bits, which order non-negative
 * doubles as integers and put NaN above inf), so clip_grad_norm_ never
 * waits for the device. */
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/cuda_model.h"
#include "ops/model_math.h"

static int check_dtype(const char *who, dp_dtype dt) {
  if (dt != DP_F32 && dt != DP_F64)
    return dp_cu_error("%s: parameters must be float32 or float64 on cuda, got %s", who, dp_dtype_name(dt));
  return 0;
}

template <typename T> struct opt_fns;
template <> struct opt_fns<float> {
  static __device__ void rms(float *p, float g, float *sq, float *ga, float *buf, float lr, float al, float eps,
                             float wd, float mo) {
    dp_rmsprop_update_f(p, g, sq, ga, buf, lr, al, eps, wd, mo);
  }
  static __device__ void ada(float *p, float g, float *sum, float clr, float eps, float wd) {
    dp_adagrad_update_f(p, g, sum, clr, eps, wd);
  }
  static __device__ void delta(float *p, float g, float *sq, float *acc, float lr, float rho, float eps, float wd) {
    dp_adadelta_update_f(p, g, sq, acc, lr, rho, eps, wd);
  }
};
template <> struct opt_fns<double> {
  static __device__ void rms(double *p, double g, double *sq, double *ga, double *buf, double lr, double al, double eps,
                             double wd, double mo) {
    dp_rmsprop_update_d(p, g, sq, ga, buf, lr, al, eps, wd, mo);
  }
  static __device__ void ada(double *p, double g, double *sum, double clr, double eps, double wd) {
    dp_adagrad_update_d(p, g, sum, clr, eps, wd);
  }
  static __device__ void delta(double *p, double g, double *sq, double *acc, double lr, double rho, double eps,
                               double wd) {
    dp_adadelta_update_d(p, g, sq, acc, lr, rho, eps, wd);
  }
};

template <typename T>
__global__ void k_rmsprop(T *p, const T *g, T *sq, T *ga, T *buf, int64_t n, T lr, T alpha, T eps, T wd, T mo) {
  DP_CU_LOOP(i, n)
  opt_fns<T>::rms(&p[i], g[i], &sq[i], ga ? &ga[i] : NULL, buf ? &buf[i] : NULL, lr, alpha, eps, wd, mo);
}

template <typename T> __global__ void k_adagrad(T *p, const T *g, T *sum, int64_t n, T clr, T eps, T wd) {
  DP_CU_LOOP(i, n) opt_fns<T>::ada(&p[i], g[i], &sum[i], clr, eps, wd);
}

int dp_cu_rmsprop_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *gavg, dp_tensor *buf,
                       const dp_rmsprop_args *a) {
  DP_CU_ENTER(c, p);
  if (check_dtype("RMSprop", p->dtype)) return -1;
  int64_t n = dp_cu_numel(p);
  if (n == 0) return 0;
  unsigned blocks = dp_cu_blocks(c, n, DP_CU_THREADS);
  void *ga = gavg ? dp_cu_ptr(gavg) : NULL, *bf = buf ? dp_cu_ptr(buf) : NULL;
  if (p->dtype == DP_F32)
    k_rmsprop<float><<<blocks, DP_CU_THREADS, 0, c->stream>>>(
        (float *)dp_cu_ptr(p), (const float *)dp_cu_ptr(g), (float *)dp_cu_ptr(sq), (float *)ga, (float *)bf, n,
        (float)a->lr, (float)a->alpha, (float)a->eps, (float)a->weight_decay, (float)a->momentum);
  else
    k_rmsprop<double><<<blocks, DP_CU_THREADS, 0, c->stream>>>((double *)dp_cu_ptr(p), (const double *)dp_cu_ptr(g),
                                                               (double *)dp_cu_ptr(sq), (double *)ga, (double *)bf, n,
                                                               a->lr, a->alpha, a->eps, a->weight_decay, a->momentum);
  return dp_cu_after_launch(c, "rmsprop step");
}

int dp_cu_adagrad_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sum, const dp_adagrad_args *a) {
  DP_CU_ENTER(c, p);
  if (check_dtype("Adagrad", p->dtype)) return -1;
  int64_t n = dp_cu_numel(p);
  if (n == 0) return 0;
  unsigned blocks = dp_cu_blocks(c, n, DP_CU_THREADS);
  if (p->dtype == DP_F32)
    k_adagrad<float><<<blocks, DP_CU_THREADS, 0, c->stream>>>((float *)dp_cu_ptr(p), (const float *)dp_cu_ptr(g),
                                                              (float *)dp_cu_ptr(sum), n, (float)a->clr, (float)a->eps,
                                                              (float)a->weight_decay);
  else
    k_adagrad<double><<<blocks, DP_CU_THREADS, 0, c->stream>>>((double *)dp_cu_ptr(p), (const double *)dp_cu_ptr(g),
                                                               (double *)dp_cu_ptr(sum), n, a->clr, a->eps,
                                                               a->weight_decay);
  return dp_cu_after_launch(c, "adagrad step");
}

template <typename T> __global__ void k_adadelta(T *p, const T *g, T *sq, T *acc, int64_t n, T lr, T rho, T eps, T wd) {
  DP_CU_LOOP(i, n) opt_fns<T>::delta(&p[i], g[i], &sq[i], &acc[i], lr, rho, eps, wd);
}

int dp_cu_adadelta_step(dp_tensor *p, const dp_tensor *g, dp_tensor *sq, dp_tensor *acc, const dp_adadelta_args *a) {
  DP_CU_ENTER(c, p);
  if (check_dtype("Adadelta", p->dtype)) return -1;
  int64_t n = dp_cu_numel(p);
  if (n == 0) return 0;
  unsigned blocks = dp_cu_blocks(c, n, DP_CU_THREADS);
  if (p->dtype == DP_F32)
    k_adadelta<float><<<blocks, DP_CU_THREADS, 0, c->stream>>>(
        (float *)dp_cu_ptr(p), (const float *)dp_cu_ptr(g), (float *)dp_cu_ptr(sq), (float *)dp_cu_ptr(acc), n,
        (float)a->lr, (float)a->rho, (float)a->eps, (float)a->weight_decay);
  else
    k_adadelta<double><<<blocks, DP_CU_THREADS, 0, c->stream>>>((double *)dp_cu_ptr(p), (const double *)dp_cu_ptr(g),
                                                                (double *)dp_cu_ptr(sq), (double *)dp_cu_ptr(acc), n,
                                                                a->lr, a->rho, a->eps, a->weight_decay);
  return dp_cu_after_launch(c, "adadelta step");
}

/* mode 0: sum |g|^p (p 1 and 2 exact), 1: max |g| */
__global__ void k_pow_sum(double *out, const char *g, dp_dtype dt, int64_t n, double p, int mode) {
  __shared__ double shm[32];
  double acc = 0;
  DP_CU_LOOP(i, n) {
    double v = fabs(dp_cu_ld(g, i, dt));
    if (mode == 1) acc = v != v ? v : (v > acc ? v : acc);
    else acc += p == 1.0 ? v : p == 2.0 ? v * v : pow(v, p);
  }
  if (mode == 1)
    acc = dp_cu_group_reduce(
        acc, [](double a, double b) { return a != a   ? a
                                             : b != b ? b
                                                      : (a > b ? a : b); }, true, shm);
  else
    acc = dp_cu_group_reduce(
        acc, [](double a, double b) { return a + b; }, true, shm);
  if (threadIdx.x == 0) {
    if (mode == 1) atomicMax((long long *)out, __double_as_longlong(acc));
    else atomicAdd(out, acc);
  }
}

int dp_cu_pow_sum_list(dp_tensor *out, const dp_tensor *const *gs, int n, double p) {
  DP_CU_ENTER(c, out);
  int mode = isinf(p) ? 1 : 0;
  for (int t = 0; t < n; t++) {
    int64_t m = dp_cu_numel(gs[t]);
    if (m == 0) continue;
    k_pow_sum<<<dp_cu_blocks(c, m, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
        (double *)dp_cu_ptr(out), (const char *)dp_cu_ptr(gs[t]), gs[t]->dtype, m, p, mode);
    if (dp_cu_after_launch(c, "clip_grad_norm_")) return -1;
  }
  return 0;
}
