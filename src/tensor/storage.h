/* Reference-counted device memory. Tensors are views onto a storage.
 *
 * CPU memory comes from a caching allocator (alloc_cpu.c): a training loop
 * allocates the same sizes every step, so freed blocks are kept by exact size
 * and handed back, which keeps RSS flat and avoids page-faulting fresh pages.
 * CUDA memory comes from the CUDA backend's caching allocator. Memory that
 * belongs to something else (a shared-memory segment, an mmap'ed file, a
 * Lua string) is wrapped with its own release function. */
#ifndef DP_STORAGE_H
#define DP_STORAGE_H

#include <stddef.h>

#include "tensor/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dp_storage dp_storage;
struct dp_storage {
  int refcount; /* atomic (__atomic builtins): dp_storage_retain / _release */
  /* Bumped by every in-place write; autograd compares it with the version
   * recorded when a tensor was saved for backward (atomic: dp_bump_version,
   * dp_storage_version). */
  unsigned version;
  void *data;
  size_t nbytes;
  dp_device device;
  void (*release)(dp_storage *s); /* NULL: the device allocator owns data */
  void *ctx;
};

/* Allocates nbytes on dev (uninitialised). NULL + dp_error on failure. */
dp_storage *dp_storage_new(size_t nbytes, dp_device dev);
/* Wraps foreign memory; release(s) is called when the last reference goes
 * (it must free s->data if appropriate, not s itself). */
dp_storage *dp_storage_wrap(void *data, size_t nbytes, dp_device dev, void (*release)(dp_storage *), void *ctx);
void dp_storage_retain(dp_storage *s);
void dp_storage_release(dp_storage *s);
static inline unsigned dp_storage_version(const dp_storage *s) {
  return __atomic_load_n(&s->version, __ATOMIC_SEQ_CST);
}

/* CPU caching allocator. 64-byte aligned. */
void *dp_cpu_alloc(size_t nbytes);
void dp_cpu_free(void *p, size_t nbytes);
/* Returns cached blocks to the system. */
void dp_cpu_empty_cache(void);
/* The smallest block size the cache keeps (64 bytes; 4 KiB under ASan,
 * whose use-after-free checks need small blocks freed at once). */
size_t dp_cpu_cache_min(void);

typedef struct {
  size_t live_bytes;   /* tensor bytes currently referenced (CPU) */
  size_t peak_bytes;   /* high-water mark of live_bytes */
  size_t cached_bytes; /* freed blocks kept for reuse */
  size_t allocs;       /* allocations served (cache hits included) */
  size_t cache_hits;
} dp_mem_stats;
dp_mem_stats dp_cpu_mem_stats(void);

/* Bytes of tensor storage allocated (any device) since the counter was last
 * reset; the Lua layer uses it to pace its garbage collector so that
 * unreachable tensors are freed before memory grows. */
size_t dp_alloc_counter_take(void);

#ifdef __cplusplus
}
#endif

#endif
