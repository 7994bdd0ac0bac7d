/* CPU caching allocator.
 *
 * Blocks are 64-byte aligned (AVX-512 loads, no false sharing between
 * tensors). Freed blocks of 4 KiB and more are kept on a free list per exact
 * size; a later request of the same size reuses the most recently freed one
 * (warm in cache). A request of DP_FIT_MIN bytes or more that no block of
 * its size serves takes the smallest cached block less than twice its size
 * instead of new memory: the smaller sizes an evaluation pass or a short
 * last batch brings then live in the training step's idle blocks rather
 * than beside them (the LSTM example: peak RSS 283 -> 150 MB); such a block
 * is remembered (`fitted`) so that its free returns it under its own size.
 * The cache is bounded: past DP_CACHE_MAX bytes the oldest blocks go back
 * to the system. And a miss does not grow the footprint (live + cached
 * bytes) past its high-water mark while cached blocks could make room: the
 * oldest go back first, so the blocks a set-up phase left (the LSTM
 * example's initialisation held ten 7 MB blocks at once) make room for the
 * training step's sizes instead of sitting beside them. A size given back
 * that way and asked for again soon after (a step that frees X, then asks
 * for Y, then X again next step) grows the mark instead: the last
 * DP_REGRETS sizes given back are remembered, so a step's own sizes never
 * take turns being unmapped. Blocks under 4 KiB are cached outside the
 * mark (DP_SMALL_CACHE_MIN below).
 * Blocks of 4 MiB and more come from mmap, 2 MiB-aligned, with every page
 * populated in one call: on a VM each first touch of a 4 KiB page traps
 * (about 15 us on an earlier reference machine, 180 ms for the 47 MB of
 * Fashion-MNIST), where MADV_POPULATE_WRITE maps them in one call (0.3 ms
 * per MB on the 2026-12 reference VM). Transparent huge pages are asked for
 * only with DDPLUA_HUGEPAGES=1: on a VM whose balloon reports free memory
 * to the host (free page reporting works on free 2 MiB blocks, so it takes
 * exactly the memory huge pages come from), a huge page populated a few
 * seconds after the last run costs the host's fault too: 4-9 ms per MB
 * instead of 0.3, and `ddplua --nproc 2 bench/first_step.lua` after 6 s idle
 * took 0.66 s with huge pages against 0.08 s without, while the training
 * rows' steady speed did not move (GPT, LSTM, MLP: within noise). A system
 * whose THP mode is "always" still gets huge pages from the kernel.
 * Kernels without MADV_POPULATE_WRITE (< 5.14) fall back to faulting pages
 * in lazily. (Not under ASan, which checks heap blocks only.)
 * Thread-safe (the DDP communication thread may free tensors). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "core/error.h"
#include "tensor/storage.h"

#define DP_CACHE_MIN 4096
/* Blocks below DP_CACHE_MIN are cached too (per exact size, like the
 * rest), but outside the footprint mark: a [64, 10] logits tensor of 2.5 KB
 * went to aligned_alloc, and glibc answers every request of 1 KiB or more
 * while its fast bins hold chunks by consolidating them (malloc_consolidate),
 * a quarter of a small cross-entropy's time. Under ASan they go to malloc
 * and free at once, so its use-after-free checks keep covering them. */
#if defined(__SANITIZE_ADDRESS__)
#define DP_SMALL_CACHE_MIN DP_CACHE_MIN
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DP_SMALL_CACHE_MIN DP_CACHE_MIN
#endif
#endif
#ifndef DP_SMALL_CACHE_MIN
#define DP_SMALL_CACHE_MIN 64
#endif
#define DP_CACHE_MAX ((size_t)512 << 20)
#define NBUCKETS 256

typedef struct block {
  struct block *next;          /* same-size list (LIFO) */
  struct block *older, *newer; /* global age list for trimming */
  void *ptr;
  size_t size;
} block;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static block *buckets[NBUCKETS]; /* hash of size -> list of blocks of that size; chained by size */
static block *oldest, *newest;
static dp_mem_stats stats;
/* blocks handed out for a smaller request: their pointer and real size */
#define DP_FIT_MIN ((size_t)256 << 10)
static block *fitted;
static size_t footprint_hw; /* the largest live_bytes + cached_bytes so far */
#define DP_REGRETS 64
static size_t regrets[DP_REGRETS]; /* sizes the mark made room by giving back, newest at regret_at - 1 */
static unsigned regret_at;

