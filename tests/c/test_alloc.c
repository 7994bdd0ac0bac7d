/* The CPU caching allocator: 64-byte alignment, exact-size reuse (most
 * recently freed first), small blocks cached too (not under ASan), the byte
 * accounting, emptying the cache, large blocks (mapped on their own,
 * 2 MiB-aligned, every byte usable), the footprint's high-water mark
 * (a miss gives old blocks back; a step's own sizes never take turns), and
 * concurrent use (the DDP communication thread frees tensors too). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "tensor/storage.h"
#include "test_util.h"

static void test_reuse(void) {
  dp_cpu_empty_cache();
  dp_mem_stats s0 = dp_cpu_mem_stats();
  CHECK(s0.cached_bytes == 0);

  void *a = dp_cpu_alloc(100000), *b = dp_cpu_alloc(100000);
  CHECK(a && b && a != b);
  CHECK((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0);
  size_t block = (100000 + 63) & ~(size_t)63; /* sizes round up to 64 bytes */
  dp_mem_stats s1 = dp_cpu_mem_stats();
  CHECK(s1.live_bytes == s0.live_bytes + 2 * block);
  CHECK(s1.peak_bytes >= s1.live_bytes);
  memset(a, 1, 100000);

  /* freed blocks are kept; the most recently freed one comes back first */
  dp_cpu_free(a, 100000);
  dp_cpu_free(b, 100000);
  dp_mem_stats s2 = dp_cpu_mem_stats();
  CHECK(s2.cached_bytes == 2 * block && s2.live_bytes == s0.live_bytes);
  void *c = dp_cpu_alloc(100000);
  CHECK(c == b);
  dp_mem_stats s3 = dp_cpu_mem_stats();
  CHECK(s3.cache_hits == s2.cache_hits + 1 && s3.cached_bytes == block);
  /* a request that rounds to the same size reuses too; another size does not */
  void *d = dp_cpu_alloc(99990);
  CHECK(d == a);
  void *e = dp_cpu_alloc(200000);
  CHECK(e != a && e != b && dp_cpu_mem_stats().cache_hits == s3.cache_hits + 1);

  /* small blocks are cached as well (under ASan they go straight back) */
  void *small = dp_cpu_alloc(100);
  CHECK(small && (uintptr_t)small % 64 == 0);
  dp_cpu_free(small, 100);
  size_t small_cached = dp_cpu_cache_min() <= 128 ? 128 : 0;
  CHECK(dp_cpu_mem_stats().cached_bytes == small_cached);
  void *small2 = dp_cpu_alloc(128);
  CHECK(small2 && (small_cached == 0 || small2 == small));
  dp_cpu_free(small2, 128);

  dp_cpu_free(c, 100000);
  dp_cpu_free(d, 99990);
  dp_cpu_free(e, 200000);
  CHECK(dp_cpu_mem_stats().cached_bytes == 2 * block + 200000 + small_cached); /* 200000: a multiple of 64 */
  dp_cpu_empty_cache();
  dp_mem_stats s4 = dp_cpu_mem_stats();
  CHECK(s4.cached_bytes == 0 && s4.live_bytes == s0.live_bytes);
}

/* A storage (the tensor's memory) returns its block to the cache. */
static void test_storage(void) {
  dp_cpu_empty_cache();
  dp_storage *st = dp_storage_new(65536, (dp_device){DP_CPU, 0});
  CHECK(st && st->nbytes == 65536 && (uintptr_t)st->data % 64 == 0);
  void *p = st->data;
  dp_storage_retain(st);
  dp_storage_release(st);
  CHECK(dp_cpu_mem_stats().cached_bytes == 0); /* still referenced */
  dp_storage_release(st);
  CHECK(dp_cpu_mem_stats().cached_bytes == 65536);
  dp_storage *again = dp_storage_new(65536, (dp_device){DP_CPU, 0});
  CHECK(again->data == p);
  dp_storage_release(again);
  dp_cpu_empty_cache();
}

static void *churn(void *arg) {
  size_t size = (size_t)(uintptr_t)arg;
  for (int i = 0; i < 2000; i++) {
    void *p = dp_cpu_alloc(size + (size_t)(i % 4) * 4096);
    if (!p) return (void *)1;
    memset(p, i & 0xff, 64);
    dp_cpu_free(p, size + (size_t)(i % 4) * 4096);
  }
  return NULL;
}

static void test_threads(void) {
  dp_mem_stats s0 = dp_cpu_mem_stats();
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)(8192 * (i % 2 + 1)));
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    CHECK(r == NULL);
  }
  dp_mem_stats s1 = dp_cpu_mem_stats();
  CHECK(s1.live_bytes == s0.live_bytes);
  CHECK(s1.allocs == s0.allocs + 8000);
  CHECK(s1.cache_hits > s0.cache_hits + 7000); /* nearly every block is a reused one */
  dp_cpu_empty_cache();
  CHECK(dp_cpu_mem_stats().cached_bytes == 0);
}

