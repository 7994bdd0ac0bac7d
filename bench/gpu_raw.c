/* Reference figures for bench/gpu.lua, measured without ddplua: what cuBLAS
 * itself reaches on a GEMM shape, what cudaMemcpy reaches from pinned and
 * from pageable host memory, and a single-rank NCCL all-reduce. Each mode
 * prints one line of key=value pairs.
 *
 *   ddplua_gpu_raw gemm M N K float32|bfloat16|float16|tf32 ITERS
 *   ddplua_gpu_raw h2d BYTES ITERS
 *   ddplua_gpu_raw allreduce BYTES ITERS */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                                          \
  do {                                                                                                                 \
    cudaError_t e_ = (x);                                                                                              \
    if (e_ != cudaSuccess) {                                                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                              \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CK(cudaEventSynchronize(b));
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

static int gemm(long m, long n, long k, const char *dt, int iters) {
  cudaDataType_t t = CUDA_R_32F;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  size_t es = 4;
  if (!strcmp(dt, "bfloat16")) t = CUDA_R_16BF, es = 2;
  else if (!strcmp(dt, "float16")) t = CUDA_R_16F, es = 2;
  else if (!strcmp(dt, "tf32")) ct = CUBLAS_COMPUTE_32F_FAST_TF32;
  else if (strcmp(dt, "float32")) {
    fprintf(stderr, "unknown dtype %s\n", dt);
    return 2;
  }
  void *a, *b, *c;
  CK(cudaMalloc(&a, (size_t)(m * k) * es));
  CK(cudaMalloc(&b, (size_t)(k * n) * es));
  CK(cudaMalloc(&c, (size_t)(m * n) * es));
  CK(cudaMemset(a, 0, (size_t)(m * k) * es));
  CK(cudaMemset(b, 0, (size_t)(k * n) * es));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  float alpha = 1, beta = 0;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; w++)
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b, t, (int)n, a, t, (int)k, &beta, c, t,
                 (int)n, ct, CUBLAS_GEMM_DEFAULT);
  CK(cudaEventRecord(e0, 0));
  for (int i = 0; i < iters; i++)
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b, t, (int)n, a, t, (int)k, &beta, c, t,
                 (int)n, ct, CUBLAS_GEMM_DEFAULT);
  CK(cudaEventRecord(e1, 0));
  double s = elapsed_ms(e0, e1) / 1000.0 / iters;
  printf("mode=gemm dtype=%s m=%ld n=%ld k=%ld seconds=%.6e tflops=%.2f\n", dt, m, n, k, s,
         2.0 * (double)m * (double)n * (double)k / s / 1e12);
  return 0;
}

static int h2d(size_t bytes, int iters) {
  void *d, *pinned, *pageable = malloc(bytes);
  CK(cudaMalloc(&d, bytes));
  CK(cudaMallocHost(&pinned, bytes));
  memset(pinned, 1, bytes);
  memset(pageable, 1, bytes);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double gbs[2];
  for (int mode = 0; mode < 2; mode++) {
    void *src = mode ? pageable : pinned;
    CK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(e0, 0));
    for (int i = 0; i < iters; i++) CK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(e1, 0));
    gbs[mode] = (double)bytes * iters / (elapsed_ms(e0, e1) / 1000.0) / 1e9;
  }
  printf("mode=h2d bytes=%zu pinned_gbs=%.2f pageable_gbs=%.2f\n", bytes, gbs[0], gbs[1]);
  return 0;
}

static int allreduce(size_t bytes, int iters) {
  ncclComm_t comm;
  int dev = 0;
  if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) return 1;
  void *buf;
  CK(cudaMalloc(&buf, bytes));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  size_t n = bytes / 4;
  ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, s);
  CK(cudaEventRecord(e0, s));
  for (int i = 0; i < iters; i++) ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, s);
  CK(cudaEventRecord(e1, s));
  double sec = elapsed_ms(e0, e1) / 1000.0 / iters;
  printf("mode=allreduce bytes=%zu seconds=%.6e algbw_gbs=%.2f\n", bytes, sec, (double)bytes / sec / 1e9);
  ncclCommDestroy(comm);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 7 && !strcmp(argv[1], "gemm"))
    return gemm(atol(argv[2]), atol(argv[3]), atol(argv[4]), argv[5], atoi(argv[6]));
  if (argc >= 4 && !strcmp(argv[1], "h2d")) return h2d((size_t)atoll(argv[2]), atoi(argv[3]));
  if (argc >= 4 && !strcmp(argv[1], "allreduce")) return allreduce((size_t)atoll(argv[2]), atoi(argv[3]));
  fprintf(stderr, "usage: %s gemm M N K DTYPE ITERS | h2d BYTES ITERS | allreduce BYTES ITERS\n", argv[0]);
  return 2;
}
