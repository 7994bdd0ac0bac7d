/* CUDA kernels for one step of a recurrent layer (the gate kernels: one
 * thread per (row, hidden unit), the formulas of ops/model_math.h as on
 * the CPU) and adaptive average pooling (one thread per output element
 * forward, per input element backward: no atomics). */
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/cuda_model.h"
#include "ops/model_math.h"

struct rows2 { /* a [rows, cols] tensor: base and row stride (unit column stride) */
  char *p;
  int64_t rs;
};
static rows2 rows_of(const dp_tensor *t) {
  rows2 r = {NULL, 0};
  if (t) r.p = (char *)dp_cu_ptr(t), r.rs = t->stride[0];
  return r;
}

struct cell_k {
  dp_rnn_mode mode;
  int64_t rows, h;
  rows2 xp, hp, bhh, h_prev, c_prev, h_out, c_out, saved, gh, gc, c, hh, gxp, ghp, gc_prev, gh_direct;
};

static cell_k cell_args(const dp_rnn_cell_args *a) {
  cell_k k;
  k.mode = a->mode, k.rows = a->rows, k.h = a->hidden;
  k.xp = rows_of(a->xp), k.hp = rows_of(a->hp), k.bhh = rows_of(a->bhh), k.h_prev = rows_of(a->h_prev);
  k.c_prev = rows_of(a->c_prev), k.h_out = rows_of(a->h_out), k.c_out = rows_of(a->c_out), k.saved = rows_of(a->saved);
  k.gh = rows_of(a->gh), k.gc = rows_of(a->gc), k.c = rows_of(a->c), k.hh = rows_of(a->h), k.gxp = rows_of(a->gxp);
  k.ghp = rows_of(a->ghp), k.gc_prev = rows_of(a->gc_prev), k.gh_direct = rows_of(a->gh_direct);
  return k;
}

template <typename T> __device__ __forceinline__ T *at(const rows2 &t, int64_t r, int64_t col) {
  return (T *)t.p + r * t.rs + col;
}

