/* dp_cpu_parallel_for on the GEMM pool (cpu_parallel.h). */
#include "backends/cpu/cpu_parallel.h"

#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_kernels.h"

typedef struct {
  dp_range_fn fn;
  void *ctx;
  int64_t n, align;
  int parts;
} range_job;

static void run_part(void *vctx, int part) {
  range_job *j = vctx;
  int64_t units = (j->n + j->align - 1) / j->align;
  int64_t lo = units * part / j->parts * j->align, hi = units * (part + 1) / j->parts * j->align;
  if (hi > j->n) hi = j->n;
  if (lo < hi) j->fn(j->ctx, lo, hi);
}

void dp_cpu_parallel_for(int64_t n, int64_t grain, int64_t align, dp_range_fn fn, void *ctx) {
  if (n <= 0) return;
  int threads = dp_sgemm_get_num_threads();
  if (threads > DP_SG_MAX_THREADS) threads = DP_SG_MAX_THREADS;
  int64_t by_work = grain > 0 ? n / grain : n;
  int parts = by_work < threads ? (int)by_work : threads;
  if (parts <= 1 || dp_sg_in_parallel()) {
    fn(ctx, 0, n);
    return;
  }
  range_job j = {fn, ctx, n, align < 1 ? 1 : align, parts};
  dp_sg_parallel(parts, run_part, &j);
}
