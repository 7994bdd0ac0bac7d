/* Worker threads for multi-threaded SGEMM calls (dp_sgemm_set_num_threads
 * > 1). Started on first use, parked on a condition variable between calls
 * (no spinning: ranks that fill the cores must not lose cycles to idle
 * GEMM workers), and forgotten in a forked child, whose copy of the pool
 * has no threads behind it. */
#include <pthread.h>
#include <stdint.h>

#include "backends/cpu/cpu_fpu.h"
#include "backends/cpu/sgemm_kernels.h"
#include "core/error.h"

enum { MAX_WORKERS = DP_SG_MAX_THREADS - 1 };

static struct {
  pthread_mutex_t call; /* one parallel call at a time */
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  int started;   /* workers running: ids 1..started */
  uint64_t gen;  /* bumped for every call */
  int parts;     /* parts of the current call; worker i runs part i */
  int remaining; /* worker parts not finished */
  void (*fn)(void *ctx, int part);
  void *ctx;
  uint64_t start_gen[DP_SG_MAX_THREADS]; /* gen when worker i was created */
} pool = {.call = PTHREAD_MUTEX_INITIALIZER,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static _Thread_local bool in_parallel; /* a worker, or a caller inside dp_sg_parallel */

bool dp_sg_in_parallel(void) { return in_parallel; }

static void reset_in_child(void) {
  pthread_mutex_init(&pool.call, NULL);
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.wake, NULL);
  pthread_cond_init(&pool.done, NULL);
  pool.started = 0;
  pool.remaining = 0;
}
static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_in_child); }

static void *worker(void *arg) {
  const int id = (int)(intptr_t)arg;
  in_parallel = true;
  pthread_mutex_lock(&pool.lock);
  uint64_t seen = pool.start_gen[id]; /* the call that created it may already be posted */
  for (;;) {
    while (pool.gen == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    seen = pool.gen;
    if (id >= pool.parts) continue;
    void (*fn)(void *, int) = pool.fn;
    void *ctx = pool.ctx;
    pthread_mutex_unlock(&pool.lock);
    dp_fpu_sync(); /* the process's denormal setting may have changed since the last task */
    fn(ctx, id);
    pthread_mutex_lock(&pool.lock);
    if (--pool.remaining == 0) pthread_cond_signal(&pool.done);
  }
  return NULL;
}

void dp_sg_parallel(int parts, void (*fn)(void *ctx, int part), void *ctx) {
  DP_ASSERT(parts <= DP_SG_MAX_THREADS);
  if (parts <= 1 || in_parallel) { /* one part, or nested: serially here */
    for (int p = 0; p < (parts < 1 ? 1 : parts); p++) fn(ctx, p);
    return;
  }
  in_parallel = true;
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&pool.call);
  pthread_mutex_lock(&pool.lock);
  while (pool.started < parts - 1 && pool.started < MAX_WORKERS) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pool.start_gen[pool.started + 1] = pool.gen;
    int rc = pthread_create(&th, &attr, worker, (void *)(intptr_t)(pool.started + 1));
    pthread_attr_destroy(&attr);
    if (rc) break; /* fewer threads: the caller runs the parts nobody took */
    pool.started++;
  }
  const int workers = parts - 1 < pool.started ? parts - 1 : pool.started;
  pool.fn = fn;
  pool.ctx = ctx;
  pool.parts = workers + 1;
  pool.remaining = workers;
  pool.gen++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  fn(ctx, 0);
  for (int p = workers + 1; p < parts; p++) fn(ctx, p);
  pthread_mutex_lock(&pool.lock);
  while (pool.remaining > 0) pthread_cond_wait(&pool.done, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.call);
  in_parallel = false;
}
