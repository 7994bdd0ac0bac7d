/* ddplua's float32 GEMM (src/backends/cpu/sgemm.c) against a float64 reference
 * loop: every transpose combination, both orientations the driver picks,
 * alpha/beta (beta = 0 ignores NaN in C), leading dimensions wider than the
 * matrices (the gaps must stay untouched), batch strides (including a
 * broadcast operand with stride 0), odd and edge sizes, k = 0, the MLP and
 * conv shapes, for every micro-kernel this CPU can run, on one thread and
 * split over several (also in a forked child); plus the DDPLUA_GEMM
 * selection and its error message. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/sgemm.h"
#include "core/error.h"
#include "test_util.h"

static const float GAP = 12345.0f; /* value of elements between rows (ld > width) */

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* xorshift64: uniform in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A stored matrix of rows x cols with row stride ld and `batch` copies
 * stride apart; gaps filled with fill_gap. */
static float *make(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride, float fill_gap) {
  size_t n = (size_t)((batch - 1) * stride + (rows - 1) * ld + cols);
  float *m = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) m[i] = fill_gap;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) m[b * stride + i * ld + j] = frand();
  return m;
}

typedef struct {
  int64_t m, n, k;
  bool ta, tb;
  double alpha, beta;
  int64_t pad_a, pad_b, pad_c; /* ld = width + pad */
  int64_t batch;
  bool broadcast_b; /* stride_b = 0 */
  bool nan_c;       /* C starts as NaN (only with beta == 0) */
} gemm_case;

static int cases_run;

static void run_case(dp_sgemm_impl impl, gemm_case tc) {
  const int64_t m = tc.m, n = tc.n, k = tc.k;
  const int64_t ar = tc.ta ? k : m, ac = tc.ta ? m : k; /* A as stored */
  const int64_t br = tc.tb ? n : k, bc = tc.tb ? k : n;
  const int64_t lda = ac + tc.pad_a, ldb = bc + tc.pad_b, ldc = n + tc.pad_c;
  const int64_t sa = ar * lda + 3, sb = tc.broadcast_b ? 0 : br * ldb + 5, sc = m * ldc + 2;
  const int64_t batch = tc.batch;
  float *a = make(ar, ac, lda, batch, sa, NAN); /* gaps of A and B are NaN: must never be read */
  float *b = make(br, bc, ldb, tc.broadcast_b ? 1 : batch, sb, NAN);
  float *c = make(m, n, ldc, batch, sc, GAP);
  if (tc.nan_c)
    for (int64_t bi = 0; bi < batch; bi++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[bi * sc + i * ldc + j] = NAN;
  size_t c_len = (size_t)((batch - 1) * sc + (m - 1) * ldc + n);
  float *c0 = malloc(c_len * sizeof(float));
  memcpy(c0, c, c_len * sizeof(float));

  dp_gemm_args g = {.dtype = DP_F32,
                    .trans_a = tc.ta,
                    .trans_b = tc.tb,
                    .m = m,
                    .n = n,
                    .k = k,
                    .batch = batch,
                    .alpha = tc.alpha,
                    .beta = tc.beta,
                    .a = a,
                    .lda = lda,
                    .stride_a = sa,
                    .b = b,
                    .ldb = ldb,
                    .stride_b = sb,
                    .c = c,
                    .ldc = ldc,
                    .stride_c = sc};
  CHECK(dp_sgemm_run(impl, &g) == 0);

  int bad = 0;
  for (int64_t bi = 0; bi < batch && bad < 5; bi++) {
    const float *A = a + bi * sa, *B = b + bi * sb;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, abs_s = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = tc.ta ? A[p * lda + i] : A[i * lda + p];
          double y = tc.tb ? B[j * ldb + p] : B[p * ldb + j];
          s += x * y;
          abs_s += fabs(x * y);
        }
        double old = c0[bi * sc + i * ldc + j];
        double want = tc.alpha * s + (tc.beta == 0 ? 0.0 : tc.beta * old);
        /* float32 accumulation error grows with k (|error| <= ~k eps sum|a b|) */
        double scale = fabs(tc.alpha) * abs_s + (tc.beta == 0 ? 0.0 : fabs(tc.beta * old));
        double tol = (double)(k + 4) * FLT_EPSILON * scale + 1e-30;
        double got = c[bi * sc + i * ldc + j];
        if (!(fabs(got - want) <= tol) && bad++ < 5)
          fprintf(stderr,
                  "%s %" PRId64 "x%" PRId64 "x%" PRId64 " %c%c alpha %g beta %g batch %" PRId64 ": C[%" PRId64
                  "][%" PRId64 "][%" PRId64 "] = %.9g, want %.9g (tol %.3g)\n",
                  dp_sgemm_impl_name(impl), m, n, k, tc.ta ? 'T' : 'N', tc.tb ? 'T' : 'N', tc.alpha, tc.beta, batch, bi,
                  i, j, got, want, tol);
      }
  }
  /* elements of C outside the matrices are untouched */
  for (size_t e = 0; e < c_len && bad < 5; e++) {
    int64_t bi = (int64_t)e / sc, off = (int64_t)e % sc;
    bool inside = bi < batch && off / ldc < m && off % ldc < n;
    if (!inside && c[e] != GAP && bad++ < 5)
      fprintf(stderr, "%s %" PRId64 "x%" PRId64 "x%" PRId64 ": C gap element %zu overwritten with %g\n",
              dp_sgemm_impl_name(impl), m, n, k, e, c[e]);
  }
  CHECK(bad == 0);
  cases_run++;
  free(a), free(b), free(c), free(c0);
}

