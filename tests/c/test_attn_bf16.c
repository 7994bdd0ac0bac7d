/* The bfloat16 attention products (backends/cpu/cpu_attn_bf16.h), each
 * kernel this CPU runs (AMX tiles, AVX512-BF16 dot products), against
 * float64 sums of the same bfloat16 values: mm over 16 rows with N of 16 to
 * 80 columns (a 32-column block and a 16-column tail), K2 of 16 and 48
 * pairs, with and without accumulating into C, leaving C's columns past N
 * and its rows' padding alone; scores with 1, 5, 9 and 16 rows (rows past
 * them zero), widths off the 16-column grid, a scale; and P V through each
 * kernel's mm with rows < 16 (C rows past them untouched). Results must be
 * within float32 rounding of the float64 sums (the kernels' sums differ
 * in order only). A CPU with neither kernel checks that neither says it is
 * supported. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_attn_bf16.h"
#include "test_util.h"

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t next_u32(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
/* a bfloat16 of magnitude about 2^-3 .. 2^3 and its value */
static uint16_t rand_bf16(void) {
  uint32_t sign = next_u32() & 1u, exp = 124 + next_u32() % 7, man = next_u32() & 0x7Fu;
  return (uint16_t)(sign << 15 | exp << 7 | man);
}
static double bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint32_t pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }
static uint16_t lo16(uint32_t w) { return (uint16_t)(w & 0xFFFFu); }
static uint16_t hi16(uint32_t w) { return (uint16_t)(w >> 16); }

/* |got - want| within float32 rounding of a sum of n terms (mag: the sum of their magnitudes): the bound of
 * recursive summation, (n + 1) units of the last place of float32, with one more for a final scaling */
static bool near_sum(double got, double want, double mag, int n) {
  return fabs(got - want) <= (n + 2) * 0x1p-24 * mag + 1e-30;
}

static void check_mm(const dp_attn_bf16_kernel *k) {
  enum { LDC = 96, LDA = 50, LDB = 100 };
  static uint32_t A[16 * LDA], B[48 * LDB];
  static float C[16 * LDC], C0[16 * LDC];
  for (int i = 0; i < 16 * LDA; i++) A[i] = pair(rand_bf16(), rand_bf16());
  for (int i = 0; i < 48 * LDB; i++) B[i] = pair(rand_bf16(), rand_bf16());
  const int64_t Ns[] = {16, 32, 48, 80}, K2s[] = {16, 48};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 2; b++)
      for (int acc = 0; acc < 2; acc++) {
        const int64_t N = Ns[a], K2 = K2s[b];
        for (int i = 0; i < 16 * LDC; i++) C0[i] = C[i] = (float)(next_u32() % 1000) / 100.0f - 5.0f;
        k->begin();
        k->mm(K2, N, A, LDA, B, LDB, C, LDC, acc);
        k->end();
        for (int r = 0; r < 16; r++)
          for (int n = 0; n < LDC; n++) {
            if (n >= N) { /* past N: untouched */
              CHECK(C[r * LDC + n] == C0[r * LDC + n]);
              continue;
            }
            double want = acc ? C0[r * LDC + n] : 0.0, mag = fabs(want);
            for (int64_t p = 0; p < K2; p++) {
              uint32_t x = A[r * LDA + p], y = B[p * LDB + n];
              double t0 = bf16_value(lo16(x)) * bf16_value(lo16(y)), t1 = bf16_value(hi16(x)) * bf16_value(hi16(y));
              want += t0 + t1, mag += fabs(t0) + fabs(t1);
            }
            if (!near_sum(C[r * LDC + n], want, mag, 2 * (int)K2 + 1)) {
              fprintf(stderr, "%s mm N=%lld K2=%lld acc=%d: C[%d][%d] = %.9g, float64 %.9g\n", k->name, (long long)N,
                      (long long)K2, acc, r, n, C[r * LDC + n], want);
              test_failures++;
              return;
            }
          }
      }
}

