/* The strided-index plan every CUDA elementwise kernel indexes through
 * (ops/strided_index.h), checked on the CPU: for random shapes, permuted,
 * sliced and broadcast strides, each operand's offset at every linear
 * position equals a naive row-major unravel; contiguous tensors collapse to
 * one dimension, and the plan never merges dimensions it must not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/strided_index.h"
#include "test_util.h"

static uint64_t rng = 88172645463325252ull;
static int64_t rnd(int64_t n) { /* xorshift */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (int64_t)(rng % (uint64_t)n);
}

static void naive(int ndim, const int64_t *shape, const int64_t *stride, int64_t i, int64_t *off) {
  *off = 0;
  for (int d = ndim - 1; d >= 0; d--) {
    *off += (i % shape[d]) * stride[d];
    i /= shape[d];
  }
}

/* Strides of an operand: contiguous, then maybe permuted (a transpose),
 * sliced (a narrow of a bigger tensor) or broadcast (stride 0). */
static void make_strides(int ndim, const int64_t *shape, int64_t *stride) {
  int64_t full[DP_IDX_MAXDIM], perm[DP_IDX_MAXDIM];
  for (int d = 0; d < ndim; d++) full[d] = shape[d] + (rnd(3) == 0 ? rnd(3) : 0); /* padded: a slice */
  for (int d = 0; d < ndim; d++) perm[d] = d;
  if (rnd(2))
    for (int d = ndim - 1; d > 0; d--) { /* shuffle the memory order */
      int j = (int)rnd(d + 1);
      int64_t t = perm[d];
      perm[d] = perm[j], perm[j] = t;
    }
  int64_t s = 1;
  for (int k = ndim - 1; k >= 0; k--) {
    int d = (int)perm[k];
    stride[d] = s;
    s *= full[d];
  }
  for (int d = 0; d < ndim; d++)
    if (rnd(5) == 0) stride[d] = 0; /* broadcast */
}

int main(void) {
  int checked = 0;
  for (int trial = 0; trial < 3000; trial++) {
    int ndim = (int)rnd(DP_IDX_MAXDIM + 1);
    int nops = 1 + (int)rnd(DP_IDX_MAXOPS);
    int64_t shape[DP_IDX_MAXDIM], strides[DP_IDX_MAXOPS][DP_IDX_MAXDIM];
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
      shape[d] = 1 + rnd(ndim > 5 ? 3 : 5);
      if (rnd(4) == 0) shape[d] = 1;
      numel *= shape[d];
    }
    const int64_t *sp[DP_IDX_MAXOPS];
    for (int k = 0; k < nops; k++) {
      make_strides(ndim, shape, strides[k]);
      sp[k] = strides[k];
    }
    dp_index_plan p;
    dp_index_plan_init(&p, ndim, shape, nops, sp);
    CHECK(p.numel == numel);
    CHECK(p.ndim <= ndim);
    for (int64_t i = 0; i < numel; i++) {
      int64_t off[DP_IDX_MAXOPS];
      dp_index_offsets(&p, i, off);
      for (int k = 0; k < nops; k++) {
        int64_t want;
        naive(ndim, shape, strides[k], i, &want);
        if (off[k] != want) {
          fprintf(stderr, "trial %d operand %d position %lld: plan %lld, naive %lld\n", trial, k, (long long)i,
                  (long long)off[k], (long long)want);
          test_failures++;
          i = numel; /* one report per trial */
          break;
        }
      }
      checked++;
    }
  }
  CHECK(checked > 10000);

  /* a contiguous 3-d tensor and a broadcast row: two dims remain */
  {
    int64_t shape[3] = {4, 5, 6}, c[3] = {30, 6, 1}, bias[3] = {0, 0, 1};
    const int64_t *sp[2] = {c, c};
    dp_index_plan p;
    dp_index_plan_init(&p, 3, shape, 2, sp);
    CHECK(p.ndim == 1 && p.shape[0] == 120 && p.stride[0][0] == 1);
    const int64_t *sb[2] = {c, bias};
    dp_index_plan_init(&p, 3, shape, 2, sb);
    CHECK(p.ndim == 2 && p.shape[0] == 20 && p.shape[1] == 6);
  }
  /* a transpose cannot merge */
  {
    int64_t shape[2] = {3, 4}, c[2] = {4, 1}, t[2] = {1, 3};
    const int64_t *sp[2] = {c, t};
    dp_index_plan p;
    dp_index_plan_init(&p, 2, shape, 2, sp);
    CHECK(p.ndim == 2);
  }
  /* zero-dim and size-1 shapes: one element at offset 0 */
  {
    dp_index_plan p;
    const int64_t *sp[1] = {NULL};
    dp_index_plan_init(&p, 0, NULL, 1, sp);
    int64_t off[DP_IDX_MAXOPS] = {7, 7, 7, 7};
    dp_index_offsets(&p, 0, off);
    CHECK(p.numel == 1 && p.ndim == 0 && off[0] == 0);
  }
  TEST_DONE();
}
