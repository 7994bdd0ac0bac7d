/* Strided indexing for elementwise kernels on any device: a plan built once
 * on the host from the operands' shapes and strides, and a host+device
 * function that turns a linear (row-major) position into each operand's
 * element offset. The CUDA elementwise kernels (copy, fill, unary, binary
 * and their backward) all index through this one helper; the C tests check
 * it against a naive unravel on the CPU, so the GPU's indexing is tested
 * where no GPU exists.
 *
 * Like cpu_iter.c, the plan drops size-1 dimensions and merges a dimension
 * into the one before it when every operand steps through that one as one
 * full run of this one; a contiguous tensor becomes one dimension and costs
 * one multiply per element, a broadcast bias add two. */
#ifndef DP_STRIDED_INDEX_H
#define DP_STRIDED_INDEX_H

#include <stdint.h>

#include "tensor/half.h" /* DP_HD */

#define DP_IDX_MAXDIM 8 /* = DP_MAXDIM */
#define DP_IDX_MAXOPS 4

#ifdef __CUDA_ARCH__ /* the device pass only: the host compiler does not know the pragma */
#define DP_UNROLL _Pragma("unroll")
#else
#define DP_UNROLL
#endif

typedef struct {
  int ndim, nops;
  int64_t numel;
  int64_t shape[DP_IDX_MAXDIM];
  int64_t stride[DP_IDX_MAXOPS][DP_IDX_MAXDIM]; /* in elements */
} dp_index_plan;

/* Plans iteration over `shape` (ndim dims) for nops operands; strides[k]
 * holds operand k's element strides for those dims (0 where broadcast). */
static inline void dp_index_plan_init(dp_index_plan *p, int ndim, const int64_t *shape, int nops,
                                      const int64_t *const *strides) {
  p->nops = nops;
  p->numel = 1;
  for (int d = 0; d < ndim; d++) p->numel *= shape[d];
  int m = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;
    if (m > 0) {
      int merge = 1;
      for (int k = 0; k < nops; k++)
        if (p->stride[k][m - 1] != strides[k][d] * shape[d]) merge = 0;
      if (merge) {
        p->shape[m - 1] *= shape[d];
        for (int k = 0; k < nops; k++) p->stride[k][m - 1] = strides[k][d];
        continue;
      }
    }
    p->shape[m] = shape[d];
    for (int k = 0; k < nops; k++) p->stride[k][m] = strides[k][d];
    m++;
  }
  p->ndim = m;
  for (int d = m; d < DP_IDX_MAXDIM; d++) {
    p->shape[d] = 1;
    for (int k = 0; k < DP_IDX_MAXOPS; k++) p->stride[k][d] = 0;
  }
  for (int k = nops; k < DP_IDX_MAXOPS; k++)
    for (int d = 0; d < DP_IDX_MAXDIM; d++) p->stride[k][d] = 0;
}

/* Element offsets of every operand at linear position i (0 <= i < numel). */
static inline DP_HD void dp_index_offsets(const dp_index_plan *p, int64_t i, int64_t off[DP_IDX_MAXOPS]) {
  DP_UNROLL
  for (int k = 0; k < DP_IDX_MAXOPS; k++) off[k] = 0;
  if (p->ndim == 1) {
    DP_UNROLL
    for (int k = 0; k < DP_IDX_MAXOPS; k++) off[k] = i * p->stride[k][0];
    return;
  }
  for (int d = p->ndim - 1; d >= 0; d--) {
    int64_t s = p->shape[d];
    int64_t q = d ? i / s : 0;
    int64_t r = i - q * s;
    i = q;
    DP_UNROLL
    for (int k = 0; k < DP_IDX_MAXOPS; k++) off[k] += r * p->stride[k][d];
  }
}

#endif