#if defined(__SANITIZE_ADDRESS__)
#define DP_HUGE_MIN SIZE_MAX
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DP_HUGE_MIN SIZE_MAX
#endif
#endif
#ifndef DP_HUGE_MIN
#define DP_HUGE_MIN ((size_t)4 << 20)
#endif
#define HUGE_ALIGN ((size_t)2 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static size_t huge_len(size_t size) { return (size + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1); }

static pthread_once_t hugepages_once = PTHREAD_ONCE_INIT;
static bool hugepages; /* DDPLUA_HUGEPAGES=1: ask for transparent huge pages (header) */
static void read_hugepages(void) {
  const char *v = getenv("DDPLUA_HUGEPAGES");
  hugepages = v && strcmp(v, "1") == 0;
}

/* The most one block can be: the machine's memory and swap. A larger request could only fail later, after
 * populating pages until the kernel kills the process (or, under ASan, abort in its allocator); it fails here,
 * and the caller reports the bytes it asked for. */
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;
static size_t block_limit = SIZE_MAX;
static void read_block_limit(void) {
  struct sysinfo si;
  if (sysinfo(&si) == 0 && si.mem_unit > 0) {
    unsigned long long total = ((unsigned long long)si.totalram + si.totalswap) * si.mem_unit;
    if (total > 0 && total < SIZE_MAX) block_limit = (size_t)total;
  }
}

