/* Helpers of the CPU attention kernel (cpu_attention.c) kept apart from its
 * tiles: the staging of bfloat16 operands through float32 buffers, the
 * rows' D = rowsum(dO O) of the backward, and the float64 reference path.
 *
 * Staging: cpu_attention.c attends bfloat16 q, k, v (and dO) by widening
 * the rows one task reads into small float32 buffers, running the float32
 * tiles on them, and narrowing what it writes (O, dQ, dK, dV) once, so the
 * result is bit for bit float32 attention of the widened operands rounded
 * to bfloat16, with no whole-tensor casts around the kernel. */
#ifndef DP_CPU_ATTENTION_STAGE_H
#define DP_CPU_ATTENTION_STAGE_H

#include <stdint.h>

#include "backends/backend.h"

/* dst[r * ldd + c] = src[r * lds + c] (r < rows, c < cols) widened to
 * float32: src is bfloat16 (exact) or float32 (copied). isa: 2 AVX-512,
 * 1 AVX2, 0 plain (the loops compiled for it; the values do not depend
 * on it). */
void dp_attn_widen(int isa, const void *src, dp_dtype dt, int64_t lds, int64_t rows, int64_t cols, float *dst,
                   int64_t ldd);
/* dst[r * ldd + c] = src[r * lds + c] narrowed to dt: bfloat16 rounds to
 * nearest even as tensor/half.h's dp_f32_to_bf16 (NaN stays a quiet NaN),
 * float32 copies. */
void dp_attn_narrow(int isa, const float *src, int64_t lds, int64_t rows, int64_t cols, void *dst, dp_dtype dt,
                    int64_t ldd);
/* D[i] = sum over e < Ev of go[i * gs + e] * o[i * os + e] for i < L, each row's dot product rounded as the tiles'
 * GEMM kernel of the same isa rounds dZ = dO V^T's (see the definition) */
void dp_attn_rowdot(int isa, const float *go, int64_t gs, const float *o, int64_t os, int64_t L, int64_t Ev, float *D);

/* cpu_attention_ref.c: the row-at-a-time float64 path (any dtypes, through dp_load_d / dp_store_d), the same
 * algorithm without tiles, which the float32 tiles are tested against */
int dp_attn_ref_forward(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a);
int dp_attn_ref_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a);

#endif
