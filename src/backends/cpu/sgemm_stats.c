/* Per-shape GEMM statistics (contract: sgemm_stats.h). One table under a
 * mutex: it is only touched when collection is on, and a call is worth
 * microseconds at least, so the lock costs nothing that shows. */
#include "backends/cpu/sgemm_stats.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int enabled = -1; /* -1: DDPLUA_GEMM_STATS not read yet (atomic) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dp_sgemm_stat table[DP_SGEMM_STATS_MAX];
static int used;
static int64_t dropped;
static pid_t owner; /* the process that asked for the table at exit: a fork()ed data worker inherits the handler */

static int by_seconds_desc(const void *a, const void *b) {
  double x = ((const dp_sgemm_stat *)a)->seconds, y = ((const dp_sgemm_stat *)b)->seconds;
  return (x < y) - (x > y);
}

/* The table on stderr at exit, for DDPLUA_GEMM_STATS=1 runs. */
static void print_at_exit(void) {
  static dp_sgemm_stat copy[DP_SGEMM_STATS_MAX];
  if (getpid() != owner) return;
  int64_t lost = 0;
  int n = dp_sgemm_stats_get(copy, DP_SGEMM_STATS_MAX, &lost);
  if (n == 0) return;
  const char *rank = getenv("RANK");
  double total = 0, flop = 0;
  for (int i = 0; i < n; i++) total += copy[i].seconds;
  fprintf(stderr, "ddplua GEMM stats (pid %ld%s%s): %d shapes, largest total first\n", (long)getpid(),
          rank ? ", rank " : "", rank ? rank : "", n);
  fprintf(stderr, "%8s %8s %8s %6s %3s %3s %9s %10s %6s %8s\n", "m", "n", "k", "batch", "tA", "tB", "calls", "ms",
          "share", "GFLOP/s");
  for (int i = 0; i < n; i++) {
    const dp_sgemm_stat *s = &copy[i];
    double f = 2.0 * (double)s->m * (double)s->n * (double)s->k * (double)s->batch * (double)s->calls;
    flop += f;
    fprintf(stderr, "%8ld %8ld %8ld %6ld %3d %3d %9ld %10.1f %5.1f%% %8.1f\n", (long)s->m, (long)s->n, (long)s->k,
            (long)s->batch, s->trans_a, s->trans_b, (long)s->calls, s->seconds * 1e3,
            total > 0 ? 100.0 * s->seconds / total : 0.0, s->seconds > 0 ? f / s->seconds / 1e9 : 0.0);
  }
  fprintf(stderr, "all: %.1f ms, %.1f GFLOP/s%s\n", total * 1e3, total > 0 ? flop / total / 1e9 : 0.0,
          lost ? " (some shapes not kept: the table was full)" : "");
}

bool dp_sgemm_stats_enabled(void) {
  int on = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
  if (on >= 0) return on;
  pthread_mutex_lock(&mu);
  on = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
  if (on < 0) {
    const char *e = getenv("DDPLUA_GEMM_STATS");
    on = e && *e && strcmp(e, "0") != 0;
    if (on) {
      owner = getpid();
      atexit(print_at_exit);
    }
    __atomic_store_n(&enabled, on, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&mu);
  return on;
}

bool dp_sgemm_stats_set(bool on) {
  bool was = dp_sgemm_stats_enabled();
  __atomic_store_n(&enabled, on ? 1 : 0, __ATOMIC_RELAXED);
  return was;
}

void dp_sgemm_stats_add(const dp_gemm_args *g, double seconds) {
  pthread_mutex_lock(&mu);
  int i = 0;
  for (; i < used; i++) {
    const dp_sgemm_stat *s = &table[i];
    if (s->m == g->m && s->n == g->n && s->k == g->k && s->batch == g->batch && s->trans_a == g->trans_a &&
        s->trans_b == g->trans_b)
      break;
  }
  if (i == used) {
    if (used == DP_SGEMM_STATS_MAX) {
      dropped++;
      pthread_mutex_unlock(&mu);
      return;
    }
    table[used++] = (dp_sgemm_stat){
        .m = g->m, .n = g->n, .k = g->k, .batch = g->batch, .trans_a = g->trans_a, .trans_b = g->trans_b};
  }
  table[i].calls++;
  table[i].seconds += seconds;
  pthread_mutex_unlock(&mu);
}

int dp_sgemm_stats_get(dp_sgemm_stat *out, int cap, int64_t *lost) {
  static dp_sgemm_stat sorted[DP_SGEMM_STATS_MAX];
  pthread_mutex_lock(&mu);
  int n = used;
  memcpy(sorted, table, sizeof(dp_sgemm_stat) * (size_t)n);
  if (lost) *lost = dropped;
  qsort(sorted, (size_t)n, sizeof sorted[0], by_seconds_desc);
  memcpy(out, sorted, sizeof(dp_sgemm_stat) * (size_t)(n < cap ? n : cap));
  pthread_mutex_unlock(&mu);
  return n;
}

void dp_sgemm_stats_reset(void) {
  pthread_mutex_lock(&mu);
  used = 0;
  dropped = 0;
  pthread_mutex_unlock(&mu);
}
