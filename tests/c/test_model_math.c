/* The model ops' shared math (ops/model_math.h) and the CPU attention's
 * building blocks, checked on the CPU so that what the CUDA kernels share
 * is tested where no GPU exists: the recurrent cells' gradients against
 * finite differences (double) and float against double; RMSprop / Adagrad
 * float against double; adaptive pooling windows covering every input;
 * the top-k order; multinomial draws; the attention exp against expf; the
 * attention GEMM micro-kernels (AVX-512, AVX2, plain, whichever the CPU
 * runs) against a double loop at every edge case of their tiles; the
 * 16-lane AVX-512 exp against the scalar one, bit for bit; the AVX-512
 * key-block transpose against the plain one. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_attn_gemm.h"
#include "backends/cpu/sgemm.h"
#include "ops/model_math.h"
#include "test_util.h"

static double frand(unsigned *s, double lo, double hi) {
  *s = *s * 1103515245u + 12345u;
  return lo + (hi - lo) * ((*s >> 8) & 0xffffff) / 16777216.0;
}

/* loss = sum of weights * (h, c) of one LSTM unit; its gradient by the cell's backward vs differences */
static double lstm_loss(const double *p, double cp, double wh, double wc) {
  double ai, af, ag, ao, c, h;
  dp_lstm_cell_d(p[0], p[1], p[2], p[3], cp, &ai, &af, &ag, &ao, &c, &h);
  return wh * h + wc * c;
}

static void test_lstm(void) {
  unsigned s = 3;
  for (int t = 0; t < 200; t++) {
    double p[5], wh = frand(&s, -1, 1), wc = frand(&s, -1, 1);
    for (int i = 0; i < 5; i++) p[i] = frand(&s, -3, 3); /* 4 pre-activations and c_prev */
    double ai, af, ag, ao, c, h, g[5];
    dp_lstm_cell_d(p[0], p[1], p[2], p[3], p[4], &ai, &af, &ag, &ao, &c, &h);
    dp_lstm_cell_grad_d(ai, af, ag, ao, c, p[4], wh, wc, &g[0], &g[1], &g[2], &g[3], &g[4]);
    for (int i = 0; i < 5; i++) {
      double hp[5], hm[5];
      memcpy(hp, p, sizeof hp), memcpy(hm, p, sizeof hm);
      hp[i] += 1e-6, hm[i] -= 1e-6;
      double fd = (lstm_loss(hp, hp[4], wh, wc) - lstm_loss(hm, hm[4], wh, wc)) / 2e-6;
      CHECK_NEAR(g[i], fd, 1e-7);
    }
    float fai, faf, fag, fao, fc, fh;
    dp_lstm_cell_f((float)p[0], (float)p[1], (float)p[2], (float)p[3], (float)p[4], &fai, &faf, &fag, &fao, &fc, &fh);
    CHECK_NEAR(fh, h, 1e-6);
    CHECK_NEAR(fc, c, 1e-6);
  }
}

static double gru_loss(const double *p, double w) {
  double r, z, n, h;
  dp_gru_cell_d(p[0], p[1], p[2], p[3], p[4], p[5], p[6], &r, &z, &n, &h);
  return w * h;
}

static void test_gru(void) {
  unsigned s = 5;
  for (int t = 0; t < 200; t++) {
    double p[7], w = frand(&s, -1, 1); /* xr xz xn hr hz hn h_prev */
    for (int i = 0; i < 7; i++) p[i] = frand(&s, -3, 3);
    double r, z, n, h, dxr, dxz, dxn, dhn, dh;
    dp_gru_cell_d(p[0], p[1], p[2], p[3], p[4], p[5], p[6], &r, &z, &n, &h);
    dp_gru_cell_grad_d(r, z, n, p[5], p[6], w, &dxr, &dxz, &dxn, &dhn, &dh);
    double want[7] = {dxr, dxz, dxn, dxr, dxz, dhn, dh}; /* the hidden r, z gradients are the input ones */
    for (int i = 0; i < 7; i++) {
      double hp[7], hm[7];
      memcpy(hp, p, sizeof hp), memcpy(hm, p, sizeof hm);
      hp[i] += 1e-6, hm[i] -= 1e-6;
      CHECK_NEAR(want[i], (gru_loss(hp, w) - gru_loss(hm, w)) / 2e-6, 1e-7);
    }
  }
}