/* Blocks of 4 MiB and more: whole, distinct, cached and reused like the
 * rest; around the 4 MiB threshold too. Outside ASan they are mapped on
 * their own, 2 MiB-aligned (huge pages). */
static void test_large(void) {
  dp_cpu_empty_cache();
  dp_mem_stats s0 = dp_cpu_mem_stats();
  const size_t sizes[] = {((size_t)4 << 20) - 64, (size_t)4 << 20, ((size_t)4 << 20) + 64, ((size_t)9 << 20) + 1};
  unsigned char *p[4];
  size_t total = 0;
  for (int i = 0; i < 4; i++) {
    p[i] = dp_cpu_alloc(sizes[i]);
    CHECK(p[i] && (uintptr_t)p[i] % 64 == 0);
    if (!p[i]) return;
    memset(p[i], 0x5a + i, sizes[i]); /* every byte is writable */
    total += (sizes[i] + 63) & ~(size_t)63;
  }
#if !defined(__SANITIZE_ADDRESS__)
  CHECK((uintptr_t)p[1] % ((size_t)2 << 20) == 0 && (uintptr_t)p[3] % ((size_t)2 << 20) == 0);
#endif
  for (int i = 0; i < 4; i++) /* no block overlaps another: each still holds its own pattern at both ends */
    CHECK(p[i][0] == 0x5a + i && p[i][sizes[i] - 1] == 0x5a + i);
  CHECK(dp_cpu_mem_stats().live_bytes == s0.live_bytes + total);
  for (int i = 0; i < 4; i++) dp_cpu_free(p[i], sizes[i]);
  CHECK(dp_cpu_mem_stats().cached_bytes == total && dp_cpu_mem_stats().live_bytes == s0.live_bytes);
  void *again = dp_cpu_alloc(sizes[3]);
  CHECK(again == p[3] && dp_cpu_mem_stats().cache_hits == s0.cache_hits + 1);
  dp_cpu_free(again, sizes[3]);
  dp_cpu_empty_cache(); /* unmaps them */
  CHECK(dp_cpu_mem_stats().cached_bytes == 0);
  /* past half the cache's bound a block is not kept */
  size_t big = (size_t)300 << 20;
  unsigned char *q = dp_cpu_alloc(big);
  CHECK(q != NULL);
  if (q) {
    q[0] = 1;
    q[big - 1] = 2;
    dp_cpu_free(q, big);
  }
  CHECK(dp_cpu_mem_stats().cached_bytes == 0 && dp_cpu_mem_stats().live_bytes == s0.live_bytes);
}

/* A request the cache cannot serve gives the oldest cached blocks back
 * first when it would take live + cached bytes past their high-water mark;
 * under the mark, the cache is left alone. */
static void test_footprint(void) {
  dp_cpu_empty_cache(); /* the mark restarts at what is live */
  const size_t live0 = dp_cpu_mem_stats().live_bytes, mib = (size_t)1 << 20;
  void *a = dp_cpu_alloc(mib), *b = dp_cpu_alloc(mib); /* mark: live0 + 2 MiB */
  CHECK(a && b);
  dp_cpu_free(a, mib);
  dp_cpu_free(b, mib);
  CHECK(dp_cpu_mem_stats().cached_bytes == 2 * mib);
  /* 3 MiB would make 5 MiB: both blocks go back (a 1 MiB block cannot serve it) */
  void *c = dp_cpu_alloc(3 * mib);
  CHECK(c != NULL);
  dp_mem_stats s1 = dp_cpu_mem_stats();
  CHECK(s1.cached_bytes == 0 && s1.live_bytes == live0 + 3 * mib);
  dp_cpu_free(c, 3 * mib); /* cached 3 MiB, mark 3 MiB */
  /* 1 MiB was given back lately: it grows the mark instead of evicting the 3 MiB block */
  void *d = dp_cpu_alloc(mib);
  CHECK(d != NULL && dp_cpu_mem_stats().cached_bytes == 3 * mib);
  dp_cpu_free(d, mib);
  /* a step that takes turns between sizes settles: after its first round every request hits */
  const size_t sizes[3] = {5 * mib + 4096, 7 * mib, 5 * mib + 8192};
  for (int round = 0; round < 4; round++) {
    uint64_t hits = dp_cpu_mem_stats().cache_hits;
    for (int i = 0; i < 3; i++) {
      void *p = dp_cpu_alloc(sizes[i]);
      CHECK(p != NULL);
      dp_cpu_free(p, sizes[i]);
    }
    if (round >= 2) CHECK(dp_cpu_mem_stats().cache_hits == hits + 3);
  }
  dp_cpu_empty_cache();
}

int main(void) {
  test_reuse();
  test_footprint();
  test_large();
  test_storage();
  test_threads();
  TEST_DONE();
}
