/* A small parallel-for over the GEMM pool's threads (sgemm_pool.c), for
 * the big elementwise and row kernels: ranges of at least `grain` items,
 * one per thread of ddp.set_num_threads (default: cores / local ranks), the
 * first on the calling thread. Nested calls (from inside a part, or a GEMM
 * inside one) run serially on their thread. */
#ifndef DP_CPU_PARALLEL_H
#define DP_CPU_PARALLEL_H

#include <stdint.h>

typedef void (*dp_range_fn)(void *ctx, int64_t lo, int64_t hi);

/* fn(ctx, lo, hi) over [0, n) in contiguous ranges; returns when all are
 * done. Ranges start at multiples of `align` (>= 1: keeps vector loops on
 * whole vectors and cache lines apart between threads). */
void dp_cpu_parallel_for(int64_t n, int64_t grain, int64_t align, dp_range_fn fn, void *ctx);

/* Grains: items per part below which a thread does not pay for itself
 * (waking a parked thread costs a few microseconds). */
#define DP_GRAIN_MEMORY ((int64_t)1 << 16)  /* a pass over memory: 64K floats */
#define DP_GRAIN_COMPUTE ((int64_t)1 << 14) /* transcendental math per element */

#endif