static void test_optimizers(void) {
  unsigned s = 7;
  for (int t = 0; t < 100; t++) {
    double p = frand(&s, -1, 1), sq = frand(&s, 0.05, 1), ga = frand(&s, -0.1, 0.1), buf = frand(&s, -1, 1);
    float pf = (float)p, sqf = (float)sq, gaf = (float)ga, buff = (float)buf;
    double g = frand(&s, -1, 1);
    dp_rmsprop_update_d(&p, g, &sq, &ga, &buf, 0.01, 0.99, 1e-8, 0.1, 0.9);
    dp_rmsprop_update_f(&pf, (float)g, &sqf, &gaf, &buff, 0.01f, 0.99f, 1e-8f, 0.1f, 0.9f);
    CHECK_NEAR(pf, p, 1e-5);
    CHECK_NEAR(sqf, sq, 1e-6);
    double q = frand(&s, -1, 1), sum = frand(&s, 0, 1);
    float qf = (float)q, sumf = (float)sum;
    dp_adagrad_update_d(&q, g, &sum, 0.05, 1e-10, 0.01);
    dp_adagrad_update_f(&qf, (float)g, &sumf, 0.05f, 1e-10f, 0.01f);
    CHECK_NEAR(qf, q, 1e-6);
  }
}

static void test_windows(void) {
  for (int64_t n = 1; n <= 20; n++)
    for (int64_t out = 1; out <= 25; out++) {
      int64_t prev_end = 0;
      for (int64_t o = 0; o < out; o++) {
        int64_t a = dp_adaptive_start(o, n, out), b = dp_adaptive_end(o, n, out);
        CHECK(a < b && a >= 0 && b <= n);
        CHECK(a <= prev_end); /* no input left out between windows */
        prev_end = b;
      }
      CHECK(prev_end == n);
    }
}

static void test_topk_order(void) {
  CHECK(dp_topk_before(3, 5, 2, 1, true));
  CHECK(!dp_topk_before(3, 5, 2, 1, false));
  CHECK(dp_topk_before(1, 1, 1, 2, true) && dp_topk_before(1, 1, 1, 2, false)); /* ties: lower position */
  CHECK(dp_topk_before(NAN, 7, 1e30, 1, true));                                 /* NaN is the largest */
  CHECK(!dp_topk_before(NAN, 7, 1e30, 1, false));                               /* and so last for smallest */
  CHECK(dp_topk_before(NAN, 1, NAN, 2, true));
}

static void test_multinomial(void) {
  double w[4] = {0, 1, 0, 3}, u[6] = {0.0, 0.2, 0.25, 0.26, 0.999999, 0.5};
  int64_t out[6];
  dp_multinomial_row(w, 4, u, 6, true, 1, out);
  int64_t want[6] = {2, 2, 4, 4, 4, 4};
  for (int i = 0; i < 6; i++) CHECK(out[i] == want[i]);
  double w2[4] = {1, 0, 1, 1};
  double u2[3] = {0.99, 0.0, 0.7};
  dp_multinomial_row(w2, 4, u2, 3, false, 0, out);
  CHECK(out[0] == 3 && out[1] == 0 && out[2] == 2); /* each drawn once, the zero weight never */
}

static void test_exp(void) {
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
    double e = fabs(dp_attn_exp(x) - exp((double)x)) / exp((double)x);
    if (e > worst) worst = e;
  }
  CHECK(worst < 4e-7);
  CHECK(dp_attn_exp(-INFINITY) == 0.0f && dp_attn_exp(-100.0f) == 0.0f);
  CHECK(isnan(dp_attn_exp(NAN)));
  CHECK(dp_attn_exp(0.0f) == 1.0f);
}

/* dp_attn_exp512 lane by lane against dp_attn_exp: the same bits over the softmax's range, at the clamps,
 * the underflow edge, -inf (a masked score) and NaN */
__attribute__((target("avx512f,avx512dq,fma"))) static void test_exp512(void) {
  if (!dp_sgemm_cpu_supports(DP_SGEMM_AVX512)) return;
  float x[16 * 700];
  int n = 0;
  for (float v = -90.0f; v <= 1.0f && n < 16 * 680; v += 0.1337f) x[n++] = v;
  const float edges[] = {-87.3f,
                         nextafterf(-87.3f, 0),
                         nextafterf(-87.3f, -100),
                         -INFINITY,
                         NAN,
                         0.0f,
                         -0.0f,
                         88.0f,
                         100.0f,
                         -1e-30f,
                         -1e30f,
                         INFINITY};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) x[n++] = edges[i];
  while (n % 16) x[n++] = -1.0f;
  int mismatches = 0;
  for (int i = 0; i < n; i += 16) {
    float y[16];
    _mm512_storeu_ps(y, dp_attn_exp512(_mm512_loadu_ps(x + i)));
    for (int l = 0; l < 16; l++) {
      float want = dp_attn_exp(x[i + l]);
      if (!(memcmp(&want, &y[l], sizeof want) == 0 || (isnan(want) && isnan(y[l])))) mismatches++;
    }
  }
  CHECK(mismatches == 0);
}

