/* Reference figures for bench/gpu.lua, measured without ddplua: what cuBLAS
 * itself reaches on a GEMM shape, what cudaMemcpy reaches from pinned and
 * from pageable host memory, and (built with NCCL) a single-rank NCCL
 * all-reduce. Each mode prints one line of key=value pairs.
 *
 * The GEMM runs on random operands (zeros run faster than real data and
 * hide wrong results), and its result is checked: 256 sampled elements of
 * C against float64 dot products of the operands as stored, relative to
 * sum |a||b| of each dot product; the tolerance is the dtype's (float32
 * 1e-5, tf32 2e-3, bfloat16 1e-2, float16 2e-3). A failed check, or any
 * CUDA or cuBLAS error, exits 1 with the reason.
 *
 *   ddplua_gpu_raw gemm M N K float32|bfloat16|float16|tf32 ITERS
 *   ddplua_gpu_raw h2d BYTES ITERS
 *   ddplua_gpu_raw allreduce BYTES ITERS */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef DDPLUA_HAVE_NCCL
#include <nccl.h>
#endif

#include "tensor/half.h"

#define CK(x)                                                                                                          \
  do {                                                                                                                 \
    cudaError_t e_ = (x);                                                                                              \
    if (e_ != cudaSuccess) {                                                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                              \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

#define CKB(x)                                                                                                         \
  do {                                                                                                                 \
    cublasStatus_t s_ = (x);                                                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cublasGetStatusString(s_));                           \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CK(cudaEventSynchronize(b));
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

/* uniform in [-1, 1) from a 64-bit LCG (reproducible, no curand needed) */
static double next_uniform(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* n random values of the dtype in buf, and the same values as doubles */
static void fill_random(void *buf, double *as_double, size_t n, int kind, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    float v = (float)next_uniform(&seed);
    if (kind == 1) {
      uint16_t h = dp_f32_to_bf16(v);
      ((uint16_t *)buf)[i] = h;
      as_double[i] = dp_bf16_to_f32(h);
    } else if (kind == 2) {
      uint16_t h = dp_f32_to_f16(v);
      ((uint16_t *)buf)[i] = h;
      as_double[i] = dp_f16_to_f32(h);
    } else {
      ((float *)buf)[i] = v;
      as_double[i] = v;
    }
  }
}

static double load_as_double(const void *buf, size_t i, int kind) {
  if (kind == 1) return dp_bf16_to_f32(((const uint16_t *)buf)[i]);
  if (kind == 2) return dp_f16_to_f32(((const uint16_t *)buf)[i]);
  return ((const float *)buf)[i];
}

static int gemm(long m, long n, long k, const char *dt, int iters) {
  cudaDataType_t t = CUDA_R_32F;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  size_t es = 4;
  int kind = 0; /* 0 float32, 1 bfloat16, 2 float16 */
  double tol = 1e-5;
  if (!strcmp(dt, "bfloat16")) t = CUDA_R_16BF, es = 2, kind = 1, tol = 1e-2;
  else if (!strcmp(dt, "float16")) t = CUDA_R_16F, es = 2, kind = 2, tol = 2e-3;
  else if (!strcmp(dt, "tf32")) ct = CUBLAS_COMPUTE_32F_FAST_TF32, tol = 2e-3;
  else if (strcmp(dt, "float32")) {
    fprintf(stderr, "unknown dtype %s\n", dt);
    return 2;
  }
  size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
  void *ha = malloc(na * es), *hb = malloc(nb * es), *hc = malloc(nc * es);
  double *da = malloc(na * sizeof(double)), *db = malloc(nb * sizeof(double));
  if (!ha || !hb || !hc || !da || !db) {
    fprintf(stderr, "out of host memory\n");
    return 1;
  }
  fill_random(ha, da, na, kind, 1234567);
  fill_random(hb, db, nb, kind, 7654321);
  void *a, *b, *c;
  CK(cudaMalloc(&a, na * es));
  CK(cudaMalloc(&b, nb * es));
  CK(cudaMalloc(&c, nc * es));
  CK(cudaMemcpy(a, ha, na * es, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, hb, nb * es, cudaMemcpyHostToDevice));
  CK(cudaMemset(c, 0xff, nc * es)); /* NaN everywhere: an element left unwritten fails the check */
  cublasHandle_t h;
  CKB(cublasCreate(&h));
  float alpha = 1, beta = 0;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  /* row-major C[m,n] = A[m,k] B[k,n] as column-major C^T = B^T A^T */
  for (int w = 0; w < 3; w++)
    CKB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b, t, (int)n, a, t, (int)k, &beta, c,
                     t, (int)n, ct, CUBLAS_GEMM_DEFAULT));
  CK(cudaEventRecord(e0, 0));
  for (int i = 0; i < iters; i++)
    CKB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b, t, (int)n, a, t, (int)k, &beta, c,
                     t, (int)n, ct, CUBLAS_GEMM_DEFAULT));
  CK(cudaEventRecord(e1, 0));
  CK(cudaGetLastError());
  double s = elapsed_ms(e0, e1) / 1000.0 / iters;
  CK(cudaMemcpy(hc, c, nc * es, cudaMemcpyDeviceToHost));
  /* sampled elements against float64 */
  uint64_t seed = 99;
  double worst = 0;
  for (int q = 0; q < 256; q++) {
    long i = (long)((next_uniform(&seed) + 1) * 0.5 * (double)m),
         j = (long)((next_uniform(&seed) + 1) * 0.5 * (double)n);
    if (i >= m) i = m - 1;
    if (j >= n) j = n - 1;
    double ref = 0, mag = 0;
    for (long p = 0; p < k; p++) {
      ref += da[i * k + p] * db[p * n + j];
      mag += fabs(da[i * k + p] * db[p * n + j]);
    }
    double got = load_as_double(hc, (size_t)(i * n + j), kind);
    double err = fabs(got - ref) / (mag > 0 ? mag : 1);
    if (!(err <= worst)) worst = err; /* NaN stays NaN */
  }
  int ok = worst <= tol;
  printf("mode=gemm dtype=%s m=%ld n=%ld k=%ld seconds=%.6e tflops=%.2f max_rel_err=%.3e check=%s\n", dt, m, n, k, s,
         2.0 * (double)m * (double)n * (double)k / s / 1e12, worst, ok ? "ok" : "FAILED");
  cublasDestroy(h);
  cudaFree(a), cudaFree(b), cudaFree(c);
  free(ha), free(hb), free(hc), free(da), free(db);
  if (!ok) fprintf(stderr, "gemm %s: sampled error %.3e exceeds %.1e\n", dt, worst, tol);
  return ok ? 0 : 1;
}

