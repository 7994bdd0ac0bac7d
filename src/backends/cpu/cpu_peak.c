/* The FMA peak and memcpy probes (cpu_peak.h). The FMA loops keep 16
 * independent accumulators: with 2 FMA units of latency 4 a core needs at
 * least 8 in flight to issue one per unit per cycle; 16 leaves margin for
 * the loop's own instructions. x * m + a with m just below 1 and a small
 * keeps every value normal and bounded for any trip count. */
#include "backends/cpu/cpu_peak.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { CHAINS = 16 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Each returns the flops done in `iters` trips; *sink keeps the result
 * live so the loop cannot be dropped. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double fma_avx512(int64_t iters, float *sink) {
  __m512 acc[CHAINS];
  const __m512 m = _mm512_set1_ps(0.9999999f), a = _mm512_set1_ps(1e-7f);
  for (int k = 0; k < CHAINS; k++) acc[k] = _mm512_set1_ps((float)k);
  for (int64_t i = 0; i < iters; i++)
    for (int k = 0; k < CHAINS; k++) acc[k] = _mm512_fmadd_ps(acc[k], m, a);
  __m512 s = acc[0];
  for (int k = 1; k < CHAINS; k++) s = _mm512_add_ps(s, acc[k]);
  *sink = _mm512_reduce_add_ps(s);
  return (double)iters * CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_avx2(int64_t iters, float *sink) {
  __m256 acc[CHAINS];
  const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  for (int k = 0; k < CHAINS; k++) acc[k] = _mm256_set1_ps((float)k);
  for (int64_t i = 0; i < iters; i++)
    for (int k = 0; k < CHAINS; k++) acc[k] = _mm256_fmadd_ps(acc[k], m, a);
  __m256 s = acc[0];
  for (int k = 1; k < CHAINS; k++) s = _mm256_add_ps(s, acc[k]);
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  *sink = lanes[0] + lanes[7];
  return (double)iters * CHAINS * 8 * 2;
}
#endif

static double fma_scalar(int64_t iters, float *sink) {
  float acc[CHAINS];
  for (int k = 0; k < CHAINS; k++) acc[k] = (float)k;
  for (int64_t i = 0; i < iters; i++)
    for (int k = 0; k < CHAINS; k++) acc[k] = acc[k] * 0.9999999f + 1e-7f;
  float s = 0;
  for (int k = 0; k < CHAINS; k++) s += acc[k];
  *sink = s;
  return (double)iters * CHAINS * 2;
}

typedef double (*fma_fn)(int64_t, float *);

static fma_fn pick(const char **isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    *isa = "avx512";
    return fma_avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *isa = "avx2";
    return fma_avx2;
  }
#endif
  *isa = "scalar";
  return fma_scalar;
}

typedef struct {
  fma_fn fn;
  int64_t iters;
  double flops[DP_SG_MAX_THREADS], seconds[DP_SG_MAX_THREADS];
  float sink[DP_SG_MAX_THREADS];
} fma_job;

static void fma_part(void *vctx, int part) {
  fma_job *j = vctx;
  double t0 = now();
  j->flops[part] = j->fn(j->iters, &j->sink[part]);
  j->seconds[part] = now() - t0;
}

double dp_cpu_fma_peak(int threads, double seconds, const char **isa) {
  const char *name = NULL;
  fma_job *j = calloc(1, sizeof *j);
  if (!j) return -1;
  j->fn = pick(&name);
  if (isa) *isa = name;
  int most = dp_sgemm_get_num_threads();
  if (threads < 1) threads = 1;
  if (threads > most) threads = most;
  if (threads > DP_SG_MAX_THREADS) threads = DP_SG_MAX_THREADS;
  /* size a trip count for `seconds` from a short calibration run */
  j->iters = 1 << 14;
  for (;;) {
    fma_part(j, 0);
    if (j->seconds[0] > 0.01 || j->iters > ((int64_t)1 << 40)) break;
    j->iters *= 4;
  }
  double per_trial = seconds / 5 > 0.01 ? seconds / 5 : 0.01;
  j->iters = (int64_t)((double)j->iters * per_trial / (j->seconds[0] > 0 ? j->seconds[0] : 1e-3)) + 1;
  double best = 0;
  for (int trial = 0; trial < 5; trial++) {
    if (threads > 1) dp_sg_parallel(threads, fma_part, j);
    else fma_part(j, 0);
    /* the rate of the whole group: flops over the slowest thread's time */
    double flops = 0, slowest = 0;
    for (int t = 0; t < threads; t++) {
      flops += j->flops[t];
      if (j->seconds[t] > slowest) slowest = j->seconds[t];
    }
    if (slowest > 0 && flops / slowest > best) best = flops / slowest;
  }
  free(j);
  return best / 1e9;
}

double dp_cpu_memcpy_gbs(size_t bytes, int reps) {
  bytes = (bytes + 4095) & ~(size_t)4095;
  if (bytes == 0 || reps < 1) return -1;
  char *a = aligned_alloc(4096, bytes), *b = aligned_alloc(4096, bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return -1;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 0;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    memcpy(b, a, bytes);
    double dt = now() - t0;
    /* read the copy back so the compiler keeps it */
    if (b[bytes / 2] != 1) best = -1;
    if (best >= 0 && dt > 0 && 2.0 * (double)bytes / dt > best) best = 2.0 * (double)bytes / dt;
  }
  free(a);
  free(b);
  return best < 0 ? -1 : best / 1e9;
}
