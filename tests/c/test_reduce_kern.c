/* The collectives' elementwise kernels: the fused two-rank pass
 * (dp_reduce_pair_inplace, what a 2-rank shared-memory all_reduce runs) must
 * give the bits of the general path (dp_reduce_n over both copies, then
 * dp_reduce_scale), for float32 and float64, sum and avg, power-of-two and
 * other divisors, odd lengths; ops and dtypes it does not cover must be
 * refused and leave the data alone. Inputs are random, so the sums round. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/reduce_kern.h"
#include "test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* xorshift64*, in [-1, 1) */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (double)((rng * 2685821657736338717ull) >> 11) / 4503599627370496.0 - 1.0;
}

static void fill(void *p, size_t n, dp_dtype dt) {
  for (size_t i = 0; i < n; i++) {
    double v = uniform() * 1000.0;
    if (dt == DP_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
  }
}

/* general path into ref, fused path in a and b; all three must agree bitwise */
static void check_pair(dp_dtype dt, dp_redop op, int div, size_t n) {
  size_t es = dp_dtype_size(dt);
  char *a = malloc(n * es), *b = malloc(n * es), *ref = malloc(n * es);
  fill(a, n, dt);
  fill(b, n, dt);
  const void *src[2] = {a, b};
  dp_reduce_n(ref, src, 2, n, dt, op);
  if (div) dp_reduce_scale(ref, n, dt, div);
  CHECK(dp_reduce_pair_inplace(a, b, n, dt, op, div));
  if (memcmp(a, ref, n * es) != 0 || memcmp(b, ref, n * es) != 0) {
    fprintf(stderr, "pair %s %s div=%d n=%zu differs from reduce_n + scale\n", dp_dtype_name(dt), dp_redop_name(op),
            div, n);
    test_failures++;
  }
  free(a);
  free(b);
  free(ref);
}

static void check_refused(dp_dtype dt, dp_redop op) {
  int64_t a[5] = {1, 2, 3, 4, 5}, b[5] = {6, 7, 8, 9, 10}, a0[5], b0[5];
  memcpy(a0, a, sizeof a);
  memcpy(b0, b, sizeof b);
  size_t n = 5 * sizeof(int64_t) / dp_dtype_size(dt);
  CHECK(!dp_reduce_pair_inplace(a, b, n, dt, op, 0));
  CHECK(memcmp(a, a0, sizeof a) == 0 && memcmp(b, b0, sizeof b) == 0);
}

int main(void) {
  const size_t sizes[] = {1, 15, 16, 17, 1023, 100003};
  const int divs[] = {0, 2, 3, 4, 8};
  for (int s = 0; s < 6; s++)
    for (int d = 0; d < 5; d++) {
      check_pair(DP_F32, DP_RED_AVG, divs[d], sizes[s]);
      check_pair(DP_F64, DP_RED_AVG, divs[d], sizes[s]);
    }
  for (int s = 0; s < 6; s++) {
    check_pair(DP_F32, DP_RED_SUM, 0, sizes[s]);
    check_pair(DP_F64, DP_RED_SUM, 0, sizes[s]);
  }
  /* a spot check that the fused pass computes the average at all */
  float x[3] = {1.0f, -2.0f, 0.5f}, y[3] = {3.0f, 2.0f, 0.25f};
  CHECK(dp_reduce_pair_inplace(x, y, 3, DP_F32, DP_RED_AVG, 2));
  CHECK(x[0] == 2.0f && x[1] == 0.0f && x[2] == 0.375f && y[0] == 2.0f && y[1] == 0.0f && y[2] == 0.375f);
  check_refused(DP_I64, DP_RED_SUM);
  check_refused(DP_F32, DP_RED_MAX);
  check_refused(DP_F64, DP_RED_MIN);
  check_refused(DP_F32, DP_RED_PROD);
  TEST_DONE();
}
