/* The bfloat16 products of the CPU attention kernel (cpu_attention.c), on
 * AMX tiles (cpu_attn_amx.c) or with AVX512-BF16 dot products
 * (cpu_attn_dot.c), and the helpers both share (cpu_attn_bf16.c).
 *
 * With bfloat16 q, k, v (autocast's attention) the products of scores and
 * weights (S = Q K^T and O += P V forward; S again and dZ = dO V^T
 * backward) multiply bfloat16 operands, as PyTorch's bfloat16 matmuls do:
 * each product exact in float32, the sums in float32, P rounded to bfloat16
 * (nearest even) for P V; the gradients' products (dQ, dK, dV) likewise, with
 * dS and P rounded to bfloat16 (dS scaled first). Head dims must be
 * multiples of 32 (one tile step). Both kernels take the operands in the
 * same layout (16 rows of 32 bfloat16, or pair rows: word j of pair row p
 * holds B[2p][j] in its low half and B[2p + 1][j] in its high half); they
 * differ in the order of their float32 sums, so their bits differ within
 * float32 rounding, and both flush bfloat16 subnormals (as tdpbf16ps and
 * vdpbf16ps do). */
#ifndef DP_CPU_ATTN_BF16_H
#define DP_CPU_ATTN_BF16_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
  const char *name; /* "amx", "avx512_bf16" */
  /* around a thread's calls below (the AMX tile configuration; nothing for the dot products) */
  void (*begin)(void);
  void (*end)(void);
  /* S[r * lds + j] = scale * sum_e a[r * as + e] * B(e, j) for r < rows (<= 16), j < w rounded up to 16 (S has
   * room): a bfloat16 rows, B as pair rows bt[(e / 2) * ldb + j] (K's rows transposed 32 bits at a time); S's
   * rows past `rows` up to 16 are written with zeros; pad: 16 x E bfloat16 of scratch. E % 32 == 0. */
  void (*scores)(int64_t rows, int64_t w, int64_t E, const uint16_t *a, int64_t as, const uint32_t *bt, int64_t ldb,
                 float *S, int64_t lds, float scale, uint16_t *pad);
  /* C[r * ldc + n] (+)= sum_p dot(A[r * lda + p], B[p * ldb + n]) for 16 rows, p < K2 (a multiple of 16), n < N
   * (a multiple of 16): A's and B's words are pairs of bfloat16 along the reduced dimension, low half first */
  void (*mm)(int64_t K2, int64_t N, const uint32_t *A, int64_t lda, const uint32_t *B, int64_t ldb, float *C,
             int64_t ldc, bool accumulate);
} dp_attn_bf16_kernel;

extern const dp_attn_bf16_kernel dp_attn_bf16_amx; /* cpu_attn_amx.c */
extern const dp_attn_bf16_kernel dp_attn_bf16_dot; /* cpu_attn_dot.c */

/* whether this CPU runs AMX-BF16 tiles (asks Linux for the tile state once) / AVX512-BF16 with the AVX-512 tiles */
bool dp_attn_amx_supported(void);
bool dp_attn_dot_supported(void);

/* C[r * ldc + n] (+)= sum_j bf16(alpha * P[r * ldp + j]) * V(j, n) for r < rows (<= 16), j < w, n < N, with k's
 * mm: V as pair rows vv[(j / 2) * N + n] (dp_attn_bf16_pair_rows, zero past the keys up to w rounded up to 32);
 * pb: 16 x 128 bfloat16 and tmp: 16 x N floats of scratch. N % 16 == 0, w <= 128. */
void dp_attn_bf16_pv(const dp_attn_bf16_kernel *k, int64_t rows, int64_t w, int64_t N, const float *P, int64_t ldp,
                     float alpha, const uint32_t *vv, float *C, int64_t ldc, bool accumulate, uint16_t *pb, float *tmp);
/* dst[p * cols + c] = src[2p][c] | src[2p + 1][c] << 16 for p < prows (rows past `rows` zero), cols % 32 == 0;
 * dp_attn_bf16_pair_f32 from float32 rows, each value scaled by alpha and rounded to bfloat16 */
void dp_attn_bf16_pair_f32(const float *src, int64_t lds, int64_t rows, int64_t prows, int64_t cols, float alpha,
                           uint32_t *dst);
void dp_attn_bf16_pair_rows(const uint16_t *src, int64_t lds, int64_t rows, int64_t prows, int64_t cols, uint32_t *dst);

#endif