__device__ __forceinline__ float tanh_t(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_t(double x) { return tanh(x); }
__device__ __forceinline__ void lstm_t(float a, float b, float c, float d, float cp, float *w, float *x, float *y,
                                       float *z, float *co, float *ho) {
  dp_lstm_cell_f(a, b, c, d, cp, w, x, y, z, co, ho);
}
__device__ __forceinline__ void lstm_t(double a, double b, double c, double d, double cp, double *w, double *x,
                                       double *y, double *z, double *co, double *ho) {
  dp_lstm_cell_d(a, b, c, d, cp, w, x, y, z, co, ho);
}
__device__ __forceinline__ void lstm_grad_t(float ai, float af, float ag, float ao, float c, float cp, float dh,
                                            float dc, float *a, float *b, float *g, float *o, float *dcp) {
  dp_lstm_cell_grad_f(ai, af, ag, ao, c, cp, dh, dc, a, b, g, o, dcp);
}
__device__ __forceinline__ void lstm_grad_t(double ai, double af, double ag, double ao, double c, double cp, double dh,
                                            double dc, double *a, double *b, double *g, double *o, double *dcp) {
  dp_lstm_cell_grad_d(ai, af, ag, ao, c, cp, dh, dc, a, b, g, o, dcp);
}
__device__ __forceinline__ void gru_t(float xr, float xz, float xn, float hr, float hz, float hn, float hp, float *r,
                                      float *z, float *n, float *h) {
  dp_gru_cell_f(xr, xz, xn, hr, hz, hn, hp, r, z, n, h);
}
__device__ __forceinline__ void gru_t(double xr, double xz, double xn, double hr, double hz, double hn, double hp,
                                      double *r, double *z, double *n, double *h) {
  dp_gru_cell_d(xr, xz, xn, hr, hz, hn, hp, r, z, n, h);
}
__device__ __forceinline__ void gru_grad_t(float r, float z, float n, float hn, float hp, float dh, float *a, float *b,
                                           float *c, float *d, float *e) {
  dp_gru_cell_grad_f(r, z, n, hn, hp, dh, a, b, c, d, e);
}
__device__ __forceinline__ void gru_grad_t(double r, double z, double n, double hn, double hp, double dh, double *a,
                                           double *b, double *c, double *d, double *e) {
  dp_gru_cell_grad_d(r, z, n, hn, hp, dh, a, b, c, d, e);
}

template <typename T> __global__ void k_cell(const cell_k a) {
  const int64_t h = a.h;
  DP_CU_LOOP(e, a.rows * h) {
    int64_t r, j;
    dp_cu_divmod(e, h, &r, &j);
    const T *xp = at<T>(a.xp, r, 0), *hp = at<T>(a.hp, r, 0), *b = a.bhh.p ? (const T *)a.bhh.p : NULL;
    T *sv = a.saved.p ? at<T>(a.saved, r, 0) : NULL;
    if (a.mode == DP_RNN_LSTM) {
      T p[4];
      for (int g = 0; g < 4; g++) p[g] = xp[g * h + j] + hp[g * h + j] + (b ? b[g * h + j] : (T)0);
      lstm_t(p[0], p[1], p[2], p[3], *at<T>(a.c_prev, r, j), &sv[j], &sv[h + j], &sv[2 * h + j], &sv[3 * h + j],
             at<T>(a.c_out, r, j), at<T>(a.h_out, r, j));
    } else if (a.mode == DP_RNN_GRU) {
      T hr = hp[j] + (b ? b[j] : (T)0), hz = hp[h + j] + (b ? b[h + j] : (T)0),
        hn = hp[2 * h + j] + (b ? b[2 * h + j] : (T)0);
      gru_t(xp[j], xp[h + j], xp[2 * h + j], hr, hz, hn, *at<T>(a.h_prev, r, j), &sv[j], &sv[h + j], &sv[2 * h + j],
            at<T>(a.h_out, r, j));
      sv[3 * h + j] = hn;
    } else {
      T v = xp[j] + hp[j] + (b ? b[j] : (T)0);
      *at<T>(a.h_out, r, j) = a.mode == DP_RNN_TANH ? tanh_t(v) : (v > 0 ? v : (T)0);
    }
  }
}

template <typename T> __global__ void k_cell_backward(const cell_k a) {
  const int64_t h = a.h;
  DP_CU_LOOP(e, a.rows * h) {
    int64_t r, j;
    dp_cu_divmod(e, h, &r, &j);
    T gh = *at<T>(a.gh, r, j), *gx = at<T>(a.gxp, r, 0);
    const T *sv = a.saved.p ? at<T>(a.saved, r, 0) : NULL;
    if (a.mode == DP_RNN_LSTM) {
      T gc = a.gc.p ? *at<T>(a.gc, r, j) : (T)0;
      lstm_grad_t(sv[j], sv[h + j], sv[2 * h + j], sv[3 * h + j], *at<T>(a.c, r, j), *at<T>(a.c_prev, r, j), gh, gc,
                  &gx[j], &gx[h + j], &gx[2 * h + j], &gx[3 * h + j], at<T>(a.gc_prev, r, j));
    } else if (a.mode == DP_RNN_GRU) {
      T *ghp = at<T>(a.ghp, r, 0);
      gru_grad_t(sv[j], sv[h + j], sv[2 * h + j], sv[3 * h + j], *at<T>(a.h_prev, r, j), gh, &gx[j], &gx[h + j],
                 &gx[2 * h + j], &ghp[2 * h + j], at<T>(a.gh_direct, r, j));
      ghp[j] = gx[j];
      ghp[h + j] = gx[h + j];
    } else {
      T ho = *at<T>(a.hh, r, j);
      gx[j] = a.mode == DP_RNN_TANH ? gh * (1 - ho * ho) : (ho > 0 ? gh : (T)0);
    }
  }
}

static int check_dtype(dp_dtype dt) {
  if (dt == DP_F32 || dt == DP_F64) return 0;
  return dp_cu_error("recurrent layers run in float32 or float64 on cuda, got %s", dp_dtype_name(dt));
}

int dp_cu_rnn_cell(const dp_rnn_cell_args *a) {
  DP_CU_ENTER(c, a->xp);
  if (check_dtype(a->xp->dtype)) return -1;
  int64_t n = a->rows * a->hidden;
  if (n == 0) return 0;
  cell_k k = cell_args(a);
  if (a->xp->dtype == DP_F32) k_cell<float><<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(k);
  else k_cell<double><<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(k);
  return dp_cu_after_launch(c, "rnn cell");
}

int dp_cu_rnn_cell_backward(const dp_rnn_cell_args *a) {
  DP_CU_ENTER(c, a->gxp);
  if (check_dtype(a->gxp->dtype)) return -1;
  int64_t n = a->rows * a->hidden;
  if (n == 0) return 0;
  cell_k k = cell_args(a);
  if (a->gxp->dtype == DP_F32)
    k_cell_backward<float><<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(k);
  else k_cell_backward<double><<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(k);
  return dp_cu_after_launch(c, "rnn cell backward");
}

/* ---- adaptive average pooling ---- */
__global__ void k_adaptive(char *y, dp_dtype ydt, const char *x, dp_dtype xdt, int64_t planes, int64_t h, int64_t w,
                           int64_t oh, int64_t ow) {
  DP_CU_LOOP(e, planes * oh * ow) {
    int64_t q, ox, p, oy;
    dp_cu_divmod(e, ow, &q, &ox);
    dp_cu_divmod(q, oh, &p, &oy);
    int64_t y0 = dp_adaptive_start(oy, h, oh), y1 = dp_adaptive_end(oy, h, oh);
    int64_t x0 = dp_adaptive_start(ox, w, ow), x1 = dp_adaptive_end(ox, w, ow);
    double s = 0;
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t ix = x0; ix < x1; ix++) s += dp_cu_ld(x, (p * h + iy) * w + ix, xdt);
    dp_cu_st(y, e, ydt, s / (double)((y1 - y0) * (x1 - x0)));
  }
}

