/* DistributedDataParallel's reducer: gradient buckets all-reduced (avg)
 * while backward runs.
 *
 * At construction the parameters (those requiring grad, in registration
 * order) are grouped into buckets in REVERSE order (the order backward
 * produces their gradients), per dtype and device, the first bucket capped
 * at first_bucket_bytes and the others at bucket_bytes. Each bucket is one
 * flat buffer — from the process group's shared memory when it offers it,
 * so the cpu backend reduces peers' gradients in place — and every
 * parameter's .grad becomes a view into it (PyTorch's
 * gradient_as_bucket_view), marked keep_grad_buf so zero_grad keeps it.
 *
 * Each parameter's gradient-ready hook (fired by the autograd engine once
 * its gradient is complete) counts down its bucket; a bucket whose count
 * reaches zero is launched asynchronously — but only in bucket order, so
 * every rank issues the same collectives in the same order. After backward
 * (the engine's post-backward hook) the reducer launches what is left,
 * waits for every bucket and resets for the next iteration. Parameters that
 * got no gradient are an error naming them unless find_unused_parameters,
 * in which case their (zero) gradients are reduced with the rest. While
 * sync is off (no_sync) nothing is reduced: gradients accumulate in the
 * bucket views and the next synced backward reduces the totals. */
#ifndef DP_DDP_REDUCER_H
#define DP_DDP_REDUCER_H

#include <stdbool.h>
#include <stddef.h>

#include "distributed/pg.h"

typedef struct dp_reducer dp_reducer;

typedef struct {
  int n_buckets;
  int n_params;
  size_t bucket_bytes_total;
  /* last synced backward */
  int launched_in_backward;          /* buckets whose all-reduce started before backward ended */
  int launched_after;                /* buckets launched by the post-backward finalisation */
  double first_launch_before_end_ms; /* how long before the end of backward the first bucket started */
  long long backward_passes, synced_passes;
  double finalize_ms_total; /* time in the post-backward finalisation (last buckets, waits) */
  double backward_ms_total; /* from each backward's first ready gradient to its end */
  double last_backward_start_ms;
  bool shared_buckets; /* buckets live in the group's shared memory */
} dp_reducer_stats;

/* names[i] names params[i] in errors ("fc1.weight"). Retains the
 * parameters and the group stays borrowed (must outlive the reducer). */
dp_reducer *dp_reducer_new(dp_pg *pg, dp_tensor *const *params, const char *const *names, int n, size_t bucket_bytes,
                           size_t first_bucket_bytes, bool find_unused);
void dp_reducer_free(dp_reducer *r);
void dp_reducer_set_sync(dp_reducer *r, bool sync);
bool dp_reducer_get_sync(const dp_reducer *r);
dp_reducer_stats dp_reducer_get_stats(const dp_reducer *r);
/* Bucket layout for tests: bucket index of parameter i (-1 if excluded). */
int dp_reducer_bucket_of(const dp_reducer *r, int param_index);

#endif
