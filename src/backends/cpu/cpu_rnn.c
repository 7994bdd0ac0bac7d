/* CPU kernels for one step of a recurrent layer (the fused gate kernels of
 * nn.RNN / nn.LSTM / nn.GRU: everything between the step's hidden GEMM and
 * the next, in one pass over the rows) and adaptive average pooling. The
 * cell formulas are ops/model_math.h's, shared with the CUDA kernels;
 * float64 runs them here in double (the reference the specs hold float32
 * against), float32 runs the vectorised per-ISA cells of cpu_rnn_vec.h,
 * the set matching the float32 kernels in use (cpu_vec.h). */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/cpu_rnn_vec.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/model_math.h"

#define ROW(T, t, r) ((t) ? (T *)dp_data(t) + (r) * (t)->stride[0] : (T *)0)

#define CELL_FORWARD(T, S)                                                                                             \
  static void cell_forward_##S(const dp_rnn_cell_args *a) {                                                            \
    const int64_t h = a->hidden;                                                                                       \
    const T *b = a->bhh ? (const T *)dp_data(a->bhh) : NULL;                                                           \
    for (int64_t r = 0; r < a->rows; r++) {                                                                            \
      const T *xp = ROW(const T, a->xp, r), *hp = ROW(const T, a->hp, r);                                              \
      T *ho = ROW(T, a->h_out, r), *sv = ROW(T, a->saved, r);                                                          \
      switch (a->mode) {                                                                                               \
      case DP_RNN_LSTM: {                                                                                              \
        const T *cp = ROW(const T, a->c_prev, r);                                                                      \
        T *co = ROW(T, a->c_out, r);                                                                                   \
        for (int64_t j = 0; j < h; j++) {                                                                              \
          T p[4];                                                                                                      \
          for (int g = 0; g < 4; g++) p[g] = xp[g * h + j] + hp[g * h + j] + (b ? b[g * h + j] : 0);                   \
          dp_lstm_cell_##S(p[0], p[1], p[2], p[3], cp[j], &sv[j], &sv[h + j], &sv[2 * h + j], &sv[3 * h + j], &co[j],  \
                           &ho[j]);                                                                                    \
        }                                                                                                              \
        break;                                                                                                         \
      }                                                                                                                \
      case DP_RNN_GRU: {                                                                                               \
        const T *hprev = ROW(const T, a->h_prev, r);                                                                   \
        for (int64_t j = 0; j < h; j++) {                                                                              \
          T hr = hp[j] + (b ? b[j] : 0), hz = hp[h + j] + (b ? b[h + j] : 0),                                          \
            hn = hp[2 * h + j] + (b ? b[2 * h + j] : 0);                                                               \
          dp_gru_cell_##S(xp[j], xp[h + j], xp[2 * h + j], hr, hz, hn, hprev[j], &sv[j], &sv[h + j], &sv[2 * h + j],   \
                          &ho[j]);                                                                                     \
          sv[3 * h + j] = hn;                                                                                          \
        }                                                                                                              \
        break;                                                                                                         \
      }                                                                                                                \
      default:                                                                                                         \
        for (int64_t j = 0; j < h; j++) {                                                                              \
          T v = xp[j] + hp[j] + (b ? b[j] : 0);                                                                        \
          ho[j] = a->mode == DP_RNN_TANH ? (T)tanh(v) : (v > 0 ? v : 0);                                               \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }

