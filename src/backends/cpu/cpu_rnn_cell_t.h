/* The float32 recurrent cell kernels (one time step of nn.LSTM / nn.GRU /
 * nn.RNN, backend contract dp_rnn_cell_args in backends/backend.h),
 * included once by each per-ISA translation unit (cpu_rnn_avx512.c,
 * cpu_rnn_avx2.c, cpu_rnn_base.c), which sets the target and names the
 * table (DP_RNN_TABLE); no include guard on purpose.
 *
 * The formulas are ops/model_math.h's cells (the float64 kernels in
 * cpu_rnn.c run those, and the specs hold these against them), written
 * here branch-free over a row's h units with vmath.h's exp and tanh, so
 * each row is one vector loop at the unit's width instead of a libm call
 * per gate and unit. Sigmoid: with e = exp(-|x|), 1 / (1 + e) for x >= 0
 * and e / (1 + e) below (no overflow, no cancellation), both computed and
 * one selected. */
#include "backends/cpu/cpu_rnn_vec.h"
#include "backends/cpu/vmath.h"

#define RESTRICT __restrict__
#define CELL_INLINE static inline __attribute__((always_inline))
#define FROW(t, r) ((float *)dp_data(t) + (r) * (t)->stride[0])
#define CROW(t, r) ((const float *)dp_data(t) + (r) * (t)->stride[0])

