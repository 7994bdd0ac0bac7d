/* PLACEHOLDER (replaced by the nn-ops work): batch norm and layer norm. */
#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
int dp_cpu_bn_stats(dp_tensor *mean, dp_tensor *var, const dp_tensor *x, int64_t n, int64_t c, int64_t inner) {
  (void)mean, (void)var, (void)x, (void)n, (void)c, (void)inner;
  return dp_error("pending");
}
int dp_cpu_bn_forward(dp_tensor *y, const dp_tensor *x, const dp_tensor *mean, const dp_tensor *invstd,
                      const dp_tensor *w, const dp_tensor *b, int64_t n, int64_t c, int64_t inner) {
  (void)y, (void)x, (void)mean, (void)invstd, (void)w, (void)b, (void)n, (void)c, (void)inner;
  return dp_error("pending");
}
int dp_cpu_bn_backward_reduce(dp_tensor *sum_dy, dp_tensor *sum_dy_xhat, const dp_tensor *gy, const dp_tensor *x,
                              const dp_tensor *mean, const dp_tensor *invstd, int64_t n, int64_t c, int64_t inner) {
  (void)sum_dy, (void)sum_dy_xhat, (void)gy, (void)x, (void)mean, (void)invstd, (void)n, (void)c, (void)inner;
  return dp_error("pending");
}
int dp_cpu_bn_backward_elemt(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *x, const dp_tensor *mean,
                             const dp_tensor *invstd, const dp_tensor *w, const dp_tensor *sum_dy,
                             const dp_tensor *sum_dy_xhat, double count, int64_t n, int64_t c, int64_t inner) {
  (void)gx, (void)gy, (void)x, (void)mean, (void)invstd, (void)w, (void)sum_dy, (void)sum_dy_xhat, (void)count;
  (void)n, (void)c, (void)inner;
  return dp_error("pending");
}
int dp_cpu_layer_norm(dp_tensor *y, dp_tensor *mean, dp_tensor *rstd, const dp_tensor *x, const dp_tensor *w,
                      const dp_tensor *b, int64_t rows, int64_t cols, double eps) {
  (void)y, (void)mean, (void)rstd, (void)x, (void)w, (void)b, (void)rows, (void)cols, (void)eps;
  return dp_error("pending");
}
int dp_cpu_layer_norm_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                               const dp_tensor *mean, const dp_tensor *rstd, const dp_tensor *w, int64_t rows,
                               int64_t cols) {
  (void)gx, (void)gw, (void)gb, (void)gy, (void)x, (void)mean, (void)rstd, (void)w, (void)rows, (void)cols;
  return dp_error("pending");
}