static gemm_case basic(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  return (gemm_case){.m = m, .n = n, .k = k, .ta = ta, .tb = tb, .alpha = 1, .beta = 0, .batch = 1};
}

static void test_impl(dp_sgemm_impl impl) {
  /* odd and edge sizes around the tile sizes (avx512: 8 x 48, avx2: 6 x 16)
   * and cache blocks (kc 256, nc ~480), every transpose combination; m < n
   * and m > n both occur so each orientation runs with each packing */
  static const int64_t sizes[][3] = {
      {1, 1, 1},
      {3, 3, 3},
      {17, 17, 17},
      {1, 1000, 17},
      {1000, 1, 17},
      {1, 17, 1000},
      {5, 7, 1},
      {8, 48, 16},
      {9, 49, 300},
      {7, 100, 513},
      {100, 7, 513},
      {6, 16, 33},
      {13, 1000, 40},
      {1000, 13, 40},
      {61, 33, 257},
      {2, 600, 600},
      {600, 2, 600},
      {48, 8, 5},
      {17, 31, 3},
      {3, 1, 5},
      {1, 3, 5},
      /* last slivers of 4 rows or fewer (the 4-row k loop): the LSTM example's steps, 8 + 4, 4 alone */
      {20, 800, 200},
      {20, 200, 800},
      {12, 50, 33},
      {4, 96, 70},
      {800, 20, 200},
      /* a k that fits one block whole at a narrower block width (sgemm.c's run_blocked: 384 x 400 would otherwise
       * split k in 2) */
      {70, 400, 384},
      {400, 70, 384},
  };
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int t = 0; t < 4; t++) run_case(impl, basic(sizes[s][0], sizes[s][1], sizes[s][2], t & 1, t & 2));

  /* the shapes of a 784-1024-1024-10 MLP at batch 64, with the op layer's
   * transposes, conv im2col shapes, and the GPT example's weight gradients
   * g^T x (the swapped orientation when g is the wider operand), and the
   * LSTM example's input-weight gradient and a narrow one, swapped since
   * swap_pays weighs C's transposed stores 2.5 */
  static const int64_t mlp[][5] = {
      {64, 1024, 784, 0, 1},  {64, 1024, 1024, 0, 1}, {64, 10, 1024, 0, 1},   {64, 784, 1024, 0, 0},
      {64, 1024, 1024, 0, 0}, {1024, 784, 64, 1, 0},  {1024, 1024, 64, 1, 0}, {10, 1024, 64, 1, 0},
      {32, 784, 25, 0, 0},    {64, 196, 800, 0, 0},   {800, 196, 64, 1, 0},   {64, 800, 196, 0, 1},
      {512, 128, 2048, 1, 0}, {384, 128, 2048, 1, 0}, {128, 512, 2048, 1, 0}, {256, 128, 2048, 1, 0},
      {800, 200, 700, 1, 0},  {1024, 64, 192, 1, 0},
  };
  for (size_t s = 0; s < sizeof mlp / sizeof mlp[0]; s++)
    run_case(impl, basic(mlp[s][0], mlp[s][1], mlp[s][2], mlp[s][3], mlp[s][4]));

  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    /* alpha/beta: beta = 0 ignores NaN in C, beta != 0 reads C */
    gemm_case c = basic(19, 53, 70, ta, tb);
    c.nan_c = true;
    run_case(impl, c);
    c = basic(53, 19, 70, ta, tb);
    c.nan_c = true, c.alpha = -2.5;
    run_case(impl, c);
    c = basic(19, 53, 300, ta, tb); /* k split in blocks: beta applies once */
    c.alpha = 0.5, c.beta = -1.5;
    run_case(impl, c);
    c = basic(53, 19, 300, ta, tb);
    c.alpha = 0.5, c.beta = 1;
    run_case(impl, c);
    c = basic(37, 500, 384, ta, tb); /* k kept whole in narrower blocks: beta still once */
    c.alpha = 0.5, c.beta = -1.5;
    run_case(impl, c);
    /* alpha = 0: C = beta C, A and B unread (their gaps are NaN anyway) */
    c = basic(9, 21, 5, ta, tb);
    c.alpha = 0, c.beta = 2;
    run_case(impl, c);
    c = basic(9, 21, 5, ta, tb);
    c.alpha = 0, c.nan_c = true;
    run_case(impl, c);
    /* k = 0: C = beta C, NaN ignored when beta = 0 */
    c = basic(9, 50, 0, ta, tb);
    c.nan_c = true;
    run_case(impl, c);
    c = basic(50, 9, 0, ta, tb);
    c.beta = 3;
    run_case(impl, c);
    /* leading dimensions wider than the matrices */
    c = basic(23, 67, 45, ta, tb);
    c.pad_a = 3, c.pad_b = 17, c.pad_c = 5, c.beta = 0.25;
    run_case(impl, c);
    c = basic(67, 23, 45, ta, tb);
    c.pad_a = 16, c.pad_b = 1, c.pad_c = 48;
    run_case(impl, c);
    /* batches, and a batch-broadcast B (stride 0) */
    c = basic(11, 35, 29, ta, tb);
    c.batch = 3, c.pad_c = 2, c.beta = -1;
    run_case(impl, c);
    c = basic(35, 11, 29, ta, tb);
    c.batch = 4, c.broadcast_b = true, c.pad_a = 1;
    run_case(impl, c);
  }

  /* m or n = 0 is a no-op that touches nothing */
  float sentinel = 7.0f;
  dp_gemm_args g = {.dtype = DP_F32,
                    .m = 0,
                    .n = 4,
                    .k = 3,
                    .batch = 1,
                    .alpha = 1,
                    .beta = 0,
                    .a = NULL,
                    .lda = 3,
                    .b = NULL,
                    .ldb = 4,
                    .c = &sentinel,
                    .ldc = 4};
  CHECK(dp_sgemm_run(impl, &g) == 0 && sentinel == 7.0f);
  g.m = 4, g.n = 0;
  CHECK(dp_sgemm_run(impl, &g) == 0 && sentinel == 7.0f);
}

