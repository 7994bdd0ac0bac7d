/* Strided N-operand iteration for CPU kernels (a small TensorIterator).
 *
 * Operand 0 is the output. All operands have the same shape (broadcast
 * inputs carry stride 0). Dimensions that are contiguous with each other in
 * every operand are merged, then `fn` is called once per innermost row with
 * byte strides, so kernels write one tight loop and test for the
 * unit-stride case to take their vectorised path. `fn` gets the row's
 * pointers read-only (the iteration steps them from row to row). */
#ifndef DP_CPU_ITER_H
#define DP_CPU_ITER_H

#include <stdint.h>

#include "tensor/tensor.h"

#define DP_ITER_MAX_OPS 4

typedef void (*dp_row_fn)(char *const *ptrs, const int64_t *strides, int64_t n, void *ctx);

/* ops[0] is written. Each operand's dtype may differ (kernels read them
 * from ctx). */
void dp_cpu_foreach(int nops, const dp_tensor *const *ops, dp_row_fn fn, void *ctx);
/* The same, split over the threads of cpu_parallel.h when there are at
 * least 2 * grain elements: by rows, or within the one row of a merged
 * (contiguous) iteration. fn must be safe to run on disjoint parts of the
 * output at once (every elementwise kernel is). */
void dp_cpu_foreach_par(int nops, const dp_tensor *const *ops, dp_row_fn fn, void *ctx, int64_t grain);

#endif