/* the AVX-512 block transpose against the plain loop, at sizes off its 16 x 16 blocks; nothing written outside */
static void test_attn_transpose(void) {
  if (!dp_sgemm_cpu_supports(DP_SGEMM_AVX512)) return;
  int64_t sizes[][2] = {{1, 1}, {16, 16}, {17, 5}, {128, 32}, {130, 40}, {3, 33}, {0, 4}, {50, 0}};
  unsigned s = 5;
  float *src = malloc(sizeof(float) * 200 * 64), *d1 = malloc(sizeof(float) * 64 * 200);
  float *d2 = malloc(sizeof(float) * 64 * 200);
  for (int i = 0; i < 200 * 64; i++) src[i] = (float)frand(&s, -1, 1);
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
    int64_t rows = sizes[z][0], cols = sizes[z][1], lds = 61, ldd = 197;
    for (int i = 0; i < 64 * 200; i++) d1[i] = d2[i] = -7.0f;
    dp_attn_transpose_plain(src, lds, rows, cols, d1, ldd);
    dp_attn_transpose_avx512(src, lds, rows, cols, d2, ldd);
    int bad = 0;
    for (int i = 0; i < 64 * 200; i++) bad += d1[i] != d2[i];
    CHECK(bad == 0);
    for (int64_t e = 0; e < cols; e++) /* and the plain loop is a transpose */
      for (int64_t c = 0; c < rows; c++) CHECK(d1[e * ldd + c] == src[c * lds + e]);
  }
  free(src), free(d1), free(d2);
}

static void test_attn_gemm(void) {
  dp_attn_gemm_fn fns[3] = {dp_attn_gemm_plain, dp_attn_gemm_avx2, dp_attn_gemm_avx512};
  bool ok[3] = {true, dp_sgemm_cpu_supports(DP_SGEMM_AVX2), dp_sgemm_cpu_supports(DP_SGEMM_AVX512)};
  unsigned s = 11;
  int64_t sizes[][3] = {{1, 1, 1},    {3, 5, 7},   {8, 16, 32}, {9, 17, 33},
                        {64, 64, 32}, {13, 70, 5}, {4, 48, 1},  {7, 100, 0}};
  float *A = malloc(sizeof(float) * 200 * 200), *B = malloc(sizeof(float) * 200 * 200);
  float *C = malloc(sizeof(float) * 200 * 200), *C0 = malloc(sizeof(float) * 200 * 200);
  for (int i = 0; i < 200 * 200; i++) A[i] = (float)frand(&s, -1, 1), B[i] = (float)frand(&s, -1, 1);
  for (int f = 0; f < 3; f++) {
    if (!ok[f]) continue;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
      int64_t R = sizes[z][0], N = sizes[z][1], K = sizes[z][2];
      for (int trans = 0; trans < 2; trans++)
        for (int acc = 0; acc < 2; acc++) {
          int64_t ars = trans ? 1 : K + 3, acs = trans ? R + 2 : 1, ldb = N + 5, ldc = N + 1;
          for (int i = 0; i < 200 * 200; i++) C[i] = C0[i] = (float)frand(&s, -1, 1);
          fns[f](R, N, K, A, ars, acs, B, ldb, C, ldc, 0.5f, acc);
          for (int64_t r = 0; r < R; r++)
            for (int64_t n = 0; n < N; n++) {
              double d = 0;
              for (int64_t k = 0; k < K; k++) d += (double)A[r * ars + k * acs] * B[k * ldb + n];
              double want = 0.5 * d + (acc ? C0[r * ldc + n] : 0.0);
              CHECK_NEAR(C[r * ldc + n], want, 1e-5);
            }
          /* nothing written outside the R x N tile */
          for (int64_t r = 0; r < R; r++)
            for (int64_t n = N; n < ldc; n++) CHECK(C[r * ldc + n] == C0[r * ldc + n]);
          CHECK(C[R * ldc] == C0[R * ldc]);
        }
    }
  }
  free(A), free(B), free(C), free(C0);
}

int main(void) {
  test_lstm();
  test_gru();
  test_optimizers();
  test_windows();
  test_topk_order();
  test_multinomial();
  test_exp();
  test_exp512();
  test_attn_transpose();
  test_attn_gemm();
  TEST_DONE();
}