#define CELL_BACKWARD(T, S)                                                                                            \
  static void cell_backward_##S(const dp_rnn_cell_args *a) {                                                           \
    const int64_t h = a->hidden;                                                                                       \
    for (int64_t r = 0; r < a->rows; r++) {                                                                            \
      const T *gh = ROW(const T, a->gh, r), *sv = ROW(const T, a->saved, r);                                           \
      T *gx = ROW(T, a->gxp, r);                                                                                       \
      switch (a->mode) {                                                                                               \
      case DP_RNN_LSTM: {                                                                                              \
        const T *gc = ROW(const T, a->gc, r), *c = ROW(const T, a->c, r), *cp = ROW(const T, a->c_prev, r);            \
        T *gcp = ROW(T, a->gc_prev, r);                                                                                \
        for (int64_t j = 0; j < h; j++)                                                                                \
          dp_lstm_cell_grad_##S(sv[j], sv[h + j], sv[2 * h + j], sv[3 * h + j], c[j], cp[j], gh[j], gc ? gc[j] : 0,    \
                                &gx[j], &gx[h + j], &gx[2 * h + j], &gx[3 * h + j], &gcp[j]);                          \
        break;                                                                                                         \
      }                                                                                                                \
      case DP_RNN_GRU: {                                                                                               \
        const T *hprev = ROW(const T, a->h_prev, r);                                                                   \
        T *ghp = ROW(T, a->ghp, r), *ghd = ROW(T, a->gh_direct, r);                                                    \
        for (int64_t j = 0; j < h; j++) {                                                                              \
          dp_gru_cell_grad_##S(sv[j], sv[h + j], sv[2 * h + j], sv[3 * h + j], hprev[j], gh[j], &gx[j], &gx[h + j],    \
                               &gx[2 * h + j], &ghp[2 * h + j], &ghd[j]);                                              \
          ghp[j] = gx[j];                                                                                              \
          ghp[h + j] = gx[h + j];                                                                                      \
        }                                                                                                              \
        break;                                                                                                         \
      }                                                                                                                \
      default: {                                                                                                       \
        const T *ho = ROW(const T, a->h, r);                                                                           \
        for (int64_t j = 0; j < h; j++)                                                                                \
          gx[j] = a->mode == DP_RNN_TANH ? gh[j] * (1 - ho[j] * ho[j]) : (ho[j] > 0 ? gh[j] : 0);                      \
      }                                                                                                                \
      }                                                                                                                \
    }                                                                                                                  \
  }

CELL_FORWARD(double, d)
CELL_BACKWARD(double, d)

static const dp_cpu_rnn_kernels *f32_cells(void) {
  const dp_cpu_vec *v = dp_cpu_vec_get();
  if (v == &dp_cpu_vec_avx512) return &dp_cpu_rnn_avx512;
  if (v == &dp_cpu_vec_avx2) return &dp_cpu_rnn_avx2;
  return &dp_cpu_rnn_base;
}

static int check_dtype(const dp_tensor *t) {
  if (t->dtype == DP_F32 || t->dtype == DP_F64) return 0;
  return dp_error("recurrent layers run in float32 or float64 on the cpu, got %s", dp_dtype_name(t->dtype));
}

int dp_cpu_rnn_cell(const dp_rnn_cell_args *a) {
  if (check_dtype(a->xp)) return -1;
  if (a->xp->dtype == DP_F32) f32_cells()->forward(a);
  else cell_forward_d(a);
  return 0;
}

int dp_cpu_rnn_cell_backward(const dp_rnn_cell_args *a) {
  if (check_dtype(a->gxp)) return -1;
  if (a->gxp->dtype == DP_F32) f32_cells()->backward(a);
  else cell_backward_d(a);
  return 0;
}

/* ---- adaptive average pooling over [planes, h, w] ---- */
#define LD(t, i) dp_load_d((const char *)dp_data(t) + (size_t)(i)*dp_elsize(t), (t)->dtype)
#define ST(t, i, v) dp_store_d((char *)dp_data(t) + (size_t)(i)*dp_elsize(t), (t)->dtype, (v))

/* A plane's values as float32: in place, or bfloat16 widened into buf
 * (exact); NULL for other dtypes (the loops load each value as double). */
static const float *plane_f32(const dp_tensor *t, int64_t off, int64_t n, float *buf) {
  if (t->dtype == DP_F32) return (const float *)dp_data(t) + off;
  if (t->dtype != DP_BF16 || !buf) return NULL;
  dp_cpu_vec_get()->cast(buf, DP_F32, (const uint16_t *)dp_data(t) + off, DP_BF16, n);
  return buf;
}

