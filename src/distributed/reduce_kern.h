/* Elementwise reductions for the collectives: the one place that switches on
 * dtype (float32 and float64 through their own vectorisable loops; int64
 * exactly, never through double). */
#ifndef DP_REDUCE_KERN_H
#define DP_REDUCE_KERN_H

#include <stdbool.h>
#include <stddef.h>

#include "distributed/pg.h"
#include "tensor/dtype.h"

/* Whether op can reduce dtype dt (avg needs a floating dtype). */
bool dp_redop_supported(dp_redop op, dp_dtype dt);
/* dst[i] = src[0][i] (op) src[1][i] (op) ... (op) src[k-1][i], in that
 * order (so every rank computes bit-identical results); AVG reduces as a
 * sum (divide with dp_reduce_scale). dst may alias src[0]. */
void dp_reduce_n(void *dst, const void *const *src, int k, size_t n, dp_dtype dt, dp_redop op);
/* dst[i] /= k (floating dtypes), the last step of avg. */
void dp_reduce_scale(void *dst, size_t n, dp_dtype dt, int k);

/* a[i] = b[i] = a[i] + b[i] (divided by avg_div when > 0), bit-identical to
 * dp_reduce_n over {a, b} then dp_reduce_scale. a and b must not overlap.
 * False (nothing done) for ops and dtypes it does not cover. */
bool dp_reduce_pair_inplace(void *a, void *b, size_t n, dp_dtype dt, dp_redop op, int avg_div);
/* mine = slot = (mine + peer) [/ avg_div] for sum/avg of float32/64, the
 * bits of dp_reduce_n then dp_reduce_scale (IEEE addition commutes); false
 * (nothing done) for other ops and dtypes. */
bool dp_reduce_pair_to(void *mine, void *slot, const void *peer, size_t n, dp_dtype dt, dp_redop op, int avg_div);

#endif
