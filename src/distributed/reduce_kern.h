/* Elementwise reductions for the collectives: the one place that switches on
 * dtype (float32 and float64 through their own vectorisable loops; int64
 * exactly, never through double). */
#ifndef DP_REDUCE_KERN_H
#define DP_REDUCE_KERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
/* How a rank writes what its peers read after the next step (a staged
 * chunk, a reduced slice). Plain stores leave the lines modified in this
 * core's cache, from which a peer sharing its L3 reads them fast; streamed
 * (non-temporal) stores send them to memory, from which a peer on another
 * core complex reads them faster than from a remote cache. A VM's vCPUs
 * move between the two cases: on the AMD EPYC VM here the 100 MiB two-rank
 * all_reduce ran at 10.3-11.3 GB/s plain against 6.6-7.2 streamed for a
 * while, then at 5.9-6.6 plain against 9.6-12.5 streamed (16 MiB: 6.8
 * against 17.8), from one minute to the next. A staged copy with streamed
 * stores is backends/cpu/cpu_vec.h's dp_cpu_copy_streamed. */
typedef enum { DP_STAGE_PLAIN = 0, DP_STAGE_STREAMED = 1 } dp_stage_kind;

/* mine = slot = (mine + peer) [/ avg_div] for sum/avg of float32/64, the
 * bits of dp_reduce_n then dp_reduce_scale (IEEE addition commutes), with
 * the slot written the given kind of way (streamed falls back to plain
 * without AVX2); false (nothing done) for other ops and dtypes. */
bool dp_reduce_pair_to(void *mine, void *slot, const void *peer, size_t n, dp_dtype dt, dp_redop op, int avg_div,
                       dp_stage_kind kind);
/* Which kind a group's staged collectives use, learnt as they run: each op
 * of at least DP_STAGE_MIN bytes is timed, and per size class (factors of
 * 4 from 256 KiB) the kind with the lower running mean of ns per byte is
 * used, the other tried on every DP_STAGE_EXPLORE-th op of the class so a
 * change of the machine's state is noticed. The ranks choose on their own:
 * either kind gives the same bits. DDPLUA_SHM_STAGE=plain|streamed fixes
 * the kind (auto: learn, the default). */
#define DP_STAGE_CLASSES 6
#define DP_STAGE_MIN ((size_t)64 << 10)
#define DP_STAGE_EXPLORE 16
typedef struct {
  int fixed;                               /* -1: learn; else the dp_stage_kind to use */
  double ns_per_byte[DP_STAGE_CLASSES][2]; /* running mean per kind, 0 = not measured yet */
  uint32_t ops[DP_STAGE_CLASSES];
} dp_stage_stats;

/* Resets st; fixed from DDPLUA_SHM_STAGE, or -1 (a value other than
 * plain/streamed/auto is an error naming it: -1 returned, st left learning). */
int dp_stage_init(dp_stage_stats *st);
/* The kind for an op of nbytes (plain below DP_STAGE_MIN). */
dp_stage_kind dp_stage_pick(dp_stage_stats *st, size_t nbytes);
/* Records that an op of nbytes took seconds with kind. */
void dp_stage_learn(dp_stage_stats *st, size_t nbytes, dp_stage_kind kind, double seconds);

#endif