static void check_scores(const dp_attn_bf16_kernel *k) {
  enum { E = 64, AS = 66, LDB = 64, LDS = 72 };
  static uint16_t a[16 * AS], pad[16 * E];
  static uint32_t bt[(E / 2) * LDB];
  static float S[16 * LDS];
  for (int i = 0; i < 16 * AS; i++) a[i] = rand_bf16();
  for (int i = 0; i < (E / 2) * LDB; i++) bt[i] = pair(rand_bf16(), rand_bf16());
  const int64_t rows_list[] = {1, 5, 9, 16}, ws[] = {1, 16, 37, 64};
  for (int ri = 0; ri < 4; ri++)
    for (int wi = 0; wi < 4; wi++) {
      const int64_t rows = rows_list[ri], w = ws[wi], wpad = (w + 15) / 16 * 16;
      const float scale = 0.125f;
      for (int i = 0; i < 16 * LDS; i++) S[i] = 1234.5f;
      k->begin();
      k->scores(rows, w, E, a, AS, bt, LDB, S, LDS, scale, pad);
      k->end();
      for (int r = 0; r < 16; r++)
        for (int j = 0; j < LDS; j++) {
          float got = S[r * LDS + j];
          if (j >= wpad) { /* past w rounded up to 16: untouched */
            CHECK(got == 1234.5f);
            continue;
          }
          if (r >= rows) { /* rows past `rows`: zeros */
            CHECK(got == 0.0f);
            continue;
          }
          double want = 0, mag = 0;
          for (int e = 0; e < E; e++) {
            uint32_t y = bt[(e / 2) * LDB + j];
            double t = bf16_value(a[r * AS + e]) * bf16_value(e % 2 ? hi16(y) : lo16(y));
            want += t, mag += fabs(t);
          }
          if (!near_sum(got, scale * want, scale * mag, E)) {
            fprintf(stderr, "%s scores rows=%lld w=%lld: S[%d][%d] = %.9g, float64 %.9g\n", k->name, (long long)rows,
                    (long long)w, r, j, got, scale * want);
            test_failures++;
            return;
          }
        }
    }
}

/* P V with 5 rows and 70 keys: P rounded to bfloat16 (nearest even, scaled by alpha) times V's pair rows */
static void check_pv(const dp_attn_bf16_kernel *k) {
  enum { ROWS = 5, W = 70, N = 32, LDP = 80, LDC = 40, PW = (W + 31) / 32 * 32 };
  static float P[16 * LDP], C[16 * LDC], C0[16 * LDC], tmp[16 * N];
  static uint32_t vv[(PW / 2) * N];
  static uint16_t pb[16 * 128], v[PW * N];
  for (int i = 0; i < 16 * LDP; i++) P[i] = (float)(next_u32() % 2000) / 1000.0f;
  for (int j = 0; j < PW; j++)
    for (int n = 0; n < N; n++) v[j * N + n] = j < W ? rand_bf16() : 0;
  dp_attn_bf16_pair_rows(v, N, W, PW / 2, N, vv);
  for (int p = 0; p < PW / 2; p++) /* the pairing itself: rows 2p and 2p + 1, zero past W */
    for (int n = 0; n < N; n++) CHECK(vv[p * N + n] == pair(v[2 * p * N + n], v[(2 * p + 1) * N + n]));
  const float alpha = 0.5f;
  for (int acc = 0; acc < 2; acc++) {
    for (int i = 0; i < 16 * LDC; i++) C0[i] = C[i] = (float)(next_u32() % 100) / 10.0f;
    k->begin();
    dp_attn_bf16_pv(k, ROWS, W, N, P, LDP, alpha, vv, C, LDC, acc, pb, tmp);
    k->end();
    for (int r = 0; r < 16; r++)
      for (int n = 0; n < LDC; n++) {
        if (r >= ROWS || n >= N) {
          CHECK(C[r * LDC + n] == C0[r * LDC + n]);
          continue;
        }
        double want = acc ? C0[r * LDC + n] : 0.0, mag = fabs(want);
        for (int j = 0; j < W; j++) {
          /* alpha * P rounded to bfloat16, nearest even (the values here are positive and normal) */
          float f = alpha * P[r * LDP + j];
          uint32_t u;
          memcpy(&u, &f, sizeof u);
          u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
          memcpy(&f, &u, sizeof f);
          double t = (double)f * bf16_value(v[j * N + n]);
          want += t, mag += fabs(t);
        }
        if (!near_sum(C[r * LDC + n], want, mag, W + 1)) {
          fprintf(stderr, "%s pv acc=%d: C[%d][%d] = %.9g, float64 %.9g\n", k->name, acc, r, n, C[r * LDC + n], want);
          test_failures++;
          return;
        }
      }
  }
}

int main(void) {
  const dp_attn_bf16_kernel *kernels[2];
  int n = 0;
  if (dp_attn_amx_supported()) kernels[n++] = &dp_attn_bf16_amx;
  if (dp_attn_dot_supported()) kernels[n++] = &dp_attn_bf16_dot;
  __builtin_cpu_init();
  /* a CPU without AVX512-BF16 runs neither (AMX-BF16 implies it) */
  if (!__builtin_cpu_supports("avx512bf16")) CHECK(n == 0);
  for (int i = 0; i < n; i++) {
    check_mm(kernels[i]);
    check_scores(kernels[i]);
    check_pv(kernels[i]);
    printf("%s: checked\n", kernels[i]->name);
  }
  TEST_DONE();
}
