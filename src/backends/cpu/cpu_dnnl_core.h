/* What the oneDNN sources share (cpu_dnnl_core.c; used by cpu_dnnl.c, the convolutions, and
 * cpu_dnnl_matmul.c, the bfloat16 matmuls): the engine, the calling
 * thread's stream with oneDNN's OpenMP threads held at 1, the call counter
 * (dp_dnnl_calls) and the lock of the primitive caches. Only where the
 * build has oneDNN (DDPLUA_HAVE_DNNL). */
#ifndef DP_CPU_DNNL_CORE_H
#define DP_CPU_DNNL_CORE_H

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"

/* primitives each cache keeps; past that a call makes and frees its own */
enum { DP_DNNL_CACHE_MAX = 256 };

dnnl_engine_t dp_dnnl_engine(void);
/* one OpenMP thread for oneDNN on the calling thread: before creating a primitive as well as running one */
void dp_dnnl_one_omp_thread(void);
/* the calling thread's stream (NULL if it could not be made) */
dnnl_stream_t dp_dnnl_thread_stream(void);
/* the calling thread's scratchpad of at least n bytes (64-byte aligned; NULL with the error set when out of
 * memory), valid until its next call on this thread: one block a thread, grown to the largest scratchpad asked
 * for, instead of a block of each primitive's size in the tensor cache */
void *dp_dnnl_thread_scratch(size_t n);
void dp_dnnl_count_calls(long n);
/* the primitive caches' lock (reset in a forked child) */
void dp_dnnl_cache_lock(void);
void dp_dnnl_cache_unlock(void);
/* a reorder primitive from one layout to another (*out NULL when they are equal) */
int dp_dnnl_make_reorder(dnnl_primitive_t *out, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to);
/* runs reorder r on src (layout from) into dst (layout to) on stream st */
int dp_dnnl_exec_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *from, void *src, const dnnl_memory_desc_t *to,
                         void *dst, dnnl_stream_t st);

#define DN_CHECK(call)                                                                                                 \
  do {                                                                                                                 \
    dnnl_status_t st_ = (call);                                                                                        \
    if (st_ != dnnl_success) return dp_error("oneDNN: %s failed (status %d)", #call, (int)st_);                        \
  } while (0)

#endif
