/* CPU kernels for one step of a recurrent layer (the fused gate kernels of
 * nn.RNN / nn.LSTM / nn.GRU: everything between the step's hidden GEMM and
 * the next, in one pass over the rows). The
 * cell formulas are ops/model_math.h's, shared with the CUDA kernels;
 * float64 runs them here in double (the reference the specs hold float32
 * against), float32 runs the vectorised per-ISA cells of cpu_rnn_vec.h,
 * the set matching the float32 kernels in use (cpu_vec.h). (Adaptive
 * average pooling, once here, is cpu_adaptive_pool.c.) */
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