int dp_cpu_adaptive_avg_pool2d(dp_tensor *y, const dp_tensor *x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                               int64_t ow) {
  float *buf = x->dtype == DP_BF16 ? malloc(sizeof(float) * (size_t)(h * w > 0 ? h * w : 1)) : NULL;
  for (int64_t p = 0; p < planes; p++) {
    const float *xp = plane_f32(x, p * h * w, h * w, buf);
    for (int64_t oy = 0; oy < oh; oy++) {
      int64_t y0 = dp_adaptive_start(oy, h, oh), y1 = dp_adaptive_end(oy, h, oh);
      for (int64_t ox = 0; ox < ow; ox++) {
        int64_t x0 = dp_adaptive_start(ox, w, ow), x1 = dp_adaptive_end(ox, w, ow);
        double s = 0;
        if (xp) {
          for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) s += xp[iy * w + ix];
        } else {
          for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) s += LD(x, (p * h + iy) * w + ix);
        }
        ST(y, (p * oh + oy) * ow + ox, s / (double)((y1 - y0) * (x1 - x0)));
      }
    }
  }
  free(buf);
  return 0;
}

/* per input element: the outputs whose windows hold it (windows of
 * neighbouring outputs may overlap), summed in double in output order, as
 * the CUDA kernel does. Each output's share gy / area is computed once per
 * plane (q) and each input row's and column's output range and each
 * window's end and size once per call (rng: [lo, hi) for the h rows, the w
 * columns, then the oh and ow ends and sizes), so the loop over the
 * input is a sum of usually one term (the per-element range search and
 * divisions made a global pooling's backward 17x its forward). */
int dp_cpu_adaptive_avg_pool2d_backward(dp_tensor *gx, const dp_tensor *gy, int64_t planes, int64_t h, int64_t w,
                                        int64_t oh, int64_t ow) {
  double *q = malloc(sizeof(double) * (size_t)(oh * ow > 0 ? oh * ow : 1));
  int64_t *rng = malloc(sizeof(int64_t) * (size_t)(2 * (h + w) + 2 * (oh + ow) + 1));
  if (!q || !rng) {
    free(q), free(rng);
    return dp_error("adaptive_avg_pool2d backward: out of memory for a plane of %lld outputs", (long long)(oh * ow));
  }
  /* ey, ex: the windows' ends; ny, nx: their heights and widths */
  int64_t *ry = rng, *rx = rng + 2 * h, *ey = rx + 2 * w, *ex = ey + oh, *ny = ex + ow, *nx = ny + oh;
  for (int64_t o = 0; o < oh; o++) ey[o] = dp_adaptive_end(o, h, oh), ny[o] = ey[o] - dp_adaptive_start(o, h, oh);
  for (int64_t o = 0; o < ow; o++) ex[o] = dp_adaptive_end(o, w, ow), nx[o] = ex[o] - dp_adaptive_start(o, w, ow);
  for (int64_t i = 0; i < h; i++) {
    int64_t o = i * oh / h;
    ry[2 * i] = o;
    while (o < oh && dp_adaptive_start(o, h, oh) <= i) o++;
    ry[2 * i + 1] = o;
  }
  for (int64_t i = 0; i < w; i++) {
    int64_t o = i * ow / w;
    rx[2 * i] = o;
    while (o < ow && dp_adaptive_start(o, w, ow) <= i) o++;
    rx[2 * i + 1] = o;
  }
  for (int64_t p = 0; p < planes; p++) {
    for (int64_t oy = 0; oy < oh; oy++)
      for (int64_t ox = 0; ox < ow; ox++) q[oy * ow + ox] = LD(gy, (p * oh + oy) * ow + ox) / (double)(ny[oy] * nx[ox]);
    for (int64_t iy = 0; iy < h; iy++)
      for (int64_t ix = 0; ix < w; ix++) {
        double s = 0;
        for (int64_t oy = ry[2 * iy]; oy < ry[2 * iy + 1]; oy++) {
          if (iy >= ey[oy]) continue;
          for (int64_t ox = rx[2 * ix]; ox < rx[2 * ix + 1]; ox++)
            if (ix < ex[ox]) s += q[oy * ow + ox];
        }
        int64_t e = (p * h + iy) * w + ix;
        if (gx->dtype == DP_F32) ((float *)dp_data(gx))[e] = (float)s;
        else ST(gx, e, s);
      }
  }
  free(q), free(rng);
  return 0;
}
