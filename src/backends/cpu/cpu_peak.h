/* The machine's ceilings the benchmarks relate ddplua's figures to: the
 * float32 FMA peak (what a GEMM-bound step could reach at best) and libc
 * memcpy's bandwidth (what a memory-bound kernel could reach at best),
 * measured on the threads ddplua computes on, not read from a spec sheet:
 * the project's machines are shared virtual machines whose CPU model
 * changes, and their clocks with the load. */
#ifndef DP_CPU_PEAK_H
#define DP_CPU_PEAK_H

#include <stddef.h>

/* Float32 FMA throughput in GFLOP/s (2 per lane per FMA) of `threads`
 * threads of the GEMM pool (at most dp_sgemm_get_num_threads()), each
 * running independent FMA chains of the widest vectors this CPU has
 * (AVX-512, else AVX2, else scalar) for about `seconds`; the best of 5
 * trials. The vector ISA used is written to *isa when isa is not NULL. */
double dp_cpu_fma_peak(int threads, double seconds, const char **isa);

/* libc memcpy on one thread between two buffers of `bytes` (rounded up to
 * 4 KiB, pages touched first): bytes read + bytes written per second in
 * GB/s, the best of `reps` copies; -1 when the buffers cannot be had. */
double dp_cpu_memcpy_gbs(size_t bytes, int reps);

#endif
