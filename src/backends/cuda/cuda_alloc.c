/* The CUDA caching allocator.
 *
 * cudaMalloc and cudaFree synchronise the device and cost tens of
 * microseconds, and a training step allocates the same sizes every time.
 * Freed blocks therefore go onto free lists keyed by device, size class
 * (cuda_size_class.h) and the stream they were last used on, and the next
 * request of that class on that stream takes the most recently freed one.
 * Reuse on the same stream needs no synchronisation: the stream runs the
 * old user's kernels before the new user's. (Memory a collective on the
 * communication stream still reads is kept alive by the collective, see
 * nccl_group.c.) When cudaMalloc fails, the cache is returned to the driver
 * and the request retried once; a request that still fails is an error
 * with the numbers a user needs. Thread-safe: tensors may be released on a
 * communication thread; the lock covers the lists and counters only, never
 * a driver call (cudaMalloc, cudaFree). */
#include <stdlib.h>

#include "backends/cuda/cuda_host.h"
#include "backends/cuda/cuda_size_class.h"

typedef struct block {
  void *ptr;
  cudaStream_t stream;
  struct block *next;
} block;

typedef struct {
  pthread_mutex_t mu;
  block *free_[DP_CU_NCLASS];
  dp_device_mem_stats st;
} pool;

static pool pools[DP_CU_MAXDEV];
static pthread_once_t pools_once = PTHREAD_ONCE_INIT;

static void init_pools(void) {
  for (int d = 0; d < DP_CU_MAXDEV; d++) pthread_mutex_init(&pools[d].mu, NULL);
}

/* Returns every cached block of device d to the driver. The lists are taken
 * under the lock and freed after it is dropped: cudaFree waits for the whole
 * device (so no queued kernel can still use the blocks), and a collective
 * that hangs would otherwise keep the lock held, blocking every thread
 * that allocates or frees, the NCCL watchdog included. */
static void release_cached(int d) {
  pool *pl = &pools[d];
  block *all = NULL;
  pthread_mutex_lock(&pl->mu);
  for (int c = 0; c < DP_CU_NCLASS; c++) {
    for (block *b = pl->free_[c], *nx; b; b = nx) {
      nx = b->next;
      b->next = all;
      all = b;
    }
    pl->free_[c] = NULL;
  }
  pl->st.cached_bytes = 0;
  pthread_mutex_unlock(&pl->mu);
  for (block *b = all, *nx; b; b = nx) {
    nx = b->next;
    cudaFree(b->ptr);
    free(b);
  }
}

void *dp_cu_alloc(int device, size_t nbytes) {
  const dp_cu_ctx *c = dp_cu_enter(device);
  if (!c) return NULL;
  pthread_once(&pools_once, init_pools);
  int cls = 0;
  size_t size = dp_cu_size_class(nbytes, &cls);
  if (!size) {
    dp_cu_error("cannot allocate %zu bytes on cuda:%d: larger than any device", nbytes, device);
    return NULL;
  }
  pool *pl = &pools[device];
  pthread_mutex_lock(&pl->mu);
  pl->st.allocs++;
  for (block **pp = &pl->free_[cls]; *pp; pp = &(*pp)->next) {
    if ((*pp)->stream != c->stream) continue;
    block *b = *pp;
    *pp = b->next;
    void *p = b->ptr;
    free(b);
    pl->st.cache_hits++;
    pl->st.cached_bytes -= size;
    pl->st.live_bytes += size;
    if (pl->st.live_bytes > pl->st.peak_bytes) pl->st.peak_bytes = pl->st.live_bytes;
    pthread_mutex_unlock(&pl->mu);
    return p;
  }
  pthread_mutex_unlock(&pl->mu);
  /* the driver calls run unlocked (see release_cached) */
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) { /* give the cache back and retry once */
    (void)cudaGetLastError();
    release_cached(device);
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    pthread_mutex_lock(&pl->mu);
    size_t live = pl->st.live_bytes;
    pthread_mutex_unlock(&pl->mu);
    const double mib = 1024.0 * 1024.0;
    dp_cu_error("CUDA out of memory: tried to allocate %.1f MiB on cuda:%d (%.1f MiB held by tensors of this "
                "process, %.1f MiB free of %.1f MiB on the device%s%s)",
                (double)size / mib, device, (double)live / mib, (double)free_b / mib, (double)total_b / mib,
                e == cudaErrorMemoryAllocation ? "" : "; ",
                e == cudaErrorMemoryAllocation ? "" : cudaGetErrorString(e));
    return NULL;
  }
  pthread_mutex_lock(&pl->mu);
  pl->st.device_mallocs++;
  pl->st.live_bytes += size;
  if (pl->st.live_bytes > pl->st.peak_bytes) pl->st.peak_bytes = pl->st.live_bytes;
  pthread_mutex_unlock(&pl->mu);
  return p;
}

void dp_cu_free(int device, void *p, size_t nbytes) {
  if (!p || device < 0 || device >= DP_CU_MAXDEV) return;
  dp_cu_device *dv = dp_cu_device_get(device);
  if (!dv) return; /* cannot happen: the block came from this device */
  pthread_once(&pools_once, init_pools);
  int cls = 0;
  size_t size = dp_cu_size_class(nbytes, &cls);
  block *b = malloc(sizeof *b);
  pool *pl = &pools[device];
  pthread_mutex_lock(&pl->mu);
  pl->st.live_bytes -= size;
  if (!b) { /* no host memory for the list node: hand the block back instead */
    pthread_mutex_unlock(&pl->mu);
    cudaFree(p);
    return;
  }
  b->ptr = p;
  b->stream = dv->ctx.stream;
  b->next = pl->free_[cls];
  pl->free_[cls] = b;
  pl->st.cached_bytes += size;
  pthread_mutex_unlock(&pl->mu);
}

int dp_cu_empty_cache(void) {
  pthread_once(&pools_once, init_pools);
  for (int d = 0; d < dp_cu_device_count(); d++) {
    if (!dp_cu_device_get(d)) continue;
    if (dp_cu_select(d)) return -1;
    release_cached(d);
  }
  return 0;
}

int dp_cu_memory_stats(int device, dp_device_mem_stats *out) {
  if (!dp_cu_enter(device)) return -1;
  pthread_once(&pools_once, init_pools);
  pthread_mutex_lock(&pools[device].mu);
  *out = pools[device].st;
  pthread_mutex_unlock(&pools[device].mu);
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) out->device_free = free_b, out->device_total = total_b;
  return 0;
}
