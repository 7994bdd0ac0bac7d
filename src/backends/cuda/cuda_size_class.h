/* Block sizes of the CUDA caching allocator: requests are rounded up to one
 * of four sizes per power of two (at most 25% waste), 512 bytes at least,
 * so a training loop's recurring shapes map onto a few reusable classes.
 * Pure arithmetic, tested on the CPU (tests/c/test_cuda_size_class.c). */
#ifndef DP_CUDA_SIZE_CLASS_H
#define DP_CUDA_SIZE_CLASS_H

#include <stddef.h>
#include <stdint.h>

#define DP_CU_MIN_BLOCK 512
#define DP_CU_NCLASS 160 /* classes up to 2^48 bytes */

/* Rounded block size for a request of n bytes, and its class index in
 * [0, DP_CU_NCLASS). Returns 0 for requests too large to represent. */
static inline size_t dp_cu_size_class(size_t n, int *cls) {
  if (n <= DP_CU_MIN_BLOCK) {
    *cls = 0;
    return DP_CU_MIN_BLOCK;
  }
  int p = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^p < n <= 2^(p+1) */
  if (p >= 48) {
    *cls = -1;
    return 0;
  }
  size_t step = (size_t)1 << (p - 2);
  size_t rounded = (n + step - 1) / step * step; /* 5, 6, 7 or 8 steps */
  *cls = 1 + (p - 9) * 4 + (int)(rounded / step - 5);
  return rounded;
}

#endif
