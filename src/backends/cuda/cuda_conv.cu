/* CUDA im2col / col2im and 2-d pooling (NCHW, contiguous).
 *
 * The backward kernels gather instead of scatter: each input element sums
 * the window positions that cover it, so there are no atomics, the result
 * does not depend on scheduling, and every element of the gradient is
 * written. Max pooling records the winning position within the input plane
 * (y * w + x, PyTorch's convention); the first maximum in window order wins
 * and NaN propagates. */
#include "backends/cuda/cuda_kernels.cuh"

__device__ __forceinline__ void copy_elem(char *d, const char *s, int es) {
  switch (es) {
  case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
  case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
  case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
  default: *(uint64_t *)d = *(const uint64_t *)s; break;
  }
}

/* cols [nb, c*kh*kw, oh*ow] from images n0.. */
__global__ void k_im2col(char *cols, const char *x, int es, const dp_window2d g, int64_t n0, int64_t nb) {
  int64_t ohw = g.oh * g.ow, kk = g.kh * g.kw, rowsz = g.c * kk;
  DP_CU_LOOP(e, nb * rowsz * ohw) {
    int64_t rest, pos, b, row, ci, k, ki, kj, oy, ox;
    dp_cu_divmod(e, ohw, &rest, &pos);
    dp_cu_divmod(rest, rowsz, &b, &row);
    dp_cu_divmod(row, kk, &ci, &k);
    dp_cu_divmod(k, g.kw, &ki, &kj);
    dp_cu_divmod(pos, g.ow, &oy, &ox);
    int64_t y = oy * g.sh - g.ph + ki * g.dh, xx = ox * g.sw - g.pw + kj * g.dw;
    char *d = cols + e * es;
    if (y < 0 || y >= g.h || xx < 0 || xx >= g.w) {
      for (int i = 0; i < es; i++) d[i] = 0;
    } else {
      copy_elem(d, x + (((n0 + b) * g.c + ci) * g.h * g.w + y * g.w + xx) * es, es);
    }
  }
}

int dp_cu_im2col(dp_tensor *cols_t, const dp_tensor *x_t, const dp_window2d *g, int64_t n0, int64_t nb) {
  DP_CU_ENTER(c, x_t);
  if (cols_t->dtype != x_t->dtype)
    return dp_cu_error("im2col: columns (%s) and input (%s) must share a dtype", dp_dtype_name(cols_t->dtype),
                       dp_dtype_name(x_t->dtype));
  void *cols = dp_cu_ptr(cols_t);
  const void *x = dp_cu_ptr(x_t);
  dp_dtype dt = x_t->dtype;
  int64_t n = nb * g->c * g->kh * g->kw * g->oh * g->ow;
  if (n == 0) return 0;
  k_im2col<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)cols, (const char *)x,
                                                                               (int)dp_dtype_bytes(dt), *g, n0, nb);
  return dp_cu_after_launch(c, "im2col");
}

/* The output position whose kernel offset i reads input position y along
 * one axis (o * s - p + i * d == y), or -1 when none does. */
__device__ __forceinline__ int64_t reader_of(int64_t y, int64_t i, int64_t s, int64_t p, int64_t d, int64_t on) {
  int64_t t = y + p - i * d;
  if (t < 0 || t % s) return -1;
  return t / s < on ? t / s : -1;
}

/* gx images n0.. += col2im(cols): each input element sums the kernel
 * offsets that read it (a loop over the kernel, which covers any dilation) */
__global__ void k_col2im(char *gx, dp_dtype gxdt, const char *cols, dp_dtype cdt, const dp_window2d g, int64_t n0,
                         int64_t nb) {
  int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  DP_CU_LOOP(e, nb * g.c * hw) {
    int64_t rest, pix, b, ci, y, xx;
    dp_cu_divmod(e, hw, &rest, &pix);
    dp_cu_divmod(rest, g.c, &b, &ci);
    dp_cu_divmod(pix, g.w, &y, &xx);
    double acc = 0;
    for (int64_t ki = 0; ki < g.kh; ki++) {
      int64_t oy = reader_of(y, ki, g.sh, g.ph, g.dh, g.oh);
      if (oy < 0) continue;
      for (int64_t kj = 0; kj < g.kw; kj++) {
        int64_t ox = reader_of(xx, kj, g.sw, g.pw, g.dw, g.ow);
        if (ox < 0) continue;
        int64_t row = (ci * g.kh + ki) * g.kw + kj;
        acc += dp_cu_ld(cols, (b * g.c * g.kh * g.kw + row) * ohw + oy * g.ow + ox, cdt);
      }
    }
    int64_t d = (n0 + b) * g.c * hw + ci * hw + pix;
    dp_cu_st(gx, d, gxdt, dp_cu_ld(gx, d, gxdt) + acc);
  }
}