/* dp_cpu_gemm routes float32 through the selected implementation and agrees
 * with OpenBLAS. */
static void test_dispatch_matches_blas(void) {
  const int64_t m = 37, n = 70, k = 129;
  float *a = make(m, k, k, 1, 0, 0), *b = make(n, k, k, 1, 0, 0);
  float *c1 = calloc((size_t)(m * n), sizeof(float)), *c2 = calloc((size_t)(m * n), sizeof(float));
  dp_gemm_args g = {.dtype = DP_F32,
                    .trans_b = true,
                    .m = m,
                    .n = n,
                    .k = k,
                    .batch = 1,
                    .alpha = 1,
                    .beta = 0,
                    .a = a,
                    .lda = k,
                    .b = b,
                    .ldb = k,
                    .c = c1,
                    .ldc = n};
  CHECK(dp_cpu_gemm(&g) == 0);
  g.c = c2;
  CHECK(dp_cpu_gemm_blas(&g) == 0);
  for (int64_t i = 0; i < m * n; i++) CHECK_NEAR(c1[i], c2[i], 1e-4);
  free(a), free(b), free(c1), free(c2);
}

/* Calls big enough to split over threads: by rows of C', by columns, by
 * batch items, with alpha/beta and ld gaps; every part must land in place. */
static void test_threads(dp_sgemm_impl impl) {
  dp_sgemm_set_num_threads(3);
  CHECK(dp_sgemm_get_num_threads() == 3);
  run_case(impl, basic(64, 1024, 784, false, true));  /* swapped: 1024 rows of C' -> split rows */
  run_case(impl, basic(64, 1000, 100, false, false)); /* 1000 columns -> split columns */
  run_case(impl, basic(1000, 61, 70, true, false));
  gemm_case c = basic(130, 301, 150, true, true);
  c.alpha = 0.75, c.beta = -0.5, c.pad_a = 3, c.pad_b = 2, c.pad_c = 9;
  run_case(impl, c);
  c = basic(40, 50, 700, false, true); /* small items, many of them: split the batch */
  c.batch = 5, c.beta = 2;
  run_case(impl, c);
  c = basic(9, 13, 5, false, false); /* too small to split */
  c.batch = 2;
  run_case(impl, c);
  dp_sgemm_set_num_threads(1000); /* more than the pool holds (64): capped, every part still runs */
  run_case(impl, basic(1024, 256, 300, true, false));
  dp_sgemm_set_num_threads(1);
}

