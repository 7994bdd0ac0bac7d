/* PLACEHOLDER (replaced by the nn-ops work): im2col/col2im and pooling. */
#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
int dp_cpu_im2col(dp_tensor *cols, const dp_tensor *x, const dp_window2d *g, int64_t n0, int64_t nb) {
  (void)cols, (void)x, (void)g, (void)n0, (void)nb;
  return dp_error("im2col: pending");
}
int dp_cpu_col2im(dp_tensor *gx, const dp_tensor *cols, const dp_window2d *g, int64_t n0, int64_t nb) {
  (void)cols, (void)gx, (void)g, (void)n0, (void)nb;
  return dp_error("col2im: pending");
}
int dp_cpu_max_pool2d(dp_tensor *y, dp_tensor *idx, const dp_tensor *x, const dp_window2d *g) {
  (void)y, (void)idx, (void)x, (void)g;
  return dp_error("pending");
}
int dp_cpu_max_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *idx, const dp_window2d *g) {
  (void)gx, (void)gy, (void)idx, (void)g;
  return dp_error("pending");
}
int dp_cpu_avg_pool2d(dp_tensor *y, const dp_tensor *x, const dp_window2d *g) {
  (void)y, (void)x, (void)g;
  return dp_error("pending");
}
int dp_cpu_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, const dp_window2d *g) {
  (void)gx, (void)gy, (void)g;
  return dp_error("pending");
}