int dp_cu_col2im(dp_tensor *gx_t, const dp_tensor *cols_t, const dp_window2d *g, int64_t n0, int64_t nb) {
  DP_CU_ENTER(c, gx_t);
  void *gx = dp_cu_ptr(gx_t);
  const void *cols = dp_cu_ptr(cols_t);
  dp_dtype gxdt = gx_t->dtype, cdt = cols_t->dtype;
  int64_t n = nb * g->c * g->h * g->w;
  if (n == 0) return 0;
  k_col2im<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)gx, gxdt, (const char *)cols,
                                                                               cdt, *g, n0, nb);
  return dp_cu_after_launch(c, "col2im");
}

/* Output positions (oy range) whose pooling window (no dilation) covers
 * input row y. */
__device__ __forceinline__ void covering(int64_t y, int64_t k, int64_t s, int64_t p, int64_t on, int64_t *lo,
                                         int64_t *hi) {
  int64_t a = y + p - k + 1; /* oy*s >= a */
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  int64_t b = (y + p) / s; /* oy*s <= y + p */
  *hi = b < on - 1 ? b : on - 1;
}

/* ---- max pooling ---- */
__global__ void k_max_pool2d(char *y, int64_t *idx, const char *x, dp_dtype dt, const dp_window2d g) {
  int64_t ohw = g.oh * g.ow, hw = g.h * g.w;
  DP_CU_LOOP(e, g.n * g.c * ohw) {
    int64_t plane, pos, oy, ox;
    dp_cu_divmod(e, ohw, &plane, &pos);
    dp_cu_divmod(pos, g.ow, &oy, &ox);
    int64_t best = -1;
    double bv = -INFINITY;
    for (int64_t ki = 0; ki < g.kh; ki++) {
      int64_t yy = oy * g.sh - g.ph + ki;
      if (yy < 0 || yy >= g.h) continue;
      for (int64_t kj = 0; kj < g.kw; kj++) {
        int64_t xx = ox * g.sw - g.pw + kj;
        if (xx < 0 || xx >= g.w) continue;
        double v = dp_cu_ld(x, plane * hw + yy * g.w + xx, dt);
        if (best < 0 || v > bv || v != v) best = yy * g.w + xx, bv = v; /* the last NaN wins, as PyTorch */
      }
    }
    if (best >= 0) copy_elem(dp_cu_at(y, e, dt), dp_cu_at(x, plane * hw + best, dt), (int)dp_dtype_bytes(dt));
    else dp_cu_st(y, e, dt, -INFINITY);
    idx[e] = best;
  }
}

int dp_cu_max_pool2d(dp_tensor *y_t, dp_tensor *idx_t, const dp_tensor *x_t, const dp_window2d *g) {
  DP_CU_ENTER(c, x_t);
  if (y_t->dtype != x_t->dtype)
    return dp_cu_error("max_pool2d: output (%s) and input (%s) must share a dtype", dp_dtype_name(y_t->dtype),
                       dp_dtype_name(x_t->dtype));
  void *y = dp_cu_ptr(y_t);
  int64_t *idx = (int64_t *)dp_cu_ptr(idx_t);
  const void *x = dp_cu_ptr(x_t);
  dp_dtype dt = x_t->dtype;
  int64_t n = g->n * g->c * g->oh * g->ow;
  if (n == 0) return 0;
  k_max_pool2d<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)y, idx, (const char *)x, dt,
                                                                                   *g);
  return dp_cu_after_launch(c, "max_pool2d");
}

__global__ void k_max_pool2d_backward(char *gx, dp_dtype gxdt, const char *gy, dp_dtype gydt, const int64_t *idx,
                                      const dp_window2d g) {
  int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  DP_CU_LOOP(e, g.n * g.c * hw) {
    int64_t plane, pix, y, xx;
    dp_cu_divmod(e, hw, &plane, &pix);
    dp_cu_divmod(pix, g.w, &y, &xx);
    int64_t oy0, oy1, ox0, ox1;
    covering(y, g.kh, g.sh, g.ph, g.oh, &oy0, &oy1);
    covering(xx, g.kw, g.sw, g.pw, g.ow, &ox0, &ox1);
    double acc = 0;
    for (int64_t oy = oy0; oy <= oy1; oy++)
      for (int64_t ox = ox0; ox <= ox1; ox++) {
        int64_t o = plane * ohw + oy * g.ow + ox;
        if (idx[o] == pix) acc += dp_cu_ld(gy, o, gydt);
      }
    dp_cu_st(gx, e, gxdt, acc);
  }
}