/* A child forked after the parent's pool started runs threaded GEMMs with
 * threads of its own (the copied pool has none behind it). */
static void test_fork_after_threads(dp_sgemm_impl impl) {
  dp_sgemm_set_num_threads(2);
  run_case(impl, basic(64, 1024, 100, false, false));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(60); /* a hang fails the test instead of stalling it */
    int before = test_failures;
    run_case(impl, basic(64, 1024, 100, false, false));
    _exit(test_failures == before ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  dp_sgemm_set_num_threads(1);
}

int main(void) {
  /* an invalid DDPLUA_GEMM is an error naming the variable and the choices */
  setenv("DDPLUA_GEMM", "fast", 1);
  dp_sgemm_impl impl;
  CHECK(dp_sgemm_get_impl(&impl) != 0);
  CHECK(strstr(dp_errmsg(), "DDPLUA_GEMM: 'fast' is not one of own, blas") != NULL);
  float x = 1, y = 2, z = 0;
  dp_gemm_args g1 = {.dtype = DP_F32,
                     .m = 1,
                     .n = 1,
                     .k = 1,
                     .batch = 1,
                     .alpha = 1,
                     .a = &x,
                     .lda = 1,
                     .b = &y,
                     .ldb = 1,
                     .c = &z,
                     .ldc = 1};
  CHECK(dp_cpu_gemm(&g1) != 0 && strstr(dp_errmsg(), "DDPLUA_GEMM") != NULL);
  /* choosing explicitly clears it; BLAS is always available */
  CHECK(dp_sgemm_set_impl(DP_SGEMM_BLAS) == 0);
  CHECK(dp_sgemm_get_impl(&impl) == 0 && impl == DP_SGEMM_BLAS);
  CHECK(dp_cpu_gemm(&g1) == 0 && z == 2.0f);

  int kernels = 0;
  const dp_sgemm_impl own[] = {DP_SGEMM_AVX512, DP_SGEMM_AVX2};
  for (int i = 0; i < 2; i++) {
    if (!dp_sgemm_cpu_supports(own[i])) {
      CHECK(dp_sgemm_set_impl(own[i]) != 0 && strstr(dp_errmsg(), dp_sgemm_impl_name(own[i])) != NULL);
      printf("%s micro-kernel: not supported by this CPU\n", dp_sgemm_impl_name(own[i]));
      continue;
    }
    int before = cases_run;
    test_impl(own[i]);
    test_threads(own[i]);
    test_fork_after_threads(own[i]);
    CHECK(dp_sgemm_set_impl(own[i]) == 0);
    test_dispatch_matches_blas();
    printf("%s micro-kernel: %d cases\n", dp_sgemm_impl_name(own[i]), cases_run - before);
    kernels++;
  }
  /* a CPU with neither kernel is served by OpenBLAS; on x86-64 build
   * machines at least AVX2 is expected, so say so if none ran */
  if (!kernels) printf("no own micro-kernel on this CPU: float32 GEMM uses OpenBLAS\n");
  TEST_DONE();
}
