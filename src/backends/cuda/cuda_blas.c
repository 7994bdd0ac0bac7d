/* GEMM through cuBLAS (cublasGemmStridedBatchedEx), one handle per device
 * bound to its compute stream.
 *
 * The runtime's matrices are row-major and cuBLAS's column-major, so C =
 * op(A) op(B) is computed as C^T = op(B)^T op(A)^T: a row-major matrix read
 * column-major is its transpose, which swaps the operands and keeps each
 * one's transpose flag. float32 accumulates in float32 (TF32 tensor cores
 * when the "tf32" option is on: PyTorch's allow_tf32), float64 in float64,
 * bfloat16 and float16 inputs in float32. */
#include <cublas_v2.h>
#include <limits.h>

#include "backends/cuda/cuda_host.h"

static cublasHandle_t handles[DP_CU_MAXDEV];
static pthread_mutex_t handle_mu = PTHREAD_MUTEX_INITIALIZER;

static cublasHandle_t handle_for(const dp_cu_ctx *c) {
  pthread_mutex_lock(&handle_mu);
  cublasHandle_t h = handles[c->device];
  if (!h) {
    cublasStatus_t st = cublasCreate(&h);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetStream(h, c->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
      dp_cu_error("matmul: cuBLAS could not start on cuda:%d: %s", c->device, cublasGetStatusString(st));
      if (h) cublasDestroy(h);
      h = NULL;
    }
    handles[c->device] = h;
  }
  pthread_mutex_unlock(&handle_mu);
  return h;
}

int dp_cu_gemm(const dp_gemm_args *g) {
  const dp_cu_ctx *c = dp_cu_enter(g->device);
  if (!c) return -1;
  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (g->dtype) {
  case DP_F32:
    type = CUDA_R_32F;
    compute = dp_cu_opt_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    break;
  case DP_F64: type = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F; break;
  case DP_BF16: type = CUDA_R_16BF, compute = CUBLAS_COMPUTE_32F; break;
  case DP_F16: type = CUDA_R_16F, compute = CUBLAS_COMPUTE_32F; break;
  default:
    return dp_cu_error("matmul on cuda supports float32, float64, bfloat16 and float16, got %s",
                       dp_cu_dtype_name(g->dtype));
  }
  if (g->m == 0 || g->n == 0 || g->batch == 0) return 0;
  if (g->k == 0) /* C = beta * C: cuBLAS's k == 0 handling is not documented, so do it here */
    return dp_cu_scale_matrix(c, g->c, g->dtype, g->batch, g->m, g->n, g->ldc, g->stride_c, g->beta);
  if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX || g->lda > INT_MAX || g->ldb > INT_MAX || g->ldc > INT_MAX ||
      g->batch > INT_MAX)
    return dp_cu_error("matmul dimensions exceed cuBLAS's 32-bit limit (m=%lld, n=%lld, k=%lld, batch=%lld)",
                       (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch);
  cublasHandle_t h = handle_for(c);
  if (!h) return -1;
  double alpha_d = g->alpha, beta_d = g->beta;
  float alpha_f = (float)g->alpha, beta_f = (float)g->beta;
  const void *alpha = g->dtype == DP_F64 ? (const void *)&alpha_d : (const void *)&alpha_f;
  const void *beta = g->dtype == DP_F64 ? (const void *)&beta_d : (const void *)&beta_f;
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      h, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n, (int)g->m,
      (int)g->k, alpha, g->b, type, (int)g->ldb, g->stride_b, g->a, type, (int)g->lda, g->stride_a, beta, g->c, type,
      (int)g->ldc, g->stride_c, (int)g->batch, compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return dp_cu_error("matmul: cuBLAS failed on cuda:%d for %s [%lld x %lld] @ [%lld x %lld] (batch %lld): %s",
                       c->device, dp_cu_dtype_name(g->dtype), (long long)g->m, (long long)g->k, (long long)g->k,
                       (long long)g->n, (long long)g->batch, cublasGetStatusString(st));
  return dp_cu_after_launch(c, "matmul");
}