CELL_INLINE float v_sigmoid(float x) {
  float e = dp_vexpf(-dp_vfabsf(x));
  float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

/* ---- LSTM (gates i, f, g, o; saved: the four activated gates) ---- */
CELL_INLINE void lstm_row(int64_t h, const float *RESTRICT xp, const float *RESTRICT hp, const float *RESTRICT b,
                          bool has_b, const float *RESTRICT cp, float *RESTRICT sv, float *RESTRICT co,
                          float *RESTRICT ho) {
  for (int64_t j = 0; j < h; j++) {
    float pi = xp[j] + hp[j] + (has_b ? b[j] : 0.0f);
    float pf = xp[h + j] + hp[h + j] + (has_b ? b[h + j] : 0.0f);
    float pg = xp[2 * h + j] + hp[2 * h + j] + (has_b ? b[2 * h + j] : 0.0f);
    float po = xp[3 * h + j] + hp[3 * h + j] + (has_b ? b[3 * h + j] : 0.0f);
    float ai = v_sigmoid(pi), af = v_sigmoid(pf), ag = dp_vtanhf(pg), ao = v_sigmoid(po);
    float c = af * cp[j] + ai * ag;
    sv[j] = ai, sv[h + j] = af, sv[2 * h + j] = ag, sv[3 * h + j] = ao;
    co[j] = c;
    ho[j] = ao * dp_vtanhf(c);
  }
}

CELL_INLINE void lstm_grad_row(int64_t h, const float *RESTRICT sv, const float *RESTRICT c, const float *RESTRICT cp,
                               const float *RESTRICT gh, const float *RESTRICT gc, bool has_gc, float *RESTRICT gx,
                               float *RESTRICT gcp) {
  for (int64_t j = 0; j < h; j++) {
    float ai = sv[j], af = sv[h + j], ag = sv[2 * h + j], ao = sv[3 * h + j];
    float dh = gh[j], tc = dp_vtanhf(c[j]);
    float dct = (has_gc ? gc[j] : 0.0f) + dh * ao * (1 - tc * tc);
    gx[3 * h + j] = dh * tc * (ao * (1 - ao));
    gx[j] = dct * ag * (ai * (1 - ai));
    gx[h + j] = dct * cp[j] * (af * (1 - af));
    gx[2 * h + j] = dct * ai * (1 - ag * ag);
    gcp[j] = dct * af;
  }
}

/* ---- GRU (gates r, z, n; saved r, z, n and the hidden n projection) ---- */
CELL_INLINE void gru_row(int64_t h, const float *RESTRICT xp, const float *RESTRICT hp, const float *RESTRICT b,
                         bool has_b, const float *RESTRICT hprev, float *RESTRICT sv, float *RESTRICT ho) {
  for (int64_t j = 0; j < h; j++) {
    float hr = hp[j] + (has_b ? b[j] : 0.0f), hz = hp[h + j] + (has_b ? b[h + j] : 0.0f);
    float hn = hp[2 * h + j] + (has_b ? b[2 * h + j] : 0.0f);
    float r = v_sigmoid(xp[j] + hr), z = v_sigmoid(xp[h + j] + hz);
    float n = dp_vtanhf(xp[2 * h + j] + r * hn);
    sv[j] = r, sv[h + j] = z, sv[2 * h + j] = n, sv[3 * h + j] = hn;
    ho[j] = (1 - z) * n + z * hprev[j];
  }
}

CELL_INLINE void gru_grad_row(int64_t h, const float *RESTRICT sv, const float *RESTRICT hprev,
                              const float *RESTRICT gh, float *RESTRICT gx, float *RESTRICT ghp, float *RESTRICT ghd) {
  for (int64_t j = 0; j < h; j++) {
    float r = sv[j], z = sv[h + j], n = sv[2 * h + j], hn = sv[3 * h + j], dh = gh[j];
    float dnp = dh * (1 - z) * (1 - n * n);
    float dxr = dnp * hn * (r * (1 - r)), dxz = dh * (hprev[j] - n) * (z * (1 - z));
    gx[j] = dxr, gx[h + j] = dxz, gx[2 * h + j] = dnp;
    ghp[j] = dxr, ghp[h + j] = dxz, ghp[2 * h + j] = dnp * r;
    ghd[j] = dh * z;
  }
}

/* ---- plain RNN, tanh or relu ---- */
CELL_INLINE void rnn_row(int64_t h, const float *RESTRICT xp, const float *RESTRICT hp, const float *RESTRICT b,
                         bool has_b, bool relu, float *RESTRICT ho) {
  for (int64_t j = 0; j < h; j++) {
    float v = xp[j] + hp[j] + (has_b ? b[j] : 0.0f);
    ho[j] = relu ? (v > 0 ? v : 0) : dp_vtanhf(v);
  }
}

static void cell_forward(const dp_rnn_cell_args *a) {
  const int64_t h = a->hidden;
  const float *b = a->bhh ? (const float *)dp_data(a->bhh) : NULL;
  for (int64_t r = 0; r < a->rows; r++) {
    const float *xp = CROW(a->xp, r), *hp = CROW(a->hp, r);
    float *ho = FROW(a->h_out, r);
    switch (a->mode) {
    case DP_RNN_LSTM: {
      const float *cp = CROW(a->c_prev, r);
      float *sv = FROW(a->saved, r), *co = FROW(a->c_out, r);
      if (b) lstm_row(h, xp, hp, b, true, cp, sv, co, ho);
      else lstm_row(h, xp, hp, b, false, cp, sv, co, ho);
      break;
    }
    case DP_RNN_GRU: {
      const float *hprev = CROW(a->h_prev, r);
      float *sv = FROW(a->saved, r);
      if (b) gru_row(h, xp, hp, b, true, hprev, sv, ho);
      else gru_row(h, xp, hp, b, false, hprev, sv, ho);
      break;
    }
    default: {
      bool relu = a->mode == DP_RNN_RELU;
      if (b && relu) rnn_row(h, xp, hp, b, true, true, ho);
      else if (b) rnn_row(h, xp, hp, b, true, false, ho);
      else if (relu) rnn_row(h, xp, hp, b, false, true, ho);
      else rnn_row(h, xp, hp, b, false, false, ho);
    }
    }
  }
}

static void cell_backward(const dp_rnn_cell_args *a) {
  const int64_t h = a->hidden;
  for (int64_t r = 0; r < a->rows; r++) {
    const float *gh = CROW(a->gh, r);
    float *gx = FROW(a->gxp, r);
    switch (a->mode) {
    case DP_RNN_LSTM: {
      const float *sv = CROW(a->saved, r), *c = CROW(a->c, r), *cp = CROW(a->c_prev, r);
      const float *gc = a->gc ? CROW(a->gc, r) : NULL;
      float *gcp = FROW(a->gc_prev, r);
      if (gc) lstm_grad_row(h, sv, c, cp, gh, gc, true, gx, gcp);
      else lstm_grad_row(h, sv, c, cp, gh, gc, false, gx, gcp);
      break;
    }
    case DP_RNN_GRU:
      gru_grad_row(h, CROW(a->saved, r), CROW(a->h_prev, r), gh, gx, FROW(a->ghp, r), FROW(a->gh_direct, r));
      break;
    default: {
      const float *ho = CROW(a->h, r);
      if (a->mode == DP_RNN_TANH)
        for (int64_t j = 0; j < h; j++) gx[j] = gh[j] * (1 - ho[j] * ho[j]);
      else
        for (int64_t j = 0; j < h; j++) gx[j] = ho[j] > 0 ? gh[j] : 0;
    }
    }
  }
}

const dp_cpu_rnn_kernels DP_RNN_TABLE = {.forward = cell_forward, .backward = cell_backward};

#undef RESTRICT
#undef CELL_INLINE
#undef FROW
#undef CROW