__global__ void k_adaptive_backward(char *gx, dp_dtype gdt, const char *gy, dp_dtype ydt, int64_t planes, int64_t h,
                                    int64_t w, int64_t oh, int64_t ow) {
  DP_CU_LOOP(e, planes * h * w) {
    int64_t q, ix, p, iy;
    dp_cu_divmod(e, w, &q, &ix);
    dp_cu_divmod(q, h, &p, &iy);
    double s = 0;
    for (int64_t oy = iy * oh / h; oy < oh && dp_adaptive_start(oy, h, oh) <= iy; oy++) {
      int64_t y0 = dp_adaptive_start(oy, h, oh), y1 = dp_adaptive_end(oy, h, oh);
      if (iy >= y1) continue;
      for (int64_t ox = ix * ow / w; ox < ow && dp_adaptive_start(ox, w, ow) <= ix; ox++) {
        int64_t x0 = dp_adaptive_start(ox, w, ow), x1 = dp_adaptive_end(ox, w, ow);
        if (ix >= x1) continue;
        s += dp_cu_ld(gy, (p * oh + oy) * ow + ox, ydt) / (double)((y1 - y0) * (x1 - x0));
      }
    }
    dp_cu_st(gx, e, gdt, s);
  }
}

int dp_cu_adaptive_avg_pool2d(dp_tensor *y, const dp_tensor *x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                              int64_t ow) {
  DP_CU_ENTER(c, y);
  int64_t n = planes * oh * ow;
  if (n == 0) return 0;
  k_adaptive<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)dp_cu_ptr(y), y->dtype, (const char *)dp_cu_ptr(x), x->dtype, planes, h, w, oh, ow);
  return dp_cu_after_launch(c, "adaptive_avg_pool2d");
}

int dp_cu_adaptive_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, int64_t planes, int64_t h, int64_t w,
                                       int64_t oh, int64_t ow) {
  DP_CU_ENTER(c, gx);
  int64_t n = planes * h * w;
  if (n == 0) return 0;
  k_adaptive_backward<<<dp_cu_blocks(c, n, DP_CU_THREADS), DP_CU_THREADS, 0, c->stream>>>(
      (char *)dp_cu_ptr(gx), gx->dtype, (const char *)dp_cu_ptr(gy), gy->dtype, planes, h, w, oh, ow);
  return dp_cu_after_launch(c, "adaptive_avg_pool2d backward");
}