static void *sys_alloc(size_t size) {
  pthread_once(&limit_once, read_block_limit);
  if (size > block_limit) return NULL;
  if (size < DP_HUGE_MIN) return aligned_alloc(64, size);
  size_t len = huge_len(size);
  uint8_t *raw = mmap(NULL, len + HUGE_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uint8_t *p = (uint8_t *)huge_len((size_t)raw);
  if (p > raw) munmap(raw, (size_t)(p - raw)); /* the slack before and after the aligned run */
  if (raw + HUGE_ALIGN > p) munmap(p + len, (size_t)(raw + HUGE_ALIGN - p));
#ifdef MADV_HUGEPAGE
  pthread_once(&hugepages_once, read_hugepages);
  if (hugepages) madvise(p, len, MADV_HUGEPAGE);
#endif
  madvise(p, len, MADV_POPULATE_WRITE); /* best effort: EINVAL on old kernels */
  return p;
}

static void sys_free(void *p, size_t size) {
  if (size < DP_HUGE_MIN) free(p);
  else munmap(p, huge_len(size));
}

static size_t bucket_of(size_t size) { return (size / 64) % NBUCKETS; }

static void age_unlink(block *b) {
  if (b->older) b->older->newer = b->newer;
  else oldest = b->newer;
  if (b->newer) b->newer->older = b->older;
  else newest = b->older;
}

static void bucket_unlink(block *b) {
  block **pp = &buckets[bucket_of(b->size)];
  while (*pp && *pp != b) pp = &(*pp)->next;
  if (*pp) *pp = b->next;
}

static bool regretted(size_t size) {
  for (int i = 0; i < DP_REGRETS; i++)
    if (regrets[i] == size) return true;
  return false;
}

static void trim_locked(size_t limit) {
  while (stats.cached_bytes > limit && oldest) {
    block *b = oldest;
    age_unlink(b);
    bucket_unlink(b);
    stats.cached_bytes -= b->size;
    sys_free(b->ptr, b->size);
    free(b);
  }
}

/* The smallest cached block of size in [size, 2 size), or NULL: a walk
 * over the cache, done only on a miss of a large request. */
static block *best_fit_locked(size_t size) {
  block *best = NULL;
  for (block *b = oldest; b; b = b->newer)
    if (b->size >= size && b->size / 2 < size && (!best || b->size < best->size)) best = b;
  return best;
}

/* Takes b out of the cache as a live block. */
static void *take_locked(block *b) {
  bucket_unlink(b);
  age_unlink(b);
  stats.cached_bytes -= b->size;
  stats.cache_hits++;
  stats.live_bytes += b->size;
  if (stats.live_bytes > stats.peak_bytes) stats.peak_bytes = stats.live_bytes;
  return b->ptr;
}

void *dp_cpu_alloc(size_t nbytes) {
  size_t size = (nbytes + 63) & ~(size_t)63;
  if (size == 0) size = 64;
  pthread_mutex_lock(&mu);
  stats.allocs++;
  if (size >= DP_SMALL_CACHE_MIN) {
    block *b = buckets[bucket_of(size)];
    while (b && b->size != size) b = b->next;
    if (b) {
      void *p = take_locked(b);
      pthread_mutex_unlock(&mu);
      free(b);
      return p;
    }
    if (size >= DP_FIT_MIN && (b = best_fit_locked(size))) {
      void *p = take_locked(b);
      b->next = fitted; /* the record travels to the fitted list */
      fitted = b;
      pthread_mutex_unlock(&mu);
      return p;
    }
    /* under the mark: give the oldest blocks back first (unless this size
     * was given back lately: then the mark was too tight) */
    if (size >= DP_CACHE_MIN && stats.cached_bytes > 0 && stats.live_bytes + stats.cached_bytes + size > footprint_hw &&
        !regretted(size)) {
      size_t room = footprint_hw > stats.live_bytes + size ? footprint_hw - stats.live_bytes - size : 0;
      while (stats.cached_bytes > room && oldest) {
        regrets[regret_at++ % DP_REGRETS] = oldest->size;
        trim_locked(stats.cached_bytes - oldest->size);
      }
    }
  }
  pthread_mutex_unlock(&mu);
  void *p = sys_alloc(size);
  if (!p && size >= DP_CACHE_MIN) { /* give the cache back and retry once */
    dp_cpu_empty_cache();
    p = sys_alloc(size);
  }
  if (!p) return NULL;
  pthread_mutex_lock(&mu);
  stats.live_bytes += size;
  if (stats.live_bytes > stats.peak_bytes) stats.peak_bytes = stats.live_bytes;
  if (stats.live_bytes + stats.cached_bytes > footprint_hw) footprint_hw = stats.live_bytes + stats.cached_bytes;
  pthread_mutex_unlock(&mu);
  return p;
}

void dp_cpu_free(void *p, size_t nbytes) {
  if (!p) return;
  size_t size = (nbytes + 63) & ~(size_t)63;
  if (size == 0) size = 64;
  pthread_mutex_lock(&mu);
  block *b = NULL;
  if (fitted && size >= DP_FIT_MIN) { /* a block larger than its request: its own size */
    block **pp = &fitted;
    while (*pp && (*pp)->ptr != p) pp = &(*pp)->next;
    if (*pp) {
      b = *pp;
      *pp = b->next;
      size = b->size;
    }
  }
  stats.live_bytes -= size;
  if (size < DP_SMALL_CACHE_MIN || size > DP_CACHE_MAX / 2) {
    pthread_mutex_unlock(&mu);
    free(b);
    sys_free(p, size);
    return;
  }
  if (!b) b = malloc(sizeof *b);
  if (!b) {
    pthread_mutex_unlock(&mu);
    sys_free(p, size);
    return;
  }
  b->ptr = p;
  b->size = size;
  b->next = buckets[bucket_of(size)];
  buckets[bucket_of(size)] = b;
  b->newer = NULL;
  b->older = newest;
  if (newest) newest->newer = b;
  else oldest = b;
  newest = b;
  stats.cached_bytes += size;
  trim_locked(DP_CACHE_MAX);
  pthread_mutex_unlock(&mu);
}

size_t dp_cpu_cache_min(void) { return DP_SMALL_CACHE_MIN; }

void dp_cpu_empty_cache(void) {
  pthread_mutex_lock(&mu);
  trim_locked(0);
  footprint_hw = stats.live_bytes; /* the mark starts again from what is live */
  memset(regrets, 0, sizeof regrets);
  pthread_mutex_unlock(&mu);
}

dp_mem_stats dp_cpu_mem_stats(void) {
  pthread_mutex_lock(&mu);
  dp_mem_stats s = stats;
  pthread_mutex_unlock(&mu);
  return s;
}
