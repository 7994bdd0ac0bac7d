/* Per-shape statistics of ddplua's own float32 GEMM (sgemm.c): how many
 * calls each (m, n, k, batch, transposes) made and the wall time they
 * took, so a user can see which products a model spends its step in and at
 * what GFLOP/s each runs (docs/performance.md, "Where a step's time goes").
 *
 * Off by default: a call then costs one relaxed atomic load. On with
 * DDPLUA_GEMM_STATS=1 (the table is printed to stderr when the process
 * exits, largest total first) or ddp.core.set_gemm_stats(true); read with
 * ddp.core.gemm_stats(). Only products that run through sgemm.c are
 * counted (not OpenBLAS's, oneDNN's, CUDA's or the attention tiles'). Time
 * is each call's wall time on the thread that made it; at most
 * DP_SGEMM_STATS_MAX shapes are kept (later new shapes are counted in
 * `dropped`). */
#ifndef DP_SGEMM_STATS_H
#define DP_SGEMM_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

enum { DP_SGEMM_STATS_MAX = 512 };

typedef struct {
  int64_t m, n, k, batch;
  bool trans_a, trans_b;
  int64_t calls;
  double seconds;
} dp_sgemm_stat;

/* Whether stats are being collected (DDPLUA_GEMM_STATS read on first use). */
bool dp_sgemm_stats_enabled(void);
/* Turns collection on or off; returns whether it was on. Turning it on
 * does not clear what was collected. */
bool dp_sgemm_stats_set(bool on);
/* Adds one call of g's shape that took `seconds`. */
void dp_sgemm_stats_add(const dp_gemm_args *g, double seconds);
/* Copies up to cap entries, largest total time first, into out; returns
 * how many there are in all (may exceed cap) and the shapes dropped. */
int dp_sgemm_stats_get(dp_sgemm_stat *out, int cap, int64_t *dropped);
/* Forgets every entry. */
void dp_sgemm_stats_reset(void);

#endif
