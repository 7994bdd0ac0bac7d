/* Worker threads for multi-threaded SGEMM calls and parallel loops
 * (dp_sgemm_set_num_threads > 1). Started on first use and forgotten in a
 * forked child, whose copy of the pool has no threads behind it.
 *
 * Between calls a worker first spins for SPIN_NS, then parks on a condition
 * variable; the caller likewise spins for its workers before it sleeps. The
 * models' ops come every 10-100 us (a ResNet step is some 400 parallel
 * calls), and a futex wake-up and a sleep per call cost 44.5 us for an empty
 * 2-part call on the reference VM (0.9 us spinning). The spin is 50 us
 * unless DDPLUA_SPIN_US says otherwise (core/spin_env.h: the same knob as
 * the ranks' shared-memory waits; 0 never spins). Spinning is only done when the process may run
 * on at least as many CPUs as the pool has threads (spins_pay): a spinner
 * on a CPU its caller needs would steal the caller's time. Ranks that fill
 * the cores run one thread each and never start the pool. */
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_fpu.h"
#include "backends/cpu/sgemm_kernels.h"
#include "core/error.h"
#include "core/spin_env.h"

enum { MAX_WORKERS = DP_SG_MAX_THREADS - 1 };

static struct {
  pthread_mutex_t call; /* one parallel call at a time */
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  int started;        /* workers running: ids 1..started */
  uint64_t gen;       /* bumped for every call (atomic: spinners read it unlocked) */
  int parts;          /* parts of the current call; worker i runs part i */
  int remaining;      /* worker parts not finished (atomic, as gen) */
  int sleepers;       /* workers waiting on `wake` */
  bool caller_asleep; /* the caller waits on `done` */
  bool spin;          /* spins_pay for the threads the pool has */
  int spin_for;       /* the `started` that `spin` was worked out for; -1: not yet */
  void (*fn)(void *ctx, int part);
  void *ctx;
  uint64_t start_gen[DP_SG_MAX_THREADS]; /* gen when worker i was created */
} pool = {.call = PTHREAD_MUTEX_INITIALIZER,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER,
          .spin_for = -1};

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
  pool.sleepers = 0;
  pool.caller_asleep = false;
  pool.spin_for = -1;
}
static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_in_child); }

enum { DEFAULT_SPIN_US = 50 };
static int64_t spin_ns; /* DDPLUA_SPIN_US or the default, set by spins_pay (atomic: spinners read it) */

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spins (unlocked) until *word differs from `from`, for at most spin_ns;
 * true when it did. */
static bool spin_while_u64(const uint64_t *word, uint64_t from) {
  int64_t deadline = now_ns() + __atomic_load_n(&spin_ns, __ATOMIC_RELAXED);
  for (unsigned i = 1;; i++) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != from) return true;
    _mm_pause();
    if ((i & 63) == 0 && now_ns() > deadline) return false;
  }
}
static bool spin_while_positive(const int *word) {
  int64_t deadline = now_ns() + __atomic_load_n(&spin_ns, __ATOMIC_RELAXED);
  for (unsigned i = 1;; i++) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) <= 0) return true;
    _mm_pause();
    if ((i & 63) == 0 && now_ns() > deadline) return false;
  }
}

/* Spinning pays when every thread of the pool can have a CPU of its own
 * (and DDPLUA_SPIN_US is not 0). Called under pool.lock. */
static bool spins_pay(int threads) {
  int64_t ns = (int64_t)dp_spin_us_env(DEFAULT_SPIN_US) * 1000;
  __atomic_store_n(&spin_ns, ns, __ATOMIC_RELAXED); /* workers still spinning from the last call read it */
  if (ns == 0) return false;
  cpu_set_t set;
  long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  return cpus >= threads;
}

static void *worker(void *arg) {
  const int id = (int)(intptr_t)arg;
  in_parallel = true;
  pthread_mutex_lock(&pool.lock);
  uint64_t seen = pool.start_gen[id]; /* the call that created it may already be posted */
  for (;;) {
    if (pool.gen == seen && pool.spin) {
      pthread_mutex_unlock(&pool.lock);
      spin_while_u64(&pool.gen, seen);
      pthread_mutex_lock(&pool.lock);
    }
    while (__atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE) == seen) {
      pool.sleepers++;
      pthread_cond_wait(&pool.wake, &pool.lock);
      pool.sleepers--;
    }
    seen = pool.gen;
    if (id >= pool.parts) continue;
    void (*fn)(void *, int) = pool.fn;
    void *ctx = pool.ctx;
    pthread_mutex_unlock(&pool.lock);
    dp_fpu_sync(); /* the process's denormal setting may have changed since the last task */
    fn(ctx, id);
    pthread_mutex_lock(&pool.lock);
    if (__atomic_sub_fetch(&pool.remaining, 1, __ATOMIC_ACQ_REL) == 0 && pool.caller_asleep)
      pthread_cond_signal(&pool.done);
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
  if (pool.spin_for != pool.started) { /* a syscall: once per pool size, not per call */
    pool.spin = spins_pay(pool.started + 1);
    pool.spin_for = pool.started;
  }
  pool.fn = fn;
  pool.ctx = ctx;
  pool.parts = workers + 1;
  __atomic_store_n(&pool.remaining, workers, __ATOMIC_RELAXED);
  __atomic_add_fetch(&pool.gen, 1, __ATOMIC_RELEASE); /* spinners see fn, ctx and parts with it */
  if (pool.sleepers > 0) pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  fn(ctx, 0);
  for (int p = workers + 1; p < parts; p++) fn(ctx, p);
  if (pool.spin) spin_while_positive(&pool.remaining);
  pthread_mutex_lock(&pool.lock);
  while (__atomic_load_n(&pool.remaining, __ATOMIC_ACQUIRE) > 0) {
    pool.caller_asleep = true;
    pthread_cond_wait(&pool.done, &pool.lock);
  }
  pool.caller_asleep = false;
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.call);
  in_parallel = false;
}