static int h2d(size_t bytes, int iters) {
  void *d, *pinned, *pageable = malloc(bytes);
  if (!pageable) return 1;
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

#ifdef DDPLUA_HAVE_NCCL
static int allreduce(size_t bytes, int iters) {
  ncclComm_t comm;
  int dev = 0;
  ncclResult_t r = ncclCommInitAll(&comm, 1, &dev);
  if (r != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetErrorString(r));
    return 1;
  }
  void *buf;
  CK(cudaMalloc(&buf, bytes));
  CK(cudaMemset(buf, 0, bytes));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  size_t n = bytes / 4;
  r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, s);
  CK(cudaEventRecord(e0, s));
  for (int i = 0; i < iters && r == ncclSuccess; i++) r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, s);
  CK(cudaEventRecord(e1, s));
  if (r != ncclSuccess) {
    fprintf(stderr, "ncclAllReduce: %s\n", ncclGetErrorString(r));
    return 1;
  }
  double sec = elapsed_ms(e0, e1) / 1000.0 / iters;
  printf("mode=allreduce bytes=%zu seconds=%.6e algbw_gbs=%.2f\n", bytes, sec, (double)bytes / sec / 1e9);
  ncclCommDestroy(comm);
  return 0;
}
#else
static int allreduce(size_t bytes, int iters) {
  (void)bytes, (void)iters;
  fprintf(stderr, "built without NCCL\n");
  return 1;
}
#endif

int main(int argc, char **argv) {
  if (argc >= 7 && !strcmp(argv[1], "gemm"))
    return gemm(atol(argv[2]), atol(argv[3]), atol(argv[4]), argv[5], atoi(argv[6]));
  if (argc >= 4 && !strcmp(argv[1], "h2d")) return h2d((size_t)atoll(argv[2]), atoi(argv[3]));
  if (argc >= 4 && !strcmp(argv[1], "allreduce")) return allreduce((size_t)atoll(argv[2]), atoi(argv[3]));
  fprintf(stderr, "usage: %s gemm M N K DTYPE ITERS | h2d BYTES ITERS | allreduce BYTES ITERS\n", argv[0]);
  return 2;
}
