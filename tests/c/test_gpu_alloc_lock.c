/* The CUDA caching allocator does not hold its lock while the driver
 * works: returning the cache to the driver (cudaFree, which waits for the
 * whole device) runs unlocked, so another thread's allocations, frees and
 * statistics go on meanwhile. With the lock held across cudaFree, a
 * collective that never finishes keeps every allocating thread (the NCCL
 * watchdog releasing a finished collective's tensors among them) blocked.
 *
 * Thread A calls empty_cache while ~1.5 s of GEMMs are queued, so its
 * cudaFree waits for them; the main thread then frees a block and takes it
 * back from the cache (no driver call), and must be done while A is still
 * waiting. Exits 77
 * (skipped) without a GPU, unless DDPLUA_REQUIRE_GPU=1. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "ops/ops.h"
#include "test_util.h"

static const dp_backend *cuda;
static atomic_int a_done;
static double a_end;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *empty_cache_thread(void *arg) {
  (void)arg;
  if (cuda->empty_cache()) fprintf(stderr, "empty_cache: %s\n", dp_errmsg());
  a_end = now();
  atomic_store(&a_done, 1);
  return NULL;
}

/* Queues GEMMs on the compute stream for about `seconds` of device time
 * (one product timed first); returns how many. */
static int queue_gemms(double seconds) {
  const dp_device gpu = {DP_CUDA, 0};
  int64_t sh[2] = {4096, 4096};
  dp_tensor *a = dp_randn(DP_F32, 2, sh, gpu), *b = dp_randn(DP_F32, 2, sh, gpu);
  if (!a || !b) return 0;
  dp_release(dp_matmul(a, b)); /* warm-up: cuBLAS handle and workspace */
  cuda->synchronize(0);
  double t0 = now();
  dp_release(dp_matmul(a, b));
  cuda->synchronize(0);
  double one = now() - t0;
  int n = (int)(seconds / (one > 1e-5 ? one : 1e-5)) + 1;
  if (n > 20000) n = 20000;
  for (int i = 0; i < n; i++) dp_release(dp_matmul(a, b)); /* outputs reuse cached blocks, stream-ordered */
  dp_release(a), dp_release(b);
  printf("queued %d GEMMs of 4096^3 (%.2f ms each)\n", n, one * 1e3);
  return n;
}

int main(void) {
  cuda = dp_backend_require(DP_CUDA);
  if (!cuda || cuda->device_count() < 1) {
    printf("skipped: %s\n", cuda ? "no GPU" : dp_errmsg());
    return getenv("DDPLUA_REQUIRE_GPU") && atoi(getenv("DDPLUA_REQUIRE_GPU")) ? 1 : 77;
  }
  void *keep = cuda->alloc(0, 4096); /* freed and taken again below, while A waits */
  void *cached = cuda->alloc(0, 1 << 20);
  CHECK(keep && cached);
  cuda->free(0, cached, 1 << 20); /* something for empty_cache to hand back */
  CHECK(queue_gemms(1.5) > 0);
  pthread_t a;
  CHECK(pthread_create(&a, NULL, empty_cache_thread, NULL) == 0);
  struct timespec pause = {0, 200 * 1000000L}; /* A is inside cudaFree by then */
  nanosleep(&pause, NULL);
  int a_done_before = atomic_load(&a_done);
  double t0 = now();
  cuda->free(0, keep, 4096);
  void *again = cuda->alloc(0, 4096); /* the block just freed, from the cache: no driver call */
  double t1 = now();
  int a_done_after = atomic_load(&a_done);
  pthread_join(a, NULL);
  printf("free + alloc took %.1f ms; empty_cache returned %.1f ms after them\n", (t1 - t0) * 1e3, (a_end - t1) * 1e3);
  if (a_done_before) fprintf(stderr, "inconclusive: the queued GEMMs finished within 200 ms\n");
  CHECK(!a_done_before);
  CHECK(again == keep);
  /* done while A still waited in cudaFree, and quickly */
  CHECK(!a_done_after);
  CHECK(t1 - t0 < 0.1);
  cuda->free(0, again, 4096);
  CHECK(cuda->empty_cache() == 0);
  dp_device_mem_stats st;
  CHECK(cuda->memory_stats(0, &st) == 0 && st.cached_bytes == 0);
  CHECK(cuda->synchronize(-1) == 0);
  TEST_DONE();
}
