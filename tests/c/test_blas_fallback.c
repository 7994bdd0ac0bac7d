/* The CPU GEMM without a BLAS library (DDPLUA_BLAS=none, as on a machine
 * without OpenBLAS): float64 and the "blas" float32 path keep dp_gemm_args'
 * contract (transposes, leading dimensions, batch strides, alpha and beta,
 * beta == 0 ignoring NaN in C, k == 0) through the plain loop, checked
 * against a float64 reference written out here; dp_blas_info says why, and
 * the thread count is remembered. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/error.h"
#include "test_util.h"

static double lcg(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (double)(*s >> 8) / 16777216.0 * 2.0 - 1.0;
}

static void check_case(dp_dtype dt, bool ta, bool tb, double alpha, double beta, unsigned seed) {
  const int64_t m = 7, n = 5, k = 9, batch = 3, pad = 2;
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  int64_t rows_a = ta ? k : m, rows_b = tb ? n : k;
  int64_t sa = rows_a * lda + 3, sb = rows_b * ldb + 1, sc = m * ldc + 4;
  double *A = calloc((size_t)(sa * batch), sizeof(double)), *B = calloc((size_t)(sb * batch), sizeof(double));
  double *C0 = calloc((size_t)(sc * batch), sizeof(double));
  for (int64_t i = 0; i < sa * batch; i++) A[i] = lcg(&seed);
  for (int64_t i = 0; i < sb * batch; i++) B[i] = lcg(&seed);
  for (int64_t i = 0; i < sc * batch; i++) C0[i] = beta == 0.0 && i % 3 == 0 ? NAN : lcg(&seed);
  size_t es = dp_dtype_size(dt);
  char *a = malloc((size_t)(sa * batch) * es), *b = malloc((size_t)(sb * batch) * es);
  char *c = malloc((size_t)(sc * batch) * es);
  for (int64_t i = 0; i < sa * batch; i++) dp_store_d(a + (size_t)i * es, dt, A[i]);
  for (int64_t i = 0; i < sb * batch; i++) dp_store_d(b + (size_t)i * es, dt, B[i]);
  for (int64_t i = 0; i < sc * batch; i++) dp_store_d(c + (size_t)i * es, dt, C0[i]);
  char *before = malloc((size_t)(sc * batch) * es); /* C as the dtype holds it */
  memcpy(before, c, (size_t)(sc * batch) * es);
  dp_gemm_args g = {.dtype = dt,
                    .trans_a = ta,
                    .trans_b = tb,
                    .m = m,
                    .n = n,
                    .k = k,
                    .batch = batch,
                    .alpha = alpha,
                    .beta = beta,
                    .a = a,
                    .lda = lda,
                    .stride_a = sa,
                    .b = b,
                    .ldb = ldb,
                    .stride_b = sb,
                    .c = c,
                    .ldc = ldc,
                    .stride_c = sc};
  CHECK(dp_cpu_gemm_blas(&g) == 0);
  double worst = 0, tol = dt == DP_F64 ? 1e-13 : 1e-5;
  for (int64_t q = 0; q < batch; q++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t t = 0; t < k; t++) {
          /* the inputs as the dtype holds them */
          double x = dp_load_d(a + (size_t)(q * sa + (ta ? t * lda + i : i * lda + t)) * es, dt);
          double y = dp_load_d(b + (size_t)(q * sb + (tb ? j * ldb + t : t * ldb + j)) * es, dt);
          acc += x * y;
        }
        double old = dp_load_d(before + (size_t)(q * sc + i * ldc + j) * es, dt);
        double want = alpha * acc + (beta == 0.0 ? 0.0 : beta * old);
        double got = dp_load_d(c + (size_t)(q * sc + i * ldc + j) * es, dt);
        double d = fabs(got - want) / (1 + fabs(want));
        if (!(d <= worst)) worst = d; /* NaN makes it NaN */
      }
  if (!(worst <= tol))
    fprintf(stderr, "%s ta=%d tb=%d alpha=%g beta=%g: worst relative difference %g\n", dp_dtype_name(dt), ta, tb, alpha,
            beta, worst);
  CHECK(worst <= tol);
  /* the padding between rows and batches is untouched */
  for (int64_t q = 0; q < batch; q++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = n; j < ldc && i * ldc + j < sc; j++) {
        double got = dp_load_d(c + (size_t)(q * sc + i * ldc + j) * es, dt);
        double old = dp_load_d(before + (size_t)(q * sc + i * ldc + j) * es, dt);
        CHECK(got == old || (isnan(got) && isnan(old)));
      }
  free(A), free(B), free(C0), free(a), free(b), free(c), free(before);
}

int main(void) {
  setenv("DDPLUA_BLAS", "none", 1); /* read once, at the first BLAS use below */
  const char *info = dp_blas_info();
  CHECK(strstr(info, "no BLAS library") != NULL && strstr(info, "plain loop") != NULL);
  unsigned seed = 1;
  dp_dtype dts[2] = {DP_F64, DP_F32};
  for (int d = 0; d < 2; d++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        check_case(dts[d], ta, tb, 1.0, 0.0, seed++);
        check_case(dts[d], ta, tb, -0.5, 2.0, seed++);
      }
  /* k == 0: C = beta * C */
  double c[2] = {3.0, NAN}, dummy = 0;
  dp_gemm_args g = {.dtype = DP_F64,
                    .m = 1,
                    .n = 2,
                    .k = 0,
                    .batch = 1,
                    .alpha = 1,
                    .beta = 0.5,
                    .a = &dummy,
                    .lda = 1,
                    .b = &dummy,
                    .ldb = 2,
                    .c = c,
                    .ldc = 2};
  CHECK(dp_cpu_gemm_blas(&g) == 0 && c[0] == 1.5 && isnan(c[1]));
  g.beta = 0.0;
  CHECK(dp_cpu_gemm_blas(&g) == 0 && c[0] == 0.0 && c[1] == 0.0);
  /* threads: remembered (nothing to hand them to) */
  CHECK(dp_blas_set_num_threads(3) == 0 && dp_blas_get_num_threads() == 3);
  CHECK(dp_blas_set_num_threads(1) == 0 && dp_blas_get_num_threads() == 1);
  /* integer dtypes are still refused, naming the dtype */
  g.dtype = DP_I64;
  CHECK(dp_cpu_gemm_blas(&g) != 0 && strstr(dp_errmsg(), "int64") != NULL);
  TEST_DONE();
}