int dp_cu_max_pool2d_backward(dp_tensor *gx_t, const dp_tensor *gy_t, const dp_tensor *idx_t, const dp_window2d *g) {
  DP_CU_ENTER(c, gx_t);
  void *gx = dp_cu_ptr(gx_t);
  const void *gy = dp_cu_ptr(gy_t);
  const int64_t *idx = (const int64_t *)dp_cu_ptr(idx_t);
  dp_dtype gxdt = gx_t->dtype, gydt = gy_t->dtype;
  int64_t n = g->n * g->c * g->h * g->w;
  if (n == 0) return 0;
  k_max_pool2d_backward<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)gx, gxdt, (const char *)gy, gydt, idx, *g);
  return dp_cu_after_launch(c, "max_pool2d backward");
}

/* ---- average pooling (dp_window2d.divisor: padded window, valid positions, or an override) ---- */
__device__ static int64_t avg_divisor(int64_t hs, int64_t ws, const dp_window2d &g) {
  int64_t hv = (hs + g.kh < g.h ? hs + g.kh : g.h) - (hs > 0 ? hs : 0);
  int64_t wv = (ws + g.kw < g.w ? ws + g.kw : g.w) - (ws > 0 ? ws : 0);
  return dp_avgpool_div(g.divisor, dp_avgpool_divisor(hs, ws, g.kh, g.kw, g.h, g.w, g.ph, g.pw), hv * wv);
}

__global__ void k_avg_pool2d(char *y, const char *x, dp_dtype dt, const dp_window2d g) {
  int64_t ohw = g.oh * g.ow, hw = g.h * g.w;
  DP_CU_LOOP(e, g.n * g.c * ohw) {
    int64_t plane, pos, oy, ox;
    dp_cu_divmod(e, ohw, &plane, &pos);
    dp_cu_divmod(pos, g.ow, &oy, &ox);
    int64_t hs = oy * g.sh - g.ph, ws = ox * g.sw - g.pw;
    double acc = 0;
    for (int64_t ki = 0; ki < g.kh; ki++) {
      int64_t yy = hs + ki;
      if (yy < 0 || yy >= g.h) continue;
      for (int64_t kj = 0; kj < g.kw; kj++) {
        int64_t xx = ws + kj;
        if (xx >= 0 && xx < g.w) acc += dp_cu_ld(x, plane * hw + yy * g.w + xx, dt);
      }
    }
    dp_cu_st(y, e, dt, acc / (double)avg_divisor(hs, ws, g));
  }
}

int dp_cu_avg_pool2d(dp_tensor *y_t, const dp_tensor *x_t, const dp_window2d *g) {
  DP_CU_ENTER(c, x_t);
  if (y_t->dtype != x_t->dtype)
    return dp_cu_error("avg_pool2d: output (%s) and input (%s) must share a dtype", dp_dtype_name(y_t->dtype),
                       dp_dtype_name(x_t->dtype));
  void *y = dp_cu_ptr(y_t);
  const void *x = dp_cu_ptr(x_t);
  dp_dtype dt = x_t->dtype;
  int64_t n = g->n * g->c * g->oh * g->ow;
  if (n == 0) return 0;
  k_avg_pool2d<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)y, (const char *)x, dt, *g);
  return dp_cu_after_launch(c, "avg_pool2d");
}

__global__ void k_avg_pool2d_backward(char *gx, dp_dtype gxdt, const char *gy, dp_dtype gydt, const dp_window2d g) {
  int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  DP_CU_LOOP(e, g.n * g.c * hw) {
    int64_t plane, pix, y, xx;
    dp_cu_divmod(e, hw, &plane, &pix);
    dp_cu_divmod(pix, g.w, &y, &xx);
    int64_t oy0, oy1, ox0, ox1;
    covering(y, g.kh, g.sh, g.ph, g.oh, &oy0, &oy1);
    covering(xx, g.kw, g.sw, g.pw, g.ow, &ox0, &ox1);
    double acc = 0;
    for (int64_t oy = oy0; oy <= oy1; oy++)
      for (int64_t ox = ox0; ox <= ox1; ox++) {
        int64_t div = avg_divisor(oy * g.sh - g.ph, ox * g.sw - g.pw, g);
        acc += dp_cu_ld(gy, plane * ohw + oy * g.ow + ox, gydt) / (double)div;
      }
    dp_cu_st(gx, e, gxdt, acc);
  }
}

int dp_cu_avg_pool2d_backward(dp_tensor *gx_t, const dp_tensor *gy_t, const dp_window2d *g) {
  DP_CU_ENTER(c, gx_t);
  void *gx = dp_cu_ptr(gx_t);
  const void *gy = dp_cu_ptr(gy_t);
  dp_dtype gxdt = gx_t->dtype, gydt = gy_t->dtype;
  int64_t n = g->n * g->c * g->h * g->w;
  if (n == 0) return 0;
  k_avg_pool2d_backward<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>((char *)gx, gxdt,
                                                                                            (const char *)gy, gydt, *g);
  return dp_cu_after_launch(c, "avg_pool2d backward");
}
