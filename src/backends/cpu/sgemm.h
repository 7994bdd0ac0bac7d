/* ddplua's own float32 GEMM for x86-64 (the path dp_cpu_gemm takes for
 * float32).
 *
 * Why not OpenBLAS alone: OpenBLAS picks its kernels from OPENBLAS_CORETYPE
 * when the environment sets it (these machines set Haswell, i.e. AVX2, on
 * AVX-512 CPUs), and we respect the user's environment for OpenBLAS. Our
 * GEMM picks its micro-kernel from the CPU's own features, as oneDNN and MKL
 * do: AVX-512 when the CPU has it, else AVX2+FMA, else OpenBLAS.
 *
 * DDPLUA_GEMM selects the implementation (read once, at the first float32
 * GEMM):
 *   own     (default) the best micro-kernel this CPU supports, OpenBLAS on
 *           CPUs with neither AVX-512 nor AVX2+FMA
 *   blas    OpenBLAS for everything (the reference path)
 *   avx512 / avx2   one micro-kernel explicitly (an error if the CPU lacks it)
 * float64 always goes to OpenBLAS.
 *
 * Threads: by default this process's cores over the ranks on its node
 * (dp_sgemm_auto_threads: one each when ranks fill the cores, all of them
 * for a single process), or what dp_sgemm_set_num_threads set
 * (ddp.set_num_threads). A call splits its rows over them when the problem
 * is big enough to pay for them; cpu_parallel.h's loops use the same count. */
#ifndef DP_SGEMM_H
#define DP_SGEMM_H

#include <stdbool.h>

#include "backends/backend.h"

typedef enum { DP_SGEMM_BLAS, DP_SGEMM_AVX2, DP_SGEMM_AVX512 } dp_sgemm_impl;

/* "blas", "avx2", "avx512" */
const char *dp_sgemm_impl_name(dp_sgemm_impl impl);
/* Whether this CPU can run impl (BLAS: always). */
bool dp_sgemm_cpu_supports(dp_sgemm_impl impl);
/* "own" (the best this CPU supports), "blas", "avx512", "avx2" -> *impl;
 * -1 (with dp_error) for another name or a kernel the CPU lacks. */
int dp_sgemm_parse_impl(const char *name, dp_sgemm_impl *impl);
/* The implementation float32 GEMMs use now: from DDPLUA_GEMM on first use,
 * or what dp_sgemm_set_impl chose. -1 (with dp_error) for a DDPLUA_GEMM
 * value that is not own|blas|avx512|avx2 or names a kernel the CPU lacks. */
int dp_sgemm_get_impl(dp_sgemm_impl *impl);
/* Overrides DDPLUA_GEMM for this process (tests, benchmarks); -1 if the CPU
 * cannot run impl. */
int dp_sgemm_set_impl(dp_sgemm_impl impl);

/* Threads one call may use (>= 1); the automatic count until set. */
void dp_sgemm_set_num_threads(int n);
int dp_sgemm_get_num_threads(void);
/* cores of this process / LOCAL_WORLD_SIZE, at least 1 */
int dp_sgemm_auto_threads(void);

/* g->dtype must be DP_F32; impl AVX2 or AVX512 (supported by the CPU).
 * Any sizes (64-bit), strides and alpha/beta; beta == 0 never reads C. */
int dp_sgemm_run(dp_sgemm_impl impl, const dp_gemm_args *g);
/* The same, then C[b][i][j] += bias[j] (n floats) for every batch item,
 * added in the store of each finished tile of C instead of a pass of its
 * own over C (linear's bias: matmul.c through the backend's gemm_bias);
 * the result is that of dp_sgemm_run followed by the add. */
int dp_sgemm_run_bias(dp_sgemm_impl impl, const dp_gemm_args *g, const float *bias);

#endif
