/* The collectives' elementwise kernels: the fused two-rank pass
 * (dp_reduce_pair_inplace, what a 2-rank shared-memory all_reduce runs) must
 * give the bits of the general path (dp_reduce_n over both copies, then
 * dp_reduce_scale), for float32 and float64, sum and avg, power-of-two and
 * other divisors, odd lengths; ops and dtypes it does not cover must be
 * refused and leave the data alone. Inputs are random, so the sums round.
 * The staged form (dp_reduce_pair_to) gives the same bits with plain and
 * with streamed stores at any alignment, dp_cpu_copy_streamed copies exactly,
 * and dp_stage_pick/learn try both kinds, keep the faster, follow a change
 * and honour DDPLUA_SHM_STAGE. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
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
  int64_t slot[5] = {0};
  for (int k = 0; k < 2; k++) CHECK(!dp_reduce_pair_to(a, slot, b, n, dt, op, 0, (dp_stage_kind)k));
  CHECK(memcmp(a, a0, sizeof a) == 0 && memcmp(b, b0, sizeof b) == 0 && slot[0] == 0 && slot[4] == 0);
}

/* staged pair: mine and slot both get reduce_n + scale's bits, for either kind, with mine, slot and peer
 * starting off (1 element off a cache line, or aligned) */
static void check_pair_to(dp_dtype dt, int div, size_t n, size_t skew, dp_stage_kind kind) {
  size_t es = dp_dtype_size(dt), cap = ((n + 16) * es + 63) / 64 * 64; /* aligned_alloc: a multiple of 64 */
  char *mine = aligned_alloc(64, cap), *slot = aligned_alloc(64, cap), *peer = aligned_alloc(64, cap);
  char *ref = malloc(n * es + 1);
  char *m = mine + skew * es, *s = slot + (skew ? 16 - skew : 0) * es, *p = peer + skew * es;
  fill(m, n, dt);
  fill(p, n, dt);
  const void *src[2] = {m, p};
  dp_reduce_n(ref, src, 2, n, dt, DP_RED_AVG);
  if (div) dp_reduce_scale(ref, n, dt, div);
  CHECK(dp_reduce_pair_to(m, s, p, n, dt, DP_RED_AVG, div, kind));
  if (memcmp(m, ref, n * es) != 0 || memcmp(s, ref, n * es) != 0) {
    fprintf(stderr, "pair_to %s div=%d n=%zu skew=%zu kind=%d differs from reduce_n + scale\n", dp_dtype_name(dt), div,
            n, skew, (int)kind);
    test_failures++;
  }
  free(mine);
  free(slot);
  free(peer);
  free(ref);
}

static void check_copy_streamed(size_t n, size_t skew) {
  size_t cap = (n + 128 + 63) / 64 * 64;
  unsigned char *a = malloc(n + 64), *b = aligned_alloc(64, cap);
  for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + 3);
  memset(b, 0xEE, n + 128);
  dp_cpu_copy_streamed(b + skew, a, n);
  CHECK(memcmp(b + skew, a, n) == 0);
  size_t bad = 0; /* nothing around the destination touched */
  for (size_t i = 0; i < skew; i++) bad += b[i] != 0xEE;
  for (size_t i = skew + n; i < n + 128; i++) bad += b[i] != 0xEE;
  CHECK(bad == 0);
  free(a);
  free(b);
}

static void check_stage_choice(void) {
  unsetenv("DDPLUA_SHM_STAGE");
  dp_stage_stats st;
  CHECK(dp_stage_init(&st) == 0 && st.fixed == -1);
  size_t big = (size_t)100 << 20;
  CHECK(dp_stage_pick(&st, 1000) == DP_STAGE_PLAIN); /* small ops are not timed */
  CHECK(dp_stage_pick(&st, big) == DP_STAGE_PLAIN);  /* each kind once first */
  dp_stage_learn(&st, big, DP_STAGE_PLAIN, 0.010);
  CHECK(dp_stage_pick(&st, big) == DP_STAGE_STREAMED);
  dp_stage_learn(&st, big, DP_STAGE_STREAMED, 0.020);
  int plain = 0, streamed = 0; /* plain is faster: kept, streamed tried on every 16th op */
  for (int i = 0; i < 64; i++) {
    dp_stage_kind k = dp_stage_pick(&st, big);
    plain += k == DP_STAGE_PLAIN;
    streamed += k == DP_STAGE_STREAMED;
    dp_stage_learn(&st, big, k, k == DP_STAGE_PLAIN ? 0.010 : 0.020);
  }
  CHECK(plain == 60 && streamed == 4);
  /* the machine changes: plain now takes 3x as long; within two rounds of exploring streamed is kept */
  int switched_at = -1;
  for (int i = 0; i < 48 && switched_at < 0; i++) {
    dp_stage_kind k = dp_stage_pick(&st, big);
    dp_stage_learn(&st, big, k, k == DP_STAGE_PLAIN ? 0.030 : 0.012);
    if (k == DP_STAGE_STREAMED && dp_stage_pick(&st, big) == DP_STAGE_STREAMED) switched_at = i;
  }
  CHECK(switched_at >= 0 && switched_at < 32);
  /* another size class learns on its own: 1 MiB starts with plain again */
  CHECK(dp_stage_pick(&st, (size_t)1 << 20) == DP_STAGE_PLAIN);
  setenv("DDPLUA_SHM_STAGE", "streamed", 1);
  CHECK(dp_stage_init(&st) == 0);
  CHECK(dp_stage_pick(&st, 1000) == DP_STAGE_STREAMED && dp_stage_pick(&st, big) == DP_STAGE_STREAMED);
  setenv("DDPLUA_SHM_STAGE", "plain", 1);
  CHECK(dp_stage_init(&st) == 0 && dp_stage_pick(&st, big) == DP_STAGE_PLAIN);
  setenv("DDPLUA_SHM_STAGE", "nt", 1);
  CHECK(dp_stage_init(&st) == -1 && st.fixed == -1);
  CHECK(strstr(dp_errmsg(), "DDPLUA_SHM_STAGE is 'nt'; expected plain, streamed or auto") != NULL);
  unsetenv("DDPLUA_SHM_STAGE");
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
  const size_t lens[] = {0, 1, 15, 16, 17, 33, 1023, 100003};
  const char *isas[] = {"avx512", "avx2", "base"}; /* the streamed stores' widths, and none */
  for (int isa = 0; isa < 3; isa++) {
    if (dp_cpu_vec_set(isas[isa]) != 0) {
      printf("test_reduce_kern: no %s on this CPU; its streamed stores are not run\n", isas[isa]);
      continue;
    }
    for (int s = 0; s < 8; s++)
      for (int d = 0; d < 5; d++)
        for (size_t skew = 0; skew < 2; skew++)
          for (int k = 0; k < 2; k++) {
            check_pair_to(DP_F32, divs[d], lens[s], skew, (dp_stage_kind)k);
            check_pair_to(DP_F64, divs[d], lens[s], skew, (dp_stage_kind)k);
          }
    for (int s = 0; s < 8; s++)
      for (size_t skew = 0; skew < 64; skew += 7) check_copy_streamed(lens[s] * 4 + skew % 5, skew);
  }
  dp_cpu_vec_set("auto");
  check_stage_choice();
  check_refused(DP_I64, DP_RED_SUM);
  check_refused(DP_F32, DP_RED_MAX);
  check_refused(DP_F64, DP_RED_MIN);
  check_refused(DP_F32, DP_RED_PROD);
  TEST_DONE();
}
