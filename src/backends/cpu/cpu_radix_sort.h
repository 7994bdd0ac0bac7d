/* A row's stable order by LSD radix sort: the whole-row path of sort and of
 * topk with a large k (cpu_index.c). The order is dp_topk_before's
 * (ops/model_math.h) for every value a double holds exactly: ascending
 * (descending when largest), NaN after every number (before, descending),
 * -0 equal to +0, equal values in position order. int64 keys are ordered
 * exactly (the merge sort compares them as doubles). */
#ifndef DP_CPU_RADIX_SORT_H
#define DP_CPU_RADIX_SORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

/* A float32's bits as an unsigned key in the values' order: the sign
 * folded (negatives inverted, positives given the top bit), every NaN one
 * key above +inf, -0 made +0 (it ties with +0, as in a comparison). The
 * radix sort's keys and the small-k topk's (cpu_topk_f32.c). */
static inline uint32_t dp_f32_order_key(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Rows shorter than this take the merge sort: below it the 256-bucket
 * histograms cost more than the comparisons (bench/sort_rows.lua). */
enum { DP_RADIX_MIN_ROW = 48 };

/* Bytes of scratch dp_cpu_radix_order needs for a row of n. */
size_t dp_cpu_radix_scratch_bytes(int64_t n);

/* order[r] = the position (0-based) of the row's r-th value, for the n
 * values at x + j * stride elements of dtype dt (0 < n < 2^32). scratch:
 * dp_cpu_radix_scratch_bytes(n) bytes, 8-aligned. */
void dp_cpu_radix_order(const void *x, dp_dtype dt, int64_t n, int64_t stride, bool largest, uint32_t *order,
                        void *scratch);

/* The k (0 < k <= n < 2^32) best of the contiguous float32 row x in
 * dp_topk_before's order (largest: descending, NaN first; else ascending,
 * NaN last; ties by position): their positions, best first, into order.
 * h: k words of scratch (cpu_topk_f32.c). */
void dp_cpu_topk_f32_row(const float *x, int64_t n, int64_t k, bool largest, uint64_t *h, int64_t *order);

#endif
